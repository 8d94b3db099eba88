/* index.c - indexing rules: cat, index_select, gather, the scatter family,
 * advanced indexing (index / index_put), take, index_add / copy / fill /
 * reduce, and
 * the rearrangements tril / triu, flip, roll, repeat, unfold_backward.
 *
 * Index tensors are any integer type; they are converted to s64 and negative
 * values are wrapped (i < 0 -> i + size) in every rule.  PyTorch wraps in
 * advanced indexing, take and index_put, and raises IndexError for negative
 * indices in gather / scatter / index_select; wrapping there is a superset.
 *
 * Out-of-range indices are device-side checks (ops.h: tpu_op_check_index),
 * with the range, exception type and message of PyTorch's CPU kernel
 * ([0, size) for gather / scatter / index_select / index_add / index_copy,
 * [-size, size) for advanced indexing, index_put, index_fill, take, put):
 * raised at the next host wait, no sync while nothing is wrong.  The
 * program itself does what XLA does with such an index (a gather clamps, a
 * scatter drops the update); the report says the result is not to be used.
 *
 * Data-dependent shapes (bool-mask indexing, nonzero, masked_select) cannot
 * be expressed in one static-shape program: the adapters turn a bool mask
 * into integer indices with nonzero, which reads the mask on the host (a
 * sync), then use the rules here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* ---- helpers ------------------------------------------------------------------- */

static int ix_check_index_dtype(tpu_op_ctx_t *c, tpu_dtype_t dt, const char *what) {
  if (!tpu_dtype_is_int(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s(): Expected dtype int64 for index, but got %s", c->name, what,
                tpu_dtype_name(dt));
    return 0;
  }
  return 1;
}

/* idx as s64 with negative values wrapped by `size`. */
static tpu_hlo_value_t ix_wrap(tpu_op_ctx_t *c, tpu_hlo_value_t idx, int64_t size) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t i = tpu_hlo_cast(f, idx, TPU_S64);
  tpu_hlo_type_t t = tpu_op_type(c, i);
  if (!tpu_dtype_is_signed(tpu_op_type(c, idx).dtype)) return i;
  tpu_hlo_value_t neg = tpu_hlo_compare(f, "LT", i, tpu_hlo_constant_i64(f, t, 0));
  return tpu_hlo_select(f, neg, tpu_hlo_binary(f, "add", i, tpu_hlo_constant_i64(f, t, size)), i);
}

/* The index check of gather / scatter / index_add: every index in [0, size)
 * (PyTorch's CPU kernels raise RuntimeError, also for negative indices). */
static void ix_check_dim(tpu_op_ctx_t *c, tpu_hlo_value_t idx, int64_t dim, int64_t size, tpu_code_t code) {
  tpu_op_check_index(c, idx, 0, size, code,
                     "%s(): index " TPU_OP_PAYLOAD " is out of bounds for dimension %lld with size %lld", c->name,
                     (long long)dim, (long long)size);
}

/* [*t.shape] s64 -> [*t.shape, 1]. */
static tpu_hlo_value_t ix_add_vec_dim(tpu_op_ctx_t *c, tpu_hlo_value_t v) {
  tpu_hlo_type_t t = tpu_op_type(c, v);
  t.dims[t.rank] = 1;
  return tpu_hlo_reshape(c->f, v, t.rank + 1, t.dims);
}

/* Full coordinates for gather/scatter along `dim`: [*idx.shape, R] where
 * component dim is the (wrapped) index and the others are iotas. */
static tpu_hlo_value_t ix_full_coords(tpu_op_ctx_t *c, tpu_hlo_value_t idx_s64, int dim, int R) {
  tpu_hlo_type_t t = tpu_op_type(c, idx_s64);
  tpu_hlo_value_t parts[TPU_MAX_RANK];
  for (int d = 0; d < R; d++)
    parts[d] = ix_add_vec_dim(c, d == dim ? idx_s64 : tpu_hlo_iota(c->f, t, d));
  if (R == 1) return parts[0];
  return tpu_hlo_concatenate(c->f, parts, R, R);
}

static tpu_hlo_value_t ix_gather_points(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t coords, int R) {
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  gd.ncollapsed = R;
  gd.nstart_map = R;
  for (int d = 0; d < R; d++) {
    gd.collapsed_slice_dims[d] = d;
    gd.start_index_map[d] = d;
    gd.slice_sizes[d] = 1;
  }
  gd.index_vector_dim = tpu_op_type(c, coords).rank - 1;
  return tpu_hlo_gather(c->f, x, coords, &gd);
}

static tpu_hlo_value_t ix_scatter_points(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t coords,
                                         tpu_hlo_value_t upd, int R, const char *body) {
  tpu_hlo_scatter_dims_t sd;
  memset(&sd, 0, sizeof sd);
  sd.ninserted = R;
  sd.nscatter_map = R;
  for (int d = 0; d < R; d++) {
    sd.inserted_window_dims[d] = d;
    sd.scatter_dims_to_operand_dims[d] = d;
  }
  sd.index_vector_dim = tpu_op_type(c, coords).rank - 1;
  return tpu_hlo_scatter(c->f, x, coords, upd, &sd, body);
}

/* ---- cat ------------------------------------------------------------------------- */

/* cat: inputs (t0, t1, ...); attrs [dim, dtype].  Every input is converted
 * to dtype (the promoted type, computed by the adapter).  Legacy 1-d empty
 * tensors (shape [0]) are skipped, as PyTorch does. */
