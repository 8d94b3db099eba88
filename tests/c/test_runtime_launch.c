/* Compile workers and launch queues (runtime/launch.c): programs compile on
 * workers while the caller records; they run in order with the right
 * values; a failed compile fails its launch and what reads its outputs,
 * is reported once, and leaves the runtime working (run under valgrind
 * too: queued launches and jobs are freed). */
#include <stdlib.h>
#include <string.h>

#include "runtime/event.h"
#include "runtime/runtime.h"
#include "tinytest.h"

static tpu_status_t start(tpu_eager_mode_t mode, int threads) {
  tpu_rt_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.plugin_path = tt_plugin_path();
  cfg.num_devices = 1;
  cfg.mode = mode;
  cfg.compile_threads = threads;
  return tpu_rt_init(&cfg);
}

static tpu_view_t flat(int64_t n) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_F32;
  v.rank = 1;
  v.sizes[0] = n;
  v.strides[0] = 1;
  return v;
}

static tpu_rt_input_t in_of(tpu_storage_t *s, int64_t n) {
  tpu_rt_input_t in;
  memset(&in, 0, sizeof(in));
  in.storage = s;
  in.view = flat(n);
  return in;
}

static tpu_rt_input_t number(double x) {
  tpu_rt_input_t in;
  memset(&in, 0, sizeof(in));
  in.scalar_dtype = TPU_F32;
  in.scalar_f = x;
  return in;
}

/* out = rule(a, b) with the result dtype attr of the elementwise rules */
static tpu_storage_t *binary(const char *rule, tpu_rt_input_t a, tpu_rt_input_t b, tpu_status_t *out_st) {
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  tpu_rt_input_t ins[2] = {a, b};
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int n = 0;
  *out_st = tpu_rt_op(tpu_op_rule_find(rule), ins, 2, &attrs, outs, &n);
  return *out_st ? NULL : outs[0].storage;
}

/* A chain of ops on tensors of 16 sizes (16 x 3 programs, each compiled
 * on a worker while the next is recorded), every value checked. */
static void chain(tpu_eager_mode_t mode) {
  TT_CHECK_OK(start(mode, 2));
  float host[40];
  for (int i = 0; i < 40; i++) host[i] = (float)i;
  for (int64_t n = 20; n < 36; n++) {
    tpu_storage_t *x;
    TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, host, &x));
    tpu_status_t st;
    tpu_storage_t *y = binary("mul", in_of(x, n), number(3.0), &st); /* 3x */
    TT_CHECK_OK(st);
    tpu_storage_t *z = y ? binary("add", in_of(y, n), in_of(x, n), &st) : NULL; /* 4x */
    TT_CHECK_OK(st);
    tpu_storage_t *w = z ? binary("sub", in_of(z, n), number(1.0), &st) : NULL; /* 4x - 1 */
    TT_CHECK_OK(st);
    float back[40];
    tpu_view_t v = flat(n);
    if (w) TT_CHECK_OK(tpu_rt_view_to_host(w, &v, back, sizeof(float) * (size_t)n));
    int ok = w != NULL;
    for (int64_t i = 0; ok && i < n; i++) ok &= back[i] == 4.0f * (float)i - 1.0f;
    TT_CHECK(ok);
    if (w) tpu_storage_release(w);
    if (z) tpu_storage_release(z);
    if (y) tpu_storage_release(y);
    tpu_storage_release(x);
  }
  TT_CHECK_OK(tpu_rt_synchronize());
  tpu_rt_metrics_t m;
  tpu_rt_metrics(&m);
  TT_CHECK(m.compiles + m.disk_loads >= 16);
  tpu_rt_stats_t s;
  tpu_rt_stats(&s);
  TT_CHECK(s.live_storages == 0);
  tpu_rt_shutdown();
}

TT_TEST(runtime_launch_strict_chain_compiles_on_workers) { chain(TPU_MODE_STRICT); }
TT_TEST(runtime_launch_fused_chain_compiles_on_workers) { chain(TPU_MODE_FUSED); }

/* A rule XLA rejects at compile (an op it does not know): the signature is
 * built without compiling, so the op is recorded and its compile fails on
 * a worker. */
static void rule_bogus(tpu_op_ctx_t *c) { tpu_op_set_output(c, tpu_hlo_binary(c->f, "no_such_op", c->in[0], c->in[0])); }
static const tpu_op_rule_t k_bogus = {"bogus", rule_bogus, 1, 1};

TT_TEST(runtime_launch_failed_compile_is_reported_once_and_nothing_else_breaks) {
  TT_CHECK_OK(start(TPU_MODE_STRICT, 2));
  float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t n = 8;
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, host, &x));
  tpu_rt_input_t in = in_of(x, n);
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(&k_bogus, &in, 1, NULL, outs, &nout);
  /* queued: the failure comes with what needs the value */
  tpu_storage_t *bad = st ? NULL : outs[0].storage;
  if (st) tpu_status_free(st);
  if (bad) {
    tpu_storage_t *after = binary("add", in_of(bad, n), number(1.0), &st); /* reads the failed value */
    TT_CHECK_OK(st);
    float back[8];
    tpu_view_t v = flat(n);
    st = after ? tpu_rt_view_to_host(after, &v, back, sizeof(back)) : NULL;
    TT_CHECK(st != NULL);
    TT_CHECK(st && strstr(tpu_status_message(st), "no_such_op"));
    tpu_status_free(st);
    st = tpu_rt_synchronize(); /* reported once */
    TT_CHECK(st != NULL);
    tpu_status_free(st);
    TT_CHECK_OK(tpu_rt_synchronize());
    if (after) tpu_storage_release(after);
    tpu_storage_release(bad);
  }
  /* the runtime goes on */
  tpu_storage_t *y = binary("mul", in, number(2.0), &st);
  TT_CHECK_OK(st);
  float back[8];
  tpu_view_t v = flat(n);
  if (y) TT_CHECK_OK(tpu_rt_view_to_host(y, &v, back, sizeof(back)));
  TT_CHECK(y && back[7] == 16.0f);
  if (y) tpu_storage_release(y);
  tpu_storage_release(x);
  tpu_rt_shutdown();
}

/* An event recorded after queued programs completes after they ran; a
 * shutdown with programs still queued runs them first. */
TT_TEST(runtime_launch_events_and_shutdown_wait_for_queued_programs) {
  TT_CHECK_OK(start(TPU_MODE_STRICT, 1));
  float host[64] = {0};
  int64_t n = 57;
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, host, &x));
  tpu_status_t st;
  tpu_storage_t *y = binary("add", in_of(x, n), number(5.0), &st);
  TT_CHECK_OK(st);
  tpu_rt_event_t *e;
  TT_CHECK_OK(tpu_rt_event_create(&e));
  TT_CHECK_OK(tpu_rt_event_record(e, 0));
  TT_CHECK_OK(tpu_rt_event_synchronize(e));
  tpu_rt_stats_t s;
  tpu_rt_stats(&s);
  TT_CHECK(s.executions >= 1);
  tpu_rt_event_destroy(e);
  tpu_storage_t *z = y ? binary("mul", in_of(y, n), number(7.0), &st) : NULL; /* queued or not: shutdown waits */
  TT_CHECK_OK(st);
  if (z) tpu_storage_release(z);
  if (y) tpu_storage_release(y);
  tpu_storage_release(x);
  tpu_rt_shutdown();
}
