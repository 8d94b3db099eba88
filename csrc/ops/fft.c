/* fft.c - discrete Fourier transforms: ATen's _fft_c2c, _fft_r2c and
 * _fft_c2r as stablehlo.fft (see ops.h for how a rule is written).
 *
 * ATen's three primitives transform over any list of dims.  The rules move
 * those dims to the end (in the order given: for r2c / c2r the last listed
 * dim is the halved one), transform them in groups of at most 3 trailing
 * dims (stablehlo.fft's limit; the transform is separable), scale, and move
 * them back.  stablehlo's IFFT / IRFFT divide by the signal size and the
 * forward transforms do not; ATen's `normalization` asks for
 *   0: no scaling, 1: 1/sqrt(n), 2: 1/n   (n = prod of the signal sizes)
 * in either direction, so the rules rescale to that.
 */
#include <math.h>
#include <string.h>

#include "ops/ops.h"

typedef struct fft_plan {
  int rank, k;
  int64_t perm[TPU_MAX_RANK], inv[TPU_MAX_RANK];
} fft_plan_t;

/* Reads attrs [ndims, dims...] from attr index `at`; fills the permutation
 * that moves the dims to the end in that order.  Returns false (failed). */
static bool plan_dims(tpu_op_ctx_t *c, int at, int rank, fft_plan_t *p) {
  int k = (int)tpu_op_int(c, at);
  if (k < 1 || k > rank || tpu_op_nints(c) < at + 1 + k) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: bad dim list (%d dims for a rank-%d input)", c->name, k, rank);
    return false;
  }
  bool used[TPU_MAX_RANK] = {false};
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < k; i++) {
    int64_t d = tpu_op_dim(c, tpu_op_int(c, at + 1 + i), rank);
    if (tpu_hlo_func_status(c->f)) return false;
    if (used[d]) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: dim %lld appears multiple times in the list of dims", c->name,
                  (long long)d);
      return false;
    }
    used[d] = true;
    dims[i] = d;
  }
  int j = 0;
  for (int d = 0; d < rank; d++)
    if (!used[d]) p->perm[j++] = d;
  for (int i = 0; i < k; i++) p->perm[j++] = dims[i];
  for (int i = 0; i < rank; i++) p->inv[p->perm[i]] = i;
  p->rank = rank;
  p->k = k;
  return true;
}

static bool identity_perm(const int64_t *perm, int rank) {
  for (int i = 0; i < rank; i++)
    if (perm[i] != i) return false;
  return true;
}

static tpu_hlo_value_t permute(tpu_hlo_func_t *f, tpu_hlo_value_t x, const int64_t *perm, int rank) {
  return identity_perm(perm, rank) ? x : tpu_hlo_transpose(f, x, perm);
}

/* stablehlo.fft of `type` over trailing positions [lo, hi) of x (hi - lo <= 3):
 * those positions are moved to the end first when hi < rank. */
static tpu_hlo_value_t fft_span(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_fft_type_t type, int lo, int hi,
                                int64_t last_len) {
  tpu_hlo_type_t t = *tpu_hlo_type_of(f, x);
  int rank = t.rank, n = hi - lo;
  int64_t perm[TPU_MAX_RANK], inv[TPU_MAX_RANK], len[3];
  int j = 0;
  for (int d = 0; d < rank; d++)
    if (d < lo || d >= hi) perm[j++] = d;
  for (int d = lo; d < hi; d++) perm[j++] = d;
  for (int i = 0; i < rank; i++) inv[perm[i]] = i;
  tpu_hlo_value_t y = permute(f, x, perm, rank);
  for (int i = 0; i < n; i++) len[i] = t.dims[lo + i];
  if (type == TPU_HLO_IRFFT) len[n - 1] = last_len;
  y = tpu_hlo_fft(f, y, type, len, n);
  return permute(f, y, inv, rank);
}

/* Transforms positions [first, rank) of x, which hold the k moved dims.
 * type: FFT or IFFT over all of them; RFFT: real transform over the last,
 * then FFT over the rest; IRFFT: IFFT over all but the last, then the real
 * inverse over the last (output length last_len). */
