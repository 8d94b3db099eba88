/* rnn.c - recurrent cells: the fused LSTM / GRU cell ops PyTorch asks a
 * PrivateUse1 backend for, and the cell math the layer rules (rnn_layer.c)
 * share (see ops.h for how a rule is written).
 *
 * Cells
 * -----
 * For a non-CPU device ATen's composite RNN code (nn.LSTMCell, nn.GRUCell,
 * aten::lstm_cell, gru_cell and the composite aten::lstm / gru) computes a
 * step as two matmuls (the input and hidden "gates") and hands the
 * elementwise rest to one fused op:
 *   _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, b_ih?, b_hh?)
 *   _thnn_fused_gru_cell(input_gates, hidden_gates, hx, b_ih?, b_hh?)
 * whose backward ops take a "workspace" the forward saved.  Layouts are
 * PyTorch's (its CUDA kernels, aten/src/ATen/native/cuda/RNN.cu), so
 * autograd's formulas and the composite code around them work unchanged:
 *   LSTM gates [B, 4H] in the order (input, forget, cell, output);
 *        workspace [B, 4H] = the activated gates (sigmoid, sigmoid, tanh,
 *        sigmoid).
 *   GRU  gates [B, 3H] in the order (reset, update ("input"), new);
 *        workspace [B, 5H] = (r, z, n, hx, hn + b_hn), r/z/n activated.
 *
 * The rules compute in the accumulation type (f32 for bf16/f16) and round
 * once, like the CUDA kernels' accscalar_t.  Whole layers (nn.LSTM / GRU /
 * RNN) do not come here step by step: see rnn_layer.c.
 */
#include <stdio.h>
#include <string.h>

#include "ops/rnn_internal.h"

/* ---- cell math, shared by the cell and the layer rules ------------------- */

/* LSTM: summed gates [B,4H] (acc) -> activated i, f, g, o. */
void tpu_rnn_lstm_act(tpu_op_ctx_t *c, tpu_hlo_value_t gates, int64_t B, int64_t H, tpu_hlo_value_t act[4]) {
  for (int k = 0; k < 4; k++)
    act[k] = tpu_hlo_unary(c->f, k == 2 ? "tanh" : "logistic", rnn_chunk(c, gates, B, H, k));
}

/* cy = f*cx + i*g. */
tpu_hlo_value_t tpu_rnn_lstm_cy(tpu_op_ctx_t *c, const tpu_hlo_value_t a[4], tpu_hlo_value_t cx) {
  return ADD(c, MUL(c, a[1], cx), MUL(c, a[0], a[2]));
}

/* LSTM backward of one step (the CUDA kernel's formulas): from the gradient
 * of h (go) and of c (gc) after the step, the activated gates a[4], the
 * previous cell cx and tanh(cy) -> the gradient of the summed gates
 * (dgates[4]) and of cx. */
void tpu_rnn_lstm_grad(tpu_op_ctx_t *c, tpu_hlo_value_t go, tpu_hlo_value_t gc, tpu_hlo_value_t cx,
                       const tpu_hlo_value_t a[4], tpu_hlo_value_t tcy, tpu_hlo_value_t dgates[4],
                       tpu_hlo_value_t *dcx) {
  tpu_hlo_value_t gog = MUL(c, go, tcy);
  tpu_hlo_value_t gcx = ADD(c, rnn_dtanh(c, MUL(c, go, a[3]), tcy), gc);
  dgates[0] = rnn_dsigmoid(c, MUL(c, gcx, a[2]), a[0]);
  dgates[1] = rnn_dsigmoid(c, MUL(c, gcx, cx), a[1]);
  dgates[2] = rnn_dtanh(c, MUL(c, gcx, a[0]), a[2]);
  dgates[3] = rnn_dsigmoid(c, gog, a[3]);
  *dcx = MUL(c, gcx, a[1]);
}

/* GRU: input part xg [B,3H] (b_ih included) and hidden part hg [B,3H]
 * (b_hh included) -> r, z, n and hy (from hx). */
