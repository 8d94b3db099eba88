/* linalg.c - matrix products, and the grouped matmul of Mixture-of-Experts
 * layers (see ops.h for how a rule is written).
 *
 * Every product is one stablehlo.dot_general.  bf16/f16 operands accumulate
 * in f32 (dot_general result type f32, then one convert), as PyTorch CPU
 * does; the add/scale of the addmm family also runs in f32 and rounds once.
 *
 * The addmm family takes beta and alpha as runtime 0-d inputs (any numeric
 * dtype; converted to the compute type).  As in PyTorch, beta == 0 ignores
 * `self` entirely (NaN/inf in self do not propagate): the rule selects 0 at
 * run time when beta is 0, so one program serves every beta.
 *
 * Products of integer tensors are computed in the integer type (wraps like
 * PyTorch); complex products are dot_generals of complex operands; bool is
 * rejected with PyTorch's message.
 *
 * The `matmul` rule implements numpy/PyTorch matmul (1-d promotion, batch
 * broadcasting) in one dot_general; aten::matmul itself is
 * CompositeImplicitAutograd (it decomposes into mm/bmm/_unsafe_view before
 * reaching a backend) so eager never calls it, but torch.compile graphs may.
 */
#include <stdio.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* ---- helpers ------------------------------------------------------------- */

static int la_check_dtype(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (dt == TPU_PRED || dt == TPU_DTYPE_INVALID) { /* complex: dot_general takes it */
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: \"%s\" not implemented for '%s'", c->name, c->name,
                tpu_dtype_scalar_type(dt));
    return 0;
  }
  return 1;
}

static int la_same_dtype(tpu_op_ctx_t *c, const tpu_hlo_type_t *a, const tpu_hlo_type_t *b) {
  if (a->dtype != b->dtype) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: expected m1 and m2 to have the same dtype, but got: %s != %s", c->name,
                tpu_dtype_name(a->dtype), tpu_dtype_name(b->dtype));
    return 0;
  }
  return la_check_dtype(c, a->dtype);
}

/* A dot_general in the accumulation type. */
static tpu_hlo_value_t la_dot(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b, const tpu_hlo_dot_dims_t *dd) {
  const tpu_hlo_type_t *ta = tpu_hlo_type_of(c->f, a);
  if (!ta) return TPU_HLO_NONE;
  tpu_dtype_t acc = tpu_op_opmath(ta->dtype);
  return tpu_hlo_dot_general(c->f, a, b, dd, acc == ta->dtype ? TPU_DTYPE_INVALID : acc);
}

/* out = beta * self + alpha * prod, with beta == 0 ignoring self.  prod is
 * in the accumulation type; result converted to out_dt.  Inputs: self at
 * index is, beta at ib, alpha at ia. */
static void la_finish_add(tpu_op_ctx_t *c, tpu_hlo_value_t prod, int is, int ib, int ia, tpu_dtype_t out_dt) {
  tpu_hlo_func_t *f = c->f;
  const tpu_hlo_type_t *tp = tpu_hlo_type_of(f, prod);
  if (!tp) return;
  tpu_hlo_type_t pt = *tp;
  tpu_dtype_t acc = pt.dtype;
  const tpu_hlo_type_t *ts = tpu_op_in_type(c, is);
  /* self must broadcast to the product's shape (not the other way). */
  if (ts->rank > pt.rank) goto bad;
  for (int d = 0; d < ts->rank; d++) {
    int64_t sd = ts->dims[d], od = pt.dims[pt.rank - ts->rank + d];
    if (sd != od && sd != 1) goto bad;
  }
  {
    tpu_hlo_value_t self = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[is], acc), pt.rank, pt.dims);
    tpu_hlo_value_t beta = tpu_op_scalar_as(c, c->in[ib], acc, &pt);
    tpu_hlo_value_t alpha = tpu_op_scalar_as(c, c->in[ia], acc, &pt);
    tpu_hlo_value_t zero = tpu_hlo_constant(f, pt, 0.0);
    tpu_hlo_value_t bs = tpu_hlo_binary(f, "multiply", beta, self);
    bs = tpu_hlo_select(f, tpu_hlo_compare(f, "EQ", beta, zero), zero, bs);
    tpu_hlo_value_t r = tpu_hlo_binary(f, "add", bs, tpu_hlo_binary(f, "multiply", alpha, prod));
    tpu_op_set_output(c, tpu_hlo_cast(f, r, out_dt));
    return;
  }
