/* toolkit.c - the helpers rule files share (see toolkit.h): dtype rules,
 * elementwise start and finish, one-element inputs, sums over dims,
 * take / put along one axis, and the formulas several families use. */
#include "ops/toolkit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef tpu_hlo_value_t V;

/* ---- dtype rules -------------------------------------------------------------- */

static int promo_kind(tpu_dtype_t d) {
  if (d == TPU_PRED) return 0;
  if (tpu_dtype_is_int(d)) return 1;
  if (tpu_dtype_is_float(d)) return 2;
  return 3;
}

tpu_dtype_t tpu_op_promote(tpu_dtype_t a, tpu_dtype_t b) {
  if (a == TPU_DTYPE_INVALID) return b;
  if (b == TPU_DTYPE_INVALID || a == b) return a;
  int ka = promo_kind(a), kb = promo_kind(b);
  if (ka != kb) return ka > kb ? a : b;
  if (tpu_op_is_half(a) && tpu_op_is_half(b)) return TPU_F32;
  return tpu_dtype_size(a) >= tpu_dtype_size(b) ? a : b;
}

int64_t tpu_op_int_or(tpu_op_ctx_t *c, int i, int64_t dflt) { return tpu_op_nints(c) > i ? tpu_op_int(c, i) : dflt; }

double tpu_op_float_or(tpu_op_ctx_t *c, int i, double dflt) {
  return c->attrs->nfloats > i ? tpu_op_float(c, i) : dflt;
}

tpu_dtype_t tpu_op_dtype_attr(tpu_op_ctx_t *c, int i, tpu_dtype_t dflt) {
  int64_t code = tpu_op_int_or(c, i, 0);
  if (code == 0) return dflt;
  if (!tpu_dtype_valid((int)code)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: invalid dtype code %lld", c->name, (long long)code);
    return TPU_DTYPE_INVALID;
  }
  return (tpu_dtype_t)code;
}

tpu_dtype_t tpu_op_dtype(tpu_op_ctx_t *c, V v) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, v);
  return t ? t->dtype : TPU_DTYPE_INVALID;
}

int tpu_op_require_float(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: not lowered for %s", c->name, tpu_dtype_name(dt));
    return 0;
  }
  return 1;
}

int tpu_op_check_float(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: \"%s\" not implemented for '%s'", c->name, c->name,
                tpu_dtype_name(dt));
    return 0;
  }
  return 1;
}

static V int_extreme(tpu_op_ctx_t *c, tpu_dtype_t dt, int high) {
  int bits = (int)tpu_dtype_size(dt) * 8;
  int64_t v;
  if (tpu_dtype_is_signed(dt)) {
    v = bits == 64 ? (high ? INT64_MAX : INT64_MIN) : (high ? ((int64_t)1 << (bits - 1)) - 1 : -((int64_t)1 << (bits - 1)));
  } else {
    v = !high ? 0 : (bits == 64 ? -1 /* all ones */ : (int64_t)(((uint64_t)1 << bits) - 1));
  }
  return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), v);
}

V tpu_op_lowest(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (dt == TPU_PRED) return tpu_hlo_scalar(c->f, dt, 0);
  if (tpu_dtype_is_int(dt)) return int_extreme(c, dt, 0);
  return tpu_hlo_scalar(c->f, dt, -INFINITY);
}

V tpu_op_highest(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (dt == TPU_PRED) return tpu_hlo_scalar(c->f, dt, 1);
  if (tpu_dtype_is_int(dt)) return int_extreme(c, dt, 1);
  return tpu_hlo_scalar(c->f, dt, INFINITY);
}

V tpu_op_splat(tpu_op_ctx_t *c, tpu_dtype_t dt, const tpu_hlo_type_t *like, double v) {
  return tpu_hlo_constant(c->f, tpu_hlo_type_make(dt, like->rank, like->dims), v);
}

/* ---- the start and finish of an elementwise rule ----------------------------------- */

int tpu_op_load(tpu_op_ctx_t *c, int ntensor, tpu_dtype_t dt, tpu_dtype_t ct, V *v) {
  if (dt == TPU_DTYPE_INVALID) return 0;
  int n = c->nin;
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, n, dims);
  if (rank < 0) return 0;
  for (int i = 0; i < n; i++) {
    V x = c->in[i];
    if (i < ntensor) x = tpu_hlo_cast(c->f, x, dt);
    x = tpu_hlo_cast(c->f, x, ct);
    v[i] = tpu_hlo_broadcast_to(c->f, x, rank, dims);
  }
  return tpu_hlo_func_status(c->f) == NULL;
}

