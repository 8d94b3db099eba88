/* extra.c - lowering rules beyond the core families (see ops.h): upsampling
 * (nearest, nearest-exact, linear, bicubic), reflection / replication padding,
 * im2col / col2im, unfold_backward, max_unpool2d, scans (cummax / cummin,
 * logcumsumexp), special functions (log_sigmoid, logaddexp, logit, xlogy,
 * lgamma, digamma, polygamma) and small activations (hard/soft shrink,
 * prelu, glu), nansum, eye, linspace / logspace.
 *
 * Conventions (the contract with torch_tpu/ops/extra.py):
 * - Where a rule has a dtype attr it is the RESULT dtype computed by the
 *   adapter with PyTorch's promotion; f16/bf16 compute in f32 and round once.
 * - Python scalars (lambd, eps, start/end ...) are 0-d runtime inputs.
 * - Resampling and padding are "take along an axis" with index tables the
 *   rule computes at lowering time from the (static) sizes, exactly as
 *   PyTorch's CPU kernels compute them (same float type, same rounding); the
 *   backward ops are the transposed scatter-adds.  The tables are constants
 *   of the program (one entry per output position of one axis).
 * - A case a rule does not lower fails with TPU_UNIMPLEMENTED so the op runs
 *   through the CPU fallback instead of failing.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

/* ---- helpers ------------------------------------------------------------------ */

static tpu_hlo_type_t ty(tpu_op_ctx_t *c, V v) { return *tpu_hlo_type_of(c->f, v); }
static tpu_dtype_t dt_of(tpu_op_ctx_t *c, V v) { return tpu_hlo_type_of(c->f, v)->dtype; }
static int is_half(tpu_dtype_t dt) { return dt == TPU_F16 || dt == TPU_BF16; }
static tpu_dtype_t acc(tpu_dtype_t dt) { return is_half(dt) ? TPU_F32 : dt; }

static V K(tpu_op_ctx_t *c, V like, double v) { return tpu_hlo_constant(c->f, ty(c, like), v); }
static V ADD(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "add", a, b); }
static V SUB(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "subtract", a, b); }
static V MUL(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "multiply", a, b); }
static V DIV(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "divide", a, b); }
static V MAX(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "maximum", a, b); }
static V UN(tpu_op_ctx_t *c, const char *op, V x) { return tpu_hlo_unary(c->f, op, x); }
static V CMP(tpu_op_ctx_t *c, const char *d, V a, V b) { return tpu_hlo_compare(c->f, d, a, b); }
static V CMPK(tpu_op_ctx_t *c, const char *d, V a, double k) { return CMP(c, d, a, K(c, a, k)); }
static V SEL(tpu_op_ctx_t *c, V p, V a, V b) { return tpu_hlo_select(c->f, p, a, b); }
static V OR(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "or", a, b); }
static V AND(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "and", a, b); }
static V ISNAN(tpu_op_ctx_t *c, V x) { return CMP(c, "NE", x, x); }

static int64_t int_or(tpu_op_ctx_t *c, int i, int64_t d) { return tpu_op_nints(c) > i ? tpu_op_int(c, i) : d; }

/* The result dtype in int attr i (default: input 0's dtype). */
static tpu_dtype_t res_dtype(tpu_op_ctx_t *c, int i) {
  if (tpu_op_nints(c) <= i) return dt_of(c, c->in[0]);
  int64_t code = tpu_op_int(c, i);
  if (!tpu_dtype_valid((int)code)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: invalid dtype code %lld", c->name, (long long)code);
    return TPU_DTYPE_INVALID;
  }
  return (tpu_dtype_t)code;
}

/* Inputs [0, n) converted to dt then to its compute type and broadcast to
 * their common shape.  Returns 0 on error. */
static int load(tpu_op_ctx_t *c, int n, tpu_dtype_t dt, V *v) {
  if (dt == TPU_DTYPE_INVALID) return 0;
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, n, dims);
  if (rank < 0) return 0;
  for (int i = 0; i < n; i++)
    v[i] = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, c->in[i], dt), acc(dt)), rank, dims);
  return tpu_hlo_func_status(c->f) == NULL;
}

static int float_check(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: not lowered for %s", c->name, tpu_dtype_name(dt));
    return 0;
  }
  return 1;
}

static void finish(tpu_op_ctx_t *c, V r, tpu_dtype_t dt) { tpu_op_set_output(c, tpu_hlo_cast(c->f, r, dt)); }

/* x[..., idx[j], ...] along `axis` (idx: n in-range constants). */
static V take(tpu_op_ctx_t *c, V x, int axis, const int64_t *idx, int64_t n) {
  tpu_hlo_type_t t = ty(c, x);
  if (n == 0 || t.dims[axis] == 0) {
    tpu_hlo_type_t o = t;
    o.dims[axis] = n;
    return tpu_hlo_constant(c->f, o, 0.0);
  }
  int64_t d2[2] = {n, 1};
  V ind = tpu_hlo_constant_i64s(c->f, tpu_hlo_type_make(TPU_S64, 2, d2), idx);
  tpu_hlo_gather_dims_t g;
  memset(&g, 0, sizeof g);
  for (int i = 0; i < t.rank; i++) {
    if (i != axis) g.offset_dims[g.noffset++] = i;
    g.slice_sizes[i] = i == axis ? 1 : t.dims[i];
  }
  g.ncollapsed = 1;
  g.collapsed_slice_dims[0] = axis;
  g.nstart_map = 1;
  g.start_index_map[0] = axis;
  g.index_vector_dim = 1;
  return tpu_hlo_gather(c->f, x, ind, &g);
}

/* base[..., idx[j], ...] += upd[..., j, ...] along `axis`. */
static V put_add(tpu_op_ctx_t *c, V base, V upd, int axis, const int64_t *idx, int64_t n) {
  tpu_hlo_type_t t = ty(c, base);
  if (n == 0 || t.dims[axis] == 0 || tpu_hlo_type_numel(&t) == 0) return base;
  int64_t d2[2] = {n, 1};
  V ind = tpu_hlo_constant_i64s(c->f, tpu_hlo_type_make(TPU_S64, 2, d2), idx);
  tpu_hlo_scatter_dims_t s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < t.rank; i++)
    if (i != axis) s.update_window_dims[s.nwindow++] = i;
  s.ninserted = 1;
  s.inserted_window_dims[0] = axis;
  s.nscatter_map = 1;
  s.scatter_dims_to_operand_dims[0] = axis;
  s.index_vector_dim = 1;
  return tpu_hlo_scatter(c->f, base, ind, upd, &s, "add");
}

