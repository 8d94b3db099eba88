/* hlo_ops.c - the structured emitters: dot_general, reductions, windows,
 * convolution, gather / scatter, sort, rng_bit_generator and collectives.
 *
 * Ops with bodies print their region between the operands and the
 * attribute dictionary (the generic MLIR order):
 *   %9 = "stablehlo.reduce"(%7, %8) ({
 *     ^bb0(%t0: tensor<f32>, %t1: tensor<f32>):
 *       %t2 = "stablehlo.add"(%t0, %t1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
 *       "stablehlo.return"(%t2) : (tensor<f32>) -> ()
 *     }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
 * Structured attributes use the StableHLO attribute syntax:
 * #stablehlo.dot<...>, #stablehlo.gather<...>, #stablehlo.scatter<...> and
 * the compact convolution layout #stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>.
 * Empty dimension lists are left out of those attributes.
 */
#include "hlo/hlo_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FAIL(f, ...) tpu_hlo_fail((f), TPU_INVALID_ARGUMENT, __VA_ARGS__)
#define OOM(f) tpu_hlo_fail((f), TPU_RESOURCE_EXHAUSTED, "hlo: out of host memory")
#define T(v) tpu_hlo__t(f, (v))

/* Bit set of a dimension list; false on an out-of-range or repeated entry. */
static bool dim_set(const int64_t *dims, int n, int rank, uint32_t *out) {
  uint32_t s = 0;
  if (n < 0 || n > TPU_MAX_RANK || (n && !dims)) return false;
  for (int i = 0; i < n; i++) {
    if (dims[i] < 0 || dims[i] >= rank || (s >> dims[i]) & 1) return false;
    s |= 1u << dims[i];
  }
  *out = s;
  return true;
}

/* ", name = [1, 2]" unless empty */
static void list_field(tpu_strbuf_t *sb, bool *first, const char *name, const int64_t *v, int n) {
  if (n <= 0) return;
  if (!*first) tpu_hlo__puts(sb, ", ");
  *first = false;
  tpu_hlo__puts(sb, name);
  tpu_hlo__puts(sb, " = [");
  tpu_hlo__i64s(sb, v, n);
  tpu_hlo__puts(sb, "]");
}

/* Finishes an op whose line was begun: region(s) already appended by the
 * caller, then " {attrs}" and the signature. */
static tpu_hlo_value_t finish(tpu_hlo_func_t *f, tpu_hlo_value_t first, const tpu_hlo_value_t *ops, int nops,
                              int nres, tpu_strbuf_t *attrs) {
  if (attrs) {
    if (attrs->len) {
      tpu_strbuf_append(&f->body, " {", 2);
      tpu_strbuf_append(&f->body, attrs->data, attrs->len);
      tpu_strbuf_append(&f->body, "}", 1);
    }
    if (!tpu_strbuf_ok(attrs)) OOM(f);
    tpu_strbuf_free(attrs);
  }
  tpu_hlo__end(f, ops, nops, first, nres);
  return f->status ? TPU_HLO_NONE : first;
}

/* ---- dot_general ------------------------------------------------------------------------------- */

