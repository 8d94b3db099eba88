/* test_ops_padding.c - reflection / replication padding and their backward
 * (csrc/ops/padding.c) on the real plugin against naive loops. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

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

TT_TEST(ops_padding_reflection_pad2d) { pad_check(0); }
TT_TEST(ops_padding_replication_pad2d) { pad_check(1); }

TT_TEST(ops_padding_reflection_pad_too_large_is_unimplemented) {
  int64_t a[4] = {0, 1, 3, 0};
  opt_in_t in[1] = {{TPU_F32, 2, {2, 3}, NULL}};
  TT_CHECK(opt_lower_fails("pad_mode", in, 1, a, 4, TPU_UNIMPLEMENTED, "padding"));
}

