/* test_ops_rnn.c - the RNN rules (csrc/ops/rnn.c) run on the real plugin and
 * compared with naive loops computed here in C.
 *
 * Cells: forward values against the formulas; backward against the CUDA
 * kernels' formulas written out per element.  Layers: forward values
 * (double precision) against a step-by-step loop, for every direction /
 * projection / packed-mask combination; backward against central finite
 * differences of that loop (so the reverse loop is checked against the
 * forward math, not against a second copy of the backward formulas).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "test_ops_util.h"
#include "tinytest.h"

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---- fused cells --------------------------------------------------------------- */

TT_TEST(ops_rnn_fused_lstm_cell_matches_formulas) {
  enum { B = 3, H = 4, G = 4 * H };
  double ig[B * G], hg[B * G], cx[B * H], bi[G], bh[G];
  opt_fill(ig, B * G, 1);
  opt_fill(hg, B * G, 2);
  opt_fill(cx, B * H, 3);
  opt_fill(bi, G, 4);
  opt_fill(bh, G, 5);
  double hy[B * H], cy[B * H], ws[B * G];
  for (int b = 0; b < B; b++)
    for (int j = 0; j < H; j++) {
      double a[4];
      for (int k = 0; k < 4; k++) {
        int q = b * G + k * H + j;
        double s = ig[q] + hg[q] + bi[k * H + j] + bh[k * H + j];
        a[k] = k == 2 ? tanh(s) : sig(s);
        ws[q] = a[k];
      }
      cy[b * H + j] = a[1] * cx[b * H + j] + a[0] * a[2];
      hy[b * H + j] = a[3] * tanh(cy[b * H + j]);
    }
  opt_in_t in[5] = {{TPU_F32, 2, {B, G}, ig}, {TPU_F32, 2, {B, G}, hg}, {TPU_F32, 2, {B, H}, cx},
                    {TPU_F32, 1, {G}, bi},    {TPU_F32, 1, {G}, bh}};
  opt_out_t o[3];
  int n = opt_run("_thnn_fused_lstm_cell", in, 5, NULL, 0, o, 3);
  TT_CHECK(n == 3);
  if (n != 3) return;
  TT_CHECK(o[0].rank == 2 && o[0].dims[0] == B && o[0].dims[1] == H && o[2].dims[1] == G);
  TT_CHECK(opt_close(o[0].v, hy, B * H, 1e-6));
  TT_CHECK(opt_close(o[1].v, cy, B * H, 1e-6));
  TT_CHECK(opt_close(o[2].v, ws, B * G, 1e-6));
  opt_free(o, 3);
}

TT_TEST(ops_rnn_fused_lstm_cell_backward_matches_formulas) {
  enum { B = 2, H = 3, G = 4 * H };
  double ghy[B * H], cx[B * H], cy[B * H], ws[B * G];
  opt_fill(ghy, B * H, 6);
  opt_fill(cx, B * H, 7);
  opt_fill(cy, B * H, 8);
  opt_fill(ws, B * G, 9);
  for (int i = 0; i < B * G; i++) ws[i] = 0.5 + 0.45 * ws[i]; /* activations in (0, 1) */
  /* grad_cy absent (zeros), has_bias */
  double gg[B * G], gcx[B * H], gb[G] = {0};
  for (int b = 0; b < B; b++)
    for (int j = 0; j < H; j++) {
      const double *a = ws + b * G;
      double i_ = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
      double go = ghy[b * H + j], t = tanh(cy[b * H + j]);
      double gc = go * o * (1 - t * t);
      gg[b * G + j] = gc * g * (1 - i_) * i_;
      gg[b * G + H + j] = gc * cx[b * H + j] * (1 - f) * f;
      gg[b * G + 2 * H + j] = gc * i_ * (1 - g * g);
      gg[b * G + 3 * H + j] = go * t * (1 - o) * o;
      gcx[b * H + j] = gc * f;
    }
  for (int b = 0; b < B; b++)
    for (int k = 0; k < G; k++) gb[k] += gg[b * G + k];
  opt_in_t in[4] = {{TPU_F64, 2, {B, H}, ghy}, {TPU_F64, 2, {B, H}, cx}, {TPU_F64, 2, {B, H}, cy},
                    {TPU_F64, 2, {B, G}, ws}};
  int64_t flags[3] = {1, 0, 1};
  opt_out_t o[3];
  int n = opt_run("_thnn_fused_lstm_cell_backward_impl", in, 4, flags, 3, o, 3);
  TT_CHECK(n == 3);
  if (n != 3) return;
  TT_CHECK(opt_close(o[0].v, gg, B * G, 1e-12));
  TT_CHECK(opt_close(o[1].v, gcx, B * H, 1e-12));
  TT_CHECK(opt_close(o[2].v, gb, G, 1e-12));
  opt_free(o, 3);
}

