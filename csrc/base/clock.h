/* clock.h - the one clock the engine times things with (seconds,
 * CLOCK_MONOTONIC). */
#ifndef TPU_BASE_CLOCK_H_
#define TPU_BASE_CLOCK_H_

#include <time.h>

static inline double tpu_clock_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif /* TPU_BASE_CLOCK_H_ */
