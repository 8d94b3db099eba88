/* foreach.c - the "foreach" rule: several rule calls as one node.  A
 * torch._foreach_* kernel runs its per-tensor op's rule on every tensor of
 * the list (so a foreach op lowers exactly as its per-tensor op, bit for
 * bit) and batches the calls of a chunk of the list into one node: one
 * program per chunk in strict mode (torch_tpu/ops/foreach.py).
 *
 * Rule "foreach".
 *   ints:   [n, then per call: rule index (tpu_op_rule_at), nin, nints,
 *           nfloats, ints[nints]]
 *   floats: the calls' floats, in order
 *   inputs: the calls' inputs, in order
 *   outputs: one per call: its rule's output (the rule must produce one)
 * A call's rule reports its own errors (named by that rule), as the
 * per-tensor op would.
 */
#include "ops/toolkit.h"

static void rule_foreach(tpu_op_ctx_t *c) {
  int64_t n = tpu_op_int(c, 0);
  if (tpu_hlo_func_status(c->f)) return;
  if (n < 1 || n > TPU_OP_MAX_OUTPUTS) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %lld calls (1 to %d)", c->name, (long long)n, TPU_OP_MAX_OUTPUTS);
    return;
  }
  const tpu_op_attrs_t *attrs = c->attrs;
  int at = 1, in_at = 0, fl_at = 0;
  tpu_hlo_value_t outs[TPU_OP_MAX_OUTPUTS];
  for (int i = 0; i < (int)n; i++) {
    if (attrs->nints < at + 4) goto malformed;
    const int64_t *head = attrs->ints + at;
    const tpu_op_rule_t *rule = head[0] >= 0 && head[0] < tpu_op_rule_count() ? tpu_op_rule_at((int)head[0]) : NULL;
    int64_t nin = head[1], ni = head[2], nf = head[3];
    if (!rule || rule->lower == rule_foreach || nin < 0 || ni < 0 || nf < 0 || in_at + nin > c->nin ||
        at + 4 + ni > attrs->nints || fl_at + nf > attrs->nfloats)
      goto malformed;
    tpu_op_attrs_t a = {(int)ni, attrs->ints + at + 4, (int)nf, attrs->floats + fl_at};
    tpu_hlo_value_t o[TPU_OP_MAX_OUTPUTS];
    int no = 0;
    tpu_status_t st = tpu_op_lower(rule, c->f, c->in + in_at, (int)nin, &a, o, &no);
    if (st) {
      tpu_op_fail(c, tpu_status_code(st), "%s", tpu_status_message(st)); /* sticky: the first error stays */
      tpu_status_free(st);
      return;
    }
    if (no != 1) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: call %d (%s) produced %d outputs, not 1", c->name, i, rule->name,
                  no);
      return;
    }
    outs[i] = o[0];
    at += 4 + (int)ni;
    in_at += (int)nin;
    fl_at += (int)nf;
  }
  if (at != attrs->nints || in_at != c->nin || fl_at != attrs->nfloats) goto malformed;
  tpu_op_set_outputs(c, (int)n, outs);
  return;
malformed:
  tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: malformed call list (%d ints, %d inputs, %d floats)", c->name,
              attrs->nints, c->nin, attrs->nfloats);
}

const tpu_op_rule_t tpu_rules_foreach[] = {
    {"foreach", rule_foreach, 0, -1},
    {NULL, NULL, 0, 0},
};