bad : {
  char b1[128], b2[128];
  tpu_op_fail(c, TPU_INVALID_ARGUMENT,
              "%s: The expanded size of the tensor (%s) is incompatible with the product of shape %s",
              c->name, tpu_op_shape_str(ts, b1, sizeof b1), tpu_op_shape_str(&pt, b2, sizeof b2));
}
}

/* [n,k] x [k,m] (batch dims: nb leading) -> product in the acc type. */
static tpu_hlo_value_t la_batched_mm(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b, int nb) {
  /* mat2 a transposed view of a row-major weight (nn.Linear): x @ W^T */
  tpu_hlo_value_t w = nb == 0 ? tpu_hlo_swapped_source(c->f, b) : TPU_HLO_NONE;
  if (w != TPU_HLO_NONE) {
    const tpu_hlo_type_t *ta = tpu_hlo_type_of(c->f, a);
    tpu_dtype_t acc = ta ? tpu_op_opmath(ta->dtype) : TPU_DTYPE_INVALID;
    return tpu_op_mm_nt(c, a, w, ta && acc != ta->dtype ? acc : TPU_DTYPE_INVALID);
  }
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.nbatch = nb;
  for (int i = 0; i < nb; i++) dd.lhs_batch[i] = dd.rhs_batch[i] = i;
  dd.ncontract = 1;
  dd.lhs_contract[0] = nb + 1;
  dd.rhs_contract[0] = nb;
  return la_dot(c, a, b, &dd);
}

static int la_check_mm(tpu_op_ctx_t *c, const tpu_hlo_type_t *a, const tpu_hlo_type_t *b, int nb,
                       const char *an, const char *bn) {
  if (a->rank != nb + 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s must be a %s, got %dD tensor", c->name, an,
                nb ? "3D tensor" : "matrix", a->rank);
    return 0;
  }
  if (b->rank != nb + 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s must be a %s, got %dD tensor", c->name, bn,
                nb ? "3D tensor" : "matrix", b->rank);
    return 0;
  }
  if (nb && a->dims[0] != b->dims[0]) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] but "
                "got: [%lld, %lld].",
                c->name, (long long)a->dims[0], (long long)a->dims[2], (long long)b->dims[0],
                (long long)b->dims[1]);
    return 0;
  }
  if (a->dims[nb + 1] != b->dims[nb]) {
    if (nb) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] "
                  "but got: [%lld, %lld].",
                  c->name, (long long)a->dims[0], (long long)a->dims[2], (long long)b->dims[0],
                  (long long)b->dims[1]);
    } else {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                  c->name, (long long)a->dims[0], (long long)a->dims[1], (long long)b->dims[0],
                  (long long)b->dims[1]);
    }
    return 0;
  }
  return la_same_dtype(c, a, b);
}

/* ---- rules ------------------------------------------------------------------ */

/* mm: inputs (self [n,k], mat2 [k,m]) -> [n,m].  No attrs. */
static void rule_mm(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *a = tpu_op_in_type(c, 0), *b = tpu_op_in_type(c, 1);
  if (!la_check_mm(c, a, b, 0, "self", "mat2")) return;
  tpu_op_set_output(c, tpu_hlo_cast(c->f, la_batched_mm(c, c->in[0], c->in[1], 0), a->dtype));
}

