/* rnn_layer.c - recurrent layers: one direction of one LSTM / GRU / RNN
 * layer over a whole sequence as a single loop (see ops.h for how a rule is
 * written; the cell math is rnn.c's, through rnn_internal.h).
 *
 * lstm_layer, gru_layer and rnn_layer run one direction of one layer over a
 * whole sequence as a single stablehlo.while (the loop body is one step), so
 * a sequence of any length is one small program that compiles once; the
 * unrolled alternative (one cell op per step) grows the program with the
 * sequence and XLA's compile time faster than that.  The input projection
 * of every step (x @ W_ih^T + biases) is one matmul done before the loop by
 * the adapter (torch_tpu/ops/rnn.py), so autograd derives the gradients of
 * x, W_ih and the input biases; the *_layer_backward rules run the reverse
 * loop and return the gradient of that projection, of the hidden weights
 * and of the initial state.  Tensors are time-major [T, B, ...].
 *
 * Packed sequences (PackedSequence: batch_sizes [T], non-increasing) run
 * padded, with a batch_sizes input: at step t rows b >= batch_sizes[t] keep
 * their state (and output zeros), so the final state of each sequence is
 * the one at its own last step and a reverse direction starts each sequence
 * at its own end, as PyTorch's packed layers do.
 *
 * The cell math runs in the accumulation type (f32 for bf16/f16) and the
 * state is rounded to the input dtype once per step, as PyTorch keeps it;
 * matmuls accumulate in the accumulation type.
 */
#include <string.h>

#include "ops/rnn_internal.h"

/* A 2-d matmul contracting dim `ca` of a with dim `cb` of b (out dtype acc). */
static tpu_hlo_value_t rnn_mm(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b, int ca, int cb, tpu_dtype_t acc) {
  tpu_hlo_dot_dims_t d;
  memset(&d, 0, sizeof d);
  d.ncontract = 1;
  d.lhs_contract[0] = ca;
  d.rhs_contract[0] = cb;
  return tpu_hlo_dot_general(c->f, a, b, &d, acc);
}

/* a [B,K] @ w[N,K]^T -> [B,N]. */
static tpu_hlo_value_t rnn_mm_nt(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t w, tpu_dtype_t acc) {
  return tpu_op_mm_nt(c, a, w, acc);
}

/* a [B,N] @ w [N,K] -> [B,K]. */
static tpu_hlo_value_t rnn_mm_nn(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t w, tpu_dtype_t acc) {
  return rnn_mm(c, a, w, 1, 0, acc);
}

/* a [B,N]^T @ b [B,K] -> [N,K]. */
static tpu_hlo_value_t rnn_mm_tn(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b, tpu_dtype_t acc) {
  return rnn_mm(c, a, b, 0, 0, acc);
}

/* ---- layers: one direction of one layer as a while loop -------------------- */

enum { RNN_LSTM, RNN_GRU, RNN_TANH, RNN_RELU };

/* What a layer rule knows about its arguments. */
typedef struct {
  int kind;
  int reverse, has_proj, has_bias, has_bs;
  int64_t T, B, H, P, G; /* steps, batch, hidden, output (P = proj or H), gate width */
  tpu_dtype_t dt, acc;
} rnn_layer_t;

/* The recurrent weight's gradient, summed over every step at once after the
 * backward loop: sum_t dg_t^T @ h_{t-1} = dg [T,B,G] . h_prev [T,B,P] over
 * (T, B) -> [G,P] in dt (one product instead of a [G,P] accumulation in
 * every step; a padded row's dg is zero). */
static tpu_hlo_value_t rnn_weight_grad(tpu_op_ctx_t *c, const rnn_layer_t *L, tpu_hlo_value_t dg, tpu_hlo_value_t hp) {
  tpu_hlo_dot_dims_t d;
  memset(&d, 0, sizeof d);
  d.ncontract = 2;
  d.lhs_contract[0] = d.rhs_contract[0] = 0;
  d.lhs_contract[1] = d.rhs_contract[1] = 1;
  return tpu_hlo_cast(c->f, tpu_hlo_dot_general(c->f, dg, hp, &d, L->acc), L->dt);
}

static int rnn_expect(tpu_op_ctx_t *c, int i, const char *what, tpu_dtype_t dt, int rank, int64_t d0, int64_t d1,
                      int64_t d2) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[i]);
  int64_t want[3] = {d0, d1, d2};
  int ok = t.rank == rank && t.dtype == dt;
  for (int k = 0; ok && k < rank; k++) ok = t.dims[k] == want[k];
  if (!ok) {
    char b1[64], b2[64];
    tpu_hlo_type_t w = tpu_hlo_type_make(dt, rank, want);
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %s of shape %s and dtype %s, got %s of %s", c->name, what,
                tpu_op_shape_str(&w, b1, sizeof b1), tpu_dtype_name(dt), tpu_op_shape_str(&t, b2, sizeof b2),
                tpu_dtype_name(t.dtype));
    return 0;
  }
  return 1;
}