TT_TEST(ops_rnn_fused_gru_cell_forward_and_backward) {
  enum { B = 2, H = 3, G = 3 * H };
  double ig[B * G], hg[B * G], hx[B * H], bi[G], bh[G], go[B * H];
  opt_fill(ig, B * G, 11);
  opt_fill(hg, B * G, 12);
  opt_fill(hx, B * H, 13);
  opt_fill(bi, G, 14);
  opt_fill(bh, G, 15);
  opt_fill(go, B * H, 16);
  double hy[B * H], ws[B * 5 * H], gI[B * G], gH[B * G], ghx[B * H];
  for (int b = 0; b < B; b++)
    for (int j = 0; j < H; j++) {
      const double *x = ig + b * G, *h = hg + b * G;
      double r = sig(x[j] + bi[j] + h[j] + bh[j]);
      double z = sig(x[H + j] + bi[H + j] + h[H + j] + bh[H + j]);
      double hn = h[2 * H + j] + bh[2 * H + j];
      double nn = tanh(x[2 * H + j] + bi[2 * H + j] + r * hn);
      double hp = hx[b * H + j];
      hy[b * H + j] = nn + z * (hp - nn);
      double *w = ws + b * 5 * H;
      w[j] = r, w[H + j] = z, w[2 * H + j] = nn, w[3 * H + j] = hp, w[4 * H + j] = hn;
      double g = go[b * H + j];
      double gz = g * (hp - nn) * (1 - z) * z, gn = g * (1 - z) * (1 - nn * nn), gr = gn * hn * (1 - r) * r;
      gI[b * G + j] = gH[b * G + j] = gr;
      gI[b * G + H + j] = gH[b * G + H + j] = gz;
      gI[b * G + 2 * H + j] = gn;
      gH[b * G + 2 * H + j] = gn * r;
      ghx[b * H + j] = g * z;
    }
  opt_in_t in[5] = {{TPU_F64, 2, {B, G}, ig}, {TPU_F64, 2, {B, G}, hg}, {TPU_F64, 2, {B, H}, hx},
                    {TPU_F64, 1, {G}, bi},    {TPU_F64, 1, {G}, bh}};
  opt_out_t o[5];
  int n = opt_run("_thnn_fused_gru_cell", in, 5, NULL, 0, o, 2);
  TT_CHECK(n == 2);
  if (n != 2) return;
  TT_CHECK(opt_close(o[0].v, hy, B * H, 1e-12));
  TT_CHECK(opt_close(o[1].v, ws, B * 5 * H, 1e-12));
  opt_free(o, 2);
  opt_in_t bin[2] = {{TPU_F64, 2, {B, H}, go}, {TPU_F64, 2, {B, 5 * H}, ws}};
  int64_t has_bias = 1;
  n = opt_run("_thnn_fused_gru_cell_backward", bin, 2, &has_bias, 1, o, 5);
  TT_CHECK(n == 5);
  if (n != 5) return;
  TT_CHECK(opt_close(o[0].v, gI, B * G, 1e-12));
  TT_CHECK(opt_close(o[1].v, gH, B * G, 1e-12));
  TT_CHECK(opt_close(o[2].v, ghx, B * H, 1e-12));
  double sI[G] = {0}, sH[G] = {0};
  for (int b = 0; b < B; b++)
    for (int k = 0; k < G; k++) sI[k] += gI[b * G + k], sH[k] += gH[b * G + k];
  TT_CHECK(opt_close(o[3].v, sI, G, 1e-12));
  TT_CHECK(opt_close(o[4].v, sH, G, 1e-12));
  opt_free(o, 5);
}

