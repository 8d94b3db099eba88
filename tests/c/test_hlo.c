/* test_hlo.c - the StableHLO builder, proven on the real plugin.
 *
 * Every emitter is exercised by building a program with it, compiling and
 * running that program on the CPU plugin (tt_client()), and comparing the
 * results with values computed here in C.  Text-level tests cover what the
 * plugin cannot see (type strings, sticky errors, messages).
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hlo/hlo.h"
#include "tinytest.h"

/* ---- harness ------------------------------------------------------------------ */

#define HB_MAX 24
typedef struct {
  tpu_hlo_module_t *m;
  tpu_hlo_func_t *f;
  int nrep;
  int nin;
  tpu_hlo_type_t in_t[HB_MAX];
  const void *in_d[2][HB_MAX];
  int nout;
  tpu_hlo_type_t out_t[HB_MAX];
  void *out[2][HB_MAX];
} hb_t;

static tpu_hlo_func_t *hb_init(hb_t *b, const char *name, int nrep) {
  memset(b, 0, sizeof(*b));
  b->nrep = nrep < 1 ? 1 : nrep;
  tpu_status_t st = tpu_hlo_module_create(name, &b->m);
  if (st) {
    fprintf(stderr, "  module create: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
    return NULL;
  }
  b->f = tpu_hlo_module_main(b->m);
  return b->f;
}

/* An argument with its host data (per replica: d1 may be NULL = same). */
static tpu_hlo_value_t hb_arg2(hb_t *b, tpu_hlo_type_t t, const void *d0, const void *d1) {
  b->in_t[b->nin] = t;
  b->in_d[0][b->nin] = d0;
  b->in_d[1][b->nin] = d1 ? d1 : d0;
  b->nin++;
  return tpu_hlo_func_arg(b->f, t);
}
static tpu_hlo_value_t hb_arg(hb_t *b, tpu_hlo_type_t t, const void *d) { return hb_arg2(b, t, d, NULL); }

static tpu_hlo_type_t ty(tpu_dtype_t dt, int rank, ...) {
  int64_t dims[TPU_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, int64_t);
  va_end(ap);
  return tpu_hlo_type_make(dt, rank, dims);
}
#define TY(dt, ...) ty((dt), PP_NARG(__VA_ARGS__), __VA_ARGS__)
#define TY0(dt) tpu_hlo_type_scalar(dt)
#define PP_NARG(...) PP_NARG_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1)
#define PP_NARG_(_1, _2, _3, _4, _5, _6, _7, _8, N, ...) N
/* dims as int64_t varargs */
#define D(x) ((int64_t)(x))

static void hb_dump(hb_t *b) {
  const char *text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_hlo_module_text(b->m, &text, &len);
  if (st) tpu_status_free(st);
  else fprintf(stderr, "---- module text ----\n%s---------------------\n", text);
}

/* Sets the results, compiles, uploads, runs, downloads.  1 on success. */
static int hb_run(hb_t *b, const tpu_hlo_value_t *rets, int n) {
  if (!b->f) return 0;
  tpu_hlo_func_return(b->f, rets, n);
  b->nout = n;
  for (int i = 0; i < n; i++) b->out_t[i] = *tpu_hlo_type_of(b->f, rets[i]);
  const char *text = NULL;
  size_t len = 0;
  tpu_status_t st = tpu_hlo_module_text(b->m, &text, &len);
  if (st) {
    fprintf(stderr, "  module text: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    tt_failed_checks++;
    return 0;
  }
  tpu_pjrt_client_t *c = tt_client();
  if (!c) {
    tt_failed_checks++;
    return 0;
  }
  tpu_pjrt_exec_t *e = NULL;
  tpu_pjrt_compile_options_t co = {.num_replicas = b->nrep};
  st = tpu_pjrt_compile(c, text, len, &co, &e);
  if (st) {
    fprintf(stderr, "  compile: %s\n", tpu_status_message(st));
    tpu_status_free(st);
    hb_dump(b);
    tt_failed_checks++;
    return 0;
  }
  int ok = 1;
  tpu_pjrt_buffer_t *in[2][HB_MAX] = {{0}}, *out[2][HB_MAX] = {{0}};
  for (int r = 0; r < b->nrep && ok; r++)
    for (int i = 0; i < b->nin && ok; i++) {
      st = tpu_pjrt_buffer_from_host(c, r, b->in_t[i].dtype, b->in_t[i].dims, b->in_t[i].rank, b->in_d[r][i],
                                     &in[r][i]);
      if (st) {
        fprintf(stderr, "  upload %d: %s\n", i, tpu_status_message(st));
        tpu_status_free(st);
        ok = 0;
      }
    }
  if (ok) {
    tpu_pjrt_buffer_t *const *lists[2] = {in[0], in[1]};
    tpu_pjrt_buffer_t **outs[2] = {out[0], out[1]};
    tpu_pjrt_execute_options_t o = {.wait = true};
    st = tpu_pjrt_execute(e, lists, (size_t)b->nrep, (size_t)b->nin, &o, outs);
    if (st) {
      fprintf(stderr, "  execute: %s\n", tpu_status_message(st));
      tpu_status_free(st);
      hb_dump(b);
      ok = 0;
    }
  }
  for (int r = 0; r < b->nrep && ok; r++)
    for (int i = 0; i < n; i++) {
      size_t sz = (size_t)tpu_hlo_type_numel(&b->out_t[i]) * tpu_dtype_size(b->out_t[i].dtype);
      b->out[r][i] = calloc(1, sz ? sz : 1);
      if (tpu_pjrt_buffer_nbytes(out[r][i]) != sz) {
        fprintf(stderr, "  output %d: %zu bytes, builder type says %zu\n", i, tpu_pjrt_buffer_nbytes(out[r][i]), sz);
        ok = 0;
        continue;
      }
      st = tpu_pjrt_buffer_to_host(out[r][i], b->out[r][i], sz);
      if (st) {
        fprintf(stderr, "  download %d: %s\n", i, tpu_status_message(st));
        tpu_status_free(st);
        ok = 0;
      }
    }
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < HB_MAX; i++) {
      tpu_pjrt_buffer_destroy(in[r][i]);
      tpu_pjrt_buffer_destroy(out[r][i]);
    }
  tpu_pjrt_exec_destroy(e);
  if (!ok) tt_failed_checks++;
  return ok;
}

static void hb_free(hb_t *b) {
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < HB_MAX; i++) free(b->out[r][i]);
  tpu_hlo_module_destroy(b->m);
  memset(b, 0, sizeof(*b));
}

#define OUT(b, i, T) ((const T *)(b).out[0][i])
#define OUTR(b, r, i, T) ((const T *)(b).out[r][i])

/* Compares n floats: relative/absolute tolerance, NaN == NaN. */
static int near_f(const float *got, const float *want, int n, double tol, const char *what) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(w) && isnan(g)) continue;
    if (isinf(w) && g == w) continue;
    double d = fabs(g - w), lim = tol * (fabs(w) > 1 ? fabs(w) : 1);
    if (!(d <= lim)) {
      if (bad < 4) fprintf(stderr, "  %s[%d] = %.9g, expected %.9g\n", what, i, g, w);
      bad++;
    }
  }
  if (bad) tt_failed_checks++;
  return !bad;
}

static int eq_i64(const int64_t *got, const int64_t *want, int n, const char *what) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (bad < 4) fprintf(stderr, "  %s[%d] = %lld, expected %lld\n", what, i, (long long)got[i], (long long)want[i]);
      bad++;
    }
  if (bad) tt_failed_checks++;
  return !bad;
}

static int eq_i32(const int32_t *got, const int32_t *want, int n, const char *what) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (bad < 4) fprintf(stderr, "  %s[%d] = %d, expected %d\n", what, i, got[i], want[i]);
      bad++;
    }
  if (bad) tt_failed_checks++;
  return !bad;
}

static int eq_u8(const uint8_t *got, const uint8_t *want, int n, const char *what) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (bad < 4) fprintf(stderr, "  %s[%d] = %u, expected %u\n", what, i, got[i], want[i]);
      bad++;
    }
  if (bad) tt_failed_checks++;
  return !bad;
}

/* Checks the sticky status holds a message containing every needle. */
static void expect_error(tpu_hlo_func_t *f, const char *n1, const char *n2) {
  tpu_status_t st = tpu_hlo_func_status(f);
  TT_CHECK(st != NULL);
  if (!st) return;
  const char *msg = tpu_status_message(st);
  if ((n1 && !strstr(msg, n1)) || (n2 && !strstr(msg, n2))) {
    fprintf(stderr, "  message \"%s\" lacks \"%s\" / \"%s\"\n", msg, n1 ? n1 : "", n2 ? n2 : "");
    tt_failed_checks++;
  }
}

/* ---- text level -------------------------------------------------------------------- */

