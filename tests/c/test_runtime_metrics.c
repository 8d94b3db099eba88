/* Metrics and the recompile log (runtime/metrics.h): counters, program
 * records, and the cause of a recompile found from the nearest earlier
 * program (run under valgrind too: descriptors are freed at shutdown). */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tinytest.h"

static tpu_status_t start(tpu_eager_mode_t mode) {
  tpu_rt_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.plugin_path = tt_plugin_path();
  cfg.num_devices = 1;
  cfg.mode = mode;
  return tpu_rt_init(&cfg);
}

static tpu_view_t flat_view(int64_t n, int64_t offset) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_F32;
  v.rank = 1;
  v.sizes[0] = n;
  v.strides[0] = 1;
  v.offset = offset;
  return v;
}

/* y = x[offset : offset + n*stride : stride] doubled (an add), on a fresh x
 * of `size` elements; checks the values. */
static void add_strided(int64_t size, int64_t n, int64_t offset, int64_t stride) {
  float host[64];
  for (int i = 0; i < 64; i++) host[i] = (float)i;
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &size, 1, host, &x));
  tpu_rt_input_t in[2];
  memset(in, 0, sizeof(in));
  in[0].storage = in[1].storage = x;
  in[0].view = in[1].view = flat_view(n, offset);
  in[0].view.strides[0] = in[1].view.strides[0] = stride;
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  TT_CHECK_OK(tpu_rt_op(tpu_op_rule_find("add"), in, 2, &attrs, out, &nout));
  float back[64];
  tpu_view_t ov = flat_view(n, 0);
  TT_CHECK_OK(tpu_rt_view_to_host(out[0].storage, &ov, back, sizeof(float) * (size_t)n));
  int ok = 1;
  for (int64_t i = 0; i < n; i++) ok &= back[i] == 2.0f * (float)(offset + i * stride);
  TT_CHECK(ok);
  tpu_storage_release(out[0].storage);
  tpu_storage_release(x);
}

static void add_once(int64_t size, int64_t n, int64_t offset) { add_strided(size, n, offset, 1); }

static const tpu_rt_recompile_cause_t *cause_with(const tpu_rt_recompile_cause_t *c, int n, const char *text) {
  for (int i = 0; i < n; i++)
    if (strstr(c[i].text, text)) return &c[i];
  return NULL;
}

TT_TEST(runtime_metrics_recompile_names_the_changed_input) {
  TT_CHECK_OK(start(TPU_MODE_STRICT));
  add_once(4, 4, 0); /* first compile: no cause */
  tpu_rt_metrics_t m;
  tpu_rt_metrics(&m);
  TT_CHECK(m.compiles == 1 && m.recompiles == 0 && m.executions == 1);
  TT_CHECK(m.to_device == 1 && m.to_device_bytes == 16 && m.to_host == 1 && m.to_host_bytes == 16);
  TT_CHECK(m.cuts[TPU_CUT_OP] == 1);
  add_once(4, 4, 0); /* cached: nothing new */
  add_once(5, 5, 0); /* another shape: a recompile of add, input 0 named */
  add_once(6, 6, 0); /* the same cause again: counted, not a new cause */
  tpu_rt_metrics(&m);
  TT_CHECK(m.compiles == 3 && m.recompiles == 2 && m.executions == 4);
  tpu_rt_recompile_cause_t causes[8];
  int n = tpu_rt_recompile_causes(causes, 8);
  TT_CHECK(n == 1);
  const tpu_rt_recompile_cause_t *c = cause_with(causes, n, "input 0");
  TT_CHECK(c != NULL && c->count == 2);
  TT_CHECK(c && strstr(c->text, "add") && strstr(c->text, "float32[5]") && strstr(c->text, "(was float32[4])"));
  tpu_rt_program_info_t progs[8];
  int np = tpu_rt_programs(0, progs, 8);
  TT_CHECK(np == 3);
  TT_CHECK(np == 3 && !strcmp(progs[0].name, "add") && progs[0].executions == 2 && !progs[0].recompile);
  TT_CHECK(np == 3 && progs[1].recompile && strstr(progs[1].cause, "float32[5]"));
  TT_CHECK(np == 3 && progs[0].source == TPU_PROGRAM_COMPILED && progs[0].seconds > 0);
  /* a view with another stride: the cause is the view's stride attribute */
  add_strided(16, 4, 1, 2);
  add_strided(16, 4, 1, 3);
  n = tpu_rt_recompile_causes(causes, 8);
  c = cause_with(causes, n, "stride[0]: 3 (was 2)");
  TT_CHECK(c != NULL && c && strstr(c->text, "view_read"));
  tpu_rt_metrics_reset();
  tpu_rt_metrics(&m);
  TT_CHECK(m.compiles == 0 && m.executions == 0 && m.programs == np + 2);
  tpu_rt_shutdown();
  tpu_rt_metrics(&m);
  TT_CHECK(m.programs == 0);
}

