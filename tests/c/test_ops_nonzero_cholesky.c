/* test_ops_nonzero_cholesky.c - the nonzero, cholesky_ex, triangular_solve and lu rules against
 * naive loops (csrc/ops/nonzero.c, cholesky.c). */
#include <math.h>
#include <string.h>

#include "tinytest.h"
#include "tt_ops.h"

TT_TEST(ops_nonzero_coords_count_and_fill) {
  /* [2, 3] with zeros, a NaN (non-zero) and -0.0 (zero) */
  double x[6] = {0, 1.5, NAN, -0.0, 0, -2};
  int64_t dx[2] = {2, 3};
  tt_ten_t in = tt_ten(TPU_F32, 2, dx, x);
  tt_ten_t out[2];
  int64_t attrs[2] = {6, -7}; /* rows = numel, fill -7 */
  if (tt_ops_run("nonzero", &in, 1, attrs, 2, NULL, 0, out, 2) == 2) {
    int64_t dc[2] = {6, 2};
    double want[12] = {0, 1, 0, 2, 1, 2, -7, -7, -7, -7, -7, -7};
    tt_ops_expect("nonzero coords", &out[0], TPU_S64, 2, dc, want, 0, 0);
    double n = 3;
    tt_ops_expect("nonzero count", &out[1], TPU_S64, 0, NULL, &n, 0, 0);
    tt_ops_free(out, 2);
  }
  /* fewer rows than non-zeros (nonzero_static truncates) */
  int64_t two[2] = {2, 0};
  if (tt_ops_run("nonzero", &in, 1, two, 2, NULL, 0, out, 2) == 2) {
    int64_t dc[2] = {2, 2};
    double want[4] = {0, 1, 0, 2};
    tt_ops_expect("nonzero truncated", &out[0], TPU_S64, 2, dc, want, 0, 0);
    tt_ops_free(out, 2);
  }
  /* bool input, 1-D */
  double b[5] = {1, 0, 0, 1, 1};
  int64_t db[1] = {5};
  tt_ten_t inb = tt_ten(TPU_PRED, 1, db, b);
  int64_t ab[2] = {5, 0};
  if (tt_ops_run("nonzero", &inb, 1, ab, 2, NULL, 0, out, 2) == 2) {
    int64_t dc[2] = {5, 1};
    double want[5] = {0, 3, 4, 0, 0};
    tt_ops_expect("nonzero bool", &out[0], TPU_S64, 2, dc, want, 0, 0);
    tt_ops_free(out, 2);
  }
  /* an empty input is the adapter's case: the rule refuses it */
  int64_t d0[1] = {0};
  tt_ten_t e = tt_ten(TPU_F32, 1, d0, NULL);
  tpu_status_t st = tt_ops_lower_status("nonzero", &e, 1, ab, 2, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT);
  tpu_status_free(st);
}

/* L of a positive definite matrix, row-major, by the textbook loop. */
static void naive_cholesky(const double *a, int n, double *l) {
  memset(l, 0, sizeof(double) * n * n);
  for (int j = 0; j < n; j++) {
    double d = a[j * n + j];
    for (int k = 0; k < j; k++) d -= l[j * n + k] * l[j * n + k];
    l[j * n + j] = sqrt(d);
    for (int i = j + 1; i < n; i++) {
      double s = a[i * n + j];
      for (int k = 0; k < j; k++) s -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = s / l[j * n + j];
    }
  }
}

