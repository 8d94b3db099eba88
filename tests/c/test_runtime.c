/* Runtime tests: storages, views, writes, the lazy graph in every mode, the
 * program cache tiers, and that nothing leaks (run under valgrind too). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "tinytest.h"

static tpu_status_t rt_start(tpu_eager_mode_t mode, const char *cache_dir) {
  tpu_rt_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.plugin_path = tt_plugin_path();
  cfg.num_devices = 1;
  cfg.mode = mode;
  cfg.cache_dir = cache_dir;
  return tpu_rt_init(&cfg);
}

static tpu_view_t contiguous_view(tpu_dtype_t dt, int rank, const int64_t *dims) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = dt;
  v.rank = rank;
  int64_t st = 1;
  for (int d = rank - 1; d >= 0; d--) {
    v.sizes[d] = dims[d];
    v.strides[d] = st;
    st *= dims[d];
  }
  return v;
}

static tpu_rt_input_t view_in(tpu_storage_t *s, tpu_view_t v) {
  tpu_rt_input_t in;
  memset(&in, 0, sizeof(in));
  in.storage = s;
  in.view = v;
  return in;
}

/* x (2x3) -> y = x + x^T^T written through views; checks values and graph
 * behaviour in one mode. */
static void run_mode(tpu_eager_mode_t mode) {
  TT_CHECK_OK(rt_start(mode, NULL));
  float host[6] = {0, 1, 2, 3, 4, 5};
  int64_t dims[2] = {2, 3};
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, dims, 2, host, &x));
  /* transposed view of x: sizes 3x2, strides 1,3 */
  tpu_view_t vt;
  memset(&vt, 0, sizeof(vt));
  vt.dtype = TPU_F32;
  vt.rank = 2;
  vt.sizes[0] = 3; vt.sizes[1] = 2;
  vt.strides[0] = 1; vt.strides[1] = 3;
  float out[6];
  TT_CHECK_OK(tpu_rt_view_to_host(x, &vt, out, sizeof(out)));
  float want_t[6] = {0, 3, 1, 4, 2, 5};
  TT_CHECK(!memcmp(out, want_t, sizeof(out)));

  /* y = x + x via the elementwise rule (result dtype attr) */
  const tpu_op_rule_t *add = tpu_op_rule_find("add");
  TT_CHECK(add != NULL);
  tpu_rt_input_t ins[2] = {view_in(x, contiguous_view(TPU_F32, 2, dims)), view_in(x, contiguous_view(TPU_F32, 2, dims))};
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  TT_CHECK_OK(tpu_rt_op(add, ins, 2, &attrs, outs, &nout));
  TT_CHECK(nout == 1 && outs[0].type.rank == 2 && outs[0].type.dims[1] == 3);
  if (mode == TPU_MODE_FUSED) TT_CHECK(tpu_rt_pending_nodes() > 0);
  else TT_CHECK(tpu_rt_pending_nodes() == 0);

  /* write a scalar into column 1 of y (a strided view) */
  tpu_view_t col;
  memset(&col, 0, sizeof(col));
  col.dtype = TPU_F32;
  col.rank = 1;
  col.sizes[0] = 2;
  col.strides[0] = 3;
  col.offset = 1;
  tpu_rt_input_t s;
  memset(&s, 0, sizeof(s));
  s.scalar_dtype = TPU_F32;
  s.scalar_f = -7;
  TT_CHECK_OK(tpu_rt_write(outs[0].storage, &col, &s));
  tpu_view_t yv = contiguous_view(TPU_F32, 2, dims);
  TT_CHECK_OK(tpu_rt_view_to_host(outs[0].storage, &yv, out, sizeof(out)));
  float want_y[6] = {0, -7, 4, 6, -7, 10};
  TT_CHECK(!memcmp(out, want_y, sizeof(out)));
  TT_CHECK(tpu_rt_pending_nodes() == 0);

  /* a bad op is reported, not crashed on, and leaves the graph usable */
  int64_t d3[1] = {4};
  tpu_storage_t *z;
  float h4[4] = {1, 2, 3, 4};
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, d3, 1, h4, &z));
  tpu_rt_input_t bad[2] = {view_in(x, contiguous_view(TPU_F32, 2, dims)), view_in(z, contiguous_view(TPU_F32, 1, d3))};
  tpu_status_t st = tpu_rt_op(add, bad, 2, &attrs, outs + 1, &nout);
  TT_CHECK(st != NULL && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  TT_CHECK(st && strstr(tpu_status_message(st), "must match"));
  tpu_status_free(st);
  TT_CHECK_OK(tpu_rt_flush(TPU_CUT_OTHER));

  tpu_storage_release(z);
  tpu_storage_release(outs[0].storage);
  tpu_storage_release(x);
  tpu_rt_stats_t stats;
  tpu_rt_stats(&stats);
  TT_CHECK(stats.live_storages == 0);
  tpu_rt_shutdown();
}

