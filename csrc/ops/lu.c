/* lu.c - the LU factorization with partial pivoting and LAPACK's pivots and
 * error report (linalg_lu_factor_ex; lu_solve, solve, inv, det and slogdet
 * are built on it in torch_tpu/ops/cholesky.py), and the permutation that
 * LAPACK's pivots stand for.  See ops.h for how a rule is written.
 *
 * One stablehlo.while over the columns (right-looking getf2): in column k the
 * pivot is the first row p >= k of largest magnitude (LAPACK's idamax); rows
 * k and p swap (by selects: exact), the rows below k are scaled by 1/pivot
 * and the trailing matrix takes the rank-1 update.  A zero pivot leaves the
 * column unscaled, as LAPACK, and sets info = k+1 (the first such k).
 * O(n^3) work in n steps whatever the batch. */
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* x [B, n, n]: the row `p` (s64 [B]) of each matrix, [B, n]; a select and a
 * sum over rows, so the row is copied exactly (no products with 0). */
static V row_at(tpu_op_ctx_t *c, V x, V p, int64_t B, int64_t n, tpu_dtype_t dt) {
  int64_t d3[3] = {B, n, n}, keep0 = 0, one = 1;
  tpu_hlo_type_t i3 = tpu_hlo_type_make(TPU_S64, 3, d3);
  V rows = tpu_hlo_iota(c->f, i3, 1);
  V pb = tpu_hlo_broadcast_in_dim(c->f, p, i3, &keep0);
  V z = tpu_hlo_constant(c->f, tpu_hlo_type_make(dt, 3, d3), 0);
  return tpu_hlo_reduce(c->f, SEL(c, CMP(c, "EQ", rows, pb), x, z), tpu_hlo_scalar(c->f, dt, 0), &one, 1, "add");
}

/* lu_factor: a [*, n, n] (f32 / f64).  -> (LU [*, n, n] (L's unit diagonal
 * implied), pivots s32 [*, n] (1-based, LAPACK's), info s32 [*]). */