/* bmm: inputs (self [b,n,k], mat2 [b,k,m]) -> [b,n,m].  No attrs. */
static void rule_bmm(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *a = tpu_op_in_type(c, 0), *b = tpu_op_in_type(c, 1);
  if (!la_check_mm(c, a, b, 1, "batch1", "batch2")) return;
  tpu_op_set_output(c, tpu_hlo_cast(c->f, la_batched_mm(c, c->in[0], c->in[1], 1), a->dtype));
}

/* addmm: inputs (self, mat1 [n,k], mat2 [k,m], beta, alpha) ->
 * beta*self + alpha*(mat1@mat2), self broadcast to [n,m].  No attrs. */
static void rule_addmm(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *a = tpu_op_in_type(c, 1), *b = tpu_op_in_type(c, 2);
  if (!la_check_mm(c, a, b, 0, "mat1", "mat2")) return;
  la_finish_add(c, la_batched_mm(c, c->in[1], c->in[2], 0), 0, 3, 4, a->dtype);
}

/* baddbmm: inputs (self, batch1 [b,n,k], batch2 [b,k,m], beta, alpha). */
static void rule_baddbmm(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *a = tpu_op_in_type(c, 1), *b = tpu_op_in_type(c, 2);
  if (!la_check_mm(c, a, b, 1, "batch1", "batch2")) return;
  la_finish_add(c, la_batched_mm(c, c->in[1], c->in[2], 1), 0, 3, 4, a->dtype);
}

/* addbmm: inputs (self, batch1 [b,n,k], batch2 [b,k,m], beta, alpha) ->
 * beta*self + alpha*sum_b(batch1[b]@batch2[b]) : [n,m]. */
static void rule_addbmm(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *a = tpu_op_in_type(c, 1), *b = tpu_op_in_type(c, 2);
  if (!la_check_mm(c, a, b, 1, "batch1", "batch2")) return;
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 2;
  dd.lhs_contract[0] = 0;
  dd.lhs_contract[1] = 2;
  dd.rhs_contract[0] = 0;
  dd.rhs_contract[1] = 1;
  la_finish_add(c, la_dot(c, c->in[1], c->in[2], &dd), 0, 3, 4, a->dtype);
}

static int la_check_mv(tpu_op_ctx_t *c, const tpu_hlo_type_t *m, const tpu_hlo_type_t *v) {
  if (m->rank != 2 || v->rank != 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: vector + matrix @ vector expected, got %d, %d", c->name,
                m->rank, v->rank);
    return 0;
  }
  if (m->dims[1] != v->dims[0]) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: size mismatch, got input (%lld), mat (%lldx%lld), vec (%lld)",
                c->name, (long long)m->dims[0], (long long)m->dims[0], (long long)m->dims[1],
                (long long)v->dims[0]);
    return 0;
  }
  return la_same_dtype(c, m, v);
}

static tpu_hlo_value_t la_mv(tpu_op_ctx_t *c, tpu_hlo_value_t m, tpu_hlo_value_t v) {
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 1;
  dd.lhs_contract[0] = 1;
  dd.rhs_contract[0] = 0;
  return la_dot(c, m, v, &dd);
}

/* mv: inputs (self [n,m], vec [m]) -> [n]. */
static void rule_mv(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *m = tpu_op_in_type(c, 0), *v = tpu_op_in_type(c, 1);
  if (!la_check_mv(c, m, v)) return;
  tpu_op_set_output(c, tpu_hlo_cast(c->f, la_mv(c, c->in[0], c->in[1]), m->dtype));
}

/* addmv: inputs (self, mat [n,m], vec [m], beta, alpha) -> [n]. */
static void rule_addmv(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *m = tpu_op_in_type(c, 1), *v = tpu_op_in_type(c, 2);
  if (!la_check_mv(c, m, v)) return;
  la_finish_add(c, la_mv(c, c->in[1], c->in[2]), 0, 3, 4, m->dtype);
}

