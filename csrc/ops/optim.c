/* optim.c - multi-tensor optimizer rules: the fused Adam/AdamW and SGD steps
 * (torch._fused_adam_ / _fused_adamw_ / _fused_sgd_) and AMP gradient
 * scaling.  (The torch._foreach_* ops run their per-tensor ops' rules
 * through foreach.c.)
 *
 * One rule call updates a whole list (chunk) of tensors: N tensors in, N
 * out, one program.  Hyperparameters (lr, betas, eps, weight decay,
 * momentum, ScalarList entries) are 0-d RUNTIME inputs, never attributes,
 * so a learning-rate schedule never recompiles; only structure (list
 * length, flags such as amsgrad/maximize, dtypes) is in the attributes.
 *
 * The lists of one call are limited by TPU_OP_MAX_INPUTS/OUTPUTS; the
 * Python adapters (torch_tpu/ops/optim.py) cut longer lists into chunks.
 *
 * Numerics follow PyTorch's CPU kernels (aten/src/ATen/native/cpu/
 * FusedAdamKernel.cpp, FusedSGDKernel.cpp):
 * per-step scalars (bias corrections, step size) are computed in the
 * "scalar dtype" attribute (float64 by default, as the CPU kernel's
 * doubles), then rounded to the element compute type; float16/bfloat16
 * tensors compute in float32 and round once at the end (opmath).
 */
#include <math.h>
#include <string.h>

#include "ops/toolkit.h"

/* ---- helpers ------------------------------------------------------------------ */

static bool valid_float(int64_t code) {
  return tpu_dtype_valid((int)code) && tpu_dtype_is_float((tpu_dtype_t)code);
}

/* found_inf (any float dtype, 0-d) == 1.0 as an i1 of `like`'s shape. */
static tpu_hlo_value_t skip_pred(tpu_op_ctx_t *c, tpu_hlo_value_t found_inf, const tpu_hlo_type_t *like) {
  tpu_hlo_value_t fi = tpu_hlo_cast(c->f, found_inf, TPU_F32);
  tpu_hlo_value_t p = tpu_hlo_compare(c->f, "EQ", fi, tpu_hlo_scalar(c->f, TPU_F32, 1.0));
  return tpu_hlo_broadcast_to(c->f, p, like->rank, like->dims);
}

static bool check_same(tpu_op_ctx_t *c, const tpu_hlo_type_t *p, int i, const char *list, int k) {
  const tpu_hlo_type_t *t = tpu_op_in_type(c, i);
  if (!tpu_hlo_type_equal(p, t)) {
    char a[96], b[96];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s[%d] has type %s but params[%d] has type %s", c->name, list, k,
                tpu_hlo_type_str(t, b, sizeof(b)), k, tpu_hlo_type_str(p, a, sizeof(a)));
    return false;
  }
  return true;
}

/* The input layout of a fused optimizer step: n tensors in each of `lists`
 * lists, then `nhyper` hyperparameters and `nextra` grad_scale / found_inf
 * scalars (0-d, of the float dtype sdt_code); n * nout_per outputs. */
static bool fused_layout(tpu_op_ctx_t *c, int64_t n, int lists, int nout_per, int nhyper, int nextra,
                         int64_t sdt_code, tpu_dtype_t *out_sdt) {
  if (n <= 0 || n * nout_per > TPU_OP_MAX_OUTPUTS || n * lists + nhyper + nextra != c->nin) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: bad list length %lld for %d inputs", c->name, (long long)n, c->nin);
    return false;
  }
  if (!valid_float(sdt_code)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: scalar dtype %lld is not a float type", c->name, (long long)sdt_code);
    return false;
  }
  *out_sdt = (tpu_dtype_t)sdt_code;
  int s0 = (int)n * lists;
  for (int i = 0; i < nhyper + nextra; i++)
    if (!tpu_op_check_scalar(c, s0 + i, i < nhyper ? "hyperparameter" : "grad_scale/found_inf")) return false;
  return true;
}

