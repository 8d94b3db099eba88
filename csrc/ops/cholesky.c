/* cholesky.c - the Cholesky factorization with LAPACK's error report
 * (linalg_cholesky_ex; linalg.cholesky and cholesky reach it), and the
 * triangular solves that use such a factor (linalg_solve_triangular,
 * triangular_solve, cholesky_solve, cholesky_inverse and the backward of
 * cholesky reach them).  See ops.h for how a rule is written.
 *
 * A triangular solve is one stablehlo.triangular_solve; the adapter
 * broadcasts the batch dimensions first.
 *
 * One stablehlo.while over the columns (left-looking Cholesky-Banachiewicz):
 * column k of L is (A[:, k] - L L[k, :]^T) scaled by 1/sqrt(d), with d the
 * k-th entry of that vector; a batched matrix-vector product per column,
 * O(n^3) work in n steps whatever the batch.  Only A's lower triangle is read
 * (upper=True reads the upper one, through a transpose), as LAPACK's potrf.
 *
 * info follows LAPACK: 0 when A is positive definite, otherwise k+1 for the
 * first k whose d is not > 0 (NaN included), per matrix.  The columns from
 * that k on are NaN where LAPACK leaves them unfinished (PyTorch documents
 * L as unspecified there); only info is meant to be read then. */
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

/* cholesky_ex: a [*, n, n] (f32 / f64); ints [upper].  -> (L [*, n, n] (U for
 * upper), info s32 [*]). */