/* Reads T, B, G from input ix ([T,B,G], a float dtype) and P from the
 * hidden weight (input iw, [G, P]; iw < 0: none, P = H); factor = gates per
 * step, H = G / factor. */
static int rnn_layer_shapes(tpu_op_ctx_t *c, rnn_layer_t *L, int factor, int ix, int iw) {
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[ix]), wt = tpu_op_type(c, c->in[iw < 0 ? ix : iw]);
  char b1[64], b2[64];
  if (xt.rank != 3 || !tpu_dtype_is_float(xt.dtype) || xt.dims[2] % factor != 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected gates [steps, batch, %d * hidden] of a float dtype, got %s of %s",
                c->name, factor, tpu_op_shape_str(&xt, b1, sizeof b1), tpu_dtype_name(xt.dtype));
    return 0;
  }
  L->T = xt.dims[0];
  L->B = xt.dims[1];
  L->G = xt.dims[2];
  L->H = L->G / factor;
  L->dt = xt.dtype;
  L->acc = tpu_op_opmath(xt.dtype);
  L->P = L->H;
  if (iw < 0) return 1;
  if (wt.rank != 2 || wt.dims[0] != L->G || wt.dtype != L->dt) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected weight_hh of shape [%lld, *] and dtype %s, got %s of %s (gates %s)",
                c->name, (long long)L->G, tpu_dtype_name(L->dt), tpu_op_shape_str(&wt, b1, sizeof b1),
                tpu_dtype_name(wt.dtype), tpu_op_shape_str(&xt, b2, sizeof b2));
    return 0;
  }
  L->P = wt.dims[1];
  if (!L->has_proj && L->P != L->H) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: weight_hh %s does not match hidden size %lld", c->name,
                tpu_op_shape_str(&wt, b1, sizeof b1), (long long)L->H);
    return 0;
  }
  if (L->T < 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected a sequence of at least one step", c->name);
    return 0;
  }
  return 1;
}

static int rnn_check_bs(tpu_op_ctx_t *c, const rnn_layer_t *L, int i) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[i]);
  if (t.rank != 1 || t.dims[0] != L->T || !tpu_dtype_is_int(t.dtype)) {
    char b1[64];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected batch_sizes of shape [%lld] and an integer dtype, got %s of %s",
                c->name, (long long)L->T, tpu_op_shape_str(&t, b1, sizeof b1), tpu_dtype_name(t.dtype));
    return 0;
  }
  return 1;
}

static tpu_hlo_value_t rnn_zeros(tpu_op_ctx_t *c, tpu_dtype_t dt, int rank, int64_t d0, int64_t d1, int64_t d2) {
  int64_t d[3] = {d0, d1, d2};
  return tpu_hlo_constant(c->f, tpu_hlo_type_make(dt, rank, d), 0.0);
}

/* Step tt of X [T,B,W] as [B,W]. */
static tpu_hlo_value_t rnn_at(tpu_op_ctx_t *c, tpu_hlo_value_t X, tpu_hlo_value_t tt) {
  tpu_hlo_type_t t = tpu_op_type(c, X);
  tpu_hlo_value_t z = tpu_hlo_scalar(c->f, TPU_S64, 0);
  tpu_hlo_value_t starts[3] = {tt, z, z};
  int64_t sizes[3] = {1, t.dims[1], t.dims[2]};
  return tpu_hlo_reshape(c->f, tpu_hlo_dynamic_slice(c->f, X, starts, sizes), 2, t.dims + 1);
}

/* X with step tt replaced by v [B,W] (converted to X's dtype). */
static tpu_hlo_value_t rnn_put(tpu_op_ctx_t *c, tpu_hlo_value_t X, tpu_hlo_value_t v, tpu_hlo_value_t tt) {
  tpu_hlo_type_t t = tpu_op_type(c, X);
  tpu_hlo_value_t z = tpu_hlo_scalar(c->f, TPU_S64, 0);
  tpu_hlo_value_t starts[3] = {tt, z, z};
  int64_t d[3] = {1, t.dims[1], t.dims[2]};
  return tpu_hlo_dynamic_update_slice(c->f, X, tpu_hlo_reshape(c->f, tpu_hlo_cast(c->f, v, t.dtype), 3, d), starts);
}

/* The rows of step tt that are active: pred [B] = b < batch_sizes[tt]. */
static tpu_hlo_value_t rnn_active(tpu_op_ctx_t *c, tpu_hlo_value_t bs, tpu_hlo_value_t tt, int64_t B) {
  tpu_hlo_func_t *f = c->f;
  int64_t one = 1;
  tpu_hlo_value_t n = tpu_hlo_reshape(f, tpu_hlo_dynamic_slice(f, bs, &tt, &one), 0, NULL);
  tpu_hlo_type_t bt = tpu_hlo_type_make(TPU_S64, 1, &B);
  tpu_hlo_value_t lim = tpu_hlo_broadcast_in_dim(f, tpu_hlo_cast(f, n, TPU_S64), bt, NULL);
  return tpu_hlo_compare(f, "LT", tpu_hlo_iota(f, bt, 0), lim);
}

