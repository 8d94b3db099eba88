/* test_ops_linalg.c - linalg lowering rules (csrc/ops/linalg.c) run on the
 * real plugin, compared with values computed here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

/* ---- linalg tests -------------------------------------------------------------- */

static void ref_mm(const double *a, const double *b, double *c, int n, int k, int m) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      double s = 0;
      for (int t = 0; t < k; t++) s += a[i * k + t] * b[t * m + j];
      c[i * m + j] = s;
    }
}

TT_TEST(ops_linalg_mm_f32) {
  double a[12], b[20], want[15];
  opt_fill(a, 12, 1);
  opt_fill(b, 20, 2);
  ref_mm(a, b, want, 3, 4, 5);
  opt_in_t in[2] = {{TPU_F32, 2, {3, 4}, a}, {TPU_F32, 2, {4, 5}, b}};
  opt_out_t o[1];
  if (opt_run("mm", in, 2, NULL, 0, o, 1) != 1) return;
  TT_CHECK(o[0].dt == TPU_F32 && o[0].rank == 2 && o[0].dims[0] == 3 && o[0].dims[1] == 5);
  TT_CHECK(opt_close(o[0].v, want, 15, 1e-5));
  opt_free(o, 1);
}

TT_TEST(ops_linalg_mm_bf16_accumulates_f32) {
  /* 256 products of 1/16: exact in f32; a bf16 accumulator would lose bits
   * past 2^8 * ulp. Sum = 256 * (1 + 1/128)^2 / 256... use exact values. */
  enum { K = 512 };
  static double a[K], b[K];
  for (int i = 0; i < K; i++) {
    a[i] = 1.0 + (i % 2) / 128.0;
    b[i] = 1.0;
  }
  double want = 0;
  for (int i = 0; i < K; i++) want += a[i];
  opt_in_t in[2] = {{TPU_BF16, 2, {1, K}, a}, {TPU_BF16, 2, {K, 1}, b}};
  opt_out_t o[1];
  if (opt_run("mm", in, 2, NULL, 0, o, 1) != 1) return;
  TT_CHECK(o[0].dt == TPU_BF16);
  TT_CHECK_NEAR(o[0].v[0], want, want * 0.005);
  opt_free(o, 1);
}

TT_TEST(ops_linalg_addmm_beta_alpha) {
  double self[5] = {1, 2, 3, NAN, 5}, a[6], b[15], prod[10], want[10];
  opt_fill(a, 6, 3);
  opt_fill(b, 15, 4);
  ref_mm(a, b, prod, 2, 3, 5);
  double beta = 0.5, alpha = -2.0;
  for (int i = 0; i < 10; i++) want[i] = beta * self[i % 5] + alpha * prod[i];
  opt_in_t in[5] = {{TPU_F32, 1, {5}, self}, {TPU_F32, 2, {2, 3}, a}, {TPU_F32, 2, {3, 5}, b},
                    {TPU_F32, 0, {0}, &beta}, {TPU_F32, 0, {0}, &alpha}};
  opt_out_t o[1];
  if (opt_run("addmm", in, 5, NULL, 0, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, want, 10, 1e-5));
  opt_free(o, 1);
  /* beta == 0 ignores NaN in self */
  beta = 0;
  for (int i = 0; i < 10; i++) want[i] = alpha * prod[i];
  if (opt_run("addmm", in, 5, NULL, 0, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, want, 10, 1e-5));
  opt_free(o, 1);
}