static tpu_hlo_value_t fft_all(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_fft_type_t type, int first, int rank,
                               int64_t last_len) {
  /* groups of <= 3 positions, the last group ending at rank */
  int hi = rank;
  tpu_hlo_fft_type_t rest = type == TPU_HLO_RFFT ? TPU_HLO_FFT : type == TPU_HLO_IRFFT ? TPU_HLO_IFFT : type;
  if (type == TPU_HLO_IRFFT) {
    /* complex part first (over every group but the last), then the real inverse */
    int lo_last = rank - 3 < first ? first : rank - 3;
    for (int h = lo_last; h > first; h -= 3) {
      int lo = h - 3 < first ? first : h - 3;
      x = fft_span(f, x, rest, lo, h, 0);
    }
    return fft_span(f, x, TPU_HLO_IRFFT, lo_last, rank, last_len);
  }
  bool firstgroup = true;
  while (hi > first) {
    int lo = hi - 3 < first ? first : hi - 3;
    x = fft_span(f, x, firstgroup ? type : rest, lo, hi, 0);
    firstgroup = false;
    hi = lo;
  }
  return x;
}

/* Multiplies x by the real factor s (no-op for 1). */
static tpu_hlo_value_t scale(tpu_hlo_func_t *f, tpu_hlo_value_t x, double s) {
  if (s == 1.0) return x;
  tpu_hlo_type_t t = *tpu_hlo_type_of(f, x);
  return tpu_hlo_binary(f, "multiply", x, tpu_hlo_broadcast_to(f, tpu_hlo_scalar(f, t.dtype, s), t.rank, t.dims));
}

/* The factor that turns stablehlo's result into ATen's: the forward
 * transforms are unscaled, the inverse ones divided by n. */
static double norm_factor(tpu_op_ctx_t *c, int norm, bool forward, double n) {
  if (norm < 0 || norm > 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: unknown normalization %d", c->name, norm);
    return 1.0;
  }
  double want = norm == 0 ? 1.0 : norm == 1 ? 1.0 / sqrt(n) : 1.0 / n; /* the scaling ATen asks for */
  return forward ? want : want * n;
}

static bool check_dtype(tpu_op_ctx_t *c, const tpu_hlo_type_t *t, bool want_complex) {
  bool ok = want_complex ? (t->dtype == TPU_C64 || t->dtype == TPU_C128) : (t->dtype == TPU_F32 || t->dtype == TPU_F64);
  if (!ok) {
    char b[64];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected a %s input, got %s of %s", c->name,
                want_complex ? "complex64 or complex128" : "float32 or float64", tpu_op_shape_str(t, b, sizeof b),
                tpu_dtype_name(t->dtype));
  }
  return ok;
}

static bool check_nonempty(tpu_op_ctx_t *c, const tpu_hlo_type_t *t, const fft_plan_t *p) {
  for (int i = t->rank - p->k; i < t->rank; i++)
    if (t->dims[p->perm[i]] < 1) {
      char b[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Invalid number of data points (0) specified (input %s)", c->name,
                  tpu_op_shape_str(t, b, sizeof b));
      return false;
    }
  return true;
}

/* fft_c2c: inputs (self complex [...]); attrs [forward, normalization, k,
 * dims[k]].  -> complex, same shape. */
static void rule_fft_c2c(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  bool forward = tpu_op_int(c, 0) != 0;
  int norm = (int)tpu_op_int(c, 1);
  fft_plan_t p;
  if (!check_dtype(c, &t, true) || !plan_dims(c, 2, t.rank, &p) || !check_nonempty(c, &t, &p)) return;
  double n = 1;
  for (int i = t.rank - p.k; i < t.rank; i++) n *= (double)t.dims[p.perm[i]];
  double s = norm_factor(c, norm, forward, n);
  tpu_hlo_value_t y = permute(f, c->in[0], p.perm, t.rank);
  y = fft_all(f, y, forward ? TPU_HLO_FFT : TPU_HLO_IFFT, t.rank - p.k, t.rank, 0);
  y = permute(f, scale(f, y, s), p.inv, t.rank);
  tpu_op_set_output(c, y);
}

