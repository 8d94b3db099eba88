/* hlo_fft.c - stablehlo.fft. */
#include <string.h>

#include "hlo/hlo_internal.h"

#define FAIL(f, ...) tpu_hlo_fail((f), TPU_INVALID_ARGUMENT, __VA_ARGS__)

static tpu_dtype_t complex_of(tpu_dtype_t dt) {
  return dt == TPU_F32 ? TPU_C64 : dt == TPU_F64 ? TPU_C128 : TPU_DTYPE_INVALID;
}

static tpu_dtype_t real_of(tpu_dtype_t dt) {
  return dt == TPU_C64 ? TPU_F32 : dt == TPU_C128 ? TPU_F64 : TPU_DTYPE_INVALID;
}

tpu_hlo_value_t tpu_hlo_fft(tpu_hlo_func_t *f, tpu_hlo_value_t x, tpu_hlo_fft_type_t type,
                            const int64_t *lengths, int n) {
  static const char *const names[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  if (!tpu_hlo__ok(f, "fft", &x, 1)) return TPU_HLO_NONE;
  const tpu_hlo_type_t *tx = tpu_hlo__t(f, x);
  char b1[256];
  if ((int)type < 0 || (int)type > 3) return FAIL(f, "fft: unknown fft type %d", (int)type);
  const char *name = names[type];
  if (n < 1 || n > 3 || !lengths || n > tx->rank)
    return FAIL(f, "fft %s: %d transform dimensions for %s (1 to 3, at most the rank)", name, n,
                TPU_HLO_TSTR(tx, b1));
  tpu_hlo_type_t res = *tx;
  int first = tx->rank - n;
  for (int i = 0; i < n; i++)
    if (lengths[i] < 1) return FAIL(f, "fft %s: length %lld must be positive", name, (long long)lengths[i]);
  switch (type) {
    case TPU_HLO_FFT:
    case TPU_HLO_IFFT:
      if (!tpu_dtype_is_complex(tx->dtype)) return FAIL(f, "fft %s: expected a complex operand, got %s", name, TPU_HLO_TSTR(tx, b1));
      for (int i = 0; i < n; i++)
        if (tx->dims[first + i] != lengths[i])
          return FAIL(f, "fft %s: lengths do not match the trailing dimensions of %s", name, TPU_HLO_TSTR(tx, b1));
      break;
    case TPU_HLO_RFFT:
      res.dtype = complex_of(tx->dtype);
      if (res.dtype == TPU_DTYPE_INVALID)
        return FAIL(f, "fft RFFT: expected an f32 or f64 operand, got %s", TPU_HLO_TSTR(tx, b1));
      for (int i = 0; i < n; i++)
        if (tx->dims[first + i] != lengths[i])
          return FAIL(f, "fft RFFT: lengths do not match the trailing dimensions of %s", TPU_HLO_TSTR(tx, b1));
      res.dims[tx->rank - 1] = lengths[n - 1] / 2 + 1;
      break;
    case TPU_HLO_IRFFT:
      res.dtype = real_of(tx->dtype);
      if (res.dtype == TPU_DTYPE_INVALID)
        return FAIL(f, "fft IRFFT: expected a complex operand, got %s", TPU_HLO_TSTR(tx, b1));
      for (int i = 0; i + 1 < n; i++)
        if (tx->dims[first + i] != lengths[i])
          return FAIL(f, "fft IRFFT: lengths do not match the trailing dimensions of %s", TPU_HLO_TSTR(tx, b1));
      if (tx->dims[tx->rank - 1] != lengths[n - 1] / 2 + 1)
        return FAIL(f, "fft IRFFT: last dimension of %s must be %lld / 2 + 1", TPU_HLO_TSTR(tx, b1),
                    (long long)lengths[n - 1]);
      res.dims[tx->rank - 1] = lengths[n - 1];
      break;
  }
  tpu_strbuf_t a;
  tpu_strbuf_init(&a);
  tpu_strbuf_printf(&a, "fft_type = #stablehlo<fft_type %s>, ", name);
  tpu_hlo__array_attr(&a, "fft_length", lengths, n);
  tpu_hlo_value_t v = tpu_strbuf_ok(&a) ? tpu_hlo__simple(f, "fft", &x, 1, &res, tpu_strbuf_cstr(&a))
                                        : tpu_hlo_fail(f, TPU_RESOURCE_EXHAUSTED, "hlo: out of host memory");
  tpu_strbuf_free(&a);
  return v;
}