TT_TEST(ops_cholesky_ex_values_upper_and_info) {
  /* batch of 2: an SPD matrix (upper triangle garbage: must not be read) and
   * one whose leading minor of order 2 is not positive definite */
  enum { N = 3 };
  double spd[N * N] = {4, 99, 99, 2, 5, 99, 1, 3, 6};
  double full[N * N] = {4, 2, 1, 2, 5, 3, 1, 3, 6};
  double bad[N * N] = {1, 2, 0, 2, 1, 0, 0, 0, 1};
  double a[2 * N * N];
  memcpy(a, spd, sizeof spd);
  memcpy(a + N * N, bad, sizeof bad);
  int64_t da[3] = {2, N, N};
  tt_ten_t in = tt_ten(TPU_F64, 3, da, a);
  tt_ten_t out[2];
  int64_t lower = 0, upper = 1;
  double l[N * N];
  naive_cholesky(full, N, l);
  if (tt_ops_run("cholesky_ex", &in, 1, &lower, 1, NULL, 0, out, 2) == 2) {
    int64_t d1[1] = {2};
    double info[2] = {0, 2};
    tt_ops_expect("cholesky_ex info", &out[1], TPU_S32, 1, d1, info, 0, 0);
    TT_CHECK(out[0].rank == 3);
    for (int i = 0; i < N * N; i++) TT_CHECK(tt_ops_close(out[0].vals[i], l[i], 1e-14, 1e-14));
    tt_ops_free(out, 2);
  }
  /* upper: reads the upper triangle, returns U = L^T */
  double up[N * N];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) up[i * N + j] = i <= j ? full[i * N + j] : -99;
  int64_t d2[2] = {N, N};
  tt_ten_t inu = tt_ten(TPU_F64, 2, d2, up);
  if (tt_ops_run("cholesky_ex", &inu, 1, &upper, 1, NULL, 0, out, 2) == 2) {
    double want[N * N];
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) want[i * N + j] = l[j * N + i];
    tt_ops_expect("cholesky_ex upper", &out[0], TPU_F64, 2, d2, want, 1e-14, 1e-14);
    double zero = 0;
    tt_ops_expect("cholesky_ex upper info", &out[1], TPU_S32, 0, NULL, &zero, 0, 0);
    tt_ops_free(out, 2);
  }
  /* not square, integer input */
  int64_t d23[2] = {2, 3};
  tt_ten_t ns = tt_ten(TPU_F32, 2, d23, NULL);
  tpu_status_t st = tt_ops_lower_status("cholesky_ex", &ns, 1, &lower, 1, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT && strstr(tpu_status_message(st), "square"));
  tpu_status_free(st);
  tt_ten_t ii = tt_ten(TPU_S64, 2, d2, NULL);
  st = tt_ops_lower_status("cholesky_ex", &ii, 1, &lower, 1, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_UNIMPLEMENTED);
  tpu_status_free(st);
}

TT_TEST(ops_triangular_solve_left_right_transpose_unit) {
  /* a lower-triangular 3x3 (upper triangle garbage: must not be read) */
  enum { N = 3 };
  double a[N * N] = {2, 99, 99, 1, 3, 99, -1, 2, 4};
  double b[N * 2] = {2, 4, 7, 1, 9, -3};
  int64_t da[2] = {N, N}, db[2] = {N, 2}, dbt[2] = {2, N};
  tt_ten_t in[2] = {tt_ten(TPU_F64, 2, da, a), tt_ten(TPU_F64, 2, db, b)};
  tt_ten_t out[1];
  /* L x = b by forward substitution (and with a unit diagonal) */
  for (int unit = 0; unit < 2; unit++) {
    double want[N * 2];
    for (int col = 0; col < 2; col++)
      for (int i = 0; i < N; i++) {
        double s = b[i * 2 + col];
        for (int k = 0; k < i; k++) s -= a[i * N + k] * want[k * 2 + col];
        want[i * 2 + col] = unit ? s : s / a[i * N + i];
      }
    int64_t ints[4] = {1, 1, unit, 0};
    if (tt_ops_run("triangular_solve", in, 2, ints, 4, NULL, 0, out, 1) == 1) {
      tt_ops_expect(unit ? "L x = b unit" : "L x = b", &out[0], TPU_F64, 2, db, want, 1e-13, 1e-13);
      tt_ops_free(out, 1);
    }
  }
  /* L^T x = b by back substitution */
  double want_t[N * 2];
  for (int col = 0; col < 2; col++)
    for (int i = N - 1; i >= 0; i--) {
      double s = b[i * 2 + col];
      for (int k = i + 1; k < N; k++) s -= a[k * N + i] * want_t[k * 2 + col];
      want_t[i * 2 + col] = s / a[i * N + i];
    }
  int64_t tr[4] = {1, 1, 0, 1};
  if (tt_ops_run("triangular_solve", in, 2, tr, 4, NULL, 0, out, 1) == 1) {
    tt_ops_expect("L^T x = b", &out[0], TPU_F64, 2, db, want_t, 1e-13, 1e-13);
    tt_ops_free(out, 1);
  }
  /* right side: x L = c, i.e. L^T x^T = c^T: the transpose of the previous */
  double c[2 * N], want_r[2 * N];
  for (int i = 0; i < N; i++)
    for (int col = 0; col < 2; col++) c[col * N + i] = b[i * 2 + col], want_r[col * N + i] = want_t[i * 2 + col];
  tt_ten_t inr[2] = {in[0], tt_ten(TPU_F64, 2, dbt, c)};
  int64_t right[4] = {0, 1, 0, 0};
  if (tt_ops_run("triangular_solve", inr, 2, right, 4, NULL, 0, out, 1) == 1) {
    tt_ops_expect("x L = c", &out[0], TPU_F64, 2, dbt, want_r, 1e-13, 1e-13);
    tt_ops_free(out, 1);
  }
  /* b's rows must match a's order; integer input is not taken */
  tt_ten_t bad[2] = {in[0], tt_ten(TPU_F64, 2, dbt, NULL)};
  int64_t lft[4] = {1, 1, 0, 0};
  tpu_status_t st = tt_ops_lower_status("triangular_solve", bad, 2, lft, 4, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT && strstr(tpu_status_message(st), "triangular_solve"));
  tpu_status_free(st);
  tt_ten_t ints_in[2] = {tt_ten(TPU_S64, 2, da, NULL), tt_ten(TPU_S64, 2, db, NULL)};
  st = tt_ops_lower_status("triangular_solve", ints_in, 2, lft, 4, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_UNIMPLEMENTED);
  tpu_status_free(st);
}

