/* test_ops_loss.c - the loss rules (csrc/ops/loss.c) on the real plugin
 * against reference loops: nll_loss with weights and ignore_index, the
 * elementwise losses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

TT_TEST(ops_loss_nll_loss_weight_ignore) {
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

TT_TEST(ops_loss_losses_elementwise) {
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

