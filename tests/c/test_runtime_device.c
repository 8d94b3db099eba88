/* Runtime tests of what the device interfaces of PyTorch ask of the engine:
 * storages with no value yet (allocator, torch.empty), untyped storages
 * typed by first use, resize, memory accounting and limits, events over
 * the record of issued work, asynchronous uploads.  Run under valgrind. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/event.h"
#include "runtime/runtime.h"
#include "tinytest.h"

static tpu_status_t dev_start_n(tpu_eager_mode_t mode, int num_devices) {
  tpu_rt_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.plugin_path = tt_plugin_path();
  cfg.num_devices = num_devices;
  cfg.mode = mode;
  return tpu_rt_init(&cfg);
}

static tpu_status_t dev_start(tpu_eager_mode_t mode) { return dev_start_n(mode, 1); }

static tpu_view_t flat(tpu_dtype_t dt, int64_t n, int64_t offset) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = dt;
  v.rank = 1;
  v.sizes[0] = n;
  v.strides[0] = 1;
  v.offset = offset;
  return v;
}

static tpu_rt_input_t scalar_f32(double x) {
  tpu_rt_input_t in;
  memset(&in, 0, sizeof(in));
  in.scalar_dtype = TPU_F32;
  in.scalar_f = x;
  return in;
}

static void lazy_storages(tpu_eager_mode_t mode) {
  TT_CHECK_OK(dev_start(mode));
  /* a typed storage with no value reads as zeros, costs no buffer */
  int64_t before = tpu_pjrt_live_buffers();
  tpu_storage_t *e;
  TT_CHECK_OK(tpu_rt_storage_empty(0, TPU_F32, 5, &e));
  TT_CHECK(tpu_pjrt_live_buffers() == before && tpu_storage_nbytes(e) == 20);
  float out[5] = {1, 1, 1, 1, 1};
  tpu_view_t v5 = flat(TPU_F32, 5, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(e, &v5, out, sizeof(out)));
  for (int i = 0; i < 5; i++) TT_CHECK(out[i] == 0.0f);
  /* a partial write lands on zeros */
  tpu_view_t mid = flat(TPU_F32, 2, 1);
  tpu_rt_input_t three = scalar_f32(3);
  TT_CHECK_OK(tpu_rt_write(e, &mid, &three));
  TT_CHECK_OK(tpu_rt_view_to_host(e, &v5, out, sizeof(out)));
  float want[5] = {0, 3, 3, 0, 0};
  TT_CHECK(!memcmp(out, want, sizeof(out)));

  /* an untyped (allocator) storage takes the dtype of its first view */
  tpu_storage_t *u;
  TT_CHECK_OK(tpu_rt_storage_alloc(0, 16, &u));
  TT_CHECK(tpu_storage_dtype(u) == TPU_U8 && tpu_storage_nbytes(u) == 16);
  tpu_view_t v4 = flat(TPU_S32, 4, 0);
  tpu_rt_input_t seven;
  memset(&seven, 0, sizeof(seven));
  seven.scalar_dtype = TPU_S32;
  seven.scalar_i = 7;
  TT_CHECK_OK(tpu_rt_write(u, &v4, &seven));
  TT_CHECK(tpu_storage_dtype(u) == TPU_S32 && tpu_storage_numel(u) == 4);
  int32_t iout[4];
  TT_CHECK_OK(tpu_rt_view_to_host(u, &v4, iout, sizeof(iout)));
  TT_CHECK(iout[0] == 7 && iout[3] == 7);
  /* the bytes, seen as bytes (a bitcast view) */
  uint8_t bytes[16];
  tpu_view_t vb = flat(TPU_U8, 16, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(u, &vb, bytes, sizeof(bytes)));
  TT_CHECK(bytes[0] == 7 && bytes[1] == 0 && bytes[4] == 7);

  /* a view past the end of its storage is refused with PyTorch's words */
  tpu_view_t past = flat(TPU_S32, 4, 2);
  tpu_status_t st = tpu_rt_view_to_host(u, &past, iout, sizeof(iout));
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT && strstr(tpu_status_message(st), "out of bounds"));
  tpu_status_free(st);

  tpu_storage_release(u);
  tpu_storage_release(e);
  tpu_rt_shutdown();
}

