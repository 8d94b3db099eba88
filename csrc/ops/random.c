/* random.c - sampling rules on the device's own counter-based generator.
 *
 * Every rule takes the generator state (ui64[2], THREE_FRY via
 * rng_bit_generator) as input 0 and returns the advanced state as its LAST
 * output; the Python side keeps the state as a device tensor, so sampling
 * never syncs with the host and a seed reproduces a run exactly.
 *
 * Shape attrs: ints = [dtype, rank, dims...].
 */
#include <math.h>
#include <string.h>

#include "ops/toolkit.h"

static int rnd_shape(tpu_op_ctx_t *c, int first, tpu_dtype_t *dt, tpu_hlo_type_t *t) {
  *dt = (tpu_dtype_t)tpu_op_int(c, first);
  int64_t rank = tpu_op_int(c, first + 1);
  if (rank < 0 || rank > TPU_MAX_RANK || tpu_op_nints(c) < first + 2 + rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: bad shape attributes", c->name);
    return 0;
  }
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = tpu_op_int(c, first + 2 + i);
  *t = tpu_hlo_type_make(*dt, (int)rank, dims);
  return 1;
}

/* One 64-bit word per element: rng_bit_generator's THREE_FRY makes element
 * i (row-major) from the counter state[1] + i, so a value depends only on
 * (seed, offset + i).  A slice of a tensor drawn at offset o is then the
 * tensor drawn at offset o + start: DTensor's sharded random ops (which move
 * the offset to each shard's first element) equal the unsharded ones. */
static tpu_hlo_value_t rnd_words(tpu_hlo_func_t *f, tpu_hlo_value_t state, const tpu_hlo_type_t *shape,
                                 tpu_hlo_value_t *new_state) {
  tpu_hlo_type_t bt = *shape;
  bt.dtype = TPU_U64;
  return tpu_hlo_rng_bit_generator(f, state, bt, new_state);
}

/* Uniform floats in [0, 1) from random words: f64 from the top 52 bits;
 * f32 from the top 23 bits of the high (hi) or low half of each word. */
static tpu_hlo_value_t rnd_unit_of(tpu_hlo_func_t *f, tpu_hlo_value_t words, bool f64, bool hi) {
  const tpu_hlo_type_t *wt0 = tpu_hlo_type_of(f, words);
  tpu_hlo_type_t wt = *wt0;
  tpu_hlo_value_t m;
  tpu_hlo_type_t ft = wt;
  if (f64) {
    tpu_hlo_value_t sh = tpu_hlo_constant_i64(f, wt, 12);
    tpu_hlo_value_t one_bits = tpu_hlo_constant_i64(f, wt, (int64_t)0x3ff0000000000000LL);
    m = tpu_hlo_binary(f, "or", tpu_hlo_binary(f, "shift_right_logical", words, sh), one_bits);
    ft.dtype = TPU_F64;
  } else {
    tpu_hlo_value_t half = hi ? tpu_hlo_binary(f, "shift_right_logical", words, tpu_hlo_constant_i64(f, wt, 32)) : words;
    tpu_hlo_value_t w32 = tpu_hlo_convert(f, half, TPU_U32); /* the low 32 bits */
    tpu_hlo_type_t ut = wt;
    ut.dtype = TPU_U32;
    m = tpu_hlo_binary(f, "or", tpu_hlo_binary(f, "shift_right_logical", w32, tpu_hlo_constant_i64(f, ut, 9)),
                       tpu_hlo_constant_i64(f, ut, 0x3f800000));
    ft.dtype = TPU_F32;
  }
  tpu_hlo_value_t x = tpu_hlo_bitcast_convert(f, m, ft.dtype);
  return tpu_hlo_binary(f, "subtract", x, tpu_hlo_constant(f, ft, 1.0));
}

/* Uniform floats in [0, 1) of `like`'s shape in f32 (or f64), advancing the state. */
static tpu_hlo_value_t rnd_unit(tpu_hlo_func_t *f, tpu_hlo_value_t state, const tpu_hlo_type_t *shape, bool f64,
                                tpu_hlo_value_t *new_state) {
  return rnd_unit_of(f, rnd_words(f, state, shape, new_state), f64, true);
}