TT_TEST(hlo_text_types_and_module) {
  char buf[128];
  tpu_hlo_type_t t = TY(TPU_F32, D(2), D(3));
  TT_CHECK(!strcmp(tpu_hlo_type_str(&t, buf, sizeof(buf)), "tensor<2x3xf32>"));
  t = TY0(TPU_BF16);
  TT_CHECK(!strcmp(tpu_hlo_type_str(&t, buf, sizeof(buf)), "tensor<bf16>"));
  t = TY(TPU_U8, D(0), D(7));
  TT_CHECK(!strcmp(tpu_hlo_type_str(&t, buf, sizeof(buf)), "tensor<0x7xui8>"));
  TT_CHECK(tpu_hlo_type_numel(&t) == 0);
  /* a small buffer truncates, NUL-terminated */
  tpu_hlo_type_str(&t, buf, 5);
  TT_CHECK(!strcmp(buf, "tens"));
  tpu_hlo_type_t a = TY(TPU_F32, D(2)), b2 = TY(TPU_F32, D(2)), c = TY(TPU_S32, D(2));
  TT_CHECK(tpu_hlo_type_equal(&a, &b2) && !tpu_hlo_type_equal(&a, &c));

  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("aten::add.Tensor", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t x = tpu_hlo_func_arg(f, TY(TPU_F32, D(2), D(3)));
  tpu_hlo_value_t y = tpu_hlo_func_arg(f, TY(TPU_F32, D(2), D(3)));
  TT_CHECK(tpu_hlo_func_num_args(f) == 2);
  tpu_hlo_value_t s = tpu_hlo_binary(f, "add", x, y);
  TT_CHECK(tpu_hlo_type_equal(tpu_hlo_type_of(f, s), tpu_hlo_type_of(f, x)));
  const char *text = NULL;
  size_t len = 0;
  /* no results yet: an error, not a crash */
  tpu_status_t st = tpu_hlo_module_text(m, &text, &len);
  TT_CHECK(st && strstr(tpu_status_message(st), "no results"));
  tpu_status_free(st);
  tpu_hlo_module_destroy(m);

  TT_CHECK_OK(tpu_hlo_module_create("aten::add.Tensor", &m));
  f = tpu_hlo_module_main(m);
  x = tpu_hlo_func_arg(f, TY(TPU_F32, D(2), D(3)));
  y = tpu_hlo_func_arg(f, TY(TPU_F32, D(2), D(3)));
  s = tpu_hlo_binary(f, "add", x, y);
  tpu_hlo_func_alias(f, 0, 0);
  tpu_hlo_func_return(f, &s, 1);
  TT_CHECK_OK(tpu_hlo_module_text(m, &text, &len));
  TT_CHECK(len == strlen(text));
  TT_CHECK(strstr(text, "module @aten__add.Tensor {") != NULL);
  TT_CHECK(strstr(text, "func.func public @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}, "
                        "%arg1: tensor<2x3xf32>) -> (tensor<2x3xf32>)") != NULL);
  TT_CHECK(strstr(text, "= \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>") != NULL);
  TT_CHECK(strstr(text, "\"func.return\"(%2) : (tensor<2x3xf32>) -> ()") != NULL);
  /* text is stable across calls */
  const char *text2 = NULL;
  TT_CHECK_OK(tpu_hlo_module_text(m, &text2, NULL));
  TT_CHECK(!strcmp(text, text2));
  tpu_hlo_module_destroy(m);
}

TT_TEST(hlo_text_float_literals_round_trip) {
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("lits", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t v[8];
  v[0] = tpu_hlo_scalar(f, TPU_F32, INFINITY);
  v[1] = tpu_hlo_scalar(f, TPU_BF16, -INFINITY);
  v[2] = tpu_hlo_scalar(f, TPU_F16, 0.1);
  v[3] = tpu_hlo_scalar(f, TPU_BF16, 0.1);
  v[4] = tpu_hlo_scalar(f, TPU_F64, 0.1);
  v[5] = tpu_hlo_scalar(f, TPU_F16, 65520.0); /* rounds to inf in f16 */
  v[6] = tpu_hlo_scalar(f, TPU_F16, 5.960464477539063e-08); /* least f16 subnormal */
  v[7] = tpu_hlo_scalar(f, TPU_BF16, 1.00390625); /* tie: rounds to even 1.0 */
  tpu_hlo_func_return(f, v, 8);
  const char *text = NULL;
  TT_CHECK_OK(tpu_hlo_module_text(m, &text, NULL));
  TT_CHECK(strstr(text, "dense<0x7F800000> : tensor<f32>") != NULL);
  TT_CHECK(strstr(text, "dense<0xFF80> : tensor<bf16>") != NULL);
  TT_CHECK(strstr(text, "dense<0x2E66> : tensor<f16>") != NULL);
  TT_CHECK(strstr(text, "dense<0x3DCD> : tensor<bf16>") != NULL);
  TT_CHECK(strstr(text, "dense<0x3FB999999999999A> : tensor<f64>") != NULL);
  TT_CHECK(strstr(text, "dense<0x7C00> : tensor<f16>") != NULL);
  TT_CHECK(strstr(text, "dense<0x0001> : tensor<f16>") != NULL);
  TT_CHECK(strstr(text, "dense<0x3F80> : tensor<bf16>") != NULL);
  tpu_hlo_module_destroy(m);
}

/* ---- elementwise ------------------------------------------------------------------------ */

TT_TEST(hlo_unary_float_family) {
  static const char *ops[] = {"negate", "abs", "sign", "exponential", "exponential_minus_one", "log",
                              "log_plus_one", "sqrt", "rsqrt", "cbrt", "tanh", "logistic", "cosine", "sine",
                              "tan", "floor", "ceil", "round_nearest_even", "round_nearest_afz", "chlo.erf"};
  enum { NOPS = sizeof(ops) / sizeof(ops[0]), N = 6 };
  float x[N] = {0.5f, 1.5f, 2.5f, 0.25f, 3.75f, 0.001f};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "unary", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N)), x);
  tpu_hlo_value_t r[NOPS + 1];
  for (int i = 0; i < NOPS; i++) r[i] = tpu_hlo_unary(f, ops[i], a);
  tpu_hlo_value_t fin = tpu_hlo_unary(f, "is_finite", tpu_hlo_binary(f, "divide", a, tpu_hlo_unary(f, "floor", a)));
  TT_CHECK(tpu_hlo_type_of(f, fin)->dtype == TPU_PRED);
  r[NOPS] = fin;
  if (hb_run(&b, r, NOPS + 1)) {
    for (int k = 0; k < NOPS; k++) {
      float want[N];
      for (int i = 0; i < N; i++) {
        float v = x[i];
        switch (k) {
          case 0: want[i] = -v; break;
          case 1: want[i] = fabsf(v); break;
          case 2: want[i] = v > 0 ? 1.f : v < 0 ? -1.f : 0.f; break;
          case 3: want[i] = expf(v); break;
          case 4: want[i] = expm1f(v); break;
          case 5: want[i] = logf(v); break;
          case 6: want[i] = log1pf(v); break;
          case 7: want[i] = sqrtf(v); break;
          case 8: want[i] = 1.f / sqrtf(v); break;
          case 9: want[i] = cbrtf(v); break;
          case 10: want[i] = tanhf(v); break;
          case 11: want[i] = 1.f / (1.f + expf(-v)); break;
          case 12: want[i] = cosf(v); break;
          case 13: want[i] = sinf(v); break;
          case 14: want[i] = tanf(v); break;
          case 15: want[i] = floorf(v); break;
          case 16: want[i] = ceilf(v); break;
          case 17: want[i] = nearbyintf(v); break;
          case 18: want[i] = roundf(v); break;
          case 19: want[i] = erff(v); break;
        }
      }
      near_f(OUT(b, k, float), want, N, 2e-6, ops[k]);
    }
    /* x / floor(x): 0.25 and 0.001 divide by zero -> inf */
    uint8_t fw[N] = {0, 1, 1, 0, 1, 0};
    eq_u8(OUT(b, NOPS, uint8_t), fw, N, "is_finite");
  }
  hb_free(&b);
}

TT_TEST(hlo_unary_integer_family) {
  enum { N = 5 };
  int32_t x[N] = {-7, 0, 5, 255, INT32_MIN};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "unary_int", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_S32, D(N)), x);
  const char *ops[] = {"negate", "abs", "sign", "not", "popcnt", "count_leading_zeros"};
  tpu_hlo_value_t r[6];
  for (int i = 0; i < 6; i++) r[i] = tpu_hlo_unary(f, ops[i], a);
  if (hb_run(&b, r, 6)) {
    for (int k = 0; k < 6; k++) {
      int32_t w[N];
      for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)x[i];
        switch (k) {
          case 0: w[i] = (int32_t)(0u - u); break;
          case 1: w[i] = x[i] < 0 ? (int32_t)(0u - u) : x[i]; break;
          case 2: w[i] = x[i] > 0 ? 1 : x[i] < 0 ? -1 : 0; break;
          case 3: w[i] = (int32_t)~u; break;
          case 4: w[i] = __builtin_popcount(u); break;
          case 5: w[i] = u ? __builtin_clz(u) : 32; break;
        }
      }
      eq_i32(OUT(b, k, int32_t), w, N, ops[k]);
    }
  }
  hb_free(&b);
}

TT_TEST(hlo_binary_float_family) {
  enum { N = 6 };
  float x[N] = {1.5f, -2.0f, 7.25f, 0.5f, -3.0f, 2.0f};
  float y[N] = {0.5f, 3.0f, -2.0f, 4.0f, -1.5f, 10.0f};
  static const char *ops[] = {"add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2"};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "binary", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N)), x), c = hb_arg(&b, TY(TPU_F32, D(N)), y);
  tpu_hlo_value_t r[9];
  for (int i = 0; i < 9; i++) r[i] = tpu_hlo_binary(f, ops[i], a, c);
  if (hb_run(&b, r, 9)) {
    for (int k = 0; k < 9; k++) {
      float w[N];
      for (int i = 0; i < N; i++) {
        float p = x[i], q = y[i];
        switch (k) {
          case 0: w[i] = p + q; break;
          case 1: w[i] = p - q; break;
          case 2: w[i] = p * q; break;
          case 3: w[i] = p / q; break;
          case 4: w[i] = fmodf(p, q); break;
          case 5: w[i] = fmaxf(p, q); break;
          case 6: w[i] = fminf(p, q); break;
          case 7: w[i] = powf(p, q); break;
          case 8: w[i] = atan2f(p, q); break;
        }
      }
      near_f(OUT(b, k, float), w, N, 2e-6, ops[k]);
    }
  }
  hb_free(&b);
}

TT_TEST(hlo_binary_integer_and_logic_family) {
  enum { N = 5 };
  int32_t x[N] = {7, -7, 12, -1, 100};
  int32_t y[N] = {2, 2, 10, 3, -7};
  static const char *ops[] = {"add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
                              "and", "or", "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical"};
  enum { K = sizeof(ops) / sizeof(ops[0]) };
  int32_t sh[N] = {1, 2, 3, 31, 4};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "binary_int", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_S32, D(N)), x), c = hb_arg(&b, TY(TPU_S32, D(N)), y);
  tpu_hlo_value_t s = hb_arg(&b, TY(TPU_S32, D(N)), sh);
  tpu_hlo_value_t r[K + 1];
  for (int i = 0; i < K; i++) r[i] = tpu_hlo_binary(f, ops[i], a, i >= 10 ? s : c);
  /* bool logic */
  tpu_hlo_value_t p = tpu_hlo_compare(f, "GT", a, c);
  tpu_hlo_value_t q = tpu_hlo_compare(f, "LT", a, tpu_hlo_constant_i64(f, TY(TPU_S32, D(N)), 10));
  r[K] = tpu_hlo_convert(f, tpu_hlo_binary(f, "xor", p, q), TPU_S32);
  if (hb_run(&b, r, K + 1)) {
    for (int k = 0; k < K; k++) {
      int32_t w[N];
      for (int i = 0; i < N; i++) {
        int32_t p1 = x[i], q1 = k >= 10 ? sh[i] : y[i];
        switch (k) {
          case 0: w[i] = p1 + q1; break;
          case 1: w[i] = p1 - q1; break;
          case 2: w[i] = p1 * q1; break;
          case 3: w[i] = p1 / q1; break;
          case 4: w[i] = p1 % q1; break;
          case 5: w[i] = p1 > q1 ? p1 : q1; break;
          case 6: w[i] = p1 < q1 ? p1 : q1; break;
          case 7: w[i] = p1 & q1; break;
          case 8: w[i] = p1 | q1; break;
          case 9: w[i] = p1 ^ q1; break;
          case 10: w[i] = (int32_t)((uint32_t)p1 << q1); break;
          case 11: w[i] = p1 >> q1; break;
          case 12: w[i] = (int32_t)((uint32_t)p1 >> q1); break;
        }
      }
      eq_i32(OUT(b, k, int32_t), w, N, ops[k]);
    }
    int32_t w[N];
    for (int i = 0; i < N; i++) w[i] = (x[i] > y[i]) ^ (x[i] < 10);
    eq_i32(OUT(b, K, int32_t), w, N, "bool xor");
  }
  hb_free(&b);
}

