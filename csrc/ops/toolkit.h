/* toolkit.h - what every rule file shares: the dtype rules (opmath,
 * promotion, the result-dtype attribute), a formula shorthand for emitting
 * ops, the start and finish of an elementwise rule, one-element inputs,
 * sums and broadcasts over dims, take / put along one axis, and the
 * elementwise formulas more than one family uses (sigmoid, erf, trunc,
 * logaddexp ...).  A helper that a second rule file needs moves here instead
 * of being copied; a rule file keeps only what is its own.
 *
 * Only csrc/ops/ files include this header (rules are written against
 * ops.h for the context and registry, this file for the rest).
 */
#ifndef TPU_OPS_TOOLKIT_H_
#define TPU_OPS_TOOLKIT_H_

#include <stdint.h>

#include "ops/ops.h"

/* ---- dtype rules -------------------------------------------------------------- */

/* f16 / bf16 (the types PyTorch computes in float32). */
static inline int tpu_op_is_half(tpu_dtype_t dt) { return dt == TPU_F16 || dt == TPU_BF16; }
/* The type a value of dt computes and accumulates in: float32 for the half
 * types, dt itself otherwise (PyTorch CPU's opmath / acc_type).  Results are
 * rounded back to dt once, at the end. */
static inline tpu_dtype_t tpu_op_opmath(tpu_dtype_t dt) { return tpu_op_is_half(dt) || tpu_dtype_is_f8(dt) ? TPU_F32 : dt; }
/* Promotion when no adapter gave a dtype: bool < ints < floats, the wider
 * wins, f16 with bf16 -> f32.  TPU_DTYPE_INVALID is the identity. */
tpu_dtype_t tpu_op_promote(tpu_dtype_t a, tpu_dtype_t b);
static inline int tpu_op_is_sint(tpu_dtype_t dt) { return dt >= TPU_S8 && dt <= TPU_S64; }
static inline int tpu_op_is_uint(tpu_dtype_t dt) { return dt >= TPU_U8 && dt <= TPU_U64; }
/* Int attr i as a dtype code; absent or 0 -> dflt; an invalid code fails the
 * rule and returns TPU_DTYPE_INVALID. */
tpu_dtype_t tpu_op_dtype_attr(tpu_op_ctx_t *c, int i, tpu_dtype_t dflt);
/* The result dtype of an elementwise rule: int attr `attr` if present (the
 * adapter's PyTorch promotion), else inputs [0, n) promoted. */
tpu_dtype_t tpu_op_result_dtype(tpu_op_ctx_t *c, int attr, int n);
/* Attr i if present, else dflt. */
int64_t tpu_op_int_or(tpu_op_ctx_t *c, int i, int64_t dflt);
double tpu_op_float_or(tpu_op_ctx_t *c, int i, double dflt);
/* dtype of a value (TPU_DTYPE_INVALID for TPU_HLO_NONE). */
tpu_dtype_t tpu_op_dtype(tpu_op_ctx_t *c, tpu_hlo_value_t v);
/* Fails with TPU_UNIMPLEMENTED ("not lowered for bf16": the op runs through
 * the CPU fallback) unless dt is a floating type. */
int tpu_op_require_float(tpu_op_ctx_t *c, tpu_dtype_t dt);
/* Fails with TPU_INVALID_ARGUMENT ("\"rule\" not implemented for
 * 'float16'", PyTorch's message for a dtype without a kernel) unless dt is
 * a floating type. */
int tpu_op_check_float(tpu_op_ctx_t *c, tpu_dtype_t dt);
/* The lowest / highest value of dt as a 0-d constant (-inf / +inf for floats,
 * false / true for bool): reduction identities and padding values. */
tpu_hlo_value_t tpu_op_lowest(tpu_op_ctx_t *c, tpu_dtype_t dt);
tpu_hlo_value_t tpu_op_highest(tpu_op_ctx_t *c, tpu_dtype_t dt);

/* ---- formula shorthand ---------------------------------------------------------
 * So that a formula reads like one: K(c, like, v) is a constant shaped and
 * typed like `like`; ADDK / MULK / CMPK take a constant right operand. */
