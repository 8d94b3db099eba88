/* hlo.c - the StableHLO text builder: types, modules, functions, text, and
 * the elementwise / constant / shape emitters.  The heavier emitters
 * (dot, reductions, windows, convolution, gather/scatter, sort, rng,
 * collectives) live in hlo_ops.c.
 *
 * Every op is printed in the generic MLIR form
 *     %7 = "stablehlo.add"(%5, %6) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
 * which every StableHLO consumer parses regardless of its pretty-printer
 * version.  Attributes go in the trailing dictionary {...}; the parser turns
 * them into properties.  Floats are printed as hex bit patterns of their
 * element type (0x7F800000 is f32 +inf, 0x7FC0 is bf16 NaN), so every value
 * round-trips exactly and non-finite values need no special spelling.
 *
 * Shapes are inferred and checked here, so a bad call fails at the rule
 * that made it with a message naming the op and the types, instead of as a
 * parser diagnostic from the plugin.
 */
#include "hlo/hlo_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- types ------------------------------------------------------------------ */

tpu_hlo_type_t tpu_hlo_type_make(tpu_dtype_t dtype, int rank, const int64_t *dims) {
  tpu_hlo_type_t t;
  memset(&t, 0, sizeof(t));
  t.dtype = dtype;
  if (rank < 0) rank = 0;
  if (rank > TPU_MAX_RANK) rank = TPU_MAX_RANK;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims ? dims[i] : 1;
  return t;
}

tpu_hlo_type_t tpu_hlo_type_scalar(tpu_dtype_t dtype) { return tpu_hlo_type_make(dtype, 0, NULL); }

int64_t tpu_hlo_type_numel(const tpu_hlo_type_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

bool tpu_hlo_type_equal(const tpu_hlo_type_t *a, const tpu_hlo_type_t *b) {
  return a->dtype == b->dtype && tpu_hlo__same_shape(a, b);
}

/* Decimal digits of v at p (no NUL); returns the end. */
static char *put_i64(char *p, int64_t v) {
  char tmp[24];
  int n = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) *p++ = '-';
  while (n) *p++ = tmp[--n];
  return p;
}

char *tpu_hlo_type_str(const tpu_hlo_type_t *t, char *buf, size_t size) {
  /* worst case: 8 dims x 20 digits + "x" + "tensor<" + "complex<f64>>" */
  char tmp[8 + TPU_MAX_RANK * 21 + 16];
  char *p = tmp;
  memcpy(p, "tensor<", 7);
  p += 7;
  for (int i = 0; i < t->rank && i < TPU_MAX_RANK; i++) {
    p = put_i64(p, t->dims[i]);
    *p++ = 'x';
  }
  const char *e = tpu_dtype_mlir(t->dtype);
  size_t el = strlen(e);
  memcpy(p, e, el);
  p += el;
  *p++ = '>';
  size_t n = (size_t)(p - tmp);
  if (size == 0) return buf;
  if (n >= size) n = size - 1;
  memcpy(buf, tmp, n);
  buf[n] = 0;
  return buf;
}

/* ---- text helpers --------------------------------------------------------------- */

void tpu_hlo__puts(tpu_strbuf_t *sb, const char *s) { tpu_strbuf_append(sb, s, strlen(s)); }

void tpu_hlo__i64(tpu_strbuf_t *sb, int64_t v) {
  char tmp[24];
  char *e = put_i64(tmp, v);
  tpu_strbuf_append(sb, tmp, (size_t)(e - tmp));
}

void tpu_hlo__i64s(tpu_strbuf_t *sb, const int64_t *v, int n) {
  for (int i = 0; i < n; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__i64(sb, v[i]);
  }
}

void tpu_hlo__type(tpu_strbuf_t *sb, const tpu_hlo_type_t *t) {
  char buf[256];
  tpu_hlo__puts(sb, tpu_hlo_type_str(t, buf, sizeof(buf)));
}

void tpu_hlo__val(tpu_strbuf_t *sb, const tpu_hlo_func_t *f, tpu_hlo_value_t v) {
  char tmp[40];
  char *p = tmp;
  const tpu_hlo_val_t *x = &f->vals[v];
  *p++ = '%';
  if (x->is_arg) {
    memcpy(p, "arg", 3);
    p += 3;
  }
  p = put_i64(p, x->name);
  if (x->res >= 0) {
    *p++ = '#';
    p = put_i64(p, x->res);
  }
  tpu_strbuf_append(sb, tmp, (size_t)(p - tmp));
}

static void put_tmp(tpu_strbuf_t *sb, int32_t t) {
  char tmp[24] = "%t";
  char *e = put_i64(tmp + 2, t);
  tpu_strbuf_append(sb, tmp, (size_t)(e - tmp));
}

void tpu_hlo__array_attr(tpu_strbuf_t *sb, const char *name, const int64_t *v, int n) {
  tpu_hlo__puts(sb, name);
  if (n == 0) {
    tpu_hlo__puts(sb, " = array<i64>");
    return;
  }
  tpu_hlo__puts(sb, " = array<i64: ");
  tpu_hlo__i64s(sb, v, n);
  tpu_strbuf_append(sb, ">", 1);
}

void tpu_hlo__pairs_attr(tpu_strbuf_t *sb, const char *name, const int64_t *pairs, int n) {
  tpu_hlo__puts(sb, name);
  tpu_hlo__puts(sb, " = dense<");
  if (n == 0) {
    tpu_hlo__puts(sb, "> : tensor<0x2xi64>");
    return;
  }
  tpu_strbuf_append(sb, "[", 1);
  for (int i = 0; i < n; i++) {
    tpu_hlo__puts(sb, i ? ", [" : "[");
    tpu_hlo__i64s(sb, pairs + 2 * i, 2);
    tpu_strbuf_append(sb, "]", 1);
  }
  tpu_hlo__puts(sb, "]> : tensor<");
  tpu_hlo__i64(sb, n);
  tpu_hlo__puts(sb, "x2xi64>");
}

void tpu_hlo__groups_attr(tpu_strbuf_t *sb, const int64_t *groups, int ngroups, int group_size) {
  tpu_hlo__puts(sb, "replica_groups = dense<[");
  for (int g = 0; g < ngroups; g++) {
    tpu_hlo__puts(sb, g ? ", [" : "[");
    tpu_hlo__i64s(sb, groups + (size_t)g * (size_t)group_size, group_size);
    tpu_strbuf_append(sb, "]", 1);
  }
  tpu_hlo__puts(sb, "]> : tensor<");
  tpu_hlo__i64(sb, ngroups);
  tpu_strbuf_append(sb, "x", 1);
  tpu_hlo__i64(sb, group_size);
  tpu_hlo__puts(sb, "xi64>");
}

const char *tpu_hlo__compare_type(tpu_dtype_t dt) {
  if (tpu_dtype_is_float(dt) || tpu_dtype_is_complex(dt)) return "FLOAT";
  if (dt >= TPU_S8 && dt <= TPU_S64) return "SIGNED";
  return "UNSIGNED"; /* unsigned integers and i1 */
}

/* ---- literals --------------------------------------------------------------------- */

/* Rounds v (round to nearest even) into a binary float with `eb` exponent
 * bits and `mb` mantissa bits; returns the bit pattern. */
static uint64_t encode_float(double v, int eb, int mb) {
  uint64_t sign = signbit(v) ? 1 : 0;
  uint64_t emax = ((uint64_t)1 << eb) - 1;
  int bias = (1 << (eb - 1)) - 1;
  uint64_t sbit = sign << (eb + mb);
  if (isnan(v)) return sbit | (emax << mb) | ((uint64_t)1 << (mb - 1));
  v = fabs(v);
  if (isinf(v)) return sbit | (emax << mb);
  if (v == 0) return sbit;
  int e;
  double m = frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
  int64_t E = (int64_t)e - 1 + bias;
  if (E >= 1) {
    uint64_t q = (uint64_t)nearbyint(ldexp(m, mb + 1)); /* in [2^mb, 2^(mb+1)] */
    if (q == ((uint64_t)1 << (mb + 1))) {
      q >>= 1;
      E++;
    }
    if ((uint64_t)E >= emax) return sbit | (emax << mb); /* overflow -> inf */
    return sbit | ((uint64_t)E << mb) | (q - ((uint64_t)1 << mb));
  }
  /* subnormal: v = q * 2^(1 - bias - mb); q == 2^mb becomes the least normal */
  uint64_t q = (uint64_t)nearbyint(ldexp(v, bias - 1 + mb));
  return sbit | q;
}

static void put_hex(tpu_strbuf_t *sb, uint64_t bits, int ndigits) {
  static const char hx[] = "0123456789ABCDEF";
  char tmp[24];
  tmp[0] = '0';
  tmp[1] = 'x';
  for (int i = 0; i < ndigits; i++) tmp[2 + i] = hx[(bits >> (4 * (ndigits - 1 - i))) & 15];
  tpu_strbuf_append(sb, tmp, (size_t)(2 + ndigits));
}

