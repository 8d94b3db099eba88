/* pjrt_buffer.c - device arrays: host -> device, device -> host, readiness.
 *
 * A tpu_pjrt_buffer_t owns one PJRT_Buffer and caches its dtype and dims
 * (set when it is made, so asking never crosses into the plugin).  Host data
 * is always dense row-major: uploads pass no byte strides, downloads ask for
 * the row-major layout explicitly (minor_to_major = rank-1 .. 0).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt/pjrt_internal.h"

static atomic_llong pj_live_buffers;

int64_t tpu_pjrt_live_buffers(void) { return (int64_t)atomic_load(&pj_live_buffers); }

/* ---- memory accounting: what this process holds per device ------------------------- */

typedef struct pj_mem {
  atomic_llong in_use, peak, allocated, freed;
  atomic_llong buffers, peak_buffers, allocs, frees;
} pj_mem_t;
static pj_mem_t pj_mem[TPU_PJRT_MAX_DEVICES];

static void pj_raise_peak(atomic_llong *peak, long long v) {
  long long p = atomic_load(peak);
  while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {
  }
}

static void pj_mem_add(int device, size_t nbytes) {
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES) return;
  pj_mem_t *m = &pj_mem[device];
  pj_raise_peak(&m->peak, atomic_fetch_add(&m->in_use, (long long)nbytes) + (long long)nbytes);
  pj_raise_peak(&m->peak_buffers, atomic_fetch_add(&m->buffers, 1) + 1);
  atomic_fetch_add(&m->allocated, (long long)nbytes);
  atomic_fetch_add(&m->allocs, 1);
}

static void pj_mem_sub(int device, size_t nbytes) {
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES) return;
  pj_mem_t *m = &pj_mem[device];
  atomic_fetch_sub(&m->in_use, (long long)nbytes);
  atomic_fetch_sub(&m->buffers, 1);
  atomic_fetch_add(&m->freed, (long long)nbytes);
  atomic_fetch_add(&m->frees, 1);
}

void tpu_pjrt_memory_promise(int device, int64_t delta) {
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES || delta == 0) return;
  pj_mem_t *m = &pj_mem[device];
  long long now = atomic_fetch_add(&m->in_use, (long long)delta) + (long long)delta;
  if (delta > 0) pj_raise_peak(&m->peak, now);
}

void tpu_pjrt_memory_stats(tpu_pjrt_client_t *client, int device, tpu_pjrt_memory_stats_t *out) {
  memset(out, 0, sizeof(*out));
  out->plugin_bytes_in_use = out->plugin_bytes_limit = out->plugin_peak_bytes_in_use = -1;
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES) return;
  pj_mem_t *m = &pj_mem[device];
  out->bytes_in_use = atomic_load(&m->in_use);
  out->peak_bytes_in_use = atomic_load(&m->peak);
  out->bytes_allocated = atomic_load(&m->allocated);
  out->bytes_freed = atomic_load(&m->freed);
  out->num_buffers = atomic_load(&m->buffers);
  out->peak_num_buffers = atomic_load(&m->peak_buffers);
  out->num_allocs = atomic_load(&m->allocs);
  out->num_frees = atomic_load(&m->frees);
  if (!client || device >= client->num_devices || !TPU_PJRT_HAS(client->api, device_memory_stats)) return;
  pj_device_memory_stats_args_t a = {.struct_size = sizeof(a), .device = client->devices[device]};
  tpu_status_t st = tpu_pjrt_status_from_error(client->api, client->api->device_memory_stats(&a), "memory stats");
  if (st) { /* the CPU plugin: UNIMPLEMENTED */
    tpu_status_free(st);
    return;
  }
  out->plugin_bytes_in_use = a.bytes_in_use;
  if (a.bytes_limit_is_set) out->plugin_bytes_limit = a.bytes_limit;
  if (a.peak_bytes_in_use_is_set) out->plugin_peak_bytes_in_use = a.peak_bytes_in_use;
}

void tpu_pjrt_memory_reset_peak(int device) {
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES) return;
  atomic_store(&pj_mem[device].peak, atomic_load(&pj_mem[device].in_use));
  atomic_store(&pj_mem[device].peak_buffers, atomic_load(&pj_mem[device].buffers));
}

