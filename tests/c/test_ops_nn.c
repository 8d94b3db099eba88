/* test_ops_nn.c - nn lowering rules run on the real plugin, compared with
 * naive loops computed here (convolution forward/backward incl. groups,
 * stride, padding, dilation and transposed; pooling; norms; losses). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

/* ---- naive 2-d convolution (and its gradients) ----------------------------- */
typedef struct {
  int N, Cin, H, W, Cout, KH, KW, G, s[2], p[2], d[2], op[2], transposed;
  int OH, OW;
} cv_t;

static void cv_shape(cv_t *c) {
  int in[2] = {c->H, c->W}, k[2] = {c->KH, c->KW}, o[2];
  for (int i = 0; i < 2; i++) {
    if (c->transposed)
      o[i] = (in[i] - 1) * c->s[i] - 2 * c->p[i] + c->d[i] * (k[i] - 1) + c->op[i] + 1;
    else
      o[i] = (in[i] + 2 * c->p[i] - c->d[i] * (k[i] - 1) - 1) / c->s[i] + 1;
  }
  c->OH = o[0];
  c->OW = o[1];
}

/* y = conv(x, w); gx, gw from go.  Transposed: w is [Cin, Cout/G, KH, KW]. */
static void cv_ref(const cv_t *c, const double *x, const double *w, const double *go, double *y, double *gx, double *gw) {
  int cin_g = c->Cin / c->G, cout_g = c->Cout / c->G;
  memset(y, 0, sizeof(double) * (size_t)(c->N * c->Cout * c->OH * c->OW));
  memset(gx, 0, sizeof(double) * (size_t)(c->N * c->Cin * c->H * c->W));
  int wn = c->transposed ? c->Cin * cout_g * c->KH * c->KW : c->Cout * cin_g * c->KH * c->KW;
  memset(gw, 0, sizeof(double) * (size_t)wn);
  for (int n = 0; n < c->N; n++)
    for (int g = 0; g < c->G; g++)
      for (int i = 0; i < cin_g; i++)
        for (int j = 0; j < cout_g; j++)
          for (int kh = 0; kh < c->KH; kh++)
            for (int kw = 0; kw < c->KW; kw++) {
              int ci = g * cin_g + i, co = g * cout_g + j;
              int widx = c->transposed ? ((ci * cout_g + j) * c->KH + kh) * c->KW + kw
                                       : ((co * cin_g + i) * c->KH + kh) * c->KW + kw;
              if (!c->transposed) {
                for (int oh = 0; oh < c->OH; oh++)
                  for (int ow = 0; ow < c->OW; ow++) {
                    int ih = oh * c->s[0] - c->p[0] + kh * c->d[0], iw = ow * c->s[1] - c->p[1] + kw * c->d[1];
                    if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                    int xi = ((n * c->Cin + ci) * c->H + ih) * c->W + iw, yi = ((n * c->Cout + co) * c->OH + oh) * c->OW + ow;
                    y[yi] += x[xi] * w[widx];
                    gx[xi] += go[yi] * w[widx];
                    gw[widx] += go[yi] * x[xi];
                  }
              } else {
                for (int ih = 0; ih < c->H; ih++)
                  for (int iw = 0; iw < c->W; iw++) {
                    int oh = ih * c->s[0] - c->p[0] + kh * c->d[0], ow = iw * c->s[1] - c->p[1] + kw * c->d[1];
                    if (oh < 0 || oh >= c->OH || ow < 0 || ow >= c->OW) continue;
                    int xi = ((n * c->Cin + ci) * c->H + ih) * c->W + iw, yi = ((n * c->Cout + co) * c->OH + oh) * c->OW + ow;
                    y[yi] += x[xi] * w[widx];
                    gx[xi] += go[yi] * w[widx];
                    gw[widx] += go[yi] * x[xi];
                  }
              }
            }
}

