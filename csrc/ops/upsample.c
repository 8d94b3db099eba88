/* upsample.c - resampling of 1 to 3 spatial dims: nearest, nearest-exact,
 * linear / bilinear / trilinear and bicubic upsampling and their backward
 * ops.  Each is a take along one axis at a time with index and weight
 * tables the rule computes when lowering from the (static) sizes, exactly
 * as PyTorch's CPU kernels compute them (same float type, same rounding);
 * the backward ops are the transposed scatter-adds.  A case not lowered
 * fails with TPU_UNIMPLEMENTED and runs through the CPU fallback.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* A 1-d table of weights (compute type ct) broadcast along `axis` of t. */
static V weights(tpu_op_ctx_t *c, const double *w, int64_t n, tpu_dtype_t ct, const tpu_hlo_type_t *t, int axis) {
  V k = tpu_hlo_constant_f64s(c->f, tpu_hlo_type_make(ct, 1, &n), w);
  tpu_hlo_type_t to = *t;
  to.dtype = ct;
  int64_t d = axis;
  return tpu_hlo_broadcast_in_dim(c->f, k, to, &d);
}

/* ---- upsampling ----------------------------------------------------------------- */

/* PyTorch's compute_scales_value<float>. */
static float scale_f(double scale, int64_t in, int64_t out) {
  return scale > 0. ? (float)(1.0 / scale) : (float)in / (float)out;
}

/* nearest_idx / nearest_exact_idx of UpSample.h. */
static int64_t nearest_src(int64_t o, int64_t in, int64_t out, double scale, int exact) {
  int64_t r;
  if (!exact) {
    if (out == in) return o;
    if (out == 2 * in) return o >> 1;
    r = (int64_t)floorf((float)o * scale_f(scale, in, out));
  } else {
    r = (int64_t)floorf((float)(((double)o + 0.5) * (double)scale_f(scale, in, out)));
  }
  return r < in - 1 ? r : in - 1;
}

/* Shared attr reading: ints [k0, nsp, sizes[nsp]], floats [scales[nsp]]. */
static int up_attrs(tpu_op_ctx_t *c, int *nsp, int64_t *sizes, double *scales) {
  int64_t n = tpu_op_int(c, 1);
  int rank = tpu_op_type(c, c->in[0]).rank;
  if (n < 1 || n > 3 || rank != n + 2 || tpu_op_nints(c) < 2 + n) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: expected %lld spatial dims on a rank-%d input", c->name,
                (long long)n, rank);
    return 0;
  }
  *nsp = (int)n;
  for (int i = 0; i < n; i++) {
    sizes[i] = tpu_op_int(c, 2 + i);
    scales[i] = c->attrs->nfloats > i ? c->attrs->floats[i] : -1.0;
    if (sizes[i] <= 0) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: non-positive size", c->name);
      return 0;
    }
  }
  return tpu_hlo_func_status(c->f) == NULL;
}

/* upsample_nearest: x [N, C, sp...]; ints [exact, nsp, out_sizes[nsp]];
 * floats [scales[nsp]] (<= 0: none). */
static void rule_upsample_nearest(tpu_op_ctx_t *c) {
  int nsp;
  int64_t out[3];
  double sc[3];
  if (!up_attrs(c, &nsp, out, sc)) return;
  int exact = (int)tpu_op_int(c, 0);
  V x = c->in[0];
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    int64_t in = tpu_op_type(c, x).dims[ax];
    int64_t *idx = tpu_op_index_table(c, out[i]);
    if (!idx) return;
    for (int64_t o = 0; o < out[i]; o++) idx[o] = nearest_src(o, in, out[i], sc[i], exact);
    x = tpu_op_take_const(c, x, ax, idx, out[i]);
    free(idx);
  }
  tpu_op_set_output(c, x);
}

/* upsample_nearest_backward: grad [N, C, out...]; ints [exact, nsp,
 * in_sizes[nsp]]; floats [scales[nsp]].  Sums grad into the sources. */