/* A 1-d table of weights (compute type ct) broadcast along `axis` of t. */
static V weights(tpu_op_ctx_t *c, const double *w, int64_t n, tpu_dtype_t ct, const tpu_hlo_type_t *t, int axis) {
  V k = tpu_hlo_constant_f64s(c->f, tpu_hlo_type_make(ct, 1, &n), w);
  tpu_hlo_type_t to = *t;
  to.dtype = ct;
  int64_t d = axis;
  return tpu_hlo_broadcast_in_dim(c->f, k, to, &d);
}

static int64_t *idx_alloc(tpu_op_ctx_t *c, int64_t n) {
  int64_t *p = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!p) tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name);
  return p;
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
  int rank = ty(c, c->in[0]).rank;
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
    int64_t in = ty(c, x).dims[ax];
    int64_t *idx = idx_alloc(c, out[i]);
    if (!idx) return;
    for (int64_t o = 0; o < out[i]; o++) idx[o] = nearest_src(o, in, out[i], sc[i], exact);
    x = take(c, x, ax, idx, out[i]);
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
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  V g = tpu_hlo_cast(c->f, c->in[0], acc(dt));
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    tpu_hlo_type_t gt = ty(c, g);
    int64_t out = gt.dims[ax];
    int64_t *idx = idx_alloc(c, out);
    if (!idx) return;
    for (int64_t o = 0; o < out; o++) idx[o] = nearest_src(o, in[i], out, sc[i], exact);
    tpu_hlo_type_t zt = gt;
    zt.dims[ax] = in[i];
    g = put_add(c, tpu_hlo_constant(c->f, zt, 0.0), g, ax, idx, out);
    free(idx);
  }
  finish(c, g, dt);
}

/* Linear-interpolation tables of one axis (compute_indices_weights_linear
 * of UpSampleKernel.cpp), in float (f32 compute) or double. */
static void linear_tables(int64_t in, int64_t out, int align, double scale, int f64, int64_t *i0, int64_t *i1,
                          double *w0, double *w1) {
  for (int64_t o = 0; o < out; o++) {
    double real, lam;
    int64_t idx;
    if (f64) {
      double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                       : (scale > 0. ? 1.0 / scale : (double)in / (double)out);
      real = align ? s * (double)o : s * ((double)o + 0.5) - 0.5;
      if (!align && real < 0) real = 0;
      idx = (int64_t)floor(real);
      if (idx > in - 1) idx = in - 1;
      lam = real - (double)idx;
    } else {
      float s = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                      : (scale > 0. ? (float)(1.0 / scale) : (float)in / (float)out);
      float r = align ? s * (float)o : s * ((float)o + 0.5f) - 0.5f;
      if (!align && r < 0) r = 0;
      idx = (int64_t)floorf(r);
      if (idx > in - 1) idx = in - 1;
      lam = (double)(r - (float)idx);
      real = r;
    }
    (void)real;
    if (lam < 0) lam = 0;
    if (lam > 1) lam = 1;
    i0[o] = idx;
    i1[o] = idx + (idx < in - 1 ? 1 : 0);
    w1[o] = lam;
    w0[o] = f64 ? 1.0 - lam : (double)(1.0f - (float)lam);
  }
}

/* upsample_linear: x [N, C, sp...] (linear1d, bilinear2d, trilinear3d);
 * ints [align_corners, nsp, out_sizes[nsp]]; floats [scales[nsp]]. */
static void rule_upsample_linear(tpu_op_ctx_t *c) {
  int nsp;
  int64_t out[3];
  double sc[3];
  if (!up_attrs(c, &nsp, out, sc)) return;
  int align = (int)tpu_op_int(c, 0);
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  if (!float_check(c, dt)) return;
  tpu_dtype_t ct = acc(dt);
  V x = tpu_hlo_cast(c->f, c->in[0], ct);
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    int64_t in = ty(c, x).dims[ax], n = out[i];
    int64_t *i0 = idx_alloc(c, 2 * n);
    double *w = malloc(sizeof(double) * (size_t)(2 * n + 1));
    if (!i0 || !w) { free(i0); free(w); tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name); return; }
    linear_tables(in, n, align, sc[i], ct == TPU_F64, i0, i0 + n, w, w + n);
    V a = take(c, x, ax, i0, n), b = take(c, x, ax, i0 + n, n);
    tpu_hlo_type_t t = ty(c, a);
    x = ADD(c, MUL(c, weights(c, w, n, ct, &t, ax), a), MUL(c, weights(c, w + n, n, ct, &t, ax), b));
    free(i0);
    free(w);
  }
  finish(c, x, dt);
}

/* upsample_linear_backward: grad [N, C, out...]; ints [align_corners, nsp,
 * in_sizes[nsp]]; floats [scales[nsp]]. */
static void rule_upsample_linear_backward(tpu_op_ctx_t *c) {
  int nsp;
  int64_t in[3];
  double sc[3];
  if (!up_attrs(c, &nsp, in, sc)) return;
  int align = (int)tpu_op_int(c, 0);
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  if (!float_check(c, dt)) return;
  tpu_dtype_t ct = acc(dt);
  V g = tpu_hlo_cast(c->f, c->in[0], ct);
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    tpu_hlo_type_t gt = ty(c, g);
    int64_t n = gt.dims[ax];
    int64_t *i0 = idx_alloc(c, 2 * n);
    double *w = malloc(sizeof(double) * (size_t)(2 * n + 1));
    if (!i0 || !w) { free(i0); free(w); tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name); return; }
    linear_tables(in[i], n, align, sc[i], ct == TPU_F64, i0, i0 + n, w, w + n);
    tpu_hlo_type_t zt = gt;
    zt.dims[ax] = in[i];
    V z = tpu_hlo_constant(c->f, zt, 0.0);
    z = put_add(c, z, MUL(c, weights(c, w, n, ct, &gt, ax), g), ax, i0, n);
    g = put_add(c, z, MUL(c, weights(c, w + n, n, ct, &gt, ax), g), ax, i0 + n, n);
    free(i0);
    free(w);
  }
  finish(c, g, dt);
}

/* Bicubic tables of one axis (compute_indices_weights_cubic): 4 taps at
 * clamp(floor(real) - 1 + j), Keys' cubic convolution with A = -0.75. */
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

/* upsample_cubic: x [N, C, H, W] (bicubic2d); ints [align_corners, 2,
 * out_h, out_w]; floats [scales_h, scales_w]. */