/* select(m [B], a, b) for [B,W] values. */
static tpu_hlo_value_t rnn_where(tpu_op_ctx_t *c, tpu_hlo_value_t m, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  tpu_hlo_type_t t = tpu_op_type(c, a);
  t.dtype = TPU_PRED;
  int64_t d0 = 0;
  return tpu_hlo_select(c->f, tpu_hlo_broadcast_in_dim(c->f, m, t, &d0), a, b);
}

static tpu_hlo_value_t rnn_zeros_like(tpu_op_ctx_t *c, tpu_hlo_value_t v) {
  return tpu_hlo_constant(c->f, tpu_op_type(c, v), 0.0);
}

/* The time index of loop iteration k: forward layers run t = 0..T-1 (the
 * reverse direction T-1..0); their backward loops run the other way. */
static tpu_hlo_value_t rnn_time(tpu_op_ctx_t *c, const rnn_layer_t *L, tpu_hlo_value_t k, int backward) {
  int down = L->reverse ^ backward;
  if (!down) return k;
  return SUB(c, tpu_hlo_scalar(c->f, TPU_S64, (double)(L->T - 1)), k);
}

static tpu_hlo_value_t rnn_cond(tpu_op_ctx_t *c, const rnn_layer_t *L, tpu_hlo_value_t k) {
  return tpu_hlo_compare(c->f, "LT", k, tpu_hlo_scalar(c->f, TPU_S64, (double)L->T));
}

static tpu_hlo_value_t rnn_next(tpu_op_ctx_t *c, tpu_hlo_value_t k) {
  return ADD(c, k, tpu_hlo_scalar(c->f, TPU_S64, 1.0));
}

/* Layer attrs: [reverse, flag, has_batch_sizes]; flag = has_proj (lstm),
 * has_bias (gru), relu (rnn). */
static void rnn_layer_attrs(tpu_op_ctx_t *c, rnn_layer_t *L, int kind) {
  memset(L, 0, sizeof *L);
  L->kind = kind;
  L->reverse = (int)tpu_op_int(c, 0);
  int flag = (int)tpu_op_int(c, 1);
  L->has_bs = (int)tpu_op_int(c, 2);
  if (kind == RNN_LSTM) L->has_proj = flag;
  if (kind == RNN_GRU) L->has_bias = flag;
  if (kind == RNN_TANH && flag) L->kind = RNN_RELU;
}

static int rnn_nin_check(tpu_op_ctx_t *c, int need) {
  if (c->nin != need) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs for the given flags, got %d", c->name, need, c->nin);
    return 0;
  }
  return 1;
}

/* lstm_layer: inputs (xg [T,B,4H] = x @ W_ih^T + b_ih + b_hh, w_hh [4H,P],
 * h0 [B,P], c0 [B,H], [w_hr [P,H]], [batch_sizes [T]]); attrs [reverse,
 * has_proj, has_batch_sizes].  -> (y [T,B,P], hT [B,P], cT [B,H], and for the
 * backward: gates [T,B,4H] (activated), h_prev [T,B,P], c_prev [T,B,H] (the
 * state each step started from)). */
