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

/* Lowers `name` on (x [3, 4] of dtype xdt, idx of dtype idt and rank irank
 * [2] or [2, 4]) plus extra inputs; returns the device-side checks it emits
 * (their count; the first one's code and message in *code / msg). */
static int lowered_checks(const char *name, tpu_dtype_t xdt, int nin, const int64_t *attrs, int nattrs,
                          tpu_code_t *code, char *msg, size_t msgn) {
  tpu_hlo_module_t *m;
  if (tpu_hlo_module_create("t", &m)) return -1;
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  int64_t x[2] = {3, 4}, i1 = 2, i2[2] = {1, 4}, sc = 1;
  tpu_hlo_value_t in[4];
  in[0] = tpu_hlo_func_arg(f, tpu_hlo_type_make(xdt, 2, x));
  if (!strcmp(name, "gather") || !strcmp(name, "scatter_add") || !strcmp(name, "scatter")) {
    in[1] = tpu_hlo_func_arg(f, tpu_hlo_type_make(TPU_S64, 2, i2));
    in[2] = tpu_hlo_func_arg(f, tpu_hlo_type_make(xdt, 2, i2));
  } else if (!strcmp(name, "div") || !strcmp(name, "remainder") || !strcmp(name, "fmod")) {
    in[1] = tpu_hlo_func_arg(f, tpu_hlo_type_make(xdt, 2, x));
  } else if (!strcmp(name, "index_put") || !strcmp(name, "put")) {
    in[1] = tpu_hlo_func_arg(f, tpu_hlo_type_make(xdt, 0, &sc));
    in[2] = tpu_hlo_func_arg(f, tpu_hlo_type_make(TPU_S32, 1, &i1));
  } else {
    in[1] = tpu_hlo_func_arg(f, tpu_hlo_type_make(TPU_S32, 1, &i1));
    in[2] = tpu_hlo_func_arg(f, tpu_hlo_type_make(xdt, 0, &sc));
  }
  tpu_op_attrs_t a = {nattrs, attrs, 0, NULL};
  tpu_op_checks_t checks = {0};
  tpu_hlo_value_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0, n = -1;
  tpu_status_t st = tpu_op_lower_checked(tpu_op_rule_find(name), f, in, nin, &a, &checks, out, &nout);
  if (st) {
    fprintf(stderr, "  %s: %s\n", name, tpu_status_message(st));
    tpu_status_free(st);
  } else {
    n = checks.n;
    if (n > 0) {
      *code = checks.v[0].code;
      snprintf(msg, msgn, "%s", checks.v[0].msg);
    }
  }
  tpu_op_checks_free(&checks);
  tpu_hlo_module_destroy(m);
  return n;
}

/* Indexing rules check their indices on the device with PyTorch's CPU
 * exception type (TPU_OUT_OF_RANGE: IndexError) and message; integer division
 * checks its divisor, floating division does not. */
TT_TEST(ops_index_device_checks) {
  static const struct {
    const char *name;
    tpu_dtype_t xdt;
    int nin, nattrs;
    int64_t attrs[3];
    int nchecks;
    tpu_code_t code;
    const char *msg;
  } k[] = {
      {"gather", TPU_F32, 2, 1, {0}, 1, TPU_INVALID_ARGUMENT, "gather(): index {} is out of bounds for dimension 0 with size 3"},
      {"scatter_add", TPU_F32, 3, 1, {1}, 1, TPU_INVALID_ARGUMENT, "scatter_add(): index {} is out of bounds for dimension 1 with size 4"},
      {"index_select", TPU_F32, 2, 1, {-2}, 1, TPU_OUT_OF_RANGE, "index_select(): index out of range in self"},
      {"index_fill", TPU_F32, 3, 1, {0}, 1, TPU_OUT_OF_RANGE, "index_fill(): index {} is out of bounds for dimension 0 with size 3"},
      {"take", TPU_F32, 2, 0, {0}, 1, TPU_OUT_OF_RANGE, "take(): out of range: tried to access index {} on a tensor of 12 elements."},
      {"index", TPU_F32, 2, 2, {0, 1}, 1, TPU_OUT_OF_RANGE, "index(): index {} is out of bounds for dimension 1 with size 4"},
      {"index_put", TPU_F32, 3, 2, {0, 1}, 1, TPU_OUT_OF_RANGE, "index_put(): index {} is out of bounds for dimension 0 with size 3"},
      {"div", TPU_S32, 2, 2, {TPU_S32, 2}, 1, TPU_INVALID_ARGUMENT, "ZeroDivisionError"},
      {"remainder", TPU_S64, 2, 1, {TPU_S64}, 1, TPU_INVALID_ARGUMENT, "ZeroDivisionError"},
      {"fmod", TPU_U8, 2, 1, {TPU_U8}, 1, TPU_INVALID_ARGUMENT, "ZeroDivisionError"},
      {"div", TPU_F32, 2, 2, {TPU_F32, 2}, 0, TPU_OK, ""},
      {"fmod", TPU_F32, 2, 1, {TPU_F32}, 0, TPU_OK, ""},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    tpu_code_t code = TPU_OK;
    char msg[TPU_OP_CHECK_MSG_MAX] = "";
    int n = lowered_checks(k[i].name, k[i].xdt, k[i].nin, k[i].attrs, k[i].nattrs, &code, msg, sizeof msg);
    if (n != k[i].nchecks || (n && (code != k[i].code || !strstr(msg, k[i].msg)))) {
      fprintf(stderr, "  %s: %d checks (want %d), code %d, msg '%s'\n", k[i].name, n, k[i].nchecks, (int)code, msg);
      TT_CHECK(0);
    }
  }
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
