/* test_ops_normalization.c - batch norm (training with running stats,
 * backward, eval) and layer norm (forward, backward) on the real plugin
 * against reference loops (csrc/ops/normalization.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

/* ---- norms ----------------------------------------------------------------------- */

TT_TEST(ops_normalization_batch_norm_train_and_backward) {
  enum { N = 3, C = 2, L = 4 };
  double x[N * C * L], w[C] = {1.5, -0.5}, b[C] = {0.1, 0.2}, rm[C] = {0.5, -0.5}, rv[C] = {2, 3};
  double mom = 0.1, eps = 1e-5;
  opt_fill(x, N * C * L, 51);
  int64_t attrs[5] = {1, 1, 1, 1, TPU_F32};
  opt_in_t in[7] = {{TPU_F32, 3, {N, C, L}, x}, {TPU_F32, 1, {C}, w}, {TPU_F32, 1, {C}, b}, {TPU_F32, 1, {C}, rm},
                    {TPU_F32, 1, {C}, rv},     {TPU_F64, 0, {0}, &mom}, {TPU_F64, 0, {0}, &eps}};
  opt_out_t o[5];
  if (opt_run("native_batch_norm", in, 7, attrs, 5, o, 5) != 5) return;
  double mean[C], var[C], y[N * C * L];
  for (int c = 0; c < C; c++) {
    double s = 0, q = 0;
    for (int n = 0; n < N; n++)
      for (int l = 0; l < L; l++) s += x[(n * C + c) * L + l];
    mean[c] = s / (N * L);
    for (int n = 0; n < N; n++)
      for (int l = 0; l < L; l++) q += pow(x[(n * C + c) * L + l] - mean[c], 2);
    var[c] = q / (N * L);
    for (int n = 0; n < N; n++)
      for (int l = 0; l < L; l++)
        y[(n * C + c) * L + l] = (x[(n * C + c) * L + l] - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c];
  }
  TT_CHECK(opt_close(o[0].v, y, N * C * L, 1e-5));
  TT_CHECK(opt_close(o[1].v, mean, C, 1e-5));
  for (int c = 0; c < C; c++) {
    TT_CHECK_NEAR(o[2].v[c], 1 / sqrt(var[c] + eps), 1e-4);
    TT_CHECK_NEAR(o[3].v[c], 0.9 * rm[c] + 0.1 * mean[c], 1e-5);
    TT_CHECK_NEAR(o[4].v[c], 0.9 * rv[c] + 0.1 * var[c] * (N * L) / (N * L - 1.0), 1e-5);
  }
  opt_free(o, 5);
  /* backward vs a finite difference of sum(go * y) */
  double go[N * C * L];
  opt_fill(go, N * C * L, 52);
  int64_t battrs[7] = {1, 1, 0, 1, 1, 1, 1};
  /* use f64 everywhere for the FD check */
  opt_in_t bin64[6] = {{TPU_F64, 3, {N, C, L}, go}, {TPU_F64, 3, {N, C, L}, x}, {TPU_F64, 1, {C}, w},
                       {TPU_F64, 1, {C}, mean},     {TPU_F64, 1, {C}, NULL},     {TPU_F64, 0, {0}, &eps}};
  double inv[C];
  for (int c = 0; c < C; c++) inv[c] = 1 / sqrt(var[c] + eps);
  bin64[4].v = inv;
  if (opt_run("native_batch_norm_backward", bin64, 6, battrs, 7, o, 3) != 3) return;
  /* FD on x[0], w[1], b[0] */
  double h = 1e-6;
  for (int which = 0; which < 3; which++) {
    double xp[N * C * L], wp[C], bp[C], f[2];
    for (int sgn = 0; sgn < 2; sgn++) {
      memcpy(xp, x, sizeof xp), memcpy(wp, w, sizeof wp), memcpy(bp, b, sizeof bp);
      double dd = sgn ? h : -h;
      if (which == 0) xp[5] += dd;
      if (which == 1) wp[1] += dd;
      if (which == 2) bp[0] += dd;
      double tot = 0;
      for (int c = 0; c < C; c++) {
        double s = 0, q = 0;
        for (int n = 0; n < N; n++)
          for (int l = 0; l < L; l++) s += xp[(n * C + c) * L + l];
        double mu = s / (N * L);
        for (int n = 0; n < N; n++)
          for (int l = 0; l < L; l++) q += pow(xp[(n * C + c) * L + l] - mu, 2);
        double iv = 1 / sqrt(q / (N * L) + eps);
        for (int n = 0; n < N; n++)
          for (int l = 0; l < L; l++) tot += go[(n * C + c) * L + l] * ((xp[(n * C + c) * L + l] - mu) * iv * wp[c] + bp[c]);
      }
      f[sgn] = tot;
    }
    double fd = (f[1] - f[0]) / (2 * h);
    double got = which == 0 ? o[0].v[5] : which == 1 ? o[1].v[1] : o[2].v[0];
    TT_CHECK_NEAR(got, fd, 1e-5);
  }
  opt_free(o, 3);
}

