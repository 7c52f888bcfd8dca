/* A stand-in libamdhip64 for nightly tarballs in tests (issue 38's end-to-end bisect): the few
 * HIP calls tests/native/fusilli_like.c makes, on host memory, and a fault at process exit
 * built in (-DEXIT_FAULT_PCT=N): in N% of processes, chosen by the job's seed
 * (IREE_STRESS_SEED, which `--engine exec` sets; else the pid), its destructor crashes with
 * SIGSEGV (EXIT_FAULT_STALL=1: blocks forever instead) after the program's work is done, the
 * way fusilli's CI died in a ROCm nightly's teardown. -DBUILD_ID="..." makes each nightly's
 * build its own bytes; two builds of one BUILD_ID are identical.
 *
 * Build: cc -shared -fPIC -O1 -DEXIT_FAULT_PCT=40 -DBUILD_ID='"7.11.0a20251126"' \
 *           -o libamdhip64.so nightlyhip.c -lpthread
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef EXIT_FAULT_PCT
#define EXIT_FAULT_PCT 0
#endif
#ifndef BUILD_ID
#define BUILD_ID "unknown"
#endif

const char *nightlyhip_build_id = BUILD_ID; /* in the bytes: one build, one hash */
static int devices_opened = 0;

int hipGetDeviceCount(int *count) {
  *count = 1;
  return 0;
}

int hipSetDevice(int device) {
  devices_opened += device == 0;
  return device == 0 ? 0 : 101; /* hipErrorInvalidDevice */
}

int hipMalloc(void **ptr, size_t size) {
  *ptr = malloc(size);
  return *ptr ? 0 : 2; /* hipErrorOutOfMemory */
}

int hipMemcpy(void *dst, const void *src, size_t size, int kind) {
  (void)kind;
  memcpy(dst, src, size);
  return 0;
}

int hipFree(void *ptr) {
  free(ptr);
  return 0;
}

int hipDeviceSynchronize(void) { return 0; }

static unsigned chosen(void) {
  const char *seed = getenv("IREE_STRESS_SEED");
  uint64_t x = seed ? strtoull(seed, NULL, 10) : (uint64_t)getpid();
  x ^= x >> 33; /* splitmix-style scramble: consecutive seeds spread over 0..99 */
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return (unsigned)(x % 100);
}

__attribute__((noinline)) static void nightlyhip_teardown_fault(void) {
  if (getenv("EXIT_FAULT_STALL")) {
    for (;;) pause(); /* the runtime's teardown never returns */
  }
  volatile int *p = (int *)(intptr_t)(devices_opened - devices_opened);
  *p = 42; /* SIGSEGV in the driver's cleanup */
}

__attribute__((destructor)) static void nightlyhip_fini(void) {
  if (devices_opened && chosen() < EXIT_FAULT_PCT) nightlyhip_teardown_fault();
}
