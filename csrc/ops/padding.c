/* padding.c - padding modes: constant (constant_pad_nd, negative pads
 * crop), reflection and replication over 1 to 3 trailing dims and their
 * backward ops (a take along each padded axis; the backward sums the
 * gradient back into the sources).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;


/* constant_pad_nd: inputs (self, value 0-d); attrs [pad...] (pairs, last dim
 * first, as PyTorch; negative values crop). */
static void rule_constant_pad_nd(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int n = tpu_op_nints(c);
  if (n % 2 || n / 2 > t.rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Length of pad must be even but instead it equals %d, or too large for a %d-d input", c->name, n,
                t.rank);
    return;
  }
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, in[TPU_MAX_RANK] = {0};
  for (int i = 0; i < n / 2; i++) {
    int d = t.rank - 1 - i;
    lo[d] = tpu_op_int(c, 2 * i);
    hi[d] = tpu_op_int(c, 2 * i + 1);
    int64_t ns = t.dims[d] + lo[d] + hi[d];
    if (ns < 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: The input size %lld, plus negative padding %lld and %lld resulted in a negative output size, "
                  "which is invalid. Check dimension %d of your input.",
                  c->name, (long long)t.dims[d], (long long)lo[d], (long long)hi[d], d);
      return;
    }
  }
  tpu_hlo_value_t v = tpu_hlo_cast(c->f, c->in[1], t.dtype);
  tpu_op_set_output(c, tpu_hlo_pad(c->f, c->in[0], v, lo, hi, in));
}

/* ---- reflection / replication padding -------------------------------------------- */

static int64_t pad_src(int64_t o, int64_t lo, int64_t in, int replicate) {
  int64_t j = o - lo;
  if (replicate) return j < 0 ? 0 : (j >= in ? in - 1 : j);
  if (j < 0) j = -j;
  if (j >= in) j = 2 * (in - 1) - j;
  return j;
}

/* ints [replicate, nsp, pads[2 nsp] (PyTorch order: last dim's (lo, hi)
 * first)]; returns nsp or 0. */
static int pad_attrs(tpu_op_ctx_t *c, int rank, int64_t *lo, int64_t *hi) {
  int64_t nsp = tpu_op_int(c, 1);
  if (nsp < 1 || nsp > 3 || rank < nsp + 1 || rank > nsp + 2 || tpu_op_nints(c) < 2 + 2 * nsp) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: malformed padding", c->name);
    return 0;
  }
  for (int i = 0; i < nsp; i++) { /* spatial dim i counted from the front */
    lo[i] = tpu_op_int(c, 2 + 2 * (nsp - 1 - i));
    hi[i] = tpu_op_int(c, 3 + 2 * (nsp - 1 - i));
  }
  return (int)nsp;
}

/* pad_mode: x [(N,) C, sp...]; ints [replicate, nsp, pads[2 nsp]].
 * Reflection needs pads < the padded dim (the adapter checks). */
static void rule_pad_mode(tpu_op_ctx_t *c) {
  V x = c->in[0];
  int rank = tpu_op_type(c, x).rank;
  int64_t lo[3], hi[3];
  int nsp = pad_attrs(c, rank, lo, hi);
  if (!nsp) return;
  int rep = (int)tpu_op_int(c, 0);
  for (int i = 0; i < nsp; i++) {
    int ax = rank - nsp + i;
    int64_t in = tpu_op_type(c, x).dims[ax], n = in + lo[i] + hi[i];
    if (n < 0 || in == 0 || (!rep && (lo[i] >= in || hi[i] >= in))) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: padding out of range", c->name);
      return;
    }
    int64_t *idx = tpu_op_index_table(c, n);
    if (!idx) return;
    for (int64_t o = 0; o < n; o++) idx[o] = pad_src(o, lo[i], in, rep);
    x = tpu_op_take_const(c, x, ax, idx, n);
    free(idx);
  }
  tpu_op_set_output(c, x);
}

/* pad_mode_backward: grad; ints [replicate, nsp, pads[2 nsp], in_sizes[nsp]]. */
static void rule_pad_mode_backward(tpu_op_ctx_t *c) {
  tpu_dtype_t dt = tpu_op_dtype(c, c->in[0]);
  V g = tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(dt));
  int rank = tpu_op_type(c, g).rank;
  int64_t lo[3], hi[3];
  int nsp = pad_attrs(c, rank, lo, hi);
  if (!nsp) return;
  int rep = (int)tpu_op_int(c, 0);
  for (int i = 0; i < nsp; i++) {
    int ax = rank - nsp + i;
    int64_t in = tpu_op_int(c, 2 + 2 * nsp + i);
    tpu_hlo_type_t gt = tpu_op_type(c, g);
    int64_t n = gt.dims[ax];
    if (n != in + lo[i] + hi[i] || in <= 0) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: grad size mismatch", c->name);
      return;
    }
    int64_t *idx = tpu_op_index_table(c, n);
    if (!idx) return;
    for (int64_t o = 0; o < n; o++) idx[o] = pad_src(o, lo[i], in, rep);
    tpu_hlo_type_t zt = gt;
    zt.dims[ax] = in;
    g = tpu_op_put_const(c, tpu_hlo_constant(c->f, zt, 0.0), ax, idx, n, g, "add");
    free(idx);
  }
  tpu_op_finish(c, g, dt);
}

const tpu_op_rule_t tpu_rules_padding[] = {
    {"constant_pad_nd", rule_constant_pad_nd, 2, 2},
    {"pad_mode", rule_pad_mode, 1, 1},
    {"pad_mode_backward", rule_pad_mode_backward, 1, 1},
    {NULL, NULL, 0, 0},
};