TT_TEST(hlo_compare_and_select) {
  enum { N = 5 };
  float x[N] = {1.0f, NAN, 3.0f, -0.0f, 2.0f};
  float y[N] = {2.0f, 1.0f, 3.0f, 0.0f, NAN};
  uint32_t ux[N] = {1, 0x80000000u, 5, 7, 0xFFFFFFFFu};
  uint32_t uy[N] = {2, 1, 5, 0x90000000u, 0};
  static const char *dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "cmp", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N)), x), c = hb_arg(&b, TY(TPU_F32, D(N)), y);
  tpu_hlo_value_t ua = hb_arg(&b, TY(TPU_U32, D(N)), ux), uc = hb_arg(&b, TY(TPU_U32, D(N)), uy);
  tpu_hlo_value_t r[15];
  for (int i = 0; i < 6; i++) r[i] = tpu_hlo_compare(f, dirs[i], a, c);
  for (int i = 0; i < 6; i++) r[6 + i] = tpu_hlo_compare(f, dirs[i], ua, uc);
  r[12] = tpu_hlo_select(f, r[2], a, c); /* where(x < y, x, y) */
  tpu_hlo_value_t sp = tpu_hlo_compare(f, "GT", tpu_hlo_scalar(f, TPU_F32, 1), tpu_hlo_scalar(f, TPU_F32, 0));
  r[13] = tpu_hlo_select(f, sp, c, a); /* scalar predicate: picks y */
  r[14] = tpu_hlo_select(f, tpu_hlo_compare(f, "NE", a, a), c, a); /* nan_to other */
  if (hb_run(&b, r, 15)) {
    for (int k = 0; k < 6; k++) {
      uint8_t wf[N], wu[N];
      for (int i = 0; i < N; i++) {
        float p = x[i], q = y[i];
        uint32_t up = ux[i], uq = uy[i];
        switch (k) {
          case 0: wf[i] = p == q; wu[i] = up == uq; break;
          case 1: wf[i] = p != q; wu[i] = up != uq; break;
          case 2: wf[i] = p < q; wu[i] = up < uq; break;
          case 3: wf[i] = p <= q; wu[i] = up <= uq; break;
          case 4: wf[i] = p > q; wu[i] = up > uq; break;
          case 5: wf[i] = p >= q; wu[i] = up >= uq; break;
        }
      }
      eq_u8(OUT(b, k, uint8_t), wf, N, dirs[k]);
      eq_u8(OUT(b, 6 + k, uint8_t), wu, N, dirs[k]);
    }
    float w[N], w2[N];
    for (int i = 0; i < N; i++) {
      w[i] = x[i] < y[i] ? x[i] : y[i];
      w2[i] = isnan(x[i]) ? y[i] : x[i];
    }
    near_f(OUT(b, 12, float), w, N, 0, "select");
    near_f(OUT(b, 13, float), y, N, 0, "select scalar pred");
    near_f(OUT(b, 14, float), w2, N, 0, "select nan");
  }
  hb_free(&b);
}

static uint16_t bf16_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if (isnan(v)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

TT_TEST(hlo_convert_and_bitcast) {
  enum { N = 6 };
  float x[N] = {1.7f, -2.5f, 0.1f, 65504.0f, 1e-8f, 3.0e38f};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "convert", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N)), x);
  tpu_hlo_value_t r[8];
  r[0] = tpu_hlo_convert(f, a, TPU_S32);
  r[1] = tpu_hlo_convert(f, a, TPU_BF16);
  r[2] = tpu_hlo_convert(f, tpu_hlo_convert(f, a, TPU_BF16), TPU_F32);
  r[3] = tpu_hlo_convert(f, a, TPU_F16);
  r[4] = tpu_hlo_convert(f, a, TPU_PRED);
  r[5] = tpu_hlo_bitcast_convert(f, a, TPU_U32);
  r[6] = tpu_hlo_bitcast_convert(f, a, TPU_U16); /* [N, 2] */
  r[7] = tpu_hlo_bitcast_convert(f, r[6], TPU_F32); /* back to [N] */
  TT_CHECK(tpu_hlo_type_of(f, r[6])->rank == 2 && tpu_hlo_type_of(f, r[6])->dims[1] == 2);
  TT_CHECK(tpu_hlo_cast(f, a, TPU_F32) == a);
  if (hb_run(&b, r, 8)) {
    int32_t wi[3] = {1, -2, 0};
    eq_i32(OUT(b, 0, int32_t), wi, 3, "f32->s32");
    const uint16_t *bf = OUT(b, 1, uint16_t);
    for (int i = 0; i < N; i++) TT_CHECK(bf[i] == bf16_bits(x[i]));
    float w2[N];
    for (int i = 0; i < N; i++) {
      uint32_t u = (uint32_t)bf16_bits(x[i]) << 16;
      memcpy(&w2[i], &u, 4);
    }
    near_f(OUT(b, 2, float), w2, N, 0, "bf16 round trip");
    const uint16_t *h = OUT(b, 3, uint16_t);
    TT_CHECK(h[0] == 0x3ECD); /* 1.7 */
    TT_CHECK(h[2] == 0x2E66); /* 0.1 */
    TT_CHECK(h[3] == 0x7BFF); /* 65504 = max f16 */
    TT_CHECK(h[5] == 0x7C00); /* overflow -> inf */
    uint8_t wp[N] = {1, 1, 1, 1, 1, 1};
    eq_u8(OUT(b, 4, uint8_t), wp, N, "f32->pred");
    TT_CHECK(!memcmp(OUT(b, 5, uint32_t), x, sizeof(x)));
    TT_CHECK(!memcmp(OUT(b, 6, uint16_t), x, sizeof(x)));
    TT_CHECK(!memcmp(OUT(b, 7, float), x, sizeof(x)));
  }
  hb_free(&b);
}

TT_TEST(hlo_clamp_scalar_and_array_bounds) {
  enum { N = 5 };
  float x[N] = {-5, -0.5f, 0.25f, 3, 100};
  float lo[N] = {-1, 0, 0, 0, 0}, hi[N] = {1, 1, 0.1f, 5, 50};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "clamp", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N)), x);
  tpu_hlo_value_t l = hb_arg(&b, TY(TPU_F32, D(N)), lo), h = hb_arg(&b, TY(TPU_F32, D(N)), hi);
  tpu_hlo_value_t r[2];
  r[0] = tpu_hlo_clamp(f, tpu_hlo_scalar(f, TPU_F32, 0), a, tpu_hlo_scalar(f, TPU_F32, 1));
  r[1] = tpu_hlo_clamp(f, l, a, h);
  if (hb_run(&b, r, 2)) {
    float w0[N], w1[N];
    for (int i = 0; i < N; i++) {
      w0[i] = fminf(fmaxf(x[i], 0), 1);
      w1[i] = fminf(fmaxf(x[i], lo[i]), hi[i]);
    }
    near_f(OUT(b, 0, float), w0, N, 0, "clamp scalar");
    near_f(OUT(b, 1, float), w1, N, 0, "clamp array");
  }
  hb_free(&b);
}

/* ---- shapes ------------------------------------------------------------------------------ */

TT_TEST(hlo_broadcast_reshape_transpose) {
  float x[3] = {1, 2, 3};
  float m[2 * 3 * 4];
  for (int i = 0; i < 24; i++) m[i] = (float)i;
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "shape", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(3)), x);
  tpu_hlo_value_t t = hb_arg(&b, TY(TPU_F32, D(2), D(3), D(4)), m);
  tpu_hlo_value_t r[5];
  int64_t bd[1] = {0};
  r[0] = tpu_hlo_broadcast_in_dim(f, a, TY(TPU_F32, D(3), D(2)), bd); /* column broadcast */
  int64_t to[2] = {2, 3};
  r[1] = tpu_hlo_broadcast_to(f, a, 2, to); /* row broadcast */
  int64_t rs[2] = {4, 6};
  r[2] = tpu_hlo_reshape(f, t, 2, rs);
  int64_t perm[3] = {2, 0, 1};
  r[3] = tpu_hlo_transpose(f, t, perm);
  int64_t one[2] = {1, 1};
  r[4] = tpu_hlo_reshape(f, tpu_hlo_scalar(f, TPU_F32, 7), 2, one);
  TT_CHECK(tpu_hlo_broadcast_to(f, t, 3, tpu_hlo_type_of(f, t)->dims) == t);
  if (hb_run(&b, r, 5)) {
    float w0[6] = {1, 1, 2, 2, 3, 3}, w1[6] = {1, 2, 3, 1, 2, 3};
    near_f(OUT(b, 0, float), w0, 6, 0, "broadcast_in_dim");
    near_f(OUT(b, 1, float), w1, 6, 0, "broadcast_to");
    near_f(OUT(b, 2, float), m, 24, 0, "reshape");
    float w3[24];
    /* out[k][i][j] = in[i][j][k], out dims [4][2][3] */
    for (int k = 0; k < 4; k++)
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) w3[k * 6 + i * 3 + j] = m[i * 12 + j * 4 + k];
    near_f(OUT(b, 3, float), w3, 24, 0, "transpose");
    TT_CHECK(OUT(b, 4, float)[0] == 7);
  }
  hb_free(&b);
}

TT_TEST(hlo_slice_dynamic_slice_update) {
  float m[5 * 6];
  for (int i = 0; i < 30; i++) m[i] = (float)i;
  int32_t i0 = 1, j0 = 4; /* j0 + 3 > 6: dynamic_slice clamps the start to 3 */
  int64_t k0 = 2;
  float upd[2 * 2] = {-1, -2, -3, -4};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "slices", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(5), D(6)), m);
  tpu_hlo_value_t si = hb_arg(&b, TY0(TPU_S32), &i0), sj = hb_arg(&b, TY0(TPU_S32), &j0);
  tpu_hlo_value_t sk = hb_arg(&b, TY0(TPU_S64), &k0);
  tpu_hlo_value_t u = hb_arg(&b, TY(TPU_F32, D(2), D(2)), upd);
  int64_t st[2] = {1, 0}, lim[2] = {5, 6}, str[2] = {2, 3};
  tpu_hlo_value_t r[3];
  r[0] = tpu_hlo_slice(f, a, st, lim, str); /* rows 1,3; cols 0,3 */
  tpu_hlo_value_t starts[2] = {si, sj};
  int64_t sz[2] = {2, 3};
  r[1] = tpu_hlo_dynamic_slice(f, a, starts, sz);
  tpu_hlo_value_t starts2[2] = {sk, si}; /* mixed s64/s32: converted */
  r[2] = tpu_hlo_dynamic_update_slice(f, a, u, starts2);
  if (hb_run(&b, r, 3)) {
    float w0[4] = {m[6], m[9], m[18], m[21]};
    near_f(OUT(b, 0, float), w0, 4, 0, "slice");
    float w1[6];
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) w1[i * 3 + j] = m[(1 + i) * 6 + 3 + j];
    near_f(OUT(b, 1, float), w1, 6, 0, "dynamic_slice");
    float w2[30];
    memcpy(w2, m, sizeof(m));
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) w2[(2 + i) * 6 + 1 + j] = upd[i * 2 + j];
    near_f(OUT(b, 2, float), w2, 30, 0, "dynamic_update_slice");
  }
  hb_free(&b);
}