static void rule_cat(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t dim = tpu_op_int(c, 0);
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 1);
  tpu_hlo_value_t keep[TPU_OP_MAX_INPUTS];
  int nk = 0, ref = -1;
  for (int i = 0; i < c->nin; i++) {
    tpu_hlo_type_t t = tpu_op_type(c, c->in[i]);
    if (t.rank == 1 && t.dims[0] == 0) continue;
    if (t.rank == 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: zero-dimensional tensor (at position %d) cannot be concatenated",
                  c->name, i);
      return;
    }
    if (ref < 0) ref = i;
    keep[nk++] = tpu_hlo_cast(f, c->in[i], dt);
  }
  if (nk == 0) {
    int64_t z = 0;
    tpu_op_set_output(c, tpu_hlo_constant(f, tpu_hlo_type_make(dt, 1, &z), 0.0));
    return;
  }
  tpu_hlo_type_t rt = tpu_op_type(c, c->in[ref]);
  int64_t d = tpu_op_dim(c, dim, rt.rank);
  for (int i = ref + 1, k = 1; i < c->nin; i++) {
    tpu_hlo_type_t t = tpu_op_type(c, c->in[i]);
    if (t.rank == 1 && t.dims[0] == 0) continue;
    if (t.rank != rt.rank) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Tensors must have same number of dimensions: got %d and %d", c->name, rt.rank, t.rank);
      return;
    }
    for (int j = 0; j < t.rank; j++) {
      if (j != d && t.dims[j] != rt.dims[j]) {
        tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                    "%s: Sizes of tensors must match except in dimension %lld. Expected size %lld but got size "
                    "%lld for tensor number %d in the list.",
                    c->name, (long long)d, (long long)rt.dims[j], (long long)t.dims[j], i);
        return;
      }
    }
    k++;
  }
  tpu_op_set_output(c, nk == 1 ? keep[0] : tpu_hlo_concatenate(f, keep, nk, d));
}

/* ---- index_select / gather / take -------------------------------------------------- */

/* index_select: inputs (self, index [L] or 0-d); attrs [dim]. */
static void rule_index_select(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (!ix_check_index_dtype(c, it.dtype, "index_select")) return;
  if (it.rank > 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: index_select(): Index is supposed to be a vector", c->name);
    return;
  }
  int64_t dim = tpu_op_dim(c, tpu_op_int(c, 0), t.rank ? t.rank : 1), size = t.rank ? t.dims[dim] : 1;
  /* PyTorch's CPU kernel has its own paths (and error) for dim 1 and for a
     self of rank > 1 with no elements */
  if (t.rank > 1 && (dim == 1 || tpu_hlo_type_numel(&t) == 0))
    tpu_op_check_index(c, c->in[1], 0, size, TPU_INVALID_ARGUMENT,
                       "index_select(): INDICES element is out of DATA bounds, id=" TPU_OP_PAYLOAD " axis_dim=%lld",
                       (long long)size);
  else
    tpu_op_check_index(c, c->in[1], 0, size, TPU_OUT_OF_RANGE,
                       "index_select(): index out of range in self (index " TPU_OP_PAYLOAD
                       " for dimension %lld with size %lld)", (long long)dim, (long long)size);
  if (t.rank == 0) { /* a scalar: every index must be 0 */
    int64_t L = it.rank ? it.dims[0] : 1;
    tpu_op_set_output(c, it.rank ? tpu_hlo_broadcast_to(c->f, c->in[0], 1, &L) : c->in[0]);
    return;
  }
  tpu_hlo_type_t out = t;
  out.dims[dim] = it.rank ? it.dims[0] : 1;
  if (tpu_hlo_type_numel(&out) == 0 || t.dims[dim] == 0) {
    /* nothing taken, or taken from nothing (the index check above raises):
     * no gather from a 0-sized dim */
    tpu_op_set_output(c, tpu_hlo_constant(c->f, out, 0));
    return;
  }
  tpu_hlo_value_t idx = ix_wrap(c, c->in[1], t.dims[dim]);
  if (it.rank == 0) idx = tpu_hlo_reshape(c->f, idx, 1, (int64_t[]){1});
  tpu_op_set_output(c, tpu_op_take(c, c->in[0], (int)dim, idx));
}

/* gather: inputs (self, index); attrs [dim].  index has self's rank and is no
 * larger than self in every dim but `dim`; result has index's shape. */
static void rule_gather(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (!ix_check_index_dtype(c, it.dtype, "gather")) return;
  int R = t.rank;
  int64_t dim = tpu_op_dim(c, tpu_op_int(c, 0), R);
  if (R == 0 || it.rank == 0) {
    if (tpu_hlo_type_numel(&it) != 1 || tpu_hlo_type_numel(&t) != 1) goto bad_rank;
    ix_check_dim(c, c->in[1], 0, 1, TPU_INVALID_ARGUMENT);
    tpu_op_set_output(c, tpu_hlo_reshape(c->f, c->in[0], it.rank, it.dims));
    return;
  }
  if (it.rank != R) goto bad_rank;
  for (int d = 0; d < R; d++) {
    if (d != dim && it.dims[d] > t.dims[d]) {
      char b1[64], b2[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Size does not match at dimension %d expected index %s to be no larger than self %s apart "
                  "from dimension %lld",
                  c->name, d, tpu_op_shape_str(&it, b1, sizeof b1), tpu_op_shape_str(&t, b2, sizeof b2), (long long)dim);
      return;
    }
  }
  {
    ix_check_dim(c, c->in[1], dim, t.dims[dim], TPU_INVALID_ARGUMENT);
    tpu_hlo_value_t coords = ix_full_coords(c, ix_wrap(c, c->in[1], t.dims[dim]), (int)dim, R);
    tpu_op_set_output(c, ix_gather_points(c, c->in[0], coords, R));
    return;
  }
bad_rank:
  tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Index tensor must have the same number of dimensions as input tensor",
              c->name);
}

