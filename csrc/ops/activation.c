/* activation.c - activation functions and their backward ops: relu,
 * leaky_relu, elu (celu, selu), gelu, silu, mish, softplus, hardtanh,
 * hardsigmoid, hardswish, threshold, log_sigmoid, hard/soft shrink, prelu,
 * glu.  The conventions are elementwise.c's; backward ops take (grad,
 * input or result, ...) with int attr 0 the result dtype.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

static V u_relu(tpu_op_ctx_t *c, V x) {
  if (tpu_op_dtype(c, x) == TPU_PRED) return x;
  return MAX(c, x, K(c, x, 0.0));
}
static V u_silu(tpu_op_ctx_t *c, V x) {
  return DIV(c, x, ADDK(c, UN(c, "exponential", UN(c, "negate", x)), 1.0));
}
static V softplus1(tpu_op_ctx_t *c, V x) { return UN(c, "log_plus_one", UN(c, "exponential", x)); }
static V u_mish(tpu_op_ctx_t *c, V x) { return MUL(c, x, UN(c, "tanh", softplus1(c, x))); }
static V relu6_shift3(tpu_op_ctx_t *c, V x) { /* min(max(x + 3, 0), 6) */
  return MIN(c, MAX(c, ADDK(c, x, 3.0), K(c, x, 0.0)), K(c, x, 6.0));
}
static V u_hardsigmoid(tpu_op_ctx_t *c, V x) { return DIV(c, relu6_shift3(c, x), K(c, x, 6.0)); }
static V u_hardswish(tpu_op_ctx_t *c, V x) { return DIV(c, MUL(c, x, relu6_shift3(c, x)), K(c, x, 6.0)); }

TPU_UNARY_RULE(relu)
TPU_UNARY_RULE(silu)
TPU_UNARY_RULE(mish)
TPU_UNARY_RULE(hardsigmoid)
TPU_UNARY_RULE(hardswish)

/* leaky_relu: inputs (x, negative_slope); ints [dtype].  x > 0 ? x : x*slope. */
static void rule_leaky_relu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  V x = v[0];
  tpu_op_finish(c, SEL(c, CMPK(c, "GT", x, 0.0), x, MUL(c, x, v[1])), dt);
}

/* elu: inputs (x, alpha, scale, input_scale); ints [dtype].
 * x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale.  (celu and
 * selu are elu with their constants.) */
static void rule_elu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[4];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  V x = v[0];
  V negcoef = MUL(c, v[1], v[2]);
  V neg = MUL(c, UN(c, "exponential_minus_one", MUL(c, x, v[3])), negcoef);
  tpu_op_finish(c, SEL(c, CMPK(c, "LE", x, 0.0), neg, MUL(c, x, v[2])), dt);
}

static const double kSqrt1_2 = 0.70710678118654752440;
static const double kSqrt2OverPi = 0.79788456080286535588; /* sqrt(2/pi) */
static const double kGeluKappa = 0.044715;

/* gelu: inputs x; ints [dtype, approximate (0 none, 1 tanh)]. */
static void rule_gelu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  int64_t approx = tpu_op_int_or(c, 1, 0);
  V v[1];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  V x = v[0], r;
  if (approx) {
    V x3 = MUL(c, MUL(c, x, x), x);
    V inner = MULK(c, ADD(c, x, MULK(c, x3, kGeluKappa)), kSqrt2OverPi);
    r = MUL(c, MULK(c, x, 0.5), ADDK(c, UN(c, "tanh", inner), 1.0));
  } else {
    r = MUL(c, MULK(c, x, 0.5), ADDK(c, tpu_ew_erf(c, MULK(c, x, kSqrt1_2)), 1.0));
  }
  tpu_op_finish(c, r, dt);
}

/* softplus: inputs (x, beta, threshold); ints [dtype].
 * x*beta > threshold ? x : log1p(exp(x*beta)) / beta. */