static void rule_lu_factor(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  char sb[96];
  if (t.rank < 2 || t.dims[t.rank - 1] != t.dims[t.rank - 2]) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "lu_factor: A must be batches of square matrices, but they are %s",
                tpu_op_shape_str(&t, sb, sizeof sb));
    return;
  }
  if (t.dtype != TPU_F32 && t.dtype != TPU_F64) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "lu_factor: %s input (float32 and float64 on the device)",
                tpu_dtype_name(t.dtype));
    return;
  }
  int64_t n = t.dims[t.rank - 1], B = 1;
  for (int i = 0; i < t.rank - 2; i++) B *= t.dims[i];
  tpu_hlo_type_t pt = tpu_hlo_type_make(TPU_S32, t.rank - 1, t.dims);
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S32, t.rank - 2, t.dims);
  if (n == 0 || B == 0) {
    V outs[3] = {tpu_hlo_constant(f, t, 0), tpu_hlo_constant(f, pt, 0), tpu_hlo_constant(f, it, 0)};
    tpu_op_set_outputs(c, 3, outs);
    return;
  }
  int64_t d3[3] = {B, n, n}, d2[2] = {B, n}, keep0 = 0, one = 1;
  tpu_hlo_type_t t3 = tpu_hlo_type_make(t.dtype, 3, d3), t2 = tpu_hlo_type_make(t.dtype, 2, d2);
  tpu_hlo_type_t i3 = tpu_hlo_type_make(TPU_S64, 3, d3), i2 = tpu_hlo_type_make(TPU_S64, 2, d2);
  tpu_hlo_type_t bt = tpu_hlo_type_make(TPU_S32, 1, &B);
  enum { K, A, PIV, INFO, NV };
  V init[NV] = {tpu_hlo_scalar(f, TPU_S64, 0), tpu_hlo_reshape(f, c->in[0], 3, d3),
                tpu_hlo_constant(f, tpu_hlo_type_make(TPU_S32, 2, d2), 0), tpu_hlo_constant(f, bt, 0)};
  V arg[NV], next[NV], res[NV];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, NV, arg)) return;
  if (!tpu_hlo_while_body(f, &w, CMP(c, "LT", arg[K], tpu_hlo_scalar(f, TPU_S64, (double)n)), arg)) return;
  V k = arg[K], z = tpu_hlo_scalar(f, TPU_S64, 0), a = arg[A];
  V k2 = tpu_hlo_broadcast_to(f, k, 2, d2), k3 = tpu_hlo_broadcast_to(f, k, 3, d3);
  V r2 = tpu_hlo_iota(f, i2, 1);                          /* row (or column) number, [B, n] */
  V r3 = tpu_hlo_iota(f, i3, 1), c3 = tpu_hlo_iota(f, i3, 2); /* row / column numbers, [B, n, n] */
  /* pivot: the first row >= k of largest |a[:, k]| (rows above k count -1) */
  V col = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, a, (V[]){z, z, k}, (int64_t[]){B, n, 1}), 2, d2);
  V mag = SEL(c, CMP(c, "GE", r2, k2), UN(c, "abs", col), tpu_hlo_constant(f, t2, -1));
  V best = tpu_hlo_reduce(f, mag, tpu_hlo_scalar(f, t.dtype, -1), &one, 1, "maximum");
  V hit = CMP(c, "EQ", mag, tpu_hlo_broadcast_in_dim(f, best, t2, &keep0));
  V p = tpu_hlo_reduce(f, SEL(c, hit, r2, tpu_hlo_constant_i64(f, i2, n)), tpu_hlo_scalar(f, TPU_S64, (double)n),
                       &one, 1, "minimum");
  p = SEL(c, CMP(c, "LT", p, tpu_hlo_constant_i64(f, tpu_hlo_type_make(TPU_S64, 1, &B), n)), p,
          tpu_hlo_broadcast_to(f, k, 1, &B)); /* a NaN column: no swap */
  /* swap rows k and p */
  V rowk = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, a, (V[]){z, k, z}, (int64_t[]){B, 1, n}), 2, d2);
  V rowp = row_at(c, a, p, B, n, t.dtype);
  V p3 = tpu_hlo_broadcast_in_dim(f, p, i3, &keep0);
  V rowk3 = tpu_hlo_broadcast_in_dim(f, rowk, t3, (int64_t[]){0, 2});
  V rowp3 = tpu_hlo_broadcast_in_dim(f, rowp, t3, (int64_t[]){0, 2});
  a = SEL(c, CMP(c, "EQ", r3, k3), rowp3, SEL(c, CMP(c, "EQ", r3, p3), rowk3, a));
  /* eliminate below the pivot */
  V d = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, rowp, (V[]){z, k}, (int64_t[]){B, 1}), 1, &B);
  V zero_piv = CMP(c, "EQ", d, tpu_hlo_constant(f, tpu_hlo_type_make(t.dtype, 1, &B), 0));
  V safe = SEL(c, zero_piv, tpu_hlo_constant(f, tpu_hlo_type_make(t.dtype, 1, &B), 1), d);
  V colk = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, a, (V[]){z, z, k}, (int64_t[]){B, n, 1}), 2, d2);
  V below = CMP(c, "GT", r2, k2);
  V l = SEL(c, below, DIV(c, colk, tpu_hlo_broadcast_in_dim(f, safe, t2, &keep0)), tpu_hlo_constant(f, t2, 0));
  V urow = SEL(c, CMP(c, "GT", r2, k2), rowp, tpu_hlo_constant(f, t2, 0)); /* columns > k of the pivot row */
  V upd = MUL(c, tpu_hlo_broadcast_in_dim(f, l, t3, (int64_t[]){0, 1}),
              tpu_hlo_broadcast_in_dim(f, urow, t3, (int64_t[]){0, 2}));
  a = SUB(c, a, upd);
  V is_colk_below = AND(c, CMP(c, "EQ", c3, k3), CMP(c, "GT", r3, k3));
  a = SEL(c, is_colk_below, tpu_hlo_broadcast_in_dim(f, l, t3, (int64_t[]){0, 1}), a);
  next[A] = a;
  V p1 = CAST(c, ADD(c, p, tpu_hlo_constant_i64(f, tpu_hlo_type_make(TPU_S64, 1, &B), 1)), TPU_S32);
  next[PIV] = tpu_hlo_dynamic_update_slice(f, arg[PIV], tpu_hlo_reshape(f, p1, 2, (int64_t[]){B, 1}), (V[]){z, k});
  V k1 = tpu_hlo_broadcast_to(f, CAST(c, ADD(c, k, tpu_hlo_scalar(f, TPU_S64, 1)), TPU_S32), 1, &B);
  V fresh = AND(c, zero_piv, CMP(c, "EQ", arg[INFO], tpu_hlo_constant(f, bt, 0)));
  next[INFO] = SEL(c, fresh, k1, arg[INFO]);
  next[K] = ADD(c, k, tpu_hlo_scalar(f, TPU_S64, 1));
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  V outs[3] = {tpu_hlo_reshape(f, res[A], t.rank, t.dims), tpu_hlo_reshape(f, res[PIV], pt.rank, pt.dims),
               tpu_hlo_reshape(f, res[INFO], it.rank, it.dims)};
  tpu_op_set_outputs(c, 3, outs);
}

