/* elementwise.c - elementwise lowering rules: arithmetic, math functions,
 * comparisons, select, activations and their backward ops, dtype conversion.
 *
 * Conventions every rule here shares (the contract with torch_tpu/ops/
 * elementwise.py; each rule's comment adds its own inputs and attrs):
 *
 * - int attr 0 is the RESULT dtype (a tpu_dtype_t code) that the adapter
 *   computed with PyTorch's promotion rules (torch.result_type, and the
 *   int->float promotion of ops like exp or true division).  If it is absent
 *   the rule promotes its tensor inputs itself (a convenience for tests).
 * - "tensor" inputs broadcast together (numpy rules) and are converted to the
 *   result dtype first, exactly as TensorIterator casts operands to the
 *   common dtype.
 * - f16/bf16 results are computed in f32 and rounded once at the end (PyTorch
 *   CPU's opmath); every other dtype computes in itself.
 * - "coefficient" inputs (alpha, negative_slope, beta, threshold, value ...)
 *   are runtime 0-d scalars converted straight to the compute dtype, the way
 *   PyTorch converts Scalars to opmath (no rounding through bf16).  The
 *   adapter passes them with the result dtype's compute type (float64 for
 *   double results) so no precision is lost on the way.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

/* ---- small emit helpers --------------------------------------------------- */

static const tpu_hlo_type_t *type_of(tpu_op_ctx_t *c, V v) { return tpu_hlo_type_of(c->f, v); }

static tpu_dtype_t dtype_of(tpu_op_ctx_t *c, V v) {
  const tpu_hlo_type_t *t = type_of(c, v);
  return t ? t->dtype : TPU_DTYPE_INVALID;
}

/* A splat constant shaped and typed like `like`. */
static V K(tpu_op_ctx_t *c, V like, double value) {
  const tpu_hlo_type_t *t = type_of(c, like);
  if (!t) return TPU_HLO_NONE;
  return tpu_hlo_constant(c->f, *t, value);
}

static V ADD(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "add", a, b); }
static V SUB(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "subtract", a, b); }
static V MUL(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "multiply", a, b); }
static V DIV(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "divide", a, b); }
static V MAX(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "maximum", a, b); }
static V MIN(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "minimum", a, b); }
static V UN(tpu_op_ctx_t *c, const char *op, V x) { return tpu_hlo_unary(c->f, op, x); }
static V CMP(tpu_op_ctx_t *c, const char *dir, V a, V b) { return tpu_hlo_compare(c->f, dir, a, b); }
static V SEL(tpu_op_ctx_t *c, V p, V t, V f) { return tpu_hlo_select(c->f, p, t, f); }
static V AND(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "and", a, b); }
static V OR(tpu_op_ctx_t *c, V a, V b) { return tpu_hlo_binary(c->f, "or", a, b); }
/* x op constant */
static V ADDK(tpu_op_ctx_t *c, V x, double k) { return ADD(c, x, K(c, x, k)); }
static V MULK(tpu_op_ctx_t *c, V x, double k) { return MUL(c, x, K(c, x, k)); }
static V CMPK(tpu_op_ctx_t *c, const char *dir, V x, double k) { return CMP(c, dir, x, K(c, x, k)); }

static int is_half(tpu_dtype_t dt) { return dt == TPU_F16 || dt == TPU_BF16; }
static int is_float(tpu_dtype_t dt) { return tpu_dtype_is_float(dt); }
static int is_sint(tpu_dtype_t dt) { return dt >= TPU_S8 && dt <= TPU_S64; }
static int is_uint(tpu_dtype_t dt) { return dt >= TPU_U8 && dt <= TPU_U64; }

/* The dtype a result dtype computes in (opmath). */
static tpu_dtype_t compute_dtype(tpu_dtype_t dt) { return is_half(dt) ? TPU_F32 : dt; }

/* Fallback promotion when the adapter gave no dtype: bool < ints < floats,
 * wider wins, f16 with bf16 -> f32. */
static int promo_kind(tpu_dtype_t d) {
  if (d == TPU_PRED) return 0;
  if (tpu_dtype_is_int(d)) return 1;
  if (is_float(d)) return 2;
  return 3;
}
static tpu_dtype_t promote2(tpu_dtype_t a, tpu_dtype_t b) {
  if (a == TPU_DTYPE_INVALID) return b;
  if (b == TPU_DTYPE_INVALID || a == b) return a;
  int ka = promo_kind(a), kb = promo_kind(b);
  if (ka != kb) return ka > kb ? a : b;
  if (is_half(a) && is_half(b)) return TPU_F32;
  return tpu_dtype_size(a) >= tpu_dtype_size(b) ? a : b;
}

/* The result dtype: int attr `attr` if present, else inputs [0, n) promoted. */
static tpu_dtype_t result_dtype(tpu_op_ctx_t *c, int attr, int n) {
  if (tpu_op_nints(c) > attr) {
    int64_t code = tpu_op_int(c, attr);
    if (!tpu_dtype_valid((int)code)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: invalid dtype code %lld", c->name, (long long)code);
      return TPU_DTYPE_INVALID;
    }
    return (tpu_dtype_t)code;
  }
  tpu_dtype_t dt = TPU_DTYPE_INVALID;
  for (int i = 0; i < n && i < c->nin; i++) dt = promote2(dt, dtype_of(c, c->in[i]));
  return dt;
}

static int64_t int_attr_or(tpu_op_ctx_t *c, int i, int64_t dflt) {
  return tpu_op_nints(c) > i ? tpu_op_int(c, i) : dflt;
}

/* Loads the rule's inputs for computing: inputs [0, ntensor) are converted to
 * dt then ct; the rest (coefficient scalars) straight to ct; all broadcast to
 * the common shape.  Returns 0 on error (already recorded). */
static int load(tpu_op_ctx_t *c, int ntensor, tpu_dtype_t dt, tpu_dtype_t ct, V *v) {
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

static void finish(tpu_op_ctx_t *c, V r, tpu_dtype_t dt) { tpu_op_set_output(c, tpu_hlo_cast(c->f, r, dt)); }

/* x != 0 as i1 (bool stays). */
static V to_bool(tpu_op_ctx_t *c, V x) {
  if (dtype_of(c, x) == TPU_PRED) return x;
  return CMPK(c, "NE", x, 0.0);
}

static V isnan_(tpu_op_ctx_t *c, V x) { return CMP(c, "NE", x, x); }

/* Sign bit of a float (also -0.0 and -nan) via its bits; x<0 for ints. */
static V signbit_(tpu_op_ctx_t *c, V x) {
  tpu_dtype_t dt = dtype_of(c, x);
  tpu_dtype_t it;
  switch (dt) {
    case TPU_F16: case TPU_BF16: it = TPU_S16; break;
    case TPU_F32: it = TPU_S32; break;
    case TPU_F64: it = TPU_S64; break;
    default:
      if (is_uint(dt) || dt == TPU_PRED) return CMP(c, "NE", x, x); /* all false */
      return CMPK(c, "LT", x, 0.0);
  }
  V bits = tpu_hlo_bitcast_convert(c->f, x, it);
  return CMPK(c, "LT", bits, 0.0);
}

/* trunc for floats: toward zero, keeps -0.0 (ceil(-0.5) = -0). */
static V trunc_(tpu_op_ctx_t *c, V x) {
  if (!is_float(dtype_of(c, x))) return x;
  return SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "ceil", x), UN(c, "floor", x));
}