static void rule_upsample_cubic(tpu_op_ctx_t *c) {
  int nsp;
  int64_t out[3];
  double sc[3];
  if (!up_attrs(c, &nsp, out, sc)) return;
  int align = (int)tpu_op_int(c, 0);
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  if (!float_check(c, dt)) return;
  tpu_dtype_t ct = acc(dt);
  V x = tpu_hlo_cast(c->f, c->in[0], ct);
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    int64_t in = ty(c, x).dims[ax], n = out[i];
    int64_t *idx = idx_alloc(c, 4 * n);
    double *w = malloc(sizeof(double) * (size_t)(4 * n + 1));
    if (!idx || !w) { free(idx); free(w); tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name); return; }
    cubic_tables(in, n, align, sc[i], ct == TPU_F64, idx, w);
    V r = TPU_HLO_NONE;
    for (int j = 0; j < 4; j++) {
      V a = take(c, x, ax, idx + j * n, n);
      tpu_hlo_type_t t = ty(c, a);
      V term = MUL(c, weights(c, w + j * n, n, ct, &t, ax), a);
      r = j ? ADD(c, r, term) : term;
    }
    x = r;
    free(idx);
    free(w);
  }
  finish(c, x, dt);
}

/* upsample_cubic_backward: grad [N, C, out...]; ints [align_corners, 2,
 * in_h, in_w]; floats [scales]. */
static void rule_upsample_cubic_backward(tpu_op_ctx_t *c) {
  int nsp;
  int64_t in[3];
  double sc[3];
  if (!up_attrs(c, &nsp, in, sc)) return;
  int align = (int)tpu_op_int(c, 0);
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  if (!float_check(c, dt)) return;
  tpu_dtype_t ct = acc(dt);
  V g = tpu_hlo_cast(c->f, c->in[0], ct);
  for (int i = 0; i < nsp; i++) {
    int ax = 2 + i;
    tpu_hlo_type_t gt = ty(c, g);
    int64_t n = gt.dims[ax];
    int64_t *idx = idx_alloc(c, 4 * n);
    double *w = malloc(sizeof(double) * (size_t)(4 * n + 1));
    if (!idx || !w) { free(idx); free(w); tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name); return; }
    cubic_tables(in[i], n, align, sc[i], ct == TPU_F64, idx, w);
    tpu_hlo_type_t zt = gt;
    zt.dims[ax] = in[i];
    V z = tpu_hlo_constant(c->f, zt, 0.0);
    for (int j = 0; j < 4; j++) z = put_add(c, z, MUL(c, weights(c, w + j * n, n, ct, &gt, ax), g), ax, idx + j * n, n);
    g = z;
    free(idx);
    free(w);
  }
  finish(c, g, dt);
}

/* ---- reflection / replication padding -------------------------------------------- */

static int64_t pad_src(int64_t o, int64_t lo, int64_t in, int replicate) {
  int64_t j = o - lo;
  if (replicate) return j < 0 ? 0 : (j >= in ? in - 1 : j);
  if (j < 0) j = -j;
  if (j >= in) j = 2 * (in - 1) - j;
  return j;
}

/* ints [replicate, nsp, pads[2 nsp] (PyTorch order: last dim's (lo, hi)
 * first)]; returns nsp or 0. */
static int pad_attrs(tpu_op_ctx_t *c, int rank, int64_t *lo, int64_t *hi) {
  int64_t nsp = tpu_op_int(c, 1);
  if (nsp < 1 || nsp > 3 || rank < nsp + 1 || rank > nsp + 2 || tpu_op_nints(c) < 2 + 2 * nsp) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: malformed padding", c->name);
    return 0;
  }
  for (int i = 0; i < nsp; i++) { /* spatial dim i counted from the front */
    lo[i] = tpu_op_int(c, 2 + 2 * (nsp - 1 - i));
    hi[i] = tpu_op_int(c, 3 + 2 * (nsp - 1 - i));
  }
  return (int)nsp;
}

/* pad_mode: x [(N,) C, sp...]; ints [replicate, nsp, pads[2 nsp]].
 * Reflection needs pads < the padded dim (the adapter checks). */
static void rule_pad_mode(tpu_op_ctx_t *c) {
  V x = c->in[0];
  int rank = ty(c, x).rank;
  int64_t lo[3], hi[3];
  int nsp = pad_attrs(c, rank, lo, hi);
  if (!nsp) return;
  int rep = (int)tpu_op_int(c, 0);
  for (int i = 0; i < nsp; i++) {
    int ax = rank - nsp + i;
    int64_t in = ty(c, x).dims[ax], n = in + lo[i] + hi[i];
    if (n < 0 || in == 0 || (!rep && (lo[i] >= in || hi[i] >= in))) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: padding out of range", c->name);
      return;
    }
    int64_t *idx = idx_alloc(c, n);
    if (!idx) return;
    for (int64_t o = 0; o < n; o++) idx[o] = pad_src(o, lo[i], in, rep);
    x = take(c, x, ax, idx, n);
    free(idx);
  }
  tpu_op_set_output(c, x);
}

/* pad_mode_backward: grad; ints [replicate, nsp, pads[2 nsp], in_sizes[nsp]]. */
static void rule_pad_mode_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  V g = tpu_hlo_cast(c->f, c->in[0], acc(dt));
  int rank = ty(c, g).rank;
  int64_t lo[3], hi[3];
  int nsp = pad_attrs(c, rank, lo, hi);
  if (!nsp) return;
  int rep = (int)tpu_op_int(c, 0);
  for (int i = 0; i < nsp; i++) {
    int ax = rank - nsp + i;
    int64_t in = tpu_op_int(c, 2 + 2 * nsp + i);
    tpu_hlo_type_t gt = ty(c, g);
    int64_t n = gt.dims[ax];
    if (n != in + lo[i] + hi[i] || in <= 0) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: grad size mismatch", c->name);
      return;
    }
    int64_t *idx = idx_alloc(c, n);
    if (!idx) return;
    for (int64_t o = 0; o < n; o++) idx[o] = pad_src(o, lo[i], in, rep);
    tpu_hlo_type_t zt = gt;
    zt.dims[ax] = in;
    g = put_add(c, tpu_hlo_constant(c->f, zt, 0.0), g, ax, idx, n);
    free(idx);
  }
  finish(c, g, dt);
}

/* ---- im2col / col2im / unfold_backward ----------------------------------------------- */

typedef struct {
  int64_t k[2], d[2], p[2], s[2];
} win_t;