static void rule_upsample_nearest_backward(tpu_op_ctx_t *c) {
  int nsp;
  int64_t in[3];
  double sc[3];
  if (!up_attrs(c, &nsp, in, sc)) return;
  int exact = (int)tpu_op_int(c, 0);
  tpu_dtype_t dt = tpu_op_dtype(c, c->in[0]);
  V g = tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(dt));
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    tpu_hlo_type_t gt = tpu_op_type(c, g);
    int64_t out = gt.dims[ax];
    int64_t *idx = tpu_op_index_table(c, out);
    if (!idx) return;
    for (int64_t o = 0; o < out; o++) idx[o] = nearest_src(o, in[i], out, sc[i], exact);
    tpu_hlo_type_t zt = gt;
    zt.dims[ax] = in[i];
    g = tpu_op_put_const(c, tpu_hlo_constant(c->f, zt, 0.0), ax, idx, out, g, "add");
    free(idx);
  }
  tpu_op_finish(c, g, dt);
}

/* Interpolation tables of one axis: `taps` source indices and weights per
 * output position o, tap j at idx[j * out + o] / w[j * out + o]. */
typedef void (*tables_fn)(int64_t in, int64_t out, int align, double scale, int f64, int64_t *idx, double *w);

/* Linear interpolation, 2 taps (compute_indices_weights_linear of
 * UpSampleKernel.cpp), in float (f32 compute) or double. */
static void linear_tables(int64_t in, int64_t out, int align, double scale, int f64, int64_t *idx, double *w) {
  for (int64_t o = 0; o < out; o++) {
    double lam;
    int64_t i0;
    if (f64) {
      double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                       : (scale > 0. ? 1.0 / scale : (double)in / (double)out);
      double r = align ? s * (double)o : s * ((double)o + 0.5) - 0.5;
      if (!align && r < 0) r = 0;
      i0 = (int64_t)floor(r);
      if (i0 > in - 1) i0 = in - 1;
      lam = r - (double)i0;
    } else {
      float s = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                      : (scale > 0. ? (float)(1.0 / scale) : (float)in / (float)out);
      float r = align ? s * (float)o : s * ((float)o + 0.5f) - 0.5f;
      if (!align && r < 0) r = 0;
      i0 = (int64_t)floorf(r);
      if (i0 > in - 1) i0 = in - 1;
      lam = (double)(r - (float)i0);
    }
    if (lam < 0) lam = 0;
    if (lam > 1) lam = 1;
    idx[o] = i0;
    idx[out + o] = i0 + (i0 < in - 1 ? 1 : 0);
    w[o] = f64 ? 1.0 - lam : (double)(1.0f - (float)lam);
    w[out + o] = lam;
  }
}

/* Bicubic, 4 taps (compute_indices_weights_cubic): at clamp(floor(real) -
 * 1 + j), Keys' cubic convolution with A = -0.75. */