/* Polynomial with coefficients in decreasing order (Horner). */
static V poly(tpu_op_ctx_t *c, V x, const double *k, int n) {
  V p = K(c, x, k[0]);
  for (int i = 1; i < n; i++) p = ADDK(c, MUL(c, p, x), k[i]);
  return p;
}

/* ---- erf / erfc / erfinv (Cephes / Giles approximations) ------------------- */

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

static V erf_(tpu_op_ctx_t *c, V x) {
  int f64 = dtype_of(c, x) == TPU_F64;
  V small = f64 ? erf_small64(c, x) : erf_small32(c, x);
  V ec = f64 ? erfc_large64(c, x) : erfc_large32(c, x);
  /* |x| >= 1: erf = 1 - erfc(x) (erfc of a negative x is 2 - erfc(|x|)). */
  V big = SUB(c, K(c, x, 1.0), ec);
  return SEL(c, CMPK(c, "LT", UN(c, "abs", x), 1.0), small, big);
}

static V erfc_(tpu_op_ctx_t *c, V x) {
  int f64 = dtype_of(c, x) == TPU_F64;
  V small = SUB(c, K(c, x, 1.0), f64 ? erf_small64(c, x) : erf_small32(c, x));
  V big = f64 ? erfc_large64(c, x) : erfc_large32(c, x);
  return SEL(c, CMPK(c, "LT", UN(c, "abs", x), 1.0), small, big);
}

/* erfinv (Giles, "Approximating the erfinv function"). */
static V erfinv_(tpu_op_ctx_t *c, V x) {
  V w = UN(c, "negate", UN(c, "log_plus_one", UN(c, "negate", MUL(c, x, x))));
  V p;
  if (dtype_of(c, x) != TPU_F64) {
    static const double A[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                               -0.00125372503, -0.00417768164, 0.246640727,    1.50140941};
    static const double B[] = {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                               -0.0076224613,   0.00943887047,  1.00167406,    2.83297682};
    V lt = CMPK(c, "LT", w, 5.0);
    V t = SEL(c, lt, ADDK(c, w, -2.5), ADDK(c, UN(c, "sqrt", w), -3.0));
    p = SEL(c, lt, K(c, x, A[0]), K(c, x, B[0]));
    for (int i = 1; i < 9; i++) p = ADD(c, MUL(c, p, t), SEL(c, lt, K(c, x, A[i]), K(c, x, B[i])));
  } else {
    static const double A[] = {
        -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18,
        1.115787767802518096e-17,   -1.333171662854620906e-16,  2.0972767875968561637e-17,
        6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
        2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
        1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
        4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
        0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
        0.24015818242558961693,     1.6536545626831027356};
    static const double B[] = {
        2.2137376921775787049e-09,  9.0756561938885390979e-08,  -2.7517406297064545428e-07,
        1.8239629214389227755e-08,  1.5027403968909827627e-06,  -4.013867526981545969e-06,
        2.9234449089955446044e-06,  1.2475304481671778723e-05,  -4.7318229009055733981e-05,
        6.8284851459573175448e-05,  2.4031110387097893999e-05,  -0.0003550375203628474796,
        0.00095328937973738049703,  -0.0016882755560235047313, 0.0024914420961078508066,
        -0.0037512085075692412107,  0.005370914553590063617,    1.0052589676941592334,
        3.0838856104922207635};
    static const double C[] = {
        -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
        -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
        2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
        -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
        7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
        1.0103004648645343977,      4.8499064014085844221};
    /* Three regions; the coefficient lists have 23 / 19 / 17 terms. */
    V lt6 = CMPK(c, "LT", w, 6.25), lt16 = CMPK(c, "LT", w, 16.0);
    V sw = UN(c, "sqrt", w);
    V t = SEL(c, lt6, ADDK(c, w, -3.125), SEL(c, lt16, ADDK(c, sw, -3.25), ADDK(c, sw, -5.0)));
    /* Align the three lists at their last term: term j of A is term j-4 of B, j-6 of C. */
    p = K(c, x, 0.0);
    for (int j = 0; j < 23; j++) {
      V a = K(c, x, A[j]);
      V b = j >= 4 ? K(c, x, B[j - 4]) : K(c, x, 0.0);
      V cc = j >= 6 ? K(c, x, C[j - 6]) : K(c, x, 0.0);
      V k = SEL(c, lt6, a, SEL(c, lt16, b, cc));
      p = ADD(c, MUL(c, p, t), k);
    }
  }
  V r = MUL(c, p, x);
  /* erfinv(+-1) = +-inf; |x| > 1 -> nan (log1p of a negative below -1). */
  V inf = MULK(c, x, INFINITY);
  return SEL(c, CMPK(c, "EQ", UN(c, "abs", x), 1.0), inf, r);
}

/* ---- unary math (x already in the compute dtype) -------------------------- */

typedef V (*unary_fn)(tpu_op_ctx_t *c, V x);

static V u_neg(tpu_op_ctx_t *c, V x) { return UN(c, "negate", x); }
static V u_abs(tpu_op_ctx_t *c, V x) {
  return dtype_of(c, x) == TPU_PRED || is_uint(dtype_of(c, x)) ? x : UN(c, "abs", x);
}
static V u_exp(tpu_op_ctx_t *c, V x) { return UN(c, "exponential", x); }
static V u_exp2(tpu_op_ctx_t *c, V x) { return tpu_hlo_binary(c->f, "power", K(c, x, 2.0), x); }
static V u_expm1(tpu_op_ctx_t *c, V x) { return UN(c, "exponential_minus_one", x); }
static V u_log(tpu_op_ctx_t *c, V x) { return UN(c, "log", x); }
static V u_log2(tpu_op_ctx_t *c, V x) { return MULK(c, UN(c, "log", x), 1.4426950408889634074); }
static V u_log10(tpu_op_ctx_t *c, V x) { return MULK(c, UN(c, "log", x), 0.43429448190325182765); }
static V u_log1p(tpu_op_ctx_t *c, V x) { return UN(c, "log_plus_one", x); }
static V u_sqrt(tpu_op_ctx_t *c, V x) { return UN(c, "sqrt", x); }
static V u_rsqrt(tpu_op_ctx_t *c, V x) { return UN(c, "rsqrt", x); }
static V u_reciprocal(tpu_op_ctx_t *c, V x) { return DIV(c, K(c, x, 1.0), x); }
static V u_sigmoid(tpu_op_ctx_t *c, V x) {
  /* 1 / (1 + exp(-x)), as PyTorch CPU. */
  return DIV(c, K(c, x, 1.0), ADDK(c, UN(c, "exponential", UN(c, "negate", x)), 1.0));
}
static V u_tanh(tpu_op_ctx_t *c, V x) { return UN(c, "tanh", x); }
static V u_sin(tpu_op_ctx_t *c, V x) { return UN(c, "sine", x); }
static V u_cos(tpu_op_ctx_t *c, V x) { return UN(c, "cosine", x); }
static V u_tan(tpu_op_ctx_t *c, V x) { return UN(c, "tan", x); }
static V u_atan(tpu_op_ctx_t *c, V x) { return tpu_hlo_binary(c->f, "atan2", x, K(c, x, 1.0)); }
static V one_minus_sq(tpu_op_ctx_t *c, V x) { /* (1-x)(1+x), exact near |x|=1 */
  return MUL(c, SUB(c, K(c, x, 1.0), x), ADDK(c, x, 1.0));
}
static V u_asin(tpu_op_ctx_t *c, V x) {
  return tpu_hlo_binary(c->f, "atan2", x, UN(c, "sqrt", one_minus_sq(c, x)));
}
static V u_acos(tpu_op_ctx_t *c, V x) {
  return tpu_hlo_binary(c->f, "atan2", UN(c, "sqrt", one_minus_sq(c, x)), x);
}
/* e^|x| / 2 as (h / 2) * h with h = e^(|x|/2): no early overflow, and no
 * rounding of |x| - ln2 (which costs up to |x| ulps). */
