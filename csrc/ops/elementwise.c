/* elementwise.c - elementwise arithmetic: add, sub, mul, div (and floor /
 * trunc division), remainder, fmod, pow, maximum / minimum, bitwise and
 * logical ops, comparisons, where, masked_fill, clamp, lerp, addcmul /
 * addcdiv, and dtype conversion.  Math functions are in math.c, activations
 * in activation.c; all three share these conventions.
 *
 * Conventions every rule here shares (the contract with torch_tpu/ops/
 * elementwise.py; each rule's comment adds its own inputs and attrs):
 *
 * - int attr 0 is the RESULT dtype (a tpu_dtype_t code) that the adapter
 *   computed with PyTorch's promotion rules (torch.result_type, and the
 *   int->float promotion of ops like exp or true division).  If it is absent
 *   the rule promotes its tensor inputs itself (a convenience for tests).
 * - "tensor" inputs broadcast together (numpy rules) and are converted to the
 *   result dtype first, exactly as TensorIterator casts operands to the
 *   common dtype.
 * - f16/bf16 results are computed in f32 and rounded once at the end (PyTorch
 *   CPU's opmath); every other dtype computes in itself.
 * - "coefficient" inputs (alpha, negative_slope, beta, threshold, value ...)
 *   are runtime 0-d scalars converted straight to the compute dtype, the way
 *   PyTorch converts Scalars to opmath (no rounding through bf16).  The
 *   adapter passes them with the result dtype's compute type (float64 for
 *   double results) so no precision is lost on the way.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* ---- binary arithmetic ------------------------------------------------------ */

/* add / sub: inputs (a, b[, alpha]); ints [dtype].  a + alpha * b (a - alpha * b).
 * Bool: add is or, multiply is and (PyTorch's bool add). */
static void addsub_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt, ct;
  V v[3];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V b = v[1];
  if (c->nin > 2) b = ct == TPU_PRED ? AND(c, v[2], b) : MUL(c, v[2], b);
  if (ct == TPU_PRED && !strcmp(op, "add")) { tpu_op_finish(c, OR(c, v[0], b), dt); return; }
  tpu_op_finish(c, tpu_hlo_binary(c->f, op, v[0], b), dt);
}
static void rule_add(tpu_op_ctx_t *c) { addsub_rule(c, "add"); }
static void rule_sub(tpu_op_ctx_t *c) { addsub_rule(c, "subtract"); }

/* mul: inputs (a, b); ints [dtype]. */
static void rule_mul(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  if (ct == TPU_PRED) { tpu_op_finish(c, AND(c, v[0], v[1]), dt); return; }
  tpu_op_finish(c, MUL(c, v[0], v[1]), dt);
}

/* Python-style integer/float floor division pieces (PyTorch div_floor_*). */
static V floordiv_float(tpu_op_ctx_t *c, V a, V b) {
  V mod = tpu_hlo_binary(c->f, "remainder", a, b);
  V div = DIV(c, SUB(c, a, mod), b);
  V adjust = AND(c, CMPK(c, "NE", mod, 0.0), CMP(c, "NE", CMPK(c, "LT", b, 0.0), CMPK(c, "LT", mod, 0.0)));
  div = SEL(c, adjust, ADDK(c, div, -1.0), div);
  V fl = UN(c, "floor", div);
  fl = SEL(c, CMPK(c, "GT", SUB(c, div, fl), 0.5), ADDK(c, fl, 1.0), fl);
  V q = DIV(c, a, b);
  V zero = K(c, a, 0.0);
  V signed_zero = SEL(c, tpu_ew_signbit(c, q), UN(c, "negate", zero), zero);
  V r = SEL(c, CMPK(c, "NE", div, 0.0), fl, signed_zero);
  return SEL(c, CMPK(c, "EQ", b, 0.0), q, r);
}
static V floordiv_int(tpu_op_ctx_t *c, V a, V b) {
  V q = DIV(c, a, b);
  if (tpu_op_is_uint(tpu_op_dtype(c, a))) return q;
  V r = tpu_hlo_binary(c->f, "remainder", a, b);
  V adjust = AND(c, CMPK(c, "NE", r, 0.0), CMP(c, "NE", CMPK(c, "LT", a, 0.0), CMPK(c, "LT", b, 0.0)));
  return SEL(c, adjust, ADDK(c, q, -1.0), q);
}

