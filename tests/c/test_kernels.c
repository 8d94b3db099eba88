/* test_kernels.c - host kernels (csrc/kernels) called by a program on the
 * CPU plugin through a typed FFI custom call: registration, the call, its
 * values against attention computed here, and an unregistered name failing
 * at compile time with the name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "pjrt/pjrt.h"
#include "tinytest.h"

/* One variant: 2 items of 2 query rows (4 tokens, item i row t = token
 * 2i + t), 4 query heads over 2 KV heads, D 4, blocks of 2 tokens; item 0
 * reads blocks 3 then 1, item 1 block 2 (positions 0..3).  The result rows
 * come back in token order through out_index (here reversed). */
enum { N = 2, TQ = 2, HQ = 4, HKV = 2, D = 4, NB = 4, BS = 2, MB = 2 };

static const char *k_call =
    "func.func @main(%q: tensor<4x4x4xf32>, %kv: tensor<4x2x2x8xf32>, %oi: tensor<4xi64>, %qi: tensor<2x2xi64>, "
    "%pos: tensor<2x2xi32>, %tab: tensor<2x2xi32>, %chunks: tensor<1xi32>, %groups: tensor<1xi32>) -> "
    "tensor<4x4x4xf32> {\n"
    "  %params = stablehlo.constant dense<[5.000000e-01, 0.000000e+00]> : tensor<2xf32>\n"
    "  %r = stablehlo.custom_call @torch_tpu_paged_attention(%q, %kv, %oi, %params, %qi, %pos, %tab, %chunks, "
    "%groups) {api_version = 4 : i32} : (tensor<4x4x4xf32>, tensor<4x2x2x8xf32>, tensor<4xi64>, tensor<2xf32>, "
    "tensor<2x2xi64>, tensor<2x2xi32>, tensor<2x2xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4x4x4xf32>\n"
    "  return %r : tensor<4x4x4xf32>\n"
    "}\n";

static tpu_pjrt_buffer_t *up(tpu_pjrt_client_t *c, tpu_dtype_t dt, const int64_t *dims, int rank, const void *data) {
  tpu_pjrt_buffer_t *b = NULL;
  tpu_status_t st = tpu_pjrt_buffer_from_host(c, 0, dt, dims, rank, data, &b);
  TT_CHECK(st == NULL);
  tpu_status_free(st);
  return b;
}

static void reference(const float *q, const float *kv, const int32_t *tab, const int32_t *pos, float *out) {
  int g = HQ / HKV;
  for (int i = 0; i < N; i++)
    for (int t = 0; t < TQ; t++)
      for (int h = 0; h < HQ; h++) {
        const float *qv = q + ((i * TQ + t) * HQ + h) * D;
        double s[MB * BS], m = -INFINITY, sum = 0;
        int L = pos[i * TQ + t] + 1;
        for (int k = 0; k < L; k++) {
          const float *kk = kv + ((tab[i * MB + k / BS] * BS + k % BS) * HKV + h / g) * 2 * D;
          s[k] = 0;
          for (int e = 0; e < D; e++) s[k] += (double)qv[e] * kk[e];
          s[k] *= 0.5;
          m = s[k] > m ? s[k] : m;
        }
        for (int k = 0; k < L; k++) sum += s[k] = exp(s[k] - m);
        for (int e = 0; e < D; e++) {
          double o = 0;
          for (int k = 0; k < L; k++)
            o += s[k] / sum * kv[((tab[i * MB + k / BS] * BS + k % BS) * HKV + h / g) * 2 * D + D + e];
          out[((i * TQ + t) * HQ + h) * D + e] = (float)o;
        }
      }
}

