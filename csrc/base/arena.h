/* arena.h - a bump allocator: many small allocations, one free (ggml's
 * context habit).  A StableHLO module under construction lives in one arena.
 */
#ifndef TPU_BASE_ARENA_H_
#define TPU_BASE_ARENA_H_

#include <stddef.h>

typedef struct tpu_arena_block tpu_arena_block_t;

typedef struct tpu_arena {
  tpu_arena_block_t *head;
  size_t block_size;
  size_t total; /* bytes handed out */
} tpu_arena_t;

void tpu_arena_init(tpu_arena_t *a, size_t block_size);
/* 16-byte aligned; NULL only when the host is out of memory. */
void *tpu_arena_alloc(tpu_arena_t *a, size_t n);
void *tpu_arena_zalloc(tpu_arena_t *a, size_t n);
char *tpu_arena_strdup(tpu_arena_t *a, const char *s);
void tpu_arena_reset(tpu_arena_t *a); /* frees all but keeps the first block */
void tpu_arena_free(tpu_arena_t *a);

#endif /* TPU_BASE_ARENA_H_ */