static void cv_check(cv_t c) {
  cv_shape(&c);
  int cin_g = c.Cin / c.G, cout_g = c.Cout / c.G;
  int xn = c.N * c.Cin * c.H * c.W, yn = c.N * c.Cout * c.OH * c.OW;
  int wn = c.transposed ? c.Cin * cout_g * c.KH * c.KW : c.Cout * cin_g * c.KH * c.KW;
  double *x = malloc(sizeof(double) * (size_t)xn), *w = malloc(sizeof(double) * (size_t)wn);
  double *go = malloc(sizeof(double) * (size_t)yn), *y = malloc(sizeof(double) * (size_t)yn);
  double *gx = malloc(sizeof(double) * (size_t)xn), *gw = malloc(sizeof(double) * (size_t)wn);
  double b[64], gb[64] = {0};
  opt_fill(x, xn, 11);
  opt_fill(w, wn, 12);
  opt_fill(go, yn, 13);
  opt_fill(b, c.Cout, 14);
  cv_ref(&c, x, w, go, y, gx, gw);
  for (int n = 0; n < c.N; n++)
    for (int o = 0; o < c.Cout; o++)
      for (int k = 0; k < c.OH * c.OW; k++) {
        y[(n * c.Cout + o) * c.OH * c.OW + k] += b[o];
        gb[o] += go[(n * c.Cout + o) * c.OH * c.OW + k];
      }
  int64_t attrs[3 + 8 + 3] = {2, c.transposed, c.G, c.s[0], c.s[1], c.p[0], c.p[1], c.d[0], c.d[1], c.op[0], c.op[1], 1, 1, 1};
  opt_in_t in[3] = {{TPU_F32, 4, {c.N, c.Cin, c.H, c.W}, x},
                    {TPU_F32, 4, {c.transposed ? c.Cin : c.Cout, c.transposed ? cout_g : cin_g, c.KH, c.KW}, w},
                    {TPU_F32, 1, {c.Cout}, b}};
  opt_out_t o[3];
  if (opt_run("convolution", in, 3, attrs, 11, o, 1) == 1) {
    TT_CHECK(o[0].rank == 4 && o[0].dims[1] == c.Cout && o[0].dims[2] == c.OH && o[0].dims[3] == c.OW);
    TT_CHECK(opt_close(o[0].v, y, yn, 1e-4));
    opt_free(o, 1);
  }
  opt_in_t bin[3] = {{TPU_F32, 4, {c.N, c.Cout, c.OH, c.OW}, go}, in[0], in[1]};
  if (opt_run("convolution_backward", bin, 3, attrs, 14, o, 3) == 3) {
    TT_CHECK(opt_close(o[0].v, gx, xn, 1e-4));
    TT_CHECK(opt_close(o[1].v, gw, wn, 1e-4));
    TT_CHECK(opt_close(o[2].v, gb, c.Cout, 1e-4));
    opt_free(o, 3);
  }
  free(x), free(w), free(go), free(y), free(gx), free(gw);
}

TT_TEST(ops_nn_conv2d_basic) {
  cv_t c = {.N = 2, .Cin = 3, .H = 7, .W = 6, .Cout = 4, .KH = 3, .KW = 3, .G = 1, .s = {1, 1}, .p = {1, 1}, .d = {1, 1}};
  cv_check(c);
}

TT_TEST(ops_nn_conv2d_groups_stride_pad_dilation) {
  cv_t c = {.N = 2, .Cin = 4, .H = 9, .W = 8, .Cout = 6, .KH = 3, .KW = 2, .G = 2, .s = {2, 3}, .p = {2, 1}, .d = {2, 1}};
  cv_check(c);
}

TT_TEST(ops_nn_conv2d_depthwise) {
  cv_t c = {.N = 1, .Cin = 3, .H = 5, .W = 5, .Cout = 6, .KH = 3, .KW = 3, .G = 3, .s = {2, 2}, .p = {0, 1}, .d = {1, 1}};
  cv_check(c);
}

TT_TEST(ops_nn_conv_transpose2d) {
  cv_t c = {.N = 2, .Cin = 4, .H = 4, .W = 5, .Cout = 6, .KH = 3, .KW = 3, .G = 2, .s = {2, 2}, .p = {1, 0},
            .d = {1, 2}, .op = {1, 1}, .transposed = 1};
  cv_check(c);
}

TT_TEST(ops_nn_conv_transpose2d_big_padding) {
  /* padding larger than dilation*(k-1): the equivalent convolution has a
   * negative edge padding. */
  cv_t c = {.N = 1, .Cin = 2, .H = 6, .W = 6, .Cout = 2, .KH = 2, .KW = 2, .G = 1, .s = {3, 3}, .p = {2, 2},
            .d = {1, 1}, .op = {0, 0}, .transposed = 1};
  cv_check(c);
}

