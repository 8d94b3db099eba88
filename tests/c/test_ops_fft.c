/* test_ops_fft.c - the fft rules (csrc/ops/fft.c) and the complex rules
 * (csrc/ops/complex.c) on the plugin against a naive DFT / libm written
 * here. */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* In place: the 1-d DFT along dim d (sign -1 forward, +1 inverse; unscaled). */
static void dft1(double complex *x, int rank, const int64_t *dims, int d, int sign) {
  int64_t n = dims[d], inner = 1, outer = 1;
  for (int i = d + 1; i < rank; i++) inner *= dims[i];
  for (int i = 0; i < d; i++) outer *= dims[i];
  double complex *tmp = malloc(sizeof(double complex) * (size_t)n);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      double complex *base = x + o * n * inner + in;
      for (int64_t k = 0; k < n; k++) {
        double complex s = 0;
        for (int64_t j = 0; j < n; j++) s += base[j * inner] * cexp(sign * 2.0 * M_PI * I * (double)(j * k % n) / (double)n);
        tmp[k] = s;
      }
      for (int64_t k = 0; k < n; k++) base[k * inner] = tmp[k];
    }
  free(tmp);
}

static void to_pairs(const double complex *z, int64_t n, double *out) {
  for (int64_t i = 0; i < n; i++) out[2 * i] = creal(z[i]), out[2 * i + 1] = cimag(z[i]);
}

static double norm_scale(int norm, int forward, double n) {
  double want = norm == 0 ? 1.0 : norm == 1 ? 1.0 / sqrt(n) : 1.0 / n;
  (void)forward;
  return want;
}

/* fft_c2c over `dl` (k dims) of a complex64 [dims] input. */
static void check_c2c(int rank, const int64_t *dims, int k, const int64_t *dl, int forward, int norm, unsigned seed) {
  int64_t n = numel(rank, dims);
  double *pairs = malloc(sizeof(double) * (size_t)(2 * n)), *want = malloc(sizeof(double) * (size_t)(2 * n));
  double complex *z = malloc(sizeof(double complex) * (size_t)n);
  opt_fill(pairs, 2 * n, seed);
  for (int64_t i = 0; i < n; i++) z[i] = (float)pairs[2 * i] + I * (float)pairs[2 * i + 1];
  double sz = 1;
  for (int i = 0; i < k; i++) {
    int d = (int)(dl[i] < 0 ? dl[i] + rank : dl[i]);
    dft1(z, rank, dims, d, forward ? -1 : 1);
    sz *= (double)dims[d];
  }
  double s = norm_scale(norm, forward, sz);
  for (int64_t i = 0; i < n; i++) z[i] *= s;
  to_pairs(z, n, want);
  opt_in_t in = {TPU_C64, rank, {0}, pairs};
  memcpy(in.dims, dims, sizeof(int64_t) * (size_t)rank);
  int64_t ints[3 + TPU_MAX_RANK] = {forward, norm, k};
  for (int i = 0; i < k; i++) ints[3 + i] = dl[i];
  opt_out_t o;
  int r = opt_run("fft_c2c", &in, 1, ints, 3 + k, &o, 1);
  TT_CHECK(r == 1);
  if (r == 1) {
    TT_CHECK(o.dt == TPU_C64 && o.n == n);
    TT_CHECK(opt_close(o.v, want, 2 * n, 2e-5));
    opt_free(&o, 1);
  }
  free(pairs), free(want), free(z);
}

TT_TEST(ops_fft_c2c_matches_naive_dft) {
  int64_t d1[3] = {2, 3, 8};
  int64_t l1[1] = {-1};
  check_c2c(3, d1, 1, l1, 1, 0, 1);
  check_c2c(3, d1, 1, l1, 0, 2, 2); /* ifft, "backward" norm */
  int64_t l2[2] = {1, 2};
  check_c2c(3, d1, 2, l2, 1, 1, 3); /* fft2, ortho */
  int64_t l3[3] = {2, 0, 1};        /* fftn in a shuffled order */
  check_c2c(3, d1, 3, l3, 0, 0, 4);
  int64_t d4[4] = {2, 3, 2, 5}, l4[4] = {0, 1, 2, 3}; /* 4 dims: two stablehlo.fft calls */
  check_c2c(4, d4, 4, l4, 1, 2, 5);
  int64_t l5[2] = {0, 2}; /* non-trailing dims */
  check_c2c(4, d4, 2, l5, 1, 0, 6);
}