void tpu_rnn_gru_step(tpu_op_ctx_t *c, tpu_hlo_value_t xg, tpu_hlo_value_t hg, tpu_hlo_value_t hx, int64_t B,
                      int64_t H, tpu_hlo_value_t *r, tpu_hlo_value_t *z, tpu_hlo_value_t *n, tpu_hlo_value_t *hy) {
  *r = tpu_hlo_unary(c->f, "logistic", ADD(c, rnn_chunk(c, xg, B, H, 0), rnn_chunk(c, hg, B, H, 0)));
  *z = tpu_hlo_unary(c->f, "logistic", ADD(c, rnn_chunk(c, xg, B, H, 1), rnn_chunk(c, hg, B, H, 1)));
  *n = tpu_hlo_unary(c->f, "tanh", ADD(c, rnn_chunk(c, xg, B, H, 2), MUL(c, *r, rnn_chunk(c, hg, B, H, 2))));
  *hy = ADD(c, *n, MUL(c, *z, SUB(c, hx, *n)));
}

/* GRU backward of one step: from go (gradient of hy), r, z, n, hx and hn
 * (the hidden new-gate part, b_hn included) -> gradients of the input gates
 * gi[3], of the hidden gates gh[3] and the direct part of hx's gradient
 * (go * z; the path through the hidden matmul is the caller's). */
void tpu_rnn_gru_grad(tpu_op_ctx_t *c, tpu_hlo_value_t go, tpu_hlo_value_t r, tpu_hlo_value_t z,
                      tpu_hlo_value_t n, tpu_hlo_value_t hx, tpu_hlo_value_t hn, tpu_hlo_value_t gi[3],
                      tpu_hlo_value_t gh[3], tpu_hlo_value_t *ghx) {
  tpu_hlo_value_t one_z = rnn_one_minus(c, z);
  tpu_hlo_value_t gz = MUL(c, MUL(c, MUL(c, go, SUB(c, hx, n)), one_z), z);
  tpu_hlo_value_t gn = rnn_dtanh(c, MUL(c, go, one_z), n);
  tpu_hlo_value_t gr = rnn_dsigmoid(c, MUL(c, gn, hn), r);
  gi[0] = gh[0] = gr;
  gi[1] = gh[1] = gz;
  gi[2] = gn;
  gh[2] = MUL(c, gn, r);
  *ghx = MUL(c, go, z);
}

/* ---- fused cells ------------------------------------------------------------ */

/* Checks shared by the fused cell rules (PyTorch's checkSizes in RNN.cu):
 * input_gates and hidden_gates 2-D of one shape [B, factor*H], biases 1-D of
 * factor*H elements, prev (cx / hx) 2-D with B*H elements; one float dtype.
 * Sets *B, *H. */
static int rnn_check_cell(tpu_op_ctx_t *c, int factor, const char *prev_name, int64_t *B, int64_t *H) {
  char b1[64], b2[64];
  if (c->nin != 3 && c->nin != 5) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected 3 inputs, or 5 with both biases, got %d", c->name, c->nin);
    return 0;
  }
  tpu_hlo_type_t ig = tpu_op_type(c, c->in[0]), hg = tpu_op_type(c, c->in[1]), prev = tpu_op_type(c, c->in[2]);
  if (ig.rank != 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Expected tensor for argument #1 'input_gates' to have 2 dimension(s), but got %d instead",
                c->name, ig.rank);
    return 0;
  }
  if (!tpu_dtype_is_float(ig.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: \"%s\" not implemented for '%s'", c->name, c->name,
                tpu_dtype_name(ig.dtype));
    return 0;
  }
  if (hg.rank != ig.rank || hg.dims[0] != ig.dims[0] || hg.dims[1] != ig.dims[1]) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Expected tensor for argument #2 'hidden_gates' to have the same size as tensor for argument "
                "#1 'input_gates'; but %s does not equal %s",
                c->name, tpu_op_shape_str(&hg, b1, sizeof b1), tpu_op_shape_str(&ig, b2, sizeof b2));
    return 0;
  }
  int64_t G = ig.dims[1];
  if (G % factor != 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: gates of size %lld are not %d gates of one hidden size", c->name,
                (long long)G, factor);
    return 0;
  }
  *B = ig.dims[0];
  *H = G / factor;
  if (c->nin == 5) {
    for (int i = 3; i < 5; i++) {
      tpu_hlo_type_t bt = tpu_op_type(c, c->in[i]);
      if (bt.rank != 1 || bt.dims[0] != G) {
        tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %s of shape [%lld], got %s", c->name,
                    i == 3 ? "input_bias" : "hidden_bias", (long long)G, tpu_op_shape_str(&bt, b1, sizeof b1));
        return 0;
      }
    }
  }
  if (prev.rank != 2 || tpu_hlo_type_numel(&prev) != *B * *H) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: expected %s of %lld elements in 2 dimensions (batch %lld x hidden %lld), got %s", c->name,
                prev_name, (long long)(*B * *H), (long long)*B, (long long)*H, tpu_op_shape_str(&prev, b1, sizeof b1));
    return 0;
  }
  for (int i = 1; i < c->nin; i++) {
    tpu_dtype_t d = tpu_op_type(c, c->in[i]).dtype;
    if (d != ig.dtype) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected scalar type %s but found %s (input %d)", c->name,
                  tpu_dtype_name(ig.dtype), tpu_dtype_name(d), i);
      return 0;
    }
  }
  return 1;
}