/* rng_uniform: in = [state, low, high]; out = [values, state]. */
static void rule_uniform(tpu_op_ctx_t *c) {
  tpu_dtype_t dt;
  tpu_hlo_type_t t;
  if (!rnd_shape(c, 0, &dt, &t)) return;
  bool f64 = dt == TPU_F64;
  tpu_hlo_value_t ns;
  tpu_hlo_value_t u = rnd_unit(c->f, c->in[0], &t, f64, &ns);
  const tpu_hlo_type_t *ut = tpu_hlo_type_of(c->f, u);
  if (!ut) return;
  tpu_hlo_type_t wt = *ut;
  tpu_hlo_value_t lo = tpu_op_scalar_as(c, c->in[1], wt.dtype, &wt), hi = tpu_op_scalar_as(c, c->in[2], wt.dtype, &wt);
  tpu_hlo_value_t v = tpu_hlo_binary(c->f, "add", lo, tpu_hlo_binary(c->f, "multiply", u, tpu_hlo_binary(c->f, "subtract", hi, lo)));
  tpu_hlo_value_t outs[2] = {tpu_hlo_cast(c->f, v, dt), ns};
  tpu_op_set_outputs(c, 2, outs);
}

/* rng_normal: in = [state, mean, std]; out = [values, state].  Box-Muller. */
static void rule_normal(tpu_op_ctx_t *c) {
  tpu_dtype_t dt;
  tpu_hlo_type_t t;
  if (!rnd_shape(c, 0, &dt, &t)) return;
  bool f64 = dt == TPU_F64;
  tpu_hlo_value_t s1, s2, u1, u2;
  if (f64) { /* two words per value: counters [o, o + n) and [o + n, o + 2n) */
    u1 = rnd_unit(c->f, c->in[0], &t, true, &s1);
    u2 = rnd_unit(c->f, s1, &t, true, &s2);
  } else { /* both halves of one word per value: element i from counter o + i */
    tpu_hlo_value_t w = rnd_words(c->f, c->in[0], &t, &s2);
    u1 = rnd_unit_of(c->f, w, false, true);
    u2 = rnd_unit_of(c->f, w, false, false);
  }
  const tpu_hlo_type_t *ut = tpu_hlo_type_of(c->f, u1);
  if (!ut) return;
  tpu_hlo_type_t wt = *ut;
  tpu_hlo_func_t *f = c->f;
  /* 1 - u1 is in (0, 1]: log is finite */
  tpu_hlo_value_t one = tpu_hlo_constant(f, wt, 1.0);
  tpu_hlo_value_t r = tpu_hlo_unary(f, "sqrt", tpu_hlo_binary(f, "multiply", tpu_hlo_constant(f, wt, -2.0),
                                                              tpu_hlo_unary(f, "log", tpu_hlo_binary(f, "subtract", one, u1))));
  tpu_hlo_value_t th = tpu_hlo_binary(f, "multiply", tpu_hlo_constant(f, wt, 6.283185307179586), u2);
  tpu_hlo_value_t z = tpu_hlo_binary(f, "multiply", r, tpu_hlo_unary(f, "cosine", th));
  tpu_hlo_value_t mean = tpu_op_scalar_as(c, c->in[1], wt.dtype, &wt), std = tpu_op_scalar_as(c, c->in[2], wt.dtype, &wt);
  tpu_hlo_value_t v = tpu_hlo_binary(f, "add", mean, tpu_hlo_binary(f, "multiply", z, std));
  tpu_hlo_value_t outs[2] = {tpu_hlo_cast(f, v, dt), s2};
  tpu_op_set_outputs(c, 2, outs);
}

/* rng_randint: in = [state, low (i64), high (i64)]; values in [low, high). */
static void rule_randint(tpu_op_ctx_t *c) {
  tpu_dtype_t dt;
  tpu_hlo_type_t t;
  if (!rnd_shape(c, 0, &dt, &t)) return;
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t bt = t;
  bt.dtype = TPU_U64;
  tpu_hlo_value_t ns;
  tpu_hlo_value_t bits = tpu_hlo_rng_bit_generator(f, c->in[0], bt, &ns);
  tpu_hlo_type_t it = t;
  it.dtype = TPU_S64;
  tpu_hlo_value_t lo = tpu_op_scalar_as(c, c->in[1], it.dtype, &it), hi = tpu_op_scalar_as(c, c->in[2], it.dtype, &it);
  tpu_hlo_value_t range = tpu_hlo_convert(f, tpu_hlo_binary(f, "subtract", hi, lo), TPU_U64);
  tpu_hlo_value_t r = tpu_hlo_convert(f, tpu_hlo_binary(f, "remainder", bits, range), TPU_S64);
  tpu_hlo_value_t outs[2] = {tpu_hlo_cast(f, tpu_hlo_binary(f, "add", lo, r), dt), ns};
  tpu_op_set_outputs(c, 2, outs);
}