static void rule_softplus(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[3];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  V x = v[0], xb = MUL(c, v[0], v[1]);
  V soft = DIV(c, UN(c, "log_plus_one", UN(c, "exponential", xb)), v[1]);
  tpu_op_finish(c, SEL(c, CMP(c, "GT", xb, v[2]), x, soft), dt);
}

/* hardtanh: inputs (x, min_val, max_val); ints [dtype].  clamp. */
static void rule_hardtanh(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[3];
  if (!tpu_op_ew_start(c, 3, &dt, &ct, v)) return;
  tpu_op_finish(c, tpu_ew_clamp(c, v[0], v[1], v[2]), dt);
}

/* threshold: inputs (x, threshold, value); ints [dtype].  x <= t ? value : x. */
static void rule_threshold(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[3];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  tpu_op_finish(c, SEL(c, CMP(c, "LE", v[0], v[1]), v[2], v[0]), dt);
}

/* ---- backward ops (inputs (grad, x_or_result, ...); ints [dtype]) ------------- */

/* threshold_backward: (grad, self, threshold): self <= t ? 0 : grad. */
static void rule_threshold_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[3];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  tpu_op_finish(c, SEL(c, CMP(c, "LE", v[1], v[2]), K(c, v[0], 0.0), v[0]), dt);
}

/* gelu_backward: (grad, self); ints [dtype, approximate]. */
static void rule_gelu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  int64_t approx = tpu_op_int_or(c, 1, 0);
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V g = v[0], x = v[1], d;
  if (approx) {
    V x2 = MUL(c, x, x), x3 = MUL(c, x2, x);
    V inner = MULK(c, ADD(c, x, MULK(c, x3, kGeluKappa)), kSqrt2OverPi);
    V t = UN(c, "tanh", inner);
    V left = MULK(c, x, 0.5);
    V right = ADDK(c, t, 1.0);
    V left_d = MULK(c, right, 0.5);
    V tanh_d = SUB(c, K(c, t, 1.0), MUL(c, t, t));
    V inner_d = MULK(c, ADDK(c, MULK(c, x2, 3.0 * kGeluKappa), 1.0), kSqrt2OverPi);
    V right_d = MUL(c, MUL(c, left, tanh_d), inner_d);
    d = ADD(c, left_d, right_d);
  } else {
    V cdf = MULK(c, ADDK(c, tpu_ew_erf(c, MULK(c, x, kSqrt1_2)), 1.0), 0.5);
    V pdf = MULK(c, UN(c, "exponential", MULK(c, MUL(c, x, x), -0.5)), 0.39894228040143267794);
    d = ADD(c, cdf, MUL(c, x, pdf));
  }
  tpu_op_finish(c, MUL(c, g, d), dt);
}

/* silu_backward: (grad, self): grad * s * (1 + x (1 - s)), s = sigmoid(x). */
static void rule_silu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V x = v[1];
  V s = tpu_ew_sigmoid(c, x);
  V d = MUL(c, s, ADDK(c, MUL(c, x, SUB(c, K(c, s, 1.0), s)), 1.0));
  tpu_op_finish(c, MUL(c, v[0], d), dt);
}

/* sigmoid_backward: (grad, output): grad * (1 - y) * y. */
static void rule_sigmoid_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V y = v[1];
  tpu_op_finish(c, MUL(c, MUL(c, v[0], SUB(c, K(c, y, 1.0), y)), y), dt);
}

/* tanh_backward: (grad, output): grad * (1 - y^2). */
static void rule_tanh_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V y = v[1];
  tpu_op_finish(c, MUL(c, v[0], SUB(c, K(c, y, 1.0), MUL(c, y, y))), dt);
}

/* leaky_relu_backward: (grad, self, negative_slope): self > 0 ? grad : grad*slope. */
static void rule_leaky_relu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[3];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  tpu_op_finish(c, SEL(c, CMPK(c, "GT", v[1], 0.0), v[0], MUL(c, v[0], v[2])), dt);
}

