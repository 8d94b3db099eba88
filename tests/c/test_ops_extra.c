/* test_ops_extra.c - rules of csrc/ops/extra.c run on the real plugin and
 * compared with naive loops computed here: bilinear upsampling (both
 * align_corners) and its backward, reflection / replication padding and
 * backward, cummax with ties and NaN, im2col / col2im. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

/* ---- bilinear ------------------------------------------------------------------- */

static void lin_src(int64_t o, int64_t in, int64_t out, int align, int64_t *i0, int64_t *i1, double *l1) {
  double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0) : (double)in / (double)out;
  double r = align ? s * (double)o : s * ((double)o + 0.5) - 0.5;
  if (r < 0) r = 0;
  int64_t i = (int64_t)floor(r);
  if (i > in - 1) i = in - 1;
  *i0 = i;
  *i1 = i + (i < in - 1);
  *l1 = r - (double)i;
}

static void bilinear_check(int align) {
  enum { N = 2, H = 3, W = 4, OH = 5, OW = 7 };
  double x[N * H * W], g[N * OH * OW], y[N * OH * OW], gx[N * H * W];
  opt_fill(x, N * H * W, 3);
  opt_fill(g, N * OH * OW, 4);
  memset(gx, 0, sizeof gx);
  for (int n = 0; n < N; n++)
    for (int oh = 0; oh < OH; oh++)
      for (int ow = 0; ow < OW; ow++) {
        int64_t h0, h1, w0, w1;
        double lh, lw;
        lin_src(oh, H, OH, align, &h0, &h1, &lh);
        lin_src(ow, W, OW, align, &w0, &w1, &lw);
        const double *p = x + n * H * W;
        double v = (1 - lh) * ((1 - lw) * p[h0 * W + w0] + lw * p[h0 * W + w1]) +
                   lh * ((1 - lw) * p[h1 * W + w0] + lw * p[h1 * W + w1]);
        int oi = (n * OH + oh) * OW + ow;
        y[oi] = v;
        double *q = gx + n * H * W;
        q[h0 * W + w0] += g[oi] * (1 - lh) * (1 - lw);
        q[h0 * W + w1] += g[oi] * (1 - lh) * lw;
        q[h1 * W + w0] += g[oi] * lh * (1 - lw);
        q[h1 * W + w1] += g[oi] * lh * lw;
      }
  int64_t fa[4] = {align, 2, OH, OW};
  opt_in_t in[1] = {{TPU_F32, 4, {N, 1, H, W}, x}};
  opt_out_t o[1];
  if (opt_run("upsample_linear", in, 1, fa, 4, o, 1) == 1) {
    TT_CHECK(o[0].rank == 4 && o[0].dims[2] == OH && o[0].dims[3] == OW);
    TT_CHECK(opt_close(o[0].v, y, N * OH * OW, 1e-5));
    opt_free(o, 1);
  }
  int64_t ba[4] = {align, 2, H, W};
  opt_in_t gin[1] = {{TPU_F32, 4, {N, 1, OH, OW}, g}};
  if (opt_run("upsample_linear_backward", gin, 1, ba, 4, o, 1) == 1) {
    TT_CHECK(o[0].rank == 4 && o[0].dims[2] == H && o[0].dims[3] == W);
    TT_CHECK(opt_close(o[0].v, gx, N * H * W, 1e-5));
    opt_free(o, 1);
  }
}

TT_TEST(ops_extra_upsample_bilinear) { bilinear_check(0); }
TT_TEST(ops_extra_upsample_bilinear_align_corners) { bilinear_check(1); }

TT_TEST(ops_extra_upsample_nearest_rejects_rank) {
  int64_t a[3] = {0, 2, 4};
  opt_in_t in[1] = {{TPU_F32, 3, {1, 2, 3}, NULL}};
  TT_CHECK(opt_lower_fails("upsample_nearest", in, 1, a, 3, TPU_UNIMPLEMENTED, "spatial"));
}

/* ---- padding --------------------------------------------------------------------- */

static int64_t ref_src(int64_t o, int64_t lo, int64_t in, int rep) {
  int64_t j = o - lo;
  if (rep) return j < 0 ? 0 : j >= in ? in - 1 : j;
  if (j < 0) j = -j;
  if (j >= in) j = 2 * (in - 1) - j;
  return j;
}

static void pad_check(int rep) {
  enum { C = 2, H = 3, W = 4 };
  int64_t pl = 2, pr = 3, pt = 1, pb = 2; /* (left, right, top, bottom) */
  int64_t OH = H + pt + pb, OW = W + pl + pr;
  double x[C * H * W], y[C * 6 * 9], g[C * 6 * 9], gx[C * H * W];
  opt_fill(x, C * H * W, 7);
  opt_fill(g, C * OH * OW, 8);
  memset(gx, 0, sizeof gx);
  for (int c = 0; c < C; c++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t si = (c * H + ref_src(oh, pt, H, rep)) * W + ref_src(ow, pl, W, rep);
        int64_t oi = (c * OH + oh) * OW + ow;
        y[oi] = x[si];
        gx[si] += g[oi];
      }
  int64_t fa[6] = {rep, 2, pl, pr, pt, pb};
  opt_in_t in[1] = {{TPU_F32, 3, {C, H, W}, x}};
  opt_out_t o[1];
  if (opt_run("pad_mode", in, 1, fa, 6, o, 1) == 1) {
    TT_CHECK(o[0].rank == 3 && o[0].dims[1] == OH && o[0].dims[2] == OW);
    TT_CHECK(opt_close(o[0].v, y, C * OH * OW, 0));
    opt_free(o, 1);
  }
  int64_t ba[8] = {rep, 2, pl, pr, pt, pb, H, W};
  opt_in_t gin[1] = {{TPU_F32, 3, {C, OH, OW}, g}};
  if (opt_run("pad_mode_backward", gin, 1, ba, 8, o, 1) == 1) {
    TT_CHECK(opt_close(o[0].v, gx, C * H * W, 1e-6));
    opt_free(o, 1);
  }
}

TT_TEST(ops_extra_reflection_pad2d) { pad_check(0); }
TT_TEST(ops_extra_replication_pad2d) { pad_check(1); }

TT_TEST(ops_extra_reflection_pad_too_large_is_unimplemented) {
  int64_t a[4] = {0, 1, 3, 0};
  opt_in_t in[1] = {{TPU_F32, 2, {2, 3}, NULL}};
  TT_CHECK(opt_lower_fails("pad_mode", in, 1, a, 4, TPU_UNIMPLEMENTED, "padding"));
}

/* ---- cummax ---------------------------------------------------------------------- */

TT_TEST(ops_extra_cummax_ties_and_nan) {
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

/* ---- im2col / col2im --------------------------------------------------------------- */

TT_TEST(ops_extra_im2col_col2im) {
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
