/* runtime.c - values, storages, the pending graph and its executor.
 * The model is described at the top of runtime.h. */
#include "runtime/runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/hash.h"
#include "runtime/cache.h"
#include "runtime/errors.h"
#include "runtime/event.h"

/* ---- values ------------------------------------------------------------------ */

struct tpu_value {
  int refs;
  tpu_hlo_type_t type;
  int device;
  tpu_pjrt_buffer_t *buffer; /* materialised */
  int node;                  /* pending: producing node in the graph; -1 otherwise */
  int out_index;
  uint64_t in_epoch; /* graph-input dedupe */
  int in_index;
};

/* A storage's value is NULL until first used: such a storage reads as
 * zeros (materialised lazily, in the graph that first reads it), so
 * torch.empty and allocator storages cost nothing until touched.  An
 * untyped storage (made from a byte count by the allocator) takes the dtype
 * of the first view that touches it. */
struct tpu_storage {
  int refs;
  tpu_dtype_t dtype;
  int64_t numel;
  int device;
  bool untyped;
  tpu_value_t *value;
};

/* A reference inside the graph: >= 0 node output (node * 16 + out), < 0 input -(i+1). */
typedef int32_t tpu_ref_t;
#define TPU_REF_NODE(n, o) ((tpu_ref_t)((n) * TPU_OP_MAX_OUTPUTS + (o)))
#define TPU_REF_INPUT(i) ((tpu_ref_t)(-(i) - 1))

typedef struct tpu_node {
  const tpu_op_rule_t *rule;
  int nin;
  tpu_ref_t *in;
  tpu_op_attrs_t attrs;
  int nout;
  tpu_value_t *outs[TPU_OP_MAX_OUTPUTS];
  int nchecks; /* device-side checks its rule emits (errors.h) */
} tpu_node_t;

#define TPU_GRAPH_SCALARS 64
typedef struct tpu_graph {
  tpu_arena_t arena;
  tpu_value_t **inputs;
  int ninputs, cap_inputs;
  tpu_node_t *nodes;
  int nnodes, cap_nodes;
  uint64_t epoch;
  uint64_t hash;
  int device;
  int nscalars; /* scalar inputs by content */
  uint64_t scalar_keys[TPU_GRAPH_SCALARS];
  int scalar_inputs[TPU_GRAPH_SCALARS];
} tpu_graph_t;

/* Output signature of one op on given input types (shape inference cache). */
typedef struct tpu_sig {
  uint64_t key;
  int nout;
  int nchecks; /* device-side checks the rule emits for these types */
  tpu_hlo_type_t types[TPU_OP_MAX_OUTPUTS];
  struct tpu_sig *next;
} tpu_sig_t;
#define TPU_SIG_BUCKETS 4096
#define TPU_SIG_MAX 65536

/* Scalar inputs: a small cache of device 0-d buffers for the scalars that
 * recur (lr, eps, alpha).  A value is admitted on its second sighting, so
 * scalars that change every step (bias corrections) never fill it. */
#define TPU_SCALAR_SLOTS 256
typedef struct tpu_scalar_slot {
  int used;
  tpu_dtype_t dtype;
  int device;
  uint64_t bits;
  tpu_value_t *value;
} tpu_scalar_slot_t;

static struct {
  int initialized;
  pthread_mutex_t lock;
  tpu_pjrt_client_t *client;
  tpu_cache_t *cache;
  tpu_eager_mode_t mode;
  int fused_max_nodes;
  tpu_graph_t g;
  tpu_sig_t *sigs[TPU_SIG_BUCKETS];
  int64_t nsigs;
  tpu_scalar_slot_t scalars[TPU_SCALAR_SLOTS];
  uint64_t scalar_seen[TPU_SCALAR_SLOTS];
  int64_t mem_limit[TPU_PJRT_MAX_DEVICES]; /* bytes; 0 = the plugin's own limit */
  int64_t executions, flushes, ops_recorded, live_values, live_storages;
  int64_t scalar_hits, scalar_misses;
} R = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define TPU_NOT_STARTED_MSG                                                                        \
  "torch_tpu: no PJRT plugin is loaded, so the tpu device cannot run anything. Set "             \
  "TORCH_TPU_PJRT_PLUGIN=/path/to/a/pjrt_plugin.so or install the CPU plugin with "              \
  "`pip install xla-cpu-pjrt==0.0.1` (torch.tpu.init() shows why loading failed)"

#define LOCK() pthread_mutex_lock(&R.lock)
#define UNLOCK() pthread_mutex_unlock(&R.lock)

static tpu_value_t *value_new(const tpu_hlo_type_t *type, int device) {
  tpu_value_t *v = (tpu_value_t *)calloc(1, sizeof(*v));
  if (!v) return NULL;
  v->refs = 1;
  v->type = *type;
  v->device = device;
  v->node = -1;
  R.live_values++;
  return v;
}

static void value_retain(tpu_value_t *v) { v->refs++; }

static void value_release(tpu_value_t *v) {
  if (!v || --v->refs > 0) return;
  if (v->buffer) tpu_pjrt_buffer_destroy(v->buffer);
  R.live_values--;
  free(v);
}

