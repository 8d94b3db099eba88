/* rnn_internal.h - what rnn.c (fused cells) and rnn_layer.c (whole layers)
 * share: a few emit helpers and the cell math (defined in rnn.c).  Not for
 * other rule files. */
#ifndef TPU_OPS_RNN_INTERNAL_H_
#define TPU_OPS_RNN_INTERNAL_H_

#include "ops/toolkit.h"

/* Columns [k*H, (k+1)*H) of a [B, n*H] value. */
static inline tpu_hlo_value_t rnn_chunk(tpu_op_ctx_t *c, tpu_hlo_value_t x, int64_t B, int64_t H, int k) {
  int64_t start[2] = {0, (int64_t)k * H}, limit[2] = {B, (int64_t)(k + 1) * H}, strides[2] = {1, 1};
  return tpu_hlo_slice(c->f, x, start, limit, strides);
}

/* A bias [G] (acc type) broadcast to [B, G]. */
static inline tpu_hlo_value_t rnn_bias_rows(tpu_op_ctx_t *c, tpu_hlo_value_t b, int64_t B, int64_t G, tpu_dtype_t acc) {
  int64_t dims[2] = {B, G}, bd = 1;
  tpu_hlo_type_t t = tpu_hlo_type_make(acc, 2, dims);
  return tpu_hlo_broadcast_in_dim(c->f, tpu_hlo_cast(c->f, b, acc), t, &bd);
}

/* 1 - x. */
static inline tpu_hlo_value_t rnn_one_minus(tpu_op_ctx_t *c, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  return SUB(c, tpu_hlo_constant(c->f, t, 1.0), x);
}

/* x * (1 - x) * g, in the CUDA kernels' order: (g * (1 - x)) * x. */
static inline tpu_hlo_value_t rnn_dsigmoid(tpu_op_ctx_t *c, tpu_hlo_value_t g, tpu_hlo_value_t x) {
  return MUL(c, MUL(c, g, rnn_one_minus(c, x)), x);
}

/* g * (1 - x^2) (x = tanh of something). */
static inline tpu_hlo_value_t rnn_dtanh(tpu_op_ctx_t *c, tpu_hlo_value_t g, tpu_hlo_value_t x) {
  return MUL(c, g, rnn_one_minus(c, MUL(c, x, x)));
}

/* ---- cell math (defined in rnn.c) ------------------------------------------- */

/* LSTM: summed gates [B,4H] (acc) -> activated i, f, g, o. */
void tpu_rnn_lstm_act(tpu_op_ctx_t *c, tpu_hlo_value_t gates, int64_t B, int64_t H, tpu_hlo_value_t act[4]);

/* cy = f*cx + i*g. */
tpu_hlo_value_t tpu_rnn_lstm_cy(tpu_op_ctx_t *c, const tpu_hlo_value_t a[4], tpu_hlo_value_t cx);

/* LSTM backward of one step (the CUDA kernel's formulas): from the gradient
 * of h (go) and of c (gc) after the step, the activated gates a[4], the
 * previous cell cx and tanh(cy) -> the gradient of the summed gates
 * (dgates[4]) and of cx. */
void tpu_rnn_lstm_grad(tpu_op_ctx_t *c, tpu_hlo_value_t go, tpu_hlo_value_t gc, tpu_hlo_value_t cx,
                       const tpu_hlo_value_t a[4], tpu_hlo_value_t tcy, tpu_hlo_value_t dgates[4],
                       tpu_hlo_value_t *dcx);

/* GRU: input part xg [B,3H] (b_ih included) and hidden part hg [B,3H]
 * (b_hh included) -> r, z, n and hy (from hx). */
void tpu_rnn_gru_step(tpu_op_ctx_t *c, tpu_hlo_value_t xg, tpu_hlo_value_t hg, tpu_hlo_value_t hx, int64_t B,
                      int64_t H, tpu_hlo_value_t *r, tpu_hlo_value_t *z, tpu_hlo_value_t *n, tpu_hlo_value_t *hy);

/* GRU backward of one step: from go (gradient of hy), r, z, n, hx and hn
 * (the hidden new-gate part, b_hn included) -> gradients of the input gates
 * gi[3], of the hidden gates gh[3] and the direct part of hx's gradient
 * (go * z; the path through the hidden matmul is the caller's). */
void tpu_rnn_gru_grad(tpu_op_ctx_t *c, tpu_hlo_value_t go, tpu_hlo_value_t r, tpu_hlo_value_t z,
                      tpu_hlo_value_t n, tpu_hlo_value_t hx, tpu_hlo_value_t hn, tpu_hlo_value_t gi[3],
                      tpu_hlo_value_t gh[3], tpu_hlo_value_t *ghx);

#endif /* TPU_OPS_RNN_INTERNAL_H_ */