/* lu_permutation: pivots s32 [*, n] (1-based, LAPACK's).  -> perm s64 [*, n]:
 * rows k and pivots[k]-1 of 0..n-1 swapped for k = 0, 1, ..., so that
 * (P^T B)[i] = B[perm[i]] for the P of A = P L U. */
static void rule_lu_permutation(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  if (t.rank < 1 || (t.dtype != TPU_S32 && t.dtype != TPU_S64)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "lu_permutation: pivots must be integer, at least 1-d");
    return;
  }
  int64_t n = t.dims[t.rank - 1], B = 1;
  for (int i = 0; i < t.rank - 1; i++) B *= t.dims[i];
  tpu_hlo_type_t ot = tpu_hlo_type_make(TPU_S64, t.rank, t.dims);
  if (n == 0 || B == 0) {
    V out = tpu_hlo_constant(f, ot, 0);
    tpu_op_set_outputs(c, 1, &out);
    return;
  }
  int64_t d2[2] = {B, n}, one = 1;
  tpu_hlo_type_t i2 = tpu_hlo_type_make(TPU_S64, 2, d2);
  V piv = SUB(c, CAST(c, tpu_hlo_reshape(f, c->in[0], 2, d2), TPU_S64), tpu_hlo_constant_i64(f, i2, 1));
  enum { K, PERM, NV };
  V init[NV] = {tpu_hlo_scalar(f, TPU_S64, 0), tpu_hlo_iota(f, i2, 1)};
  V arg[NV], next[NV], res[NV];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, NV, arg)) return;
  if (!tpu_hlo_while_body(f, &w, CMP(c, "LT", arg[K], tpu_hlo_scalar(f, TPU_S64, (double)n)), arg)) return;
  V k = arg[K], z = tpu_hlo_scalar(f, TPU_S64, 0), perm = arg[PERM];
  V r2 = tpu_hlo_iota(f, i2, 1), k2 = tpu_hlo_broadcast_to(f, k, 2, d2);
  V p = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, piv, (V[]){z, k}, (int64_t[]){B, 1}), 2, (int64_t[]){B, 1});
  V p2 = tpu_hlo_broadcast_to(f, p, 2, d2);
  V zero2 = tpu_hlo_constant_i64(f, i2, 0);
  V atk = tpu_hlo_reduce(f, SEL(c, CMP(c, "EQ", r2, k2), perm, zero2), z, &one, 1, "add");
  V atp = tpu_hlo_reduce(f, SEL(c, CMP(c, "EQ", r2, p2), perm, zero2), z, &one, 1, "add");
  int64_t keep0 = 0;
  V atk2 = tpu_hlo_broadcast_in_dim(f, atk, i2, &keep0), atp2 = tpu_hlo_broadcast_in_dim(f, atp, i2, &keep0);
  next[PERM] = SEL(c, CMP(c, "EQ", r2, k2), atp2, SEL(c, CMP(c, "EQ", r2, p2), atk2, perm));
  next[K] = ADD(c, k, tpu_hlo_scalar(f, TPU_S64, 1));
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  V out = tpu_hlo_reshape(f, res[PERM], t.rank, t.dims);
  tpu_op_set_outputs(c, 1, &out);
}

const tpu_op_rule_t tpu_rules_lu[] = {
    {"lu_factor", rule_lu_factor, 1, 1},
    {"lu_permutation", rule_lu_permutation, 1, 1},
    {NULL, NULL, 0, 0},
};