static V half_exp_abs(tpu_op_ctx_t *c, V x) {
  V h = UN(c, "exponential", MULK(c, UN(c, "abs", x), 0.5));
  return MUL(c, MULK(c, h, 0.5), h);
}
static V u_sinh(tpu_op_ctx_t *c, V x) {
  V small = MULK(c, SUB(c, UN(c, "exponential_minus_one", x),
                        UN(c, "exponential_minus_one", UN(c, "negate", x))), 0.5);
  V h = half_exp_abs(c, x);
  V big = SUB(c, h, DIV(c, K(c, x, 0.25), h));
  big = SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "negate", big), big);
  return SEL(c, CMPK(c, "LT", UN(c, "abs", x), 1.0), small, big);
}
static V u_cosh(tpu_op_ctx_t *c, V x) {
  V h = half_exp_abs(c, x);
  return ADD(c, h, DIV(c, K(c, x, 0.25), h));
}
static double big_threshold(tpu_op_ctx_t *c, V x) { /* 1/sqrt(eps) */
  return dtype_of(c, x) == TPU_F64 ? 67108864.0 : 4096.0;
}
static V u_asinh(tpu_op_ctx_t *c, V x) {
  V ax = UN(c, "abs", x);
  V ax2 = MUL(c, ax, ax);
  V small = UN(c, "log_plus_one",
               ADD(c, ax, DIV(c, ax2, ADDK(c, UN(c, "sqrt", ADDK(c, ax2, 1.0)), 1.0))));
  V big = ADDK(c, UN(c, "log", ax), 0.69314718055994530942);
  V r = SEL(c, CMPK(c, "GT", ax, big_threshold(c, x)), big, small);
  return SEL(c, CMPK(c, "LT", x, 0.0), UN(c, "negate", r), r);
}
static V u_acosh(tpu_op_ctx_t *c, V x) {
  V y = ADDK(c, x, -1.0);
  V small = UN(c, "log_plus_one", ADD(c, y, UN(c, "sqrt", MUL(c, y, ADDK(c, x, 1.0)))));
  V big = ADDK(c, UN(c, "log", x), 0.69314718055994530942);
  return SEL(c, CMPK(c, "GT", x, big_threshold(c, x)), big, small);
}
static V u_atanh(tpu_op_ctx_t *c, V x) {
  /* 0.5 * log1p(2x / (1 - x)) */
  V q = DIV(c, ADD(c, x, x), SUB(c, K(c, x, 1.0), x));
  return MULK(c, UN(c, "log_plus_one", q), 0.5);
}
static V u_floor(tpu_op_ctx_t *c, V x) { return is_float(dtype_of(c, x)) ? UN(c, "floor", x) : x; }
static V u_ceil(tpu_op_ctx_t *c, V x) { return is_float(dtype_of(c, x)) ? UN(c, "ceil", x) : x; }
static V u_trunc(tpu_op_ctx_t *c, V x) { return trunc_(c, x); }
static V u_frac(tpu_op_ctx_t *c, V x) { return SUB(c, x, trunc_(c, x)); }
static V u_sign(tpu_op_ctx_t *c, V x) {
  tpu_dtype_t dt = dtype_of(c, x);
  if (dt == TPU_PRED) return x;
  /* (0 < x) - (x < 0): sign(nan) = 0 as PyTorch. */
  V pos = tpu_hlo_convert(c->f, CMPK(c, "GT", x, 0.0), dt);
  V neg = tpu_hlo_convert(c->f, CMPK(c, "LT", x, 0.0), dt);
  return SUB(c, pos, neg);
}
static V u_square(tpu_op_ctx_t *c, V x) { return MUL(c, x, x); }
static V u_relu(tpu_op_ctx_t *c, V x) {
  if (dtype_of(c, x) == TPU_PRED) return x;
  return MAX(c, x, K(c, x, 0.0));
}
static V u_silu(tpu_op_ctx_t *c, V x) {
  return DIV(c, x, ADDK(c, UN(c, "exponential", UN(c, "negate", x)), 1.0));
}
static V softplus1(tpu_op_ctx_t *c, V x) { return UN(c, "log_plus_one", UN(c, "exponential", x)); }
static V u_mish(tpu_op_ctx_t *c, V x) { return MUL(c, x, UN(c, "tanh", softplus1(c, x))); }
static V relu6_shift3(tpu_op_ctx_t *c, V x) { /* min(max(x + 3, 0), 6) */
  return MIN(c, MAX(c, ADDK(c, x, 3.0), K(c, x, 0.0)), K(c, x, 6.0));
}
static V u_hardsigmoid(tpu_op_ctx_t *c, V x) { return DIV(c, relu6_shift3(c, x), K(c, x, 6.0)); }
static V u_hardswish(tpu_op_ctx_t *c, V x) { return DIV(c, MUL(c, x, relu6_shift3(c, x)), K(c, x, 6.0)); }

/* Shared body of the one-input rules:
 *   inputs: x;  ints: [dtype].  Result dtype = attr 0 (default: x's dtype). */
static void unary_rule(tpu_op_ctx_t *c, unary_fn fn) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[1];
  if (!load(c, 1, dt, ct, v)) return;
  finish(c, fn(c, v[0]), dt);
}

#define UNARY_RULE(name)                                              \
  static void rule_##name(tpu_op_ctx_t *c) { unary_rule(c, u_##name); }
UNARY_RULE(neg)
UNARY_RULE(abs)
UNARY_RULE(exp)
UNARY_RULE(exp2)
UNARY_RULE(expm1)
UNARY_RULE(log)
UNARY_RULE(log2)
UNARY_RULE(log10)
UNARY_RULE(log1p)
UNARY_RULE(sqrt)
UNARY_RULE(rsqrt)
UNARY_RULE(reciprocal)
UNARY_RULE(sigmoid)
UNARY_RULE(tanh)
UNARY_RULE(sin)
UNARY_RULE(cos)
UNARY_RULE(tan)
UNARY_RULE(asin)
UNARY_RULE(acos)
UNARY_RULE(atan)
UNARY_RULE(sinh)
UNARY_RULE(cosh)
UNARY_RULE(asinh)
UNARY_RULE(acosh)
UNARY_RULE(atanh)
UNARY_RULE(floor)
UNARY_RULE(ceil)
UNARY_RULE(trunc)
UNARY_RULE(frac)
UNARY_RULE(sign)
UNARY_RULE(square)
UNARY_RULE(relu)
UNARY_RULE(silu)
UNARY_RULE(mish)
UNARY_RULE(hardsigmoid)
UNARY_RULE(hardswish)

