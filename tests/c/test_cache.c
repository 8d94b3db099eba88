/* Program cache trust rules (csrc/runtime/cache.c): real directories, files,
 * modes, owners and symlinks.  Named runtime_cache_* so `make valgrind`
 * covers them. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cache.h"
#include "tinytest.h"

static const char *k_prog =
    "module @neg4 {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.negate\"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

static const tpu_pjrt_compile_options_t k_opts = {.num_replicas = 1, .num_partitions = 1, .portable = true};

/* Creates a cache on `dir`, compiles k_prog once, runs it (-x), returns
 * the cache's stats. */
static int compile_once(const char *dir, tpu_cache_stats_t *out_stats) {
  tpu_pjrt_client_t *client = tt_client();
  if (!client) return 0;
  tpu_cache_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.dir = dir;
  tpu_cache_t *cache = NULL;
  tpu_status_t st = tpu_cache_create(client, &cfg, &cache);
  if (st) {
    tpu_status_free(st);
    return 0;
  }
  tpu_pjrt_exec_t *exec = NULL;
  st = tpu_cache_compile(cache, 42, k_prog, strlen(k_prog), &k_opts, &exec);
  int ok = !st;
  tpu_status_free(st);
  if (ok) {
    float x[4] = {1, -2, 3, 4}, y[4] = {0};
    int64_t dims[1] = {4};
    tpu_pjrt_buffer_t *in = NULL, *outb = NULL;
    st = tpu_pjrt_buffer_from_host(client, 0, TPU_F32, dims, 1, x, &in);
    if (!st) {
      tpu_pjrt_buffer_t *const args[1] = {in};
      tpu_pjrt_buffer_t *const *arg_lists[1] = {args};
      tpu_pjrt_buffer_t *outs[1] = {NULL};
      tpu_pjrt_buffer_t **out_lists[1] = {outs};
      tpu_pjrt_execute_options_t eo = {.device = 0, .wait = true};
      st = tpu_pjrt_execute(exec, arg_lists, 1, 1, &eo, out_lists);
      outb = outs[0];
    }
    if (!st) st = tpu_pjrt_buffer_to_host(outb, y, sizeof(y));
    ok = !st && y[0] == -1 && y[1] == 2 && y[3] == -4;
    tpu_status_free(st);
    if (in) tpu_pjrt_buffer_destroy(in);
    if (outb) tpu_pjrt_buffer_destroy(outb);
  }
  tpu_cache_get_stats(cache, out_stats);
  tpu_cache_destroy(cache);
  return ok;
}

/* The one *.tpux entry of dir (name into out); 0 if none or several. */
static int only_entry(const char *dir, char *out, size_t n) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len > 5 && !strcmp(e->d_name + len - 5, ".tpux")) {
      snprintf(out, n, "%s/%s", dir, e->d_name);
      count++;
    }
  }
  closedir(d);
  return count == 1;
}

static void rm_rf(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", path);
}

TT_TEST(runtime_cache_creates_private_dir_and_files) {
  char root[] = "/tmp/tpu_cache_secXXXXXX";
  TT_CHECK(mkdtemp(root) != NULL);
  char dir[256];
  snprintf(dir, sizeof(dir), "%s/a/b", root);
  mode_t old = umask(0); /* even with a permissive umask */
  tpu_cache_stats_t s;
  int ok = compile_once(dir, &s);
  umask(old);
  TT_CHECK(ok);
  TT_CHECK(s.disk_writes == 1 && s.disk_refused == 0 && s.compiles == 1);
  struct stat sb;
  char sub[256];
  snprintf(sub, sizeof(sub), "%s/a", root);
  TT_CHECK(stat(sub, &sb) == 0 && (sb.st_mode & 0777) == 0700);
  TT_CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0700);
  char entry[512];
  TT_CHECK(only_entry(dir, entry, sizeof(entry)));
  TT_CHECK(stat(entry, &sb) == 0 && (sb.st_mode & 0777) == 0600 && sb.st_uid == geteuid());
  /* a second cache on the same directory loads it */
  TT_CHECK(compile_once(dir, &s));
  TT_CHECK(s.disk_hits == 1 && s.compiles == 0 && s.disk_refused == 0);
  rm_rf(root);
}