static void rule_cholesky_ex(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int upper = tpu_op_int(c, 0) != 0;
  if (tpu_hlo_func_status(f)) return;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  char sb[96];
  if (t.rank < 2 || t.dims[t.rank - 1] != t.dims[t.rank - 2]) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "linalg.cholesky: A must be batches of square matrices, but they are %s",
                tpu_op_shape_str(&t, sb, sizeof sb));
    return;
  }
  if (t.dtype != TPU_F32 && t.dtype != TPU_F64) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "linalg.cholesky: %s input (float32 and float64 on the device)",
                tpu_dtype_name(t.dtype));
    return;
  }
  int64_t n = t.dims[t.rank - 1], B = 1;
  for (int i = 0; i < t.rank - 2; i++) B *= t.dims[i];
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S32, t.rank - 2, t.dims);
  if (n == 0 || B == 0) {
    V outs[2] = {tpu_hlo_constant(f, t, 0), tpu_hlo_constant(f, it, 0)};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  int64_t d3[3] = {B, n, n}, d2[2] = {B, n}, perm[3] = {0, 2, 1};
  tpu_hlo_type_t t3 = tpu_hlo_type_make(t.dtype, 3, d3);
  V a = tpu_hlo_reshape(f, c->in[0], 3, d3);
  if (upper) a = tpu_hlo_transpose(f, a, perm);
  enum { K, L, INFO, A, NV };
  V init[NV] = {tpu_hlo_scalar(f, TPU_S64, 0), tpu_hlo_constant(f, t3, 0),
                tpu_hlo_constant(f, tpu_hlo_type_make(TPU_S32, 1, &B), 0), a};
  V arg[NV], next[NV], res[NV];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, NV, arg)) return;
  if (!tpu_hlo_while_body(f, &w, tpu_hlo_compare(f, "LT", arg[K], tpu_hlo_scalar(f, TPU_S64, (double)n)), arg))
    return;
  V k = arg[K], z = tpu_hlo_scalar(f, TPU_S64, 0);
  /* row k of L (zeros from column k on) and column k of A */
  V row = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, arg[L], (V[]){z, k, z}, (int64_t[]){B, 1, n}), 2, d2);
  V acol = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, arg[A], (V[]){z, z, k}, (int64_t[]){B, n, 1}), 2, d2);
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.nbatch = 1;
  dd.ncontract = 1;
  dd.lhs_contract[0] = 2;
  dd.rhs_contract[0] = 1;
  V v = tpu_hlo_binary(f, "subtract", acol, tpu_hlo_dot_general(f, arg[L], row, &dd, TPU_DTYPE_INVALID));
  V d = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, v, (V[]){z, k}, (int64_t[]){B, 1}), 1, &B);
  tpu_hlo_type_t bt = tpu_hlo_type_make(TPU_S32, 1, &B);
  V bad = tpu_hlo_unary(f, "not", tpu_hlo_compare(f, "GT", d, tpu_hlo_constant(f, tpu_op_type(c, d), 0)));
  V fresh = tpu_hlo_binary(f, "and", bad, tpu_hlo_compare(f, "EQ", arg[INFO], tpu_hlo_constant(f, bt, 0)));
  V k1 = tpu_hlo_broadcast_to(f, tpu_hlo_convert(f, tpu_hlo_binary(f, "add", k, tpu_hlo_scalar(f, TPU_S64, 1)), TPU_S32),
                              1, &B);
  next[INFO] = tpu_hlo_select(f, fresh, k1, arg[INFO]);
  tpu_hlo_type_t vt = tpu_hlo_type_make(t.dtype, 2, d2);
  int64_t keep0 = 0;
  V sd = tpu_hlo_broadcast_in_dim(f, tpu_hlo_unary(f, "sqrt", d), vt, &keep0);
  V i = tpu_hlo_iota(f, tpu_hlo_type_make(TPU_S64, 2, d2), 1);
  V kb = tpu_hlo_broadcast_to(f, k, 2, d2);
  V col = tpu_hlo_select(f, tpu_hlo_compare(f, "GT", i, kb), tpu_hlo_binary(f, "divide", v, sd),
                         tpu_hlo_select(f, tpu_hlo_compare(f, "EQ", i, kb), sd, tpu_hlo_constant(f, vt, 0)));
  next[L] = tpu_hlo_dynamic_update_slice(f, arg[L], tpu_hlo_reshape(f, col, 3, (int64_t[]){B, n, 1}), (V[]){z, z, k});
  next[K] = tpu_hlo_binary(f, "add", k, tpu_hlo_scalar(f, TPU_S64, 1));
  next[A] = arg[A];
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  V out = res[L];
  if (upper) out = tpu_hlo_transpose(f, out, perm);
  V outs[2] = {tpu_hlo_reshape(f, out, t.rank, t.dims), tpu_hlo_reshape(f, res[INFO], it.rank, it.dims)};
  tpu_op_set_outputs(c, 2, outs);
}

/* triangular_solve: a [*, m, m], b [*, m, n] (left) or [*, n, m], same batch
 * and dtype (f32 / f64); ints [left, lower, unit_diagonal, transpose (0 no,
 * 1 yes)].  -> x with op(a) x = b (left) or x op(a) = b. */
static void rule_triangular_solve(tpu_op_ctx_t *c) {
  int left = tpu_op_int(c, 0) != 0, lower = tpu_op_int(c, 1) != 0, unit = tpu_op_int(c, 2) != 0;
  int trans = tpu_op_int(c, 3) != 0;
  if (tpu_hlo_func_status(c->f)) return;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  if (t.dtype != TPU_F32 && t.dtype != TPU_F64) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "triangular_solve: %s input (float32 and float64 on the device)",
                tpu_dtype_name(t.dtype));
    return;
  }
  V x = tpu_hlo_triangular_solve(c->f, c->in[0], c->in[1], left, lower, unit,
                                 trans ? TPU_HLO_TRANSPOSE : TPU_HLO_NO_TRANSPOSE);
  tpu_op_set_outputs(c, 1, &x);
}

const tpu_op_rule_t tpu_rules_cholesky[] = {
    {"cholesky_ex", rule_cholesky_ex, 1, 1},
    {"triangular_solve", rule_triangular_solve, 2, 2},
    {NULL, NULL, 0, 0},
};
