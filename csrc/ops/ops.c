/* ops.c - the rule registry (the family tables, looked up by name and by
 * address) and the rule context: attrs, inputs, outputs, failure. */
#include "ops/ops.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tpu_op_rule_t *const tpu_rule_tables[] = {
    tpu_rules_core,        tpu_rules_factory,     tpu_rules_elementwise, tpu_rules_math,
    tpu_rules_activation,  tpu_rules_reduce,      tpu_rules_linalg,      tpu_rules_convolution,
    tpu_rules_pooling,     tpu_rules_normalization, tpu_rules_embedding, tpu_rules_loss,
    tpu_rules_upsample,    tpu_rules_padding,     tpu_rules_index,       tpu_rules_random,
    tpu_rules_optim,       tpu_rules_foreach,     tpu_rules_search,
    tpu_rules_rnn,         tpu_rules_rnn_layer,
    tpu_rules_nonzero,     tpu_rules_cholesky,    tpu_rules_fft,         tpu_rules_complex,
    tpu_rules_lu,          tpu_rules_custom,
};

#define TPU_RULE_MAX 1024
#define TPU_RULE_HASH 2048
static const tpu_op_rule_t *tpu_rules[TPU_RULE_MAX];
static int tpu_nrules = -1;
static int tpu_rule_slots[TPU_RULE_HASH]; /* by name: index+1 into tpu_rules; 0 = empty */
static int tpu_rule_ptr_slots[TPU_RULE_HASH]; /* by address: index+1 into tpu_rules */

static unsigned tpu_name_hash(const char *s) {
  unsigned h = 2166136261u;
  while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
  return h;
}

static unsigned tpu_ptr_hash(const tpu_op_rule_t *r) {
  uint64_t x = (uint64_t)(uintptr_t)r;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (unsigned)x;
}

static void tpu_rules_init(void) {
  /* Called under the runtime lock or from a single thread at import; the
   * table is immutable afterwards. */
  int n = 0;
  for (size_t t = 0; t < sizeof(tpu_rule_tables) / sizeof(tpu_rule_tables[0]); t++) {
    for (const tpu_op_rule_t *r = tpu_rule_tables[t]; r->name; r++) {
      if (n >= TPU_RULE_MAX) break;
      unsigned h = tpu_name_hash(r->name) & (TPU_RULE_HASH - 1);
      int dup = 0;
      while (tpu_rule_slots[h]) {
        if (!strcmp(tpu_rules[tpu_rule_slots[h] - 1]->name, r->name)) { dup = 1; break; }
        h = (h + 1) & (TPU_RULE_HASH - 1);
      }
      if (dup) {
        fprintf(stderr, "torch_tpu: duplicate lowering rule '%s' ignored\n", r->name);
        continue;
      }
      tpu_rules[n] = r;
      tpu_rule_slots[h] = n + 1;
      unsigned p = tpu_ptr_hash(r) & (TPU_RULE_HASH - 1);
      while (tpu_rule_ptr_slots[p]) p = (p + 1) & (TPU_RULE_HASH - 1);
      tpu_rule_ptr_slots[p] = n + 1;
      n++;
    }
  }
  tpu_nrules = n;
}

static bool op_target_cpu;

void tpu_op_set_target_cpu(bool cpu) { op_target_cpu = cpu; }

bool tpu_op_target_cpu(void) { return op_target_cpu; }

const tpu_op_rule_t *tpu_op_rule_find(const char *name) {
  if (tpu_nrules < 0) tpu_rules_init();
  unsigned h = tpu_name_hash(name) & (TPU_RULE_HASH - 1);
  while (tpu_rule_slots[h]) {
    const tpu_op_rule_t *r = tpu_rules[tpu_rule_slots[h] - 1];
    if (!strcmp(r->name, name)) return r;
    h = (h + 1) & (TPU_RULE_HASH - 1);
  }
  return NULL;
}

int tpu_op_rule_count(void) {
  if (tpu_nrules < 0) tpu_rules_init();
  return tpu_nrules;
}

