/* demo.c - the PJRT layer end to end, no Python: load the plugin, compile a
 * small StableHLO program (y = tanh(x @ w)), run it on device 0, print the
 * result and check it against the same computation done here on the host.
 *
 *   TORCH_TPU_SITE_DIRS=<site-packages> build/demo_c     (what `make demo` runs)
 *   TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so build/demo_c
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt/pjrt.h"

static const char *k_program =
    "module @demo {\n"
    "  func.func public @main(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> tensor<2x4xf32> {\n"
    "    %0 = \"stablehlo.dot_general\"(%x, %w) {dot_dimension_numbers = #stablehlo.dot<\n"
    "           lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}\n"
    "         : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>\n"
    "    %1 = \"stablehlo.tanh\"(%0) : (tensor<2x4xf32>) -> tensor<2x4xf32>\n"
    "    \"func.return\"(%1) : (tensor<2x4xf32>) -> ()\n"
    "  }\n"
    "}\n";

static int fail(tpu_status_t st, const char *what) {
  fprintf(stderr, "demo: %s: %s: %s\n", what, tpu_code_name(tpu_status_code(st)), tpu_status_message(st));
  tpu_status_free(st);
  return 1;
}

int main(void) {
  char path[4096];
  tpu_status_t st = tpu_pjrt_find_plugin(getenv("TORCH_TPU_SITE_DIRS"), path, sizeof(path));
  if (st) return fail(st, "finding a PJRT plugin");
  tpu_pjrt_client_t *client = NULL;
  if ((st = tpu_pjrt_client_create(path, NULL, 0, &client))) return fail(st, "loading the plugin");
  printf("plugin:   %s\nplatform: %s, %d device(s)\n", path, tpu_pjrt_client_platform(client),
         tpu_pjrt_client_device_count(client));

  tpu_pjrt_exec_t *exec = NULL;
  if ((st = tpu_pjrt_compile(client, k_program, strlen(k_program), NULL, &exec))) return fail(st, "compiling");

  float x[2][3] = {{1.0f, -0.5f, 0.25f}, {0.1f, 0.2f, -0.3f}};
  float w[3][4] = {{0.5f, -1.0f, 0.0f, 0.3f}, {1.5f, 0.2f, -0.7f, 0.1f}, {-0.4f, 0.8f, 0.9f, -2.0f}};
  int64_t xd[2] = {2, 3}, wd[2] = {3, 4};
  tpu_pjrt_buffer_t *in[2] = {NULL, NULL}, *out[1] = {NULL};
  if ((st = tpu_pjrt_buffer_from_host(client, 0, TPU_F32, xd, 2, x, &in[0]))) return fail(st, "uploading x");
  if ((st = tpu_pjrt_buffer_from_host(client, 0, TPU_F32, wd, 2, w, &in[1]))) return fail(st, "uploading w");
  tpu_pjrt_buffer_t *const *lists[1] = {in};
  tpu_pjrt_buffer_t **outs[1] = {out};
  if ((st = tpu_pjrt_execute(exec, lists, 1, 2, NULL, outs))) return fail(st, "executing");
  float y[2][4];
  if ((st = tpu_pjrt_buffer_to_host(out[0], y, sizeof(y)))) return fail(st, "reading the result");

  int bad = 0;
  printf("y = tanh(x @ w):\n");
  for (int i = 0; i < 2; i++) {
    printf("  [");
    for (int j = 0; j < 4; j++) {
      double acc = 0;
      for (int k = 0; k < 3; k++) acc += (double)x[i][k] * w[k][j];
      double want = tanh(acc);
      if (fabs(y[i][j] - want) > 1e-5) bad++;
      printf(" % .6f", y[i][j]);
    }
    printf(" ]\n");
  }
  printf("%s (max tolerance 1e-5 against the host computation)\n", bad ? "MISMATCH" : "matches the host");

  tpu_pjrt_buffer_destroy(out[0]);
  tpu_pjrt_buffer_destroy(in[0]);
  tpu_pjrt_buffer_destroy(in[1]);
  tpu_pjrt_exec_destroy(exec);
  tpu_pjrt_client_destroy(client);
  return bad ? 1 : 0;
}
