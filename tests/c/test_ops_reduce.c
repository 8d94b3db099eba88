/* test_ops_reduce.c - reduction, softmax, scan and sort rules run on the real
 * plugin and compared with values computed here in C.  Uses tt_ops_run()
 * from test_ops_elementwise.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"
#include "ops/ops.h"
#include "tinytest.h"

#include "test_ops_util.h"
#include "tt_ops.h"

/* x[i][j] = small distinct values for a 3x4 matrix. */
static const double k_m[12] = {1.5, -2, 3, 0.25, 4, 5.5, -6, 7, 0.5, 8, -1, 2};

/* run a one-input reduction on the 3x4 matrix */
static int red34(const char *rule, tpu_dtype_t dt, const int64_t *ints, int nints, const double *fl, int nfl,
                 tt_ten_t *out, int nout) {
  int64_t d[2] = {3, 4};
  tt_ten_t in = tt_ten(dt, 2, d, k_m);
  return tt_ops_run(rule, &in, 1, ints, nints, fl, nfl, out, nout);
}

TT_TEST(ops_reduce_sum_mean_prod) {
  tt_ten_t out[2];
  int64_t all[2] = {0, 0};
  if (red34("sum", TPU_F32, all, 2, NULL, 0, out, 1) == 1) {
    double s = 0;
    for (int i = 0; i < 12; i++) s += k_m[i];
    double want[1] = {s};
    tt_ops_expect("sum all", &out[0], TPU_F32, 0, NULL, want, 1e-6, 0);
    tt_ops_free(out, 1);
  }
  int64_t d1k[3] = {0, 1, 1}, dk[2] = {3, 1};
  if (red34("sum", TPU_F32, d1k, 3, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = k_m[4 * i] + k_m[4 * i + 1] + k_m[4 * i + 2] + k_m[4 * i + 3];
    tt_ops_expect("sum dim1 keepdim", &out[0], TPU_F32, 2, dk, want, 1e-6, 0);
    tt_ops_free(out, 1);
  }
  int64_t dm0[3] = {0, 0, -2}, d4[1] = {4};
  if (red34("mean", TPU_F64, dm0, 3, NULL, 0, out, 1) == 1) {
    double want[4];
    for (int j = 0; j < 4; j++) want[j] = (k_m[j] + k_m[4 + j] + k_m[8 + j]) / 3;
    tt_ops_expect("mean dim -2", &out[0], TPU_F64, 1, d4, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  if (red34("prod", TPU_F64, d1k, 3, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = k_m[4 * i] * k_m[4 * i + 1] * k_m[4 * i + 2] * k_m[4 * i + 3];
    tt_ops_expect("prod dim1", &out[0], TPU_F64, 2, dk, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  /* sum of bool -> int64 (default dtype) */
  double b[5] = {1, 0, 1, 1, 0};
  int64_t d5[1] = {5};
  tt_ten_t bin = tt_ten(TPU_PRED, 1, d5, b);
  if (tt_ops_run("sum", &bin, 1, all, 2, NULL, 0, out, 1) == 1) {
    double want[1] = {3};
    tt_ops_expect("sum bool", &out[0], TPU_S64, 0, NULL, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_bf16_accumulates_f32) {
  /* 4096 ones + 1/256 each: bf16 accumulation would stall at 256. */
  enum { N = 4096 };
  static double x[N];
  for (int i = 0; i < N; i++) x[i] = 1.0;
  int64_t d[1] = {N};
  tt_ten_t in = tt_ten(TPU_BF16, 1, d, x);
  int64_t all[2] = {0, 0};
  tt_ten_t out[1];
  if (tt_ops_run("sum", &in, 1, all, 2, NULL, 0, out, 1) == 1) {
    double want[1] = {4096};
    tt_ops_expect("bf16 sum", &out[0], TPU_BF16, 0, NULL, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("mean", &in, 1, all, 2, NULL, 0, out, 1) == 1) {
    double want[1] = {1};
    tt_ops_expect("bf16 mean", &out[0], TPU_BF16, 0, NULL, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_amax_max_dim_nan) {
  double x[8] = {1, 5, NAN, 2, 3, 3, 0, -1};
  int64_t d[2] = {2, 4}, d2[1] = {2};
  tt_ten_t in = tt_ten(TPU_F32, 2, d, x);
  tt_ten_t out[2];
  int64_t ints[3] = {0, 0, 1};
  if (tt_ops_run("amax", &in, 1, ints, 3, NULL, 0, out, 1) == 1) {
    double want[2] = {NAN, 3};
    tt_ops_expect("amax nan", &out[0], TPU_F32, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("amin", &in, 1, ints, 3, NULL, 0, out, 1) == 1) {
    double want[2] = {NAN, -1};
    tt_ops_expect("amin nan", &out[0], TPU_F32, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
  int64_t md[2] = {1, 0};
  if (tt_ops_run("max_dim", &in, 1, md, 2, NULL, 0, out, 2) == 2) {
    double wv[2] = {NAN, 3}, wi[2] = {2, 0};
    tt_ops_expect("max_dim values", &out[0], TPU_F32, 1, d2, wv, 0, 0);
    tt_ops_expect("max_dim indices (nan wins, first tie)", &out[1], TPU_S64, 1, d2, wi, 0, 0);
    tt_ops_free(out, 2);
  }
  if (tt_ops_run("min_dim", &in, 1, md, 2, NULL, 0, out, 2) == 2) {
    double wv[2] = {NAN, -1}, wi[2] = {2, 3};
    tt_ops_expect("min_dim values", &out[0], TPU_F32, 1, d2, wv, 0, 0);
    tt_ops_expect("min_dim indices", &out[1], TPU_S64, 1, d2, wi, 0, 0);
    tt_ops_free(out, 2);
  }
  if (tt_ops_run("max", &in, 1, NULL, 0, NULL, 0, out, 1) == 1) {
    double want[1] = {NAN};
    tt_ops_expect("max full", &out[0], TPU_F32, 0, NULL, want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* argmax over the flattened input, keepdim */
  double y[6] = {3, 9, 9, -1, 0, 2};
  int64_t dy[2] = {2, 3}, k11[2] = {1, 1};
  tt_ten_t iny = tt_ten(TPU_S32, 2, dy, y);
  int64_t am[3] = {0, 0, 1};
  if (tt_ops_run("argmax", &iny, 1, am, 3, NULL, 0, out, 1) == 1) {
    double want[1] = {1};
    tt_ops_expect("argmax flat keepdim", &out[0], TPU_S64, 2, k11, want, 0, 0);
    tt_ops_free(out, 1);
  }
  int64_t amd[3] = {1, 0, 0};
  int64_t d3[1] = {3};
  if (tt_ops_run("argmin", &iny, 1, amd, 3, NULL, 0, out, 1) == 1) {
    double want[3] = {1, 1, 1};
    tt_ops_expect("argmin dim0", &out[0], TPU_S64, 1, d3, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_all_any_count) {
  double x[6] = {1, 0, 2, 3, 4, 5};
  int64_t d[2] = {2, 3}, d2[1] = {2};
  tt_ten_t in = tt_ten(TPU_S64, 2, d, x);
  tt_ten_t out[1];
  int64_t ints[3] = {0, 0, 1};
  if (tt_ops_run("all", &in, 1, ints, 3, NULL, 0, out, 1) == 1) {
    double want[2] = {0, 1};
    tt_ops_expect("all", &out[0], TPU_PRED, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("any", &in, 1, ints, 3, NULL, 0, out, 1) == 1) {
    double want[2] = {1, 1};
    tt_ops_expect("any", &out[0], TPU_PRED, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("count_nonzero", &in, 1, ints, 3, NULL, 0, out, 1) == 1) {
    double want[2] = {2, 3};
    tt_ops_expect("count_nonzero", &out[0], TPU_S64, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_var_std_norm_logsumexp) {
  tt_ten_t out[2];
  int64_t d1[3] = {0, 0, 1}, d3[1] = {3};
  double mean[3], var1[3], var0[3];
  for (int i = 0; i < 3; i++) {
    double s = 0, q = 0;
    for (int j = 0; j < 4; j++) s += k_m[4 * i + j];
    mean[i] = s / 4;
    for (int j = 0; j < 4; j++) q += (k_m[4 * i + j] - mean[i]) * (k_m[4 * i + j] - mean[i]);
    var1[i] = q / 3;
    var0[i] = q / 4;
  }
  double corr1[1] = {1}, corr0[1] = {0};
  if (red34("var", TPU_F64, d1, 3, corr1, 1, out, 1) == 1) {
    tt_ops_expect("var", &out[0], TPU_F64, 1, d3, var1, 1e-14, 0);
    tt_ops_free(out, 1);
  }
  if (red34("std_mean", TPU_F64, d1, 3, corr0, 1, out, 2) == 2) {
    double sd[3];
    for (int i = 0; i < 3; i++) sd[i] = sqrt(var0[i]);
    tt_ops_expect("std_mean std", &out[0], TPU_F64, 1, d3, sd, 1e-14, 0);
    tt_ops_expect("std_mean mean", &out[1], TPU_F64, 1, d3, mean, 1e-14, 0);
    tt_ops_free(out, 2);
  }
  double ps[5] = {2, 1, INFINITY, 3, 0};
  for (int k = 0; k < 5; k++) {
    double p = ps[k];
    double want[3];
    for (int i = 0; i < 3; i++) {
      double acc = 0;
      for (int j = 0; j < 4; j++) {
        double a = fabs(k_m[4 * i + j]);
        if (isinf(p)) acc = fmax(acc, a);
        else if (p == 0) acc += a != 0;
        else acc += pow(a, p);
      }
      want[i] = (isinf(p) || p == 0) ? acc : pow(acc, 1 / p);
    }
    double pf[1] = {p};
    if (red34("norm", TPU_F64, d1, 3, pf, 1, out, 1) == 1) {
      char what[64];
      snprintf(what, sizeof(what), "norm p=%g", p);
      tt_ops_expect(what, &out[0], TPU_F64, 1, d3, want, 1e-14, 0);
      tt_ops_free(out, 1);
    }
  }
  if (red34("logsumexp", TPU_F64, d1, 3, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) {
      double s = 0;
      for (int j = 0; j < 4; j++) s += exp(k_m[4 * i + j]);
      want[i] = log(s);
    }
    tt_ops_expect("logsumexp", &out[0], TPU_F64, 1, d3, want, 1e-14, 0);
    tt_ops_free(out, 1);
  }
  /* logsumexp with -inf rows and +inf */
  double z[4] = {-INFINITY, -INFINITY, INFINITY, 1};
  int64_t dz[2] = {2, 2}, d2[1] = {2};
  tt_ten_t inz = tt_ten(TPU_F32, 2, dz, z);
  if (tt_ops_run("logsumexp", &inz, 1, d1, 3, NULL, 0, out, 1) == 1) {
    double want[2] = {-INFINITY, INFINITY};
    tt_ops_expect("logsumexp inf", &out[0], TPU_F32, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_softmax_and_backward) {
  tt_ten_t out[1];
  int64_t ints[2] = {1, 0}, d[2] = {3, 4};
  double sm[12], lsm[12];
  for (int i = 0; i < 3; i++) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < 4; j++) m = fmax(m, k_m[4 * i + j]);
    for (int j = 0; j < 4; j++) s += exp(k_m[4 * i + j] - m);
    for (int j = 0; j < 4; j++) {
      sm[4 * i + j] = exp(k_m[4 * i + j] - m) / s;
      lsm[4 * i + j] = k_m[4 * i + j] - m - log(s);
    }
  }
  if (red34("_softmax", TPU_F32, ints, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("softmax", &out[0], TPU_F32, 2, d, sm, 1e-6, 1e-7);
    tt_ops_free(out, 1);
  }
  if (red34("_log_softmax", TPU_F32, ints, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("log_softmax", &out[0], TPU_F32, 2, d, lsm, 1e-6, 1e-6);
    tt_ops_free(out, 1);
  }
  /* half_to_float: bf16 in, f32 out */
  int64_t h2f[2] = {-1, TPU_F32};
  if (red34("_softmax", TPU_BF16, h2f, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("softmax bf16->f32", &out[0], TPU_F32, 2, d, sm, 1e-2, 1e-3);
    tt_ops_free(out, 1);
  }
  double g[12];
  for (int i = 0; i < 12; i++) g[i] = 0.1 * i - 0.5;
  double wsb[12], wlb[12];
  for (int i = 0; i < 3; i++) {
    double s1 = 0, s2 = 0;
    for (int j = 0; j < 4; j++) {
      s1 += g[4 * i + j] * sm[4 * i + j];
      s2 += g[4 * i + j];
    }
    for (int j = 0; j < 4; j++) {
      wsb[4 * i + j] = sm[4 * i + j] * (g[4 * i + j] - s1);
      wlb[4 * i + j] = g[4 * i + j] - exp(lsm[4 * i + j]) * s2;
    }
  }
  int64_t bi[2] = {1, TPU_F64};
  tt_ten_t in[2] = {tt_ten(TPU_F64, 2, d, g), tt_ten(TPU_F64, 2, d, sm)};
  if (tt_ops_run("_softmax_backward_data", in, 2, bi, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("softmax backward", &out[0], TPU_F64, 2, d, wsb, 1e-14, 1e-15);
    tt_ops_free(out, 1);
  }
  in[1] = tt_ten(TPU_F64, 2, d, lsm);
  if (tt_ops_run("_log_softmax_backward_data", in, 2, bi, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("log_softmax backward", &out[0], TPU_F64, 2, d, wlb, 1e-14, 1e-15);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_cumsum_cumprod) {
  enum { N = 37 };
  double x[N], ws[N], wp[N];
  double s = 0, p = 1;
  for (int i = 0; i < N; i++) {
    x[i] = (i % 5) - 2;
    s += x[i];
    ws[i] = s;
    double v = 1 + 0.01 * i;
    p *= v;
    wp[i] = p;
  }
  int64_t d[1] = {N};
  tt_ten_t in = tt_ten(TPU_S32, 1, d, x);
  tt_ten_t out[1];
  int64_t ci[2] = {0, 0};
  if (tt_ops_run("cumsum", &in, 1, ci, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("cumsum int32 -> int64", &out[0], TPU_S64, 1, d, ws, 0, 0);
    tt_ops_free(out, 1);
  }
  double y[N];
  for (int i = 0; i < N; i++) y[i] = 1 + 0.01 * i;
  tt_ten_t iny = tt_ten(TPU_F64, 1, d, y);
  int64_t cp[2] = {-1, 0};
  if (tt_ops_run("cumprod", &iny, 1, cp, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("cumprod", &out[0], TPU_F64, 1, d, wp, 1e-14, 0);
    tt_ops_free(out, 1);
  }
  /* along dim 0 of the 3x4 matrix */
  int64_t c0[2] = {0, TPU_F32}, dm[2] = {3, 4};
  double w0[12];
  for (int j = 0; j < 4; j++) {
    double a = 0;
    for (int i = 0; i < 3; i++) {
      a += k_m[4 * i + j];
      w0[4 * i + j] = a;
    }
  }
  int64_t dd[2] = {3, 4};
  tt_ten_t inm = tt_ten(TPU_F32, 2, dd, k_m);
  if (tt_ops_run("cumsum", &inm, 1, c0, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("cumsum dim0", &out[0], TPU_F32, 2, dm, w0, 1e-6, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_sort_topk) {
  double x[7] = {3, NAN, 1, 3, -2, NAN, 2};
  int64_t d[1] = {7};
  tt_ten_t in = tt_ten(TPU_F32, 1, d, x);
  tt_ten_t out[2];
  int64_t asc[2] = {0, 0}, desc[2] = {0, 1};
  if (tt_ops_run("sort", &in, 1, asc, 2, NULL, 0, out, 2) == 2) {
    double wv[7] = {-2, 1, 2, 3, 3, NAN, NAN}, wi[7] = {4, 2, 6, 0, 3, 1, 5};
    tt_ops_expect("sort values", &out[0], TPU_F32, 1, d, wv, 0, 0);
    tt_ops_expect("sort indices (stable)", &out[1], TPU_S64, 1, d, wi, 0, 0);
    tt_ops_free(out, 2);
  }
  if (tt_ops_run("sort", &in, 1, desc, 2, NULL, 0, out, 2) == 2) {
    double wv[7] = {NAN, NAN, 3, 3, 2, 1, -2}, wi[7] = {1, 5, 0, 3, 6, 2, 4};
    tt_ops_expect("sort desc values", &out[0], TPU_F32, 1, d, wv, 0, 0);
    tt_ops_expect("sort desc indices (stable)", &out[1], TPU_S64, 1, d, wi, 0, 0);
    tt_ops_free(out, 2);
  }
  double y[6] = {5, 1, 4, 2, 8, 0};
  int64_t dy[2] = {2, 3}, dk[2] = {2, 2};
  tt_ten_t iny = tt_ten(TPU_S64, 2, dy, y);
  int64_t tk[4] = {2, 1, 1, 1};
  if (tt_ops_run("topk", &iny, 1, tk, 4, NULL, 0, out, 2) == 2) {
    double wv[4] = {5, 4, 8, 2}, wi[4] = {0, 2, 1, 0};
    tt_ops_expect("topk values", &out[0], TPU_S64, 2, dk, wv, 0, 0);
    tt_ops_expect("topk indices", &out[1], TPU_S64, 2, dk, wi, 0, 0);
    tt_ops_free(out, 2);
  }
  int64_t tks[4] = {2, 1, 0, 1};
  if (tt_ops_run("topk", &iny, 1, tks, 4, NULL, 0, out, 2) == 2) {
    double wv[4] = {1, 4, 0, 2}, wi[4] = {1, 2, 2, 0};
    tt_ops_expect("topk smallest values", &out[0], TPU_S64, 2, dk, wv, 0, 0);
    tt_ops_expect("topk smallest indices", &out[1], TPU_S64, 2, dk, wi, 0, 0);
    tt_ops_free(out, 2);
  }
}

TT_TEST(ops_reduce_zero_size_and_scalar) {
  int64_t dz[2] = {0, 3}, d3[1] = {3};
  tt_ten_t in = tt_ten(TPU_F32, 2, dz, NULL);
  tt_ten_t out[2];
  int64_t d0[3] = {0, 0, 0};
  if (tt_ops_run("sum", &in, 1, d0, 3, NULL, 0, out, 1) == 1) {
    double want[3] = {0, 0, 0};
    tt_ops_expect("sum over empty dim", &out[0], TPU_F32, 1, d3, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("mean", &in, 1, d0, 3, NULL, 0, out, 1) == 1) {
    double want[3] = {NAN, NAN, NAN};
    tt_ops_expect("mean over empty dim", &out[0], TPU_F32, 1, d3, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("prod", &in, 1, d0, 3, NULL, 0, out, 1) == 1) {
    double want[3] = {1, 1, 1};
    tt_ops_expect("prod over empty dim", &out[0], TPU_F32, 1, d3, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("logsumexp", &in, 1, d0, 3, NULL, 0, out, 1) == 1) {
    double want[3] = {-INFINITY, -INFINITY, -INFINITY};
    tt_ops_expect("logsumexp over empty dim", &out[0], TPU_F32, 1, d3, want, 0, 0);
    tt_ops_free(out, 1);
  }
  int64_t d1[3] = {0, 0, 1}, dz0[1] = {0};
  if (tt_ops_run("amax", &in, 1, d1, 3, NULL, 0, out, 1) == 1) {
    tt_ops_expect("amax over non-empty dim of empty", &out[0], TPU_F32, 1, dz0, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  int64_t s1[2] = {1, 0};
  if (tt_ops_run("_softmax", &in, 1, s1, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("softmax of empty", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("cumsum", &in, 1, s1, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("cumsum of empty", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("sort", &in, 1, s1, 2, NULL, 0, out, 2) == 2) {
    tt_ops_expect("sort of empty", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 2);
  }
  /* 0-d inputs: dim 0 / -1 allowed */
  double s[1] = {2.5};
  tt_ten_t sc = tt_ten(TPU_F32, 0, NULL, s);
  int64_t dm1[3] = {0, 1, -1};
  if (tt_ops_run("sum", &sc, 1, dm1, 3, NULL, 0, out, 1) == 1) {
    tt_ops_expect("sum 0-d", &out[0], TPU_F32, 0, NULL, s, 0, 0);
    tt_ops_free(out, 1);
  }
  int64_t md[2] = {0, 1};
  if (tt_ops_run("max_dim", &sc, 1, md, 2, NULL, 0, out, 2) == 2) {
    double zero[1] = {0};
    tt_ops_expect("max_dim 0-d", &out[0], TPU_F32, 0, NULL, s, 0, 0);
    tt_ops_expect("max_dim 0-d index", &out[1], TPU_S64, 0, NULL, zero, 0, 0);
    tt_ops_free(out, 2);
  }
  int64_t sm0[2] = {0, 0};
  if (tt_ops_run("_softmax", &sc, 1, sm0, 2, NULL, 0, out, 1) == 1) {
    double one[1] = {1};
    tt_ops_expect("softmax 0-d", &out[0], TPU_F32, 0, NULL, one, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_reduce_errors) {
  int64_t dz[2] = {0, 3};
  tt_ten_t in = tt_ten(TPU_F32, 2, dz, NULL);
  int64_t d0[3] = {0, 0, 0};
  tpu_status_t st = tt_ops_lower_status("amax", &in, 1, d0, 3, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_OUT_OF_RANGE &&
           strstr(tpu_status_message(st), "Expected reduction dim 0 to have non-zero size"));
  tpu_status_free(st);
  st = tt_ops_lower_status("max", &in, 1, NULL, 0, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  tpu_status_free(st);
  int64_t bad_dim[3] = {0, 0, 2};
  st = tt_ops_lower_status("sum", &in, 1, bad_dim, 3, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_OUT_OF_RANGE && strstr(tpu_status_message(st), "Dimension out of range"));
  tpu_status_free(st);
  int64_t dup[4] = {0, 0, 1, -1};
  st = tt_ops_lower_status("sum", &in, 1, dup, 4, NULL, 0);
  TT_CHECK(st && strstr(tpu_status_message(st), "appears multiple times"));
  tpu_status_free(st);
  int64_t d3[1] = {3};
  tt_ten_t ii = tt_ten(TPU_S64, 1, d3, NULL);
  st = tt_ops_lower_status("mean", &ii, 1, d0, 2, NULL, 0);
  TT_CHECK(st && strstr(tpu_status_message(st), "mean(): could not infer output dtype"));
  tpu_status_free(st);
  int64_t tk[4] = {4, 0, 1, 1};
  st = tt_ops_lower_status("topk", &ii, 1, tk, 4, NULL, 0);
  TT_CHECK(st && strstr(tpu_status_message(st), "selected index k out of range"));
  tpu_status_free(st);
}

/* ---- cummax ---------------------------------------------------------------------- */

TT_TEST(ops_reduce_cummax_ties_and_nan) {
  double x[2 * 6] = {1, 3, 2, 3, 0, 5, /* tie at 3 -> last index */
                     2, NAN, 7, NAN, 1, 9};
  double wv[12] = {1, 3, 3, 3, 3, 5, 2, NAN, NAN, NAN, NAN, NAN};
  double wi[12] = {0, 1, 1, 3, 3, 5, 0, 1, 1, 3, 3, 3};
  int64_t a[2] = {1, 1};
  opt_in_t in[1] = {{TPU_F32, 2, {2, 6}, x}};
  opt_out_t o[2];
  if (opt_run("cummaxmin", in, 1, a, 2, o, 2) != 2) return;
  TT_CHECK(o[1].dt == TPU_S64);
  TT_CHECK(opt_close(o[0].v, wv, 12, 0));
  TT_CHECK(opt_close(o[1].v, wi, 12, 0));
  opt_free(o, 2);
}

