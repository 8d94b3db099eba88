/* reduce.c - reductions, softmax, scans, sort/topk.
 *
 * Conventions (the contract with torch_tpu/ops/reduce.py):
 *
 * - The plain reductions (sum, mean, prod, amax, amin, all, any, logsumexp,
 *   norm, var, std, var_mean, std_mean, count_nonzero) take one input x and
 *       ints [dtype, keepdim, dim...]
 *   dtype is the result dtype (0 = the rule's default: x's dtype, int64 for
 *   sum/prod of bool/int); an empty dim list means every dim (PyTorch's
 *   dim=None).  Dims may be negative and must not repeat.
 * - f16/bf16 accumulate in f32 (PyTorch CPU's acc_type) and convert once.
 * - max/min (and argmax/argmin) let NaN win, ties pick the first index.
 * - Reducing a zero-size dim works where PyTorch has an identity (sum 0,
 *   prod 1, mean nan, all true, any false, logsumexp -inf); amax/amin/max/min
 *   without identity fail with PyTorch's IndexError/RuntimeError text.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

static const tpu_hlo_type_t *type_of(tpu_op_ctx_t *c, V v) { return tpu_hlo_type_of(c->f, v); }
static tpu_dtype_t dtype_of(tpu_op_ctx_t *c, V v) {
  const tpu_hlo_type_t *t = type_of(c, v);
  return t ? t->dtype : TPU_DTYPE_INVALID;
}
static V K(tpu_op_ctx_t *c, V like, double value) {
  const tpu_hlo_type_t *t = type_of(c, like);
  return t ? tpu_hlo_constant(c->f, *t, value) : TPU_HLO_NONE;
}
static V ADD(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "add", a, b); }
static V SUB(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "subtract", a, b); }
static V MUL(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "multiply", a, b); }
static V DIV(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "divide", a, b); }
static V UN(tpu_op_ctx_t *c, const char *op, V x) { return tpu_hlo_unary(c->f, op, x); }
static V SEL(tpu_op_ctx_t *c, V p, V t, V f) { return tpu_hlo_select(c->f, p, t, f); }
static V CMPK(tpu_op_ctx_t *c, const char *dir, V x, double k) { return tpu_hlo_compare(c->f, dir, x, K(c, x, k)); }

static int is_half(tpu_dtype_t dt) { return dt == TPU_F16 || dt == TPU_BF16; }
static tpu_dtype_t acc_dtype(tpu_dtype_t dt) { return is_half(dt) ? TPU_F32 : dt; }

static int64_t int_attr_or(tpu_op_ctx_t *c, int i, int64_t dflt) {
  return tpu_op_nints(c) > i ? tpu_op_int(c, i) : dflt;
}
static double float_attr_or(tpu_op_ctx_t *c, int i, double dflt) {
  return c->attrs->nfloats > i ? tpu_op_float(c, i) : dflt;
}

/* dtype attr i: 0 or absent -> dflt. */
static tpu_dtype_t dtype_attr(tpu_op_ctx_t *c, int i, tpu_dtype_t dflt) {
  int64_t code = int_attr_or(c, i, 0);
  if (code == 0) return dflt;
  if (!tpu_dtype_valid((int)code)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: invalid dtype code %lld", c->name, (long long)code);
    return TPU_DTYPE_INVALID;
  }
  return (tpu_dtype_t)code;
}

/* Identity/extreme values of a dtype as 0-d constants. */
static V lowest(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: return tpu_hlo_scalar(c->f, dt, 0);
    case TPU_S8: return tpu_hlo_scalar(c->f, dt, -128);
    case TPU_S16: return tpu_hlo_scalar(c->f, dt, -32768);
    case TPU_S32: return tpu_hlo_scalar(c->f, dt, -2147483648.0);
    case TPU_S64: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), INT64_MIN);
    case TPU_U8: case TPU_U16: case TPU_U32: case TPU_U64: return tpu_hlo_scalar(c->f, dt, 0);
    default: return tpu_hlo_scalar(c->f, dt, -INFINITY);
  }
}
static V highest(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: return tpu_hlo_scalar(c->f, dt, 1);
    case TPU_S8: return tpu_hlo_scalar(c->f, dt, 127);
    case TPU_S16: return tpu_hlo_scalar(c->f, dt, 32767);
    case TPU_S32: return tpu_hlo_scalar(c->f, dt, 2147483647.0);
    case TPU_S64: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), INT64_MAX);
    case TPU_U8: return tpu_hlo_scalar(c->f, dt, 255);
    case TPU_U16: return tpu_hlo_scalar(c->f, dt, 65535);
    case TPU_U32: return tpu_hlo_scalar(c->f, dt, 4294967295.0);
    case TPU_U64: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), -1); /* all ones */
    default: return tpu_hlo_scalar(c->f, dt, INFINITY);
  }
}

