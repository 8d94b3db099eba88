/* hash.h - 64-bit FNV-1a style hashing used for program-cache keys. */
#ifndef TPU_BASE_HASH_H_
#define TPU_BASE_HASH_H_

#include <stddef.h>
#include <stdint.h>

#define TPU_HASH_SEED 0xcbf29ce484222325ULL

static inline uint64_t tpu_hash_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static inline uint64_t tpu_hash_u64(uint64_t h, uint64_t v) {
  /* a mixing step (splitmix64 finaliser) folded into the running hash */
  v += 0x9e3779b97f4a7c15ULL + h;
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
  return v ^ (v >> 31);
}

#endif /* TPU_BASE_HASH_H_ */