static V u_erf(tpu_op_ctx_t *c, V x) { return erf_(c, x); }
static V u_erfc(tpu_op_ctx_t *c, V x) { return erfc_(c, x); }
static V u_erfinv(tpu_op_ctx_t *c, V x) { return erfinv_(c, x); }
UNARY_RULE(erf)
UNARY_RULE(erfc)
UNARY_RULE(erfinv)

/* round: inputs x; ints [dtype, decimals=0].  Half to even; with decimals
 * as PyTorch: d > 0: rint(x * 10^d) / 10^d, d < 0: rint(x / 10^-d) * 10^-d. */
static void rule_round(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  int64_t d = int_attr_or(c, 1, 0);
  V v[1];
  if (!load(c, 1, dt, ct, v)) return;
  V x = v[0];
  if (!is_float(ct)) { finish(c, x, dt); return; }
  if (d == 0) { finish(c, UN(c, "round_nearest_even", x), dt); return; }
  double p = pow(10.0, (double)(d > 0 ? d : -d));
  V r;
  if (d > 0) r = DIV(c, UN(c, "round_nearest_even", MULK(c, x, p)), K(c, x, p));
  else r = MULK(c, UN(c, "round_nearest_even", DIV(c, x, K(c, x, p))), p);
  finish(c, r, dt);
}

/* sgn: same as sign for real dtypes. */
static void rule_sgn(tpu_op_ctx_t *c) { unary_rule(c, u_sign); }

/* signbit: inputs x; result bool (ints [dtype] optional, default bool). */
static void rule_signbit(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? result_dtype(c, 0, 0) : TPU_PRED;
  finish(c, signbit_(c, c->in[0]), dt);
}

/* isnan / isinf / isfinite / isposinf / isneginf: inputs x; result bool. */
static void classify_rule(tpu_op_ctx_t *c, int kind) {
  V x = c->in[0];
  tpu_dtype_t xt = dtype_of(c, x);
  V r;
  if (!is_float(xt)) {
    V t = CMP(c, "EQ", x, x); /* all true */
    r = kind == 2 ? t : UN(c, "not", t);
  } else {
    switch (kind) {
      case 0: r = isnan_(c, x); break;
      case 1: r = CMPK(c, "EQ", UN(c, "abs", x), INFINITY); break;
      case 2: r = UN(c, "is_finite", x); break;
      case 3: r = CMPK(c, "EQ", x, INFINITY); break;
      default: r = CMPK(c, "EQ", x, -INFINITY); break;
    }
  }
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? result_dtype(c, 0, 0) : TPU_PRED;
  finish(c, r, dt);
}
static void rule_isnan(tpu_op_ctx_t *c) { classify_rule(c, 0); }
static void rule_isinf(tpu_op_ctx_t *c) { classify_rule(c, 1); }
static void rule_isfinite(tpu_op_ctx_t *c) { classify_rule(c, 2); }
static void rule_isposinf(tpu_op_ctx_t *c) { classify_rule(c, 3); }
static void rule_isneginf(tpu_op_ctx_t *c) { classify_rule(c, 4); }

/* ---- binary arithmetic ------------------------------------------------------ */

/* add / sub: inputs (a, b[, alpha]); ints [dtype].  a + alpha * b (a - alpha * b).
 * Bool: add is or, multiply is and (PyTorch's bool add). */
static void addsub_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[3];
  if (!load(c, 2, dt, ct, v)) return;
  V b = v[1];
  if (c->nin > 2) b = ct == TPU_PRED ? AND(c, v[2], b) : MUL(c, v[2], b);
  if (ct == TPU_PRED && !strcmp(op, "add")) { finish(c, OR(c, v[0], b), dt); return; }
  finish(c, tpu_hlo_binary(c->f, op, v[0], b), dt);
}
static void rule_add(tpu_op_ctx_t *c) { addsub_rule(c, "add"); }
static void rule_sub(tpu_op_ctx_t *c) { addsub_rule(c, "subtract"); }

/* mul: inputs (a, b); ints [dtype]. */
static void rule_mul(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  if (ct == TPU_PRED) { finish(c, AND(c, v[0], v[1]), dt); return; }
  finish(c, MUL(c, v[0], v[1]), dt);
}

/* Python-style integer/float floor division pieces (PyTorch div_floor_*). */
static V floordiv_float(tpu_op_ctx_t *c, V a, V b) {
  V mod = tpu_hlo_binary(c->f, "remainder", a, b);
  V div = DIV(c, SUB(c, a, mod), b);
  V adjust = AND(c, CMPK(c, "NE", mod, 0.0), CMP(c, "NE", CMPK(c, "LT", b, 0.0), CMPK(c, "LT", mod, 0.0)));
  div = SEL(c, adjust, ADDK(c, div, -1.0), div);
  V fl = UN(c, "floor", div);
  fl = SEL(c, CMPK(c, "GT", SUB(c, div, fl), 0.5), ADDK(c, fl, 1.0), fl);
  V q = DIV(c, a, b);
  V zero = K(c, a, 0.0);
  V signed_zero = SEL(c, signbit_(c, q), UN(c, "negate", zero), zero);
  V r = SEL(c, CMPK(c, "NE", div, 0.0), fl, signed_zero);
  return SEL(c, CMPK(c, "EQ", b, 0.0), q, r);
}
static V floordiv_int(tpu_op_ctx_t *c, V a, V b) {
  V q = DIV(c, a, b);
  if (is_uint(dtype_of(c, a))) return q;
  V r = tpu_hlo_binary(c->f, "remainder", a, b);
  V adjust = AND(c, CMPK(c, "NE", r, 0.0), CMP(c, "NE", CMPK(c, "LT", a, 0.0), CMPK(c, "LT", b, 0.0)));
  return SEL(c, adjust, ADDK(c, q, -1.0), q);
}

/* div: inputs (a, b); ints [dtype, rounding_mode (0 none, 1 trunc, 2 floor)].
 * rounding none: true division (the adapter's dtype is a float type).
 * Integer trunc/floor are integer divisions (division by zero is
 * unspecified on the device; PyTorch raises ZeroDivisionError). */
static void rule_div(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  int64_t mode = int_attr_or(c, 1, 0);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V a = v[0], b = v[1], r;
  if (mode == 0) r = DIV(c, a, b);
  else if (is_float(ct)) r = mode == 1 ? trunc_(c, DIV(c, a, b)) : floordiv_float(c, a, b);
  else r = mode == 1 ? DIV(c, a, b) : floordiv_int(c, a, b);
  finish(c, r, dt);
}

/* remainder: inputs (a, b); ints [dtype].  Result has the sign of b (Python %). */
static void rule_remainder(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V a = v[0], b = v[1];
  V m = tpu_hlo_binary(c->f, "remainder", a, b);
  if (is_uint(ct)) { finish(c, m, dt); return; }
  V adjust = AND(c, CMPK(c, "NE", m, 0.0), CMP(c, "NE", CMPK(c, "LT", b, 0.0), CMPK(c, "LT", m, 0.0)));
  finish(c, SEL(c, adjust, ADD(c, m, b), m), dt);
}

/* fmod: inputs (a, b); ints [dtype].  C fmod / truncated integer remainder. */
static void rule_fmod(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  finish(c, tpu_hlo_binary(c->f, "remainder", v[0], v[1]), dt);
}

/* pow: inputs (base, exponent) (either may be a 0-d scalar); ints [dtype].
 * Integer powers with negative exponents follow PyTorch: 1 for base 1,
 * +-1 for base -1, else 0. */
