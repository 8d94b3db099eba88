/* extra.c - lowering rules beyond the core families (see ops.h). */
#include "ops/ops.h"

const tpu_op_rule_t tpu_rules_extra[] = {
    {NULL, NULL, 0, 0},
};