/* rng_bernoulli: in = [state, p (tensor or 0-d)]; ints = [dtype, rank, dims...];
 * out = [values (1 where u < p), state]. */
static void rule_bernoulli(tpu_op_ctx_t *c) {
  tpu_dtype_t dt;
  tpu_hlo_type_t t;
  if (!rnd_shape(c, 0, &dt, &t)) return;
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t ns;
  const tpu_hlo_type_t *pt = tpu_hlo_type_of(f, c->in[1]);
  if (!pt) return;
  bool f64 = pt->dtype == TPU_F64;
  tpu_hlo_value_t u = rnd_unit(f, c->in[0], &t, f64, &ns);
  const tpu_hlo_type_t *ut = tpu_hlo_type_of(f, u);
  if (!ut) return;
  tpu_hlo_type_t wt = *ut;
  tpu_hlo_value_t p = tpu_op_scalar_as(c, c->in[1], wt.dtype, &wt);
  tpu_hlo_value_t m = tpu_hlo_compare(f, "LT", u, p);
  tpu_hlo_value_t outs[2] = {dt == TPU_PRED ? m : tpu_hlo_convert(f, m, dt), ns};
  tpu_op_set_outputs(c, 2, outs);
}

/* dropout: in = [state, x, p (0-d float)]; out = [x * mask / (1 - p), mask (bool), state]. */
static void rule_dropout(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  const tpu_hlo_type_t *xt0 = tpu_hlo_type_of(f, c->in[1]);
  if (!xt0) return;
  tpu_hlo_type_t xt = *xt0;
  bool f64 = xt.dtype == TPU_F64;
  tpu_hlo_value_t ns;
  tpu_hlo_value_t u = rnd_unit(f, c->in[0], &xt, f64, &ns);
  const tpu_hlo_type_t *ut = tpu_hlo_type_of(f, u);
  if (!ut) return;
  tpu_hlo_type_t wt = *ut;
  tpu_hlo_value_t p = tpu_op_scalar_as(c, c->in[2], wt.dtype, &wt);
  tpu_hlo_value_t one = tpu_hlo_constant(f, wt, 1.0);
  tpu_hlo_value_t keep = tpu_hlo_binary(f, "subtract", one, p);
  tpu_hlo_value_t mask = tpu_hlo_compare(f, "LT", u, keep);
  /* scale = 1/(1-p), 0 when p == 1 (as PyTorch) */
  tpu_hlo_value_t zero = tpu_hlo_constant(f, wt, 0.0);
  tpu_hlo_value_t scale = tpu_hlo_select(f, tpu_hlo_compare(f, "EQ", keep, zero), zero,
                                         tpu_hlo_binary(f, "divide", one, keep));
  tpu_hlo_value_t x = tpu_hlo_cast(f, c->in[1], wt.dtype);
  tpu_hlo_value_t y = tpu_hlo_select(f, mask, tpu_hlo_binary(f, "multiply", x, scale), zero);
  tpu_hlo_value_t outs[3] = {tpu_hlo_cast(f, y, xt.dtype), mask, ns};
  tpu_op_set_outputs(c, 3, outs);
}