static void rule_pow(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V a = v[0], b = v[1];
  if (ct == TPU_PRED) { /* x ** y on bools: x or not y */
    { finish(c, OR(c, a, UN(c, "not", b)), dt); return; }
  }
  if (!is_sint(ct)) { finish(c, tpu_hlo_binary(c->f, "power", a, b), dt); return; }
  V neg = CMPK(c, "LT", b, 0.0);
  V pos = tpu_hlo_binary(c->f, "power", a, SEL(c, neg, K(c, b, 0.0), b));
  V odd = CMPK(c, "NE", tpu_hlo_binary(c->f, "and", b, K(c, b, 1.0)), 0.0);
  V m1 = SEL(c, odd, K(c, a, -1.0), K(c, a, 1.0));
  V rneg = SEL(c, CMPK(c, "EQ", a, 1.0), K(c, a, 1.0), SEL(c, CMPK(c, "EQ", a, -1.0), m1, K(c, a, 0.0)));
  finish(c, SEL(c, neg, rneg, pos), dt);
}

/* maximum / minimum: inputs (a, b); ints [dtype].  NaN propagates.
 * fmax / fmin: NaN is ignored unless both are NaN. */
static void minmax_rule(tpu_op_ctx_t *c, int is_max, int ignore_nan) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  V v[2];
  if (!load(c, 2, dt, dt, v)) return;
  V a = v[0], b = v[1];
  if (dt == TPU_PRED) { finish(c, is_max ? OR(c, a, b) : AND(c, a, b), dt); return; }
  V r;
  if (is_float(dt)) {
    /* Explicit NaN handling: does not depend on the backend's max semantics. */
    V m = SEL(c, CMP(c, is_max ? "GT" : "LT", a, b), a, b);
    V an = isnan_(c, a), bn = isnan_(c, b);
    if (ignore_nan) r = SEL(c, an, b, SEL(c, bn, a, m));
    else r = SEL(c, an, a, SEL(c, bn, b, m));
  } else {
    r = is_max ? MAX(c, a, b) : MIN(c, a, b);
  }
  finish(c, r, dt);
}
static void rule_maximum(tpu_op_ctx_t *c) { minmax_rule(c, 1, 0); }
static void rule_minimum(tpu_op_ctx_t *c) { minmax_rule(c, 0, 0); }
static void rule_fmax(tpu_op_ctx_t *c) { minmax_rule(c, 1, 1); }
static void rule_fmin(tpu_op_ctx_t *c) { minmax_rule(c, 0, 1); }

/* atan2: inputs (a, b); ints [dtype] (a float type). */
static void rule_atan2(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  finish(c, tpu_hlo_binary(c->f, "atan2", v[0], v[1]), dt);
}

/* bitwise_and / or / xor: inputs (a, b); ints [dtype] (integer or bool). */
static void bitwise_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  if (is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'", c->name, tpu_dtype_name(dt));
    return;
  }
  V v[2];
  if (!load(c, 2, dt, dt, v)) return;
  finish(c, tpu_hlo_binary(c->f, op, v[0], v[1]), dt);
}
static void rule_bitwise_and(tpu_op_ctx_t *c) { bitwise_rule(c, "and"); }
static void rule_bitwise_or(tpu_op_ctx_t *c) { bitwise_rule(c, "or"); }
static void rule_bitwise_xor(tpu_op_ctx_t *c) { bitwise_rule(c, "xor"); }

/* bitwise_not: inputs x; ints [dtype]. */
static void rule_bitwise_not(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  if (is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "\"bitwise_not_cpu\" not implemented for '%s'", tpu_dtype_name(dt));
    return;
  }
  V v[1];
  if (!load(c, 1, dt, dt, v)) return;
  finish(c, UN(c, "not", v[0]), dt);
}

/* bitwise_left_shift / bitwise_right_shift: inputs (a, b); ints [dtype].
 * Shifts of >= the bit width (or negative) give 0 (-1 for negative a >>). */
static void shift_rule(tpu_op_ctx_t *c, int left) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  if (!tpu_dtype_is_int(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'", c->name, tpu_dtype_name(dt));
    return;
  }
  V v[2];
  if (!load(c, 2, dt, dt, v)) return;
  V a = v[0], b = v[1];
  double bits = 8.0 * (double)tpu_dtype_size(dt);
  V oob = CMPK(c, "GE", b, bits);
  if (is_sint(dt)) oob = OR(c, oob, CMPK(c, "LT", b, 0.0));
  V bs = SEL(c, oob, K(c, b, 0.0), b);
  V r;
  if (left) {
    r = SEL(c, oob, K(c, a, 0.0), tpu_hlo_binary(c->f, "shift_left", a, bs));
  } else if (is_sint(dt)) {
    V fill = SEL(c, CMPK(c, "LT", a, 0.0), K(c, a, -1.0), K(c, a, 0.0));
    r = SEL(c, oob, fill, tpu_hlo_binary(c->f, "shift_right_arithmetic", a, bs));
  } else {
    r = SEL(c, oob, K(c, a, 0.0), tpu_hlo_binary(c->f, "shift_right_logical", a, bs));
  }
  finish(c, r, dt);
}
static void rule_bitwise_left_shift(tpu_op_ctx_t *c) { shift_rule(c, 1); }
static void rule_bitwise_right_shift(tpu_op_ctx_t *c) { shift_rule(c, 0); }

/* logical_and / or / xor: inputs (a, b); ints [dtype] (default bool).
 * Inputs are tested against zero in their own dtype. */
static void logical_rule(tpu_op_ctx_t *c, const char *op) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? result_dtype(c, 0, 0) : TPU_PRED;
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 2, dims);
  if (rank < 0) return;
  V a = tpu_hlo_broadcast_to(c->f, to_bool(c, c->in[0]), rank, dims);
  V b = tpu_hlo_broadcast_to(c->f, to_bool(c, c->in[1]), rank, dims);
  finish(c, tpu_hlo_binary(c->f, op, a, b), dt);
}
static void rule_logical_and(tpu_op_ctx_t *c) { logical_rule(c, "and"); }
static void rule_logical_or(tpu_op_ctx_t *c) { logical_rule(c, "or"); }
static void rule_logical_xor(tpu_op_ctx_t *c) { logical_rule(c, "xor"); }

/* logical_not: inputs x; ints [dtype] (default bool). */
static void rule_logical_not(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? result_dtype(c, 0, 0) : TPU_PRED;
  finish(c, UN(c, "not", to_bool(c, c->in[0])), dt);
}

/* eq / ne / lt / le / gt / ge: inputs (a, b); ints [compute dtype (the
 * promoted dtype of a and b), result dtype (default bool)]. */
static void compare_rule(tpu_op_ctx_t *c, const char *dir) {
  tpu_dtype_t ct = result_dtype(c, 0, 2);
  tpu_dtype_t dt = tpu_op_nints(c) > 1 ? result_dtype(c, 1, 0) : TPU_PRED;
  V v[2];
  if (!load(c, 2, ct, ct, v)) return;
  finish(c, CMP(c, dir, v[0], v[1]), dt);
}
static void rule_eq(tpu_op_ctx_t *c) { compare_rule(c, "EQ"); }
static void rule_ne(tpu_op_ctx_t *c) { compare_rule(c, "NE"); }
static void rule_lt(tpu_op_ctx_t *c) { compare_rule(c, "LT"); }
static void rule_le(tpu_op_ctx_t *c) { compare_rule(c, "LE"); }
static void rule_gt(tpu_op_ctx_t *c) { compare_rule(c, "GT"); }
static void rule_ge(tpu_op_ctx_t *c) { compare_rule(c, "GE"); }