/* fft_r2c over dl of an f32 input; onesided halves the last listed dim. */
static void check_r2c(int rank, const int64_t *dims, int k, const int64_t *dl, int onesided, int norm, unsigned seed) {
  int64_t n = numel(rank, dims);
  double *x = malloc(sizeof(double) * (size_t)n);
  double complex *z = malloc(sizeof(double complex) * (size_t)n);
  opt_fill(x, n, seed);
  for (int64_t i = 0; i < n; i++) z[i] = (float)x[i];
  double sz = 1;
  for (int i = 0; i < k; i++) {
    dft1(z, rank, dims, (int)dl[i], -1);
    sz *= (double)dims[dl[i]];
  }
  double s = norm_scale(norm, 1, sz);
  int last = (int)dl[k - 1];
  int64_t odims[TPU_MAX_RANK];
  memcpy(odims, dims, sizeof(int64_t) * (size_t)rank);
  if (onesided) odims[last] = dims[last] / 2 + 1;
  int64_t on = numel(rank, odims), inner = 1;
  for (int i = last + 1; i < rank; i++) inner *= dims[i];
  double *want = malloc(sizeof(double) * (size_t)(2 * on));
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t idx = (i / inner) % dims[last];
    if (idx >= odims[last]) continue;
    want[2 * j] = creal(z[i]) * s, want[2 * j + 1] = cimag(z[i]) * s;
    j++;
  }
  opt_in_t in = {TPU_F32, rank, {0}, x};
  memcpy(in.dims, dims, sizeof(int64_t) * (size_t)rank);
  int64_t ints[3 + TPU_MAX_RANK] = {onesided, norm, k};
  for (int i = 0; i < k; i++) ints[3 + i] = dl[i];
  opt_out_t o;
  int r = opt_run("fft_r2c", &in, 1, ints, 3 + k, &o, 1);
  TT_CHECK(r == 1);
  if (r == 1) {
    TT_CHECK(o.dt == TPU_C64 && o.n == on && o.dims[last] == odims[last]);
    TT_CHECK(opt_close(o.v, want, 2 * on, 2e-5));
    opt_free(&o, 1);
  }
  free(x), free(z), free(want);
}

TT_TEST(ops_fft_r2c_matches_naive_dft) {
  int64_t d[3] = {3, 4, 7};
  int64_t l1[1] = {2};
  check_r2c(3, d, 1, l1, 1, 0, 7);  /* rfft, odd length */
  check_r2c(3, d, 1, l1, 0, 1, 8);  /* full spectrum */
  int64_t l2[2] = {2, 1};           /* rfft2 with the halved dim not last in memory */
  check_r2c(3, d, 2, l2, 1, 2, 9);
  int64_t d4[4] = {2, 2, 3, 4}, l4[4] = {0, 1, 2, 3};
  check_r2c(4, d4, 4, l4, 1, 0, 10);
}

/* fft_c2r: the inverse of a one-sided spectrum over dl, output length L in
 * the last listed dim; the input's last listed dim has `have` entries. */
