/* test_hlo_while.c - stablehlo.while built with tpu_hlo_while_*: a loop run
 * on the plugin (values checked against the same loop in C), the text of a
 * one-value loop, and the errors (calls out of order, a body returning
 * another type) being sticky and named.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"
#include "tinytest.h"

/* Compiles the module, runs it on one f32 [n] argument, reads result 0
 * (f32 [n]) and result 1 (s64 0-d).  1 on success. */
static int run_loop(tpu_hlo_module_t *m, const float *x, int n, float *out, int64_t *count) {
  const char *text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_hlo_module_text(m, &text, &len);
  tpu_pjrt_client_t *c = tt_client();
  tpu_pjrt_exec_t *e = NULL;
  tpu_pjrt_buffer_t *in = NULL, *outs[2] = {NULL, NULL};
  if (!st && !c) st = tpu_status_make(TPU_INTERNAL, "no plugin");
  if (!st) {
    tpu_pjrt_compile_options_t co = {.num_replicas = 1};
    st = tpu_pjrt_compile(c, text, len, &co, &e);
  }
  int64_t dims[1] = {n};
  if (!st) st = tpu_pjrt_buffer_from_host(c, 0, TPU_F32, dims, 1, x, &in);
  if (!st) {
    tpu_pjrt_buffer_t *const list[1] = {in};
    tpu_pjrt_buffer_t *const *lists[1] = {list};
    tpu_pjrt_buffer_t **ol[1] = {outs};
    tpu_pjrt_execute_options_t eo = {.wait = true};
    st = tpu_pjrt_execute(e, lists, 1, 1, &eo, ol);
  }
  if (!st) st = tpu_pjrt_buffer_to_host(outs[0], out, sizeof(float) * (size_t)n);
  if (!st) st = tpu_pjrt_buffer_to_host(outs[1], count, sizeof(int64_t));
  tpu_pjrt_buffer_destroy(in);
  tpu_pjrt_buffer_destroy(outs[0]);
  tpu_pjrt_buffer_destroy(outs[1]);
  tpu_pjrt_exec_destroy(e);
  if (st) {
    fprintf(stderr, "  while program: %s\n%s\n", tpu_status_message(st), text ? text : "");
    tpu_status_free(st);
    return 0;
  }
  return 1;
}

