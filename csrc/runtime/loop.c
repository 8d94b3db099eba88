/* loop.c - fused mode: cutting a long loop's graph at its period.
 *
 * A Python loop over time steps (an LSTMCell over 1000 steps, an unrolled
 * recurrence, the backward of either) records the same ops again and again
 * into one pending graph.  Left alone the graph grows to the size bound
 * (8192 ops), its windows start at drifting positions of the loop, so each
 * is another program, and XLA's compile time grows much faster than the
 * length of such a chain (an unrolled 25-step LSTMCell iteration took ~30 s,
 * 250 steps exhausted the memory).  Here the runtime notices the period and
 * cuts the graph at the same phase of it every time: every window after the
 * first is the same program, compiled once, and each is small.
 *
 * Each op gets a step signature: its rule, attributes and input types (the
 * signature cache's key) and, per input, how many ops back the value was
 * made (a value made more than LOOP_NEAR ops before, a parameter or a
 * number counts as "an input": the backward of a loop reads the forward's
 * activations from ever further back, and a step's own far inputs are far
 * in every step), so the n-th op of every step has the same
 * signature whatever graph the previous step landed in.  A hash of the last
 * LOOP_GRAM signatures finds an earlier position where the same run of ops
 * occurred; the distance is a candidate period, confirmed when the
 * signatures keep matching at that distance for LOOP_CONFIRM periods.  From
 * then on the graph is cut at the first op end past a period boundary once
 * it holds at least LOOP_WINDOW ops; a signature that no longer matches
 * ends the loop.  Runs shorter than LOOP_CONFIRM periods (a model's few
 * layers, a training step) are never cut.
 */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "runtime/runtime_internal.h"

#define LOOP_MAX_PERIOD 2048 /* ops of one step at most */
#define LOOP_GRAM 16
#define LOOP_TABLE 8192      /* gram hash -> position (overwritten) */
#define LOOP_CONFIRM 2       /* periods seen before the first cut */
#define LOOP_WINDOW 32      /* ops a window holds at least */
#define LOOP_NEAR 32        /* an input made further back counts as "an input" */

struct tpu_loop {
  int64_t pos;  /* ops observed on this device */
  int64_t base; /* pos at the last cut of another kind: what came before is "an input" */
  uint64_t sig[LOOP_MAX_PERIOD];
  uint64_t gram_key[LOOP_TABLE];
  int64_t gram_pos[LOOP_TABLE];
  int64_t period;    /* 0: no loop */
  int64_t matched;   /* consecutive ops that matched at distance period */
  int64_t anchor;    /* a period boundary (a position), once confirmed */
  int crossed;       /* a period boundary passed since the last loop_cut_due */
};

void loop_restart(tpu_graph_t *g) {
  tpu_loop_t *L = g->loop;
  if (!L) return;
  L->base = L->pos;
  L->period = L->matched = L->anchor = 0;
  L->crossed = 0;
}

void loop_free(tpu_graph_t *g) {
  free(g->loop);
  g->loop = NULL;
}

void loop_observe(tpu_graph_t *g, const tpu_node_t *node, uint64_t sig_key) {
  if (R.mode != TPU_MODE_FUSED) return;
  tpu_loop_t *L = g->loop;
  if (!L) {
    L = g->loop = (tpu_loop_t *)calloc(1, sizeof(*L));
    if (!L) return;
  }
  int64_t p = L->pos++;
  uint64_t s = tpu_hash_u64(sig_key, (uint64_t)node->nin);
  for (int i = 0; i < node->nin; i++) {
    tpu_ref_t r = node->in[i];
    const tpu_value_t *v = r < 0 ? g->inputs[-r - 1]
                                 : g->nodes[r / TPU_OP_MAX_OUTPUTS].outs[r % TPU_OP_MAX_OUTPUTS];
    int64_t back = v->made_at >= L->base ? p - v->made_at : -1;
    s = tpu_hash_u64(s, back >= 0 && back < LOOP_NEAR ? (uint64_t)back * 16 + (uint64_t)v->out_index : 0xFFFF);
  }
  L->sig[p % LOOP_MAX_PERIOD] = s;
  for (int o = 0; o < node->nout; o++) node->outs[o]->made_at = p;
  if (L->period) {
    if (L->sig[(p - L->period) % LOOP_MAX_PERIOD] == s) {
      L->matched++;
      if (!L->anchor && L->matched >= LOOP_CONFIRM * L->period) L->anchor = p + 1;
      if (L->anchor && (p + 1 - L->anchor) % L->period == 0) L->crossed = 1;
      return;
    }
    L->period = L->matched = L->anchor = 0; /* the loop ended */
  }
  if (p + 1 - L->base < LOOP_GRAM) return;
  uint64_t gram = TPU_HASH_SEED;
  for (int k = 0; k < LOOP_GRAM; k++) gram = tpu_hash_u64(gram, L->sig[(p - k) % LOOP_MAX_PERIOD]);
  size_t slot = (size_t)(gram % LOOP_TABLE);
  if (L->gram_key[slot] == gram && L->gram_pos[slot] >= L->base) {
    int64_t period = p - L->gram_pos[slot];
    if (period > 0 && period < LOOP_MAX_PERIOD / 2) {
      L->period = period;
      L->matched = LOOP_GRAM;
    }
  }
  L->gram_key[slot] = gram;
  L->gram_pos[slot] = p;
}

bool loop_cut_due(tpu_graph_t *g) {
  tpu_loop_t *L = g->loop;
  if (!L) return false;
  bool due = L->anchor && L->crossed && g->nnodes >= LOOP_WINDOW;
  L->crossed = 0;
  return due;
}