/* _thnn_fused_lstm_cell: inputs (input_gates [B,4H], hidden_gates [B,4H],
 * cx [B,H] (any 2-D shape of B*H elements), [input_bias [4H], hidden_bias
 * [4H]]); no attrs.  -> (hy, cy) shaped like cx, workspace [B,4H].
 *   i,f,o = sigmoid, g = tanh of the summed gates; cy = f*cx + i*g;
 *   hy = o*tanh(cy). */
static void rule_thnn_fused_lstm_cell(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t B, H;
  if (!rnn_check_cell(c, 4, "cx", &B, &H)) return;
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]), cxt = tpu_op_type(c, c->in[2]);
  tpu_dtype_t dt = xt.dtype, acc = tpu_op_opmath(dt);
  /* the CUDA kernel's order: input + hidden + b_ih + b_hh */
  tpu_hlo_value_t g = ADD(c, tpu_hlo_cast(f, c->in[0], acc), tpu_hlo_cast(f, c->in[1], acc));
  if (c->nin == 5) {
    g = ADD(c, g, rnn_bias_rows(c, c->in[3], B, 4 * H, acc));
    g = ADD(c, g, rnn_bias_rows(c, c->in[4], B, 4 * H, acc));
  }
  tpu_hlo_value_t a[4];
  tpu_rnn_lstm_act(c, g, B, H, a);
  int64_t bh[2] = {B, H};
  tpu_hlo_value_t cx = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[2], acc), 2, bh);
  tpu_hlo_value_t cy = tpu_rnn_lstm_cy(c, a, cx);
  tpu_hlo_value_t hy = MUL(c, a[3], tpu_hlo_unary(f, "tanh", cy));
  tpu_hlo_value_t outs[3] = {
      tpu_hlo_reshape(f, tpu_hlo_cast(f, hy, dt), cxt.rank, cxt.dims),
      tpu_hlo_reshape(f, tpu_hlo_cast(f, cy, dt), cxt.rank, cxt.dims),
      tpu_hlo_cast(f, tpu_hlo_concatenate(f, a, 4, 1), dt),
  };
  tpu_op_set_outputs(c, 3, outs);
}

/* _thnn_fused_lstm_cell_backward_impl: inputs ([grad_hy], [grad_cy], cx, cy,
 * workspace [B,4H]); attrs [has_grad_hy, has_grad_cy, has_bias] (an absent
 * gradient counts as zeros).  -> (grad_gates [B,4H], grad_cx shaped like cx,
 * grad_bias [4H] = grad_gates summed over the batch, only when has_bias). */
