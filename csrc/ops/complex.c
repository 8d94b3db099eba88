/* complex.c - complex-number functions that change the element type or that
 * StableHLO has no single op for (see ops.h for how a rule is written).
 *
 * Complex arithmetic itself (add, sub, mul, div, neg, exp, log, sqrt, tanh,
 * sin, cos ... and products) runs through the elementwise and linalg rules:
 * their StableHLO ops take complex operands as they are.  The rules here are
 * the ones with a real side: |z|, arg z, conj, real / imag parts, sgn, and
 * building a complex tensor from parts (torch.complex, torch.polar).
 */
#include <math.h>
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

enum { CX_ABS = 0, CX_ANGLE = 1, CX_CONJ = 2, CX_REAL = 3, CX_IMAG = 4, CX_SGN = 5 };

static tpu_dtype_t cx_part(tpu_dtype_t dt) { return dt == TPU_C64 ? TPU_F32 : dt == TPU_C128 ? TPU_F64 : dt; }

/* complex_unary: inputs (z complex64/complex128); attrs [fn]: 0 abs, 1 angle
 * (atan2(imag, real)), 2 conj, 3 real, 4 imag (all real results but conj),
 * 5 sgn (z / |z|, 0 at 0).  Real inputs are accepted too: abs / real as
 * themselves, imag 0, angle pi for negatives (NaN kept), conj identity, sgn
 * the sign. */
static void rule_complex_unary(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int fn = (int)tpu_op_int(c, 0);
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  V z = c->in[0];
  char b[64];
  if (fn < CX_ABS || fn > CX_SGN) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: unknown function %d", c->name, fn);
    return;
  }
  if (!tpu_dtype_is_complex(t.dtype)) {
    if (!tpu_dtype_is_float(t.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected a complex or floating-point input, got %s of %s", c->name,
                  tpu_op_shape_str(&t, b, sizeof b), tpu_dtype_name(t.dtype));
      return;
    }
    V zero = tpu_hlo_broadcast_to(f, tpu_hlo_scalar(f, t.dtype, 0.0), t.rank, t.dims);
    switch (fn) {
      case CX_ABS: tpu_op_set_output(c, tpu_hlo_unary(f, "abs", z)); return;
      case CX_REAL:
      case CX_CONJ: tpu_op_set_output(c, z); return;
      case CX_IMAG: tpu_op_set_output(c, zero); return;
      case CX_SGN: tpu_op_set_output(c, tpu_hlo_unary(f, "sign", z)); return;
      default: { /* angle: pi where x < 0, 0 elsewhere, NaN stays NaN */
        V pi = tpu_hlo_broadcast_to(f, tpu_hlo_scalar(f, t.dtype, M_PI), t.rank, t.dims);
        V r = tpu_hlo_select(f, tpu_hlo_compare(f, "LT", z, zero), pi, zero);
        tpu_op_set_output(c, tpu_hlo_select(f, tpu_hlo_compare(f, "NE", z, z), z, r));
        return;
      }
    }
  }
  V re = tpu_hlo_unary(f, "real", z), im = tpu_hlo_unary(f, "imag", z);
  switch (fn) {
    case CX_ABS: tpu_op_set_output(c, tpu_hlo_unary(f, "abs", z)); return;
    case CX_ANGLE: tpu_op_set_output(c, tpu_hlo_binary(f, "atan2", im, re)); return;
    case CX_CONJ: tpu_op_set_output(c, tpu_hlo_binary(f, "complex", re, tpu_hlo_unary(f, "negate", im))); return;
    case CX_REAL: tpu_op_set_output(c, re); return;
    case CX_IMAG: tpu_op_set_output(c, im); return;
    default: { /* sgn */
      tpu_dtype_t pt = cx_part(t.dtype);
      V a = tpu_hlo_unary(f, "abs", z);
      V zero = tpu_hlo_broadcast_to(f, tpu_hlo_scalar(f, pt, 0.0), t.rank, t.dims);
      V is0 = tpu_hlo_compare(f, "EQ", a, zero);
      V q = tpu_hlo_binary(f, "divide", z, tpu_hlo_binary(f, "complex", a, zero));
      V z0 = tpu_hlo_broadcast_to(f, tpu_hlo_scalar(f, t.dtype, 0.0), t.rank, t.dims);
      tpu_op_set_output(c, tpu_hlo_select(f, is0, z0, q));
      return;
    }
  }
}

/* complex_make: inputs (a, b) f32/f64 of one dtype, broadcast together;
 * attrs [polar]: 0 -> a + ib (torch.complex), 1 -> a (cos b + i sin b)
 * (torch.polar, a the magnitude, b the angle). */
static void rule_complex_make(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  bool polar = tpu_op_int(c, 0) != 0;
  tpu_hlo_type_t ta = tpu_op_type(c, c->in[0]), tb = tpu_op_type(c, c->in[1]);
  char b1[64], b2[64];
  if (ta.dtype != tb.dtype || (ta.dtype != TPU_F32 && ta.dtype != TPU_F64)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected float32 or float64 parts of one dtype, got %s of %s and %s of %s",
                c->name, tpu_op_shape_str(&ta, b1, sizeof b1), tpu_dtype_name(ta.dtype),
                tpu_op_shape_str(&tb, b2, sizeof b2), tpu_dtype_name(tb.dtype));
    return;
  }
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 2, dims);
  if (rank < 0) return;
  V a = tpu_hlo_broadcast_to(f, c->in[0], rank, dims), b = tpu_hlo_broadcast_to(f, c->in[1], rank, dims);
  if (polar) {
    V re = tpu_hlo_binary(f, "multiply", a, tpu_hlo_unary(f, "cosine", b));
    V im = tpu_hlo_binary(f, "multiply", a, tpu_hlo_unary(f, "sine", b));
    a = re;
    b = im;
  }
  tpu_op_set_output(c, tpu_hlo_binary(f, "complex", a, b));
}

const tpu_op_rule_t tpu_rules_complex[] = {
    {"complex_unary", rule_complex_unary, 1, 1},
    {"complex_make", rule_complex_make, 2, 2},
    {NULL, NULL, 0, 0},
};