static inline tpu_hlo_value_t K(tpu_op_ctx_t *c, tpu_hlo_value_t like, double v) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, like);
  return t ? tpu_hlo_constant(c->f, *t, v) : TPU_HLO_NONE;
}
static inline tpu_hlo_value_t ADD(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "add", a, b);
}
static inline tpu_hlo_value_t SUB(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "subtract", a, b);
}
static inline tpu_hlo_value_t MUL(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "multiply", a, b);
}
static inline tpu_hlo_value_t DIV(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "divide", a, b);
}
static inline tpu_hlo_value_t MAX(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "maximum", a, b);
}
static inline tpu_hlo_value_t MIN(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "minimum", a, b);
}
static inline tpu_hlo_value_t POW(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "power", a, b);
}
static inline tpu_hlo_value_t AND(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "and", a, b);
}
static inline tpu_hlo_value_t OR(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, "or", a, b);
}
static inline tpu_hlo_value_t UN(tpu_op_ctx_t *c, const char *op, tpu_hlo_value_t x) {
  return tpu_hlo_unary(c->f, op, x);
}
static inline tpu_hlo_value_t CMP(tpu_op_ctx_t *c, const char *dir, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_compare(c->f, dir, a, b);
}
static inline tpu_hlo_value_t SEL(tpu_op_ctx_t *c, tpu_hlo_value_t p, tpu_hlo_value_t t, tpu_hlo_value_t f) {
  return tpu_hlo_select(c->f, p, t, f);
}
static inline tpu_hlo_value_t CAST(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_dtype_t dt) {
  return tpu_hlo_cast(c->f, x, dt);
}
static inline tpu_hlo_value_t ADDK(tpu_op_ctx_t *c, tpu_hlo_value_t x, double k) { return ADD(c, x, K(c, x, k)); }
static inline tpu_hlo_value_t MULK(tpu_op_ctx_t *c, tpu_hlo_value_t x, double k) { return MUL(c, x, K(c, x, k)); }
static inline tpu_hlo_value_t CMPK(tpu_op_ctx_t *c, const char *dir, tpu_hlo_value_t x, double k) {
  return CMP(c, dir, x, K(c, x, k));
}
/* A constant of dtype dt with `like`'s shape. */
tpu_hlo_value_t tpu_op_splat(tpu_op_ctx_t *c, tpu_dtype_t dt, const tpu_hlo_type_t *like, double v);

/* ---- the start and finish of an elementwise rule ------------------------------------
 * Loads the rule's inputs for computing: inputs [0, ntensor) are converted
 * to dt, then everything to ct (the coefficient scalars straight to ct, as
 * PyTorch converts a Scalar to opmath), all broadcast to the common shape
 * (numpy rules; PyTorch's message on a mismatch).  Returns 0 on error. */
int tpu_op_load(tpu_op_ctx_t *c, int ntensor, tpu_dtype_t dt, tpu_dtype_t ct, tpu_hlo_value_t *v);
/* The usual start: *dt = int attr 0 (else inputs [0, ntensor) promoted),
 * *ct = opmath(*dt), then tpu_op_load.  Returns 0 on error. */
int tpu_op_ew_start(tpu_op_ctx_t *c, int ntensor, tpu_dtype_t *dt, tpu_dtype_t *ct, tpu_hlo_value_t *v);
/* The result r (in its compute type) rounded to dt and set as the output. */
void tpu_op_finish(tpu_op_ctx_t *c, tpu_hlo_value_t r, tpu_dtype_t dt);
/* The whole of a one-input rule (inputs: x; ints: [dtype]): start, fn on x
 * in the compute type, finish.  TPU_UNARY_RULE(name) defines rule_<name>
 * from a formula u_<name>. */
typedef tpu_hlo_value_t (*tpu_op_formula_fn)(tpu_op_ctx_t *c, tpu_hlo_value_t x);
void tpu_op_unary_rule(tpu_op_ctx_t *c, tpu_op_formula_fn fn);
#define TPU_UNARY_RULE(name) \
  static void rule_##name(tpu_op_ctx_t *c) { tpu_op_unary_rule(c, u_##name); }

/* ---- one-element inputs ------------------------------------------------------------ */
/* Fails unless input i holds one real number (0-d or [1]). */
int tpu_op_check_scalar(tpu_op_ctx_t *c, int i, const char *what);
/* One-element input i as a 0-d value of dt. */
tpu_hlo_value_t tpu_op_scalar_in(tpu_op_ctx_t *c, int i, tpu_dtype_t dt);
/* A 0-d value x converted to dt and broadcast to `like`'s shape. */
tpu_hlo_value_t tpu_op_scalar_as(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_dtype_t dt, const tpu_hlo_type_t *like);

