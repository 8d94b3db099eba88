/* graph.c - the pending graphs, one per device.
 *
 * An op appends a node to its device's graph: a rule, references to its
 * inputs (graph inputs = materialised values, or outputs of earlier nodes)
 * and its attrs.  Output types come from a signature cache (rule + attrs +
 * input types), filled by lowering the op alone once, which also validates
 * it, so a bad op raises at the op even in fused mode.  The graph's
 * structural hash (rules, attrs, input types, wiring) keys the program
 * cache; graph_build_text turns a graph into one StableHLO program.
 * Devices have separate graphs: work on tpu:1 never flushes tpu:0's.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/hash.h"
#include "runtime/errors.h"
#include "runtime/runtime_internal.h"

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

tpu_graph_t *graph_of(int device) {
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES) device = 0;
  tpu_graph_t *g = &R.graphs[device];
  if (!g->ready) {
    tpu_arena_init(&g->arena, 65536);
    g->epoch = 1;
    g->hash = TPU_HASH_SEED;
    g->device = device;
    g->ready = true;
  }
  return g;
}

void graph_discard(tpu_graph_t *g) {
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
  g->cut_due = 0;
  g->hash = TPU_HASH_SEED;
  g->epoch++;
  if (g->ready) tpu_arena_reset(&g->arena);
}

void graph_free(tpu_graph_t *g) {
  if (!g->ready) return;
  graph_discard(g);
  loop_free(g);
  free(g->inputs);
  free(g->nodes);
  tpu_arena_free(&g->arena);
  memset(g, 0, sizeof(*g));
}

/* Appends v as a new input of g (retained), whether or not it is one already. */
static tpu_status_t graph_new_input(tpu_graph_t *g, tpu_value_t *v, tpu_ref_t *out) {
  if (g->ninputs == g->cap_inputs) {
    int cap = g->cap_inputs ? g->cap_inputs * 2 : 64;
    tpu_value_t **n = (tpu_value_t **)realloc(g->inputs, sizeof(*n) * (size_t)cap);
    if (!n) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "graph: out of memory");
    g->inputs = n;
    g->cap_inputs = cap;
  }
  value_retain(v);
  g->inputs[g->ninputs++] = v;
  g->hash = hash_type(tpu_hash_u64(g->hash, 0x1A), &v->type);
  *out = TPU_REF_INPUT(g->ninputs - 1);
  return NULL;
}

static tpu_status_t graph_ref(tpu_graph_t *g, tpu_value_t *v, tpu_ref_t *out) {
  if (!v->buffer && !v->launch) { /* pending here (a value in flight is an input, as a materialised one) */
    if (v->node < 0 || v->node >= g->nnodes || v->device != g->device)
      return tpu_status_make(TPU_FAILED_PRECONDITION, "tensor value was never computed (%s)", launch_last_error());
    *out = TPU_REF_NODE(v->node, v->out_index);
    return NULL;
  }
  if (v->in_epoch == g->epoch) {
    *out = TPU_REF_INPUT(v->in_index);
    return NULL;
  }
  TPU_PROPAGATE(graph_new_input(g, v, out));
  v->in_epoch = g->epoch;
  v->in_index = g->ninputs - 1;
  return NULL;
}

