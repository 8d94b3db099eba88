/* embedding.c - embedding lookup and its dense backward (padding_idx,
 * scale_grad_by_freq).  An index outside [0, num_weights) is a device-side
 * check (IndexError "index out of range in self", as PyTorch's CPU, at the
 * next host wait); the gather itself clamps it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/toolkit.h"

/* ---- embedding ----------------------------------------------------------------- */

/* embedding: inputs (weight [V, D], indices (any shape, integer)) ->
 * indices.shape + [D].  Attrs: none, or [1] for embedding_bag's lookup,
 * whose bad index is CPU's RuntimeError instead of embedding's IndexError
 * (padding_idx only matters for backward). */
static void rule_embedding(tpu_op_ctx_t *c) {
  tpu_hlo_type_t wt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (wt.rank != 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: 'weight' must be 2-D", c->name);
    return;
  }
  if (!tpu_dtype_is_int(it.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                "Long, Int; but got %s instead",
                c->name, tpu_dtype_name(it.dtype));
    return;
  }
  if (tpu_op_nints(c) > 0 && tpu_op_int(c, 0))
    tpu_op_check_index(c, c->in[1], 0, wt.dims[0], TPU_INVALID_ARGUMENT,
                       "embedding_bag(): an index of input takes value " TPU_OP_PAYLOAD
                       " which is not in the valid range [0, %lld)",
                       (long long)wt.dims[0]);
  else
    tpu_op_check_index(c, c->in[1], 0, wt.dims[0], TPU_OUT_OF_RANGE,
                       "embedding(): index out of range in self (index " TPU_OP_PAYLOAD " with %lld rows)",
                       (long long)wt.dims[0]);
  tpu_op_set_output(c, tpu_op_take(c, c->in[0], 0, c->in[1]));
}

/* embedding_dense_backward: inputs (grad [..., D], indices [...]); attrs
 * [num_weights, padding_idx (-1 none), scale_grad_by_freq] -> [V, D]. */
static void rule_embedding_dense_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t V = tpu_op_int(c, 0), pad = tpu_op_int(c, 1);
  int scale = (int)tpu_op_int(c, 2);
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (gt.rank != it.rank + 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad must have one more dim than indices", c->name);
    return;
  }
  int64_t D = gt.dims[gt.rank - 1], L = tpu_hlo_type_numel(&it);
  tpu_dtype_t acc = tpu_op_opmath(gt.dtype);
  int64_t gd2[2] = {L, D};
  tpu_hlo_value_t g = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[0], acc), 2, gd2);
  tpu_hlo_value_t idx = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[1], TPU_S64), 1, &L);
  tpu_hlo_type_t g2t = tpu_hlo_type_make(acc, 2, gd2);
  int64_t k0 = 0;
  if (pad >= 0) {
    tpu_hlo_value_t isp = tpu_hlo_compare(f, "EQ", idx, tpu_hlo_constant_i64(f, tpu_hlo_type_make(TPU_S64, 1, &L), pad));
    tpu_hlo_type_t pt = tpu_hlo_type_make(TPU_PRED, 2, gd2);
    g = tpu_hlo_select(f, tpu_hlo_broadcast_in_dim(f, isp, pt, &k0), tpu_hlo_constant(f, g2t, 0.0), g);
  }
  if (scale) { /* divide by how often each index occurs */
    tpu_hlo_value_t ones = tpu_hlo_constant(f, tpu_hlo_type_make(acc, 1, &L), 1.0);
    tpu_hlo_value_t cnt = tpu_op_put(c, tpu_hlo_constant(f, tpu_hlo_type_make(acc, 1, &V), 0.0), 0, idx, ones, "add");
    g = DIV(c, g, tpu_hlo_broadcast_in_dim(f, tpu_op_take(c, cnt, 0, idx), g2t, &k0));
  }
  int64_t od[2] = {V, D};
  tpu_hlo_value_t r = tpu_op_put(c, tpu_hlo_constant(f, tpu_hlo_type_make(acc, 2, od), 0.0), 0, idx, g, "add");
  tpu_op_set_output(c, tpu_hlo_cast(f, r, gt.dtype));
}

const tpu_op_rule_t tpu_rules_embedding[] = {
    {"embedding", rule_embedding, 2, 2},
    {"embedding_dense_backward", rule_embedding_dense_backward, 2, 2},
    {NULL, NULL, 0, 0},
};
