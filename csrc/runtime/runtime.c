/* runtime.c - the runtime's lifetime, modes and statistics, and its two
 * entry points that record work: tpu_rt_op (run a rule) and tpu_rt_write
 * (write into a view).  The model is described at the top of runtime.h; the
 * files of the runtime are listed in runtime_internal.h.
 */
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/event.h"
#include "runtime/runtime_internal.h"

tpu_runtime_t tpu_rt_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void graph_discard_if_ready(int device) {
  if (R.graphs[device].ready) graph_discard(&R.graphs[device]);
}

/* ---- lifetime -------------------------------------------------------------------- */

/* fork(): the child has the parent's memory but none of its threads (the
 * plugin's included), so, as with CUDA, it cannot use a device its parent
 * started.  The child's handler resets the locks a parent thread may have
 * held and marks the runtime: every entry then fails with TPU_FORKED_MSG,
 * and nothing of the parent's (buffers, client) is touched or freed. */
static void on_fork_child(void) {
  pthread_mutex_init(&R.lock, NULL);
  tpu_work_after_fork_child();
  if (R.initialized) R.forked = 1;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, on_fork_child); }

bool tpu_rt_forked(void) { return R.forked != 0; }

tpu_status_t tpu_rt_init(const tpu_rt_config_t *cfg) {
  static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;
  LOCK();
  if (R.forked) {
    UNLOCK();
    return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_FORKED_MSG);
  }
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
  tpu_cache_config_t cc = {.dir = cfg->cache_dir,
                           .mem_max_entries = cfg->mem_cache_max_entries,
                           .mem_max_bytes = cfg->mem_cache_max_bytes,
                           .mem_max_maps = cfg->mem_cache_max_maps,
                           .disk_max_entries = cfg->disk_cache_max_entries,
                           .disk_max_bytes = cfg->disk_cache_max_bytes};
  st = tpu_cache_create(R.client, &cc, &R.cache);
  if (st) {
    tpu_pjrt_client_destroy(R.client);
    R.client = NULL;
    UNLOCK();
    return st;
  }
  R.mode = cfg->mode;
  R.fused_max_nodes = cfg->fused_max_nodes > 0 ? cfg->fused_max_nodes : 8192;
  R.no_device_checks = cfg->no_device_checks;
  R.no_donation = cfg->no_donation;
  R.host_capacity = cfg->host_capacity_bytes > 0 ? cfg->host_capacity_bytes : 0;
  launch_start(cfg->compile_threads);
  bool cpu = !strcmp(tpu_pjrt_client_platform(R.client), "cpu");
  /* host kernels: a plugin without FFI registration has none, and callers
   * ask tpu_kernels_available() before emitting a call */
  tpu_status_free(tpu_kernels_register(R.client));
  tpu_op_set_target_cpu(cpu);
  R.target_cpu = cpu;
  if (!cfg->no_host_memory_cache && cpu) host_memory_cache_start();
  R.initialized = 1;
  UNLOCK();
  pthread_once(&fork_handler, register_fork_handler);
  return NULL;
}

bool tpu_rt_initialized(void) { return R.initialized != 0; }

void tpu_rt_shutdown(void) {
  LOCK();
  if (!R.initialized || R.forked) {
    UNLOCK();
    return;
  }
  for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++) graph_discard_if_ready(d);
  launch_shutdown(); /* what is queued runs, the workers stop */
  tpu_status_free(tpu_work_wait_all());
  err_shutdown();
  scalars_clear();
  sigs_free();
  metrics_shutdown();
  trace_shutdown();
  tpu_cache_destroy(R.cache);
  R.cache = NULL;
  for (int d = 0; d < TPU_PJRT_MAX_DEVICES; d++) graph_free(&R.graphs[d]);
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

tpu_status_t tpu_rt_set_mode(tpu_eager_mode_t mode) {
  LOCK();
  tpu_status_t st = flush_all(TPU_CUT_OTHER);
  if (!st && mode == TPU_MODE_DEBUG) launch_wait_all(-1); /* debug mode compiles at the op: nothing queued */
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
    out->map_evictions = cs.map_evictions;
    out->memory_evictions = cs.memory_evictions;
    out->maps = cs.maps;
    out->mem_max_maps = cs.mem_max_maps;
    out->compile_seconds = cs.compile_seconds;
    out->mem_entries = cs.mem_entries;
    out->mem_bytes = cs.mem_bytes;
    out->disk_entries = cs.disk_entries;
    out->disk_bytes = cs.disk_bytes;
    out->disk_refused = cs.disk_refused;
    out->promotions = cs.promotions;
    out->promotion_seconds = cs.promotion_seconds;
  }
  out->executions = R.executions;
  out->flushes = R.flushes;
  out->ops_recorded = R.ops_recorded;
  out->live_buffers = tpu_pjrt_live_buffers();
  out->live_values = R.live_values;
  out->live_storages = R.live_storages;
  out->scalar_cache_hits = R.scalar_hits;
  out->scalar_cache_misses = R.scalar_misses;
  out->scalar_cache_entries = scalars_used();
  UNLOCK();
}

