/* test_ops_custom.c - the "custom_kernel" rule (csrc/ops/custom.c): a
 * registered StableHLO function runs with the program's values, a module
 * calling it twice defines it once, and inputs of other types fail naming
 * the kernel. */
#include <stdio.h>
#include <string.h>

#include "ops/custom.h"
#include "ops/ops.h"
#include "tinytest.h"
#include "tt_ops.h"

static const char AXPY[] =
    "func.func private @tk_test_axpy(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
    "  %two = stablehlo.constant dense<2.0> : tensor<2x3xf32>\n"
    "  %0 = stablehlo.multiply %a, %two : tensor<2x3xf32>\n"
    "  %1 = stablehlo.add %0, %b : tensor<2x3xf32>\n"
    "  return %1 : tensor<2x3xf32>\n"
    "}\n";

static int64_t axpy_id(void) {
  int64_t dims[2] = {2, 3};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_F32, 2, dims);
  tpu_hlo_type_t args[2] = {t, t};
  int64_t id = 0;
  tpu_status_t st = tpu_custom_kernel_register("test::axpy", AXPY, strlen(AXPY), "tk_test_axpy", 2, args, 1, &t, &id);
  TT_CHECK(st == NULL && id > 0);
  tpu_status_free(st);
  return id;
}

TT_TEST(ops_custom_kernel_runs_the_function) {
  int64_t id = axpy_id();
  int64_t again = axpy_id(); /* the same registration: the same kernel */
  TT_CHECK(again == id);
  int64_t dims[2] = {2, 3};
  double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5, -1, 0, 2, -3, 10}, want[6];
  for (int i = 0; i < 6; i++) want[i] = 2 * a[i] + b[i];
  tt_ten_t in[2] = {tt_ten(TPU_F32, 2, dims, a), tt_ten(TPU_F32, 2, dims, b)};
  tt_ten_t out[1];
  if (tt_ops_run("custom_kernel", in, 2, &id, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("custom_kernel axpy", &out[0], TPU_F32, 2, dims, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_custom_kernel_called_twice_is_defined_once) {
  int64_t id = axpy_id();
  const tpu_op_rule_t *rule = tpu_op_rule_find("custom_kernel");
  TT_CHECK(rule != NULL);
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("twice", &m));
  if (!m || !rule) return;
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  int64_t dims[2] = {2, 3};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_F32, 2, dims);
  tpu_hlo_value_t x[2] = {tpu_hlo_func_arg(f, t), tpu_hlo_func_arg(f, t)}, y[2], z[2];
  tpu_op_attrs_t attrs = {1, &id, 0, NULL};
  int ny = 0, nz = 0;
  TT_CHECK_OK(tpu_op_lower(rule, f, x, 2, &attrs, y, &ny));
  tpu_hlo_value_t x2[2] = {y[0], x[1]};
  TT_CHECK_OK(tpu_op_lower(rule, f, x2, 2, &attrs, z, &nz));
  TT_CHECK(ny == 1 && nz == 1);
  tpu_hlo_func_return(f, z, 1);
  const char *text = NULL;
  size_t len = 0;
  TT_CHECK_OK(tpu_hlo_module_text(m, &text, &len));
  if (text) {
    int defs = 0, calls = 0;
    for (const char *p = text; (p = strstr(p, "func.func private @tk_test_axpy")); p++) defs++;
    for (const char *p = text; (p = strstr(p, "\"func.call\"")); p++) calls++;
    TT_CHECK(defs == 1);
    TT_CHECK(calls == 2);
    TT_CHECK(strstr(text, "{callee = @tk_test_axpy}") != NULL);
  }
  tpu_hlo_module_destroy(m);
}

TT_TEST(ops_custom_kernel_wrong_types_name_the_kernel) {
  int64_t id = axpy_id();
  int64_t dims[2] = {2, 4};
  double a[8] = {0}, b[8] = {0};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 2, dims, a), tt_ten(TPU_F32, 2, dims, b)};
  tpu_status_t st = tt_ops_lower_status("custom_kernel", in, 2, &id, 1, NULL, 0);
  TT_CHECK(st != NULL);
  if (st) {
    const char *msg = tpu_status_message(st);
    TT_CHECK(strstr(msg, "custom kernel 'test::axpy': expects inputs (tensor<2x3xf32>, tensor<2x3xf32>) but got "
                         "(tensor<2x4xf32>, tensor<2x4xf32>)") != NULL);
    if (!strstr(msg, "test::axpy")) fprintf(stderr, "  message: %s\n", msg);
    tpu_status_free(st);
  }
  int64_t none = 999999;
  st = tt_ops_lower_status("custom_kernel", in, 2, &none, 1, NULL, 0);
  TT_CHECK(st != NULL && strstr(tpu_status_message(st), "no kernel with id") != NULL);
  tpu_status_free(st);
}