/* dot / vdot (real types: identical): inputs (self [n], other [n]) -> 0-d. */
static void rule_dot(tpu_op_ctx_t *c) {
  const tpu_hlo_type_t *a = tpu_op_in_type(c, 0), *b = tpu_op_in_type(c, 1);
  if (a->rank != 1 || b->rank != 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: 1D tensors expected, but got %dD and %dD tensors", c->name,
                a->rank, b->rank);
    return;
  }
  if (a->dims[0] != b->dims[0]) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the same "
                "number of elements, but got %lld and %lld elements respectively",
                c->name, (long long)a->dims[0], (long long)b->dims[0], (long long)a->dims[0],
                (long long)b->dims[0]);
    return;
  }
  if (a->dtype != b->dtype) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: dot : expected both vectors to have same dtype, but found %s and %s", c->name,
                tpu_dtype_scalar_type(a->dtype), tpu_dtype_scalar_type(b->dtype));
    return;
  }
  if (!la_check_dtype(c, a->dtype)) return;
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 1;
  tpu_op_set_output(c, tpu_hlo_cast(c->f, la_dot(c, c->in[0], c->in[1], &dd), a->dtype));
}

/* outer / ger: inputs (self [n], vec2 [m]) -> [n,m] (elementwise product,
 * both operands already of the result dtype). */
static tpu_hlo_value_t la_outer(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b, tpu_dtype_t dt) {
  const tpu_hlo_type_t *ta = tpu_hlo_type_of(c->f, a), *tb = tpu_hlo_type_of(c->f, b);
  if (!ta || !tb) return TPU_HLO_NONE;
  if (ta->rank != 1 || tb->rank != 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: outer: Expected 1-D argument self, but got %dD", c->name,
                ta->rank != 1 ? ta->rank : tb->rank);
    return TPU_HLO_NONE;
  }
  int64_t d[2] = {ta->dims[0], tb->dims[0]};
  tpu_hlo_type_t t = tpu_hlo_type_make(dt, 2, d);
  int64_t d0 = 0, d1 = 1;
  tpu_hlo_value_t A = tpu_hlo_broadcast_in_dim(c->f, tpu_hlo_cast(c->f, a, dt), t, &d0);
  tpu_hlo_value_t B = tpu_hlo_broadcast_in_dim(c->f, tpu_hlo_cast(c->f, b, dt), t, &d1);
  return tpu_hlo_binary(c->f, dt == TPU_PRED ? "and" : "multiply", A, B);
}

/* outer: inputs (self [n], vec2 [m]); attrs [dtype] (result dtype). */
static void rule_outer(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);
  tpu_op_set_output(c, la_outer(c, c->in[0], c->in[1], dt));
}

/* addr: inputs (self, vec1 [n], vec2 [m], beta, alpha); attrs [dtype]
 * (result dtype) -> beta*self + alpha*outer(vec1, vec2). */
static void rule_addr(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = (tpu_dtype_t)tpu_op_int(c, 0);
  if (!la_check_dtype(c, dt)) return;
  tpu_dtype_t acc = tpu_op_opmath(dt);
  la_finish_add(c, la_outer(c, c->in[1], c->in[2], acc), 0, 3, 4, dt);
}

/* matmul: inputs (a, b), ranks >= 1, numpy semantics (1-d operands are
 * promoted and the added dim removed; batch dims broadcast).  No attrs. */