const tpu_op_rule_t *tpu_op_rule_at(int i) {
  if (tpu_nrules < 0) tpu_rules_init();
  return (i >= 0 && i < tpu_nrules) ? tpu_rules[i] : NULL;
}

/* Every node of a pending graph hashes its rule's index: one probe of the
 * address table, not a scan over the rules. */
int tpu_op_rule_index(const tpu_op_rule_t *rule) {
  if (tpu_nrules < 0) tpu_rules_init();
  unsigned p = tpu_ptr_hash(rule) & (TPU_RULE_HASH - 1);
  while (tpu_rule_ptr_slots[p]) {
    int i = tpu_rule_ptr_slots[p] - 1;
    if (tpu_rules[i] == rule) return i;
    p = (p + 1) & (TPU_RULE_HASH - 1);
  }
  return -1;
}

tpu_status_t tpu_op_lower(const tpu_op_rule_t *rule, tpu_hlo_func_t *f, const tpu_hlo_value_t *in,
                          int nin, const tpu_op_attrs_t *attrs, tpu_hlo_value_t *out, int *out_n) {
  return tpu_op_lower_checked(rule, f, in, nin, attrs, NULL, out, out_n);
}

tpu_status_t tpu_op_lower_checked(const tpu_op_rule_t *rule, tpu_hlo_func_t *f, const tpu_hlo_value_t *in,
                                  int nin, const tpu_op_attrs_t *attrs, tpu_op_checks_t *checks,
                                  tpu_hlo_value_t *out, int *out_n) {
  *out_n = 0;
  if (nin < rule->min_inputs || (rule->max_inputs >= 0 && nin > rule->max_inputs)) {
    return tpu_status_make(TPU_INVALID_ARGUMENT, "%s: expected %d%s inputs, got %d", rule->name,
                           rule->min_inputs, rule->max_inputs == rule->min_inputs ? "" : "+", nin);
  }
  for (int i = 0; i < nin; i++) {
    if (in[i] < 0) {
      tpu_status_t st = tpu_hlo_func_status(f);
      return st ? tpu_status_make(tpu_status_code(st), "%s", tpu_status_message(st))
                : tpu_status_make(TPU_INTERNAL, "%s: input %d is not a value", rule->name, i);
    }
  }
  static const tpu_op_attrs_t no_attrs = {0, NULL, 0, NULL};
  tpu_op_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.f = f;
  c.name = rule->name;
  c.in = in;
  c.nin = nin;
  c.attrs = attrs ? attrs : &no_attrs;
  c.checks = checks;
  int nchecks0 = checks ? checks->n : 0;
  rule->lower(&c);
  tpu_status_t st = tpu_hlo_func_status(f);
  if (!st && c.nout <= 0) st = tpu_status_make(TPU_INTERNAL, "%s: rule produced no output", rule->name);
  else if (st) st = tpu_status_make(tpu_status_code(st), "%s", tpu_status_message(st));
  for (int i = 0; !st && i < c.nout; i++)
    if (c.out[i] < 0) st = tpu_status_make(TPU_INTERNAL, "%s: output %d missing", rule->name, i);
  if (st) {
    if (checks) checks->n = nchecks0;
    return st;
  }
  for (int i = 0; i < c.nout; i++) out[i] = c.out[i];
  *out_n = c.nout;
  return NULL;
}

void tpu_op_fail(tpu_op_ctx_t *c, tpu_code_t code, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  tpu_hlo_fail(c->f, code, "%s", buf);
}

int64_t tpu_op_int(tpu_op_ctx_t *c, int i) {
  if (i < 0 || i >= c->attrs->nints) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: missing integer attribute %d (have %d)", c->name, i,
                c->attrs->nints);
    return 0;
  }
  return c->attrs->ints[i];
}

double tpu_op_float(tpu_op_ctx_t *c, int i) {
  if (i < 0 || i >= c->attrs->nfloats) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: missing float attribute %d (have %d)", c->name, i,
                c->attrs->nfloats);
    return 0;
  }
  return c->attrs->floats[i];
}