static void put_u64(tpu_strbuf_t *sb, uint64_t u) {
  char tmp[24];
  int n = 0;
  do {
    tmp[23 - n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  tpu_strbuf_append(sb, tmp + 24 - n, (size_t)n);
}

/* Wraps an int64 to the width of an integer dtype and prints it. */
static void put_int_literal(tpu_strbuf_t *sb, tpu_dtype_t dt, int64_t v) {
  if (dt == TPU_PRED) {
    tpu_hlo__puts(sb, v ? "true" : "false");
    return;
  }
  int bits = (int)tpu_dtype_size(dt) * 8;
  uint64_t u = (uint64_t)v;
  if (bits < 64) u &= ((uint64_t)1 << bits) - 1;
  if (tpu_dtype_is_signed(dt)) {
    if (bits < 64 && (u >> (bits - 1)) & 1) u |= ~(((uint64_t)1 << bits) - 1); /* sign-extend */
    tpu_hlo__i64(sb, (int64_t)u);
  } else {
    put_u64(sb, u);
  }
}

static int64_t double_to_i64(double v) {
  if (isnan(v)) return 0;
  v = round(v);
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

static void put_float_literal(tpu_strbuf_t *sb, tpu_dtype_t dt, double value) {
  switch (dt) {
    case TPU_F32: {
      float x = (float)value;
      uint32_t b;
      memcpy(&b, &x, 4);
      put_hex(sb, b, 8);
      return;
    }
    case TPU_F64: {
      uint64_t b;
      memcpy(&b, &value, 8);
      put_hex(sb, b, 16);
      return;
    }
    case TPU_F16: put_hex(sb, encode_float(value, 5, 10), 4); return;
    case TPU_BF16: put_hex(sb, encode_float(value, 8, 7), 4); return;
    case TPU_F8E5M2: case TPU_F8E4M3FN: case TPU_F8E5M2FNUZ: case TPU_F8E4M3FNUZ:
      put_hex(sb, tpu_dtype_f8_bits(dt, value), 2);
      return;
    default: return;
  }
}

void tpu_hlo__literal(tpu_strbuf_t *sb, tpu_dtype_t dt, double value) {
  if (tpu_dtype_is_float(dt)) {
    put_float_literal(sb, dt, value);
  } else if (tpu_dtype_is_complex(dt)) {
    /* complex literals take decimal parts: (re, im) */
    char tmp[48];
    snprintf(tmp, sizeof(tmp), "%.17g", value);
    tpu_hlo__puts(sb, "(");
    tpu_hlo__puts(sb, tmp);
    if (!strpbrk(tmp, ".e")) tpu_hlo__puts(sb, ".0"); /* a float token, not an integer */
    tpu_hlo__puts(sb, ", 0.0)");
  } else if (dt == TPU_PRED) {
    tpu_hlo__puts(sb, value != 0 ? "true" : "false");
  } else if (dt == TPU_U64 && value >= 9223372036854775808.0) {
    put_u64(sb, value >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)value);
  } else {
    put_int_literal(sb, dt, double_to_i64(value));
  }
}

/* ---- module / function -------------------------------------------------------------- */

static void func_init(tpu_hlo_func_t *f, tpu_hlo_module_t *m) {
  memset(f, 0, sizeof(*f));
  f->module = m;
  tpu_strbuf_init(&f->body);
}

tpu_status_t tpu_hlo_module_create(const char *name, tpu_hlo_module_t **out_module) {
  *out_module = NULL;
  tpu_hlo_module_t *m = (tpu_hlo_module_t *)calloc(1, sizeof(*m));
  if (!m) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "hlo: out of memory creating module");
  tpu_arena_init(&m->arena, 8192);
  tpu_strbuf_init(&m->text);
  if (!name || !*name) name = "main_module";
  size_t n = strlen(name);
  m->name = (char *)tpu_arena_alloc(&m->arena, n + 1);
  if (!m->name) {
    tpu_arena_free(&m->arena);
    free(m);
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "hlo: out of memory creating module");
  }
  /* A bare MLIR symbol: letters, digits, '_', '$', '.'; others become '_'. */
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '$' || c == '.';
    m->name[i] = ok ? c : '_';
  }
  if (m->name[0] >= '0' && m->name[0] <= '9') m->name[0] = '_';
  m->name[n] = 0;
  func_init(&m->main, m);
  *out_module = m;
  return TPU_OK_STATUS;
}

void tpu_hlo_module_destroy(tpu_hlo_module_t *m) {
  if (!m) return;
  tpu_strbuf_free(&m->main.body);
  tpu_status_free(m->main.status);
  tpu_strbuf_free(&m->text);
  tpu_arena_free(&m->arena);
  free(m);
}

tpu_hlo_func_t *tpu_hlo_module_main(tpu_hlo_module_t *m) { return m ? &m->main : NULL; }

void tpu_hlo_module_set_replicas(tpu_hlo_module_t *m, int num_replicas, int num_partitions) {
  if (!m) return;
  m->num_replicas = num_replicas;
  m->num_partitions = num_partitions;
}

void tpu_hlo_module_set_precision(tpu_hlo_module_t *m, const char *precision) {
  if (!m) return;
  static const char *const known[] = {"DEFAULT", "HIGH", "HIGHEST"};
  m->precision = NULL;
  for (int i = 0; i < 3 && precision; i++)
    if (!strcmp(precision, known[i])) m->precision = known[i];
  if (precision && !m->precision)
    tpu_hlo_fail(&m->main, TPU_INVALID_ARGUMENT, "module precision: unknown \"%s\" (DEFAULT, HIGH, HIGHEST)",
                 precision);
}

void tpu_hlo__precision_attr(tpu_strbuf_t *sb, const tpu_hlo_func_t *f) {
  const char *p = f->module->precision;
  if (!p) return;
  tpu_hlo__puts(sb, ", precision_config = [#stablehlo<precision ");
  tpu_hlo__puts(sb, p);
  tpu_hlo__puts(sb, ">, #stablehlo<precision ");
  tpu_hlo__puts(sb, p);
  tpu_hlo__puts(sb, ">]");
}

static tpu_hlo_value_t fail_v(tpu_hlo_func_t *f, tpu_code_t code, const char *fmt, va_list ap) {
  if (!f->status) f->status = tpu_status_makev(code, fmt, ap);
  return TPU_HLO_NONE;
}

tpu_hlo_value_t tpu_hlo_fail(tpu_hlo_func_t *f, tpu_code_t code, const char *fmt, ...) {
  if (!f) return TPU_HLO_NONE;
  va_list ap;
  va_start(ap, fmt);
  fail_v(f, code, fmt, ap);
  va_end(ap);
  return TPU_HLO_NONE;
}

#define FAIL(f, ...) tpu_hlo_fail((f), TPU_INVALID_ARGUMENT, __VA_ARGS__)
#define OOM(f) tpu_hlo_fail((f), TPU_RESOURCE_EXHAUSTED, "hlo: out of host memory")

/* Grows an arena-owned array to hold at least `need` items (doubling). */
static void *grow(tpu_arena_t *a, void *old, int32_t *cap, int32_t need, size_t item) {
  if (need <= *cap) return old;
  int32_t ncap = *cap ? *cap : 16;
  while (ncap < need) ncap *= 2;
  void *p = tpu_arena_alloc(a, (size_t)ncap * item);
  if (!p) return NULL;
  if (old && *cap) memcpy(p, old, (size_t)*cap * item);
  *cap = ncap;
  return p;
}

static tpu_hlo_value_t new_val(tpu_hlo_func_t *f, const tpu_hlo_type_t *type) {
  tpu_hlo_type_t copy = *type; /* type may point into the table being grown */
  const tpu_hlo_type_t *t = &copy;
  if (f->nvals >= f->capvals) {
    tpu_hlo_val_t *p = (tpu_hlo_val_t *)grow(&f->module->arena, f->vals, &f->capvals, f->nvals + 1,
                                               sizeof(tpu_hlo_val_t));
    if (!p) return OOM(f);
    f->vals = p;
  }
  tpu_hlo_value_t v = f->nvals++;
  f->vals[v].type = *t;
  f->vals[v].name = v;
  f->vals[v].res = -1;
  f->vals[v].is_arg = 0;
  f->vals[v].swap_of = -1;
  return v;
}

tpu_hlo_value_t tpu_hlo__new_value(tpu_hlo_func_t *f, const tpu_hlo_type_t *t) { return new_val(f, t); }