TT_TEST(ops_rnn_fused_cells_reject_bad_shapes) {
  double z[64] = {0};
  opt_in_t in[3] = {{TPU_F32, 2, {2, 8}, z}, {TPU_F32, 2, {2, 12}, z}, {TPU_F32, 2, {2, 2}, z}};
  TT_CHECK(opt_lower_fails("_thnn_fused_lstm_cell", in, 3, NULL, 0, TPU_INVALID_ARGUMENT, "hidden_gates"));
  in[1].dims[1] = 8;
  in[2].dims[0] = 3;
  TT_CHECK(opt_lower_fails("_thnn_fused_lstm_cell", in, 3, NULL, 0, TPU_INVALID_ARGUMENT, "cx"));
  opt_in_t gi[3] = {{TPU_S64, 2, {2, 6}, z}, {TPU_S64, 2, {2, 6}, z}, {TPU_S64, 2, {2, 2}, z}};
  TT_CHECK(opt_lower_fails("_thnn_fused_gru_cell", gi, 3, NULL, 0, TPU_INVALID_ARGUMENT, "not implemented for"));
}

/* ---- layers: the reference loop ------------------------------------------------------ */

enum { K_LSTM, K_GRU, K_TANH, K_RELU };

typedef struct {
  int kind, T, B, H, P, G, reverse, proj, bias;
  const int64_t *bs; /* batch_sizes or NULL */
} lcfg_t;

/* Arguments of one layer (doubles): xg [T,B,G], whh [G,P], h0 [B,P], c0 [B,H],
 * whr [P,H], bhh [G]. */
typedef struct {
  double *xg, *whh, *h0, *c0, *whr, *bhh;
} largs_t;

/* y [T,B,P], hT [B,P], cT [B,H]. */
static void ref_layer(const lcfg_t *k, const largs_t *a, double *y, double *hT, double *cT) {
  int T = k->T, B = k->B, H = k->H, P = k->P, G = k->G;
  double h[16 * 16], c[16 * 16], hn[16], cn[16], gates[64], hc[16];
  memcpy(h, a->h0, sizeof(double) * (size_t)(B * P));
  if (k->kind == K_LSTM) memcpy(c, a->c0, sizeof(double) * (size_t)(B * H));
  for (int s = 0; s < T; s++) {
    int t = k->reverse ? T - 1 - s : s;
    for (int b = 0; b < B; b++) {
      int active = !k->bs || b < k->bs[t];
      const double *x = a->xg + ((size_t)t * B + b) * G, *hp = h + b * P;
      for (int g = 0; g < G; g++) {
        double acc = 0;
        for (int p = 0; p < P; p++) acc += hp[p] * a->whh[g * P + p];
        gates[g] = acc + (k->kind == K_GRU && k->bias ? a->bhh[g] : 0);
      }
      if (k->kind == K_LSTM) {
        for (int j = 0; j < H; j++) {
          double i_ = sig(x[j] + gates[j]), f = sig(x[H + j] + gates[H + j]);
          double g = tanh(x[2 * H + j] + gates[2 * H + j]), o = sig(x[3 * H + j] + gates[3 * H + j]);
          cn[j] = f * c[b * H + j] + i_ * g;
          hc[j] = o * tanh(cn[j]);
        }
        for (int p = 0; p < P; p++) {
          double v = 0;
          if (k->proj)
            for (int j = 0; j < H; j++) v += hc[j] * a->whr[p * H + j];
          else
            v = hc[p];
          hn[p] = v;
        }
      } else if (k->kind == K_GRU) {
        for (int j = 0; j < H; j++) {
          double r = sig(x[j] + gates[j]), z = sig(x[H + j] + gates[H + j]);
          double n = tanh(x[2 * H + j] + r * gates[2 * H + j]);
          hn[j] = n + z * (hp[j] - n);
        }
      } else {
        for (int j = 0; j < H; j++) {
          double v = gates[j] + x[j];
          hn[j] = k->kind == K_RELU ? (v > 0 ? v : 0) : tanh(v);
        }
      }
      double *yt = y + ((size_t)t * B + b) * P;
      for (int p = 0; p < P; p++) {
        yt[p] = active ? hn[p] : 0;
        if (active) h[b * P + p] = hn[p];
      }
      if (k->kind == K_LSTM && active)
        for (int j = 0; j < H; j++) c[b * H + j] = cn[j];
    }
  }
  memcpy(hT, h, sizeof(double) * (size_t)(B * P));
  if (k->kind == K_LSTM) memcpy(cT, c, sizeof(double) * (size_t)(B * H));
}