/* Fused mode's cut after a layer (tpu_rt_flush_block): a block of n adds runs
 * the pending graph when it recorded at least min_nodes ops since the last
 * block or flush, and never in strict mode's already-flushed graph. */
static void add_block(tpu_storage_t **x, int n) {
  const tpu_op_rule_t *add = tpu_op_rule_find("add");
  int64_t dims[1] = {4}, dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  for (int i = 0; i < n; i++) {
    tpu_rt_input_t ins[2] = {view_in(*x, contiguous_view(TPU_F32, 1, dims)),
                             view_in(*x, contiguous_view(TPU_F32, 1, dims))};
    tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
    int nout = 0;
    TT_CHECK_OK(tpu_rt_op(add, ins, 2, &attrs, outs, &nout));
    tpu_storage_release(*x);
    *x = outs[0].storage;
  }
}

TT_TEST(runtime_fused_flush_block_cuts_big_blocks_only) {
  TT_CHECK_OK(rt_start(TPU_MODE_FUSED, NULL));
  float host[4] = {1, 2, 3, 4};
  int64_t dims[1] = {4};
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, dims, 1, host, &x));
  TT_CHECK_OK(tpu_rt_flush(TPU_CUT_OTHER));
  add_block(&x, 3); /* a small block stays pending */
  TT_CHECK_OK(tpu_rt_flush_block(4));
  TT_CHECK(tpu_rt_pending_nodes() == 3);
  add_block(&x, 3); /* counted from the previous block's end: 3 again */
  TT_CHECK_OK(tpu_rt_flush_block(4));
  TT_CHECK(tpu_rt_pending_nodes() == 6);
  add_block(&x, 5); /* a big block runs everything pending */
  TT_CHECK_OK(tpu_rt_flush_block(4));
  TT_CHECK(tpu_rt_pending_nodes() == 0);
  add_block(&x, 1);
  TT_CHECK_OK(tpu_rt_flush_block(1));
  TT_CHECK(tpu_rt_pending_nodes() == 0);
  tpu_view_t v = contiguous_view(TPU_F32, 1, dims);
  float out[4];
  TT_CHECK_OK(tpu_rt_view_to_host(x, &v, out, sizeof(out)));
  for (int i = 0; i < 4; i++) TT_CHECK(out[i] == host[i] * 4096.0f); /* 12 doublings */
  /* strict mode: every op already ran; nothing to cut */
  TT_CHECK_OK(tpu_rt_set_mode(TPU_MODE_STRICT));
  add_block(&x, 2);
  TT_CHECK_OK(tpu_rt_flush_block(1));
  TT_CHECK(tpu_rt_pending_nodes() == 0);
  tpu_storage_release(x);
  tpu_rt_shutdown();
}

TT_TEST(runtime_strict_views_ops_writes) { run_mode(TPU_MODE_STRICT); }
TT_TEST(runtime_debug_views_ops_writes) { run_mode(TPU_MODE_DEBUG); }
TT_TEST(runtime_fused_views_ops_writes) { run_mode(TPU_MODE_FUSED); }

/* An in-place write whose target's old value nothing else holds donates
 * that buffer: the values are right and the device's peak memory does not
 * hold the old and the new 1 MiB at once (hold/release makes op + write one
 * program in strict and debug mode); a value held elsewhere is left alone. */
