/* A runtime fault, made to order, for the tests (LD_PRELOAD). Never shipped.
 *
 * Models the failure the incident was about: a runtime that crashes or stalls while it tears
 * devices down (a thread join inside device destruction) or while its process exits (an ELF
 * destructor). Configured by the environment, read once at load:
 *
 *   IREE_FAULT_JOIN=segv|spin|block   what pthread_join does when the fault fires
 *   IREE_FAULT_JOIN_PROB=P            probability per join (default 1)
 *   IREE_FAULT_JOIN_CALLER=SUBSTR     only joins called from a library whose path contains
 *                                     SUBSTR (default "_runtime": IREE's runtime library)
 *   IREE_FAULT_EXIT=segv|spin|block|join-spin
 *                                     what the process does in its exit destructor;
 *                                     join-spin: it starts a helper thread that spins
 *                                     (iree_fault_spin_thread) and joins it, so the exiting
 *                                     thread blocks in the join while the helper burns a core
 *                                     (a library's fini joining its stuck event thread)
 *   IREE_FAULT_EXIT_PROB=P            probability per process exit (default 1)
 *   IREE_FAULT_WORK=segv|spin|block   what a memcpy of at least IREE_FAULT_WORK_BYTES (default
 *                                     1024) called from the IREE_FAULT_JOIN_CALLER library
 *                                     does when the fault fires: such copies happen while
 *                                     devices are created, programs loaded and buffers
 *                                     uploaded or read back (during the work), never while a
 *                                     device or driver is released (measured on local-task
 *                                     and local-sync, iree-base-runtime 3.13)
 *   IREE_FAULT_WORK_PROB=P            probability per such copy (default 1)
 *   IREE_FAULT_COUNT_FILE=PATH        one line appended per fired fault ("join segv PID"),
 *                                     so tests count ground truth independently of the tool
 *   IREE_FAULT_LIMIT=N                at most N faults fire over all processes sharing the
 *                                     count file (counted under its lock; without the file
 *                                     none fires): a test gets a known number of faults, not
 *                                     a chance of none
 *
 * A process fires at most one fault (the first join, copy or exit that draws one).
 *
 * spin burns a core forever (busy); block sleeps forever in a futex wait (blocked); segv writes
 * to page zero. Each has its own non-inlined function so stacks name the mode.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum mode { NONE, SEGV, SPIN, BLOCK, JOIN_SPIN };

static enum mode join_mode, exit_mode, work_mode;
static double join_prob = 1.0, exit_prob = 1.0, work_prob = 1.0;
static size_t work_bytes = 1024;
static long fault_limit = -1;  /* < 0: no limit */
static const char *join_caller = "_runtime";
static uint64_t rng_state;
static pid_t rng_pid;  /* the process that seeded: a forked child reseeds (else every child of a
                          fork server would draw the same numbers as its siblings) */
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static int (*real_join)(pthread_t, void **);
static void *(*real_memcpy)(void *, const void *, size_t);

static enum mode parse_mode(const char *v) {
  if (!v) return NONE;
  if (!strcmp(v, "segv")) return SEGV;
  if (!strcmp(v, "spin")) return SPIN;
  if (!strcmp(v, "block")) return BLOCK;
  if (!strcmp(v, "join-spin")) return JOIN_SPIN;
  return NONE;
}

static double parse_prob(const char *v) { return v ? atof(v) : 1.0; }

static void seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  rng_pid = getpid();
  rng_state = ((uint64_t)rng_pid << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec ^ 1;
}

static double uniform(void) {
  pthread_mutex_lock(&rng_lock);
  if (getpid() != rng_pid) seed();
  uint64_t x = rng_state; /* xorshift64* */
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  rng_state = x;
  pthread_mutex_unlock(&rng_lock);
  return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

/* Appends "WHERE WHAT PID" to the count file; returns 0 when the limit is reached (nothing
 * appended: the fault must not fire). Count and append happen under one lock, so processes
 * racing for the last fault cannot both fire. */
static int note(const char *where, const char *what) {
  const char *path = getenv("IREE_FAULT_COUNT_FILE");
  if (!path) return fault_limit < 0;  /* a limit without its file: nothing fires */
  int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return fault_limit < 0;
  int go = 1;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {  /* unlocked, the count could overshoot: fire nothing */
      close(fd);
      return fault_limit < 0;
    }
  }
  if (fault_limit >= 0) {
    long lines = 0;
    char buf[4096];
    ssize_t got;
    lseek(fd, 0, SEEK_SET);
    while ((got = read(fd, buf, sizeof buf)) > 0)
      for (ssize_t i = 0; i < got; i++) lines += buf[i] == '\n';
    go = lines < fault_limit;
  }
  if (go) {
    char line[96];
    int n = snprintf(line, sizeof line, "%s %s %d\n", where, what, (int)getpid());
    if (n > 0) (void)!write(fd, line, (size_t)n);
  }
  flock(fd, LOCK_UN);
  close(fd);
  return go;
}

