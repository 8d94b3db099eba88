#include "base/dtype.h"

#include <math.h>

size_t tpu_dtype_size(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: case TPU_S8: case TPU_U8: return 1;
    case TPU_F8E5M2: case TPU_F8E4M3FN: case TPU_F8E5M2FNUZ: case TPU_F8E4M3FNUZ: return 1;
    case TPU_S16: case TPU_U16: case TPU_F16: case TPU_BF16: return 2;
    case TPU_S32: case TPU_U32: case TPU_F32: return 4;
    case TPU_S64: case TPU_U64: case TPU_F64: case TPU_C64: return 8;
    case TPU_C128: return 16;
    default: return 0;
  }
}

const char *tpu_dtype_mlir(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: return "i1";
    case TPU_S8: return "i8";
    case TPU_S16: return "i16";
    case TPU_S32: return "i32";
    case TPU_S64: return "i64";
    case TPU_U8: return "ui8";
    case TPU_U16: return "ui16";
    case TPU_U32: return "ui32";
    case TPU_U64: return "ui64";
    case TPU_F16: return "f16";
    case TPU_F32: return "f32";
    case TPU_F64: return "f64";
    case TPU_BF16: return "bf16";
    case TPU_C64: return "complex<f32>";
    case TPU_C128: return "complex<f64>";
    case TPU_F8E5M2: return "f8E5M2";
    case TPU_F8E4M3FN: return "f8E4M3FN";
    case TPU_F8E5M2FNUZ: return "f8E5M2FNUZ";
    case TPU_F8E4M3FNUZ: return "f8E4M3FNUZ";
    default: return "?";
  }
}

const char *tpu_dtype_scalar_type(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_F32: return "Float";
    case TPU_F64: return "Double";
    case TPU_F16: return "Half";
    case TPU_BF16: return "BFloat16";
    case TPU_S64: return "Long";
    case TPU_S32: return "Int";
    case TPU_S16: return "Short";
    case TPU_S8: return "Char";
    case TPU_U8: return "Byte";
    case TPU_PRED: return "Bool";
    case TPU_F8E5M2: return "Float8_e5m2";
    case TPU_F8E4M3FN: return "Float8_e4m3fn";
    case TPU_F8E5M2FNUZ: return "Float8_e5m2fnuz";
    case TPU_F8E4M3FNUZ: return "Float8_e4m3fnuz";
    default: return tpu_dtype_name(dt);
  }
}

const char *tpu_dtype_name(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: return "bool";
    case TPU_S8: return "int8";
    case TPU_S16: return "int16";
    case TPU_S32: return "int32";
    case TPU_S64: return "int64";
    case TPU_U8: return "uint8";
    case TPU_U16: return "uint16";
    case TPU_U32: return "uint32";
    case TPU_U64: return "uint64";
    case TPU_F16: return "float16";
    case TPU_F32: return "float32";
    case TPU_F64: return "float64";
    case TPU_BF16: return "bfloat16";
    case TPU_C64: return "complex64";
    case TPU_C128: return "complex128";
    case TPU_F8E5M2: return "float8_e5m2";
    case TPU_F8E4M3FN: return "float8_e4m3fn";
    case TPU_F8E5M2FNUZ: return "float8_e5m2fnuz";
    case TPU_F8E4M3FNUZ: return "float8_e4m3fnuz";
    default: return "invalid";
  }
}

int tpu_dtype_is_float(tpu_dtype_t dt) {
  return dt == TPU_F16 || dt == TPU_BF16 || dt == TPU_F32 || dt == TPU_F64 || tpu_dtype_is_f8(dt);
}
int tpu_dtype_is_f8(tpu_dtype_t dt) {
  return dt == TPU_F8E5M2 || dt == TPU_F8E4M3FN || dt == TPU_F8E5M2FNUZ || dt == TPU_F8E4M3FNUZ;
}
int tpu_dtype_is_int(tpu_dtype_t dt) {
  return (dt >= TPU_S8 && dt <= TPU_U64);
}
int tpu_dtype_is_signed(tpu_dtype_t dt) {
  return (dt >= TPU_S8 && dt <= TPU_S64) || tpu_dtype_is_float(dt);
}
int tpu_dtype_is_complex(tpu_dtype_t dt) { return dt == TPU_C64 || dt == TPU_C128; }
uint8_t tpu_dtype_f8_bits(tpu_dtype_t dt, double value) {
  int eb = 5, mb = 2, bias = 15; /* e5m2 */
  if (dt == TPU_F8E4M3FN) eb = 4, mb = 3, bias = 7;
  if (dt == TPU_F8E5M2FNUZ) bias = 16;
  if (dt == TPU_F8E4M3FNUZ) eb = 4, mb = 3, bias = 8;
  int fnuz = dt == TPU_F8E5M2FNUZ || dt == TPU_F8E4M3FNUZ;
  float v = (float)value; /* c10's constructors take a float */
  if (isnan(v)) return fnuz ? 0x80 : 0x7f;
  unsigned sign = signbit(v) ? 0x80u : 0u, mag = 0xffffu;
  unsigned max_mag = dt == TPU_F8E5M2 ? 0x7bu : dt == TPU_F8E4M3FN ? 0x7eu : 0x7fu;
  double a = fabs((double)v);
  if (a == 0) {
    mag = 0;
  } else if (!isinf(a)) {
    int e;
    frexp(a, &e);
    e -= 1; /* a = m * 2^e, m in [1, 2) */
    if (e < 1 - bias) { /* subnormal: 2^mb rounds up into the smallest normal's code */
      mag = (unsigned)nearbyint(ldexp(a, mb - (1 - bias)));
    } else {
      double n = nearbyint(ldexp(a, mb - e));
      if (n >= (double)(1u << (mb + 1))) n /= 2, e++;
      if (e + bias < (1 << eb)) mag = ((unsigned)(e + bias) << mb) | ((unsigned)n - (1u << mb));
    }
  }
  if (mag > max_mag) { /* e5m2: infinity; e4m3fn saturates (as c10); fnuz: NaN */
    if (dt == TPU_F8E5M2) mag = 0x7cu;
    else if (dt == TPU_F8E4M3FN) mag = 0x7eu;
    else return 0x80;
  }
  if (fnuz && mag == 0) return 0; /* no negative zero */
  return (uint8_t)(sign | mag);
}

int tpu_dtype_valid(int code) { return (code >= 1 && code <= 17) || code == 19 || code == 20; }
