/* Device-side checks (ops.h tpu_op_check*, runtime/errors.h): rules built
 * here in the test file (a one-axis gather with an index check, an integer
 * division with a divisor check, a generic tpu_op_check) run through the
 * runtime in strict, debug and fused mode.  A bad index or divisor raises at
 * the next host wait (at the op in debug mode) with the op's message and the
 * bad value, once; good inputs raise nothing; the device keeps working.
 * Named runtime_* so that `make valgrind` covers them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/errors.h"
#include "runtime/runtime.h"
#include "tinytest.h"

/* ---- the test rules ------------------------------------------------------------ */

/* tgather: (x [n], idx [k] integer) -> x[idx]; attrs [check?]. */
static void rule_tgather(tpu_op_ctx_t *c) {
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  int64_t n = xt.dims[0];
  if (tpu_op_nints(c) == 0 || tpu_op_int(c, 0))
    tpu_op_check_index(c, c->in[1], 0, n, TPU_OUT_OF_RANGE,
                       "tgather(): index " TPU_OP_PAYLOAD " is out of bounds for dimension 0 with size %lld "
                       "(self %s, index [%lld])",
                       (long long)n, "[n]", (long long)it.dims[0]);
  int64_t dims[2] = {it.dims[0], 1};
  tpu_hlo_value_t coords = tpu_hlo_reshape(c->f, tpu_hlo_cast(c->f, c->in[1], TPU_S64), 2, dims);
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  gd.ncollapsed = 1;
  gd.nstart_map = 1;
  gd.slice_sizes[0] = 1;
  gd.index_vector_dim = 1;
  tpu_op_set_output(c, tpu_hlo_gather(c->f, c->in[0], coords, &gd));
}

/* tdiv: (a, b) same shape, integer -> a / b (truncating). */
static void rule_tdiv(tpu_op_ctx_t *c) {
  tpu_op_check_nonzero(c, c->in[1], "ZeroDivisionError");
  tpu_op_set_output(c, tpu_hlo_binary(c->f, "divide", c->in[0], c->in[1]));
}

/* tsqrt: (x f32) -> sqrt(x); a generic check x >= 0, no payload. */
static void rule_tsqrt(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  tpu_op_check(c, tpu_hlo_compare(c->f, "GE", c->in[0], tpu_hlo_constant(c->f, t, 0)), TPU_HLO_NONE,
               TPU_INVALID_ARGUMENT, "tsqrt(): negative input");
  tpu_op_set_output(c, tpu_hlo_unary(c->f, "sqrt", c->in[0]));
}

static const tpu_op_rule_t k_tgather = {"tgather", rule_tgather, 2, 2};
static const tpu_op_rule_t k_tdiv = {"tdiv", rule_tdiv, 2, 2};
static const tpu_op_rule_t k_tsqrt = {"tsqrt", rule_tsqrt, 1, 1};

/* ---- helpers -------------------------------------------------------------------- */

static tpu_status_t start(tpu_eager_mode_t mode) {
  tpu_rt_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.plugin_path = tt_plugin_path();
  cfg.num_devices = 1;
  cfg.mode = mode;
  return tpu_rt_init(&cfg);
}

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

static tpu_storage_t *upload(tpu_dtype_t dt, int64_t n, const void *data) {
  tpu_storage_t *s = NULL;
  tpu_status_t st = tpu_rt_storage_from_host(0, dt, &n, 1, data, &s);
  if (st) {
    fprintf(stderr, "  upload: %s\n", tpu_status_message(st));
    tpu_status_free(st);
  }
  return s;
}

/* Runs a 2-input rule; returns its status, the output storage in *out. */
static tpu_status_t op2(const tpu_op_rule_t *rule, tpu_rt_input_t a, tpu_rt_input_t b, int check_attr,
                        tpu_storage_t **out) {
  tpu_rt_input_t ins[2] = {a, b};
  int64_t attr = check_attr;
  tpu_op_attrs_t attrs = {check_attr >= 0 ? 1 : 0, &attr, 0, NULL};
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  *out = NULL;
  tpu_status_t st = tpu_rt_op(rule, ins, 2, &attrs, outs, &nout);
  if (!st) *out = outs[0].storage;
  return st;
}

static tpu_status_t read_f32(tpu_storage_t *s, int64_t n, float *dst) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_F32;
  v.rank = 1;
  v.sizes[0] = n;
  v.strides[0] = 1;
  return tpu_rt_view_to_host(s, &v, dst, sizeof(float) * (size_t)n);
}