/* ---- fused Adam / AdamW ----------------------------------------------------------
 * Rule "fused_adam".
 *   attrs: [n, amsgrad, maximize, adamw, has_weight_decay, has_grad_scale,
 *           has_found_inf, scalar_dtype]
 *   inputs: params[n], grads[n], exp_avgs[n], exp_avg_sqs[n],
 *           max_exp_avg_sqs[n] (amsgrad only), state_steps[n] (one-element),
 *           lr, beta1, beta2, weight_decay, eps (one-element),
 *           grad_scale (if has_grad_scale), found_inf (if has_found_inf)
 *   outputs: params[n], exp_avgs[n], exp_avg_sqs[n], max_exp_avg_sqs[n]
 *            (amsgrad), grads[n] (has_grad_scale: the unscaled grads)
 * Per element (compute type = opmath of the param dtype):
 *   g = grad / grad_scale; if maximize g = -g
 *   adam:  if wd: g += p * wd          adamw: if wd: p = p * (1 - lr*wd)
 *   m = m*beta1 + g*(1-beta1);  v = v*beta2 + g*g*(1-beta2)
 *   vmax = max(vmax, v) (amsgrad)
 *   p = p - step_size * m / (sqrt(v or vmax) / sqrt(1-beta2^step) + eps)
 *   with step_size = lr / (1 - beta1^step).
 * found_inf == 1 leaves every output equal to its input (CPU: early return).
 */
