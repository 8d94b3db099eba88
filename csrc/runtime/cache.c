/* cache.c - the two-tier program cache (see cache.h).
 *
 * Disk file format (one file per program, "<hex key>.tpux"):
 *   magic "TPUX0001" | u64 identity hash | u64 text hash | u64 payload size |
 *   payload (the plugin's serialized executable, in our pjrt envelope) |
 *   u64 payload checksum
 * A file whose magic, identity, text hash, size or checksum disagree is
 * foreign or corrupt: it is counted, removed and the program recompiled.
 * Writes go to a unique temporary name and are renamed into place, so a
 * reader never sees half a file and concurrent writers of the same program
 * simply replace each other's identical result.  A writer killed before the
 * rename leaves only its temporary file, which no reader opens; the
 * directory scan removes such files once they are ten minutes old.
 *
 * Trust (the disk tier loads native code): the rules of ssh and careful
 * caches.  Directories we create are 0700 and files 0600.  The cache
 * directory must be owned by this user (euid) and not writable by group or
 * others, else the disk tier is off for the process (warned once at the first
 * compile, counted in disk_refused).  The directory is opened once and every
 * entry is reached relative to that descriptor (openat/renameat/unlinkat), so
 * renaming a path component later cannot redirect us; entries are opened
 * with O_NOFOLLOW and checked on the open descriptor (fstat): a symlink, a
 * non-regular file, a file of another owner or one writable by group/others
 * is refused (counted, warned once, removed) and the program recompiled.
 */
#include "runtime/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/hash.h"

#define TPU_CACHE_BUCKETS 8192
/* Temporary files ("<name>.tmp.<pid>.<usec>") left by a writer that died
 * between create and rename are never renamed; the directory scan removes
 * those untouched for this long (a live writer finishes in milliseconds). */
#define TPU_DISK_STALE_TMP_SECONDS (10 * 60)

static const char tpu_disk_magic[8] = {'T', 'P', 'U', 'X', '0', '0', '0', '1'};

typedef struct tpu_prog {
  uint64_t key;
  tpu_pjrt_exec_t *exec;
  size_t bytes;
  int pins; /* queued runs of it (tpu_cache_pin): not evicted meanwhile */
  int tier; /* 0: a quick build (see tpu_cache_build_tiered), 1: fully optimized */
  int runs, promoting;        /* tier 0: lookups so far; a promotion asked for */
  tpu_pjrt_exec_t *promoted;  /* the promotion's build, run from the next lookup with no pins */
  struct tpu_prog *prev, *next; /* LRU: head = most recent */
  struct tpu_prog *hnext;
} tpu_prog_t;

struct tpu_cache {
  pthread_mutex_t lock;      /* the tables, the counters and the disk bookkeeping (see cache.h) */
  tpu_pjrt_client_t *client;
  char *dir;                 /* the disk tier's directory; NULL = no disk tier */
  int dirfd;                 /* open descriptor of dir (-1 when none) */
  char *refused_msg;         /* why the directory was refused (warned at the first compile) */
  int warned_entry;          /* an entry refusal was warned about */
  uint64_t identity_hash;
  tpu_cache_config_t cfg;
  int disk_scanned; /* disk_entries / disk_bytes were counted from the directory */
  int inserts_since_maps; /* memory-tier inserts since the map count was read */
  int warned_maps;        /* the memory-map bound's first eviction was warned about */
  int64_t maps_at_create; /* the process's maps when the cache was made (-1: unknown) */
  tpu_prog_t *buckets[TPU_CACHE_BUCKETS];
  tpu_prog_t *head, *tail;
  tpu_cache_stats_t st;
};

static int tpu_mkdirs(const char *path) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(tmp)) return -1;
  memcpy(tmp, path, n + 1);
  for (size_t i = 1; i < n; i++) {
    if (tmp[i] == '/') {
      tmp[i] = 0;
      if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
      tmp[i] = '/';
    }
  }
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
  return 0;
}

/* Why a file of mode/owner `sb` is not trusted (NULL if it is). */
static const char *tpu_untrusted(const struct stat *sb, int want_dir, char *buf, size_t n) {
  if (want_dir ? !S_ISDIR(sb->st_mode) : !S_ISREG(sb->st_mode)) {
    snprintf(buf, n, "not a %s", want_dir ? "directory" : "regular file");
    return buf;
  }
  if (sb->st_uid != geteuid()) {
    snprintf(buf, n, "owned by uid %lld, not by this user (uid %lld)", (long long)sb->st_uid,
             (long long)geteuid());
    return buf;
  }
  if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(buf, n, "writable by group or others (mode %04o)", (unsigned)(sb->st_mode & 07777));
    return buf;
  }
  return NULL;
}