tpu_hlo_value_t tpu_hlo_func_arg(tpu_hlo_func_t *f, tpu_hlo_type_t type) {
  if (!f) return TPU_HLO_NONE;
  if (f->status) return TPU_HLO_NONE;
  if (!tpu_dtype_valid(type.dtype) || type.rank < 0 || type.rank > TPU_MAX_RANK)
    return FAIL(f, "func arg: invalid type (dtype %d, rank %d)", (int)type.dtype, type.rank);
  for (int i = 0; i < type.rank; i++)
    if (type.dims[i] < 0) return FAIL(f, "func arg: negative dimension %lld", (long long)type.dims[i]);
  if (f->nargs >= f->capargs) {
    int32_t cap = f->capargs;
    int32_t *a = (int32_t *)grow(&f->module->arena, f->args, &cap, f->nargs + 1, sizeof(int32_t));
    cap = f->capargs;
    int32_t *al = (int32_t *)grow(&f->module->arena, f->alias, &cap, f->nargs + 1, sizeof(int32_t));
    if (!a || !al) return OOM(f);
    f->args = a;
    f->alias = al;
    f->capargs = cap;
  }
  tpu_hlo_value_t v = new_val(f, &type);
  if (v < 0) return v;
  f->vals[v].is_arg = 1;
  f->vals[v].name = f->nargs;
  f->args[f->nargs] = v;
  f->alias[f->nargs] = -1;
  f->nargs++;
  return v;
}

void tpu_hlo_func_alias(tpu_hlo_func_t *f, int arg, int result) {
  if (!f || f->status) return;
  if (arg < 0 || arg >= f->nargs) {
    FAIL(f, "func alias: argument %d out of range (%d arguments)", arg, f->nargs);
    return;
  }
  if (result < 0) {
    FAIL(f, "func alias: negative result index %d", result);
    return;
  }
  f->alias[arg] = result;
}

void tpu_hlo_func_return(tpu_hlo_func_t *f, const tpu_hlo_value_t *values, int n) {
  if (!f) return;
  if (f->returned) {
    FAIL(f, "func return: results were already set");
    return;
  }
  f->returned = true;
  if (n < 0) n = 0;
  if (!tpu_hlo__ok(f, "func.return", values, n)) return;
  f->rets = (tpu_hlo_value_t *)tpu_arena_alloc(&f->module->arena, sizeof(tpu_hlo_value_t) * (size_t)(n ? n : 1));
  if (!f->rets) {
    OOM(f);
    return;
  }
  if (n) memcpy(f->rets, values, sizeof(tpu_hlo_value_t) * (size_t)n);
  f->nrets = n;
}

int tpu_hlo_func_num_args(const tpu_hlo_func_t *f) { return f ? f->nargs : 0; }

tpu_status_t tpu_hlo_func_status(const tpu_hlo_func_t *f) { return f ? f->status : TPU_OK_STATUS; }

const tpu_hlo_type_t *tpu_hlo_type_of(const tpu_hlo_func_t *f, tpu_hlo_value_t v) {
  /* A NONE (or foreign) value reads as an invalid 0-d type, never NULL, so a
   * rule may look at types freely and check the status once at the end. */
  static const tpu_hlo_type_t invalid;
  if (!f || v < 0 || v >= f->nvals) return &invalid;
  return &f->vals[v].type;
}

bool tpu_hlo__ok(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *vs, int n) {
  if (!f || f->status) return false;
  for (int i = 0; i < n; i++) {
    if (vs[i] < 0 || vs[i] >= f->nvals) {
      FAIL(f, "%s: operand %d is not a value of this function (%d)", op, i, (int)vs[i]);
      return false;
    }
  }
  return true;
}

tpu_hlo_value_t tpu_hlo__begin(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *operands,
                               int nops, const tpu_hlo_type_t *res, int nres) {
  tpu_hlo_value_t first = TPU_HLO_NONE;
  for (int i = 0; i < nres; i++) {
    tpu_hlo_value_t v = new_val(f, &res[i]);
    if (v < 0) return TPU_HLO_NONE;
    if (i == 0) first = v;
    f->vals[v].name = first;
    f->vals[v].res = (int16_t)(nres > 1 ? i : -1);
  }
  tpu_strbuf_t *sb = &f->body;
  tpu_strbuf_append(sb, "    %", 5);
  tpu_hlo__i64(sb, first);
  if (nres > 1) {
    tpu_strbuf_append(sb, ":", 1);
    tpu_hlo__i64(sb, nres);
  }
  tpu_strbuf_append(sb, " = \"", 4);
  if (!strchr(op, '.')) tpu_strbuf_append(sb, "stablehlo.", 10);
  tpu_hlo__puts(sb, op);
  tpu_strbuf_append(sb, "\"(", 2);
  for (int i = 0; i < nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__val(sb, f, operands[i]);
  }
  tpu_strbuf_append(sb, ")", 1);
  return first;
}

void tpu_hlo__end(tpu_hlo_func_t *f, const tpu_hlo_value_t *operands, int nops, tpu_hlo_value_t first,
                  int nres) {
  tpu_strbuf_t *sb = &f->body;
  tpu_strbuf_append(sb, " : (", 4);
  for (int i = 0; i < nops; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, &f->vals[operands[i]].type);
  }
  tpu_strbuf_append(sb, ") -> ", 5);
  if (nres != 1) tpu_strbuf_append(sb, "(", 1);
  for (int i = 0; i < nres; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, &f->vals[first + i].type);
  }
  if (nres != 1) tpu_strbuf_append(sb, ")", 1);
  tpu_strbuf_append(sb, "\n", 1);
  if (!tpu_strbuf_ok(sb)) OOM(f);
}

tpu_hlo_value_t tpu_hlo__simple(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *operands,
                                int nops, const tpu_hlo_type_t *res, const char *attrs) {
  tpu_hlo_value_t v = tpu_hlo__begin(f, op, operands, nops, res, 1);
  if (v < 0) return v;
  if (attrs && *attrs) {
    tpu_strbuf_append(&f->body, " {", 2);
    tpu_hlo__puts(&f->body, attrs);
    tpu_strbuf_append(&f->body, "}", 1);
  }
  tpu_hlo__end(f, operands, nops, v, 1);
  return f->status ? TPU_HLO_NONE : v;
}

/* ---- regions ---------------------------------------------------------------------------- */

void tpu_hlo__region(tpu_hlo_func_t *f, const tpu_dtype_t *arg_dtypes, int nargs,
                     tpu_hlo__region_fn body, void *ctx) {
  tpu_strbuf_t *sb = &f->body;
  int32_t args[2 * TPU_MAX_RANK + 4];
  int32_t rets[TPU_MAX_RANK + 2];
  tpu_dtype_t ret_dt[TPU_MAX_RANK + 2];
  tpu_strbuf_append(sb, "{\n    ^bb0(", 11);
  for (int i = 0; i < nargs; i++) {
    args[i] = f->next_tmp++;
    if (i) tpu_strbuf_append(sb, ", ", 2);
    put_tmp(sb, args[i]);
    tpu_strbuf_append(sb, ": ", 2);
    tpu_hlo_type_t t = tpu_hlo_type_scalar(arg_dtypes[i]);
    tpu_hlo__type(sb, &t);
  }
  tpu_strbuf_append(sb, "):\n", 3);
  int nr = body(f, args, arg_dtypes, rets, ret_dt, ctx);
  tpu_hlo__puts(sb, "      \"stablehlo.return\"(");
  for (int i = 0; i < nr; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    put_tmp(sb, rets[i]);
  }
  tpu_strbuf_append(sb, ") : (", 5);
  for (int i = 0; i < nr; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo_type_t t = tpu_hlo_type_scalar(ret_dt[i]);
    tpu_hlo__type(sb, &t);
  }
  tpu_hlo__puts(sb, ") -> ()\n    }");
}

int32_t tpu_hlo__rop(tpu_hlo_func_t *f, const char *op, const int32_t *ins, int nins,
                     const tpu_dtype_t *in_dtypes, tpu_dtype_t out, const char *attrs) {
  tpu_strbuf_t *sb = &f->body;
  int32_t r = f->next_tmp++;
  tpu_strbuf_append(sb, "      ", 6);
  put_tmp(sb, r);
  tpu_hlo__puts(sb, " = \"stablehlo.");
  tpu_hlo__puts(sb, op);
  tpu_strbuf_append(sb, "\"(", 2);
  for (int i = 0; i < nins; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    put_tmp(sb, ins[i]);
  }
  tpu_strbuf_append(sb, ")", 1);
  if (attrs && *attrs) {
    tpu_strbuf_append(sb, " {", 2);
    tpu_hlo__puts(sb, attrs);
    tpu_strbuf_append(sb, "}", 1);
  }
  tpu_strbuf_append(sb, " : (", 4);
  for (int i = 0; i < nins; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo_type_t t = tpu_hlo_type_scalar(in_dtypes[i]);
    tpu_hlo__type(sb, &t);
  }
  tpu_strbuf_append(sb, ") -> ", 5);
  tpu_hlo_type_t t = tpu_hlo_type_scalar(out);
  tpu_hlo__type(sb, &t);
  tpu_strbuf_append(sb, "\n", 1);
  return r;
}