/* elu_backward: (grad, self_or_result, alpha, scale, input_scale);
 * ints [dtype, is_result]. */
static void rule_elu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  int64_t is_result = tpu_op_int_or(c, 1, 0);
  V v[5];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V g = v[0], b = v[1];
  V negcoef = MUL(c, v[2], v[3]), poscoef = v[3], negiptcoef = v[4];
  V neg;
  if (is_result) neg = MUL(c, MUL(c, g, negiptcoef), ADD(c, b, negcoef));
  else neg = MUL(c, MUL(c, MUL(c, g, negiptcoef), negcoef), UN(c, "exponential", MUL(c, b, negiptcoef)));
  tpu_op_finish(c, SEL(c, CMPK(c, "LE", b, 0.0), neg, MUL(c, g, poscoef)), dt);
}

/* softplus_backward: (grad, self, beta, threshold):
 * x*beta > threshold ? grad : grad * z / (z + 1), z = exp(x*beta). */
static void rule_softplus_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[4];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V xb = MUL(c, v[1], v[2]);
  V z = UN(c, "exponential", xb);
  V soft = DIV(c, MUL(c, v[0], z), ADDK(c, z, 1.0));
  tpu_op_finish(c, SEL(c, CMP(c, "GT", xb, v[3]), v[0], soft), dt);
}

/* hardtanh_backward: (grad, self, min_val, max_val): outside (min, max) -> 0. */
static void rule_hardtanh_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[4];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V out = OR(c, CMP(c, "LE", v[1], v[2]), CMP(c, "GE", v[1], v[3]));
  tpu_op_finish(c, SEL(c, out, K(c, v[0], 0.0), v[0]), dt);
}

/* hardsigmoid_backward: (grad, self): -3 < x < 3 ? grad / 6 : 0. */
static void rule_hardsigmoid_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V x = v[1];
  V in = AND(c, CMPK(c, "GT", x, -3.0), CMPK(c, "LT", x, 3.0));
  tpu_op_finish(c, SEL(c, in, DIV(c, v[0], K(c, x, 6.0)), K(c, x, 0.0)), dt);
}

/* hardswish_backward: (grad, self): x < -3 ? 0 : x <= 3 ? grad (x/3 + 0.5) : grad. */
static void rule_hardswish_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V g = v[0], x = v[1];
  V mid = MUL(c, g, ADDK(c, DIV(c, x, K(c, x, 3.0)), 0.5));
  V r = SEL(c, CMPK(c, "LT", x, -3.0), K(c, x, 0.0), SEL(c, CMPK(c, "LE", x, 3.0), mid, g));
  tpu_op_finish(c, r, dt);
}

/* mish_backward: (grad, self): grad * (t + x * sigmoid(x) * (1 - t^2)),
 * t = tanh(softplus(x)). */
static void rule_mish_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt, ct;
  V v[2];
  if (!tpu_op_ew_start(c, 2, &dt, &ct, v)) return;
  V x = v[1];
  V s = tpu_ew_sigmoid(c, x);
  V t = UN(c, "tanh", softplus1(c, x));
  V d = ADD(c, t, MUL(c, MUL(c, x, s), SUB(c, K(c, t, 1.0), MUL(c, t, t))));
  tpu_op_finish(c, MUL(c, v[0], d), dt);
}

/* ---- log_sigmoid, shrink, prelu, glu ----------------------------------------------- */

/* log_sigmoid_forward: x -> (out, buffer): out = min(x, 0) - log1p(e),
 * buffer = e = exp(-|x|) (as PyTorch CPU). */
