/* bench_checks.c - what a device-side check costs the engine (ops.h
 * tpu_op_check*, runtime/errors.h): the same one-axis gather with and
 * without its index check, through the runtime, in each eager mode.
 *
 *   make build && cc -std=c11 -D_GNU_SOURCE -O2 -Icsrc bench/c/bench_checks.c build/libtpu_engine.a \
 *       -ldl -lpthread -lm -o build/bench_checks
 *   TORCH_TPU_SITE_DIRS=$(.venv/bin/python -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])') \
 *       build/bench_checks [n_index] [iters] [rounds]
 *
 * Cases (per mode, with / without the check; best of alternating rounds):
 *   chain   `iters` gathers, one host read at the end (the asynchronous case)
 *   read    a gather then a host read of its result, `iters` times (every
 *           read also reads the 16-byte error state: the worst case)
 * Prints microseconds per op and the ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"

static void rule_g(tpu_op_ctx_t *c) {
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (tpu_op_int(c, 0))
    tpu_op_check_index(c, c->in[1], 0, xt.dims[0], TPU_OUT_OF_RANGE,
                       "g(): index " TPU_OP_PAYLOAD " is out of bounds for dimension 0 with size %lld",
                       (long long)xt.dims[0]);
  int64_t dims[2] = {it.dims[0], 1};
  tpu_hlo_value_t coords = tpu_hlo_reshape(c->f, c->in[1], 2, dims);
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  gd.ncollapsed = 1;
  gd.nstart_map = 1;
  gd.slice_sizes[0] = 1;
  gd.index_vector_dim = 1;
  tpu_op_set_output(c, tpu_hlo_gather(c->f, c->in[0], coords, &gd));
}
static const tpu_op_rule_t k_g = {"g", rule_g, 2, 2};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(expr)                                                      \
  do {                                                                   \
    tpu_status_t st__ = (expr);                                          \
    if (st__) {                                                          \
      fprintf(stderr, "%s: %s\n", #expr, tpu_status_message(st__));      \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

static tpu_rt_input_t whole(tpu_storage_t *s, tpu_dtype_t dt, int64_t n) {
  tpu_rt_input_t in;
  memset(&in, 0, sizeof(in));
  in.storage = s;
  in.view.dtype = dt;
  in.view.rank = 1;
  in.view.sizes[0] = n;
  in.view.strides[0] = 1;
  return in;
}

/* Seconds per op of one round. */
static double run_round(tpu_storage_t *x, int64_t nx, tpu_storage_t *idx, int64_t k, int check, int read_each,
                        int iters, float *host) {
  tpu_rt_input_t ins[2] = {whole(x, TPU_F32, nx), whole(idx, TPU_S64, k)};
  int64_t attr = check;
  tpu_op_attrs_t attrs = {1, &attr, 0, NULL};
  double t0 = now();
  tpu_storage_t *last = NULL;
  for (int i = 0; i < iters; i++) {
    tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
    int nout;
    CHECK(tpu_rt_op(&k_g, ins, 2, &attrs, out, &nout));
    if (read_each) {
      tpu_view_t v = whole(out[0].storage, TPU_F32, k).view;
      CHECK(tpu_rt_view_to_host(out[0].storage, &v, host, sizeof(float) * (size_t)k));
    }
    if (last) tpu_storage_release(last);
    last = out[0].storage;
  }
  tpu_view_t v = whole(last, TPU_F32, k).view;
  CHECK(tpu_rt_view_to_host(last, &v, host, sizeof(float) * (size_t)k));
  CHECK(tpu_rt_synchronize());
  tpu_storage_release(last);
  return (now() - t0) / iters;
}

/* Best seconds per op without [0] and with [1] the check: rounds of the two
 * alternate (a loaded machine slows both alike), the first (compiles) is
 * dropped. */
static void run_case(tpu_storage_t *x, int64_t nx, tpu_storage_t *idx, int64_t k, int read_each, int iters,
                     int rounds, double best[2]) {
  float *host = (float *)malloc(sizeof(float) * (size_t)k);
  best[0] = best[1] = 1e30;
  for (int round = 0; round <= rounds; round++) {
    for (int check = 0; check < 2; check++) {
      double dt = run_round(x, nx, idx, k, check, read_each, iters, host);
      if (round > 0 && dt < best[check]) best[check] = dt;
    }
  }
  free(host);
}

int main(int argc, char **argv) {
  int64_t k = argc > 1 ? atoll(argv[1]) : 4096;
  int iters = argc > 2 ? atoi(argv[2]) : 200;
  int rounds = argc > 3 ? atoi(argv[3]) : 15;
  int64_t nx = 1 << 16;
  char path[4096];
  CHECK(tpu_pjrt_find_plugin(getenv("TORCH_TPU_SITE_DIRS"), path, sizeof(path)));
  static const char *names[3] = {"strict", "debug", "fused"};
  printf("gather of %lld indices from %lld floats, %d ops per round, best of %d alternating rounds\n",
         (long long)k, (long long)nx, iters, rounds);
  printf("%-7s %-6s %14s %14s %8s\n", "mode", "case", "no check us/op", "check us/op", "ratio");
  for (int mode = 0; mode < 3; mode++) {
    tpu_rt_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.plugin_path = path;
    cfg.num_devices = 1;
    cfg.mode = (tpu_eager_mode_t)mode;
    cfg.fused_max_nodes = 64;
    CHECK(tpu_rt_init(&cfg));
    float *xh = (float *)malloc(sizeof(float) * (size_t)nx);
    int64_t *ih = (int64_t *)malloc(sizeof(int64_t) * (size_t)k);
    for (int64_t i = 0; i < nx; i++) xh[i] = (float)i;
    for (int64_t i = 0; i < k; i++) ih[i] = (i * 7919) % nx;
    tpu_storage_t *x, *idx;
    CHECK(tpu_rt_storage_from_host(0, TPU_F32, &nx, 1, xh, &x));
    CHECK(tpu_rt_storage_from_host(0, TPU_S64, &k, 1, ih, &idx));
    for (int read_each = 0; read_each < 2; read_each++) {
      double best[2];
      run_case(x, nx, idx, k, read_each, iters, rounds, best);
      printf("%-7s %-6s %14.1f %14.1f %8.3f\n", names[mode], read_each ? "read" : "chain", best[0] * 1e6,
             best[1] * 1e6, best[1] / best[0]);
      fflush(stdout);
    }
    tpu_storage_release(x);
    tpu_storage_release(idx);
    free(xh);
    free(ih);
    tpu_rt_shutdown();
  }
  return 0;
}
