/* event.h - completion of device work: events, synchronize, back-pressure.
 *
 * PJRT orders work by data dependencies and has no streams, so the engine
 * keeps one ordered record of the work it has issued (program executions,
 * asynchronous host->device copies): each piece gets a sequence number when
 * it is issued and is marked done by the plugin's completion callback (on a
 * plugin thread), in whatever order pieces finish.  "Everything up to seq N
 * has finished" is the low-water mark.
 *
 * An event recorded now captures N = the last seq issued (after the pending
 * graph of its device is flushed): it is complete when the mark reaches N,
 * which is exactly "the work recorded before it has completed on the
 * device".  Its time is when that happened (or the record time, when nothing
 * was pending), so elapsed times measure device work, not host dispatch.
 *
 * A failed asynchronous execution is kept (the first one) and reported by
 * the next synchronize, once.
 */
#ifndef TPU_RUNTIME_EVENT_H_
#define TPU_RUNTIME_EVENT_H_

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tpu_rt_event tpu_rt_event_t;

tpu_status_t tpu_rt_event_create(tpu_rt_event_t **out_event);
void tpu_rt_event_destroy(tpu_rt_event_t *event);
/* Flushes the pending work of `device` and marks the point after it.
 * Recording again moves the point. */
tpu_status_t tpu_rt_event_record(tpu_rt_event_t *event, int device);
bool tpu_rt_event_recorded(const tpu_rt_event_t *event);
int tpu_rt_event_device(const tpu_rt_event_t *event); /* -1 before record */
/* True when the work before the event has finished (or it was never recorded). */
bool tpu_rt_event_query(const tpu_rt_event_t *event);
/* Waits for it; returns a failed execution's error among that work. */
tpu_status_t tpu_rt_event_synchronize(tpu_rt_event_t *event);
/* Milliseconds from start's completion to end's; both must be complete. */
tpu_status_t tpu_rt_event_elapsed_ms(const tpu_rt_event_t *start, const tpu_rt_event_t *end, double *out_ms);

/* ---- for the runtime (issuing work) ------------------------------------------- */
/* A sequence number for new work; waits while too much work is in flight. */
uint64_t tpu_work_issue(void);
/* The completion callback to hand to the pjrt layer, arg = (void *)(uintptr_t)seq. */
void tpu_work_done(tpu_status_t st, void *arg);
/* Waits until every piece issued so far has finished; returns (and clears)
 * the first asynchronous failure. */
tpu_status_t tpu_work_wait_all(void);
/* Keeps a failure of work that never ran (a queued program whose compile
 * failed) for the next tpu_work_wait_all, as an asynchronous failure. */
void tpu_work_fail(tpu_status_t st /* moved in */);
/* Pieces issued and not yet finished (for tests and stats). */
int64_t tpu_work_in_flight(void);
/* In a child process after fork(): the parent's work never completes here;
 * the record is reset (fresh lock, nothing in flight). */
void tpu_work_after_fork_child(void);

#endif /* TPU_RUNTIME_EVENT_H_ */
