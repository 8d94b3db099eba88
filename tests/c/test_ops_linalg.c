/* test_ops_linalg.c - linalg lowering rules run on the real plugin, compared
 * with values computed here.  Also defines the small rule runner the nn and
 * index rule tests share (opt_run: build a module around one rule, compile,
 * execute, read back as doubles).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

/* ---- the shared runner --------------------------------------------------------- */

static uint16_t opt_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t r = 0x7fff + ((u >> 16) & 1);
  return (uint16_t)((u + r) >> 16);
}

static float opt_bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void *opt_pack(tpu_dtype_t dt, const double *v, int64_t n) {
  size_t es = tpu_dtype_size(dt);
  char *p = calloc((size_t)(n ? n : 1), es);
  if (dt == TPU_C64) n *= 2; /* (re, im) pairs of floats */
  for (int64_t i = 0; i < n; i++) {
    double x = v ? v[i] : 0;
    switch (dt) {
      case TPU_F32:
      case TPU_C64: ((float *)p)[i] = (float)x; break;
      case TPU_F64: ((double *)p)[i] = x; break;
      case TPU_BF16: ((uint16_t *)p)[i] = opt_f2bf((float)x); break;
      case TPU_S64: ((int64_t *)p)[i] = (int64_t)x; break;
      case TPU_S32: ((int32_t *)p)[i] = (int32_t)x; break;
      case TPU_U8: ((uint8_t *)p)[i] = (uint8_t)x; break;
      case TPU_PRED: ((uint8_t *)p)[i] = x != 0; break;
      default: break;
    }
  }
  return p;
}

static double opt_unpack1(tpu_dtype_t dt, const void *p, int64_t i) {
  switch (dt) {
    case TPU_F32:
    case TPU_C64: return ((const float *)p)[i];
    case TPU_F64: return ((const double *)p)[i];
    case TPU_BF16: return opt_bf2f(((const uint16_t *)p)[i]);
    case TPU_S64: return (double)((const int64_t *)p)[i];
    case TPU_S32: return ((const int32_t *)p)[i];
    case TPU_U8: return ((const uint8_t *)p)[i];
    case TPU_PRED: return ((const uint8_t *)p)[i];
    default: return NAN;
  }
}

static int64_t opt_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

