/* transfer.c - host <-> device copies: synchronous uploads, asynchronous
 * ones from pinned memory (issued work, see event.h), reads of a view back
 * to the host (the one place the host waits for a value), DMA mapping.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "runtime/event.h"
#include "runtime/runtime_internal.h"

tpu_status_t tpu_rt_storage_from_host(int device, tpu_dtype_t dtype, const int64_t *dims, int rank, const void *data,
                                      tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  tpu_status_t st = check_started_device(device);
  if (st) {
    UNLOCK();
    return st;
  }
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  tpu_pjrt_buffer_t *buf;
  st = memory_check(device, numel * (int64_t)tpu_dtype_size(dtype), "copying to the device");
  if (!st) st = tpu_pjrt_buffer_from_host(R.client, device, dtype, dims, rank, data, &buf);
  if (st) {
    UNLOCK();
    return st;
  }
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, rank, dims);
  *out_storage = storage_of_buffer(buf, &t, device);
  UNLOCK();
  metrics_transfer(TPU_XFER_TO_DEVICE, numel * (int64_t)tpu_dtype_size(dtype));
  return *out_storage ? NULL : tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
}

/* An asynchronous upload is a piece of work (events and synchronize
 * cover it); its completion also tells the caller the host memory is free. */
typedef struct upload_done {
  uint64_t seq;
  tpu_pjrt_done_fn done;
  void *arg;
} upload_done_t;

static void upload_finished(tpu_status_t st, void *arg) {
  upload_done_t u = *(upload_done_t *)arg;
  free(arg);
  tpu_work_done(st ? tpu_status_annotate(st, "copying to the device") : NULL, (void *)(uintptr_t)u.seq);
  u.done(NULL, u.arg);
}

tpu_status_t tpu_rt_storage_from_host_async(int device, tpu_dtype_t dtype, const int64_t *dims, int rank,
                                            const void *data, tpu_pjrt_done_fn done, void *arg,
                                            tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  tpu_status_t st = check_started_device(device);
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  if (!st) st = memory_check(device, numel * (int64_t)tpu_dtype_size(dtype), "copying to the device");
  upload_done_t *u = st ? NULL : (upload_done_t *)malloc(sizeof(*u));
  if (!st && !u) st = tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  if (st) {
    UNLOCK();
    return st;
  }
  u->done = done;
  u->arg = arg;
  u->seq = tpu_work_issue();
  tpu_pjrt_buffer_t *buf = NULL;
  st = tpu_pjrt_buffer_from_host_async(R.client, device, dtype, dims, rank, data, upload_finished, u, &buf);
  if (st) {
    tpu_work_done(NULL, (void *)(uintptr_t)u->seq);
    free(u);
    UNLOCK();
    return st;
  }
  tpu_hlo_type_t t = tpu_hlo_type_make(dtype, rank, dims);
  *out_storage = storage_of_buffer(buf, &t, device);
  UNLOCK();
  metrics_transfer(TPU_XFER_TO_DEVICE, numel * (int64_t)tpu_dtype_size(dtype));
  return *out_storage ? NULL : tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
}

tpu_status_t tpu_rt_dma_map(void *data, size_t size) {
  LOCK();
  tpu_status_t st = R.initialized ? tpu_pjrt_dma_map(R.client, data, size)
                                  : tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  UNLOCK();
  return st;
}

tpu_status_t tpu_rt_dma_unmap(void *data) {
  LOCK();
  tpu_status_t st = R.initialized ? tpu_pjrt_dma_unmap(R.client, data)
                                  : tpu_status_make(TPU_FAILED_PRECONDITION, TPU_NOT_STARTED_MSG);
  UNLOCK();
  return st;
}

/* A row-major view of all of t's elements, whatever its shape: its bytes are t's. */
static bool view_is_whole(const tpu_view_t *view, const tpu_hlo_type_t *t) {
  if (view->offset != 0 || view->dtype != t->dtype) return false;
  int64_t expect = 1;
  for (int d = view->rank - 1; d >= 0; d--) {
    if (view->sizes[d] != 1 && view->strides[d] != expect) return false;
    expect *= view->sizes[d];
  }
  return expect == tpu_hlo_type_numel(t);
}

tpu_status_t view_value(tpu_storage_t *s, const tpu_view_t *view, bool bytes_only, tpu_value_t **out) {
  *out = NULL;
  TPU_PROPAGATE(check_view(s, view));
  tpu_graph_t *g = graph_of(s->device);
  tpu_value_t *v = NULL;
  tpu_status_t st = NULL;
  if (s->value && view->dtype == s->value->type.dtype &&
      (bytes_only ? view_is_whole(view, &s->value->type) : view_is_identity(view, &s->value->type))) {
    v = s->value;
    value_retain(v);
    if (!v->buffer) st = graph_flush(g, TPU_CUT_HOST_READ);
  } else {
    tpu_ref_t base;
    const tpu_hlo_type_t *bt;
    int mark = g->nnodes;
    st = storage_ref(g, s, view->dtype, &base, &bt);
    tpu_node_t *node = NULL;
    if (!st) st = view_node(g, &base, 1, view, &node);
    if (st) graph_truncate(g, mark);
    else {
      v = node->outs[0];
      value_retain(v);
      st = graph_flush(g, TPU_CUT_HOST_READ);
    }
  }
  if (!st && v) st = value_wait(v); /* its program may wait for its compile (launch.c) */
  if (st && v) {
    value_release(v);
    v = NULL;
  }
  *out = v;
  return st;
}