static int win_read(tpu_op_ctx_t *c, int at, win_t *w) {
  for (int i = 0; i < 2; i++) {
    w->k[i] = tpu_op_int(c, at + i);
    w->d[i] = tpu_op_int(c, at + 2 + i);
    w->p[i] = tpu_op_int(c, at + 4 + i);
    w->s[i] = tpu_op_int(c, at + 6 + i);
    if (w->k[i] < 1 || w->d[i] < 1 || w->p[i] < 0 || w->s[i] < 1) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: bad window", c->name);
      return 0;
    }
  }
  return tpu_hlo_func_status(c->f) == NULL;
}

/* Index table of one axis: idx[k * nout + o] = o * s + k * d. */
static int64_t *win_table(tpu_op_ctx_t *c, const win_t *w, int i, int64_t nout) {
  int64_t *idx = idx_alloc(c, w->k[i] * nout);
  if (!idx) return NULL;
  for (int64_t k = 0; k < w->k[i]; k++)
    for (int64_t o = 0; o < nout; o++) idx[k * nout + o] = o * w->s[i] + k * w->d[i];
  return idx;
}

static int64_t win_out(const win_t *w, int i, int64_t in) {
  return (in + 2 * w->p[i] - (w->d[i] * (w->k[i] - 1) + 1)) / w->s[i] + 1;
}

/* im2col: x [N, C, H, W]; ints [kernel[2], dilation[2], padding[2],
 * stride[2]] -> [N, C*kh*kw, oh*ow]. */
static void rule_im2col(tpu_op_ctx_t *c) {
  win_t w;
  if (!win_read(c, 0, &w)) return;
  tpu_hlo_type_t t = ty(c, c->in[0]);
  if (t.rank != 4) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "im2col: expected a 4-d input");
    return;
  }
  int64_t N = t.dims[0], C = t.dims[1], oh = win_out(&w, 0, t.dims[2]), ow = win_out(&w, 1, t.dims[3]);
  if (oh < 1 || ow < 1) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "im2col: empty output");
    return;
  }
  int64_t lo[4] = {0, 0, w.p[0], w.p[1]}, in0[4] = {0, 0, 0, 0};
  V x = tpu_hlo_pad(c->f, c->in[0], tpu_hlo_scalar(c->f, t.dtype, 0.0), lo, lo, in0);
  int64_t *ih = win_table(c, &w, 0, oh), *iw = win_table(c, &w, 1, ow);
  if (ih && iw) {
    x = take(c, x, 2, ih, w.k[0] * oh);
    x = take(c, x, 3, iw, w.k[1] * ow);
    int64_t d6[6] = {N, C, w.k[0], oh, w.k[1], ow}, perm[6] = {0, 1, 2, 4, 3, 5};
    int64_t d3[3] = {N, C * w.k[0] * w.k[1], oh * ow};
    x = tpu_hlo_reshape(c->f, x, 6, d6);
    x = tpu_hlo_transpose(c->f, x, perm);
    tpu_op_set_output(c, tpu_hlo_reshape(c->f, x, 3, d3));
  }
  free(ih);
  free(iw);
}

/* col2im: x [N, C*kh*kw, L]; ints [out_h, out_w, kernel[2], dilation[2],
 * padding[2], stride[2]] -> [N, C, out_h, out_w] (overlaps summed). */
static void rule_col2im(tpu_op_ctx_t *c) {
  win_t w;
  if (!win_read(c, 2, &w)) return;
  int64_t H = tpu_op_int(c, 0), W = tpu_op_int(c, 1);
  tpu_hlo_type_t t = ty(c, c->in[0]);
  int64_t kk = w.k[0] * w.k[1];
  int64_t oh = win_out(&w, 0, H), ow = win_out(&w, 1, W);
  if (t.rank != 3 || t.dims[1] % kk || oh < 1 || ow < 1 || t.dims[2] != oh * ow) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "col2im: shape mismatch");
    return;
  }
  tpu_dtype_t dt = t.dtype;
  int64_t N = t.dims[0], C = t.dims[1] / kk;
  V x = tpu_hlo_cast(c->f, c->in[0], acc(dt));
  int64_t d6[6] = {N, C, w.k[0], w.k[1], oh, ow}, perm[6] = {0, 1, 2, 4, 3, 5};
  int64_t d4[4] = {N, C, w.k[0] * oh, w.k[1] * ow};
  x = tpu_hlo_reshape(c->f, x, 6, d6);
  x = tpu_hlo_transpose(c->f, x, perm);
  x = tpu_hlo_reshape(c->f, x, 4, d4);
  int64_t Hp = H + 2 * w.p[0], Wp = W + 2 * w.p[1];
  int64_t *ih = win_table(c, &w, 0, oh), *iw = win_table(c, &w, 1, ow);
  if (ih && iw) {
    int64_t z1[4] = {N, C, w.k[0] * oh, Wp}, z2[4] = {N, C, Hp, Wp};
    x = put_add(c, tpu_hlo_constant(c->f, tpu_hlo_type_make(acc(dt), 4, z1), 0.0), x, 3, iw, w.k[1] * ow);
    x = put_add(c, tpu_hlo_constant(c->f, tpu_hlo_type_make(acc(dt), 4, z2), 0.0), x, 2, ih, w.k[0] * oh);
    int64_t st[4] = {0, 0, w.p[0], w.p[1]}, lim[4] = {N, C, w.p[0] + H, w.p[1] + W};
    finish(c, tpu_hlo_slice(c->f, x, st, lim, NULL), dt);
  }
  free(ih);
  free(iw);
}

/* unfold_backward: grad [in_sizes with dim -> nwin, size]; ints [dim, size,
 * step, rank, in_sizes[rank]] -> [in_sizes] (window overlaps summed). */
static void rule_unfold_backward(tpu_op_ctx_t *c) {
  int64_t dim = tpu_op_int(c, 0), size = tpu_op_int(c, 1), step = tpu_op_int(c, 2), rank = tpu_op_int(c, 3);
  tpu_hlo_type_t gt = ty(c, c->in[0]);
  if (rank < 1 || rank > TPU_MAX_RANK - 1 || gt.rank != rank + 1 || dim < 0 || dim >= rank || step < 1) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "unfold_backward: unsupported shapes");
    return;
  }
  int64_t in[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) in[i] = tpu_op_int(c, 4 + i);
  int64_t nwin = gt.dims[dim];
  if (gt.dims[rank] != size) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "unfold_backward: window size mismatch");
    return;
  }
  tpu_dtype_t dt = gt.dtype;
  V g = tpu_hlo_cast(c->f, c->in[0], acc(dt));
  /* [.., nwin, .., size] -> [.., nwin, size, ..] -> [.., nwin*size, ..] */
  int64_t perm[TPU_MAX_RANK], d[TPU_MAX_RANK];
  int k = 0;
  for (int i = 0; i < rank; i++) {
    perm[k++] = i;
    if (i == dim) perm[k++] = rank;
  }
  g = tpu_hlo_transpose(c->f, g, perm);
  for (int i = 0; i < rank; i++) d[i] = i == dim ? nwin * size : gt.dims[i];
  g = tpu_hlo_reshape(c->f, g, (int)rank, d);
  int64_t *idx = idx_alloc(c, nwin * size);
  if (!idx) return;
  for (int64_t wi = 0; wi < nwin; wi++)
    for (int64_t j = 0; j < size; j++) idx[wi * size + j] = wi * step + j;
  V z = tpu_hlo_constant(c->f, tpu_hlo_type_make(acc(dt), (int)rank, in), 0.0);
  finish(c, put_add(c, z, g, (int)dim, idx, nwin * size), dt);
  free(idx);
}