TT_TEST(hlo_concatenate_pad_reverse) {
  float x[2 * 3] = {1, 2, 3, 4, 5, 6}, y[2 * 1] = {7, 8};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "cpr", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(2), D(3)), x), c = hb_arg(&b, TY(TPU_F32, D(2), D(1)), y);
  tpu_hlo_value_t r[4];
  tpu_hlo_value_t xs[3] = {a, c, a};
  r[0] = tpu_hlo_concatenate(f, xs, 3, 1); /* [2, 7] */
  tpu_hlo_value_t z = tpu_hlo_scalar(f, TPU_F32, 0);
  int64_t lo[2] = {1, -1}, hi[2] = {0, 2}, in[2] = {0, 1};
  r[1] = tpu_hlo_pad(f, a, z, lo, hi, in); /* [3, 6]: cols 1 0 2 0 3 0 0 -> drop first */
  int64_t rd[1] = {1};
  r[2] = tpu_hlo_reverse(f, a, rd, 1);
  int64_t rd2[2] = {0, 1};
  r[3] = tpu_hlo_reverse(f, a, rd2, 2);
  TT_CHECK(tpu_hlo_type_of(f, r[1])->dims[0] == 3 && tpu_hlo_type_of(f, r[1])->dims[1] == 6);
  if (hb_run(&b, r, 4)) {
    float w0[14] = {1, 2, 3, 7, 1, 2, 3, 4, 5, 6, 8, 4, 5, 6};
    near_f(OUT(b, 0, float), w0, 14, 0, "concatenate");
    /* interior 1: [1 0 2 0 3], low -1 drops the 1, high 2 adds two zeros */
    float w1[18] = {0, 0, 0, 0, 0, 0, 0, 2, 0, 3, 0, 0, 0, 5, 0, 6, 0, 0};
    near_f(OUT(b, 1, float), w1, 18, 0, "pad");
    float w2[6] = {3, 2, 1, 6, 5, 4}, w3[6] = {6, 5, 4, 3, 2, 1};
    near_f(OUT(b, 2, float), w2, 6, 0, "reverse");
    near_f(OUT(b, 3, float), w3, 6, 0, "reverse both");
  }
  hb_free(&b);
}

TT_TEST(hlo_iota_and_constants) {
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "consts", 1);
  tpu_hlo_value_t r[12];
  r[0] = tpu_hlo_iota(f, TY(TPU_S32, D(2), D(3)), 1);
  r[1] = tpu_hlo_iota(f, TY(TPU_F32, D(2), D(3)), 0);
  r[2] = tpu_hlo_constant(f, TY(TPU_F32, D(3)), INFINITY);
  r[3] = tpu_hlo_constant(f, TY(TPU_F32, D(2)), NAN);
  r[4] = tpu_hlo_constant(f, TY(TPU_BF16, D(2)), -INFINITY);
  r[5] = tpu_hlo_constant(f, TY(TPU_F16, D(2)), 0.1);
  int64_t tab[6] = {1, -2, 3, -4, 5, 6};
  r[6] = tpu_hlo_constant_i64s(f, TY(TPU_S64, D(2), D(3)), tab);
  r[7] = tpu_hlo_constant_i64s(f, TY(TPU_F32, D(6)), tab);
  r[8] = tpu_hlo_constant_i64(f, TY(TPU_U64, D(2)), -1); /* wraps to UINT64_MAX */
  r[9] = tpu_hlo_constant_i64(f, TY(TPU_S8, D(2)), 255); /* wraps to -1 */
  r[10] = tpu_hlo_constant(f, TY(TPU_PRED, D(2)), 3.0);
  double fv[3] = {0.1, -1e30, 1e-45};
  r[11] = tpu_hlo_constant_f64s(f, TY(TPU_F32, D(3)), fv);
  if (hb_run(&b, r, 12)) {
    int32_t w0[6] = {0, 1, 2, 0, 1, 2};
    eq_i32(OUT(b, 0, int32_t), w0, 6, "iota s32");
    float w1[6] = {0, 0, 0, 1, 1, 1};
    near_f(OUT(b, 1, float), w1, 6, 0, "iota f32");
    for (int i = 0; i < 3; i++) TT_CHECK(isinf(OUT(b, 2, float)[i]) && OUT(b, 2, float)[i] > 0);
    for (int i = 0; i < 2; i++) TT_CHECK(isnan(OUT(b, 3, float)[i]));
    TT_CHECK(OUT(b, 4, uint16_t)[0] == 0xFF80 && OUT(b, 4, uint16_t)[1] == 0xFF80);
    TT_CHECK(OUT(b, 5, uint16_t)[0] == 0x2E66);
    eq_i64(OUT(b, 6, int64_t), tab, 6, "dense s64");
    float w7[6] = {1, -2, 3, -4, 5, 6};
    near_f(OUT(b, 7, float), w7, 6, 0, "dense f32");
    TT_CHECK(OUT(b, 8, uint64_t)[0] == UINT64_MAX);
    TT_CHECK(OUT(b, 9, int8_t)[1] == -1);
    TT_CHECK(OUT(b, 10, uint8_t)[0] == 1);
    float w11[3] = {0.1f, -1e30f, 1e-45f};
    TT_CHECK(!memcmp(OUT(b, 11, float), w11, sizeof(w11)));
  }
  hb_free(&b);
}

/* ---- dot ------------------------------------------------------------------------------------ */

TT_TEST(hlo_dot_general_batch_and_contracting) {
  enum { B = 2, M = 3, K = 4, N = 5 };
  float x[B * M * K], y[B * K * N], xt[K * M];
  for (int i = 0; i < B * M * K; i++) x[i] = (float)((i * 7) % 11) - 5;
  for (int i = 0; i < B * K * N; i++) y[i] = (float)((i * 5) % 13) * 0.5f - 3;
  for (int k = 0; k < K; k++)
    for (int m = 0; m < M; m++) xt[k * M + m] = x[m * K + k]; /* batch 0, transposed */
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "dot", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(B), D(M), D(K)), x);
  tpu_hlo_value_t c = hb_arg(&b, TY(TPU_F32, D(B), D(K), D(N)), y);
  tpu_hlo_value_t at = hb_arg(&b, TY(TPU_F32, D(K), D(M)), xt);
  tpu_hlo_dot_dims_t d = {.nbatch = 1, .ncontract = 1, .lhs_batch = {0}, .rhs_batch = {0},
                          .lhs_contract = {2}, .rhs_contract = {1}};
  tpu_hlo_value_t r[3];
  r[0] = tpu_hlo_dot_general(f, a, c, &d, TPU_DTYPE_INVALID);
  const tpu_hlo_type_t *rt = tpu_hlo_type_of(f, r[0]);
  TT_CHECK(rt->rank == 3 && rt->dims[0] == B && rt->dims[1] == M && rt->dims[2] == N);
  /* lhs contracted on dim 0 (x^T stored), rhs batch 0 sliced: [M, N] */
  int64_t s0[3] = {0, 0, 0}, s1[3] = {1, K, N};
  int64_t rs[2] = {K, N};
  tpu_hlo_value_t y0 = tpu_hlo_reshape(f, tpu_hlo_slice(f, c, s0, s1, NULL), 2, rs);
  tpu_hlo_dot_dims_t d2 = {.ncontract = 1, .lhs_contract = {0}, .rhs_contract = {0}};
  r[1] = tpu_hlo_dot_general(f, at, y0, &d2, TPU_DTYPE_INVALID);
  /* bf16 operands, f32 result */
  tpu_hlo_dot_dims_t d3 = {.ncontract = 1, .lhs_contract = {0}, .rhs_contract = {0}};
  r[2] = tpu_hlo_dot_general(f, tpu_hlo_convert(f, at, TPU_BF16), tpu_hlo_convert(f, y0, TPU_BF16), &d3, TPU_F32);
  if (hb_run(&b, r, 3)) {
    float w[B * M * N];
    for (int bb = 0; bb < B; bb++)
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          double s = 0;
          for (int k = 0; k < K; k++) s += x[(bb * M + m) * K + k] * y[(bb * K + k) * N + n];
          w[(bb * M + m) * N + n] = (float)s;
        }
    near_f(OUT(b, 0, float), w, B * M * N, 1e-6, "batched dot");
    near_f(OUT(b, 1, float), w, M * N, 1e-6, "transposed-lhs dot");
    near_f(OUT(b, 2, float), w, M * N, 1e-6, "bf16 dot (inputs exact in bf16)");
  }
  hb_free(&b);
}

/* ---- reductions --------------------------------------------------------------------------------- */

TT_TEST(hlo_reduce_sum_max_min_prod_logic) {
  enum { R = 3, C = 4 };
  float x[R * C] = {1, -2, 3, 4, 5, 6, -7, 8, 0.5f, 0.25f, 2, -1};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "reduce", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(R), D(C)), x);
  int64_t d1 = 1, d0 = 0, both[2] = {0, 1};
  tpu_hlo_value_t r[6];
  r[0] = tpu_hlo_reduce(f, a, tpu_hlo_scalar(f, TPU_F32, 0), &d1, 1, "add");
  r[1] = tpu_hlo_reduce(f, a, tpu_hlo_scalar(f, TPU_F32, -INFINITY), &d0, 1, "maximum");
  r[2] = tpu_hlo_reduce(f, a, tpu_hlo_scalar(f, TPU_F32, INFINITY), both, 2, "minimum");
  r[3] = tpu_hlo_reduce(f, a, tpu_hlo_scalar(f, TPU_F32, 1), &d1, 1, "multiply");
  tpu_hlo_value_t pos = tpu_hlo_compare(f, "GT", a, tpu_hlo_constant(f, TY(TPU_F32, D(R), D(C)), 0));
  r[4] = tpu_hlo_reduce(f, pos, tpu_hlo_scalar(f, TPU_PRED, 1), &d1, 1, "and");
  r[5] = tpu_hlo_reduce(f, pos, tpu_hlo_scalar(f, TPU_PRED, 0), &d1, 1, "or");
  TT_CHECK(tpu_hlo_type_of(f, r[2])->rank == 0);
  if (hb_run(&b, r, 6)) {
    float ws[R], wm[C], wp[R], wmin = INFINITY;
    uint8_t wand[R], wor[R];
    for (int i = 0; i < R; i++) {
      ws[i] = 0;
      wp[i] = 1;
      wand[i] = 1;
      wor[i] = 0;
      for (int j = 0; j < C; j++) {
        float v = x[i * C + j];
        ws[i] += v;
        wp[i] *= v;
        wand[i] &= v > 0;
        wor[i] |= v > 0;
        wmin = fminf(wmin, v);
      }
    }
    for (int j = 0; j < C; j++) {
      wm[j] = -INFINITY;
      for (int i = 0; i < R; i++) wm[j] = fmaxf(wm[j], x[i * C + j]);
    }
    near_f(OUT(b, 0, float), ws, R, 1e-6, "sum");
    near_f(OUT(b, 1, float), wm, C, 0, "max");
    near_f(OUT(b, 2, float), &wmin, 1, 0, "min");
    near_f(OUT(b, 3, float), wp, R, 1e-6, "prod");
    eq_u8(OUT(b, 4, uint8_t), wand, R, "all");
    eq_u8(OUT(b, 5, uint8_t), wor, R, "any");
  }
  hb_free(&b);
}