static const char *const k_rule[] = {"lstm_layer", "gru_layer", "rnn_layer", "rnn_layer"};
static const char *const k_rule_bwd[] = {"lstm_layer_backward", "gru_layer_backward", "rnn_layer_backward",
                                         "rnn_layer_backward"};

static void lcfg_attrs(const lcfg_t *k, int64_t *ints) {
  ints[0] = k->reverse;
  ints[1] = k->kind == K_LSTM ? k->proj : k->kind == K_GRU ? k->bias : k->kind == K_RELU;
  ints[2] = k->bs != NULL;
}

/* The forward rule's inputs in its order. */
static int layer_inputs(const lcfg_t *k, const largs_t *a, opt_in_t *in, double *bsd) {
  int T = k->T, B = k->B, H = k->H, P = k->P, G = k->G, n = 0;
  in[n++] = (opt_in_t){TPU_F64, 3, {T, B, G}, a->xg};
  in[n++] = (opt_in_t){TPU_F64, 2, {G, P}, a->whh};
  in[n++] = (opt_in_t){TPU_F64, 2, {B, P}, a->h0};
  if (k->kind == K_LSTM) in[n++] = (opt_in_t){TPU_F64, 2, {B, H}, a->c0};
  if (k->kind == K_LSTM && k->proj) in[n++] = (opt_in_t){TPU_F64, 2, {P, H}, a->whr};
  if (k->kind == K_GRU && k->bias) in[n++] = (opt_in_t){TPU_F64, 1, {G}, a->bhh};
  if (k->bs) {
    for (int t = 0; t < T; t++) bsd[t] = (double)k->bs[t];
    in[n++] = (opt_in_t){TPU_S64, 1, {T}, bsd};
  }
  return n;
}

static void layer_alloc(const lcfg_t *k, largs_t *a, unsigned seed) {
  int T = k->T, B = k->B, H = k->H, P = k->P, G = k->G;
  a->xg = calloc((size_t)(T * B * G), sizeof(double));
  a->whh = calloc((size_t)(G * P), sizeof(double));
  a->h0 = calloc((size_t)(B * P), sizeof(double));
  a->c0 = calloc((size_t)(B * H), sizeof(double));
  a->whr = calloc((size_t)(P * H), sizeof(double));
  a->bhh = calloc((size_t)G, sizeof(double));
  opt_fill(a->xg, T * B * G, seed);
  opt_fill(a->whh, G * P, seed + 1);
  opt_fill(a->h0, B * P, seed + 2);
  opt_fill(a->c0, B * H, seed + 3);
  opt_fill(a->whr, P * H, seed + 4);
  opt_fill(a->bhh, G, seed + 5);
}