int32_t tpu_hlo__rcompare(tpu_hlo_func_t *f, const char *dir, int32_t a, int32_t b, tpu_dtype_t dt) {
  char attrs[128];
  snprintf(attrs, sizeof(attrs),
           "comparison_direction = #stablehlo<comparison_direction %s>, "
           "compare_type = #stablehlo<comparison_type %s>",
           dir, tpu_hlo__compare_type(dt));
  int32_t ins[2] = {a, b};
  tpu_dtype_t dts[2] = {dt, dt};
  return tpu_hlo__rop(f, "compare", ins, 2, dts, TPU_PRED, attrs);
}

static const char *const k_bodies[] = {"add", "maximum", "minimum", "multiply", "and", "or", "xor", "replace"};

bool tpu_hlo__binary_body_ok(const char *body) {
  if (!body) return false;
  for (size_t i = 0; i < sizeof(k_bodies) / sizeof(k_bodies[0]); i++)
    if (!strcmp(body, k_bodies[i])) return true;
  return false;
}

static int binary_body(tpu_hlo_func_t *f, const int32_t *args, const tpu_dtype_t *dts, int32_t *rets,
                       tpu_dtype_t *ret_dts, void *ctx) {
  const char *body = (const char *)ctx;
  ret_dts[0] = dts[0];
  if (!strcmp(body, "replace")) {
    rets[0] = args[1];
    return 1;
  }
  rets[0] = tpu_hlo__rop(f, body, args, 2, dts, dts[0], NULL);
  return 1;
}

void tpu_hlo__binary_region(tpu_hlo_func_t *f, tpu_dtype_t dt, const char *body) {
  tpu_dtype_t dts[2] = {dt, dt};
  tpu_hlo__region(f, dts, 2, binary_body, (void *)body);
}

/* ---- module text ---------------------------------------------------------------------------- */

static tpu_status_t copy_status(tpu_status_t st) {
  return tpu_status_make(tpu_status_code(st), "%s", tpu_status_message(st));
}

tpu_status_t tpu_hlo_module_text(tpu_hlo_module_t *m, const char **out_text, size_t *out_len) {
  if (out_text) *out_text = NULL;
  if (out_len) *out_len = 0;
  if (!m) return tpu_status_make(TPU_INVALID_ARGUMENT, "hlo module text: no module");
  tpu_hlo_func_t *f = &m->main;
  if (f->status) return copy_status(f->status);
  if (!f->returned) {
    FAIL(f, "module @%s: main has no results (tpu_hlo_func_return was not called)", m->name);
    return copy_status(f->status);
  }
  for (int a = 0; a < f->nargs; a++) {
    int r = f->alias[a];
    if (r < 0) continue;
    if (r >= f->nrets) {
      FAIL(f, "module @%s: argument %d aliases result %d but there are %d results", m->name, a, r, f->nrets);
      return copy_status(f->status);
    }
    const tpu_hlo_type_t *ta = &f->vals[f->args[a]].type, *tr = &f->vals[f->rets[r]].type;
    if (!tpu_hlo_type_equal(ta, tr)) {
      char b1[256], b2[256];
      FAIL(f, "module @%s: argument %d (%s) aliases result %d of a different type (%s)", m->name, a,
           TPU_HLO_TSTR(ta, b1), r, TPU_HLO_TSTR(tr, b2));
      return copy_status(f->status);
    }
  }
  tpu_strbuf_t *sb = &m->text;
  tpu_strbuf_reset(sb);
  tpu_hlo__puts(sb, "module @");
  tpu_hlo__puts(sb, m->name);
  if (m->num_replicas > 0 || m->num_partitions > 0) {
    tpu_hlo__puts(sb, " attributes {mhlo.num_partitions = ");
    tpu_hlo__i64(sb, m->num_partitions > 0 ? m->num_partitions : 1);
    tpu_hlo__puts(sb, " : i32, mhlo.num_replicas = ");
    tpu_hlo__i64(sb, m->num_replicas > 0 ? m->num_replicas : 1);
    tpu_hlo__puts(sb, " : i32}");
  }
  tpu_hlo__puts(sb, " {\n  func.func public @main(");
  for (int a = 0; a < f->nargs; a++) {
    if (a) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__val(sb, f, f->args[a]);
    tpu_strbuf_append(sb, ": ", 2);
    tpu_hlo__type(sb, &f->vals[f->args[a]].type);
    if (f->alias[a] >= 0) {
      tpu_hlo__puts(sb, " {tf.aliasing_output = ");
      tpu_hlo__i64(sb, f->alias[a]);
      tpu_hlo__puts(sb, " : i32}");
    }
  }
  tpu_hlo__puts(sb, ") -> (");
  for (int r = 0; r < f->nrets; r++) {
    if (r) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, &f->vals[f->rets[r]].type);
  }
  tpu_hlo__puts(sb, ") {\n");
  tpu_strbuf_append(sb, f->body.data ? f->body.data : "", f->body.len);
  tpu_hlo__puts(sb, "    \"func.return\"(");
  for (int r = 0; r < f->nrets; r++) {
    if (r) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__val(sb, f, f->rets[r]);
  }
  tpu_hlo__puts(sb, ") : (");
  for (int r = 0; r < f->nrets; r++) {
    if (r) tpu_strbuf_append(sb, ", ", 2);
    tpu_hlo__type(sb, &f->vals[f->rets[r]].type);
  }
  tpu_hlo__puts(sb, ") -> ()\n  }\n");
  tpu_hlo__defs_text(sb, m);
  tpu_hlo__puts(sb, "}\n");
  if (!tpu_strbuf_ok(sb) || !tpu_strbuf_ok(&f->body))
    return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "module @%s: out of host memory producing text", m->name);
  if (out_text) *out_text = sb->data;
  if (out_len) *out_len = sb->len;
  return TPU_OK_STATUS;
}

/* ---- elementwise ------------------------------------------------------------------------------- */

enum { K_ANY, K_FLOAT, K_NUM, K_INT, K_INTPRED, K_COMPLEX };

static bool kind_ok(int kind, tpu_dtype_t dt) {
  switch (kind) {
    case K_FLOAT: return tpu_dtype_is_float(dt) || tpu_dtype_is_complex(dt);
    case K_NUM: return tpu_dtype_is_float(dt) || tpu_dtype_is_complex(dt) || tpu_dtype_is_int(dt);
    case K_INT: return tpu_dtype_is_int(dt);
    case K_INTPRED: return tpu_dtype_is_int(dt) || dt == TPU_PRED;
    case K_COMPLEX: return tpu_dtype_is_complex(dt) || tpu_dtype_is_float(dt);
    default: return tpu_dtype_valid(dt);
  }
}

static const char *kind_name(int kind) {
  switch (kind) {
    case K_FLOAT: return "a floating-point or complex";
    case K_NUM: return "a numeric";
    case K_INT: return "an integer";
    case K_INTPRED: return "an integer or bool";
    case K_COMPLEX: return "a complex or floating-point";
    default: return "a valid";
  }
}

typedef struct { const char *name; int kind; int result; } op_info_t;
enum { R_SAME, R_PRED, R_REAL };

static const op_info_t k_unary[] = {
    {"negate", K_NUM, R_SAME},           {"abs", K_NUM, R_REAL},
    {"sign", K_NUM, R_SAME},             {"exponential", K_FLOAT, R_SAME},
    {"exponential_minus_one", K_FLOAT, R_SAME}, {"log", K_FLOAT, R_SAME},
    {"log_plus_one", K_FLOAT, R_SAME},   {"sqrt", K_FLOAT, R_SAME},
    {"rsqrt", K_FLOAT, R_SAME},          {"cbrt", K_FLOAT, R_SAME},
    {"tanh", K_FLOAT, R_SAME},           {"logistic", K_FLOAT, R_SAME},
    {"cosine", K_FLOAT, R_SAME},         {"sine", K_FLOAT, R_SAME},
    {"tan", K_FLOAT, R_SAME},            {"floor", K_FLOAT, R_SAME},
    {"ceil", K_FLOAT, R_SAME},           {"round_nearest_even", K_FLOAT, R_SAME},
    {"round_nearest_afz", K_FLOAT, R_SAME}, {"is_finite", K_FLOAT, R_PRED},
    {"not", K_INTPRED, R_SAME},          {"popcnt", K_INT, R_SAME},
    {"count_leading_zeros", K_INT, R_SAME}, {"real", K_COMPLEX, R_REAL},
    {"imag", K_COMPLEX, R_REAL},
};

static const op_info_t k_binary[] = {
    {"add", K_ANY, R_SAME},       {"subtract", K_NUM, R_SAME},  {"multiply", K_ANY, R_SAME},
    {"divide", K_NUM, R_SAME},    {"remainder", K_NUM, R_SAME}, {"maximum", K_ANY, R_SAME},
    {"minimum", K_ANY, R_SAME},   {"power", K_NUM, R_SAME},     {"atan2", K_FLOAT, R_SAME},
    {"and", K_INTPRED, R_SAME},   {"or", K_INTPRED, R_SAME},    {"xor", K_INTPRED, R_SAME},
    {"shift_left", K_INT, R_SAME}, {"shift_right_arithmetic", K_INT, R_SAME},
    {"shift_right_logical", K_INT, R_SAME}, {"complex", K_FLOAT, R_SAME},
};