static const tpu_hlo_type_t *ref_type(tpu_graph_t *g, tpu_ref_t r) {
  if (r < 0) return &g->inputs[-r - 1]->type;
  return &g->nodes[r / TPU_OP_MAX_OUTPUTS].outs[r % TPU_OP_MAX_OUTPUTS]->type;
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
  s->nchecks = R.no_device_checks ? 0 : nchecks;
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

void sigs_free(void) {
  for (int b = 0; b < TPU_SIG_BUCKETS; b++) {
    tpu_sig_t *s = R.sigs[b];
    while (s) {
      tpu_sig_t *n = s->next;
      free(s);
      s = n;
    }
    R.sigs[b] = NULL;
  }
  R.nsigs = 0;
}

tpu_status_t graph_add_node(tpu_graph_t *g, const tpu_op_rule_t *rule, const tpu_ref_t *in, int nin,
                            const tpu_op_attrs_t *attrs, tpu_node_t **out_node) {
  if (nin > TPU_OP_MAX_INPUTS) return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: too many inputs (%d)", rule->name, nin);
  const tpu_hlo_type_t *types[TPU_OP_MAX_INPUTS];
  for (int i = 0; i < nin; i++) types[i] = ref_type(g, in[i]);
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
    tpu_value_t *v = value_new(&sig->types[o], g->device);
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
  if (tpu_rt_trace_on && g->nnodes == 0) {
    g->rec_start = tpu_clock_now();
    g->rec_tag = tpu_rt_trace_tag();
  }
  g->nnodes++;
  R.ops_recorded++;
  loop_observe(g, node, sig->key);
  *out_node = node;
  return NULL;
}

void graph_truncate(tpu_graph_t *g, int nnodes) {
  while (g->nnodes > nnodes) {
    tpu_node_t *node = &g->nodes[--g->nnodes];
    for (int o = 0; o < node->nout; o++) {
      node->outs[o]->node = -1;
      value_release(node->outs[o]);
    }
  }
}

/* A storage with no value reads as zeros: a fill node in this graph (not
 * kept by the storage, so a failed op leaves the storage as it was). */
static tpu_status_t storage_zeros_ref(tpu_graph_t *g, tpu_storage_t *s, tpu_ref_t *out,
                                      const tpu_hlo_type_t **out_type) {
  tpu_rt_input_t zero;
  memset(&zero, 0, sizeof(zero));
  zero.scalar_dtype = TPU_F32;
  tpu_ref_t z;
  TPU_PROPAGATE(input_ref(g, &zero, &z));
  int64_t ints[3] = {s->dtype, 1, s->numel};
  tpu_op_attrs_t a = {3, ints, 0, NULL};
  static const tpu_op_rule_t *full;
  if (!full) full = tpu_op_rule_find("full");
  tpu_node_t *node;
  TPU_PROPAGATE(graph_add_node(g, full, &z, 1, &a, &node));
  *out = TPU_REF_NODE(g->nnodes - 1, 0);
  *out_type = &node->outs[0]->type;
  return NULL;
}

tpu_status_t storage_ref(tpu_graph_t *g, tpu_storage_t *s, tpu_dtype_t dtype, tpu_ref_t *out,
                         const tpu_hlo_type_t **out_type) {
  tpu_ref_t base;
  const tpu_hlo_type_t *base_type;
  if (s->value) {
    TPU_PROPAGATE(graph_ref(g, s->value, &base));
    base_type = &s->value->type;
  } else {
    TPU_PROPAGATE(storage_zeros_ref(g, s, &base, &base_type));
  }
  if (dtype == base_type->dtype) {
    *out = base;
    *out_type = base_type;
    return NULL;
  }
  int64_t code = dtype;
  tpu_op_attrs_t a = {1, &code, 0, NULL};
  tpu_node_t *node;
  TPU_PROPAGATE(graph_add_node(g, tpu_op_rule_find("bitcast_flat"), &base, 1, &a, &node));
  *out = TPU_REF_NODE(g->nnodes - 1, 0);
  *out_type = &node->outs[0]->type;
  return NULL;
}

tpu_status_t input_ref(tpu_graph_t *g, const tpu_rt_input_t *in, tpu_ref_t *out) {
  if (!in->storage) {
    /* every use of a number is an input of its own, whatever its value and
     * whatever the scalar cache holds: two numbers that happen to be equal
     * (a view's offset and a constant, at one step of a loop) never make
     * another program */
    tpu_value_t *v = NULL;
    TPU_PROPAGATE(scalar_value(in, g->device, &v));
    tpu_status_t st = graph_new_input(g, v, out);
    value_release(v);
    return st;
  }
  tpu_storage_t *s = in->storage;
  TPU_PROPAGATE(check_view(s, &in->view));
  tpu_ref_t base;
  const tpu_hlo_type_t *bt;
  TPU_PROPAGATE(storage_ref(g, s, in->view.dtype, &base, &bt));
  if (view_is_identity(&in->view, bt)) {
    *out = base;
    return NULL;
  }
  tpu_node_t *node;
  TPU_PROPAGATE(view_node(g, &base, 1, &in->view, &node));
  *out = TPU_REF_NODE(g->nnodes - 1, 0);
  return NULL;
}

tpu_status_t graph_build_text(tpu_graph_t *g, const int *live_node, const int *live_out, int nlive, int nchecks,
                              const int *alias, tpu_hlo_module_t **out_m, const char **out_text, size_t *out_len) {
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
      for (int i = 0; alias && i < g->ninputs; i++)
        if (alias[i] >= 0) tpu_hlo_func_alias(f, i, alias[i]);
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
