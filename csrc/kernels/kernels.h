/* kernels.h - host kernels: computations written in C that a program on a
 * host-memory plugin (XLA CPU) calls as a custom call, where XLA's own code
 * for them is slow (gathers of many small slices, batches of tiny dots).
 *
 * Each kernel has a target name a program calls it by and the same inputs
 * and result as the StableHLO it replaces, so a caller emits one or the
 * other (ragged paged attention: torch_tpu/vllm/ragged.py emits the custom
 * call when tpu_kernels_available() says the kernel is registered, its
 * StableHLO kernel on every other plugin).
 */
#ifndef TPU_KERNELS_KERNELS_H_
#define TPU_KERNELS_KERNELS_H_

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "pjrt/pjrt.h"

/* The target name of the ragged paged attention kernel: a step's attention
 * (torch_tpu/vllm/ragged.py's `attention`, every variant in one call).
 * Operands: query [T, Hq, D] f32 (the step's tokens); kv [NB, BS, Hkv, 2D]
 * f32, or s16 holding bfloat16 / float16 bits; out_index [T] s64 (the row
 * of each token among the variants' rows, one variant's after another's);
 * params [2] f32 (softmax scale; the cache's element kind: 0 its own dtype,
 * 1 bfloat16 bits, 2 float16 bits); then per variant five: q_index [N, TQ]
 * s64 (the token of each item row), q_pos [N, TQ] s32 (each row's position:
 * it sees keys at positions <= it), tables [N, MB] s32 (each item's block
 * ids), chunks [N / W] s32 (only its length is read: W), groups [1] s32
 * (items in use: groups * W).  Result [T, Hq, D] f32: causal
 * softmax(q k^T * scale) v of each token. */
#define TPU_KERNEL_PAGED_ATTENTION "torch_tpu_paged_attention"

/* Registers every host kernel with `client` when its programs run in host
 * memory; elsewhere nothing (not an error). */
tpu_status_t tpu_kernels_register(tpu_pjrt_client_t *client);
/* Whether the kernel `name` can be called by programs of this process. */
bool tpu_kernels_available(const char *name);
/* Calls of the kernel `name` so far and the nanoseconds they took (for
 * profiles: the kernel's share of a step). */
void tpu_kernels_stats(const char *name, int64_t *out_calls, int64_t *out_ns);

#endif /* TPU_KERNELS_KERNELS_H_ */