static const op_info_t *find_op(const op_info_t *tab, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(tab[i].name, name)) return &tab[i];
  return NULL;
}

static tpu_dtype_t real_of(tpu_dtype_t dt) {
  if (dt == TPU_C64) return TPU_F32;
  if (dt == TPU_C128) return TPU_F64;
  return dt;
}

tpu_hlo_value_t tpu_hlo_unary(tpu_hlo_func_t *f, const char *op, tpu_hlo_value_t x) {
  if (!tpu_hlo__ok(f, op ? op : "unary", &x, 1)) return TPU_HLO_NONE;
  if (!op) return FAIL(f, "unary: no op name");
  tpu_hlo_type_t t = *tpu_hlo__t(f, x);
  char b[256];
  if (strchr(op, '.')) {
    /* A full name ("chlo.erf", "chlo.lgamma"): passed through, same type;
     * the chlo is_inf family returns i1. */
    if (strstr(op, "is_inf") || strstr(op, "is_neg_inf") || strstr(op, "is_pos_inf")) t.dtype = TPU_PRED;
    return tpu_hlo__simple(f, op, &x, 1, &t, NULL);
  }
  const op_info_t *info = find_op(k_unary, sizeof(k_unary) / sizeof(k_unary[0]), op);
  if (!info) return FAIL(f, "unary: unknown op \"%s\" (operand %s)", op, TPU_HLO_TSTR(&t, b));
  if (!kind_ok(info->kind, t.dtype))
    return FAIL(f, "%s: expected %s operand, got %s", op, kind_name(info->kind), TPU_HLO_TSTR(&t, b));
  if (info->result == R_PRED) t.dtype = TPU_PRED;
  if (info->result == R_REAL) t.dtype = real_of(t.dtype);
  return tpu_hlo__simple(f, op, &x, 1, &t, NULL);
}

tpu_hlo_value_t tpu_hlo_binary(tpu_hlo_func_t *f, const char *op, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  tpu_hlo_value_t ops[2] = {a, b};
  if (!tpu_hlo__ok(f, op ? op : "binary", ops, 2)) return TPU_HLO_NONE;
  if (!op) return FAIL(f, "binary: no op name");
  const tpu_hlo_type_t *ta = tpu_hlo__t(f, a), *tb = tpu_hlo__t(f, b);
  char b1[256], b2[256];
  if (strchr(op, '.')) {
    if (!tpu_hlo_type_equal(ta, tb))
      return FAIL(f, "%s: operand types differ: %s vs %s", op, TPU_HLO_TSTR(ta, b1), TPU_HLO_TSTR(tb, b2));
    return tpu_hlo__simple(f, op, ops, 2, ta, NULL);
  }
  const op_info_t *info = find_op(k_binary, sizeof(k_binary) / sizeof(k_binary[0]), op);
  if (!info) return FAIL(f, "binary: unknown op \"%s\"", op);
  if (!tpu_hlo__same_shape(ta, tb))
    return FAIL(f, "%s: shape mismatch: lhs %s, rhs %s (broadcast first)", op, TPU_HLO_TSTR(ta, b1),
                TPU_HLO_TSTR(tb, b2));
  if (ta->dtype != tb->dtype)
    return FAIL(f, "%s: element type mismatch: lhs %s, rhs %s (convert first)", op, TPU_HLO_TSTR(ta, b1),
                TPU_HLO_TSTR(tb, b2));
  if (!kind_ok(info->kind, ta->dtype))
    return FAIL(f, "%s: expected %s operand, got %s", op, kind_name(info->kind), TPU_HLO_TSTR(ta, b1));
  tpu_hlo_type_t t = *ta;
  if (!strcmp(op, "complex")) {
    if (t.dtype == TPU_F32) t.dtype = TPU_C64;
    else if (t.dtype == TPU_F64) t.dtype = TPU_C128;
    else return FAIL(f, "complex: expected f32 or f64 parts, got %s", TPU_HLO_TSTR(ta, b1));
  }
  /* An integer division with no elements has no values.  Its 0-element
   * operands are constants, and XLA's StableHLO folder divides their splat
   * values: 0 / 0 in the compiler, SIGFPE (found by tests/faults' op fuzzer) */
  if ((!strcmp(op, "remainder") || !strcmp(op, "divide")) && tpu_hlo_type_numel(&t) == 0 &&
      !tpu_dtype_is_float(t.dtype) && !tpu_dtype_is_complex(t.dtype))
    return tpu_hlo_constant(f, t, 0);
  return tpu_hlo__simple(f, op, ops, 2, &t, NULL);
}

tpu_hlo_value_t tpu_hlo_compare(tpu_hlo_func_t *f, const char *direction, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  tpu_hlo_value_t ops[2] = {a, b};
  if (!tpu_hlo__ok(f, "compare", ops, 2)) return TPU_HLO_NONE;
  static const char *const dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  bool known = false;
  for (int i = 0; i < 6 && direction; i++) known |= !strcmp(direction, dirs[i]);
  if (!known) return FAIL(f, "compare: unknown direction \"%s\"", direction ? direction : "(null)");
  const tpu_hlo_type_t *ta = tpu_hlo__t(f, a), *tb = tpu_hlo__t(f, b);
  char b1[256], b2[256];
  if (!tpu_hlo_type_equal(ta, tb))
    return FAIL(f, "compare %s: operand types differ: %s vs %s", direction, TPU_HLO_TSTR(ta, b1),
                TPU_HLO_TSTR(tb, b2));
  if (tpu_dtype_is_complex(ta->dtype) && strcmp(direction, "EQ") && strcmp(direction, "NE"))
    return FAIL(f, "compare %s: complex operands support EQ/NE only (%s)", direction, TPU_HLO_TSTR(ta, b1));
  char attrs[128];
  snprintf(attrs, sizeof(attrs),
           "comparison_direction = #stablehlo<comparison_direction %s>, "
           "compare_type = #stablehlo<comparison_type %s>",
           direction, tpu_hlo__compare_type(ta->dtype));
  tpu_hlo_type_t t = *ta;
  t.dtype = TPU_PRED;
  return tpu_hlo__simple(f, "compare", ops, 2, &t, attrs);
}

