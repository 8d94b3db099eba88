/* storage_list.h - the live storages the host layer gave addresses to
 * (every PyTorch tpu storage): for memory snapshots and for naming the
 * largest live allocations when memory runs out. */
#ifndef TPU_RUNTIME_STORAGE_LIST_H_
#define TPU_RUNTIME_STORAGE_LIST_H_

#include <stddef.h>
#include <stdint.h>

typedef struct tpu_rt_storage_info {
  uint64_t address; /* tpu_storage_set_address's */
  size_t nbytes;
  int device;
  int has_value;    /* holds a value (a buffer, or one being computed); 0: never written */
} tpu_rt_storage_info_t;

/* Copies up to max live addressed storages into out (newest first) and
 * returns how many there are in all (more than max: call again with more). */
int tpu_rt_storages_live(tpu_rt_storage_info_t *out, int max);

#endif /* TPU_RUNTIME_STORAGE_LIST_H_ */
