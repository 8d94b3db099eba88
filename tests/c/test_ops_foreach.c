/* test_ops_foreach.c - the "foreach" rule (csrc/ops/foreach.c): a batch of
 * per-tensor rule calls gives exactly (bit for bit) what each rule gives
 * alone, and malformed batches fail with a message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

static int64_t idx(const char *rule) { return tpu_op_rule_index(tpu_op_rule_find(rule)); }

/* Runs rule alone; returns its single output (caller frees), n = -1 on error. */
static opt_out_t alone(const char *rule, const opt_in_t *in, int nin, const int64_t *ints, int nints) {
  opt_out_t o[2];
  int got = opt_run(rule, in, nin, ints, nints, o, 2);
  TT_CHECK(got == 1);
  if (got != 1) {
    if (got > 0) opt_free(o, got);
    o[0].n = -1;
  }
  return o[0];
}

static int same_bits(const opt_out_t *a, const opt_out_t *b) {
  if (a->n < 0 || b->n < 0 || a->dt != b->dt || a->rank != b->rank || a->n != b->n) return 0;
  for (int64_t i = 0; i < a->n; i++) {
    if (isnan(a->v[i]) && isnan(b->v[i])) continue;
    if (a->v[i] != b->v[i]) {
      fprintf(stderr, "  [%lld] %.17g != %.17g\n", (long long)i, a->v[i], b->v[i]);
      return 0;
    }
  }
  return 1;
}

TT_TEST(ops_foreach_batch_equals_each_rule_alone) {
  double a[6], b[6], c[6], x[5], y[5];
  opt_fill(a, 6, 1);
  opt_fill(b, 6, 2);
  opt_fill(c, 6, 3);
  opt_fill(x, 5, 4);
  opt_fill(y, 5, 5);
  for (int i = 0; i < 6; i++) c[i] = fabs(c[i]) + 0.5;
  double value = -0.3, alpha = 3;
  /* addcdiv (bf16 result), add with alpha promoting int64 to f32, erf, norm p=3.5 */
  opt_in_t addc[4] = {{TPU_BF16, 2, {2, 3}, a}, {TPU_BF16, 2, {2, 3}, b}, {TPU_BF16, 2, {2, 3}, c},
                      {TPU_F32, 0, {0}, &value}};
  int64_t addc_ints[1] = {TPU_BF16};
  opt_in_t add[3] = {{TPU_S64, 1, {5}, x}, {TPU_F32, 1, {5}, y}, {TPU_F32, 0, {0}, &alpha}};
  int64_t add_ints[1] = {TPU_F32};
  opt_in_t erf[1] = {{TPU_F32, 2, {2, 3}, a}};
  int64_t erf_ints[1] = {TPU_F32};
  opt_out_t want[3] = {alone("addcdiv", addc, 4, addc_ints, 1), alone("add", add, 3, add_ints, 1),
                       alone("erf", erf, 1, erf_ints, 1)};
  opt_in_t in[8] = {addc[0], addc[1], addc[2], addc[3], add[0], add[1], add[2], erf[0]};
  int64_t ints[] = {3, idx("addcdiv"), 4, 1, 0, TPU_BF16, idx("add"), 3, 1, 0, TPU_F32, idx("erf"), 1, 1, 0, TPU_F32};
  opt_out_t o[3];
  int got = opt_run("foreach", in, 8, ints, (int)(sizeof(ints) / sizeof(ints[0])), o, 3);
  TT_CHECK(got == 3);
  for (int i = 0; i < 3 && got == 3; i++) TT_CHECK(same_bits(&o[i], &want[i]));
  if (got > 0) opt_free(o, got);
  for (int i = 0; i < 3; i++)
    if (want[i].n >= 0) opt_free(&want[i], 1);
}

TT_TEST(ops_foreach_errors) {
  double z[4] = {0};
  opt_in_t in[2] = {{TPU_F32, 1, {4}, z}, {TPU_F32, 1, {3}, z}};
  /* the inner rule's own message: shapes that do not broadcast */
  int64_t add[] = {1, idx("add"), 2, 1, 0, TPU_F32};
  TT_CHECK(opt_lower_fails("foreach", in, 2, add, 6, TPU_INVALID_ARGUMENT, "must match"));
  /* a rule index that does not exist, and foreach inside foreach */
  int64_t bad[] = {1, 100000, 1, 0, 0};
  TT_CHECK(opt_lower_fails("foreach", in, 1, bad, 5, TPU_INVALID_ARGUMENT, "malformed"));
  int64_t nested[] = {1, idx("foreach"), 1, 0, 0};
  TT_CHECK(opt_lower_fails("foreach", in, 1, nested, 5, TPU_INVALID_ARGUMENT, "malformed"));
  /* inputs left over, and a call with two outputs */
  int64_t extra[] = {1, idx("neg"), 1, 1, 0, TPU_F32};
  TT_CHECK(opt_lower_fails("foreach", in, 2, extra, 6, TPU_INVALID_ARGUMENT, "malformed"));
  int64_t two[] = {1, idx("max_dim"), 1, 2, 0, 0, 0};
  TT_CHECK(opt_lower_fails("foreach", in, 1, two, 7, TPU_INVALID_ARGUMENT, "2 outputs"));
  int64_t none[] = {0};
  TT_CHECK(opt_lower_fails("foreach", in, 0, none, 1, TPU_INVALID_ARGUMENT, "0 calls"));
}