static void rule_lstm_layer(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  rnn_layer_t L;
  rnn_layer_attrs(c, &L, RNN_LSTM);
  if (!rnn_nin_check(c, 4 + L.has_proj + L.has_bs)) return;
  if (!rnn_layer_shapes(c, &L, 4, 0, 1)) return;
  int ihr = 4, ibs = 4 + L.has_proj;
  int64_t T = L.T, B = L.B, H = L.H, P = L.P, G = L.G;
  if (!rnn_expect(c, 2, "h0", L.dt, 2, B, P, 0) || !rnn_expect(c, 3, "c0", L.dt, 2, B, H, 0)) return;
  if (L.has_proj && !rnn_expect(c, ihr, "weight_hr", L.dt, 2, P, H, 0)) return;
  if (L.has_bs && !rnn_check_bs(c, &L, ibs)) return;
  /* carried: k, h, c, Y, GATES, HP, CP, xg, w_hh, [w_hr], [bs] */
  enum { K, HH, CC, Y, GS, HP, CP, XG, WHH, NFIX };
  tpu_hlo_value_t init[NFIX + 2], a[NFIX + 2], next[NFIX + 2], res[NFIX + 2];
  int n = NFIX, iwhr = -1, ibsv = -1;
  init[K] = tpu_hlo_scalar(f, TPU_S64, 0);
  init[HH] = c->in[2];
  init[CC] = c->in[3];
  init[Y] = rnn_zeros(c, L.dt, 3, T, B, P);
  init[GS] = rnn_zeros(c, L.dt, 3, T, B, G);
  init[HP] = rnn_zeros(c, L.dt, 3, T, B, P);
  init[CP] = rnn_zeros(c, L.dt, 3, T, B, H);
  init[XG] = c->in[0];
  init[WHH] = c->in[1];
  if (L.has_proj) init[iwhr = n++] = c->in[ihr];
  if (L.has_bs) init[ibsv = n++] = c->in[ibs];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, n, a)) return;
  if (!tpu_hlo_while_body(f, &w, rnn_cond(c, &L, a[K]), a)) return;
  tpu_hlo_value_t tt = rnn_time(c, &L, a[K], 0);
  tpu_hlo_value_t h = a[HH], cx = a[CC];
  tpu_hlo_value_t gates = ADD(c, tpu_hlo_cast(f, rnn_at(c, a[XG], tt), L.acc), rnn_mm_nt(c, h, a[WHH], L.acc));
  tpu_hlo_value_t act[4];
  tpu_rnn_lstm_act(c, gates, B, H, act);
  tpu_hlo_value_t cy = tpu_rnn_lstm_cy(c, act, tpu_hlo_cast(f, cx, L.acc));
  tpu_hlo_value_t hy = MUL(c, act[3], tpu_hlo_unary(f, "tanh", cy));
  if (L.has_proj) hy = rnn_mm_nt(c, tpu_hlo_cast(f, hy, L.dt), a[iwhr], L.acc);
  tpu_hlo_value_t hn = tpu_hlo_cast(f, hy, L.dt), cn = tpu_hlo_cast(f, cy, L.dt), yt = hn;
  if (L.has_bs) {
    tpu_hlo_value_t m = rnn_active(c, a[ibsv], tt, B);
    yt = rnn_where(c, m, hn, rnn_zeros_like(c, hn));
    hn = rnn_where(c, m, hn, h);
    cn = rnn_where(c, m, cn, cx);
  }
  for (int i = 0; i < n; i++) next[i] = a[i];
  next[K] = rnn_next(c, a[K]);
  next[HH] = hn;
  next[CC] = cn;
  next[Y] = rnn_put(c, a[Y], yt, tt);
  next[GS] = rnn_put(c, a[GS], tpu_hlo_concatenate(f, act, 4, 1), tt);
  next[HP] = rnn_put(c, a[HP], h, tt);
  next[CP] = rnn_put(c, a[CP], cx, tt);
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  tpu_hlo_value_t outs[6] = {res[Y], res[HH], res[CC], res[GS], res[HP], res[CP]};
  tpu_op_set_outputs(c, 6, outs);
}

/* lstm_layer_backward: inputs (grad_y [T,B,P], grad_hT [B,P], grad_cT [B,H],
 * gates [T,B,4H], h_prev [T,B,P], c_prev [T,B,H] (lstm_layer's outputs 3-5),
 * w_hh [4H,P], [w_hr [P,H]], [batch_sizes [T]]); attrs as lstm_layer.
 * -> (grad_xg [T,B,4H], grad_h0 [B,P], grad_c0 [B,H], grad_w_hh [4H,P],
 * [grad_w_hr [P,H]]). */
