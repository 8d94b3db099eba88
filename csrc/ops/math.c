/* math.c - elementwise math functions: exponentials and logarithms,
 * trigonometric and hyperbolic functions, roots, rounding, sign, the
 * classification predicates (isnan ...), and the special functions (erf,
 * erfinv, lgamma, digamma, polygamma, the Bessel functions i0 / i1 and their
 * scaled forms, entr, zeta, nextafter, logaddexp, xlogy, logit).  The
 * conventions are elementwise.c's: int attr 0 is the result dtype the
 * adapter computed, half types compute in float32 and round once.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* erfinv (Giles, "Approximating the erfinv function"). */
static V erfinv_(tpu_op_ctx_t *c, V x) {
  V w = UN(c, "negate", UN(c, "log_plus_one", UN(c, "negate", MUL(c, x, x))));
  V p;
  if (tpu_op_dtype(c, x) != TPU_F64) {
    static const double A[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                               -0.00125372503, -0.00417768164, 0.246640727,    1.50140941};
    static const double B[] = {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                               -0.0076224613,   0.00943887047,  1.00167406,    2.83297682};
    V lt = CMPK(c, "LT", w, 5.0);
    V t = SEL(c, lt, ADDK(c, w, -2.5), ADDK(c, UN(c, "sqrt", w), -3.0));
    p = SEL(c, lt, K(c, x, A[0]), K(c, x, B[0]));
    for (int i = 1; i < 9; i++) p = ADD(c, MUL(c, p, t), SEL(c, lt, K(c, x, A[i]), K(c, x, B[i])));
  } else {
    static const double A[] = {
        -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18,
        1.115787767802518096e-17,   -1.333171662854620906e-16,  2.0972767875968561637e-17,
        6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
        2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
        1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
        4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
        0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
        0.24015818242558961693,     1.6536545626831027356};
    static const double B[] = {
        2.2137376921775787049e-09,  9.0756561938885390979e-08,  -2.7517406297064545428e-07,
        1.8239629214389227755e-08,  1.5027403968909827627e-06,  -4.013867526981545969e-06,
        2.9234449089955446044e-06,  1.2475304481671778723e-05,  -4.7318229009055733981e-05,
        6.8284851459573175448e-05,  2.4031110387097893999e-05,  -0.0003550375203628474796,
        0.00095328937973738049703,  -0.0016882755560235047313, 0.0024914420961078508066,
        -0.0037512085075692412107,  0.005370914553590063617,    1.0052589676941592334,
        3.0838856104922207635};
    static const double C[] = {
        -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
        -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
        2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
        -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
        7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
        1.0103004648645343977,      4.8499064014085844221};
    /* Three regions; the coefficient lists have 23 / 19 / 17 terms. */
    V lt6 = CMPK(c, "LT", w, 6.25), lt16 = CMPK(c, "LT", w, 16.0);
    V sw = UN(c, "sqrt", w);
    V t = SEL(c, lt6, ADDK(c, w, -3.125), SEL(c, lt16, ADDK(c, sw, -3.25), ADDK(c, sw, -5.0)));
    /* Align the three lists at their last term: term j of A is term j-4 of B, j-6 of C. */
    p = K(c, x, 0.0);
    for (int j = 0; j < 23; j++) {
      V a = K(c, x, A[j]);
      V b = j >= 4 ? K(c, x, B[j - 4]) : K(c, x, 0.0);
      V cc = j >= 6 ? K(c, x, C[j - 6]) : K(c, x, 0.0);
      V k = SEL(c, lt6, a, SEL(c, lt16, b, cc));
      p = ADD(c, MUL(c, p, t), k);
    }
  }
  V r = MUL(c, p, x);
  /* erfinv(+-1) = +-inf; |x| > 1 -> nan (log1p of a negative below -1). */
  V inf = MULK(c, x, INFINITY);
  return SEL(c, CMPK(c, "EQ", UN(c, "abs", x), 1.0), inf, r);
}

/* ---- unary math (x already in the compute dtype) -------------------------- */