static void donation_mode(tpu_eager_mode_t mode) {
  TT_CHECK_OK(rt_start(mode, NULL));
  enum { N = 1 << 18 };
  float *host = (float *)malloc(sizeof(float) * N);
  for (int i = 0; i < N; i++) host[i] = (float)i;
  int64_t dims[1] = {N};
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, dims, 1, host, &x));
  tpu_view_t v = contiguous_view(TPU_F32, 1, dims);
  const tpu_op_rule_t *add = tpu_op_rule_find("add");
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  tpu_rt_input_t one;
  memset(&one, 0, sizeof(one));
  one.scalar_dtype = TPU_F32;
  one.scalar_f = 1;
  tpu_rt_memory_info_t mi;
  TT_CHECK_OK(tpu_rt_synchronize());
  TT_CHECK_OK(tpu_rt_memory_info(0, &mi));
  int64_t base = mi.stats.bytes_in_use;
  tpu_rt_memory_reset_peak(0);
  for (int step = 0; step < 3; step++) { /* x += 1, as an in-place kernel records it */
    tpu_rt_hold_flush();
    tpu_rt_input_t ins[2] = {view_in(x, v), one};
    tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
    int nout = 0;
    TT_CHECK_OK(tpu_rt_op(add, ins, 2, &attrs, outs, &nout));
    tpu_rt_input_t r = view_in(outs[0].storage, v);
    TT_CHECK_OK(tpu_rt_write(x, &v, &r));
    tpu_storage_release(outs[0].storage);
    TT_CHECK_OK(tpu_rt_release_flush());
  }
  TT_CHECK_OK(tpu_rt_synchronize());
  TT_CHECK_OK(tpu_rt_memory_info(0, &mi));
  TT_CHECK(mi.stats.peak_bytes_in_use - base < (int64_t)sizeof(float) * N / 2);
  float *out = (float *)malloc(sizeof(float) * N);
  TT_CHECK_OK(tpu_rt_view_to_host(x, &v, out, sizeof(float) * N));
  TT_CHECK(out[0] == 3.0f && out[N - 1] == (float)(N - 1) + 3.0f);
  /* a second holder of the value (a whole-storage copy shares it): the
   * in-place write must leave that holder's values alone */
  tpu_storage_t *y;
  TT_CHECK_OK(tpu_rt_storage_empty(0, TPU_F32, N, &y));
  tpu_rt_input_t xs = view_in(x, v);
  TT_CHECK_OK(tpu_rt_write(y, &v, &xs));
  tpu_rt_hold_flush();
  tpu_rt_input_t ins[2] = {view_in(x, v), one};
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  TT_CHECK_OK(tpu_rt_op(add, ins, 2, &attrs, outs, &nout));
  tpu_rt_input_t r = view_in(outs[0].storage, v);
  TT_CHECK_OK(tpu_rt_write(x, &v, &r));
  tpu_storage_release(outs[0].storage);
  TT_CHECK_OK(tpu_rt_release_flush());
  TT_CHECK_OK(tpu_rt_view_to_host(y, &v, out, sizeof(float) * N));
  TT_CHECK(out[5] == 8.0f);
  TT_CHECK_OK(tpu_rt_view_to_host(x, &v, out, sizeof(float) * N));
  TT_CHECK(out[5] == 9.0f);
  tpu_storage_release(y);
  tpu_storage_release(x);
  free(out);
  free(host);
  tpu_rt_shutdown();
}

TT_TEST(runtime_strict_inplace_write_donates) { donation_mode(TPU_MODE_STRICT); }
TT_TEST(runtime_debug_inplace_write_donates) { donation_mode(TPU_MODE_DEBUG); }
TT_TEST(runtime_fused_inplace_write_donates) { donation_mode(TPU_MODE_FUSED); }

TT_TEST(runtime_disk_cache_second_start_hits) {
  char dir[] = "/tmp/tpu_rt_cacheXXXXXX";
  TT_CHECK(mkdtemp(dir) != NULL);
  for (int round = 0; round < 2; round++) {
    TT_CHECK_OK(rt_start(TPU_MODE_STRICT, dir));
    int64_t dims[1] = {5};
    float h[5] = {1, 2, 3, 4, 5};
    tpu_storage_t *x;
    TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, dims, 1, h, &x));
    int64_t dt = TPU_F32;
    tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
    tpu_rt_input_t ins[2] = {view_in(x, contiguous_view(TPU_F32, 1, dims)), view_in(x, contiguous_view(TPU_F32, 1, dims))};
    tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
    int nout;
    TT_CHECK_OK(tpu_rt_op(tpu_op_rule_find("mul"), ins, 2, &attrs, outs, &nout));
    float r[5];
    tpu_view_t v = contiguous_view(TPU_F32, 1, dims);
    TT_CHECK_OK(tpu_rt_view_to_host(outs[0].storage, &v, r, sizeof(r)));
    TT_CHECK(r[4] == 25.0f);
    tpu_rt_stats_t s;
    tpu_rt_stats(&s);
    if (round == 0) TT_CHECK(s.compiles == 1 && s.disk_writes == 1);
    else TT_CHECK(s.compiles == 0 && s.disk_hits == 1);
    tpu_storage_release(outs[0].storage);
    tpu_storage_release(x);
    tpu_rt_shutdown();
  }
  tpu_rt_clear_cache(true);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  TT_CHECK(system(cmd) == 0);
}
