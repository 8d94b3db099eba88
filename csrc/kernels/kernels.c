/* kernels.c - registering the host kernels (kernels.h) with a client whose
 * programs run in host memory, on machines their builds can run on. */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

static bool cpu_has_kernel_isa(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* paged_attention.c is built for AVX2 and FMA on x86-64 */
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

tpu_status_t tpu_kernels_register(tpu_pjrt_client_t *client) {
  if (strcmp(tpu_pjrt_client_platform(client), "cpu") || !cpu_has_kernel_isa()) return NULL;
  return tpu_pjrt_ffi_register(client, TPU_KERNEL_PAGED_ATTENTION, tpu_kernel_paged_attention_ffi);
}

bool tpu_kernels_available(const char *name) { return tpu_pjrt_ffi_registered(name); }