static void rule_matmul(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t a = *tpu_op_in_type(c, 0), b = *tpu_op_in_type(c, 1);
  if (a.rank < 1 || b.rank < 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: both arguments to matmul need to be at least 1D, but they are %dD and %dD", c->name,
                a.rank, b.rank);
    return;
  }
  if (!la_same_dtype(c, &a, &b)) return;
  tpu_hlo_value_t av = c->in[0], bv = c->in[1];
  int a1 = a.rank == 1, b1 = b.rank == 1;
  if (a1 && b1) {
    rule_dot(c);
    return;
  }
  if (a1) { /* [k] -> [1,k] */
    int64_t d[2] = {1, a.dims[0]};
    av = tpu_hlo_reshape(f, av, 2, d);
    a = tpu_hlo_type_make(a.dtype, 2, d);
  }
  if (b1) { /* [k] -> [k,1] */
    int64_t d[2] = {b.dims[0], 1};
    bv = tpu_hlo_reshape(f, bv, 2, d);
    b = tpu_hlo_type_make(b.dtype, 2, d);
  }
  int64_t n = a.dims[a.rank - 2], k = a.dims[a.rank - 1], k2 = b.dims[b.rank - 2], m = b.dims[b.rank - 1];
  if (k != k2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                c->name, (long long)n, (long long)k, (long long)k2, (long long)m);
    return;
  }
  /* broadcast batch dims */
  int ra = a.rank - 2, rb = b.rank - 2, nb = ra > rb ? ra : rb;
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - ra), ib = i - (nb - rb);
    int64_t x = ia >= 0 ? a.dims[ia] : 1, y = ib >= 0 ? b.dims[ib] : 1;
    if (x != y && x != 1 && y != 1) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                  "non-singleton dimension %d",
                  c->name, (long long)x, (long long)y, i);
      return;
    }
    bd[i] = x == 1 ? y : x;
  }
  int64_t da[TPU_MAX_RANK], db[TPU_MAX_RANK];
  memcpy(da, bd, sizeof(int64_t) * (size_t)nb);
  memcpy(db, bd, sizeof(int64_t) * (size_t)nb);
  da[nb] = n; da[nb + 1] = k;
  db[nb] = k; db[nb + 1] = m;
  av = tpu_hlo_broadcast_to(f, av, nb + 2, da);
  bv = tpu_hlo_broadcast_to(f, bv, nb + 2, db);
  tpu_hlo_value_t r = tpu_hlo_cast(f, la_batched_mm(c, av, bv, nb), a.dtype);
  /* drop promoted dims */
  int64_t od[TPU_MAX_RANK];
  int orank = 0;
  for (int i = 0; i < nb; i++) od[orank++] = bd[i];
  if (!a1) od[orank++] = n;
  if (!b1) od[orank++] = m;
  if (a1 || b1) r = tpu_hlo_reshape(f, r, orank, od);
  tpu_op_set_output(c, r);
}

/* ---- grouped matrix multiply --------------------------------------------- */

/* Grouped matrix multiply (torch._grouped_mm, F.grouped_mm), the kernel of
 * Mixture-of-Experts layers.
 * Groups are given by `offs` (int32, monotone): group g covers positions
 * [offs[g-1], offs[g]) of the jagged dimension (offs[-1] = 0 before the
 * first group); positions at or past offs[G-1] belong to no group and give
 * zeros (CUDA and CPU leave them unwritten).  The layouts, as PyTorch's:
 *
 *   a [S, K]    b [G, K, N]  offs [G]  -> [S, N]     rows of a are jagged
 *   a [M, K]    b [K, N]     offs [G]  -> [G, M, N]  the contraction is jagged
 *   a [G, M, K] b [K, N]     offs [G]  -> [M, N]     columns of b are jagged
 *   a [G, M, K] b [G, K, N]  no offs   -> [G, M, N]  a batched matmul
 *
 * Offsets are device values, so the groups cannot become static slices:
 * each case is one dense dot_general over every group followed by a
 * group-membership mask (a select) and a sum over groups (or a mask on the
 * contraction).  That is G times the FLOPs of the jagged product, but it is
 * one static-shape program with no host read of the offsets, under eager and
 * torch.compile alike; MoE layers have few experts per device. */