__attribute__((noinline)) void iree_fault_segv(void) {
  *(volatile int *)0 = 1;
}

__attribute__((noinline)) void iree_fault_spin(void) {
  for (;;) __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void iree_fault_block(void) {
  static int word;
  for (;;) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

__attribute__((noinline)) void *iree_fault_spin_thread(void *arg) {
  (void)arg;
  iree_fault_spin();
  return NULL;
}

/* The exiting thread joins a helper that never ends: blocked in the join, the helper busy. */
__attribute__((noinline)) void iree_fault_join_spinning(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, iree_fault_spin_thread, NULL) == 0) real_join(t, NULL);
}

static void fire(enum mode m, const char *where) {
  static const char *names[] = {"none", "segv", "spin", "block", "join-spin"};
  /* One fault per process (two threads joining at once must not write two lines for one
   * crash); a forked child, another pid, gets its own. */
  static pid_t fired_in;
  pid_t me = getpid();
  if (__atomic_exchange_n(&fired_in, me, __ATOMIC_SEQ_CST) == me) return;
  if (!note(where, names[m])) return;
  if (m == SEGV) iree_fault_segv();
  if (m == SPIN) iree_fault_spin();
  if (m == BLOCK) iree_fault_block();
  if (m == JOIN_SPIN) iree_fault_join_spinning();
}

__attribute__((constructor)) static void fault_init(void) {
  join_mode = parse_mode(getenv("IREE_FAULT_JOIN"));
  exit_mode = parse_mode(getenv("IREE_FAULT_EXIT"));
  join_prob = parse_prob(getenv("IREE_FAULT_JOIN_PROB"));
  exit_prob = parse_prob(getenv("IREE_FAULT_EXIT_PROB"));
  work_mode = parse_mode(getenv("IREE_FAULT_WORK"));
  if (work_mode == JOIN_SPIN) work_mode = NONE;  /* an exit mode only */
  if (join_mode == JOIN_SPIN) join_mode = NONE;
  work_prob = parse_prob(getenv("IREE_FAULT_WORK_PROB"));
  const char *wb = getenv("IREE_FAULT_WORK_BYTES");
  if (wb) work_bytes = (size_t)strtoul(wb, NULL, 10);
  const char *c = getenv("IREE_FAULT_JOIN_CALLER");
  if (c) join_caller = c;
  const char *lim = getenv("IREE_FAULT_LIMIT");
  if (lim) {
    char *end;
    errno = 0;
    fault_limit = strtol(lim, &end, 10);
    if (errno || end == lim || *end || fault_limit < 0) {
      fprintf(stderr, "libfault: IREE_FAULT_LIMIT=%s is not a count\n", lim);
      abort();
    }
  }
  seed();
  real_join = (int (*)(pthread_t, void **))dlsym(RTLD_NEXT, "pthread_join");
  real_memcpy = (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memcpy");
}

/* Copies made before the constructor found the C library's own (the loader's, early): byte
 * by byte. Not inlined into a builtin: this is the one memcpy of the process. */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
void *memcpy(void *dst, const void *src, size_t n) {
  if (!real_memcpy) {
    char *d = dst;
    const char *s = src;
    for (size_t i = 0; i < n; i++) d[i] = s[i];
    return dst;
  }
  if (work_mode != NONE && n >= work_bytes) {
    Dl_info info;
    void *caller = __builtin_return_address(0);
    if (dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, join_caller) &&
        uniform() < work_prob) {
      fire(work_mode, "work");
    }
  }
  return real_memcpy(dst, src, n);
}

int pthread_join(pthread_t thread, void **ret) {
  if (join_mode != NONE) {
    Dl_info info;
    void *caller = __builtin_return_address(0);
    if (dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, join_caller) &&
        uniform() < join_prob) {
      fire(join_mode, "join");
    }
  }
  return real_join(thread, ret);
}

/* Runs in exit() after Python's finalization, like a driver's exit handler; os._exit skips it.
 * A forked child inherits the mode; the parent that forks never exits through here in tests. */
__attribute__((destructor)) static void fault_at_exit(void) {
  if (exit_mode != NONE && uniform() < exit_prob) fire(exit_mode, "exit");
}