TT_TEST(runtime_lazy_storages_strict) { lazy_storages(TPU_MODE_STRICT); }
TT_TEST(runtime_lazy_storages_fused) { lazy_storages(TPU_MODE_FUSED); }

TT_TEST(runtime_storage_resize) {
  TT_CHECK_OK(dev_start(TPU_MODE_STRICT));
  float h[4] = {1, 2, 3, 4};
  int64_t d4 = 4;
  tpu_storage_t *s;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &d4, 1, h, &s));
  TT_CHECK_OK(tpu_rt_storage_resize(s, 24)); /* grow: prefix kept, zeros after */
  float out[6];
  tpu_view_t v6 = flat(TPU_F32, 6, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(s, &v6, out, sizeof(out)));
  float want[6] = {1, 2, 3, 4, 0, 0};
  TT_CHECK(!memcmp(out, want, sizeof(out)));
  TT_CHECK_OK(tpu_rt_storage_resize(s, 8)); /* shrink */
  tpu_view_t v2 = flat(TPU_F32, 2, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(s, &v2, out, 8));
  TT_CHECK(out[0] == 1 && out[1] == 2);
  tpu_pjrt_memory_stats_t ms;
  tpu_rt_memory_info_t mi;
  TT_CHECK_OK(tpu_rt_memory_info(0, &mi));
  int64_t held = mi.stats.bytes_in_use;
  TT_CHECK_OK(tpu_rt_storage_resize(s, 0)); /* releases the buffer */
  TT_CHECK_OK(tpu_rt_memory_info(0, &mi));
  TT_CHECK(mi.stats.bytes_in_use == held - 8);
  TT_CHECK(tpu_storage_nbytes(s) == 0);
  TT_CHECK_OK(tpu_rt_storage_resize(s, 12)); /* back: zeros */
  float z[3];
  tpu_view_t v3 = flat(TPU_F32, 3, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(s, &v3, z, sizeof(z)));
  TT_CHECK(z[0] == 0 && z[2] == 0);
  (void)ms;
  tpu_storage_release(s);
  tpu_rt_shutdown();
}

TT_TEST(runtime_memory_accounting_and_limit) {
  TT_CHECK_OK(dev_start(TPU_MODE_STRICT));
  tpu_rt_memory_info_t a, b;
  TT_CHECK_OK(tpu_rt_memory_info(0, &a));
  TT_CHECK(a.total_bytes > 0 && a.free_bytes > 0 && a.free_bytes <= a.total_bytes);
  enum { N = 1000 };
  static float h[N];
  int64_t n = N;
  tpu_storage_t *s;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, h, &s));
  TT_CHECK_OK(tpu_rt_memory_info(0, &b));
  TT_CHECK(b.stats.bytes_in_use - a.stats.bytes_in_use == N * 4);
  TT_CHECK(b.stats.peak_bytes_in_use >= b.stats.bytes_in_use);
  TT_CHECK(b.stats.num_allocs == a.stats.num_allocs + 1);
  tpu_storage_release(s);
  TT_CHECK_OK(tpu_rt_memory_info(0, &b));
  TT_CHECK(b.stats.bytes_in_use == a.stats.bytes_in_use);
  tpu_rt_memory_reset_peak(0);
  TT_CHECK_OK(tpu_rt_memory_info(0, &b));
  TT_CHECK(b.stats.peak_bytes_in_use == b.stats.bytes_in_use);
  /* a limit: an upload past it fails with RESOURCE_EXHAUSTED naming the size */
  TT_CHECK_OK(tpu_rt_set_memory_limit(0, b.stats.bytes_in_use + 100));
  tpu_status_t st = tpu_rt_storage_from_host(0, TPU_F32, &n, 1, h, &s);
  TT_CHECK(st && tpu_status_code(st) == TPU_RESOURCE_EXHAUSTED && strstr(tpu_status_message(st), "3.91 KiB"));
  tpu_status_free(st);
  TT_CHECK_OK(tpu_rt_set_memory_limit(0, 0));
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, h, &s));
  tpu_storage_release(s);
  tpu_rt_shutdown();
}