/* mask [G, L] (i1): position l is in group g.  offs: [G] integer values. */
static V gmm_group_mask(tpu_op_ctx_t *c, V offs, int64_t G, int64_t L) {
  tpu_hlo_func_t *f = c->f;
  V end = tpu_hlo_cast(f, offs, TPU_S64);
  V start;
  if (G == 1) {
    start = tpu_hlo_constant(f, tpu_hlo_type_make(TPU_S64, 1, &G), 0);
  } else {
    int64_t lo = 0, hi = G - 1, one = 1, st = 1;
    V head = tpu_hlo_slice(f, end, &lo, &hi, &st); /* offs[0 .. G-2] */
    V zero = tpu_hlo_constant(f, tpu_hlo_type_make(TPU_S64, 1, &one), 0);
    V parts[2] = {zero, head};
    start = tpu_hlo_concatenate(f, parts, 2, 0);
  }
  int64_t dims[2] = {G, L};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_S64, 2, dims);
  int64_t d0 = 0;
  V pos = tpu_hlo_iota(f, t, 1);
  V s = tpu_hlo_broadcast_in_dim(f, start, t, &d0);
  V e = tpu_hlo_broadcast_in_dim(f, end, t, &d0);
  return tpu_hlo_binary(f, "and", tpu_hlo_compare(f, "GE", pos, s), tpu_hlo_compare(f, "LT", pos, e));
}

/* Zeroes x [.., G at dim gdim, .., L at dim ldim, ..] where position l is
 * not in group g. */
static V gmm_apply_mask(tpu_op_ctx_t *c, V x, V mask, int64_t gdim, int64_t ldim) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  tpu_hlo_type_t mt = t;
  mt.dtype = TPU_PRED;
  int64_t dims[2] = {gdim, ldim};
  V m = tpu_hlo_broadcast_in_dim(c->f, mask, mt, dims);
  return tpu_hlo_select(c->f, m, x, tpu_hlo_constant(c->f, t, 0));
}

