/* test_ops_optim.c - the optimizer rules (csrc/ops/optim.c) run on the real
 * plugin and compared with steps computed here in C, following PyTorch's
 * CPU fused kernels (per-step scalars in double, elements in float).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

#define F32(x) ((double)(float)(x))

typedef struct {
  double lr, beta1, beta2, wd, eps;
  int amsgrad, maximize, adamw;
  double grad_scale; /* 0 = none */
} adam_cfg_t;

/* One Adam(W) step on n elements, float element math as the CPU kernel. */
static void ref_adam(const adam_cfg_t *k, double step, int64_t n, double *p, double *g, double *m, double *v,
                     double *vmax) {
  double bc1 = 1 - pow(k->beta1, step), bc2 = 1 - pow(k->beta2, step);
  float step_size = (float)(k->lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  float c1 = (float)(1 - k->beta1), c2 = (float)(1 - k->beta2), b1 = (float)k->beta1, b2 = (float)k->beta2;
  float wd = (float)k->wd, eps = (float)k->eps, decay = (float)(1 - k->lr * k->wd);
  for (int64_t i = 0; i < n; i++) {
    float pf = (float)p[i], gf = (float)g[i], mf = (float)m[i], vf = (float)v[i];
    if (k->grad_scale != 0) {
      gf = gf / (float)k->grad_scale;
      g[i] = gf;
    }
    if (k->maximize) gf = -gf;
    if (k->wd != 0) {
      if (k->adamw) pf = pf * decay;
      else gf = gf + pf * wd;
    }
    mf = mf * b1 + gf * c1;
    vf = vf * b2 + gf * gf * c2;
    float vd = vf;
    if (k->amsgrad) {
      float mx = (float)vmax[i] > vf ? (float)vmax[i] : vf;
      vmax[i] = mx;
      vd = mx;
    }
    float denom = sqrtf(vd) / bc2_sqrt + eps;
    pf = pf - step_size * mf / denom;
    p[i] = pf;
    m[i] = mf;
    v[i] = vf;
  }
}

/* Runs fused_adam on 2 tensors ([3,4] and [5]) and checks every output. */
static void check_adam(const adam_cfg_t *k, double found_inf, int has_fi) {
  enum { NA = 12, NB = 5 };
  double p[2][NA], g[2][NA], m[2][NA], v[2][NA], vmax[2][NA];
  int64_t n[2] = {NA, NB};
  double steps[2] = {1, 7};
  for (int t = 0; t < 2; t++) {
    opt_fill(p[t], n[t], 10 + t);
    opt_fill(g[t], n[t], 20 + t);
    opt_fill(m[t], n[t], 30 + t);
    opt_fill(v[t], n[t], 40 + t);
    opt_fill(vmax[t], n[t], 50 + t);
    for (int i = 0; i < n[t]; i++) {
      p[t][i] = F32(p[t][i]);
      g[t][i] = F32(g[t][i] * 4);
      m[t][i] = F32(m[t][i] * 0.1);
      v[t][i] = F32(fabs(v[t][i]) * 0.01);
      vmax[t][i] = F32(fabs(vmax[t][i]) * 0.012);
    }
  }
  opt_in_t in[32];
  int nin = 0;
  int lists = k->amsgrad ? 5 : 4;
  double *arrs[5] = {&p[0][0], &g[0][0], &m[0][0], &v[0][0], &vmax[0][0]};
  for (int l = 0; l < lists; l++)
    for (int t = 0; t < 2; t++) {
      in[nin] = (opt_in_t){TPU_F32, t == 0 ? 2 : 1, {0}, arrs[l] + t * NA};
      if (t == 0) {
        in[nin].dims[0] = 3;
        in[nin].dims[1] = 4;
      } else {
        in[nin].dims[0] = NB;
      }
      nin++;
    }
  for (int t = 0; t < 2; t++) in[nin++] = (opt_in_t){TPU_F32, 0, {0}, &steps[t]};
  double hyper[5] = {k->lr, k->beta1, k->beta2, k->wd, k->eps};
  for (int i = 0; i < 5; i++) in[nin++] = (opt_in_t){TPU_F64, 0, {0}, &hyper[i]};
  double gs = k->grad_scale;
  if (gs != 0) in[nin++] = (opt_in_t){TPU_F32, 0, {0}, &gs};
  if (has_fi) in[nin++] = (opt_in_t){TPU_F32, 0, {0}, &found_inf};
  int64_t ints[8] = {2, k->amsgrad, k->maximize, k->adamw, k->wd != 0, gs != 0, has_fi, TPU_F64};

  /* reference (copies: the inputs above are read by opt_run) */
  double rp[2][NA], rg[2][NA], rm[2][NA], rv[2][NA], rvmax[2][NA];
  memcpy(rp, p, sizeof(p));
  memcpy(rg, g, sizeof(g));
  memcpy(rm, m, sizeof(m));
  memcpy(rv, v, sizeof(v));
  memcpy(rvmax, vmax, sizeof(vmax));
  if (!(has_fi && found_inf == 1.0))
    for (int t = 0; t < 2; t++) ref_adam(k, steps[t], n[t], rp[t], rg[t], rm[t], rv[t], rvmax[t]);

  opt_out_t o[16];
  int nout_want = 2 * (3 + (k->amsgrad ? 1 : 0) + (gs != 0 ? 1 : 0));
  int got = opt_run("fused_adam", in, nin, ints, 8, o, 16);
  TT_CHECK(got == nout_want);
  if (got != nout_want) {
    if (got > 0) opt_free(o, got);
    return;
  }
  int at = 0;
  double *want[5] = {&rp[0][0], &rm[0][0], &rv[0][0], &rvmax[0][0], &rg[0][0]};
  for (int l = 0; l < 5; l++) {
    if (l == 3 && !k->amsgrad) continue;
    if (l == 4 && gs == 0) continue;
    for (int t = 0; t < 2; t++, at++) {
      TT_CHECK(o[at].n == n[t]);
      TT_CHECK(o[at].dt == TPU_F32);
      if (!opt_close(o[at].v, want[l] + t * NA, n[t], 2e-6)) {
        fprintf(stderr, "  output list %d tensor %d differs\n", l, t);
        tt_failed_checks++;
      }
    }
  }
  opt_free(o, got);
}

TT_TEST(ops_optim_fused_adam_matches_reference) {
  adam_cfg_t k = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .wd = 0, .eps = 1e-8};
  check_adam(&k, 0, 0);
}