static void check_c2r(int rank, const int64_t *odims, int k, const int64_t *dl, int64_t have, int norm, unsigned seed) {
  int last = (int)dl[k - 1];
  int64_t L = odims[last], half = L / 2 + 1;
  int64_t idims[TPU_MAX_RANK], fdims[TPU_MAX_RANK];
  memcpy(idims, odims, sizeof(int64_t) * (size_t)rank);
  memcpy(fdims, odims, sizeof(int64_t) * (size_t)rank);
  idims[last] = have;
  int64_t in_n = numel(rank, idims), n = numel(rank, odims), inner = 1;
  for (int i = last + 1; i < rank; i++) inner *= odims[i];
  double *pairs = malloc(sizeof(double) * (size_t)(2 * in_n));
  opt_fill(pairs, 2 * in_n, seed);
  for (int64_t i = 0; i < 2 * in_n; i++) pairs[i] = (float)pairs[i];
  /* full Hermitian spectrum along `last` (entries past `have` are 0) */
  double complex *z = malloc(sizeof(double complex) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    int64_t idx = (i / inner) % L, rest_hi = i / (inner * L), rest_lo = i % inner;
    int64_t src = idx < half ? idx : L - idx;
    double complex v = 0;
    if (src < have && src < half) {
      int64_t si = (rest_hi * have + src) * inner + rest_lo;
      v = pairs[2 * si] + I * pairs[2 * si + 1];
    }
    z[i] = idx < half ? v : conj(v);
  }
  (void)fdims; /* k = 1 only: the extension is along `last` alone */
  double sz = 1;
  for (int i = 0; i < k; i++) {
    dft1(z, rank, odims, (int)dl[i], 1);
    sz *= (double)odims[dl[i]];
  }
  double s = norm_scale(norm, 0, sz);
  double *want = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) want[i] = creal(z[i]) * s;
  opt_in_t in = {TPU_C64, rank, {0}, pairs};
  memcpy(in.dims, idims, sizeof(int64_t) * (size_t)rank);
  int64_t ints[3 + TPU_MAX_RANK] = {norm, L, k};
  for (int i = 0; i < k; i++) ints[3 + i] = dl[i];
  opt_out_t o;
  int r = opt_run("fft_c2r", &in, 1, ints, 3 + k, &o, 1);
  TT_CHECK(r == 1);
  if (r == 1) {
    TT_CHECK(o.dt == TPU_F32 && o.n == n);
    TT_CHECK(opt_close(o.v, want, n, 2e-5));
    opt_free(&o, 1);
  }
  free(pairs), free(z), free(want);
}

TT_TEST(ops_fft_c2r_matches_naive_inverse) {
  int64_t d[2] = {3, 8};
  int64_t l1[1] = {1};
  check_c2r(2, d, 1, l1, 5, 2, 11); /* irfft, even length */
  int64_t d7[2] = {3, 7};
  check_c2r(2, d7, 1, l1, 4, 0, 12); /* odd length */
  check_c2r(2, d7, 1, l1, 6, 1, 13); /* longer input: trimmed */
  check_c2r(2, d7, 1, l1, 2, 2, 14); /* shorter input: zero-padded */
}

TT_TEST(ops_fft_rejects_bad_arguments) {
  double z[64] = {0};
  opt_in_t f32 = {TPU_F32, 2, {2, 4}, z}, c64 = {TPU_C64, 2, {2, 4}, z};
  int64_t c2c[4] = {1, 0, 1, 1};
  TT_CHECK(opt_lower_fails("fft_c2c", &f32, 1, c2c, 4, TPU_INVALID_ARGUMENT, "complex64"));
  int64_t dup[5] = {1, 0, 2, 1, 1};
  TT_CHECK(opt_lower_fails("fft_c2c", &c64, 1, dup, 5, TPU_INVALID_ARGUMENT, "multiple times"));
  int64_t bad_dim[4] = {1, 0, 1, 5};
  TT_CHECK(opt_lower_fails("fft_c2c", &c64, 1, bad_dim, 4, TPU_OUT_OF_RANGE, "Dimension out of range"));
  int64_t r2c[4] = {1, 0, 1, 1};
  TT_CHECK(opt_lower_fails("fft_r2c", &c64, 1, r2c, 4, TPU_INVALID_ARGUMENT, "float32"));
  int64_t c2r[4] = {0, 0, 1, 1};
  TT_CHECK(opt_lower_fails("fft_c2r", &c64, 1, c2r, 4, TPU_INVALID_ARGUMENT, "data points"));
  int64_t badnorm[4] = {1, 7, 1, 1};
  TT_CHECK(opt_lower_fails("fft_c2c", &c64, 1, badnorm, 4, TPU_INVALID_ARGUMENT, "normalization"));
}