/* ---- the reduced-dims description ---------------------------------------- */

typedef struct red {
  int rank;                       /* input rank */
  int nd;                         /* reduced dims (sorted) */
  int64_t dims[TPU_MAX_RANK];
  bool mask[TPU_MAX_RANK];
  bool keepdim;
  int64_t count;                  /* elements folded into each output */
  int kept_rank;                  /* keepdim shape (rank = input rank) */
  int64_t kept[TPU_MAX_RANK];
  int64_t in_dims[TPU_MAX_RANK];
} red_t;

/* Fills r from an explicit dim list (n < 0: all dims). */
static bool red_init(tpu_op_ctx_t *c, V x, const int64_t *list, int n, bool keepdim, red_t *r) {
  memset(r, 0, sizeof(*r));
  const tpu_hlo_type_t *t = type_of(c, x);
  if (!t) return false;
  r->rank = t->rank;
  r->keepdim = keepdim;
  memcpy(r->in_dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
  if (n < 0 || n == 0) {
    for (int i = 0; i < t->rank; i++) r->mask[i] = true;
  } else {
    for (int i = 0; i < n; i++) {
      int64_t d = tpu_op_dim(c, list[i], t->rank);
      if (tpu_hlo_func_status(c->f)) return false;
      if (t->rank == 0) continue; /* dim 0 / -1 of a scalar */
      if (r->mask[d]) {
        tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: dim %lld appears multiple times in the list of dims", c->name,
                    (long long)d);
        return false;
      }
      r->mask[d] = true;
    }
  }
  r->count = 1;
  for (int i = 0; i < t->rank; i++) {
    r->kept[i] = r->mask[i] ? 1 : t->dims[i];
    if (r->mask[i]) {
      r->dims[r->nd++] = i;
      r->count *= t->dims[i];
    }
  }
  r->kept_rank = t->rank;
  return true;
}

/* From attrs [.., keepdim at `kd`, dims from `first` on]. */
static bool red_from_attrs(tpu_op_ctx_t *c, V x, int kd, int first, red_t *r) {
  int n = tpu_op_nints(c) - first;
  if (n < 0) n = 0;
  return red_init(c, x, n ? c->attrs->ints + first : NULL, n, int_attr_or(c, kd, 0) != 0, r);
}

/* Reduces x (already in its accumulation dtype) with `body`/`init`. */
static V red_apply(tpu_op_ctx_t *c, V x, V init, const char *body, const red_t *r) {
  if (r->nd == 0) return x;
  return tpu_hlo_reduce(c->f, x, init, r->dims, r->nd, body);
}

/* Result of a reduction (shape without reduced dims) -> keepdim shape if asked. */
static V red_shape(tpu_op_ctx_t *c, V v, const red_t *r) {
  if (!r->keepdim || r->nd == 0) return v;
  return tpu_hlo_reshape(c->f, v, r->kept_rank, r->kept);
}

/* Reduced value broadcast back to the input shape (for x - mean etc.). */
static V red_back(tpu_op_ctx_t *c, V v, const red_t *r) {
  if (r->nd == 0) return v;
  V k = tpu_hlo_reshape(c->f, v, r->kept_rank, r->kept);
  return tpu_hlo_broadcast_to(c->f, k, r->rank, r->in_dims);
}

static V to_bool(tpu_op_ctx_t *c, V x) {
  if (dtype_of(c, x) == TPU_PRED) return x;
  return CMPK(c, "NE", x, 0.0);
}

static bool check_nonempty(tpu_op_ctx_t *c, const red_t *r) {
  for (int i = 0; i < r->nd; i++) {
    if (r->in_dims[r->dims[i]] == 0) {
      tpu_op_fail(c, TPU_OUT_OF_RANGE, "%s(): Expected reduction dim %lld to have non-zero size.", c->name,
                  (long long)r->dims[i]);
      return false;
    }
  }
  return true;
}