TT_TEST(ops_normalization_batch_norm_eval) {
  double x[4] = {1, 2, 3, 4}, rm[2] = {1, 2}, rv[2] = {4, 9}, mom = 0.1, eps = 0;
  int64_t attrs[5] = {0, 0, 0, 1, TPU_F32};
  opt_in_t in[5] = {{TPU_F32, 2, {2, 2}, x}, {TPU_F32, 1, {2}, rm}, {TPU_F32, 1, {2}, rv}, {TPU_F32, 0, {0}, &mom},
                    {TPU_F32, 0, {0}, &eps}};
  opt_out_t o[1];
  if (opt_run("native_batch_norm", in, 5, attrs, 5, o, 1) != 1) return;
  double want[4] = {0, 0, 1, 2.0 / 3};
  TT_CHECK(opt_close(o[0].v, want, 4, 1e-6));
  opt_free(o, 1);
}

TT_TEST(ops_normalization_layer_norm_and_backward) {
  enum { R = 3, M = 4 };
  double x[R * M], w[M] = {1, 2, 3, 4}, b[M] = {0, 1, 0, -1}, eps = 1e-5;
  opt_fill(x, R * M, 61);
  int64_t attrs[4] = {1, 1, 1, TPU_F64};
  opt_in_t in[4] = {{TPU_F64, 2, {R, M}, x}, {TPU_F64, 1, {M}, w}, {TPU_F64, 1, {M}, b}, {TPU_F64, 0, {0}, &eps}};
  opt_out_t o[3];
  if (opt_run("native_layer_norm", in, 4, attrs, 4, o, 3) != 3) return;
  TT_CHECK(o[1].rank == 2 && o[1].dims[0] == R && o[1].dims[1] == 1);
  double y[R * M], mu[R], rs[R];
  for (int r = 0; r < R; r++) {
    double s = 0, q = 0;
    for (int m = 0; m < M; m++) s += x[r * M + m];
    mu[r] = s / M;
    for (int m = 0; m < M; m++) q += pow(x[r * M + m] - mu[r], 2);
    rs[r] = 1 / sqrt(q / M + eps);
    for (int m = 0; m < M; m++) y[r * M + m] = (x[r * M + m] - mu[r]) * rs[r] * w[m] + b[m];
  }
  TT_CHECK(opt_close(o[0].v, y, R * M, 1e-9));
  TT_CHECK(opt_close(o[1].v, mu, R, 1e-9));
  TT_CHECK(opt_close(o[2].v, rs, R, 1e-9));
  opt_free(o, 3);
  double go[R * M];
  opt_fill(go, R * M, 62);
  int64_t battrs[6] = {1, 1, 1, 1, 1, 1};
  opt_in_t bin[6] = {{TPU_F64, 2, {R, M}, go}, in[0], {TPU_F64, 2, {R, 1}, mu}, {TPU_F64, 2, {R, 1}, rs}, in[1], in[2]};
  if (opt_run("native_layer_norm_backward", bin, 6, battrs, 6, o, 3) != 3) return;
  /* FD on x[5] */
  double h = 1e-6, f[2];
  for (int sgn = 0; sgn < 2; sgn++) {
    double xp[R * M];
    memcpy(xp, x, sizeof xp);
    xp[5] += sgn ? h : -h;
    double tot = 0;
    for (int r = 0; r < R; r++) {
      double s = 0, q = 0;
      for (int m = 0; m < M; m++) s += xp[r * M + m];
      double mm = s / M;
      for (int m = 0; m < M; m++) q += pow(xp[r * M + m] - mm, 2);
      double iv = 1 / sqrt(q / M + eps);
      for (int m = 0; m < M; m++) tot += go[r * M + m] * ((xp[r * M + m] - mm) * iv * w[m] + b[m]);
    }
    f[sgn] = tot;
  }
  TT_CHECK_NEAR(o[0].v[5], (f[1] - f[0]) / (2 * h), 1e-5);
  double gb0 = 0, gw2 = 0;
  for (int r = 0; r < R; r++) {
    gb0 += go[r * M];
    gw2 += go[r * M + 2] * (x[r * M + 2] - mu[r]) * rs[r];
  }
  TT_CHECK_NEAR(o[2].v[0], gb0, 1e-9);
  TT_CHECK_NEAR(o[1].v[2], gw2, 1e-9);
  opt_free(o, 3);
}