/* max_unpool2d: (x [N, C, H, W], indices [N, C, H, W] s64); ints [oh, ow]
 * -> [N, C, oh, ow]: zeros with out[n, c].flat[indices] = x.  Indices out
 * of range are dropped (PyTorch raises); duplicates keep one of the values. */
static void rule_max_unpool2d(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = ty(c, c->in[0]), it = ty(c, c->in[1]);
  int64_t oh = tpu_op_int(c, 0), ow = tpu_op_int(c, 1);
  if (t.rank != 4 || it.rank != 4 || !tpu_dtype_is_int(it.dtype)) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "max_unpool2d: expected 4-d input and indices");
    return;
  }
  for (int i = 0; i < 4; i++)
    if (t.dims[i] != it.dims[i]) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "max_unpool2d: indices shape differs");
      return;
    }
  int64_t R = t.dims[0] * t.dims[1], M = t.dims[2] * t.dims[3], O = oh * ow;
  int64_t d2[2] = {R, M}, flat = R * M, d1[2] = {R * M, 1};
  V idx = tpu_hlo_reshape(c->f, tpu_hlo_cast(c->f, c->in[1], TPU_S64), 2, d2);
  tpu_hlo_type_t rt = tpu_hlo_type_make(TPU_S64, 2, d2);
  V row = tpu_hlo_iota(c->f, rt, 0);
  /* out-of-range indices go past the end (dropped by the scatter) */
  V bad = OR(c, CMPK(c, "LT", idx, 0.0), CMPK(c, "GE", idx, (double)O));
  V pos = ADD(c, MUL(c, row, tpu_hlo_constant_i64(c->f, rt, O)), idx);
  pos = SEL(c, bad, tpu_hlo_constant_i64(c->f, rt, R * O), pos);
  pos = tpu_hlo_reshape(c->f, pos, 2, d1);
  V upd = tpu_hlo_reshape(c->f, c->in[0], 1, &flat);
  int64_t ro = R * O;
  V z = tpu_hlo_constant(c->f, tpu_hlo_type_make(t.dtype, 1, &ro), 0.0);
  tpu_hlo_scatter_dims_t s;
  memset(&s, 0, sizeof s);
  s.ninserted = 1;
  s.nscatter_map = 1;
  s.index_vector_dim = 1;
  V r = flat == 0 ? z : tpu_hlo_scatter(c->f, z, pos, upd, &s, "replace");
  int64_t d4[4] = {t.dims[0], t.dims[1], oh, ow};
  tpu_op_set_output(c, tpu_hlo_reshape(c->f, r, 4, d4));
}

/* ---- scans ----------------------------------------------------------------------------- */

/* Log-step (Hillis-Steele) inclusive scan along dim with a binary op;
 * `ident` is a 0-d value of y's type. */
typedef V (*combine_fn)(tpu_op_ctx_t *c, V acc_, V shifted);
static V scan(tpu_op_ctx_t *c, V y, int dim, V ident, combine_fn fn, const char *op) {
  tpu_hlo_type_t t = ty(c, y);
  int64_t n = t.dims[dim];
  for (int64_t k = 1; k < n; k *= 2) {
    int64_t st[TPU_MAX_RANK], lim[TPU_MAX_RANK], lo[TPU_MAX_RANK], hi[TPU_MAX_RANK], in[TPU_MAX_RANK];
    for (int i = 0; i < t.rank; i++) {
      st[i] = lo[i] = hi[i] = in[i] = 0;
      lim[i] = t.dims[i];
    }
    lim[dim] = n - k;
    lo[dim] = k;
    V sh = tpu_hlo_pad(c->f, tpu_hlo_slice(c->f, y, st, lim, NULL), ident, lo, hi, in);
    y = fn ? fn(c, y, sh) : tpu_hlo_binary(c->f, op, y, sh);
  }
  return y;
}

/* cummaxmin: x; ints [dim, is_max] -> (values, indices s64).  As PyTorch:
 * ties take the last index; a NaN sticks (value NaN, index of the latest NaN). */
static void rule_cummaxmin(tpu_op_ctx_t *c) {
  V x = c->in[0];
  tpu_hlo_type_t t = ty(c, x);
  int is_max = (int)tpu_op_int(c, 1);
  if (t.dtype == TPU_PRED) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: bool", c->name);
    return;
  }
  if (t.rank == 0) {
    V outs[2] = {x, tpu_hlo_constant(c->f, tpu_hlo_type_scalar(TPU_S64), 0.0)};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  int dim = (int)tpu_op_dim(c, tpu_op_int(c, 0), t.rank);
  if (tpu_hlo_func_status(c->f)) return;
  int isf = tpu_dtype_is_float(t.dtype);
  const char *op = is_max ? "maximum" : "minimum";
  V ident;
  if (isf) ident = tpu_hlo_scalar(c->f, t.dtype, is_max ? -INFINITY : INFINITY);
  else {
    int bits = (int)tpu_dtype_size(t.dtype) * 8;
    int uns = t.dtype >= TPU_U8 && t.dtype <= TPU_U64;
    int64_t mn = uns ? 0 : (bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1)));
    int64_t mx = uns ? (bits == 64 ? -1 : (int64_t)(((uint64_t)1 << bits) - 1))
                     : (bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1);
    ident = tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(t.dtype), is_max ? mn : mx);
  }
  V xs = isf ? SEL(c, ISNAN(c, x), tpu_hlo_broadcast_to(c->f, ident, t.rank, t.dims), x) : x;
  V v = scan(c, xs, dim, ident, NULL, op);
  V match = CMP(c, "EQ", xs, v);
  if (isf) {
    V nan = tpu_hlo_convert(c->f, ISNAN(c, x), TPU_S8);
    V seen = CMPK(c, "NE", scan(c, nan, dim, tpu_hlo_scalar(c->f, TPU_S8, 0), NULL, "maximum"), 0.0);
    v = SEL(c, seen, K(c, v, NAN), v);
    match = SEL(c, seen, ISNAN(c, x), match);
  }
  tpu_hlo_type_t it = t;
  it.dtype = TPU_S64;
  V iota = tpu_hlo_iota(c->f, it, dim);
  V m = SEL(c, match, iota, tpu_hlo_constant(c->f, it, -1.0));
  V idx = scan(c, m, dim, tpu_hlo_scalar(c->f, TPU_S64, -1.0), NULL, "maximum");
  V outs[2] = {v, idx};
  tpu_op_set_outputs(c, 2, outs);
}