/* take: inputs (self, index) -> self.flatten()[index] (index's shape). */
static void rule_take(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (!ix_check_index_dtype(c, it.dtype, "take")) return;
  int64_t n = tpu_hlo_type_numel(&t);
  tpu_op_check_index(c, c->in[1], -n, n, TPU_OUT_OF_RANGE,
                     "take(): out of range: tried to access index " TPU_OP_PAYLOAD " on a tensor of %lld elements.",
                     (long long)n);
  tpu_hlo_value_t flat = tpu_hlo_reshape(c->f, c->in[0], 1, &n);
  tpu_hlo_value_t idx = ix_add_vec_dim(c, ix_wrap(c, c->in[1], n));
  tpu_op_set_output(c, ix_gather_points(c, flat, idx, 1));
}

/* ---- scatter family --------------------------------------------------------------- */

/* Updates for scatter: src sliced to index's shape (or a 0-d value broadcast). */
static tpu_hlo_value_t ix_scatter_updates(tpu_op_ctx_t *c, int isrc, const tpu_hlo_type_t *it, tpu_dtype_t dt) {
  tpu_hlo_type_t st = tpu_op_type(c, c->in[isrc]);
  tpu_hlo_value_t s = tpu_hlo_cast(c->f, c->in[isrc], dt);
  if (st.rank == 0) return tpu_hlo_broadcast_to(c->f, s, it->rank, it->dims);
  if (st.rank != it->rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Index tensor must have the same number of dimensions as src tensor",
                c->name);
    return TPU_HLO_NONE;
  }
  int same = 1;
  for (int d = 0; d < st.rank; d++) {
    if (it->dims[d] > st.dims[d]) {
      char b1[64], b2[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Expected index %s to be no larger than src %s", c->name, tpu_op_shape_str(it, b1, sizeof b1),
                  tpu_op_shape_str(&st, b2, sizeof b2));
      return TPU_HLO_NONE;
    }
    same &= it->dims[d] == st.dims[d];
  }
  if (same) return s;
  int64_t z[TPU_MAX_RANK] = {0}, one[TPU_MAX_RANK];
  for (int d = 0; d < st.rank; d++) one[d] = 1;
  return tpu_hlo_slice(c->f, s, z, it->dims, one);
}

static int ix_scatter_check(tpu_op_ctx_t *c, const tpu_hlo_type_t *t, const tpu_hlo_type_t *it, int64_t dim) {
  if (!ix_check_index_dtype(c, it->dtype, "scatter")) return 0;
  if (it->rank != t->rank && !(tpu_hlo_type_numel(it) <= 1 && t->rank <= 1)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Index tensor must have the same number of dimensions as self tensor",
                c->name);
    return 0;
  }
  for (int d = 0; d < t->rank && d < it->rank; d++) {
    if (d != dim && it->dims[d] > t->dims[d]) {
      char b1[64], b2[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Expected index %s to be no larger than self %s apart from dimension %lld", c->name,
                  tpu_op_shape_str(it, b1, sizeof b1), tpu_op_shape_str(t, b2, sizeof b2), (long long)dim);
      return 0;
    }
  }
  return 1;
}

static const char *ix_body(int64_t code) {
  switch (code) {
    case 1: return "add";
    case 2: return "multiply";
    default: return "replace";
  }
}

/* scatter: inputs (self, index, src or 0-d value); attrs [dim, reduce (0 none,
 * 1 add, 2 multiply)].  Also scatter_add with attrs [dim] (reduce add). */
static void rule_scatter_impl(tpu_op_ctx_t *c, int64_t reduce) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  int R = t.rank;
  int64_t dim = tpu_op_dim(c, tpu_op_int(c, 0), R);
  if (!ix_scatter_check(c, &t, &it, dim)) return;
  ix_check_dim(c, c->in[1], dim, R ? t.dims[dim] : 1, TPU_INVALID_ARGUMENT);
  if (R == 0) { /* 0-d self: one element */
    tpu_hlo_value_t self1 = tpu_hlo_reshape(c->f, c->in[0], 1, (int64_t[]){1});
    tpu_hlo_type_t it1 = tpu_hlo_type_make(it.dtype, 1, (int64_t[]){tpu_hlo_type_numel(&it)});
    tpu_hlo_value_t i1 = tpu_hlo_reshape(c->f, c->in[1], 1, it1.dims);
    tpu_hlo_value_t u = tpu_hlo_reshape(c->f, ix_scatter_updates(c, 2, &it, t.dtype), 1, it1.dims);
    tpu_hlo_value_t r = ix_scatter_points(c, self1, ix_add_vec_dim(c, ix_wrap(c, i1, 1)), u, 1, ix_body(reduce));
    tpu_op_set_output(c, tpu_hlo_reshape(c->f, r, 0, NULL));
    return;
  }
  tpu_hlo_value_t upd = ix_scatter_updates(c, 2, &it, t.dtype);
  tpu_hlo_value_t coords = ix_full_coords(c, ix_wrap(c, c->in[1], t.dims[dim]), (int)dim, R);
  tpu_op_set_output(c, ix_scatter_points(c, c->in[0], coords, upd, R, ix_body(reduce)));
}

static void rule_scatter(tpu_op_ctx_t *c) {
  int64_t reduce = tpu_op_nints(c) > 1 ? tpu_op_int(c, 1) : 0;
  rule_scatter_impl(c, reduce);
}

