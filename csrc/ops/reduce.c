/* reduce.c - reductions over dims (sum, mean, prod, amax / amin, max / min,
 * argmax / argmin, all / any, count_nonzero, var / std, norm, powsum,
 * logsumexp, nansum), softmax and its backward, the scans (cumsum, cumprod,
 * cummax / cummin, logcumsumexp) and sort / topk.
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

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

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
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
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
  return red_init(c, x, n ? c->attrs->ints + first : NULL, n, tpu_op_int_or(c, kd, 0) != 0, r);
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
  tpu_dtype_t dt = tpu_op_dtype(c, x);
  if (dt == TPU_PRED) return red_apply(c, x, tpu_hlo_scalar(c->f, dt, is_max ? 0 : 1), is_max ? "or" : "and", r);
  V m = red_apply(c, x, is_max ? tpu_op_lowest(c, dt) : tpu_op_highest(c, dt), is_max ? "maximum" : "minimum", r);
  if (!tpu_dtype_is_float(dt) || r->nd == 0) return m;
  V nan = red_apply(c, tpu_hlo_compare(c->f, "NE", x, x), tpu_hlo_scalar(c->f, TPU_PRED, 0), "or", r);
  return SEL(c, nan, K(c, m, NAN), m);
}

/* ---- sum / mean / prod ------------------------------------------------------ */

static tpu_dtype_t sum_default(tpu_dtype_t in) {
  return (in == TPU_PRED || tpu_dtype_is_int(in)) ? TPU_S64 : in;
}

/* sum and prod: x in dtype (computed in its opmath type), reduced with
 * `op` from `init` (`bool_op` for bool). */
static void sum_or_prod(tpu_op_ctx_t *c, double init, const char *op, const char *bool_op) {
  V x = c->in[0];
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, sum_default(tpu_op_dtype(c, x)));
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V s = red_apply(c, xa, tpu_hlo_scalar(c->f, at, init), at == TPU_PRED ? bool_op : op, &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}

/* sum: x; ints [dtype (0: int64 for bool/int, else x's), keepdim, dim...]. */
static void rule_sum(tpu_op_ctx_t *c) { sum_or_prod(c, 0, "add", "or"); }

/* prod: as sum, with multiply. */
static void rule_prod(tpu_op_ctx_t *c) { sum_or_prod(c, 1, "multiply", "and"); }

/* mean: x; ints [dtype (a float type; 0: x's), keepdim, dim...]. */
static void rule_mean(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, tpu_op_dtype(c, x));
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
  tpu_dtype_t at = tpu_op_opmath(dt);
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
  bool keepdim = tpu_op_int_or(c, 1, 0) != 0;
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
  bool has_dim = tpu_op_int_or(c, 0, 0) != 0;
  int64_t dim = tpu_op_int_or(c, 1, 0);
  bool keepdim = tpu_op_int_or(c, 2, 0) != 0;
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
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
  tpu_dtype_t in = tpu_op_dtype(c, x);
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, in == TPU_U8 ? TPU_U8 : TPU_PRED);
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  V s = red_apply(c, tpu_ew_to_bool(c, x), tpu_hlo_scalar(c->f, TPU_PRED, is_all ? 1 : 0), is_all ? "and" : "or", &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}
static void rule_all(tpu_op_ctx_t *c) { bool_rule(c, true); }
static void rule_any(tpu_op_ctx_t *c) { bool_rule(c, false); }

/* count_nonzero: x; ints [dtype (0: int64), keepdim (ignored: 0), dim...]. */
static void rule_count_nonzero(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, TPU_S64);
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  V ones = tpu_hlo_convert(c->f, tpu_ew_to_bool(c, x), TPU_S64);
  V s = red_apply(c, ones, tpu_hlo_scalar(c->f, TPU_S64, 0), "add", &r);
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, s, dt), &r));
}

/* nansum: x; ints [dtype, keepdim, ndims, dims[ndims] (normalised; none =
 * all)].  NaNs count as 0; halves accumulate in f32. */