tpu_hlo_value_t tpu_hlo_dot_general(tpu_hlo_func_t *f, tpu_hlo_value_t lhs, tpu_hlo_value_t rhs,
                                    const tpu_hlo_dot_dims_t *dims, tpu_dtype_t out) {
  tpu_hlo_value_t ops[2] = {lhs, rhs};
  if (!tpu_hlo__ok(f, "dot_general", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tl = T(lhs), *tr = T(rhs);
  char b1[256], b2[256];
  if (!dims) return FAIL(f, "dot_general: no dimension numbers");
  if (tl->dtype != tr->dtype)
    return FAIL(f, "dot_general: element types differ: %s vs %s", TPU_HLO_TSTR(tl, b1), TPU_HLO_TSTR(tr, b2));
  uint32_t lb, rb, lc, rc;
  if (!dim_set(dims->lhs_batch, dims->nbatch, tl->rank, &lb) || !dim_set(dims->rhs_batch, dims->nbatch, tr->rank, &rb) ||
      !dim_set(dims->lhs_contract, dims->ncontract, tl->rank, &lc) ||
      !dim_set(dims->rhs_contract, dims->ncontract, tr->rank, &rc) || (lb & lc) || (rb & rc))
    return FAIL(f, "dot_general: bad batch/contracting dimensions for %s x %s", TPU_HLO_TSTR(tl, b1),
                TPU_HLO_TSTR(tr, b2));
  tpu_hlo_type_t to;
  memset(&to, 0, sizeof(to));
  to.dtype = out == TPU_DTYPE_INVALID ? tl->dtype : out;
  for (int i = 0; i < dims->nbatch; i++) {
    int64_t a = tl->dims[dims->lhs_batch[i]], b = tr->dims[dims->rhs_batch[i]];
    if (a != b)
      return FAIL(f, "dot_general: batch dimension %d sizes differ (%lld vs %lld): %s x %s", i, (long long)a,
                  (long long)b, TPU_HLO_TSTR(tl, b1), TPU_HLO_TSTR(tr, b2));
    to.dims[to.rank++] = a;
  }
  for (int i = 0; i < dims->ncontract; i++) {
    int64_t a = tl->dims[dims->lhs_contract[i]], b = tr->dims[dims->rhs_contract[i]];
    if (a != b)
      return FAIL(f, "dot_general: contracting dimension %d sizes differ (%lld vs %lld): %s x %s", i, (long long)a,
                  (long long)b, TPU_HLO_TSTR(tl, b1), TPU_HLO_TSTR(tr, b2));
  }
  for (int i = 0; i < tl->rank; i++)
    if (!(((lb | lc) >> i) & 1)) to.dims[to.rank++] = tl->dims[i];
  for (int i = 0; i < tr->rank; i++) {
    if ((((rb | rc) >> i) & 1)) continue;
    if (to.rank >= TPU_MAX_RANK)
      return FAIL(f, "dot_general: result rank exceeds %d: %s x %s", TPU_MAX_RANK, TPU_HLO_TSTR(tl, b1),
                  TPU_HLO_TSTR(tr, b2));
    to.dims[to.rank++] = tr->dims[i];
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  bool first = true;
  tpu_hlo__puts(&a, "dot_dimension_numbers = #stablehlo.dot<");
  list_field(&a, &first, "lhs_batching_dimensions", dims->lhs_batch, dims->nbatch);
  list_field(&a, &first, "rhs_batching_dimensions", dims->rhs_batch, dims->nbatch);
  list_field(&a, &first, "lhs_contracting_dimensions", dims->lhs_contract, dims->ncontract);
  list_field(&a, &first, "rhs_contracting_dimensions", dims->rhs_contract, dims->ncontract);
  tpu_hlo__puts(&a, ">");
  tpu_hlo__precision_attr(&a, f);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "dot_general", ops, 2, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  return finish(f, v, ops, 2, 1, &a);
}

/* ---- reduce -------------------------------------------------------------------------------------- */

static bool body_ok(tpu_hlo_func_t *f, const char *op, const char *body, bool allow_replace) {
  if (!tpu_hlo__binary_body_ok(body) || (!allow_replace && !strcmp(body, "replace"))) {
    FAIL(f, "%s: unknown reduction body \"%s\"", op, body ? body : "(null)");
    return false;
  }
  return true;
}

static bool init_ok(tpu_hlo_func_t *f, const char *op, tpu_hlo_value_t x, tpu_hlo_value_t init) {
  const tpu_hlo_type_t *ti = T(init), *tx = T(x);
  if (ti->rank != 0 || ti->dtype != tx->dtype) {
    char b1[256], b2[256];
    FAIL(f, "%s: init value %s must be 0-d of the operand's element type (%s)", op, TPU_HLO_TSTR(ti, b1),
         TPU_HLO_TSTR(tx, b2));
    return false;
  }
  return true;
}

tpu_hlo_value_t tpu_hlo_reduce(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t init, const int64_t *dims,
                               int ndims, const char *body) {
  tpu_hlo_value_t ops[2] = {x, init};
  if (!tpu_hlo__ok(f, "reduce", ops, 2)) return TPU_HLO_NONE;
  if (!body_ok(f, "reduce", body, false) || !init_ok(f, "reduce", x, init)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = T(x);
  uint32_t s;
  char b1[256];
  if (!dim_set(dims, ndims, tx->rank, &s))
    return FAIL(f, "reduce: bad or repeated dimensions for %s", TPU_HLO_TSTR(tx, b1));
  tpu_hlo_type_t to;
  memset(&to, 0, sizeof(to));
  to.dtype = tx->dtype;
  for (int i = 0; i < tx->rank; i++)
    if (!((s >> i) & 1)) to.dims[to.rank++] = tx->dims[i];
  tpu_dtype_t dt = tx->dtype;
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "dimensions", dims, ndims);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "reduce", ops, 2, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_hlo__binary_region(f, dt, body);
  tpu_strbuf_append(&f->body, ")", 1);
  return finish(f, v, ops, 2, 1, &a);
}

/* The extreme value of a dtype: -inf/+inf for floats, min/max for ints. */
static double lowest(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: return 0;
    case TPU_S8: return -128;
    case TPU_S16: return -32768;
    case TPU_S32: return -2147483648.0;
    case TPU_S64: return -9223372036854775808.0;
    case TPU_U8: case TPU_U16: case TPU_U32: case TPU_U64: return 0;
    default: return -INFINITY;
  }
}
static double highest(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: return 1;
    case TPU_S8: return 127;
    case TPU_S16: return 32767;
    case TPU_S32: return 2147483647.0;
    case TPU_S64: return 9223372036854775807.0; /* saturates to INT64_MAX */
    case TPU_U8: return 255;
    case TPU_U16: return 65535;
    case TPU_U32: return 4294967295.0;
    case TPU_U64: return 18446744073709551615.0;
    default: return INFINITY;
  }
}

typedef struct { bool is_max; } argext_ctx_t;

/* Body over (a_val, a_idx, b_val, b_idx): the better value wins; a NaN beats
 * every number; on a tie (equal values, or both NaN) the smaller index wins,
 * which makes the result independent of the reduction order. */
static int argext_body(tpu_hlo_func_t *f, const int32_t *args, const tpu_dtype_t *dts, int32_t *rets,
                       tpu_dtype_t *ret_dts, void *ctx) {
  bool is_max = ((argext_ctx_t *)ctx)->is_max;
  tpu_dtype_t vt = dts[0], it = dts[1];
  int32_t av = args[0], ai = args[1], bv = args[2], bi = args[3];
  int32_t better = tpu_hlo__rcompare(f, is_max ? "GT" : "LT", av, bv, vt);
  int32_t tie = tpu_hlo__rcompare(f, "EQ", av, bv, vt);
  tpu_dtype_t pp[2] = {TPU_PRED, TPU_PRED};
  if (tpu_dtype_is_float(vt)) {
    int32_t an = tpu_hlo__rcompare(f, "NE", av, av, vt);
    int32_t bn = tpu_hlo__rcompare(f, "NE", bv, bv, vt);
    int32_t nbn = tpu_hlo__rop(f, "not", &bn, 1, pp, TPU_PRED, NULL);
    int32_t x[2] = {an, nbn};
    int32_t a_only = tpu_hlo__rop(f, "and", x, 2, pp, TPU_PRED, NULL);
    int32_t y[2] = {better, a_only};
    better = tpu_hlo__rop(f, "or", y, 2, pp, TPU_PRED, NULL);
    int32_t z[2] = {an, bn};
    int32_t both = tpu_hlo__rop(f, "and", z, 2, pp, TPU_PRED, NULL);
    int32_t w[2] = {tie, both};
    tie = tpu_hlo__rop(f, "or", w, 2, pp, TPU_PRED, NULL);
  }
  tpu_dtype_t sv[3] = {TPU_PRED, vt, vt}, si[3] = {TPU_PRED, it, it}, ii[2] = {it, it};
  int32_t s1[3] = {better, av, bv};
  rets[0] = tpu_hlo__rop(f, "select", s1, 3, sv, vt, NULL);
  int32_t m[2] = {ai, bi};
  int32_t mi = tpu_hlo__rop(f, "minimum", m, 2, ii, it, NULL);
  int32_t s2[3] = {better, ai, bi};
  int32_t pick = tpu_hlo__rop(f, "select", s2, 3, si, it, NULL);
  int32_t s3[3] = {tie, mi, pick};
  rets[1] = tpu_hlo__rop(f, "select", s3, 3, si, it, NULL);
  ret_dts[0] = vt;
  ret_dts[1] = it;
  return 2;
}

tpu_hlo_value_t tpu_hlo_reduce_argext(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, bool is_max,
                                      tpu_hlo_value_t *out_value) {
  if (out_value) *out_value = TPU_HLO_NONE;
  if (!tpu_hlo__ok(f, is_max ? "argmax" : "argmin", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(x);
  char b1[256];
  const char *name = is_max ? "argmax" : "argmin";
  if (dim < 0 || dim >= tx.rank)
    return FAIL(f, "%s: dimension %lld out of range for %s", name, (long long)dim, TPU_HLO_TSTR(&tx, b1));
  if (tpu_dtype_is_complex(tx.dtype)) return FAIL(f, "%s: complex operand %s is not ordered", name, TPU_HLO_TSTR(&tx, b1));
  tpu_hlo_type_t ti = tx;
  ti.dtype = TPU_S64;
  tpu_hlo_value_t idx = tpu_hlo_iota(f, ti, dim);
  tpu_hlo_value_t init_v = tpu_hlo_scalar(f, tx.dtype, is_max ? lowest(tx.dtype) : highest(tx.dtype));
  tpu_hlo_value_t init_i = tpu_hlo_constant_i64(f, tpu_hlo_type_scalar(TPU_S64), INT64_MAX);
  if (f->status) return TPU_HLO_NONE;
  tpu_hlo_value_t ops[4] = {x, idx, init_v, init_i};
  tpu_hlo_type_t res[2];
  memset(res, 0, sizeof(res));
  res[0].dtype = tx.dtype;
  res[1].dtype = TPU_S64;
  for (int i = 0; i < tx.rank; i++) {
    if (i == dim) continue;
    res[0].dims[res[0].rank++] = tx.dims[i];
    res[1].dims[res[1].rank++] = tx.dims[i];
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__array_attr(&a, "dimensions", &dim, 1);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "reduce", ops, 4, res, 2);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_dtype_t dts[4] = {tx.dtype, TPU_S64, tx.dtype, TPU_S64};
  argext_ctx_t ctx = {is_max};
  tpu_hlo__region(f, dts, 4, argext_body, &ctx);
  tpu_strbuf_append(&f->body, ")", 1);
  if (finish(f, v, ops, 4, 2, &a) < 0) return TPU_HLO_NONE;
  if (out_value) *out_value = v;
  return v + 1;
}

/* ---- windows ------------------------------------------------------------------------------------------- */

static bool window_shape(tpu_hlo_func_t *f, const char *op, const tpu_hlo_type_t *tx, const int64_t *window,
                         const int64_t *strides, const int64_t *base_dil, const int64_t *win_dil,
                         const int64_t *padding, tpu_hlo_type_t *out) {
  char b1[256];
  *out = *tx;
  if (!window) {
    FAIL(f, "%s: no window dimensions", op);
    return false;
  }
  for (int i = 0; i < tx->rank; i++) {
    int64_t w = window[i], s = strides ? strides[i] : 1, bd = base_dil ? base_dil[i] : 1,
            wd = win_dil ? win_dil[i] : 1, lo = padding ? padding[2 * i] : 0, hi = padding ? padding[2 * i + 1] : 0;
    if (w < 1 || s < 1 || bd < 1 || wd < 1) {
      FAIL(f, "%s: dim %d: window %lld, stride %lld and dilations %lld/%lld must be >= 1 (operand %s)", op, i,
           (long long)w, (long long)s, (long long)bd, (long long)wd, TPU_HLO_TSTR(tx, b1));
      return false;
    }
    int64_t d = tx->dims[i];
    int64_t padded = (d > 0 ? (d - 1) * bd + 1 : 0) + lo + hi;
    int64_t weff = (w - 1) * wd + 1;
    if (padded < 0) {
      FAIL(f, "%s: dim %d: padding (%lld, %lld) leaves a negative size for %s", op, i, (long long)lo, (long long)hi,
           TPU_HLO_TSTR(tx, b1));
      return false;
    }
    out->dims[i] = padded < weff ? 0 : (padded - weff) / s + 1;
  }
  return true;
}

static bool all_ones(const int64_t *v, int n) {
  if (!v) return true;
  for (int i = 0; i < n; i++)
    if (v[i] != 1) return false;
  return true;
}
static bool all_zero(const int64_t *v, int n) {
  if (!v) return true;
  for (int i = 0; i < n; i++)
    if (v[i] != 0) return false;
  return true;
}

/* The attributes of a windowed op (reduce_window, select_and_scatter), the
 * defaults (unit strides and dilations, no padding) left out. */
static void window_attrs(tpu_strbuf_t *a, int r, const int64_t *window, const int64_t *strides,
                         const int64_t *base_dilations, const int64_t *window_dilations, const int64_t *padding) {
  tpu_strbuf_init(a);
  tpu_hlo__array_attr(a, "window_dimensions", window, r);
  const char *names[3] = {"window_strides", "base_dilations", "window_dilations"};
  const int64_t *vals[3] = {strides, base_dilations, window_dilations};
  for (int i = 0; i < 3; i++) {
    if (all_ones(vals[i], r)) continue;
    tpu_hlo__puts(a, ", ");
    tpu_hlo__array_attr(a, names[i], vals[i], r);
  }
  if (!all_zero(padding, 2 * r)) {
    tpu_hlo__puts(a, ", ");
    tpu_hlo__pairs_attr(a, "padding", padding, r);
  }
}

tpu_hlo_value_t tpu_hlo_reduce_window(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t init,
                                      const int64_t *window, const int64_t *strides,
                                      const int64_t *base_dilations, const int64_t *window_dilations,
                                      const int64_t *padding, const char *body) {
  tpu_hlo_value_t ops[2] = {x, init};
  if (!tpu_hlo__ok(f, "reduce_window", ops, 2)) return TPU_HLO_NONE;
  if (!body_ok(f, "reduce_window", body, false) || !init_ok(f, "reduce_window", x, init)) return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(x), to;
  if (!window_shape(f, "reduce_window", &tx, window, strides, base_dilations, window_dilations, padding, &to))
    return TPU_HLO_NONE;
  tpu_strbuf_t a;
  window_attrs(&a, tx.rank, window, strides, base_dilations, window_dilations, padding);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "reduce_window", ops, 2, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_hlo__binary_region(f, tx.dtype, body);
  tpu_strbuf_append(&f->body, ")", 1);
  return finish(f, v, ops, 2, 1, &a);
}

static int select_ge_body(tpu_hlo_func_t *f, const int32_t *args, const tpu_dtype_t *dts, int32_t *rets,
                          tpu_dtype_t *ret_dts, void *ctx) {
  (void)ctx;
  rets[0] = tpu_hlo__rcompare(f, "GE", args[0], args[1], dts[0]);
  ret_dts[0] = TPU_PRED;
  return 1;
}

tpu_hlo_value_t tpu_hlo_select_and_scatter(tpu_hlo_func_t *f, tpu_hlo_value_t operand, tpu_hlo_value_t source,
                                           tpu_hlo_value_t init, const int64_t *window, const int64_t *strides,
                                           const int64_t *padding) {
  tpu_hlo_value_t ops[3] = {operand, source, init};
  if (!tpu_hlo__ok(f, "select_and_scatter", ops, 3)) return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(operand), ts = *T(source), ti = *T(init), tw;
  char b1[256], b2[256];
  if (ti.rank != 0 || ti.dtype != ts.dtype)
    return FAIL(f, "select_and_scatter: init %s must be 0-d of the source's element type (%s)", TPU_HLO_TSTR(&ti, b1),
                TPU_HLO_TSTR(&ts, b2));
  if (ts.dtype != tx.dtype)
    return FAIL(f, "select_and_scatter: source %s and operand %s element types differ", TPU_HLO_TSTR(&ts, b1),
                TPU_HLO_TSTR(&tx, b2));
  if (!window_shape(f, "select_and_scatter", &tx, window, strides, NULL, NULL, padding, &tw)) return TPU_HLO_NONE;
  if (!tpu_hlo__same_shape(&tw, &ts)) {
    char b3[256];
    return FAIL(f, "select_and_scatter: source %s must have the windowed shape %s of operand %s",
                TPU_HLO_TSTR(&ts, b1), TPU_HLO_TSTR(&tw, b2), TPU_HLO_TSTR(&tx, b3));
  }
  tpu_strbuf_t a;
  window_attrs(&a, tx.rank, window, strides, NULL, NULL, padding);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "select_and_scatter", ops, 3, &tx, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_dtype_t dts[2] = {tx.dtype, tx.dtype};
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_hlo__region(f, dts, 2, select_ge_body, NULL);
  tpu_strbuf_append(&f->body, ", ", 2);
  tpu_hlo__binary_region(f, ts.dtype, "add");
  tpu_strbuf_append(&f->body, ")", 1);
  return finish(f, v, ops, 3, 1, &a);
}

/* ---- convolution --------------------------------------------------------------------------------------------- */

void tpu_hlo_conv_dims_nchw(tpu_hlo_conv_dims_t *d, int nsp) {
  memset(d, 0, sizeof(*d));
  if (nsp < 0) nsp = 0;
  if (nsp > TPU_MAX_RANK - 2) nsp = TPU_MAX_RANK - 2;
  d->nsp = nsp;
  d->in_batch = 0;
  d->in_feature = 1;
  d->k_out_feature = 0;
  d->k_in_feature = 1;
  d->out_batch = 0;
  d->out_feature = 1;
  for (int i = 0; i < nsp; i++) {
    d->in_spatial[i] = d->k_spatial[i] = d->out_spatial[i] = 2 + i;
    d->strides[i] = 1;
    d->lhs_dilation[i] = d->rhs_dilation[i] = 1;
  }
  d->feature_group_count = 1;
  d->batch_group_count = 1;
}

/* Writes "[b, f, 0, 1]" for a layout; false unless it is a permutation. */
static bool conv_layout(tpu_strbuf_t *sb, int rank, int64_t d0, char c0, int64_t d1, char c1, const int64_t *sp,
                        int nsp) {
  char lab[TPU_MAX_RANK][4];
  bool set[TPU_MAX_RANK] = {false};
  if (rank != nsp + 2 || rank > TPU_MAX_RANK) return false;
  int64_t pos[TPU_MAX_RANK];
  pos[0] = d0;
  pos[1] = d1;
  for (int i = 0; i < nsp; i++) pos[2 + i] = sp[i];
  for (int k = 0; k < rank; k++) {
    if (pos[k] < 0 || pos[k] >= rank || set[pos[k]]) return false;
    set[pos[k]] = true;
    if (k == 0) snprintf(lab[pos[k]], sizeof(lab[0]), "%c", c0);
    else if (k == 1) snprintf(lab[pos[k]], sizeof(lab[0]), "%c", c1);
    else snprintf(lab[pos[k]], sizeof(lab[0]), "%d", k - 2);
  }
  tpu_hlo__puts(sb, "[");
  for (int i = 0; i < rank; i++) {
    if (i) tpu_hlo__puts(sb, ", ");
    tpu_hlo__puts(sb, lab[i]);
  }
  tpu_hlo__puts(sb, "]");
  return true;
}

tpu_hlo_value_t tpu_hlo_convolution(tpu_hlo_func_t *f, tpu_hlo_value_t lhs, tpu_hlo_value_t rhs,
                                    const tpu_hlo_conv_dims_t *d) {
  tpu_hlo_value_t ops[2] = {lhs, rhs};
  if (!tpu_hlo__ok(f, "convolution", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tl = T(lhs), *tr = T(rhs);
  char b1[256], b2[256];
  if (!d) return FAIL(f, "convolution: no dimension numbers");
  int nsp = d->nsp, rank = nsp + 2;
  if (nsp < 0 || rank > TPU_MAX_RANK || tl->rank != rank || tr->rank != rank)
    return FAIL(f, "convolution: %d spatial dims need rank-%d input and kernel, got %s and %s", nsp, rank,
                TPU_HLO_TSTR(tl, b1), TPU_HLO_TSTR(tr, b2));
  if (tl->dtype != tr->dtype)
    return FAIL(f, "convolution: element types differ: %s vs %s", TPU_HLO_TSTR(tl, b1), TPU_HLO_TSTR(tr, b2));
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__puts(&a, "dimension_numbers = #stablehlo.conv<");
  bool ok = conv_layout(&a, rank, d->in_batch, 'b', d->in_feature, 'f', d->in_spatial, nsp);
  tpu_hlo__puts(&a, "x");
  ok = ok && conv_layout(&a, rank, d->k_out_feature, 'o', d->k_in_feature, 'i', d->k_spatial, nsp);
  tpu_hlo__puts(&a, "->");
  ok = ok && conv_layout(&a, rank, d->out_batch, 'b', d->out_feature, 'f', d->out_spatial, nsp);
  tpu_hlo__puts(&a, ">");
  if (!ok) {
    tpu_strbuf_free(&a);
    return FAIL(f, "convolution: dimension numbers are not permutations of 0..%d", rank - 1);
  }
  int64_t fgc = d->feature_group_count ? d->feature_group_count : 1;
  int64_t bgc = d->batch_group_count ? d->batch_group_count : 1;
  int64_t in_b = tl->dims[d->in_batch], in_f = tl->dims[d->in_feature];
  int64_t k_i = tr->dims[d->k_in_feature], k_o = tr->dims[d->k_out_feature];
  const char *why = NULL;
  if (fgc < 1 || bgc < 1 || (fgc > 1 && bgc > 1)) why = "group counts must be >= 1 and not both > 1";
  else if (in_f != k_i * fgc) why = "input features != kernel input features * feature_group_count";
  else if (k_o % fgc) why = "kernel output features not divisible by feature_group_count";
  else if (k_o % bgc) why = "kernel output features not divisible by batch_group_count";
  else if (in_b % bgc) why = "input batch not divisible by batch_group_count";
  if (why) {
    tpu_strbuf_free(&a);
    return FAIL(f, "convolution: %s (input %s, kernel %s, groups %lld/%lld)", why, TPU_HLO_TSTR(tl, b1),
                TPU_HLO_TSTR(tr, b2), (long long)fgc, (long long)bgc);
  }
  tpu_hlo_type_t to;
  memset(&to, 0, sizeof(to));
  to.dtype = tl->dtype;
  to.rank = rank;
  to.dims[d->out_batch] = in_b / bgc;
  to.dims[d->out_feature] = k_o;
  int64_t st[TPU_MAX_RANK], ld[TPU_MAX_RANK], rd[TPU_MAX_RANK];
  for (int i = 0; i < nsp; i++) {
    st[i] = d->strides[i] ? d->strides[i] : 1;
    ld[i] = d->lhs_dilation[i] ? d->lhs_dilation[i] : 1;
    rd[i] = d->rhs_dilation[i] ? d->rhs_dilation[i] : 1;
    int64_t in = tl->dims[d->in_spatial[i]], k = tr->dims[d->k_spatial[i]];
    int64_t in_eff = (in > 0 ? (in - 1) * ld[i] + 1 : 0) + d->padding[2 * i] + d->padding[2 * i + 1];
    int64_t k_eff = k > 0 ? (k - 1) * rd[i] + 1 : 0;
    if (st[i] < 1 || ld[i] < 1 || rd[i] < 1 || in_eff < 0) {
      tpu_strbuf_free(&a);
      return FAIL(f, "convolution: spatial dim %d: bad stride/dilation/padding (input %s, kernel %s)", i,
                  TPU_HLO_TSTR(tl, b1), TPU_HLO_TSTR(tr, b2));
    }
    to.dims[d->out_spatial[i]] = in_eff < k_eff ? 0 : (in_eff - k_eff) / st[i] + 1;
  }
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "window_strides", st, nsp);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__pairs_attr(&a, "padding", d->padding, nsp);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "lhs_dilation", ld, nsp);
  tpu_hlo__puts(&a, ", ");
  tpu_hlo__array_attr(&a, "rhs_dilation", rd, nsp);
  tpu_hlo__puts(&a, ", feature_group_count = ");
  tpu_hlo__i64(&a, fgc);
  tpu_hlo__puts(&a, " : i64, batch_group_count = ");
  tpu_hlo__i64(&a, bgc);
  tpu_hlo__puts(&a, " : i64");
  tpu_hlo__precision_attr(&a, f);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "convolution", ops, 2, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  return finish(f, v, ops, 2, 1, &a);
}

/* ---- gather / scatter ---------------------------------------------------------------------------------------- */

tpu_hlo_value_t tpu_hlo_gather(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t indices,
                               const tpu_hlo_gather_dims_t *d) {
  tpu_hlo_value_t ops[2] = {x, indices};
  if (!tpu_hlo__ok(f, "gather", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = T(x), *ti = T(indices);
  char b1[256], b2[256];
  if (!d) return FAIL(f, "gather: no dimension numbers");
  if (!tpu_dtype_is_int(ti->dtype)) return FAIL(f, "gather: indices must be integers, got %s", TPU_HLO_TSTR(ti, b1));
  int64_t ivd = d->index_vector_dim;
  if (ivd < 0 || ivd > ti->rank)
    return FAIL(f, "gather: index_vector_dim %lld out of range for indices %s", (long long)ivd, TPU_HLO_TSTR(ti, b1));
  int64_t index_len = ivd < ti->rank ? ti->dims[ivd] : 1;
  uint32_t coll, obatch, smap, ibatch;
  if (!dim_set(d->collapsed_slice_dims, d->ncollapsed, tx->rank, &coll) ||
      !dim_set(d->operand_batching_dims, d->nbatch, tx->rank, &obatch) ||
      !dim_set(d->start_index_map, d->nstart_map, tx->rank, &smap) ||
      !dim_set(d->start_indices_batching_dims, d->nbatch, ti->rank, &ibatch) || (coll & obatch) ||
      (smap & obatch))
    return FAIL(f, "gather: bad collapsed/batching/start_index_map dimensions for operand %s, indices %s",
                TPU_HLO_TSTR(tx, b1), TPU_HLO_TSTR(ti, b2));
  if (index_len != d->nstart_map)
    return FAIL(f, "gather: index vector length %lld != start_index_map size %d (indices %s)", (long long)index_len,
                d->nstart_map, TPU_HLO_TSTR(ti, b1));
  int64_t offs[TPU_MAX_RANK];
  int noff = 0;
  for (int i = 0; i < tx->rank; i++) {
    int64_t s = d->slice_sizes[i];
    if (s < 0 || s > tx->dims[i])
      return FAIL(f, "gather: slice size %lld out of range in dim %d of %s", (long long)s, i, TPU_HLO_TSTR(tx, b1));
    if ((((coll | obatch) >> i) & 1)) {
      if (s > 1)
        return FAIL(f, "gather: collapsed/batching dim %d must have slice size <= 1, got %lld", i, (long long)s);
      continue;
    }
    offs[noff++] = s;
  }
  if (noff != d->noffset)
    return FAIL(f, "gather: %d offset_dims given but the slice has %d uncollapsed dims", d->noffset, noff);
  int nb = ti->rank - (ivd < ti->rank ? 1 : 0);
  int rank = nb + noff;
  if (rank > TPU_MAX_RANK) return FAIL(f, "gather: result rank %d exceeds %d", rank, TPU_MAX_RANK);
  uint32_t offset_set;
  if (!dim_set(d->offset_dims, d->noffset, rank, &offset_set))
    return FAIL(f, "gather: bad offset_dims for a rank-%d result", rank);
  tpu_hlo_type_t to;
  memset(&to, 0, sizeof(to));
  to.dtype = tx->dtype;
  to.rank = rank;
  int oi = 0, bi = 0;
  for (int r = 0; r < rank; r++) {
    if ((offset_set >> r) & 1) {
      to.dims[r] = offs[oi++];
    } else {
      if (bi == ivd) bi++;
      to.dims[r] = ti->dims[bi++];
    }
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  bool first = true;
  tpu_hlo__puts(&a, "dimension_numbers = #stablehlo.gather<");
  list_field(&a, &first, "offset_dims", d->offset_dims, d->noffset);
  list_field(&a, &first, "collapsed_slice_dims", d->collapsed_slice_dims, d->ncollapsed);
  list_field(&a, &first, "operand_batching_dims", d->operand_batching_dims, d->nbatch);
  list_field(&a, &first, "start_indices_batching_dims", d->start_indices_batching_dims, d->nbatch);
  list_field(&a, &first, "start_index_map", d->start_index_map, d->nstart_map);
  tpu_hlo__puts(&a, first ? "index_vector_dim = " : ", index_vector_dim = ");
  tpu_hlo__i64(&a, ivd);
  tpu_hlo__puts(&a, ">, ");
  tpu_hlo__array_attr(&a, "slice_sizes", d->slice_sizes, tx->rank);
  tpu_hlo__puts(&a, d->indices_are_sorted ? ", indices_are_sorted = true" : ", indices_are_sorted = false");
  tpu_hlo_value_t v = tpu_hlo__begin(f, "gather", ops, 2, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  return finish(f, v, ops, 2, 1, &a);
}

tpu_hlo_value_t tpu_hlo_scatter(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_value_t indices,
                                tpu_hlo_value_t updates, const tpu_hlo_scatter_dims_t *d, const char *body) {
  tpu_hlo_value_t ops[3] = {x, indices, updates};
  if (!tpu_hlo__ok(f, "scatter", ops, 3)) return TPU_HLO_NONE;
  if (!body_ok(f, "scatter", body, true)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = T(x), *ti = T(indices), *tu = T(updates);
  char b1[256], b2[256], b3[256];
  if (!d) return FAIL(f, "scatter: no dimension numbers");
  if (!tpu_dtype_is_int(ti->dtype)) return FAIL(f, "scatter: indices must be integers, got %s", TPU_HLO_TSTR(ti, b1));
  if (tu->dtype != tx->dtype)
    return FAIL(f, "scatter: updates %s and operand %s element types differ", TPU_HLO_TSTR(tu, b1), TPU_HLO_TSTR(tx, b2));
  int64_t ivd = d->index_vector_dim;
  if (ivd < 0 || ivd > ti->rank)
    return FAIL(f, "scatter: index_vector_dim %lld out of range for indices %s", (long long)ivd, TPU_HLO_TSTR(ti, b1));
  int64_t index_len = ivd < ti->rank ? ti->dims[ivd] : 1;
  uint32_t ins, ibatch, smap, sbatch, win;
  if (!dim_set(d->inserted_window_dims, d->ninserted, tx->rank, &ins) ||
      !dim_set(d->input_batching_dims, d->nbatch, tx->rank, &ibatch) ||
      !dim_set(d->scatter_dims_to_operand_dims, d->nscatter_map, tx->rank, &smap) ||
      !dim_set(d->scatter_indices_batching_dims, d->nbatch, ti->rank, &sbatch) ||
      !dim_set(d->update_window_dims, d->nwindow, tu->rank, &win) || (ins & ibatch) || (smap & ibatch))
    return FAIL(f, "scatter: bad window/inserted/batching/scatter dims for operand %s, indices %s, updates %s",
                TPU_HLO_TSTR(tx, b1), TPU_HLO_TSTR(ti, b2), TPU_HLO_TSTR(tu, b3));
  if (index_len != d->nscatter_map)
    return FAIL(f, "scatter: index vector length %lld != scatter_dims_to_operand_dims size %d", (long long)index_len,
                d->nscatter_map);
  int nb = ti->rank - (ivd < ti->rank ? 1 : 0);
  if (tu->rank != nb + d->nwindow || d->nwindow + d->ninserted + d->nbatch != tx->rank)
    return FAIL(f, "scatter: updates %s do not fit operand %s and indices %s (%d window dims, %d inserted, %d batching)",
                TPU_HLO_TSTR(tu, b1), TPU_HLO_TSTR(tx, b2), TPU_HLO_TSTR(ti, b3), d->nwindow, d->ninserted, d->nbatch);
  /* update scatter dims = indices batch dims (in order); window dims fit the operand */
  int bi = 0, wi = 0;
  int64_t opdims[TPU_MAX_RANK];
  int nop = 0;
  for (int i = 0; i < tx->rank; i++)
    if (!(((ins | ibatch) >> i) & 1)) opdims[nop++] = tx->dims[i];
  for (int r = 0; r < tu->rank; r++) {
    if ((win >> r) & 1) {
      if (tu->dims[r] > opdims[wi])
        return FAIL(f, "scatter: update window dim %d (size %lld) exceeds the operand's (%lld): updates %s, operand %s",
                    r, (long long)tu->dims[r], (long long)opdims[wi], TPU_HLO_TSTR(tu, b1), TPU_HLO_TSTR(tx, b2));
      wi++;
    } else {
      if (bi == ivd) bi++;
      if (tu->dims[r] != ti->dims[bi])
        return FAIL(f, "scatter: update scatter dim %d (size %lld) != indices dim %d (size %lld): updates %s, indices %s",
                    r, (long long)tu->dims[r], bi, (long long)ti->dims[bi], TPU_HLO_TSTR(tu, b1), TPU_HLO_TSTR(ti, b2));
      bi++;
    }
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  bool first = true;
  tpu_hlo__puts(&a, "scatter_dimension_numbers = #stablehlo.scatter<");
  list_field(&a, &first, "update_window_dims", d->update_window_dims, d->nwindow);
  list_field(&a, &first, "inserted_window_dims", d->inserted_window_dims, d->ninserted);
  list_field(&a, &first, "input_batching_dims", d->input_batching_dims, d->nbatch);
  list_field(&a, &first, "scatter_indices_batching_dims", d->scatter_indices_batching_dims, d->nbatch);
  list_field(&a, &first, "scatter_dims_to_operand_dims", d->scatter_dims_to_operand_dims, d->nscatter_map);
  tpu_hlo__puts(&a, first ? "index_vector_dim = " : ", index_vector_dim = ");
  tpu_hlo__i64(&a, ivd);
  tpu_hlo__puts(&a, ">");
  tpu_hlo__puts(&a, d->indices_are_sorted ? ", indices_are_sorted = true" : ", indices_are_sorted = false");
  tpu_hlo__puts(&a, d->unique_indices ? ", unique_indices = true" : ", unique_indices = false");
  tpu_dtype_t dt = tx->dtype;
  tpu_hlo_type_t to = *tx;
  tpu_hlo_value_t v = tpu_hlo__begin(f, "scatter", ops, 3, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_hlo__binary_region(f, dt, body);
  tpu_strbuf_append(&f->body, ")", 1);
  return finish(f, v, ops, 3, 1, &a);
}

/* ---- sort ------------------------------------------------------------------------------------------------------ */

typedef struct { bool descending; } sort_ctx_t;

/* Comparator over (a, b[, a_idx, b_idx]): "a goes first".  Ascending puts
 * NaN after every number; descending puts NaN first (PyTorch).  -0 and +0
 * compare equal, so the stable sort keeps their order. */
static int sort_body(tpu_hlo_func_t *f, const int32_t *args, const tpu_dtype_t *dts, int32_t *rets,
                     tpu_dtype_t *ret_dts, void *ctx) {
  bool desc = ((sort_ctx_t *)ctx)->descending;
  tpu_dtype_t dt = dts[0];
  int32_t a = args[0], b = args[1];
  int32_t r = tpu_hlo__rcompare(f, desc ? "GT" : "LT", a, b, dt);
  if (tpu_dtype_is_float(dt)) {
    /* ascending: a < b or (b is NaN and a is not); descending: a > b or (a NaN, b not) */
    int32_t first_nan = tpu_hlo__rcompare(f, "NE", desc ? a : b, desc ? a : b, dt);
    int32_t other_nan = tpu_hlo__rcompare(f, "NE", desc ? b : a, desc ? b : a, dt);
    tpu_dtype_t pp[2] = {TPU_PRED, TPU_PRED};
    int32_t not_other = tpu_hlo__rop(f, "not", &other_nan, 1, pp, TPU_PRED, NULL);
    int32_t x[2] = {first_nan, not_other};
    int32_t nan_case = tpu_hlo__rop(f, "and", x, 2, pp, TPU_PRED, NULL);
    int32_t y[2] = {r, nan_case};
    r = tpu_hlo__rop(f, "or", y, 2, pp, TPU_PRED, NULL);
  }
  rets[0] = r;
  ret_dts[0] = TPU_PRED;
  return 1;
}

tpu_hlo_value_t tpu_hlo_sort(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, bool descending,
                             tpu_hlo_value_t *out_indices) {
  if (out_indices) *out_indices = TPU_HLO_NONE;
  if (!tpu_hlo__ok(f, "sort", &x, 1)) return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(x);
  char b1[256];
  if (dim < 0 || dim >= tx.rank)
    return FAIL(f, "sort: dimension %lld out of range for %s", (long long)dim, TPU_HLO_TSTR(&tx, b1));
  if (tpu_dtype_is_complex(tx.dtype)) return FAIL(f, "sort: complex operand %s is not ordered", TPU_HLO_TSTR(&tx, b1));
  tpu_hlo_value_t ops[2] = {x, TPU_HLO_NONE};
  int n = 1;
  tpu_hlo_type_t res[2] = {tx, tx};
  if (out_indices) {
    res[1].dtype = TPU_S64;
    ops[1] = tpu_hlo_iota(f, res[1], dim);
    if (ops[1] < 0) return TPU_HLO_NONE;
    n = 2;
  }
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimension = %lld : i64, is_stable = true", (long long)dim);
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__puts(&a, attrs);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "sort", ops, n, res, n);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_dtype_t dts[4] = {tx.dtype, tx.dtype, TPU_S64, TPU_S64};
  sort_ctx_t ctx = {descending};
  tpu_hlo__region(f, dts, 2 * n, sort_body, &ctx);
  tpu_strbuf_append(&f->body, ")", 1);
  if (finish(f, v, ops, n, n, &a) < 0) return TPU_HLO_NONE;
  if (out_indices) *out_indices = v + 1;
  return v;
}

/* ---- rng ---------------------------------------------------------------------------------------------------------- */

tpu_hlo_value_t tpu_hlo_rng_bit_generator(tpu_hlo_func_t *f, tpu_hlo_value_t state, tpu_hlo_type_t type,
                                          tpu_hlo_value_t *out_state) {
  if (out_state) *out_state = TPU_HLO_NONE;
  if (!tpu_hlo__ok(f, "rng_bit_generator", &state, 1)) return TPU_HLO_NONE;
  tpu_hlo_type_t ts = *T(state);
  char b1[256], b2[256];
  if (ts.dtype != TPU_U64 || ts.rank != 1 || ts.dims[0] != 2)
    return FAIL(f, "rng_bit_generator: THREE_FRY state must be tensor<2xui64>, got %s", TPU_HLO_TSTR(&ts, b1));
  if (!tpu_dtype_is_int(type.dtype) || type.rank < 0 || type.rank > TPU_MAX_RANK)
    return FAIL(f, "rng_bit_generator: result must be an integer tensor, got %s", TPU_HLO_TSTR(&type, b2));
  for (int i = 0; i < type.rank; i++)
    if (type.dims[i] < 0) return FAIL(f, "rng_bit_generator: negative result dimension");
  tpu_hlo_type_t res[2] = {ts, type};
  tpu_hlo_value_t v = tpu_hlo__begin(f, "rng_bit_generator", &state, 1, res, 2);
  if (v < 0) return v;
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__puts(&a, "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
  if (finish(f, v, &state, 1, 2, &a) < 0) return TPU_HLO_NONE;
  if (out_state) *out_state = v;
  return v + 1;
}

/* ---- collectives -------------------------------------------------------------------------------------------------- */

static bool groups_ok(tpu_hlo_func_t *f, const char *op, const int64_t *groups, int ngroups, int group_size) {
  if (!groups || ngroups < 1 || group_size < 1) {
    FAIL(f, "%s: replica_groups must be ngroups >= 1 x group_size >= 1 (got %d x %d)", op, ngroups, group_size);
    return false;
  }
  for (int i = 0; i < ngroups * group_size; i++)
    if (groups[i] < 0) {
      FAIL(f, "%s: negative replica id %lld in replica_groups", op, (long long)groups[i]);
      return false;
    }
  return true;
}

tpu_hlo_value_t tpu_hlo_all_reduce(tpu_hlo_func_t *f, tpu_hlo_value_t x, const char *body, const int64_t *groups,
                                   int ngroups, int group_size) {
  if (!tpu_hlo__ok(f, "all_reduce", &x, 1)) return TPU_HLO_NONE;
  if (!body_ok(f, "all_reduce", body, false) || !groups_ok(f, "all_reduce", groups, ngroups, group_size))
    return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(x);
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__groups_attr(&a, groups, ngroups, group_size);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "all_reduce", &x, 1, &tx, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_hlo__binary_region(f, tx.dtype, body);
  tpu_strbuf_append(&f->body, ")", 1);
  return finish(f, v, &x, 1, 1, &a);
}

tpu_hlo_value_t tpu_hlo_all_gather(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, const int64_t *groups,
                                   int ngroups, int group_size) {
  if (!tpu_hlo__ok(f, "all_gather", &x, 1)) return TPU_HLO_NONE;
  if (!groups_ok(f, "all_gather", groups, ngroups, group_size)) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *T(x);
  char b1[256];
  if (dim < 0 || dim >= to.rank)
    return FAIL(f, "all_gather: dimension %lld out of range for %s", (long long)dim, TPU_HLO_TSTR(&to, b1));
  to.dims[dim] *= group_size;
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__puts(&a, "all_gather_dim = ");
  tpu_hlo__i64(&a, dim);
  tpu_hlo__puts(&a, " : i64, ");
  tpu_hlo__groups_attr(&a, groups, ngroups, group_size);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "all_gather", &x, 1, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  return finish(f, v, &x, 1, 1, &a);
}

tpu_hlo_value_t tpu_hlo_reduce_scatter(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t dim, const char *body,
                                       const int64_t *groups, int ngroups, int group_size) {
  if (!tpu_hlo__ok(f, "reduce_scatter", &x, 1)) return TPU_HLO_NONE;
  if (!body_ok(f, "reduce_scatter", body, false) || !groups_ok(f, "reduce_scatter", groups, ngroups, group_size))
    return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(x), to = tx;
  char b1[256];
  if (dim < 0 || dim >= tx.rank || tx.dims[dim] % group_size)
    return FAIL(f, "reduce_scatter: dimension %lld of %s is out of range or not divisible by group size %d",
                (long long)dim, TPU_HLO_TSTR(&tx, b1), group_size);
  to.dims[dim] /= group_size;
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__groups_attr(&a, groups, ngroups, group_size);
  tpu_hlo__puts(&a, ", scatter_dimension = ");
  tpu_hlo__i64(&a, dim);
  tpu_hlo__puts(&a, " : i64");
  tpu_hlo_value_t v = tpu_hlo__begin(f, "reduce_scatter", &x, 1, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  tpu_strbuf_append(&f->body, " (", 2);
  tpu_hlo__binary_region(f, tx.dtype, body);
  tpu_strbuf_append(&f->body, ")", 1);
  return finish(f, v, &x, 1, 1, &a);
}

tpu_hlo_value_t tpu_hlo_all_to_all(tpu_hlo_func_t *f, tpu_hlo_value_t x, int64_t split_dim, int64_t concat_dim,
                                   const int64_t *groups, int ngroups, int group_size) {
  if (!tpu_hlo__ok(f, "all_to_all", &x, 1)) return TPU_HLO_NONE;
  if (!groups_ok(f, "all_to_all", groups, ngroups, group_size)) return TPU_HLO_NONE;
  tpu_hlo_type_t tx = *T(x), to = tx;
  char b1[256];
  if (split_dim < 0 || split_dim >= tx.rank || concat_dim < 0 || concat_dim >= tx.rank ||
      tx.dims[split_dim] % group_size)
    return FAIL(f, "all_to_all: split dim %lld / concat dim %lld out of range or split size not divisible by %d (%s)",
                (long long)split_dim, (long long)concat_dim, group_size, TPU_HLO_TSTR(&tx, b1));
  to.dims[split_dim] /= group_size;
  to.dims[concat_dim] *= group_size;
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__puts(&a, "split_dimension = ");
  tpu_hlo__i64(&a, split_dim);
  tpu_hlo__puts(&a, " : i64, concat_dimension = ");
  tpu_hlo__i64(&a, concat_dim);
  tpu_hlo__puts(&a, " : i64, split_count = ");
  tpu_hlo__i64(&a, group_size);
  tpu_hlo__puts(&a, " : i64, ");
  tpu_hlo__groups_attr(&a, groups, ngroups, group_size);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "all_to_all", &x, 1, &to, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  return finish(f, v, &x, 1, 1, &a);
}

tpu_hlo_value_t tpu_hlo_collective_permute(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *pairs, int npairs) {
  if (!tpu_hlo__ok(f, "collective_permute", &x, 1)) return TPU_HLO_NONE;
  if (!pairs || npairs < 1) return FAIL(f, "collective_permute: needs at least one source/target pair");
  for (int i = 0; i < 2 * npairs; i++)
    if (pairs[i] < 0) return FAIL(f, "collective_permute: negative replica id %lld", (long long)pairs[i]);
  for (int i = 0; i < npairs; i++)
    for (int j = i + 1; j < npairs; j++)
      if (pairs[2 * i] == pairs[2 * j] || pairs[2 * i + 1] == pairs[2 * j + 1])
        return FAIL(f, "collective_permute: replica %lld appears twice as a source or target",
                    (long long)(pairs[2 * i] == pairs[2 * j] ? pairs[2 * i] : pairs[2 * i + 1]));
  tpu_hlo_type_t tx = *T(x);
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_hlo__pairs_attr(&a, "source_target_pairs", pairs, npairs);
  tpu_hlo_value_t v = tpu_hlo__begin(f, "collective_permute", &x, 1, &tx, 1);
  if (v < 0) {
    tpu_strbuf_free(&a);
    return v;
  }
  return finish(f, v, &x, 1, 1, &a);
}