void tpu_pjrt_memory_reset_accumulated(int device) {
  if (device < 0 || device >= TPU_PJRT_MAX_DEVICES) return;
  atomic_store(&pj_mem[device].allocated, 0);
  atomic_store(&pj_mem[device].freed, 0);
  atomic_store(&pj_mem[device].allocs, 0);
  atomic_store(&pj_mem[device].frees, 0);
}

tpu_status_t tpu_pjrt_dma_map(tpu_pjrt_client_t *client, void *data, size_t size) {
  if (!TPU_PJRT_HAS(client->api, client_dma_map))
    return tpu_status_make(TPU_UNIMPLEMENTED, "the PJRT plugin has no PJRT_Client_DmaMap");
  pj_client_dma_map_args_t a = {.struct_size = sizeof(a), .client = client->client, .data = data, .size = size};
  return tpu_pjrt_status_from_error(client->api, client->api->client_dma_map(&a), "mapping host memory for DMA");
}

tpu_status_t tpu_pjrt_dma_unmap(tpu_pjrt_client_t *client, void *data) {
  if (!TPU_PJRT_HAS(client->api, client_dma_unmap))
    return tpu_status_make(TPU_UNIMPLEMENTED, "the PJRT plugin has no PJRT_Client_DmaUnmap");
  pj_client_dma_unmap_args_t a = {.struct_size = sizeof(a), .client = client->client, .data = data};
  return tpu_pjrt_status_from_error(client->api, client->api->client_dma_unmap(&a), "unmapping host memory");
}

static tpu_status_t pj_check_shape(tpu_dtype_t dtype, const int64_t *dims, int rank, int64_t *out_numel,
                                   size_t *out_nbytes) {
  if (!tpu_dtype_valid((int)dtype))
    return tpu_status_make(TPU_INVALID_ARGUMENT, "invalid dtype code %d", (int)dtype);
  if (rank < 0 || rank > TPU_MAX_RANK)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "rank %d outside 0..%d", rank, TPU_MAX_RANK);
  if (rank > 0 && !dims) return tpu_status_make(TPU_INVALID_ARGUMENT, "rank %d but no dims", rank);
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return tpu_status_make(TPU_INVALID_ARGUMENT, "dimension %d is negative (%lld)", i, (long long)dims[i]);
    if (dims[i] && numel > INT64_MAX / dims[i])
      return tpu_status_make(TPU_INVALID_ARGUMENT, "shape too large");
    numel *= dims[i];
  }
  size_t es = tpu_dtype_size(dtype);
  if (numel > 0 && (uint64_t)numel > SIZE_MAX / es)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "shape too large");
  *out_numel = numel;
  *out_nbytes = (size_t)numel * es;
  return TPU_OK_STATUS;
}

tpu_status_t tpu_pjrt_buffer_wrap(tpu_pjrt_client_t *client, pj_buffer_t *pb, tpu_dtype_t dtype,
                                  const int64_t *dims, int rank, int device,
                                  tpu_pjrt_buffer_t **out_buffer) {
  *out_buffer = NULL;
  tpu_pjrt_buffer_t *b = (tpu_pjrt_buffer_t *)calloc(1, sizeof(*b));
  tpu_status_t st = b ? pj_check_shape(dtype, dims, rank, &b->numel, &b->nbytes)
                      : tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  if (st) {
    free(b);
    pj_buffer_destroy_args_t d = {.struct_size = sizeof(d), .buffer = pb};
    tpu_status_free(tpu_pjrt_status_from_error(client->api, client->api->buffer_destroy(&d), "buffer destroy"));
    return st;
  }
  b->client = client;
  b->buffer = pb;
  b->dtype = dtype;
  b->rank = rank;
  b->device = device;
  for (int i = 0; i < rank; i++) b->dims[i] = dims[i];
  atomic_fetch_add(&pj_live_buffers, 1);
  pj_mem_add(device, b->nbytes);
  *out_buffer = b;
  return TPU_OK_STATUS;
}