/* div: inputs (a, b); ints [dtype, rounding_mode (0 none, 1 trunc, 2 floor)].
 * rounding none: true division (the adapter's dtype is a float type).
 * Integer trunc/floor are integer divisions; a zero divisor is a
 * device-side check (RuntimeError "ZeroDivisionError", as PyTorch's CPU). */
static void rule_div(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 2);
  int64_t mode = tpu_op_int_or(c, 1, 0);
  tpu_dtype_t ct = tpu_op_opmath(dt);
  V v[2];
  if (!tpu_op_load(c, 2, dt, ct, v)) return;
  V a = v[0], b = v[1], r;
  if (mode != 0) /* integer division by zero (no check for floating types) */
    tpu_op_check_nonzero(c, b, "ZeroDivisionError (div(): integer division by zero, rounding_mode='%s')",
                         mode == 1 ? "trunc" : "floor");
  if (mode == 0) r = DIV(c, a, b);
  else if (tpu_dtype_is_float(ct)) r = mode == 1 ? tpu_ew_trunc(c, DIV(c, a, b)) : floordiv_float(c, a, b);
  else r = mode == 1 ? DIV(c, a, b) : floordiv_int(c, a, b);
  tpu_op_finish(c, r, dt);
}

/* remainder: inputs (a, b); ints [dtype].  Result has the sign of b (Python %). */
static void rule_remainder(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V a = v[0], b = v[1];
  tpu_op_check_nonzero(c, b, "ZeroDivisionError (remainder(): integer remainder by zero)");
  V m = tpu_hlo_binary(c->f, "remainder", a, b);
  if (tpu_op_is_uint(ct)) { tpu_op_finish(c, m, dt); return; }
  V adjust = AND(c, CMPK(c, "NE", m, 0.0), CMP(c, "NE", CMPK(c, "LT", b, 0.0), CMPK(c, "LT", m, 0.0)));
  tpu_op_finish(c, SEL(c, adjust, ADD(c, m, b), m), dt);
}

/* fmod: inputs (a, b); ints [dtype].  C fmod / truncated integer remainder. */
static void rule_fmod(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  tpu_op_check_nonzero(c, v[1], "ZeroDivisionError (fmod(): integer remainder by zero)");
  tpu_op_finish(c, tpu_hlo_binary(c->f, "remainder", v[0], v[1]), dt);
}

/* pow: inputs (base, exponent) (either may be a 0-d scalar); ints [dtype].
 * Integer powers with negative exponents follow PyTorch: 1 for base 1,
 * +-1 for base -1, else 0. */
static void rule_pow(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V a = v[0], b = v[1];
  if (ct == TPU_PRED) { /* x ** y on bools: x or not y */
    { tpu_op_finish(c, OR(c, a, UN(c, "not", b)), dt); return; }
  }
  if (!tpu_op_is_sint(ct)) { tpu_op_finish(c, POW(c, a, b), dt); return; }
  V neg = CMPK(c, "LT", b, 0.0);
  V pos = POW(c, a, SEL(c, neg, K(c, b, 0.0), b));
  V odd = CMPK(c, "NE", tpu_hlo_binary(c->f, "and", b, K(c, b, 1.0)), 0.0);
  V m1 = SEL(c, odd, K(c, a, -1.0), K(c, a, 1.0));
  V rneg = SEL(c, CMPK(c, "EQ", a, 1.0), K(c, a, 1.0), SEL(c, CMPK(c, "EQ", a, -1.0), m1, K(c, a, 0.0)));
  tpu_op_finish(c, SEL(c, neg, rneg, pos), dt);
}

/* pow_scalar: input (base, floating); ints [dtype, exponent code].  The
 * exponents PyTorch's CPU kernel computes without std::pow, with its
 * formulas: 1 = 0.5 (sqrt), 2 = -0.5 (1/sqrt), 3 = -1 (1/x), 4 = 2 (x*x),
 * 5 = 3 (x*x*x), 6 = -2 (1/(x*x)); bfloat16 rounds after each multiply, as
 * CPU's vectorized bfloat16 does.  A compile-time exponent: x ** 2 (every
 * RMSNorm) is a multiply instead of exp(2 log x). */