static void rule_fused_adam(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t n = tpu_op_int(c, 0);
  bool amsgrad = tpu_op_int(c, 1), maximize = tpu_op_int(c, 2), adamw = tpu_op_int(c, 3);
  bool has_wd = tpu_op_int(c, 4), has_gs = tpu_op_int(c, 5), has_fi = tpu_op_int(c, 6);
  int64_t sdt_code = tpu_op_int(c, 7);
  if (tpu_hlo_func_status(f)) return;
  int lists = amsgrad ? 6 : 5;
  int nout_per = 3 + (amsgrad ? 1 : 0) + (has_gs ? 1 : 0);
  tpu_dtype_t sdt;
  if (!fused_layout(c, n, lists, nout_per, 5, has_gs + has_fi, sdt_code, &sdt)) return;
  int N = (int)n;
  int s0 = N * lists;
  tpu_hlo_value_t lr = tpu_op_scalar_in(c, s0 + 0, sdt), beta1 = tpu_op_scalar_in(c, s0 + 1, sdt);
  tpu_hlo_value_t beta2 = tpu_op_scalar_in(c, s0 + 2, sdt), wd = tpu_op_scalar_in(c, s0 + 3, sdt);
  tpu_hlo_value_t eps = tpu_op_scalar_in(c, s0 + 4, sdt);
  tpu_hlo_value_t one = tpu_hlo_scalar(f, sdt, 1.0);
  tpu_hlo_value_t c1 = SUB(c, one, beta1), c2 = SUB(c, one, beta2);
  tpu_hlo_value_t decay = SUB(c, one, MUL(c, lr, wd));
  tpu_hlo_value_t outs[TPU_OP_MAX_OUTPUTS];
  int o_m = N, o_v = 2 * N, o_vmax = 3 * N, o_g = (amsgrad ? 4 : 3) * N;
  for (int i = 0; i < N; i++) {
    tpu_hlo_type_t pt = *tpu_op_in_type(c, i);
    if (!tpu_dtype_is_float(pt.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: params[%d] must be floating point, got %s", c->name, i,
                  tpu_dtype_name(pt.dtype));
      return;
    }
    if (!check_same(c, &pt, N + i, "grads", i) || !check_same(c, &pt, 2 * N + i, "exp_avgs", i) ||
        !check_same(c, &pt, 3 * N + i, "exp_avg_sqs", i) ||
        (amsgrad && !check_same(c, &pt, 4 * N + i, "max_exp_avg_sqs", i)))
      return;
    int step_i = (lists - 1) * N + i;
    if (!tpu_op_check_scalar(c, step_i, "state_steps entry")) return;
    tpu_dtype_t cdt = tpu_op_opmath(pt.dtype);
    /* per-step scalars in sdt (the CPU kernel's doubles) */
    tpu_hlo_value_t step = tpu_op_scalar_in(c, step_i, sdt);
    tpu_hlo_value_t bc1 = SUB(c, one, POW(c, beta1, step));
    tpu_hlo_value_t bc2 = SUB(c, one, POW(c, beta2, step));
    tpu_hlo_value_t step_size = DIV(c, lr, bc1);
    tpu_hlo_value_t bc2_sqrt = tpu_hlo_unary(f, "sqrt", bc2);
    tpu_hlo_value_t p = tpu_hlo_cast(f, c->in[i], cdt), g = tpu_hlo_cast(f, c->in[N + i], cdt);
    tpu_hlo_value_t m = tpu_hlo_cast(f, c->in[2 * N + i], cdt), v = tpu_hlo_cast(f, c->in[3 * N + i], cdt);
    tpu_hlo_value_t g_store = TPU_HLO_NONE;
    if (has_gs) {
      tpu_hlo_value_t gs = tpu_op_scalar_in(c, s0 + 5, TPU_F32);
      g = DIV(c, g, tpu_op_scalar_as(c, gs, cdt, &pt));
      g_store = tpu_hlo_cast(f, g, pt.dtype);
    }
    if (maximize) g = tpu_hlo_unary(f, "negate", g);
    if (has_wd) {
      if (adamw) p = MUL(c, p, tpu_op_scalar_as(c, decay, cdt, &pt));
      else g = ADD(c, g, MUL(c, p, tpu_op_scalar_as(c, wd, cdt, &pt)));
    }
    m = ADD(c, MUL(c, m, tpu_op_scalar_as(c, beta1, cdt, &pt)),
            MUL(c, g, tpu_op_scalar_as(c, c1, cdt, &pt)));
    v = ADD(c, MUL(c, v, tpu_op_scalar_as(c, beta2, cdt, &pt)),
            MUL(c, MUL(c, g, g), tpu_op_scalar_as(c, c2, cdt, &pt)));
    tpu_hlo_value_t vmax = TPU_HLO_NONE, vd = v;
    if (amsgrad) {
      vmax = MAX(c, tpu_hlo_cast(f, c->in[4 * N + i], cdt), v);
      vd = vmax;
    }
    tpu_hlo_value_t denom = ADD(c, DIV(c, tpu_hlo_unary(f, "sqrt", vd), tpu_op_scalar_as(c, bc2_sqrt, cdt, &pt)),
                                tpu_op_scalar_as(c, eps, cdt, &pt));
    p = SUB(c, p, DIV(c, MUL(c, tpu_op_scalar_as(c, step_size, cdt, &pt), m), denom));
    tpu_hlo_value_t res[5] = {tpu_hlo_cast(f, p, pt.dtype), tpu_hlo_cast(f, m, pt.dtype),
                              tpu_hlo_cast(f, v, pt.dtype), vmax, g_store};
    int src[5] = {i, 2 * N + i, 3 * N + i, 4 * N + i, N + i};
    if (amsgrad) res[3] = tpu_hlo_cast(f, vmax, pt.dtype);
    if (has_fi) {
      tpu_hlo_value_t skip = skip_pred(c, c->in[s0 + 5 + has_gs], &pt);
      for (int k = 0; k < 5; k++)
        if (res[k] != TPU_HLO_NONE) res[k] = tpu_hlo_select(f, skip, c->in[src[k]], res[k]);
    }
    outs[i] = res[0];
    outs[o_m + i] = res[1];
    outs[o_v + i] = res[2];
    if (amsgrad) outs[o_vmax + i] = res[3];
    if (has_gs) outs[o_g + i] = res[4];
  }
  tpu_op_set_outputs(c, N * nout_per, outs);
}