tpu_status_t tpu_rt_view_to_device(tpu_storage_t *s, const tpu_view_t *view, int device, tpu_storage_t **out_storage) {
  *out_storage = NULL;
  LOCK();
  tpu_status_t st = check_started_device(device);
  tpu_value_t *v = NULL;
  if (!st) st = view_value(s, view, false, &v);
  int64_t numel = 1;
  for (int d = 0; d < view->rank; d++) numel *= view->sizes[d];
  if (!st) st = memory_check(device, numel * (int64_t)tpu_dtype_size(view->dtype), "copying between devices");
  tpu_pjrt_buffer_t *buf = NULL;
  if (!st) st = tpu_pjrt_buffer_copy_to_device(v->buffer, device, &buf);
  if (v) value_release(v);
  if (st) {
    UNLOCK();
    return st;
  }
  tpu_hlo_type_t t = tpu_hlo_type_make(view->dtype, view->rank, view->sizes);
  *out_storage = storage_of_buffer(buf, &t, device);
  UNLOCK();
  metrics_transfer(TPU_XFER_DEVICE_COPY, numel * (int64_t)tpu_dtype_size(view->dtype));
  return *out_storage ? NULL : tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
}

/* A view of a small storage is read whole and gathered on the host: no
 * program for the view (x[i].item(), a slice printed, the rows of a bucketed
 * buffer), at the price of copying up to this many bytes. */
enum { HOST_GATHER_MAX_BYTES = 1 << 20 };

static bool host_gather_wanted(const tpu_storage_t *s, const tpu_view_t *view) {
  if (!s->value || s->untyped || view->dtype != s->value->type.dtype || view->rank > TPU_MAX_RANK) return false;
  size_t esz = tpu_dtype_size(view->dtype);
  return esz && tpu_storage_nbytes(s) <= HOST_GATHER_MAX_BYTES && !view_is_whole(view, &s->value->type);
}

/* dst (dense, row-major) = the view's elements of src (the whole flat value). */
static void host_gather(const char *src, const tpu_view_t *v, char *dst) {
  size_t esz = tpu_dtype_size(v->dtype);
  int64_t idx[TPU_MAX_RANK] = {0};
  int64_t n = 1;
  for (int d = 0; d < v->rank; d++) n *= v->sizes[d];
  int64_t at = v->offset;
  for (int64_t k = 0; k < n; k++) {
    memcpy(dst + (size_t)k * esz, src + (size_t)at * esz, esz);
    for (int d = v->rank - 1; d >= 0; d--) { /* odometer over the view's indices */
      at += v->strides[d];
      if (++idx[d] < v->sizes[d]) break;
      at -= v->strides[d] * v->sizes[d];
      idx[d] = 0;
    }
  }
}

tpu_status_t tpu_rt_view_to_host(tpu_storage_t *s, const tpu_view_t *view, void *dst, size_t nbytes) {
  LOCK();
  tpu_status_t st = check_view(s, view);
  if (!st && host_gather_wanted(s, view)) {
    tpu_view_t whole;
    memset(&whole, 0, sizeof(whole));
    whole.dtype = view->dtype;
    whole.rank = 1;
    whole.sizes[0] = s->numel;
    whole.strides[0] = 1;
    tpu_view_t v = *view;
    UNLOCK();
    size_t total = (size_t)s->numel * tpu_dtype_size(view->dtype);
    char *tmp = (char *)malloc(total ? total : 1);
    if (!tmp) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "out of host memory");
    st = tpu_rt_view_to_host(s, &whole, tmp, total);
    if (!st) {
      int64_t n = 1;
      for (int d = 0; d < v.rank; d++) n *= v.sizes[d];
      if ((size_t)n * tpu_dtype_size(v.dtype) > nbytes)
        st = tpu_status_make(TPU_INVALID_ARGUMENT, "reading a view: %zu bytes of room for %lld elements", nbytes,
                             (long long)n);
      else host_gather(tmp, &v, (char *)dst);
    }
    free(tmp);
    return st;
  }
  tpu_value_t *v = NULL;
  if (!st) st = view_value(s, view, true, &v); /* the host copy needs the bytes only */
  tpu_pjrt_buffer_t *buf = (!st && v) ? v->buffer : NULL;
  UNLOCK();
  /* a host wait: a failed device-side check raises here (errors.h) */
  if (!st) st = err_check(s->device);
  if (st) buf = NULL;
  /* the copy itself runs without the lock held */
  if (buf) {
    double t0 = tpu_clock_now();
    st = tpu_pjrt_buffer_to_host(buf, dst, nbytes);
    metrics_host_wait(tpu_clock_now() - t0);
    metrics_transfer(TPU_XFER_TO_HOST, (int64_t)nbytes);
  }
  if (v) {
    LOCK();
    value_release(v);
    UNLOCK();
  }
  return st;
}