/* Opens the disk tier's directory (created 0700 if missing) and checks that
 * it can be trusted; on refusal the disk tier stays off. */
static void tpu_disk_open(tpu_cache_t *c, const char *dir) {
  char why[256], msg[4600];
  if (tpu_mkdirs(dir) != 0) {
    fprintf(stderr, "torch_tpu: cannot create cache directory %s (%s); disk cache disabled\n", dir,
            strerror(errno));
    return;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "torch_tpu: cannot open cache directory %s (%s); disk cache disabled\n", dir,
            strerror(errno));
    return;
  }
  struct stat sb;
  const char *bad = fstat(fd, &sb) != 0 ? "cannot be examined" : tpu_untrusted(&sb, 1, why, sizeof(why));
  if (bad) {
    close(fd);
    c->st.disk_refused++;
    snprintf(msg, sizeof(msg),
             "torch_tpu: program cache directory %s is %s; the disk cache is disabled (it would load "
             "compiled code from there). Use a directory of your own with mode 0700, e.g. chmod 700 %s, "
             "or set TORCH_TPU_CACHE_DIR",
             dir, bad, dir);
    c->refused_msg = strdup(msg);
    return;
  }
  c->dir = strdup(dir);
  if (!c->dir) {
    close(fd);
    return;
  }
  c->dirfd = fd;
}

/* A refused entry: counted, warned about once, removed (we own the
 * directory, so even another user's file or a symlink can be unlinked; the
 * link itself goes, never its target). */
static void tpu_disk_refuse(tpu_cache_t *c, const char *name, const char *why) {
  pthread_mutex_lock(&c->lock);
  c->st.disk_refused++;
  int warn = !c->warned_entry;
  c->warned_entry = 1;
  pthread_mutex_unlock(&c->lock);
  if (warn) {
    fprintf(stderr,
            "torch_tpu: refused program cache entry %s/%s (%s); it is removed and the program recompiled "
            "(warned once)\n",
            c->dir, name, why);
  }
  unlinkat(c->dirfd, name, 0);
}

/* A fresh DIR stream over the cache directory (NULL on failure). */
static DIR *tpu_disk_opendir(tpu_cache_t *c) {
  int fd = openat(c->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return NULL;
  DIR *d = fdopendir(fd);
  if (!d) close(fd);
  return d;
}

/* want_value = 0: the number of lines of a /proc file (-1 if it cannot be
 * read); 1: the number it starts with. */
static int64_t tpu_count_lines(const char *path, int want_value) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[65536];
  int64_t n = 0;
  ssize_t got;
  if (want_value) {
    got = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (got <= 0) return -1;
    buf[got] = 0;
    return strtoll(buf, NULL, 10);
  }
  while ((got = read(fd, buf, sizeof(buf))) > 0)
    for (ssize_t i = 0; i < got; i++) n += buf[i] == '\n';
  close(fd);
  return got < 0 ? -1 : n;
}

tpu_status_t tpu_cache_create(tpu_pjrt_client_t *client, const tpu_cache_config_t *cfg, tpu_cache_t **out_cache) {
  *out_cache = NULL;
  tpu_cache_t *c = (tpu_cache_t *)calloc(1, sizeof(*c));
  if (!c) return tpu_status_make(TPU_RESOURCE_EXHAUSTED, "cache: out of memory");
  c->client = client;
  pthread_mutex_init(&c->lock, NULL);
  c->cfg = *cfg;
  if (c->cfg.mem_max_entries <= 0) c->cfg.mem_max_entries = 4096;
  if (c->cfg.mem_max_bytes <= 0) c->cfg.mem_max_bytes = (int64_t)2 << 30;
  if (c->cfg.mem_max_maps == 0) {
    int64_t sys = tpu_count_lines("/proc/sys/vm/max_map_count", 1);
    c->cfg.mem_max_maps = sys > 0 ? sys / 3 : -1;
  }
  c->maps_at_create = c->cfg.mem_max_maps > 0 ? tpu_count_lines("/proc/self/maps", 0) : -1;
  c->st.mem_max_maps = c->cfg.mem_max_maps;
  if (c->maps_at_create > 0) c->st.maps = c->maps_at_create;
  /* the disk tier is bounded by bytes: 4 GiB holds hundreds of thousands of
   * programs (a few KB to a few MB each), so one workload's programs do not
   * push out another's; an entry bound only when asked for */
  if (c->cfg.disk_max_entries <= 0) c->cfg.disk_max_entries = INT64_MAX;
  if (c->cfg.disk_max_bytes <= 0) c->cfg.disk_max_bytes = (int64_t)4 << 30;
  const char *id = tpu_pjrt_client_identity(client);
  c->identity_hash = tpu_hash_bytes(TPU_HASH_SEED, id, strlen(id));
  c->dirfd = -1;
  if (cfg->dir && cfg->dir[0]) tpu_disk_open(c, cfg->dir);
  c->cfg.dir = c->dir;
  *out_cache = c;
  return NULL;
}

