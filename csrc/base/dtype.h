/* dtype.h - element types.  The numbers are the PJRT_Buffer_Type codes, so
 * the pjrt layer passes them through unchanged; hlo spells them as MLIR
 * element types.  No PJRT header is needed to use this file.
 */
#ifndef TPU_BASE_DTYPE_H_
#define TPU_BASE_DTYPE_H_

#include <stddef.h>
#include <stdint.h>

typedef enum tpu_dtype {
  TPU_DTYPE_INVALID = 0,
  TPU_PRED = 1,
  TPU_S8 = 2,
  TPU_S16 = 3,
  TPU_S32 = 4,
  TPU_S64 = 5,
  TPU_U8 = 6,
  TPU_U16 = 7,
  TPU_U32 = 8,
  TPU_U64 = 9,
  TPU_F16 = 10,
  TPU_F32 = 11,
  TPU_F64 = 12,
  TPU_BF16 = 13,
  TPU_C64 = 14,
  TPU_C128 = 15,
  /* 8-bit floats: storage, copies, conversions and what PyTorch's CPU
     kernels do with them (PJRT's numbers; 18, F8E4M3B11FNUZ, has no torch
     dtype) */
  TPU_F8E5M2 = 16,
  TPU_F8E4M3FN = 17,
  TPU_F8E5M2FNUZ = 19,
  TPU_F8E4M3FNUZ = 20,
} tpu_dtype_t;

#define TPU_MAX_RANK 16

/* Bytes per element; 0 for an invalid type. */
size_t tpu_dtype_size(tpu_dtype_t dt);
/* MLIR spelling: "f32", "i1", "ui8", "bf16" ...; "?" if invalid. */
const char *tpu_dtype_mlir(tpu_dtype_t dt);
/* Short name for messages: "float32", "bool", "int64" ... (PyTorch names). */
const char *tpu_dtype_name(tpu_dtype_t dt);
/* PyTorch's ScalarType name for messages: "Float", "Long", "BFloat16" ...
 * (tpu_dtype_name for the others). */
const char *tpu_dtype_scalar_type(tpu_dtype_t dt);
int tpu_dtype_is_float(tpu_dtype_t dt);   /* f16 bf16 f32 f64 and the f8 types */
int tpu_dtype_is_f8(tpu_dtype_t dt);
/* The bits of `value` in an 8-bit float type as PyTorch's CPU converts
 * (through float, round to nearest even; e4m3fn saturates, e5m2 overflows
 * to infinity, the FNUZ types to NaN). */
uint8_t tpu_dtype_f8_bits(tpu_dtype_t dt, double value);
int tpu_dtype_is_int(tpu_dtype_t dt);     /* signed or unsigned integers, not pred */
int tpu_dtype_is_signed(tpu_dtype_t dt);  /* s* and floats */
int tpu_dtype_is_complex(tpu_dtype_t dt);
int tpu_dtype_valid(int code);

#endif /* TPU_BASE_DTYPE_H_ */