static tpu_status_t read_s32(tpu_storage_t *s, int64_t n, int32_t *dst) {
  tpu_view_t v;
  memset(&v, 0, sizeof(v));
  v.dtype = TPU_S32;
  v.rank = 1;
  v.sizes[0] = n;
  v.strides[0] = 1;
  return tpu_rt_view_to_host(s, &v, dst, sizeof(int32_t) * (size_t)n);
}

/* Checks st is an error of `code` whose message contains `want`; frees it. */
static int is_error(tpu_status_t st, tpu_code_t code, const char *want) {
  int ok = st && tpu_status_code(st) == code && strstr(tpu_status_message(st), want);
  if (!ok)
    fprintf(stderr, "  expected %s \"%s\", got %s \"%s\"\n", tpu_code_name(code), want,
            st ? tpu_code_name(tpu_status_code(st)) : "OK", st ? tpu_status_message(st) : "");
  tpu_status_free(st);
  return ok;
}

/* The error a bad op raises: at the op in debug mode, else at the next read. */
static int bad_op_raises(tpu_eager_mode_t mode, tpu_status_t op_status, tpu_storage_t *out, int64_t n,
                         tpu_code_t code, const char *want) {
  if (mode == TPU_MODE_DEBUG) return is_error(op_status, code, want) && out == NULL;
  if (op_status) {
    fprintf(stderr, "  the op itself failed: %s\n", tpu_status_message(op_status));
    tpu_status_free(op_status);
    return 0;
  }
  float buf[16];
  int ok = is_error(read_f32(out, n, buf), code, want);
  tpu_storage_release(out);
  return ok;
}

/* ---- the scenario, per mode --------------------------------------------------------- */

