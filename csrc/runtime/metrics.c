/* metrics.c - counters, program records and the recompile log (metrics.h).
 *
 * Everything here has its own lock: executions complete on plugin threads.
 * Records are allocated one by one and never moved, so a pointer to one
 * (kept in the ring of executions in flight) stays valid until shutdown.
 *
 * Descriptors.  A record's descriptor is its graph without values: per
 * input its type; per op its rule, its attributes and its wiring.  Two
 * hashes index them: the structure (rules, wiring, live outputs,
 * donations, checks: everything but the input types and attributes), and
 * the head (the rules of the first HEAD_OPS ops).  Descriptors stop being
 * kept past DESC_MAX_BYTES (a process that compiles that much graph has
 * other problems); records without one still count.
 */
#include "runtime/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/hash.h"
#include "runtime/runtime_internal.h"

#define PROG_MAX 65536
#define PROG_BUCKETS 8192
#define DESC_MAX_BYTES ((size_t)64 << 20)
#define HEAD_OPS 8
#define CAUSE_MAX 4096
#define RING 256 /* executions in flight (event.c bounds them at 128) */

struct tpu_program_desc {
  char name[128];
  int ops, ninputs_all;
  int has_graph; /* the arrays below are filled (not when past DESC_MAX_BYTES) */
  uint64_t structure, head;
  uint64_t kept, donated;  /* hashes of the results kept and of the donations */
  int nkept, ndonated, nchecks;
  int ninputs, nnodes;
  tpu_hlo_type_t *inputs;
  int *first_use;   /* per input: the first op reading it (-1: none) */
  int *rule;        /* per op: registry index (-1: a rule outside it) */
  uint64_t *wiring; /* per op: a hash of what it reads */
  int32_t *first_in; /* per op: its first input (a tpu_ref_t) */
  const char **rule_name;
  int *nints, *nfloats, *attr_at; /* per op: attribute counts and where they start in attrs */
  int64_t *attrs;   /* ints, then the floats' bits */
  size_t bytes;
};
typedef tpu_program_desc_t desc_t;

typedef struct tpu_prog_rec tpu_prog_rec_t;
struct tpu_prog_rec {
  tpu_rt_program_info_t info;
  desc_t *d;
  struct tpu_prog_rec *hnext;      /* by key */
  struct tpu_prog_rec *snext;      /* same structure hash bucket */
  struct tpu_prog_rec *headnext;   /* same head hash bucket */
};

typedef struct cause {
  uint64_t key;
  tpu_rt_recompile_cause_t c;
} cause_t;

static struct {
  pthread_mutex_t lock;
  tpu_rt_metrics_t m;
  int log;
  tpu_prog_rec_t **recs;
  int nrecs, cap;
  tpu_prog_rec_t *by_key[PROG_BUCKETS], *by_structure[PROG_BUCKETS], *by_head[PROG_BUCKETS];
  size_t desc_bytes;
  cause_t *causes;
  int ncauses;
  struct { uint64_t seq; tpu_prog_rec_t *rec; double issued; } ring[RING];
  double last_done;
  int building;        /* compiles and disk loads under way */
  double build_since;  /* when building went from 0 to 1 */
} M = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const cut_names[TPU_CUT_COUNT] = {
    "op", "host_read", "synchronize", "layer", "optimizer_step", "size_bound", "fallback", "compiled_graph",
    "collective", "loop", "wide_op", "other"};

const char *tpu_rt_cut_name(tpu_rt_cut_t cut) { return cut >= 0 && cut < TPU_CUT_COUNT ? cut_names[cut] : "?"; }

void tpu_rt_metrics_set_log(int flags) {
  pthread_mutex_lock(&M.lock);
  M.log = flags;
  pthread_mutex_unlock(&M.lock);
}

/* ---- counters ------------------------------------------------------------------ */