/* fft_r2c: inputs (self f32/f64 [...]); attrs [onesided, normalization, k,
 * dims[k]].  -> complex; with onesided the last listed dim has size
 * n / 2 + 1. */
static void rule_fft_r2c(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  bool onesided = tpu_op_int(c, 0) != 0;
  int norm = (int)tpu_op_int(c, 1);
  fft_plan_t p;
  if (!check_dtype(c, &t, false) || !plan_dims(c, 2, t.rank, &p) || !check_nonempty(c, &t, &p)) return;
  double n = 1;
  for (int i = t.rank - p.k; i < t.rank; i++) n *= (double)t.dims[p.perm[i]];
  double s = norm_factor(c, norm, true, n);
  tpu_hlo_value_t y = permute(f, c->in[0], p.perm, t.rank);
  if (onesided) {
    y = fft_all(f, y, TPU_HLO_RFFT, t.rank - p.k, t.rank, 0);
  } else {
    y = tpu_hlo_convert(f, y, t.dtype == TPU_F32 ? TPU_C64 : TPU_C128);
    y = fft_all(f, y, TPU_HLO_FFT, t.rank - p.k, t.rank, 0);
  }
  y = permute(f, scale(f, y, s), p.inv, t.rank);
  tpu_op_set_output(c, y);
}

/* fft_c2r: inputs (self complex [...]); attrs [normalization, last_dim_size,
 * k, dims[k]].  The last listed dim of self holds the one-sided spectrum
 * (trimmed or zero-padded to last_dim_size / 2 + 1 here); -> real, that
 * dim of size last_dim_size. */
static void rule_fft_c2r(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int norm = (int)tpu_op_int(c, 0);
  int64_t last = tpu_op_int(c, 1);
  fft_plan_t p;
  if (!check_dtype(c, &t, true) || !plan_dims(c, 2, t.rank, &p) || !check_nonempty(c, &t, &p)) return;
  if (last < 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Invalid number of data points (%lld) specified", c->name,
                (long long)last);
    return;
  }
  double n = (double)last;
  for (int i = t.rank - p.k; i < t.rank - 1; i++) n *= (double)t.dims[p.perm[i]];
  double s = norm_factor(c, norm, false, n);
  tpu_hlo_value_t y = permute(f, c->in[0], p.perm, t.rank);
  /* the one-sided length stablehlo wants */
  int64_t half = last / 2 + 1, have = t.dims[p.perm[t.rank - 1]];
  if (have != half) {
    tpu_hlo_type_t yt = *tpu_hlo_type_of(f, y);
    int r = yt.rank;
    if (have > half) {
      int64_t start[TPU_MAX_RANK] = {0}, lim[TPU_MAX_RANK], str[TPU_MAX_RANK];
      for (int i = 0; i < r; i++) {
        lim[i] = yt.dims[i];
        str[i] = 1;
      }
      lim[r - 1] = half;
      y = tpu_hlo_slice(f, y, start, lim, str);
    } else {
      int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, in[TPU_MAX_RANK] = {0};
      hi[r - 1] = half - have;
      y = tpu_hlo_pad(f, y, tpu_hlo_scalar(f, yt.dtype, 0.0), lo, hi, in);
    }
  }
  y = fft_all(f, y, TPU_HLO_IRFFT, t.rank - p.k, t.rank, last);
  y = permute(f, scale(f, y, s), p.inv, t.rank);
  tpu_op_set_output(c, y);
}

const tpu_op_rule_t tpu_rules_fft[] = {
    {"fft_c2c", rule_fft_c2c, 1, 1},
    {"fft_r2c", rule_fft_r2c, 1, 1},
    {"fft_c2r", rule_fft_c2r, 1, 1},
    {NULL, NULL, 0, 0},
};
