/* A test program that fails the way fusilli's tests did: it does its work, prints "done", and
 * then sometimes crashes (SIGSEGV in its cleanup) or hangs (its cleanup joins a worker thread
 * that never ends). Used by iree-stress's exec-engine tests.
 *
 *   flaky SEED [CRASH_PERCENT HANG_PERCENT]   chooses by SEED (defaults 20 and 20)
 *   FLAKY_MODE=ok|crash|hang|fail|stall       forces one behaviour:
 *     ok     exit 0 after "done";  crash  SIGSEGV after "done";  hang  blocked after "done";
 *     fail   "assertion failed", exit 1 before "done";  stall  spins before "done"
 *   FLAKY_CHILD=1                             also leaves a child process behind (it sleeps
 *                                             forever: an orphan unless its group is killed)
 *
 * Build: cc -O0 -g -pthread -o flaky flaky.c
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int never = 0;

static void *device_thread(void *arg) {
  (void)arg;
  for (;;) pause(); /* the driver thread that never finishes */
  return NULL;
}

__attribute__((noinline)) static void teardown_crash(void) {
  volatile int *p = (int *)(long)never;
  *p = 42; /* SIGSEGV in cleanup */
}

__attribute__((noinline)) static void teardown_join(pthread_t t) {
  pthread_join(t, NULL); /* blocked forever: a teardown hang */
}

__attribute__((noinline)) static void work_stall(void) {
  for (;;) never = never; /* busy in the work itself: a plain hang */
}

int main(int argc, char **argv) {
  const char *mode = getenv("FLAKY_MODE");
  unsigned long seed = argc > 1 ? strtoul(argv[1], NULL, 10) : 0;
  int crash_pct = argc > 2 ? atoi(argv[2]) : 20;
  int hang_pct = argc > 3 ? atoi(argv[3]) : 20;
  if (!mode || !*mode) {
    unsigned long r = (seed * 2654435761UL >> 7) % 100;
    mode = r < (unsigned long)crash_pct ? "crash"
           : r < (unsigned long)(crash_pct + hang_pct) ? "hang" : "ok";
  }
  if (getenv("FLAKY_CHILD") && fork() == 0) {
    for (;;) pause();
  }
  pthread_t t;
  pthread_create(&t, NULL, device_thread, NULL);
  printf("running job with seed %lu (pid %d)\n", seed, (int)getpid());
  fflush(stdout);
  if (!strcmp(mode, "fail")) {
    fprintf(stderr, "assertion failed: result 3 != 4 at /tmp/build/test_%lu.cpp:12\n", seed);
    return 1;
  }
  if (!strcmp(mode, "stall")) work_stall();
  printf("done\n");
  fflush(stdout);
  if (!strcmp(mode, "crash")) teardown_crash();
  if (!strcmp(mode, "hang")) teardown_join(t);
  return 0;
}