static void checks_in_mode(tpu_eager_mode_t mode) {
  TT_CHECK_OK(start(mode));
  float xh[5] = {10, 11, 12, 13, 14};
  int64_t good[3] = {4, 0, 2}, bad[3] = {1, 7, 9}, neg[2] = {0, -1};
  tpu_storage_t *x = upload(TPU_F32, 5, xh), *ig = upload(TPU_S64, 3, good), *ib = upload(TPU_S64, 3, bad),
                *in = upload(TPU_S64, 2, neg);
  TT_CHECK(x && ig && ib && in);
  tpu_storage_t *y = NULL;
  float r[3];

  /* 1. good indices: values, no error, also at synchronize */
  TT_CHECK_OK(op2(&k_tgather, whole(x, TPU_F32, 5), whole(ig, TPU_S64, 3), -1, &y));
  TT_CHECK_OK(read_f32(y, 3, r));
  TT_CHECK(r[0] == 14 && r[1] == 10 && r[2] == 12);
  TT_CHECK_OK(tpu_rt_synchronize());
  tpu_storage_release(y);

  /* 2. a bad index raises IndexError-coded with the op, the first bad index
   * and the sizes; once */
  tpu_status_t st = op2(&k_tgather, whole(x, TPU_F32, 5), whole(ib, TPU_S64, 3), -1, &y);
  TT_CHECK(bad_op_raises(mode, st, y, 3, TPU_OUT_OF_RANGE,
                         "tgather(): index 7 is out of bounds for dimension 0 with size 5 (self [n], index [3])"));
  TT_CHECK_OK(tpu_rt_synchronize()); /* reported once */

  /* 3. the device keeps working: the same program with good data */
  TT_CHECK_OK(op2(&k_tgather, whole(x, TPU_F32, 5), whole(ig, TPU_S64, 3), -1, &y));
  TT_CHECK_OK(read_f32(y, 3, r));
  TT_CHECK(r[0] == 14 && r[1] == 10 && r[2] == 12);
  tpu_storage_release(y);

  /* 4. a negative index (the check's lower bound) */
  st = op2(&k_tgather, whole(x, TPU_F32, 5), whole(in, TPU_S64, 2), -1, &y);
  TT_CHECK(bad_op_raises(mode, st, y, 2, TPU_OUT_OF_RANGE, "index -1 is out of bounds"));

  /* 5. integer division by zero: RuntimeError-coded "ZeroDivisionError" */
  int32_t a[4] = {7, -9, 4, 1}, b[4] = {2, 3, 0, 1}, b2[4] = {2, 3, -4, 1};
  tpu_storage_t *sa = upload(TPU_S32, 4, a), *sb = upload(TPU_S32, 4, b), *sb2 = upload(TPU_S32, 4, b2);
  st = op2(&k_tdiv, whole(sa, TPU_S32, 4), whole(sb, TPU_S32, 4), -1, &y);
  if (mode == TPU_MODE_DEBUG) {
    TT_CHECK(is_error(st, TPU_INVALID_ARGUMENT, "ZeroDivisionError"));
  } else {
    TT_CHECK(st == NULL);
    int32_t q[4];
    TT_CHECK(is_error(read_s32(y, 4, q), TPU_INVALID_ARGUMENT, "ZeroDivisionError"));
    tpu_storage_release(y);
  }
  TT_CHECK_OK(op2(&k_tdiv, whole(sa, TPU_S32, 4), whole(sb2, TPU_S32, 4), -1, &y));
  int32_t q[4];
  TT_CHECK_OK(read_s32(y, 4, q));
  TT_CHECK(q[0] == 3 && q[1] == -3 && q[2] == -1 && q[3] == 1);
  tpu_storage_release(y);

  /* 6. the first error wins (two bad ops before the host waits), and a read
   * of an unrelated tensor reports it (the CUDA contract), synchronize too */
  if (mode != TPU_MODE_DEBUG) {
    tpu_storage_t *y1 = NULL, *y2 = NULL;
    TT_CHECK_OK(op2(&k_tdiv, whole(sa, TPU_S32, 4), whole(sb, TPU_S32, 4), -1, &y1));
    TT_CHECK_OK(op2(&k_tgather, whole(x, TPU_F32, 5), whole(ib, TPU_S64, 3), -1, &y2));
    float xr[5];
    /* fused: x is already on the device, its read runs nothing pending;
     * once the pending ops ran (a flush), the read reports */
    if (mode == TPU_MODE_FUSED) {
      TT_CHECK_OK(read_f32(x, 5, xr));
      TT_CHECK_OK(tpu_rt_flush(TPU_CUT_OTHER));
    }
    TT_CHECK(is_error(read_f32(x, 5, xr), TPU_INVALID_ARGUMENT, "ZeroDivisionError"));
    TT_CHECK_OK(read_f32(x, 5, xr)); /* once */
    TT_CHECK(xr[4] == 14);
    TT_CHECK_OK(op2(&k_tgather, whole(x, TPU_F32, 5), whole(ib, TPU_S64, 3), -1, &y));
    TT_CHECK(is_error(tpu_rt_synchronize(), TPU_OUT_OF_RANGE, "index 7"));
    tpu_storage_release(y);
    tpu_storage_release(y1);
    tpu_storage_release(y2);
  }

  /* 7. a generic check without payload; a program mixing checked and
   * unchecked ops; the same rule without its check raises nothing */
  float sx[3] = {4, -1, 9};
  tpu_storage_t *s3 = upload(TPU_F32, 3, sx);
  tpu_rt_input_t sin = whole(s3, TPU_F32, 3);
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout;
  st = tpu_rt_op(&k_tsqrt, &sin, 1, NULL, outs, &nout);
  if (mode == TPU_MODE_DEBUG) {
    TT_CHECK(is_error(st, TPU_INVALID_ARGUMENT, "tsqrt(): negative input"));
  } else {
    TT_CHECK(st == NULL);
    TT_CHECK(is_error(tpu_rt_synchronize(), TPU_INVALID_ARGUMENT, "tsqrt(): negative input"));
    tpu_storage_release(outs[0].storage);
  }
  TT_CHECK_OK(op2(&k_tgather, whole(x, TPU_F32, 5), whole(ib, TPU_S64, 3), 0, &y)); /* check off */
  TT_CHECK_OK(read_f32(y, 3, r));
  TT_CHECK(r[0] == 11); /* x[1]; 7 and 9 are clamped by the gather */
  tpu_storage_release(y);

  tpu_storage_release(s3);
  tpu_storage_release(sa);
  tpu_storage_release(sb);
  tpu_storage_release(sb2);
  tpu_storage_release(x);
  tpu_storage_release(ig);
  tpu_storage_release(ib);
  tpu_storage_release(in);
  tpu_rt_stats_t stats;
  tpu_rt_stats(&stats);
  TT_CHECK(stats.live_storages == 0);
  tpu_rt_shutdown();
}

TT_TEST(runtime_device_checks_strict) { checks_in_mode(TPU_MODE_STRICT); }
TT_TEST(runtime_device_checks_debug) { checks_in_mode(TPU_MODE_DEBUG); }
TT_TEST(runtime_device_checks_fused) { checks_in_mode(TPU_MODE_FUSED); }