/* logaddexp(a, b) with PyTorch's infinity rule (computed in a's type). */
static V logaddexp_(tpu_op_ctx_t *c, V a, V b, int base2) {
  V m = MAX(c, a, b);
  V d = UN(c, "negate", UN(c, "abs", SUB(c, a, b)));
  V r;
  if (base2) r = ADD(c, m, MUL(c, UN(c, "log_plus_one", tpu_hlo_binary(c->f, "power", K(c, d, 2.0), d)),
                               K(c, d, 1.4426950408889634074)));
  else r = ADD(c, m, UN(c, "log_plus_one", UN(c, "exponential", d)));
  V same_inf = AND(c, CMPK(c, "EQ", UN(c, "abs", a), INFINITY), CMP(c, "EQ", a, b));
  return SEL(c, same_inf, a, r);
}
static V lae(tpu_op_ctx_t *c, V a, V b) { return logaddexp_(c, a, b, 0); }

/* logcumsumexp: x (float); ints [dim]. */
static void rule_logcumsumexp(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = ty(c, c->in[0]);
  if (!float_check(c, t.dtype)) return;
  V y = tpu_hlo_cast(c->f, c->in[0], acc(t.dtype));
  if (t.rank == 0) { finish(c, y, t.dtype); return; }
  int dim = (int)tpu_op_dim(c, tpu_op_int(c, 0), t.rank);
  if (tpu_hlo_func_status(c->f)) return;
  finish(c, scan(c, y, dim, tpu_hlo_scalar(c->f, acc(t.dtype), -INFINITY), lae, NULL), t.dtype);
}

/* ---- elementwise ------------------------------------------------------------------------- */

/* logaddexp: (a, b); ints [dtype, base2]. */
static void rule_logaddexp(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!float_check(c, dt) || !load(c, 2, dt, v)) return;
  finish(c, logaddexp_(c, v[0], v[1], (int)int_or(c, 1, 0)), dt);
}

/* log_sigmoid_forward: x -> (out, buffer): out = min(x, 0) - log1p(e),
 * buffer = e = exp(-|x|) (as PyTorch CPU). */
static void rule_log_sigmoid_forward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  V v[1];
  if (!float_check(c, dt) || !load(c, 1, dt, v)) return;
  V x = v[0];
  V e = UN(c, "exponential", UN(c, "negate", UN(c, "abs", x)));
  V out = SUB(c, tpu_hlo_binary(c->f, "minimum", x, K(c, x, 0.0)), UN(c, "log_plus_one", e));
  V outs[2] = {tpu_hlo_cast(c->f, out, dt), tpu_hlo_cast(c->f, e, dt)};
  tpu_op_set_outputs(c, 2, outs);
}

/* log_sigmoid_backward: (grad, x) (buffer recomputed):
 * grad * (x < 0 ? 1 - e/(1+e) : e/(1+e)) with e = exp(-|x|). */
static void rule_log_sigmoid_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!float_check(c, dt) || !load(c, 2, dt, v)) return;
  V x = v[1];
  V e = UN(c, "exponential", UN(c, "negate", UN(c, "abs", x)));
  V q = DIV(c, e, ADD(c, e, K(c, e, 1.0)));
  V neg = CMPK(c, "LT", x, 0.0);
  V d = SEL(c, neg, SUB(c, K(c, q, 1.0), q), q);
  finish(c, MUL(c, v[0], d), dt);
}

/* logit: (x[, eps]); ints [dtype].  With eps, x is clamped to [eps, 1-eps]. */
static void rule_logit(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!float_check(c, dt) || !load(c, c->nin, dt, v)) return;
  V x = v[0];
  if (c->nin > 1) {
    V lo = v[1], hi = SUB(c, K(c, lo, 1.0), lo);
    x = SEL(c, CMP(c, "LT", x, lo), lo, SEL(c, CMP(c, "GT", x, hi), hi, x));
  }
  finish(c, UN(c, "log", DIV(c, x, SUB(c, K(c, x, 1.0), x))), dt);
}

/* logit_backward: (grad, x[, eps]); ints [dtype].  No eps: NaN outside
 * [0, 1]; with eps: 0 outside [eps, 1-eps]. */
static void rule_logit_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[3];
  if (!float_check(c, dt) || !load(c, c->nin, dt, v)) return;
  V g = v[0], x = v[1];
  V d = DIV(c, g, MUL(c, x, SUB(c, K(c, x, 1.0), x)));
  V r;
  if (c->nin > 2) {
    V lo = v[2], hi = SUB(c, K(c, lo, 1.0), lo);
    r = SEL(c, OR(c, CMP(c, "LT", x, lo), CMP(c, "GT", x, hi)), K(c, x, 0.0), d);
  } else {
    r = SEL(c, OR(c, CMPK(c, "LT", x, 0.0), CMPK(c, "GT", x, 1.0)), K(c, x, NAN), d);
  }
  finish(c, r, dt);
}

/* xlogy: (x, y); ints [dtype, log1p].  NaN y -> NaN; x == 0 -> 0;
 * else x * log(y) (x * log1p(y) for xlog1py). */
static void rule_xlogy(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!float_check(c, dt) || !load(c, 2, dt, v)) return;
  V x = v[0], y = v[1];
  V r = MUL(c, x, UN(c, int_or(c, 1, 0) ? "log_plus_one" : "log", y));
  r = SEL(c, CMPK(c, "EQ", x, 0.0), K(c, x, 0.0), r);
  finish(c, SEL(c, ISNAN(c, y), y, r), dt);
}

/* hardshrink: (x, lambd); ints [dtype].  -l <= x <= l ? 0 : x. */
static void rule_hardshrink(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!load(c, 2, dt, v)) return;
  V x = v[0], l = v[1];
  V in = AND(c, CMP(c, "GE", x, UN(c, "negate", l)), CMP(c, "LE", x, l));
  finish(c, SEL(c, in, K(c, x, 0.0), x), dt);
}

