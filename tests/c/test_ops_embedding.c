/* test_ops_embedding.c - embedding and its dense backward on the real
 * plugin (csrc/ops/embedding.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"
#include "test_ops_util.h"

/* ---- embedding, losses ------------------------------------------------------------ */

TT_TEST(ops_embedding_embedding_and_backward) {
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