static void rule_pow_scalar(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V x;
  if (!tpu_op_ew_start(c, 1, &dt, &ct, &x)) return;
  int64_t code = tpu_op_int(c, 1);
  if (dt == TPU_BF16 && (code == 5 || code == 6)) x = tpu_hlo_convert(c->f, x, dt);
  V r;
  switch (code) {
    case 1: r = UN(c, "sqrt", x); break;
    case 2: r = DIV(c, K(c, x, 1.0), UN(c, "sqrt", x)); break; /* CPU's 1/sqrt: XLA's rsqrt is looser */
    case 3: r = DIV(c, K(c, x, 1.0), x); break;
    case 4: r = MUL(c, x, x); break;
    case 5: r = MUL(c, MUL(c, x, x), x); break;
    case 6: r = DIV(c, K(c, x, 1.0), MUL(c, x, x)); break;
    default:
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "pow_scalar: unknown exponent code %lld", (long long)code);
      return;
  }
  tpu_op_finish(c, r, dt);
}

/* maximum / minimum: inputs (a, b); ints [dtype].  NaN propagates.
 * fmax / fmin: NaN is ignored unless both are NaN. */
static void minmax_rule(tpu_op_ctx_t *c, int is_max, int ignore_nan) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 2);
  V v[2];
  if (!tpu_op_load(c, 2, dt, dt, v)) return;
  V a = v[0], b = v[1];
  if (dt == TPU_PRED) { tpu_op_finish(c, is_max ? OR(c, a, b) : AND(c, a, b), dt); return; }
  V r;
  if (tpu_dtype_is_float(dt)) {
    /* Explicit NaN handling: does not depend on the backend's max semantics. */
    V m = SEL(c, CMP(c, is_max ? "GT" : "LT", a, b), a, b);
    V an = tpu_ew_isnan(c, a), bn = tpu_ew_isnan(c, b);
    if (ignore_nan) r = SEL(c, an, b, SEL(c, bn, a, m));
    else r = SEL(c, an, a, SEL(c, bn, b, m));
  } else {
    r = is_max ? MAX(c, a, b) : MIN(c, a, b);
  }
  tpu_op_finish(c, r, dt);
}
static void rule_maximum(tpu_op_ctx_t *c) { minmax_rule(c, 1, 0); }
static void rule_minimum(tpu_op_ctx_t *c) { minmax_rule(c, 0, 0); }
static void rule_fmax(tpu_op_ctx_t *c) { minmax_rule(c, 1, 1); }
static void rule_fmin(tpu_op_ctx_t *c) { minmax_rule(c, 0, 1); }

/* bitwise_and / or / xor: inputs (a, b); ints [dtype] (integer or bool). */
static void bitwise_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 2);
  if (tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'", c->name, tpu_dtype_name(dt));
    return;
  }
  V v[2];
  if (!tpu_op_load(c, 2, dt, dt, v)) return;
  tpu_op_finish(c, tpu_hlo_binary(c->f, op, v[0], v[1]), dt);
}
static void rule_bitwise_and(tpu_op_ctx_t *c) { bitwise_rule(c, "and"); }
static void rule_bitwise_or(tpu_op_ctx_t *c) { bitwise_rule(c, "or"); }
static void rule_bitwise_xor(tpu_op_ctx_t *c) { bitwise_rule(c, "xor"); }

/* bitwise_not: inputs x; ints [dtype]. */
static void rule_bitwise_not(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  if (tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "\"bitwise_not_cpu\" not implemented for '%s'", tpu_dtype_name(dt));
    return;
  }
  V v[1];
  if (!tpu_op_load(c, 1, dt, dt, v)) return;
  tpu_op_finish(c, UN(c, "not", v[0]), dt);
}

/* bitwise_left_shift / bitwise_right_shift: inputs (a, b); ints [dtype].
 * Shifts of >= the bit width (or negative) give 0 (-1 for negative a >>). */