tpu_dtype_t tpu_op_result_dtype(tpu_op_ctx_t *c, int attr, int n) {
  tpu_dtype_t promoted = TPU_DTYPE_INVALID;
  for (int i = 0; i < n && i < c->nin; i++) promoted = tpu_op_promote(promoted, tpu_op_dtype(c, c->in[i]));
  return tpu_op_dtype_attr(c, attr, promoted);
}

int tpu_op_ew_start(tpu_op_ctx_t *c, int ntensor, tpu_dtype_t *dt, tpu_dtype_t *ct, V *v) {
  *dt = tpu_op_result_dtype(c, 0, ntensor);
  *ct = tpu_op_opmath(*dt);
  return tpu_op_load(c, ntensor, *dt, *ct, v);
}

void tpu_op_finish(tpu_op_ctx_t *c, V r, tpu_dtype_t dt) { tpu_op_set_output(c, tpu_hlo_cast(c->f, r, dt)); }

void tpu_op_unary_rule(tpu_op_ctx_t *c, tpu_op_formula_fn fn) {
  tpu_dtype_t dt, ct;
  V v[1];
  if (!tpu_op_ew_start(c, 1, &dt, &ct, v)) return;
  tpu_op_finish(c, fn(c, v[0]), dt);
}

/* ---- one-element inputs ----------------------------------------------------------- */

int tpu_op_check_scalar(tpu_op_ctx_t *c, int i, const char *what) {
  tpu_hlo_type_t t = *tpu_op_in_type(c, i);
  if (tpu_hlo_type_numel(&t) != 1 || !(tpu_dtype_is_float(t.dtype) || tpu_dtype_is_int(t.dtype))) {
    char buf[64];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s must be a one-element real number, got %s", c->name, what,
                tpu_hlo_type_str(&t, buf, sizeof(buf)));
    return 0;
  }
  return 1;
}

V tpu_op_scalar_in(tpu_op_ctx_t *c, int i, tpu_dtype_t dt) {
  V v = c->in[i];
  if (tpu_op_in_type(c, i)->rank != 0) v = tpu_hlo_reshape(c->f, v, 0, NULL);
  return tpu_hlo_cast(c->f, v, dt);
}

V tpu_op_scalar_as(tpu_op_ctx_t *c, V x, tpu_dtype_t dt, const tpu_hlo_type_t *like) {
  return tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, x, dt), like->rank, like->dims);
}

/* ---- products by a weight's transpose ------------------------------------------------ */

/* 1 row (a matrix-vector product) and more than 256 rows keep the direct
 * form: there it is as fast or faster.  The optimization barrier keeps XLA
 * from folding the transpose back into the dot. */
enum { MM_NT_SWAP_MIN_ROWS = 2, MM_NT_SWAP_MAX_ROWS = 256 };

V tpu_op_mm_nt(tpu_op_ctx_t *c, V a, V w, tpu_dtype_t acc) {
  const tpu_hlo_type_t *ta = tpu_hlo_type_of(c->f, a);
  if (!ta) return TPU_HLO_NONE;
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 1;
  dd.lhs_contract[0] = 1;
  dd.rhs_contract[0] = 1;
  if (!tpu_op_target_cpu() || ta->rank != 2 || ta->dims[0] < MM_NT_SWAP_MIN_ROWS || ta->dims[0] > MM_NT_SWAP_MAX_ROWS)
    return tpu_hlo_dot_general(c->f, a, w, &dd, acc);
  static const int64_t perm[2] = {1, 0};
  V wa = tpu_hlo_dot_general(c->f, w, a, &dd, acc);
  return tpu_hlo_transpose(c->f, tpu_hlo_unary(c->f, "stablehlo.optimization_barrier", wa), perm);
}

/* ---- sums and broadcasts over dims ------------------------------------------------- */

V tpu_op_sum(tpu_op_ctx_t *c, V x, const int64_t *dims, int nd) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!t) return TPU_HLO_NONE;
  if (nd == 0) return x;
  return tpu_hlo_reduce(c->f, x, tpu_hlo_scalar(c->f, t->dtype, 0.0), dims, nd, "add");
}