static double cc1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static double cc2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }
static float cc1f(float x, float A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static float cc2f(float x, float A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

static void cubic_tables(int64_t in, int64_t out, int align, double scale, int f64, int64_t *idx, double *w) {
  for (int64_t o = 0; o < out; o++) {
    int64_t i0;
    double c[4];
    if (f64) {
      double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                       : (scale > 0. ? 1.0 / scale : (double)in / (double)out);
      double r = align ? s * (double)o : s * ((double)o + 0.5) - 0.5;
      i0 = (int64_t)floor(r);
      double t = r - (double)i0;
      c[0] = cc2(t + 1.0, -0.75), c[1] = cc1(t, -0.75), c[2] = cc1(1.0 - t, -0.75), c[3] = cc2((1.0 - t) + 1.0, -0.75);
    } else {
      float s = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                      : (scale > 0. ? (float)(1.0 / scale) : (float)in / (float)out);
      float r = align ? s * (float)o : s * ((float)o + 0.5f) - 0.5f;
      i0 = (int64_t)floorf(r);
      float t = r - (float)i0;
      c[0] = cc2f(t + 1.0f, -0.75f), c[1] = cc1f(t, -0.75f), c[2] = cc1f(1.0f - t, -0.75f);
      c[3] = cc2f((1.0f - t) + 1.0f, -0.75f);
    }
    for (int j = 0; j < 4; j++) {
      int64_t k = i0 - 1 + j;
      idx[j * out + o] = k < 0 ? 0 : (k > in - 1 ? in - 1 : k);
      w[j * out + o] = c[j];
    }
  }
}

/* The forward and backward rule of a `taps`-tap interpolation: ints
 * [align_corners, nsp, sizes[nsp]] (the output's sizes forward, the input's
 * backward), floats [scales[nsp]].  Forward, each spatial axis in turn is the
 * weighted sum of its taps (takes along the axis); backward, the grad is
 * scatter-added into the sources with the same weights. */
static void interpolate(tpu_op_ctx_t *c, int taps, tables_fn tables, int backward) {
  int nsp;
  int64_t sizes[3];
  double sc[3];
  if (!up_attrs(c, &nsp, sizes, sc)) return;
  int align = (int)tpu_op_int(c, 0);
  tpu_dtype_t dt = tpu_op_dtype(c, c->in[0]);
  if (!tpu_op_require_float(c, dt)) return;
  tpu_dtype_t ct = tpu_op_opmath(dt);
  V x = tpu_hlo_cast(c->f, c->in[0], ct);
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    tpu_hlo_type_t xt = tpu_op_type(c, x);
    int64_t in = backward ? sizes[i] : xt.dims[ax], n = backward ? xt.dims[ax] : sizes[i];
    int64_t *idx = tpu_op_index_table(c, taps * n);
    double *w = malloc(sizeof(double) * (size_t)(taps * n + 1));
    if (!idx || !w) {
      free(idx);
      free(w);
      tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name);
      return;
    }
    tables(in, n, align, sc[i], ct == TPU_F64, idx, w);
    V r = TPU_HLO_NONE;
    if (backward) {
      tpu_hlo_type_t zt = xt;
      zt.dims[ax] = in;
      r = tpu_hlo_constant(c->f, zt, 0.0);
      for (int j = 0; j < taps; j++)
        r = tpu_op_put_const(c, r, ax, idx + j * n, n, MUL(c, weights(c, w + j * n, n, ct, &xt, ax), x), "add");
    } else {
      for (int j = 0; j < taps; j++) {
        V a = tpu_op_take_const(c, x, ax, idx + j * n, n);
        tpu_hlo_type_t t = tpu_op_type(c, a);
        V term = MUL(c, weights(c, w + j * n, n, ct, &t, ax), a);
        r = j ? ADD(c, r, term) : term;
      }
    }
    x = r;
    free(idx);
    free(w);
  }
  tpu_op_finish(c, x, dt);
}

/* upsample_linear: x [N, C, sp...] (linear1d, bilinear2d, trilinear3d);
 * ints [align_corners, nsp, out_sizes[nsp]]; floats [scales[nsp]]. */
static void rule_upsample_linear(tpu_op_ctx_t *c) { interpolate(c, 2, linear_tables, 0); }

/* upsample_linear_backward: grad [N, C, out...]; ints [align_corners, nsp,
 * in_sizes[nsp]]; floats [scales[nsp]]. */
static void rule_upsample_linear_backward(tpu_op_ctx_t *c) { interpolate(c, 2, linear_tables, 1); }

/* upsample_cubic: x [N, C, H, W] (bicubic2d); ints [align_corners, 2,
 * out_h, out_w]; floats [scales_h, scales_w]. */
static void rule_upsample_cubic(tpu_op_ctx_t *c) { interpolate(c, 4, cubic_tables, 0); }

/* upsample_cubic_backward: grad [N, C, out...]; ints [align_corners, 2,
 * in_h, in_w]; floats [scales]. */
static void rule_upsample_cubic_backward(tpu_op_ctx_t *c) { interpolate(c, 4, cubic_tables, 1); }

const tpu_op_rule_t tpu_rules_upsample[] = {
    {"upsample_nearest", rule_upsample_nearest, 1, 1},
    {"upsample_nearest_backward", rule_upsample_nearest_backward, 1, 1},
    {"upsample_linear", rule_upsample_linear, 1, 1},
    {"upsample_linear_backward", rule_upsample_linear_backward, 1, 1},
    {"upsample_cubic", rule_upsample_cubic, 1, 1},
    {"upsample_cubic_backward", rule_upsample_cubic_backward, 1, 1},
    {NULL, NULL, 0, 0},
};
