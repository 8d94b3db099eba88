/* core.c - the rules the runtime itself needs: reading and writing views of
 * a storage, reinterpreting its bytes, identity (a contiguous copy).
 * (dtype conversion is the elementwise rule "convert"; fills and ranges are
 * in factory.c.)
 *
 * View attrs layout (view_read, view_write):
 *   ints = [rank, sizes[rank]..., strides[rank]..., offset]
 * The base input is the storage's current value, any shape; its elements are
 * addressed in flat row-major order (the PyTorch storage layout).  An
 * optional last input, a 0-d s64, is added to the offset at run time (the
 * runtime passes a non-zero offset that way, so slicing at a new position
 * is the same program); the caller has checked the view's bounds with it.
 */
#include <string.h>

#include "ops/ops.h"

typedef struct {
  int rank;
  int64_t sizes[TPU_MAX_RANK], strides[TPU_MAX_RANK], offset;
  int64_t numel;
} core_view_t;

static int core_read_view(tpu_op_ctx_t *c, int first, core_view_t *v) {
  int64_t rank = tpu_op_int(c, first);
  if (rank < 0 || rank > TPU_MAX_RANK || tpu_op_nints(c) < first + 2 + 2 * rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: malformed view attributes", c->name);
    return 0;
  }
  v->rank = (int)rank;
  v->numel = 1;
  for (int i = 0; i < v->rank; i++) {
    v->sizes[i] = tpu_op_int(c, first + 1 + i);
    v->strides[i] = tpu_op_int(c, first + 1 + v->rank + i);
    v->numel *= v->sizes[i];
  }
  v->offset = tpu_op_int(c, first + 1 + 2 * v->rank);
  return 1;
}

/* The view's first element: its static offset plus the runtime one (`dyn`,
 * a 0-d s64 or TPU_HLO_NONE), as a 0-d s64. */
static tpu_hlo_value_t core_start(tpu_hlo_func_t *f, const core_view_t *v, tpu_hlo_value_t dyn) {
  tpu_hlo_type_t s64 = tpu_hlo_type_scalar(TPU_S64);
  tpu_hlo_value_t k = tpu_hlo_constant_i64(f, s64, v->offset);
  if (dyn == TPU_HLO_NONE) return k;
  return v->offset ? tpu_hlo_binary(f, "add", k, dyn) : dyn;
}

/* Flat element indices (s64, shape sizes) of a view. */
static tpu_hlo_value_t core_view_indices(tpu_hlo_func_t *f, const core_view_t *v, tpu_hlo_value_t dyn) {
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, v->rank, v->sizes);
  int64_t none[1] = {0};
  tpu_hlo_value_t acc = dyn == TPU_HLO_NONE ? tpu_hlo_constant_i64(f, it, v->offset)
                                            : tpu_hlo_broadcast_in_dim(f, core_start(f, v, dyn), it, none);
  for (int d = 0; d < v->rank; d++) {
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    tpu_hlo_value_t io = tpu_hlo_iota(f, it, d);
    tpu_hlo_value_t st = tpu_hlo_constant_i64(f, it, v->strides[d]);
    acc = tpu_hlo_binary(f, "add", acc, tpu_hlo_binary(f, "multiply", io, st));
  }
  return acc;
}

static bool core_is_contiguous(const core_view_t *v) {
  int64_t expect = 1;
  for (int d = v->rank - 1; d >= 0; d--) {
    if (v->sizes[d] != 1 && v->strides[d] != expect) return false;
    expect *= v->sizes[d];
  }
  return true;
}

/* If the view is a permutation of a contiguous block, fills perm (order of
 * dims by decreasing stride, size-1 dims last) and returns true. */
static bool core_is_permuted(const core_view_t *v, int64_t *perm) {
  int n = 0;
  for (int d = 0; d < v->rank; d++)
    if (v->sizes[d] != 1) perm[n++] = d;
  /* insertion sort by stride descending */
  for (int i = 1; i < n; i++) {
    int64_t x = perm[i];
    int j = i - 1;
    while (j >= 0 && v->strides[perm[j]] < v->strides[x]) {
      perm[j + 1] = perm[j];
      j--;
    }
    perm[j + 1] = x;
  }
  int64_t expect = 1;
  for (int i = n - 1; i >= 0; i--) {
    if (v->strides[perm[i]] != expect) return false;
    expect *= v->sizes[perm[i]];
  }
  for (int d = 0; d < v->rank; d++)
    if (v->sizes[d] == 1) perm[n++] = d;
  return true;
}

