/* tt_ops.h - the tensor-valued rule runner of the tests/c/test_ops_*.c
 * files (defined in ops_runner.c). */
#ifndef TT_OPS_H_
#define TT_OPS_H_

#include "hlo/hlo.h"
#include "ops/ops.h"

typedef struct tt_ten {
  tpu_dtype_t dt;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  const double *vals; /* numel values, row-major */
  double *owned;      /* outputs: the storage of vals */
} tt_ten_t;

tt_ten_t tt_ten(tpu_dtype_t dt, int rank, const int64_t *dims, const double *vals);
int64_t tt_ops_numel(const tt_ten_t *t);
double tt_ops_round(tpu_dtype_t dt, double v); /* v as stored in dt */
/* Lowers `rule` on arguments typed like `in`, compiles, runs; fills outs
 * (free with tt_ops_free).  Returns the number of outputs, -1 on error
 * (printed, counted as a failed check). */
int tt_ops_run(const char *rule, const tt_ten_t *in, int nin, const int64_t *ints, int nints, const double *floats,
               int nfloats, tt_ten_t *outs, int max_out);
/* Only lowers and produces text: the first error (caller frees) or NULL. */
tpu_status_t tt_ops_lower_status(const char *rule, const tt_ten_t *in, int nin, const int64_t *ints, int nints,
                                 const double *floats, int nfloats);
void tt_ops_free(tt_ten_t *outs, int n);
/* A one-input rule, its C reference and the domain of the sample points. */
typedef struct tt_unary_case {
  const char *rule;
  double (*ref)(double);
  double lo, hi;
} tt_unary_case_t;
/* Runs each rule (ints [dt]) on 41 points of its domain in dtype dt and
 * compares with its reference (failed checks counted). */
void tt_ops_check_unary(const tt_unary_case_t *cases, int n, tpu_dtype_t dt, double rtol, double atol);
/* Every rule of a table (but the NULL-terminated skip list) lowers for f32
 * inputs (s32 for bitwise) of its minimum input count with the given ints
 * (ints[0] is replaced by the dtype). */
void tt_ops_all_rules_lower(const tpu_op_rule_t *table, const int64_t *ints, int nints, const char *const *skip);
int tt_ops_close(double got, double want, double rtol, double atol);
/* Compares dtype, shape and values (nan matches nan; inf must be equal). */
int tt_ops_expect(const char *what, const tt_ten_t *got, tpu_dtype_t dt, int rank, const int64_t *dims,
                  const double *want, double rtol, double atol);

#endif