void metrics_transfer(tpu_metrics_transfer_t kind, int64_t bytes) {
  pthread_mutex_lock(&M.lock);
  switch (kind) {
    case TPU_XFER_TO_DEVICE: M.m.to_device++; M.m.to_device_bytes += bytes; break;
    case TPU_XFER_TO_HOST: M.m.to_host++; M.m.to_host_bytes += bytes; break;
    case TPU_XFER_DEVICE_COPY: M.m.device_copies++; M.m.device_copy_bytes += bytes; break;
  }
  pthread_mutex_unlock(&M.lock);
  if (tpu_rt_trace_on) {
    double now = tpu_clock_now();
    tpu_rt_trace_mark(kind == TPU_XFER_TO_DEVICE ? TPU_TRACE_TO_DEVICE
                      : kind == TPU_XFER_TO_HOST ? TPU_TRACE_TO_HOST : TPU_TRACE_DEVICE_COPY,
                      NULL, now, now, bytes);
  }
}

void metrics_host_wait(double seconds) {
  pthread_mutex_lock(&M.lock);
  M.m.host_waits++;
  M.m.host_wait_seconds += seconds;
  pthread_mutex_unlock(&M.lock);
  if (tpu_rt_trace_on) {
    double now = tpu_clock_now();
    tpu_rt_trace_mark(TPU_TRACE_HOST_WAIT, NULL, now - seconds, now, 0);
  }
}

void tpu_rt_metrics(tpu_rt_metrics_t *out) {
  pthread_mutex_lock(&M.lock);
  *out = M.m;
  if (M.building) out->build_wall_seconds += tpu_clock_now() - M.build_since;
  out->programs = M.nrecs;
  pthread_mutex_unlock(&M.lock);
}

void tpu_rt_metrics_reset(void) {
  pthread_mutex_lock(&M.lock);
  memset(&M.m, 0, sizeof(M.m));
  if (M.building) M.build_since = tpu_clock_now();
  for (int i = 0; i < M.nrecs; i++) {
    M.recs[i]->info.executions = 0;
    M.recs[i]->info.execute_seconds = 0;
  }
  for (int i = 0; i < M.ncauses; i++) M.causes[i].c.count = 0;
  pthread_mutex_unlock(&M.lock);
}

static tpu_prog_rec_t *find_locked(uint64_t key) {
  for (tpu_prog_rec_t *r = M.by_key[key % PROG_BUCKETS]; r; r = r->hnext)
    if (r->info.key == key) return r;
  return NULL;
}

void metrics_build_begin(void) {
  pthread_mutex_lock(&M.lock);
  if (M.building++ == 0) M.build_since = tpu_clock_now();
  pthread_mutex_unlock(&M.lock);
}

void metrics_build_end(void) {
  pthread_mutex_lock(&M.lock);
  if (M.building > 0 && --M.building == 0) M.m.build_wall_seconds += tpu_clock_now() - M.build_since;
  pthread_mutex_unlock(&M.lock);
}

/* ---- executions ------------------------------------------------------------------ */

void metrics_executed(uint64_t key, uint64_t seq, tpu_rt_cut_t cut, double issued) {
  pthread_mutex_lock(&M.lock);
  tpu_prog_rec_t *rec = find_locked(key);
  M.m.executions++;
  if (cut >= 0 && cut < TPU_CUT_COUNT) M.m.cuts[cut]++;
  if (rec) rec->info.executions++;
  M.ring[seq % RING].seq = seq;
  M.ring[seq % RING].rec = rec;
  M.ring[seq % RING].issued = issued;
  pthread_mutex_unlock(&M.lock);
}

void metrics_work_done(uint64_t seq, double t) {
  pthread_mutex_lock(&M.lock);
  if (M.ring[seq % RING].seq == seq) {
    double start = M.ring[seq % RING].issued;
    if (M.last_done > start) start = M.last_done;
    double span = t > start ? t - start : 0;
    M.m.execute_seconds += span;
    tpu_prog_rec_t *rec = M.ring[seq % RING].rec;
    if (rec) rec->info.execute_seconds += span;
    if (tpu_rt_trace_on && rec)
      trace_execute(-1, rec->info.key, seq, rec->info.name, rec->info.ops, start, t > start ? t : start);
    M.ring[seq % RING].seq = 0;
  }
  if (t > M.last_done) M.last_done = t;
  pthread_mutex_unlock(&M.lock);
}

/* ---- program records --------------------------------------------------------------- */

static bool is_plumbing(const char *rule) {
  return !strcmp(rule, "view_read") || !strcmp(rule, "view_write") || !strcmp(rule, "bitcast_flat") ||
         !strcmp(rule, "full") || !strcmp(rule, "identity");
}