static tpu_hlo_value_t core_flat(tpu_hlo_func_t *f, tpu_hlo_value_t x) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(f, x);
  if (!t) return TPU_HLO_NONE;
  if (t->rank == 1) return x;
  int64_t n = tpu_hlo_type_numel(t);
  return tpu_hlo_reshape(f, x, 1, &n);
}

static bool core_same_dims(const tpu_hlo_type_t *t, const core_view_t *v) {
  if (t->rank != v->rank) return false;
  for (int d = 0; d < v->rank; d++)
    if (t->dims[d] != v->sizes[d]) return false;
  return true;
}

/* Bounds: the elements a view addresses must lie inside a storage of n
 * (with a runtime offset only the view's extent can be checked here). */
static bool core_check_bounds(tpu_op_ctx_t *c, const core_view_t *v, int64_t n, bool dynamic) {
  int64_t hi = v->offset, lo = v->offset;
  for (int d = 0; d < v->rank; d++) {
    int64_t ext = (v->sizes[d] - 1) * v->strides[d];
    if (ext > 0) hi += ext; else lo += ext;
  }
  if (dynamic ? hi - lo >= n : (lo < 0 || hi >= n)) {
    tpu_op_fail(c, TPU_OUT_OF_RANGE, "%s: view (offset %lld) addresses elements [%lld, %lld] of a storage of %lld",
                c->name, (long long)v->offset, (long long)lo, (long long)hi, (long long)n);
    return false;
  }
  return true;
}

/* The contiguous elements [start, start + count) of flat, start static or
 * not. */
static tpu_hlo_value_t core_range(tpu_hlo_func_t *f, tpu_hlo_value_t flat, const core_view_t *v, int64_t count,
                                  tpu_hlo_value_t dyn) {
  if (dyn == TPU_HLO_NONE) {
    int64_t st = v->offset, lim = v->offset + count, one = 1;
    return tpu_hlo_slice(f, flat, &st, &lim, &one);
  }
  tpu_hlo_value_t start = core_start(f, v, dyn);
  return tpu_hlo_dynamic_slice(f, flat, &start, &count);
}

static void rule_view_read(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  core_view_t v;
  if (!core_read_view(c, 0, &v)) return;
  tpu_hlo_value_t base = c->in[0];
  tpu_hlo_value_t dyn = c->nin > 1 ? c->in[1] : TPU_HLO_NONE;
  const tpu_hlo_type_t *bt = tpu_hlo_type_of(f, base);
  int64_t n = tpu_hlo_type_numel(bt);
  tpu_hlo_type_t out_t = tpu_hlo_type_make(bt->dtype, v.rank, v.sizes);
  if (v.numel == 0) {
    tpu_op_set_output(c, tpu_hlo_constant(f, out_t, 0));
    return;
  }
  if (!core_check_bounds(c, &v, n, dyn != TPU_HLO_NONE)) return;
  if (dyn == TPU_HLO_NONE && v.offset == 0 && v.numel == n && core_is_contiguous(&v)) {
    tpu_op_set_output(c, core_same_dims(bt, &v) ? base : tpu_hlo_reshape(f, base, v.rank, v.sizes));
    return;
  }
  /* broadcast (stride 0) dims: read the view without them, then broadcast */
  core_view_t r = v;
  int nb = 0;
  for (int d = 0; d < v.rank; d++)
    if (v.sizes[d] > 1 && v.strides[d] == 0) {
      r.sizes[d] = 1;
      nb++;
    }
  r.numel = 1;
  for (int d = 0; d < r.rank; d++) r.numel *= r.sizes[d];
  tpu_hlo_value_t flat = core_flat(f, base);
  tpu_hlo_value_t res;
  int64_t perm[TPU_MAX_RANK];
  if (core_is_contiguous(&r)) {
    res = core_range(f, flat, &r, r.numel, dyn);
    res = tpu_hlo_reshape(f, res, r.rank, r.sizes);
  } else if (core_is_permuted(&r, perm)) {
    int64_t psizes[TPU_MAX_RANK], inv[TPU_MAX_RANK];
    for (int i = 0; i < r.rank; i++) psizes[i] = r.sizes[perm[i]];
    for (int i = 0; i < r.rank; i++) inv[perm[i]] = i;
    res = core_range(f, flat, &r, r.numel, dyn);
    res = tpu_hlo_reshape(f, res, r.rank, psizes);
    res = tpu_hlo_transpose(f, res, inv);
  } else {
    tpu_hlo_value_t idx = core_view_indices(f, &r, dyn);
    int64_t idims[TPU_MAX_RANK + 1];
    memcpy(idims, r.sizes, sizeof(int64_t) * r.rank);
    idims[r.rank] = 1;
    idx = tpu_hlo_reshape(f, idx, r.rank + 1, idims);
    tpu_hlo_gather_dims_t g;
    memset(&g, 0, sizeof(g));
    g.ncollapsed = 1;
    g.collapsed_slice_dims[0] = 0;
    g.nstart_map = 1;
    g.start_index_map[0] = 0;
    g.index_vector_dim = r.rank;
    g.slice_sizes[0] = 1;
    res = tpu_hlo_gather(f, flat, idx, &g);
  }
  if (nb) {
    int64_t bd[TPU_MAX_RANK];
    for (int d = 0; d < v.rank; d++) bd[d] = d;
    res = tpu_hlo_broadcast_in_dim(f, res, out_t, bd);
  }
  tpu_op_set_output(c, res);
}