static void shift_rule(tpu_op_ctx_t *c, int left) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 2);
  if (!tpu_dtype_is_int(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'", c->name, tpu_dtype_name(dt));
    return;
  }
  V v[2];
  if (!tpu_op_load(c, 2, dt, dt, v)) return;
  V a = v[0], b = v[1];
  double bits = 8.0 * (double)tpu_dtype_size(dt);
  V oob = CMPK(c, "GE", b, bits);
  if (tpu_op_is_sint(dt)) oob = OR(c, oob, CMPK(c, "LT", b, 0.0));
  V bs = SEL(c, oob, K(c, b, 0.0), b);
  V r;
  if (left) {
    r = SEL(c, oob, K(c, a, 0.0), tpu_hlo_binary(c->f, "shift_left", a, bs));
  } else if (tpu_op_is_sint(dt)) {
    V fill = SEL(c, CMPK(c, "LT", a, 0.0), K(c, a, -1.0), K(c, a, 0.0));
    r = SEL(c, oob, fill, tpu_hlo_binary(c->f, "shift_right_arithmetic", a, bs));
  } else {
    r = SEL(c, oob, K(c, a, 0.0), tpu_hlo_binary(c->f, "shift_right_logical", a, bs));
  }
  tpu_op_finish(c, r, dt);
}
static void rule_bitwise_left_shift(tpu_op_ctx_t *c) { shift_rule(c, 1); }
static void rule_bitwise_right_shift(tpu_op_ctx_t *c) { shift_rule(c, 0); }

/* logical_and / or / xor: inputs (a, b); ints [dtype] (default bool).
 * Inputs are tested against zero in their own dtype. */
static void logical_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? tpu_op_result_dtype(c, 0, 0) : TPU_PRED;
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 2, dims);
  if (rank < 0) return;
  V a = tpu_hlo_broadcast_to(c->f, tpu_ew_to_bool(c, c->in[0]), rank, dims);
  V b = tpu_hlo_broadcast_to(c->f, tpu_ew_to_bool(c, c->in[1]), rank, dims);
  tpu_op_finish(c, tpu_hlo_binary(c->f, op, a, b), dt);
}
static void rule_logical_and(tpu_op_ctx_t *c) { logical_rule(c, "and"); }
static void rule_logical_or(tpu_op_ctx_t *c) { logical_rule(c, "or"); }
static void rule_logical_xor(tpu_op_ctx_t *c) { logical_rule(c, "xor"); }

/* logical_not: inputs x; ints [dtype] (default bool). */
static void rule_logical_not(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? tpu_op_result_dtype(c, 0, 0) : TPU_PRED;
  tpu_op_finish(c, UN(c, "not", tpu_ew_to_bool(c, c->in[0])), dt);
}

/* eq / ne / lt / le / gt / ge: inputs (a, b); ints [compute dtype (the
 * promoted dtype of a and b), result dtype (default bool)]. */
static void compare_rule(tpu_op_ctx_t *c, const char *dir) {
  tpu_dtype_t ct = tpu_op_result_dtype(c, 0, 2);
  tpu_dtype_t dt = tpu_op_nints(c) > 1 ? tpu_op_result_dtype(c, 1, 0) : TPU_PRED;
  V v[2];
  if (!tpu_op_load(c, 2, ct, ct, v)) return;
  tpu_op_finish(c, CMP(c, dir, v[0], v[1]), dt);
}
static void rule_eq(tpu_op_ctx_t *c) { compare_rule(c, "EQ"); }
static void rule_ne(tpu_op_ctx_t *c) { compare_rule(c, "NE"); }
static void rule_lt(tpu_op_ctx_t *c) { compare_rule(c, "LT"); }
static void rule_le(tpu_op_ctx_t *c) { compare_rule(c, "LE"); }
static void rule_gt(tpu_op_ctx_t *c) { compare_rule(c, "GT"); }
static void rule_ge(tpu_op_ctx_t *c) { compare_rule(c, "GE"); }

/* assert_async: inputs (x: any shape and dtype, complex too; the adapter
 * passes the 1-element tensor); ints [nbytes, the message's
 * bytes packed 8 to an int, little-endian].  A device-side check that some
 * element of x is non-zero (NaN is): RuntimeError with the message, or with
 * CPU's "Expected Tensor with single nonzero value, but got zero" when
 * nbytes is 0.  The output is the condition, a 0-d bool nothing reads. */