/* "add", or "143 ops: mm+add+softmax+mul+..." (the distinct ops in order of
 * first appearance, view plumbing left out unless that is all there is). */
static void program_name(const tpu_graph_t *g, char *out, size_t n) {
  const char *seen[5];
  int nseen = 0, more = 0, real = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const char *r = g->nodes[i].rule->name;
    if (is_plumbing(r)) continue;
    real++;
    int k = 0;
    while (k < nseen && strcmp(seen[k], r)) k++;
    if (k < nseen) continue;
    if (nseen < 4) seen[nseen++] = r;
    else more = 1;
  }
  if (real == 0) {
    snprintf(out, n, "%s", g->nnodes ? g->nodes[g->nnodes - 1].rule->name : "?");
    return;
  }
  size_t k = 0;
  if (g->nnodes > 1 && real > 1) k += (size_t)snprintf(out + k, n - k, "%d ops: ", g->nnodes);
  for (int i = 0; i < nseen && k < n; i++) k += (size_t)snprintf(out + k, n - k, "%s%s", i ? "+" : "", seen[i]);
  if (more && k < n) snprintf(out + k, n - k, "+...");
}

static void desc_free(desc_t *d) {
  if (!d) return;
  free(d->inputs);
  free(d->first_use);
  free(d->rule);
  free(d->wiring);
  free(d->first_in);
  free(d->rule_name);
  free(d->nints);
  free(d->nfloats);
  free(d->attr_at);
  free(d->attrs);
  free(d);
}

static desc_t *desc_make(const tpu_graph_t *g, const int *live_node, const int *live_out, int nlive, int nchecks,
                         const int *alias) {
  desc_t *d = (desc_t *)calloc(1, sizeof(*d));
  if (!d) return NULL;
  int n = g->nnodes, ni = g->ninputs;
  program_name(g, d->name, sizeof(d->name));
  d->ops = n;
  d->ninputs_all = ni;
  d->nkept = nlive;
  pthread_mutex_lock(&M.lock);
  int full = M.desc_bytes < DESC_MAX_BYTES;
  pthread_mutex_unlock(&M.lock);
  if (!full) return d;
  d->has_graph = 1;
  size_t nattr = 0;
  for (int i = 0; i < n; i++) nattr += (size_t)(g->nodes[i].attrs.nints + g->nodes[i].attrs.nfloats);
  d->ninputs = ni;
  d->nnodes = n;
  d->inputs = (tpu_hlo_type_t *)malloc(sizeof(tpu_hlo_type_t) * (size_t)(ni + 1));
  d->first_use = (int *)malloc(sizeof(int) * (size_t)(ni + 1));
  d->rule = (int *)malloc(sizeof(int) * (size_t)(n + 1));
  d->wiring = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(n + 1));
  d->first_in = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
  d->rule_name = (const char **)malloc(sizeof(char *) * (size_t)(n + 1));
  d->nints = (int *)malloc(sizeof(int) * (size_t)(n + 1));
  d->nfloats = (int *)malloc(sizeof(int) * (size_t)(n + 1));
  d->attr_at = (int *)malloc(sizeof(int) * (size_t)(n + 1));
  d->attrs = (int64_t *)malloc(sizeof(int64_t) * (nattr + 1));
  if (!d->inputs || !d->first_use || !d->rule || !d->wiring || !d->first_in || !d->rule_name || !d->nints || !d->nfloats || !d->attr_at ||
      !d->attrs) {
    desc_free(d);
    d = (desc_t *)calloc(1, sizeof(*d)); /* the name and size only */
    if (d) {
      program_name(g, d->name, sizeof(d->name));
      d->ops = n;
      d->ninputs_all = ni;
      d->nkept = nlive;
    }
    return d;
  }
  d->bytes = sizeof(*d) + (sizeof(tpu_hlo_type_t) + sizeof(int)) * (size_t)ni +
             (5 * sizeof(int) + sizeof(char *) + 2 * sizeof(uint64_t)) * (size_t)n + sizeof(int64_t) * nattr;
  for (int i = 0; i < ni; i++) {
    d->inputs[i] = g->inputs[i]->type;
    d->first_use[i] = -1;
  }
  uint64_t s = tpu_hash_u64(TPU_HASH_SEED, (uint64_t)n), h = TPU_HASH_SEED;
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    const tpu_node_t *node = &g->nodes[i];
    d->rule[i] = tpu_op_rule_index(node->rule);
    d->rule_name[i] = node->rule->name;
    d->nints[i] = node->attrs.nints;
    d->nfloats[i] = node->attrs.nfloats;
    d->attr_at[i] = (int)at;
    for (int k = 0; k < node->attrs.nints; k++) d->attrs[at++] = node->attrs.ints[k];
    for (int k = 0; k < node->attrs.nfloats; k++) memcpy(&d->attrs[at++], &node->attrs.floats[k], 8);
    uint64_t rid = d->rule[i] >= 0 ? (uint64_t)d->rule[i] : (uint64_t)(uintptr_t)node->rule;
    s = tpu_hash_u64(tpu_hash_u64(s, rid), (uint64_t)node->nin);
    uint64_t w = tpu_hash_u64(TPU_HASH_SEED, (uint64_t)node->nin);
    for (int k = 0; k < node->nin; k++) {
      w = tpu_hash_u64(w, (uint64_t)(int64_t)node->in[k]);
      if (node->in[k] < 0 && d->first_use[-node->in[k] - 1] < 0) d->first_use[-node->in[k] - 1] = i;
    }
    d->wiring[i] = w;
    d->first_in[i] = node->nin ? node->in[0] : 0;
    s = tpu_hash_u64(s, w);
    if (i < HEAD_OPS) h = tpu_hash_u64(h, rid);
  }
  s = tpu_hash_u64(s, (uint64_t)ni);
  /* the results kept, the donations and the checks differ between
   * programs of one structure: told apart by the difference */
  uint64_t kept = TPU_HASH_SEED, donated = TPU_HASH_SEED;
  for (int i = 0; i < nlive; i++) kept = tpu_hash_u64(kept, (uint64_t)TPU_REF_NODE(live_node[i], live_out[i]));
  for (int i = 0; alias && i < ni; i++)
    if (alias[i] >= 0) {
      donated = tpu_hash_u64(tpu_hash_u64(donated, (uint64_t)i), (uint64_t)alias[i]);
      d->ndonated++;
    }
  d->kept = kept;
  d->nkept = nlive;
  d->donated = donated;
  d->nchecks = nchecks;
  d->structure = s;
  d->head = h;
  return d;
}