/* max/min over the dims with NaN winning (independent of the backend's
 * maximum semantics: any NaN in a slice makes that slice NaN). */
static V red_extreme(tpu_op_ctx_t *c, V x, bool is_max, const red_t *r) {
  tpu_dtype_t dt = dtype_of(c, x);
  if (dt == TPU_PRED) return red_apply(c, x, tpu_hlo_scalar(c->f, dt, is_max ? 0 : 1), is_max ? "or" : "and", r);
  V m = red_apply(c, x, is_max ? lowest(c, dt) : highest(c, dt), is_max ? "maximum" : "minimum", r);
  if (!tpu_dtype_is_float(dt) || r->nd == 0) return m;
  V nan = red_apply(c, tpu_hlo_compare(c->f, "NE", x, x), tpu_hlo_scalar(c->f, TPU_PRED, 0), "or", r);
  return SEL(c, nan, K(c, m, NAN), m);
}

/* ---- sum / mean / prod ------------------------------------------------------ */

static tpu_dtype_t sum_default(tpu_dtype_t in) {
  return (in == TPU_PRED || tpu_dtype_is_int(in)) ? TPU_S64 : in;
}

/* sum: x; ints [dtype (0: int64 for bool/int, else x's), keepdim, dim...]. */
static void rule_sum(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, sum_default(dtype_of(c, x)));
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V s = red_apply(c, xa, tpu_hlo_scalar(c->f, at, 0), at == TPU_PRED ? "or" : "add", &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}

/* prod: as sum, with multiply. */
static void rule_prod(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, sum_default(dtype_of(c, x)));
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V s = red_apply(c, xa, tpu_hlo_scalar(c->f, at, 1), at == TPU_PRED ? "and" : "multiply", &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}

/* mean: x; ints [dtype (a float type; 0: x's), keepdim, dim...]. */
static void rule_mean(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, dtype_of(c, x));
  if (!dt) return;
  if (!tpu_dtype_is_float(dt) && !tpu_dtype_is_complex(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
                "dtype. Got: %s",
                tpu_dtype_name(dt));
    return;
  }
  red_t r;
  if (!red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V s = red_apply(c, xa, tpu_hlo_scalar(c->f, at, 0), "add", &r);
  s = DIV(c, s, K(c, s, (double)r.count));
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}

/* ---- extremes ------------------------------------------------------------------ */

/* amax / amin: x; ints [dtype (ignored), keepdim, dim...].  NaN wins. */
static void extreme_rule(tpu_op_ctx_t *c, bool is_max) {
  V x = c->in[0];
  red_t r;
  if (!red_from_attrs(c, x, 1, 2, &r) || !check_nonempty(c, &r)) return;
  tpu_op_set_output(c, red_shape(c, red_extreme(c, x, is_max, &r), &r));
}
static void rule_amax(tpu_op_ctx_t *c) { extreme_rule(c, true); }
static void rule_amin(tpu_op_ctx_t *c) { extreme_rule(c, false); }

/* max / min (full): x; no attrs.  The 0-d extreme over every element. */
static void full_extreme_rule(tpu_op_ctx_t *c, bool is_max) {
  V x = c->in[0];
  red_t r;
  if (!red_init(c, x, NULL, -1, false, &r)) return;
  if (r.count == 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
                "with the 'dim' argument.",
                c->name);
    return;
  }
  tpu_op_set_output(c, red_extreme(c, x, is_max, &r));
}
static void rule_max(tpu_op_ctx_t *c) { full_extreme_rule(c, true); }
static void rule_min(tpu_op_ctx_t *c) { full_extreme_rule(c, false); }

/* max_dim / min_dim: x; ints [dim, keepdim] -> (values, indices int64).
 * NaN wins; ties give the first index. */
