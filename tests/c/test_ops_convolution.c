/* test_ops_convolution.c - convolution rules (csrc/ops/convolution.c) run on
 * the real plugin and compared with naive loops computed here: forward and
 * backward with groups, stride, padding, dilation, transposed, unbatched
 * 1-d; im2col / col2im. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

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

TT_TEST(ops_convolution_conv2d_basic) {
  cv_t c = {.N = 2, .Cin = 3, .H = 7, .W = 6, .Cout = 4, .KH = 3, .KW = 3, .G = 1, .s = {1, 1}, .p = {1, 1}, .d = {1, 1}};
  cv_check(c);
}

TT_TEST(ops_convolution_conv2d_groups_stride_pad_dilation) {
  cv_t c = {.N = 2, .Cin = 4, .H = 9, .W = 8, .Cout = 6, .KH = 3, .KW = 2, .G = 2, .s = {2, 3}, .p = {2, 1}, .d = {2, 1}};
  cv_check(c);
}

TT_TEST(ops_convolution_conv2d_depthwise) {
  cv_t c = {.N = 1, .Cin = 3, .H = 5, .W = 5, .Cout = 6, .KH = 3, .KW = 3, .G = 3, .s = {2, 2}, .p = {0, 1}, .d = {1, 1}};
  cv_check(c);
}

TT_TEST(ops_convolution_conv_transpose2d) {
  cv_t c = {.N = 2, .Cin = 4, .H = 4, .W = 5, .Cout = 6, .KH = 3, .KW = 3, .G = 2, .s = {2, 2}, .p = {1, 0},
            .d = {1, 2}, .op = {1, 1}, .transposed = 1};
  cv_check(c);
}

TT_TEST(ops_convolution_conv_transpose2d_big_padding) {
  /* padding larger than dilation*(k-1): the equivalent convolution has a
   * negative edge padding. */
  cv_t c = {.N = 1, .Cin = 2, .H = 6, .W = 6, .Cout = 2, .KH = 2, .KW = 2, .G = 1, .s = {3, 3}, .p = {2, 2},
            .d = {1, 1}, .op = {0, 0}, .transposed = 1};
  cv_check(c);
}

TT_TEST(ops_convolution_conv1d_unbatched) {
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

TT_TEST(ops_convolution_conv_errors) {
  int64_t attrs[11] = {2, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0};
  opt_in_t in[2] = {{TPU_F32, 4, {1, 3, 5, 5}, NULL}, {TPU_F32, 4, {4, 2, 3, 3}, NULL}};
  TT_CHECK(opt_lower_fails("convolution", in, 2, attrs, 11, TPU_INVALID_ARGUMENT, "expected input[1, 3, 5, 5] to have 2 channels"));
}


/* ---- im2col / col2im --------------------------------------------------------------- */

TT_TEST(ops_convolution_im2col_col2im) {
  /* 1x2x4x5, kernel 2x3, dilation 1, padding (1, 0), stride (2, 1):
   * oh = (4 + 2 - 2) / 2 + 1 = 3, ow = (5 - 3) / 1 + 1 = 3. */
  enum { C = 2, H = 4, W = 5, KH = 2, KW = 3, OH = 3, OW = 3 };
  double x[C * H * W], cols[C * KH * KW * OH * OW], back[C * H * W];
  opt_fill(x, C * H * W, 11);
  memset(back, 0, sizeof back);
  for (int c = 0; c < C; c++)
    for (int kh = 0; kh < KH; kh++)
      for (int kw = 0; kw < KW; kw++)
        for (int oh = 0; oh < OH; oh++)
          for (int ow = 0; ow < OW; ow++) {
            int ih = oh * 2 - 1 + kh, iw = ow + kw;
            int ci = ((c * KH + kh) * KW + kw) * OH * OW + oh * OW + ow;
            int in_range = ih >= 0 && ih < H && iw >= 0 && iw < W;
            cols[ci] = in_range ? x[(c * H + ih) * W + iw] : 0.0;
            if (in_range) back[(c * H + ih) * W + iw] += cols[ci];
          }
  int64_t a[8] = {KH, KW, 1, 1, 1, 0, 2, 1};
  opt_in_t in[1] = {{TPU_F32, 4, {1, C, H, W}, x}};
  opt_out_t o[1];
  if (opt_run("im2col", in, 1, a, 8, o, 1) == 1) {
    TT_CHECK(o[0].rank == 3 && o[0].dims[1] == C * KH * KW && o[0].dims[2] == OH * OW);
    TT_CHECK(opt_close(o[0].v, cols, C * KH * KW * OH * OW, 0));
    opt_free(o, 1);
  }
  int64_t b[10] = {H, W, KH, KW, 1, 1, 1, 0, 2, 1};
  opt_in_t cin[1] = {{TPU_F32, 3, {1, C * KH * KW, OH * OW}, cols}};
  if (opt_run("col2im", cin, 1, b, 10, o, 1) == 1) {
    TT_CHECK(o[0].rank == 4 && o[0].dims[2] == H && o[0].dims[3] == W);
    TT_CHECK(opt_close(o[0].v, back, C * H * W, 1e-6));
    opt_free(o, 1);
  }
}