static void rule_thnn_fused_lstm_cell_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int hgh = (int)tpu_op_int(c, 0), hgc = (int)tpu_op_int(c, 1), hb = (int)tpu_op_int(c, 2);
  int need = hgh + hgc + 3;
  if (c->nin != need) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs for the given flags, got %d", c->name, need, c->nin);
    return;
  }
  int icx = hgh + hgc, icy = icx + 1, iws = icx + 2;
  char b1[64], b2[64];
  tpu_hlo_type_t wt = tpu_op_type(c, c->in[iws]), cxt = tpu_op_type(c, c->in[icx]);
  if (wt.rank != 2 || wt.dims[1] % 4 != 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected workspace of shape [batch, 4 * hidden], got %s", c->name,
                tpu_op_shape_str(&wt, b1, sizeof b1));
    return;
  }
  if (!tpu_dtype_is_float(wt.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: \"%s\" not implemented for '%s'", c->name, c->name,
                tpu_dtype_name(wt.dtype));
    return;
  }
  int64_t B = wt.dims[0], H = wt.dims[1] / 4;
  for (int i = 0; i < iws; i++) {
    tpu_hlo_type_t t = tpu_op_type(c, c->in[i]);
    if (tpu_hlo_type_numel(&t) != B * H || t.dtype != wt.dtype) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: input %d is %s of %s, expected %lld elements (batch %lld x hidden %lld) of %s "
                  "(workspace %s)",
                  c->name, i, tpu_op_shape_str(&t, b1, sizeof b1), tpu_dtype_name(t.dtype), (long long)(B * H),
                  (long long)B, (long long)H, tpu_dtype_name(wt.dtype), tpu_op_shape_str(&wt, b2, sizeof b2));
      return;
    }
  }
  tpu_dtype_t dt = wt.dtype, acc = tpu_op_opmath(dt);
  int64_t bh[2] = {B, H};
  tpu_hlo_type_t at = tpu_hlo_type_make(acc, 2, bh);
#define RNN_IN(i) tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[i], acc), 2, bh)
  tpu_hlo_value_t go = hgh ? RNN_IN(0) : tpu_hlo_constant(f, at, 0.0);
  tpu_hlo_value_t gc = hgc ? RNN_IN(hgh) : tpu_hlo_constant(f, at, 0.0);
  tpu_hlo_value_t cx = RNN_IN(icx), cy = RNN_IN(icy);
#undef RNN_IN
  tpu_hlo_value_t ws = tpu_hlo_cast(f, c->in[iws], acc);
  tpu_hlo_value_t a[4];
  for (int k = 0; k < 4; k++) a[k] = rnn_chunk(c, ws, B, H, k);
  tpu_hlo_value_t dg[4], dcx;
  tpu_rnn_lstm_grad(c, go, gc, cx, a, tpu_hlo_unary(f, "tanh", cy), dg, &dcx);
  tpu_hlo_value_t gates = tpu_hlo_concatenate(f, dg, 4, 1);
  tpu_hlo_value_t outs[3];
  outs[0] = tpu_hlo_cast(f, gates, dt);
  outs[1] = tpu_hlo_reshape(f, tpu_hlo_cast(f, dcx, dt), cxt.rank, cxt.dims);
  int n = 2;
  if (hb) {
    int64_t d0 = 0;
    outs[n++] = tpu_hlo_cast(f, tpu_hlo_reduce(f, gates, tpu_hlo_scalar(f, acc, 0.0), &d0, 1, "add"), dt);
  }
  tpu_op_set_outputs(c, n, outs);
}

/* _thnn_fused_gru_cell: inputs (input_gates [B,3H], hidden_gates [B,3H], hx
 * [B,H] (any 2-D shape of B*H elements), [input_bias [3H], hidden_bias
 * [3H]]); no attrs.  -> (hy shaped like hx, workspace [B,5H]).
 *   r = sigmoid(i_r + b_ir + h_r + b_hr), z likewise,
 *   n = tanh(i_n + b_in + r * (h_n + b_hn)), hy = n + z * (hx - n). */
static void rule_thnn_fused_gru_cell(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t B, H;
  if (!rnn_check_cell(c, 3, "hx", &B, &H)) return;
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]), hxt = tpu_op_type(c, c->in[2]);
  tpu_dtype_t dt = xt.dtype, acc = tpu_op_opmath(dt);
  tpu_hlo_value_t xg = tpu_hlo_cast(f, c->in[0], acc), hg = tpu_hlo_cast(f, c->in[1], acc);
  if (c->nin == 5) {
    xg = ADD(c, xg, rnn_bias_rows(c, c->in[3], B, 3 * H, acc));
    hg = ADD(c, hg, rnn_bias_rows(c, c->in[4], B, 3 * H, acc));
  }
  int64_t bhd[2] = {B, H};
  tpu_hlo_value_t hx = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[2], acc), 2, bhd);
  tpu_hlo_value_t r, z, n, hy;
  tpu_rnn_gru_step(c, xg, hg, hx, B, H, &r, &z, &n, &hy);
  tpu_hlo_value_t parts[5] = {r, z, n, hx, rnn_chunk(c, hg, B, H, 2)};
  tpu_hlo_value_t outs[2] = {
      tpu_hlo_reshape(f, tpu_hlo_cast(f, hy, dt), hxt.rank, hxt.dims),
      tpu_hlo_cast(f, tpu_hlo_concatenate(f, parts, 5, 1), dt),
  };
  tpu_op_set_outputs(c, 2, outs);
}