TT_TEST(ops_complex_unary_and_make) {
  enum { N = 7 };
  double pairs[2 * N] = {3, 4, -1, 0, 0, 0, 0, -2, -0.5, 0.25, 1e-3, -7, 2, 2};
  opt_in_t in = {TPU_C64, 1, {N}, pairs};
  for (int fn = 0; fn <= 5; fn++) {
    int64_t ints[1] = {fn};
    opt_out_t o;
    int r = opt_run("complex_unary", &in, 1, ints, 1, &o, 1);
    TT_CHECK(r == 1);
    if (r != 1) continue;
    double want[2 * N];
    int cx = fn == 2 || fn == 5;
    for (int i = 0; i < N; i++) {
      double complex z = (float)pairs[2 * i] + I * (float)pairs[2 * i + 1], w;
      switch (fn) {
        case 0: w = cabs(z); break;
        case 1: w = carg(z); break;
        case 2: w = conj(z); break;
        case 3: w = creal(z); break;
        case 4: w = cimag(z); break;
        default: w = cabs(z) == 0 ? 0 : z / cabs(z); break;
      }
      if (cx) want[2 * i] = creal(w), want[2 * i + 1] = cimag(w);
      else want[i] = creal(w);
    }
    TT_CHECK(o.dt == (cx ? TPU_C64 : TPU_F32));
    TT_CHECK(opt_close(o.v, want, cx ? 2 * N : N, 1e-6));
    opt_free(&o, 1);
  }
  /* real input: angle is pi for negatives, NaN kept */
  double x[4] = {-2, 0, 3, NAN}, wa[4] = {M_PI, 0, 0, NAN};
  opt_in_t rin = {TPU_F32, 1, {4}, x};
  int64_t ang[1] = {1};
  opt_out_t o;
  if (opt_run("complex_unary", &rin, 1, ang, 1, &o, 1) == 1) {
    TT_CHECK(opt_close(o.v, wa, 4, 1e-6));
    opt_free(&o, 1);
  }
  /* complex_make: torch.complex and torch.polar, broadcast */
  double a[3] = {1, -2, 0.5}, b[1] = {0.75};
  opt_in_t ins[2] = {{TPU_F32, 1, {3}, a}, {TPU_F32, 1, {1}, b}};
  for (int polar = 0; polar <= 1; polar++) {
    int64_t ints[1] = {polar};
    if (opt_run("complex_make", ins, 2, ints, 1, &o, 1) != 1) {
      TT_CHECK(0);
      continue;
    }
    double want[6];
    for (int i = 0; i < 3; i++) {
      want[2 * i] = polar ? a[i] * cos(0.75) : a[i];
      want[2 * i + 1] = polar ? a[i] * sin(0.75) : 0.75;
    }
    TT_CHECK(o.dt == TPU_C64 && o.n == 3);
    TT_CHECK(opt_close(o.v, want, 6, 1e-6));
    opt_free(&o, 1);
  }
  double y[3] = {0};
  opt_in_t mixed[2] = {{TPU_F32, 1, {3}, a}, {TPU_F64, 1, {3}, y}};
  int64_t zero[1] = {0};
  TT_CHECK(opt_lower_fails("complex_make", mixed, 2, zero, 1, TPU_INVALID_ARGUMENT, "one dtype"));
  int64_t badfn[1] = {9};
  TT_CHECK(opt_lower_fails("complex_unary", &in, 1, badfn, 1, TPU_INVALID_ARGUMENT, "unknown function"));
}

/* complex products run through the linalg rules unchanged */
TT_TEST(ops_complex_mm) {
  double a[2 * 6], b[2 * 6];
  opt_fill(a, 12, 21);
  opt_fill(b, 12, 22);
  for (int i = 0; i < 12; i++) a[i] = (float)a[i], b[i] = (float)b[i];
  opt_in_t ins[2] = {{TPU_C64, 2, {2, 3}, a}, {TPU_C64, 2, {3, 2}, b}};
  opt_out_t o;
  if (opt_run("mm", ins, 2, NULL, 0, &o, 1) != 1) {
    TT_CHECK(0);
    return;
  }
  double want[8];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      double complex s = 0;
      for (int k = 0; k < 3; k++) s += (a[2 * (i * 3 + k)] + I * a[2 * (i * 3 + k) + 1]) * (b[2 * (k * 2 + j)] + I * b[2 * (k * 2 + j) + 1]);
      want[2 * (i * 2 + j)] = creal(s), want[2 * (i * 2 + j) + 1] = cimag(s);
    }
  TT_CHECK(o.dt == TPU_C64);
  TT_CHECK(opt_close(o.v, want, 8, 1e-5));
  opt_free(&o, 1);
}