static void rule_scatter_add(tpu_op_ctx_t *c) { rule_scatter_impl(c, 1); }

/* The reductions of scatter_reduce / index_reduce, by code (0 sum, 1 prod,
 * 2 mean (a sum, then ix_mean_of_sums), 3 amax, 4 amin), and the value
 * each starts from where include_self=False. */
static const char *ix_reduce_bodies[5] = {"add", "multiply", "add", "maximum", "minimum"};
static tpu_hlo_value_t ix_reduce_identity(tpu_op_ctx_t *c, int64_t red, tpu_hlo_type_t t) {
  return red == 1   ? tpu_hlo_constant(c->f, t, 1.0)
         : red == 3 ? tpu_hlo_broadcast_to(c->f, tpu_op_lowest(c, t.dtype), t.rank, t.dims)
         : red == 4 ? tpu_hlo_broadcast_to(c->f, tpu_op_highest(c, t.dtype), t.rank, t.dims)
                    : tpu_hlo_constant(c->f, t, 0.0);
}

/* The mean reduction's result from its sums and counts: sum / count (floor
 * division for integers, as PyTorch), self (c->in[0]) where nothing was
 * counted. */
static tpu_hlo_value_t ix_mean_of_sums(tpu_op_ctx_t *c, tpu_hlo_value_t sum, tpu_hlo_value_t cnt) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, sum);
  tpu_hlo_value_t zero = tpu_hlo_constant(f, t, 0.0);
  tpu_hlo_value_t has = tpu_hlo_compare(f, "GT", cnt, zero);
  tpu_hlo_value_t den = tpu_hlo_select(f, has, cnt, tpu_hlo_constant(f, t, 1.0));
  tpu_hlo_value_t q = tpu_hlo_binary(f, "divide", sum, den);
  if (!tpu_dtype_is_float(t.dtype)) {
    tpu_hlo_value_t rem = tpu_hlo_binary(f, "remainder", sum, den);
    tpu_hlo_value_t adj = tpu_hlo_compare(f, "LT", rem, zero);
    q = tpu_hlo_select(f, adj, tpu_hlo_binary(f, "subtract", q, tpu_hlo_constant(f, t, 1.0)), q);
  }
  return tpu_hlo_select(f, has, q, c->in[0]);
}

/* scatter_reduce.two: inputs (self, index, src); attrs [dim, reduce (0 sum,
 * 1 prod, 2 mean, 3 amax, 4 amin), include_self]. */
static void rule_scatter_reduce(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  int R = t.rank;
  if (R == 0) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: 0-d self is not supported", c->name);
    return;
  }
  int64_t dim = tpu_op_dim(c, tpu_op_int(c, 0), R);
  int64_t red = tpu_op_int(c, 1);
  int incl = (int)tpu_op_int(c, 2);
  if (!ix_scatter_check(c, &t, &it, dim)) return;
  ix_check_dim(c, c->in[1], dim, t.dims[dim], TPU_INVALID_ARGUMENT);
  if (red < 0 || red > 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: reduce argument must be either sum, prod, mean, amax or amin", c->name);
    return;
  }
  tpu_hlo_value_t upd = ix_scatter_updates(c, 2, &it, t.dtype);
  tpu_hlo_value_t coords = ix_full_coords(c, ix_wrap(c, c->in[1], t.dims[dim]), (int)dim, R);
  tpu_hlo_value_t self = c->in[0];
  if (!incl) {
    tpu_hlo_type_t ut = it;
    ut.dtype = t.dtype;
    self = ix_scatter_points(c, self, coords, ix_reduce_identity(c, red, ut), R, "replace");
  }
  tpu_hlo_value_t r = ix_scatter_points(c, self, coords, upd, R, ix_reduce_bodies[red]);
  if (red == 2) {
    tpu_hlo_type_t ut = it;
    ut.dtype = t.dtype;
    tpu_hlo_value_t cnt = ix_scatter_points(c, tpu_hlo_constant(f, t, incl ? 1.0 : 0.0), coords,
                                            tpu_hlo_constant(f, ut, 1.0), R, "add");
    r = ix_mean_of_sums(c, r, cnt);
  }
  tpu_op_set_output(c, r);
}

static int ix_index_dim_setup(tpu_op_ctx_t *c, tpu_hlo_type_t *t, int64_t *dim, tpu_hlo_value_t *idx) {
  *t = tpu_op_type(c, c->in[0]);
  tpu_hlo_type_t it = tpu_op_type(c, c->in[1]);
  if (!ix_check_index_dtype(c, it.dtype, c->name)) return 0;
  if (it.rank > 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Index should have dimension 1 or 0 (got %d)", c->name, it.rank);
    return 0;
  }
  if (t->rank == 0) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: 0-d self is not supported", c->name);
    return 0;
  }
  *dim = tpu_op_dim(c, tpu_op_int(c, 0), t->rank);
  *idx = ix_wrap(c, c->in[1], t->dims[*dim]);
  if (it.rank == 0) *idx = tpu_hlo_reshape(c->f, *idx, 1, (int64_t[]){1});
  return 1;
}