static void tpu_lru_unlink(tpu_cache_t *c, tpu_prog_t *p) {
  if (p->prev) p->prev->next = p->next; else c->head = p->next;
  if (p->next) p->next->prev = p->prev; else c->tail = p->prev;
  p->prev = p->next = NULL;
}

static void tpu_lru_push(tpu_cache_t *c, tpu_prog_t *p) {
  p->prev = NULL;
  p->next = c->head;
  if (c->head) c->head->prev = p;
  c->head = p;
  if (!c->tail) c->tail = p;
}

static void tpu_prog_remove(tpu_cache_t *c, tpu_prog_t *p) {
  tpu_prog_t **pp = &c->buckets[p->key & (TPU_CACHE_BUCKETS - 1)];
  while (*pp && *pp != p) pp = &(*pp)->hnext;
  if (*pp) *pp = p->hnext;
  tpu_lru_unlink(c, p);
  c->st.mem_entries--;
  c->st.mem_bytes -= (int64_t)p->bytes;
  tpu_pjrt_exec_destroy(p->exec);
  if (p->promoted) tpu_pjrt_exec_destroy(p->promoted);
  free(p);
}

void tpu_cache_clear(tpu_cache_t *c, int disk_too) {
  pthread_mutex_lock(&c->lock);
  while (c->head) tpu_prog_remove(c, c->head);
  pthread_mutex_unlock(&c->lock);
  if (disk_too && c->dir) {
    DIR *d = tpu_disk_opendir(c);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 5 && !strcmp(e->d_name + n - 5, ".tpux")) unlinkat(c->dirfd, e->d_name, 0);
      }
      closedir(d);
    }
  }
}