/* softshrink: (x, lambd); ints [dtype].  x > l ? x - l : x < -l ? x + l : 0
 * (NaN stays). */
static void rule_softshrink(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!load(c, 2, dt, v)) return;
  V x = v[0], l = v[1];
  V r = SEL(c, CMP(c, "GT", x, l), SUB(c, x, l),
            SEL(c, CMP(c, "LT", x, UN(c, "negate", l)), ADD(c, x, l), K(c, x, 0.0)));
  finish(c, SEL(c, ISNAN(c, x), x, r), dt);
}

/* shrink_backward (hard and soft): (grad, x, lambd); ints [dtype].
 * -l <= x <= l ? 0 : grad. */
static void rule_shrink_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[3];
  if (!load(c, 3, dt, v)) return;
  V x = v[1], l = v[2];
  V in = AND(c, CMP(c, "GE", x, UN(c, "negate", l)), CMP(c, "LE", x, l));
  finish(c, SEL(c, in, K(c, x, 0.0), v[0]), dt);
}

/* prelu: (x, weight broadcastable to x); ints [dtype].  x > 0 ? x : w x. */
static void rule_prelu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[2];
  if (!load(c, 2, dt, v)) return;
  finish(c, SEL(c, CMPK(c, "GT", v[0], 0.0), v[0], MUL(c, v[1], v[0])), dt);
}

/* prelu_backward: (grad, x, weight); ints [dtype] -> (grad_x, grad_w), both
 * of the broadcast shape (autograd sums grad_w to the weight's shape). */
static void rule_prelu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[3];
  if (!load(c, 3, dt, v)) return;
  V g = v[0], x = v[1], w = v[2];
  V pos = CMPK(c, "GT", x, 0.0);
  V outs[2] = {tpu_hlo_cast(c->f, SEL(c, pos, g, MUL(c, w, g)), dt),
               tpu_hlo_cast(c->f, SEL(c, pos, K(c, x, 0.0), MUL(c, x, g)), dt)};
  tpu_op_set_outputs(c, 2, outs);
}

/* Halves of x along dim. */
static int halves(tpu_op_ctx_t *c, V x, int64_t dim, V *a, V *b) {
  tpu_hlo_type_t t = ty(c, x);
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

static V sigmoid_(tpu_op_ctx_t *c, V x) {
  return DIV(c, K(c, x, 1.0), ADD(c, UN(c, "exponential", UN(c, "negate", x)), K(c, x, 1.0)));
}

/* glu: x (float); ints [dim (normalised)].  a * sigmoid(b). */
static void rule_glu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = dt_of(c, c->in[0]);
  if (!float_check(c, dt)) return;
  V a, b;
  if (!halves(c, tpu_hlo_cast(c->f, c->in[0], acc(dt)), tpu_op_int(c, 0), &a, &b)) return;
  finish(c, MUL(c, a, sigmoid_(c, b)), dt);
}

/* glu_backward: (grad, x); ints [dim]. */
static void rule_glu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = dt_of(c, c->in[1]);
  if (!float_check(c, dt)) return;
  int64_t dim = tpu_op_int(c, 0);
  V a, b;
  if (!halves(c, tpu_hlo_cast(c->f, c->in[1], acc(dt)), dim, &a, &b)) return;
  V g = tpu_hlo_cast(c->f, c->in[0], acc(dt));
  V s = sigmoid_(c, b);
  V ga = MUL(c, s, g);
  V gb = MUL(c, MUL(c, MUL(c, SUB(c, K(c, s, 1.0), s), s), a), g);
  V parts[2] = {ga, gb};
  finish(c, tpu_hlo_concatenate(c->f, parts, 2, dim), dt);
}

/* Special functions: x; ints [dtype (float result)]. */
static void special_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[1];
  if (!float_check(c, dt) || !load(c, 1, dt, v)) return;
  finish(c, UN(c, op, v[0]), dt);
}
static void rule_lgamma(tpu_op_ctx_t *c) { special_rule(c, "chlo.lgamma"); }

/* digamma: PyTorch returns -inf at 0 (+-0) and NaN at negative integers. */
static V digamma_(tpu_op_ctx_t *c, V x) {
  V r = UN(c, "chlo.digamma", x);
  V zero = CMPK(c, "EQ", x, 0.0);
  V negint = AND(c, CMPK(c, "LT", x, 0.0), CMP(c, "EQ", x, UN(c, "floor", x)));
  r = SEL(c, negint, K(c, x, NAN), r);
  return SEL(c, zero, K(c, x, -INFINITY), r);
}
static void rule_digamma(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  V v[1];
  if (!float_check(c, dt) || !load(c, 1, dt, v)) return;
  finish(c, digamma_(c, v[0]), dt);
}

/* polygamma: x; ints [dtype, n >= 0(, compute dtype)].  The adapter asks
 * for f64 compute where the platform has it (the shifted sum below cancels
 * for x < 0). */
static void rule_polygamma(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  int64_t n = tpu_op_int(c, 1);
  V v[1];
  if (!float_check(c, dt) || !load(c, 1, dt, v)) return;
  if (n == 0) { finish(c, digamma_(c, v[0]), dt); return; }
  if (tpu_op_nints(c) > 2) {
    tpu_dtype_t ct = res_dtype(c, 2);
    if (!float_check(c, ct)) return;
    v[0] = tpu_hlo_cast(c->f, v[0], ct);
  }
  /* chlo.polygamma loses accuracy for x < 0: shift x up by the recurrence
   * psi_n(x) = psi_n(x + 1) - (-1)^n n! / x^(n+1) (up to 16 steps; a
   * pole x = -k gives +-inf through 1/0 as PyTorch). */
  V y = v[0], sum = K(c, v[0], 0.0);
  for (int j = 0; j < 16; j++) {
    V m = CMPK(c, "LT", y, 0.5);
    V p = y;
    for (int64_t e = 1; e <= n && e < 64; e++) p = MUL(c, p, y);
    if (n >= 64) p = tpu_hlo_binary(c->f, "power", y, K(c, y, (double)(n + 1)));
    sum = SEL(c, m, ADD(c, sum, DIV(c, K(c, y, 1.0), p)), sum);
    y = SEL(c, m, ADD(c, y, K(c, y, 1.0)), y);
  }
  double fact = 1.0;
  for (int64_t e = 2; e <= n; e++) fact *= (double)e;
  V r = tpu_hlo_binary(c->f, "chlo.polygamma", K(c, y, (double)n), y);
  r = SUB(c, r, MUL(c, K(c, sum, (n % 2 ? -fact : fact)), sum));
  finish(c, r, dt);
}