static void layer_free(largs_t *a) {
  free(a->xg), free(a->whh), free(a->h0), free(a->c0), free(a->whr), free(a->bhh);
}

static void check_layer_forward(const lcfg_t *k) {
  int T = k->T, B = k->B, H = k->H, P = k->P;
  largs_t a;
  layer_alloc(k, &a, 100 + (unsigned)k->kind * 7 + (unsigned)k->reverse);
  double y[256], hT[64], cT[64], bsd[16];
  ref_layer(k, &a, y, hT, cT);
  opt_in_t in[8];
  int nin = layer_inputs(k, &a, in, bsd);
  int64_t ints[3];
  lcfg_attrs(k, ints);
  opt_out_t o[6];
  int n = opt_run(k_rule[k->kind], in, nin, ints, 3, o, 6);
  int want_n = k->kind == K_LSTM ? 6 : k->kind == K_GRU ? 4 : 3;
  TT_CHECK(n == want_n);
  if (n == want_n) {
    if (!opt_close(o[0].v, y, T * B * P, 1e-12) || !opt_close(o[1].v, hT, B * P, 1e-12) ||
        (k->kind == K_LSTM && !opt_close(o[2].v, cT, B * H, 1e-12))) {
      fprintf(stderr, "  %s: reverse %d proj %d bias %d packed %d differs\n", k_rule[k->kind], k->reverse, k->proj,
              k->bias, k->bs != NULL);
      tt_failed_checks++;
    }
  }
  if (n > 0) opt_free(o, n);
  layer_free(&a);
}

/* L = sum(gy*y) + sum(ghT*hT) + sum(gcT*cT) with the reference loop. */
static double ref_loss(const lcfg_t *k, const largs_t *a, const double *gy, const double *ghT, const double *gcT) {
  double y[256], hT[64], cT[64];
  ref_layer(k, a, y, hT, cT);
  double s = 0;
  for (int i = 0; i < k->T * k->B * k->P; i++) s += gy[i] * y[i];
  for (int i = 0; i < k->B * k->P; i++) s += ghT[i] * hT[i];
  if (k->kind == K_LSTM)
    for (int i = 0; i < k->B * k->H; i++) s += gcT[i] * cT[i];
  return s;
}

/* d loss / d v[i] for every element of v, by central differences. */
static void fd_grad(const lcfg_t *k, largs_t *a, double *v, int n, const double *gy, const double *ghT,
                    const double *gcT, double *out) {
  const double eps = 1e-6;
  for (int i = 0; i < n; i++) {
    double keep = v[i];
    v[i] = keep + eps;
    double lp = ref_loss(k, a, gy, ghT, gcT);
    v[i] = keep - eps;
    double lm = ref_loss(k, a, gy, ghT, gcT);
    v[i] = keep;
    out[i] = (lp - lm) / (2 * eps);
  }
}

typedef struct {
  double *v;       /* the argument perturbed */
  int n, out;      /* its element count, the backward output that is its gradient */
  const char *name;
} gradchk_t;

