/* factory.c - tensors made from nothing but attributes and scalars: full
 * (which also makes empty tensors), arange, eye, linspace / logspace.  Start,
 * end, step and fill values are 0-d runtime inputs (a new value never
 * recompiles); sizes are attributes.
 */
#include <math.h>
#include <stdint.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* full: in[0] 0-d fill value (runtime scalar); ints = [dtype, rank, dims...]. */
static void rule_full(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);
  int64_t rank = tpu_op_int(c, 1);
  if (rank < 0 || rank > TPU_MAX_RANK || tpu_op_nints(c) < 2 + rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "full: bad shape attributes");
    return;
  }
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    dims[i] = tpu_op_int(c, 2 + i);
    if (dims[i] < 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "full: Trying to create tensor with negative dimension %lld",
                  (long long)dims[i]);
      return;
    }
  }
  tpu_hlo_value_t v = c->in[0];
  if (dt == TPU_PRED) {
    const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, v);
    if (t && t->dtype != TPU_PRED) v = tpu_hlo_compare(c->f, "NE", v, tpu_hlo_constant(c->f, *t, 0));
  } else {
    v = tpu_hlo_cast(c->f, v, dt);
  }
  tpu_hlo_type_t out = tpu_hlo_type_make(dt, (int)rank, dims);
  tpu_op_set_output(c, tpu_hlo_broadcast_in_dim(c->f, v, out, NULL));

}

/* arange: in = [start, step] (0-d runtime scalars); ints = [dtype, n].
 * start + i * step computed in the scalars' type (f64 as PyTorch's CPU
 * kernel does where the platform has it; s64 for integers), then converted. */
static void rule_arange(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);
  int64_t n = tpu_op_int(c, 1);
  if (n < 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "arange: negative length %lld", (long long)n);
    return;
  }
  const tpu_hlo_type_t *st = tpu_hlo_type_of(f, c->in[0]);
  tpu_dtype_t ct = tpu_dtype_is_float(st->dtype) ? st->dtype : TPU_S64;
  tpu_hlo_type_t t = tpu_hlo_type_make(ct, 1, &n);
  tpu_hlo_value_t i = tpu_hlo_iota(f, t, 0);
  tpu_hlo_value_t start = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[0], ct), 1, &n);
  tpu_hlo_value_t step = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[1], ct), 1, &n);
  tpu_hlo_value_t v = tpu_hlo_binary(f, "add", start, tpu_hlo_binary(f, "multiply", i, step));
  tpu_op_set_output(c, tpu_hlo_cast(f, v, dt));
}

/* eye: (one: a 0-d value of dtype); ints [dtype, n, m] -> [n, m] identity. */
static void rule_eye(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  int64_t d[2] = {tpu_op_int(c, 1), tpu_op_int(c, 2)};
  if (d[0] < 0 || d[1] < 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "eye: negative size");
    return;
  }
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, 2, d);
  V eq = CMP(c, "EQ", tpu_hlo_iota(c->f, it, 0), tpu_hlo_iota(c->f, it, 1));
  tpu_op_set_output(c, tpu_hlo_convert(c->f, eq, dt));
}

/* linspace: (start, end) 0-d in the compute type; ints [dtype, steps].
 * PyTorch's two-sided form: i < steps/2 ? start + step i :
 * end - step (steps - 1 - i).  logspace: (start, end, base) ->
 * base ** linspace (ints [dtype, steps, 1]). */
static void rule_linspace(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  int64_t n = tpu_op_int(c, 1);
  int is_log = (int)tpu_op_int_or(c, 2, 0);
  if (n < 0 || dt == TPU_DTYPE_INVALID) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "linspace: number of steps must be non-negative");
    return;
  }
  tpu_dtype_t ct = tpu_op_dtype(c, c->in[0]);
  tpu_hlo_type_t t = tpu_hlo_type_make(ct, 1, &n);
  V s = tpu_hlo_broadcast_to(c->f, c->in[0], 1, &n);
  V e = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[1], ct), 1, &n);
  V i = tpu_hlo_iota(c->f, t, 0);
  V r;
  if (n <= 1) r = s;
  else {
    V step = DIV(c, SUB(c, e, s), tpu_hlo_constant(c->f, t, (double)(n - 1)));
    V lo = ADD(c, s, MUL(c, step, i));
    V hi = SUB(c, e, MUL(c, step, SUB(c, tpu_hlo_constant(c->f, t, (double)(n - 1)), i)));
    r = SEL(c, CMP(c, "LT", i, tpu_hlo_constant(c->f, t, (double)(n / 2))), lo, hi);
  }
  if (is_log) r = POW(c, tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], ct), 1, &n), r);
  if (tpu_dtype_is_int(dt) && tpu_dtype_is_float(ct))
    r = SEL(c, CMPK(c, "LT", r, 0.0), UN(c, "ceil", r), UN(c, "floor", r));
  tpu_op_finish(c, r, dt);
}

const tpu_op_rule_t tpu_rules_factory[] = {
    {"full", rule_full, 1, 1},
    {"arange", rule_arange, 2, 2},
    {"eye", rule_eye, 1, 1},
    {"linspace", rule_linspace, 2, 3},
    {NULL, NULL, 0, 0},
};