static V u_neg(tpu_op_ctx_t *c, V x) { return UN(c, "negate", x); }
static V u_abs(tpu_op_ctx_t *c, V x) {
  return tpu_op_dtype(c, x) == TPU_PRED || tpu_op_is_uint(tpu_op_dtype(c, x)) ? x : UN(c, "abs", x);
}
static V u_exp(tpu_op_ctx_t *c, V x) { return UN(c, "exponential", x); }
static V u_exp2(tpu_op_ctx_t *c, V x) { return POW(c, K(c, x, 2.0), x); }
static V u_expm1(tpu_op_ctx_t *c, V x) { return UN(c, "exponential_minus_one", x); }
static V u_log(tpu_op_ctx_t *c, V x) { return UN(c, "log", x); }
static V u_log2(tpu_op_ctx_t *c, V x) { return MULK(c, UN(c, "log", x), 1.4426950408889634074); }
static V u_log10(tpu_op_ctx_t *c, V x) { return MULK(c, UN(c, "log", x), 0.43429448190325182765); }
static V u_log1p(tpu_op_ctx_t *c, V x) { return UN(c, "log_plus_one", x); }
static V u_sqrt(tpu_op_ctx_t *c, V x) { return UN(c, "sqrt", x); }
static V u_rsqrt(tpu_op_ctx_t *c, V x) { return UN(c, "rsqrt", x); }
static V u_reciprocal(tpu_op_ctx_t *c, V x) { return DIV(c, K(c, x, 1.0), x); }
static V u_sigmoid(tpu_op_ctx_t *c, V x) { return tpu_ew_sigmoid(c, x); }
static V u_tanh(tpu_op_ctx_t *c, V x) { return UN(c, "tanh", x); }
static V u_sin(tpu_op_ctx_t *c, V x) { return UN(c, "sine", x); }
static V u_cos(tpu_op_ctx_t *c, V x) { return UN(c, "cosine", x); }
static V u_tan(tpu_op_ctx_t *c, V x) { return UN(c, "tan", x); }
static V u_atan(tpu_op_ctx_t *c, V x) { return tpu_hlo_binary(c->f, "atan2", x, K(c, x, 1.0)); }
static V one_minus_sq(tpu_op_ctx_t *c, V x) { /* (1-x)(1+x), exact near |x|=1 */
  return MUL(c, SUB(c, K(c, x, 1.0), x), ADDK(c, x, 1.0));
}
static V u_asin(tpu_op_ctx_t *c, V x) {
  return tpu_hlo_binary(c->f, "atan2", x, UN(c, "sqrt", one_minus_sq(c, x)));
}
static V u_acos(tpu_op_ctx_t *c, V x) {
  return tpu_hlo_binary(c->f, "atan2", UN(c, "sqrt", one_minus_sq(c, x)), x);
}
/* e^|x| / 2 as (h / 2) * h with h = e^(|x|/2): no early overflow, and no
 * rounding of |x| - ln2 (which costs up to |x| ulps). */