/* ---- fused SGD ------------------------------------------------------------------
 * Rule "fused_sgd".
 *   attrs: [n, has_momentum, nesterov, maximize, is_first_step,
 *           has_weight_decay, has_grad_scale, has_found_inf, scalar_dtype]
 *   inputs: params[n], grads[n], momentum_buffers[n] (has_momentum),
 *           weight_decay, momentum, lr, dampening (one-element),
 *           grad_scale (if has_grad_scale), found_inf (if has_found_inf)
 *   outputs: params[n], momentum_buffers[n] (has_momentum),
 *            grads[n] (has_grad_scale)
 * Per element: g = grad/grad_scale; maximize: g = -g; wd: g += p*wd;
 *   momentum: buf = first ? g : buf*momentum + g*(1-dampening);
 *             g = nesterov ? g + buf*momentum : buf
 *   p = p + g * (-lr)
 */
static void rule_fused_sgd(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t n = tpu_op_int(c, 0);
  bool has_mom = tpu_op_int(c, 1), nesterov = tpu_op_int(c, 2), maximize = tpu_op_int(c, 3);
  bool first = tpu_op_int(c, 4), has_wd = tpu_op_int(c, 5), has_gs = tpu_op_int(c, 6), has_fi = tpu_op_int(c, 7);
  int64_t sdt_code = tpu_op_int(c, 8);
  if (tpu_hlo_func_status(f)) return;
  int lists = has_mom ? 3 : 2;
  int nout_per = 1 + (has_mom ? 1 : 0) + (has_gs ? 1 : 0);
  tpu_dtype_t sdt;
  if (!fused_layout(c, n, lists, nout_per, 4, has_gs + has_fi, sdt_code, &sdt)) return;
  int N = (int)n, s0 = N * lists;
  tpu_hlo_value_t wd = tpu_op_scalar_in(c, s0, sdt), mom = tpu_op_scalar_in(c, s0 + 1, sdt);
  tpu_hlo_value_t neg_lr = tpu_hlo_unary(f, "negate", tpu_op_scalar_in(c, s0 + 2, sdt));
  tpu_hlo_value_t c_damp = SUB(c, tpu_hlo_scalar(f, sdt, 1.0), tpu_op_scalar_in(c, s0 + 3, sdt));
  tpu_hlo_value_t outs[TPU_OP_MAX_OUTPUTS];
  for (int i = 0; i < N; i++) {
    tpu_hlo_type_t pt = *tpu_op_in_type(c, i);
    if (!tpu_dtype_is_float(pt.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: params[%d] must be floating point, got %s", c->name, i,
                  tpu_dtype_name(pt.dtype));
      return;
    }
    if (!check_same(c, &pt, N + i, "grads", i) || (has_mom && !check_same(c, &pt, 2 * N + i, "momentum_buffer_list", i)))
      return;
    tpu_dtype_t cdt = tpu_op_opmath(pt.dtype);
    tpu_hlo_value_t p = tpu_hlo_cast(f, c->in[i], cdt), g = tpu_hlo_cast(f, c->in[N + i], cdt);
    tpu_hlo_value_t g_store = TPU_HLO_NONE, buf = TPU_HLO_NONE;
    if (has_gs) {
      g = DIV(c, g, tpu_op_scalar_as(c, tpu_op_scalar_in(c, s0 + 4, TPU_F32), cdt, &pt));
      g_store = tpu_hlo_cast(f, g, pt.dtype);
    }
    if (maximize) g = tpu_hlo_unary(f, "negate", g);
    if (has_wd) g = ADD(c, g, MUL(c, p, tpu_op_scalar_as(c, wd, cdt, &pt)));
    if (has_mom) {
      if (first) buf = g;
      else
        buf = ADD(c, MUL(c, tpu_hlo_cast(f, c->in[2 * N + i], cdt), tpu_op_scalar_as(c, mom, cdt, &pt)),
                  MUL(c, g, tpu_op_scalar_as(c, c_damp, cdt, &pt)));
      /* the buffer is stored (rounded) before it is used, as the CPU kernel */
      buf = tpu_hlo_cast(f, tpu_hlo_cast(f, buf, pt.dtype), cdt);
      g = nesterov ? ADD(c, g, MUL(c, buf, tpu_op_scalar_as(c, mom, cdt, &pt))) : buf;
    }
    p = ADD(c, p, MUL(c, g, tpu_op_scalar_as(c, neg_lr, cdt, &pt)));
    tpu_hlo_value_t res[3] = {tpu_hlo_cast(f, p, pt.dtype), has_mom ? tpu_hlo_cast(f, buf, pt.dtype) : TPU_HLO_NONE,
                              g_store};
    int src[3] = {i, 2 * N + i, N + i};
    if (has_fi) {
      tpu_hlo_value_t skip = skip_pred(c, c->in[s0 + 4 + has_gs], &pt);
      for (int k = 0; k < 3; k++)
        if (res[k] != TPU_HLO_NONE) res[k] = tpu_hlo_select(f, skip, c->in[src[k]], res[k]);
    }
    int o = 0;
    outs[o * N + i] = res[0];
    o++;
    if (has_mom) outs[o++ * N + i] = res[1];
    if (has_gs) outs[o * N + i] = res[2];
  }
  tpu_op_set_outputs(c, N * nout_per, outs);
}

