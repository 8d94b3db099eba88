/* test_ops_upsample.c - upsampling rules (csrc/ops/upsample.c) on the real
 * plugin against naive loops: bilinear (both align_corners) and its
 * backward; a rank the rule does not take is TPU_UNIMPLEMENTED. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

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

TT_TEST(ops_upsample_bilinear) { bilinear_check(0); }
TT_TEST(ops_upsample_bilinear_align_corners) { bilinear_check(1); }

TT_TEST(ops_upsample_nearest_rejects_rank) {
  int64_t a[3] = {0, 2, 4};
  opt_in_t in[1] = {{TPU_F32, 3, {1, 2, 3}, NULL}};
  TT_CHECK(opt_lower_fails("upsample_nearest", in, 1, a, 3, TPU_UNIMPLEMENTED, "spatial"));
}

