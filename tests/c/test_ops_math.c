/* test_ops_math.c - the math rules (csrc/ops/math.c) run on the real plugin
 * and compared with libm: unary functions in f32 / f64 / bf16, erf edges,
 * int -> float promotion, classification, signbit, round with decimals,
 * nan_to_num. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"

#include "tt_ops.h"

static double r_neg(double x) { return -x; }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_recip(double x) { return 1.0 / x; }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_frac(double x) { return x - trunc(x); }
static double r_sign(double x) { return (x > 0) - (x < 0); }
static double r_square(double x) { return x * x; }
static double r_rint(double x) { return nearbyint(x); }
static double r_exp2(double x) { return exp2(x); }

/* erfinv by Newton on erf (reference only). */
static double r_erfinv(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  double x = 0;
  for (int i = 0; i < 100; i++) x -= (erf(x) - y) / (2 / sqrt(M_PI) * exp(-x * x));
  return x;
}

static const tt_unary_case_t k_unary[] = {
    {"neg", r_neg, -5, 5},        {"abs", fabs, -5, 5},          {"exp", exp, -10, 10},
    {"exp2", r_exp2, -10, 10},    {"expm1", expm1, -3, 3},       {"log", log, 0.01, 100},
    {"log2", log2, 0.01, 100},    {"log10", log10, 0.01, 100},   {"log1p", log1p, -0.9, 10},
    {"sqrt", sqrt, 0, 100},       {"rsqrt", r_rsqrt, 0.01, 100}, {"reciprocal", r_recip, 0.1, 10},
    {"sigmoid", r_sigmoid, -20, 20}, {"tanh", tanh, -5, 5},      {"sin", sin, -6, 6},
    {"cos", cos, -6, 6},          {"tan", tan, -1.4, 1.4},       {"asin", asin, -1, 1},
    {"acos", acos, -1, 1},        {"atan", atan, -10, 10},       {"sinh", sinh, -20, 20},
    {"cosh", cosh, -20, 20},      {"asinh", asinh, -1e5, 1e5},   {"acosh", acosh, 1, 1e5},
    {"atanh", atanh, -0.99, 0.99}, {"erf", erf, -5, 5},          {"erfc", erfc, -3, 9},
    {"erfinv", r_erfinv, -0.999, 0.999}, {"floor", floor, -5, 5}, {"ceil", ceil, -5, 5},
    {"round", r_rint, -5, 5},     {"trunc", trunc, -5, 5},       {"frac", r_frac, -5, 5},
    {"sign", r_sign, -5, 5},      {"square", r_square, -5, 5},
};

static void check_all(tpu_dtype_t dt, double rtol, double atol) {
  tt_ops_check_unary(k_unary, (int)(sizeof(k_unary) / sizeof(k_unary[0])), dt, rtol, atol);
}

TT_TEST(ops_math_unary_f32) { check_all(TPU_F32, 2e-6, 1e-6); }
TT_TEST(ops_math_unary_f64) { check_all(TPU_F64, 1e-12, 1e-13); }
TT_TEST(ops_math_unary_bf16) { check_all(TPU_BF16, 1.6e-2, 1e-5); }