/* ---- AMP gradient scaling ----------------------------------------------------------
 * Rule "amp_unscale" (torch._amp_foreach_non_finite_check_and_unscale_).
 *   attrs: [n]
 *   inputs: grads[n] (float), found_inf (one-element float), inv_scale
 *           (one-element float)
 *   outputs: grads[n] * inv_scale (computed in opmath, the grads' dtype),
 *            found_inf' = 1 if any grad holds a non-finite value, else
 *            found_inf (found_inf's dtype and shape)
 */
static void rule_amp_unscale(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t n = tpu_op_int(c, 0);
  if (tpu_hlo_func_status(f)) return;
  if (n <= 0 || n + 1 > TPU_OP_MAX_OUTPUTS || n + 2 != c->nin) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: bad list length %lld for %d inputs", c->name, (long long)n, c->nin);
    return;
  }
  int N = (int)n;
  if (!tpu_op_check_scalar(c, N, "found_inf") || !tpu_op_check_scalar(c, N + 1, "inv_scale")) return;
  tpu_hlo_type_t ft = *tpu_op_in_type(c, N);
  if (!tpu_dtype_is_float(ft.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: found_inf must be a float tensor, got %s", c->name,
                tpu_dtype_name(ft.dtype));
    return;
  }
  tpu_hlo_value_t inv = tpu_op_scalar_in(c, N + 1, TPU_F32);
  tpu_hlo_value_t bad = tpu_hlo_constant(f, tpu_hlo_type_scalar(TPU_PRED), 0);
  tpu_hlo_value_t outs[TPU_OP_MAX_OUTPUTS];
  for (int i = 0; i < N; i++) {
    tpu_hlo_type_t t = *tpu_op_in_type(c, i);
    if (!tpu_dtype_is_float(t.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grads[%d] must be floating point, got %s", c->name, i,
                  tpu_dtype_name(t.dtype));
      return;
    }
    tpu_dtype_t cdt = tpu_op_opmath(t.dtype);
    tpu_hlo_value_t x = tpu_hlo_cast(f, c->in[i], cdt);
    int64_t dims[TPU_MAX_RANK];
    for (int d = 0; d < t.rank; d++) dims[d] = d;
    tpu_hlo_value_t fin = tpu_hlo_reduce(f, tpu_hlo_unary(f, "is_finite", x), tpu_hlo_constant(f, tpu_hlo_type_scalar(TPU_PRED), 1),
                                         dims, t.rank, "and");
    bad = OR(c, bad, tpu_hlo_unary(f, "not", fin));
    outs[i] = tpu_hlo_cast(f, MUL(c, x, tpu_op_scalar_as(c, inv, cdt, &t)), t.dtype);
  }
  tpu_hlo_value_t one = tpu_hlo_constant(f, ft, 1.0);
  outs[N] = tpu_hlo_select(f, tpu_hlo_broadcast_to(f, bad, ft.rank, ft.dims), one, c->in[N]);
  tpu_op_set_outputs(c, N + 1, outs);
}