static tpu_storage_t *storage_new(tpu_value_t *value /* ref moved in */) {
  tpu_storage_t *s = (tpu_storage_t *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->refs = 1;
  s->dtype = value->type.dtype;
  s->numel = tpu_hlo_type_numel(&value->type);
  s->device = value->device;
  s->value = value;
  R.live_storages++;
  return s;
}

/* A storage with no value yet (reads as zeros). */
static tpu_storage_t *storage_new_lazy(int device, tpu_dtype_t dtype, int64_t numel, bool untyped) {
  tpu_storage_t *s = (tpu_storage_t *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->refs = 1;
  s->dtype = dtype;
  s->numel = numel;
  s->device = device;
  s->untyped = untyped;
  R.live_storages++;
  return s;
}

void tpu_storage_retain(tpu_storage_t *s) {
  LOCK();
  s->refs++;
  UNLOCK();
}

void tpu_storage_release(tpu_storage_t *s) {
  if (!s) return;
  LOCK();
  if (--s->refs == 0) {
    if (s->value) value_release(s->value);
    R.live_storages--;
    free(s);
  }
  UNLOCK();
}

int64_t tpu_storage_numel(const tpu_storage_t *s) { return s->numel; }
tpu_dtype_t tpu_storage_dtype(const tpu_storage_t *s) { return s->dtype; }
int tpu_storage_device(const tpu_storage_t *s) { return s->device; }
const void *tpu_storage_value_id(const tpu_storage_t *s) { return s->value; }
size_t tpu_storage_nbytes(const tpu_storage_t *s) { return (size_t)s->numel * tpu_dtype_size(s->dtype); }

/* ---- lifetime -------------------------------------------------------------------- */

tpu_status_t tpu_rt_init(const tpu_rt_config_t *cfg) {
  LOCK();
  if (R.initialized) {
    UNLOCK();
    return NULL;
  }
  tpu_pjrt_option_t opts[1];
  size_t nopts = 0;
  if (cfg->num_devices > 0 && strstr(cfg->plugin_path, "cpu")) {
    opts[0] = (tpu_pjrt_option_t){.name = "cpu_device_count", .kind = TPU_PJRT_OPT_INT64, .i = cfg->num_devices};
    nopts = 1;
  }
  tpu_status_t st = tpu_pjrt_client_create(cfg->plugin_path, opts, nopts, &R.client);
  if (st) {
    UNLOCK();
    return st;
  }
  tpu_cache_config_t cc = {cfg->cache_dir, cfg->mem_cache_max_entries, cfg->mem_cache_max_bytes,
                           cfg->disk_cache_max_entries, cfg->disk_cache_max_bytes};
  st = tpu_cache_create(R.client, &cc, &R.cache);
  if (st) {
    tpu_pjrt_client_destroy(R.client);
    R.client = NULL;
    UNLOCK();
    return st;
  }
  R.mode = cfg->mode;
  R.fused_max_nodes = cfg->fused_max_nodes > 0 ? cfg->fused_max_nodes : 8192;
  tpu_arena_init(&R.g.arena, 65536);
  R.g.epoch = 1;
  R.g.device = -1;
  R.initialized = 1;
  UNLOCK();
  return NULL;
}

bool tpu_rt_initialized(void) { return R.initialized != 0; }

static void graph_discard(void);
static void err_shutdown(void);

void tpu_rt_shutdown(void) {
  LOCK();
  if (!R.initialized) {
    UNLOCK();
    return;
  }
  graph_discard();
  tpu_status_free(tpu_work_wait_all());
  err_shutdown();
  for (int i = 0; i < TPU_SCALAR_SLOTS; i++) {
    if (R.scalars[i].used) value_release(R.scalars[i].value);
    R.scalars[i].used = 0;
  }
  for (int b = 0; b < TPU_SIG_BUCKETS; b++) {
    tpu_sig_t *s = R.sigs[b];
    while (s) {
      tpu_sig_t *n = s->next;
      free(s);
      s = n;
    }
    R.sigs[b] = NULL;
  }
  tpu_cache_destroy(R.cache);
  R.cache = NULL;
  free(R.g.inputs);
  free(R.g.nodes);
  R.g.inputs = NULL;
  R.g.nodes = NULL;
  R.g.cap_inputs = R.g.cap_nodes = 0;
  tpu_arena_free(&R.g.arena);
  /* Buffers still owned by live storages would outlive the client: the
   * client is kept in that case (process exit reclaims it). */
  if (tpu_pjrt_live_buffers() == 0) tpu_pjrt_client_destroy(R.client);
  R.client = NULL;
  R.initialized = 0;
  UNLOCK();
}

int tpu_rt_device_count(void) { return R.client ? tpu_pjrt_client_device_count(R.client) : 0; }
const char *tpu_rt_platform(void) { return R.client ? tpu_pjrt_client_platform(R.client) : ""; }
const char *tpu_rt_identity(void) { return R.client ? tpu_pjrt_client_identity(R.client) : ""; }
tpu_eager_mode_t tpu_rt_mode(void) { return R.mode; }

static tpu_status_t graph_flush(void);

tpu_status_t tpu_rt_set_mode(tpu_eager_mode_t mode) {
  LOCK();
  tpu_status_t st = graph_flush();
  if (!st) R.mode = mode;
  UNLOCK();
  return st;
}

void tpu_rt_stats(tpu_rt_stats_t *out) {
  memset(out, 0, sizeof(*out));
  LOCK();
  if (R.cache) {
    tpu_cache_stats_t cs;
    tpu_cache_get_stats(R.cache, &cs);
    out->mem_hits = cs.mem_hits;
    out->mem_misses = cs.mem_misses;
    out->disk_hits = cs.disk_hits;
    out->disk_misses = cs.disk_misses;
    out->disk_writes = cs.disk_writes;
    out->disk_errors = cs.disk_errors;
    out->compiles = cs.compiles;
    out->evictions = cs.evictions;
    out->disk_evictions = cs.disk_evictions;
    out->compile_seconds = cs.compile_seconds;
    out->mem_entries = cs.mem_entries;
    out->mem_bytes = cs.mem_bytes;
    out->disk_entries = cs.disk_entries;
    out->disk_bytes = cs.disk_bytes;
    out->disk_refused = cs.disk_refused;
  }
  out->executions = R.executions;
  out->flushes = R.flushes;
  out->ops_recorded = R.ops_recorded;
  out->live_buffers = tpu_pjrt_live_buffers();
  out->live_values = R.live_values;
  out->live_storages = R.live_storages;
  out->scalar_cache_hits = R.scalar_hits;
  out->scalar_cache_misses = R.scalar_misses;
  for (int i = 0; i < TPU_SCALAR_SLOTS; i++) out->scalar_cache_entries += R.scalars[i].used;
  UNLOCK();
}

void tpu_rt_clear_cache(bool disk_too) {
  LOCK();
  if (R.cache) tpu_cache_clear(R.cache, disk_too);
  UNLOCK();
}

/* ---- the graph ------------------------------------------------------------------- */

static uint64_t hash_type(uint64_t h, const tpu_hlo_type_t *t) {
  h = tpu_hash_u64(h, (uint64_t)t->dtype * 131 + (uint64_t)t->rank);
  for (int d = 0; d < t->rank; d++) h = tpu_hash_u64(h, (uint64_t)t->dims[d]);
  return h;
}

static uint64_t hash_attrs(uint64_t h, const tpu_op_attrs_t *a) {
  h = tpu_hash_u64(h, (uint64_t)a->nints * 977 + (uint64_t)a->nfloats);
  for (int i = 0; i < a->nints; i++) h = tpu_hash_u64(h, (uint64_t)a->ints[i]);
  for (int i = 0; i < a->nfloats; i++) {
    uint64_t bits;
    memcpy(&bits, &a->floats[i], 8);
    h = tpu_hash_u64(h, bits);
  }
  return h;
}

/* Drops everything pending (after a failure or at shutdown). */
static void graph_discard(void) {
  tpu_graph_t *g = &R.g;
  for (int i = 0; i < g->nnodes; i++) {
    for (int o = 0; o < g->nodes[i].nout; o++) {
      tpu_value_t *v = g->nodes[i].outs[o];
      v->node = -1; /* a pending value that is never computed: reads fail */
      value_release(v);
    }
  }
  for (int i = 0; i < g->ninputs; i++) value_release(g->inputs[i]);
  g->nnodes = 0;
  g->ninputs = 0;
  g->nscalars = 0;
  g->hash = TPU_HASH_SEED;
  g->device = -1;
  g->epoch++;
  tpu_arena_reset(&g->arena);
}

static tpu_status_t graph_ref(tpu_value_t *v, tpu_ref_t *out) {
  tpu_graph_t *g = &R.g;
  if (!v->buffer) {
    if (v->node < 0 || v->node >= g->nnodes)
      return tpu_status_make(TPU_FAILED_PRECONDITION,
                             "tensor value was never computed (an earlier error discarded it)");
    *out = TPU_REF_NODE(v->node, v->out_index);
    return NULL;
  }
  if (v->in_epoch == g->epoch) {
    *out = TPU_REF_INPUT(v->in_index);
    return NULL;
  }
  if (g->ninputs == g->cap_inputs) {
    int cap = g->cap_inputs ? g->cap_inputs * 2 : 64;
    tpu_value_t **n = (tpu_value_t **)realloc(g->inputs, sizeof(*n) * (size_t)cap);
    if (!n) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "graph: out of memory");
    g->inputs = n;
    g->cap_inputs = cap;
  }
  value_retain(v);
  v->in_epoch = g->epoch;
  v->in_index = g->ninputs;
  g->inputs[g->ninputs++] = v;
  g->hash = hash_type(tpu_hash_u64(g->hash, 0x1A), &v->type);
  *out = TPU_REF_INPUT(v->in_index);
  return NULL;
}

static const tpu_hlo_type_t *ref_type(tpu_ref_t r) {
  if (r < 0) return &R.g.inputs[-r - 1]->type;
  return &R.g.nodes[r / TPU_OP_MAX_OUTPUTS].outs[r % TPU_OP_MAX_OUTPUTS]->type;
}

/* Output types of `rule` on `types` with `attrs` (cached; computed by
 * lowering the op alone into a scratch module, which also validates it). */
static tpu_status_t op_signature(const tpu_op_rule_t *rule, const tpu_hlo_type_t *const *types, int nin,
                                 const tpu_op_attrs_t *attrs, const tpu_sig_t **out_sig) {
  uint64_t key = tpu_hash_u64(TPU_HASH_SEED, (uint64_t)(uintptr_t)rule);
  key = tpu_hash_u64(key, (uint64_t)nin);
  for (int i = 0; i < nin; i++) key = hash_type(key, types[i]);
  key = hash_attrs(key, attrs);
  tpu_sig_t **b = &R.sigs[key & (TPU_SIG_BUCKETS - 1)];
  for (tpu_sig_t *s = *b; s; s = s->next)
    if (s->key == key) {
      *out_sig = s;
      return NULL;
    }
  tpu_hlo_module_t *m;
  TPU_PROPAGATE(tpu_hlo_module_create("sig", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t in[TPU_OP_MAX_INPUTS], out[TPU_OP_MAX_OUTPUTS];
  for (int i = 0; i < nin; i++) in[i] = tpu_hlo_func_arg(f, *types[i]);
  int nout = 0;
  tpu_op_checks_t checks = {0};
  tpu_status_t st = tpu_op_lower_checked(rule, f, in, nin, attrs, &checks, out, &nout);
  int nchecks = checks.n;
  tpu_op_checks_free(&checks);
  if (st) {
    tpu_hlo_module_destroy(m);
    return st;
  }
  tpu_sig_t *s = (tpu_sig_t *)calloc(1, sizeof(*s));
  if (!s) {
    tpu_hlo_module_destroy(m);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  s->key = key;
  s->nout = nout;
  s->nchecks = nchecks;
  for (int i = 0; i < nout; i++) s->types[i] = *tpu_hlo_type_of(f, out[i]);
  tpu_hlo_module_destroy(m);
  if (R.nsigs >= TPU_SIG_MAX) { /* bound: drop the bucket's chain */
    tpu_sig_t *x = *b;
    while (x) {
      tpu_sig_t *n = x->next;
      free(x);
      R.nsigs--;
      x = n;
    }
    *b = NULL;
  }
  s->next = *b;
  *b = s;
  R.nsigs++;
  *out_sig = s;
  return NULL;
}

static tpu_status_t graph_add_node(const tpu_op_rule_t *rule, const tpu_ref_t *in, int nin,
                                   const tpu_op_attrs_t *attrs, int device, tpu_node_t **out_node) {
  tpu_graph_t *g = &R.g;
  if (nin > TPU_OP_MAX_INPUTS) return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: too many inputs (%d)", rule->name, nin);
  const tpu_hlo_type_t *types[TPU_OP_MAX_INPUTS];
  for (int i = 0; i < nin; i++) types[i] = ref_type(in[i]);
  static const tpu_op_attrs_t none = {0, NULL, 0, NULL};
  if (!attrs) attrs = &none;
  const tpu_sig_t *sig = NULL;
  TPU_PROPAGATE(op_signature(rule, types, nin, attrs, &sig));
  if (g->nnodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
    tpu_node_t *n = (tpu_node_t *)realloc(g->nodes, sizeof(*n) * (size_t)cap);
    if (!n) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "graph: out of memory");
    g->nodes = n;
    g->cap_nodes = cap;
  }
  tpu_node_t *node = &g->nodes[g->nnodes];
  memset(node, 0, sizeof(*node));
  node->rule = rule;
  node->nin = nin;
  node->in = (tpu_ref_t *)tpu_arena_alloc(&g->arena, sizeof(tpu_ref_t) * (size_t)(nin ? nin : 1));
  int64_t *ints = (int64_t *)tpu_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)(attrs->nints + 1));
  double *floats = (double *)tpu_arena_alloc(&g->arena, sizeof(double) * (size_t)(attrs->nfloats + 1));
  if (!node->in || !ints || !floats) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "graph: out of memory");
  memcpy(node->in, in, sizeof(tpu_ref_t) * (size_t)nin);
  if (attrs->nints) memcpy(ints, attrs->ints, sizeof(int64_t) * (size_t)attrs->nints);
  if (attrs->nfloats) memcpy(floats, attrs->floats, sizeof(double) * (size_t)attrs->nfloats);
  node->attrs = (tpu_op_attrs_t){attrs->nints, ints, attrs->nfloats, floats};
  for (int o = 0; o < sig->nout; o++) {
    tpu_value_t *v = value_new(&sig->types[o], device);
    if (!v) {
      for (int k = 0; k < o; k++) value_release(node->outs[k]);
      return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
    }
    v->node = g->nnodes;
    v->out_index = o;
    node->outs[o] = v; /* the graph's reference */
  }
  node->nout = sig->nout;
  node->nchecks = sig->nchecks;
  uint64_t h = tpu_hash_u64(g->hash, 0x2B);
  int rule_index = tpu_op_rule_index(rule); /* -1: a rule outside the registry (tests) */
  h = tpu_hash_u64(h, rule_index >= 0 ? (uint64_t)rule_index : (uint64_t)(uintptr_t)rule);
  h = tpu_hash_u64(h, (uint64_t)nin);
  for (int i = 0; i < nin; i++) h = tpu_hash_u64(h, (uint64_t)(int64_t)in[i]);
  g->hash = hash_attrs(h, attrs);
  g->nnodes++;
  if (g->device < 0) g->device = device;
  R.ops_recorded++;
  *out_node = node;
  return NULL;
}