static void rule_nansum(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  int keep = (int)tpu_op_int(c, 1);
  int64_t nd = tpu_op_int(c, 2);
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  if (dt == TPU_DTYPE_INVALID || dt == TPU_PRED) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "nansum: dtype");
    return;
  }
  int red[TPU_MAX_RANK] = {0};
  int64_t dims[TPU_MAX_RANK];
  int n = 0;
  if (nd == 0)
    for (int i = 0; i < t.rank; i++) red[i] = 1;
  for (int i = 0; i < nd; i++) {
    int64_t d = tpu_op_dim(c, tpu_op_int(c, 3 + i), t.rank > 0 ? t.rank : 1);
    if (d >= 0 && d < t.rank) red[d] = 1;
  }
  if (tpu_hlo_func_status(c->f)) return;
  for (int i = 0; i < t.rank; i++)
    if (red[i]) dims[n++] = i;
  tpu_dtype_t ct = tpu_op_opmath(dt);
  V x = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, c->in[0], dt), ct);
  if (tpu_dtype_is_float(ct)) x = SEL(c, tpu_ew_isnan(c, x), K(c, x, 0.0), x);
  V r = n ? tpu_hlo_reduce(c->f, x, tpu_hlo_scalar(c->f, ct, 0.0), dims, n, "add") : x;
  if (keep && n) {
    int64_t od[TPU_MAX_RANK];
    for (int i = 0; i < t.rank; i++) od[i] = red[i] ? 1 : t.dims[i];
    r = tpu_hlo_reshape(c->f, r, t.rank, od);
  }
  tpu_op_finish(c, r, dt);
}

/* ---- statistics ------------------------------------------------------------------ */

/* var / std / var_mean / std_mean: x (float); ints [dtype (0: x's), keepdim,
 * dim...]; floats [correction (default 1)].  Two-pass: mean, then the sum of
 * squared deviations / max(N - correction, 0). */
static void var_rule(tpu_op_ctx_t *c, bool take_sqrt, bool with_mean) {
  V x = c->in[0];
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, tpu_op_dtype(c, x));
  if (!dt) return;
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "std and var only support floating point and complex dtypes");
    return;
  }
  double correction = tpu_op_float_or(c, 0, 1.0);
  red_t r;
  if (!red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
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
 * floats [p (default 2)].  p = 0 counts non-zeros, inf/-inf are max/min |x|.
 * powsum (torch._foreach_powsum): the same attrs, sum |x|^p (no root, and
 * no special case for any p). */
static void norm_impl(tpu_op_ctx_t *c, bool root) {
  V x = c->in[0];
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, tpu_op_dtype(c, x));
  if (!dt) return;
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "linalg.vector_norm: Expected a floating point or complex tensor as input. Got %s",
                tpu_dtype_name(dt));
    return;
  }
  double p = tpu_op_float_or(c, 0, 2.0);
  red_t r;
  if (!red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V ax = UN(c, "abs", xa);
  V zero = tpu_hlo_scalar(c->f, at, 0);
  V res;
  if (!root) {
    res = red_apply(c, POW(c, ax, K(c, ax, p)), zero, "add", &r);
  } else if (isinf(p)) {
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
    V pw = POW(c, ax, K(c, ax, p));
    V s = red_apply(c, pw, zero, "add", &r);
    res = POW(c, s, K(c, s, 1.0 / p));
  }
  tpu_op_set_output(c, red_shape(c, tpu_hlo_cast(c->f, res, dt), &r));
}
static void rule_norm(tpu_op_ctx_t *c) { norm_impl(c, true); }
static void rule_powsum(tpu_op_ctx_t *c) { norm_impl(c, false); }

/* logsumexp: x; ints [dtype (a float type; 0: x's), keepdim, dim...].
 * max-shifted; an infinite max shifts by 0 (PyTorch). */