TT_TEST(hlo_while_loop_runs_on_the_plugin) {
  /* while (k < 5) { x = x * 1.5 + k; k += 1 }, x and k carried, a constant
   * defined inside the body, the condition reading a carried value */
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("loop", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  int64_t n = 4;
  tpu_hlo_type_t vt = tpu_hlo_type_make(TPU_F32, 1, &n);
  tpu_hlo_value_t x = tpu_hlo_func_arg(f, vt);
  tpu_hlo_value_t init[2] = {tpu_hlo_scalar(f, TPU_S64, 0), x}, a[2], res[2];
  tpu_hlo_while_t w;
  TT_CHECK(tpu_hlo_while_begin(f, &w, init, 2, a));
  TT_CHECK(tpu_hlo_while_body(f, &w, tpu_hlo_compare(f, "LT", a[0], tpu_hlo_scalar(f, TPU_S64, 5)), a));
  tpu_hlo_value_t kf = tpu_hlo_broadcast_to(f, tpu_hlo_convert(f, a[0], TPU_F32), 1, &n);
  tpu_hlo_value_t next[2] = {
      tpu_hlo_binary(f, "add", a[0], tpu_hlo_scalar(f, TPU_S64, 1)),
      tpu_hlo_binary(f, "add", tpu_hlo_binary(f, "multiply", a[1], tpu_hlo_constant(f, vt, 1.5)), kf)};
  TT_CHECK(tpu_hlo_while_end(f, &w, next, res));
  tpu_hlo_value_t rets[2] = {res[1], res[0]};
  tpu_hlo_func_return(f, rets, 2);
  float in[4] = {1, -2, 0.5f, 3}, out[4], want[4];
  int64_t count = -1;
  for (int i = 0; i < 4; i++) {
    float v = in[i];
    for (int k = 0; k < 5; k++) v = v * 1.5f + (float)k;
    want[i] = v;
  }
  if (run_loop(m, in, 4, out, &count)) {
    TT_CHECK(count == 5);
    for (int i = 0; i < 4; i++) TT_CHECK_NEAR(out[i], want[i], 1e-5);
  } else {
    tt_failed_checks++;
  }
  tpu_hlo_module_destroy(m);
}

TT_TEST(hlo_while_one_carried_value_text) {
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("one", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t init = tpu_hlo_scalar(f, TPU_S32, 0), a, r;
  tpu_hlo_while_t w;
  tpu_hlo_while_begin(f, &w, &init, 1, &a);
  tpu_hlo_while_body(f, &w, tpu_hlo_compare(f, "LT", a, tpu_hlo_scalar(f, TPU_S32, 3)), &a);
  tpu_hlo_value_t nx = tpu_hlo_binary(f, "add", a, tpu_hlo_scalar(f, TPU_S32, 1));
  tpu_hlo_while_end(f, &w, &nx, &r);
  tpu_hlo_func_return(f, &r, 1);
  const char *text = NULL;
  size_t len = 0;
  TT_CHECK_OK(tpu_hlo_module_text(m, &text, &len));
  TT_CHECK(strstr(text, "\"stablehlo.while\"(") != NULL);
  TT_CHECK(strstr(text, "}) : (tensor<i32>) -> tensor<i32>") != NULL);
  TT_CHECK(strstr(text, ":1 = ") == NULL); /* one result: no result-count suffix */
  TT_CHECK(strstr(text, "\"stablehlo.return\"") != NULL);
  tpu_hlo_module_destroy(m);
}

TT_TEST(hlo_while_errors_are_sticky_and_named) {
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("bad", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  int64_t n = 2;
  tpu_hlo_value_t init[1] = {tpu_hlo_constant(f, tpu_hlo_type_make(TPU_F32, 1, &n), 1.0)}, a[1], r[1];
  tpu_hlo_while_t w;
  TT_CHECK(tpu_hlo_while_begin(f, &w, init, 1, a));
  TT_CHECK(tpu_hlo_while_body(f, &w, tpu_hlo_scalar(f, TPU_PRED, 1), a));
  tpu_hlo_value_t wrong = tpu_hlo_convert(f, a[0], TPU_F64); /* the carried value is f32 */
  TT_CHECK(!tpu_hlo_while_end(f, &w, &wrong, r));
  TT_CHECK(r[0] == TPU_HLO_NONE);
  tpu_status_t st = tpu_hlo_func_status(f);
  TT_CHECK(st && strstr(tpu_status_message(st), "body result 0"));
  tpu_hlo_module_destroy(m);

  TT_CHECK_OK(tpu_hlo_module_create("order", &m));
  f = tpu_hlo_module_main(m);
  memset(&w, 0, sizeof w);
  TT_CHECK(!tpu_hlo_while_body(f, &w, tpu_hlo_scalar(f, TPU_PRED, 1), a)); /* no begin */
  st = tpu_hlo_func_status(f);
  TT_CHECK(st && strstr(tpu_status_message(st), "out of order"));
  tpu_hlo_module_destroy(m);

  TT_CHECK_OK(tpu_hlo_module_create("pred", &m));
  f = tpu_hlo_module_main(m);
  tpu_hlo_value_t i0 = tpu_hlo_scalar(f, TPU_S64, 0);
  TT_CHECK(tpu_hlo_while_begin(f, &w, &i0, 1, a));
  TT_CHECK(!tpu_hlo_while_body(f, &w, a[0], a)); /* an s64 condition */
  st = tpu_hlo_func_status(f);
  TT_CHECK(st && strstr(tpu_status_message(st), "0-d i1"));
  tpu_hlo_module_destroy(m);
}
