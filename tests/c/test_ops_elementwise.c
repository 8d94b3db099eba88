/* test_ops_elementwise.c - elementwise lowering rules run on the real plugin
 * and compared with values computed here in C.
 *
 * The helper tt_ops_run() lowers ONE rule into a fresh module (arguments of
 * the given types, the rule's outputs returned), compiles it, uploads the
 * inputs, runs and downloads every output as doubles.  test_ops_reduce.c uses
 * it too.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"
#include "ops/ops.h"
#include "tinytest.h"

#include "tt_ops.h"


/* ---- host values <-> device bytes ----------------------------------------- */

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* nan */
  u += 0x7fffu + ((u >> 16) & 1u);                                          /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f32_to_f16(float f) {
  _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}
static float f16_to_f32(uint16_t u) {
  _Float16 h;
  memcpy(&h, &u, 2);
  return (float)h;
}

static void encode(tpu_dtype_t dt, double v, void *dst) {
  switch (dt) {
    case TPU_PRED: *(uint8_t *)dst = v != 0; break;
    case TPU_S8: *(int8_t *)dst = (int8_t)v; break;
    case TPU_S16: *(int16_t *)dst = (int16_t)v; break;
    case TPU_S32: *(int32_t *)dst = (int32_t)v; break;
    case TPU_S64: *(int64_t *)dst = (int64_t)v; break;
    case TPU_U8: *(uint8_t *)dst = (uint8_t)v; break;
    case TPU_U16: *(uint16_t *)dst = (uint16_t)v; break;
    case TPU_U32: *(uint32_t *)dst = (uint32_t)v; break;
    case TPU_U64: *(uint64_t *)dst = (uint64_t)v; break;
    case TPU_F16: *(uint16_t *)dst = f32_to_f16((float)v); break;
    case TPU_BF16: *(uint16_t *)dst = f32_to_bf16((float)v); break;
    case TPU_F32: *(float *)dst = (float)v; break;
    case TPU_F64: *(double *)dst = v; break;
    default: break;
  }
}

static double decode(tpu_dtype_t dt, const void *src) {
  switch (dt) {
    case TPU_PRED: return *(const uint8_t *)src != 0;
    case TPU_S8: return *(const int8_t *)src;
    case TPU_S16: return *(const int16_t *)src;
    case TPU_S32: return *(const int32_t *)src;
    case TPU_S64: return (double)*(const int64_t *)src;
    case TPU_U8: return *(const uint8_t *)src;
    case TPU_U16: return *(const uint16_t *)src;
    case TPU_U32: return *(const uint32_t *)src;
    case TPU_U64: return (double)*(const uint64_t *)src;
    case TPU_F16: return f16_to_f32(*(const uint16_t *)src);
    case TPU_BF16: return bf16_to_f32(*(const uint16_t *)src);
    case TPU_F32: return *(const float *)src;
    case TPU_F64: return *(const double *)src;
    default: return NAN;
  }
}

double tt_ops_round(tpu_dtype_t dt, double v) {
  unsigned char b[16];
  encode(dt, v, b);
  return decode(dt, b);
}