TT_TEST(runtime_cache_refuses_group_or_world_writable_dir) {
  char dir[] = "/tmp/tpu_cache_secXXXXXX";
  TT_CHECK(mkdtemp(dir) != NULL);
  static const mode_t modes[2] = {0770, 0757};
  for (int i = 0; i < 2; i++) {
    TT_CHECK(chmod(dir, modes[i]) == 0);
    tpu_cache_stats_t s;
    TT_CHECK(compile_once(dir, &s)); /* still compiles and runs */
    TT_CHECK(s.disk_refused == 1 && s.disk_writes == 0 && s.disk_hits == 0 && s.disk_misses == 0);
    TT_CHECK(s.compiles == 1);
    char entry[512];
    TT_CHECK(!only_entry(dir, entry, sizeof(entry))); /* nothing written there */
  }
  rm_rf(dir);
}

TT_TEST(runtime_cache_refuses_dir_of_another_owner) {
  if (geteuid() != 0) {
    fprintf(stderr, "  skipped: making a directory of another owner needs root\n");
    return;
  }
  char dir[] = "/tmp/tpu_cache_secXXXXXX";
  TT_CHECK(mkdtemp(dir) != NULL);
  TT_CHECK(chown(dir, 65534, 65534) == 0);
  tpu_cache_stats_t s;
  TT_CHECK(compile_once(dir, &s));
  TT_CHECK(s.disk_refused == 1 && s.disk_writes == 0);
  /* a symlink of ours to that directory is refused too (the target is judged) */
  char link[64];
  snprintf(link, sizeof(link), "%s.lnk", dir);
  TT_CHECK(symlink(dir, link) == 0);
  TT_CHECK(compile_once(link, &s));
  TT_CHECK(s.disk_refused == 1 && s.disk_writes == 0);
  unlink(link);
  rm_rf(dir);
}

/* Plants `how` at the entry's name, then checks a new cache refuses it,
 * recompiles and replaces it with a private regular file. */
static void planted_entry(int how) {
  char dir[] = "/tmp/tpu_cache_secXXXXXX";
  TT_CHECK(mkdtemp(dir) != NULL);
  tpu_cache_stats_t s;
  TT_CHECK(compile_once(dir, &s));
  char entry[512], outside[512];
  TT_CHECK(only_entry(dir, entry, sizeof(entry)));
  snprintf(outside, sizeof(outside), "%s.outside", dir);
  if (how == 0) {
    TT_CHECK(chmod(entry, 0666) == 0); /* a valid entry, but anyone could have written it */
  } else if (how == 1) {
    /* a symlink to a valid entry outside the directory */
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", entry, outside);
    TT_CHECK(system(cmd) == 0);
    TT_CHECK(unlink(entry) == 0);
    TT_CHECK(symlink(outside, entry) == 0);
  } else if (how == 2) {
    TT_CHECK(chown(entry, 65534, 65534) == 0); /* another user's (valid) entry */
  } else {
    TT_CHECK(unlink(entry) == 0);
    TT_CHECK(mkfifo(entry, 0600) == 0); /* must not block the open */
  }
  TT_CHECK(compile_once(dir, &s));
  TT_CHECK(s.disk_refused == 1 && s.disk_hits == 0 && s.compiles == 1 && s.disk_writes == 1);
  struct stat sb;
  TT_CHECK(lstat(entry, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600 &&
           sb.st_uid == geteuid());
  if (how == 1) { /* the link went, its target was left alone */
    TT_CHECK(lstat(outside, &sb) == 0 && S_ISREG(sb.st_mode));
    unlink(outside);
  }
  /* and the replacement is trusted */
  TT_CHECK(compile_once(dir, &s));
  TT_CHECK(s.disk_refused == 0 && s.disk_hits == 1 && s.compiles == 0);
  rm_rf(dir);
}

TT_TEST(runtime_cache_refuses_world_writable_entry) { planted_entry(0); }
TT_TEST(runtime_cache_refuses_symlinked_entry) { planted_entry(1); }
TT_TEST(runtime_cache_refuses_entry_of_another_owner) {
  if (geteuid() != 0) {
    fprintf(stderr, "  skipped: making a file of another owner needs root\n");
    return;
  }
  planted_entry(2);
}
TT_TEST(runtime_cache_refuses_fifo_entry) { planted_entry(3); }

/* The disk tier is bounded by bytes: with the default bounds every program
 * of two "workloads" stays; with a byte bound the oldest go first, down to
 * 10% under the bound, and the newest stay. */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    n += len > 5 && !strcmp(e->d_name + len - 5, ".tpux");
  }
  closedir(d);
  return n;
}