/* Source for index_add/index_copy: self's shape with dim -> L. */
static tpu_hlo_value_t ix_index_source(tpu_op_ctx_t *c, int isrc, const tpu_hlo_type_t *t, int64_t dim,
                                       tpu_hlo_value_t idx) {
  tpu_hlo_type_t st = tpu_op_type(c, c->in[isrc]);
  int64_t L = tpu_op_type(c, idx).dims[0];
  tpu_hlo_type_t want = *t;
  want.dims[dim] = L;
  if (st.rank == 0 && t->rank <= 1) st = tpu_hlo_type_make(st.dtype, 1, &L);
  if (tpu_hlo_type_numel(&st) != tpu_hlo_type_numel(&want) || (st.rank != want.rank && t->rank > 1)) {
    char b1[64], b2[64];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: source %s does not match the expected shape %s", c->name,
                tpu_op_shape_str(&st, b1, sizeof b1), tpu_op_shape_str(&want, b2, sizeof b2));
    return TPU_HLO_NONE;
  }
  return tpu_hlo_reshape(c->f, tpu_hlo_cast(c->f, c->in[isrc], t->dtype), want.rank, want.dims);
}

/* index_add: inputs (self, index [L], source, alpha); attrs [dim]. */
static void rule_index_add(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t;
  int64_t dim;
  tpu_hlo_value_t idx;
  if (!ix_index_dim_setup(c, &t, &dim, &idx)) return;
  ix_check_dim(c, c->in[1], dim, t.dims[dim], TPU_INVALID_ARGUMENT);
  tpu_hlo_value_t src = ix_index_source(c, 2, &t, dim, idx);
  tpu_hlo_type_t st = tpu_op_type(c, src);
  tpu_hlo_value_t alpha = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[3], t.dtype), st.rank, st.dims);
  src = tpu_hlo_binary(c->f, "multiply", src, alpha);
  tpu_op_set_output(c, tpu_op_put(c, c->in[0], (int)dim, idx, src, "add"));
}

/* index_reduce: inputs (self, index [L], source); attrs [dim, reduce (the
 * scatter_reduce codes: 1 prod, 2 mean, 3 amax, 4 amin), include_self]. */
static void rule_index_reduce(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t;
  int64_t dim;
  tpu_hlo_value_t idx;
  int64_t red = tpu_op_int(c, 1);
  int incl = (int)tpu_op_int(c, 2);
  if (red < 1 || red > 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected reduce to be one of prod, mean, amax or amin", c->name);
    return;
  }
  if (!ix_index_dim_setup(c, &t, &dim, &idx)) return;
  tpu_op_check_index(c, c->in[1], 0, t.dims[dim], TPU_OUT_OF_RANGE,
                     "index_reduce(): index out of range in self (index " TPU_OP_PAYLOAD
                     " for dimension %lld with size %lld)", (long long)dim, (long long)t.dims[dim]);
  tpu_hlo_value_t src = ix_index_source(c, 2, &t, dim, idx);
  if (src == TPU_HLO_NONE) return;
  tpu_hlo_type_t st = tpu_op_type(c, src);
  tpu_hlo_value_t self = c->in[0];
  if (!incl) self = tpu_op_put(c, self, (int)dim, idx, ix_reduce_identity(c, red, st), "replace");
  tpu_hlo_value_t r = tpu_op_put(c, self, (int)dim, idx, src, ix_reduce_bodies[red]);
  if (red == 2) {
    tpu_hlo_value_t cnt = tpu_op_put(c, tpu_hlo_constant(c->f, t, incl ? 1.0 : 0.0), (int)dim, idx,
                                     tpu_hlo_constant(c->f, st, 1.0), "add");
    r = ix_mean_of_sums(c, r, cnt);
  }
  tpu_op_set_output(c, r);
}

/* index_copy: inputs (self, index [L], source); attrs [dim]. */
static void rule_index_copy(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t;
  int64_t dim;
  tpu_hlo_value_t idx;
  if (!ix_index_dim_setup(c, &t, &dim, &idx)) return;
  tpu_op_check_index(c, c->in[1], 0, t.dims[dim], TPU_OUT_OF_RANGE,
                     "index_copy_(): index " TPU_OP_PAYLOAD " is out of bounds for dimension %lld with size %lld",
                     (long long)dim, (long long)t.dims[dim]);
  tpu_hlo_value_t src = ix_index_source(c, 2, &t, dim, idx);
  tpu_op_set_output(c, tpu_op_put(c, c->in[0], (int)dim, idx, src, "replace"));
}

/* index_fill: inputs (self, index [L], value 0-d); attrs [dim]. */
static void rule_index_fill(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t;
  int64_t dim;
  tpu_hlo_value_t idx;
  if (!ix_index_dim_setup(c, &t, &dim, &idx)) return;
  tpu_op_check_index(c, c->in[1], -t.dims[dim], t.dims[dim], TPU_OUT_OF_RANGE,
                     "index_fill(): index " TPU_OP_PAYLOAD " is out of bounds for dimension %lld with size %lld",
                     (long long)dim, (long long)t.dims[dim]);
  tpu_hlo_type_t ut = t;
  ut.dims[dim] = tpu_op_type(c, idx).dims[0];
  tpu_hlo_value_t v = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], t.dtype), ut.rank, ut.dims);
  tpu_op_set_output(c, tpu_op_put(c, c->in[0], (int)dim, idx, v, "replace"));
}

/* ---- advanced indexing -------------------------------------------------------------- */

typedef struct {
  int R, k, nb;
  int64_t D[TPU_MAX_RANK];         /* indexed dims, ascending */
  int64_t B[TPU_MAX_RANK];         /* broadcast index shape */
  int64_t offset_dims[TPU_MAX_RANK];
  int noffset;
  tpu_hlo_type_t out;              /* result shape of self[indices] */
  tpu_hlo_value_t coords;          /* [*B, k] s64 */
} ix_adv_t;

