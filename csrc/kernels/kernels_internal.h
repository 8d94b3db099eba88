/* kernels_internal.h - the kernels' FFI handlers, for kernels.c to
 * register (each takes XLA's call frame, tpu_pjrt_ffi_handler_t). */
#ifndef TPU_KERNELS_KERNELS_INTERNAL_H_
#define TPU_KERNELS_KERNELS_INTERNAL_H_

void *tpu_kernel_paged_attention_ffi(void *call_frame);

#endif /* TPU_KERNELS_KERNELS_INTERNAL_H_ */
