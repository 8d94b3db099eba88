/* paged_attention.c - ragged paged attention as a host kernel (kernels.h).
 *
 * The inputs are those of the StableHLO kernel of torch_tpu/vllm/ragged.py:
 * the step's queries cut into items of TQ rows of one request, each item
 * with its request's block table and each row's position.  Per item and KV
 * head, the rows of the heads that share it (TQ x G query vectors) are
 * scored against every key up to the item's farthest position in one pass
 * over its blocks (a key is read once for all of them), softmaxed per row
 * with the causal test (key position <= row position), and the values are
 * summed with those weights in a second pass.  Items past the step's
 * groups are padding: their rows are zero.  Block ids are clamped to the
 * cache, so a bad table reads the wrong block, never outside the cache.
 *
 * Items are split between two threads when a call has enough work (the
 * XLA CPU plugin calls a host kernel on one of its threads).
 *
 * On x86-64 this file is built for AVX2 and FMA (Makefile) and registered
 * only on machines that have them (kernels.c); its vectors are GCC/Clang
 * vector extensions, 8 floats wide.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

typedef struct {
  const float *q;          /* the step's queries [num_tokens, hq, d] */
  const int64_t *q_index;  /* [n_items, tq]: the token of each item row */
  int64_t num_tokens;
  const void *kv;
  const int32_t *tables;
  const int32_t *q_pos;
  float *out;
  int64_t n_items, tq, hq, d, nb, bs, hkv, mb;
  int kind; /* 0: float32 cache, 1: bfloat16 bits, 2: float16 bits */
  float scale;
  int64_t first, last; /* items of this worker */
} pa_job_t;

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

/* The key (or value) of head h at token slot `off` of block `blk`, as floats. */
static const float *kv_row(const pa_job_t *j, int64_t blk, int64_t off, int64_t h, int64_t part, float *tmp) {
  int64_t base = ((blk * j->bs + off) * j->hkv + h) * 2 * j->d + part * j->d;
  if (j->kind == 0) return (const float *)j->kv + base;
  const uint16_t *src = (const uint16_t *)j->kv + base;
  if (j->kind == 1) {
    for (int64_t e = 0; e < j->d; e++) {
      uint32_t bits = (uint32_t)src[e] << 16;
      memcpy(&tmp[e], &bits, sizeof(float));
    }
  } else {
    for (int64_t e = 0; e < j->d; e++) tmp[e] = half_to_float(src[e]);
  }
  return tmp;
}

#define PA_MAX_D 512 /* head sizes up to this (the caller checks) */

/* 8 floats at a time (GCC/Clang vector extensions: two SSE or one AVX
 * register), in a fixed order, so results do not depend on the build. */
typedef float v8f __attribute__((vector_size(32)));

typedef int32_t v8i __attribute__((vector_size(32)));

/* e^x for x <= 0 (the softmax's shifted scores), 8 at a time: 2^n 2^f with
 * x log2(e) = n + f, |f| <= 1/2, 2^f by its Taylor polynomial of degree 6
 * (relative error under 2e-7); x below -87 (and -inf) gives 0. */
static inline __attribute__((always_inline)) v8f exp8(v8f x) {
  const v8f magic = {12582912.f, 12582912.f, 12582912.f, 12582912.f,
                     12582912.f, 12582912.f, 12582912.f, 12582912.f}; /* 1.5 * 2^23: rounds to integers */
  v8i small = x < -87.f;
  x = (v8f)((v8i)x & ~small); /* 0 where small (masked out below) */
  v8f t = x * 1.44269504f;
  v8f r = (t + magic) - magic;
  v8f f = t - r;
  v8f p = 1.f + f * (0.693147181f + f * (0.240226507f + f * (0.0555041087f + f * (0.00961812911f +
                     f * (0.00133335581f + f * 0.000154035304f)))));
  v8i n = __builtin_convertvector(r, v8i);
  v8i bits = (v8i)p + (n << 23);
  return (v8f)(bits & ~small);
}

#ifdef __clang__
#define PA_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define PA_SHUF(a, b, ...) __builtin_shuffle(a, b, (v8i){__VA_ARGS__})
#endif