/* A chain of n dependent multiplications on s (replaced each time). */
static void chain(tpu_storage_t **s, int64_t numel, int n) {
  const tpu_op_rule_t *mul = tpu_op_rule_find("mul");
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  for (int i = 0; i < n; i++) {
    tpu_rt_input_t in[2];
    memset(in, 0, sizeof(in));
    in[0].storage = *s;
    in[0].view = flat(TPU_F32, numel, 0);
    in[1] = scalar_f32(1.0001);
    tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
    int nout;
    TT_CHECK_OK(tpu_rt_op(mul, in, 2, &attrs, out, &nout));
    tpu_storage_release(*s);
    *s = out[0].storage;
  }
}

TT_TEST(runtime_events_follow_issued_work) {
  TT_CHECK_OK(dev_start(TPU_MODE_STRICT));
  tpu_rt_event_t *start, *end, *never;
  TT_CHECK_OK(tpu_rt_event_create(&start));
  TT_CHECK_OK(tpu_rt_event_create(&end));
  TT_CHECK_OK(tpu_rt_event_create(&never));
  TT_CHECK(tpu_rt_event_query(never) && !tpu_rt_event_recorded(never));
  double ms;
  tpu_status_t st = tpu_rt_event_elapsed_ms(start, end, &ms);
  TT_CHECK(st && strstr(tpu_status_message(st), "recorded"));
  tpu_status_free(st);

  enum { N = 1 << 18 };
  float *h = (float *)calloc(N, sizeof(float));
  int64_t n = N;
  tpu_storage_t *s;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, h, &s));
  TT_CHECK_OK(tpu_rt_event_record(start, 0));
  chain(&s, N, 20);
  TT_CHECK_OK(tpu_rt_event_record(end, 0));
  TT_CHECK(tpu_rt_event_recorded(end) && tpu_rt_event_device(end) == 0);
  TT_CHECK_OK(tpu_rt_event_synchronize(end));
  TT_CHECK(tpu_rt_event_query(end) && tpu_rt_event_query(start));
  TT_CHECK_OK(tpu_rt_event_elapsed_ms(start, end, &ms));
  TT_CHECK(ms >= 0);
  TT_CHECK(tpu_work_in_flight() == 0);
  /* recording again moves the point */
  chain(&s, N, 5);
  TT_CHECK_OK(tpu_rt_event_record(end, 0));
  TT_CHECK_OK(tpu_rt_synchronize());
  TT_CHECK(tpu_rt_event_query(end) && tpu_work_in_flight() == 0);
  tpu_rt_event_destroy(start);
  tpu_rt_event_destroy(end);
  tpu_rt_event_destroy(never);
  tpu_storage_release(s);
  free(h);
  tpu_rt_shutdown();
}

typedef struct {
  int calls;
} upload_flag_t;

static void upload_done(tpu_status_t st, void *arg) {
  tpu_status_free(st);
  ((upload_flag_t *)arg)->calls++;
}

TT_TEST(runtime_async_upload) {
  TT_CHECK_OK(dev_start(TPU_MODE_STRICT));
  enum { N = 4096 };
  float *h = (float *)malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) h[i] = (float)i;
  int64_t n = N;
  upload_flag_t flag = {0};
  tpu_storage_t *s;
  TT_CHECK_OK(tpu_rt_storage_from_host_async(0, TPU_F32, &n, 1, h, upload_done, &flag, &s));
  TT_CHECK_OK(tpu_rt_synchronize()); /* the upload is issued work */
  TT_CHECK(flag.calls == 1);
  free(h); /* done: the host memory is no longer read */
  float out[N];
  tpu_view_t v = flat(TPU_F32, N, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(s, &v, out, sizeof(out)));
  TT_CHECK(out[0] == 0 && out[N - 1] == (float)(N - 1));
  tpu_storage_release(s);
  tpu_rt_shutdown();
}

/* Collectives across the process's devices: one replicated program; the
 * inputs may be pending (fused mode) and views; bad members are refused. */