/* ---- products by a weight's transpose ------------------------------------------------ */
/* a [M,K] @ w[N,K]^T -> [M,N], accumulated in acc (TPU_DTYPE_INVALID: a's
 * type).  On the XLA CPU compiler (tpu_op_target_cpu) and 2..256 rows it
 * is computed as (w @ a^T)^T: that dot packs a transposed w 2-5x slower
 * (nn.Linear in a decoding step, an RNN's recurrent product). */
tpu_hlo_value_t tpu_op_mm_nt(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t w, tpu_dtype_t acc);

/* ---- sums and broadcasts over dims -------------------------------------------------- */
/* Sum of x over dims (in x's own type); nd == 0 returns x. */
tpu_hlo_value_t tpu_op_sum(tpu_op_ctx_t *c, tpu_hlo_value_t x, const int64_t *dims, int nd);
tpu_hlo_value_t tpu_op_sum_all(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* A vector v [n] broadcast along dim `dim` of t's shape (keeps v's dtype). */
tpu_hlo_value_t tpu_op_broadcast_along(tpu_op_ctx_t *c, tpu_hlo_value_t v, const tpu_hlo_type_t *t, int64_t dim);

/* An unbatched input (rank nsp + 1) with a leading batch dim of 1 added
 * (*added says whether it was); unbatch drops the leading dim again. */
tpu_hlo_value_t tpu_op_batch(tpu_op_ctx_t *c, tpu_hlo_value_t x, int nsp, int *added);
tpu_hlo_value_t tpu_op_unbatch(tpu_op_ctx_t *c, tpu_hlo_value_t x);

/* ---- take / put along one axis ---------------------------------------------------------
 * take: x[..., idx[j...], ...] along `axis`: the result has x's shape with
 * `axis` replaced by idx's shape (idx: s64, in range; XLA clamps).
 * put: base[..., idx[j], ...] <body>= upd[..., j, ...] along `axis` (idx: s64
 * [L]; body "add" sums duplicates, "replace" keeps one; out-of-range
 * updates are dropped).  The _const forms take a table of n in-range
 * indices known when lowering (resampling, padding, window tables). */
tpu_hlo_value_t tpu_op_take(tpu_op_ctx_t *c, tpu_hlo_value_t x, int axis, tpu_hlo_value_t idx);
tpu_hlo_value_t tpu_op_take_const(tpu_op_ctx_t *c, tpu_hlo_value_t x, int axis, const int64_t *idx, int64_t n);
tpu_hlo_value_t tpu_op_put(tpu_op_ctx_t *c, tpu_hlo_value_t base, int axis, tpu_hlo_value_t idx,
                           tpu_hlo_value_t upd, const char *body);
tpu_hlo_value_t tpu_op_put_const(tpu_op_ctx_t *c, tpu_hlo_value_t base, int axis, const int64_t *idx, int64_t n,
                                 tpu_hlo_value_t upd, const char *body);
/* A scratch table of n int64 (freed by the caller); fails the rule (and
 * returns NULL) when out of memory. */
int64_t *tpu_op_index_table(tpu_op_ctx_t *c, int64_t n);

/* ---- elementwise formulas shared across families ---------------------------------------
 * x (and the other operands) already in the compute type. */
tpu_hlo_value_t tpu_ew_isnan(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* x != 0 as bool (bool stays). */
tpu_hlo_value_t tpu_ew_to_bool(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* Toward zero, keeping -0.0; integers unchanged. */
tpu_hlo_value_t tpu_ew_trunc(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* The sign bit (also of -0.0 and -nan) as bool; x < 0 for integers. */
tpu_hlo_value_t tpu_ew_signbit(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* 1 / (1 + exp(-x)), as PyTorch CPU. */
tpu_hlo_value_t tpu_ew_sigmoid(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* min(max(x, lo), hi) with NaN propagating from any operand; lo or hi may be
 * TPU_HLO_NONE (no bound).  Bool: or / and. */
tpu_hlo_value_t tpu_ew_clamp(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t lo, tpu_hlo_value_t hi);
/* erf / erfc (Cephes approximations, f32 and f64 forms). */
tpu_hlo_value_t tpu_ew_erf(tpu_op_ctx_t *c, tpu_hlo_value_t x);
tpu_hlo_value_t tpu_ew_erfc(tpu_op_ctx_t *c, tpu_hlo_value_t x);
/* log(exp(a) + exp(b)) (log2(2^a + 2^b) with base2), PyTorch's rule for
 * equal infinities. */
tpu_hlo_value_t tpu_ew_logaddexp(tpu_op_ctx_t *c, tpu_hlo_value_t a, tpu_hlo_value_t b, int base2);

#endif /* TPU_OPS_TOOLKIT_H_ */