static void rule_lstm_layer_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  rnn_layer_t L;
  rnn_layer_attrs(c, &L, RNN_LSTM);
  if (!rnn_nin_check(c, 7 + L.has_proj + L.has_bs)) return;
  if (!rnn_layer_shapes(c, &L, 4, 3, 6)) return;
  int ihr = 7, ibs = 7 + L.has_proj;
  int64_t T = L.T, B = L.B, H = L.H, P = L.P, G = L.G;
  if (!rnn_expect(c, 0, "grad_y", L.dt, 3, T, B, P) || !rnn_expect(c, 1, "grad_hT", L.dt, 2, B, P, 0) ||
      !rnn_expect(c, 2, "grad_cT", L.dt, 2, B, H, 0) || !rnn_expect(c, 4, "h_prev", L.dt, 3, T, B, P) ||
      !rnn_expect(c, 5, "c_prev", L.dt, 3, T, B, H))
    return;
  if (L.has_proj && !rnn_expect(c, ihr, "weight_hr", L.dt, 2, P, H, 0)) return;
  if (L.has_bs && !rnn_check_bs(c, &L, ibs)) return;
  /* carried: k, dh, dc, GXG, gy, gates, cp, w_hh, [w_hr, GWHR], [bs] */
  enum { K, DH, DC, GXG, GY, GS, CP, WHH, NFIX };
  tpu_hlo_value_t init[NFIX + 3], a[NFIX + 3], next[NFIX + 3], res[NFIX + 3];
  int n = NFIX, iwhr = -1, igwhr = -1, ibsv = -1;
  init[K] = tpu_hlo_scalar(f, TPU_S64, 0);
  init[DH] = tpu_hlo_cast(f, c->in[1], L.acc);
  init[DC] = tpu_hlo_cast(f, c->in[2], L.acc);
  init[GXG] = rnn_zeros(c, L.dt, 3, T, B, G);
  init[GY] = c->in[0];
  init[GS] = c->in[3];
  init[CP] = c->in[5];
  init[WHH] = c->in[6];
  if (L.has_proj) {
    init[iwhr = n++] = c->in[ihr];
    init[igwhr = n++] = rnn_zeros(c, L.acc, 2, P, H, 0);
  }
  if (L.has_bs) init[ibsv = n++] = c->in[ibs];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, n, a)) return;
  if (!tpu_hlo_while_body(f, &w, rnn_cond(c, &L, a[K]), a)) return;
  tpu_hlo_value_t tt = rnn_time(c, &L, a[K], 1);
  tpu_hlo_value_t gs = tpu_hlo_cast(f, rnn_at(c, a[GS], tt), L.acc);
  tpu_hlo_value_t act[4];
  for (int k = 0; k < 4; k++) act[k] = rnn_chunk(c, gs, B, H, k);
  tpu_hlo_value_t cp = tpu_hlo_cast(f, rnn_at(c, a[CP], tt), L.acc);
  tpu_hlo_value_t tcy = tpu_hlo_unary(f, "tanh", tpu_rnn_lstm_cy(c, act, cp));
  tpu_hlo_value_t dh = a[DH], dc = a[DC], m = TPU_HLO_NONE;
  tpu_hlo_value_t gh = ADD(c, dh, tpu_hlo_cast(f, rnn_at(c, a[GY], tt), L.acc)), gc = dc;
  if (L.has_bs) {
    m = rnn_active(c, a[ibsv], tt, B);
    gh = rnn_where(c, m, gh, rnn_zeros_like(c, gh));
    gc = rnn_where(c, m, gc, rnn_zeros_like(c, gc));
  }
  tpu_hlo_value_t ghc = gh, gwhr = TPU_HLO_NONE;
  if (L.has_proj) {
    /* h = (o * tanh(c)) @ W_hr^T */
    tpu_hlo_value_t hc = tpu_hlo_cast(f, MUL(c, act[3], tcy), L.dt);
    gwhr = ADD(c, a[igwhr], rnn_mm_tn(c, tpu_hlo_cast(f, gh, L.dt), hc, L.acc));
    ghc = rnn_mm_nn(c, tpu_hlo_cast(f, gh, L.dt), a[iwhr], L.acc);
  }
  tpu_hlo_value_t dg[4], dcx;
  tpu_rnn_lstm_grad(c, ghc, gc, cp, act, tcy, dg, &dcx);
  tpu_hlo_value_t dgates = tpu_hlo_cast(f, tpu_hlo_concatenate(f, dg, 4, 1), L.dt);
  tpu_hlo_value_t dhp = rnn_mm_nn(c, dgates, a[WHH], L.acc);
  if (L.has_bs) {
    dhp = ADD(c, dhp, rnn_where(c, m, rnn_zeros_like(c, dh), dh));
    dcx = ADD(c, dcx, rnn_where(c, m, rnn_zeros_like(c, dc), dc));
  }
  for (int i = 0; i < n; i++) next[i] = a[i];
  next[K] = rnn_next(c, a[K]);
  next[DH] = dhp;
  next[DC] = dcx;
  next[GXG] = rnn_put(c, a[GXG], dgates, tt);
  if (L.has_proj) next[igwhr] = gwhr;
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  tpu_hlo_value_t outs[5] = {res[GXG], tpu_hlo_cast(f, res[DH], L.dt), tpu_hlo_cast(f, res[DC], L.dt),
                             rnn_weight_grad(c, &L, res[GXG], c->in[4]), TPU_HLO_NONE};
  if (L.has_proj) outs[4] = tpu_hlo_cast(f, res[igwhr], L.dt);
  tpu_op_set_outputs(c, 4 + L.has_proj, outs);
}

/* gru_layer: inputs (xg [T,B,3H] = x @ W_ih^T + b_ih, w_hh [3H,H], h0 [B,H],
 * [b_hh [3H]], [batch_sizes [T]]); attrs [reverse, has_bias,
 * has_batch_sizes].  -> (y [T,B,H], hT [B,H], and for the backward: gates
 * [T,B,4H] = (r, z, n, h_n + b_hn), h_prev [T,B,H]). */