TT_TEST(runtime_metrics_fused_cuts_are_counted_by_reason) {
  TT_CHECK_OK(start(TPU_MODE_FUSED));
  add_once(4, 4, 0); /* the read cuts the graph */
  float host[4] = {1, 2, 3, 4};
  int64_t four = 4;
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, &four, 1, host, &x));
  tpu_rt_input_t in[2];
  memset(in, 0, sizeof(in));
  in[0].storage = in[1].storage = x;
  in[0].view = in[1].view = flat_view(4, 0);
  int64_t dt = TPU_F32;
  tpu_op_attrs_t attrs = {1, &dt, 0, NULL};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  TT_CHECK_OK(tpu_rt_op(tpu_op_rule_find("mul"), in, 2, &attrs, out, &nout));
  TT_CHECK_OK(tpu_rt_flush(TPU_CUT_STEP)); /* as the optimizer's post-step hook does */
  TT_CHECK_OK(tpu_rt_synchronize());
  tpu_rt_metrics_t m;
  tpu_rt_metrics(&m);
  TT_CHECK(m.cuts[TPU_CUT_HOST_READ] == 1 && m.cuts[TPU_CUT_STEP] == 1 && m.cuts[TPU_CUT_OP] == 0);
  TT_CHECK(m.host_waits >= 2);
  TT_CHECK(!strcmp(tpu_rt_cut_name(TPU_CUT_STEP), "optimizer_step"));
  tpu_storage_release(out[0].storage);
  tpu_storage_release(x);
  tpu_rt_shutdown();
}

/* A view's offset is a runtime input: the same slice at 100 positions, and
 * an op on each, is one program (plus offset 0's own), in every mode. */
static void slices_at_offsets(tpu_eager_mode_t mode) {
  TT_CHECK_OK(start(mode));
  for (int64_t off = 0; off < 100; off++) add_strided(64 + 100, 8, off % 56, 1);
  for (int64_t off = 0; off < 20; off++) add_strided(64, 4, off, 3); /* strided: a gather at an offset */
  tpu_rt_metrics_t m;
  tpu_rt_metrics(&m);
  TT_CHECK(m.compiles + m.disk_loads <= 4);
  tpu_rt_shutdown();
}

TT_TEST(runtime_strict_views_at_new_offsets_compile_nothing) { slices_at_offsets(TPU_MODE_STRICT); }
TT_TEST(runtime_fused_views_at_new_offsets_compile_nothing) { slices_at_offsets(TPU_MODE_FUSED); }

/* A view of a small storage is read to the host without a program: the
 * storage is copied whole and the view gathered on the host (transposed,
 * strided, at an offset), with the values of the view. */
TT_TEST(runtime_small_view_reads_compile_nothing) {
  TT_CHECK_OK(start(TPU_MODE_STRICT));
  float host[24];
  for (int i = 0; i < 24; i++) host[i] = (float)i;
  int64_t dims[2] = {4, 6};
  tpu_storage_t *x;
  TT_CHECK_OK(tpu_rt_storage_from_host(0, TPU_F32, dims, 2, host, &x));
  tpu_view_t t; /* x[1:, ::2].T: sizes 3x3, strides 2,6, offset 6 */
  memset(&t, 0, sizeof(t));
  t.dtype = TPU_F32;
  t.rank = 2;
  t.sizes[0] = 3;
  t.sizes[1] = 3;
  t.strides[0] = 2;
  t.strides[1] = 6;
  t.offset = 6;
  float out[9];
  TT_CHECK_OK(tpu_rt_view_to_host(x, &t, out, sizeof(out)));
  int ok = 1;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) ok &= out[i * 3 + j] == host[6 + i * 2 + j * 6];
  TT_CHECK(ok);
  tpu_view_t one = flat_view(1, 17); /* x.view(-1)[17] */
  TT_CHECK_OK(tpu_rt_view_to_host(x, &one, out, sizeof(float)));
  TT_CHECK(out[0] == 17.0f);
  tpu_rt_metrics_t m;
  tpu_rt_metrics(&m);
  TT_CHECK(m.compiles == 0 && m.executions == 0);
  tpu_storage_release(x);
  tpu_rt_shutdown();
}