static V half_exp_abs(tpu_op_ctx_t *c, V x) {
  V h = UN(c, "exponential", MULK(c, UN(c, "abs", x), 0.5));
  return MUL(c, MULK(c, h, 0.5), h);
}
static V u_sinh(tpu_op_ctx_t *c, V x) {
  V small = MULK(c, SUB(c, UN(c, "exponential_minus_one", x),
                        UN(c, "exponential_minus_one", UN(c, "negate", x))), 0.5);
  V h = half_exp_abs(c, x);
  V big = SUB(c, h, DIV(c, K(c, x, 0.25), h));
  big = SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "negate", big), big);
  return SEL(c, CMPK(c, "LT", UN(c, "abs", x), 1.0), small, big);
}
static V u_cosh(tpu_op_ctx_t *c, V x) {
  V h = half_exp_abs(c, x);
  return ADD(c, h, DIV(c, K(c, x, 0.25), h));
}
static double big_threshold(tpu_op_ctx_t *c, V x) { /* 1/sqrt(eps) */
  return tpu_op_dtype(c, x) == TPU_F64 ? 67108864.0 : 4096.0;
}
static V u_asinh(tpu_op_ctx_t *c, V x) {
  V ax = UN(c, "abs", x);
  V ax2 = MUL(c, ax, ax);
  V small = UN(c, "log_plus_one",
               ADD(c, ax, DIV(c, ax2, ADDK(c, UN(c, "sqrt", ADDK(c, ax2, 1.0)), 1.0))));
  V big = ADDK(c, UN(c, "log", ax), 0.69314718055994530942);
  V r = SEL(c, CMPK(c, "GT", ax, big_threshold(c, x)), big, small);
  return SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "negate", r), r);
}
static V u_acosh(tpu_op_ctx_t *c, V x) {
  V y = ADDK(c, x, -1.0);
  V small = UN(c, "log_plus_one", ADD(c, y, UN(c, "sqrt", MUL(c, y, ADDK(c, x, 1.0)))));
  V big = ADDK(c, UN(c, "log", x), 0.69314718055994530942);
  return SEL(c, CMPK(c, "GT", x, big_threshold(c, x)), big, small);
}
static V u_atanh(tpu_op_ctx_t *c, V x) {
  /* 0.5 * log1p(2x / (1 - x)) */
  V q = DIV(c, ADD(c, x, x), SUB(c, K(c, x, 1.0), x));
  return MULK(c, UN(c, "log_plus_one", q), 0.5);
}
static V u_floor(tpu_op_ctx_t *c, V x) { return tpu_dtype_is_float(tpu_op_dtype(c, x)) ? UN(c, "floor", x) : x; }
static V u_ceil(tpu_op_ctx_t *c, V x) { return tpu_dtype_is_float(tpu_op_dtype(c, x)) ? UN(c, "ceil", x) : x; }
static V u_trunc(tpu_op_ctx_t *c, V x) { return tpu_ew_trunc(c, x); }
static V u_frac(tpu_op_ctx_t *c, V x) { return SUB(c, x, tpu_ew_trunc(c, x)); }
static V u_sign(tpu_op_ctx_t *c, V x) {
  tpu_dtype_t dt = tpu_op_dtype(c, x);
  if (dt == TPU_PRED) return x;
  /* (0 < x) - (x < 0): sign(nan) = 0 as PyTorch. */
  V pos = tpu_hlo_convert(c->f, CMPK(c, "GT", x, 0.0), dt);
  V neg = tpu_hlo_convert(c->f, CMPK(c, "LT", x, 0.0), dt);
  return SUB(c, pos, neg);
}
static V u_square(tpu_op_ctx_t *c, V x) { return MUL(c, x, x); }

TPU_UNARY_RULE(neg)
TPU_UNARY_RULE(abs)
TPU_UNARY_RULE(exp)
TPU_UNARY_RULE(exp2)
TPU_UNARY_RULE(expm1)
TPU_UNARY_RULE(log)
TPU_UNARY_RULE(log2)
TPU_UNARY_RULE(log10)
TPU_UNARY_RULE(log1p)
TPU_UNARY_RULE(sqrt)
TPU_UNARY_RULE(rsqrt)
TPU_UNARY_RULE(reciprocal)
TPU_UNARY_RULE(sigmoid)
TPU_UNARY_RULE(tanh)
TPU_UNARY_RULE(sin)
TPU_UNARY_RULE(cos)
TPU_UNARY_RULE(tan)
TPU_UNARY_RULE(asin)
TPU_UNARY_RULE(acos)
TPU_UNARY_RULE(atan)
TPU_UNARY_RULE(sinh)
TPU_UNARY_RULE(cosh)
TPU_UNARY_RULE(asinh)
TPU_UNARY_RULE(acosh)
TPU_UNARY_RULE(atanh)
TPU_UNARY_RULE(floor)
TPU_UNARY_RULE(ceil)
TPU_UNARY_RULE(trunc)
TPU_UNARY_RULE(frac)
TPU_UNARY_RULE(sign)
TPU_UNARY_RULE(square)

static V u_erf(tpu_op_ctx_t *c, V x) { return tpu_ew_erf(c, x); }
static V u_erfc(tpu_op_ctx_t *c, V x) { return tpu_ew_erfc(c, x); }
static V u_erfinv(tpu_op_ctx_t *c, V x) { return erfinv_(c, x); }
TPU_UNARY_RULE(erf)
TPU_UNARY_RULE(erfc)
TPU_UNARY_RULE(erfinv)

/* round: inputs x; ints [dtype, decimals=0].  Half to even; with decimals
 * as PyTorch: d > 0: rint(x * 10^d) / 10^d, d < 0: rint(x / 10^-d) * 10^-d. */