tpu_status_t opt_lower(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints,
                       tpu_hlo_module_t **out_m, int *out_n) {
  *out_m = NULL;
  const tpu_op_rule_t *r = tpu_op_rule_find(rule);
  if (!r) return tpu_status_make(TPU_NOT_FOUND, "no rule %s", rule);
  tpu_hlo_module_t *m;
  TPU_PROPAGATE(tpu_hlo_module_create("t", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t in[TPU_OP_MAX_INPUTS], out[TPU_OP_MAX_OUTPUTS];
  for (int i = 0; i < nin; i++) in[i] = tpu_hlo_func_arg(f, tpu_hlo_type_make(ins[i].dt, ins[i].rank, ins[i].dims));
  tpu_op_attrs_t attrs = {nints, ints, 0, NULL};
  int n = 0;
  tpu_status_t st = tpu_op_lower(r, f, in, nin, &attrs, out, &n);
  if (st) {
    tpu_hlo_module_destroy(m);
    return st;
  }
  tpu_hlo_func_return(f, out, n);
  *out_m = m;
  *out_n = n;
  return NULL;
}

int opt_run(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints, opt_out_t *outs,
            int maxout) {
  memset(outs, 0, sizeof(*outs) * (size_t)maxout);
  tpu_pjrt_client_t *cl = tt_client();
  if (!cl) {
    tt_failed_checks++;
    return -1;
  }
  tpu_hlo_module_t *m;
  int n = 0;
  tpu_status_t st = opt_lower(rule, ins, nin, ints, nints, &m, &n);
  const char *text = NULL;
  size_t len = 0;
  if (!st) st = tpu_hlo_module_text(m, &text, &len);
  tpu_pjrt_exec_t *e = NULL;
  if (!st) {
    if (getenv("OPT_DUMP")) fprintf(stderr, "%s\n", text);
    tpu_pjrt_compile_options_t co = {0};
    st = tpu_pjrt_compile(cl, text, len, &co, &e);
    if (st && getenv("OPT_DUMP_ON_FAIL")) fprintf(stderr, "%s\n", text);
  }
  if (m) tpu_hlo_module_destroy(m);
  if (st) {
    fprintf(stderr, "  %s: %s: %s\n", rule, tpu_code_name(tpu_status_code(st)), tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
    return -1;
  }
  tpu_pjrt_buffer_t *bin[TPU_OP_MAX_INPUTS], *bout[TPU_OP_MAX_OUTPUTS];
  int ok = 1;
  for (int i = 0; i < nin && ok; i++) {
    int64_t k = opt_numel(ins[i].rank, ins[i].dims);
    void *p = opt_pack(ins[i].dt, ins[i].v, k);
    st = tpu_pjrt_buffer_from_host(cl, 0, ins[i].dt, ins[i].dims, ins[i].rank, p, &bin[i]);
    free(p);
    if (st) {
      ok = 0;
      for (int j = 0; j < i; j++) tpu_pjrt_buffer_destroy(bin[j]);
    }
  }
  if (ok) {
    tpu_pjrt_buffer_t *const *lists[1] = {bin};
    tpu_pjrt_buffer_t **ol[1] = {bout};
    tpu_pjrt_execute_options_t eo = {0};
    eo.wait = true;
    st = tpu_pjrt_execute(e, lists, 1, (size_t)nin, &eo, ol);
    for (int i = 0; i < nin; i++) tpu_pjrt_buffer_destroy(bin[i]);
    if (!st) {
      for (int o = 0; o < n; o++) {
        tpu_pjrt_buffer_t *b = bout[o];
        if (o < maxout && !st) {
          opt_out_t *r = &outs[o];
          r->dt = tpu_pjrt_buffer_dtype(b);
          r->rank = tpu_pjrt_buffer_rank(b);
          memcpy(r->dims, tpu_pjrt_buffer_dims(b), sizeof(int64_t) * (size_t)r->rank);
          r->n = tpu_pjrt_buffer_numel(b);
          int64_t nv = r->dt == TPU_C64 ? 2 * r->n : r->n;
          size_t nb = tpu_pjrt_buffer_nbytes(b);
          void *h = malloc(nb ? nb : 1);
          st = tpu_pjrt_buffer_to_host(b, h, nb);
          r->v = calloc((size_t)(nv ? nv : 1), sizeof(double));
          for (int64_t i = 0; !st && i < nv; i++) r->v[i] = opt_unpack1(r->dt, h, i);
          free(h);
        }
        tpu_pjrt_buffer_destroy(b);
      }
    }
  }
  tpu_pjrt_exec_destroy(e);
  if (st) {
    fprintf(stderr, "  %s: run: %s\n", rule, tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
    opt_free(outs, maxout);
    return -1;
  }
  return n;
}

void opt_free(opt_out_t *outs, int n) {
  for (int i = 0; i < n; i++) {
    free(outs[i].v);
    outs[i].v = NULL;
  }
}

int opt_close(const double *got, const double *want, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++) {
    double a = got[i], b = want[i];
    if (isnan(a) && isnan(b)) continue;
    if (isinf(a) && a == b) continue;
    if (!(fabs(a - b) <= tol * (1 + fabs(b)))) {
      fprintf(stderr, "  mismatch at %lld: got %.9g want %.9g\n", (long long)i, a, b);
      return 0;
    }
  }
  return 1;
}

int opt_lower_fails(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints,
                    tpu_code_t code, const char *needle) {
  tpu_hlo_module_t *m = NULL;
  int n = 0;
  tpu_status_t st = opt_lower(rule, ins, nin, ints, nints, &m, &n);
  if (m) tpu_hlo_module_destroy(m);
  if (!st) {
    fprintf(stderr, "  %s: expected failure containing \"%s\"\n", rule, needle);
    return 0;
  }
  int ok = tpu_status_code(st) == code && strstr(tpu_status_message(st), needle);
  if (!ok) fprintf(stderr, "  %s: got %s: %s\n", rule, tpu_code_name(tpu_status_code(st)), tpu_status_message(st));
  tpu_status_free(st);
  return ok;
}

void opt_fill(double *v, int64_t n, unsigned seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = ((double)(s >> 8) / (double)(1u << 24)) * 2.0 - 1.0;
  }
}

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
