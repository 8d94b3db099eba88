/* ops_runner.c - the rule runners the tests/c/test_ops_*.c files share
 * (tt_ops.h and test_ops_util.h): lower ONE rule into a fresh module
 * (arguments of the given types, the rule's outputs returned), compile it on
 * the real plugin, upload the inputs, run, and read every output back as
 * doubles.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"

#include "hlo/hlo.h"
#include "test_ops_util.h"
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

/* Complex values travel as (re, im) pairs of their part type. */
static int parts_of(tpu_dtype_t dt) { return dt == TPU_C64 || dt == TPU_C128 ? 2 : 1; }
static tpu_dtype_t part_type(tpu_dtype_t dt) {
  return dt == TPU_C64 ? TPU_F32 : dt == TPU_C128 ? TPU_F64 : dt;
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
    int64_t ne = tt_ops_numel(&in[i]) * parts_of(in[i].dt);
    tpu_dtype_t pt = part_type(in[i].dt);
    size_t es = tpu_dtype_size(pt);
    unsigned char *host = malloc((size_t)(ne ? ne : 1) * es);
    for (int64_t j = 0; j < ne; j++) encode(pt, in[i].vals[j], host + (size_t)j * es);
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
    int64_t ne = tt_ops_numel(t) * parts_of(t->dt);
    t->owned = malloc(sizeof(double) * (size_t)(ne ? ne : 1));
    tpu_dtype_t pt = part_type(t->dt);
    size_t es = tpu_dtype_size(pt);
    for (int64_t j = 0; !st && j < ne; j++) t->owned[j] = decode(pt, host + (size_t)j * es);
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

/* ---- one-input rules against a C reference ------------------------------------ */

static void check_unary(const tt_unary_case_t *uc, tpu_dtype_t dt, double rtol, double atol) {
  enum { NPTS = 41 };
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

void tt_ops_check_unary(const tt_unary_case_t *cases, int n, tpu_dtype_t dt, double rtol, double atol) {
  for (int i = 0; i < n; i++) check_unary(&cases[i], dt, rtol, atol);
}

void tt_ops_all_rules_lower(const tpu_op_rule_t *table, const int64_t *ints, int nints, const char *const *skip) {
  int64_t d[1] = {4};
  tt_ten_t in[8];
  int64_t attrs[8];
  for (const tpu_op_rule_t *r = table; r->name; r++) {
    int skipped = 0;
    for (const char *const *k = skip; k && *k; k++) skipped |= !strcmp(*k, r->name);
    if (skipped) continue;
    int is_int = !strncmp(r->name, "bitwise", 7);
    for (int i = 0; i < 8; i++) in[i] = tt_ten(is_int ? TPU_S32 : TPU_F32, 1, d, NULL);
    for (int i = 0; i < nints; i++) attrs[i] = ints[i];
    attrs[0] = is_int ? TPU_S32 : TPU_F32;
    tpu_status_t st = tt_ops_lower_status(r->name, in, r->min_inputs, attrs, nints, NULL, 0);
    if (st) {
      fprintf(stderr, "  %s: %s\n", r->name, tpu_status_message(st));
      tpu_status_free(st);
      tt_failed_checks++;
    }
  }
}

/* ---- the opt_* runner (test_ops_util.h) on top of tt_ops ---------------------------- */

static tt_ten_t opt_ten(const opt_in_t *in, double **zeros) {
  *zeros = NULL;
  const double *v = in->v;
  if (!v) {
    int64_t n = 1;
    for (int i = 0; i < in->rank; i++) n *= in->dims[i];
    n *= parts_of(in->dt);
    *zeros = calloc((size_t)(n ? n : 1), sizeof(double));
    v = *zeros;
  }
  return tt_ten(in->dt, in->rank, in->dims, v);
}

tpu_status_t opt_lower(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints,
                       tpu_hlo_module_t **out_m, int *out_n) {
  tt_ten_t in[TPU_OP_MAX_INPUTS];
  memset(in, 0, sizeof in);
  for (int i = 0; i < nin; i++) in[i] = tt_ten(ins[i].dt, ins[i].rank, ins[i].dims, NULL);
  return lower_module(rule, in, nin, ints, nints, NULL, 0, out_m, out_n);
}

int opt_run(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints, opt_out_t *outs,
            int maxout) {
  memset(outs, 0, sizeof(*outs) * (size_t)maxout);
  tt_ten_t in[TPU_OP_MAX_INPUTS], res[TPU_OP_MAX_OUTPUTS];
  double *zeros[TPU_OP_MAX_INPUTS];
  memset(in, 0, sizeof in);
  for (int i = 0; i < nin; i++) in[i] = opt_ten(&ins[i], &zeros[i]);
  int n = tt_ops_run(rule, in, nin, ints, nints, NULL, 0, res,
                     maxout < TPU_OP_MAX_OUTPUTS ? maxout : TPU_OP_MAX_OUTPUTS);
  for (int i = 0; i < nin; i++) free(zeros[i]);
  for (int o = 0; o < n; o++) {
    outs[o].dt = res[o].dt;
    outs[o].rank = res[o].rank;
    memcpy(outs[o].dims, res[o].dims, sizeof(int64_t) * (size_t)res[o].rank);
    outs[o].n = tt_ops_numel(&res[o]);
    outs[o].v = res[o].owned; /* ownership moves to outs */
  }
  return n;
}

void opt_free(opt_out_t *outs, int n) {
  for (int i = 0; i < n; i++) {
    free(outs[i].v);
    outs[i].v = NULL;
  }
}

int opt_close(const double *got, const double *want, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++) {
    double a = got[i], b = want[i];
    if (isnan(a) && isnan(b)) continue;
    if (isinf(a) && a == b) continue;
    if (!(fabs(a - b) <= tol * (1 + fabs(b)))) {
      fprintf(stderr, "  mismatch at %lld: got %.9g want %.9g\n", (long long)i, a, b);
      return 0;
    }
  }
  return 1;
}

int opt_lower_fails(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints,
                    tpu_code_t code, const char *needle) {
  tpu_hlo_module_t *m = NULL;
  int n = 0;
  tpu_status_t st = opt_lower(rule, ins, nin, ints, nints, &m, &n);
  if (m) tpu_hlo_module_destroy(m);
  if (!st) {
    fprintf(stderr, "  %s: expected failure containing \"%s\"\n", rule, needle);
    return 0;
  }
  int ok = tpu_status_code(st) == code && strstr(tpu_status_message(st), needle);
  if (!ok) fprintf(stderr, "  %s: got %s: %s\n", rule, tpu_code_name(tpu_status_code(st)), tpu_status_message(st));
  tpu_status_free(st);
  return ok;
}

void opt_fill(double *v, int64_t n, unsigned seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = ((double)(s >> 8) / (double)(1u << 24)) * 2.0 - 1.0;
  }
}