static void rule_round(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  int64_t d = tpu_op_int_or(c, 1, 0);
  V v[1];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  V x = v[0];
  if (!tpu_dtype_is_float(ct)) { tpu_op_finish(c, x, dt); return; }
  if (d == 0) { tpu_op_finish(c, UN(c, "round_nearest_even", x), dt); return; }
  double p = pow(10.0, (double)(d > 0 ? d : -d));
  V r;
  if (d > 0) r = DIV(c, UN(c, "round_nearest_even", MULK(c, x, p)), K(c, x, p));
  else r = MULK(c, UN(c, "round_nearest_even", DIV(c, x, K(c, x, p))), p);
  tpu_op_finish(c, r, dt);
}

/* sgn: same as sign for real dtypes. */
static void rule_sgn(tpu_op_ctx_t *c) { tpu_op_unary_rule(c, u_sign); }

/* signbit: inputs x; result bool (ints [dtype] optional, default bool). */
static void rule_signbit(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? tpu_op_result_dtype(c, 0, 0) : TPU_PRED;
  tpu_op_finish(c, tpu_ew_signbit(c, c->in[0]), dt);
}

/* isnan / isinf / isfinite / isposinf / isneginf: inputs x; result bool. */
static void classify_rule(tpu_op_ctx_t *c, int kind) {
  V x = c->in[0];
  tpu_dtype_t xt = tpu_op_dtype(c, x);
  V r;
  if (!tpu_dtype_is_float(xt)) {
    V t = CMP(c, "EQ", x, x); /* all true */
    r = kind == 2 ? t : UN(c, "not", t);
  } else {
    switch (kind) {
      case 0: r = tpu_ew_isnan(c, x); break;
      case 1: r = CMPK(c, "EQ", UN(c, "abs", x), INFINITY); break;
      case 2: r = UN(c, "is_finite", x); break;
      case 3: r = CMPK(c, "EQ", x, INFINITY); break;
      default: r = CMPK(c, "EQ", x, -INFINITY); break;
    }
  }
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? tpu_op_result_dtype(c, 0, 0) : TPU_PRED;
  tpu_op_finish(c, r, dt);
}
static void rule_isnan(tpu_op_ctx_t *c) { classify_rule(c, 0); }
static void rule_isinf(tpu_op_ctx_t *c) { classify_rule(c, 1); }
static void rule_isfinite(tpu_op_ctx_t *c) { classify_rule(c, 2); }
static void rule_isposinf(tpu_op_ctx_t *c) { classify_rule(c, 3); }
static void rule_isneginf(tpu_op_ctx_t *c) { classify_rule(c, 4); }

/* atan2: inputs (a, b); ints [dtype] (a float type). */
static void rule_atan2(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  tpu_op_finish(c, tpu_hlo_binary(c->f, "atan2", v[0], v[1]), dt);
}

/* nan_to_num: inputs (x, nan, posinf, neginf) (replacement scalars in x's
 * dtype; the adapter computes the finfo defaults); ints [dtype]. */
static void rule_nan_to_num(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  if (!tpu_dtype_is_float(dt)) { tpu_op_finish(c, tpu_hlo_cast(c->f, c->in[0], dt), dt); return; }
  V v[4];
  if (!tpu_op_load(c, 4, dt, dt, v)) return;
  V x = v[0];
  V r = SEL(c, tpu_ew_isnan(c, x), v[1], x);
  r = SEL(c, CMPK(c, "EQ", x, INFINITY), v[2], r);
  r = SEL(c, CMPK(c, "EQ", x, -INFINITY), v[3], r);
  tpu_op_finish(c, r, dt);
}


/* ---- special functions -------------------------------------------------------- */

/* logaddexp: (a, b); ints [dtype, base2]. */
static void rule_logaddexp(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  tpu_op_finish(c, tpu_ew_logaddexp(c, v[0], v[1], (int)tpu_op_int_or(c, 1, 0)), dt);
}


/* logit: (x[, eps]); ints [dtype].  With eps, x is clamped to [eps, 1-eps]. */
static void rule_logit(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, c->nin, dt, tpu_op_opmath(dt), v)) return;
  V x = v[0];
  if (c->nin > 1) {
    V lo = v[1], hi = SUB(c, K(c, lo, 1.0), lo);
    x = SEL(c, CMP(c, "LT", x, lo), lo, SEL(c, CMP(c, "GT", x, hi), hi, x));
  }
  tpu_op_finish(c, UN(c, "log", DIV(c, x, SUB(c, K(c, x, 1.0), x))), dt);
}