TT_TEST(ops_optim_fused_adam_amsgrad_weight_decay) {
  adam_cfg_t k = {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99, .wd = 0.1, .eps = 1e-6, .amsgrad = 1};
  check_adam(&k, 0, 0);
}

TT_TEST(ops_optim_fused_adamw_maximize_grad_scale) {
  adam_cfg_t k = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .wd = 0.3, .eps = 1e-8, .maximize = 1, .adamw = 1,
                  .grad_scale = 4.0};
  check_adam(&k, 0.0, 1);
}

TT_TEST(ops_optim_fused_adam_found_inf_skips_the_step) {
  adam_cfg_t k = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .wd = 0.1, .eps = 1e-8, .amsgrad = 1,
                  .grad_scale = 2.0};
  check_adam(&k, 1.0, 1);
}

TT_TEST(ops_optim_fused_sgd_nesterov_matches_reference) {
  enum { N = 10 };
  double p[N], g[N], buf[N];
  opt_fill(p, N, 1);
  opt_fill(g, N, 2);
  opt_fill(buf, N, 3);
  for (int i = 0; i < N; i++) p[i] = F32(p[i]), g[i] = F32(g[i]), buf[i] = F32(buf[i]);
  double wd = 0.01, mom = 0.9, lr = 0.1, damp = 0.2;
  opt_in_t in[7] = {{TPU_F32, 1, {N}, p}, {TPU_F32, 1, {N}, g}, {TPU_F32, 1, {N}, buf},
                    {TPU_F64, 0, {0}, &wd}, {TPU_F64, 0, {0}, &mom}, {TPU_F64, 0, {0}, &lr},
                    {TPU_F64, 0, {0}, &damp}};
  int64_t ints[9] = {1, 1, 1, 0, 0, 1, 0, 0, TPU_F64};
  double wp[N], wb[N];
  for (int i = 0; i < N; i++) {
    float gf = (float)g[i] + (float)p[i] * (float)wd;
    float b = (float)buf[i] * (float)mom + gf * (float)(1 - damp);
    gf = gf + b * (float)mom;
    wp[i] = (float)p[i] + gf * (float)(-lr);
    wb[i] = b;
  }
  opt_out_t o[4];
  int got = opt_run("fused_sgd", in, 7, ints, 9, o, 4);
  TT_CHECK(got == 2);
  if (got == 2) {
    TT_CHECK(opt_close(o[0].v, wp, N, 1e-6));
    TT_CHECK(opt_close(o[1].v, wb, N, 1e-6));
  }
  if (got > 0) opt_free(o, got);
}