/* ---- select / clamp / fills --------------------------------------------------- */

/* where: inputs (cond, a, b); ints [dtype of a/b].  cond != 0 picks a. */
static void rule_where(tpu_op_ctx_t *c) {
  tpu_dtype_t dt;
  if (tpu_op_nints(c) > 0) dt = result_dtype(c, 0, 0);
  else dt = promote2(dtype_of(c, c->in[1]), dtype_of(c, c->in[2]));
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 3, dims);
  if (rank < 0) return;
  V p = tpu_hlo_broadcast_to(c->f, to_bool(c, c->in[0]), rank, dims);
  V a = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[1], dt), rank, dims);
  V b = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], dt), rank, dims);
  finish(c, SEL(c, p, a, b), dt);
}

/* masked_fill: inputs (x, mask, value); ints [dtype (x's)].  mask != 0
 * takes value; shapes broadcast (the out-of-place masked_fill expands). */
static void rule_masked_fill(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_nints(c) > 0 ? result_dtype(c, 0, 0) : dtype_of(c, c->in[0]);
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_op_broadcast_shape(c, c->in, 3, dims);
  if (rank < 0) return;
  V x = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[0], dt), rank, dims);
  V m = tpu_hlo_broadcast_to(c->f, to_bool(c, c->in[1]), rank, dims);
  V val = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[2], dt), rank, dims);
  finish(c, SEL(c, m, val, x), dt);
}

/* clamp: inputs (x[, min][, max]); ints [dtype, has_min, has_max] (without
 * the flags: min then max by position).  min(max(x, min), max), NaN
 * propagating from any operand.  clamp_min: (x, min); clamp_max: (x, max). */
static void clamp_impl(tpu_op_ctx_t *c, int has_min, int has_max) {
  tpu_dtype_t dt = result_dtype(c, 0, c->nin);
  tpu_dtype_t ct = compute_dtype(dt);
  if (has_min + has_max + 1 != c->nin) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs, got %d", c->name, has_min + has_max + 1, c->nin);
    return;
  }
  V v[3];
  if (!load(c, c->nin, dt, ct, v)) return;
  V r = v[0];
  int isf = is_float(ct);
  if (has_min) {
    V lo = v[1];
    if (isf) r = SEL(c, isnan_(c, lo), lo, SEL(c, CMP(c, "LT", r, lo), lo, r));
    else r = ct == TPU_PRED ? OR(c, r, lo) : MAX(c, r, lo);
  }
  if (has_max) {
    V hi = v[1 + has_min];
    if (isf) r = SEL(c, isnan_(c, hi), hi, SEL(c, CMP(c, "GT", r, hi), hi, r));
    else r = ct == TPU_PRED ? AND(c, r, hi) : MIN(c, r, hi);
  }
  finish(c, r, dt);
}
static void rule_clamp(tpu_op_ctx_t *c) {
  int has_min = (int)int_attr_or(c, 1, c->nin > 1);
  int has_max = (int)int_attr_or(c, 2, c->nin > 2);
  clamp_impl(c, has_min, has_max);
}
static void rule_clamp_min(tpu_op_ctx_t *c) { clamp_impl(c, 1, 0); }
static void rule_clamp_max(tpu_op_ctx_t *c) { clamp_impl(c, 0, 1); }

/* nan_to_num: inputs (x, nan, posinf, neginf) (replacement scalars in x's
 * dtype; the adapter computes the finfo defaults); ints [dtype]. */
static void rule_nan_to_num(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  if (!is_float(dt)) { finish(c, tpu_hlo_cast(c->f, c->in[0], dt), dt); return; }
  V v[4];
  if (!load(c, 4, dt, dt, v)) return;
  V x = v[0];
  V r = SEL(c, isnan_(c, x), v[1], x);
  r = SEL(c, CMPK(c, "EQ", x, INFINITY), v[2], r);
  r = SEL(c, CMPK(c, "EQ", x, -INFINITY), v[3], r);
  finish(c, r, dt);
}

/* lerp: inputs (start, end, weight); ints [dtype].  PyTorch's two-sided form:
 * |w| < 0.5 ? start + w (end - start) : end - (end - start)(1 - w). */
static void rule_lerp(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[3];
  if (!load(c, 3, dt, ct, v)) return;
  V s = v[0], e = v[1], w = v[2];
  V diff = SUB(c, e, s);
  V lo = ADD(c, s, MUL(c, w, diff));
  V hi = SUB(c, e, MUL(c, diff, SUB(c, K(c, w, 1.0), w)));
  finish(c, SEL(c, CMPK(c, "LT", UN(c, "abs", w), 0.5), lo, hi), dt);
}

/* addcmul: inputs (self, t1, t2, value); ints [dtype].  self + value*t1*t2.
 * addcdiv: the same with self + value*t1/t2. */
static void addc_rule(tpu_op_ctx_t *c, int is_div) {
  tpu_dtype_t dt = result_dtype(c, 0, 3);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[4];
  if (!load(c, 3, dt, ct, v)) return;
  V val = c->nin > 3 ? v[3] : K(c, v[0], 1.0);
  V prod = MUL(c, val, v[1]);
  prod = is_div ? DIV(c, prod, v[2]) : MUL(c, prod, v[2]);
  finish(c, ADD(c, v[0], prod), dt);
}
static void rule_addcmul(tpu_op_ctx_t *c) { addc_rule(c, 0); }
static void rule_addcdiv(tpu_op_ctx_t *c) { addc_rule(c, 1); }

/* ---- activations -------------------------------------------------------------- */

/* leaky_relu: inputs (x, negative_slope); ints [dtype].  x > 0 ? x : x*slope. */
static void rule_leaky_relu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 1, dt, ct, v)) return;
  V x = v[0];
  finish(c, SEL(c, CMPK(c, "GT", x, 0.0), x, MUL(c, x, v[1])), dt);
}

/* elu: inputs (x, alpha, scale, input_scale); ints [dtype].
 * x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale.  (celu and
 * selu are elu with their constants.) */
static void rule_elu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[4];
  if (!load(c, 1, dt, ct, v)) return;
  V x = v[0];
  V negcoef = MUL(c, v[1], v[2]);
  V neg = MUL(c, UN(c, "exponential_minus_one", MUL(c, x, v[3])), negcoef);
  finish(c, SEL(c, CMPK(c, "LE", x, 0.0), neg, MUL(c, x, v[2])), dt);
}

static const double kSqrt1_2 = 0.70710678118654752440;
static const double kSqrt2OverPi = 0.79788456080286535588; /* sqrt(2/pi) */
static const double kGeluKappa = 0.044715;