TT_TEST(ops_nn_conv1d_unbatched) {
  double x[2 * 5], w[3 * 2 * 2];
  opt_fill(x, 10, 1);
  opt_fill(w, 12, 2);
  int64_t attrs[7] = {1, 0, 1, 1, 0, 1, 0};
  opt_in_t in[2] = {{TPU_F32, 2, {2, 5}, x}, {TPU_F32, 3, {3, 2, 2}, w}};
  opt_out_t o[1];
  if (opt_run("convolution", in, 2, attrs, 7, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 2 && o[0].dims[0] == 3 && o[0].dims[1] == 4);
  double want[12];
  for (int co = 0; co < 3; co++)
    for (int t = 0; t < 4; t++) {
      double s = 0;
      for (int ci = 0; ci < 2; ci++)
        for (int k = 0; k < 2; k++) s += x[ci * 5 + t + k] * w[(co * 2 + ci) * 2 + k];
      want[co * 4 + t] = s;
    }
  TT_CHECK(opt_close(o[0].v, want, 12, 1e-5));
  opt_free(o, 1);
}

TT_TEST(ops_nn_conv_errors) {
  int64_t attrs[11] = {2, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0};
  opt_in_t in[2] = {{TPU_F32, 4, {1, 3, 5, 5}, NULL}, {TPU_F32, 4, {4, 2, 3, 3}, NULL}};
  TT_CHECK(opt_lower_fails("convolution", in, 2, attrs, 11, TPU_INVALID_ARGUMENT, "expected input[1, 3, 5, 5] to have 2 channels"));
}

/* ---- pooling ------------------------------------------------------------------ */

TT_TEST(ops_nn_max_pool2d_indices_and_backward) {
  /* 1x1x5x5, kernel 3, stride 2, pad 1, ceil_mode -> 3x3 */
  double x[25];
  opt_fill(x, 25, 21);
  x[6] = x[8] = 5.0; /* a tie inside one window: first wins */
  int64_t attrs[9] = {3, 3, 2, 2, 1, 1, 1, 1, 1};
  opt_in_t in[1] = {{TPU_F32, 4, {1, 1, 5, 5}, x}};
  opt_out_t o[2];
  if (opt_run("max_pool2d_with_indices", in, 1, attrs, 9, o, 2) != 2) return;
  TT_CHECK(o[0].dims[2] == 3 && o[0].dims[3] == 3 && o[1].dt == TPU_S64);
  double wv[9], wi[9];
  for (int oh = 0; oh < 3; oh++)
    for (int ow = 0; ow < 3; ow++) {
      double best = -INFINITY;
      int bi = -1;
      for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) {
          int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
          if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
          if (x[ih * 5 + iw] > best) best = x[ih * 5 + iw], bi = ih * 5 + iw;
        }
      wv[oh * 3 + ow] = best;
      wi[oh * 3 + ow] = bi;
    }
  TT_CHECK(opt_close(o[0].v, wv, 9, 1e-6));
  TT_CHECK(opt_close(o[1].v, wi, 9, 0));
  double idx[9];
  memcpy(idx, o[1].v, sizeof idx);
  opt_free(o, 2);
  double g[9];
  for (int i = 0; i < 9; i++) g[i] = i + 1;
  double wg[25] = {0};
  for (int i = 0; i < 9; i++) wg[(int)wi[i]] += g[i];
  opt_in_t bin[3] = {{TPU_F32, 4, {1, 1, 3, 3}, g}, in[0], {TPU_S64, 4, {1, 1, 3, 3}, idx}};
  if (opt_run("max_pool2d_with_indices_backward", bin, 3, attrs, 9, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, wg, 25, 1e-6));
  opt_free(o, 1);
}

static void avg_ref(const double *x, int H, int W, int k, int s, int p, int OH, int OW, int cip, int divo,
                    const double *go, double *y, double *gx) {
  memset(gx, 0, sizeof(double) * (size_t)(H * W));
  for (int oh = 0; oh < OH; oh++)
    for (int ow = 0; ow < OW; ow++) {
      int hs = oh * s - p, ws = ow * s - p;
      int he = hs + k < H + p ? hs + k : H + p, we = ws + k < W + p ? ws + k : W + p;
      int pool = (he - hs) * (we - ws);
      int hs2 = hs < 0 ? 0 : hs, ws2 = ws < 0 ? 0 : ws, he2 = he > H ? H : he, we2 = we > W ? W : we;
      double div = divo ? divo : cip ? pool : (he2 - hs2) * (we2 - ws2);
      double sum = 0;
      for (int h = hs2; h < he2; h++)
        for (int w = ws2; w < we2; w++) {
          sum += x[h * W + w];
          gx[h * W + w] += go[oh * OW + ow] / div;
        }
      y[oh * OW + ow] = sum / div;
    }
}