/* ---- differences ------------------------------------------------------------------ */

typedef struct diff {
  char *text;
  size_t cap, len;
  int shown, total;
  uint64_t key; /* what differs (positions, not values): the cause's identity */
} diff_t;

static void diff_add(diff_t *df, uint64_t what, const char *fmt, ...) {
  df->total++;
  df->key = tpu_hash_u64(df->key, what);
  if (df->shown >= 3 || df->len + 2 >= df->cap) return;
  if (df->shown) df->len += (size_t)snprintf(df->text + df->len, df->cap - df->len, "; ");
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(df->text + df->len, df->cap - df->len, fmt, ap);
  va_end(ap);
  if (k > 0) df->len += (size_t)k;
  if (df->len >= df->cap) df->len = df->cap - 1;
  df->shown++;
}

static const char *type_str(const tpu_hlo_type_t *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", tpu_dtype_name(t->dtype));
  for (int d = 0; d < t->rank && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)t->dims[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* The name of attribute k of op i: views have named ones. */
static void attr_name(const desc_t *d, int i, int k, char *buf, size_t n) {
  const char *r = d->rule_name[i];
  if ((!strcmp(r, "view_read") || !strcmp(r, "view_write")) && d->nints[i] > 0) {
    int64_t rank = d->attrs[d->attr_at[i]];
    if (k == 0) snprintf(buf, n, "rank");
    else if (k <= rank) snprintf(buf, n, "size[%d]", k - 1);
    else if (k <= 2 * rank) snprintf(buf, n, "stride[%d]", (int)(k - 1 - rank));
    else if (k == 2 * rank + 1) snprintf(buf, n, "offset");
    else snprintf(buf, n, "attribute %d", k);
    return;
  }
  snprintf(buf, n, k < d->nints[i] ? "attribute %d" : "float attribute %d", k < d->nints[i] ? k : k - d->nints[i]);
}

/* Differences of a (new) from b (earlier), same structure. */
static void diff_same_structure(const desc_t *a, const desc_t *b, diff_t *df) {
  char t1[96], t2[96];
  for (int i = 0; i < a->ninputs && i < b->ninputs; i++) {
    if (tpu_hlo_type_equal(&a->inputs[i], &b->inputs[i])) continue;
    int u = a->first_use[i];
    if (u >= 0)
      diff_add(df, 0x1000000u + (uint64_t)i, "input %d (of %s, op #%d): %s (was %s)", i, a->rule_name[u], u,
               type_str(&a->inputs[i], t1, sizeof(t1)), type_str(&b->inputs[i], t2, sizeof(t2)));
    else
      diff_add(df, 0x1000000u + (uint64_t)i, "input %d: %s (was %s)", i, type_str(&a->inputs[i], t1, sizeof(t1)),
               type_str(&b->inputs[i], t2, sizeof(t2)));
  }
  for (int i = 0; i < a->nnodes && i < b->nnodes; i++) {
    int na = a->nints[i] + a->nfloats[i], nb = b->nints[i] + b->nfloats[i];
    if (na != nb || a->nints[i] != b->nints[i]) {
      diff_add(df, 0x2000000u + (uint64_t)i, "%s (op #%d): %d attributes (was %d)", a->rule_name[i], i, na, nb);
      continue;
    }
    const int64_t *x = a->attrs + a->attr_at[i], *y = b->attrs + b->attr_at[i];
    for (int k = 0; k < na; k++) {
      if (x[k] == y[k]) continue;
      char nm[48];
      attr_name(a, i, k, nm, sizeof(nm));
      if (k < a->nints[i])
        diff_add(df, 0x3000000u + ((uint64_t)i << 8) + (uint64_t)k, "%s (op #%d) %s: %lld (was %lld)", a->rule_name[i],
                 i, nm, (long long)x[k], (long long)y[k]);
      else {
        double fx, fy;
        memcpy(&fx, &x[k], 8);
        memcpy(&fy, &y[k], 8);
        diff_add(df, 0x3000000u + ((uint64_t)i << 8) + (uint64_t)k, "%s (op #%d) %s: %g (was %g)", a->rule_name[i], i,
                 nm, fx, fy);
      }
    }
  }
  if (a->kept != b->kept)
    diff_add(df, 0x4100000u, "results kept: %d of the graph's values (was %d, or others)", a->nkept, b->nkept);
  if (a->donated != b->donated)
    diff_add(df, 0x4200000u, "donated inputs: %d (was %d, or others): an input still held elsewhere is copied, "
             "not updated in place", a->ndonated, b->ndonated);
  if (a->nchecks != b->nchecks)
    diff_add(df, 0x4300000u, "device-side checks: %d (was %d)", a->nchecks, b->nchecks);
  if (df->total == 0) diff_add(df, 0x4000000u, "same graph and types (a program evicted from the cache)");
}

static int common_prefix(const desc_t *a, const desc_t *b) {
  int k = 0;
  while (k < a->nnodes && k < b->nnodes && a->rule[k] == b->rule[k] && a->rule_name[k] == b->rule_name[k]) k++;
  return k;
}

/* Finds the earlier program nearest to d and describes the difference;
 * returns 0 when there is none (a first compile). */
static int find_cause(const desc_t *d, diff_t *df) {
  tpu_prog_rec_t *best = NULL;
  int best_n = 1 << 30;
  for (tpu_prog_rec_t *r = M.by_structure[d->structure % PROG_BUCKETS]; r; r = r->snext) {
    if (!r->d || r->d->structure != d->structure) continue;
    char scratch[8];
    diff_t t = {scratch, sizeof(scratch), 0, 0, 0, 0};
    diff_same_structure(d, r->d, &t);
    if (t.total < best_n) {
      best_n = t.total;
      best = r;
    }
  }
  if (best) {
    diff_same_structure(d, best->d, df);
    return 1;
  }
  int best_p = -1;
  for (tpu_prog_rec_t *r = M.by_head[d->head % PROG_BUCKETS]; r; r = r->headnext) {
    if (!r->d || r->d->head != d->head) continue;
    int p = common_prefix(d, r->d);
    if (p > best_p) {
      best_p = p;
      best = r;
    }
  }
  if (!best) return 0;
  const desc_t *b = best->d;
  if (best_p < d->nnodes && best_p < b->nnodes)
    diff_add(df, 0x5000000u + (uint64_t)best_p, "graph structure: %d ops (was %d), first different op #%d: %s (was %s)",
             d->nnodes, b->nnodes, best_p, d->rule_name[best_p], b->rule_name[best_p]);
  else if (d->nnodes != b->nnodes)
    diff_add(df, 0x5800000u + (uint64_t)(d->nnodes > b->nnodes), "graph structure: %d ops (was %d), the same first %d",
             d->nnodes, b->nnodes, best_p);
  else {
    int k = 0;
    while (k < d->nnodes && d->wiring[k] == b->wiring[k]) k++;
    if (k < d->nnodes)
      diff_add(df, 0x6000000u + (uint64_t)k,
               "graph structure: the same %d ops, op #%d (%s) reads other values (a graph input used twice, or "
               "two equal numbers made one input)", d->nnodes, k, d->rule_name[k]);
    else
      diff_add(df, 0x6000000u, "graph structure: the same %d ops, wired differently", d->nnodes);
  }
  return 1;
}

static void cause_count(uint64_t key, const char *text) {
  for (int i = 0; i < M.ncauses; i++)
    if (M.causes[i].key == key) {
      M.causes[i].c.count++;
      return;
    }
  if (M.ncauses == CAUSE_MAX) return;
  if (!M.causes) {
    M.causes = (cause_t *)calloc(CAUSE_MAX, sizeof(cause_t));
    if (!M.causes) return;
  }
  cause_t *c = &M.causes[M.ncauses++];
  c->key = key;
  c->c.count = 1;
  snprintf(c->c.text, sizeof(c->c.text), "%s", text);
  if (M.log & TPU_LOG_RECOMPILES)
    fprintf(stderr, "torch_tpu recompile: %s (further recompiles of this cause are only counted: "
                    "torch.tpu.metrics())\n", text);
}

tpu_program_desc_t *metrics_describe(const tpu_graph_t *g, const int *live_node, const int *live_out, int nlive,
                                     int nchecks, const int *alias) {
  return desc_make(g, live_node, live_out, nlive, nchecks, alias);
}

void metrics_desc_free(tpu_program_desc_t *d) { desc_free(d); }
const char *metrics_desc_name(const tpu_program_desc_t *d) { return d ? d->name : NULL; }

void metrics_program_made(uint64_t key, tpu_program_desc_t *d, tpu_rt_program_source_t source, double seconds) {
  if (dump_dir())
    dump_program_meta(key, d ? d->name : "?", d ? d->ops : 0, d && d->has_graph ? d->rule_name : NULL,
                      d && d->has_graph ? d->nnodes : 0, source == TPU_PROGRAM_COMPILED ? "compiled" : "disk", seconds);
  if (tpu_rt_trace_on) trace_built(key, d ? d->name : NULL, d ? d->ops : 0, source == TPU_PROGRAM_DISK, seconds);
  pthread_mutex_lock(&M.lock);
  if (source == TPU_PROGRAM_COMPILED) {
    M.m.compiles++;
    M.m.compile_seconds += seconds;
  } else {
    M.m.disk_loads++;
    M.m.disk_load_seconds += seconds;
  }
  tpu_prog_rec_t *r = find_locked(key); /* compiled again after an eviction */
  if (!r && d && M.nrecs < PROG_MAX) {
    if (M.nrecs == M.cap) {
      int cap = M.cap ? M.cap * 2 : 256;
      tpu_prog_rec_t **n = (tpu_prog_rec_t **)realloc(M.recs, sizeof(*n) * (size_t)cap);
      if (n) {
        M.recs = n;
        M.cap = cap;
      }
    }
    if (M.nrecs < M.cap) r = (tpu_prog_rec_t *)calloc(1, sizeof(*r));
    if (r) {
      r->info.key = key;
      snprintf(r->info.name, sizeof(r->info.name), "%s", d->name);
      r->info.ops = d->ops;
      r->info.inputs = d->ninputs_all;
      r->info.outputs = d->nkept;
      r->hnext = M.by_key[key % PROG_BUCKETS];
      M.by_key[key % PROG_BUCKETS] = r;
      M.recs[M.nrecs++] = r;
    }
  }
  if (r) {
    r->info.source = source;
    r->info.seconds += seconds;
  }
  if (d && d->has_graph) {
    /* room for the "; ..." suffix in info.cause */
    char text[sizeof(((tpu_rt_program_info_t *)0)->cause) - sizeof("; ...") + 1];
    diff_t df = {text, sizeof(text), 0, 0, 0, 0};
    text[0] = 0;
    if (find_cause(d, &df)) {
      M.m.recompiles++;
      char msg[448];
      const char *name = d->name;
      snprintf(msg, sizeof(msg), "%s: %s%s", name, text, df.total > df.shown ? "; ..." : "");
      if (r) {
        r->info.recompile = 1;
        snprintf(r->info.cause, sizeof(r->info.cause), "%s%s", text, df.total > df.shown ? "; ..." : "");
      }
      cause_count(tpu_hash_bytes(df.key, name, strlen(name)), msg);
    }
  }
  if (M.log & TPU_LOG_COMPILES)
    fprintf(stderr, "torch_tpu %s: %s [%d ops, %d inputs] in %.1f ms%s%s\n",
            source == TPU_PROGRAM_COMPILED ? "compiled" : "loaded from disk", d ? d->name : "?", d ? d->ops : 0,
            d ? d->ninputs_all : 0, seconds * 1e3, r && r->info.recompile ? ", recompile: " : "",
            r && r->info.recompile ? r->info.cause : "");
  if (d && d->has_graph && r && !r->d) {
    r->d = d;
    M.desc_bytes += d->bytes;
    r->snext = M.by_structure[d->structure % PROG_BUCKETS];
    M.by_structure[d->structure % PROG_BUCKETS] = r;
    r->headnext = M.by_head[d->head % PROG_BUCKETS];
    M.by_head[d->head % PROG_BUCKETS] = r;
  } else {
    desc_free(d);
  }
  pthread_mutex_unlock(&M.lock);
}

void metrics_program_name(uint64_t key, char *out_name, size_t n, int *out_ops) {
  pthread_mutex_lock(&M.lock);
  tpu_prog_rec_t *r = find_locked(key);
  snprintf(out_name, n, "%s", r ? r->info.name : "");
  if (r && out_ops) *out_ops = r->info.ops;
  pthread_mutex_unlock(&M.lock);
}

int tpu_rt_programs(int first, tpu_rt_program_info_t *out, int max) {
  pthread_mutex_lock(&M.lock);
  int n = 0;
  for (int i = first < 0 ? 0 : first; i < M.nrecs && n < max; i++) out[n++] = M.recs[i]->info;
  pthread_mutex_unlock(&M.lock);
  return n;
}

int tpu_rt_recompile_causes(tpu_rt_recompile_cause_t *out, int max) {
  pthread_mutex_lock(&M.lock);
  int n = 0;
  for (int i = 0; i < M.ncauses && n < max; i++) out[n++] = M.causes[i].c;
  pthread_mutex_unlock(&M.lock);
  return n;
}

void metrics_shutdown(void) {
  pthread_mutex_lock(&M.lock);
  for (int i = 0; i < M.nrecs; i++) {
    desc_free(M.recs[i]->d);
    free(M.recs[i]);
  }
  free(M.recs);
  free(M.causes);
  M.recs = NULL;
  M.causes = NULL;
  M.nrecs = M.cap = M.ncauses = 0;
  M.desc_bytes = 0;
  memset(M.by_key, 0, sizeof(M.by_key));
  memset(M.by_structure, 0, sizeof(M.by_structure));
  memset(M.by_head, 0, sizeof(M.by_head));
  memset(&M.m, 0, sizeof(M.m));
  memset(M.ring, 0, sizeof(M.ring));
  pthread_mutex_unlock(&M.lock);
}