/* view_write: in[0] base, in[1] src (broadcastable to the view; same dtype
 * as the base - the caller converts), in[2] the runtime offset (optional).
 * Output: the new base value, same type as in[0]. */
static void rule_view_write(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  core_view_t v;
  if (!core_read_view(c, 0, &v)) return;
  tpu_hlo_value_t base = c->in[0];
  tpu_hlo_value_t dyn = c->nin > 2 ? c->in[2] : TPU_HLO_NONE;
  const tpu_hlo_type_t *bt0 = tpu_hlo_type_of(f, base);
  tpu_hlo_type_t bt = *bt0;
  int64_t n = tpu_hlo_type_numel(&bt);
  tpu_hlo_value_t src = tpu_hlo_cast(f, c->in[1], bt.dtype);
  if (v.numel == 0) {
    tpu_op_set_output(c, base);
    return;
  }
  const tpu_hlo_type_t *st0 = tpu_hlo_type_of(f, src);
  if (!st0) return;
  if (st0->rank > v.rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "copy_: source of rank %d cannot be broadcast to a destination of rank %d",
                st0->rank, v.rank);
    return;
  }
  src = tpu_hlo_broadcast_to(f, src, v.rank, v.sizes);
  if (!core_check_bounds(c, &v, n, dyn != TPU_HLO_NONE)) return;
  if (dyn == TPU_HLO_NONE && v.offset == 0 && v.numel == n && core_is_contiguous(&v)) {
    tpu_op_set_output(c, tpu_hlo_reshape(f, src, bt.rank, bt.dims));
    return;
  }
  tpu_hlo_value_t flat = core_flat(f, base);
  tpu_hlo_value_t res;
  int64_t perm[TPU_MAX_RANK];
  bool has_bcast = false;
  for (int d = 0; d < v.rank; d++)
    if (v.sizes[d] > 1 && v.strides[d] == 0) has_bcast = true;
  if (!has_bcast && core_is_contiguous(&v)) {
    tpu_hlo_value_t upd = tpu_hlo_reshape(f, src, 1, &v.numel);
    tpu_hlo_value_t start = core_start(f, &v, dyn);
    res = tpu_hlo_dynamic_update_slice(f, flat, upd, &start);
  } else if (!has_bcast && core_is_permuted(&v, perm)) {
    tpu_hlo_value_t upd = tpu_hlo_transpose(f, src, perm);
    upd = tpu_hlo_reshape(f, upd, 1, &v.numel);
    tpu_hlo_value_t start = core_start(f, &v, dyn);
    res = tpu_hlo_dynamic_update_slice(f, flat, upd, &start);
  } else {
    tpu_hlo_value_t idx = core_view_indices(f, &v, dyn);
    int64_t idims[2] = {v.numel, 1};
    idx = tpu_hlo_reshape(f, idx, 2, idims);
    tpu_hlo_value_t upd = tpu_hlo_reshape(f, src, 1, &v.numel);
    tpu_hlo_scatter_dims_t s;
    memset(&s, 0, sizeof(s));
    s.ninserted = 1;
    s.inserted_window_dims[0] = 0;
    s.nscatter_map = 1;
    s.scatter_dims_to_operand_dims[0] = 0;
    s.index_vector_dim = 1;
    res = tpu_hlo_scatter(f, flat, idx, upd, &s, "replace");
  }
  if (bt.rank != 1) res = tpu_hlo_reshape(f, res, bt.rank, bt.dims);
  tpu_op_set_output(c, res);
}

/* bitcast_flat: ints = [dtype B].  Reinterprets the bytes of x (any shape,
 * dtype A) as a flat array of B (a storage viewed with another dtype, as
 * torch.save / UntypedStorage copies do).  bool travels as one byte. */