/* ---- device-side checks: the per-device error state ------------------------------
 * (errors.h).  Each device's state is a materialised s64[2] buffer, threaded
 * through every program with checks (argument in, result out: the newest
 * result becomes the state) without the host looking at it; `dirty` says a
 * program with checks ran since the host last read it.  The host reads it
 * where it waits anyway (host reads, synchronize; every flush in debug mode),
 * reports a failed check once and puts a clean state back. */
static struct {
  int ndev;
  tpu_value_t **state; /* per device; NULL = clean, not on the device yet */
  unsigned char *dirty;
} RE;

static tpu_status_t err_ensure(int dev) {
  if (dev < RE.ndev) return NULL;
  int n = tpu_rt_device_count();
  if (n <= dev) n = dev + 1;
  tpu_value_t **s = (tpu_value_t **)realloc(RE.state, sizeof(*s) * (size_t)n);
  if (!s) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  RE.state = s;
  unsigned char *d = (unsigned char *)realloc(RE.dirty, (size_t)n);
  if (!d) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  RE.dirty = d;
  for (int i = RE.ndev; i < n; i++) {
    RE.state[i] = NULL;
    RE.dirty[i] = 0;
  }
  RE.ndev = n;
  return NULL;
}

/* Wraps a new state buffer (moved in) as the device's state. */
static tpu_status_t err_state_set(int dev, tpu_pjrt_buffer_t *b) {
  tpu_hlo_type_t t = tpu_err_state_type();
  tpu_value_t *v = value_new(&t, dev);
  if (!v) {
    tpu_pjrt_buffer_destroy(b);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  v->buffer = b;
  value_release(RE.state[dev]);
  RE.state[dev] = v;
  return NULL;
}

/* The device's current error state (a clean one is uploaded on first use). */
static tpu_status_t err_state_buffer(int dev, tpu_pjrt_buffer_t **out) {
  TPU_PROPAGATE(err_ensure(dev));
  if (!RE.state[dev]) {
    int64_t clean[2], two = 2;
    tpu_err_state_clean(clean);
    tpu_pjrt_buffer_t *b;
    TPU_PROPAGATE(tpu_pjrt_buffer_from_host(R.client, dev, TPU_S64, &two, 1, clean, &b));
    TPU_PROPAGATE(err_state_set(dev, b));
  }
  *out = RE.state[dev]->buffer;
  return NULL;
}

/* A program with checks ran: its last result is the new state. */
static void err_state_advance(int dev, tpu_pjrt_buffer_t *b /* moved in */) {
  tpu_status_t st = err_state_set(dev, b);
  if (st) { /* out of memory: the state is lost, start clean */
    tpu_status_free(st);
    value_release(RE.state[dev]);
    RE.state[dev] = NULL;
    return;
  }
  RE.dirty[dev] = 1;
}

static const char *err_note(void) {
  return R.mode == TPU_MODE_DEBUG ? NULL
                                  : "(a device-side check: reported at the first host wait after the op; "
                                    "TORCH_TPU_EAGER_MODE=debug or TPU_LAUNCH_BLOCKING=1 raises at the op)";
}

/* Reports a state read from the device; a failed check is reported once:
 * the state goes back to clean (programs issued meanwhile carry the same
 * first error, so whatever state is current is dropped). */
static tpu_status_t err_report(int dev, const int64_t host[2]) {
  tpu_status_t st = tpu_err_status(host, err_note());
  if (st) {
    value_release(RE.state[dev]);
    RE.state[dev] = NULL;
    RE.dirty[dev] = 0;
  }
  return st;
}

/* A state that cannot be read (the program that made it failed on the
 * device) is dropped: the next program starts clean instead of failing on
 * it too. */
static tpu_status_t err_unreadable(int dev, tpu_status_t st) {
  value_release(RE.state[dev]);
  RE.state[dev] = NULL;
  RE.dirty[dev] = 0;
  return st;
}

/* Reads the device's state (waits for it) with the lock held. */
static tpu_status_t err_check_locked(int dev) {
  if (dev >= RE.ndev || !RE.dirty[dev] || !RE.state[dev]) return NULL;
  int64_t host[2];
  tpu_status_t st = tpu_pjrt_buffer_to_host(RE.state[dev]->buffer, host, sizeof(host));
  if (st) return err_unreadable(dev, st);
  RE.dirty[dev] = 0;
  return err_report(dev, host);
}

/* The same without holding the lock while the device finishes. */
static tpu_status_t err_check(int dev) {
  LOCK();
  if (dev >= RE.ndev || !RE.dirty[dev] || !RE.state[dev]) {
    UNLOCK();
    return NULL;
  }
  tpu_value_t *v = RE.state[dev];
  value_retain(v);
  RE.dirty[dev] = 0;
  UNLOCK();
  int64_t host[2];
  tpu_status_t st = tpu_pjrt_buffer_to_host(v->buffer, host, sizeof(host));
  LOCK();
  if (st) {
    if (RE.state[dev] == v) st = err_unreadable(dev, st);
  } else {
    st = err_report(dev, host);
  }
  value_release(v);
  UNLOCK();
  return st;
}

static void err_shutdown(void) {
  for (int i = 0; i < RE.ndev; i++) value_release(RE.state[i]);
  free(RE.state);
  free(RE.dirty);
  RE.state = NULL;
  RE.dirty = NULL;
  RE.ndev = 0;
  tpu_err_table_clear();
}

/* Builds the StableHLO text of the pending graph, returning the live outputs
 * (and, when the graph has device-side checks, taking the error state as one
 * more argument and returning its new value as one more result). */
static tpu_status_t graph_build_text(const int *live_node, const int *live_out, int nlive, int nchecks,
                                     tpu_hlo_module_t **out_m, const char **out_text, size_t *out_len) {
  tpu_graph_t *g = &R.g;
  tpu_hlo_module_t *m;
  TPU_PROPAGATE(tpu_hlo_module_create("torch_tpu", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t *argv = (tpu_hlo_value_t *)malloc(sizeof(tpu_hlo_value_t) * (size_t)(g->ninputs + 1));
  tpu_hlo_value_t *vals = (tpu_hlo_value_t *)malloc(sizeof(tpu_hlo_value_t) * (size_t)(g->nnodes * TPU_OP_MAX_OUTPUTS + 1));
  tpu_status_t st = NULL;
  if (!argv || !vals) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; !st && i < g->ninputs; i++) argv[i] = tpu_hlo_func_arg(f, g->inputs[i]->type);
  /* ---- device-side checks: the error state is the last argument ---- */
  tpu_op_checks_t checks = {0};
  tpu_hlo_value_t err_state = nchecks ? tpu_hlo_func_arg(f, tpu_err_state_type()) : TPU_HLO_NONE;
  for (int n = 0; !st && n < g->nnodes; n++) {
    tpu_node_t *node = &g->nodes[n];
    tpu_hlo_value_t in[TPU_OP_MAX_INPUTS], out[TPU_OP_MAX_OUTPUTS];
    for (int i = 0; i < node->nin; i++) {
      tpu_ref_t r = node->in[i];
      in[i] = r < 0 ? argv[-r - 1] : vals[r];
    }
    int nout = 0;
    st = tpu_op_lower_checked(node->rule, f, in, node->nin, &node->attrs, nchecks ? &checks : NULL, out, &nout);
    if (st) {
      st = tpu_status_annotate(st, "lowering %s", node->rule->name);
      break;
    }
    for (int o = 0; o < nout; o++) vals[n * TPU_OP_MAX_OUTPUTS + o] = out[o];
  }
  if (!st && checks.n != nchecks)
    st = tpu_status_make(TPU_INTERNAL, "graph: %d device-side checks lowered, %d expected", checks.n, nchecks);
  if (!st) {
    tpu_hlo_value_t *rets = (tpu_hlo_value_t *)malloc(sizeof(tpu_hlo_value_t) * (size_t)(nlive + 1));
    if (!rets) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
    else {
      for (int i = 0; i < nlive; i++) rets[i] = vals[live_node[i] * TPU_OP_MAX_OUTPUTS + live_out[i]];
      /* ---- device-side checks: the new error state is the last result ---- */
      if (nchecks) rets[nlive] = tpu_err_fold(f, err_state, &checks);
      tpu_hlo_func_return(f, rets, nlive + (nchecks ? 1 : 0));
      free(rets);
      st = tpu_hlo_module_text(m, out_text, out_len);
    }
  }
  free(argv);
  free(vals);
  tpu_op_checks_free(&checks);
  if (st) {
    tpu_hlo_module_destroy(m);
    return st;
  }
  *out_m = m;
  return NULL;
}

static tpu_status_t memory_check(int device, int64_t request, const char *what);

static tpu_status_t graph_flush(void) {
  tpu_graph_t *g = &R.g;
  if (g->nnodes == 0) {
    if (g->ninputs) graph_discard();
    return NULL;
  }
  /* live outputs: referenced by anything besides the graph */
  int cap = g->nnodes * 2 + 4, nlive = 0;
  int *live_node = (int *)malloc(sizeof(int) * (size_t)cap);
  int *live_out = (int *)malloc(sizeof(int) * (size_t)cap);
  if (!live_node || !live_out) {
    free(live_node);
    free(live_out);
    graph_discard();
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  uint64_t key = tpu_hash_u64(g->hash, 0x3C);
  for (int n = 0; n < g->nnodes; n++) {
    for (int o = 0; o < g->nodes[n].nout; o++) {
      if (g->nodes[n].outs[o]->refs > 1) {
        if (nlive == cap) {
          cap *= 2;
          live_node = (int *)realloc(live_node, sizeof(int) * (size_t)cap);
          live_out = (int *)realloc(live_out, sizeof(int) * (size_t)cap);
        }
        live_node[nlive] = n;
        live_out[nlive] = o;
        nlive++;
        key = tpu_hash_u64(key, (uint64_t)TPU_REF_NODE(n, o));
      }
    }
  }
  tpu_status_t st = NULL;
  if (nlive == 0) goto done;
  R.flushes++;
  /* ---- device-side checks: part of the program's structure ---- */
  int nchecks = 0;
  for (int n = 0; n < g->nnodes; n++) nchecks += g->nodes[n].nchecks;
  if (nchecks) key = tpu_hash_u64(key, 0xC4EC000000000000ULL + (uint64_t)nchecks);
  int dev = g->device < 0 ? 0 : g->device;
  tpu_pjrt_buffer_t *err_in = NULL;
  if (nchecks) {
    st = err_state_buffer(dev, &err_in);
    if (st) goto done;
  }
  tpu_pjrt_exec_t *exec = tpu_cache_lookup(R.cache, key);
  if (!exec) {
    tpu_hlo_module_t *m = NULL;
    const char *text;
    size_t len;
    st = graph_build_text(live_node, live_out, nlive, nchecks, &m, &text, &len);
    if (!st) {
      tpu_pjrt_compile_options_t co = {.num_replicas = 1, .num_partitions = 1, .device_ids = NULL, .portable = true};
      st = tpu_cache_compile(R.cache, key, text, len, &co, &exec);
      if (st && getenv("TORCH_TPU_DUMP_ON_ERROR")) fprintf(stderr, "%s\n", text);
      tpu_hlo_module_destroy(m);
    }
    if (st) goto done;
  }
  {
    tpu_pjrt_buffer_t **args = (tpu_pjrt_buffer_t **)malloc(sizeof(void *) * (size_t)(g->ninputs + 1));
    tpu_pjrt_buffer_t **outs = (tpu_pjrt_buffer_t **)calloc((size_t)nlive + 1, sizeof(void *));
    if (!args || !outs) {
      free(args);
      free(outs);
      st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    for (int i = 0; i < g->ninputs; i++) args[i] = g->inputs[i]->buffer;
    if (nchecks) args[g->ninputs] = err_in;
    tpu_pjrt_buffer_t *const *arg_lists[1] = {args};
    tpu_pjrt_buffer_t **out_lists[1] = {outs};
    int device = g->device < 0 ? 0 : g->device;
    int64_t out_bytes = 0;
    for (int i = 0; i < nlive; i++) {
      const tpu_hlo_type_t *t = &g->nodes[live_node[i]].outs[live_out[i]]->type;
      out_bytes += tpu_hlo_type_numel(t) * (int64_t)tpu_dtype_size(t->dtype);
    }
    st = memory_check(device, out_bytes, g->nodes[live_node[0]].rule->name);
    uint64_t seq = 0;
    if (!st) {
      seq = tpu_work_issue();
      tpu_pjrt_execute_options_t eo = {.device = device, .non_donatable = NULL, .num_non_donatable = 0,
                                       .wait = R.mode == TPU_MODE_DEBUG,
                                       .on_done = tpu_work_done, .on_done_arg = (void *)(uintptr_t)seq};
      st = tpu_pjrt_execute(exec, arg_lists, 1, (size_t)g->ninputs + (nchecks ? 1 : 0), &eo, out_lists);
      R.executions++;
      /* waited (debug) or failed before running: this piece is done now */
      if (st || R.mode == TPU_MODE_DEBUG) tpu_work_done(NULL, (void *)(uintptr_t)seq);
    }
    if (!st) {
      for (int i = 0; i < nlive; i++) {
        tpu_value_t *v = g->nodes[live_node[i]].outs[live_out[i]];
        v->buffer = outs[i];
        v->node = -1;
      }
      /* ---- device-side checks: the new state; debug mode reports at the op ---- */
      if (nchecks) {
        err_state_advance(dev, outs[nlive]);
        if (R.mode == TPU_MODE_DEBUG) st = err_check_locked(dev);
      }
    }
    free(args);
    free(outs);
  }
done:
  free(live_node);
  free(live_out);
  graph_discard();
  return st;
}

tpu_status_t tpu_rt_flush(void) {
  LOCK();
  tpu_status_t st = graph_flush();
  UNLOCK();
  return st;
}

int tpu_rt_pending_nodes(void) { return R.g.nnodes; }

/* ---- scalars ------------------------------------------------------------------------ */

static tpu_status_t scalar_value(const tpu_rt_input_t *in, int device, tpu_value_t **out) {
  unsigned char host[16];
  memset(host, 0, sizeof(host));
  tpu_dtype_t dt = in->scalar_dtype;
  switch (dt) {
    case TPU_F32: { float x = (float)in->scalar_f; memcpy(host, &x, 4); break; }
    case TPU_F64: { memcpy(host, &in->scalar_f, 8); break; }
    case TPU_F16: case TPU_BF16: {
      /* round-to-nearest-even from f32 bits */
      float x = (float)in->scalar_f;
      uint32_t b;
      memcpy(&b, &x, 4);
      uint16_t h;
      if (dt == TPU_BF16) {
        if ((b & 0x7fffffffu) > 0x7f800000u) h = (uint16_t)((b >> 16) | 0x40);
        else h = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
      } else {
        /* f32 -> f16 */
        uint32_t sign = (b >> 16) & 0x8000u, mant = b & 0x7fffffu;
        int32_t exp = (int32_t)((b >> 23) & 0xff) - 127 + 15;
        if (((b >> 23) & 0xff) == 0xff) h = (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
        else if (exp >= 31) h = (uint16_t)(sign | 0x7c00u);
        else if (exp <= 0) {
          if (exp < -10) h = (uint16_t)sign;
          else {
            mant |= 0x800000u;
            uint32_t shift = (uint32_t)(14 - exp);
            uint32_t hm = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
            if (rem > half || (rem == half && (hm & 1))) hm++;
            h = (uint16_t)(sign | hm);
          }
        } else {
          uint32_t hm = mant >> 13, rem = mant & 0x1fffu;
          uint32_t hv = sign | ((uint32_t)exp << 10) | hm;
          if (rem > 0x1000u || (rem == 0x1000u && (hm & 1))) hv++;
          h = (uint16_t)hv;
        }
      }
      memcpy(host, &h, 2);
      break;
    }
    case TPU_PRED: host[0] = in->scalar_i != 0; break;
    case TPU_S8: case TPU_U8: { int8_t x = (int8_t)in->scalar_i; memcpy(host, &x, 1); break; }
    case TPU_S16: case TPU_U16: { int16_t x = (int16_t)in->scalar_i; memcpy(host, &x, 2); break; }
    case TPU_S32: case TPU_U32: { int32_t x = (int32_t)in->scalar_i; memcpy(host, &x, 4); break; }
    case TPU_S64: case TPU_U64: { memcpy(host, &in->scalar_i, 8); break; }
    default:
      return tpu_status_make(TPU_INVALID_ARGUMENT, "scalar of unsupported dtype %s", tpu_dtype_name(dt));
  }
  uint64_t bits;
  memcpy(&bits, host, 8);
  uint64_t h = tpu_hash_u64(tpu_hash_u64(bits, (uint64_t)dt), (uint64_t)device);
  tpu_scalar_slot_t *slot = &R.scalars[h & (TPU_SCALAR_SLOTS - 1)];
  if (slot->used && slot->dtype == dt && slot->bits == bits && slot->device == device) {
    R.scalar_hits++;
    value_retain(slot->value);
    *out = slot->value;
    return NULL;
  }
  R.scalar_misses++;
  tpu_pjrt_buffer_t *buf;
  TPU_PROPAGATE(tpu_pjrt_buffer_from_host(R.client, device, dt, NULL, 0, host, &buf));
  tpu_hlo_type_t t = tpu_hlo_type_scalar(dt);
  tpu_value_t *v = value_new(&t, device);
  if (!v) {
    tpu_pjrt_buffer_destroy(buf);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  v->buffer = buf;
  uint64_t *seen = &R.scalar_seen[h & (TPU_SCALAR_SLOTS - 1)];
  if (*seen != h) { /* first sighting: remember it, do not cache yet */
    *seen = h;
    *out = v;
    return NULL;
  }
  if (slot->used) value_release(slot->value);
  slot->used = 1;
  slot->dtype = dt;
  slot->bits = bits;
  slot->device = device;
  slot->value = v;
  value_retain(v);
  *out = v;
  return NULL;
}

/* ---- views ---------------------------------------------------------------------------- */

static bool view_is_identity(const tpu_view_t *view, const tpu_hlo_type_t *t) {
  if (view->offset != 0 || view->rank != t->rank || view->dtype != t->dtype) return false;
  int64_t expect = 1;
  for (int d = view->rank - 1; d >= 0; d--) {
    if (view->sizes[d] != t->dims[d]) return false;
    if (view->sizes[d] != 1 && view->strides[d] != expect) return false;
    expect *= view->sizes[d];
  }
  return true;
}

static int view_attrs(const tpu_view_t *v, int64_t *ints) {
  int n = 0;
  ints[n++] = v->rank;
  for (int d = 0; d < v->rank; d++) ints[n++] = v->sizes[d];
  for (int d = 0; d < v->rank; d++) ints[n++] = v->strides[d];
  ints[n++] = v->offset;
  return n;
}

static const char *dims_str(const int64_t *d, int n, char *buf, size_t size) {
  size_t k = 0;
  buf[k++] = '[';
  for (int i = 0; i < n && k + 24 < size; i++)
    k += (size_t)snprintf(buf + k, size - k, i ? ", %lld" : "%lld", (long long)d[i]);
  snprintf(buf + k, size - k, "]");
  return buf;
}

/* Checks that a view can be read from / written to its storage; an untyped
 * storage with no value yet takes the view's dtype. */
static tpu_status_t check_view(tpu_storage_t *s, const tpu_view_t *view) {
  if (view->rank < 0 || view->rank > TPU_MAX_RANK)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "tensors of rank %d are not supported (max %d)", view->rank,
                           TPU_MAX_RANK);
  size_t isz = tpu_dtype_size(view->dtype);
  int64_t extent = 0; /* elements of view dtype the view reaches, 0 if empty */
  bool empty = false;
  for (int d = 0; d < view->rank; d++) empty |= view->sizes[d] == 0;
  if (!empty) {
    extent = view->offset + 1;
    for (int d = 0; d < view->rank; d++) extent += (view->sizes[d] - 1) * view->strides[d];
  }
  if (isz && (size_t)extent * isz > tpu_storage_nbytes(s)) {
    char a[256], b[256];
    return tpu_status_make(TPU_INVALID_ARGUMENT,
                           "setStorage: sizes %s, strides %s, storage offset %lld, and itemsize %zu requiring a "
                           "storage size of %lld are out of bounds for storage of size %zu",
                           dims_str(view->sizes, view->rank, a, sizeof(a)),
                           dims_str(view->strides, view->rank, b, sizeof(b)), (long long)view->offset, isz,
                           (long long)((size_t)extent * isz), tpu_storage_nbytes(s));
  }
  if (s->untyped && !s->value && view->dtype != s->dtype && isz && tpu_storage_nbytes(s) % isz == 0) {
    s->numel = (int64_t)(tpu_storage_nbytes(s) / isz);
    s->dtype = view->dtype;
    s->untyped = false;
  }
  if (view->dtype != s->dtype) {
    size_t a = tpu_dtype_size(s->dtype), b = tpu_dtype_size(view->dtype);
    if (!a || !b || ((size_t)s->numel * a) % b)
      return tpu_status_make(TPU_INVALID_ARGUMENT, "a %s view of a %s storage of %lld elements is not possible",
                             tpu_dtype_name(view->dtype), tpu_dtype_name(s->dtype), (long long)s->numel);
  }
  return NULL;
}

static tpu_status_t graph_add_node(const tpu_op_rule_t *rule, const tpu_ref_t *in, int nin,
                                   const tpu_op_attrs_t *attrs, int device, tpu_node_t **out_node);

/* A reference to a storage's value seen as `dtype` (bitcast when the view's
 * dtype differs from the storage's, e.g. torch.save's byte views). */
static tpu_status_t input_ref(const tpu_rt_input_t *in, int device, tpu_ref_t *out);

/* A storage with no value reads as zeros: a fill node in this graph (not
 * kept by the storage, so a failed op leaves the storage as it was). */
static tpu_status_t storage_zeros_ref(tpu_storage_t *s, int device, tpu_ref_t *out, const tpu_hlo_type_t **out_type) {
  tpu_rt_input_t zero;
  memset(&zero, 0, sizeof(zero));
  zero.scalar_dtype = TPU_F32;
  tpu_ref_t z;
  TPU_PROPAGATE(input_ref(&zero, device, &z));
  int64_t ints[3] = {s->dtype, 1, s->numel};
  tpu_op_attrs_t a = {3, ints, 0, NULL};
  static const tpu_op_rule_t *full;
  if (!full) full = tpu_op_rule_find("full");
  tpu_node_t *node;
  TPU_PROPAGATE(graph_add_node(full, &z, 1, &a, device, &node));
  *out = TPU_REF_NODE(R.g.nnodes - 1, 0);
  *out_type = &node->outs[0]->type;
  return NULL;
}

static tpu_status_t storage_ref(tpu_storage_t *s, tpu_dtype_t dtype, int device, tpu_ref_t *out,
                                const tpu_hlo_type_t **out_type) {
  tpu_ref_t base;
  const tpu_hlo_type_t *base_type;
  if (s->value) {
    TPU_PROPAGATE(graph_ref(s->value, &base));
    base_type = &s->value->type;
  } else {
    TPU_PROPAGATE(storage_zeros_ref(s, device, &base, &base_type));
  }
  if (dtype == base_type->dtype) {
    *out = base;
    *out_type = base_type;
    return NULL;
  }
  int64_t code = dtype;
  tpu_op_attrs_t a = {1, &code, 0, NULL};
  tpu_node_t *node;
  TPU_PROPAGATE(graph_add_node(tpu_op_rule_find("bitcast_flat"), &base, 1, &a, device, &node));
  *out = TPU_REF_NODE(R.g.nnodes - 1, 0);
  *out_type = &node->outs[0]->type;
  return NULL;
}

/* A graph reference to the contents of an input (view read folded in). */
static tpu_status_t input_ref(const tpu_rt_input_t *in, int device, tpu_ref_t *out) {
  if (!in->storage) {
    /* the same scalar used twice in one graph is one input, whatever the
     * scalar cache holds: the program's structure must not depend on it */
    uint64_t key = tpu_hash_u64(tpu_hash_u64(0x5ca1a, (uint64_t)in->scalar_dtype), (uint64_t)in->scalar_i);
    double f = in->scalar_f;
    uint64_t fb;
    memcpy(&fb, &f, 8);
    key = tpu_hash_u64(key, fb);
    tpu_graph_t *g = &R.g;
    for (int i = 0; i < g->nscalars; i++) {
      if (g->scalar_keys[i] == key) {
        *out = TPU_REF_INPUT(g->scalar_inputs[i]);
        return NULL;
      }
    }
    tpu_value_t *v = NULL;
    TPU_PROPAGATE(scalar_value(in, device, &v));
    tpu_status_t st = graph_ref(v, out);
    value_release(v);
    if (!st && g->nscalars < TPU_GRAPH_SCALARS) {
      g->scalar_keys[g->nscalars] = key;
      g->scalar_inputs[g->nscalars] = -*out - 1;
      g->nscalars++;
    }
    return st;
  }
  tpu_storage_t *s = in->storage;
  TPU_PROPAGATE(check_view(s, &in->view));
  tpu_ref_t base;
  const tpu_hlo_type_t *bt;
  TPU_PROPAGATE(storage_ref(s, in->view.dtype, device, &base, &bt));
  if (view_is_identity(&in->view, bt)) {
    *out = base;
    return NULL;
  }
  int64_t ints[2 + 2 * TPU_MAX_RANK + 1];
  tpu_op_attrs_t a = {view_attrs(&in->view, ints), ints, 0, NULL};
  static const tpu_op_rule_t *view_read;
  if (!view_read) view_read = tpu_op_rule_find("view_read");
  tpu_node_t *node;
  TPU_PROPAGATE(graph_add_node(view_read, &base, 1, &a, device, &node));
  *out = TPU_REF_NODE(R.g.nnodes - 1, 0);
  return NULL;
}

static int inputs_device(const tpu_rt_input_t *inputs, int nin, tpu_status_t *st) {
  int device = -1;
  *st = NULL;
  for (int i = 0; i < nin; i++) {
    if (!inputs[i].storage) continue;
    if (device < 0) device = inputs[i].storage->device;
    else if (inputs[i].storage->device != device) {
      *st = tpu_status_make(TPU_INVALID_ARGUMENT,
                            "Expected all tensors to be on the same device, but found at least two devices, "
                            "tpu:%d and tpu:%d!", device, inputs[i].storage->device);
      return -1;
    }
  }
  return device < 0 ? 0 : device;
}

/* Rolls back nodes added by a failed op (their values are unreferenced). */
static void graph_truncate(int nnodes) {
  tpu_graph_t *g = &R.g;
  while (g->nnodes > nnodes) {
    tpu_node_t *node = &g->nodes[--g->nnodes];
    for (int o = 0; o < node->nout; o++) {
      node->outs[o]->node = -1;
      value_release(node->outs[o]);
    }
  }
}

static tpu_status_t maybe_flush_after_op(void) {
  if (R.mode != TPU_MODE_FUSED || R.g.nnodes >= R.fused_max_nodes) return graph_flush();
  return NULL;
}

tpu_status_t tpu_rt_op(const tpu_op_rule_t *rule, const tpu_rt_input_t *inputs, int nin, const tpu_op_attrs_t *attrs,
                       tpu_rt_output_t *outputs, int *out_n) {
  *out_n = 0;
  if (nin > TPU_OP_MAX_INPUTS) return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: too many inputs (%d)", rule->name, nin);
  LOCK();
  if (!R.initialized) {
    UNLOCK();
    return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  }
  tpu_status_t st = NULL;
  int device = inputs_device(inputs, nin, &st);
  if (st) {
    UNLOCK();
    return st;
  }
  if (R.g.nnodes && R.g.device != device) {
    st = graph_flush();
    if (st) {
      UNLOCK();
      return st;
    }
  }
  int mark = R.g.nnodes;
  tpu_ref_t refs[TPU_OP_MAX_INPUTS];
  for (int i = 0; i < nin && !st; i++) st = input_ref(&inputs[i], device, &refs[i]);
  tpu_node_t *node = NULL;
  if (!st) st = graph_add_node(rule, refs, nin, attrs, device, &node);
  if (st) {
    graph_truncate(mark);
    if (R.mode != TPU_MODE_FUSED) graph_discard();
    UNLOCK();
    return st;
  }
  int n = node->nout;
  for (int o = 0; o < n; o++) {
    value_retain(node->outs[o]);
    outputs[o].type = node->outs[o]->type;
    outputs[o].storage = storage_new(node->outs[o]);
  }
  *out_n = n;
  st = maybe_flush_after_op();
  UNLOCK();
  if (st) {
    for (int o = 0; o < n; o++) tpu_storage_release(outputs[o].storage);
    *out_n = 0;
  }
  return st;
}

tpu_status_t tpu_rt_write(tpu_storage_t *dst, const tpu_view_t *dst_view, const tpu_rt_input_t *src) {
  LOCK();
  tpu_status_t st = check_view(dst, dst_view);
  if (st) {
    UNLOCK();
    return st;
  }
  int device = dst->device;
  if (src->storage && src->storage->device != device) {
    UNLOCK();
    return tpu_status_make(TPU_INVALID_ARGUMENT,
                           "Expected all tensors to be on the same device, but found tpu:%d and tpu:%d",
                           device, src->storage->device);
  }
  if (R.g.nnodes && R.g.device != device) {
    st = graph_flush();
    if (st) {
      UNLOCK();
      return st;
    }
  }
  /* Whole-storage overwrite by an identity view of the same size and type:
   * share the value, no program. */
  int64_t numel = 1;
  for (int d = 0; d < dst_view->rank; d++) numel *= dst_view->sizes[d];
  bool full = dst_view->offset == 0 && numel == dst->numel;
  int64_t expect = 1;
  for (int d = dst_view->rank - 1; full && d >= 0; d--) {
    if (dst_view->sizes[d] != 1 && dst_view->strides[d] != expect) full = false;
    expect *= dst_view->sizes[d];
  }
  if (full && dst_view->dtype == dst->dtype && src->storage && src->storage->value &&
      src->storage->dtype == dst->dtype && src->view.dtype == dst->dtype &&
      view_is_identity(&src->view, &src->storage->value->type) && src->storage->numel == numel &&
      src->view.rank == dst_view->rank &&
      !memcmp(src->view.sizes, dst_view->sizes, sizeof(int64_t) * (size_t)dst_view->rank)) {
    tpu_value_t *v = src->storage->value;
    value_retain(v);
    if (dst->value) value_release(dst->value);
    dst->value = v;
    UNLOCK();
    return NULL;
  }
  int mark = R.g.nnodes;
  tpu_ref_t refs[2];
  const tpu_hlo_type_t *bt;
  st = storage_ref(dst, dst_view->dtype, device, &refs[0], &bt);
  if (!st) st = input_ref(src, device, &refs[1]);
  int64_t ints[2 + 2 * TPU_MAX_RANK + 1];
  tpu_op_attrs_t a = {view_attrs(dst_view, ints), ints, 0, NULL};
  static const tpu_op_rule_t *view_write;
  if (!view_write) view_write = tpu_op_rule_find("view_write");
  tpu_node_t *node = NULL;
  if (!st) st = graph_add_node(view_write, refs, 2, &a, device, &node);
  if (!st && dst_view->dtype != dst->dtype) { /* back to the storage's dtype */
    tpu_ref_t w = TPU_REF_NODE(R.g.nnodes - 1, 0);
    int64_t code = dst->dtype;
    tpu_op_attrs_t ba = {1, &code, 0, NULL};
    st = graph_add_node(tpu_op_rule_find("bitcast_flat"), &w, 1, &ba, device, &node);
  }
  if (st) {
    graph_truncate(mark);
    if (R.mode != TPU_MODE_FUSED) graph_discard();
    UNLOCK();
    return st;
  }
  tpu_value_t *nv = node->outs[0];
  value_retain(nv);
  if (dst->value) value_release(dst->value);
  dst->value = nv;
  st = maybe_flush_after_op();
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_storage_from_host(int device, tpu_dtype_t dtype, const int64_t *dims, int rank, const void *data,
                                      tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  if (!R.initialized) {
    UNLOCK();
    return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  }
  if (device < 0 || device >= tpu_pjrt_client_device_count(R.client)) {
    int n = tpu_pjrt_client_device_count(R.client);
    UNLOCK();
    return tpu_status_make(TPU_INVALID_ARGUMENT, "invalid device tpu:%d (%d device%s available)", device, n,
                           n == 1 ? "" : "s");
  }
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  tpu_pjrt_buffer_t *buf;
  tpu_status_t st = memory_check(device, numel * (int64_t)tpu_dtype_size(dtype), "copying to the device");
  if (!st) st = tpu_pjrt_buffer_from_host(R.client, device, dtype, dims, rank, data, &buf);
  if (st) {
    UNLOCK();
    return st;
  }
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, rank, dims);
  tpu_value_t *v = value_new(&t, device);
  tpu_storage_t *s = v ? storage_new(v) : NULL;
  if (!s) {
    if (v) value_release(v);
    else tpu_pjrt_buffer_destroy(buf);
    UNLOCK();
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  v->buffer = buf;
  *out_storage = s;
  UNLOCK();
  return NULL;
}

static tpu_status_t check_started_device(int device) {
  if (!R.initialized) return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  int n = tpu_pjrt_client_device_count(R.client);
  if (device < 0 || device >= n)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "invalid device tpu:%d (%d device%s available)", device, n,
                           n == 1 ? "" : "s");
  return NULL;
}

tpu_status_t tpu_rt_storage_alloc(int device, size_t nbytes, tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) {
    *out_storage = storage_new_lazy(device, TPU_U8, (int64_t)nbytes, true);
    if (!*out_storage) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_storage_empty(int device, tpu_dtype_t dtype, int64_t numel, tpu_storage_t **out_storage) {
  *out_storage = NULL;
  if (!tpu_dtype_valid((int)dtype) || numel < 0)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "storage of %lld elements of dtype code %d", (long long)numel,
                           (int)dtype);
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) {
    *out_storage = storage_new_lazy(device, dtype, numel, false);
    if (!*out_storage) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_storage_resize(tpu_storage_t *s, size_t nbytes) {
  LOCK();
  size_t isz = tpu_dtype_size(s->dtype);
  tpu_dtype_t dt = nbytes % isz == 0 ? s->dtype : TPU_U8;
  size_t esz = tpu_dtype_size(dt);
  int64_t numel = (int64_t)(nbytes / esz);
  size_t keep = tpu_storage_nbytes(s) < nbytes ? tpu_storage_nbytes(s) : nbytes;
  keep -= keep % esz;
  tpu_status_t st = NULL;
  if (!s->value || keep == 0) {
    if (s->value) value_release(s->value);
    s->value = NULL;
  } else {
    /* new value = the old one's first `keep` bytes, zeros after */
    tpu_storage_t tmp = {.refs = 1, .dtype = dt, .numel = numel, .device = s->device};
    tpu_view_t v = {.dtype = dt, .rank = 1, .sizes = {(int64_t)(keep / esz)}, .strides = {1}, .offset = 0};
    tpu_rt_input_t src;
    memset(&src, 0, sizeof(src));
    src.storage = s;
    src.view = v;
    if (R.g.nnodes && R.g.device != s->device) st = graph_flush();
    int mark = R.g.nnodes;
    tpu_ref_t refs[2];
    const tpu_hlo_type_t *bt;
    if (!st) st = storage_ref(&tmp, dt, s->device, &refs[0], &bt);
    if (!st) st = input_ref(&src, s->device, &refs[1]);
    int64_t ints[2 + 2 * TPU_MAX_RANK + 1];
    tpu_op_attrs_t a = {view_attrs(&v, ints), ints, 0, NULL};
    tpu_node_t *node = NULL;
    if (!st) st = graph_add_node(tpu_op_rule_find("view_write"), refs, 2, &a, s->device, &node);
    if (st) {
      graph_truncate(mark);
      if (R.mode != TPU_MODE_FUSED) graph_discard();
    } else {
      value_retain(node->outs[0]);
      value_release(s->value);
      s->value = node->outs[0];
    }
  }
  if (!st) {
    s->dtype = dt;
    s->numel = numel;
    st = maybe_flush_after_op();
  }
  UNLOCK();
  return st;
}

/* ---- device memory ---------------------------------------------------------------- */

/* Host memory stands for device memory on the CPU plugin. */
static void host_memory(int64_t *total, int64_t *avail) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  *total = pages > 0 && psize > 0 ? (int64_t)pages * psize : 0;
  *avail = *total;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return;
  char line[256];
  long long kb;
  while (fgets(line, sizeof(line), f)) {
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
      *avail = (int64_t)kb * 1024;
      break;
    }
  }
  fclose(f);
}

static void memory_info_locked(int device, tpu_rt_memory_info_t *out) {
  memset(out, 0, sizeof(*out));
  tpu_pjrt_memory_stats(R.client, device, &out->stats);
  int64_t total = out->stats.plugin_bytes_limit, free_b;
  if (total > 0) {
    int64_t used = out->stats.plugin_bytes_in_use >= 0 ? out->stats.plugin_bytes_in_use : out->stats.bytes_in_use;
    free_b = total - used;
  } else {
    host_memory(&total, &free_b);
  }
  out->total_bytes = total;
  out->free_bytes = free_b < 0 ? 0 : free_b;
  out->limit_bytes = R.mem_limit[device] > 0 ? R.mem_limit[device] : total;
}

tpu_status_t tpu_rt_memory_info(int device, tpu_rt_memory_info_t *out) {
  memset(out, 0, sizeof(*out));
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) memory_info_locked(device, out);
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_set_memory_limit(int device, int64_t bytes) {
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (!st) R.mem_limit[device] = bytes > 0 ? bytes : 0;
  UNLOCK();
  return st;
}

static void fmt_bytes(int64_t b, char *buf, size_t n) {
  double v = (double)b;
  const char *u[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (v >= 1024 && i < 5) {
    v /= 1024;
    i++;
  }
  if (i == 0) snprintf(buf, n, "%lld bytes", (long long)b);
  else snprintf(buf, n, "%.2f %s", v, u[i]);
}

/* Refuses an allocation of `request` bytes that would pass the device's
 * limit (set_per_process_memory_fraction, or its whole capacity), with
 * CUDA's message shape; the engine maps it to torch.OutOfMemoryError. */
static tpu_status_t memory_check(int device, int64_t request, const char *what) {
  if (request <= 0 || device < 0 || device >= TPU_PJRT_MAX_DEVICES) return NULL;
  tpu_pjrt_memory_stats_t ms;
  tpu_pjrt_memory_stats(NULL, device, &ms);
  int64_t limit = R.mem_limit[device];
  if (limit <= 0 && ms.bytes_in_use + request < ((int64_t)1 << 30)) return NULL; /* the common case: no probe */
  tpu_rt_memory_info_t mi;
  memory_info_locked(device, &mi);
  if (limit <= 0) limit = mi.total_bytes;
  if (limit <= 0 || ms.bytes_in_use + request <= limit) return NULL;
  char a[32], b[32], c[32], d[32];
  fmt_bytes(request, a, sizeof(a));
  fmt_bytes(mi.total_bytes, b, sizeof(b));
  fmt_bytes(ms.bytes_in_use, c, sizeof(c));
  fmt_bytes(limit, d, sizeof(d));
  return tpu_status_make(TPU_RESOURCE_EXHAUSTED,
                         "tpu out of memory (%s). Tried to allocate %s. tpu:%d has a total capacity of %s; this "
                         "process holds %s in device buffers and may use %s.",
                         what, a, device, b, c, d);
}

void tpu_rt_memory_reset_peak(int device) { tpu_pjrt_memory_reset_peak(device); }
void tpu_rt_memory_reset_accumulated(int device) { tpu_pjrt_memory_reset_accumulated(device); }

/* Drops the device buffers the engine keeps for reuse (the scalar cache). */
void tpu_rt_empty_cache(void) {
  LOCK();
  for (int i = 0; i < TPU_SCALAR_SLOTS; i++) {
    if (R.scalars[i].used) value_release(R.scalars[i].value);
    R.scalars[i].used = 0;
    R.scalar_seen[i] = 0;
  }
  UNLOCK();
}

/* An asynchronous upload is a piece of work (events and synchronize
 * cover it); its completion also tells the caller the host memory is free. */
typedef struct upload_done {
  uint64_t seq;
  tpu_pjrt_done_fn done;
  void *arg;
} upload_done_t;

static void upload_finished(tpu_status_t st, void *arg) {
  upload_done_t u = *(upload_done_t *)arg;
  free(arg);
  tpu_work_done(st ? tpu_status_annotate(st, "copying to the device") : NULL, (void *)(uintptr_t)u.seq);
  u.done(NULL, u.arg);
}

tpu_status_t tpu_rt_storage_from_host_async(int device, tpu_dtype_t dtype, const int64_t *dims, int rank,
                                            const void *data, tpu_pjrt_done_fn done, void *arg,
                                            tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  tpu_status_t st = check_started_device(device);
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  if (!st) st = memory_check(device, numel * (int64_t)tpu_dtype_size(dtype), "copying to the device");
  upload_done_t *u = st ? NULL : (upload_done_t *)malloc(sizeof(*u));
  if (!st && !u) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  if (st) {
    UNLOCK();
    return st;
  }
  u->done = done;
  u->arg = arg;
  u->seq = tpu_work_issue();
  tpu_pjrt_buffer_t *buf = NULL;
  st = tpu_pjrt_buffer_from_host_async(R.client, device, dtype, dims, rank, data, upload_finished, u, &buf);
  if (st) {
    tpu_work_done(NULL, (void *)(uintptr_t)u->seq);
    free(u);
    UNLOCK();
    return st;
  }
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, rank, dims);
  tpu_value_t *v = value_new(&t, device);
  tpu_storage_t *s = v ? storage_new(v) : NULL;
  if (!s) {
    if (v) value_release(v);
    else tpu_pjrt_buffer_destroy(buf);
    UNLOCK();
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  }
  v->buffer = buf;
  *out_storage = s;
  UNLOCK();
  return NULL;
}

tpu_status_t tpu_rt_dma_map(void *data, size_t size) {
  LOCK();
  tpu_status_t st = R.initialized ? tpu_pjrt_dma_map(R.client, data, size)
                                  : tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_dma_unmap(void *data) {
  LOCK();
  tpu_status_t st = R.initialized ? tpu_pjrt_dma_unmap(R.client, data)
                                  : tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_view_to_host(tpu_storage_t *s, const tpu_view_t *view, void *dst, size_t nbytes) {
  LOCK();
  tpu_status_t st = check_view(s, view);
  tpu_value_t *v = NULL;
  if (!st) {
    if (s->value && view->dtype == s->value->type.dtype && view_is_identity(view, &s->value->type)) {
      v = s->value;
      value_retain(v);
      if (!v->buffer) st = graph_flush();
    } else {
      /* materialise the view as its own value */
      tpu_ref_t base;
      const tpu_hlo_type_t *bt;
      int mark = R.g.nnodes;
      st = storage_ref(s, view->dtype, s->device, &base, &bt);
      int64_t ints[2 + 2 * TPU_MAX_RANK + 1];
      tpu_op_attrs_t a = {view_attrs(view, ints), ints, 0, NULL};
      tpu_node_t *node = NULL;
      if (!st) st = graph_add_node(tpu_op_rule_find("view_read"), &base, 1, &a, s->device, &node);
      if (st) graph_truncate(mark);
      else {
        v = node->outs[0];
        value_retain(v);
        st = graph_flush();
      }
    }
  }
  if (!st && v && !v->buffer) st = tpu_status_make(TPU_FAILED_PRECONDITION, "tensor value was never computed");
  tpu_pjrt_buffer_t *buf = (!st && v) ? v->buffer : NULL;
  UNLOCK();
  /* a host wait: a failed device-side check raises here (errors.h) */
  if (!st) st = err_check(s->device);
  if (st) buf = NULL;
  /* the copy itself runs without the lock held */
  if (buf) st = tpu_pjrt_buffer_to_host(buf, dst, nbytes);
  if (v) {
    LOCK();
    value_release(v);
    UNLOCK();
  }
  return st;
}

tpu_status_t tpu_rt_synchronize(void) {
  LOCK();
  tpu_status_t st = graph_flush();
  int ndev = RE.ndev;
  UNLOCK();
  /* PJRT has no device-wide barrier: wait for every piece of work issued */
  tpu_status_t wst = tpu_work_wait_all();
  if (st) {
    tpu_status_free(wst);
    return st;
  }
  /* a host wait: a failed device-side check raises here (errors.h) */
  for (int d = 0; d < ndev && !wst; d++) wst = err_check(d);
  return wst;
}