TT_TEST(hlo_argmax_argmin_ties_and_nan) {
  enum { R = 4, C = 5 };
  float x[R * C] = {1, 5, 5, 2, 0,            /* tie: first max (1), min (4) */
                    1, NAN, 3, NAN, -1,       /* NaN wins both, first NaN (1) */
                    2, 2, 2, 2, 2,            /* all equal: 0 */
                    -INFINITY, -INFINITY, -INFINITY, 7, -INFINITY};
  int32_t xi[R * C] = {3, 9, 9, 1, 1, -5, -5, -6, 0, 0, 7, 7, 7, 7, 7, INT32_MIN, 0, INT32_MAX, 0, INT32_MAX};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "argext", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(R), D(C)), x);
  tpu_hlo_value_t ai = hb_arg(&b, TY(TPU_S32, D(R), D(C)), xi);
  tpu_hlo_value_t r[6], vmax = TPU_HLO_NONE;
  r[0] = tpu_hlo_reduce_argext(f, a, 1, true, &vmax);
  r[1] = tpu_hlo_reduce_argext(f, a, 1, false, NULL);
  r[2] = vmax;
  r[3] = tpu_hlo_reduce_argext(f, ai, 1, true, NULL);
  r[4] = tpu_hlo_reduce_argext(f, ai, 1, false, NULL);
  r[5] = tpu_hlo_reduce_argext(f, a, 0, true, NULL); /* over rows */
  TT_CHECK(tpu_hlo_type_of(f, r[0])->dtype == TPU_S64);
  if (hb_run(&b, r, 6)) {
    int64_t wmax[R] = {1, 1, 0, 3}, wmin[R] = {4, 1, 0, 0};
    eq_i64(OUT(b, 0, int64_t), wmax, R, "argmax");
    eq_i64(OUT(b, 1, int64_t), wmin, R, "argmin");
    float wv[R] = {5, NAN, 2, 7};
    near_f(OUT(b, 2, float), wv, R, 0, "max value");
    int64_t wimax[R] = {1, 3, 0, 2}, wimin[R] = {3, 2, 0, 0};
    eq_i64(OUT(b, 3, int64_t), wimax, R, "int argmax");
    eq_i64(OUT(b, 4, int64_t), wimin, R, "int argmin");
    /* columns: col0 {1,1,2,-inf} -> 2; col1 {5,nan,2,-inf} -> 1; col2 {5,3,2,-inf} -> 0;
     * col3 {2,nan,2,7} -> 1; col4 {0,-1,2,-inf} -> 2 */
    int64_t wc[C] = {2, 1, 0, 1, 2};
    eq_i64(OUT(b, 5, int64_t), wc, C, "argmax dim 0");
  }
  hb_free(&b);
}

/* naive pooling reference over a [H, W] image, padding lo/hi per dim */
static void pool_ref(const float *x, int H, int W, int kh, int kw, int sh, int sw, const int64_t *pad, bool is_max,
                     float *out, int OH, int OW) {
  for (int oy = 0; oy < OH; oy++)
    for (int ox = 0; ox < OW; ox++) {
      float acc = is_max ? -INFINITY : 0;
      for (int ky = 0; ky < kh; ky++)
        for (int kx = 0; kx < kw; kx++) {
          int iy = oy * sh + ky - (int)pad[0], ix = ox * sw + kx - (int)pad[2];
          if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
          float v = x[iy * W + ix];
          acc = is_max ? fmaxf(acc, v) : acc + v;
        }
      out[oy * OW + ox] = acc;
    }
}

TT_TEST(hlo_reduce_window_max_and_avg_pool) {
  enum { N = 1, C = 2, H = 5, W = 6 };
  float x[N * C * H * W];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)((i * 37) % 17) - 8;
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "pool", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N), D(C), D(H), D(W)), x);
  int64_t win[4] = {1, 1, 3, 2}, str[4] = {1, 1, 2, 2};
  int64_t pad[8] = {0, 0, 0, 0, 1, 1, 0, 1};
  tpu_hlo_value_t r[3];
  r[0] = tpu_hlo_reduce_window(f, a, tpu_hlo_scalar(f, TPU_F32, -INFINITY), win, str, NULL, NULL, pad, "maximum");
  r[1] = tpu_hlo_reduce_window(f, a, tpu_hlo_scalar(f, TPU_F32, 0), win, str, NULL, NULL, pad, "add");
  /* avg pool = sum / count (count_include_pad): divide by the window size */
  r[1] = tpu_hlo_binary(f, "divide", r[1], tpu_hlo_broadcast_to(f, tpu_hlo_scalar(f, TPU_F32, 6), 4,
                                                                  tpu_hlo_type_of(f, r[1])->dims));
  int64_t win2[4] = {1, 1, 2, 2}, bdil[4] = {1, 1, 2, 1}, wdil[4] = {1, 1, 1, 2};
  r[2] = tpu_hlo_reduce_window(f, a, tpu_hlo_scalar(f, TPU_F32, 0), win2, NULL, bdil, wdil, NULL, "add");
  const tpu_hlo_type_t *t0 = tpu_hlo_type_of(f, r[0]);
  int OH = (H + 2 - 3) / 2 + 1, OW = (W + 1 - 2) / 2 + 1;
  TT_CHECK(t0->dims[2] == OH && t0->dims[3] == OW);
  const tpu_hlo_type_t *t2 = tpu_hlo_type_of(f, r[2]);
  /* base-dilated H: 2*4+1 = 9, window 2 -> 8; W: window eff 3 -> 4 */
  TT_CHECK(t2->dims[2] == 8 && t2->dims[3] == 4);
  if (hb_run(&b, r, 3)) {
    float wmax[C * 3 * 3], wavg[C * 3 * 3];
    int64_t p2[4] = {pad[4], pad[5], pad[6], pad[7]};
    for (int c = 0; c < C; c++) {
      pool_ref(x + c * H * W, H, W, 3, 2, 2, 2, p2, true, wmax + c * OH * OW, OH, OW);
      pool_ref(x + c * H * W, H, W, 3, 2, 2, 2, p2, false, wavg + c * OH * OW, OH, OW);
    }
    for (int i = 0; i < C * OH * OW; i++) wavg[i] /= 6;
    near_f(OUT(b, 0, float), wmax, C * OH * OW, 0, "max pool");
    near_f(OUT(b, 1, float), wavg, C * OH * OW, 1e-6, "avg pool");
    /* dilations: base-dilated rows are x rows at even positions, zeros between */
    float w2[C * 8 * 4];
    for (int c = 0; c < C; c++)
      for (int oy = 0; oy < 8; oy++)
        for (int ox = 0; ox < 4; ox++) {
          float s = 0;
          for (int ky = 0; ky < 2; ky++)
            for (int kx = 0; kx < 2; kx++) {
              int py = oy + ky, px = ox + 2 * kx;
              if (py % 2) continue;
              s += x[c * H * W + (py / 2) * W + px];
            }
          w2[(c * 8 + oy) * 4 + ox] = s;
        }
    near_f(OUT(b, 2, float), w2, C * 8 * 4, 1e-6, "dilated window sum");
  }
  hb_free(&b);
}

TT_TEST(hlo_select_and_scatter_maxpool_grad) {
  enum { H = 4, W = 5, KH = 2, KW = 2, OH = 3, OW = 4 }; /* stride 1: windows overlap */
  float x[H * W], g[OH * OW];
  for (int i = 0; i < H * W; i++) x[i] = (float)((i * 7) % 20); /* distinct */
  for (int i = 0; i < OH * OW; i++) g[i] = (float)(i + 1);
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "sas", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(H), D(W)), x);
  tpu_hlo_value_t s = hb_arg(&b, TY(TPU_F32, D(OH), D(OW)), g);
  int64_t win[2] = {KH, KW};
  tpu_hlo_value_t r = tpu_hlo_select_and_scatter(f, a, s, tpu_hlo_scalar(f, TPU_F32, 0), win, NULL, NULL);
  /* stride 2 with padding: the source shape must match */
  int64_t str2[2] = {2, 2}, pad[4] = {0, 0, 0, 1};
  tpu_hlo_value_t s2 = tpu_hlo_slice(f, s, (int64_t[]){0, 0}, (int64_t[]){2, 3}, NULL);
  tpu_hlo_value_t r2 = tpu_hlo_select_and_scatter(f, a, s2, tpu_hlo_scalar(f, TPU_F32, 0), win, str2, pad);
  tpu_hlo_value_t rr[2] = {r, r2};
  if (hb_run(&b, rr, 2)) {
    float w[H * W] = {0}, w2[H * W] = {0};
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        int best = -1;
        for (int ky = 0; ky < KH; ky++)
          for (int kx = 0; kx < KW; kx++) {
            int p = (oy + ky) * W + ox + kx;
            if (best < 0 || x[p] > x[best]) best = p;
          }
        w[best] += g[oy * OW + ox];
      }
    near_f(OUT(b, 0, float), w, H * W, 0, "select_and_scatter");
    for (int oy = 0; oy < 2; oy++)
      for (int ox = 0; ox < 3; ox++) {
        int best = -1;
        for (int ky = 0; ky < KH; ky++)
          for (int kx = 0; kx < KW; kx++) {
            int iy = oy * 2 + ky, ix = ox * 2 + kx;
            if (ix >= W) continue; /* the padded column is never selected */
            int p = iy * W + ix;
            if (best < 0 || x[p] > x[best]) best = p;
          }
        w2[best] += g[oy * OW + ox];
      }
    near_f(OUT(b, 1, float), w2, H * W, 0, "select_and_scatter stride 2 padded");
  }
  hb_free(&b);
}

/* ---- convolution --------------------------------------------------------------------------------------- */

/* Naive NCHW x OIHW convolution with groups, strides, padding and both dilations. */
static void conv_ref(const float *in, const float *k, float *out, int N, int C, int H, int W, int O, int KH, int KW,
                     int G, const int64_t *st, const int64_t *pad, const int64_t *ld, const int64_t *rd, int OH, int OW) {
  int Cg = C / G, Og = O / G;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++)
      for (int oy = 0; oy < OH; oy++)
        for (int ox = 0; ox < OW; ox++) {
          double s = 0;
          int g = o / Og;
          for (int c = 0; c < Cg; c++)
            for (int ky = 0; ky < KH; ky++)
              for (int kx = 0; kx < KW; kx++) {
                int py = oy * (int)st[0] + ky * (int)rd[0] - (int)pad[0];
                int px = ox * (int)st[1] + kx * (int)rd[1] - (int)pad[2];
                if (py < 0 || px < 0 || py % ld[0] || px % ld[1]) continue;
                int iy = py / (int)ld[0], ix = px / (int)ld[1];
                if (iy >= H || ix >= W) continue;
                s += (double)in[((n * C) + g * Cg + c) * H * W + iy * W + ix] * k[((o * Cg) + c) * KH * KW + ky * KW + kx];
              }
          out[((n * O + o) * OH + oy) * OW + ox] = (float)s;
        }
}