static void rule_bitcast_flat(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_dtype_t to = (tpu_dtype_t)tpu_op_int(c, 0);
  tpu_hlo_value_t x = core_flat(f, c->in[0]);
  const tpu_hlo_type_t *t = tpu_hlo_type_of(f, x);
  if (!t) return;
  tpu_dtype_t from = t->dtype;
  if (from == TPU_PRED) {
    x = tpu_hlo_convert(f, x, TPU_U8);
    from = TPU_U8;
  }
  if (tpu_dtype_is_complex(from)) { /* complex bits are (re, im) pairs of the part type */
    int64_t n = t->dims[0], pair[2] = {n, 1}, m = 2 * n;
    tpu_hlo_value_t parts[2] = {tpu_hlo_reshape(f, tpu_hlo_unary(f, "real", x), 2, pair),
                                tpu_hlo_reshape(f, tpu_hlo_unary(f, "imag", x), 2, pair)};
    x = tpu_hlo_reshape(f, tpu_hlo_concatenate(f, parts, 2, 1), 1, &m);
    from = from == TPU_C64 ? TPU_F32 : TPU_F64;
    t = tpu_hlo_type_of(f, x);
  }
  if (tpu_dtype_is_complex(to)) { /* the part type's bits, then pairs -> complex */
    tpu_dtype_t part = to == TPU_C64 ? TPU_F32 : TPU_F64;
    size_t a = tpu_dtype_size(from), b = tpu_dtype_size(to);
    int64_t n = t->dims[0];
    if (!a || (n * (int64_t)a) % (int64_t)b) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "bitcast: %lld bytes cannot be viewed as %s", (long long)(n * (int64_t)a),
                  tpu_dtype_name(to));
      return;
    }
    int64_t k = n * (int64_t)a / (int64_t)b, dims[2] = {k, 2};
    tpu_hlo_value_t y = x;
    if (from != part) { /* through the part type's bytes */
      int64_t bytes = n * (int64_t)a;
      tpu_hlo_value_t u8 = a == 1 ? x : tpu_hlo_reshape(f, tpu_hlo_bitcast_convert(f, x, TPU_U8), 1, &bytes);
      int64_t g[2] = {2 * k, (int64_t)tpu_dtype_size(part)};
      y = tpu_hlo_bitcast_convert(f, tpu_hlo_reshape(f, u8, 2, g), part);
    }
    y = tpu_hlo_reshape(f, y, 2, dims);
    int64_t lo0[2] = {0, 0}, hi0[2] = {k, 1}, lo1[2] = {0, 1}, hi1[2] = {k, 2}, one[2] = {1, 1};
    tpu_hlo_value_t re = tpu_hlo_reshape(f, tpu_hlo_slice(f, y, lo0, hi0, one), 1, &k);
    tpu_hlo_value_t im = tpu_hlo_reshape(f, tpu_hlo_slice(f, y, lo1, hi1, one), 1, &k);
    tpu_op_set_output(c, tpu_hlo_binary(f, "complex", re, im));
    return;
  }
  tpu_dtype_t mid = to == TPU_PRED ? TPU_U8 : to;
  size_t a = tpu_dtype_size(from), b = tpu_dtype_size(mid);
  int64_t n = t->dims[0];
  if (!a || !b || (n * (int64_t)a) % (int64_t)b) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "bitcast: %lld bytes cannot be viewed as %s", (long long)(n * (int64_t)a),
                tpu_dtype_name(to));
    return;
  }
  tpu_hlo_value_t y;
  if (a == b) {
    y = from == mid ? x : tpu_hlo_bitcast_convert(f, x, mid);
  } else if (a > b) {
    y = tpu_hlo_bitcast_convert(f, x, mid); /* [n, a/b] */
    int64_t m = n * (int64_t)(a / b);
    y = tpu_hlo_reshape(f, y, 1, &m);
  } else {
    int64_t dims[2] = {n / (int64_t)(b / a), (int64_t)(b / a)};
    y = tpu_hlo_bitcast_convert(f, tpu_hlo_reshape(f, x, 2, dims), mid);
  }
  if (to == TPU_PRED) {
    const tpu_hlo_type_t *yt = tpu_hlo_type_of(f, y);
    if (!yt) return;
    y = tpu_hlo_compare(f, "NE", y, tpu_hlo_constant(f, *yt, 0));
  }
  tpu_op_set_output(c, y);
}

/* identity: returns its input (a contiguous copy materialises a view). */
static void rule_identity(tpu_op_ctx_t *c) { tpu_op_set_output(c, c->in[0]); }

const tpu_op_rule_t tpu_rules_core[] = {
    {"view_read", rule_view_read, 1, 2},
    {"view_write", rule_view_write, 2, 3},
    {"identity", rule_identity, 1, 1},
    {"bitcast_flat", rule_bitcast_flat, 1, 1},
    {NULL, NULL, 0, 0},
};