V tpu_op_sum_all(tpu_op_ctx_t *c, V x) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!t) return TPU_HLO_NONE;
  int64_t d[TPU_MAX_RANK];
  for (int i = 0; i < t->rank; i++) d[i] = i;
  return tpu_op_sum(c, x, d, t->rank);
}

V tpu_op_broadcast_along(tpu_op_ctx_t *c, V v, const tpu_hlo_type_t *t, int64_t dim) {
  const tpu_hlo_type_t *vt = tpu_hlo_type_of(c->f, v);
  if (!vt) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *t;
  to.dtype = vt->dtype;
  return tpu_hlo_broadcast_in_dim(c->f, v, to, &dim);
}

V tpu_op_batch(tpu_op_ctx_t *c, V x, int nsp, int *added) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  *added = 0;
  if (t.rank != nsp + 1) return x;
  int64_t d[TPU_MAX_RANK];
  d[0] = 1;
  for (int i = 0; i < t.rank; i++) d[i + 1] = t.dims[i];
  *added = 1;
  return tpu_hlo_reshape(c->f, x, t.rank + 1, d);
}

V tpu_op_unbatch(tpu_op_ctx_t *c, V x) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  return tpu_hlo_reshape(c->f, x, t.rank - 1, t.dims + 1);
}

/* ---- take / put along one axis ------------------------------------------------------- */

V tpu_op_take(tpu_op_ctx_t *c, V x, int axis, V idx) {
  tpu_hlo_type_t t = tpu_op_type(c, x), it = tpu_op_type(c, idx);
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  for (int i = 0; i < t.rank; i++) {
    if (i != axis) gd.offset_dims[gd.noffset++] = i < axis ? i : i + it.rank - 1;
    gd.slice_sizes[i] = i == axis ? 1 : t.dims[i];
  }
  gd.ncollapsed = 1;
  gd.collapsed_slice_dims[0] = axis;
  gd.nstart_map = 1;
  gd.start_index_map[0] = axis;
  gd.index_vector_dim = it.rank;
  return tpu_hlo_gather(c->f, x, idx, &gd);
}

V tpu_op_take_const(tpu_op_ctx_t *c, V x, int axis, const int64_t *idx, int64_t n) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  if (n == 0 || t.dims[axis] == 0) {
    t.dims[axis] = n;
    return tpu_hlo_constant(c->f, t, 0.0);
  }
  V ind = tpu_hlo_constant_i64s(c->f, tpu_hlo_type_make(TPU_S64, 1, &n), idx);
  return tpu_op_take(c, x, axis, ind);
}

V tpu_op_put(tpu_op_ctx_t *c, V base, int axis, V idx, V upd, const char *body) {
  tpu_hlo_type_t t = tpu_op_type(c, base), it = tpu_op_type(c, idx);
  it.dims[it.rank] = 1;
  V idx2 = tpu_hlo_reshape(c->f, idx, it.rank + 1, it.dims);
  tpu_hlo_scatter_dims_t sd;
  memset(&sd, 0, sizeof sd);
  for (int i = 0; i < t.rank; i++)
    if (i != axis) sd.update_window_dims[sd.nwindow++] = i;
  sd.ninserted = 1;
  sd.inserted_window_dims[0] = axis;
  sd.nscatter_map = 1;
  sd.scatter_dims_to_operand_dims[0] = axis;
  sd.index_vector_dim = 1;
  return tpu_hlo_scatter(c->f, base, idx2, upd, &sd, body);
}

V tpu_op_put_const(tpu_op_ctx_t *c, V base, int axis, const int64_t *idx, int64_t n, V upd, const char *body) {
  tpu_hlo_type_t t = tpu_op_type(c, base);
  if (n == 0 || t.dims[axis] == 0 || tpu_hlo_type_numel(&t) == 0) return base;
  V ind = tpu_hlo_constant_i64s(c->f, tpu_hlo_type_make(TPU_S64, 1, &n), idx);
  return tpu_op_put(c, base, axis, ind, upd, body);
}

int64_t *tpu_op_index_table(tpu_op_ctx_t *c, int64_t n) {
  int64_t *p = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!p) tpu_op_fail(c, TPU_RESOURCE_EXHAUSTED, "%s: out of memory", c->name);
  return p;
}

/* ---- elementwise formulas shared across families ----------------------------------------- */

V tpu_ew_isnan(tpu_op_ctx_t *c, V x) { return CMP(c, "NE", x, x); }