TT_TEST(kernels_paged_attention_called_by_a_program_equals_reference) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  TT_CHECK(tpu_kernels_register(c) == NULL);
  TT_CHECK(tpu_kernels_register(c) == NULL); /* again: nothing, no error */
  TT_CHECK(tpu_kernels_available(TPU_KERNEL_PAGED_ATTENTION));
  float q[N * TQ * HQ * D], kv[NB * BS * HKV * 2 * D], want[N * TQ * HQ * D], got[N * TQ * HQ * D];
  unsigned seed = 7;
  for (size_t e = 0; e < sizeof(q) / sizeof(q[0]); e++) q[e] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 65536.f - .5f;
  for (size_t e = 0; e < sizeof(kv) / sizeof(kv[0]); e++) kv[e] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 65536.f - .5f;
  int32_t tab[N * MB] = {3, 1, 2, 0}, pos[N * TQ] = {2, 3, 0, 1}, chunks[1] = {1}, groups[1] = {1};
  int64_t qi[N * TQ] = {0, 1, 2, 3}, oi[N * TQ] = {3, 2, 1, 0};
  float rows[N * TQ * HQ * D];
  reference(q, kv, tab, pos, rows);
  for (int t = 0; t < N * TQ; t++) memcpy(want + t * HQ * D, rows + oi[t] * HQ * D, sizeof(float) * HQ * D);
  int64_t dq[3] = {N * TQ, HQ, D}, dkv[4] = {NB, BS, HKV, 2 * D}, dt[2] = {N, MB}, dp[2] = {N, TQ}, d1[1] = {1},
          d4[1] = {N * TQ};
  tpu_pjrt_buffer_t *in[8] = {up(c, TPU_F32, dq, 3, q),        up(c, TPU_F32, dkv, 4, kv),
                              up(c, TPU_S64, d4, 1, oi),       up(c, TPU_S64, dp, 2, qi),
                              up(c, TPU_S32, dp, 2, pos),      up(c, TPU_S32, dt, 2, tab),
                              up(c, TPU_S32, d1, 1, chunks),   up(c, TPU_S32, d1, 1, groups)};
  tpu_pjrt_exec_t *e = NULL;
  tpu_status_t st = tpu_pjrt_compile(c, k_call, strlen(k_call), NULL, &e);
  TT_CHECK(st == NULL);
  if (st) fprintf(stderr, "  %s\n", tpu_status_message(st));
  tpu_status_free(st);
  if (e) {
    tpu_pjrt_buffer_t *out[1] = {NULL};
    tpu_pjrt_buffer_t *const *lists[1] = {in};
    tpu_pjrt_buffer_t **outs[1] = {out};
    TT_CHECK_OK(tpu_pjrt_execute(e, lists, 1, 8, NULL, outs));
    if (out[0]) {
      TT_CHECK_OK(tpu_pjrt_buffer_to_host(out[0], got, sizeof(got)));
      double worst = 0;
      for (size_t i = 0; i < sizeof(got) / sizeof(got[0]); i++) worst = fmax(worst, fabs(got[i] - want[i]));
      TT_CHECK(worst < 1e-5);
      tpu_pjrt_buffer_destroy(out[0]);
    }
    tpu_pjrt_exec_destroy(e);
  }
  for (int i = 0; i < 8; i++) tpu_pjrt_buffer_destroy(in[i]);
}

TT_TEST(kernels_unregistered_target_fails_at_compile_naming_it) {
  tpu_pjrt_client_t *c = tt_client();
  if (!c) { TT_CHECK(c != NULL); return; }
  const char *text =
      "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
      "  %r = stablehlo.custom_call @torch_tpu_no_such_kernel(%a) {api_version = 4 : i32} : (tensor<2xf32>) -> "
      "tensor<2xf32>\n"
      "  return %r : tensor<2xf32>\n"
      "}\n";
  TT_CHECK(!tpu_kernels_available("torch_tpu_no_such_kernel"));
  tpu_pjrt_exec_t *e = NULL;
  tpu_status_t st = tpu_pjrt_compile(c, text, strlen(text), NULL, &e);
  TT_CHECK(st != NULL && strstr(tpu_status_message(st), "torch_tpu_no_such_kernel") != NULL);
  if (st && !strstr(tpu_status_message(st), "torch_tpu_no_such_kernel")) fprintf(stderr, "  %s\n", tpu_status_message(st));
  tpu_status_free(st);
  if (e) tpu_pjrt_exec_destroy(e);
}