/* gelu: inputs x; ints [dtype, approximate (0 none, 1 tanh)]. */
static void rule_gelu(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  int64_t approx = int_attr_or(c, 1, 0);
  V v[1];
  if (!load(c, 1, dt, ct, v)) return;
  V x = v[0], r;
  if (approx) {
    V x3 = MUL(c, MUL(c, x, x), x);
    V inner = MULK(c, ADD(c, x, MULK(c, x3, kGeluKappa)), kSqrt2OverPi);
    r = MUL(c, MULK(c, x, 0.5), ADDK(c, UN(c, "tanh", inner), 1.0));
  } else {
    r = MUL(c, MULK(c, x, 0.5), ADDK(c, erf_(c, MULK(c, x, kSqrt1_2)), 1.0));
  }
  finish(c, r, dt);
}

/* softplus: inputs (x, beta, threshold); ints [dtype].
 * x*beta > threshold ? x : log1p(exp(x*beta)) / beta. */
static void rule_softplus(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[3];
  if (!load(c, 1, dt, ct, v)) return;
  V x = v[0], xb = MUL(c, v[0], v[1]);
  V soft = DIV(c, UN(c, "log_plus_one", UN(c, "exponential", xb)), v[1]);
  finish(c, SEL(c, CMP(c, "GT", xb, v[2]), x, soft), dt);
}

/* hardtanh: inputs (x, min_val, max_val); ints [dtype].  clamp. */
static void rule_hardtanh(tpu_op_ctx_t *c) { clamp_impl(c, 1, 1); }

/* threshold: inputs (x, threshold, value); ints [dtype].  x <= t ? value : x. */
static void rule_threshold(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[3];
  if (!load(c, 1, dt, ct, v)) return;
  finish(c, SEL(c, CMP(c, "LE", v[0], v[1]), v[2], v[0]), dt);
}

/* ---- backward ops (inputs (grad, x_or_result, ...); ints [dtype]) ------------- */

/* threshold_backward: (grad, self, threshold): self <= t ? 0 : grad. */
static void rule_threshold_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[3];
  if (!load(c, 2, dt, ct, v)) return;
  finish(c, SEL(c, CMP(c, "LE", v[1], v[2]), K(c, v[0], 0.0), v[0]), dt);
}

/* gelu_backward: (grad, self); ints [dtype, approximate]. */
static void rule_gelu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  int64_t approx = int_attr_or(c, 1, 0);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V g = v[0], x = v[1], d;
  if (approx) {
    V x2 = MUL(c, x, x), x3 = MUL(c, x2, x);
    V inner = MULK(c, ADD(c, x, MULK(c, x3, kGeluKappa)), kSqrt2OverPi);
    V t = UN(c, "tanh", inner);
    V left = MULK(c, x, 0.5);
    V right = ADDK(c, t, 1.0);
    V left_d = MULK(c, right, 0.5);
    V tanh_d = SUB(c, K(c, t, 1.0), MUL(c, t, t));
    V inner_d = MULK(c, ADDK(c, MULK(c, x2, 3.0 * kGeluKappa), 1.0), kSqrt2OverPi);
    V right_d = MUL(c, MUL(c, left, tanh_d), inner_d);
    d = ADD(c, left_d, right_d);
  } else {
    V cdf = MULK(c, ADDK(c, erf_(c, MULK(c, x, kSqrt1_2)), 1.0), 0.5);
    V pdf = MULK(c, UN(c, "exponential", MULK(c, MUL(c, x, x), -0.5)), 0.39894228040143267794);
    d = ADD(c, cdf, MUL(c, x, pdf));
  }
  finish(c, MUL(c, g, d), dt);
}

/* silu_backward: (grad, self): grad * s * (1 + x (1 - s)), s = sigmoid(x). */
static void rule_silu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V x = v[1];
  V s = u_sigmoid(c, x);
  V d = MUL(c, s, ADDK(c, MUL(c, x, SUB(c, K(c, s, 1.0), s)), 1.0));
  finish(c, MUL(c, v[0], d), dt);
}

/* sigmoid_backward: (grad, output): grad * (1 - y) * y. */
static void rule_sigmoid_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V y = v[1];
  finish(c, MUL(c, MUL(c, v[0], SUB(c, K(c, y, 1.0), y)), y), dt);
}

/* tanh_backward: (grad, output): grad * (1 - y^2). */
static void rule_tanh_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V y = v[1];
  finish(c, MUL(c, v[0], SUB(c, K(c, y, 1.0), MUL(c, y, y))), dt);
}

/* leaky_relu_backward: (grad, self, negative_slope): self > 0 ? grad : grad*slope. */
static void rule_leaky_relu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[3];
  if (!load(c, 2, dt, ct, v)) return;
  finish(c, SEL(c, CMPK(c, "GT", v[1], 0.0), v[0], MUL(c, v[0], v[2])), dt);
}

/* elu_backward: (grad, self_or_result, alpha, scale, input_scale);
 * ints [dtype, is_result]. */
static void rule_elu_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  int64_t is_result = int_attr_or(c, 1, 0);
  V v[5];
  if (!load(c, 2, dt, ct, v)) return;
  V g = v[0], b = v[1];
  V negcoef = MUL(c, v[2], v[3]), poscoef = v[3], negiptcoef = v[4];
  V neg;
  if (is_result) neg = MUL(c, MUL(c, g, negiptcoef), ADD(c, b, negcoef));
  else neg = MUL(c, MUL(c, MUL(c, g, negiptcoef), negcoef), UN(c, "exponential", MUL(c, b, negiptcoef)));
  finish(c, SEL(c, CMPK(c, "LE", b, 0.0), neg, MUL(c, g, poscoef)), dt);
}

/* softplus_backward: (grad, self, beta, threshold):
 * x*beta > threshold ? grad : grad * z / (z + 1), z = exp(x*beta). */
static void rule_softplus_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[4];
  if (!load(c, 2, dt, ct, v)) return;
  V xb = MUL(c, v[1], v[2]);
  V z = UN(c, "exponential", xb);
  V soft = DIV(c, MUL(c, v[0], z), ADDK(c, z, 1.0));
  finish(c, SEL(c, CMP(c, "GT", xb, v[3]), v[0], soft), dt);
}

/* hardtanh_backward: (grad, self, min_val, max_val): outside (min, max) -> 0. */
static void rule_hardtanh_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[4];
  if (!load(c, 2, dt, ct, v)) return;
  V out = OR(c, CMP(c, "LE", v[1], v[2]), CMP(c, "GE", v[1], v[3]));
  finish(c, SEL(c, out, K(c, v[0], 0.0), v[0]), dt);
}

/* hardsigmoid_backward: (grad, self): -3 < x < 3 ? grad / 6 : 0. */
static void rule_hardsigmoid_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V x = v[1];
  V in = AND(c, CMPK(c, "GT", x, -3.0), CMPK(c, "LT", x, 3.0));
  finish(c, SEL(c, in, DIV(c, v[0], K(c, x, 6.0)), K(c, x, 0.0)), dt);
}

/* hardswish_backward: (grad, self): x < -3 ? 0 : x <= 3 ? grad (x/3 + 0.5) : grad. */
static void rule_hardswish_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V g = v[0], x = v[1];
  V mid = MUL(c, g, ADDK(c, DIV(c, x, K(c, x, 3.0)), 0.5));
  V r = SEL(c, CMPK(c, "LT", x, -3.0), K(c, x, 0.0), SEL(c, CMPK(c, "LE", x, 3.0), mid, g));
  finish(c, r, dt);
}

/* mish_backward: (grad, self): grad * (t + x * sigmoid(x) * (1 - t^2)),
 * t = tanh(softplus(x)). */