static void avg_case(int cip, int divo, int ceil_mode) {
  enum { H = 6, W = 7 };
  double x[H * W];
  opt_fill(x, H * W, 31);
  int k = 3, s = 2, p = 1;
  int OH = ceil_mode ? 4 : 3, OW = ceil_mode ? 4 : 4;
  double go[16], y[16], gx[H * W];
  opt_fill(go, 16, 32);
  avg_ref(x, H, W, k, s, p, OH, OW, cip, divo, go, y, gx);
  int64_t attrs[9] = {k, k, s, s, p, p, ceil_mode, cip, divo};
  opt_in_t in[1] = {{TPU_F32, 3, {1, H, W}, x}};
  opt_out_t o[1];
  if (opt_run("avg_pool2d", in, 1, attrs, 9, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 3 && o[0].dims[1] == OH && o[0].dims[2] == OW);
  TT_CHECK(opt_close(o[0].v, y, OH * OW, 1e-5));
  opt_free(o, 1);
  opt_in_t bin[2] = {{TPU_F32, 3, {1, OH, OW}, go}, in[0]};
  if (opt_run("avg_pool2d_backward", bin, 2, attrs, 9, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, gx, H * W, 1e-5));
  opt_free(o, 1);
}

TT_TEST(ops_nn_avg_pool2d_variants) {
  avg_case(1, 0, 0);
  avg_case(0, 0, 0);
  avg_case(1, 0, 1);
  avg_case(0, 0, 1);
  avg_case(1, 5, 1);
}

TT_TEST(ops_nn_adaptive_pools) {
  enum { H = 7, W = 5, OH = 3, OW = 2 };
  double x[2 * H * W];
  opt_fill(x, 2 * H * W, 41);
  int64_t attrs[2] = {OH, OW};
  opt_in_t in[1] = {{TPU_F32, 4, {1, 2, H, W}, x}};
  double wa[2 * OH * OW], wm[2 * OH * OW], wi[2 * OH * OW];
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        int hs = i * H / OH, he = ((i + 1) * H + OH - 1) / OH, ws = j * W / OW, we = ((j + 1) * W + OW - 1) / OW;
        double s = 0, m = -INFINITY;
        int mi = -1;
        for (int h = hs; h < he; h++)
          for (int w = ws; w < we; w++) {
            double v = x[c * H * W + h * W + w];
            s += v;
            if (v > m) m = v, mi = h * W + w;
          }
        wa[(c * OH + i) * OW + j] = s / ((he - hs) * (we - ws));
        wm[(c * OH + i) * OW + j] = m;
        wi[(c * OH + i) * OW + j] = mi;
      }
  opt_out_t o[2];
  if (opt_run("adaptive_avg_pool2d", in, 1, attrs, 2, o, 1) != 1) return;
  TT_CHECK(opt_close(o[0].v, wa, 2 * OH * OW, 1e-5));
  opt_free(o, 1);
  if (opt_run("adaptive_max_pool2d", in, 1, attrs, 2, o, 2) != 2) return;
  TT_CHECK(opt_close(o[0].v, wm, 2 * OH * OW, 1e-6));
  TT_CHECK(opt_close(o[1].v, wi, 2 * OH * OW, 0));
  opt_free(o, 2);
  /* avg backward: sum of grads = sum over windows of g (each window's
   * weights sum to 1) */
  double g[2 * OH * OW];
  for (int i = 0; i < 2 * OH * OW; i++) g[i] = 1;
  opt_in_t bin[2] = {{TPU_F32, 4, {1, 2, OH, OW}, g}, in[0]};
  if (opt_run("adaptive_avg_pool2d_backward", bin, 2, NULL, 0, o, 1) != 1) return;
  double tot = 0;
  for (int i = 0; i < 2 * H * W; i++) tot += o[0].v[i];
  TT_CHECK_NEAR(tot, 2 * OH * OW, 1e-4);
  opt_free(o, 1);
}

/* ---- norms ----------------------------------------------------------------------- */