/* logit_backward: (grad, x[, eps]); ints [dtype].  No eps: NaN outside
 * [0, 1]; with eps: 0 outside [eps, 1-eps]. */
static void rule_logit_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[3];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, c->nin, dt, tpu_op_opmath(dt), v)) return;
  V g = v[0], x = v[1];
  V d = DIV(c, g, MUL(c, x, SUB(c, K(c, x, 1.0), x)));
  V r;
  if (c->nin > 2) {
    V lo = v[2], hi = SUB(c, K(c, lo, 1.0), lo);
    r = SEL(c, OR(c, CMP(c, "LT", x, lo), CMP(c, "GT", x, hi)), K(c, x, 0.0), d);
  } else {
    r = SEL(c, OR(c, CMPK(c, "LT", x, 0.0), CMPK(c, "GT", x, 1.0)), K(c, x, NAN), d);
  }
  tpu_op_finish(c, r, dt);
}

/* xlogy: (x, y); ints [dtype, log1p].  NaN y -> NaN; x == 0 -> 0;
 * else x * log(y) (x * log1p(y) for xlog1py). */
static void rule_xlogy(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  V x = v[0], y = v[1];
  V r = MUL(c, x, UN(c, tpu_op_int_or(c, 1, 0) ? "log_plus_one" : "log", y));
  r = SEL(c, CMPK(c, "EQ", x, 0.0), K(c, x, 0.0), r);
  tpu_op_finish(c, SEL(c, tpu_ew_isnan(c, y), y, r), dt);
}

/* Special functions: x; ints [dtype (float result)]. */
static void special_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[1];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 1, dt, tpu_op_opmath(dt), v)) return;
  tpu_op_finish(c, UN(c, op, v[0]), dt);
}
static void rule_lgamma(tpu_op_ctx_t *c) { special_rule(c, "chlo.lgamma"); }

/* digamma: PyTorch returns -inf at 0 (+-0) and NaN at negative integers. */
static V digamma_(tpu_op_ctx_t *c, V x) {
  V r = UN(c, "chlo.digamma", x);
  V zero = CMPK(c, "EQ", x, 0.0);
  V negint = AND(c, CMPK(c, "LT", x, 0.0), CMP(c, "EQ", x, UN(c, "floor", x)));
  r = SEL(c, negint, K(c, x, NAN), r);
  return SEL(c, zero, K(c, x, -INFINITY), r);
}
static void rule_digamma(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[1];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 1, dt, tpu_op_opmath(dt), v)) return;
  tpu_op_finish(c, digamma_(c, v[0]), dt);
}

/* polygamma: x; ints [dtype, n >= 0(, compute dtype)].  The adapter asks
 * for f64 compute where the platform has it (the shifted sum below cancels
 * for x < 0). */
static void rule_polygamma(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  int64_t n = tpu_op_int(c, 1);
  V v[1];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 1, dt, tpu_op_opmath(dt), v)) return;
  if (n == 0) { tpu_op_finish(c, digamma_(c, v[0]), dt); return; }
  if (tpu_op_nints(c) > 2) {
    tpu_dtype_t ct = tpu_op_result_dtype(c, 2, 1);
    if (!tpu_op_require_float(c, ct)) return;
    v[0] = tpu_hlo_cast(c->f, v[0], ct);
  }
  /* chlo.polygamma loses accuracy for x < 0: shift x up by the recurrence
   * psi_n(x) = psi_n(x + 1) - (-1)^n n! / x^(n+1) (up to 16 steps; a
   * pole x = -k gives +-inf through 1/0 as PyTorch). */
  V y = v[0], sum = K(c, v[0], 0.0);
  for (int j = 0; j < 16; j++) {
    V m = CMPK(c, "LT", y, 0.5);
    V p = y;
    for (int64_t e = 1; e <= n && e < 64; e++) p = MUL(c, p, y);
    if (n >= 64) p = POW(c, y, K(c, y, (double)(n + 1)));
    sum = SEL(c, m, ADD(c, sum, DIV(c, K(c, y, 1.0), p)), sum);
    y = SEL(c, m, ADD(c, y, K(c, y, 1.0)), y);
  }
  double fact = 1.0;
  for (int64_t e = 2; e <= n; e++) fact *= (double)e;
  V r = tpu_hlo_binary(c->f, "chlo.polygamma", K(c, y, (double)n), y);
  r = SUB(c, r, MUL(c, K(c, sum, (n % 2 ? -fact : fact)), sum));
  tpu_op_finish(c, r, dt);
}