/* Starts a host -> device copy; the caller handles a.done_with_host_buffer. */
static tpu_status_t pj_start_upload(tpu_pjrt_client_t *client, int device, tpu_dtype_t dtype, const int64_t *dims,
                                    int rank, const void *data, pj_buffer_from_host_args_t *a) {
  if (!client) return tpu_status_make(TPU_INVALID_ARGUMENT, "buffer_from_host: no client");
  if (device < 0 || device >= client->num_devices)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "device %d outside 0..%d", device, client->num_devices - 1);
  int64_t numel;
  size_t nbytes;
  TPU_RETURN_IF_ERROR(pj_check_shape(dtype, dims, rank, &numel, &nbytes), "buffer_from_host");
  if (nbytes > 0 && !data) return tpu_status_make(TPU_INVALID_ARGUMENT, "buffer_from_host: NULL data");
  static const uint64_t pj_empty[2];
  memset(a, 0, sizeof(*a));
  a->struct_size = sizeof(*a);
  a->client = client->client;
  a->data = nbytes ? data : (const void *)pj_empty;
  a->type = (int)dtype;
  a->dims = dims;
  a->num_dims = (size_t)rank;
  a->host_buffer_semantics = PJ_HOST_IMMUTABLE_UNTIL_TRANSFER_COMPLETES;
  a->device = client->devices[device];
  return tpu_pjrt_status_from_error(client->api, client->api->client_buffer_from_host_buffer(a),
                                    "copying to the device");
}

static void pj_destroy_raw(const pj_api_t *api, pj_buffer_t *pb) {
  pj_buffer_destroy_args_t d = {.struct_size = sizeof(d), .buffer = pb};
  tpu_status_free(tpu_pjrt_status_from_error(api, api->buffer_destroy(&d), "buffer destroy"));
}

tpu_status_t tpu_pjrt_buffer_from_host(tpu_pjrt_client_t *client, int device, tpu_dtype_t dtype,
                                       const int64_t *dims, int rank, const void *data,
                                       tpu_pjrt_buffer_t **out_buffer) {
  *out_buffer = NULL;
  pj_buffer_from_host_args_t a;
  TPU_PROPAGATE(pj_start_upload(client, device, dtype, dims, rank, data, &a));
  /* The host memory may be reused only once the copy is done. */
  tpu_status_t st = tpu_pjrt_event_await_destroy(client->api, a.done_with_host_buffer, "copying to the device");
  if (st) {
    pj_destroy_raw(client->api, a.buffer);
    return st;
  }
  return tpu_pjrt_buffer_wrap(client, a.buffer, dtype, dims, rank, device, out_buffer);
}

tpu_status_t tpu_pjrt_buffer_from_host_async(tpu_pjrt_client_t *client, int device, tpu_dtype_t dtype,
                                             const int64_t *dims, int rank, const void *data,
                                             tpu_pjrt_done_fn done, void *arg,
                                             tpu_pjrt_buffer_t **out_buffer) {
  *out_buffer = NULL;
  pj_buffer_from_host_args_t a;
  TPU_PROPAGATE(pj_start_upload(client, device, dtype, dims, rank, data, &a));
  tpu_status_t st = tpu_pjrt_buffer_wrap(client, a.buffer, dtype, dims, rank, device, out_buffer);
  if (st) { /* wrap destroyed the buffer: the copy must still finish before returning */
    tpu_status_free(tpu_pjrt_event_await_destroy(client->api, a.done_with_host_buffer, "copying to the device"));
    return st;
  }
  st = tpu_pjrt_event_on_ready(client->api, a.done_with_host_buffer, done, arg);
  if (st) {
    tpu_pjrt_buffer_destroy(*out_buffer);
    *out_buffer = NULL;
  }
  return st;
}

tpu_status_t tpu_pjrt_buffer_to_host(tpu_pjrt_buffer_t *buffer, void *dst, size_t dst_size) {
  if (!buffer) return tpu_status_make(TPU_INVALID_ARGUMENT, "buffer_to_host: NULL buffer");
  if (dst_size != buffer->nbytes)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "buffer_to_host: destination has %zu bytes, the buffer %zu",
                           dst_size, buffer->nbytes);
  /* Nothing to copy; still surface a failed computation. */
  if (buffer->nbytes == 0) return tpu_pjrt_buffer_await(buffer);
  if (!dst) return tpu_status_make(TPU_INVALID_ARGUMENT, "buffer_to_host: NULL destination");
  const pj_api_t *api = buffer->client->api;
  int64_t m2m[TPU_MAX_RANK];
  for (int i = 0; i < buffer->rank; i++) m2m[i] = buffer->rank - 1 - i;
  pj_memory_layout_t layout = {.struct_size = sizeof(layout), .type = PJ_LAYOUT_TILED};
  layout.u.tiled.struct_size = sizeof(layout.u.tiled);
  layout.u.tiled.minor_to_major = m2m;
  layout.u.tiled.minor_to_major_size = (size_t)buffer->rank;
  pj_buffer_to_host_args_t a = {.struct_size = sizeof(a)};
  a.src = buffer->buffer;
  a.host_layout = &layout;
  a.dst = dst;
  a.dst_size = dst_size;
  TPU_PROPAGATE(tpu_pjrt_status_from_error(api, api->buffer_to_host_buffer(&a), "copying to the host"));
  return tpu_pjrt_event_await_destroy(api, a.event, "copying to the host");
}