TT_TEST(ops_nn_batch_norm_train_and_backward) {
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

TT_TEST(ops_nn_batch_norm_eval) {
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

TT_TEST(ops_nn_layer_norm_and_backward) {
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

/* ---- embedding, losses ------------------------------------------------------------ */

TT_TEST(ops_nn_embedding_and_backward) {
  double w[5 * 2] = {0, 1, 10, 11, 20, 21, 30, 31, 40, 41}, idx[4] = {4, 1, 1, 0};
  opt_in_t in[2] = {{TPU_F32, 2, {5, 2}, w}, {TPU_S64, 2, {2, 2}, idx}};
  opt_out_t o[1];
  if (opt_run("embedding", in, 2, NULL, 0, o, 1) != 1) return;
  double want[8] = {40, 41, 10, 11, 10, 11, 0, 1};
  TT_CHECK(o[0].rank == 3 && opt_close(o[0].v, want, 8, 0));
  opt_free(o, 1);
  double g[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t attrs[3] = {5, 0, 1}; /* padding_idx 0, scale_grad_by_freq */
  opt_in_t bin[2] = {{TPU_F32, 3, {2, 2, 2}, g}, in[1]};
  if (opt_run("embedding_dense_backward", bin, 2, attrs, 3, o, 1) != 1) return;
  double wg[10] = {0, 0, 4, 5, 0, 0, 0, 0, 1, 2};
  TT_CHECK(opt_close(o[0].v, wg, 10, 1e-6));
  opt_free(o, 1);
}

TT_TEST(ops_nn_nll_loss_weight_ignore) {
  double x[3 * 4], t[3] = {1, -100, 3}, w[4] = {1, 2, 3, 4};
  opt_fill(x, 12, 71);
  opt_in_t in[3] = {{TPU_F32, 2, {3, 4}, x}, {TPU_S64, 1, {3}, t}, {TPU_F32, 1, {4}, w}};
  int64_t attrs[3] = {1, -100, 1};
  opt_out_t o[2];
  if (opt_run("nll_loss", in, 3, attrs, 3, o, 2) != 2) return;
  double tw = 2 + 4, want = -(x[1] * 2 + x[11] * 4) / tw;
  TT_CHECK_NEAR(o[0].v[0], want, 1e-5);
  TT_CHECK_NEAR(o[1].v[0], tw, 1e-6);
  opt_free(o, 2);
  double g = 1, tot = tw;
  opt_in_t bin[5] = {{TPU_F32, 0, {0}, &g}, in[0], in[1], in[2], {TPU_F32, 0, {0}, &tot}};
  if (opt_run("nll_loss_backward", bin, 5, attrs, 3, o, 1) != 1) return;
  double wg[12] = {0};
  wg[1] = -2 / tw;
  wg[11] = -4 / tw;
  TT_CHECK(opt_close(o[0].v, wg, 12, 1e-6));
  opt_free(o, 1);
}

TT_TEST(ops_nn_losses_elementwise) {
  double x[4] = {0.1, 0.5, 0.9, 0.3}, y[4] = {0, 1, 1, 0.5}, beta = 0.5;
  opt_in_t in[3] = {{TPU_F32, 1, {4}, x}, {TPU_F32, 1, {4}, y}, {TPU_F32, 0, {0}, &beta}};
  int64_t red = 1;
  opt_out_t o[1];
  double mse = 0, sl1 = 0, bce = 0;
  for (int i = 0; i < 4; i++) {
    double d = x[i] - y[i], z = fabs(d);
    mse += d * d / 4;
    sl1 += (z < beta ? 0.5 * z * z / beta : z - 0.5 * beta) / 4;
    bce += -(y[i] * log(x[i]) + (1 - y[i]) * log(1 - x[i])) / 4;
  }
  if (opt_run("mse_loss", in, 2, &red, 1, o, 1) != 1) return;
  TT_CHECK_NEAR(o[0].v[0], mse, 1e-6);
  opt_free(o, 1);
  if (opt_run("smooth_l1_loss", in, 3, &red, 1, o, 1) != 1) return;
  TT_CHECK_NEAR(o[0].v[0], sl1, 1e-6);
  opt_free(o, 1);
  int64_t battrs[2] = {1, 0};
  if (opt_run("binary_cross_entropy", in, 2, battrs, 2, o, 1) != 1) return;
  TT_CHECK_NEAR(o[0].v[0], bce, 1e-6);
  opt_free(o, 1);
  double g = 1;
  opt_in_t bin[3] = {{TPU_F32, 0, {0}, &g}, in[0], in[1]};
  if (opt_run("binary_cross_entropy_backward", bin, 3, battrs, 2, o, 1) != 1) return;
  for (int i = 0; i < 4; i++) TT_CHECK_NEAR(o[0].v[i], (x[i] - y[i]) / (x[i] * (1 - x[i])) / 4, 1e-5);
  opt_free(o, 1);
}