/* erf/erfc/erfinv at the edges: +-inf, +-1, nan, huge. */
TT_TEST(ops_math_erf_edges) {
  double x[] = {INFINITY, -INFINITY, NAN, 0.0, 30.0, -30.0, 1.0, -1.0, 0.5};
  int64_t dims[1] = {9};
  tpu_dtype_t dts[2] = {TPU_F32, TPU_F64};
  for (int d = 0; d < 2; d++) {
    tt_ten_t in = tt_ten(dts[d], 1, dims, x);
    int64_t ints[1] = {dts[d]};
    tt_ten_t out[1];
    double w_erf[9], w_erfc[9], w_inv[9];
    for (int i = 0; i < 9; i++) {
      w_erf[i] = erf(x[i]);
      w_erfc[i] = erfc(x[i]);
      w_inv[i] = r_erfinv(x[i]);
    }
    if (tt_ops_run("erf", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
      tt_ops_expect("erf edges", &out[0], dts[d], 1, dims, w_erf, 1e-6, 1e-7);
      tt_ops_free(out, 1);
    }
    if (tt_ops_run("erfc", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
      tt_ops_expect("erfc edges", &out[0], dts[d], 1, dims, w_erfc, 1e-6, 1e-7);
      tt_ops_free(out, 1);
    }
    if (tt_ops_run("erfinv", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
      tt_ops_expect("erfinv edges", &out[0], dts[d], 1, dims, w_inv, 1e-6, 1e-7);
      tt_ops_free(out, 1);
    }
  }
}

/* Integer input to a float op: the adapter's dtype attr promotes. */
TT_TEST(ops_math_int_to_float_promotion) {
  double x[] = {1, 2, 3, 4};
  int64_t dims[1] = {4};
  tt_ten_t in = tt_ten(TPU_S64, 1, dims, x);
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("sqrt", &in, 1, ints, 1, NULL, 0, out, 1) != 1) return;
  double want[4] = {1, sqrt(2.0), sqrt(3.0), 2};
  tt_ops_expect("sqrt(int64)->f32", &out[0], TPU_F32, 1, dims, want, 1e-6, 0);
  tt_ops_free(out, 1);
}


TT_TEST(ops_math_classify_signbit) {
  double x[] = {1, -0.0, NAN, INFINITY, -INFINITY, -2};
  int64_t d[1] = {6};
  tt_ten_t in = tt_ten(TPU_F32, 1, d, x);
  tt_ten_t out[1];
  struct { const char *rule; double want[6]; } cases[] = {
      {"isnan", {0, 0, 1, 0, 0, 0}},    {"isinf", {0, 0, 0, 1, 1, 0}},    {"isfinite", {1, 1, 0, 0, 0, 1}},
      {"isposinf", {0, 0, 0, 1, 0, 0}}, {"isneginf", {0, 0, 0, 0, 1, 0}}, {"signbit", {0, 1, 0, 0, 1, 1}},
  };
  for (int k = 0; k < 6; k++) {
    if (tt_ops_run(cases[k].rule, &in, 1, NULL, 0, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], TPU_PRED, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* sign(nan) = 0, sign(-0) = 0 (PyTorch) */
  int64_t ints[1] = {TPU_F32};
  if (tt_ops_run("sign", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {1, 0, 0, 1, -1, -1};
    tt_ops_expect("sign", &out[0], TPU_F32, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
}


TT_TEST(ops_math_round_decimals_nan_to_num) {
  double x[] = {1.2345, -2.5, 0.5, 1.5, 123.456};
  int64_t d[1] = {5};
  tt_ten_t in = tt_ten(TPU_F64, 1, d, x);
  tt_ten_t out[1];
  int64_t r2[2] = {TPU_F64, 2}, rm1[2] = {TPU_F64, -1}, r0[2] = {TPU_F64, 0};
  if (tt_ops_run("round", &in, 1, r2, 2, NULL, 0, out, 1) == 1) {
    double want[5];
    for (int i = 0; i < 5; i++) want[i] = nearbyint(x[i] * 100) / 100;
    tt_ops_expect("round(2)", &out[0], TPU_F64, 1, d, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("round", &in, 1, rm1, 2, NULL, 0, out, 1) == 1) {
    double want[5];
    for (int i = 0; i < 5; i++) want[i] = nearbyint(x[i] / 10) * 10;
    tt_ops_expect("round(-1)", &out[0], TPU_F64, 1, d, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("round", &in, 1, r0, 2, NULL, 0, out, 1) == 1) {
    double want[5] = {1, -2, 0, 2, 123};
    tt_ops_expect("round half even", &out[0], TPU_F64, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  double y[] = {NAN, INFINITY, -INFINITY, 3};
  double nan_v[] = {0}, pos_v[] = {100}, neg_v[] = {-100};
  int64_t dy[1] = {4};
  tt_ten_t in2[4] = {tt_ten(TPU_F32, 1, dy, y), tt_ten(TPU_F32, 0, NULL, nan_v), tt_ten(TPU_F32, 0, NULL, pos_v),
                     tt_ten(TPU_F32, 0, NULL, neg_v)};
  int64_t fi[1] = {TPU_F32};
  if (tt_ops_run("nan_to_num", in2, 4, fi, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 100, -100, 3};
    tt_ops_expect("nan_to_num", &out[0], TPU_F32, 1, dy, want, 0, 0);
    tt_ops_free(out, 1);
  }
}


/* Every rule in the table lowers for f32 inputs of the right count. */
TT_TEST(ops_math_all_rules_lower) {
  extern const tpu_op_rule_t tpu_rules_math[];
  int64_t ints[2] = {TPU_F32, 1};
  tt_ops_all_rules_lower(tpu_rules_math, ints, 2, NULL);
}