static void rule_assert_async(tpu_op_ctx_t *c) {
  int64_t n = tpu_op_int(c, 0);
  char msg[TPU_OP_CHECK_MSG_MAX];
  if (n < 0 || n >= (int64_t)sizeof msg || tpu_op_nints(c) != 1 + (int)((n + 7) / 8)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: malformed message attributes", c->name);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    msg[i] = (char)(((uint64_t)tpu_op_int(c, 1 + (int)(i / 8)) >> (8 * (i % 8))) & 0xff);
  msg[n] = 0;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  V ok = tpu_ew_to_bool(c, c->in[0]);
  if (t.rank > 0) {
    int64_t dims[TPU_MAX_RANK];
    for (int d = 0; d < t.rank; d++) dims[d] = d;
    ok = tpu_hlo_reduce(c->f, ok, tpu_hlo_scalar(c->f, TPU_PRED, 0), dims, t.rank, "or");
  }
  tpu_op_check(c, ok, TPU_HLO_NONE, TPU_INVALID_ARGUMENT, "%s",
               n ? msg : "Expected Tensor with single nonzero value, but got zero");
  tpu_op_set_output(c, ok);
}

/* ---- select / clamp / fills --------------------------------------------------- */

/* where: inputs (cond, a, b); ints [dtype of a/b].  cond != 0 picks a. */
static void rule_where(tpu_op_ctx_t *c) {
  tpu_dtype_t dt;
  if (tpu_op_nints(c) > 0) dt = tpu_op_result_dtype(c, 0, 0);
  else dt = tpu_op_promote(tpu_op_dtype(c, c->in[1]), tpu_op_dtype(c, c->in[2]));
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 3, dims);
  if (rank < 0) return;
  V p = tpu_hlo_broadcast_to(c->f, tpu_ew_to_bool(c, c->in[0]), rank, dims);
  V a = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[1], dt), rank, dims);
  V b = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], dt), rank, dims);
  tpu_op_finish(c, SEL(c, p, a, b), dt);
}

/* masked_fill: inputs (x, mask, value); ints [dtype (x's)].  mask != 0
 * takes value; shapes broadcast (the out-of-place masked_fill expands). */
static void rule_masked_fill(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? tpu_op_result_dtype(c, 0, 0) : tpu_op_dtype(c, c->in[0]);
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 3, dims);
  if (rank < 0) return;
  V x = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[0], dt), rank, dims);
  V m = tpu_hlo_broadcast_to(c->f, tpu_ew_to_bool(c, c->in[1]), rank, dims);
  V val = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], dt), rank, dims);
  tpu_op_finish(c, SEL(c, m, val, x), dt);
}

/* clamp: inputs (x[, min][, max]); ints [dtype, has_min, has_max] (without
 * the flags: min then max by position).  min(max(x, min), max), NaN
 * propagating from any operand.  clamp_min: (x, min); clamp_max: (x, max). */
static void clamp_impl(tpu_op_ctx_t *c, int has_min, int has_max) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, c->nin);
  tpu_dtype_t ct = tpu_op_opmath(dt);
  if (has_min + has_max + 1 != c->nin) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs, got %d", c->name, has_min + has_max + 1, c->nin);
    return;
  }
  V v[3];
  if (!tpu_op_load(c, c->nin, dt, ct, v)) return;
  V lo = has_min ? v[1] : TPU_HLO_NONE, hi = has_max ? v[1 + has_min] : TPU_HLO_NONE;
  tpu_op_finish(c, tpu_ew_clamp(c, v[0], lo, hi), dt);
}
static void rule_clamp(tpu_op_ctx_t *c) {
  int has_min = (int)tpu_op_int_or(c, 1, c->nin > 1);
  int has_max = (int)tpu_op_int_or(c, 2, c->nin > 2);
  clamp_impl(c, has_min, has_max);
}
static void rule_clamp_min(tpu_op_ctx_t *c) { clamp_impl(c, 1, 0); }
static void rule_clamp_max(tpu_op_ctx_t *c) { clamp_impl(c, 0, 1); }

/* lerp: inputs (start, end, weight); ints [dtype].  PyTorch's two-sided form:
 * |w| < 0.5 ? start + w (end - start) : end - (end - start)(1 - w). */
static void rule_lerp(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 2);
  tpu_dtype_t ct = tpu_op_opmath(dt);
  V v[3];
  if (!tpu_op_load(c, 3, dt, ct, v)) return;
  V s = v[0], e = v[1], w = v[2];
  V diff = SUB(c, e, s);
  V lo = ADD(c, s, MUL(c, w, diff));
  V hi = SUB(c, e, MUL(c, diff, SUB(c, K(c, w, 1.0), w)));
  tpu_op_finish(c, SEL(c, CMPK(c, "LT", UN(c, "abs", w), 0.5), lo, hi), dt);
}

/* addcmul: inputs (self, t1, t2, value); ints [dtype].  self + value*t1*t2.
 * addcdiv: the same with self + value*t1/t2. */