static void rule_log_sigmoid_forward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_dtype(c, c->in[0]);
  V v[1];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 1, dt, tpu_op_opmath(dt), v)) return;
  V x = v[0];
  V e = UN(c, "exponential", UN(c, "negate", UN(c, "abs", x)));
  V out = SUB(c, MIN(c, x, K(c, x, 0.0)), UN(c, "log_plus_one", e));
  V outs[2] = {tpu_hlo_cast(c->f, out, dt), tpu_hlo_cast(c->f, e, dt)};
  tpu_op_set_outputs(c, 2, outs);
}

/* log_sigmoid_backward: (grad, x) (buffer recomputed):
 * grad * (x < 0 ? 1 - e/(1+e) : e/(1+e)) with e = exp(-|x|). */
static void rule_log_sigmoid_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_require_float(c, dt) || !tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  V x = v[1];
  V e = UN(c, "exponential", UN(c, "negate", UN(c, "abs", x)));
  V q = DIV(c, e, ADD(c, e, K(c, e, 1.0)));
  V neg = CMPK(c, "LT", x, 0.0);
  V d = SEL(c, neg, SUB(c, K(c, q, 1.0), q), q);
  tpu_op_finish(c, MUL(c, v[0], d), dt);
}

/* hardshrink: (x, lambd); ints [dtype].  -l <= x <= l ? 0 : x. */
static void rule_hardshrink(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  V x = v[0], l = v[1];
  V in = AND(c, CMP(c, "GE", x, UN(c, "negate", l)), CMP(c, "LE", x, l));
  tpu_op_finish(c, SEL(c, in, K(c, x, 0.0), x), dt);
}

/* softshrink: (x, lambd); ints [dtype].  x > l ? x - l : x < -l ? x + l : 0
 * (NaN stays). */
static void rule_softshrink(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  V x = v[0], l = v[1];
  V r = SEL(c, CMP(c, "GT", x, l), SUB(c, x, l),
            SEL(c, CMP(c, "LT", x, UN(c, "negate", l)), ADD(c, x, l), K(c, x, 0.0)));
  tpu_op_finish(c, SEL(c, tpu_ew_isnan(c, x), x, r), dt);
}

/* shrink_backward (hard and soft): (grad, x, lambd); ints [dtype].
 * -l <= x <= l ? 0 : grad. */
static void rule_shrink_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[3];
  if (!tpu_op_load(c, 3, dt, tpu_op_opmath(dt), v)) return;
  V x = v[1], l = v[2];
  V in = AND(c, CMP(c, "GE", x, UN(c, "negate", l)), CMP(c, "LE", x, l));
  tpu_op_finish(c, SEL(c, in, K(c, x, 0.0), v[0]), dt);
}

/* prelu: (x, weight broadcastable to x); ints [dtype].  x > 0 ? x : w x. */
static void rule_prelu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[2];
  if (!tpu_op_load(c, 2, dt, tpu_op_opmath(dt), v)) return;
  tpu_op_finish(c, SEL(c, CMPK(c, "GT", v[0], 0.0), v[0], MUL(c, v[1], v[0])), dt);
}

/* prelu_backward: (grad, x, weight); ints [dtype] -> (grad_x, grad_w), both
 * of the broadcast shape (autograd sums grad_w to the weight's shape). */
static void rule_prelu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_result_dtype(c, 0, 1);
  V v[3];
  if (!tpu_op_load(c, 3, dt, tpu_op_opmath(dt), v)) return;
  V g = v[0], x = v[1], w = v[2];
  V pos = CMPK(c, "GT", x, 0.0);
  V outs[2] = {tpu_hlo_cast(c->f, SEL(c, pos, g, MUL(c, w, g)), dt),
               tpu_hlo_cast(c->f, SEL(c, pos, K(c, x, 0.0), MUL(c, x, g)), dt)};
  tpu_op_set_outputs(c, 2, outs);
}