static void rule_gru_layer(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  rnn_layer_t L;
  rnn_layer_attrs(c, &L, RNN_GRU);
  if (!rnn_nin_check(c, 3 + L.has_bias + L.has_bs)) return;
  if (!rnn_layer_shapes(c, &L, 3, 0, 1)) return;
  int ib = 3, ibs = 3 + L.has_bias;
  int64_t T = L.T, B = L.B, H = L.H, G = L.G;
  if (!rnn_expect(c, 2, "h0", L.dt, 2, B, H, 0)) return;
  if (L.has_bias && !rnn_expect(c, ib, "bias_hh", L.dt, 1, G, 0, 0)) return;
  if (L.has_bs && !rnn_check_bs(c, &L, ibs)) return;
  enum { K, HH, Y, GS, HP, XG, WHH, NFIX };
  tpu_hlo_value_t init[NFIX + 2], a[NFIX + 2], next[NFIX + 2], res[NFIX + 2];
  int n = NFIX, ibv = -1, ibsv = -1;
  init[K] = tpu_hlo_scalar(f, TPU_S64, 0);
  init[HH] = c->in[2];
  init[Y] = rnn_zeros(c, L.dt, 3, T, B, H);
  init[GS] = rnn_zeros(c, L.dt, 3, T, B, 4 * H);
  init[HP] = rnn_zeros(c, L.dt, 3, T, B, H);
  init[XG] = c->in[0];
  init[WHH] = c->in[1];
  if (L.has_bias) init[ibv = n++] = c->in[ib];
  if (L.has_bs) init[ibsv = n++] = c->in[ibs];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, n, a)) return;
  if (!tpu_hlo_while_body(f, &w, rnn_cond(c, &L, a[K]), a)) return;
  tpu_hlo_value_t tt = rnn_time(c, &L, a[K], 0);
  tpu_hlo_value_t h = a[HH];
  tpu_hlo_value_t hg = rnn_mm_nt(c, h, a[WHH], L.acc);
  if (L.has_bias) hg = ADD(c, hg, rnn_bias_rows(c, a[ibv], B, G, L.acc));
  tpu_hlo_value_t r, z, nn, hy;
  tpu_rnn_gru_step(c, tpu_hlo_cast(f, rnn_at(c, a[XG], tt), L.acc), hg, tpu_hlo_cast(f, h, L.acc), B, H, &r, &z, &nn, &hy);
  tpu_hlo_value_t hn = tpu_hlo_cast(f, hy, L.dt), yt = hn;
  if (L.has_bs) {
    tpu_hlo_value_t m = rnn_active(c, a[ibsv], tt, B);
    yt = rnn_where(c, m, hn, rnn_zeros_like(c, hn));
    hn = rnn_where(c, m, hn, h);
  }
  tpu_hlo_value_t parts[4] = {r, z, nn, rnn_chunk(c, hg, B, H, 2)};
  for (int i = 0; i < n; i++) next[i] = a[i];
  next[K] = rnn_next(c, a[K]);
  next[HH] = hn;
  next[Y] = rnn_put(c, a[Y], yt, tt);
  next[GS] = rnn_put(c, a[GS], tpu_hlo_concatenate(f, parts, 4, 1), tt);
  next[HP] = rnn_put(c, a[HP], h, tt);
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  tpu_hlo_value_t outs[4] = {res[Y], res[HH], res[GS], res[HP]};
  tpu_op_set_outputs(c, 4, outs);
}

/* gru_layer_backward: inputs (grad_y [T,B,H], grad_hT [B,H], gates
 * [T,B,4H], h_prev [T,B,H] (gru_layer's outputs 2-3), w_hh [3H,H],
 * [batch_sizes [T]]); attrs as gru_layer.  -> (grad_xg [T,B,3H], grad_h0
 * [B,H], grad_w_hh [3H,H], and when has_bias grad_b_hh [3H]). */