static void extreme_dim_rule(tpu_op_ctx_t *c, bool is_max) {
  V x = c->in[0];
  int64_t dim = tpu_op_int(c, 0);
  bool keepdim = int_attr_or(c, 1, 0) != 0;
  red_t r;
  if (!red_init(c, x, &dim, 1, keepdim, &r)) return;
  if (r.nd == 0) { /* 0-d input */
    V outs[2] = {x, tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(TPU_S64), 0)};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  if (r.in_dims[r.dims[0]] == 0) {
    tpu_op_fail(c, TPU_OUT_OF_RANGE, "%s(): Expected reduction dim %lld to have non-zero size.",
                is_max ? "max" : "min", (long long)r.dims[0]);
    return;
  }
  V val = TPU_HLO_NONE;
  V idx = tpu_hlo_reduce_argext(c->f, x, r.dims[0], is_max, &val);
  V outs[2] = {red_shape(c, val, &r), red_shape(c, idx, &r)};
  tpu_op_set_outputs(c, 2, outs);
}
static void rule_max_dim(tpu_op_ctx_t *c) { extreme_dim_rule(c, true); }
static void rule_min_dim(tpu_op_ctx_t *c) { extreme_dim_rule(c, false); }

/* argmax / argmin: x; ints [has_dim, dim, keepdim] -> int64 indices.
 * Without a dim the index is into the flattened input (keepdim: all-ones shape). */
static void arg_rule(tpu_op_ctx_t *c, bool is_max) {
  V x = c->in[0];
  bool has_dim = int_attr_or(c, 0, 0) != 0;
  int64_t dim = int_attr_or(c, 1, 0);
  bool keepdim = int_attr_or(c, 2, 0) != 0;
  const tpu_hlo_type_t *t = type_of(c, x);
  if (!t) return;
  if (has_dim) {
    red_t r;
    if (!red_init(c, x, &dim, 1, keepdim, &r)) return;
    if (r.nd == 0) {
      tpu_op_set_output(c, tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(TPU_S64), 0));
      return;
    }
    if (r.in_dims[r.dims[0]] == 0) {
      tpu_op_fail(c, TPU_OUT_OF_RANGE, "%s(): Expected reduction dim %lld to have non-zero size.", c->name,
                  (long long)r.dims[0]);
      return;
    }
    tpu_op_set_output(c, red_shape(c, tpu_hlo_reduce_argext(c->f, x, r.dims[0], is_max, NULL), &r));
    return;
  }
  int64_t n = tpu_hlo_type_numel(t);
  if (n == 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s(): Expected reduction dim to be specified for input.numel() == 0.", c->name);
    return;
  }
  V flat = tpu_hlo_reshape(c->f, x, 1, &n);
  V idx = tpu_hlo_reduce_argext(c->f, flat, 0, is_max, NULL);
  if (keepdim && t->rank > 0) {
    int64_t ones[TPU_MAX_RANK];
    for (int i = 0; i < t->rank; i++) ones[i] = 1;
    idx = tpu_hlo_reshape(c->f, idx, t->rank, ones);
  }
  tpu_op_set_output(c, idx);
}
static void rule_argmax(tpu_op_ctx_t *c) { arg_rule(c, true); }
static void rule_argmin(tpu_op_ctx_t *c) { arg_rule(c, false); }

/* all / any: x; ints [dtype (0: bool; uint8 for uint8 input as PyTorch),
 * keepdim, dim...]. */