TT_TEST(ops_linalg_bmm_baddbmm_addbmm) {
  double a[2 * 3 * 4], b[2 * 4 * 2], self[2 * 3 * 2], prod[2 * 6];
  opt_fill(a, 24, 5);
  opt_fill(b, 16, 6);
  opt_fill(self, 12, 7);
  for (int i = 0; i < 2; i++) ref_mm(a + 12 * i, b + 8 * i, prod + 6 * i, 3, 4, 2);
  opt_in_t in2[2] = {{TPU_F32, 3, {2, 3, 4}, a}, {TPU_F32, 3, {2, 4, 2}, b}};
  opt_out_t o[1];
  if (opt_run("bmm", in2, 2, NULL, 0, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, prod, 12, 1e-5));
  opt_free(o, 1);
  double beta = 2, alpha = 3;
  opt_in_t in5[5] = {{TPU_F32, 3, {2, 3, 2}, self}, in2[0], in2[1], {TPU_F64, 0, {0}, &beta}, {TPU_S64, 0, {0}, &alpha}};
  double want[12];
  for (int i = 0; i < 12; i++) want[i] = 2 * self[i] + 3 * prod[i];
  if (opt_run("baddbmm", in5, 5, NULL, 0, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, want, 12, 1e-5));
  opt_free(o, 1);
  in5[0].rank = 2;
  in5[0].dims[0] = 3;
  in5[0].dims[1] = 2;
  double w2[6];
  for (int i = 0; i < 6; i++) w2[i] = 2 * self[i] + 3 * (prod[i] + prod[6 + i]);
  if (opt_run("addbmm", in5, 5, NULL, 0, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 2 && opt_close(o[0].v, w2, 6, 1e-5));
  opt_free(o, 1);
}

TT_TEST(ops_linalg_mv_dot_addmv_int) {
  double m[6] = {1, 2, 3, 4, 5, 6}, v[3] = {1, -1, 2}, s[2] = {10, 20};
  opt_in_t in[2] = {{TPU_S64, 2, {2, 3}, m}, {TPU_S64, 1, {3}, v}};
  opt_out_t o[1];
  if (opt_run("mv", in, 2, NULL, 0, o, 1) != 1) return;
  double want[2] = {5, 11};
  TT_CHECK(o[0].dt == TPU_S64 && opt_close(o[0].v, want, 2, 0));
  opt_free(o, 1);
  double beta = 1, alpha = 2;
  opt_in_t in5[5] = {{TPU_S64, 1, {2}, s}, in[0], in[1], {TPU_S64, 0, {0}, &beta}, {TPU_S64, 0, {0}, &alpha}};
  double w2[2] = {20, 42};
  if (opt_run("addmv", in5, 5, NULL, 0, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, w2, 2, 0));
  opt_free(o, 1);
  opt_in_t ind[2] = {{TPU_F32, 1, {3}, v}, {TPU_F32, 1, {3}, m}};
  if (opt_run("dot", ind, 2, NULL, 0, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 0);
  TT_CHECK_NEAR(o[0].v[0], 1 - 2 + 6, 1e-6);
  opt_free(o, 1);
}

TT_TEST(ops_linalg_matmul_broadcast) {
  /* [2,1,3,4] @ [5,4,2] -> [2,5,3,2]; and [4] @ [5,4,2] -> [5,2] */
  double a[24], b[40];
  opt_fill(a, 24, 8);
  opt_fill(b, 40, 9);
  opt_in_t in[2] = {{TPU_F32, 4, {2, 1, 3, 4}, a}, {TPU_F32, 3, {5, 4, 2}, b}};
  opt_out_t o[1];
  if (opt_run("matmul", in, 2, NULL, 0, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 4 && o[0].dims[0] == 2 && o[0].dims[1] == 5 && o[0].dims[2] == 3 && o[0].dims[3] == 2);
  double want[60];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 5; j++) ref_mm(a + 12 * i, b + 8 * j, want + (i * 5 + j) * 6, 3, 4, 2);
  TT_CHECK(opt_close(o[0].v, want, 60, 1e-5));
  opt_free(o, 1);
  opt_in_t in1[2] = {{TPU_F32, 1, {4}, a}, in[1]};
  if (opt_run("matmul", in1, 2, NULL, 0, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 2 && o[0].dims[0] == 5 && o[0].dims[1] == 2);
  double w1[10];
  for (int j = 0; j < 5; j++) ref_mm(a, b + 8 * j, w1 + 2 * j, 1, 4, 2);
  TT_CHECK(opt_close(o[0].v, w1, 10, 1e-5));
  opt_free(o, 1);
}

TT_TEST(ops_linalg_addr_outer) {
  double s[6] = {1, 1, 1, 1, 1, 1}, a[2] = {1, 2}, b[3] = {3, 4, 5}, beta = 1, alpha = 1;
  opt_in_t in[5] = {{TPU_F32, 2, {2, 3}, s}, {TPU_F32, 1, {2}, a}, {TPU_F32, 1, {3}, b},
                    {TPU_F32, 0, {0}, &beta}, {TPU_F32, 0, {0}, &alpha}};
  int64_t dt = TPU_F32;
  opt_out_t o[1];
  if (opt_run("addr", in, 5, &dt, 1, o, 1) != 1) return;
  double want[6] = {4, 5, 6, 7, 9, 11};
  TT_CHECK(opt_close(o[0].v, want, 6, 1e-6));
  opt_free(o, 1);
  if (opt_run("outer", in + 1, 2, &dt, 1, o, 1) != 1) return;
  double w2[6] = {3, 4, 5, 6, 8, 10};
  TT_CHECK(opt_close(o[0].v, w2, 6, 1e-6));
  opt_free(o, 1);
}

TT_TEST(ops_linalg_errors) {
  double z[64] = {0};
  opt_in_t bad[2] = {{TPU_F32, 2, {2, 3}, z}, {TPU_F32, 2, {4, 5}, z}};
  TT_CHECK(opt_lower_fails("mm", bad, 2, NULL, 0, TPU_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"));
  opt_in_t mixed[2] = {{TPU_F32, 2, {2, 3}, z}, {TPU_F64, 2, {3, 5}, z}};
  TT_CHECK(opt_lower_fails("mm", mixed, 2, NULL, 0, TPU_INVALID_ARGUMENT, "same dtype"));
  opt_in_t d[2] = {{TPU_F32, 2, {2, 3}, z}, {TPU_F32, 1, {3}, z}};
  TT_CHECK(opt_lower_fails("dot", d, 2, NULL, 0, TPU_INVALID_ARGUMENT, "1D tensors expected"));
  opt_in_t bb[2] = {{TPU_F32, 3, {2, 2, 3}, z}, {TPU_F32, 3, {3, 3, 2}, z}};
  TT_CHECK(opt_lower_fails("bmm", bb, 2, NULL, 0, TPU_INVALID_ARGUMENT, "batch2"));
}