static void rule_gru_layer_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  rnn_layer_t L;
  rnn_layer_attrs(c, &L, RNN_GRU);
  if (!rnn_nin_check(c, 5 + L.has_bs)) return;
  /* T, B and H from grad_y [T,B,H]; the rest is checked against them */
  if (!rnn_layer_shapes(c, &L, 1, 0, -1)) return;
  L.G = 3 * L.H;
  int64_t T = L.T, B = L.B, H = L.H, G = L.G;
  if (!rnn_expect(c, 0, "grad_y", L.dt, 3, T, B, H) || !rnn_expect(c, 1, "grad_hT", L.dt, 2, B, H, 0) ||
      !rnn_expect(c, 2, "gates", L.dt, 3, T, B, 4 * H) || !rnn_expect(c, 3, "h_prev", L.dt, 3, T, B, H) ||
      !rnn_expect(c, 4, "weight_hh", L.dt, 2, G, H, 0))
    return;
  if (L.has_bs && !rnn_check_bs(c, &L, 5)) return;
  enum { K, DH, GXG, GWHH, GBHH, GY, GS, HP, WHH, NFIX };
  tpu_hlo_value_t init[NFIX + 1], a[NFIX + 1], next[NFIX + 1], res[NFIX + 1];
  int n = NFIX, ibsv = -1;
  init[K] = tpu_hlo_scalar(f, TPU_S64, 0);
  init[DH] = tpu_hlo_cast(f, c->in[1], L.acc);
  init[GXG] = rnn_zeros(c, L.dt, 3, T, B, G);
  init[GWHH] = rnn_zeros(c, L.acc, 2, G, H, 0);
  init[GBHH] = rnn_zeros(c, L.acc, 1, G, 0, 0);
  init[GY] = c->in[0];
  init[GS] = c->in[2];
  init[HP] = c->in[3];
  init[WHH] = c->in[4];
  if (L.has_bs) init[ibsv = n++] = c->in[5];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, n, a)) return;
  if (!tpu_hlo_while_body(f, &w, rnn_cond(c, &L, a[K]), a)) return;
  tpu_hlo_value_t tt = rnn_time(c, &L, a[K], 1);
  tpu_hlo_value_t gs = tpu_hlo_cast(f, rnn_at(c, a[GS], tt), L.acc);
  tpu_hlo_value_t hp = rnn_at(c, a[HP], tt);
  tpu_hlo_value_t dh = a[DH], m = TPU_HLO_NONE;
  tpu_hlo_value_t gh = ADD(c, dh, tpu_hlo_cast(f, rnn_at(c, a[GY], tt), L.acc));
  if (L.has_bs) {
    m = rnn_active(c, a[ibsv], tt, B);
    gh = rnn_where(c, m, gh, rnn_zeros_like(c, gh));
  }
  tpu_hlo_value_t gi[3], ghh[3], ghx;
  tpu_rnn_gru_grad(c, gh, rnn_chunk(c, gs, B, H, 0), rnn_chunk(c, gs, B, H, 1), rnn_chunk(c, gs, B, H, 2),
               tpu_hlo_cast(f, hp, L.acc), rnn_chunk(c, gs, B, H, 3), gi, ghh, &ghx);
  tpu_hlo_value_t dxg = tpu_hlo_cast(f, tpu_hlo_concatenate(f, gi, 3, 1), L.dt);
  tpu_hlo_value_t dhg = tpu_hlo_cast(f, tpu_hlo_concatenate(f, ghh, 3, 1), L.dt);
  tpu_hlo_value_t dhp = ADD(c, rnn_mm_nn(c, dhg, a[WHH], L.acc), ghx);
  if (L.has_bs) dhp = ADD(c, dhp, rnn_where(c, m, rnn_zeros_like(c, dh), dh));
  int64_t d0 = 0;
  for (int i = 0; i < n; i++) next[i] = a[i];
  next[K] = rnn_next(c, a[K]);
  next[DH] = dhp;
  next[GXG] = rnn_put(c, a[GXG], dxg, tt);
  next[GWHH] = ADD(c, a[GWHH], rnn_mm_tn(c, dhg, hp, L.acc));
  next[GBHH] = ADD(c, a[GBHH], tpu_hlo_reduce(f, tpu_hlo_cast(f, dhg, L.acc), tpu_hlo_scalar(f, L.acc, 0.0), &d0,
                                                  1, "add"));
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  tpu_hlo_value_t outs[4] = {res[GXG], tpu_hlo_cast(f, res[DH], L.dt), tpu_hlo_cast(f, res[GWHH], L.dt),
                             tpu_hlo_cast(f, res[GBHH], L.dt)};
  tpu_op_set_outputs(c, 3 + L.has_bias, outs);
}

/* rnn_layer (RNN_TANH / RNN_RELU): inputs (xg [T,B,H] = x @ W_ih^T + b_ih +
 * b_hh, w_hh [H,H], h0 [B,H], [batch_sizes [T]]); attrs [reverse, relu,
 * has_batch_sizes].  -> (y [T,B,H], hT [B,H], h_prev [T,B,H]);
 * h = act(xg_t + h_prev @ W_hh^T). */
static void rule_rnn_layer(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  rnn_layer_t L;
  rnn_layer_attrs(c, &L, RNN_TANH);
  if (!rnn_nin_check(c, 3 + L.has_bs)) return;
  if (!rnn_layer_shapes(c, &L, 1, 0, 1)) return;
  int64_t T = L.T, B = L.B, H = L.H;
  if (!rnn_expect(c, 2, "h0", L.dt, 2, B, H, 0)) return;
  if (L.has_bs && !rnn_check_bs(c, &L, 3)) return;
  enum { K, HH, Y, HP, XG, WHH, NFIX };
  tpu_hlo_value_t init[NFIX + 1], a[NFIX + 1], next[NFIX + 1], res[NFIX + 1];
  int n = NFIX, ibsv = -1;
  init[K] = tpu_hlo_scalar(f, TPU_S64, 0);
  init[HH] = c->in[2];
  init[Y] = rnn_zeros(c, L.dt, 3, T, B, H);
  init[HP] = rnn_zeros(c, L.dt, 3, T, B, H);
  init[XG] = c->in[0];
  init[WHH] = c->in[1];
  if (L.has_bs) init[ibsv = n++] = c->in[3];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, n, a)) return;
  if (!tpu_hlo_while_body(f, &w, rnn_cond(c, &L, a[K]), a)) return;
  tpu_hlo_value_t tt = rnn_time(c, &L, a[K], 0);
  tpu_hlo_value_t h = a[HH];
  tpu_hlo_value_t pre = ADD(c, rnn_mm_nt(c, h, a[WHH], L.acc), tpu_hlo_cast(f, rnn_at(c, a[XG], tt), L.acc));
  tpu_hlo_value_t hy = L.kind == RNN_RELU ? MAX(c, pre, rnn_zeros_like(c, pre))
                                          : tpu_hlo_unary(f, "tanh", pre);
  tpu_hlo_value_t hn = tpu_hlo_cast(f, hy, L.dt), yt = hn;
  if (L.has_bs) {
    tpu_hlo_value_t m = rnn_active(c, a[ibsv], tt, B);
    yt = rnn_where(c, m, hn, rnn_zeros_like(c, hn));
    hn = rnn_where(c, m, hn, h);
  }
  for (int i = 0; i < n; i++) next[i] = a[i];
  next[K] = rnn_next(c, a[K]);
  next[HH] = hn;
  next[Y] = rnn_put(c, a[Y], yt, tt);
  next[HP] = rnn_put(c, a[HP], h, tt);
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  tpu_hlo_value_t outs[3] = {res[Y], res[HH], res[HP]};
  tpu_op_set_outputs(c, 3, outs);
}