TT_TEST(ops_optim_fused_sgd_first_step_takes_grad_as_buffer) {
  enum { N = 6 };
  double p[N], g[N], buf[N] = {0};
  opt_fill(p, N, 4);
  opt_fill(g, N, 5);
  for (int i = 0; i < N; i++) p[i] = F32(p[i]), g[i] = F32(g[i]);
  double wd = 0, mom = 0.5, lr = 0.25, damp = 0.7;
  opt_in_t in[7] = {{TPU_F32, 1, {N}, p}, {TPU_F32, 1, {N}, g}, {TPU_F32, 1, {N}, buf},
                    {TPU_F32, 0, {0}, &wd}, {TPU_F32, 0, {0}, &mom}, {TPU_F32, 0, {0}, &lr},
                    {TPU_F32, 0, {0}, &damp}};
  int64_t ints[9] = {1, 1, 0, 0, 1, 0, 0, 0, TPU_F32};
  double wp[N];
  for (int i = 0; i < N; i++) wp[i] = (float)p[i] - (float)g[i] * 0.25f;
  opt_out_t o[4];
  int got = opt_run("fused_sgd", in, 7, ints, 9, o, 4);
  TT_CHECK(got == 2);
  if (got == 2) {
    TT_CHECK(opt_close(o[0].v, wp, N, 1e-7));
    TT_CHECK(opt_close(o[1].v, g, N, 0));
  }
  if (got > 0) opt_free(o, got);
}

TT_TEST(ops_optim_errors) {
  double z[12] = {0};
  double one = 1;
  opt_in_t in[16];
  /* grads[0] shaped differently from params[0] */
  int nin = 0;
  in[nin++] = (opt_in_t){TPU_F32, 1, {4}, z};
  in[nin++] = (opt_in_t){TPU_F32, 1, {5}, z};
  in[nin++] = (opt_in_t){TPU_F32, 1, {4}, z};
  in[nin++] = (opt_in_t){TPU_F32, 1, {4}, z};
  in[nin++] = (opt_in_t){TPU_F32, 0, {0}, &one};
  for (int i = 0; i < 5; i++) in[nin++] = (opt_in_t){TPU_F64, 0, {0}, &one};
  int64_t ints[8] = {1, 0, 0, 0, 0, 0, 0, TPU_F64};
  TT_CHECK(opt_lower_fails("fused_adam", in, nin, ints, 8, TPU_INVALID_ARGUMENT, "grads[0]"));
  /* list length that does not match the inputs */
  int64_t bad[8] = {2, 0, 0, 0, 0, 0, 0, TPU_F64};
  TT_CHECK(opt_lower_fails("fused_adam", in, nin, bad, 8, TPU_INVALID_ARGUMENT, "list length"));
  /* integer params */
  in[0].dt = in[1].dt = in[2].dt = in[3].dt = TPU_S32;
  in[1].dims[0] = 4;
  TT_CHECK(opt_lower_fails("fused_adam", in, nin, ints, 8, TPU_INVALID_ARGUMENT, "floating point"));
}

TT_TEST(ops_optim_amp_unscale_and_update_scale) {
  double a[4] = {1, -2, 4, 8}, b[2] = {INFINITY, 1}, fi = 0, inv = 0.25;
  opt_in_t in[4] = {{TPU_F32, 1, {4}, a}, {TPU_F32, 1, {2}, b}, {TPU_F32, 1, {1}, &fi}, {TPU_F32, 1, {1}, &inv}};
  int64_t ints[1] = {2};
  double wa[4] = {0.25, -0.5, 1, 2}, wb[2] = {INFINITY, 0.25}, wfi[1] = {1};
  opt_out_t o[3];
  int got = opt_run("amp_unscale", in, 4, ints, 1, o, 3);
  TT_CHECK(got == 3);
  if (got == 3) {
    TT_CHECK(opt_close(o[0].v, wa, 4, 0));
    TT_CHECK(opt_close(o[1].v, wb, 2, 0));
    TT_CHECK(o[2].rank == 1 && opt_close(o[2].v, wfi, 1, 0));
  }
  if (got > 0) opt_free(o, got);
  /* growth: tracker 1 -> interval 2 reached: scale doubles, tracker resets */
  double s = 1024, t = 1, f = 0, g = 2, bo = 0.5, iv = 2;
  opt_in_t u[6] = {{TPU_F32, 1, {1}, &s}, {TPU_S32, 1, {1}, &t}, {TPU_F32, 1, {1}, &f},
                   {TPU_F64, 0, {0}, &g}, {TPU_F64, 0, {0}, &bo}, {TPU_S64, 0, {0}, &iv}};
  got = opt_run("amp_update_scale", u, 6, NULL, 0, o, 2);
  TT_CHECK(got == 2);
  if (got == 2) {
    TT_CHECK_NEAR(o[0].v[0], 2048, 0);
    TT_CHECK_NEAR(o[1].v[0], 0, 0);
    TT_CHECK(o[1].dt == TPU_S32);
  }
  if (got > 0) opt_free(o, got);
  f = 1; /* overflow: backoff, tracker reset */
  got = opt_run("amp_update_scale", u, 6, NULL, 0, o, 2);
  TT_CHECK(got == 2);
  if (got == 2) {
    TT_CHECK_NEAR(o[0].v[0], 512, 0);
    TT_CHECK_NEAR(o[1].v[0], 0, 0);
  }
  if (got > 0) opt_free(o, got);
}