/* grouped_mm: a, b[, offs]; ints [out dtype (0: a's)]. */
static void rule_grouped_mm(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t at = tpu_op_type(c, c->in[0]);
  tpu_hlo_type_t bt = tpu_op_type(c, c->in[1]);
  tpu_dtype_t out_dt = tpu_op_nints(c) > 0 && tpu_op_int(c, 0) ? (tpu_dtype_t)tpu_op_int(c, 0) : at.dtype;
  int has_offs = c->nin > 2;
  char ab[96], bb[96];
  tpu_op_shape_str(&at, ab, sizeof ab);
  tpu_op_shape_str(&bt, bb, sizeof bb);
  if (at.dtype != bt.dtype || !tpu_dtype_is_float(at.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: expected floating operands of one dtype, got %s and %s",
                tpu_dtype_name(at.dtype), tpu_dtype_name(bt.dtype));
    return;
  }
  if ((at.rank != 2 && at.rank != 3) || (bt.rank != 2 && bt.rank != 3)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: Multiplicands must be 2D or 3D but got mat_a.dim()=%d and "
                "mat_b.dim()=%d", at.rank, bt.rank);
    return;
  }
  if ((at.rank == 2 || bt.rank == 2) != has_offs) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, has_offs ? "grouped_mm: Offsets tensor provided, but is not needed for "
                "3D/3D multiplicand layouts." : "grouped_mm: Offsets tensor not provided, but is needed for %dD/%dD "
                "multiplicand layouts.", at.rank, bt.rank);
    return;
  }
  int64_t G = 0;
  if (has_offs) {
    tpu_hlo_type_t ot = tpu_op_type(c, c->in[2]);
    if (ot.rank != 1 || !tpu_dtype_is_int(ot.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: Offsets tensor must be a 1D integer (int32) tensor");
      return;
    }
    G = ot.dims[0];
  }
  int64_t ka = at.dims[at.rank - 1], kb = bt.dims[bt.rank - 2];
  if (ka != kb) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: contraction dimension of mat_a and mat_b must match "
                "(mat_a %s, mat_b %s)", ab, bb);
    return;
  }
  /* half operands accumulate in f32, as linalg.c's products */
  tpu_dtype_t acc = (at.dtype == TPU_F16 || at.dtype == TPU_BF16) ? TPU_F32 : TPU_DTYPE_INVALID;
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 1;
  V res;
  V a = c->in[0], b = c->in[1];
  if (at.rank == 2 && bt.rank == 3) {
    /* [S, K] x [G, K, N] -> [S, G, N], keep g == group(row), sum over G */
    if (bt.dims[0] != G) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: mat_b has %lld groups but offs has %lld",
                  (long long)bt.dims[0], (long long)G);
      return;
    }
    dd.lhs_contract[0] = 1;
    dd.rhs_contract[0] = 1;
    V all = tpu_hlo_dot_general(f, a, b, &dd, acc);
    V mask = gmm_group_mask(c, c->in[2], G, at.dims[0]);
    res = tpu_op_sum(c, gmm_apply_mask(c, all, mask, 1, 0), (int64_t[]){1}, 1);
  } else if (at.rank == 2 && bt.rank == 2) {
    /* [M, K] x [K, N], K jagged -> [G, M, N]: a masked per group, then one dot */
    int64_t M = at.dims[0], K = at.dims[1];
    int64_t gdims[3] = {G, M, K}, keep[2] = {1, 2};
    V ag = tpu_hlo_broadcast_in_dim(f, a, tpu_hlo_type_make(at.dtype, 3, gdims), keep);
    V mask = gmm_group_mask(c, c->in[2], G, K);
    ag = gmm_apply_mask(c, ag, mask, 0, 2);
    dd.lhs_contract[0] = 2;
    dd.rhs_contract[0] = 0;
    res = tpu_hlo_dot_general(f, ag, b, &dd, acc);
  } else if (at.rank == 3 && bt.rank == 2) {
    /* [G, M, K] x [K, N], N jagged -> [G, M, N] masked on (g, n), summed over G */
    if (at.dims[0] != G) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: mat_a has %lld groups but offs has %lld",
                  (long long)at.dims[0], (long long)G);
      return;
    }
    dd.lhs_contract[0] = 2;
    dd.rhs_contract[0] = 0;
    V all = tpu_hlo_dot_general(f, a, b, &dd, acc);
    V mask = gmm_group_mask(c, c->in[2], G, bt.dims[1]);
    res = tpu_op_sum(c, gmm_apply_mask(c, all, mask, 0, 2), (int64_t[]){0}, 1);
  } else {
    if (at.dims[0] != bt.dims[0]) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: batch sizes of mat_a %s and mat_b %s must match", ab, bb);
      return;
    }
    dd.nbatch = 1;
    dd.lhs_batch[0] = 0;
    dd.rhs_batch[0] = 0;
    dd.lhs_contract[0] = 2;
    dd.rhs_contract[0] = 1;
    res = tpu_hlo_dot_general(f, a, b, &dd, acc);
  }
  tpu_op_set_output(c, tpu_hlo_cast(f, res, out_dt));
}

const tpu_op_rule_t tpu_rules_linalg[] = {
    {"mm", rule_mm, 2, 2},
    {"bmm", rule_bmm, 2, 2},
    {"addmm", rule_addmm, 5, 5},
    {"baddbmm", rule_baddbmm, 5, 5},
    {"addbmm", rule_addbmm, 5, 5},
    {"mv", rule_mv, 2, 2},
    {"addmv", rule_addmv, 5, 5},
    {"dot", rule_dot, 2, 2},
    {"vdot", rule_dot, 2, 2},
    {"outer", rule_outer, 2, 2},
    {"addr", rule_addr, 5, 5},
    {"matmul", rule_matmul, 2, 2},
    {"grouped_mm", rule_grouped_mm, 2, 3},
    {NULL, NULL, 0, 0},
};
