/* hlo_linalg.c - stablehlo.triangular_solve. */
#include <stdio.h>

#include "hlo/hlo_internal.h"

#define FAIL(f, ...) tpu_hlo_fail((f), TPU_INVALID_ARGUMENT, __VA_ARGS__)

tpu_hlo_value_t tpu_hlo_triangular_solve(tpu_hlo_func_t *f, tpu_hlo_value_t a, tpu_hlo_value_t b, bool left_side,
                                         bool lower, bool unit_diagonal, tpu_hlo_transpose_t transpose_a) {
  static const char *const names[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  tpu_hlo_value_t ops[2] = {a, b};
  if (!tpu_hlo__ok(f, "triangular_solve", ops, 2)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *ta = tpu_hlo__t(f, a), *tb = tpu_hlo__t(f, b);
  char b1[256], b2[256];
  if ((int)transpose_a < 0 || (int)transpose_a > 2)
    return FAIL(f, "triangular_solve: unknown transpose %d", (int)transpose_a);
  int r = ta->rank;
  bool ok = r >= 2 && tb->rank == r && ta->dtype == tb->dtype && ta->dims[r - 1] == ta->dims[r - 2] &&
            (tpu_dtype_is_float(ta->dtype) || tpu_dtype_is_complex(ta->dtype));
  for (int i = 0; ok && i < r - 2; i++) ok = ta->dims[i] == tb->dims[i];
  if (ok) ok = ta->dims[r - 1] == (left_side ? tb->dims[r - 2] : tb->dims[r - 1]);
  if (!ok)
    return FAIL(f, "triangular_solve: a %s must be square matrices and b %s of the same dtype and batch, with "
                "the %s dimension equal to a's order",
                TPU_HLO_TSTR(ta, b1), TPU_HLO_TSTR(tb, b2), left_side ? "row" : "column");
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "left_side = %s, lower = %s, unit_diagonal = %s, transpose_a = #stablehlo<transpose %s>",
           left_side ? "true" : "false", lower ? "true" : "false", unit_diagonal ? "true" : "false",
           names[transpose_a]);
  return tpu_hlo__simple(f, "triangular_solve", ops, 2, tb, attrs);
}