/* Modified Bessel functions of the first kind, orders 0 and 1, scaled
 * (i0e = e^-|x| i0) or not.  Below a threshold T the power series
 * sum_k (x/2)^(2k+nu) / (k! (k+nu)!); above it Hankel's asymptotic
 * expansion e^x / sqrt(2 pi x) sum_k prod_{j<=k} (-(4nu^2 - (2j-1)^2)) /
 * (8 j x).  Both as polynomials (Horner) in a variable within [0, 1]
 * ((x/T)^2, T/x), the coefficients scaled to match: no term overflows or
 * underflows, and no long product chain for the compiler to reassociate
 * into one that does.  Term counts and T per dtype keep the relative error
 * within 1e-6 (f32) / 2e-15 (f64) of PyTorch's Cephes kernels on [-60, 60]. */
static V horner(tpu_op_ctx_t *c, V u, const double *coef, int n) {
  V p = K(c, u, coef[n - 1]);
  for (int k = n - 2; k >= 0; k--) p = ADD(c, MUL(c, p, u), K(c, u, coef[k]));
  return p;
}
static V bessel_i(tpu_op_ctx_t *c, V x, int nu, int scaled) {
  enum { MAXTERMS = 48 };
  int f64 = tpu_op_dtype(c, x) == TPU_F64;
  double thr = f64 ? 20.0 : 12.0, coef[MAXTERMS];
  int nseries = f64 ? 48 : 32, nasym = f64 ? 20 : 16;
  V ax = UN(c, "abs", x), below = CMPK(c, "LT", ax, thr);
  /* series at |x| clamped below T: coef k = (T^2/4)^k / (k! (k+nu)!) */
  V xs = SEL(c, below, x, K(c, x, 0.0));
  coef[0] = 1.0;
  for (int k = 1; k < nseries; k++) coef[k] = coef[k - 1] * (thr * thr / 4.0) / ((double)k * (double)(k + nu));
  V sum = horner(c, MULK(c, MUL(c, xs, xs), 1.0 / (thr * thr)), coef, nseries);
  if (nu) sum = MUL(c, sum, MULK(c, xs, 0.5));
  if (scaled) sum = MUL(c, sum, UN(c, "exponential", UN(c, "negate", UN(c, "abs", xs))));
  /* asymptotic at |x| clamped above T: coef k = prod_{j<=k} -(4nu^2 - (2j-1)^2) / (8 j T) */
  V xa = SEL(c, below, K(c, x, thr), ax);
  coef[0] = 1.0;
  for (int k = 1; k < nasym; k++)
    coef[k] = coef[k - 1] * -(4.0 * nu * nu - (double)(2 * k - 1) * (double)(2 * k - 1)) / (8.0 * k * thr);
  V asym = horner(c, DIV(c, K(c, x, thr), xa), coef, nasym);
  asym = DIV(c, asym, UN(c, "sqrt", MULK(c, xa, 6.283185307179586477)));
  /* e^|x| times the rest, as PyTorch's kernels: inf once e^|x| overflows,
   * NaN at +-inf */
  if (!scaled) asym = MUL(c, UN(c, "exponential", xa), asym);
  if (nu) asym = SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "negate", asym), asym);
  return SEL(c, below, sum, SEL(c, tpu_ew_isnan(c, x), x, asym));
}
static void bessel_rule(tpu_op_ctx_t *c, int nu, int scaled) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[1];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 1, dt, tpu_op_opmath(dt), v)) return;
  tpu_op_finish(c, bessel_i(c, v[0], nu, scaled), dt);
}
static void rule_i0(tpu_op_ctx_t *c) { bessel_rule(c, 0, 0); }
static void rule_i0e(tpu_op_ctx_t *c) { bessel_rule(c, 0, 1); }
static void rule_i1(tpu_op_ctx_t *c) { bessel_rule(c, 1, 0); }
static void rule_i1e(tpu_op_ctx_t *c) { bessel_rule(c, 1, 1); }

