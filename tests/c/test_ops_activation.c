/* test_ops_activation.c - the activation rules (csrc/ops/activation.c) run
 * on the real plugin and compared with C references: the one-input
 * activations, those with parameters, and the backward ops. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tinytest.h"

#include "tt_ops.h"

static double r_relu(double x) { return x > 0 ? x : (isnan(x) ? x : 0); }
static double r_silu(double x) { return x / (1 + exp(-x)); }
static double r_mish(double x) { return x * tanh(log1p(exp(x))); }
static double r_hardsigmoid(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
static double r_hardswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static double r_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

static const tt_unary_case_t k_act[] = {
    {"relu", r_relu, -5, 5},      {"silu", r_silu, -10, 10},     {"mish", r_mish, -10, 10},
    {"hardsigmoid", r_hardsigmoid, -5, 5}, {"hardswish", r_hardswish, -5, 5}, {"gelu", r_gelu, -5, 5},
};

static void check_all(tpu_dtype_t dt, double rtol, double atol) {
  tt_ops_check_unary(k_act, (int)(sizeof(k_act) / sizeof(k_act[0])), dt, rtol, atol);
}

TT_TEST(ops_activation_unary_f32) { check_all(TPU_F32, 2e-6, 1e-6); }
TT_TEST(ops_activation_unary_f64) { check_all(TPU_F64, 1e-12, 1e-13); }
TT_TEST(ops_activation_unary_bf16) { check_all(TPU_BF16, 1.6e-2, 1e-5); }

/* ---- activations with parameters and backward ops ---------------------------------- */

#define NA 9
static const double k_act_x[NA] = {-5, -3, -1.5, -0.5, 0, 0.5, 1.5, 3, 5};

static void run_act(const char *rule, int nin, const double *scalars, const int64_t *ints, int nints,
                    const double *want, int with_grad) {
  int64_t d[1] = {NA};
  static const double g[NA] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  tt_ten_t in[6];
  int k = 0;
  if (with_grad) in[k++] = tt_ten(TPU_F32, 1, d, g);
  in[k++] = tt_ten(TPU_F32, 1, d, k_act_x);
  for (int i = k; i < nin; i++) in[i] = tt_ten(TPU_F32, 0, NULL, &scalars[i - k]);
  tt_ten_t out[1];
  if (tt_ops_run(rule, in, nin, ints, nints, NULL, 0, out, 1) != 1) return;
  tt_ops_expect(rule, &out[0], TPU_F32, 1, d, want, 2e-6, 1e-6);
  tt_ops_free(out, 1);
}

TT_TEST(ops_activation_with_parameters) {
  double w[NA];
  int64_t f32[2] = {TPU_F32, 0};
  double sl[1] = {0.1};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] > 0 ? k_act_x[i] : k_act_x[i] * 0.1;
  run_act("leaky_relu", 2, sl, f32, 1, w, 0);
  double elu_s[3] = {1.5, 2.0, 0.5}; /* alpha, scale, input_scale */
  for (int i = 0; i < NA; i++)
    w[i] = k_act_x[i] <= 0 ? expm1(k_act_x[i] * 0.5) * 1.5 * 2.0 : k_act_x[i] * 2.0;
  run_act("elu", 4, elu_s, f32, 1, w, 0);
  double sp[2] = {2.0, 4.0}; /* beta, threshold */
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] * 2 > 4 ? k_act_x[i] : log1p(exp(k_act_x[i] * 2)) / 2;
  run_act("softplus", 3, sp, f32, 1, w, 0);
  double ht[2] = {-1, 2};
  for (int i = 0; i < NA; i++) w[i] = fmin(fmax(k_act_x[i], -1), 2);
  run_act("hardtanh", 3, ht, f32, 1, w, 0);
  double th[2] = {0.5, -7};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] <= 0.5 ? -7 : k_act_x[i];
  run_act("threshold", 3, th, f32, 1, w, 0);
  int64_t tanh_approx[2] = {TPU_F32, 1};
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i];
    w[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  run_act("gelu", 1, NULL, tanh_approx, 2, w, 0);
}

TT_TEST(ops_activation_backward) {
  static const double g[NA] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  double w[NA];
  int64_t f32[2] = {TPU_F32, 0};
  double th[1] = {0.5};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] <= 0.5 ? 0 : g[i];
  run_act("threshold_backward", 3, th, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i];
    w[i] = g[i] * (0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI));
  }
  run_act("gelu_backward", 2, NULL, f32, 2, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i], s = 1 / (1 + exp(-x));
    w[i] = g[i] * s * (1 + x * (1 - s));
  }
  run_act("silu_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) w[i] = g[i] * (1 - k_act_x[i]) * k_act_x[i];
  run_act("sigmoid_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) w[i] = g[i] * (1 - k_act_x[i] * k_act_x[i]);
  run_act("tanh_backward", 2, NULL, f32, 1, w, 1);
  double sl[1] = {0.2};
  for (int i = 0; i < NA; i++) w[i] = k_act_x[i] > 0 ? g[i] : g[i] * 0.2;
  run_act("leaky_relu_backward", 3, sl, f32, 1, w, 1);
  double elu_s[3] = {1.5, 2.0, 0.5};
  for (int i = 0; i < NA; i++)
    w[i] = k_act_x[i] <= 0 ? g[i] * 0.5 * 1.5 * 2.0 * exp(k_act_x[i] * 0.5) : g[i] * 2.0;
  run_act("elu_backward", 5, elu_s, f32, 2, w, 1);
  double sp[2] = {1.0, 20.0};
  for (int i = 0; i < NA; i++) {
    double z = exp(k_act_x[i]);
    w[i] = g[i] * z / (z + 1);
  }
  run_act("softplus_backward", 4, sp, f32, 1, w, 1);
  double ht[2] = {-1, 2};
  for (int i = 0; i < NA; i++) w[i] = (k_act_x[i] <= -1 || k_act_x[i] >= 2) ? 0 : g[i];
  run_act("hardtanh_backward", 4, ht, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) w[i] = (k_act_x[i] > -3 && k_act_x[i] < 3) ? g[i] / 6 : 0;
  run_act("hardsigmoid_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i];
    w[i] = x < -3 ? 0 : x <= 3 ? g[i] * (x / 3 + 0.5) : g[i];
  }
  run_act("hardswish_backward", 2, NULL, f32, 1, w, 1);
  for (int i = 0; i < NA; i++) {
    double x = k_act_x[i], s = 1 / (1 + exp(-x)), t = tanh(log1p(exp(x)));
    w[i] = g[i] * (t + x * s * (1 - t * t));
  }
  run_act("mish_backward", 2, NULL, f32, 1, w, 1);
}


TT_TEST(ops_activation_all_rules_lower) {
  extern const tpu_op_rule_t tpu_rules_activation[];
  int64_t ints[1] = {TPU_F32};
  static const char *const own_attrs[] = {"glu", "glu_backward", NULL}; /* ints [dim] */
  tt_ops_all_rules_lower(tpu_rules_activation, ints, 1, own_attrs);
}