static void rule_logsumexp(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 0, tpu_op_dtype(c, x));
  red_t r;
  if (!dt || !red_from_attrs(c, x, 1, 2, &r)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
  V xa = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  V m = red_apply(c, xa, tpu_op_lowest(c, at), "maximum", &r);
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
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 1, tpu_op_dtype(c, x));
  red_t r;
  if (!dt || !red_init(c, x, &dim, 1, true, &r)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
  V xa = tpu_hlo_cast(c->f, x, at);
  V m = red_back(c, red_apply(c, xa, tpu_op_lowest(c, at), "maximum", &r), &r);
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
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 1, tpu_op_dtype(c, g));
  red_t r;
  if (!dt || !red_init(c, g, &dim, 1, true, &r)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
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

/* Log-step (Hillis-Steele) inclusive scan along dim: ceil(log2 n) shifted
 * combinations with `op` (or fn); `ident` is a 0-d value of y's type that
 * fills the shifted-in positions. */
typedef V (*combine_fn)(tpu_op_ctx_t *c, V acc_, V shifted);
static V scan(tpu_op_ctx_t *c, V y, int dim, V ident, combine_fn fn, const char *op) {
  tpu_hlo_type_t t = tpu_op_type(c, y);
  int64_t n = t.dims[dim];
  for (int64_t k = 1; k < n; k *= 2) {
    int64_t st[TPU_MAX_RANK], lim[TPU_MAX_RANK], lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], in[TPU_MAX_RANK];
    for (int i = 0; i < t.rank; i++) {
      st[i] = lo[i] = hi[i] = in[i] = 0;
      lim[i] = t.dims[i];
    }
    lim[dim] = n - k;
    lo[dim] = k;
    V sh = tpu_hlo_pad(c->f, tpu_hlo_slice(c->f, y, st, lim, NULL), ident, lo, hi, in);
    y = fn ? fn(c, y, sh) : tpu_hlo_binary(c->f, op, y, sh);
  }
  return y;
}

/* cumsum / cumprod: x; ints [dim, dtype (0: int64 for bool/int, else x's)]. */
static void scan_rule(tpu_op_ctx_t *c, bool is_prod) {
  V x = c->in[0];
  int64_t dim = tpu_op_int(c, 0);
  tpu_dtype_t dt = tpu_op_dtype_attr(c, 1, sum_default(tpu_op_dtype(c, x)));
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!dt || !t) return;
  int rank = t->rank;
  dim = tpu_op_dim(c, dim, rank);
  if (tpu_hlo_func_status(c->f)) return;
  tpu_dtype_t at = tpu_op_opmath(dt);
  V y = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, x, dt), at);
  if (rank == 0) {
    tpu_op_set_output(c, tpu_hlo_cast(c->f, y, dt));
    return;
  }
  const char *op = is_prod ? "multiply" : "add";
  if (at == TPU_PRED) op = is_prod ? "and" : "or";
  V ident = tpu_hlo_scalar(c->f, at, is_prod ? 1 : 0);
  tpu_op_set_output(c, tpu_hlo_cast(c->f, scan(c, y, (int)dim, ident, NULL, op), dt));
}
static void rule_cumsum(tpu_op_ctx_t *c) { scan_rule(c, false); }
static void rule_cumprod(tpu_op_ctx_t *c) { scan_rule(c, true); }

/* cummaxmin: x; ints [dim, is_max] -> (values, indices s64).  As PyTorch:
 * ties take the last index; a NaN sticks (value NaN, index of the latest NaN). */