/* rnn_layer_backward: inputs (grad_y [T,B,H], grad_hT [B,H], y [T,B,H],
 * h_prev [T,B,H] (rnn_layer's outputs 0 and 2), w_hh [H,H], [batch_sizes
 * [T]]); attrs as rnn_layer.  -> (grad_xg [T,B,H], grad_h0 [B,H],
 * grad_w_hh [H,H]). */
static void rule_rnn_layer_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  rnn_layer_t L;
  rnn_layer_attrs(c, &L, RNN_TANH);
  if (!rnn_nin_check(c, 5 + L.has_bs)) return;
  if (!rnn_layer_shapes(c, &L, 1, 0, 4)) return;
  int64_t T = L.T, B = L.B, H = L.H;
  if (!rnn_expect(c, 1, "grad_hT", L.dt, 2, B, H, 0) || !rnn_expect(c, 2, "y", L.dt, 3, T, B, H) ||
      !rnn_expect(c, 3, "h_prev", L.dt, 3, T, B, H))
    return;
  if (L.has_bs && !rnn_check_bs(c, &L, 5)) return;
  enum { K, DH, GXG, GY, YY, WHH, NFIX };
  tpu_hlo_value_t init[NFIX + 1], a[NFIX + 1], next[NFIX + 1], res[NFIX + 1];
  int n = NFIX, ibsv = -1;
  init[K] = tpu_hlo_scalar(f, TPU_S64, 0);
  init[DH] = tpu_hlo_cast(f, c->in[1], L.acc);
  init[GXG] = rnn_zeros(c, L.dt, 3, T, B, H);
  init[GY] = c->in[0];
  init[YY] = c->in[2];
  init[WHH] = c->in[4];
  if (L.has_bs) init[ibsv = n++] = c->in[5];
  tpu_hlo_while_t w;
  if (!tpu_hlo_while_begin(f, &w, init, n, a)) return;
  if (!tpu_hlo_while_body(f, &w, rnn_cond(c, &L, a[K]), a)) return;
  tpu_hlo_value_t tt = rnn_time(c, &L, a[K], 1);
  tpu_hlo_value_t y = tpu_hlo_cast(f, rnn_at(c, a[YY], tt), L.acc);
  tpu_hlo_value_t dh = a[DH], m = TPU_HLO_NONE;
  tpu_hlo_value_t gh = ADD(c, dh, tpu_hlo_cast(f, rnn_at(c, a[GY], tt), L.acc));
  if (L.has_bs) {
    m = rnn_active(c, a[ibsv], tt, B);
    gh = rnn_where(c, m, gh, rnn_zeros_like(c, gh));
  }
  tpu_hlo_value_t da;
  if (L.kind == RNN_RELU)
    da = tpu_hlo_select(f, tpu_hlo_compare(f, "GT", y, rnn_zeros_like(c, y)), gh, rnn_zeros_like(c, gh));
  else
    da = rnn_dtanh(c, gh, y);
  tpu_hlo_value_t dxt = tpu_hlo_cast(f, da, L.dt);
  tpu_hlo_value_t dhp = rnn_mm_nn(c, dxt, a[WHH], L.acc);
  if (L.has_bs) dhp = ADD(c, dhp, rnn_where(c, m, rnn_zeros_like(c, dh), dh));
  for (int i = 0; i < n; i++) next[i] = a[i];
  next[K] = rnn_next(c, a[K]);
  next[DH] = dhp;
  next[GXG] = rnn_put(c, a[GXG], dxt, tt);
  if (!tpu_hlo_while_end(f, &w, next, res)) return;
  tpu_hlo_value_t outs[3] = {res[GXG], tpu_hlo_cast(f, res[DH], L.dt), rnn_weight_grad(c, &L, res[GXG], c->in[3])};
  tpu_op_set_outputs(c, 3, outs);
}

const tpu_op_rule_t tpu_rules_rnn_layer[] = {
    {"lstm_layer", rule_lstm_layer, 4, 6},
    {"lstm_layer_backward", rule_lstm_layer_backward, 7, 9},
    {"gru_layer", rule_gru_layer, 3, 5},
    {"gru_layer_backward", rule_gru_layer_backward, 5, 6},
    {"rnn_layer", rule_rnn_layer, 3, 4},
    {"rnn_layer_backward", rule_rnn_layer_backward, 5, 6},
    {NULL, NULL, 0, 0},
};