/* {sum(v[0]), ..., sum(v[7])}: three levels of pairwise shuffles and adds */
static inline __attribute__((always_inline)) v8f sums8(const v8f *v) {
  v8f t[4], u[2];
  for (int p = 0; p < 4; p++)
    t[p] = PA_SHUF(v[2 * p], v[2 * p + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           PA_SHUF(v[2 * p], v[2 * p + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  for (int p = 0; p < 2; p++)
    u[p] = PA_SHUF(t[2 * p], t[2 * p + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           PA_SHUF(t[2 * p], t[2 * p + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  return PA_SHUF(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11) + PA_SHUF(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

/* The query row of item i's row t (its token's; a bad index reads token 0). */
static inline const float *qrow(const pa_job_t *j, int64_t i, int64_t t) {
  int64_t tok = j->q_index[i * j->tq + t];
  if (tok < 0 || tok >= j->num_tokens) tok = 0;
  return j->q + tok * j->hq * j->d;
}

static void item(const pa_job_t *j, int64_t i, float *scores, float *tmp) {
  const int64_t tq = j->tq, hq = j->hq, d = j->d, g = hq / j->hkv, rows = tq * g;
  const int32_t *pos = j->q_pos + i * tq;
  int64_t reach = 0;
  for (int64_t t = 0; t < tq; t++)
    if (pos[t] + 1 > reach) reach = pos[t] + 1;
  if (reach > j->mb * j->bs) reach = j->mb * j->bs;
  const int32_t *table = j->tables + i * j->mb;
  const int64_t stride = (reach + 7) & ~(int64_t)7; /* a row of scores, whole vectors */
  for (int64_t h = 0; h < j->hkv; h++) {
    /* scores[r][key], r = t * g + k: row t, query head h * g + k.  Keys go
     * 8 at a time: their components transposed (kt[e] = component e of the
     * 8 keys), each row's 8 scores are d vector multiply-adds of a query
     * component by kt[e], no horizontal sums. */
    for (int64_t k0 = 0; k0 < reach; k0 += 8) {
      int64_t nk = reach - k0 < 8 ? reach - k0 : 8;
      if (rows < 8 && d % 8 == 0) {
        /* few rows (decodes): per row, 8 keys' partial products side by
         * side over d, then summed across (sums8); keys read in place */
        const float *kp[8];
        for (int64_t kk = 0; kk < 8; kk++) {
          int64_t key = k0 + (kk < nk ? kk : 0), blk = table[key / j->bs];
          if (blk < 0 || blk >= j->nb) blk = 0;
          kp[kk] = kv_row(j, blk, key % j->bs, h, 0, tmp + kk * d);
        }
        for (int64_t r = 0; r < rows; r++) {
          const float *qv = qrow(j, i, r / g) + (h * g + r % g) * d;
          v8f acc[8] = {{0}};
          for (int64_t e = 0; e < d; e += 8) {
            v8f x;
            memcpy(&x, qv + e, sizeof(x));
            for (int kk = 0; kk < 8; kk++) {
              v8f y;
              memcpy(&y, kp[kk] + e, sizeof(y));
              acc[kk] += x * y;
            }
          }
          v8f sc = sums8(acc);
          float *sr = &scores[r * stride + k0];
          int64_t t = r / g;
          for (int64_t kk = 0; kk < 8; kk++) sr[kk] = k0 + kk <= pos[t] && kk < nk ? sc[kk] * j->scale : -INFINITY;
        }
        continue;
      }
      v8f kt[PA_MAX_D];
      memset(kt, 0, (size_t)d * sizeof(v8f));
      for (int64_t kk = 0; kk < nk; kk++) {
        int64_t key = k0 + kk, blk = table[key / j->bs];
        if (blk < 0 || blk >= j->nb) blk = 0;
        const float *kvec = kv_row(j, blk, key % j->bs, h, 0, tmp);
        for (int64_t e = 0; e < d; e++) kt[e][kk] = kvec[e];
      }
      /* 4 rows at a time: 4 independent chains of multiply-adds, each
       * kt[e] loaded once for them (a row past the last repeats it) */
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const float *qv[4];
        for (int64_t u = 0; u < 4; u++) {
          int64_t r = r0 + u < rows ? r0 + u : r0;
          qv[u] = qrow(j, i, r / g) + (h * g + r % g) * d;
        }
        v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int64_t e = 0; e < d; e++) {
          v8f kv = kt[e];
          a0 += qv[0][e] * kv;
          a1 += qv[1][e] * kv;
          a2 += qv[2][e] * kv;
          a3 += qv[3][e] * kv;
        }
        v8f acc[4] = {a0, a1, a2, a3};
        for (int64_t u = 0; u < 4 && r0 + u < rows; u++) {
          int64_t r = r0 + u, t = r / g;
          float *s = &scores[r * stride + k0];
          for (int64_t kk = 0; kk < 8; kk++)
            s[kk] = k0 + kk <= pos[t] && kk < nk ? acc[u][kk] * j->scale : -INFINITY;
        }
      }
    }
    /* softmax per row, 8 scores at a time (a row is whole vectors: its
     * padding past reach is -inf, weight 0) */
    for (int64_t r = 0; r < rows; r++) {
      float *s = &scores[r * stride], m = -INFINITY;
      for (int64_t key = 0; key < reach; key++) m = s[key] > m ? s[key] : m;
      v8f acc = {0};
      for (int64_t k0 = 0; k0 < stride; k0 += 8) {
        v8f x;
        memcpy(&x, s + k0, sizeof(x));
        x = exp8(x - m);
        acc += x;
        memcpy(s + k0, &x, sizeof(x));
      }
      float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      float inv = sum > 0.f ? 1.f / sum : 0.f;
      for (int64_t key = 0; key < reach; key++) s[key] *= inv;
    }
    for (int64_t r = 0; r < rows; r++) {
      int64_t t = r / g, k = r % g;
      memset(j->out + ((i * tq + t) * hq + h * g + k) * d, 0, (size_t)d * sizeof(float));
    }
    /* values: 4 keys at a time, so a row's output is loaded and stored
     * once per 4 keys */
    for (int64_t k0 = 0; k0 < reach; k0 += 4) {
      int64_t nk = reach - k0 < 4 ? reach - k0 : 4;
      const float *vv[4];
      for (int64_t kk = 0; kk < 4; kk++) {
        int64_t key = k0 + (kk < nk ? kk : 0), blk = table[key / j->bs];
        if (blk < 0 || blk >= j->nb) blk = 0;
        vv[kk] = kv_row(j, blk, key % j->bs, h, 1, tmp + kk * d);
      }
      for (int64_t r = 0; r < rows; r++) {
        const float *pr = &scores[r * stride + k0];
        float p0 = pr[0], p1 = nk > 1 ? pr[1] : 0.f, p2 = nk > 2 ? pr[2] : 0.f, p3 = nk > 3 ? pr[3] : 0.f;
        if (p0 == 0.f && p1 == 0.f && p2 == 0.f && p3 == 0.f) continue;
        float *o = j->out + ((i * tq + r / g) * hq + h * g + r % g) * d;
        int64_t e = 0;
        for (; e + 8 <= d; e += 8) {
          v8f x, y0, y1, y2, y3;
          memcpy(&x, o + e, sizeof(x));
          memcpy(&y0, vv[0] + e, sizeof(x));
          memcpy(&y1, vv[1] + e, sizeof(x));
          memcpy(&y2, vv[2] + e, sizeof(x));
          memcpy(&y3, vv[3] + e, sizeof(x));
          x += p0 * y0 + p1 * y1 + p2 * y2 + p3 * y3;
          memcpy(o + e, &x, sizeof(x));
        }
        for (; e < d; e++) o[e] += p0 * vv[0][e] + p1 * vv[1][e] + p2 * vv[2][e] + p3 * vv[3][e];
      }
    }
  }
}

typedef struct {
  pa_job_t job;
  float *scores, *tmp; /* scratch: rows x the longest reach, and 8 converted keys */
} pa_worker_t;

static void *run_items(void *arg) {
  pa_worker_t *w = (pa_worker_t *)arg;
  for (int64_t i = w->job.first; i < w->job.last; i++) item(&w->job, i, w->scores, w->tmp);
  return NULL;
}

/* calls and their time, for profiles (tpu_kernels_stats) */
static _Atomic int64_t pa_calls, pa_ns;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void paged_attention(const tpu_pjrt_ffi_call_t *c);

void *tpu_kernel_paged_attention_ffi(void *frame) {
  tpu_pjrt_ffi_call_t c;
  if (!tpu_pjrt_ffi_decode(frame, &c)) return NULL;
  int64_t t0 = now_ns();
  paged_attention(&c);
  atomic_fetch_add(&pa_ns, now_ns() - t0);
  atomic_fetch_add(&pa_calls, 1);
  return NULL;
}

/* One variant's items (rows into j.out, [n_items * tq, hq, d]); `used`
 * items are real, the rest padding (zero rows). */
static void run_variant(pa_job_t j, int64_t used) {
  int64_t row = j.tq * j.hq * j.d;
  memset(j.out + used * row, 0, (size_t)((j.n_items - used) * row) * sizeof(float));
  /* two workers when the items read enough keys to pay for a thread */
  int64_t work = 0;
  for (int64_t i = 0; i < used; i++)
    for (int64_t t = 0; t < j.tq; t++) work += j.q_pos[i * j.tq + t] + 1;
  size_t per = (size_t)(j.tq * (j.hq / j.hkv) * ((j.mb * j.bs + 7) & ~(int64_t)7) + 8 * j.d);
  float *scratch = malloc(2 * per * sizeof(float));
  if (!scratch) { /* no silent answer: rows of NaN */
    for (int64_t e = 0; e < used * row; e++) j.out[e] = NAN;
    return;
  }
  pa_worker_t w[2] = {{.job = j, .scores = scratch, .tmp = scratch + per - 8 * j.d},
                      {.job = j, .scores = scratch + per, .tmp = scratch + 2 * per - 8 * j.d}};
  pthread_t th;
  int threaded = 0;
  if (used > 1 && work * j.hq * j.d > (1 << 18)) {
    w[1].job.first = used / 2;
    w[1].job.last = used;
    threaded = pthread_create(&th, NULL, run_items, &w[1]) == 0;
  }
  w[0].job.first = 0;
  w[0].job.last = threaded ? used / 2 : used;
  run_items(&w[0]);
  if (threaded) pthread_join(th, NULL);
  free(scratch);
}

/* Operands (kernels.h): query, kv, out_index, params, then five per
 * variant.  The shapes were checked by the caller (ragged.py); a call that
 * does not match leaves its result unwritten only where it cannot be read
 * safely, and fills it with NaN otherwise. */
static void paged_attention(const tpu_pjrt_ffi_call_t *c) {
  if (c->num_args < 9 || (c->num_args - 4) % 5 || c->num_rets < 1) return;
  const tpu_pjrt_ffi_buffer_t *q = &c->args[0], *kv = &c->args[1], *oi = &c->args[2], *params = &c->args[3],
                              *out = &c->rets[0];
  int64_t T = q->dims[0], hq = q->dims[1], d = q->dims[2], hkv = kv->dims[2];
  float *res = out->data;
  if (hkv <= 0 || hq % hkv || kv->dims[3] != 2 * d || d > PA_MAX_D || oi->dims[0] != T) {
    for (int64_t e = 0; e < out->numel; e++) res[e] = NAN;
    return;
  }
  int nvar = (c->num_args - 4) / 5;
  int64_t total = 0; /* rows of every variant, one after another */
  for (int v = 0; v < nvar; v++) total += c->args[4 + 5 * v].numel;
  float *rows = malloc((size_t)(total > 0 ? total : 1) * (size_t)(hq * d) * sizeof(float));
  if (!rows) {
    for (int64_t e = 0; e < out->numel; e++) res[e] = NAN;
    return;
  }
  int64_t base = 0;
  for (int v = 0; v < nvar; v++) {
    const tpu_pjrt_ffi_buffer_t *qi = &c->args[4 + 5 * v], *pos = &c->args[5 + 5 * v], *tab = &c->args[6 + 5 * v],
                                *chunks = &c->args[7 + 5 * v], *groups = &c->args[8 + 5 * v];
    pa_job_t j = {.q = q->data,
                  .q_index = qi->data,
                  .num_tokens = T,
                  .kv = kv->data,
                  .tables = tab->data,
                  .q_pos = pos->data,
                  .out = rows + base * hq * d,
                  .n_items = qi->dims[0],
                  .tq = qi->dims[1],
                  .hq = hq,
                  .d = d,
                  .nb = kv->dims[0],
                  .bs = kv->dims[1],
                  .hkv = hkv,
                  .mb = tab->dims[1],
                  .scale = ((const float *)params->data)[0],
                  .kind = (int)((const float *)params->data)[1]};
    int64_t width = chunks->dims[0] > 0 ? j.n_items / chunks->dims[0] : j.n_items;
    int64_t used = (int64_t)((const int32_t *)groups->data)[0] * width;
    if (used < 0) used = 0;
    if (used > j.n_items) used = j.n_items;
    run_variant(j, used);
    base += qi->numel;
  }
  /* each token's row: out[t] = rows[out_index[t]] */
  const int64_t *index = oi->data;
  for (int64_t t = 0; t < T; t++) {
    int64_t r = index[t];
    if (r < 0 || r >= total) r = 0;
    memcpy(res + t * hq * d, rows + r * hq * d, (size_t)(hq * d) * sizeof(float));
  }
  free(rows);
}

void tpu_kernels_stats(const char *name, int64_t *out_calls, int64_t *out_ns) {
  *out_calls = *out_ns = 0;
  if (strcmp(name, TPU_KERNEL_PAGED_ATTENTION)) return;
  *out_calls = atomic_load(&pa_calls);
  *out_ns = atomic_load(&pa_ns);
}