static void bool_rule(tpu_op_ctx_t *c, bool is_all) {
  V x = c->in[0];
  tpu_dtype_t in = dtype_of(c, x);
  tpu_dtype_t dt = dtype_attr(c, 0, in == TPU_U8 ? TPU_U8 : TPU_PRED);
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  V s = red_apply(c, to_bool(c, x), tpu_hlo_scalar(c->f, TPU_PRED, is_all ? 1 : 0), is_all ? "and" : "or", &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}
static void rule_all(tpu_op_ctx_t *c) { bool_rule(c, true); }
static void rule_any(tpu_op_ctx_t *c) { bool_rule(c, false); }

/* count_nonzero: x; ints [dtype (0: int64), keepdim (ignored: 0), dim...]. */
static void rule_count_nonzero(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, TPU_S64);
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  V ones = tpu_hlo_convert(c->f, to_bool(c, x), TPU_S64);
  V s = red_apply(c, ones, tpu_hlo_scalar(c->f, TPU_S64, 0), "add", &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}

/* ---- statistics ------------------------------------------------------------------ */

/* var / std / var_mean / std_mean: x (float); ints [dtype (0: x's), keepdim,
 * dim...]; floats [correction (default 1)].  Two-pass: mean, then the sum of
 * squared deviations / max(N - correction, 0). */
static void var_rule(tpu_op_ctx_t *c, bool take_sqrt, bool with_mean) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, dtype_of(c, x));
  if (!dt) return;
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "std and var only support floating point and complex dtypes");
    return;
  }
  double correction = float_attr_or(c, 0, 1.0);
  red_t r;
  if (!red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V zero = tpu_hlo_scalar(c->f, at, 0);
  V sum = red_apply(c, xa, zero, "add", &r);
  V mean = DIV(c, sum, K(c, sum, (double)r.count));
  V d = SUB(c, xa, red_back(c, mean, &r));
  V ssq = red_apply(c, MUL(c, d, d), zero, "add", &r);
  double div = (double)r.count - correction;
  if (div < 0) div = 0;
  V var = DIV(c, ssq, K(c, ssq, div));
  if (take_sqrt) var = UN(c, "sqrt", var);
  V out = red_shape(c, tpu_hlo_cast(c->f, var, dt), &r);
  if (!with_mean) {
    tpu_op_set_output(c, out);
    return;
  }
  V outs[2] = {out, red_shape(c, tpu_hlo_cast(c->f, mean, dt), &r)};
  tpu_op_set_outputs(c, 2, outs);
}
static void rule_var(tpu_op_ctx_t *c) { var_rule(c, false, false); }
static void rule_std(tpu_op_ctx_t *c) { var_rule(c, true, false); }
static void rule_var_mean(tpu_op_ctx_t *c) { var_rule(c, false, true); }
static void rule_std_mean(tpu_op_ctx_t *c) { var_rule(c, true, true); }

/* norm (linalg.vector_norm): x; ints [dtype (0: x's), keepdim, dim...];
 * floats [p (default 2)].  p = 0 counts non-zeros, inf/-inf are max/min |x|. */
static void rule_norm(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, dtype_of(c, x));
  if (!dt) return;
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "linalg.vector_norm: Expected a floating point or complex tensor as input. Got %s",
                tpu_dtype_name(dt));
    return;
  }
  double p = float_attr_or(c, 0, 2.0);
  red_t r;
  if (!red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V ax = UN(c, "abs", xa);
  V zero = tpu_hlo_scalar(c->f, at, 0);
  V res;
  if (isinf(p)) {
    if (r.count == 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "linalg.vector_norm cannot compute the %s norm on an empty tensor because the operation does "
                  "not have an identity",
                  p > 0 ? "inf" : "-inf");
      return;
    }
    res = red_extreme(c, ax, p > 0, &r);
  } else if (p == 0) {
    res = red_apply(c, tpu_hlo_convert(c->f, CMPK(c, "NE", ax, 0.0), at), zero, "add", &r);
  } else if (p == 1) {
    res = red_apply(c, ax, zero, "add", &r);
  } else if (p == 2) {
    res = UN(c, "sqrt", red_apply(c, MUL(c, ax, ax), zero, "add", &r));
  } else {
    V pw = tpu_hlo_binary(c->f, "power", ax, K(c, ax, p));
    V s = red_apply(c, pw, zero, "add", &r);
    res = tpu_hlo_binary(c->f, "power", s, K(c, s, 1.0 / p));
  }
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, res, dt), &r));
}

/* logsumexp: x; ints [dtype (a float type; 0: x's), keepdim, dim...].
 * max-shifted; an infinite max shifts by 0 (PyTorch). */
static void rule_logsumexp(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = dtype_attr(c, 0, dtype_of(c, x));
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V m = red_apply(c, xa, lowest(c, at), "maximum", &r);
  m = SEL(c, CMPK(c, "EQ", UN(c, "abs", m), INFINITY), K(c, m, 0.0), m);
  V e = UN(c, "exponential", SUB(c, xa, red_back(c, m, &r)));
  V s = red_apply(c, e, tpu_hlo_scalar(c->f, at, 0), "add", &r);
  V res = ADD(c, UN(c, "log", s), m);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, res, dt), &r));
}

/* ---- softmax ------------------------------------------------------------------------ */

