/* test_ops_fractional_pool.c - the fractional_max_pool rule (csrc/ops/
 * pooling.c) on the plugin against the CPU algorithm written as a
 * naive loop here (float intervals, first maximum, last NaN). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

/* The window starts along one dim, in float like the CPU kernel. */
static void ref_intervals(float u, int64_t in, int64_t out, int64_t pool, int64_t *seq) {
  if (out > 1) {
    float alpha = (float)(in - pool) / (float)(out - 1);
    for (int64_t i = 0; i < out - 1; i++) seq[i] = (int64_t)(((float)i + u) * alpha) - (int64_t)(u * alpha);
  }
  seq[out - 1] = in - pool;
}

/* k-d fractional max pool over N*C planes; x [NC, S...], u [NC, k]. */
static void ref_pool(int k, int64_t NC, const int64_t *in, const int64_t *pool, const int64_t *out, const double *x,
                     const double *u, double *y, double *yi) {
  int64_t plane = 1, oplane = 1;
  for (int d = 0; d < k; d++) plane *= in[d], oplane *= out[d];
  int64_t seq[3][64];
  for (int64_t m = 0; m < NC; m++) {
    for (int d = 0; d < k; d++) {
      int sidx = k == 2 ? 1 - d : d;
      ref_intervals((float)u[m * k + sidx], in[d], out[d], pool[d], seq[d]);
    }
    for (int64_t o = 0; o < oplane; o++) {
      int64_t oc[3], rem = o;
      for (int d = k - 1; d >= 0; d--) oc[d] = rem % out[d], rem /= out[d];
      int64_t wsize = 1;
      for (int d = 0; d < k; d++) wsize *= pool[d];
      float best = -INFINITY;
      int64_t best_i = -1;
      for (int64_t w = 0; w < wsize; w++) {
        int64_t wc[3], r2 = w, pi = 0;
        for (int d = k - 1; d >= 0; d--) wc[d] = r2 % pool[d], r2 /= pool[d];
        for (int d = 0; d < k; d++) pi = pi * in[d] + seq[d][oc[d]] + wc[d];
        if (best_i < 0) best_i = pi; /* the CPU starts at the window's first element */
        float v = (float)x[m * plane + pi];
        if (v > best || isnan(v)) best = v, best_i = pi;
      }
      y[m * oplane + o] = best;
      yi[m * oplane + o] = (double)best_i;
    }
  }
}

static void check_pool(int k, int64_t N, int64_t C, const int64_t *in, const int64_t *pool, const int64_t *out,
                       unsigned seed, int with_nan) {
  int64_t plane = 1, oplane = 1;
  for (int d = 0; d < k; d++) plane *= in[d], oplane *= out[d];
  int64_t NC = N * C;
  double *x = malloc(sizeof(double) * (size_t)(NC * plane)), u[64], *y = malloc(sizeof(double) * (size_t)(NC * oplane)),
         *yi = malloc(sizeof(double) * (size_t)(NC * oplane));
  opt_fill(x, NC * plane, seed);
  for (int64_t i = 0; i < NC * plane; i++) {
    x[i] = (float)x[i];
    if (with_nan && i % 7 == 3) x[i] = NAN;
    if (i % 11 == 5) x[i] = 0.25; /* ties */
  }
  opt_fill(u, NC * k, seed + 1);
  for (int64_t i = 0; i < NC * k; i++) u[i] = (float)(0.5 + 0.5 * u[i]);
  ref_pool(k, NC, in, pool, out, x, u, y, yi);
  opt_in_t ins[2] = {{TPU_F32, 2 + k, {N, C}, x}, {TPU_F32, 3, {N, C, k}, u}};
  for (int d = 0; d < k; d++) ins[0].dims[2 + d] = in[d];
  int64_t ints[7] = {k};
  for (int d = 0; d < k; d++) ints[1 + d] = pool[d], ints[1 + k + d] = out[d];
  opt_out_t o[2];
  int n = opt_run("fractional_max_pool", ins, 2, ints, 1 + 2 * k, o, 2);
  TT_CHECK(n == 2);
  if (n == 2) {
    TT_CHECK(o[0].n == NC * oplane && o[1].dt == TPU_S64);
    TT_CHECK(opt_close(o[0].v, y, NC * oplane, 0));
    TT_CHECK(opt_close(o[1].v, yi, NC * oplane, 0));
    opt_free(o, 2);
  }
  free(x), free(y), free(yi);
}

TT_TEST(ops_fractional_max_pool2d_matches_cpu_loop) {
  int64_t in[2] = {9, 7}, pool[2] = {2, 3}, out[2] = {5, 3};
  check_pool(2, 2, 3, in, pool, out, 1, 0);
  check_pool(2, 1, 2, in, pool, out, 2, 1);
  int64_t in1[2] = {5, 5}, pool1[2] = {5, 2}, out1[2] = {1, 4};
  check_pool(2, 1, 1, in1, pool1, out1, 3, 0);
}

TT_TEST(ops_fractional_max_pool3d_matches_cpu_loop) {
  int64_t in[3] = {5, 6, 7}, pool[3] = {2, 2, 3}, out[3] = {3, 4, 2};
  check_pool(3, 2, 2, in, pool, out, 4, 1);
}

TT_TEST(ops_fractional_max_pool_rejects_bad_arguments) {
  double z[512] = {0};
  opt_in_t ins[2] = {{TPU_F32, 4, {1, 2, 5, 5}, z}, {TPU_F32, 3, {1, 2, 2}, z}};
  int64_t big[5] = {2, 3, 3, 4, 4}; /* 4 + 3 - 1 > 5 */
  TT_CHECK(opt_lower_fails("fractional_max_pool", ins, 2, big, 5, TPU_INVALID_ARGUMENT, "do not fit"));
  ins[1].dims[2] = 3;
  int64_t ok[5] = {2, 2, 2, 2, 2};
  TT_CHECK(opt_lower_fails("fractional_max_pool", ins, 2, ok, 5, TPU_INVALID_ARGUMENT, "samples"));
}