static void rule_mish_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 2);
  tpu_dtype_t ct = compute_dtype(dt);
  V v[2];
  if (!load(c, 2, dt, ct, v)) return;
  V x = v[1];
  V s = u_sigmoid(c, x);
  V t = UN(c, "tanh", softplus1(c, x));
  V d = ADD(c, t, MUL(c, MUL(c, x, s), SUB(c, K(c, t, 1.0), MUL(c, t, t))));
  finish(c, MUL(c, v[0], d), dt);
}

/* ---- conversion ------------------------------------------------------------------ */

/* convert: inputs x; ints [dtype].  PyTorch semantics: float -> int
 * truncates toward zero, anything -> bool is x != 0 (nan -> true). */
static void rule_convert(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = result_dtype(c, 0, 1);
  if (dt == TPU_DTYPE_INVALID) return;
  V x = c->in[0];
  tpu_dtype_t from = dtype_of(c, x);
  if (from == dt) { tpu_op_set_output(c, x); return; }
  if (dt == TPU_PRED) { tpu_op_set_output(c, to_bool(c, x)); return; }
  if (is_float(from) && tpu_dtype_is_int(dt)) {
    /* Through the trunc so every backend agrees; half types via f32. */
    x = trunc_(c, tpu_hlo_cast(c->f, x, compute_dtype(from)));
  }
  tpu_op_set_output(c, tpu_hlo_convert(c->f, x, dt));
}

/* ---- the table --------------------------------------------------------------------- */

const tpu_op_rule_t tpu_rules_elementwise[] = {
    /* arithmetic */
    {"add", rule_add, 2, 3},
    {"sub", rule_sub, 2, 3},
    {"mul", rule_mul, 2, 2},
    {"div", rule_div, 2, 2},
    {"remainder", rule_remainder, 2, 2},
    {"fmod", rule_fmod, 2, 2},
    {"pow", rule_pow, 2, 2},
    {"maximum", rule_maximum, 2, 2},
    {"minimum", rule_minimum, 2, 2},
    {"fmax", rule_fmax, 2, 2},
    {"fmin", rule_fmin, 2, 2},
    {"atan2", rule_atan2, 2, 2},
    {"bitwise_and", rule_bitwise_and, 2, 2},
    {"bitwise_or", rule_bitwise_or, 2, 2},
    {"bitwise_xor", rule_bitwise_xor, 2, 2},
    {"bitwise_not", rule_bitwise_not, 1, 1},
    {"bitwise_left_shift", rule_bitwise_left_shift, 2, 2},
    {"bitwise_right_shift", rule_bitwise_right_shift, 2, 2},
    {"logical_and", rule_logical_and, 2, 2},
    {"logical_or", rule_logical_or, 2, 2},
    {"logical_xor", rule_logical_xor, 2, 2},
    {"logical_not", rule_logical_not, 1, 1},
    /* unary math */
    {"neg", rule_neg, 1, 1},
    {"abs", rule_abs, 1, 1},
    {"exp", rule_exp, 1, 1},
    {"exp2", rule_exp2, 1, 1},
    {"expm1", rule_expm1, 1, 1},
    {"log", rule_log, 1, 1},
    {"log2", rule_log2, 1, 1},
    {"log10", rule_log10, 1, 1},
    {"log1p", rule_log1p, 1, 1},
    {"sqrt", rule_sqrt, 1, 1},
    {"rsqrt", rule_rsqrt, 1, 1},
    {"reciprocal", rule_reciprocal, 1, 1},
    {"sigmoid", rule_sigmoid, 1, 1},
    {"tanh", rule_tanh, 1, 1},
    {"sin", rule_sin, 1, 1},
    {"cos", rule_cos, 1, 1},
    {"tan", rule_tan, 1, 1},
    {"asin", rule_asin, 1, 1},
    {"acos", rule_acos, 1, 1},
    {"atan", rule_atan, 1, 1},
    {"sinh", rule_sinh, 1, 1},
    {"cosh", rule_cosh, 1, 1},
    {"asinh", rule_asinh, 1, 1},
    {"acosh", rule_acosh, 1, 1},
    {"atanh", rule_atanh, 1, 1},
    {"erf", rule_erf, 1, 1},
    {"erfc", rule_erfc, 1, 1},
    {"erfinv", rule_erfinv, 1, 1},
    {"floor", rule_floor, 1, 1},
    {"ceil", rule_ceil, 1, 1},
    {"round", rule_round, 1, 1},
    {"trunc", rule_trunc, 1, 1},
    {"frac", rule_frac, 1, 1},
    {"sign", rule_sign, 1, 1},
    {"sgn", rule_sgn, 1, 1},
    {"signbit", rule_signbit, 1, 1},
    {"square", rule_square, 1, 1},
    {"isnan", rule_isnan, 1, 1},
    {"isinf", rule_isinf, 1, 1},
    {"isfinite", rule_isfinite, 1, 1},
    {"isposinf", rule_isposinf, 1, 1},
    {"isneginf", rule_isneginf, 1, 1},
    {"nan_to_num", rule_nan_to_num, 4, 4},
    /* compare / select */
    {"eq", rule_eq, 2, 2},
    {"ne", rule_ne, 2, 2},
    {"lt", rule_lt, 2, 2},
    {"le", rule_le, 2, 2},
    {"gt", rule_gt, 2, 2},
    {"ge", rule_ge, 2, 2},
    {"where", rule_where, 3, 3},
    {"masked_fill", rule_masked_fill, 3, 3},
    {"clamp", rule_clamp, 1, 3},
    {"clamp_min", rule_clamp_min, 2, 2},
    {"clamp_max", rule_clamp_max, 2, 2},
    {"lerp", rule_lerp, 3, 3},
    {"addcmul", rule_addcmul, 3, 4},
    {"addcdiv", rule_addcdiv, 3, 4},
    /* activations */
    {"relu", rule_relu, 1, 1},
    {"leaky_relu", rule_leaky_relu, 2, 2},
    {"elu", rule_elu, 4, 4},
    {"gelu", rule_gelu, 1, 1},
    {"silu", rule_silu, 1, 1},
    {"mish", rule_mish, 1, 1},
    {"softplus", rule_softplus, 3, 3},
    {"hardtanh", rule_hardtanh, 3, 3},
    {"hardsigmoid", rule_hardsigmoid, 1, 1},
    {"hardswish", rule_hardswish, 1, 1},
    {"threshold", rule_threshold, 3, 3},
    /* backward */
    {"threshold_backward", rule_threshold_backward, 3, 3},
    {"gelu_backward", rule_gelu_backward, 2, 2},
    {"silu_backward", rule_silu_backward, 2, 2},
    {"sigmoid_backward", rule_sigmoid_backward, 2, 2},
    {"tanh_backward", rule_tanh_backward, 2, 2},
    {"leaky_relu_backward", rule_leaky_relu_backward, 3, 3},
    {"elu_backward", rule_elu_backward, 5, 5},
    {"softplus_backward", rule_softplus_backward, 4, 4},
    {"hardtanh_backward", rule_hardtanh_backward, 4, 4},
    {"hardsigmoid_backward", rule_hardsigmoid_backward, 2, 2},
    {"hardswish_backward", rule_hardswish_backward, 2, 2},
    {"mish_backward", rule_mish_backward, 2, 2},
    /* conversion */
    {"convert", rule_convert, 1, 1},
    {NULL, NULL, 0, 0},
};