/* In fused mode, several checked ops in one program: good data gives the
 * values, no error; one bad op among good ones names the bad one. */
TT_TEST(runtime_device_checks_fused_program) {
  TT_CHECK_OK(start(TPU_MODE_FUSED));
  float xh[5] = {10, 11, 12, 13, 14};
  int64_t good[3] = {4, 0, 2}, bad[3] = {0, 0, 5};
  tpu_storage_t *x = upload(TPU_F32, 5, xh), *ig = upload(TPU_S64, 3, good), *ig2 = upload(TPU_S64, 3, good),
                *ib = upload(TPU_S64, 3, bad);
  tpu_storage_t *y[4] = {NULL};
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 4; i++) /* op 2 reads a second index tensor: good, then bad */
      TT_CHECK_OK(op2(&k_tgather, whole(x, TPU_F32, 5), whole(i == 2 ? (round ? ib : ig2) : ig, TPU_S64, 3), -1,
                      &y[i]));
    TT_CHECK(tpu_rt_pending_nodes() == 4);
    float r[3];
    tpu_status_t st = read_f32(y[0], 3, r);
    if (round == 0) {
      TT_CHECK(st == NULL && r[0] == 14 && r[2] == 12);
      tpu_status_free(st);
    } else {
      TT_CHECK(is_error(st, TPU_OUT_OF_RANGE, "index 5 is out of bounds for dimension 0 with size 5"));
    }
    for (int i = 0; i < 4; i++) tpu_storage_release(y[i]);
  }
  tpu_rt_stats_t s;
  tpu_rt_stats(&s);
  TT_CHECK(s.compiles == 1); /* the same program both rounds: checks add no recompiles */
  tpu_storage_release(x);
  tpu_storage_release(ig);
  tpu_storage_release(ig2);
  tpu_storage_release(ib);
  tpu_rt_shutdown();
}

/* The program text: a graph without checks has no error-state argument or
 * result; the fold adds one s64[2] of each and the table maps the id back. */
