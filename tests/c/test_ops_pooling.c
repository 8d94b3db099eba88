/* test_ops_pooling.c - pooling rules (csrc/ops/pooling.c) on the real
 * plugin against naive loops: max pooling with indices and its backward,
 * average pooling variants, adaptive pools. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

/* ---- pooling ------------------------------------------------------------------ */

TT_TEST(ops_pooling_max_pool2d_indices_and_backward) {
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

TT_TEST(ops_pooling_avg_pool2d_variants) {
  avg_case(1, 0, 0);
  avg_case(0, 0, 0);
  avg_case(1, 0, 1);
  avg_case(0, 0, 1);
  avg_case(1, 5, 1);
}

TT_TEST(ops_pooling_adaptive_pools) {
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

