/* test_ops_elementwise.c - the elementwise rules (csrc/ops/elementwise.c)
 * run on the real plugin and compared with values computed here:
 * arithmetic with alpha and broadcasting, mixed and bool dtypes, division
 * modes, pow, min/max with NaN, bitwise and logical ops, comparisons,
 * where / masked_fill / clamp, lerp / addcmul / addcdiv, convert, zero-size
 * and 0-d inputs, errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"

#include "tt_ops.h"

/* ---- binary arithmetic ---------------------------------------------------------- */

TT_TEST(ops_elementwise_add_alpha_broadcast) {
  double a[] = {1, 2, 3, 4, 5, 6};
  double b[] = {10, 20, 30};
  double alpha[] = {0.5};
  int64_t da[2] = {2, 3}, db[1] = {3};
  tt_ten_t in[3] = {tt_ten(TPU_F32, 2, da, a), tt_ten(TPU_F32, 1, db, b), tt_ten(TPU_F32, 0, NULL, alpha)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {6, 12, 18, 9, 15, 21};
    tt_ops_expect("add alpha", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("sub", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {-4, -8, -12, -1, -5, -9};
    tt_ops_expect("sub alpha", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_add_mixed_dtypes) {
  /* int64 tensor + f32 scalar input -> f32 (the adapter's promoted dtype). */
  double a[] = {1, 2, 3};
  double s[] = {0.25};
  int64_t da[1] = {3};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, da, a), tt_ten(TPU_F32, 0, NULL, s)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 2, ints, 1, NULL, 0, out, 1) != 1) return;
  double want[3] = {1.25, 2.25, 3.25};
  tt_ops_expect("int64 + 0.25", &out[0], TPU_F32, 1, da, want, 0, 0);
  tt_ops_free(out, 1);
}

TT_TEST(ops_elementwise_bool_add_mul) {
  double a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
  int64_t d[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_PRED, 1, d, a), tt_ten(TPU_PRED, 1, d, b)};
  int64_t ints[1] = {TPU_PRED};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 1, 1, 1};
    tt_ops_expect("bool add", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("mul", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 0, 0, 1};
    tt_ops_expect("bool mul", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

static double py_floordiv(double a, double b) { return floor(a / b); }
static double py_mod(double a, double b) {
  double m = fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

TT_TEST(ops_elementwise_div_modes_int) {
  double a[] = {7, -7, 7, -7, 0, 5, -1, 9};
  double b[] = {2, 2, -2, -2, 3, 5, 3, -4};
  int64_t d[1] = {8};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, d, a), tt_ten(TPU_S64, 1, d, b)};
  double w_true[8], w_trunc[8], w_floor[8], w_rem[8], w_fmod[8];
  for (int i = 0; i < 8; i++) {
    w_true[i] = (double)(float)(a[i] / b[i]);
    w_trunc[i] = trunc(a[i] / b[i]);
    w_floor[i] = py_floordiv(a[i], b[i]);
    w_rem[i] = py_mod(a[i], b[i]);
    w_fmod[i] = fmod(a[i], b[i]);
  }
  tt_ten_t out[1];
  int64_t i_true[2] = {TPU_F32, 0}, i_trunc[2] = {TPU_S64, 1}, i_floor[2] = {TPU_S64, 2}, i_int[1] = {TPU_S64};
  if (tt_ops_run("div", in, 2, i_true, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int true div", &out[0], TPU_F32, 1, d, w_true, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("div", in, 2, i_trunc, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int trunc div", &out[0], TPU_S64, 1, d, w_trunc, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("div", in, 2, i_floor, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int floor div", &out[0], TPU_S64, 1, d, w_floor, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("remainder", in, 2, i_int, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int remainder", &out[0], TPU_S64, 1, d, w_rem, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("fmod", in, 2, i_int, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int fmod", &out[0], TPU_S64, 1, d, w_fmod, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_div_modes_float) {
  double a[] = {7.5, -7.5, 7.5, -7.5, 0.0, 1.0, -1.0, 5.0, 1.0};
  double b[] = {2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 0.0, 0.1, 3.0};
  int64_t d[1] = {9};
  tt_ten_t in[2] = {tt_ten(TPU_F64, 1, d, a), tt_ten(TPU_F64, 1, d, b)};
  double w_trunc[9], w_floor[9], w_rem[9];
  for (int i = 0; i < 9; i++) {
    w_trunc[i] = trunc(a[i] / b[i]);
    /* Python's float // (what PyTorch matches): via fmod. */
    if (b[i] == 0) w_floor[i] = a[i] / b[i];
    else {
      double mod = fmod(a[i], b[i]);
      double div = (a[i] - mod) / b[i];
      if (mod != 0 && ((b[i] < 0) != (mod < 0))) div -= 1;
      double fl = floor(div);
      if (div - fl > 0.5) fl += 1;
      w_floor[i] = div != 0 ? fl : copysign(0, a[i] / b[i]);
    }
    w_rem[i] = b[i] == 0 ? NAN : py_mod(a[i], b[i]);
  }
  tt_ten_t out[1];
  int64_t i_trunc[2] = {TPU_F64, 1}, i_floor[2] = {TPU_F64, 2}, i_f[1] = {TPU_F64};
  if (tt_ops_run("div", in, 2, i_trunc, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("float trunc div", &out[0], TPU_F64, 1, d, w_trunc, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("div", in, 2, i_floor, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("float floor div", &out[0], TPU_F64, 1, d, w_floor, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("remainder", in, 2, i_f, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("float remainder", &out[0], TPU_F64, 1, d, w_rem, 1e-15, 1e-15);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_pow) {
  double a[] = {2, -2, 1, -1, 3, 0};
  double b[] = {3, 3, -5, -3, -1, 0};
  int64_t d[1] = {6};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, d, a), tt_ten(TPU_S64, 1, d, b)};
  int64_t ints[1] = {TPU_S64};
  tt_ten_t out[1];
  if (tt_ops_run("pow", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {8, -8, 1, -1, 0, 1};
    tt_ops_expect("int pow", &out[0], TPU_S64, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* float tensor ** scalar and scalar ** tensor */
  double x[] = {0.5, 1.5, 2.0, 3.0};
  double e2[] = {2.0};
  int64_t dx[1] = {4};
  tt_ten_t in2[2] = {tt_ten(TPU_F32, 1, dx, x), tt_ten(TPU_F32, 0, NULL, e2)};
  int64_t fi[1] = {TPU_F32};
  if (tt_ops_run("pow", in2, 2, fi, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0.25, 2.25, 4, 9};
    tt_ops_expect("x ** 2", &out[0], TPU_F32, 1, dx, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  tt_ten_t in3[2] = {tt_ten(TPU_F32, 0, NULL, e2), tt_ten(TPU_F32, 1, dx, x)};
  if (tt_ops_run("pow", in3, 2, fi, 1, NULL, 0, out, 1) == 1) {
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = pow(2.0, x[i]);
    tt_ops_expect("2 ** x", &out[0], TPU_F32, 1, dx, want, 1e-6, 0);
    tt_ops_free(out, 1);
  }
}

/* pow_scalar: the exponents CPU computes with multiplies, sqrt, division */
TT_TEST(ops_elementwise_pow_scalar) {
  double x[] = {0.5, 1.5, 2.0, 3.0, 0.0};
  int64_t dx[1] = {5};
  tt_ten_t in[1] = {tt_ten(TPU_F64, 1, dx, x)};
  static const double exps[6] = {0.5, -0.5, -1, 2, 3, -2};
  tt_ten_t out[1];
  for (int k = 1; k <= 6; k++) {
    int64_t ints[2] = {TPU_F64, k};
    if (tt_ops_run("pow_scalar", in, 1, ints, 2, NULL, 0, out, 1) != 1) continue;
    double want[5];
    for (int i = 0; i < 5; i++) want[i] = pow(x[i], exps[k - 1]);
    char what[32];
    snprintf(what, sizeof(what), "x ** %g", exps[k - 1]);
    tt_ops_expect(what, &out[0], TPU_F64, 1, dx, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  int64_t bad[2] = {TPU_F64, 9};
  tpu_status_t st = tt_ops_lower_status("pow_scalar", in, 1, bad, 2, NULL, 0);
  TT_CHECK(st != NULL && tpu_status_code(st) == TPU_INVALID_ARGUMENT &&
           strstr(tpu_status_message(st), "unknown exponent code") != NULL);
  tpu_status_free(st);
}

TT_TEST(ops_elementwise_minmax_nan) {
  double a[] = {1, NAN, 3, NAN, -0.5};
  double b[] = {2, 1, NAN, NAN, -1};
  int64_t d[1] = {5};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 1, d, a), tt_ten(TPU_F32, 1, d, b)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  struct { const char *rule; double want[5]; } cases[] = {
      {"maximum", {2, NAN, NAN, NAN, -0.5}},
      {"minimum", {1, NAN, NAN, NAN, -1}},
      {"fmax", {2, 1, 3, NAN, -0.5}},
      {"fmin", {1, 1, 3, NAN, -1}},
  };
  for (int k = 0; k < 4; k++) {
    if (tt_ops_run(cases[k].rule, in, 2, ints, 1, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], TPU_F32, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_bitwise_logical) {
  double a[] = {12, -1, 0, 5}, b[] = {10, 3, 7, 0};
  int64_t d[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_S32, 1, d, a), tt_ten(TPU_S32, 1, d, b)};
  int64_t ints[1] = {TPU_S32};
  tt_ten_t out[1];
  struct { const char *rule; double want[4]; tpu_dtype_t dt; int nints; } cases[] = {
      {"bitwise_and", {8, 3, 0, 0}, TPU_S32, 1},
      {"bitwise_or", {14, -1, 7, 5}, TPU_S32, 1},
      {"bitwise_xor", {6, -4, 7, 5}, TPU_S32, 1},
      {"logical_and", {1, 1, 0, 0}, TPU_PRED, 0},
      {"logical_or", {1, 1, 1, 1}, TPU_PRED, 0},
      {"logical_xor", {0, 0, 1, 1}, TPU_PRED, 0},
      {"bitwise_left_shift", {12 << 10, -8, 0, 5}, TPU_S32, 1},
      {"bitwise_right_shift", {0, -1, 0, 5}, TPU_S32, 1},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    if (tt_ops_run(cases[k].rule, in, 2, ints, cases[k].nints, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], cases[k].dt, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("bitwise_not", in, 1, ints, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {-13, 0, -1, -6};
    tt_ops_expect("bitwise_not", &out[0], TPU_S32, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("logical_not", in, 1, NULL, 0, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 0, 1, 0};
    tt_ops_expect("logical_not", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_compare_scalar) {
  double a[] = {1, 2, 3, NAN};
  double s[] = {2};
  int64_t d[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, d, a), tt_ten(TPU_F32, 0, NULL, s)};
  in[0].dt = TPU_F32;
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  struct { const char *rule; double want[4]; } cases[] = {
      {"eq", {0, 1, 0, 0}}, {"ne", {1, 0, 1, 1}}, {"lt", {1, 0, 0, 0}},
      {"le", {1, 1, 0, 0}}, {"gt", {0, 0, 1, 0}}, {"ge", {0, 1, 1, 0}},
  };
  for (int k = 0; k < 6; k++) {
    if (tt_ops_run(cases[k].rule, in, 2, ints, 1, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], TPU_PRED, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
}


TT_TEST(ops_elementwise_where_masked_fill_clamp) {
  double cond[] = {1, 0, 1};
  double a[] = {1, 2, 3, 4, 5, 6};
  double b[] = {-1};
  int64_t dc[1] = {3}, da[2] = {2, 3};
  tt_ten_t in[3] = {tt_ten(TPU_PRED, 1, dc, cond), tt_ten(TPU_F32, 2, da, a), tt_ten(TPU_F32, 0, NULL, b)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("where", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {1, -1, 3, 4, -1, 6};
    tt_ops_expect("where", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
  tt_ten_t in2[3] = {tt_ten(TPU_F32, 2, da, a), tt_ten(TPU_PRED, 1, dc, cond), tt_ten(TPU_F32, 0, NULL, b)};
  if (tt_ops_run("masked_fill", in2, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {-1, 2, -1, -1, 5, -1};
    tt_ops_expect("masked_fill", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* clamp with a tensor min (with a nan) and a scalar max */
  double x[] = {0, 2.5, 9, NAN};
  double lo[] = {1, NAN, 1, 0};
  double hi[] = {5};
  int64_t dx[1] = {4};
  tt_ten_t in3[3] = {tt_ten(TPU_F32, 1, dx, x), tt_ten(TPU_F32, 1, dx, lo), tt_ten(TPU_F32, 0, NULL, hi)};
  int64_t ci[3] = {TPU_F32, 1, 1};
  if (tt_ops_run("clamp", in3, 3, ci, 3, NULL, 0, out, 1) == 1) {
    double want[4] = {1, NAN, 5, NAN};
    tt_ops_expect("clamp", &out[0], TPU_F32, 1, dx, want, 0, 0);
    tt_ops_free(out, 1);
  }
  tt_ten_t in4[2] = {tt_ten(TPU_F32, 1, dx, x), tt_ten(TPU_F32, 0, NULL, hi)};
  int64_t cm[3] = {TPU_F32, 0, 1};
  if (tt_ops_run("clamp", in4, 2, cm, 3, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 2.5, 5, NAN};
    tt_ops_expect("clamp max only", &out[0], TPU_F32, 1, dx, want, 0, 0);
    tt_ops_free(out, 1);
  }
}


TT_TEST(ops_elementwise_lerp_addcmul_addcdiv) {
  double s[] = {1, 2, 3}, e[] = {11, 12, 13}, w[] = {0.25, 0.75, 1.0};
  int64_t d[1] = {3};
  tt_ten_t in[3] = {tt_ten(TPU_F32, 1, d, s), tt_ten(TPU_F32, 1, d, e), tt_ten(TPU_F32, 1, d, w)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("lerp", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[3] = {3.5, 9.5, 13};
    tt_ops_expect("lerp", &out[0], TPU_F32, 1, d, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  double val[] = {0.5};
  tt_ten_t in2[4] = {tt_ten(TPU_F32, 1, d, s), tt_ten(TPU_F32, 1, d, e), tt_ten(TPU_F32, 1, d, w),
                     tt_ten(TPU_F32, 0, NULL, val)};
  if (tt_ops_run("addcmul", in2, 4, ints, 1, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = s[i] + 0.5 * e[i] * w[i];
    tt_ops_expect("addcmul", &out[0], TPU_F32, 1, d, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("addcdiv", in2, 4, ints, 1, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = s[i] + 0.5 * e[i] / w[i];
    tt_ops_expect("addcdiv", &out[0], TPU_F32, 1, d, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
}

/* ---- convert, zero-size, 0-d, errors ----------------------------------------------------- */

TT_TEST(ops_elementwise_convert) {
  double x[] = {2.7, -2.7, 0.0, -0.0, NAN, 0.4};
  int64_t d[1] = {6};
  tt_ten_t in = tt_ten(TPU_F32, 1, d, x);
  tt_ten_t out[1];
  int64_t to_i[1] = {TPU_S32}, to_b[1] = {TPU_PRED};
  in.vals = x;
  /* no nan for the int conversion */
  double xi[] = {2.7, -2.7, 0.0, -0.0, 1e6, 0.4};
  tt_ten_t ini = tt_ten(TPU_F32, 1, d, xi);
  if (tt_ops_run("convert", &ini, 1, to_i, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {2, -2, 0, 0, 1e6, 0};
    tt_ops_expect("f32->s32", &out[0], TPU_S32, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("convert", &in, 1, to_b, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {1, 1, 0, 0, 1, 1};
    tt_ops_expect("f32->bool", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  double bf[] = {1.0 / 3.0, 100.5};
  int64_t d2[1] = {2};
  tt_ten_t inb = tt_ten(TPU_F32, 1, d2, bf);
  int64_t to_bf[1] = {TPU_BF16};
  if (tt_ops_run("convert", &inb, 1, to_bf, 1, NULL, 0, out, 1) == 1) {
    double want[2] = {tt_ops_round(TPU_BF16, 1.0 / 3.0), tt_ops_round(TPU_BF16, 100.5)};
    tt_ops_expect("f32->bf16", &out[0], TPU_BF16, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_zero_size_and_scalar) {
  int64_t dz[2] = {0, 3}, d1[1] = {3};
  double b[] = {1, 2, 3};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 2, dz, NULL), tt_ten(TPU_F32, 1, d1, b)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("zero-size add", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("gelu", in, 1, ints, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("zero-size gelu", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  double s[] = {-4};
  tt_ten_t sc = tt_ten(TPU_F64, 0, NULL, s);
  int64_t f64[1] = {TPU_F64};
  if (tt_ops_run("abs", &sc, 1, f64, 1, NULL, 0, out, 1) == 1) {
    double want[1] = {4};
    tt_ops_expect("0-d abs", &out[0], TPU_F64, 0, NULL, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_errors) {
  int64_t da[1] = {3}, db[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 1, da, NULL), tt_ten(TPU_F32, 1, db, NULL)};
  int64_t ints[1] = {TPU_F32};
  tpu_status_t st = tt_ops_lower_status("add", in, 2, ints, 1, NULL, 0);
  TT_CHECK(st != NULL);
  if (st) {
    TT_CHECK(tpu_status_code(st) == TPU_INVALID_ARGUMENT);
    TT_CHECK(strstr(tpu_status_message(st), "must match the size of tensor b") != NULL);
    tpu_status_free(st);
  }
  st = tt_ops_lower_status("bitwise_and", in, 1, ints, 1, NULL, 0);
  TT_CHECK(st != NULL); /* wrong input count */
  tpu_status_free(st);
  tt_ten_t f[2] = {tt_ten(TPU_F32, 1, da, NULL), tt_ten(TPU_F32, 1, da, NULL)};
  st = tt_ops_lower_status("bitwise_and", f, 2, ints, 1, NULL, 0);
  TT_CHECK(st != NULL && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  tpu_status_free(st);
  int64_t bad[1] = {99};
  st = tt_ops_lower_status("exp", f, 1, bad, 1, NULL, 0);
  TT_CHECK(st != NULL && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  tpu_status_free(st);
}

/* Every rule in the table lowers for f32 inputs of the right count. */

/* Every rule in the table lowers for f32 (int for bitwise) inputs. */
TT_TEST(ops_elementwise_all_rules_lower) {
  extern const tpu_op_rule_t tpu_rules_elementwise[];
  int64_t ints[1] = {TPU_F32};
  /* pow_scalar: [dtype, code]; assert_async: a message (test_device_checks.c) */
  static const char *const skip[] = {"pow_scalar", "assert_async", NULL};
  tt_ops_all_rules_lower(tpu_rules_elementwise, ints, 1, skip);
}
