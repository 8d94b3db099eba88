/* The engine's timeline (runtime/trace.h): what one strict add and one
 * fused graph record, in order, with keys, cuts, bytes and spans; off, it
 * records nothing (run under valgrind too: the buffer is freed at shutdown). */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/trace.h"
#include "tinytest.h"

static tpu_status_t start(tpu_eager_mode_t mode) {
  tpu_rt_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.plugin_path = tt_plugin_path();
  cfg.num_devices = 1;
  cfg.mode = mode;
  cfg.compile_threads = 0; /* compiles on this thread: a fixed order of events */
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

/* out = x + x for x = [0, n); reads it back and checks it */
static void add_and_read(int64_t n, int reads) {
  float host[16], back[16];
  for (int i = 0; i < 16; i++) host[i] = (float)i;
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &n, 1, host, &x));
  tpu_rt_input_t in[2];
  memset(in, 0, sizeof(in));
  in[0].storage = in[1].storage = x;
  in[0].view = in[1].view = flat(n);
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  TT_CHECK_OK(tpu_rt_op(tpu_op_rule_find("add"), in, 2, &attrs, out, &nout));
  tpu_view_t ov = flat(n);
  for (int r = 0; r < reads; r++) {
    TT_CHECK_OK(tpu_rt_view_to_host(out[0].storage, &ov, back, sizeof(float) * (size_t)n));
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= back[i] == 2.0f * (float)i;
    TT_CHECK(ok);
  }
  tpu_storage_release(out[0].storage);
  tpu_storage_release(x);
}

static int count_kind(const tpu_rt_trace_event_t *e, int n, tpu_rt_trace_kind_t kind) {
  int c = 0;
  for (int i = 0; i < n; i++) c += e[i].kind == kind;
  return c;
}

static const tpu_rt_trace_event_t *first_of(const tpu_rt_trace_event_t *e, int n, tpu_rt_trace_kind_t kind) {
  for (int i = 0; i < n; i++)
    if (e[i].kind == kind) return &e[i];
  return NULL;
}

TT_TEST(runtime_trace_strict_add_records_flush_compile_execute_transfers) {
  TT_CHECK_OK(start(TPU_MODE_STRICT));
  add_and_read(4, 1); /* before tracing: nothing recorded */
  enum { MAX = 256 };
  tpu_rt_trace_event_t *ev = (tpu_rt_trace_event_t *)calloc(MAX, sizeof(*ev));
  TT_CHECK(tpu_rt_trace_take(ev, MAX) == 0);
  tpu_rt_trace_start();
  tpu_rt_trace_set_tag(77);
  add_and_read(4, 1); /* the program of the first call: a memory-tier hit */
  add_and_read(7, 1); /* a new shape: compiled */
  tpu_rt_trace_set_tag(0);
  TT_CHECK_OK(tpu_rt_synchronize());
  tpu_rt_trace_stop();
  int n = tpu_rt_trace_take(ev, MAX);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_FLUSH) == 2);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_CACHE_HIT) == 1);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_COMPILE) + count_kind(ev, n, TPU_TRACE_DISK_LOAD) == 1);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_EXECUTE) == 2);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_TO_DEVICE) == 2 && count_kind(ev, n, TPU_TRACE_TO_HOST) == 2);
  const tpu_rt_trace_event_t *f = first_of(ev, n, TPU_TRACE_FLUSH);
  const tpu_rt_trace_event_t *h = first_of(ev, n, TPU_TRACE_CACHE_HIT);
  const tpu_rt_trace_event_t *x = first_of(ev, n, TPU_TRACE_EXECUTE);
  TT_CHECK(f && f->cut == TPU_CUT_OP && f->ops >= 1 && f->tag == 77 && f->device == 0 && !strcmp(f->name, "add"));
  TT_CHECK(f && h && h->key == f->key);
  /* the execution carries its flush's tag, cut and device, and a span */
  TT_CHECK(f && x && x->key == f->key && x->tag == 77 && x->cut == TPU_CUT_OP && x->device == 0);
  TT_CHECK(x && x->end >= x->start && x->start >= f->end && !strcmp(x->name, "add"));
  for (int i = 0; i < n; i++) {
    if (ev[i].kind == TPU_TRACE_TO_DEVICE || ev[i].kind == TPU_TRACE_TO_HOST)
      TT_CHECK(ev[i].bytes == 16 || ev[i].bytes == 28);
    if (ev[i].kind == TPU_TRACE_COMPILE) TT_CHECK(ev[i].end > ev[i].start && strstr(ev[i].name, "add"));
  }
  TT_CHECK(tpu_rt_trace_take(ev, MAX) == 0);
  /* off: nothing */
  add_and_read(4, 1);
  TT_CHECK(tpu_rt_trace_take(ev, MAX) == 0 && tpu_rt_trace_dropped() == 0);
  free(ev);
  tpu_rt_shutdown();
}

TT_TEST(runtime_trace_fused_graph_is_one_flush_cut_by_the_host_read) {
  TT_CHECK_OK(start(TPU_MODE_FUSED));
  enum { MAX = 256 };
  tpu_rt_trace_event_t *ev = (tpu_rt_trace_event_t *)calloc(MAX, sizeof(*ev));
  tpu_rt_trace_start();
  add_and_read(5, 2); /* the second read needs no program */
  TT_CHECK_OK(tpu_rt_synchronize());
  tpu_rt_trace_stop();
  int n = tpu_rt_trace_take(ev, MAX);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_FLUSH) == 1 && count_kind(ev, n, TPU_TRACE_EXECUTE) == 1);
  const tpu_rt_trace_event_t *f = first_of(ev, n, TPU_TRACE_FLUSH);
  const tpu_rt_trace_event_t *x = first_of(ev, n, TPU_TRACE_EXECUTE);
  TT_CHECK(f && f->cut == TPU_CUT_HOST_READ && f->rec_start <= f->rec_end);
  TT_CHECK(f && x && x->rec_start == f->rec_start && x->rec_end == f->rec_end && x->cut == TPU_CUT_HOST_READ);
  TT_CHECK(count_kind(ev, n, TPU_TRACE_HOST_WAIT) >= 1);
  tpu_rt_trace_mark(TPU_TRACE_FALLBACK, "aten::x", 1.0, 2.0, 0); /* off: not kept */
  TT_CHECK(tpu_rt_trace_take(ev, MAX) == 0);
  free(ev);
  tpu_rt_shutdown();
}