tpu_hlo_value_t tpu_hlo_select(tpu_hlo_func_t *f, tpu_hlo_value_t pred, tpu_hlo_value_t on_true,
                               tpu_hlo_value_t on_false) {
  tpu_hlo_value_t ops[3] = {pred, on_true, on_false};
  if (!tpu_hlo__ok(f, "select", ops, 3)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tp = tpu_hlo__t(f, pred), *tt = tpu_hlo__t(f, on_true), *tf = tpu_hlo__t(f, on_false);
  char b1[256], b2[256];
  if (tp->dtype != TPU_PRED) return FAIL(f, "select: predicate must be i1, got %s", TPU_HLO_TSTR(tp, b1));
  if (!tpu_hlo_type_equal(tt, tf))
    return FAIL(f, "select: branch types differ: %s vs %s", TPU_HLO_TSTR(tt, b1), TPU_HLO_TSTR(tf, b2));
  if (tp->rank != 0 && !tpu_hlo__same_shape(tp, tt))
    return FAIL(f, "select: predicate shape %s does not match %s", TPU_HLO_TSTR(tp, b1), TPU_HLO_TSTR(tt, b2));
  return tpu_hlo__simple(f, "select", ops, 3, tt, NULL);
}

tpu_hlo_value_t tpu_hlo_clamp(tpu_hlo_func_t *f, tpu_hlo_value_t lo, tpu_hlo_value_t x, tpu_hlo_value_t hi) {
  tpu_hlo_value_t ops[3] = {lo, x, hi};
  if (!tpu_hlo__ok(f, "clamp", ops, 3)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tl = tpu_hlo__t(f, lo), *tx = tpu_hlo__t(f, x), *th = tpu_hlo__t(f, hi);
  char b1[256], b2[256];
  const tpu_hlo_type_t *bounds[2] = {tl, th};
  for (int i = 0; i < 2; i++) {
    const tpu_hlo_type_t *tb = bounds[i];
    if (tb->dtype != tx->dtype || (tb->rank != 0 && !tpu_hlo__same_shape(tb, tx)))
      return FAIL(f, "clamp: %s bound %s must be 0-d or match operand %s (same element type)",
                  i ? "max" : "min", TPU_HLO_TSTR(tb, b1), TPU_HLO_TSTR(tx, b2));
  }
  return tpu_hlo__simple(f, "clamp", ops, 3, tx, NULL);
}

static tpu_hlo_value_t convert_plain(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t to) {
  tpu_hlo_type_t t = *tpu_hlo__t(f, x);
  t.dtype = to;
  return tpu_hlo__simple(f, "convert", &x, 1, &t, NULL);
}

/* Into an 8-bit float as PyTorch's CPU converts: from float32 (a double or
 * an integer goes to float32 first, as c10's constructors take a float);
 * e4m3fn saturates at +-448 (c10's conversion; XLA gives NaN); e5m2 and
 * e4m3fn round once, where XLA's CPU convert goes through f16 and rounds
 * twice: through f16 rounded to odd, whose extra bits make the second
 * rounding exact.  The FNUZ types convert directly (XLA's path from f16
 * mishandles f16's subnormals for them), with no negative zero. */
static tpu_hlo_value_t convert_to_f8(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t to) {
  tpu_hlo_type_t t = *tpu_hlo__t(f, x);
  if (t.dtype != TPU_F32) x = convert_plain(f, x, TPU_F32);
  t.dtype = TPU_F32;
  if (to == TPU_F8E4M3FN) {
    tpu_hlo_value_t sat = tpu_hlo_clamp(f, tpu_hlo_constant(f, t, -448.0), x, tpu_hlo_constant(f, t, 448.0));
    x = tpu_hlo_select(f, tpu_hlo_compare(f, "NE", x, x), x, sat); /* NaN stays NaN */
  }
  if (to != TPU_F8E5M2 && to != TPU_F8E4M3FN) {
    /* the FNUZ types: directly, what rounds to zero as +0 (XLA gives -0, which is their NaN) */
    double half_tiny = to == TPU_F8E5M2FNUZ ? 0x1p-18 : 0x1p-11;
    tpu_hlo_value_t tiny = tpu_hlo_compare(f, "LE", tpu_hlo_unary(f, "abs", x), tpu_hlo_constant(f, t, half_tiny));
    return convert_plain(f, tpu_hlo_select(f, tiny, tpu_hlo_constant(f, t, 0.0), x), to);
  }
  tpu_hlo_type_t bt = t;
  bt.dtype = TPU_S16;
  tpu_hlo_value_t h = convert_plain(f, x, TPU_F16), back = convert_plain(f, h, TPU_F32);
  tpu_hlo_value_t bits = tpu_hlo_bitcast_convert(f, h, TPU_S16), zero = tpu_hlo_constant_i64(f, bt, 0);
  tpu_hlo_value_t even = tpu_hlo_compare(f, "EQ", tpu_hlo_binary(f, "and", bits, tpu_hlo_constant_i64(f, bt, 1)), zero);
  tpu_hlo_value_t inexact = tpu_hlo_compare(f, "NE", back, x);
  /* the odd neighbour on x's side: one step of magnitude down or up */
  tpu_hlo_value_t down = tpu_hlo_compare(f, "GT", tpu_hlo_unary(f, "abs", back), tpu_hlo_unary(f, "abs", x));
  tpu_hlo_value_t step = tpu_hlo_select(f, down, tpu_hlo_constant_i64(f, bt, -1), tpu_hlo_constant_i64(f, bt, 1));
  step = tpu_hlo_select(f, tpu_hlo_binary(f, "and", even, inexact), step, zero);
  x = tpu_hlo_bitcast_convert(f, tpu_hlo_binary(f, "add", bits, step), TPU_F16);
  return convert_plain(f, x, to);
}

tpu_hlo_value_t tpu_hlo_convert(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t to) {
  if (!tpu_hlo__ok(f, "convert", &x, 1)) return TPU_HLO_NONE;
  if (!tpu_dtype_valid(to)) return FAIL(f, "convert: invalid target dtype %d", (int)to);
  tpu_dtype_t from = tpu_hlo__t(f, x)->dtype;
  if (tpu_dtype_is_f8(to) && from != to && !tpu_dtype_is_complex(from)) return convert_to_f8(f, x, to);
  return convert_plain(f, x, to);
}

tpu_hlo_value_t tpu_hlo_bitcast_convert(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t to) {
  if (!tpu_hlo__ok(f, "bitcast_convert", &x, 1)) return TPU_HLO_NONE;
  if (!tpu_dtype_valid(to)) return FAIL(f, "bitcast_convert: invalid target dtype %d", (int)to);
  tpu_hlo_type_t t = *tpu_hlo__t(f, x);
  char b[256];
  size_t from_sz = tpu_dtype_size(t.dtype), to_sz = tpu_dtype_size(to);
  if (t.dtype == TPU_PRED || to == TPU_PRED)
    return FAIL(f, "bitcast_convert: bool has no bit layout (%s -> %s)", TPU_HLO_TSTR(&t, b), tpu_dtype_mlir(to));
  if (from_sz > to_sz) {
    if (t.rank >= TPU_MAX_RANK) return FAIL(f, "bitcast_convert: result rank would exceed %d", TPU_MAX_RANK);
    t.dims[t.rank++] = (int64_t)(from_sz / to_sz);
  } else if (from_sz < to_sz) {
    if (t.rank == 0 || t.dims[t.rank - 1] != (int64_t)(to_sz / from_sz))
      return FAIL(f, "bitcast_convert: %s -> %s needs a last dimension of %zu", TPU_HLO_TSTR(&t, b),
                  tpu_dtype_mlir(to), to_sz / from_sz);
    t.rank--;
  }
  t.dtype = to;
  return tpu_hlo__simple(f, "bitcast_convert", &x, 1, &t, NULL);
}

/* ---- constants / iota ------------------------------------------------------------------------------ */

static bool type_ok(tpu_hlo_func_t *f, const char *op, const tpu_hlo_type_t *t) {
  if (!tpu_dtype_valid(t->dtype) || t->rank < 0 || t->rank > TPU_MAX_RANK) {
    FAIL(f, "%s: invalid type (dtype %d, rank %d)", op, (int)t->dtype, t->rank);
    return false;
  }
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) {
      FAIL(f, "%s: negative dimension %lld", op, (long long)t->dims[i]);
      return false;
    }
  return true;
}

static tpu_hlo_value_t emit_constant(tpu_hlo_func_t *f, const tpu_hlo_type_t *t, tpu_strbuf_t *lit) {
  /* lit holds the text between dense< and > */
  tpu_hlo_value_t v = tpu_hlo__begin(f, "constant", NULL, 0, t, 1);
  if (v < 0) return v;
  tpu_strbuf_t *sb = &f->body;
  tpu_hlo__puts(sb, " {value = dense<");
  tpu_strbuf_append(sb, lit->data ? lit->data : "", lit->len);
  tpu_hlo__puts(sb, "> : ");
  tpu_hlo__type(sb, t);
  tpu_strbuf_append(sb, "}", 1);
  tpu_hlo__end(f, NULL, 0, v, 1);
  return f->status ? TPU_HLO_NONE : v;
}

tpu_hlo_value_t tpu_hlo_constant(tpu_hlo_func_t *f, tpu_hlo_type_t type, double value) {
  if (!f || f->status || !type_ok(f, "constant", &type)) return TPU_HLO_NONE;
  if (tpu_dtype_is_complex(type.dtype) && !isfinite(value))
    return FAIL(f, "constant: non-finite complex constants are not supported");
  tpu_strbuf_t lit;
  tpu_strbuf_init(&lit);
  tpu_hlo__literal(&lit, type.dtype, value);
  tpu_hlo_value_t v = tpu_strbuf_ok(&lit) ? emit_constant(f, &type, &lit) : OOM(f);
  tpu_strbuf_free(&lit);
  return v;
}

tpu_hlo_value_t tpu_hlo_constant_i64(tpu_hlo_func_t *f, tpu_hlo_type_t type, int64_t value) {
  if (!f || f->status || !type_ok(f, "constant", &type)) return TPU_HLO_NONE;
  if (tpu_dtype_is_float(type.dtype) || tpu_dtype_is_complex(type.dtype))
    return tpu_hlo_constant(f, type, (double)value);
  tpu_strbuf_t lit;
  tpu_strbuf_init(&lit);
  put_int_literal(&lit, type.dtype, value);
  tpu_hlo_value_t v = tpu_strbuf_ok(&lit) ? emit_constant(f, &type, &lit) : OOM(f);
  tpu_strbuf_free(&lit);
  return v;
}

/* Nested list "[[a, b], [c, d]]" of numel values; put(i) prints element i. */
typedef void (*put_elem_fn)(tpu_strbuf_t *sb, tpu_dtype_t dt, const void *values, int64_t i);

static void put_nested(tpu_strbuf_t *sb, const tpu_hlo_type_t *t, int d, int64_t *idx, const void *values,
                       put_elem_fn put) {
  if (d == t->rank) {
    put(sb, t->dtype, values, (*idx)++);
    return;
  }
  tpu_strbuf_append(sb, "[", 1);
  for (int64_t i = 0; i < t->dims[d]; i++) {
    if (i) tpu_strbuf_append(sb, ", ", 2);
    put_nested(sb, t, d + 1, idx, values, put);
  }
  tpu_strbuf_append(sb, "]", 1);
}

static void put_i64_elem(tpu_strbuf_t *sb, tpu_dtype_t dt, const void *values, int64_t i) {
  int64_t v = ((const int64_t *)values)[i];
  if (tpu_dtype_is_float(dt) || tpu_dtype_is_complex(dt)) tpu_hlo__literal(sb, dt, (double)v);
  else put_int_literal(sb, dt, v);
}

static void put_f64_elem(tpu_strbuf_t *sb, tpu_dtype_t dt, const void *values, int64_t i) {
  tpu_hlo__literal(sb, dt, ((const double *)values)[i]);
}

static tpu_hlo_value_t dense_constant(tpu_hlo_func_t *f, const tpu_hlo_type_t *t, const void *values,
                                      put_elem_fn put) {
  if (!f || f->status || !type_ok(f, "constant", t)) return TPU_HLO_NONE;
  if (!values) return FAIL(f, "constant: no values");
  int64_t n = tpu_hlo_type_numel(t);
  if (n > (1 << 20)) return FAIL(f, "constant: %lld elements is too large for program text; pass it as an input", (long long)n);
  tpu_strbuf_t lit;
  tpu_strbuf_init(&lit);
  int64_t idx = 0;
  if (n == 0) {
    /* empty: nothing between the brackets, e.g. dense<> */
  } else {
    put_nested(&lit, t, 0, &idx, values, put);
  }
  tpu_hlo_value_t v = tpu_strbuf_ok(&lit) ? emit_constant(f, t, &lit) : OOM(f);
  tpu_strbuf_free(&lit);
  return v;
}

tpu_hlo_value_t tpu_hlo_constant_i64s(tpu_hlo_func_t *f, tpu_hlo_type_t type, const int64_t *values) {
  return dense_constant(f, &type, values, put_i64_elem);
}

tpu_hlo_value_t tpu_hlo_constant_f64s(tpu_hlo_func_t *f, tpu_hlo_type_t type, const double *values) {
  if (f && !f->status && tpu_dtype_is_complex(type.dtype))
    return FAIL(f, "constant: dense complex constants are not supported");
  return dense_constant(f, &type, values, put_f64_elem);
}

tpu_hlo_value_t tpu_hlo_iota(tpu_hlo_func_t *f, tpu_hlo_type_t type, int64_t dim) {
  if (!f || f->status || !type_ok(f, "iota", &type)) return TPU_HLO_NONE;
  char b[256];
  if (dim < 0 || dim >= type.rank)
    return FAIL(f, "iota: dimension %lld out of range for %s", (long long)dim, TPU_HLO_TSTR(&type, b));
  if (type.dtype == TPU_PRED) return FAIL(f, "iota: bool result is not supported");
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "iota_dimension = %lld : i64", (long long)dim);
  return tpu_hlo__simple(f, "iota", NULL, 0, &type, attrs);
}

