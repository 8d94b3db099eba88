/* test_ops_util.h - the opt_* rule runner of tests/c/test_ops_*.c (defined
 * in ops_runner.c, on top of tt_ops.h). */
#ifndef TEST_OPS_UTIL_H_
#define TEST_OPS_UTIL_H_

#include "hlo/hlo.h"

typedef struct {
  tpu_dtype_t dt;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  const double *v; /* numel values (converted to dt; complex64: 2 * numel, (re, im) pairs); NULL = zeros */
} opt_in_t;

typedef struct {
  tpu_dtype_t dt;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int64_t n;
  double *v; /* n values (complex64: 2 * n, (re, im) pairs) */
} opt_out_t;

/* Lowers `rule` over arguments of the given types; returns the module. */
tpu_status_t opt_lower(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints,
                       tpu_hlo_module_t **out_m, int *out_n);
/* Lowers, compiles, runs; returns the number of outputs (-1 on failure, a
 * failed check already counted).  Free outs with opt_free. */
int opt_run(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints, opt_out_t *outs,
            int maxout);
void opt_free(opt_out_t *outs, int n);
/* |got - want| <= tol * (1 + |want|) elementwise (NaN matches NaN). */
int opt_close(const double *got, const double *want, int64_t n, double tol);
/* Lowering fails with `code` and a message containing `needle`. */
int opt_lower_fails(const char *rule, const opt_in_t *ins, int nin, const int64_t *ints, int nints,
                    tpu_code_t code, const char *needle);
/* Deterministic values in [-1, 1). */
void opt_fill(double *v, int64_t n, unsigned seed);

#endif