static void check_layer_backward(const lcfg_t *k) {
  int T = k->T, B = k->B, H = k->H, P = k->P, G = k->G;
  largs_t a;
  layer_alloc(k, &a, 200 + (unsigned)k->kind * 7 + (unsigned)k->reverse);
  double gy[256], ghT[64], gcT[64], bsd[16];
  opt_fill(gy, T * B * P, 31);
  opt_fill(ghT, B * P, 32);
  opt_fill(gcT, B * H, 33);
  opt_in_t in[8];
  int nin = layer_inputs(k, &a, in, bsd);
  int64_t ints[3];
  lcfg_attrs(k, ints);
  opt_out_t fo[6], bo[5];
  int nf = opt_run(k_rule[k->kind], in, nin, ints, 3, fo, 6);
  if (nf < 3) {
    TT_CHECK(nf >= 3);
    if (nf > 0) opt_free(fo, nf);
    layer_free(&a);
    return;
  }
  /* the backward rule's inputs, saved tensors from the forward outputs */
  opt_in_t bi[10];
  int nb = 0;
  bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, P}, gy};
  bi[nb++] = (opt_in_t){TPU_F64, 2, {B, P}, ghT};
  if (k->kind == K_LSTM) {
    bi[nb++] = (opt_in_t){TPU_F64, 2, {B, H}, gcT};
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, G}, fo[3].v};
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, P}, fo[4].v};
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, H}, fo[5].v};
    bi[nb++] = (opt_in_t){TPU_F64, 2, {G, P}, a.whh};
    if (k->proj) bi[nb++] = (opt_in_t){TPU_F64, 2, {P, H}, a.whr};
  } else if (k->kind == K_GRU) {
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, 4 * H}, fo[2].v};
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, H}, fo[3].v};
    bi[nb++] = (opt_in_t){TPU_F64, 2, {G, H}, a.whh};
  } else {
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, H}, fo[0].v};
    bi[nb++] = (opt_in_t){TPU_F64, 3, {T, B, H}, fo[2].v};
    bi[nb++] = (opt_in_t){TPU_F64, 2, {G, H}, a.whh};
  }
  if (k->bs) bi[nb++] = (opt_in_t){TPU_S64, 1, {T}, bsd};
  int n = opt_run(k_rule_bwd[k->kind], bi, nb, ints, 3, bo, 5);
  opt_free(fo, nf);
  /* outputs: lstm (gxg, gh0, gc0, gwhh, [gwhr]); gru (gxg, gh0, gwhh, [gbhh]); rnn (gxg, gh0, gwhh) */
  int want_n = k->kind == K_LSTM ? 4 + k->proj : k->kind == K_GRU ? 3 + k->bias : 3;
  TT_CHECK(n == want_n);
  if (n == want_n) {
    double fd[512];
    gradchk_t chk[6];
    int nc = 0;
    chk[nc++] = (gradchk_t){a.xg, T * B * G, 0, "xg"};
    chk[nc++] = (gradchk_t){a.h0, B * P, 1, "h0"};
    if (k->kind == K_LSTM) {
      chk[nc++] = (gradchk_t){a.c0, B * H, 2, "c0"};
      chk[nc++] = (gradchk_t){a.whh, G * P, 3, "w_hh"};
      if (k->proj) chk[nc++] = (gradchk_t){a.whr, P * H, 4, "w_hr"};
    } else {
      chk[nc++] = (gradchk_t){a.whh, G * H, 2, "w_hh"};
      if (k->kind == K_GRU && k->bias) chk[nc++] = (gradchk_t){a.bhh, G, 3, "b_hh"};
    }
    for (int i = 0; i < nc; i++) {
      fd_grad(k, &a, chk[i].v, chk[i].n, gy, ghT, gcT, fd);
      if (!opt_close(bo[chk[i].out].v, fd, chk[i].n, 1e-6)) {
        fprintf(stderr, "  %s: grad of %s (reverse %d proj %d bias %d packed %d) differs from finite differences\n",
                k_rule_bwd[k->kind], chk[i].name, k->reverse, k->proj, k->bias, k->bs != NULL);
        tt_failed_checks++;
      }
    }
  }
  if (n > 0) opt_free(bo, n);
  layer_free(&a);
}

static const int64_t k_bs[4] = {3, 3, 2, 1}; /* T = 4, B = 3 */

static lcfg_t lcfg(int kind, int reverse, int proj, int bias, int packed) {
  lcfg_t k = {.kind = kind, .T = 4, .B = 3, .H = 3, .reverse = reverse, .proj = proj, .bias = bias,
              .bs = packed ? k_bs : NULL};
  k.P = proj ? 2 : k.H;
  k.G = (kind == K_LSTM ? 4 : kind == K_GRU ? 3 : 1) * k.H;
  return k;
}