int tpu_op_nints(const tpu_op_ctx_t *c) { return c->attrs->nints; }

const tpu_hlo_type_t *tpu_op_in_type(tpu_op_ctx_t *c, int i) { return tpu_hlo_type_of(c->f, c->in[i]); }

void tpu_op_set_outputs(tpu_op_ctx_t *c, int n, const tpu_hlo_value_t *vals) {
  if (n > TPU_OP_MAX_OUTPUTS) {
    tpu_op_fail(c, TPU_INTERNAL, "%s: too many outputs (%d)", c->name, n);
    return;
  }
  for (int i = 0; i < n; i++) c->out[i] = vals[i];
  c->nout = n;
}

void tpu_op_set_output(tpu_op_ctx_t *c, tpu_hlo_value_t v) { tpu_op_set_outputs(c, 1, &v); }

int tpu_op_broadcast_shape(tpu_op_ctx_t *c, const tpu_hlo_value_t *vals, int n, int64_t *out_dims) {
  int rank = 0;
  for (int i = 0; i < n; i++) {
    const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, vals[i]);
    if (!t) return -1;
    if (t->rank > rank) rank = t->rank;
  }
  for (int d = 0; d < rank; d++) out_dims[d] = 1;
  for (int i = 0; i < n; i++) {
    const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, vals[i]);
    for (int d = 0; d < t->rank; d++) {
      int od = rank - t->rank + d;
      int64_t a = out_dims[od], b = t->dims[d];
      if (a == b || b == 1) continue;
      if (a == 1) {
        out_dims[od] = b;
        continue;
      }
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                  "non-singleton dimension %d",
                  c->name, (long long)a, (long long)b, od);
      return -1;
    }
  }
  return rank;
}

int64_t tpu_op_dim(tpu_op_ctx_t *c, int64_t dim, int rank) {
  int64_t r = rank > 0 ? rank : 1;
  if (dim < -r || dim >= r) {
    tpu_op_fail(c, TPU_OUT_OF_RANGE,
                "%s: Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                c->name, (long long)-r, (long long)(r - 1), (long long)dim);
    return 0;
  }
  return dim < 0 ? dim + r : dim;
}

tpu_hlo_type_t tpu_op_type(tpu_op_ctx_t *c, tpu_hlo_value_t v) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, v);
  if (t) return *t;
  tpu_hlo_type_t z;
  memset(&z, 0, sizeof z);
  return z;
}

const char *tpu_op_shape_str(const tpu_hlo_type_t *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}


/* ---- device-side checks -------------------------------------------------------- */

void tpu_op_checks_free(tpu_op_checks_t *cs) {
  free(cs->v);
  cs->v = NULL;
  cs->n = cs->cap = 0;
}

static void tpu_op_check_add(tpu_op_ctx_t *c, tpu_hlo_value_t ok, tpu_hlo_value_t payload, tpu_code_t code,
                             const char *fmt, va_list ap) {
  tpu_hlo_func_t *f = c->f;
  tpu_op_checks_t *cs = c->checks;
  /* ok: all elements */
  tpu_hlo_type_t ot = tpu_op_type(c, ok);
  if (ot.dtype != TPU_PRED) {
    tpu_op_fail(c, TPU_INTERNAL, "%s: a check's condition must be bool, got %s", c->name, tpu_dtype_name(ot.dtype));
    return;
  }
  if (ot.rank > 0) {
    int64_t dims[TPU_MAX_RANK];
    for (int d = 0; d < ot.rank; d++) dims[d] = d;
    ok = tpu_hlo_reduce(f, ok, tpu_hlo_scalar(f, TPU_PRED, 1), dims, ot.rank, "and");
  }
  if (payload == TPU_HLO_NONE) {
    payload = tpu_hlo_scalar(f, TPU_S64, 0);
  } else {
    tpu_hlo_type_t pt = tpu_op_type(c, payload);
    if (pt.rank != 0 || !(tpu_dtype_is_int(pt.dtype) || pt.dtype == TPU_PRED)) {
      tpu_op_fail(c, TPU_INTERNAL, "%s: a check's payload must be a 0-d integer", c->name);
      return;
    }
    payload = tpu_hlo_cast(f, payload, TPU_S64);
  }
  if (ok < 0 || payload < 0) return; /* the function's sticky error says why */
  if (cs->n == cs->cap) {
    int cap = cs->cap ? cs->cap * 2 : 8;
    tpu_op_check_t *v = (tpu_op_check_t *)realloc(cs->v, sizeof(*v) * (size_t)cap);
    if (!v) {
      tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name);
      return;
    }
    cs->v = v;
    cs->cap = cap;
  }
  tpu_op_check_t *k = &cs->v[cs->n++];
  k->ok = ok;
  k->payload = payload;
  k->code = code;
  vsnprintf(k->msg, sizeof(k->msg), fmt, ap);
}