int64_t tt_ops_numel(const tt_ten_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

tt_ten_t tt_ten(tpu_dtype_t dt, int rank, const int64_t *dims, const double *vals) {
  tt_ten_t t;
  memset(&t, 0, sizeof(t));
  t.dt = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  t.vals = vals;
  return t;
}

void tt_ops_free(tt_ten_t *outs, int n) {
  for (int i = 0; i < n; i++) {
    free(outs[i].owned);
    outs[i].owned = NULL;
    outs[i].vals = NULL;
  }
}

/* Lowers into a fresh module; returns the lowering status (caller frees). */
static tpu_status_t lower_module(const char *rule_name, const tt_ten_t *in, int nin, const int64_t *ints, int nints,
                                 const double *floats, int nfloats, tpu_hlo_module_t **out_m, int *out_n) {
  const tpu_op_rule_t *rule = tpu_op_rule_find(rule_name);
  if (!rule) return tpu_status_make(TPU_NOT_FOUND, "no rule %s", rule_name);
  tpu_hlo_module_t *m = NULL;
  TPU_PROPAGATE(tpu_hlo_module_create("t", &m));
  tpu_hlo_func_t *f = tpu_hlo_module_main(m);
  tpu_hlo_value_t args[TPU_OP_MAX_INPUTS];
  for (int i = 0; i < nin; i++) args[i] = tpu_hlo_func_arg(f, tpu_hlo_type_make(in[i].dt, in[i].rank, in[i].dims));
  tpu_op_attrs_t attrs = {nints, ints, nfloats, floats};
  tpu_hlo_value_t outs[TPU_OP_MAX_OUTPUTS];
  int n = 0;
  tpu_status_t st = tpu_op_lower(rule, f, args, nin, &attrs, outs, &n);
  if (st) {
    tpu_hlo_module_destroy(m);
    return st;
  }
  tpu_hlo_func_return(f, outs, n);
  *out_m = m;
  *out_n = n;
  return NULL;
}

tpu_status_t tt_ops_lower_status(const char *rule, const tt_ten_t *in, int nin, const int64_t *ints, int nints,
                                 const double *floats, int nfloats) {
  tpu_hlo_module_t *m = NULL;
  int n = 0;
  tpu_status_t st = lower_module(rule, in, nin, ints, nints, floats, nfloats, &m, &n);
  if (st) return st;
  const char *text;
  size_t len;
  st = tpu_hlo_module_text(m, &text, &len);
  tpu_hlo_module_destroy(m);
  return st;
}

int tt_ops_run(const char *rule, const tt_ten_t *in, int nin, const int64_t *ints, int nints, const double *floats,
               int nfloats, tt_ten_t *outs, int max_out) {
  tpu_pjrt_client_t *client = tt_client();
  if (!client) {
    tt_failed_checks++;
    return -1;
  }
  tpu_hlo_module_t *m = NULL;
  int n = 0;
  tpu_status_t st = lower_module(rule, in, nin, ints, nints, floats, nfloats, &m, &n);
  const char *text = NULL;
  size_t len = 0;
  if (!st) st = tpu_hlo_module_text(m, &text, &len);
  tpu_pjrt_exec_t *exec = NULL;
  tpu_pjrt_compile_options_t copts = {0};
  if (!st) st = tpu_pjrt_compile(client, text, len, &copts, &exec);
  if (st && text && getenv("TT_OPS_DUMP")) fprintf(stderr, "%s\n", text);
  tpu_pjrt_buffer_t *bufs[TPU_OP_MAX_INPUTS] = {0};
  tpu_pjrt_buffer_t *obufs[TPU_OP_MAX_OUTPUTS] = {0};
  for (int i = 0; !st && i < nin; i++) {
    int64_t ne = tt_ops_numel(&in[i]);
    size_t es = tpu_dtype_size(in[i].dt);
    unsigned char *host = malloc((size_t)(ne ? ne : 1) * es);
    for (int64_t j = 0; j < ne; j++) encode(in[i].dt, in[i].vals[j], host + (size_t)j * es);
    st = tpu_pjrt_buffer_from_host(client, 0, in[i].dt, in[i].dims, in[i].rank, host, &bufs[i]);
    free(host);
  }
  if (!st) {
    tpu_pjrt_buffer_t *const *lists[1] = {bufs};
    tpu_pjrt_buffer_t **olists[1] = {obufs};
    st = tpu_pjrt_execute(exec, lists, 1, (size_t)nin, NULL, olists);
  }
  int nout = 0;
  for (int o = 0; !st && o < n && o < max_out; o++) {
    tt_ten_t *t = &outs[o];
    memset(t, 0, sizeof(*t));
    t->dt = tpu_pjrt_buffer_dtype(obufs[o]);
    t->rank = tpu_pjrt_buffer_rank(obufs[o]);
    memcpy(t->dims, tpu_pjrt_buffer_dims(obufs[o]), sizeof(int64_t) * (size_t)t->rank);
    size_t nb = tpu_pjrt_buffer_nbytes(obufs[o]);
    unsigned char *host = malloc(nb ? nb : 1);
    st = tpu_pjrt_buffer_to_host(obufs[o], host, nb);
    int64_t ne = tt_ops_numel(t);
    t->owned = malloc(sizeof(double) * (size_t)(ne ? ne : 1));
    size_t es = tpu_dtype_size(t->dt);
    for (int64_t j = 0; !st && j < ne; j++) t->owned[j] = decode(t->dt, host + (size_t)j * es);
    t->vals = t->owned;
    free(host);
    nout++;
  }
  for (int i = 0; i < nin; i++)
    if (bufs[i]) tpu_pjrt_buffer_destroy(bufs[i]);
  for (int o = 0; o < n; o++)
    if (obufs[o]) tpu_pjrt_buffer_destroy(obufs[o]);
  if (exec) tpu_pjrt_exec_destroy(exec);
  if (m) tpu_hlo_module_destroy(m);
  if (st) {
    fprintf(stderr, "  %s: %s: %s\n", rule, tpu_code_name(tpu_status_code(st)), tpu_status_message(st));
    tpu_status_free(st);
    tt_ops_free(outs, nout);
    tt_failed_checks++;
    return -1;
  }
  return nout;
}

int tt_ops_close(double got, double want, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

int tt_ops_expect(const char *what, const tt_ten_t *got, tpu_dtype_t dt, int rank, const int64_t *dims,
                  const double *want, double rtol, double atol) {
  int bad = 0;
  if (got->dt != dt || got->rank != rank) {
    fprintf(stderr, "  %s: got dtype %s rank %d, wanted %s rank %d\n", what, tpu_dtype_name(got->dt), got->rank,
            tpu_dtype_name(dt), rank);
    tt_failed_checks++;
    return 0;
  }
  for (int i = 0; i < rank; i++) {
    if (got->dims[i] != dims[i]) {
      fprintf(stderr, "  %s: dim %d is %lld, wanted %lld\n", what, i, (long long)got->dims[i], (long long)dims[i]);
      tt_failed_checks++;
      return 0;
    }
  }
  int64_t n = tt_ops_numel(got);
  for (int64_t j = 0; j < n; j++) {
    if (!tt_ops_close(got->vals[j], want[j], rtol, atol)) {
      if (bad < 5)
        fprintf(stderr, "  %s: [%lld] = %.9g, wanted %.9g\n", what, (long long)j, got->vals[j], want[j]);
      bad++;
    }
  }
  if (bad) tt_failed_checks++;
  return bad == 0;
}

/* ---- one-input math rules against libm ------------------------------------- */

typedef double (*ref1_fn)(double);
static double r_neg(double x) { return -x; }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_recip(double x) { return 1.0 / x; }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_frac(double x) { return x - trunc(x); }
static double r_sign(double x) { return (x > 0) - (x < 0); }
static double r_square(double x) { return x * x; }
static double r_relu(double x) { return x > 0 ? x : (isnan(x) ? x : 0); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_mish(double x) { return x * tanh(log1p(exp(x))); }
static double r_hardsigmoid(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
static double r_hardswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double r_rint(double x) { return nearbyint(x); }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double r_exp2(double x) { return exp2(x); }

/* erfinv by Newton on erf (reference only). */
static double r_erfinv(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  double x = 0;
  for (int i = 0; i < 100; i++) x -= (erf(x) - y) / (2 / sqrt(M_PI) * exp(-x * x));
  return x;
}

typedef struct {
  const char *rule;
  ref1_fn ref;
  double lo, hi; /* domain of the sample points */
} unary_case_t;

static const unary_case_t k_unary[] = {
    {"neg", r_neg, -5, 5},        {"abs", fabs, -5, 5},          {"exp", exp, -10, 10},
    {"exp2", r_exp2, -10, 10},    {"expm1", expm1, -3, 3},       {"log", log, 0.01, 100},
    {"log2", log2, 0.01, 100},    {"log10", log10, 0.01, 100},   {"log1p", log1p, -0.9, 10},
    {"sqrt", sqrt, 0, 100},       {"rsqrt", r_rsqrt, 0.01, 100}, {"reciprocal", r_recip, 0.1, 10},
    {"sigmoid", r_sigmoid, -20, 20}, {"tanh", tanh, -5, 5},      {"sin", sin, -6, 6},
    {"cos", cos, -6, 6},          {"tan", tan, -1.4, 1.4},       {"asin", asin, -1, 1},
    {"acos", acos, -1, 1},        {"atan", atan, -10, 10},       {"sinh", sinh, -20, 20},
    {"cosh", cosh, -20, 20},      {"asinh", asinh, -1e5, 1e5},   {"acosh", acosh, 1, 1e5},
    {"atanh", atanh, -0.99, 0.99}, {"erf", erf, -5, 5},          {"erfc", erfc, -3, 9},
    {"erfinv", r_erfinv, -0.999, 0.999}, {"floor", floor, -5, 5}, {"ceil", ceil, -5, 5},
    {"round", r_rint, -5, 5},     {"trunc", trunc, -5, 5},       {"frac", r_frac, -5, 5},
    {"sign", r_sign, -5, 5},      {"square", r_square, -5, 5},   {"relu", r_relu, -5, 5},
    {"silu", r_silu, -10, 10},    {"mish", r_mish, -10, 10},     {"hardsigmoid", r_hardsigmoid, -5, 5},
    {"hardswish", r_hardswish, -5, 5}, {"gelu", r_gelu, -5, 5},
};

#define NPTS 41

static void check_unary(const unary_case_t *uc, tpu_dtype_t dt, double rtol, double atol) {
  double x[NPTS], want[NPTS];
  for (int i = 0; i < NPTS; i++) {
    x[i] = tt_ops_round(dt, uc->lo + (uc->hi - uc->lo) * i / (NPTS - 1));
    want[i] = tt_ops_round(dt, uc->ref(x[i]));
  }
  int64_t dims[1] = {NPTS};
  tt_ten_t in = tt_ten(dt, 1, dims, x);
  int64_t ints[1] = {dt};
  tt_ten_t out[1];
  if (tt_ops_run(uc->rule, &in, 1, ints, 1, NULL, 0, out, 1) != 1) return;
  char what[96];
  snprintf(what, sizeof(what), "%s(%s)", uc->rule, tpu_dtype_name(dt));
  tt_ops_expect(what, &out[0], dt, 1, dims, want, rtol, atol);
  tt_ops_free(out, 1);
}

TT_TEST(ops_elementwise_unary_f32) {
  for (size_t i = 0; i < sizeof(k_unary) / sizeof(k_unary[0]); i++) check_unary(&k_unary[i], TPU_F32, 2e-6, 1e-6);
}

TT_TEST(ops_elementwise_unary_f64) {
  for (size_t i = 0; i < sizeof(k_unary) / sizeof(k_unary[0]); i++) check_unary(&k_unary[i], TPU_F64, 1e-12, 1e-13);
}

TT_TEST(ops_elementwise_unary_bf16) {
  for (size_t i = 0; i < sizeof(k_unary) / sizeof(k_unary[0]); i++) check_unary(&k_unary[i], TPU_BF16, 1.6e-2, 1e-5);
}

/* erf/erfc/erfinv at the edges: +-inf, +-1, nan, huge. */
TT_TEST(ops_elementwise_erf_edges) {
  double x[] = {INFINITY, -INFINITY, NAN, 0.0, 30.0, -30.0, 1.0, -1.0, 0.5};
  int64_t dims[1] = {9};
  tpu_dtype_t dts[2] = {TPU_F32, TPU_F64};
  for (int d = 0; d < 2; d++) {
    tt_ten_t in = tt_ten(dts[d], 1, dims, x);
    int64_t ints[1] = {dts[d]};
    tt_ten_t out[1];
    double w_erf[9], w_erfc[9], w_inv[9];
    for (int i = 0; i < 9; i++) {
      w_erf[i] = erf(x[i]);
      w_erfc[i] = erfc(x[i]);
      w_inv[i] = r_erfinv(x[i]);
    }
    if (tt_ops_run("erf", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
      tt_ops_expect("erf edges", &out[0], dts[d], 1, dims, w_erf, 1e-6, 1e-7);
      tt_ops_free(out, 1);
    }
    if (tt_ops_run("erfc", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
      tt_ops_expect("erfc edges", &out[0], dts[d], 1, dims, w_erfc, 1e-6, 1e-7);
      tt_ops_free(out, 1);
    }
    if (tt_ops_run("erfinv", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
      tt_ops_expect("erfinv edges", &out[0], dts[d], 1, dims, w_inv, 1e-6, 1e-7);
      tt_ops_free(out, 1);
    }
  }
}

/* Integer input to a float op: the adapter's dtype attr promotes. */
TT_TEST(ops_elementwise_int_to_float_promotion) {
  double x[] = {1, 2, 3, 4};
  int64_t dims[1] = {4};
  tt_ten_t in = tt_ten(TPU_S64, 1, dims, x);
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("sqrt", &in, 1, ints, 1, NULL, 0, out, 1) != 1) return;
  double want[4] = {1, sqrt(2.0), sqrt(3.0), 2};
  tt_ops_expect("sqrt(int64)->f32", &out[0], TPU_F32, 1, dims, want, 1e-6, 0);
  tt_ops_free(out, 1);
}

/* ---- binary arithmetic ---------------------------------------------------------- */

TT_TEST(ops_elementwise_add_alpha_broadcast) {
  double a[] = {1, 2, 3, 4, 5, 6};
  double b[] = {10, 20, 30};
  double alpha[] = {0.5};
  int64_t da[2] = {2, 3}, db[1] = {3};
  tt_ten_t in[3] = {tt_ten(TPU_F32, 2, da, a), tt_ten(TPU_F32, 1, db, b), tt_ten(TPU_F32, 0, NULL, alpha)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {6, 12, 18, 9, 15, 21};
    tt_ops_expect("add alpha", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("sub", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {-4, -8, -12, -1, -5, -9};
    tt_ops_expect("sub alpha", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_add_mixed_dtypes) {
  /* int64 tensor + f32 scalar input -> f32 (the adapter's promoted dtype). */
  double a[] = {1, 2, 3};
  double s[] = {0.25};
  int64_t da[1] = {3};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, da, a), tt_ten(TPU_F32, 0, NULL, s)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 2, ints, 1, NULL, 0, out, 1) != 1) return;
  double want[3] = {1.25, 2.25, 3.25};
  tt_ops_expect("int64 + 0.25", &out[0], TPU_F32, 1, da, want, 0, 0);
  tt_ops_free(out, 1);
}

TT_TEST(ops_elementwise_bool_add_mul) {
  double a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
  int64_t d[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_PRED, 1, d, a), tt_ten(TPU_PRED, 1, d, b)};
  int64_t ints[1] = {TPU_PRED};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 1, 1, 1};
    tt_ops_expect("bool add", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("mul", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 0, 0, 1};
    tt_ops_expect("bool mul", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

static double py_floordiv(double a, double b) { return floor(a / b); }
static double py_mod(double a, double b) {
  double m = fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

TT_TEST(ops_elementwise_div_modes_int) {
  double a[] = {7, -7, 7, -7, 0, 5, -1, 9};
  double b[] = {2, 2, -2, -2, 3, 5, 3, -4};
  int64_t d[1] = {8};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, d, a), tt_ten(TPU_S64, 1, d, b)};
  double w_true[8], w_trunc[8], w_floor[8], w_rem[8], w_fmod[8];
  for (int i = 0; i < 8; i++) {
    w_true[i] = (double)(float)(a[i] / b[i]);
    w_trunc[i] = trunc(a[i] / b[i]);
    w_floor[i] = py_floordiv(a[i], b[i]);
    w_rem[i] = py_mod(a[i], b[i]);
    w_fmod[i] = fmod(a[i], b[i]);
  }
  tt_ten_t out[1];
  int64_t i_true[2] = {TPU_F32, 0}, i_trunc[2] = {TPU_S64, 1}, i_floor[2] = {TPU_S64, 2}, i_int[1] = {TPU_S64};
  if (tt_ops_run("div", in, 2, i_true, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int true div", &out[0], TPU_F32, 1, d, w_true, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("div", in, 2, i_trunc, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int trunc div", &out[0], TPU_S64, 1, d, w_trunc, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("div", in, 2, i_floor, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int floor div", &out[0], TPU_S64, 1, d, w_floor, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("remainder", in, 2, i_int, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int remainder", &out[0], TPU_S64, 1, d, w_rem, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("fmod", in, 2, i_int, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("int fmod", &out[0], TPU_S64, 1, d, w_fmod, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_div_modes_float) {
  double a[] = {7.5, -7.5, 7.5, -7.5, 0.0, 1.0, -1.0, 5.0, 1.0};
  double b[] = {2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 0.0, 0.1, 3.0};
  int64_t d[1] = {9};
  tt_ten_t in[2] = {tt_ten(TPU_F64, 1, d, a), tt_ten(TPU_F64, 1, d, b)};
  double w_trunc[9], w_floor[9], w_rem[9];
  for (int i = 0; i < 9; i++) {
    w_trunc[i] = trunc(a[i] / b[i]);
    /* Python's float // (what PyTorch matches): via fmod. */
    if (b[i] == 0) w_floor[i] = a[i] / b[i];
    else {
      double mod = fmod(a[i], b[i]);
      double div = (a[i] - mod) / b[i];
      if (mod != 0 && ((b[i] < 0) != (mod < 0))) div -= 1;
      double fl = floor(div);
      if (div - fl > 0.5) fl += 1;
      w_floor[i] = div != 0 ? fl : copysign(0, a[i] / b[i]);
    }
    w_rem[i] = b[i] == 0 ? NAN : py_mod(a[i], b[i]);
  }
  tt_ten_t out[1];
  int64_t i_trunc[2] = {TPU_F64, 1}, i_floor[2] = {TPU_F64, 2}, i_f[1] = {TPU_F64};
  if (tt_ops_run("div", in, 2, i_trunc, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("float trunc div", &out[0], TPU_F64, 1, d, w_trunc, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("div", in, 2, i_floor, 2, NULL, 0, out, 1) == 1) {
    tt_ops_expect("float floor div", &out[0], TPU_F64, 1, d, w_floor, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("remainder", in, 2, i_f, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("float remainder", &out[0], TPU_F64, 1, d, w_rem, 1e-15, 1e-15);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_pow) {
  double a[] = {2, -2, 1, -1, 3, 0};
  double b[] = {3, 3, -5, -3, -1, 0};
  int64_t d[1] = {6};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, d, a), tt_ten(TPU_S64, 1, d, b)};
  int64_t ints[1] = {TPU_S64};
  tt_ten_t out[1];
  if (tt_ops_run("pow", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {8, -8, 1, -1, 0, 1};
    tt_ops_expect("int pow", &out[0], TPU_S64, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* float tensor ** scalar and scalar ** tensor */
  double x[] = {0.5, 1.5, 2.0, 3.0};
  double e2[] = {2.0};
  int64_t dx[1] = {4};
  tt_ten_t in2[2] = {tt_ten(TPU_F32, 1, dx, x), tt_ten(TPU_F32, 0, NULL, e2)};
  int64_t fi[1] = {TPU_F32};
  if (tt_ops_run("pow", in2, 2, fi, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0.25, 2.25, 4, 9};
    tt_ops_expect("x ** 2", &out[0], TPU_F32, 1, dx, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  tt_ten_t in3[2] = {tt_ten(TPU_F32, 0, NULL, e2), tt_ten(TPU_F32, 1, dx, x)};
  if (tt_ops_run("pow", in3, 2, fi, 1, NULL, 0, out, 1) == 1) {
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = pow(2.0, x[i]);
    tt_ops_expect("2 ** x", &out[0], TPU_F32, 1, dx, want, 1e-6, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_minmax_nan) {
  double a[] = {1, NAN, 3, NAN, -0.5};
  double b[] = {2, 1, NAN, NAN, -1};
  int64_t d[1] = {5};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 1, d, a), tt_ten(TPU_F32, 1, d, b)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  struct { const char *rule; double want[5]; } cases[] = {
      {"maximum", {2, NAN, NAN, NAN, -0.5}},
      {"minimum", {1, NAN, NAN, NAN, -1}},
      {"fmax", {2, 1, 3, NAN, -0.5}},
      {"fmin", {1, 1, 3, NAN, -1}},
  };
  for (int k = 0; k < 4; k++) {
    if (tt_ops_run(cases[k].rule, in, 2, ints, 1, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], TPU_F32, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_bitwise_logical) {
  double a[] = {12, -1, 0, 5}, b[] = {10, 3, 7, 0};
  int64_t d[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_S32, 1, d, a), tt_ten(TPU_S32, 1, d, b)};
  int64_t ints[1] = {TPU_S32};
  tt_ten_t out[1];
  struct { const char *rule; double want[4]; tpu_dtype_t dt; int nints; } cases[] = {
      {"bitwise_and", {8, 3, 0, 0}, TPU_S32, 1},
      {"bitwise_or", {14, -1, 7, 5}, TPU_S32, 1},
      {"bitwise_xor", {6, -4, 7, 5}, TPU_S32, 1},
      {"logical_and", {1, 1, 0, 0}, TPU_PRED, 0},
      {"logical_or", {1, 1, 1, 1}, TPU_PRED, 0},
      {"logical_xor", {0, 0, 1, 1}, TPU_PRED, 0},
      {"bitwise_left_shift", {12 << 10, -8, 0, 5}, TPU_S32, 1},
      {"bitwise_right_shift", {0, -1, 0, 5}, TPU_S32, 1},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    if (tt_ops_run(cases[k].rule, in, 2, ints, cases[k].nints, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], cases[k].dt, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("bitwise_not", in, 1, ints, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {-13, 0, -1, -6};
    tt_ops_expect("bitwise_not", &out[0], TPU_S32, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("logical_not", in, 1, NULL, 0, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 0, 1, 0};
    tt_ops_expect("logical_not", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_compare_scalar) {
  double a[] = {1, 2, 3, NAN};
  double s[] = {2};
  int64_t d[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_S64, 1, d, a), tt_ten(TPU_F32, 0, NULL, s)};
  in[0].dt = TPU_F32;
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  struct { const char *rule; double want[4]; } cases[] = {
      {"eq", {0, 1, 0, 0}}, {"ne", {1, 0, 1, 1}}, {"lt", {1, 0, 0, 0}},
      {"le", {1, 1, 0, 0}}, {"gt", {0, 0, 1, 0}}, {"ge", {0, 1, 1, 0}},
  };
  for (int k = 0; k < 6; k++) {
    if (tt_ops_run(cases[k].rule, in, 2, ints, 1, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], TPU_PRED, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_classify_signbit) {
  double x[] = {1, -0.0, NAN, INFINITY, -INFINITY, -2};
  int64_t d[1] = {6};
  tt_ten_t in = tt_ten(TPU_F32, 1, d, x);
  tt_ten_t out[1];
  struct { const char *rule; double want[6]; } cases[] = {
      {"isnan", {0, 0, 1, 0, 0, 0}},    {"isinf", {0, 0, 0, 1, 1, 0}},    {"isfinite", {1, 1, 0, 0, 0, 1}},
      {"isposinf", {0, 0, 0, 1, 0, 0}}, {"isneginf", {0, 0, 0, 0, 1, 0}}, {"signbit", {0, 1, 0, 0, 1, 1}},
  };
  for (int k = 0; k < 6; k++) {
    if (tt_ops_run(cases[k].rule, &in, 1, NULL, 0, NULL, 0, out, 1) != 1) continue;
    tt_ops_expect(cases[k].rule, &out[0], TPU_PRED, 1, d, cases[k].want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* sign(nan) = 0, sign(-0) = 0 (PyTorch) */
  int64_t ints[1] = {TPU_F32};
  if (tt_ops_run("sign", &in, 1, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {1, 0, 0, 1, -1, -1};
    tt_ops_expect("sign", &out[0], TPU_F32, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_where_masked_fill_clamp) {
  double cond[] = {1, 0, 1};
  double a[] = {1, 2, 3, 4, 5, 6};
  double b[] = {-1};
  int64_t dc[1] = {3}, da[2] = {2, 3};
  tt_ten_t in[3] = {tt_ten(TPU_PRED, 1, dc, cond), tt_ten(TPU_F32, 2, da, a), tt_ten(TPU_F32, 0, NULL, b)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("where", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {1, -1, 3, 4, -1, 6};
    tt_ops_expect("where", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
  tt_ten_t in2[3] = {tt_ten(TPU_F32, 2, da, a), tt_ten(TPU_PRED, 1, dc, cond), tt_ten(TPU_F32, 0, NULL, b)};
  if (tt_ops_run("masked_fill", in2, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {-1, 2, -1, -1, 5, -1};
    tt_ops_expect("masked_fill", &out[0], TPU_F32, 2, da, want, 0, 0);
    tt_ops_free(out, 1);
  }
  /* clamp with a tensor min (with a nan) and a scalar max */
  double x[] = {0, 2.5, 9, NAN};
  double lo[] = {1, NAN, 1, 0};
  double hi[] = {5};
  int64_t dx[1] = {4};
  tt_ten_t in3[3] = {tt_ten(TPU_F32, 1, dx, x), tt_ten(TPU_F32, 1, dx, lo), tt_ten(TPU_F32, 0, NULL, hi)};
  int64_t ci[3] = {TPU_F32, 1, 1};
  if (tt_ops_run("clamp", in3, 3, ci, 3, NULL, 0, out, 1) == 1) {
    double want[4] = {1, NAN, 5, NAN};
    tt_ops_expect("clamp", &out[0], TPU_F32, 1, dx, want, 0, 0);
    tt_ops_free(out, 1);
  }
  tt_ten_t in4[2] = {tt_ten(TPU_F32, 1, dx, x), tt_ten(TPU_F32, 0, NULL, hi)};
  int64_t cm[3] = {TPU_F32, 0, 1};
  if (tt_ops_run("clamp", in4, 2, cm, 3, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 2.5, 5, NAN};
    tt_ops_expect("clamp max only", &out[0], TPU_F32, 1, dx, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_round_decimals_nan_to_num) {
  double x[] = {1.2345, -2.5, 0.5, 1.5, 123.456};
  int64_t d[1] = {5};
  tt_ten_t in = tt_ten(TPU_F64, 1, d, x);
  tt_ten_t out[1];
  int64_t r2[2] = {TPU_F64, 2}, rm1[2] = {TPU_F64, -1}, r0[2] = {TPU_F64, 0};
  if (tt_ops_run("round", &in, 1, r2, 2, NULL, 0, out, 1) == 1) {
    double want[5];
    for (int i = 0; i < 5; i++) want[i] = nearbyint(x[i] * 100) / 100;
    tt_ops_expect("round(2)", &out[0], TPU_F64, 1, d, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("round", &in, 1, rm1, 2, NULL, 0, out, 1) == 1) {
    double want[5];
    for (int i = 0; i < 5; i++) want[i] = nearbyint(x[i] / 10) * 10;
    tt_ops_expect("round(-1)", &out[0], TPU_F64, 1, d, want, 1e-15, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("round", &in, 1, r0, 2, NULL, 0, out, 1) == 1) {
    double want[5] = {1, -2, 0, 2, 123};
    tt_ops_expect("round half even", &out[0], TPU_F64, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  double y[] = {NAN, INFINITY, -INFINITY, 3};
  double nan_v[] = {0}, pos_v[] = {100}, neg_v[] = {-100};
  int64_t dy[1] = {4};
  tt_ten_t in2[4] = {tt_ten(TPU_F32, 1, dy, y), tt_ten(TPU_F32, 0, NULL, nan_v), tt_ten(TPU_F32, 0, NULL, pos_v),
                     tt_ten(TPU_F32, 0, NULL, neg_v)};
  int64_t fi[1] = {TPU_F32};
  if (tt_ops_run("nan_to_num", in2, 4, fi, 1, NULL, 0, out, 1) == 1) {
    double want[4] = {0, 100, -100, 3};
    tt_ops_expect("nan_to_num", &out[0], TPU_F32, 1, dy, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_lerp_addcmul_addcdiv) {
  double s[] = {1, 2, 3}, e[] = {11, 12, 13}, w[] = {0.25, 0.75, 1.0};
  int64_t d[1] = {3};
  tt_ten_t in[3] = {tt_ten(TPU_F32, 1, d, s), tt_ten(TPU_F32, 1, d, e), tt_ten(TPU_F32, 1, d, w)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("lerp", in, 3, ints, 1, NULL, 0, out, 1) == 1) {
    double want[3] = {3.5, 9.5, 13};
    tt_ops_expect("lerp", &out[0], TPU_F32, 1, d, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  double val[] = {0.5};
  tt_ten_t in2[4] = {tt_ten(TPU_F32, 1, d, s), tt_ten(TPU_F32, 1, d, e), tt_ten(TPU_F32, 1, d, w),
                     tt_ten(TPU_F32, 0, NULL, val)};
  if (tt_ops_run("addcmul", in2, 4, ints, 1, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = s[i] + 0.5 * e[i] * w[i];
    tt_ops_expect("addcmul", &out[0], TPU_F32, 1, d, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("addcdiv", in2, 4, ints, 1, NULL, 0, out, 1) == 1) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = s[i] + 0.5 * e[i] / w[i];
    tt_ops_expect("addcdiv", &out[0], TPU_F32, 1, d, want, 1e-7, 0);
    tt_ops_free(out, 1);
  }
}

/* ---- activations with parameters and backward ops ---------------------------------- */

#define NA 9
static const double k_act_x[NA] = {-5, -3, -1.5, -0.5, 0, 0.5, 1.5, 3, 5};

static void run_act(const char *rule, int nin, const double *scalars, const int64_t *ints, int nints,
                    const double *want, int with_grad) {
  int64_t d[1] = {NA};
  static const double g[NA] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  tt_ten_t in[6];
  int k = 0;
  if (with_grad) in[k++] = tt_ten(TPU_F32, 1, d, g);
  in[k++] = tt_ten(TPU_F32, 1, d, k_act_x);
  for (int i = k; i < nin; i++) in[i] = tt_ten(TPU_F32, 0, NULL, &scalars[i - k]);
  tt_ten_t out[1];
  if (tt_ops_run(rule, in, nin, ints, nints, NULL, 0, out, 1) != 1) return;
  tt_ops_expect(rule, &out[0], TPU_F32, 1, d, want, 2e-6, 1e-6);
  tt_ops_free(out, 1);
}

TT_TEST(ops_elementwise_activations) {
  double w[NA];
  int64_t f32[2] = {TPU_F32, 0};
  double sl[1] = {0.1};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] > 0 ? k_act_x[i] : k_act_x[i] * 0.1;
  run_act("leaky_relu", 2, sl, f32, 1, w, 0);
  double elu_s[3] = {1.5, 2.0, 0.5}; /* alpha, scale, input_scale */
  for (int i = 0; i < NA; i++)
    w[i] = k_act_x[i] <= 0 ? expm1(k_act_x[i] * 0.5) * 1.5 * 2.0 : k_act_x[i] * 2.0;
  run_act("elu", 4, elu_s, f32, 1, w, 0);
  double sp[2] = {2.0, 4.0}; /* beta, threshold */
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] * 2 > 4 ? k_act_x[i] : log1p(exp(k_act_x[i] * 2)) / 2;
  run_act("softplus", 3, sp, f32, 1, w, 0);
  double ht[2] = {-1, 2};
  for (int i = 0; i < NA; i++) w[i] = fmin(fmax(k_act_x[i], -1), 2);
  run_act("hardtanh", 3, ht, f32, 1, w, 0);
  double th[2] = {0.5, -7};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] <= 0.5 ? -7 : k_act_x[i];
  run_act("threshold", 3, th, f32, 1, w, 0);
  int64_t tanh_approx[2] = {TPU_F32, 1};
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i];
    w[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  run_act("gelu", 1, NULL, tanh_approx, 2, w, 0);
}

TT_TEST(ops_elementwise_backward) {
  static const double g[NA] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  double w[NA];
  int64_t f32[2] = {TPU_F32, 0};
  double th[1] = {0.5};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] <= 0.5 ? 0 : g[i];
  run_act("threshold_backward", 3, th, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i];
    w[i] = g[i] * (0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI));
  }
  run_act("gelu_backward", 2, NULL, f32, 2, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i], s = 1 / (1 + exp(-x));
    w[i] = g[i] * s * (1 + x * (1 - s));
  }
  run_act("silu_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) w[i] = g[i] * (1 - k_act_x[i]) * k_act_x[i];
  run_act("sigmoid_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) w[i] = g[i] * (1 - k_act_x[i] * k_act_x[i]);
  run_act("tanh_backward", 2, NULL, f32, 1, w, 1);
  double sl[1] = {0.2};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] > 0 ? g[i] : g[i] * 0.2;
  run_act("leaky_relu_backward", 3, sl, f32, 1, w, 1);
  double elu_s[3] = {1.5, 2.0, 0.5};
  for (int i = 0; i < NA; i++)
    w[i] = k_act_x[i] <= 0 ? g[i] * 0.5 * 1.5 * 2.0 * exp(k_act_x[i] * 0.5) : g[i] * 2.0;
  run_act("elu_backward", 5, elu_s, f32, 2, w, 1);
  double sp[2] = {1.0, 20.0};
  for (int i = 0; i < NA; i++) {
    double z = exp(k_act_x[i]);
    w[i] = g[i] * z / (z + 1);
  }
  run_act("softplus_backward", 4, sp, f32, 1, w, 1);
  double ht[2] = {-1, 2};
  for (int i = 0; i < NA; i++) w[i] = (k_act_x[i] <= -1 || k_act_x[i] >= 2) ? 0 : g[i];
  run_act("hardtanh_backward", 4, ht, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) w[i] = (k_act_x[i] > -3 && k_act_x[i] < 3) ? g[i] / 6 : 0;
  run_act("hardsigmoid_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i];
    w[i] = x < -3 ? 0 : x <= 3 ? g[i] * (x / 3 + 0.5) : g[i];
  }
  run_act("hardswish_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i], s = 1 / (1 + exp(-x)), t = tanh(log1p(exp(x)));
    w[i] = g[i] * (t + x * s * (1 - t * t));
  }
  run_act("mish_backward", 2, NULL, f32, 1, w, 1);
}

/* ---- convert, zero-size, 0-d, errors ----------------------------------------------------- */

TT_TEST(ops_elementwise_convert) {
  double x[] = {2.7, -2.7, 0.0, -0.0, NAN, 0.4};
  int64_t d[1] = {6};
  tt_ten_t in = tt_ten(TPU_F32, 1, d, x);
  tt_ten_t out[1];
  int64_t to_i[1] = {TPU_S32}, to_b[1] = {TPU_PRED};
  in.vals = x;
  /* no nan for the int conversion */
  double xi[] = {2.7, -2.7, 0.0, -0.0, 1e6, 0.4};
  tt_ten_t ini = tt_ten(TPU_F32, 1, d, xi);
  if (tt_ops_run("convert", &ini, 1, to_i, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {2, -2, 0, 0, 1e6, 0};
    tt_ops_expect("f32->s32", &out[0], TPU_S32, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("convert", &in, 1, to_b, 1, NULL, 0, out, 1) == 1) {
    double want[6] = {1, 1, 0, 0, 1, 1};
    tt_ops_expect("f32->bool", &out[0], TPU_PRED, 1, d, want, 0, 0);
    tt_ops_free(out, 1);
  }
  double bf[] = {1.0 / 3.0, 100.5};
  int64_t d2[1] = {2};
  tt_ten_t inb = tt_ten(TPU_F32, 1, d2, bf);
  int64_t to_bf[1] = {TPU_BF16};
  if (tt_ops_run("convert", &inb, 1, to_bf, 1, NULL, 0, out, 1) == 1) {
    double want[2] = {tt_ops_round(TPU_BF16, 1.0 / 3.0), tt_ops_round(TPU_BF16, 100.5)};
    tt_ops_expect("f32->bf16", &out[0], TPU_BF16, 1, d2, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_zero_size_and_scalar) {
  int64_t dz[2] = {0, 3}, d1[1] = {3};
  double b[] = {1, 2, 3};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 2, dz, NULL), tt_ten(TPU_F32, 1, d1, b)};
  int64_t ints[1] = {TPU_F32};
  tt_ten_t out[1];
  if (tt_ops_run("add", in, 2, ints, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("zero-size add", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  if (tt_ops_run("gelu", in, 1, ints, 1, NULL, 0, out, 1) == 1) {
    tt_ops_expect("zero-size gelu", &out[0], TPU_F32, 2, dz, NULL, 0, 0);
    tt_ops_free(out, 1);
  }
  double s[] = {-4};
  tt_ten_t sc = tt_ten(TPU_F64, 0, NULL, s);
  int64_t f64[1] = {TPU_F64};
  if (tt_ops_run("abs", &sc, 1, f64, 1, NULL, 0, out, 1) == 1) {
    double want[1] = {4};
    tt_ops_expect("0-d abs", &out[0], TPU_F64, 0, NULL, want, 0, 0);
    tt_ops_free(out, 1);
  }
}

TT_TEST(ops_elementwise_errors) {
  int64_t da[1] = {3}, db[1] = {4};
  tt_ten_t in[2] = {tt_ten(TPU_F32, 1, da, NULL), tt_ten(TPU_F32, 1, db, NULL)};
  int64_t ints[1] = {TPU_F32};
  tpu_status_t st = tt_ops_lower_status("add", in, 2, ints, 1, NULL, 0);
  TT_CHECK(st != NULL);
  if (st) {
    TT_CHECK(tpu_status_code(st) == TPU_INVALID_ARGUMENT);
    TT_CHECK(strstr(tpu_status_message(st), "must match the size of tensor b") != NULL);
    tpu_status_free(st);
  }
  st = tt_ops_lower_status("bitwise_and", in, 1, ints, 1, NULL, 0);
  TT_CHECK(st != NULL); /* wrong input count */
  tpu_status_free(st);
  tt_ten_t f[2] = {tt_ten(TPU_F32, 1, da, NULL), tt_ten(TPU_F32, 1, da, NULL)};
  st = tt_ops_lower_status("bitwise_and", f, 2, ints, 1, NULL, 0);
  TT_CHECK(st != NULL && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  tpu_status_free(st);
  int64_t bad[1] = {99};
  st = tt_ops_lower_status("exp", f, 1, bad, 1, NULL, 0);
  TT_CHECK(st != NULL && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  tpu_status_free(st);
}

/* Every rule in the table lowers for f32 inputs of the right count. */
TT_TEST(ops_elementwise_all_rules_lower) {
  extern const tpu_op_rule_t tpu_rules_elementwise[];
  int64_t d[1] = {4};
  tt_ten_t in[8];
  for (int i = 0; i < 8; i++) in[i] = tt_ten(TPU_F32, 1, d, NULL);
  for (const tpu_op_rule_t *r = tpu_rules_elementwise; r->name; r++) {
    int is_int = !strncmp(r->name, "bitwise", 7);
    for (int i = 0; i < 8; i++) in[i].dt = is_int ? TPU_S32 : TPU_F32;
    int64_t ints[1] = {is_int ? TPU_S32 : TPU_F32};
    tpu_status_t st = tt_ops_lower_status(r->name, in, r->min_inputs, ints, 1, NULL, 0);
    if (st) {
      fprintf(stderr, "  %s: %s\n", r->name, tpu_status_message(st));
      tpu_status_free(st);
      tt_failed_checks++;
    }
  }
}