/* attrs [present_0, ..., present_{n-1}] (n <= rank); indices follow the
 * inputs at `first`, one per present dim. */
static int ix_adv_setup(tpu_op_ctx_t *c, const tpu_hlo_type_t *t, int first, int attr0, int put, ix_adv_t *a) {
  tpu_hlo_func_t *f = c->f;
  memset(a, 0, sizeof *a);
  a->R = t->rank;
  int n = tpu_op_nints(c) - attr0;
  if (n > t->rank) {
    tpu_op_fail(c, TPU_OUT_OF_RANGE, "%s: too many indices for tensor of dimension %d (got %d)", c->name, t->rank, n);
    return 0;
  }
  tpu_hlo_value_t idx[TPU_MAX_RANK];
  for (int d = 0, j = first; d < n; d++) {
    if (!tpu_op_int(c, attr0 + d)) continue;
    if (j >= c->nin) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: fewer index tensors than present flags", c->name);
      return 0;
    }
    tpu_hlo_type_t it = tpu_op_type(c, c->in[j]);
    if (it.dtype == TPU_PRED || !tpu_dtype_is_int(it.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: tensors used as indices must be long, int, byte or bool tensors (bool masks are converted "
                  "by the adapter), got %s",
                  c->name, tpu_dtype_name(it.dtype));
      return 0;
    }
    a->D[a->k] = d;
    idx[a->k] = c->in[j];
    a->k++;
    j++;
  }
  if (a->k == 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: no index tensor given", c->name);
    return 0;
  }
  a->nb = tpu_op_broadcast_shape(c, idx, a->k, a->B);
  if (a->nb < 0) return 0;
  if (a->nb + a->R - a->k > TPU_MAX_RANK) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: result rank exceeds %d", c->name, TPU_MAX_RANK);
    return 0;
  }
  /* PyTorch's CPU kernels check an index as they visit its elements: with
   * nothing to visit (a 0-sized remaining dim or index), nothing is checked,
   * and a check here would surface at some later, unrelated host wait */
  int64_t visits = 1;
  for (int d = 0; d < a->nb; d++) visits *= a->B[d];
  for (int d = 0, i = 0; d < t->rank; d++) {
    if (i < a->k && a->D[i] == d) i++;
    else visits *= t->dims[d];
  }
  tpu_hlo_value_t parts[TPU_MAX_RANK];
  for (int i = 0; i < a->k; i++) {
    int64_t n = t->dims[a->D[i]];
    if (visits == 0) {
    } else if (put) /* put_ on the flattened self: PyTorch's put message */
      tpu_op_check_index(c, idx[i], -n, n, TPU_OUT_OF_RANGE,
                         "put_(): out of range: tried to access index " TPU_OP_PAYLOAD " on a tensor of %lld elements.",
                         (long long)n);
    else
      tpu_op_check_index(c, idx[i], -n, n, TPU_OUT_OF_RANGE,
                         "%s(): index " TPU_OP_PAYLOAD " is out of bounds for dimension %lld with size %lld", c->name,
                         (long long)a->D[i], (long long)n);
    tpu_hlo_value_t w = ix_wrap(c, idx[i], n);
    w = tpu_hlo_broadcast_to(f, w, a->nb, a->B);
    parts[i] = ix_add_vec_dim(c, w);
  }
  a->coords = a->k == 1 ? parts[0] : tpu_hlo_concatenate(f, parts, a->k, a->nb);
  int adjacent = 1;
  for (int i = 1; i < a->k; i++) adjacent &= a->D[i] == a->D[i - 1] + 1;
  /* result layout */
  int o = 0;
  a->out.dtype = t->dtype;
  int64_t before = adjacent ? a->D[0] : 0;
  int pos = 0;
  for (int d = 0; d < a->R; d++) {
    int indexed = 0;
    for (int i = 0; i < a->k; i++) indexed |= a->D[i] == d;
    if (indexed) continue;
    int p = (d < before) ? pos : pos + a->nb;
    a->offset_dims[a->noffset++] = p;
    a->out.dims[p] = t->dims[d];
    pos++;
  }
  for (int i = 0; i < a->nb; i++) a->out.dims[before + i] = a->B[i];
  a->out.rank = a->nb + a->R - a->k;
  (void)o;
  return 1;
}

/* index (index.Tensor): inputs (self, idx...); attrs [present flag per dim of
 * the indices list (None -> 0)].  Integer indices only (the adapter converts
 * bool masks with nonzero).  Broadcast indices; the result dims go where
 * PyTorch puts them (in place when the indexed dims are adjacent, first
 * otherwise). */
static void rule_index(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  ix_adv_t a;
  if (!ix_adv_setup(c, &t, 1, 0, 0, &a)) return;
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  gd.noffset = a.noffset;
  memcpy(gd.offset_dims, a.offset_dims, sizeof(int64_t) * (size_t)a.noffset);
  gd.ncollapsed = a.k;
  gd.nstart_map = a.k;
  for (int i = 0; i < a.k; i++) gd.collapsed_slice_dims[i] = gd.start_index_map[i] = a.D[i];
  for (int d = 0; d < t.rank; d++) gd.slice_sizes[d] = t.dims[d];
  for (int i = 0; i < a.k; i++) gd.slice_sizes[a.D[i]] = 1;
  gd.index_vector_dim = a.nb;
  tpu_op_set_output(c, tpu_hlo_gather(c->f, c->in[0], a.coords, &gd));
}

/* index_put (and _index_put_impl_): inputs (self, values, idx...); attrs
 * [accumulate, present flag per dim...].  values broadcast to the shape of
 * self[indices]; accumulate adds (duplicates sum), otherwise replaces
 * (duplicate indices: one of the writes wins, unspecified which, as in
 * PyTorch). */
