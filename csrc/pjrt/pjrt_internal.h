/* pjrt_internal.h - shared internals of csrc/pjrt (not for other layers).
 *
 * pjrt_client.c  plugin loading (one load per path per process), error
 *                conversion, events, client + devices, plugin discovery
 * pjrt_buffer.c  host <-> device copies, readiness, the live-buffer counter
 * pjrt_exec.c    compile options encoding, input signature parsing, compile,
 *                execute, serialize / deserialize (our envelope)
 */
#ifndef TPU_PJRT_PJRT_INTERNAL_H_
#define TPU_PJRT_PJRT_INTERNAL_H_

#include "pjrt/pjrt.h"
#include "pjrt/pjrt_abi.h"

/* One loaded plugin; lives until the process ends (never dlclosed), in a
 * static table, so nothing needs freeing at exit. */
typedef struct tpu_pjrt_plugin {
  char path[4096];     /* as resolved by realpath() */
  void *handle;        /* dlopen handle */
  const pj_api_t *api; /* owned by the plugin */
  int api_major, api_minor;
  char xla_version[64]; /* from PJRT_Plugin_Attributes ("?" if absent) */
} tpu_pjrt_plugin_t;

struct tpu_pjrt_client {
  tpu_pjrt_plugin_t *plugin;
  const pj_api_t *api;
  pj_client_t *client;
  int num_devices;
  pj_device_t **devices;  /* addressable devices, owned by the PJRT client */
  int *device_ids;        /* global device id of each */
  char *platform;         /* lowercase */
  char *platform_version;
  char *identity;
};

struct tpu_pjrt_buffer {
  tpu_pjrt_client_t *client;
  pj_buffer_t *buffer;
  tpu_dtype_t dtype;
  int rank;
  int device;
  int64_t dims[TPU_MAX_RANK];
  int64_t numel;
  size_t nbytes;
};

/* Converts a PJRT error (may be NULL = OK) into a status and destroys it. */
tpu_status_t tpu_pjrt_status_from_error(const pj_api_t *api, pj_error_t *err, const char *what);
/* Awaits `event` (may be NULL), destroys it, returns its error. */
tpu_status_t tpu_pjrt_event_await_destroy(const pj_api_t *api, pj_event_t *event, const char *what);
/* Destroys an event without waiting (errors dropped). */
void tpu_pjrt_event_destroy(const pj_api_t *api, pj_event_t *event);
/* Calls done(status, arg) once `event` is ready, then destroys the event.
 * On an error return, done is not called and the event is destroyed. */
tpu_status_t tpu_pjrt_event_on_ready(const pj_api_t *api, pj_event_t *event, tpu_pjrt_done_fn done, void *arg);
/* True when the plugin's table has the (optional) slot at `offset`. */
bool tpu_pjrt_has_slot(const pj_api_t *api, size_t offset);
#define TPU_PJRT_HAS(api, field) tpu_pjrt_has_slot((api), offsetof(pj_api_t, field))

/* Wraps a PJRT buffer made by the plugin (takes ownership). */
tpu_status_t tpu_pjrt_buffer_wrap(tpu_pjrt_client_t *client, pj_buffer_t *pb, tpu_dtype_t dtype,
                                  const int64_t *dims, int rank, int device,
                                  tpu_pjrt_buffer_t **out_buffer);

/* Checks that a function table provides every slot we call.  Exposed for
 * tests, which feed it a truncated table. */
tpu_status_t tpu_pjrt_check_api(const pj_api_t *api, const char *path);

#endif /* TPU_PJRT_PJRT_INTERNAL_H_ */
