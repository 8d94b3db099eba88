/* elementwise.c - lowering rules (see ops.h for how a rule is written). */
#include "ops/ops.h"

const tpu_op_rule_t tpu_rules_elementwise[] = {
    {NULL, NULL, 0, 0},
};