void tpu_op_check(tpu_op_ctx_t *c, tpu_hlo_value_t ok, tpu_hlo_value_t payload, tpu_code_t code, const char *fmt,
                  ...) {
  if (!c->checks) return;
  va_list ap;
  va_start(ap, fmt);
  tpu_op_check_add(c, ok, payload, code, fmt, ap);
  va_end(ap);
}

void tpu_op_check_index(tpu_op_ctx_t *c, tpu_hlo_value_t idx, int64_t lo, int64_t hi, tpu_code_t code,
                        const char *fmt, ...) {
  if (!c->checks) return;
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, idx);
  if (!tpu_dtype_is_int(t.dtype)) {
    tpu_op_fail(c, TPU_INTERNAL, "%s: an index check needs an integer index, got %s", c->name,
                tpu_dtype_name(t.dtype));
    return;
  }
  int64_t n = tpu_hlo_type_numel(&t);
  if (n == 0) return;
  /* flat s64 view of the indices */
  tpu_hlo_value_t i = tpu_hlo_reshape(f, tpu_hlo_cast(f, idx, TPU_S64), 1, &n);
  tpu_hlo_type_t ft = tpu_hlo_type_make(TPU_S64, 1, &n);
  tpu_hlo_value_t bad = tpu_hlo_binary(f, "or", tpu_hlo_compare(f, "LT", i, tpu_hlo_constant_i64(f, ft, lo)),
                                       tpu_hlo_compare(f, "GE", i, tpu_hlo_constant_i64(f, ft, hi)));
  /* one reduction gives both: the position of the first bad index (n when
   * none); the payload is the index there (dynamic_slice clamps n to n-1) */
  tpu_hlo_value_t pos = tpu_hlo_select(f, bad, tpu_hlo_iota(f, ft, 0), tpu_hlo_constant_i64(f, ft, n));
  int64_t dim0 = 0, one = 1;
  tpu_hlo_value_t first = tpu_hlo_reduce(f, pos, tpu_hlo_constant_i64(f, tpu_hlo_type_scalar(TPU_S64), n), &dim0, 1, "minimum");
  tpu_hlo_value_t payload = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, i, &first, &one), 0, NULL);
  tpu_hlo_value_t ok = tpu_hlo_compare(f, "EQ", first, tpu_hlo_constant_i64(f, tpu_hlo_type_scalar(TPU_S64), n));
  va_list ap;
  va_start(ap, fmt);
  tpu_op_check_add(c, ok, payload, code, fmt, ap);
  va_end(ap);
}

void tpu_op_check_nonzero(tpu_op_ctx_t *c, tpu_hlo_value_t divisor, const char *fmt, ...) {
  if (!c->checks) return;
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, divisor);
  if (!tpu_dtype_is_int(t.dtype) || tpu_hlo_type_numel(&t) == 0) return;
  tpu_hlo_value_t ok = tpu_hlo_compare(f, "NE", divisor, tpu_hlo_constant(f, t, 0));
  va_list ap;
  va_start(ap, fmt);
  tpu_op_check_add(c, ok, TPU_HLO_NONE, TPU_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
}