/* LAPACK's getf2 on one row-major n x n matrix: LU in place, 1-based pivots,
 * info. */
static int naive_getrf(double *a, int n, int *piv) {
  int info = 0;
  for (int k = 0; k < n; k++) {
    int p = k;
    for (int i = k + 1; i < n; i++)
      if (fabs(a[i * n + k]) > fabs(a[p * n + k])) p = i;
    piv[k] = p + 1;
    for (int j = 0; j < n; j++) {
      double t = a[k * n + j];
      a[k * n + j] = a[p * n + j];
      a[p * n + j] = t;
    }
    if (a[k * n + k] == 0) {
      if (!info) info = k + 1;
      continue;
    }
    for (int i = k + 1; i < n; i++) {
      a[i * n + k] /= a[k * n + k];
      for (int j = k + 1; j < n; j++) a[i * n + j] -= a[i * n + k] * a[k * n + j];
    }
  }
  return info;
}

TT_TEST(ops_lu_factor_pivots_info_and_permutation) {
  enum { N = 4 };
  /* batch of 2: a general matrix (pivoting needed) and a singular one */
  double a[2 * N * N] = {1, 2, 3, 4, 5, 6, 7, 9, -2, 0, 1, 3, 8, -1, 2, 2,
                         1, 2, 3, 4, 2, 4, 6, 8, 0, 0, 1, 1, 3, 1, 0, 2};
  double want[2 * N * N];
  int piv[2][N], info[2];
  memcpy(want, a, sizeof a);
  for (int b = 0; b < 2; b++) info[b] = naive_getrf(want + b * N * N, N, piv[b]);
  int64_t da[3] = {2, N, N}, dp[2] = {2, N}, db[1] = {2};
  tt_ten_t in = tt_ten(TPU_F64, 3, da, a);
  tt_ten_t out[3];
  if (tt_ops_run("lu_factor", &in, 1, NULL, 0, NULL, 0, out, 3) == 3) {
    tt_ops_expect("lu_factor LU", &out[0], TPU_F64, 3, da, want, 1e-13, 1e-13);
    double wp[2 * N], wi[2] = {info[0], info[1]};
    for (int b = 0; b < 2; b++)
      for (int k = 0; k < N; k++) wp[b * N + k] = piv[b][k];
    tt_ops_expect("lu_factor pivots", &out[1], TPU_S32, 2, dp, wp, 0, 0);
    tt_ops_expect("lu_factor info", &out[2], TPU_S32, 1, db, wi, 0, 0);
    TT_CHECK(info[0] == 0 && info[1] != 0);
    tt_ops_free(out, 3);
  }
  /* the pivots' permutation: the swaps applied to 0..n-1 in order */
  double pv[2 * N], wperm[2 * N];
  for (int b = 0; b < 2; b++) {
    int perm[N];
    for (int k = 0; k < N; k++) perm[k] = k, pv[b * N + k] = piv[b][k];
    for (int k = 0; k < N; k++) {
      int t = perm[k];
      perm[k] = perm[piv[b][k] - 1];
      perm[piv[b][k] - 1] = t;
    }
    for (int k = 0; k < N; k++) wperm[b * N + k] = perm[k];
  }
  tt_ten_t pin = tt_ten(TPU_S32, 2, dp, pv);
  if (tt_ops_run("lu_permutation", &pin, 1, NULL, 0, NULL, 0, out, 1) == 1) {
    tt_ops_expect("lu_permutation", &out[0], TPU_S64, 2, dp, wperm, 0, 0);
    tt_ops_free(out, 1);
  }
  /* not square, integer input */
  int64_t d23[2] = {2, 3};
  tt_ten_t ns = tt_ten(TPU_F32, 2, d23, NULL);
  tpu_status_t st = tt_ops_lower_status("lu_factor", &ns, 1, NULL, 0, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_INVALID_ARGUMENT && strstr(tpu_status_message(st), "square"));
  tpu_status_free(st);
  int64_t d22[2] = {2, 2};
  tt_ten_t ii = tt_ten(TPU_S64, 2, d22, NULL);
  st = tt_ops_lower_status("lu_factor", &ii, 1, NULL, 0, NULL, 0);
  TT_CHECK(st && tpu_status_code(st) == TPU_UNIMPLEMENTED);
  tpu_status_free(st);
}