TT_TEST(hlo_convolution_strides_padding_dilation_groups) {
  enum { N = 2, C = 4, H = 7, W = 6, O = 6, G = 2, KH = 3, KW = 2 };
  float in[N * C * H * W], k[O * (C / G) * KH * KW];
  for (int i = 0; i < N * C * H * W; i++) in[i] = (float)((i * 13) % 9) - 4;
  for (int i = 0; i < O * (C / G) * KH * KW; i++) k[i] = (float)((i * 7) % 5) - 2;
  struct { int64_t st[2], pad[4], ld[2], rd[2]; int g; } cases[] = {
      {{1, 1}, {0, 0, 0, 0}, {1, 1}, {1, 1}, 1},
      {{2, 1}, {1, 2, 0, 1}, {1, 1}, {2, 1}, 2},
      {{1, 2}, {2, 1, 1, 1}, {2, 1}, {1, 2}, 2},
      {{2, 2}, {-1, 0, 0, 0}, {1, 1}, {1, 1}, 1},
  };
  enum { NC = sizeof(cases) / sizeof(cases[0]) };
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "conv", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N), D(C), D(H), D(W)), in);
  tpu_hlo_value_t kk = hb_arg(&b, TY(TPU_F32, D(O), D(C / G), D(KH), D(KW)), k);
  /* the G=1 cases need a kernel with C input features: tile k along dim 1 */
  tpu_hlo_value_t kfull_parts[2] = {kk, kk};
  tpu_hlo_value_t kfull = tpu_hlo_concatenate(f, kfull_parts, 2, 1);
  tpu_hlo_value_t r[NC + 1];
  int oh[NC], ow[NC];
  for (int i = 0; i < NC; i++) {
    tpu_hlo_conv_dims_t d;
    tpu_hlo_conv_dims_nchw(&d, 2);
    memcpy(d.strides, cases[i].st, sizeof(cases[i].st));
    memcpy(d.padding, cases[i].pad, sizeof(cases[i].pad));
    memcpy(d.lhs_dilation, cases[i].ld, sizeof(cases[i].ld));
    memcpy(d.rhs_dilation, cases[i].rd, sizeof(cases[i].rd));
    d.feature_group_count = cases[i].g;
    r[i] = tpu_hlo_convolution(f, a, cases[i].g == 1 ? kfull : kk, &d);
    oh[i] = (int)tpu_hlo_type_of(f, r[i])->dims[2];
    ow[i] = (int)tpu_hlo_type_of(f, r[i])->dims[3];
  }
  /* NHWC x HWIO -> NHWC layout of case 0, transposed back to NCHW */
  int64_t to_nhwc[4] = {0, 2, 3, 1}, to_hwio[4] = {2, 3, 1, 0}, to_nchw[4] = {0, 3, 1, 2};
  tpu_hlo_conv_dims_t dl = {.nsp = 2, .in_batch = 0, .in_feature = 3, .in_spatial = {1, 2},
                            .k_in_feature = 2, .k_out_feature = 3, .k_spatial = {0, 1},
                            .out_batch = 0, .out_feature = 3, .out_spatial = {1, 2},
                            .strides = {1, 1}, .lhs_dilation = {1, 1}, .rhs_dilation = {1, 1},
                            .feature_group_count = 1, .batch_group_count = 1};
  r[NC] = tpu_hlo_transpose(
      f, tpu_hlo_convolution(f, tpu_hlo_transpose(f, a, to_nhwc), tpu_hlo_transpose(f, kfull, to_hwio), &dl), to_nchw);
  if (hb_run(&b, r, NC + 1)) {
    float kf[O * C * KH * KW];
    for (int o = 0; o < O; o++)
      for (int c = 0; c < C; c++)
        memcpy(kf + (o * C + c) * KH * KW, k + (o * (C / G) + c % (C / G)) * KH * KW, sizeof(float) * KH * KW);
    for (int i = 0; i < NC; i++) {
      int n = N * O * oh[i] * ow[i];
      float *w = (float *)calloc((size_t)n, sizeof(float));
      conv_ref(in, cases[i].g == 1 ? kf : k, w, N, C, H, W, O, KH, KW, cases[i].g, cases[i].st, cases[i].pad,
               cases[i].ld, cases[i].rd, oh[i], ow[i]);
      char what[32];
      snprintf(what, sizeof(what), "conv case %d", i);
      near_f(OUT(b, i, float), w, n, 1e-5, what);
      if (i == 0) near_f(OUT(b, NC, float), w, n, 1e-5, "conv NHWC layout");
      free(w);
    }
  }
  hb_free(&b);
}

/* ---- gather / scatter ------------------------------------------------------------------------------------ */

TT_TEST(hlo_gather_embedding_and_points) {
  float table[5 * 3];
  for (int i = 0; i < 15; i++) table[i] = (float)i * 1.5f;
  int64_t ids[4] = {3, 0, 3, 4};
  int32_t pts[3 * 2] = {0, 2, 4, 1, 2, 2};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "gather", 1);
  tpu_hlo_value_t t = hb_arg(&b, TY(TPU_F32, D(5), D(3)), table);
  tpu_hlo_value_t i = hb_arg(&b, TY(TPU_S64, D(4)), ids);
  tpu_hlo_value_t p = hb_arg(&b, TY(TPU_S32, D(3), D(2)), pts);
  /* embedding: indices [4] with an implicit index vector (index_vector_dim = 1) */
  tpu_hlo_gather_dims_t d = {.noffset = 1, .offset_dims = {1}, .ncollapsed = 1, .collapsed_slice_dims = {0},
                             .nstart_map = 1, .start_index_map = {0}, .index_vector_dim = 1, .slice_sizes = {1, 3}};
  tpu_hlo_value_t r[2];
  r[0] = tpu_hlo_gather(f, t, i, &d);
  const tpu_hlo_type_t *rt = tpu_hlo_type_of(f, r[0]);
  TT_CHECK(rt->rank == 2 && rt->dims[0] == 4 && rt->dims[1] == 3);
  /* points: table[r, c] for (r, c) rows of p */
  tpu_hlo_gather_dims_t d2 = {.ncollapsed = 2, .collapsed_slice_dims = {0, 1}, .nstart_map = 2,
                              .start_index_map = {0, 1}, .index_vector_dim = 1, .slice_sizes = {1, 1}};
  r[1] = tpu_hlo_gather(f, t, p, &d2);
  if (hb_run(&b, r, 2)) {
    float w[12];
    for (int k = 0; k < 4; k++)
      for (int j = 0; j < 3; j++) w[k * 3 + j] = table[ids[k] * 3 + j];
    near_f(OUT(b, 0, float), w, 12, 0, "embedding gather");
    float w2[3];
    for (int k = 0; k < 3; k++) w2[k] = table[pts[2 * k] * 3 + pts[2 * k + 1]];
    near_f(OUT(b, 1, float), w2, 3, 0, "point gather");
  }
  hb_free(&b);
}

TT_TEST(hlo_scatter_index_put_add_and_replace) {
  float base[5 * 3];
  for (int i = 0; i < 15; i++) base[i] = (float)i;
  int64_t rows[4][1] = {{1}, {3}, {1}, {0}};
  float upd[4 * 3];
  for (int i = 0; i < 12; i++) upd[i] = (float)(i + 1) * 10;
  int32_t pts[2][2] = {{0, 2}, {4, 1}};
  float pv[2] = {-1, -2};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "scatter", 1);
  tpu_hlo_value_t x = hb_arg(&b, TY(TPU_F32, D(5), D(3)), base);
  tpu_hlo_value_t i = hb_arg(&b, TY(TPU_S64, D(4), D(1)), rows);
  tpu_hlo_value_t u = hb_arg(&b, TY(TPU_F32, D(4), D(3)), upd);
  tpu_hlo_value_t p = hb_arg(&b, TY(TPU_S32, D(2), D(2)), pts);
  tpu_hlo_value_t v = hb_arg(&b, TY(TPU_F32, D(2)), pv);
  tpu_hlo_scatter_dims_t d = {.nwindow = 1, .update_window_dims = {1}, .ninserted = 1, .inserted_window_dims = {0},
                              .nscatter_map = 1, .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1};
  tpu_hlo_value_t r[3];
  r[0] = tpu_hlo_scatter(f, x, i, u, &d, "add"); /* index_put_(accumulate=True) */
  tpu_hlo_scatter_dims_t d2 = {.ninserted = 2, .inserted_window_dims = {0, 1}, .nscatter_map = 2,
                               .scatter_dims_to_operand_dims = {0, 1}, .index_vector_dim = 1, .unique_indices = true};
  r[1] = tpu_hlo_scatter(f, x, p, v, &d2, "replace");
  r[2] = tpu_hlo_scatter(f, x, i, u, &d, "maximum");
  if (hb_run(&b, r, 3)) {
    float w[15], w2[15], w3[15];
    memcpy(w, base, sizeof(w));
    memcpy(w2, base, sizeof(w2));
    memcpy(w3, base, sizeof(w3));
    for (int k = 0; k < 4; k++)
      for (int j = 0; j < 3; j++) {
        w[rows[k][0] * 3 + j] += upd[k * 3 + j];
        w3[rows[k][0] * 3 + j] = fmaxf(w3[rows[k][0] * 3 + j], upd[k * 3 + j]);
      }
    for (int k = 0; k < 2; k++) w2[pts[k][0] * 3 + pts[k][1]] = pv[k];
    near_f(OUT(b, 0, float), w, 15, 0, "scatter add");
    near_f(OUT(b, 1, float), w2, 15, 0, "scatter replace");
    near_f(OUT(b, 2, float), w3, 15, 0, "scatter max");
  }
  hb_free(&b);
}

/* ---- sort ------------------------------------------------------------------------------------------------- */