/* Halves of x along dim. */
static int halves(tpu_op_ctx_t *c, V x, int64_t dim, V *a, V *b) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  if (dim < 0 || dim >= t.rank || t.dims[dim] % 2) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: bad halving dimension", c->name);
    return 0;
  }
  int64_t st[TPU_MAX_RANK] = {0}, lim[TPU_MAX_RANK];
  for (int i = 0; i < t.rank; i++) lim[i] = t.dims[i];
  lim[dim] = t.dims[dim] / 2;
  *a = tpu_hlo_slice(c->f, x, st, lim, NULL);
  st[dim] = lim[dim];
  lim[dim] = t.dims[dim];
  *b = tpu_hlo_slice(c->f, x, st, lim, NULL);
  return 1;
}

/* glu: x (float); ints [dim (normalised)].  a * sigmoid(b). */
static void rule_glu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_dtype(c, c->in[0]);
  if (!tpu_op_require_float(c, dt)) return;
  V a, b;
  if (!halves(c, tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(dt)), tpu_op_int(c, 0), &a, &b)) return;
  tpu_op_finish(c, MUL(c, a, tpu_ew_sigmoid(c, b)), dt);
}

/* glu_backward: (grad, x); ints [dim]. */
static void rule_glu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_dtype(c, c->in[1]);
  if (!tpu_op_require_float(c, dt)) return;
  int64_t dim = tpu_op_int(c, 0);
  V a, b;
  if (!halves(c, tpu_hlo_cast(c->f, c->in[1], tpu_op_opmath(dt)), dim, &a, &b)) return;
  V g = tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(dt));
  V s = tpu_ew_sigmoid(c, b);
  V ga = MUL(c, s, g);
  V gb = MUL(c, MUL(c, MUL(c, SUB(c, K(c, s, 1.0), s), s), a), g);
  V parts[2] = {ga, gb};
  tpu_op_finish(c, tpu_hlo_concatenate(c->f, parts, 2, dim), dt);
}

const tpu_op_rule_t tpu_rules_activation[] = {
    {"relu", rule_relu, 1, 1},
    {"leaky_relu", rule_leaky_relu, 2, 2},
    {"elu", rule_elu, 4, 4},
    {"gelu", rule_gelu, 1, 1},
    {"silu", rule_silu, 1, 1},
    {"mish", rule_mish, 1, 1},
    {"softplus", rule_softplus, 3, 3},
    {"hardtanh", rule_hardtanh, 3, 3},
    {"hardsigmoid", rule_hardsigmoid, 1, 1},
    {"hardswish", rule_hardswish, 1, 1},
    {"threshold", rule_threshold, 3, 3},
    {"log_sigmoid_forward", rule_log_sigmoid_forward, 1, 1},
    {"hardshrink", rule_hardshrink, 2, 2},
    {"softshrink", rule_softshrink, 2, 2},
    {"prelu", rule_prelu, 2, 2},
    {"glu", rule_glu, 1, 1},
    /* backward */
    {"threshold_backward", rule_threshold_backward, 3, 3},
    {"gelu_backward", rule_gelu_backward, 2, 2},
    {"silu_backward", rule_silu_backward, 2, 2},
    {"sigmoid_backward", rule_sigmoid_backward, 2, 2},
    {"tanh_backward", rule_tanh_backward, 2, 2},
    {"leaky_relu_backward", rule_leaky_relu_backward, 3, 3},
    {"elu_backward", rule_elu_backward, 5, 5},
    {"softplus_backward", rule_softplus_backward, 4, 4},
    {"hardtanh_backward", rule_hardtanh_backward, 4, 4},
    {"hardsigmoid_backward", rule_hardsigmoid_backward, 2, 2},
    {"hardswish_backward", rule_hardswish_backward, 2, 2},
    {"mish_backward", rule_mish_backward, 2, 2},
    {"log_sigmoid_backward", rule_log_sigmoid_backward, 2, 2},
    {"shrink_backward", rule_shrink_backward, 3, 3},
    {"prelu_backward", rule_prelu_backward, 3, 3},
    {"glu_backward", rule_glu_backward, 2, 2},
    {NULL, NULL, 0, 0},
};