/* _thnn_fused_gru_cell_backward: inputs (grad_hy [B,H], workspace [B,5H]);
 * attrs [has_bias].  -> (grad_input_gates [B,3H], grad_hidden_gates [B,3H],
 * grad_hx shaped like grad_hy, and when has_bias grad_input_bias [3H],
 * grad_hidden_bias [3H] (the gate gradients summed over the batch)). */
static void rule_thnn_fused_gru_cell_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int hb = (int)tpu_op_int(c, 0);
  char b1[64], b2[64];
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), wt = tpu_op_type(c, c->in[1]);
  if (wt.rank != 2 || wt.dims[1] % 5 != 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected workspace of shape [batch, 5 * hidden], got %s", c->name,
                tpu_op_shape_str(&wt, b1, sizeof b1));
    return;
  }
  if (!tpu_dtype_is_float(wt.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: \"%s\" not implemented for '%s'", c->name, c->name,
                tpu_dtype_name(wt.dtype));
    return;
  }
  int64_t B = wt.dims[0], H = wt.dims[1] / 5;
  if (tpu_hlo_type_numel(&gt) != B * H || gt.dtype != wt.dtype) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad_hy is %s of %s, expected %lld elements of %s (workspace %s)",
                c->name, tpu_op_shape_str(&gt, b1, sizeof b1), tpu_dtype_name(gt.dtype), (long long)(B * H),
                tpu_dtype_name(wt.dtype), tpu_op_shape_str(&wt, b2, sizeof b2));
    return;
  }
  tpu_dtype_t dt = wt.dtype, acc = tpu_op_opmath(dt);
  int64_t bh[2] = {B, H};
  tpu_hlo_value_t go = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[0], acc), 2, bh);
  tpu_hlo_value_t ws = tpu_hlo_cast(f, c->in[1], acc);
  tpu_hlo_value_t gi[3], gh[3], ghx;
  tpu_rnn_gru_grad(c, go, rnn_chunk(c, ws, B, H, 0), rnn_chunk(c, ws, B, H, 1), rnn_chunk(c, ws, B, H, 2),
               rnn_chunk(c, ws, B, H, 3), rnn_chunk(c, ws, B, H, 4), gi, gh, &ghx);
  tpu_hlo_value_t gI = tpu_hlo_concatenate(f, gi, 3, 1), gH = tpu_hlo_concatenate(f, gh, 3, 1);
  tpu_hlo_value_t outs[5];
  outs[0] = tpu_hlo_cast(f, gI, dt);
  outs[1] = tpu_hlo_cast(f, gH, dt);
  outs[2] = tpu_hlo_reshape(f, tpu_hlo_cast(f, ghx, dt), gt.rank, gt.dims);
  int n = 3;
  if (hb) {
    int64_t d0 = 0;
    outs[n++] = tpu_hlo_cast(f, tpu_hlo_reduce(f, gI, tpu_hlo_scalar(f, acc, 0.0), &d0, 1, "add"), dt);
    outs[n++] = tpu_hlo_cast(f, tpu_hlo_reduce(f, gH, tpu_hlo_scalar(f, acc, 0.0), &d0, 1, "add"), dt);
  }
  tpu_op_set_outputs(c, n, outs);
}

const tpu_op_rule_t tpu_rules_rnn[] = {
    {"_thnn_fused_lstm_cell", rule_thnn_fused_lstm_cell, 3, 5},
    {"_thnn_fused_lstm_cell_backward_impl", rule_thnn_fused_lstm_cell_backward, 3, 5},
    {"_thnn_fused_gru_cell", rule_thnn_fused_gru_cell, 3, 5},
    {"_thnn_fused_gru_cell_backward", rule_thnn_fused_gru_cell_backward, 2, 2},
    {NULL, NULL, 0, 0},
};