void tpu_rt_clear_cache(bool disk_too) {
  LOCK();
  launch_wait_all(-1); /* queued runs hold programs of the cache */
  if (R.cache) tpu_cache_clear(R.cache, disk_too);
  UNLOCK();
}

/* ---- recording work -------------------------------------------------------------- */

/* The device of an op: its tensors' (all on one device), else `fallback`. */
static int inputs_device(const tpu_rt_input_t *inputs, int nin, int fallback, tpu_status_t *st) {
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
  return device < 0 ? (fallback < 0 ? 0 : fallback) : device;
}

tpu_status_t tpu_rt_op(const tpu_op_rule_t *rule, const tpu_rt_input_t *inputs, int nin, const tpu_op_attrs_t *attrs,
                       tpu_rt_output_t *outputs, int *out_n) {
  return tpu_rt_op_on(-1, rule, inputs, nin, attrs, outputs, out_n);
}

tpu_status_t tpu_rt_op_on(int device_if_none, const tpu_op_rule_t *rule, const tpu_rt_input_t *inputs, int nin,
                          const tpu_op_attrs_t *attrs, tpu_rt_output_t *outputs, int *out_n) {
  *out_n = 0;
  if (nin > TPU_OP_MAX_INPUTS) return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: too many inputs (%d)", rule->name, nin);
  LOCK();
  if (!R.initialized) {
    UNLOCK();
    return tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  }
  tpu_status_t st = NULL;
  int device = inputs_device(inputs, nin, device_if_none, &st);
  if (!st) st = check_started_device(device);
  if (st) {
    UNLOCK();
    return st;
  }
  tpu_graph_t *g = graph_of(device);
  st = cut_if_due(g);
  if (st) {
    UNLOCK();
    return st;
  }
  int mark = g->nnodes;
  tpu_ref_t refs[TPU_OP_MAX_INPUTS];
  for (int i = 0; i < nin && !st; i++) st = input_ref(g, &inputs[i], &refs[i]);
  tpu_node_t *node = NULL;
  if (!st) st = graph_add_node(g, rule, refs, nin, attrs, &node);
  if (st) {
    graph_truncate(g, mark);
    if (R.mode != TPU_MODE_FUSED) graph_discard(g);
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
  st = maybe_flush_after_op(g);
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
  tpu_graph_t *g = graph_of(device);
  st = cut_if_due(g);
  if (st) {
    UNLOCK();
    return st;
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
    int64_t promised = storage_promised(dst);
    value_retain(v);
    if (dst->value) value_release(dst->value);
    dst->value = v;
    storage_repromise(dst, promised);
    UNLOCK();
    return NULL;
  }
  int mark = g->nnodes;
  tpu_ref_t refs[2];
  const tpu_hlo_type_t *bt;
  st = storage_ref(g, dst, dst_view->dtype, &refs[0], &bt);
  if (!st) st = input_ref(g, src, &refs[1]);
  tpu_node_t *node = NULL;
  if (!st) st = view_node(g, refs, 2, dst_view, &node);
  if (!st && dst_view->dtype != dst->dtype) { /* back to the storage's dtype */
    tpu_ref_t w = TPU_REF_NODE(g->nnodes - 1, 0);
    int64_t code = dst->dtype;
    tpu_op_attrs_t ba = {1, &code, 0, NULL};
    st = graph_add_node(g, tpu_op_rule_find("bitcast_flat"), &w, 1, &ba, &node);
  }
  if (st) {
    graph_truncate(g, mark);
    if (R.mode != TPU_MODE_FUSED) graph_discard(g);
    UNLOCK();
    return st;
  }
  tpu_value_t *nv = node->outs[0];
  int64_t promised = storage_promised(dst);
  value_retain(nv);
  if (dst->value) value_release(dst->value);
  dst->value = nv;
  storage_repromise(dst, promised);
  st = maybe_flush_after_op(g);
  UNLOCK();
  return st;
}