static void ix_index_put(tpu_op_ctx_t *c, int put) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int acc = (int)tpu_op_int(c, 0);
  ix_adv_t a;
  if (!ix_adv_setup(c, &t, 2, 1, put, &a)) return;
  tpu_hlo_type_t vt = tpu_op_type(c, c->in[1]);
  /* values must broadcast to out */
  if (vt.rank > a.out.rank) goto bad;
  for (int d = 0; d < vt.rank; d++) {
    int64_t v = vt.dims[d], o = a.out.dims[a.out.rank - vt.rank + d];
    if (v != o && v != 1) goto bad;
  }
  {
    tpu_hlo_value_t upd = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[1], t.dtype), a.out.rank, a.out.dims);
    tpu_hlo_scatter_dims_t sd;
    memset(&sd, 0, sizeof sd);
    sd.nwindow = a.noffset;
    memcpy(sd.update_window_dims, a.offset_dims, sizeof(int64_t) * (size_t)a.noffset);
    sd.ninserted = a.k;
    sd.nscatter_map = a.k;
    for (int i = 0; i < a.k; i++) sd.inserted_window_dims[i] = sd.scatter_dims_to_operand_dims[i] = a.D[i];
    sd.index_vector_dim = a.nb;
    const char *body = acc ? (t.dtype == TPU_PRED ? "or" : "add") : "replace";
    tpu_op_set_output(c, tpu_hlo_scatter(c->f, c->in[0], a.coords, upd, &sd, body));
    return;
  }
bad : {
  char b1[64], b2[64];
  tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s",
              c->name, tpu_op_shape_str(&vt, b1, sizeof b1), tpu_op_shape_str(&a.out, b2, sizeof b2));
}
}

static void rule_index_put(tpu_op_ctx_t *c) { ix_index_put(c, 0); }
/* put: index_put on the flattened self (inputs (self [n], source [L],
 * index [L]); attrs [accumulate, 1]), with put_'s message for a bad index. */
static void rule_put(tpu_op_ctx_t *c) { ix_index_put(c, 1); }

/* ---- shape rearrangements --------------------------------------------------------- */

static void ix_tri(tpu_op_ctx_t *c, int upper) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int64_t k = tpu_op_int(c, 0);
  if (t.rank < 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s: input tensor must have at least 2 dimensions", c->name,
                upper ? "triu" : "tril");
    return;
  }
  tpu_hlo_type_t it = t;
  it.dtype = TPU_S64;
  tpu_hlo_value_t diff = tpu_hlo_binary(f, "subtract", tpu_hlo_iota(f, it, t.rank - 1), tpu_hlo_iota(f, it, t.rank - 2));
  tpu_hlo_value_t keep = tpu_hlo_compare(f, upper ? "GE" : "LE", diff, tpu_hlo_constant_i64(f, it, k));
  tpu_op_set_output(c, tpu_hlo_select(f, keep, c->in[0], tpu_hlo_constant(f, t, 0.0)));
}

/* tril / triu: inputs (self); attrs [diagonal]. */
static void rule_tril(tpu_op_ctx_t *c) { ix_tri(c, 0); }
static void rule_triu(tpu_op_ctx_t *c) { ix_tri(c, 1); }

/* flip: inputs (self); attrs [dims...]. */
static void rule_flip(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int n = tpu_op_nints(c);
  int64_t dims[TPU_MAX_RANK];
  int seen[TPU_MAX_RANK] = {0};
  if (n > TPU_MAX_RANK) n = TPU_MAX_RANK;
  for (int i = 0; i < n; i++) {
    dims[i] = tpu_op_dim(c, tpu_op_int(c, i), t.rank);
    if (t.rank == 0) {
      tpu_op_set_output(c, c->in[0]);
      return;
    }
    if (seen[dims[i]]++) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: dim %lld appears multiple times in the list of dims", c->name,
                  (long long)dims[i]);
      return;
    }
  }
  tpu_op_set_output(c, n ? tpu_hlo_reverse(c->f, c->in[0], dims, n) : c->in[0]);
}

static tpu_hlo_value_t ix_roll1(tpu_op_ctx_t *c, tpu_hlo_value_t x, int dim, int64_t shift) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  int64_t S = t.dims[dim];
  if (S == 0) return x;
  int64_t s = ((shift % S) + S) % S;
  if (s == 0) return x;
  int64_t st[TPU_MAX_RANK] = {0}, lim[TPU_MAX_RANK], one[TPU_MAX_RANK];
  for (int i = 0; i < t.rank; i++) lim[i] = t.dims[i], one[i] = 1;
  st[dim] = S - s;
  tpu_hlo_value_t tail = tpu_hlo_slice(c->f, x, st, lim, one);
  st[dim] = 0;
  lim[dim] = S - s;
  tpu_hlo_value_t head = tpu_hlo_slice(c->f, x, st, lim, one);
  tpu_hlo_value_t parts[2] = {tail, head};
  return tpu_hlo_concatenate(c->f, parts, 2, dim);
}

/* roll: inputs (self); attrs [nshifts, shifts..., ndims, dims...]
 * (ndims 0: roll the flattened tensor by shifts[0]). */