TT_TEST(ops_rnn_lstm_layer_matches_loop) {
  for (int rev = 0; rev < 2; rev++)
    for (int proj = 0; proj < 2; proj++)
      for (int packed = 0; packed < 2; packed++) {
        lcfg_t k = lcfg(K_LSTM, rev, proj, 1, packed);
        check_layer_forward(&k);
      }
}

TT_TEST(ops_rnn_gru_and_rnn_layers_match_loop) {
  for (int rev = 0; rev < 2; rev++)
    for (int packed = 0; packed < 2; packed++) {
      lcfg_t g = lcfg(K_GRU, rev, 0, 1, packed), g0 = lcfg(K_GRU, rev, 0, 0, packed);
      lcfg_t t = lcfg(K_TANH, rev, 0, 0, packed), r = lcfg(K_RELU, rev, 0, 0, packed);
      check_layer_forward(&g);
      check_layer_forward(&g0);
      check_layer_forward(&t);
      check_layer_forward(&r);
    }
}

TT_TEST(ops_rnn_lstm_layer_backward_matches_finite_differences) {
  lcfg_t a = lcfg(K_LSTM, 0, 0, 1, 0), b = lcfg(K_LSTM, 1, 1, 1, 1), c = lcfg(K_LSTM, 0, 1, 1, 1);
  check_layer_backward(&a);
  check_layer_backward(&b);
  check_layer_backward(&c);
}

TT_TEST(ops_rnn_gru_and_rnn_layer_backward_match_finite_differences) {
  lcfg_t g = lcfg(K_GRU, 1, 0, 1, 1), g0 = lcfg(K_GRU, 0, 0, 0, 0);
  lcfg_t t = lcfg(K_TANH, 0, 0, 0, 1), r = lcfg(K_RELU, 1, 0, 0, 0);
  check_layer_backward(&g);
  check_layer_backward(&g0);
  check_layer_backward(&t);
  check_layer_backward(&r);
}

TT_TEST(ops_rnn_layers_reject_bad_shapes) {
  double z[256] = {0};
  int64_t ints[3] = {0, 0, 0};
  /* c0 of the wrong hidden size */
  opt_in_t in[4] = {{TPU_F32, 3, {4, 2, 12}, z}, {TPU_F32, 2, {12, 3}, z}, {TPU_F32, 2, {2, 3}, z},
                    {TPU_F32, 2, {2, 4}, z}};
  TT_CHECK(opt_lower_fails("lstm_layer", in, 4, ints, 3, TPU_INVALID_ARGUMENT, "c0"));
  /* gates not a multiple of 4 */
  in[0].dims[2] = 10;
  TT_CHECK(opt_lower_fails("lstm_layer", in, 4, ints, 3, TPU_INVALID_ARGUMENT, "4 * hidden"));
  /* a batch_sizes flag without the input */
  int64_t packed[3] = {0, 0, 1};
  opt_in_t gin[3] = {{TPU_F32, 3, {4, 2, 9}, z}, {TPU_F32, 2, {9, 3}, z}, {TPU_F32, 2, {2, 3}, z}};
  TT_CHECK(opt_lower_fails("gru_layer", gin, 3, packed, 3, TPU_INVALID_ARGUMENT, "expected 4 inputs"));
  /* batch_sizes of the wrong length */
  opt_in_t rin[4] = {{TPU_F32, 3, {4, 2, 3}, z}, {TPU_F32, 2, {3, 3}, z}, {TPU_F32, 2, {2, 3}, z},
                     {TPU_S64, 1, {3}, z}};
  TT_CHECK(opt_lower_fails("rnn_layer", rin, 4, packed, 3, TPU_INVALID_ARGUMENT, "batch_sizes"));
}
