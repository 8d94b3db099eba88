#include "base/dtype.h"

size_t tpu_dtype_size(tpu_dtype_t dt) {
  switch (dt) {
    case TPU_PRED: case TPU_S8: case TPU_U8: return 1;
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
    default: return "invalid";
  }
}

int tpu_dtype_is_float(tpu_dtype_t dt) {
  return dt == TPU_F16 || dt == TPU_BF16 || dt == TPU_F32 || dt == TPU_F64;
}
int tpu_dtype_is_int(tpu_dtype_t dt) {
  return (dt >= TPU_S8 && dt <= TPU_U64);
}
int tpu_dtype_is_signed(tpu_dtype_t dt) {
  return (dt >= TPU_S8 && dt <= TPU_S64) || tpu_dtype_is_float(dt);
}
int tpu_dtype_is_complex(tpu_dtype_t dt) { return dt == TPU_C64 || dt == TPU_C128; }
int tpu_dtype_valid(int code) { return code >= 1 && code <= 15; }