V tpu_ew_to_bool(tpu_op_ctx_t *c, V x) {
  if (tpu_op_dtype(c, x) == TPU_PRED) return x;
  return CMPK(c, "NE", x, 0.0);
}

V tpu_ew_trunc(tpu_op_ctx_t *c, V x) {
  if (!tpu_dtype_is_float(tpu_op_dtype(c, x))) return x;
  return SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "ceil", x), UN(c, "floor", x));
}

V tpu_ew_signbit(tpu_op_ctx_t *c, V x) {
  tpu_dtype_t dt = tpu_op_dtype(c, x);
  tpu_dtype_t it;
  switch (dt) {
    case TPU_F16: case TPU_BF16: it = TPU_S16; break;
    case TPU_F32: it = TPU_S32; break;
    case TPU_F64: it = TPU_S64; break;
    default:
      if (!tpu_dtype_is_signed(dt) || dt == TPU_PRED) return CMP(c, "NE", x, x); /* all false */
      return CMPK(c, "LT", x, 0.0);
  }
  V bits = tpu_hlo_bitcast_convert(c->f, x, it);
  return CMPK(c, "LT", bits, 0.0);
}

V tpu_ew_sigmoid(tpu_op_ctx_t *c, V x) {
  return DIV(c, K(c, x, 1.0), ADDK(c, UN(c, "exponential", UN(c, "negate", x)), 1.0));
}

V tpu_ew_clamp(tpu_op_ctx_t *c, V x, V lo, V hi) {
  tpu_dtype_t ct = tpu_op_dtype(c, x);
  int isf = tpu_dtype_is_float(ct);
  V r = x;
  if (lo != TPU_HLO_NONE) {
    if (isf) r = SEL(c, tpu_ew_isnan(c, lo), lo, SEL(c, CMP(c, "LT", r, lo), lo, r));
    else r = ct == TPU_PRED ? OR(c, r, lo) : MAX(c, r, lo);
  }
  if (hi != TPU_HLO_NONE) {
    if (isf) r = SEL(c, tpu_ew_isnan(c, hi), hi, SEL(c, CMP(c, "GT", r, hi), hi, r));
    else r = ct == TPU_PRED ? AND(c, r, hi) : MIN(c, r, hi);
  }
  return r;
}

/* Polynomial with coefficients in decreasing order (Horner). */
static V poly(tpu_op_ctx_t *c, V x, const double *k, int n) {
  V p = K(c, x, k[0]);
  for (int i = 1; i < n; i++) p = ADDK(c, MUL(c, p, x), k[i]);
  return p;
}

/* f64, |x| < 1:  erf(x) = x T(x^2) / U(x^2). */
static V erf_small64(tpu_op_ctx_t *c, V x) {
  static const double T[] = {9.60497373987051638749E0, 9.00260197203842689217E1, 2.23200534594684319226E3,
                             7.00332514112805075473E3, 5.55923013010394962768E4};
  static const double U[] = {1.0, 3.35617141647503099647E1, 5.21357949780152679795E2,
                             4.59432382970980127987E3, 2.26290000613890934246E4, 4.92673942608635921086E4};
  V z = MUL(c, x, x);
  return DIV(c, MUL(c, x, poly(c, z, T, 5)), poly(c, z, U, 6));
}

/* f64 erfc(x) for |x| >= 1 (any sign). */
static V erfc_large64(tpu_op_ctx_t *c, V x) {
  static const double P[] = {2.46196981473530512524E-10, 5.64189564831068821977E-1, 7.46321056442269912687E0,
                             4.86371970985681366614E1,   1.96520832956077098242E2,  5.26445194995477358631E2,
                             9.34528527171957607540E2,   1.02755188689515710272E3,  5.57535335369399327526E2};
  static const double Q[] = {1.0,                      1.32281951154744992508E1, 8.67072140885989742329E1,
                             3.54937778887819891062E2, 9.75708501743205489753E2, 1.82390916687909736289E3,
                             2.24633760818710981792E3, 1.65666309194161350182E3, 5.57535340817727675546E2};
  static const double R[] = {5.64189583547755073984E-1, 1.27536670759978104416E0, 5.01905042251180477414E0,
                             6.16021097993053585195E0,  7.40974269950448939160E0, 2.97886665372100240670E0};
  static const double S[] = {1.0,                      2.26052863220117276590E0, 9.39603524938001434673E0,
                             1.20489539808096656605E1, 1.70814450747565897222E1, 9.60896809063285878198E0,
                             3.36907645100081516050E0};
  V ax = MIN(c, UN(c, "abs", x), K(c, x, 30.0)); /* erfc(30) underflows f64 */
  V e = UN(c, "exponential", UN(c, "negate", MUL(c, ax, ax)));
  V small = DIV(c, poly(c, ax, P, 9), poly(c, ax, Q, 9));
  V large = DIV(c, poly(c, ax, R, 6), poly(c, ax, S, 7));
  V y = MUL(c, e, SEL(c, CMPK(c, "LT", ax, 8.0), small, large));
  return SEL(c, CMPK(c, "LT", x, 0.0), SUB(c, K(c, x, 2.0), y), y);
}