TT_TEST(runtime_device_checks_lowering) {
  tpu_hlo_module_t *m;
  TT_CHECK_OK(tpu_hlo_module_create("t", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  int64_t n5 = 5, n3 = 3;
  tpu_hlo_value_t in[2] = {tpu_hlo_func_arg(f, tpu_hlo_type_make(TPU_F32, 1, &n5)),
                           tpu_hlo_func_arg(f, tpu_hlo_type_make(TPU_S64, 1, &n3))};
  tpu_op_checks_t checks = {0};
  tpu_hlo_value_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  int64_t off = 0;
  tpu_op_attrs_t a = {1, &off, 0, NULL};
  TT_CHECK_OK(tpu_op_lower_checked(&k_tgather, f, in, 2, &a, &checks, out, &nout));
  TT_CHECK(checks.n == 0); /* the rule's check switched off: nothing collected */
  off = 1;
  TT_CHECK_OK(tpu_op_lower_checked(&k_tgather, f, in, 2, &a, &checks, out, &nout));
  TT_CHECK(checks.n == 1 && checks.v[0].code == TPU_OUT_OF_RANGE);
  TT_CHECK(tpu_hlo_type_of(f, checks.v[0].ok)->dtype == TPU_PRED && tpu_hlo_type_of(f, checks.v[0].ok)->rank == 0);
  TT_CHECK(tpu_hlo_type_of(f, checks.v[0].payload)->dtype == TPU_S64);
  /* tpu_op_lower (no collector) drops checks */
  TT_CHECK_OK(tpu_op_lower(&k_tgather, f, in, 2, &a, out, &nout));
  TT_CHECK(checks.n == 1);
  tpu_hlo_value_t state = tpu_hlo_func_arg(f, tpu_err_state_type());
  tpu_hlo_value_t ns = tpu_err_fold(f, state, &checks);
  tpu_hlo_value_t rets[2] = {out[0], ns};
  tpu_hlo_func_return(f, rets, 2);
  const char *text;
  size_t len;
  TT_CHECK_OK(tpu_hlo_module_text(m, &text, &len));
  TT_CHECK(strstr(text, "tensor<2xi64>") != NULL);
  /* the id in the text maps back to the message with the payload */
  const char *p = strstr(text, "dense<");
  int64_t id = -1;
  while (p) { /* the fold's only large positive constant is the id */
    long long v = atoll(p + 6);
    if (v > 1000) id = v;
    p = strstr(p + 6, "dense<");
  }
  TT_CHECK(id > 0);
  int64_t host[2] = {id, 42};
  tpu_status_t st = tpu_err_status(host, NULL);
  TT_CHECK(is_error(st, TPU_OUT_OF_RANGE, "tgather(): index 42 is out of bounds for dimension 0 with size 5"));
  int64_t clean[2];
  tpu_err_state_clean(clean);
  TT_CHECK(tpu_err_status(clean, NULL) == NULL);
  int64_t unknown[2] = {12345, 1};
  TT_CHECK(is_error(tpu_err_status(unknown, NULL), TPU_INTERNAL, "device-side check failed"));
  tpu_op_checks_free(&checks);
  tpu_hlo_module_destroy(m);
  tpu_err_table_clear();
}

/* ---- assert_async (csrc/ops/elementwise.c), the real rule ------------------------- */

/* Runs assert_async on s (n elements) with message msg ("" = the rule's
 * default) and drops its output at once: in fused mode the pending graph
 * then has no live output, only the check, and must still run. */
static tpu_status_t assert_async(tpu_storage_t *s, tpu_dtype_t dt, int64_t n, const char *msg) {
  int64_t ints[1 + 8] = {(int64_t)strlen(msg)};
  for (size_t i = 0; i < strlen(msg); i++)
    ints[1 + i / 8] = (int64_t)((uint64_t)ints[1 + i / 8] | ((uint64_t)(unsigned char)msg[i] << (8 * (i % 8))));
  tpu_op_attrs_t attrs = {1 + (int)((strlen(msg) + 7) / 8), ints, 0, NULL};
  tpu_rt_input_t in = whole(s, dt, n);
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(tpu_op_rule_find("assert_async"), &in, 1, &attrs, outs, &nout);
  for (int i = 0; i < nout; i++) tpu_storage_release(outs[i].storage);
  return st;
}

static void assert_async_in_mode(tpu_eager_mode_t mode) {
  TT_CHECK_OK(start(mode));
  float zero = 0.0f, nan = NAN;
  int32_t seven = 7;
  tpu_storage_t *z = upload(TPU_F32, 1, &zero), *q = upload(TPU_F32, 1, &nan), *s = upload(TPU_S32, 1, &seven);
  TT_CHECK(z && q && s);
  /* a zero: the user's message, or CPU's default one */
  const char *msgs[2] = {"rope: position out of range", ""};
  const char *want[2] = {"rope: position out of range", "Expected Tensor with single nonzero value, but got zero"};
  for (int k = 0; k < 2; k++) {
    tpu_status_t st = assert_async(z, TPU_F32, 1, msgs[k]);
    if (mode == TPU_MODE_DEBUG) {
      TT_CHECK(is_error(st, TPU_INVALID_ARGUMENT, want[k]));
    } else {
      TT_CHECK(st == NULL);
      TT_CHECK(is_error(tpu_rt_synchronize(), TPU_INVALID_ARGUMENT, want[k]));
    }
    TT_CHECK_OK(tpu_rt_synchronize()); /* once */
  }
  /* non-zero values (NaN is) raise nothing */
  TT_CHECK_OK(assert_async(q, TPU_F32, 1, "nan"));
  TT_CHECK_OK(assert_async(s, TPU_S32, 1, "seven"));
  TT_CHECK_OK(tpu_rt_synchronize());
  /* malformed attrs: the op fails at once, naming the rule */
  int64_t bad[1] = {5};
  tpu_op_attrs_t attrs = {1, bad, 0, NULL};
  tpu_rt_input_t in = whole(z, TPU_F32, 1);
  tpu_rt_output_t outs[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  TT_CHECK(is_error(tpu_rt_op(tpu_op_rule_find("assert_async"), &in, 1, &attrs, outs, &nout),
                    TPU_INVALID_ARGUMENT, "assert_async: malformed message attributes"));
  tpu_storage_release(z);
  tpu_storage_release(q);
  tpu_storage_release(s);
  tpu_rt_stats_t stats;
  tpu_rt_stats(&stats);
  TT_CHECK(stats.live_storages == 0);
  tpu_rt_shutdown();
}

TT_TEST(runtime_device_checks_assert_async_strict) { assert_async_in_mode(TPU_MODE_STRICT); }
TT_TEST(runtime_device_checks_assert_async_debug) { assert_async_in_mode(TPU_MODE_DEBUG); }
TT_TEST(runtime_device_checks_assert_async_fused) { assert_async_in_mode(TPU_MODE_FUSED); }