static void rule_cummaxmin(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_hlo_type_t t = tpu_op_type(c, x);
  int is_max = (int)tpu_op_int(c, 1);
  if (t.dtype == TPU_PRED) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: bool", c->name);
    return;
  }
  if (t.rank == 0) {
    V outs[2] = {x, tpu_hlo_constant(c->f, tpu_hlo_type_scalar(TPU_S64), 0.0)};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  int dim = (int)tpu_op_dim(c, tpu_op_int(c, 0), t.rank);
  if (tpu_hlo_func_status(c->f)) return;
  int isf = tpu_dtype_is_float(t.dtype);
  const char *op = is_max ? "maximum" : "minimum";
  V ident = is_max ? tpu_op_lowest(c, t.dtype) : tpu_op_highest(c, t.dtype);
  V xs = isf ? SEL(c, tpu_ew_isnan(c, x), tpu_hlo_broadcast_to(c->f, ident, t.rank, t.dims), x) : x;
  V v = scan(c, xs, dim, ident, NULL, op);
  V match = CMP(c, "EQ", xs, v);
  if (isf) {
    V nan = tpu_hlo_convert(c->f, tpu_ew_isnan(c, x), TPU_S8);
    V seen = CMPK(c, "NE", scan(c, nan, dim, tpu_hlo_scalar(c->f, TPU_S8, 0), NULL, "maximum"), 0.0);
    v = SEL(c, seen, K(c, v, NAN), v);
    match = SEL(c, seen, tpu_ew_isnan(c, x), match);
  }
  tpu_hlo_type_t it = t;
  it.dtype = TPU_S64;
  V iota = tpu_hlo_iota(c->f, it, dim);
  V m = SEL(c, match, iota, tpu_hlo_constant(c->f, it, -1.0));
  V idx = scan(c, m, dim, tpu_hlo_scalar(c->f, TPU_S64, -1.0), NULL, "maximum");
  V outs[2] = {v, idx};
  tpu_op_set_outputs(c, 2, outs);
}


static V lae(tpu_op_ctx_t *c, V a, V b) { return tpu_ew_logaddexp(c, a, b, 0); }

/* logcumsumexp: x (float); ints [dim]. */
static void rule_logcumsumexp(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  if (!tpu_op_require_float(c, t.dtype)) return;
  V y = tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(t.dtype));
  if (t.rank == 0) { tpu_op_finish(c, y, t.dtype); return; }
  int dim = (int)tpu_op_dim(c, tpu_op_int(c, 0), t.rank);
  if (tpu_hlo_func_status(c->f)) return;
  tpu_op_finish(c, scan(c, y, dim, tpu_hlo_scalar(c->f, tpu_op_opmath(t.dtype), -INFINITY), lae, NULL), t.dtype);
}

/* ---- sort / topk ---------------------------------------------------------------------- */

/* sort: x; ints [dim, descending] -> (values, indices int64).  Stable; NaN
 * sorts above every number (last ascending, first descending). */
static void rule_sort(tpu_op_ctx_t *c) {
  V x = c->in[0];
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!t) return;
  int64_t dim = tpu_op_dim(c, tpu_op_int_or(c, 0, -1), t->rank);
  bool desc = tpu_op_int_or(c, 1, 0) != 0;
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
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!t) return;
  int64_t k = tpu_op_int(c, 0);
  int64_t dim = tpu_op_dim(c, tpu_op_int_or(c, 1, -1), t->rank);
  bool largest = tpu_op_int_or(c, 2, 1) != 0;
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
    {"nansum", rule_nansum, 1, 1},
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
    {"powsum", rule_powsum, 1, 1},
    {"logsumexp", rule_logsumexp, 1, 1},
    {"_softmax", rule_softmax, 1, 1},
    {"_log_softmax", rule_log_softmax, 1, 1},
    {"_softmax_backward_data", rule_softmax_backward, 2, 2},
    {"_log_softmax_backward_data", rule_log_softmax_backward, 2, 2},
    {"cumsum", rule_cumsum, 1, 1},
    {"cumprod", rule_cumprod, 1, 1},
    {"cummaxmin", rule_cummaxmin, 1, 1},
    {"logcumsumexp", rule_logcumsumexp, 1, 1},
    {"sort", rule_sort, 1, 1},
    {"topk", rule_topk, 1, 1},
    {NULL, NULL, 0, 0},
};
