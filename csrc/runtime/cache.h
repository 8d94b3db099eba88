/* cache.h - the program cache: memory tier (loaded executables, LRU by
 * count and bytes) and disk tier (serialized executables under a directory,
 * keyed by program text + plugin identity + compile options; atomic writes;
 * corrupt or foreign files are ignored and replaced; LRU by mtime; a
 * directory or entry that another user could have written is refused).
 * Thread-safe: its tables and counters have a lock of their own, held for
 * none of the slow parts (compiling, reading and writing files), so
 * tpu_cache_build runs on a compile worker while the runtime records.
 */
#ifndef TPU_RUNTIME_CACHE_H_
#define TPU_RUNTIME_CACHE_H_

#include <stdint.h>

#include "base/status.h"
#include "pjrt/pjrt.h"

typedef struct tpu_cache tpu_cache_t;

typedef struct tpu_cache_config {
  const char *dir; /* NULL/"" = no disk tier */
  int64_t mem_max_entries, mem_max_bytes;
  /* the process's memory maps (XLA's CPU JIT maps a few regions for each
   * kernel of a loaded program; at vm.max_map_count the next one fails and
   * LLVM aborts the process): above this many, the least recently used
   * programs leave the memory tier.  0 = a third of vm.max_map_count, < 0 =
   * no bound */
  int64_t mem_max_maps;
  int64_t disk_max_entries, disk_max_bytes;
} tpu_cache_config_t;

typedef struct tpu_cache_stats {
  int64_t mem_hits, mem_misses, disk_hits, disk_misses, disk_writes, disk_errors;
  int64_t compiles, evictions, disk_evictions;
  int64_t map_evictions;    /* of evictions, those for the memory-map bound */
  int64_t memory_evictions; /* of evictions, those after a compile failed for lack of memory */
  int64_t maps;             /* the process's memory maps when last counted (0: never) */
  int64_t mem_max_maps;     /* the bound in force (-1: none) */
  double compile_seconds;
  int64_t mem_entries, mem_bytes, disk_entries, disk_bytes;
  int64_t disk_refused; /* untrusted directory or entries (see cache.c: trust) */
  int64_t promotions;   /* quick (tier 0) programs compiled again at full optimization (not in compiles) */
  double promotion_seconds;
} tpu_cache_stats_t;

tpu_status_t tpu_cache_create(tpu_pjrt_client_t *client, const tpu_cache_config_t *cfg, tpu_cache_t **out_cache);
void tpu_cache_destroy(tpu_cache_t *cache);

/* Memory lookup by structural key; NULL on miss.  The executable stays
 * owned by the cache (valid until the next insert/clear). */
tpu_pjrt_exec_t *tpu_cache_lookup(tpu_cache_t *cache, uint64_t key);
/* On a memory miss: compiles `text` (or loads it from the disk tier) and
 * inserts it under `key`. */
tpu_status_t tpu_cache_compile(tpu_cache_t *cache, uint64_t key, const char *text, size_t text_len,
                               const tpu_pjrt_compile_options_t *options, tpu_pjrt_exec_t **out_exec);
/* The two halves of tpu_cache_compile: build loads `text` from the disk tier
 * or compiles it (and stores it there), returning an executable the caller
 * owns (*out_from_disk: where it came from); insert hands it to the memory
 * tier under `key` (the cache owns it then, until evicted). */
tpu_status_t tpu_cache_build(tpu_cache_t *cache, const char *text, size_t text_len,
                             const tpu_pjrt_compile_options_t *options, tpu_pjrt_exec_t **out_exec,
                             int *out_from_disk);
void tpu_cache_insert(tpu_cache_t *cache, uint64_t key, tpu_pjrt_exec_t *exec, size_t text_len);

/* Tiers (see "Tiered compiles" in docs/ARCHITECTURE.md).  A program is
 * first compiled quickly (`quick` options: tier 0) unless the disk tier
 * holds its fully optimized build (`full` options: tier 1), which is
 * loaded instead; quick == NULL builds at full only.  *out_tier says which. */
tpu_status_t tpu_cache_build_tiered(tpu_cache_t *cache, const char *text, size_t text_len,
                                    const tpu_pjrt_compile_options_t *full, const tpu_pjrt_compile_options_t *quick,
                                    tpu_pjrt_exec_t **out_exec, int *out_from_disk, int *out_tier);
void tpu_cache_insert_tier(tpu_cache_t *cache, uint64_t key, tpu_pjrt_exec_t *exec, size_t text_len, int tier);
/* A run of the tier-0 program of `key`: true once, at its `runs`-th run,
 * when it should be promoted (compiled at full optimization). */
int tpu_cache_due_for_promotion(tpu_cache_t *cache, uint64_t key, int runs);
/* The promotion's compile (counted as a promotion, not a compile; stored
 * in the disk tier at full optimization). */
tpu_status_t tpu_cache_build_promotion(tpu_cache_t *cache, const char *text, size_t text_len,
                                       const tpu_pjrt_compile_options_t *full, tpu_pjrt_exec_t **out_exec);
/* Hands the promoted build of `key` to its memory entry (moved in; freed
 * when the entry is gone).  The entry runs it from its next lookup with no
 * queued run pinning the quick build (the swap happens in lookup, which the
 * runtime calls under its lock, so no run of the old build is under way). */
void tpu_cache_promoted(tpu_cache_t *cache, uint64_t key, tpu_pjrt_exec_t *exec);
/* A pinned program (pins > 0) is never evicted: a run of it is queued. */
void tpu_cache_pin(tpu_cache_t *cache, uint64_t key, int delta);
void tpu_cache_clear(tpu_cache_t *cache, int disk_too);
/* After a compile failed for lack of memory: drops the least recently used
 * half of the memory tier (never a pinned program), freeing their code and
 * mappings; returns how many went (*out_held: how many were held).  Like
 * every eviction, the caller holds whatever lock keeps looked-up programs
 * from running meanwhile (the runtime's). */
int64_t tpu_cache_shed(tpu_cache_t *cache, int64_t *out_held);
/* A status that says the host ran out of memory or mappings (the XLA CPU
 * JIT's "Cannot allocate memory", RESOURCE_EXHAUSTED). */
int tpu_cache_failed_for_memory(tpu_status_t st);
/* The process's memory maps now (lines of /proc/self/maps; -1: unknown). */
int64_t tpu_cache_count_maps(void);
void tpu_cache_get_stats(tpu_cache_t *cache, tpu_cache_stats_t *out);

#endif /* TPU_RUNTIME_CACHE_H_ */