tpu_hlo_value_t tpu_hlo_scalar(tpu_hlo_func_t *f, tpu_dtype_t dtype, double value) {
  return tpu_hlo_constant(f, tpu_hlo_type_scalar(dtype), value);
}

/* ---- shape ops ------------------------------------------------------------------------------------------ */

/* Attribute text goes through a scratch builder so the line stays one append. */
static tpu_hlo_value_t simple_sb(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *ops, int nops,
                                 const tpu_hlo_type_t *res, tpu_strbuf_t *attrs) {
  tpu_hlo_value_t v = tpu_strbuf_ok(attrs) ? tpu_hlo__simple(f, op, ops, nops, res, tpu_strbuf_cstr(attrs)) : OOM(f);
  tpu_strbuf_free(attrs);
  return v;
}

tpu_hlo_value_t tpu_hlo_broadcast_in_dim(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_type_t to,
                                         const int64_t *dims) {
  if (!tpu_hlo__ok(f, "broadcast_in_dim", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  if (to.dtype == TPU_DTYPE_INVALID) to.dtype = tx->dtype;
  if (!type_ok(f, "broadcast_in_dim", &to)) return TPU_HLO_NONE;
  char b1[256], b2[256];
  if (to.dtype != tx->dtype)
    return FAIL(f, "broadcast_in_dim: element type changes (%s -> %s)", TPU_HLO_TSTR(tx, b1), TPU_HLO_TSTR(&to, b2));
  if (tx->rank > to.rank)
    return FAIL(f, "broadcast_in_dim: operand %s has higher rank than result %s", TPU_HLO_TSTR(tx, b1),
                TPU_HLO_TSTR(&to, b2));
  if (tx->rank && !dims) return FAIL(f, "broadcast_in_dim: no broadcast_dimensions");
  uint32_t seen = 0;
  for (int i = 0; i < tx->rank; i++) {
    int64_t d = dims[i];
    if (d < 0 || d >= to.rank || (seen >> d) & 1)
      return FAIL(f, "broadcast_in_dim: bad or repeated broadcast dimension %lld (%s -> %s)", (long long)d,
                  TPU_HLO_TSTR(tx, b1), TPU_HLO_TSTR(&to, b2));
    seen |= 1u << d;
    if (tx->dims[i] != 1 && tx->dims[i] != to.dims[d])
      return FAIL(f, "broadcast_in_dim: operand dim %d (size %lld) cannot broadcast to result dim %lld (size %lld): %s -> %s",
                  i, (long long)tx->dims[i], (long long)d, (long long)to.dims[d], TPU_HLO_TSTR(tx, b1),
                  TPU_HLO_TSTR(&to, b2));
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "broadcast_dimensions", dims, tx->rank);
  return simple_sb(f, "broadcast_in_dim", &x, 1, &to, &a);
}

tpu_hlo_value_t tpu_hlo_broadcast_to(tpu_hlo_func_t *f, tpu_hlo_value_t x, int rank, const int64_t *dims) {
  if (!tpu_hlo__ok(f, "broadcast_to", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256];
  if (rank < tx->rank || rank > TPU_MAX_RANK)
    return FAIL(f, "broadcast_to: cannot broadcast %s to rank %d", TPU_HLO_TSTR(tx, b1), rank);
  tpu_hlo_type_t to = tpu_hlo_type_make(tx->dtype, rank, dims);
  if (tpu_hlo_type_equal(tx, &to)) return x;
  int64_t bd[TPU_MAX_RANK];
  int off = rank - tx->rank;
  for (int i = 0; i < tx->rank; i++) {
    bd[i] = off + i;
    if (tx->dims[i] != 1 && tx->dims[i] != dims[off + i]) {
      char b2[256];
      return FAIL(f, "broadcast_to: shapes are not broadcastable: %s to %s", TPU_HLO_TSTR(tx, b1),
                  TPU_HLO_TSTR(&to, b2));
    }
  }
  return tpu_hlo_broadcast_in_dim(f, x, to, bd);
}

tpu_hlo_value_t tpu_hlo_cast(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_dtype_t dtype) {
  if (!tpu_hlo__ok(f, "cast", &x, 1)) return TPU_HLO_NONE;
  if (tpu_hlo__t(f, x)->dtype == dtype) return x;
  return tpu_hlo_convert(f, x, dtype);
}

tpu_hlo_value_t tpu_hlo_reshape(tpu_hlo_func_t *f, tpu_hlo_value_t x, int rank, const int64_t *dims) {
  if (!tpu_hlo__ok(f, "reshape", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256], b2[256];
  if (rank < 0 || rank > TPU_MAX_RANK) return FAIL(f, "reshape: bad rank %d", rank);
  tpu_hlo_type_t to = tpu_hlo_type_make(tx->dtype, rank, dims);
  if (!type_ok(f, "reshape", &to)) return TPU_HLO_NONE;
  if (tpu_hlo_type_numel(&to) != tpu_hlo_type_numel(tx))
    return FAIL(f, "reshape: element count differs: %s (%lld) -> %s (%lld)", TPU_HLO_TSTR(tx, b1),
                (long long)tpu_hlo_type_numel(tx), TPU_HLO_TSTR(&to, b2), (long long)tpu_hlo_type_numel(&to));
  if (tpu_hlo_type_equal(tx, &to)) return x;
  return tpu_hlo__simple(f, "reshape", &x, 1, &to, NULL);
}

tpu_hlo_value_t tpu_hlo_transpose(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *perm) {
  if (!tpu_hlo__ok(f, "transpose", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256];
  tpu_hlo_type_t to = *tx;
  uint32_t seen = 0;
  for (int i = 0; i < tx->rank; i++) {
    if (!perm || perm[i] < 0 || perm[i] >= tx->rank || (seen >> perm[i]) & 1)
      return FAIL(f, "transpose: permutation is not a permutation of 0..%d for %s", tx->rank - 1,
                  TPU_HLO_TSTR(tx, b1));
    seen |= 1u << perm[i];
    to.dims[i] = tx->dims[perm[i]];
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "permutation", perm, tx->rank);
  tpu_hlo_value_t v = simple_sb(f, "transpose", &x, 1, &to, &a);
  bool swap = tx->rank >= 2 && perm[tx->rank - 2] == tx->rank - 1 && perm[tx->rank - 1] == tx->rank - 2;
  for (int i = 0; swap && i < tx->rank - 2; i++) swap = perm[i] == i;
  if (v != TPU_HLO_NONE && swap) f->vals[v].swap_of = x;
  return v;
}

tpu_hlo_value_t tpu_hlo_swapped_source(const tpu_hlo_func_t *f, tpu_hlo_value_t v) {
  if (!f || v < 0 || v >= f->nvals) return TPU_HLO_NONE;
  return f->vals[v].swap_of >= 0 ? f->vals[v].swap_of : TPU_HLO_NONE;
}

tpu_hlo_value_t tpu_hlo_slice(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *start, const int64_t *limit,
                              const int64_t *strides) {
  if (!tpu_hlo__ok(f, "slice", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256];
  tpu_hlo_type_t to = *tx;
  int64_t ones[TPU_MAX_RANK];
  for (int i = 0; i < tx->rank; i++) {
    int64_t s = strides ? strides[i] : 1;
    ones[i] = s;
    if (!start || !limit || start[i] < 0 || start[i] > limit[i] || limit[i] > tx->dims[i] || s < 1)
      return FAIL(f, "slice: dim %d: bad start %lld / limit %lld / stride %lld for %s", i,
                  start ? (long long)start[i] : -1LL, limit ? (long long)limit[i] : -1LL, (long long)s,
                  TPU_HLO_TSTR(tx, b1));
    to.dims[i] = (limit[i] - start[i] + s - 1) / s;
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "start_indices", start, tx->rank);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "limit_indices", limit, tx->rank);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "strides", ones, tx->rank);
  return simple_sb(f, "slice", &x, 1, &to, &a);
}

/* Start indices must be 0-d integers of one type: converts to s64 when
 * they differ.  Fills ops[1..rank]. */
static bool start_indices(tpu_hlo_func_t *f, const char *op, const tpu_hlo_value_t *starts, int rank,
                          tpu_hlo_value_t *out) {
  if (rank && !starts) {
    FAIL(f, "%s: no start indices", op);
    return false;
  }
  if (!tpu_hlo__ok(f, op, starts, rank)) return false;
  bool mixed = false;
  for (int i = 0; i < rank; i++) {
    const tpu_hlo_type_t *t = tpu_hlo__t(f, starts[i]);
    char b[256];
    if (t->rank != 0 || !tpu_dtype_is_int(t->dtype)) {
      FAIL(f, "%s: start index %d must be a 0-d integer, got %s", op, i, TPU_HLO_TSTR(t, b));
      return false;
    }
    if (t->dtype != tpu_hlo__t(f, starts[0])->dtype) mixed = true;
  }
  for (int i = 0; i < rank; i++) out[i] = mixed ? tpu_hlo_cast(f, starts[i], TPU_S64) : starts[i];
  return !f->status;
}

tpu_hlo_value_t tpu_hlo_dynamic_slice(tpu_hlo_func_t *f, tpu_hlo_value_t x, const tpu_hlo_value_t *starts,
                                      const int64_t *sizes) {
  if (!tpu_hlo__ok(f, "dynamic_slice", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *tpu_hlo__t(f, x);
  int rank = to.rank;
  tpu_hlo_value_t ops[TPU_MAX_RANK + 1];
  ops[0] = x;
  if (!start_indices(f, "dynamic_slice", starts, rank, ops + 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256];
  for (int i = 0; i < rank; i++) {
    if (!sizes || sizes[i] < 0 || sizes[i] > tx->dims[i])
      return FAIL(f, "dynamic_slice: dim %d: slice size %lld out of range for %s", i,
                  sizes ? (long long)sizes[i] : -1LL, TPU_HLO_TSTR(tx, b1));
    to.dims[i] = sizes[i];
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "slice_sizes", sizes, rank);
  return simple_sb(f, "dynamic_slice", ops, rank + 1, &to, &a);
}

tpu_hlo_value_t tpu_hlo_dynamic_update_slice(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t update,
                                             const tpu_hlo_value_t *starts) {
  tpu_hlo_value_t ops[TPU_MAX_RANK + 2] = {x, update};
  if (!tpu_hlo__ok(f, "dynamic_update_slice", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x), *tu = tpu_hlo__t(f, update);
  char b1[256], b2[256];
  if (tu->rank != tx->rank || tu->dtype != tx->dtype)
    return FAIL(f, "dynamic_update_slice: update %s does not match operand %s in rank/element type",
                TPU_HLO_TSTR(tu, b1), TPU_HLO_TSTR(tx, b2));
  for (int i = 0; i < tx->rank; i++)
    if (tu->dims[i] > tx->dims[i])
      return FAIL(f, "dynamic_update_slice: update %s is larger than operand %s in dim %d", TPU_HLO_TSTR(tu, b1),
                  TPU_HLO_TSTR(tx, b2), i);
  int rank = tx->rank;
  tpu_hlo_type_t to = *tx;
  if (!start_indices(f, "dynamic_update_slice", starts, rank, ops + 2)) return TPU_HLO_NONE;
  return tpu_hlo__simple(f, "dynamic_update_slice", ops, rank + 2, &to, NULL);
}

tpu_hlo_value_t tpu_hlo_concatenate(tpu_hlo_func_t *f, const tpu_hlo_value_t *xs, int n, int64_t dim) {
  if (!f || f->status) return TPU_HLO_NONE;
  if (n < 1 || !xs) return FAIL(f, "concatenate: needs at least one operand");
  if (!tpu_hlo__ok(f, "concatenate", xs, n)) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *tpu_hlo__t(f, xs[0]);
  char b1[256], b2[256];
  if (dim < 0 || dim >= to.rank)
    return FAIL(f, "concatenate: dimension %lld out of range for %s", (long long)dim, TPU_HLO_TSTR(&to, b1));
  for (int k = 1; k < n; k++) {
    const tpu_hlo_type_t *t = tpu_hlo__t(f, xs[k]);
    bool ok = t->rank == to.rank && t->dtype == to.dtype;
    for (int i = 0; ok && i < t->rank; i++)
      if (i != dim && t->dims[i] != to.dims[i]) ok = false;
    if (!ok)
      return FAIL(f, "concatenate: operand %d %s does not match operand 0 %s outside dimension %lld", k,
                  TPU_HLO_TSTR(t, b1), TPU_HLO_TSTR(tpu_hlo__t(f, xs[0]), b2), (long long)dim);
    to.dims[dim] += t->dims[dim];
  }
  if (n == 1) return xs[0];
  char attrs[48];
  snprintf(attrs, sizeof(attrs), "dimension = %lld : i64", (long long)dim);
  return tpu_hlo__simple(f, "concatenate", xs, n, &to, attrs);
}

tpu_hlo_value_t tpu_hlo_pad(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t pad_value, const int64_t *low,
                            const int64_t *high, const int64_t *interior) {
  tpu_hlo_value_t ops[2] = {x, pad_value};
  if (!tpu_hlo__ok(f, "pad", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x), *tp = tpu_hlo__t(f, pad_value);
  char b1[256], b2[256];
  if (tp->rank != 0 || tp->dtype != tx->dtype)
    return FAIL(f, "pad: padding value %s must be 0-d of the operand's element type (%s)", TPU_HLO_TSTR(tp, b1),
                TPU_HLO_TSTR(tx, b2));
  tpu_hlo_type_t to = *tx;
  int64_t zeros[TPU_MAX_RANK] = {0};
  const int64_t *in = interior ? interior : zeros;
  const int64_t *lo = low ? low : zeros, *hi = high ? high : zeros;
  for (int i = 0; i < tx->rank; i++) {
    if (in[i] < 0) return FAIL(f, "pad: negative interior padding %lld in dim %d", (long long)in[i], i);
    int64_t d = tx->dims[i];
    int64_t r = lo[i] + hi[i] + d + (d > 0 ? (d - 1) * in[i] : 0);
    if (r < 0)
      return FAIL(f, "pad: dim %d: negative result size %lld (low %lld, high %lld) for %s", i, (long long)r,
                  (long long)lo[i], (long long)hi[i], TPU_HLO_TSTR(tx, b1));
    to.dims[i] = r;
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "edge_padding_low", lo, tx->rank);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "edge_padding_high", hi, tx->rank);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "interior_padding", in, tx->rank);
  return simple_sb(f, "pad", ops, 2, &to, &a);
}

tpu_hlo_value_t tpu_hlo_reverse(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *dims, int ndims) {
  if (!tpu_hlo__ok(f, "reverse", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256];
  uint32_t seen = 0;
  if (ndims < 0 || (ndims && !dims)) return FAIL(f, "reverse: bad dimension list");
  for (int i = 0; i < ndims; i++) {
    if (dims[i] < 0 || dims[i] >= tx->rank || (seen >> dims[i]) & 1)
      return FAIL(f, "reverse: bad or repeated dimension %lld for %s", (long long)dims[i], TPU_HLO_TSTR(tx, b1));
    seen |= 1u << dims[i];
  }
  if (ndims == 0) return x;
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "dimensions", dims, ndims);
  return simple_sb(f, "reverse", &x, 1, tx, &a);
}