/* dropout_backward: in = [grad, mask (bool), scale (0-d float)]; out = grad * mask * scale. */
static void rule_dropout_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  const tpu_hlo_type_t *gt0 = tpu_hlo_type_of(f, c->in[0]);
  if (!gt0) return;
  tpu_hlo_type_t gt = *gt0;
  tpu_hlo_value_t mask = tpu_hlo_broadcast_to(f, c->in[1], gt.rank, gt.dims);
  const tpu_hlo_type_t *mt = tpu_hlo_type_of(f, mask);
  if (!mt) return;
  if (mt->dtype != TPU_PRED) mask = tpu_hlo_compare(f, "NE", mask, tpu_hlo_constant(f, *mt, 0));
  tpu_hlo_value_t s = tpu_op_scalar_as(c, c->in[2], gt.dtype, &gt);
  tpu_hlo_value_t y = tpu_hlo_select(f, mask, tpu_hlo_binary(f, "multiply", c->in[0], s), tpu_hlo_constant(f, gt, 0));
  tpu_op_set_output(c, y);
}

/* rng_seed_state: in = [seed (i64 0-d)]; out = [state ui64[2]] = {seed, 0}. */
static void rule_seed_state(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t s = tpu_hlo_convert(f, c->in[0], TPU_U64);
  int64_t one = 1;
  tpu_hlo_value_t a = tpu_hlo_reshape(f, s, 1, &one);
  tpu_hlo_value_t z = tpu_hlo_constant(f, tpu_hlo_type_make(TPU_U64, 1, &one), 0);
  tpu_hlo_value_t parts[2] = {a, z};
  tpu_hlo_value_t st = tpu_hlo_concatenate(f, parts, 2, 0);
  tpu_op_set_output(c, st);
}

/* multinomial_check: in = [probs [.., n] float]; ints = [replacement];
 * out = probs.  PyTorch's value checks on a distribution, as device-side
 * checks (raised at the next host wait, CUDA's contract), with CPU's
 * messages: with replacement the entries are checked one by one (NaN counts
 * as < 0), without it all at once; every row must have a positive sum. */
static void rule_multinomial_check(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  const tpu_hlo_type_t *pt0 = tpu_hlo_type_of(f, c->in[0]);
  if (!pt0) return;
  tpu_hlo_type_t pt = *pt0;
  tpu_hlo_value_t p = c->in[0];
  tpu_hlo_value_t ge0 = tpu_hlo_compare(f, "GE", p, tpu_hlo_constant(f, pt, 0.0));
  tpu_hlo_value_t fin = tpu_hlo_compare(f, "LT", tpu_hlo_unary(f, "abs", p), tpu_hlo_constant(f, pt, INFINITY));
  if (tpu_op_int(c, 0)) {
    tpu_op_check(c, ge0, TPU_HLO_NONE, TPU_INVALID_ARGUMENT,
                 "invalid multinomial distribution (encountering probability entry < 0)");
    tpu_op_check(c, fin, TPU_HLO_NONE, TPU_INVALID_ARGUMENT,
                 "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
  } else {
    tpu_op_check(c, tpu_hlo_binary(f, "and", ge0, fin), TPU_HLO_NONE, TPU_INVALID_ARGUMENT,
                 "probability tensor contains either `inf`, `nan` or element < 0");
  }
  int64_t last = pt.rank - 1;
  tpu_hlo_value_t sum = tpu_hlo_reduce(f, p, tpu_hlo_scalar(f, pt.dtype, 0), &last, 1, "add");
  const tpu_hlo_type_t *st = tpu_hlo_type_of(f, sum);
  if (!st) return;
  /* NaN sums were reported above; only a sum <= 0 is this check's */
  tpu_hlo_value_t pos = tpu_hlo_unary(f, "not", tpu_hlo_compare(f, "LE", sum, tpu_hlo_constant(f, *st, 0.0)));
  tpu_op_check(c, pos, TPU_HLO_NONE, TPU_INVALID_ARGUMENT,
               "invalid multinomial distribution (sum of probabilities <= 0)");
  tpu_op_set_output(c, p);
}

const tpu_op_rule_t tpu_rules_random[] = {
    {"rng_uniform", rule_uniform, 3, 3},
    {"rng_normal", rule_normal, 3, 3},
    {"rng_randint", rule_randint, 3, 3},
    {"rng_bernoulli", rule_bernoulli, 2, 2},
    {"dropout", rule_dropout, 3, 3},
    {"dropout_backward", rule_dropout_backward, 3, 3},
    {"rng_seed_state", rule_seed_state, 1, 1},
    {"multinomial_check", rule_multinomial_check, 1, 1},
    {NULL, NULL, 0, 0},
};