/* entr: x; ints [dtype].  -x log x; 0 at 0, -inf below 0, NaN stays. */
static void rule_entr(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[1];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 1, dt, tpu_op_opmath(dt), v)) return;
  V x = v[0];
  V r = UN(c, "negate", MUL(c, x, UN(c, "log", x)));
  r = SEL(c, CMPK(c, "EQ", x, 0.0), K(c, x, 0.0), r);
  tpu_op_finish(c, SEL(c, CMPK(c, "LT", x, 0.0), K(c, x, -INFINITY), r), dt);
}

/* nextafter: (a, b); ints [dtype].  In the result dtype itself (the next
 * value is that dtype's), never widened. */
static void rule_nextafter(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 2, dt, dt, v)) return;
  tpu_op_finish(c, tpu_hlo_binary(c->f, "chlo.next_after", v[0], v[1]), dt);
}

/* zeta: (x, q); ints [dtype].  Hurwitz zeta(x, q). */
static void rule_zeta(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  tpu_op_finish(c, tpu_hlo_binary(c->f, "chlo.zeta", v[0], v[1]), dt);
}

const tpu_op_rule_t tpu_rules_math[] = {
    {"neg", rule_neg, 1, 1},
    {"abs", rule_abs, 1, 1},
    {"exp", rule_exp, 1, 1},
    {"exp2", rule_exp2, 1, 1},
    {"expm1", rule_expm1, 1, 1},
    {"log", rule_log, 1, 1},
    {"log2", rule_log2, 1, 1},
    {"log10", rule_log10, 1, 1},
    {"log1p", rule_log1p, 1, 1},
    {"sqrt", rule_sqrt, 1, 1},
    {"rsqrt", rule_rsqrt, 1, 1},
    {"reciprocal", rule_reciprocal, 1, 1},
    {"square", rule_square, 1, 1},
    {"sigmoid", rule_sigmoid, 1, 1},
    {"tanh", rule_tanh, 1, 1},
    {"sin", rule_sin, 1, 1},
    {"cos", rule_cos, 1, 1},
    {"tan", rule_tan, 1, 1},
    {"asin", rule_asin, 1, 1},
    {"acos", rule_acos, 1, 1},
    {"atan", rule_atan, 1, 1},
    {"atan2", rule_atan2, 2, 2},
    {"sinh", rule_sinh, 1, 1},
    {"cosh", rule_cosh, 1, 1},
    {"asinh", rule_asinh, 1, 1},
    {"acosh", rule_acosh, 1, 1},
    {"atanh", rule_atanh, 1, 1},
    {"floor", rule_floor, 1, 1},
    {"ceil", rule_ceil, 1, 1},
    {"round", rule_round, 1, 1},
    {"trunc", rule_trunc, 1, 1},
    {"frac", rule_frac, 1, 1},
    {"sign", rule_sign, 1, 1},
    {"sgn", rule_sgn, 1, 1},
    {"signbit", rule_signbit, 1, 1},
    {"isnan", rule_isnan, 1, 1},
    {"isinf", rule_isinf, 1, 1},
    {"isfinite", rule_isfinite, 1, 1},
    {"isposinf", rule_isposinf, 1, 1},
    {"isneginf", rule_isneginf, 1, 1},
    {"nan_to_num", rule_nan_to_num, 4, 4},
    {"erf", rule_erf, 1, 1},
    {"erfc", rule_erfc, 1, 1},
    {"erfinv", rule_erfinv, 1, 1},
    {"lgamma", rule_lgamma, 1, 1},
    {"digamma", rule_digamma, 1, 1},
    {"polygamma", rule_polygamma, 1, 1},
    {"i0", rule_i0, 1, 1},
    {"i0e", rule_i0e, 1, 1},
    {"i1", rule_i1, 1, 1},
    {"i1e", rule_i1e, 1, 1},
    {"entr", rule_entr, 1, 1},
    {"nextafter", rule_nextafter, 2, 2},
    {"zeta", rule_zeta, 2, 2},
    {"logaddexp", rule_logaddexp, 2, 2},
    {"xlogy", rule_xlogy, 2, 2},
    {"logit", rule_logit, 1, 2},
    {"logit_backward", rule_logit_backward, 2, 3},
    {NULL, NULL, 0, 0},
};