static void addc_rule(tpu_op_ctx_t *c, int is_div) {
  tpu_dtype_t dt, ct;
  V v[4];
  if (!tpu_op_ew_start(c, 3, &dt, &ct, v)) return;
  V val = c->nin > 3 ? v[3] : K(c, v[0], 1.0);
  V prod = MUL(c, val, v[1]);
  prod = is_div ? DIV(c, prod, v[2]) : MUL(c, prod, v[2]);
  tpu_op_finish(c, ADD(c, v[0], prod), dt);
}
static void rule_addcmul(tpu_op_ctx_t *c) { addc_rule(c, 0); }
static void rule_addcdiv(tpu_op_ctx_t *c) { addc_rule(c, 1); }

/* ---- conversion ------------------------------------------------------------------ */

/* convert: inputs x; ints [dtype].  PyTorch semantics: float -> int
 * truncates toward zero, anything -> bool is x != 0 (nan -> true). */
static void rule_convert(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  if (dt == TPU_DTYPE_INVALID) return;
  V x = c->in[0];
  tpu_dtype_t from = tpu_op_dtype(c, x);
  if (from == dt) { tpu_op_set_output(c, x); return; }
  tpu_hlo_type_t t = tpu_op_type(c, x);
  if (tpu_hlo_type_numel(&t) == 0) {
    /* No elements, no values: a 0-element input is a constant here, and
     * XLA's StableHLO folder crashes converting a 0-element complex splat
     * (SIGSEGV in foldConvert; linalg.eigvals' backward of an empty batch) */
    t.dtype = dt;
    tpu_op_set_output(c, tpu_hlo_constant(c->f, t, 0));
    return;
  }
  if (dt == TPU_PRED) { tpu_op_set_output(c, tpu_ew_to_bool(c, x)); return; }
  if (tpu_dtype_is_float(from) && tpu_dtype_is_int(dt)) {
    /* Through the trunc so every backend agrees; half types via f32. */
    x = tpu_ew_trunc(c, tpu_hlo_cast(c->f, x, tpu_op_opmath(from)));
  }
  tpu_op_set_output(c, tpu_hlo_convert(c->f, x, dt));
}

const tpu_op_rule_t tpu_rules_elementwise[] = {
    /* arithmetic */
    {"add", rule_add, 2, 3},
    {"sub", rule_sub, 2, 3},
    {"mul", rule_mul, 2, 2},
    {"div", rule_div, 2, 2},
    {"remainder", rule_remainder, 2, 2},
    {"fmod", rule_fmod, 2, 2},
    {"pow", rule_pow, 2, 2},
    {"pow_scalar", rule_pow_scalar, 1, 1},
    {"maximum", rule_maximum, 2, 2},
    {"minimum", rule_minimum, 2, 2},
    {"fmax", rule_fmax, 2, 2},
    {"fmin", rule_fmin, 2, 2},
    {"bitwise_and", rule_bitwise_and, 2, 2},
    {"bitwise_or", rule_bitwise_or, 2, 2},
    {"bitwise_xor", rule_bitwise_xor, 2, 2},
    {"bitwise_not", rule_bitwise_not, 1, 1},
    {"bitwise_left_shift", rule_bitwise_left_shift, 2, 2},
    {"bitwise_right_shift", rule_bitwise_right_shift, 2, 2},
    {"logical_and", rule_logical_and, 2, 2},
    {"logical_or", rule_logical_or, 2, 2},
    {"logical_xor", rule_logical_xor, 2, 2},
    {"logical_not", rule_logical_not, 1, 1},
    /* compare / select */
    {"eq", rule_eq, 2, 2},
    {"ne", rule_ne, 2, 2},
    {"lt", rule_lt, 2, 2},
    {"le", rule_le, 2, 2},
    {"gt", rule_gt, 2, 2},
    {"ge", rule_ge, 2, 2},
    {"assert_async", rule_assert_async, 1, 1},
    {"where", rule_where, 3, 3},
    {"masked_fill", rule_masked_fill, 3, 3},
    {"clamp", rule_clamp, 1, 3},
    {"clamp_min", rule_clamp_min, 2, 2},
    {"clamp_max", rule_clamp_max, 2, 2},
    {"lerp", rule_lerp, 3, 3},
    {"addcmul", rule_addcmul, 3, 4},
    {"addcdiv", rule_addcdiv, 3, 4},
    /* conversion */
    {"convert", rule_convert, 1, 1},
    {NULL, NULL, 0, 0},
};