static void compile_negates(tpu_cache_t *cache, int first, int n) {
  for (int i = first; i < first + n; i++) {
    char prog[512];
    snprintf(prog, sizeof(prog),
             "module @neg {\n  func.func public @main(%%arg0: tensor<%dxf32>) -> tensor<%dxf32> {\n"
             "    %%0 = \"stablehlo.negate\"(%%arg0) : (tensor<%dxf32>) -> tensor<%dxf32>\n"
             "    \"func.return\"(%%0) : (tensor<%dxf32>) -> ()\n  }\n}\n", i, i, i, i, i);
    tpu_pjrt_exec_t *exec = NULL;
    TT_CHECK_OK(tpu_cache_compile(cache, (uint64_t)(1000 + i), prog, strlen(prog), &k_opts, &exec));
  }
}

TT_TEST(runtime_cache_disk_tier_is_bounded_by_bytes) {
  tpu_pjrt_client_t *client = tt_client();
  if (!client) return;
  char root[] = "/tmp/tpu_cache_bytesXXXXXX";
  TT_CHECK(mkdtemp(root) != NULL);
  tpu_cache_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.dir = root;
  tpu_cache_t *cache = NULL;
  TT_CHECK_OK(tpu_cache_create(client, &cfg, &cache));
  if (!cache) return;
  compile_negates(cache, 1, 12); /* workload A */
  compile_negates(cache, 101, 12); /* workload B */
  tpu_cache_stats_t s;
  tpu_cache_get_stats(cache, &s);
  TT_CHECK(s.disk_writes == 24 && s.disk_evictions == 0 && count_entries(root) == 24);
  int64_t one = s.disk_bytes / 24;
  tpu_cache_destroy(cache);
  /* a bound of ~10 programs: the oldest go, the newest stay */
  cfg.disk_max_bytes = one * 10;
  TT_CHECK_OK(tpu_cache_create(client, &cfg, &cache));
  if (!cache) return;
  compile_negates(cache, 201, 1);
  tpu_cache_get_stats(cache, &s);
  TT_CHECK(s.disk_evictions >= 15 && count_entries(root) <= 10 && s.disk_bytes <= cfg.disk_max_bytes);
  tpu_cache_destroy(cache);
  rm_rf(root);
}

/* The memory tier is bounded by the process's memory maps (XLA's CPU JIT maps
 * regions for each loaded program; at vm.max_map_count LLVM aborts): over the
 * bound the least recently used programs leave memory, their maps are
 * released, and the process stays near the bound however many it compiles. */
static int64_t count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int64_t n = 0;
  int ch;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

TT_TEST(runtime_cache_memory_tier_is_bounded_by_maps) {
  tpu_pjrt_client_t *client = tt_client();
  if (!client) return;
  int64_t before = count_maps();
  if (before < 0) return; /* no /proc: no bound to test */
  tpu_cache_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  tpu_cache_t *cache = NULL;
  /* no bound: 40 programs keep their maps */
  cfg.mem_max_maps = -1;
  TT_CHECK_OK(tpu_cache_create(client, &cfg, &cache));
  if (!cache) return;
  compile_negates(cache, 301, 40);
  int64_t grown = count_maps() - before;
  tpu_cache_stats_t s;
  tpu_cache_get_stats(cache, &s);
  TT_CHECK(s.mem_entries == 40 && s.map_evictions == 0 && grown >= 40);
  tpu_cache_destroy(cache);
  /* a bound a quarter of the way up: the process stays near it */
  int64_t base = count_maps();
  cfg.mem_max_maps = base + grown / 4;
  TT_CHECK_OK(tpu_cache_create(client, &cfg, &cache));
  if (!cache) return;
  compile_negates(cache, 401, 80);
  tpu_cache_get_stats(cache, &s);
  int64_t after = count_maps();
  TT_CHECK(s.map_evictions > 0 && s.evictions == s.map_evictions && s.mem_entries < 40);
  /* at most a check interval's programs (8) above the bound */
  TT_CHECK(after <= cfg.mem_max_maps + 8 * (grown / 40 + 1));
  tpu_cache_destroy(cache);
}