/* f32, |x| < 1: erf(x) = x P(x^2). */
static V erf_small32(tpu_op_ctx_t *c, V x) {
  static const double T[] = {+7.853861353153693E-5, -8.010193625184903E-4, +5.188327685732524E-3,
                             -2.685381193529856E-2, +1.128358514861418E-1, -3.761262582423300E-1,
                             +1.128379165726710E+0};
  return MUL(c, x, poly(c, MUL(c, x, x), T, 7));
}

/* f32 erfc(x) for |x| >= 1: exp(-x^2) / |x| * P(1/x^2). */
static V erfc_large32(tpu_op_ctx_t *c, V x) {
  static const double P[] = {+2.326819970068386E-2, -1.387039388740657E-1, +3.687424674597105E-1,
                             -5.824733027278666E-1, +6.210004621745983E-1, -4.944515323274145E-1,
                             +3.404879937665872E-1, -2.741127028184656E-1, +5.638259427386472E-1};
  static const double R[] = {-1.047766399936249E+1, +1.297719955372516E+1, -7.495518717768503E+0,
                             +2.921019019210786E+0, -1.015265279202700E+0, +4.218463358204948E-1,
                             -2.820767439740514E-1, +5.641895067754075E-1};
  V ax = MIN(c, UN(c, "abs", x), K(c, x, 10.5)); /* erfc(10.5) underflows f32 */
  V e = UN(c, "exponential", UN(c, "negate", MUL(c, ax, ax)));
  V q = DIV(c, K(c, x, 1.0), ax);
  V y2 = MUL(c, q, q);
  V p = SEL(c, CMPK(c, "LT", ax, 2.0), poly(c, y2, P, 9), poly(c, y2, R, 8));
  V y = MUL(c, MUL(c, e, q), p);
  return SEL(c, CMPK(c, "LT", x, 0.0), SUB(c, K(c, x, 2.0), y), y);
}

V tpu_ew_erf(tpu_op_ctx_t *c, V x) {
  int f64 = tpu_op_dtype(c, x) == TPU_F64;
  V small = f64 ? erf_small64(c, x) : erf_small32(c, x);
  V ec = f64 ? erfc_large64(c, x) : erfc_large32(c, x);
  /* |x| >= 1: erf = 1 - erfc(x) (erfc of a negative x is 2 - erfc(|x|)). */
  V big = SUB(c, K(c, x, 1.0), ec);
  return SEL(c, CMPK(c, "LT", UN(c, "abs", x), 1.0), small, big);
}

V tpu_ew_erfc(tpu_op_ctx_t *c, V x) {
  int f64 = tpu_op_dtype(c, x) == TPU_F64;
  V small = SUB(c, K(c, x, 1.0), f64 ? erf_small64(c, x) : erf_small32(c, x));
  V big = f64 ? erfc_large64(c, x) : erfc_large32(c, x);
  return SEL(c, CMPK(c, "LT", UN(c, "abs", x), 1.0), small, big);
}

V tpu_ew_logaddexp(tpu_op_ctx_t *c, V a, V b, int base2) {
  V m = MAX(c, a, b);
  V d = UN(c, "negate", UN(c, "abs", SUB(c, a, b)));
  V r;
  if (base2) r = ADD(c, m, MUL(c, UN(c, "log_plus_one", POW(c, K(c, d, 2.0), d)), K(c, d, 1.4426950408889634074)));
  else r = ADD(c, m, UN(c, "log_plus_one", UN(c, "exponential", d)));
  V same_inf = AND(c, CMPK(c, "EQ", UN(c, "abs", a), INFINITY), CMP(c, "EQ", a, b));
  return SEL(c, same_inf, a, r);
}
