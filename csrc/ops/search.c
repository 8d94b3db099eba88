/* search.c - membership, search and binning rules: isin, searchsorted
 * (bucketize), histc (see ops.h for how a rule is written).
 *
 * Each compares every element with every candidate (a broadcast compare and a
 * reduction over the candidates), which XLA fuses into one loop with no
 * N x M intermediate in memory.  That is O(N * M) work instead of a binary
 * search's O(N log M), but it has static shapes, no data-dependent control
 * flow and no host round trip; the callers that matter (generate's stop
 * tokens: isin against a handful of ids; bucketing against a short
 * boundary list) have a small M.
 *
 * searchsorted counts, per value v, the sequence elements x with !(x >= v)
 * (left) or !(x > v) (right).  For a sorted sequence that is exactly the
 * position binary search finds, with PyTorch's treatment of NaN values
 * (a NaN value goes after every element).
 */
#include <math.h>
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

/* x of type `t` viewed with a trailing candidate axis of size m:
 * [*t.dims] -> [*t.dims, m] (broadcast along the new axis). */
static V srch_expand_last(tpu_op_ctx_t *c, V x, int64_t m) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  tpu_hlo_type_t to = t;
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < t.rank; i++) dims[i] = i;
  to.dims[to.rank++] = m;
  return tpu_hlo_broadcast_in_dim(c->f, x, to, dims);
}

/* isin: elements (any shape), test_elements (any shape, read flat); ints
 * [compare dtype (the promoted type of both), invert].  Result: bool of
 * elements' shape. */
static void rule_isin(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);
  int invert = tpu_op_int(c, 1) != 0;
  if (tpu_hlo_func_status(c->f)) return;
  if (!tpu_dtype_valid(dt) || tpu_dtype_is_complex(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "isin: unsupported compare dtype %s", tpu_dtype_name(dt));
    return;
  }
  tpu_hlo_type_t et = tpu_op_type(c, c->in[0]);
  tpu_hlo_type_t tt = tpu_op_type(c, c->in[1]);
  if (et.rank >= TPU_MAX_RANK) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "isin: elements of rank %d (at most %d)", et.rank, TPU_MAX_RANK - 1);
    return;
  }
  int64_t m = tpu_hlo_type_numel(&tt);
  V e = tpu_hlo_cast(c->f, c->in[0], dt);
  V res;
  if (m == 0) {
    res = tpu_hlo_constant(c->f, tpu_hlo_type_make(TPU_PRED, et.rank, et.dims), 0);
  } else {
    V t = tpu_hlo_reshape(c->f, tpu_hlo_cast(c->f, c->in[1], dt), 1, &m);
    V eb = srch_expand_last(c, e, m);
    tpu_hlo_type_t bt = tpu_op_type(c, eb);
    int64_t last = et.rank;
    V tb = tpu_hlo_broadcast_in_dim(c->f, t, bt, &last);
    V eq = tpu_hlo_compare(c->f, "EQ", eb, tb);
    res = tpu_hlo_reduce(c->f, eq, tpu_hlo_scalar(c->f, TPU_PRED, 0), &last, 1, "or");
  }
  if (invert) res = tpu_hlo_unary(c->f, "not", res);
  tpu_op_set_output(c, res);
}

/* searchsorted: sorted_sequence [*B, M] (or 1-D [M] for any values),
 * values [*B, N] (or any shape with a 1-D sequence); ints [compare dtype,
 * right, out dtype (int64 / int32)].  Result: out dtype of values' shape. */
static void rule_searchsorted(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);
  int right = tpu_op_int(c, 1) != 0;
  tpu_dtype_t out_dt = (tpu_dtype_t)tpu_op_int(c, 2);
  if (tpu_hlo_func_status(c->f)) return;
  if (!tpu_dtype_valid(dt) || tpu_dtype_is_complex(dt) || (out_dt != TPU_S64 && out_dt != TPU_S32)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "searchsorted: unsupported dtypes (compare %s, out %s)",
                tpu_dtype_name(dt), tpu_dtype_name(out_dt));
    return;
  }
  tpu_hlo_type_t st = tpu_op_type(c, c->in[0]);
  tpu_hlo_type_t vt = tpu_op_type(c, c->in[1]);
  char sb[96], vb[96];
  if (st.rank < 1 || vt.rank >= TPU_MAX_RANK) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "searchsorted: boundaries tensor should be 1 dimension or the first N-1 "
                "dimensions of boundaries tensor and input value tensor must match, but we got boundaries tensor %s "
                "and input value tensor %s", tpu_op_shape_str(&st, sb, sizeof sb),
                tpu_op_shape_str(&vt, vb, sizeof vb));
    return;
  }
  int64_t m = st.dims[st.rank - 1];
  V v = tpu_hlo_cast(c->f, c->in[1], dt);
  V s = tpu_hlo_cast(c->f, c->in[0], dt);
  V vb_ = srch_expand_last(c, v, m); /* [*vt, M] */
  tpu_hlo_type_t bt = tpu_op_type(c, vb_);
  V sbx;
  if (st.rank == 1) {
    int64_t last = vt.rank;
    sbx = tpu_hlo_broadcast_in_dim(c->f, s, bt, &last);
  } else {
    /* [*B, M] -> [*B, N, M]: the sequence's leading dims match values'. */
    int ok = st.rank == vt.rank;
    for (int i = 0; ok && i < st.rank - 1; i++) ok = st.dims[i] == vt.dims[i];
    if (!ok) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "searchsorted: boundaries tensor should be 1 dimension or the first N-1 "
                  "dimensions of boundaries tensor and input value tensor must match, but we got boundaries tensor "
                  "%s and input value tensor %s", tpu_op_shape_str(&st, sb, sizeof sb),
                  tpu_op_shape_str(&vt, vb, sizeof vb));
      return;
    }
    int64_t dims[TPU_MAX_RANK];
    for (int i = 0; i < st.rank - 1; i++) dims[i] = i;
    dims[st.rank - 1] = vt.rank; /* M -> the last axis */
    sbx = tpu_hlo_broadcast_in_dim(c->f, s, bt, dims);
  }
  /* count x with !(x >= v) (left) / !(x > v) (right) */
  V hit = tpu_hlo_unary(c->f, "not", tpu_hlo_compare(c->f, right ? "GT" : "GE", sbx, vb_));
  V ones = tpu_hlo_convert(c->f, hit, out_dt);
  int64_t last = vt.rank;
  V res = tpu_hlo_reduce(c->f, ones, tpu_hlo_scalar(c->f, out_dt, 0), &last, 1, "add");
  tpu_op_set_output(c, res);
}