/* Rule "amp_update_scale" (torch._amp_update_scale_).
 *   inputs: scale (one-element f32), growth_tracker (one-element int),
 *           found_inf (one-element float), growth_factor, backoff_factor
 *           (one-element, the CPU kernel's doubles), growth_interval (int)
 *   outputs: new scale, new growth_tracker (their input types)
 *   found_inf: scale *= backoff, tracker = 0; else tracker+1 == interval:
 *   scale *= growth (kept only if finite), tracker = 0; else tracker += 1.
 */
static void rule_amp_update_scale(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  for (int i = 0; i < 6; i++)
    if (!tpu_op_check_scalar(c, i, "amp_update_scale argument")) return;
  tpu_hlo_type_t st = *tpu_op_in_type(c, 0), gt = *tpu_op_in_type(c, 1);
  if (!tpu_dtype_is_float(st.dtype) || !tpu_dtype_is_int(gt.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected a float scale and an integer growth_tracker, got %s and %s",
                c->name, tpu_dtype_name(st.dtype), tpu_dtype_name(gt.dtype));
    return;
  }
  tpu_hlo_value_t scale = tpu_op_scalar_in(c, 0, TPU_F64), tracker = tpu_op_scalar_in(c, 1, TPU_S64);
  tpu_hlo_value_t found = tpu_hlo_compare(f, "NE", tpu_op_scalar_in(c, 2, TPU_F32), tpu_hlo_scalar(f, TPU_F32, 0.0));
  tpu_hlo_value_t growth = tpu_op_scalar_in(c, 3, TPU_F64), backoff = tpu_op_scalar_in(c, 4, TPU_F64);
  tpu_hlo_value_t interval = tpu_op_scalar_in(c, 5, TPU_S64);
  tpu_hlo_value_t zero = tpu_hlo_scalar(f, TPU_S64, 0);
  tpu_hlo_value_t succ = ADD(c, tracker, tpu_hlo_scalar(f, TPU_S64, 1));
  tpu_hlo_value_t grow = tpu_hlo_compare(f, "EQ", succ, interval);
  tpu_hlo_value_t grown = tpu_hlo_cast(f, tpu_hlo_cast(f, MUL(c, scale, growth), st.dtype), TPU_F64);
  tpu_hlo_value_t grown_ok = tpu_hlo_select(f, tpu_hlo_unary(f, "is_finite", grown), grown, scale);
  tpu_hlo_value_t s_ok = tpu_hlo_select(f, grow, grown_ok, scale);
  tpu_hlo_value_t t_ok = tpu_hlo_select(f, grow, zero, succ);
  tpu_hlo_value_t new_s = tpu_hlo_select(f, found, MUL(c, scale, backoff), s_ok);
  tpu_hlo_value_t new_t = tpu_hlo_select(f, found, zero, t_ok);
  tpu_hlo_value_t outs[2] = {tpu_hlo_reshape(f, tpu_hlo_cast(f, new_s, st.dtype), st.rank, st.dims),
                             tpu_hlo_reshape(f, tpu_hlo_cast(f, new_t, gt.dtype), gt.rank, gt.dims)};
  tpu_op_set_outputs(c, 2, outs);
}

const tpu_op_rule_t tpu_rules_optim[] = {
    {"fused_adam", rule_fused_adam, 8, -1},
    {"fused_sgd", rule_fused_sgd, 6, -1},
    {"amp_unscale", rule_amp_unscale, 3, -1},
    {"amp_update_scale", rule_amp_update_scale, 6, 6},
    {NULL, NULL, 0, 0},
};