static void collectives(tpu_eager_mode_t mode) {
  TT_CHECK_OK(dev_start_n(mode, 2));
  float h0[4] = {1, 2, 3, 4}, h1[4] = {10, -20, 30, 40};
  int64_t d4 = 4;
  tpu_storage_t *in[2], *out[2];
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &d4, 1, h0, &in[0]));
  TT_CHECK_OK(tpu_rt_storage_from_host(1, TPU_F32, &d4, 1, h1, &in[1]));
  tpu_view_t v[2] = {flat(TPU_F32, 4, 0), flat(TPU_F32, 4, 0)};
  /* all_reduce max */
  TT_CHECK_OK(tpu_rt_collective(TPU_RT_ALL_REDUCE, "maximum", in, v, 2, out));
  for (int r = 0; r < 2; r++) {
    float got[4];
    TT_CHECK(tpu_storage_device(out[r]) == r);
    TT_CHECK_OK(tpu_rt_view_to_host(out[r], &v[0], got, sizeof got));
    for (int i = 0; i < 4; i++) TT_CHECK(got[i] == (h0[i] > h1[i] ? h0[i] : h1[i]));
    tpu_storage_release(out[r]);
  }
  /* all_gather of a strided view (elements 1 and 3 of each) */
  tpu_view_t odd[2] = {flat(TPU_F32, 2, 1), flat(TPU_F32, 2, 1)};
  odd[0].strides[0] = odd[1].strides[0] = 2;
  TT_CHECK_OK(tpu_rt_collective(TPU_RT_ALL_GATHER, NULL, in, odd, 2, out));
  for (int r = 0; r < 2; r++) {
    float got[4], want[4] = {2, 4, -20, 40};
    TT_CHECK_OK(tpu_rt_view_to_host(out[r], &v[0], got, sizeof got));
    TT_CHECK(!memcmp(got, want, sizeof got));
    tpu_storage_release(out[r]);
  }
  /* reduce_scatter add: member r gets block r of the sum */
  TT_CHECK_OK(tpu_rt_collective(TPU_RT_REDUCE_SCATTER, "add", in, v, 2, out));
  for (int r = 0; r < 2; r++) {
    float got[2];
    tpu_view_t v2 = flat(TPU_F32, 2, 0);
    TT_CHECK_OK(tpu_rt_view_to_host(out[r], &v2, got, sizeof got));
    TT_CHECK(got[0] == h0[2 * r] + h1[2 * r] && got[1] == h0[2 * r + 1] + h1[2 * r + 1]);
    tpu_storage_release(out[r]);
  }
  /* bad members: one device twice, shapes that differ, an odd split, a bad combiner */
  tpu_storage_t *twice[2] = {in[0], in[0]};
  tpu_status_t st = tpu_rt_collective(TPU_RT_ALL_REDUCE, "add", twice, v, 2, out);
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT && strstr(tpu_status_message(st), "both on tpu:0"));
  tpu_status_free(st);
  tpu_view_t mixed[2] = {flat(TPU_F32, 4, 0), flat(TPU_F32, 3, 0)};
  st = tpu_rt_collective(TPU_RT_ALL_REDUCE, "add", in, mixed, 2, out);
  TT_CHECK(st && strstr(tpu_status_message(st), "tensor 1 is tensor<3xf32>"));
  tpu_status_free(st);
  tpu_view_t three[2] = {flat(TPU_F32, 3, 0), flat(TPU_F32, 3, 0)};
  st = tpu_rt_collective(TPU_RT_REDUCE_SCATTER, "add", in, three, 2, out);
  TT_CHECK(st && strstr(tpu_status_message(st), "does not split"));
  tpu_status_free(st);
  st = tpu_rt_collective(TPU_RT_ALL_REDUCE, "mean", in, v, 2, out);
  TT_CHECK(st && strstr(tpu_status_message(st), "unknown reduction"));
  tpu_status_free(st);
  TT_CHECK(out[0] == NULL && out[1] == NULL);
  tpu_storage_release(in[0]);
  tpu_storage_release(in[1]);
  tpu_rt_shutdown();
}
TT_TEST(runtime_collectives_strict) { collectives(TPU_MODE_STRICT); }
TT_TEST(runtime_collectives_fused) { collectives(TPU_MODE_FUSED); }