static void rule_roll(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int64_t ns = tpu_op_int(c, 0), nd = tpu_op_int(c, 1 + ns);
  if (ns < 1 || ns > TPU_MAX_RANK) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: `shifts` required", c->name);
    return;
  }
  if (nd == 0) {
    if (ns != 1) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: shifts and dimensions must align. shifts: %lld, dims:0", c->name,
                  (long long)ns);
      return;
    }
    int64_t n = tpu_hlo_type_numel(&t);
    tpu_hlo_value_t flat = tpu_hlo_reshape(c->f, c->in[0], 1, &n);
    tpu_op_set_output(c, tpu_hlo_reshape(c->f, ix_roll1(c, flat, 0, tpu_op_int(c, 1)), t.rank, t.dims));
    return;
  }
  if (nd != ns) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: shifts and dimensions must align. shifts: %lld, dims:%lld", c->name,
                (long long)ns, (long long)nd);
    return;
  }
  tpu_hlo_value_t x = c->in[0];
  for (int i = 0; i < ns; i++) {
    int64_t d = tpu_op_dim(c, tpu_op_int(c, 2 + ns + i), t.rank);
    x = ix_roll1(c, x, (int)d, tpu_op_int(c, 1 + i));
  }
  tpu_op_set_output(c, x);
}

/* repeat: inputs (self); attrs [repeats...] (at least self's rank). */
static void rule_repeat(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int n = tpu_op_nints(c);
  if (n < t.rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor",
                c->name);
    return;
  }
  if (2 * n > TPU_MAX_RANK) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: repeat over more than %d dims", c->name, TPU_MAX_RANK / 2);
    return;
  }
  int64_t padded[TPU_MAX_RANK], big[TPU_MAX_RANK], map[TPU_MAX_RANK], res[TPU_MAX_RANK];
  for (int i = 0; i < n; i++) {
    int64_t r = tpu_op_int(c, i);
    if (r < 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Trying to create tensor with negative dimension %lld", c->name,
                  (long long)r);
      return;
    }
    padded[i] = i < n - t.rank ? 1 : t.dims[i - (n - t.rank)];
    big[2 * i] = r;
    big[2 * i + 1] = padded[i];
    map[i] = 2 * i + 1;
    res[i] = r * padded[i];
  }
  tpu_hlo_value_t x = tpu_hlo_reshape(c->f, c->in[0], n, padded);
  x = tpu_hlo_broadcast_in_dim(c->f, x, tpu_hlo_type_make(t.dtype, 2 * n, big), map);
  tpu_op_set_output(c, tpu_hlo_reshape(c->f, x, n, res));
}

/* unfold_backward: grad [in_sizes with dim -> nwin, size]; ints [dim, size,
 * step, rank, in_sizes[rank]] -> [in_sizes] (window overlaps summed). */
static void rule_unfold_backward(tpu_op_ctx_t *c) {
  int64_t dim = tpu_op_int(c, 0), size = tpu_op_int(c, 1), step = tpu_op_int(c, 2), rank = tpu_op_int(c, 3);
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]);
  if (rank < 1 || rank > TPU_MAX_RANK - 1 || gt.rank != rank + 1 || dim < 0 || dim >= rank || step < 1) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "unfold_backward: unsupported shapes");
    return;
  }
  int64_t in[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) in[i] = tpu_op_int(c, 4 + i);
  int64_t nwin = gt.dims[dim];
  if (gt.dims[rank] != size) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "unfold_backward: window size mismatch");
    return;
  }
  tpu_dtype_t dt = gt.dtype;
  V g = tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(dt));
  /* [.., nwin, .., size] -> [.., nwin, size, ..] -> [.., nwin*size, ..] */
  int64_t perm[TPU_MAX_RANK], d[TPU_MAX_RANK];
  int k = 0;
  for (int i = 0; i < rank; i++) {
    perm[k++] = i;
    if (i == dim) perm[k++] = rank;
  }
  g = tpu_hlo_transpose(c->f, g, perm);
  for (int i = 0; i < rank; i++) d[i] = i == dim ? nwin * size : gt.dims[i];
  g = tpu_hlo_reshape(c->f, g, (int)rank, d);
  int64_t *idx = tpu_op_index_table(c, nwin * size);
  if (!idx) return;
  for (int64_t wi = 0; wi < nwin; wi++)
    for (int64_t j = 0; j < size; j++) idx[wi * size + j] = wi * step + j;
  V z = tpu_hlo_constant(c->f, tpu_hlo_type_make(tpu_op_opmath(dt), (int)rank, in), 0.0);
  tpu_op_finish(c, tpu_op_put_const(c, z, (int)dim, idx, nwin * size, g, "add"), dt);
  free(idx);
}

const tpu_op_rule_t tpu_rules_index[] = {
    {"cat", rule_cat, 1, -1},
    {"index_select", rule_index_select, 2, 2},
    {"gather", rule_gather, 2, 2},
    {"take", rule_take, 2, 2},
    {"scatter", rule_scatter, 3, 3},
    {"scatter_add", rule_scatter_add, 3, 3},
    {"scatter_reduce", rule_scatter_reduce, 3, 3},
    {"index_reduce", rule_index_reduce, 3, 3},
    {"index_add", rule_index_add, 4, 4},
    {"index_copy", rule_index_copy, 3, 3},
    {"index_fill", rule_index_fill, 3, 3},
    {"index", rule_index, 2, -1},
    {"index_put", rule_index_put, 3, -1},
    {"put", rule_put, 3, 3},
    {"tril", rule_tril, 1, 1},
    {"triu", rule_triu, 1, 1},
    {"flip", rule_flip, 1, 1},
    {"roll", rule_roll, 1, 1},
    {"repeat", rule_repeat, 1, 1},
    {"unfold_backward", rule_unfold_backward, 1, 1},
    {NULL, NULL, 0, 0},
};