/* _softmax / _log_softmax: x; ints [dim, dtype (0: x's; f32 for half_to_float)]. */
static void softmax_rule(tpu_op_ctx_t *c, bool is_log) {
  V x = c->in[0];
  int64_t dim = tpu_op_int(c, 0);
  tpu_dtype_t dt = dtype_attr(c, 1, dtype_of(c, x));
  red_t r;
  if (!dt || !red_init(c, x, &dim, 1, true, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V xa = tpu_hlo_cast(c->f, x, at);
  V m = red_back(c, red_apply(c, xa, lowest(c, at), "maximum", &r), &r);
  V sh = SUB(c, xa, m);
  V e = UN(c, "exponential", sh);
  V s = red_back(c, red_apply(c, e, tpu_hlo_scalar(c->f, at, 0), "add", &r), &r);
  V res = is_log ? SUB(c, sh, UN(c, "log", s)) : DIV(c, e, s);
  tpu_op_set_output(c, tpu_hlo_cast(c->f, res, dt));
}
static void rule_softmax(tpu_op_ctx_t *c) { softmax_rule(c, false); }
static void rule_log_softmax(tpu_op_ctx_t *c) { softmax_rule(c, true); }

/* _softmax_backward_data: (grad_output, output); ints [dim, input dtype]:
 *   output * (grad - sum(grad * output, dim)).
 * _log_softmax_backward_data: grad - exp(output) * sum(grad, dim). */
static void softmax_bwd_rule(tpu_op_ctx_t *c, bool is_log) {
  V g = c->in[0], y = c->in[1];
  int64_t dim = tpu_op_int(c, 0);
  tpu_dtype_t dt = dtype_attr(c, 1, dtype_of(c, g));
  red_t r;
  if (!dt || !red_init(c, g, &dim, 1, true, &r)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V ga = tpu_hlo_cast(c->f, g, at), ya = tpu_hlo_cast(c->f, y, at);
  V zero = tpu_hlo_scalar(c->f, at, 0);
  V res;
  if (is_log) {
    V s = red_back(c, red_apply(c, ga, zero, "add", &r), &r);
    res = SUB(c, ga, MUL(c, UN(c, "exponential", ya), s));
  } else {
    V s = red_back(c, red_apply(c, MUL(c, ga, ya), zero, "add", &r), &r);
    res = MUL(c, ya, SUB(c, ga, s));
  }
  tpu_op_set_output(c, tpu_hlo_cast(c->f, res, dt));
}
static void rule_softmax_backward(tpu_op_ctx_t *c) { softmax_bwd_rule(c, false); }
static void rule_log_softmax_backward(tpu_op_ctx_t *c) { softmax_bwd_rule(c, true); }

/* ---- scans ------------------------------------------------------------------------------ */

/* cumsum / cumprod: x; ints [dim, dtype (0: int64 for bool/int, else x's)].
 * A log-step (Hillis-Steele) scan: ceil(log2 n) shifted adds along dim. */
static void scan_rule(tpu_op_ctx_t *c, bool is_prod) {
  V x = c->in[0];
  int64_t dim = tpu_op_int(c, 0);
  tpu_dtype_t dt = dtype_attr(c, 1, sum_default(dtype_of(c, x)));
  const tpu_hlo_type_t *t = type_of(c, x);
  if (!dt || !t) return;
  int rank = t->rank;
  dim = tpu_op_dim(c, dim, rank);
  if (tpu_hlo_func_status(c->f)) return;
  tpu_dtype_t at = acc_dtype(dt);
  V y = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  if (rank == 0) {
    tpu_op_set_output(c, tpu_hlo_cast(c->f, y, dt));
    return;
  }
  int64_t n = t->dims[dim];
  const char *op = is_prod ? "multiply" : "add";
  if (at == TPU_PRED) op = is_prod ? "and" : "or";
  V ident = tpu_hlo_scalar(c->f, at, is_prod ? 1 : 0);
  for (int64_t k = 1; k < n; k *= 2) {
    int64_t start[TPU_MAX_RANK], limit[TPU_MAX_RANK], lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], in[TPU_MAX_RANK];
    for (int i = 0; i < rank; i++) {
      start[i] = 0;
      limit[i] = t->dims[i];
      lo[i] = hi[i] = in[i] = 0;
    }
    limit[dim] = n - k;
    lo[dim] = k;
    V shifted = tpu_hlo_pad(c->f, tpu_hlo_slice(c->f, y, start, limit, NULL), ident, lo, hi, in);
    y = tpu_hlo_binary(c->f, op, y, shifted);
  }
  tpu_op_set_output(c, tpu_hlo_cast(c->f, y, dt));
}
static void rule_cumsum(tpu_op_ctx_t *c) { scan_rule(c, false); }
static void rule_cumprod(tpu_op_ctx_t *c) { scan_rule(c, true); }

/* ---- sort / topk ---------------------------------------------------------------------- */

/* sort: x; ints [dim, descending] -> (values, indices int64).  Stable; NaN
 * sorts above every number (last ascending, first descending). */
static void rule_sort(tpu_op_ctx_t *c) {
  V x = c->in[0];
  const tpu_hlo_type_t *t = type_of(c, x);
  if (!t) return;
  int64_t dim = tpu_op_dim(c, int_attr_or(c, 0, -1), t->rank);
  bool desc = int_attr_or(c, 1, 0) != 0;
  if (tpu_hlo_func_status(c->f)) return;
  if (t->rank == 0) {
    V outs[2] = {x, tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(TPU_S64), 0)};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  V idx = TPU_HLO_NONE;
  V vals = tpu_hlo_sort(c->f, x, dim, desc, &idx);
  V outs[2] = {vals, idx};
  tpu_op_set_outputs(c, 2, outs);
}

/* topk: x; ints [k, dim, largest, sorted] -> (values, indices int64).
 * Always sorted (ties: the lower index first). */
static void rule_topk(tpu_op_ctx_t *c) {
  V x = c->in[0];
  const tpu_hlo_type_t *t = type_of(c, x);
  if (!t) return;
  int64_t k = tpu_op_int(c, 0);
  int64_t dim = tpu_op_dim(c, int_attr_or(c, 1, -1), t->rank);
  bool largest = int_attr_or(c, 2, 1) != 0;
  if (tpu_hlo_func_status(c->f)) return;
  int64_t n = t->rank == 0 ? 1 : t->dims[dim];
  if (k < 0 || k > n) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "topk(): selected index k out of range");
    return;
  }
  if (t->rank == 0) {
    V outs[2] = {x, tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(TPU_S64), 0)};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  V idx = TPU_HLO_NONE;
  V vals = tpu_hlo_sort(c->f, x, dim, largest, &idx);
  int64_t start[TPU_MAX_RANK], limit[TPU_MAX_RANK];
  for (int i = 0; i < t->rank; i++) {
    start[i] = 0;
    limit[i] = t->dims[i];
  }
  limit[dim] = k;
  V outs[2] = {tpu_hlo_slice(c->f, vals, start, limit, NULL), tpu_hlo_slice(c->f, idx, start, limit, NULL)};
  tpu_op_set_outputs(c, 2, outs);
}