/* ---- reductions / factories ---------------------------------------------------------------- */

/* nansum: x; ints [dtype, keepdim, ndims, dims[ndims] (normalised; none =
 * all)].  NaNs count as 0; halves accumulate in f32. */
static void rule_nansum(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  int keep = (int)tpu_op_int(c, 1);
  int64_t nd = tpu_op_int(c, 2);
  tpu_hlo_type_t t = ty(c, c->in[0]);
  if (dt == TPU_DTYPE_INVALID || dt == TPU_PRED) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "nansum: dtype");
    return;
  }
  int red[TPU_MAX_RANK] = {0};
  int64_t dims[TPU_MAX_RANK];
  int n = 0;
  if (nd == 0)
    for (int i = 0; i < t.rank; i++) red[i] = 1;
  for (int i = 0; i < nd; i++) {
    int64_t d = tpu_op_dim(c, tpu_op_int(c, 3 + i), t.rank > 0 ? t.rank : 1);
    if (d >= 0 && d < t.rank) red[d] = 1;
  }
  if (tpu_hlo_func_status(c->f)) return;
  for (int i = 0; i < t.rank; i++)
    if (red[i]) dims[n++] = i;
  tpu_dtype_t ct = acc(dt);
  V x = tpu_hlo_cast(c->f, tpu_hlo_cast(c->f, c->in[0], dt), ct);
  if (tpu_dtype_is_float(ct)) x = SEL(c, ISNAN(c, x), K(c, x, 0.0), x);
  V r = n ? tpu_hlo_reduce(c->f, x, tpu_hlo_scalar(c->f, ct, 0.0), dims, n, "add") : x;
  if (keep && n) {
    int64_t od[TPU_MAX_RANK];
    for (int i = 0; i < t.rank; i++) od[i] = red[i] ? 1 : t.dims[i];
    r = tpu_hlo_reshape(c->f, r, t.rank, od);
  }
  finish(c, r, dt);
}

/* eye: (one: a 0-d value of dtype); ints [dtype, n, m] -> [n, m] identity. */
static void rule_eye(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  int64_t d[2] = {tpu_op_int(c, 1), tpu_op_int(c, 2)};
  if (d[0] < 0 || d[1] < 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "eye: negative size");
    return;
  }
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, 2, d);
  V eq = CMP(c, "EQ", tpu_hlo_iota(c->f, it, 0), tpu_hlo_iota(c->f, it, 1));
  tpu_op_set_output(c, tpu_hlo_convert(c->f, eq, dt));
}

/* linspace: (start, end) 0-d in the compute type; ints [dtype, steps].
 * PyTorch's two-sided form: i < steps/2 ? start + step i :
 * end - step (steps - 1 - i).  logspace: (start, end, base) ->
 * base ** linspace (ints [dtype, steps, 1]). */
static void rule_linspace(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = res_dtype(c, 0);
  int64_t n = tpu_op_int(c, 1);
  int is_log = (int)int_or(c, 2, 0);
  if (n < 0 || dt == TPU_DTYPE_INVALID) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "linspace: number of steps must be non-negative");
    return;
  }
  tpu_dtype_t ct = dt_of(c, c->in[0]);
  tpu_hlo_type_t t = tpu_hlo_type_make(ct, 1, &n);
  V s = tpu_hlo_broadcast_to(c->f, c->in[0], 1, &n);
  V e = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[1], ct), 1, &n);
  V i = tpu_hlo_iota(c->f, t, 0);
  V r;
  if (n <= 1) r = s;
  else {
    V step = DIV(c, SUB(c, e, s), tpu_hlo_constant(c->f, t, (double)(n - 1)));
    V lo = ADD(c, s, MUL(c, step, i));
    V hi = SUB(c, e, MUL(c, step, SUB(c, tpu_hlo_constant(c->f, t, (double)(n - 1)), i)));
    r = SEL(c, CMP(c, "LT", i, tpu_hlo_constant(c->f, t, (double)(n / 2))), lo, hi);
  }
  if (is_log) r = tpu_hlo_binary(c->f, "power", tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], ct), 1, &n), r);
  if (tpu_dtype_is_int(dt) && tpu_dtype_is_float(ct))
    r = SEL(c, CMPK(c, "LT", r, 0.0), UN(c, "ceil", r), UN(c, "floor", r));
  finish(c, r, dt);
}

/* ---- the table ------------------------------------------------------------------------ */

const tpu_op_rule_t tpu_rules_extra[] = {
    {"upsample_nearest", rule_upsample_nearest, 1, 1},
    {"upsample_nearest_backward", rule_upsample_nearest_backward, 1, 1},
    {"upsample_linear", rule_upsample_linear, 1, 1},
    {"upsample_linear_backward", rule_upsample_linear_backward, 1, 1},
    {"upsample_cubic", rule_upsample_cubic, 1, 1},
    {"upsample_cubic_backward", rule_upsample_cubic_backward, 1, 1},
    {"pad_mode", rule_pad_mode, 1, 1},
    {"pad_mode_backward", rule_pad_mode_backward, 1, 1},
    {"im2col", rule_im2col, 1, 1},
    {"col2im", rule_col2im, 1, 1},
    {"unfold_backward", rule_unfold_backward, 1, 1},
    {"max_unpool2d", rule_max_unpool2d, 2, 2},
    {"cummaxmin", rule_cummaxmin, 1, 1},
    {"logcumsumexp", rule_logcumsumexp, 1, 1},
    {"logaddexp", rule_logaddexp, 2, 2},
    {"log_sigmoid_forward", rule_log_sigmoid_forward, 1, 1},
    {"log_sigmoid_backward", rule_log_sigmoid_backward, 2, 2},
    {"logit", rule_logit, 1, 2},
    {"logit_backward", rule_logit_backward, 2, 3},
    {"xlogy", rule_xlogy, 2, 2},
    {"hardshrink", rule_hardshrink, 2, 2},
    {"softshrink", rule_softshrink, 2, 2},
    {"shrink_backward", rule_shrink_backward, 3, 3},
    {"prelu", rule_prelu, 2, 2},
    {"prelu_backward", rule_prelu_backward, 3, 3},
    {"glu", rule_glu, 1, 1},
    {"glu_backward", rule_glu_backward, 2, 2},
    {"lgamma", rule_lgamma, 1, 1},
    {"digamma", rule_digamma, 1, 1},
    {"polygamma", rule_polygamma, 1, 1},
    {"nansum", rule_nansum, 1, 1},
    {"eye", rule_eye, 1, 1},
    {"linspace", rule_linspace, 2, 3},
    {NULL, NULL, 0, 0},
};