TT_TEST(hlo_sort_stable_with_indices_and_nan) {
  enum { N = 9 };
  float x[N] = {3, NAN, 1, 2, 1, -INFINITY, NAN, 0.0f, -0.0f};
  int32_t m[2 * 3] = {5, -1, 7, 2, 9, 7};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "sort", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(N)), x);
  tpu_hlo_value_t mm = hb_arg(&b, TY(TPU_S32, D(2), D(3)), m);
  tpu_hlo_value_t r[6], idx = TPU_HLO_NONE, idx2 = TPU_HLO_NONE, idx3 = TPU_HLO_NONE;
  r[0] = tpu_hlo_sort(f, a, 0, false, &idx);
  r[1] = idx;
  r[2] = tpu_hlo_sort(f, a, 0, true, &idx2);
  r[3] = idx2;
  r[4] = tpu_hlo_sort(f, mm, 0, true, &idx3);
  r[5] = idx3;
  tpu_hlo_value_t only = tpu_hlo_sort(f, a, 0, false, NULL);
  TT_CHECK(only >= 0);
  if (hb_run(&b, r, 6)) {
    int64_t wi[N] = {5, 7, 8, 2, 4, 3, 0, 1, 6};
    eq_i64(OUT(b, 1, int64_t), wi, N, "ascending indices");
    float wv[N];
    for (int i = 0; i < N; i++) wv[i] = x[wi[i]];
    near_f(OUT(b, 0, float), wv, N, 0, "ascending values");
    TT_CHECK(!signbit(OUT(b, 0, float)[1]) && signbit(OUT(b, 0, float)[2]));
    int64_t wd[N] = {1, 6, 0, 3, 2, 4, 7, 8, 5};
    eq_i64(OUT(b, 3, int64_t), wd, N, "descending indices");
    for (int i = 0; i < N; i++) wv[i] = x[wd[i]];
    near_f(OUT(b, 2, float), wv, N, 0, "descending values");
    /* columns of m sorted descending: {5,2}, {9,-1}, {7,7} (tie keeps order) */
    int32_t wm[6] = {5, 9, 7, 2, -1, 7};
    eq_i32(OUT(b, 4, int32_t), wm, 6, "2-D sort dim 0");
    int64_t wmi[6] = {0, 1, 0, 1, 0, 1};
    eq_i64(OUT(b, 5, int64_t), wmi, 6, "2-D sort indices");
  }
  hb_free(&b);
}

/* ---- rng ----------------------------------------------------------------------------------------------------- */

TT_TEST(hlo_rng_bit_generator_deterministic) {
  uint64_t s0[2] = {42, 7};
  hb_t b1, b2;
  uint32_t bits[2][64];
  uint64_t ns[2][2];
  for (int run = 0; run < 2; run++) {
    hb_t *b = run ? &b2 : &b1;
    tpu_hlo_func_t *f = hb_init(b, "rng", 1);
    tpu_hlo_value_t st = hb_arg(b, TY(TPU_U64, D(2)), s0);
    tpu_hlo_value_t nst = TPU_HLO_NONE;
    tpu_hlo_value_t r[4];
    r[0] = tpu_hlo_rng_bit_generator(f, st, TY(TPU_U32, D(8), D(8)), &nst);
    r[1] = nst;
    tpu_hlo_value_t nst2 = TPU_HLO_NONE;
    r[2] = tpu_hlo_rng_bit_generator(f, nst, TY(TPU_U32, D(8), D(8)), &nst2);
    r[3] = tpu_hlo_rng_bit_generator(f, st, TY(TPU_U64, D(3)), NULL);
    if (hb_run(b, r, 4)) {
      memcpy(bits[run], OUT(*b, 0, uint32_t), sizeof(bits[run]));
      memcpy(ns[run], OUT(*b, 1, uint64_t), sizeof(ns[run]));
      /* the next draw differs from the first */
      TT_CHECK(memcmp(OUT(*b, 0, uint32_t), OUT(*b, 2, uint32_t), 64 * 4) != 0);
      int distinct = 0;
      for (int i = 1; i < 64; i++) distinct += bits[run][i] != bits[run][0];
      TT_CHECK(distinct > 50);
    } else {
      memset(bits[run], run, sizeof(bits[run]));
    }
  }
  /* same state -> same bits and same new state; new state differs from old */
  TT_CHECK(!memcmp(bits[0], bits[1], sizeof(bits[0])));
  TT_CHECK(!memcmp(ns[0], ns[1], sizeof(ns[0])));
  TT_CHECK(memcmp(ns[0], s0, sizeof(s0)) != 0);
  hb_free(&b1);
  hb_free(&b2);
}

/* ---- collectives ------------------------------------------------------------------------------------------------ */

TT_TEST(hlo_collectives_over_two_replicas) {
  float x0[4] = {1, 2, 3, 4}, x1[4] = {10, 20, 30, -40};
  int64_t groups[2] = {0, 1};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "coll", 2);
  tpu_hlo_module_set_replicas(b.m, 2, 1);
  tpu_hlo_value_t a = hb_arg2(&b, TY(TPU_F32, D(4)), x0, x1);
  tpu_hlo_value_t r[4];
  r[0] = tpu_hlo_all_reduce(f, a, "add", groups, 1, 2);
  r[1] = tpu_hlo_all_gather(f, a, 0, groups, 1, 2);
  r[2] = tpu_hlo_reduce_scatter(f, a, 0, "add", groups, 1, 2);
  r[3] = tpu_hlo_all_reduce(f, a, "maximum", groups, 1, 2);
  TT_CHECK(tpu_hlo_type_of(f, r[1])->dims[0] == 8 && tpu_hlo_type_of(f, r[2])->dims[0] == 2);
  if (hb_run(&b, r, 4)) {
    for (int rep = 0; rep < 2; rep++) {
      float ws[4], wg[8], wm[4];
      for (int i = 0; i < 4; i++) {
        ws[i] = x0[i] + x1[i];
        wm[i] = fmaxf(x0[i], x1[i]);
        wg[i] = x0[i];
        wg[4 + i] = x1[i];
      }
      near_f(OUTR(b, rep, 0, float), ws, 4, 0, "all_reduce");
      near_f(OUTR(b, rep, 1, float), wg, 8, 0, "all_gather");
      near_f(OUTR(b, rep, 2, float), ws + 2 * rep, 2, 0, "reduce_scatter");
      near_f(OUTR(b, rep, 3, float), wm, 4, 0, "all_reduce max");
    }
  }
  hb_free(&b);
}

/* ---- aliasing, chains, errors ---------------------------------------------------------------------------------- */

TT_TEST(hlo_alias_donated_argument_runs) {
  float x[4] = {1, 2, 3, 4}, y[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "sgd", 1);
  tpu_hlo_value_t p = hb_arg(&b, TY(TPU_F32, D(4)), x), g = hb_arg(&b, TY(TPU_F32, D(4)), y);
  tpu_hlo_value_t lr = hb_arg(&b, TY0(TPU_F32), &y[0]);
  tpu_hlo_value_t step = tpu_hlo_binary(f, "multiply", g, tpu_hlo_broadcast_to(f, lr, 1, (int64_t[]){4}));
  tpu_hlo_value_t r = tpu_hlo_binary(f, "subtract", p, step);
  tpu_hlo_func_alias(f, 0, 0);
  if (hb_run(&b, &r, 1)) {
    float w[4] = {0.75f, 1.75f, 2.75f, 3.75f};
    near_f(OUT(b, 0, float), w, 4, 0, "sgd step");
  }
  hb_free(&b);
}

