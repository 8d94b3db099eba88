/* bench_pjrt.c - costs of the PJRT layer on whatever plugin is found:
 *   compile   : one-op program (f32[1024] add), median of N compiles
 *   execute   : that program on a 1k-element f32 input, strict async
 *               execute (no wait) then await of the output; median and
 *               p10/p90 over >= 1000 runs (after a warm-up)
 *   transfer  : 64 MiB f32 host -> device (until the copy is done) and
 *               device -> host, GB/s (1e9 bytes/s), best and median of runs
 * Prints a table and writes JSON (default bench/pjrt_results.json, or argv[1]).
 *
 *   TORCH_TPU_SITE_DIRS=$(.venv/bin/python -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])') \
 *     build/bench_pjrt [out.json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pjrt/pjrt.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
/* q-quantile of sorted v */
static double quant(const double *v, int n, double q) {
  int i = (int)(q * (n - 1) + 0.5);
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static int die(tpu_status_t st, const char *what) {
  fprintf(stderr, "bench_pjrt: %s: %s\n", what, tpu_status_message(st));
  tpu_status_free(st);
  return 1;
}
#define TRY(expr, what) do { tpu_status_t st__ = (expr); if (st__) return die(st__, what); } while (0)

static const char *k_add =
    "module @bench_add {\n"
    "  func.func public @main(%arg0: tensor<1024xf32>, %arg1: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "    %0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>\n"
    "    \"func.return\"(%0) : (tensor<1024xf32>) -> ()\n"
    "  }\n"
    "}\n";

int main(int argc, char **argv) {
  const char *json_path = argc > 1 ? argv[1] : "bench/pjrt_results.json";
  char path[4096];
  TRY(tpu_pjrt_find_plugin(getenv("TORCH_TPU_SITE_DIRS"), path, sizeof(path)), "finding a plugin");
  tpu_pjrt_client_t *c = NULL;
  TRY(tpu_pjrt_client_create(path, NULL, 0, &c), "loading the plugin");

  /* ---- compile ---- */
  enum { NCOMP = 20 };
  double tc[NCOMP];
  tpu_pjrt_exec_t *e = NULL;
  for (int i = 0; i < NCOMP; i++) {
    tpu_pjrt_exec_t *x = NULL;
    double t0 = now_s();
    TRY(tpu_pjrt_compile(c, k_add, strlen(k_add), NULL, &x), "compiling");
    tc[i] = now_s() - t0;
    if (e) tpu_pjrt_exec_destroy(e);
    e = x;
  }
  qsort(tc, NCOMP, sizeof(double), cmp_d);

  /* ---- execute latency ---- */
  enum { NEXEC = 2000, NWARM = 100 };
  static float a[1024], b[1024], r[1024];
  for (int i = 0; i < 1024; i++) { a[i] = (float)i; b[i] = 0.5f; }
  int64_t d[1] = {1024};
  tpu_pjrt_buffer_t *in[2] = {NULL, NULL};
  TRY(tpu_pjrt_buffer_from_host(c, 0, TPU_F32, d, 1, a, &in[0]), "upload");
  TRY(tpu_pjrt_buffer_from_host(c, 0, TPU_F32, d, 1, b, &in[1]), "upload");
  tpu_pjrt_buffer_t *const *lists[1] = {in};
  static double te[NEXEC];
  tpu_pjrt_execute_options_t eo = {.wait = false};
  for (int i = 0; i < NWARM + NEXEC; i++) {
    tpu_pjrt_buffer_t *out[1] = {NULL};
    tpu_pjrt_buffer_t **outs[1] = {out};
    double t0 = now_s();
    TRY(tpu_pjrt_execute(e, lists, 1, 2, &eo, outs), "execute");
    TRY(tpu_pjrt_buffer_await(out[0]), "await");
    double t = now_s() - t0;
    if (i >= NWARM) te[i - NWARM] = t;
    if (i == 0) {
      TRY(tpu_pjrt_buffer_to_host(out[0], r, sizeof(r)), "read");
      for (int k = 0; k < 1024; k++)
        if (r[k] != a[k] + b[k]) { fprintf(stderr, "bench_pjrt: wrong result at %d\n", k); return 1; }
    }
    tpu_pjrt_buffer_destroy(out[0]);
  }
  qsort(te, NEXEC, sizeof(double), cmp_d);

  /* ---- transfer ---- */
  enum { NXFER = 7 };
  const size_t bytes = (size_t)64 << 20;
  float *host = (float *)malloc(bytes), *back = (float *)malloc(bytes);
  if (!host || !back) { fprintf(stderr, "bench_pjrt: out of memory\n"); return 1; }
  for (size_t i = 0; i < bytes / 4; i++) host[i] = (float)(i & 0xffff);
  memset(back, 0, bytes);
  int64_t bd[1] = {(int64_t)(bytes / 4)};
  double th[NXFER], td[NXFER], tr[NXFER];
  for (int i = 0; i < NXFER; i++) {
    tpu_pjrt_buffer_t *big = NULL;
    double t0 = now_s();
    TRY(tpu_pjrt_buffer_from_host(c, 0, TPU_F32, bd, 1, host, &big), "upload 64 MiB");
    double t1 = now_s();
    TRY(tpu_pjrt_buffer_to_host(big, back, bytes), "download 64 MiB");
    double t2 = now_s();
    th[i] = t1 - t0;
    td[i] = t2 - t1;
    tr[i] = t2 - t0;
    tpu_pjrt_buffer_destroy(big);
  }
  if (memcmp(host, back, bytes) != 0) { fprintf(stderr, "bench_pjrt: 64 MiB round trip differs\n"); return 1; }
  qsort(th, NXFER, sizeof(double), cmp_d);
  qsort(td, NXFER, sizeof(double), cmp_d);
  qsort(tr, NXFER, sizeof(double), cmp_d);
  double gb = (double)bytes / 1e9;

  printf("PJRT layer benchmark  (%s)\n", tpu_pjrt_client_identity(c));
  printf("%-44s %12s %12s %12s\n", "measure", "median", "p10/best", "p90");
  printf("%-44s %10.3f ms %10.3f ms %10.3f ms\n", "compile one-op program (f32[1024] add)",
         quant(tc, NCOMP, 0.5) * 1e3, tc[0] * 1e3, quant(tc, NCOMP, 0.9) * 1e3);
  printf("%-44s %10.2f us %10.2f us %10.2f us\n", "execute+await one-op, f32[1024] (n=2000)",
         quant(te, NEXEC, 0.5) * 1e6, quant(te, NEXEC, 0.1) * 1e6, quant(te, NEXEC, 0.9) * 1e6);
  printf("%-44s %10.2f GB/s %8.2f GB/s\n", "host->device 64 MiB", gb / quant(th, NXFER, 0.5), gb / th[0]);
  printf("%-44s %10.2f GB/s %8.2f GB/s\n", "device->host 64 MiB", gb / quant(td, NXFER, 0.5), gb / td[0]);
  printf("%-44s %10.2f GB/s %8.2f GB/s\n", "host->device->host 64 MiB (bytes/total time)",
         gb / quant(tr, NXFER, 0.5), gb / tr[0]);

  FILE *f = fopen(json_path, "w");
  if (!f) {
    fprintf(stderr, "bench_pjrt: cannot write %s\n", json_path);
  } else {
    fprintf(f,
            "{\n  \"plugin\": \"%s\",\n  \"platform\": \"%s\",\n"
            "  \"compile_one_op_ms\": {\"median\": %.4f, \"min\": %.4f, \"p90\": %.4f, \"n\": %d},\n"
            "  \"execute_one_op_1k_f32_us\": {\"median\": %.3f, \"p10\": %.3f, \"p90\": %.3f, \"n\": %d},\n"
            "  \"h2d_64MiB_GBps\": {\"median\": %.3f, \"best\": %.3f, \"n\": %d},\n"
            "  \"d2h_64MiB_GBps\": {\"median\": %.3f, \"best\": %.3f, \"n\": %d},\n"
            "  \"h2d2h_64MiB_GBps\": {\"median\": %.3f, \"best\": %.3f, \"n\": %d}\n}\n",
            tpu_pjrt_client_plugin_path(c), tpu_pjrt_client_platform(c), quant(tc, NCOMP, 0.5) * 1e3,
            tc[0] * 1e3, quant(tc, NCOMP, 0.9) * 1e3, NCOMP, quant(te, NEXEC, 0.5) * 1e6,
            quant(te, NEXEC, 0.1) * 1e6, quant(te, NEXEC, 0.9) * 1e6, NEXEC, gb / quant(th, NXFER, 0.5),
            gb / th[0], NXFER, gb / quant(td, NXFER, 0.5), gb / td[0], NXFER, gb / quant(tr, NXFER, 0.5),
            gb / tr[0], NXFER);
    fclose(f);
    printf("wrote %s\n", json_path);
  }
  free(host);
  free(back);
  tpu_pjrt_buffer_destroy(in[0]);
  tpu_pjrt_buffer_destroy(in[1]);
  tpu_pjrt_exec_destroy(e);
  tpu_pjrt_client_destroy(c);
  return 0;
}