/* histc: x (any shape, read flat); ints [bins]; floats [min, max].
 * Result: [bins] counts in x's dtype.  Bin of v: floor((v - min) * bins /
 * (max - min)), v == max in the last bin, values outside [min, max] (and
 * NaN) not counted.  min == max: the data's min and max instead (then
 * min - 1, max + 1 if those are equal too), as PyTorch. */
static void rule_histc(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t bins = tpu_op_int(c, 0);
  double lo = tpu_op_float(c, 0), hi = tpu_op_float(c, 1);
  if (tpu_hlo_func_status(f)) return;
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  if (bins <= 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "torch.histc(): bins must be > 0, but got %lld for dimension 0",
                (long long)bins);
    return;
  }
  if (lo > hi) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "torch.histc(): max must be larger than min");
    return;
  }
  if (tpu_dtype_is_complex(xt.dtype) || xt.dtype == TPU_PRED) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "histc: unsupported dtype %s", tpu_dtype_name(xt.dtype));
    return;
  }
  tpu_dtype_t acc = xt.dtype == TPU_F64 ? TPU_F64 : TPU_F32;
  int64_t n = tpu_hlo_type_numel(&xt);
  tpu_hlo_type_t bt = tpu_hlo_type_make(xt.dtype, 1, &bins);
  if (n == 0) {
    tpu_op_set_output(c, tpu_hlo_constant(f, bt, 0));
    return;
  }
  V x = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[0], acc), 1, &n);
  tpu_hlo_type_t s0 = tpu_hlo_type_scalar(acc);
  V vlo = tpu_hlo_constant(f, s0, lo), vhi = tpu_hlo_constant(f, s0, hi);
  if (lo == hi) {
    int64_t d0 = 0;
    V mn = tpu_hlo_reduce(f, x, tpu_hlo_constant(f, s0, INFINITY), &d0, 1, "minimum");
    V mx = tpu_hlo_reduce(f, x, tpu_hlo_constant(f, s0, -INFINITY), &d0, 1, "maximum");
    V same = tpu_hlo_compare(f, "EQ", mn, mx);
    vlo = tpu_hlo_select(f, same, tpu_hlo_binary(f, "subtract", mn, tpu_hlo_constant(f, s0, 1)), mn);
    vhi = tpu_hlo_select(f, same, tpu_hlo_binary(f, "add", mx, tpu_hlo_constant(f, s0, 1)), mx);
  }
  tpu_hlo_type_t xv = tpu_hlo_type_make(acc, 1, &n);
  V blo = tpu_hlo_broadcast_in_dim(f, vlo, xv, NULL), bhi = tpu_hlo_broadcast_in_dim(f, vhi, xv, NULL);
  V inside = tpu_hlo_binary(f, "and", tpu_hlo_compare(f, "GE", x, blo), tpu_hlo_compare(f, "LE", x, bhi));
  /* pos = (x - lo) * bins / (hi - lo), in PyTorch's order of operations */
  V pos = tpu_hlo_binary(f, "divide",
                         tpu_hlo_binary(f, "multiply", tpu_hlo_binary(f, "subtract", x, blo),
                                        tpu_hlo_constant(f, xv, (double)bins)),
                         tpu_hlo_binary(f, "subtract", bhi, blo));
  tpu_hlo_type_t iv = tpu_hlo_type_make(TPU_S64, 1, &n);
  V bin = tpu_hlo_convert(f, tpu_hlo_unary(f, "floor", pos), TPU_S64);
  bin = tpu_hlo_clamp(f, tpu_hlo_constant(f, iv, 0), bin, tpu_hlo_constant(f, iv, bins - 1));
  bin = tpu_hlo_select(f, inside, bin, tpu_hlo_constant(f, iv, -1)); /* -1: in no bin */
  int64_t grid[2] = {n, bins}, d0 = 0;
  tpu_hlo_type_t gt = tpu_hlo_type_make(TPU_S64, 2, grid);
  V hit = tpu_hlo_compare(f, "EQ", tpu_hlo_broadcast_in_dim(f, bin, gt, &d0), tpu_hlo_iota(f, gt, 1));
  V counts = tpu_hlo_reduce(f, tpu_hlo_convert(f, hit, TPU_S64), tpu_hlo_scalar(f, TPU_S64, 0), &d0, 1, "add");
  tpu_op_set_output(c, tpu_hlo_cast(f, counts, xt.dtype));
}

const tpu_op_rule_t tpu_rules_search[] = {
    {"isin", rule_isin, 2, 2},
    {"searchsorted", rule_searchsorted, 2, 2},
    {"histc", rule_histc, 1, 1},
    {NULL, NULL, 0, 0},
};
