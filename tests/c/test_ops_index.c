/* test_ops_index.c - indexing rules run on the real plugin, compared with
 * values computed here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

static const double k_x34[12] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};

TT_TEST(ops_index_cat_promotes_and_skips_empty) {
  double a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
  int64_t attrs[2] = {-1, TPU_F64};
  opt_in_t in[3] = {{TPU_F32, 2, {2, 2}, a}, {TPU_F32, 1, {0}, NULL}, {TPU_S64, 2, {2, 1}, b}};
  opt_out_t o[1];
  if (opt_run("cat", in, 3, attrs, 2, o, 1) != 1) return;
  double want[6] = {1, 2, 5, 3, 4, 6};
  TT_CHECK(o[0].dt == TPU_F64 && o[0].dims[0] == 2 && o[0].dims[1] == 3 && opt_close(o[0].v, want, 6, 0));
  opt_free(o, 1);
  opt_in_t bad[2] = {{TPU_F32, 2, {2, 2}, a}, {TPU_F32, 2, {3, 1}, b}};
  TT_CHECK(opt_lower_fails("cat", bad, 2, attrs, 2, TPU_INVALID_ARGUMENT, "Sizes of tensors must match except in dimension 1"));
}

TT_TEST(ops_index_index_select_negative) {
  double idx[3] = {2, -1, 0};
  opt_in_t in[2] = {{TPU_F32, 2, {3, 4}, k_x34}, {TPU_S64, 1, {3}, idx}};
  int64_t dim = 1;
  opt_out_t o[1];
  if (opt_run("index_select", in, 2, &dim, 1, o, 1) != 1) return;
  double want[9] = {2, 3, 0, 12, 13, 10, 22, 23, 20};
  TT_CHECK(o[0].dims[0] == 3 && o[0].dims[1] == 3 && opt_close(o[0].v, want, 9, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_gather_scatter_add) {
  double idx[6] = {0, 2, 1, 1, 0, 0};
  opt_in_t in[2] = {{TPU_F32, 2, {3, 4}, k_x34}, {TPU_S32, 2, {2, 3}, idx}};
  int64_t dim = 0;
  opt_out_t o[1];
  if (opt_run("gather", in, 2, &dim, 1, o, 1) != 1) return;
  double want[6] = {0, 21, 12, 10, 1, 2};
  TT_CHECK(o[0].dims[0] == 2 && o[0].dims[1] == 3 && opt_close(o[0].v, want, 6, 0));
  opt_free(o, 1);
  double src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  opt_in_t sin[3] = {{TPU_F32, 2, {3, 4}, k_x34}, in[1], {TPU_F32, 2, {2, 4}, src}};
  if (opt_run("scatter_add", sin, 3, &dim, 1, o, 1) != 1) return;
  double w2[12] = {0 + 1, 1 + 6, 2 + 7, 3, 10 + 5, 11, 12 + 3, 13, 20, 21 + 2, 22, 23};
  TT_CHECK(opt_close(o[0].v, w2, 12, 0));
  opt_free(o, 1);
  int64_t a2[2] = {0, 0};
  double v = -1;
  opt_in_t vin[3] = {sin[0], sin[1], {TPU_F64, 0, {0}, &v}};
  if (opt_run("scatter", vin, 3, a2, 2, o, 1) != 1) return;
  double w3[12] = {-1, -1, -1, 3, -1, 11, -1, 13, 20, -1, 22, 23};
  TT_CHECK(opt_close(o[0].v, w3, 12, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_scatter_reduce_mean_amax) {
  double self[3] = {1, 2, 3}, idx[4] = {0, 0, 2, 2}, src[4] = {3, 5, 7, -9};
  opt_in_t in[3] = {{TPU_F32, 1, {3}, self}, {TPU_S64, 1, {4}, idx}, {TPU_F32, 1, {4}, src}};
  int64_t mean_incl[3] = {0, 2, 1}, mean_excl[3] = {0, 2, 0}, amax_excl[3] = {0, 3, 0};
  opt_out_t o[1];
  if (opt_run("scatter_reduce", in, 3, mean_incl, 3, o, 1) != 1) return;
  double w1[3] = {3, 2, 1.0 / 3};
  TT_CHECK(opt_close(o[0].v, w1, 3, 1e-6));
  opt_free(o, 1);
  if (opt_run("scatter_reduce", in, 3, mean_excl, 3, o, 1) != 1) return;
  double w2[3] = {4, 2, -1};
  TT_CHECK(opt_close(o[0].v, w2, 3, 1e-6));
  opt_free(o, 1);
  if (opt_run("scatter_reduce", in, 3, amax_excl, 3, o, 1) != 1) return;
  double w3[3] = {5, 2, 7};
  TT_CHECK(opt_close(o[0].v, w3, 3, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_advanced_index_adjacent_and_split) {
  /* x [2,3,4]; x[:, [2,0]] -> [2,2,4]; x[[1,0], :, [3,-1]] -> [2,3] */
  double x[24];
  for (int i = 0; i < 24; i++) x[i] = i;
  double i1[2] = {2, 0};
  int64_t p1[2] = {0, 1};
  opt_in_t in[2] = {{TPU_F32, 3, {2, 3, 4}, x}, {TPU_S64, 1, {2}, i1}};
  opt_out_t o[1];
  if (opt_run("index", in, 2, p1, 2, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 3 && o[0].dims[0] == 2 && o[0].dims[1] == 2 && o[0].dims[2] == 4);
  double w1[16] = {8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15};
  TT_CHECK(opt_close(o[0].v, w1, 16, 0));
  opt_free(o, 1);
  double a[2] = {1, 0}, b[2] = {3, -1};
  int64_t p2[3] = {1, 0, 1};
  opt_in_t in2[3] = {in[0], {TPU_S64, 1, {2}, a}, {TPU_S32, 1, {2}, b}};
  if (opt_run("index", in2, 3, p2, 3, o, 1) != 1) return;
  TT_CHECK(o[0].rank == 2 && o[0].dims[0] == 2 && o[0].dims[1] == 3);
  double w2[6] = {15, 19, 23, 3, 7, 11};
  TT_CHECK(opt_close(o[0].v, w2, 6, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_index_put_accumulate) {
  double self[4] = {0, 0, 0, 0}, idx[3] = {1, 1, -1}, val[3] = {1, 2, 5};
  int64_t attrs[2] = {1, 1};
  opt_in_t in[3] = {{TPU_F32, 1, {4}, self}, {TPU_F32, 1, {3}, val}, {TPU_S64, 1, {3}, idx}};
  opt_out_t o[1];
  if (opt_run("index_put", in, 3, attrs, 2, o, 1) != 1) return;
  double want[4] = {0, 3, 0, 5};
  TT_CHECK(opt_close(o[0].v, want, 4, 0));
  opt_free(o, 1);
  /* replace with a broadcast scalar value over rows of a matrix */
  double v = 7, rows[1] = {1};
  int64_t a2[2] = {0, 1};
  opt_in_t in2[3] = {{TPU_F32, 2, {3, 4}, k_x34}, {TPU_F32, 0, {0}, &v}, {TPU_S64, 1, {1}, rows}};
  if (opt_run("index_put", in2, 3, a2, 2, o, 1) != 1) return;
  double w2[12] = {0, 1, 2, 3, 7, 7, 7, 7, 20, 21, 22, 23};
  TT_CHECK(opt_close(o[0].v, w2, 12, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_bounds_check) {
  double good[3] = {0, -4, 3}, bad[2] = {0, 4};
  int64_t size = 4;
  opt_in_t in[1] = {{TPU_S64, 1, {3}, good}};
  opt_out_t o[1];
  if (opt_run("index_bounds_check", in, 1, &size, 1, o, 1) != 1) return;
  TT_CHECK(o[0].dt == TPU_PRED && o[0].v[0] == 1);
  opt_free(o, 1);
  opt_in_t in2[1] = {{TPU_S64, 1, {2}, bad}};
  if (opt_run("index_bounds_check", in2, 1, &size, 1, o, 1) != 1) return;
  TT_CHECK(o[0].v[0] == 0);
  opt_free(o, 1);
}

TT_TEST(ops_index_tril_triu_flip_roll) {
  opt_in_t in[1] = {{TPU_F32, 2, {3, 4}, k_x34}};
  opt_out_t o[1];
  int64_t k = 1;
  if (opt_run("tril", in, 1, &k, 1, o, 1) != 1) return;
  double w1[12] = {0, 1, 0, 0, 10, 11, 12, 0, 20, 21, 22, 23};
  TT_CHECK(opt_close(o[0].v, w1, 12, 0));
  opt_free(o, 1);
  k = -1;
  if (opt_run("triu", in, 1, &k, 1, o, 1) != 1) return;
  double w2[12] = {0, 1, 2, 3, 10, 11, 12, 13, 0, 21, 22, 23};
  TT_CHECK(opt_close(o[0].v, w2, 12, 0));
  opt_free(o, 1);
  int64_t fd[2] = {0, -1};
  if (opt_run("flip", in, 1, fd, 2, o, 1) != 1) return;
  double w3[12] = {23, 22, 21, 20, 13, 12, 11, 10, 3, 2, 1, 0};
  TT_CHECK(opt_close(o[0].v, w3, 12, 0));
  opt_free(o, 1);
  int64_t r[6] = {2, 1, -5, 2, 0, 1}; /* shifts (1, -5), dims (0, 1) */
  if (opt_run("roll", in, 1, r, 6, o, 1) != 1) return;
  /* roll rows by 1, cols by -5 == -1 */
  double w4[12] = {21, 22, 23, 20, 1, 2, 3, 0, 11, 12, 13, 10};
  TT_CHECK(opt_close(o[0].v, w4, 12, 0));
  opt_free(o, 1);
  int64_t rf[3] = {1, 3, 0};
  if (opt_run("roll", in, 1, rf, 3, o, 1) != 1) return;
  double w5[12] = {21, 22, 23, 0, 1, 2, 3, 10, 11, 12, 13, 20};
  TT_CHECK(opt_close(o[0].v, w5, 12, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_repeat_pad) {
  double x[2] = {1, 2};
  opt_in_t in[1] = {{TPU_F32, 1, {2}, x}};
  int64_t rep[2] = {2, 3};
  opt_out_t o[1];
  if (opt_run("repeat", in, 1, rep, 2, o, 1) != 1) return;
  double w1[12] = {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
  TT_CHECK(o[0].rank == 2 && o[0].dims[0] == 2 && o[0].dims[1] == 6 && opt_close(o[0].v, w1, 12, 0));
  opt_free(o, 1);
  double v = 9;
  opt_in_t pin[2] = {{TPU_F32, 2, {3, 4}, k_x34}, {TPU_F64, 0, {0}, &v}};
  int64_t pad[4] = {1, -2, 0, 1};
  if (opt_run("constant_pad_nd", pin, 2, pad, 4, o, 1) != 1) return;
  double w2[12] = {9, 0, 1, 9, 10, 11, 9, 20, 21, 9, 9, 9};
  TT_CHECK(o[0].dims[0] == 4 && o[0].dims[1] == 3 && opt_close(o[0].v, w2, 12, 0));
  opt_free(o, 1);
}

TT_TEST(ops_index_index_add_take) {
  double self[6] = {0, 0, 0, 0, 0, 0}, idx[2] = {2, 0}, src[4] = {1, 2, 3, 4}, alpha = 2;
  opt_in_t in[4] = {{TPU_F32, 2, {3, 2}, self}, {TPU_S64, 1, {2}, idx}, {TPU_F32, 2, {2, 2}, src}, {TPU_S64, 0, {0}, &alpha}};
  int64_t dim = 0;
  opt_out_t o[1];
  if (opt_run("index_add", in, 4, &dim, 1, o, 1) != 1) return;
  double w1[6] = {6, 8, 0, 0, 2, 4};
  TT_CHECK(opt_close(o[0].v, w1, 6, 0));
  opt_free(o, 1);
  double ti[3] = {-1, 5, 0};
  opt_in_t tin[2] = {{TPU_F32, 2, {3, 4}, k_x34}, {TPU_S64, 1, {3}, ti}};
  if (opt_run("take", tin, 2, NULL, 0, o, 1) != 1) return;
  double w2[3] = {23, 11, 0};
  TT_CHECK(opt_close(o[0].v, w2, 3, 0));
  opt_free(o, 1);
}
