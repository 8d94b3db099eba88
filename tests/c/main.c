/* The C test runner: runs every registered test, prints one line per test
 * and the closing "N passed, N failed" line. */
#include <stdlib.h>

#include "tinytest.h"

#define TT_MAX 512
static struct { const char *name; tt_fn fn; } tt_tests[TT_MAX];
static int tt_count;
int tt_failed_checks;

void tt_register(const char *name, tt_fn fn) {
  if (tt_count < TT_MAX) {
    tt_tests[tt_count].name = name;
    tt_tests[tt_count].fn = fn;
    tt_count++;
  }
}

static tpu_pjrt_client_t *tt_the_client;
static char tt_path[4096];
static int tt_client_tried;

const char *tt_plugin_path(void) {
  if (!tt_path[0]) {
    tpu_status_t st = tpu_pjrt_find_plugin(getenv("TORCH_TPU_SITE_DIRS"), tt_path, sizeof(tt_path));
    if (st) {
      fprintf(stderr, "  no plugin: %s\n", tpu_status_message(st));
      tpu_status_free(st);
      tt_path[0] = 0;
    }
  }
  return tt_path;
}

tpu_pjrt_client_t *tt_client(void) {
  if (!tt_client_tried) {
    tt_client_tried = 1;
    const char *path = tt_plugin_path();
    tpu_pjrt_option_t opts[1] = {{.name = "cpu_device_count", .kind = TPU_PJRT_OPT_INT64, .i = 2}};
    /* Non-CPU plugins reject unknown options: pass the CPU one only to CPU. */
    size_t nopts = strstr(path, "cpu") ? 1 : 0;
    tpu_status_t st = tpu_pjrt_client_create(path, opts, nopts, &tt_the_client);
    if (st) {
      fprintf(stderr, "  client create failed: %s\n", tpu_status_message(st));
      tpu_status_free(st);
      tt_the_client = NULL;
    }
  }
  return tt_the_client;
}

int main(int argc, char **argv) {
  /* arguments: substrings; a test runs when its name contains any of them */
  int passed = 0, failed = 0;
  for (int i = 0; i < tt_count; i++) {
    int selected = argc < 2;
    for (int a = 1; a < argc && !selected; a++) selected = strstr(tt_tests[i].name, argv[a]) != NULL;
    if (!selected) continue;
    int before = tt_failed_checks;
    tt_tests[i].fn();
    if (tt_failed_checks == before) {
      passed++;
      printf("PASS %s\n", tt_tests[i].name);
    } else {
      failed++;
      printf("FAIL %s\n", tt_tests[i].name);
    }
    fflush(stdout);
  }
  if (tt_the_client) tpu_pjrt_client_destroy(tt_the_client);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