tpu_status_t tpu_pjrt_buffer_copy_to_device(tpu_pjrt_buffer_t *buffer, int device, tpu_pjrt_buffer_t **out_buffer) {
  *out_buffer = NULL;
  tpu_pjrt_client_t *c = buffer->client;
  if (device < 0 || device >= c->num_devices)
    return tpu_status_make(TPU_INVALID_ARGUMENT, "device %d outside 0..%d", device, c->num_devices - 1);
  pj_buffer_copy_to_device_args_t a = {.struct_size = sizeof(a), .buffer = buffer->buffer,
                                       .dst_device = c->devices[device]};
  TPU_PROPAGATE(tpu_pjrt_status_from_error(c->api, c->api->buffer_copy_to_device(&a), "copying between devices"));
  return tpu_pjrt_buffer_wrap(c, a.dst_buffer, buffer->dtype, buffer->dims, buffer->rank, device, out_buffer);
}

tpu_status_t tpu_pjrt_buffer_await(tpu_pjrt_buffer_t *buffer) {
  if (!buffer) return tpu_status_make(TPU_INVALID_ARGUMENT, "buffer_await: NULL buffer");
  const pj_api_t *api = buffer->client->api;
  pj_buffer_ready_event_args_t a = {.struct_size = sizeof(a), .buffer = buffer->buffer};
  TPU_PROPAGATE(tpu_pjrt_status_from_error(api, api->buffer_ready_event(&a), "awaiting a buffer"));
  return tpu_pjrt_event_await_destroy(api, a.event, "awaiting a buffer");
}

void tpu_pjrt_buffer_destroy(tpu_pjrt_buffer_t *buffer) {
  if (!buffer) return;
  const pj_api_t *api = buffer->client->api;
  pj_buffer_destroy_args_t d = {.struct_size = sizeof(d), .buffer = buffer->buffer};
  tpu_status_free(tpu_pjrt_status_from_error(api, api->buffer_destroy(&d), "buffer destroy"));
  atomic_fetch_sub(&pj_live_buffers, 1);
  pj_mem_sub(buffer->device, buffer->nbytes);
  free(buffer);
}

void tpu_pjrt_buffer_donate(tpu_pjrt_buffer_t *buffer) {
  if (!buffer || !buffer->nbytes || buffer->device < 0 || buffer->device >= TPU_PJRT_MAX_DEVICES) return;
  pj_mem_t *m = &pj_mem[buffer->device];
  atomic_fetch_sub(&m->in_use, (long long)buffer->nbytes);
  atomic_fetch_add(&m->freed, (long long)buffer->nbytes);
  buffer->nbytes = 0; /* destroy subtracts nothing more */
}

tpu_dtype_t tpu_pjrt_buffer_dtype(const tpu_pjrt_buffer_t *buffer) { return buffer->dtype; }
int tpu_pjrt_buffer_rank(const tpu_pjrt_buffer_t *buffer) { return buffer->rank; }
const int64_t *tpu_pjrt_buffer_dims(const tpu_pjrt_buffer_t *buffer) { return buffer->dims; }
int64_t tpu_pjrt_buffer_numel(const tpu_pjrt_buffer_t *buffer) { return buffer->numel; }
size_t tpu_pjrt_buffer_nbytes(const tpu_pjrt_buffer_t *buffer) { return buffer->nbytes; }
int tpu_pjrt_buffer_device(const tpu_pjrt_buffer_t *buffer) { return buffer->device; }
