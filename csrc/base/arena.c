#include "base/arena.h"

#include <stdlib.h>
#include <string.h>

struct tpu_arena_block {
  tpu_arena_block_t *next;
  size_t size;
  size_t used;
  /* data follows, 16-byte aligned */
};

#define TPU_ARENA_HDR ((sizeof(tpu_arena_block_t) + 15) & ~(size_t)15)

void tpu_arena_init(tpu_arena_t *a, size_t block_size) {
  a->head = NULL;
  a->block_size = block_size ? block_size : 16384;
  a->total = 0;
}

void *tpu_arena_alloc(tpu_arena_t *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  tpu_arena_block_t *b = a->head;
  if (!b || b->used + n > b->size) {
    size_t sz = a->block_size > n ? a->block_size : n;
    b = (tpu_arena_block_t *)malloc(TPU_ARENA_HDR + sz);
    if (!b) return NULL;
    b->size = sz;
    b->used = 0;
    b->next = a->head;
    a->head = b;
  }
  void *p = (char *)b + TPU_ARENA_HDR + b->used;
  b->used += n;
  a->total += n;
  return p;
}

void *tpu_arena_zalloc(tpu_arena_t *a, size_t n) {
  void *p = tpu_arena_alloc(a, n);
  if (p) memset(p, 0, n);
  return p;
}

char *tpu_arena_strdup(tpu_arena_t *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)tpu_arena_alloc(a, n);
  if (p) memcpy(p, s, n);
  return p;
}

void tpu_arena_reset(tpu_arena_t *a) {
  tpu_arena_block_t *b = a->head;
  if (!b) return;
  /* keep the last allocated (largest recent) block only */
  tpu_arena_block_t *rest = b->next;
  while (rest) {
    tpu_arena_block_t *n = rest->next;
    free(rest);
    rest = n;
  }
  b->next = NULL;
  b->used = 0;
  a->total = 0;
}

void tpu_arena_free(tpu_arena_t *a) {
  tpu_arena_block_t *b = a->head;
  while (b) {
    tpu_arena_block_t *n = b->next;
    free(b);
    b = n;
  }
  a->head = NULL;
  a->total = 0;
}
