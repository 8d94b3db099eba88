/* tinytest.h - the C test harness.  A test is
 *   TT_TEST(name) { ... TT_CHECK(cond); TT_CHECK_OK(status_expr); ... }
 * Tests register themselves (constructor attribute); main.c runs them all
 * (or those whose name contains argv[1]) and prints "N passed, N failed".
 * Tests that need the plugin call tt_client() (one shared client, 2 CPU
 * devices) and tt_plugin_path().
 */
#ifndef TINYTEST_H_
#define TINYTEST_H_

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "pjrt/pjrt.h"

typedef void (*tt_fn)(void);
void tt_register(const char *name, tt_fn fn);
extern int tt_failed_checks;

#define TT_TEST(name)                                                   \
  static void tt_##name(void);                                          \
  __attribute__((constructor)) static void tt_reg_##name(void) { tt_register(#name, tt_##name); } \
  static void tt_##name(void)

#define TT_CHECK(cond)                                                  \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      tt_failed_checks++;                                               \
    }                                                                   \
  } while (0)

/* Checks a status is OK; prints and frees it otherwise.  Returns from the
 * test on failure (later steps would only cascade). */
#define TT_CHECK_OK(expr)                                               \
  do {                                                                  \
    tpu_status_t tt_st__ = (expr);                                      \
    if (tt_st__) {                                                      \
      fprintf(stderr, "  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, \
              tpu_code_name(tpu_status_code(tt_st__)), tpu_status_message(tt_st__)); \
      tpu_status_free(tt_st__);                                         \
      tt_failed_checks++;                                               \
      return;                                                           \
    }                                                                   \
  } while (0)

#define TT_CHECK_NEAR(a, b, tol)                                        \
  do {                                                                  \
    double tt_a__ = (double)(a), tt_b__ = (double)(b);                   \
    double tt_d__ = tt_a__ - tt_b__; if (tt_d__ < 0) tt_d__ = -tt_d__;   \
    if (!(tt_d__ <= (tol))) {                                           \
      fprintf(stderr, "  %s:%d: %s = %g, expected %g\n", __FILE__, __LINE__, #a, tt_a__, tt_b__); \
      tt_failed_checks++;                                               \
    }                                                                   \
  } while (0)

/* The shared client (created on first use, 2 CPU devices on the CPU
 * plugin); NULL if no plugin could be loaded (the test then fails). */
tpu_pjrt_client_t *tt_client(void);
const char *tt_plugin_path(void);

#endif