void tpu_cache_destroy(tpu_cache_t *c) {
  if (!c) return;
  tpu_cache_clear(c, 0);
  if (c->dirfd >= 0) close(c->dirfd);
  free(c->dir);
  free(c->refused_msg);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

tpu_pjrt_exec_t *tpu_cache_lookup(tpu_cache_t *c, uint64_t key) {
  pthread_mutex_lock(&c->lock);
  for (tpu_prog_t *p = c->buckets[key & (TPU_CACHE_BUCKETS - 1)]; p; p = p->hnext) {
    if (p->key == key) {
      if (c->head != p) {
        tpu_lru_unlink(c, p);
        tpu_lru_push(c, p);
      }
      if (p->promoted && p->pins == 0) { /* the promotion is in: the quick build goes */
        size_t bytes = tpu_pjrt_exec_code_size(p->promoted);
        tpu_pjrt_exec_destroy(p->exec);
        p->exec = p->promoted;
        p->promoted = NULL;
        p->tier = 1;
        if (bytes) {
          c->st.mem_bytes += (int64_t)bytes - (int64_t)p->bytes;
          p->bytes = bytes;
        }
      }
      c->st.mem_hits++;
      pthread_mutex_unlock(&c->lock);
      return p->exec;
    }
  }
  c->st.mem_misses++;
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

/* Drops up to `drop` least recently used programs from the memory tier
 * (never `keep` nor a pinned one); returns how many went.  Destroying a
 * PJRT executable frees its code (on the CPU plugin, its JIT mappings). */
static int64_t tpu_mem_evict(tpu_cache_t *c, tpu_prog_t *keep, int64_t drop, int64_t *counter) {
  int64_t dropped = 0;
  for (tpu_prog_t *victim = c->tail; victim && dropped < drop;) {
    tpu_prog_t *prev = victim->prev;
    if (victim != keep && victim->pins == 0) {
      tpu_prog_remove(c, victim);
      c->st.evictions++;
      (*counter)++;
      dropped++;
    }
    victim = prev;
  }
  return dropped;
}

/* The memory-map bound (see cache.h), read every TPU_MAPS_EVERY inserts (a
 * read of /proc/self/maps costs ~1 ms at 20,000 maps, well under a
 * compile): over it, enough least recently used programs go to reach 7/8
 * of the bound by the maps each holds on average, a quarter of the tier at
 * least; those reload from the disk tier when next run. */
#define TPU_MAPS_EVERY 8
static void tpu_mem_bound_maps(tpu_cache_t *c, tpu_prog_t *keep) {
  if (c->cfg.mem_max_maps <= 0 || ++c->inserts_since_maps < TPU_MAPS_EVERY) return;
  c->inserts_since_maps = 0;
  int64_t maps = tpu_count_lines("/proc/self/maps", 0);
  c->st.maps = maps;
  if (maps <= c->cfg.mem_max_maps) return;
  /* the maps each program holds, estimated from the growth since the cache
   * was made */
  int64_t per = c->st.mem_entries > 0 ? (maps - c->maps_at_create) / c->st.mem_entries : 1;
  if (per < 1) per = 1;
  int64_t drop = (maps - c->cfg.mem_max_maps / 8 * 7 + per - 1) / per;
  if (drop < c->st.mem_entries / 4) drop = c->st.mem_entries / 4;
  if (drop < 1) drop = 1;
  int64_t dropped = tpu_mem_evict(c, keep, drop, &c->st.map_evictions);
  if (!c->warned_maps) {
    c->warned_maps = 1;
    fprintf(stderr,
            "torch_tpu: the process holds %lld memory maps (the bound is %lld: TORCH_TPU_CACHE_MAX_MAPS, by "
            "default a third of vm.max_map_count); %lld least recently used programs left the memory cache "
            "(they reload from the disk cache when run again)\n",
            (long long)maps, (long long)c->cfg.mem_max_maps, (long long)dropped);
  }
}

int64_t tpu_cache_shed(tpu_cache_t *c, int64_t *out_held) {
  pthread_mutex_lock(&c->lock);
  int64_t held = c->st.mem_entries;
  int64_t dropped = tpu_mem_evict(c, NULL, (held + 1) / 2, &c->st.memory_evictions);
  c->st.maps = c->cfg.mem_max_maps > 0 ? tpu_count_lines("/proc/self/maps", 0) : c->st.maps;
  pthread_mutex_unlock(&c->lock);
  if (out_held) *out_held = held;
  return dropped;
}

int tpu_cache_failed_for_memory(tpu_status_t st) {
  if (!st) return 0;
  if (tpu_status_code(st) == TPU_RESOURCE_EXHAUSTED) return 1;
  const char *m = tpu_status_message(st);
  return m && (strstr(m, "Cannot allocate memory") || strstr(m, "allocate section memory") ||
               strstr(m, "out of memory") || strstr(m, "Out of memory") || strstr(m, "ENOMEM"));
}

int64_t tpu_cache_count_maps(void) { return tpu_count_lines("/proc/self/maps", 0); }

static void tpu_mem_insert(tpu_cache_t *c, uint64_t key, tpu_pjrt_exec_t *exec, size_t bytes, int tier) {
  tpu_prog_t *p = (tpu_prog_t *)calloc(1, sizeof(*p));
  if (!p) {
    tpu_pjrt_exec_destroy(exec);
    return;
  }
  p->key = key;
  p->exec = exec;
  p->bytes = bytes;
  p->tier = tier;
  tpu_prog_t **b = &c->buckets[key & (TPU_CACHE_BUCKETS - 1)];
  p->hnext = *b;
  *b = p;
  tpu_lru_push(c, p);
  c->st.mem_entries++;
  c->st.mem_bytes += (int64_t)bytes;
  /* evict least recently used, never the one just inserted nor a pinned one */
  tpu_prog_t *victim = c->tail;
  while ((c->st.mem_entries > c->cfg.mem_max_entries || c->st.mem_bytes > c->cfg.mem_max_bytes) && victim) {
    tpu_prog_t *prev = victim->prev;
    if (victim != p && victim->pins == 0) {
      tpu_prog_remove(c, victim);
      c->st.evictions++;
    }
    victim = prev;
  }
  tpu_mem_bound_maps(c, p);
}

int tpu_cache_due_for_promotion(tpu_cache_t *c, uint64_t key, int runs) {
  int due = 0;
  pthread_mutex_lock(&c->lock);
  for (tpu_prog_t *p = c->buckets[key & (TPU_CACHE_BUCKETS - 1)]; p; p = p->hnext)
    if (p->key == key) {
      if (p->tier == 0 && !p->promoting && ++p->runs >= runs) due = p->promoting = 1;
      break;
    }
  pthread_mutex_unlock(&c->lock);
  return due;
}

void tpu_cache_promoted(tpu_cache_t *c, uint64_t key, tpu_pjrt_exec_t *exec) {
  pthread_mutex_lock(&c->lock);
  for (tpu_prog_t *p = c->buckets[key & (TPU_CACHE_BUCKETS - 1)]; p; p = p->hnext)
    if (p->key == key) {
      if (p->tier == 0 && !p->promoted) {
        p->promoted = exec;
        exec = NULL;
      }
      break;
    }
  pthread_mutex_unlock(&c->lock);
  if (exec) tpu_pjrt_exec_destroy(exec); /* the entry left meanwhile: its build is on disk */
}

void tpu_cache_pin(tpu_cache_t *c, uint64_t key, int delta) {
  pthread_mutex_lock(&c->lock);
  for (tpu_prog_t *p = c->buckets[key & (TPU_CACHE_BUCKETS - 1)]; p; p = p->hnext)
    if (p->key == key) {
      p->pins += delta;
      break;
    }
  pthread_mutex_unlock(&c->lock);
}

/* ---- disk tier -------------------------------------------------------------- */

static void tpu_disk_name(uint64_t fkey, char *out, size_t n) {
  snprintf(out, n, "%016llx.tpux", (unsigned long long)fkey);
}

/* Reads entry `name` of the cache directory: 0 = read, -1 = absent,
 * -2 = unreadable, -3 = refused (untrusted: *why says why). */
static int tpu_read_all(tpu_cache_t *c, const char *name, unsigned char **out, size_t *out_n, char *why,
                        size_t nwhy) {
  *out = NULL;
  *out_n = 0;
  /* O_NOFOLLOW: a symlink fails with ELOOP; O_NONBLOCK: a planted FIFO
   * cannot block the open */
  int fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    if (errno == ELOOP) {
      snprintf(why, nwhy, "a symbolic link");
      return -3;
    }
    return -2;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    close(fd);
    return -2;
  }
  if (tpu_untrusted(&sb, 0, why, nwhy)) {
    close(fd);
    return -3;
  }
  if (sb.st_size < 0 || sb.st_size > ((off_t)1 << 32)) {
    close(fd);
    return -2;
  }
  size_t n = (size_t)sb.st_size;
  unsigned char *buf = (unsigned char *)malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return -2;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  /* touch: the disk tier evicts by least recent use */
  if (got == n) futimens(fd, NULL);
  close(fd);
  if (got != n) {
    free(buf);
    return -2;
  }
  *out = buf;
  *out_n = n;
  return 0;
}

/* Loads a disk entry: 1 = loaded, 0 = absent, -1 = corrupt or refused
 * (removed). */
static int tpu_disk_load(tpu_cache_t *c, uint64_t fkey, uint64_t text_hash, tpu_pjrt_exec_t **out_exec) {
  char name[64], why[256];
  tpu_disk_name(fkey, name, sizeof(name));
  unsigned char *buf;
  size_t n;
  int r = tpu_read_all(c, name, &buf, &n, why, sizeof(why));
  if (r == -1) return 0;
  if (r == -3) {
    tpu_disk_refuse(c, name, why);
    return -1;
  }
  int ok = 0;
  if (r == 0 && n >= 40 && !memcmp(buf, tpu_disk_magic, 8)) {
    uint64_t idh, th, psz, sum;
    memcpy(&idh, buf + 8, 8);
    memcpy(&th, buf + 16, 8);
    memcpy(&psz, buf + 24, 8);
    if (idh == c->identity_hash && th == text_hash && psz == n - 40) {
      memcpy(&sum, buf + 32 + psz, 8);
      if (sum == tpu_hash_bytes(TPU_HASH_SEED, buf + 32, psz)) {
        tpu_status_t st = tpu_pjrt_exec_deserialize(c->client, buf + 32, psz, out_exec);
        if (!st) ok = 1;
        else tpu_status_free(st);
      }
    }
  }
  free(buf);
  if (!ok) {
    pthread_mutex_lock(&c->lock);
    c->st.disk_errors++;
    pthread_mutex_unlock(&c->lock);
    unlinkat(c->dirfd, name, 0);
    return -1;
  }
  return 1;
}

typedef struct { char name[64]; time_t t; long ns; off_t size; } tpu_disk_ent_t;

static int tpu_disk_ent_older(const void *a, const void *b) {
  const tpu_disk_ent_t *x = (const tpu_disk_ent_t *)a, *y = (const tpu_disk_ent_t *)b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->ns < y->ns ? -1 : x->ns > y->ns;
}

/* Counts the directory's entries and bytes and, when they pass a bound,
 * removes the least recently used (oldest mtime: a load touches its entry)
 * until they are 10% under it, so a full cache is not rescanned at every
 * write. */
static void tpu_disk_evict(tpu_cache_t *c) {
  DIR *d = tpu_disk_opendir(c);
  if (!d) return;
  typedef tpu_disk_ent_t ent_t;
  ent_t *ents = NULL;
  size_t n = 0, cap = 0;
  int64_t bytes = 0;
  struct dirent *e;
  time_t now = time(NULL);
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (strstr(e->d_name, ".tpux.tmp.")) {
      /* a dead writer's temporary file: never loaded (not a ".tpux" name),
       * but it would hold its bytes forever */
      struct stat sb;
      if (fstatat(c->dirfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
          now - sb.st_mtim.tv_sec > TPU_DISK_STALE_TMP_SECONDS) {
        unlinkat(c->dirfd, e->d_name, 0);
      }
      continue;
    }
    if (len < 6 || len >= 64 || strcmp(e->d_name + len - 5, ".tpux")) continue;
    struct stat sb;
    if (fstatat(c->dirfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      ent_t *ne = (ent_t *)realloc(ents, cap * sizeof(ent_t));
      if (!ne) break;
      ents = ne;
    }
    memcpy(ents[n].name, e->d_name, len + 1);
    ents[n].t = sb.st_mtim.tv_sec;
    ents[n].ns = sb.st_mtim.tv_nsec;
    ents[n].size = sb.st_size;
    bytes += sb.st_size;
    n++;
  }
  closedir(d);
  if ((int64_t)n > c->cfg.disk_max_entries || bytes > c->cfg.disk_max_bytes) {
    qsort(ents, n, sizeof(ent_t), tpu_disk_ent_older);
    int64_t keep_n = c->cfg.disk_max_entries - c->cfg.disk_max_entries / 10;
    int64_t keep_bytes = c->cfg.disk_max_bytes - c->cfg.disk_max_bytes / 10;
    size_t i = 0;
    while (i < n && ((int64_t)(n - i) > keep_n || bytes > keep_bytes)) {
      unlinkat(c->dirfd, ents[i].name, 0);
      bytes -= ents[i].size;
      c->st.disk_evictions++;
      i++;
    }
    n -= i;
  }
  c->st.disk_entries = (int64_t)n;
  c->st.disk_bytes = bytes;
  c->disk_scanned = 1;
  free(ents);
}

/* Fault tests only (tests/faults): TORCH_TPU_CACHE_TEST_WRITE_PAUSE_MS=N
 * makes a writer stop N ms with half its temporary file written, so a test
 * can kill it there deterministically.  Unset (always, outside those tests),
 * it costs one getenv per disk write. */
static void tpu_disk_test_pause(void) {
  const char *ms = getenv("TORCH_TPU_CACHE_TEST_WRITE_PAUSE_MS");
  if (!ms || !*ms) return;
  long n = strtol(ms, NULL, 10);
  if (n <= 0) return;
  struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void tpu_disk_store(tpu_cache_t *c, uint64_t fkey, uint64_t text_hash, tpu_pjrt_exec_t *exec) {
  void *payload = NULL;
  size_t psz = 0;
  tpu_status_t st = tpu_pjrt_exec_serialize(exec, &payload, &psz);
  if (st) {
    tpu_status_free(st);
    c->st.disk_errors++;
    return;
  }
  char name[64], tmp[128];
  tpu_disk_name(fkey, name, sizeof(name));
  struct timeval tv;
  gettimeofday(&tv, NULL);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%ld", name, (int)getpid(), (long)tv.tv_usec);
  /* 0600 whatever the umask: the entry is code only this user may plant */
  int fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int ok = 0;
  if (fd >= 0) {
    uint64_t hdr[3] = {c->identity_hash, text_hash, (uint64_t)psz};
    uint64_t sum = tpu_hash_bytes(TPU_HASH_SEED, payload, psz);
    size_t half = psz / 2;
    ok = fchmod(fd, 0600) == 0 && write(fd, tpu_disk_magic, 8) == 8 && write(fd, hdr, 24) == 24 &&
         write(fd, payload, half) == (ssize_t)half;
    tpu_disk_test_pause();
    ok = ok && write(fd, (const char *)payload + half, psz - half) == (ssize_t)(psz - half) &&
         write(fd, &sum, 8) == 8;
    if (close(fd) != 0) ok = 0;
    /* rename replaces whatever had the name (a refused symlink included), never its target */
    if (ok && renameat(c->dirfd, tmp, c->dirfd, name) != 0) ok = 0;
    if (!ok) unlinkat(c->dirfd, tmp, 0);
  }
  free(payload);
  pthread_mutex_lock(&c->lock);
  if (ok) {
    c->st.disk_writes++;
    /* the directory is scanned at the first write, then only when the
     * running totals (this process's writes added) pass a bound: other
     * processes' writes are found then */
    c->st.disk_entries++;
    c->st.disk_bytes += (int64_t)psz + 40;
    if (!c->disk_scanned || c->st.disk_entries > c->cfg.disk_max_entries || c->st.disk_bytes > c->cfg.disk_max_bytes)
      tpu_disk_evict(c);
  } else {
    c->st.disk_errors++;
  }
  pthread_mutex_unlock(&c->lock);
}

/* Fault tests only (tests/faults/test_residency.py):
 * TORCH_TPU_CACHE_TEST_COMPILE_ENOMEM="K,N" makes compiles K+1 .. K+N of
 * the process fail as the XLA CPU JIT fails when it cannot map its code
 * (read at the first compile; unset, a compile costs nothing more). */
static int tpu_compile_test_enomem(tpu_cache_t *c) {
  static long skip = -1, fail = 0;
  pthread_mutex_lock(&c->lock);
  if (skip < 0) {
    const char *v = getenv("TORCH_TPU_CACHE_TEST_COMPILE_ENOMEM");
    char *end = NULL;
    skip = v && *v ? strtol(v, &end, 10) : 0;
    fail = end && *end == ',' ? strtol(end + 1, NULL, 10) : 0;
    if (skip < 0) skip = 0;
  }
  int now = 0;
  if (skip > 0) skip--;
  else if (fail > 0) now = 1, fail--;
  pthread_mutex_unlock(&c->lock);
  return now;
}

/* The disk tier's key of `text` built with `options` (and this plugin). */
static uint64_t tpu_file_key(const tpu_cache_t *c, uint64_t text_hash, const tpu_pjrt_compile_options_t *options) {
  uint64_t okey = tpu_hash_u64(0, (uint64_t)(options ? options->num_replicas : 0));
  okey = tpu_hash_u64(okey, (uint64_t)(options ? options->portable : 0));
  if (options && options->xla_flags && *options->xla_flags)
    okey = tpu_hash_bytes(okey, options->xla_flags, strlen(options->xla_flags));
  /* a replicated program is compiled for its devices, in order */
  for (int i = 0; options && options->device_ids && i < options->num_replicas; i++)
    okey = tpu_hash_u64(okey, (uint64_t)options->device_ids[i]);
  return tpu_hash_u64(tpu_hash_u64(text_hash, c->identity_hash), okey);
}

/* kind: 0 a build (disk, else compile), 1 a promotion's compile, 2 a disk
 * probe (load or nothing, no miss counted). */
static tpu_status_t tpu_cache_build_kind(tpu_cache_t *c, const char *text, size_t text_len,
                                         const tpu_pjrt_compile_options_t *options, int kind,
                                         tpu_pjrt_exec_t **out_exec, int *out_from_disk) {
  *out_exec = NULL;
  *out_from_disk = 0;
  tpu_pjrt_exec_t *exec = NULL;
  uint64_t text_hash = tpu_hash_bytes(TPU_HASH_SEED, text, text_len);
  uint64_t fkey = tpu_file_key(c, text_hash, options);
  pthread_mutex_lock(&c->lock);
  char *refused = c->refused_msg; /* warned here, not at create: the plugin's start hides stderr */
  c->refused_msg = NULL;
  pthread_mutex_unlock(&c->lock);
  if (refused) {
    fprintf(stderr, "%s\n", refused);
    free(refused);
  }
  if (c->dir && kind != 1) {
    int r = tpu_disk_load(c, fkey, text_hash, &exec);
    pthread_mutex_lock(&c->lock);
    if (r == 1) c->st.disk_hits++;
    else if (kind == 0) c->st.disk_misses++;
    pthread_mutex_unlock(&c->lock);
  }
  if (exec) {
    *out_from_disk = 1;
  } else if (kind != 2) {
    double t0 = tpu_clock_now();
    if (tpu_compile_test_enomem(c))
      return tpu_status_make(TPU_RESOURCE_EXHAUSTED,
                             "compile: LLVM compilation error: Cannot allocate memory (injected: "
                             "TORCH_TPU_CACHE_TEST_COMPILE_ENOMEM)");
    TPU_PROPAGATE(tpu_pjrt_compile(c->client, text, text_len, options, &exec));
    double dt = tpu_clock_now() - t0;
    pthread_mutex_lock(&c->lock);
    if (kind == 1) {
      c->st.promotion_seconds += dt;
      c->st.promotions++;
    } else {
      c->st.compile_seconds += dt;
      c->st.compiles++;
    }
    pthread_mutex_unlock(&c->lock);
    if (c->dir) tpu_disk_store(c, fkey, text_hash, exec);
  }
  *out_exec = exec;
  return NULL;
}

tpu_status_t tpu_cache_build(tpu_cache_t *c, const char *text, size_t text_len,
                             const tpu_pjrt_compile_options_t *options, tpu_pjrt_exec_t **out_exec,
                             int *out_from_disk) {
  return tpu_cache_build_kind(c, text, text_len, options, 0, out_exec, out_from_disk);
}

tpu_status_t tpu_cache_build_tiered(tpu_cache_t *c, const char *text, size_t text_len,
                                    const tpu_pjrt_compile_options_t *full, const tpu_pjrt_compile_options_t *quick,
                                    tpu_pjrt_exec_t **out_exec, int *out_from_disk, int *out_tier) {
  *out_tier = 1;
  if (quick) {
    TPU_PROPAGATE(tpu_cache_build_kind(c, text, text_len, full, 2, out_exec, out_from_disk));
    if (*out_exec) return NULL; /* promoted before (another process): the full build */
    *out_tier = 0;
    return tpu_cache_build_kind(c, text, text_len, quick, 0, out_exec, out_from_disk);
  }
  return tpu_cache_build_kind(c, text, text_len, full, 0, out_exec, out_from_disk);
}

tpu_status_t tpu_cache_build_promotion(tpu_cache_t *c, const char *text, size_t text_len,
                                       const tpu_pjrt_compile_options_t *full, tpu_pjrt_exec_t **out_exec) {
  int from_disk;
  return tpu_cache_build_kind(c, text, text_len, full, 1, out_exec, &from_disk);
}

void tpu_cache_insert_tier(tpu_cache_t *c, uint64_t key, tpu_pjrt_exec_t *exec, size_t text_len, int tier) {
  size_t bytes = tpu_pjrt_exec_code_size(exec);
  if (!bytes) bytes = text_len;
  pthread_mutex_lock(&c->lock);
  tpu_mem_insert(c, key, exec, bytes, tier);
  pthread_mutex_unlock(&c->lock);
}

void tpu_cache_insert(tpu_cache_t *c, uint64_t key, tpu_pjrt_exec_t *exec, size_t text_len) {
  tpu_cache_insert_tier(c, key, exec, text_len, 1);
}

tpu_status_t tpu_cache_compile(tpu_cache_t *c, uint64_t key, const char *text, size_t text_len,
                               const tpu_pjrt_compile_options_t *options, tpu_pjrt_exec_t **out_exec) {
  int from_disk;
  TPU_PROPAGATE(tpu_cache_build(c, text, text_len, options, out_exec, &from_disk));
  tpu_cache_insert(c, key, *out_exec, text_len);
  return NULL;
}

void tpu_cache_get_stats(tpu_cache_t *c, tpu_cache_stats_t *out) {
  pthread_mutex_lock(&c->lock);
  *out = c->st;
  pthread_mutex_unlock(&c->lock);
}