const tpu_op_rule_t tpu_rules_reduce[] = {
    {"sum", rule_sum, 1, 1},
    {"mean", rule_mean, 1, 1},
    {"prod", rule_prod, 1, 1},
    {"amax", rule_amax, 1, 1},
    {"amin", rule_amin, 1, 1},
    {"max", rule_max, 1, 1},
    {"min", rule_min, 1, 1},
    {"max_dim", rule_max_dim, 1, 1},
    {"min_dim", rule_min_dim, 1, 1},
    {"argmax", rule_argmax, 1, 1},
    {"argmin", rule_argmin, 1, 1},
    {"all", rule_all, 1, 1},
    {"any", rule_any, 1, 1},
    {"count_nonzero", rule_count_nonzero, 1, 1},
    {"var", rule_var, 1, 1},
    {"std", rule_std, 1, 1},
    {"var_mean", rule_var_mean, 1, 1},
    {"std_mean", rule_std_mean, 1, 1},
    {"norm", rule_norm, 1, 1},
    {"logsumexp", rule_logsumexp, 1, 1},
    {"_softmax", rule_softmax, 1, 1},
    {"_log_softmax", rule_log_softmax, 1, 1},
    {"_softmax_backward_data", rule_softmax_backward, 2, 2},
    {"_log_softmax_backward_data", rule_log_softmax_backward, 2, 2},
    {"cumsum", rule_cumsum, 1, 1},
    {"cumprod", rule_cumprod, 1, 1},
    {"sort", rule_sort, 1, 1},
    {"topk", rule_topk, 1, 1},
    {NULL, NULL, 0, 0},
};