TT_TEST(hlo_errors_are_sticky_and_clear) {
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("bad", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t a = tpu_hlo_func_arg(f, TY(TPU_F32, D(2), D(3)));
  tpu_hlo_value_t c = tpu_hlo_func_arg(f, TY(TPU_F32, D(3), D(2)));
  TT_CHECK(tpu_hlo_func_status(f) == NULL);
  tpu_hlo_value_t s = tpu_hlo_binary(f, "add", a, c);
  TT_CHECK(s == TPU_HLO_NONE);
  expect_error(f, "add", "tensor<2x3xf32>");
  expect_error(f, "tensor<3x2xf32>", "shape mismatch");
  /* later emitters return NONE, the first error stays */
  tpu_hlo_value_t n = tpu_hlo_unary(f, "negate", s);
  TT_CHECK(n == TPU_HLO_NONE);
  TT_CHECK(tpu_hlo_unary(f, "negate", a) == TPU_HLO_NONE);
  TT_CHECK(tpu_hlo_type_of(f, n)->dtype == TPU_DTYPE_INVALID); /* no crash on NONE */
  tpu_hlo_value_t nn = tpu_hlo_reshape(f, a, 1, (int64_t[]){7});
  TT_CHECK(nn == TPU_HLO_NONE);
  expect_error(f, "add", "shape mismatch");
  tpu_hlo_func_return(f, &n, 1);
  const char *text = (const char *)1;
  tpu_status_t st = tpu_hlo_module_text(m, &text, NULL);
  TT_CHECK(st != NULL && text == NULL);
  if (st) {
    TT_CHECK(tpu_status_code(st) == TPU_INVALID_ARGUMENT);
    TT_CHECK(strstr(tpu_status_message(st), "add: shape mismatch") != NULL);
    tpu_status_free(st); /* a copy: the function keeps its own */
  }
  TT_CHECK(tpu_hlo_func_status(f) != NULL);
  tpu_hlo_module_destroy(m);

  /* one module per bad call: each message names the op and the shapes */
  struct { const char *n1, *n2; } want[] = {
      {"add", "element type mismatch"}, {"reshape", "element count"}, {"dot_general", "contracting"},
      {"convolution", "feature_group_count"}, {"unary: unknown op", "frobnicate"}, {"concatenate", "operand 1"},
      {"reduce", "init value"}, {"broadcast_in_dim", "cannot broadcast"}, {"gather", "index vector length"},
      {"scatter", "update scatter dim"}, {"slice", "limit"}, {"transpose", "permutation"},
      {"select", "predicate must be i1"}, {"compare", "unknown direction"}, {"reduce_scatter", "divisible"},
      {"rng_bit_generator", "tensor<2xui64>"}, {"sqrt", "floating-point"}, {"pad", "negative result size"},
  };
  for (int k = 0; k < (int)(sizeof(want) / sizeof(want[0])); k++) {
    TT_CHECK_OK(tpu_hlo_module_create("bad", &m));
    f = tpu_hlo_module_main(m);
    tpu_hlo_value_t x = tpu_hlo_func_arg(f, TY(TPU_F32, D(2), D(3)));
    tpu_hlo_value_t xi = tpu_hlo_func_arg(f, TY(TPU_S32, D(2), D(3)));
    tpu_hlo_value_t y = tpu_hlo_func_arg(f, TY(TPU_F32, D(4), D(5)));
    switch (k) {
      case 0: tpu_hlo_binary(f, "add", x, xi); break;
      case 1: tpu_hlo_reshape(f, x, 1, (int64_t[]){5}); break;
      case 2: {
        tpu_hlo_dot_dims_t d = {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
        tpu_hlo_dot_general(f, x, y, &d, TPU_DTYPE_INVALID);
        break;
      }
      case 3: {
        tpu_hlo_conv_dims_t d;
        tpu_hlo_conv_dims_nchw(&d, 0);
        d.feature_group_count = 2;
        tpu_hlo_convolution(f, x, x, &d);
        break;
      }
      case 4: tpu_hlo_unary(f, "frobnicate", x); break;
      case 5: tpu_hlo_concatenate(f, (tpu_hlo_value_t[]){x, y}, 2, 0); break;
      case 6: tpu_hlo_reduce(f, x, tpu_hlo_scalar(f, TPU_S32, 0), (int64_t[]){0}, 1, "add"); break;
      case 7: tpu_hlo_broadcast_in_dim(f, x, TY(TPU_F32, D(2), D(4)), (int64_t[]){0, 1}); break;
      case 8: {
        tpu_hlo_gather_dims_t d = {.noffset = 1, .offset_dims = {1}, .ncollapsed = 1, .collapsed_slice_dims = {0},
                                   .nstart_map = 1, .start_index_map = {0}, .index_vector_dim = 1,
                                   .slice_sizes = {1, 3}};
        tpu_hlo_gather(f, x, xi, &d); /* index vectors of length 3 */
        break;
      }
      case 9: {
        tpu_hlo_scatter_dims_t d = {.nwindow = 1, .update_window_dims = {1}, .ninserted = 1,
                                    .inserted_window_dims = {0}, .nscatter_map = 1,
                                    .scatter_dims_to_operand_dims = {0}, .index_vector_dim = 1};
        tpu_hlo_value_t idx = tpu_hlo_iota(f, TY(TPU_S32, D(3), D(1)), 0);
        tpu_hlo_scatter(f, x, idx, x, &d, "add"); /* 2 update rows for 3 indices */
        break;
      }
      case 10: tpu_hlo_slice(f, x, (int64_t[]){0, 0}, (int64_t[]){2, 4}, NULL); break;
      case 11: tpu_hlo_transpose(f, x, (int64_t[]){0, 0}); break;
      case 12: tpu_hlo_select(f, x, x, x); break;
      case 13: tpu_hlo_compare(f, "LTE", x, x); break;
      case 14: tpu_hlo_reduce_scatter(f, x, 1, "add", (int64_t[]){0, 1}, 1, 2); break;
      case 15: tpu_hlo_rng_bit_generator(f, x, TY(TPU_U32, D(4)), NULL); break;
      case 16: tpu_hlo_unary(f, "sqrt", xi); break;
      case 17: tpu_hlo_pad(f, x, tpu_hlo_scalar(f, TPU_F32, 0), (int64_t[]){-2, 0}, (int64_t[]){-1, 0}, NULL); break;
    }
    expect_error(f, want[k].n1, want[k].n2);
    tpu_hlo_module_destroy(m);
  }
}

TT_TEST(hlo_many_ops_build_linearly) {
  /* a long chain (a fused graph): 20000 ops build fast and compile/run */
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("chain", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t x = tpu_hlo_func_arg(f, TY(TPU_F32, D(16)));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tpu_hlo_value_t one = tpu_hlo_constant(f, TY(TPU_F32, D(16)), 1.0);
  tpu_hlo_value_t v = x;
  for (int i = 0; i < 20000; i++) v = tpu_hlo_binary(f, "add", v, one);
  tpu_hlo_func_return(f, &v, 1);
  const char *text = NULL;
  size_t len = 0;
  TT_CHECK_OK(tpu_hlo_module_text(m, &text, &len));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  /* ~20 ms expected natively; quadratic work would take seconds */
  if (!getenv("TORCH_TPU_VALGRIND")) TT_CHECK(ms < 500);
  TT_CHECK(len > 20000 * 60);
  tpu_hlo_module_destroy(m);
}

TT_TEST(hlo_zero_sized_and_scalar_programs) {
  float x[1] = {0};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "empty", 1);
  tpu_hlo_value_t e = hb_arg(&b, TY(TPU_F32, D(0), D(3)), x);
  tpu_hlo_value_t r[3];
  r[0] = tpu_hlo_reduce(f, e, tpu_hlo_scalar(f, TPU_F32, 0), (int64_t[]){0}, 1, "add"); /* [3] zeros */
  r[1] = tpu_hlo_binary(f, "add", e, e);                                               /* [0, 3] */
  r[2] = tpu_hlo_constant(f, TY(TPU_S32, D(0)), 5);
  if (hb_run(&b, r, 3)) {
    float w[3] = {0, 0, 0};
    near_f(OUT(b, 0, float), w, 3, 0, "sum over empty");
  }
  hb_free(&b);
}

TT_TEST(hlo_select_on_sign_of_input) {
  float x[4] = {-1, -4.5f, 0.5f, 2};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "sgn", 1);
  tpu_hlo_type_t t = TY(TPU_F32, D(4));
  tpu_hlo_value_t a = hb_arg(&b, t, x);
  tpu_hlo_value_t y = tpu_hlo_binary(f, "multiply", tpu_hlo_unary(f, "abs", a), tpu_hlo_constant(f, t, 0.5));
  tpu_hlo_value_t p = tpu_hlo_compare(f, "LT", a, tpu_hlo_constant(f, t, 0.0));
  tpu_hlo_value_t r[2];
  r[0] = tpu_hlo_select(f, p, tpu_hlo_binary(f, "subtract", tpu_hlo_constant(f, t, 2.0), y), y);
  r[1] = tpu_hlo_convert(f, p, TPU_F32);
  if (hb_run(&b, r, 2)) {
    float w[4], w1[4];
    for (int i = 0; i < 4; i++) {
      float yy = fabsf(x[i]) * 0.5f;
      w[i] = x[i] < 0 ? 2 - yy : yy;
      w1[i] = x[i] < 0;
    }
    near_f(OUT(b, 0, float), w, 4, 0, "select on sign");
    near_f(OUT(b, 1, float), w1, 4, 0, "x < 0");
  }
  hb_free(&b);
}

TT_TEST(hlo_all_to_all_and_collective_permute) {
  float x0[4] = {1, 2, 3, 4}, x1[4] = {10, 20, 30, 40};
  int64_t groups[2] = {0, 1}, swap[4] = {0, 1, 1, 0}, one_way[2] = {0, 1};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "a2a", 2);
  tpu_hlo_module_set_replicas(b.m, 2, 1);
  tpu_hlo_value_t a = hb_arg2(&b, TY(TPU_F32, D(4)), x0, x1);
  tpu_hlo_value_t r[3];
  r[0] = tpu_hlo_all_to_all(f, a, 0, 0, groups, 1, 2);
  r[1] = tpu_hlo_collective_permute(f, a, swap, 2);
  r[2] = tpu_hlo_collective_permute(f, a, one_way, 1);
  if (hb_run(&b, r, 3)) {
    /* replica r receives block r of each member: r0 = {1,2,10,20}, r1 = {3,4,30,40} */
    float w0[4] = {1, 2, 10, 20}, w1[4] = {3, 4, 30, 40}, z[4] = {0, 0, 0, 0};
    near_f(OUTR(b, 0, 0, float), w0, 4, 0, "all_to_all r0");
    near_f(OUTR(b, 1, 0, float), w1, 4, 0, "all_to_all r1");
    near_f(OUTR(b, 0, 1, float), x1, 4, 0, "permute swap r0");
    near_f(OUTR(b, 1, 1, float), x0, 4, 0, "permute swap r1");
    near_f(OUTR(b, 0, 2, float), z, 4, 0, "permute one-way r0 (receives nothing)");
    near_f(OUTR(b, 1, 2, float), x0, 4, 0, "permute one-way r1");
  }
  hb_free(&b);
}

TT_TEST(hlo_precision_config_on_dot_and_conv) {
  float x[2 * 3] = {1, 2, 3, 4, 5, 6}, y[3 * 2] = {1, 0, 0, 1, 1, 1};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "prec", 1);
  tpu_hlo_module_set_precision(b.m, "HIGHEST");
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(2), D(3)), x), c = hb_arg(&b, TY(TPU_F32, D(3), D(2)), y);
  tpu_hlo_dot_dims_t d = {.ncontract = 1, .lhs_contract = {1}, .rhs_contract = {0}};
  tpu_hlo_value_t r[2];
  r[0] = tpu_hlo_dot_general(f, a, c, &d, TPU_DTYPE_INVALID);
  /* a 1-D convolution [N=1, C=1, W=6] with kernel [1, 1, 2] */
  tpu_hlo_conv_dims_t cd;
  tpu_hlo_conv_dims_nchw(&cd, 1);
  int64_t in_dims[3] = {1, 1, 6}, k_dims[3] = {1, 1, 2};
  tpu_hlo_value_t k = tpu_hlo_reshape(f, tpu_hlo_slice(f, tpu_hlo_reshape(f, c, 1, (int64_t[]){6}), (int64_t[]){0},
                                                        (int64_t[]){2}, NULL), 3, k_dims);
  r[1] = tpu_hlo_convolution(f, tpu_hlo_reshape(f, a, 3, in_dims), k, &cd);
  if (hb_run(&b, r, 2)) {
    float w[4] = {1 + 3, 2 + 3, 4 + 6, 5 + 6};
    near_f(OUT(b, 0, float), w, 4, 0, "dot HIGHEST");
    float wc[5] = {1, 2, 3, 4, 5}; /* kernel {1, 0} */
    near_f(OUT(b, 1, float), wc, 5, 0, "conv HIGHEST");
  }
  const char *text = NULL;
  tpu_status_t st = tpu_hlo_module_text(b.m, &text, NULL);
  TT_CHECK(!st && strstr(text, "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"));
  tpu_status_free(st);
  hb_free(&b);
  /* an unknown precision is a clear error */
  tpu_hlo_module_t *m = NULL;
  TT_CHECK_OK(tpu_hlo_module_create("p", &m));
  tpu_hlo_module_set_precision(m, "FASTEST");
  expect_error(tpu_hlo_module_main(m), "precision", "FASTEST");
  tpu_hlo_module_destroy(m);
}

TT_TEST(hlo_complex_constants_and_parts) {
  float re[3] = {1, -2, 0.5f}, im[3] = {0, 3, -4};
  hb_t b;
  tpu_hlo_func_t *f = hb_init(&b, "cplx", 1);
  tpu_hlo_value_t a = hb_arg(&b, TY(TPU_F32, D(3)), re), c = hb_arg(&b, TY(TPU_F32, D(3)), im);
  tpu_hlo_value_t z = tpu_hlo_binary(f, "complex", a, c);
  TT_CHECK(tpu_hlo_type_of(f, z)->dtype == TPU_C64);
  tpu_hlo_value_t z2 = tpu_hlo_binary(f, "add", z, tpu_hlo_constant(f, TY(TPU_C64, D(3)), 2));
  tpu_hlo_value_t r[4];
  r[0] = tpu_hlo_unary(f, "real", z2);
  r[1] = tpu_hlo_unary(f, "imag", z2);
  r[2] = tpu_hlo_unary(f, "abs", z);
  r[3] = tpu_hlo_constant_i64s(f, TY(TPU_S32, D(0)), (const int64_t *)re); /* empty dense */
  TT_CHECK(tpu_hlo_type_of(f, r[2])->dtype == TPU_F32);
  if (hb_run(&b, r, 4)) {
    float w0[3], w2[3];
    for (int i = 0; i < 3; i++) {
      w0[i] = re[i] + 2;
      w2[i] = hypotf(re[i], im[i]);
    }
    near_f(OUT(b, 0, float), w0, 3, 0, "real");
    near_f(OUT(b, 1, float), im, 3, 0, "imag");
    near_f(OUT(b, 2, float), w2, 3, 1e-6, "abs complex");
  }
  hb_free(&b);
}
