/* A stand-in libamdhip64.so for the tests (issue 37). Never shipped; no AMD code in it.
 *
 * It exports every HIP entry point IREE's hip driver resolves (the names the installed
 * runtime's dynamic symbol table asks for), so the REAL driver of the iree-base-runtime wheel
 * loads it through IREE_HIP_DYLIB_PATH / --hip_dylib_path and runs its whole host side on it:
 * device enumeration, contexts, streams, events, memory pools, module loading, launches,
 * graphs and teardown. What it is, and is not:
 *
 *   - device memory is host memory (malloc); copies and memsets really move bytes, so a
 *     program made only of transfers gives the right answer end to end;
 *   - each stream is a real worker thread: async copies, memsets, event records, stream waits,
 *     host callbacks, kernel launches and graph launches run in order on it, so waits and
 *     teardown are as asynchronous as on a GPU;
 *   - module load accepts only an AMDGPU ELF code object (e_machine 224), and a function must
 *     be named in it;
 *   - a kernel launch is counted, NOT run: results of programs with dispatches are garbage;
 *   - it names itself as what it is (hipDeviceGetName), so no report can pass it for a GPU.
 *
 * Environment, read once at load:
 *
 *   FAKEHIP_DEVICES=N             devices to report (default 1)
 *   FAKEHIP_FAULT=NAME            one fault, modelled on the incident (off by default; a
 *                                 name it does not know: hipInit refuses, saying so):
 *      events-spin    at library cleanup (dlclose, or process exit) the runtime's async-events
 *                     thread spins instead of stopping; cleanup waits for it forever (busy)
 *      events-block   the same thread blocks forever instead (blocked)
 *      cleanup-segv   cleanup wakes the events thread through a wake signal that was never
 *                     initialized (the polling thread started before it): SIGSEGV
 *      dlclose-segv   the cleanup of a library that ran hipInit leaves an exit handler
 *                     behind: process exit calls it after dlclose, into unmapped code (the
 *                     dlopen + hipInit + dlclose canary): SIGSEGV (once per process)
 *      release-spin   hipStreamSynchronize spins when a device releases its streams
 *      release-block  ... blocks there instead
 *   FAKEHIP_FAULT_PROB=P          probability per process (cleanup faults) or per stream
 *                                 release (release faults); default 1
 *   FAKEHIP_COUNT_FILE=PATH       one line appended per fired fault ("events spin PID"): the
 *                                 ground truth, independent of the tool
 *   FAKEHIP_LAUNCH_FILE=PATH      one line appended at cleanup: "launches N PID" (kernels
 *                                 counted by the stream threads) when N > 0
 *
 * A process fires at most one fault. A build may compile a fault in (-DFAKEHIP_DEFAULT_FAULT=
 * "\"NAME\"", -DFAKEHIP_DEFAULT_PROB="\"P\""): a library that is bad by itself, as a broken
 * nightly is; the environment still overrides it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int hipError_t;
enum {
  hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2,
  hipErrorNotInitialized = 3, hipErrorNoDevice = 100, hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200, hipErrorInvalidContext = 201, hipErrorInvalidHandle = 400,
  hipErrorNotFound = 500, hipErrorNotReady = 600, hipErrorInvalidConfiguration = 9,
  hipErrorNotSupported = 801, hipErrorUnknown = 999,
};

static const char DEVICE_NAME[] = "iree-stress stand-in HIP device (kernels not run)";
static const uint16_t EM_AMDGPU_ = 224;
static const int MAX_DEVICES = 8;
static const int ALLOC_HEADER = 256;  /* HIP device pointers are at least 256-byte aligned */
static const uint32_t ALLOC_MAGIC = 0x46484950;  /* "FHIP": ours to free */

/* ---- faults -------------------------------------------------------------------------- */

enum fault { F_NONE, F_EVENTS_SPIN, F_EVENTS_BLOCK, F_CLEANUP_SEGV, F_DLCLOSE_SEGV,
             F_RELEASE_SPIN, F_RELEASE_BLOCK };
static const char *const FAULT_NAMES[] = {"none", "events-spin", "events-block", "cleanup-segv",
                                          "dlclose-segv", "release-spin", "release-block"};
static enum fault fault;
static char bad_fault[256];  /* FAKEHIP_FAULT names no fault: why hipInit refuses ('' none) */
static double fault_prob = 1.0;
static int device_count = 1;
static uint64_t rng_state;
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;

static double uniform(void) {
  pthread_mutex_lock(&rng_lock);
  uint64_t x = rng_state; /* xorshift64* */
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  rng_state = x;
  pthread_mutex_unlock(&rng_lock);
  return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

static void append_line(const char *env, const char *line) {
  const char *path = getenv(env);
  if (!path) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  flock(fd, LOCK_EX);
  (void)!write(fd, line, strlen(line));
  flock(fd, LOCK_UN);
  close(fd);
}

/* Whether `which` fires now: drawn, at most once per process, and written down first. */
static int fires(enum fault which) {
  static int fired;
  if (fault != which || uniform() >= fault_prob) return 0;
  if (__atomic_exchange_n(&fired, 1, __ATOMIC_SEQ_CST)) return 0;
  char line[96];  /* "WHERE MODE PID", as tests/native/libfault.c writes its own */
  snprintf(line, sizeof line, "%s %d\n", FAULT_NAMES[which], (int)getpid());
  char *dash = strchr(line, '-');
  if (dash) *dash = ' ';
  append_line("FAKEHIP_COUNT_FILE", line);
  return 1;
}

/* Each stuck place spins or blocks in its own function body (not by calling a shared one: a
 * tail call would leave the named frame off the stack), so stacks name the fault. */
#define SPIN_FOREVER() for (;;) __asm__ volatile("" ::: "memory")
#define BLOCK_FOREVER()                                                      \
  do {                                                                       \
    static int word_;                                                        \
    for (;;) syscall(SYS_futex, &word_, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0); \
  } while (0)

/* ---- per-thread state ---------------------------------------------------------------- */

typedef struct ctx { int device; } ctx_t;
static ctx_t contexts[8];
static __thread ctx_t *ctx_stack[16];
static __thread int ctx_depth;
static __thread hipError_t last_error;
static int initialized;

static hipError_t ret(hipError_t e) {
  if (e != hipSuccess) last_error = e;
  return e;
}

/* ---- events -------------------------------------------------------------------------- */

/* One lock for every event: completion is rare next to the work, and one condition lets any
 * waiter (a stream thread, hipEventSynchronize) see any completion. */
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;

typedef struct event {
  int refs;            /* the handle + each queued op naming it */
  uint64_t recorded;   /* records asked for */
  uint64_t completed;  /* records the stream reached */
  struct timespec at;  /* when the last record completed */
} event_t;

static void event_unref(event_t *e) {
  pthread_mutex_lock(&ev_lock);
  int last = --e->refs == 0;
  pthread_mutex_unlock(&ev_lock);
  if (last) free(e);
}

static void event_complete(event_t *e, uint64_t gen) {
  pthread_mutex_lock(&ev_lock);
  if (gen > e->completed) e->completed = gen;
  clock_gettime(CLOCK_MONOTONIC, &e->at);
  pthread_cond_broadcast(&ev_cond);
  pthread_mutex_unlock(&ev_lock);
}

static void event_wait(event_t *e, uint64_t gen) {
  pthread_mutex_lock(&ev_lock);
  while (e->completed < gen) pthread_cond_wait(&ev_cond, &ev_lock);
  pthread_mutex_unlock(&ev_lock);
}

/* ---- streams ------------------------------------------------------------------------- */

typedef void (*host_fn)(void *);
enum op_kind { OP_COPY, OP_FILL, OP_RECORD, OP_WAIT, OP_HOST, OP_KERNEL, OP_FREE, OP_GRAPH };

typedef struct node node_t;
typedef struct op {
  enum op_kind kind;
  void *dst;
  const void *src;
  size_t bytes;      /* copy: bytes; fill: elements */
  uint32_t value;
  int width;         /* fill element size: 1, 2 or 4 */
  event_t *event;
  uint64_t gen;
  host_fn fn;
  void *arg;
  node_t *nodes;     /* a launched graph's own copy */
  size_t node_count;
  struct op *next;
} op_t;

typedef struct stream {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  op_t *head, *tail;
  uint64_t submitted, done;
  int stop;
  pthread_t thread;
} stream_t;

static long launches;  /* kernels reached by a stream thread (atomic) */

static void fill(void *dst, uint32_t value, int width, size_t count) {
  if (width == 1) { memset(dst, (int)(value & 0xff), count); return; }
  for (size_t i = 0; i < count; i++) {
    if (width == 2) ((uint16_t *)dst)[i] = (uint16_t)value;
    else ((uint32_t *)dst)[i] = value;
  }
}

static void run_nodes(node_t *nodes, size_t n);

static void run_op(op_t *op) {
  switch (op->kind) {
    case OP_COPY: memmove(op->dst, op->src, op->bytes); free(op->arg); break;  /* arg: staged */
    case OP_FILL: fill(op->dst, op->value, op->width, op->bytes); break;
    case OP_RECORD: event_complete(op->event, op->gen); event_unref(op->event); break;
    case OP_WAIT: event_wait(op->event, op->gen); event_unref(op->event); break;
    case OP_HOST: if (op->fn) op->fn(op->arg); break;  /* an empty graph node has none */
    case OP_KERNEL: __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED); break;
    case OP_FREE: free((char *)op->dst - ALLOC_HEADER); break;
    case OP_GRAPH: run_nodes(op->nodes, op->node_count); break;
  }
}

static void *fakehip_stream_worker(void *arg) {
  stream_t *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head) break;
    op_t *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    run_op(op);
    free(op->nodes);
    free(op);
    pthread_mutex_lock(&s->lock);
    s->done++;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Queues `op` on `s` (the null stream runs it at once, as the legacy default stream
 * serializes with everything). */
static hipError_t submit(stream_t *s, op_t tmpl) {
  if (!s) {
    run_op(&tmpl);
    free(tmpl.nodes);
    return hipSuccess;
  }
  op_t *op = malloc(sizeof *op);
  if (!op) return ret(hipErrorOutOfMemory);
  *op = tmpl;
  op->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = op; else s->head = op;
  s->tail = op;
  s->submitted++;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return hipSuccess;
}

/* ---- graphs -------------------------------------------------------------------------- */

struct node { op_t op; };
typedef struct graph { node_t *nodes; size_t count, cap; } graph_t;
typedef struct graph_exec { node_t *nodes; size_t count; } graph_exec_t;

static void run_nodes(node_t *nodes, size_t n) {
  /* Nodes are added after their dependencies, so insertion order is a topological order. */
  for (size_t i = 0; i < n; i++) run_op(&nodes[i].op);
}

static hipError_t add_node(void **out, graph_t *g, op_t op) {
  if (!g || !out) return ret(hipErrorInvalidValue);
  if (g->count == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 16;
    node_t *grown = realloc(g->nodes, cap * sizeof *grown);
    if (!grown) return ret(hipErrorOutOfMemory);
    g->nodes = grown;
    g->cap = cap;
  }
  g->nodes[g->count].op = op;
  *out = &g->nodes[g->count];  /* an opaque handle: only its identity is used */
  g->count++;
  return hipSuccess;
}

/* ---- the async-events thread and cleanup ---------------------------------------------- */

/* The runtime's own background thread, started at hipInit: it sleeps on its wake signal until
 * cleanup tells it to stop. */
typedef struct wake { pthread_mutex_t lock; pthread_cond_t cond; int stop; } wake_t;
static wake_t events_wake_storage = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
static wake_t *events_wake;  /* set once the thread's signal is ready */
static pthread_t events_thread;
static int events_started;
static pid_t events_pid;  /* a forked child has no events thread to wake or join */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

__attribute__((noinline)) static void fakehip_events_thread_spin(void) { SPIN_FOREVER(); }
__attribute__((noinline)) static void fakehip_events_thread_block(void) { BLOCK_FOREVER(); }

static void *fakehip_events_thread(void *arg) {
  (void)arg;
  wake_t *w = &events_wake_storage;
  pthread_mutex_lock(&w->lock);
  while (!w->stop) pthread_cond_wait(&w->cond, &w->lock);
  pthread_mutex_unlock(&w->lock);
  if (fires(F_EVENTS_SPIN)) fakehip_events_thread_spin();
  if (fires(F_EVENTS_BLOCK)) fakehip_events_thread_block();
  return NULL;
}

__attribute__((noinline)) static void fakehip_wake_events_thread(wake_t *w) {
  pthread_mutex_lock(&w->lock);  /* w is NULL in the race: SIGSEGV here */
  w->stop = 1;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

/* Left behind by a finished cleanup. Called at exit: through unmapped code when the library
 * was dlclosed (SIGSEGV with no frame of ours); if the same library was loaded again at the same
 * address, its code runs, and the handler of a finished library crashes all the same. */
__attribute__((noinline)) static void fakehip_exit_handler(void *arg) {
  (void)arg;
  *(volatile int *)0 = 1;
}

static const char DANGLING_ENV[] = "FAKEHIP_DANGLING_PID";  /* survives a reload */

/* At most one dangling handler per process: the library may be loaded and unloaded again
 * (IREE's driver is created and destroyed more than once), its statics reset each time. */
static void leave_exit_handler(void) {
  char me[16];
  snprintf(me, sizeof me, "%d", (int)getpid());
  const char *was = getenv(DANGLING_ENV);
  if ((was && !strcmp(was, me)) || !fires(F_DLCLOSE_SEGV)) return;
  setenv(DANGLING_ENV, me, 1);
  /* No DSO handle: glibc keeps the handler past dlclose and calls it at exit. */
  extern int __cxa_atexit(void (*)(void *), void *, void *);
  __cxa_atexit(fakehip_exit_handler, NULL, NULL);
}

static void start_runtime(void) {
  if (pthread_create(&events_thread, NULL, fakehip_events_thread, NULL) == 0) {
    events_started = 1;
    events_pid = getpid();
  }
  events_wake = &events_wake_storage;
}

__attribute__((destructor)) static void fakehip_cleanup(void) {
  if (!events_started || events_pid != getpid()) return;
  if (fires(F_CLEANUP_SEGV)) events_wake = NULL;
  fakehip_wake_events_thread(events_wake);
  pthread_join(events_thread, NULL);
  leave_exit_handler();  /* after hipInit, at dlclose (or exit): the canary's crash */
  long n = __atomic_load_n(&launches, __ATOMIC_RELAXED);
  if (n > 0) {
    char line[64];
    snprintf(line, sizeof line, "launches %ld %d\n", n, (int)getpid());
    append_line("FAKEHIP_LAUNCH_FILE", line);
  }
}

__attribute__((constructor)) static void fakehip_load(void) {
  const char *f = getenv("FAKEHIP_FAULT");
#ifdef FAKEHIP_DEFAULT_FAULT
  /* a build with its fault compiled in (a "bad nightly": tests/helpers/fakehip.build) */
  if (!f) f = FAKEHIP_DEFAULT_FAULT;
#endif
  for (int i = 1; f && i < (int)(sizeof FAULT_NAMES / sizeof *FAULT_NAMES); i++)
    if (!strcmp(f, FAULT_NAMES[i])) fault = (enum fault)i;
  if (f && *f && fault == F_NONE)  /* hipInit refuses, saying why: the driver cannot load */
    snprintf(bad_fault, sizeof bad_fault, "iree-stress stand-in HIP: FAKEHIP_FAULT=%.64s is "
             "not a fault it knows (%s, %s, %s, %s, %s, %s)", f, FAULT_NAMES[1], FAULT_NAMES[2],
             FAULT_NAMES[3], FAULT_NAMES[4], FAULT_NAMES[5], FAULT_NAMES[6]);
  const char *p = getenv("FAKEHIP_FAULT_PROB");
#ifdef FAKEHIP_DEFAULT_PROB
  if (!p) p = FAKEHIP_DEFAULT_PROB;
#endif
  if (p) fault_prob = atof(p);
  const char *d = getenv("FAKEHIP_DEVICES");
  if (d) device_count = atoi(d);
  if (device_count < 0) device_count = 0;
  if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
  for (int i = 0; i < MAX_DEVICES; i++) contexts[i].device = i;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  rng_state = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec ^ 1;
}

/* ---- the API ------------------------------------------------------------------------- */

static void *dev_alloc(size_t bytes) {
  void *base = NULL;
  if (posix_memalign(&base, (size_t)ALLOC_HEADER, (size_t)ALLOC_HEADER + (bytes ? bytes : 1)))
    return NULL;
  *(uint32_t *)base = ALLOC_MAGIC;
  *(size_t *)((char *)base + 8) = bytes;
  return (char *)base + ALLOC_HEADER;
}

static int ours(const void *p) {
  return p && *(const uint32_t *)((const char *)p - ALLOC_HEADER) == ALLOC_MAGIC;
}

static void dev_free(void *p) {
  if (ours(p)) {
    *(uint32_t *)((char *)p - ALLOC_HEADER) = 0;
    free((char *)p - ALLOC_HEADER);
  }
}

static int valid_device(int d) { return d >= 0 && d < device_count; }

EXPORT hipError_t hipInit(unsigned int flags) {
  (void)flags;
  if (bad_fault[0]) return ret(hipErrorInvalidValue);
  pthread_once(&init_once, start_runtime);
  initialized = 1;
  return device_count ? hipSuccess : ret(hipErrorNoDevice);
}

EXPORT hipError_t hipGetDeviceCount(int *count) {
  if (!count) return ret(hipErrorInvalidValue);
  *count = device_count;
  return device_count ? hipSuccess : ret(hipErrorNoDevice);
}

EXPORT hipError_t hipDeviceGet(int *device, int ordinal) {
  if (!device || !valid_device(ordinal)) return ret(hipErrorInvalidDevice);
  *device = ordinal;
  return hipSuccess;
}

EXPORT hipError_t hipSetDevice(int device) {
  return valid_device(device) ? hipSuccess : ret(hipErrorInvalidDevice);
}

EXPORT hipError_t hipDeviceGetName(char *name, int len, int device) {
  if (!name || len <= 0 || !valid_device(device)) return ret(hipErrorInvalidValue);
  snprintf(name, (size_t)len, "%s", DEVICE_NAME);
  return hipSuccess;
}

EXPORT hipError_t hipDeviceGetUuid(void *uuid, int device) {
  if (!uuid || !valid_device(device)) return ret(hipErrorInvalidValue);
  char bytes[16] = "fakehip-device-";
  bytes[15] = (char)('0' + device);
  memcpy(uuid, bytes, 16);
  return hipSuccess;
}

/* hipDeviceAttribute_t values (HIP 6+) and what the stand-in answers; 0 for the rest. */
static const struct { int attr; int value; } ATTRIBUTES[] = {
    {3, 1},            /* CanMapHostMemory */
    {5, 2100000},      /* ClockRate, kHz */
    {8, 1},            /* ConcurrentKernels */
    {19, 4 << 20},     /* L2CacheSize */
    {23, 9},           /* ComputeCapabilityMajor */
    {24, 1},           /* ManagedMemory */
    {26, 1024}, {27, 1024}, {28, 1024},                /* MaxBlockDimX/Y/Z */
    {29, 2147483647}, {30, 65536}, {31, 65536},        /* MaxGridDimX/Y/Z */
    {56, 1024},        /* MaxThreadsPerBlock */
    {57, 2048},        /* MaxThreadsPerMultiProcessor */
    {59, 8192},        /* MemoryBusWidth */
    {60, 1300000},     /* MemoryClockRate, kHz */
    {61, 4},           /* ComputeCapabilityMinor */
    {63, 304},         /* MultiprocessorCount */
    {71, 65536},       /* MaxRegistersPerBlock */
    {74, 65536},       /* MaxSharedMemoryPerBlock */
    {76, 65536},       /* SharedMemPerMultiprocessor */
    {83, 2147483647},  /* TotalConstantMemory */
    {84, 2147483647},  /* TotalGlobalMem (an int: capped) */
    {85, 1},           /* UnifiedAddressing */
    {87, 64},          /* WarpSize */
    {88, 1},           /* MemoryPoolsSupported */
    {90, 1},           /* HostRegisterSupported */
    {10002, 65536},    /* MaxSharedMemoryPerMultiprocessor */
    {10017, 100000},   /* WallClockRate, kHz */
};

EXPORT hipError_t hipDeviceGetAttribute(int *value, int attr, int device) {
  if (!value || !valid_device(device)) return ret(hipErrorInvalidValue);
  *value = 0;
  for (size_t i = 0; i < sizeof ATTRIBUTES / sizeof *ATTRIBUTES; i++)
    if (ATTRIBUTES[i].attr == attr) *value = ATTRIBUTES[i].value;
  return hipSuccess;
}

/* hipDeviceProp_tR0000, the layout hipGetDeviceProperties fills (HIP's pre-6.0 ABI, which
 * IREE asks for): field order and types are the ABI, written out here by hand. */
typedef struct {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  int clockRate, memoryClockRate, memoryBusWidth;
  size_t totalConstMem;
  int major, minor, multiProcessorCount, l2CacheSize, maxThreadsPerMultiProcessor;
  int computeMode, clockInstructionRate;
  unsigned arch;  /* a 32-bit field of feature bits */
  int concurrentKernels, pciDomainID, pciBusID, pciDeviceID;
  size_t maxSharedMemoryPerMultiProcessor;
  int isMultiGpuBoard, canMapHostMemory, gcnArch;
  char gcnArchName[256];
  int integrated, cooperativeLaunch, cooperativeMultiDeviceLaunch, maxTexture1DLinear;
  int maxTexture1D, maxTexture2D[2], maxTexture3D[3];
  unsigned *hdpMemFlushCntl, *hdpRegFlushCntl;
  size_t memPitch, textureAlignment, texturePitchAlignment;
  int kernelExecTimeoutEnabled, ECCEnabled, tccDriver;
  int cooperativeMultiDeviceUnmatched[4];
  int isLargeBar, asicRevision, managedMemory, directManagedMemAccessFromHost;
  int concurrentManagedAccess, pageableMemoryAccess, pageableMemoryAccessUsesHostPageTables;
} props_r0000_t;

EXPORT hipError_t hipGetDeviceProperties(props_r0000_t *p, int device) {
  if (!p || !valid_device(device)) return ret(hipErrorInvalidValue);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", DEVICE_NAME);
  snprintf(p->gcnArchName, sizeof p->gcnArchName, "gfx942 (stand-in)");
  p->totalGlobalMem = (size_t)1 << 30;
  p->sharedMemPerBlock = 65536;
  p->regsPerBlock = 65536;
  p->warpSize = 64;
  p->maxThreadsPerBlock = 1024;
  for (int i = 0; i < 3; i++) p->maxThreadsDim[i] = 1024;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65536;
  p->clockRate = 2100000;
  p->memoryClockRate = 1300000;
  p->memoryBusWidth = 8192;
  p->totalConstMem = (size_t)1 << 30;
  p->major = 9;
  p->minor = 4;
  p->multiProcessorCount = 304;
  p->l2CacheSize = 4 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->concurrentKernels = 1;
  p->canMapHostMemory = 1;
  p->managedMemory = 1;
  return hipSuccess;
}

EXPORT hipError_t hipDeviceCanAccessPeer(int *can, int device, int peer) {
  if (!can || !valid_device(device) || !valid_device(peer)) return ret(hipErrorInvalidDevice);
  *can = device != peer;
  return hipSuccess;
}

EXPORT hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags) {
  (void)flags;
  return valid_device(peer) ? hipSuccess : ret(hipErrorInvalidDevice);
}

EXPORT hipError_t hipDevicePrimaryCtxRetain(ctx_t **out, int device) {
  if (!out || !valid_device(device)) return ret(hipErrorInvalidDevice);
  *out = &contexts[device];
  return hipSuccess;
}

EXPORT hipError_t hipDevicePrimaryCtxRelease(int device) {
  return valid_device(device) ? hipSuccess : ret(hipErrorInvalidDevice);
}

EXPORT hipError_t hipCtxSetCurrent(ctx_t *c) {
  if (ctx_depth == 0) ctx_depth = 1;
  ctx_stack[ctx_depth - 1] = c;
  return hipSuccess;
}

EXPORT hipError_t hipCtxGetCurrent(ctx_t **out) {
  if (!out) return ret(hipErrorInvalidValue);
  *out = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
  return hipSuccess;
}

EXPORT hipError_t hipCtxPushCurrent(ctx_t *c) {
  if (ctx_depth == (int)(sizeof ctx_stack / sizeof *ctx_stack)) return ret(hipErrorUnknown);
  ctx_stack[ctx_depth++] = c;
  return hipSuccess;
}

EXPORT hipError_t hipCtxPopCurrent(ctx_t **out) {
  if (ctx_depth == 0) return ret(hipErrorInvalidContext);
  ctx_depth--;
  if (out) *out = ctx_stack[ctx_depth];
  return hipSuccess;
}

/* -- errors -- */

static const struct { int code; const char *name; } ERRORS[] = {
    {hipSuccess, "hipSuccess"}, {hipErrorInvalidValue, "hipErrorInvalidValue"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized"}, {hipErrorNoDevice, "hipErrorNoDevice"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice"},
    {hipErrorInvalidImage, "hipErrorInvalidImage"},
    {hipErrorInvalidContext, "hipErrorInvalidContext"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle"}, {hipErrorNotFound, "hipErrorNotFound"},
    {hipErrorNotReady, "hipErrorNotReady"},
    {hipErrorInvalidConfiguration, "hipErrorInvalidConfiguration"},
    {hipErrorNotSupported, "hipErrorNotSupported"}, {hipErrorUnknown, "hipErrorUnknown"},
};

EXPORT const char *hipGetErrorName(hipError_t e) {
  for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++)
    if (ERRORS[i].code == e) return ERRORS[i].name;
  return "hipErrorUnknown";
}

EXPORT const char *hipGetErrorString(hipError_t e) {
  if (bad_fault[0] && e == hipErrorInvalidValue) return bad_fault;
  return e == hipSuccess ? "no error" : hipGetErrorName(e);
}

EXPORT hipError_t hipGetLastError(void) {
  hipError_t e = last_error;
  last_error = hipSuccess;
  return e;
}

/* -- streams -- */

EXPORT hipError_t hipStreamCreateWithFlags(stream_t **out, unsigned int flags) {
  (void)flags;
  if (!out) return ret(hipErrorInvalidValue);
  stream_t *s = calloc(1, sizeof *s);
  if (!s) return ret(hipErrorOutOfMemory);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->thread, NULL, fakehip_stream_worker, s)) {
    free(s);
    return ret(hipErrorOutOfMemory);
  }
  *out = s;
  return hipSuccess;
}

static __thread int releasing;  /* inside hipStreamDestroy: a device is being released */

__attribute__((noinline)) static void fakehip_release_spin(void) { SPIN_FOREVER(); }
__attribute__((noinline)) static void fakehip_release_block(void) { BLOCK_FOREVER(); }

EXPORT hipError_t hipStreamSynchronize(stream_t *s) {
  if (releasing) {
    if (fires(F_RELEASE_SPIN)) fakehip_release_spin();
    if (fires(F_RELEASE_BLOCK)) fakehip_release_block();
  }
  if (!s) return hipSuccess;
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->submitted;
  while (s->done < target) pthread_cond_wait(&s->cond, &s->lock);
  pthread_mutex_unlock(&s->lock);
  return hipSuccess;
}

EXPORT hipError_t hipStreamDestroy(stream_t *s) {
  if (!s) return ret(hipErrorInvalidHandle);
  /* Work already queued completes first, as on a GPU; the wait is where a device's release
   * meets the stream's thread. */
  releasing = 1;
  hipStreamSynchronize(s);
  releasing = 0;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return hipSuccess;
}

EXPORT hipError_t hipStreamWaitEvent(stream_t *s, event_t *e, unsigned int flags) {
  (void)flags;
  if (!e) return ret(hipErrorInvalidHandle);
  pthread_mutex_lock(&ev_lock);
  uint64_t gen = e->recorded;
  e->refs++;
  pthread_mutex_unlock(&ev_lock);
  return submit(s, (op_t){.kind = OP_WAIT, .event = e, .gen = gen});
}

EXPORT hipError_t hipLaunchHostFunc(stream_t *s, host_fn fn, void *arg) {
  if (!fn) return ret(hipErrorInvalidValue);
  return submit(s, (op_t){.kind = OP_HOST, .fn = fn, .arg = arg});
}

/* -- events -- */

EXPORT hipError_t hipEventCreateWithFlags(event_t **out, unsigned int flags) {
  (void)flags;
  if (!out) return ret(hipErrorInvalidValue);
  event_t *e = calloc(1, sizeof *e);
  if (!e) return ret(hipErrorOutOfMemory);
  e->refs = 1;
  *out = e;
  return hipSuccess;
}

EXPORT hipError_t hipEventCreate(event_t **out) { return hipEventCreateWithFlags(out, 0); }

EXPORT hipError_t hipEventDestroy(event_t *e) {
  if (!e) return ret(hipErrorInvalidHandle);
  event_unref(e);
  return hipSuccess;
}

EXPORT hipError_t hipEventRecord(event_t *e, stream_t *s) {
  if (!e) return ret(hipErrorInvalidHandle);
  pthread_mutex_lock(&ev_lock);
  uint64_t gen = ++e->recorded;
  e->refs++;
  pthread_mutex_unlock(&ev_lock);
  return submit(s, (op_t){.kind = OP_RECORD, .event = e, .gen = gen});
}

EXPORT hipError_t hipEventQuery(event_t *e) {
  if (!e) return ret(hipErrorInvalidHandle);
  pthread_mutex_lock(&ev_lock);
  int ready = e->completed >= e->recorded;
  pthread_mutex_unlock(&ev_lock);
  return ready ? hipSuccess : hipErrorNotReady;  /* not ready is no error to remember */
}

EXPORT hipError_t hipEventSynchronize(event_t *e) {
  if (!e) return ret(hipErrorInvalidHandle);
  pthread_mutex_lock(&ev_lock);
  uint64_t gen = e->recorded;
  pthread_mutex_unlock(&ev_lock);
  event_wait(e, gen);
  return hipSuccess;
}

EXPORT hipError_t hipEventElapsedTime(float *ms, event_t *start, event_t *stop) {
  if (!ms || !start || !stop) return ret(hipErrorInvalidValue);
  pthread_mutex_lock(&ev_lock);
  *ms = (float)((double)(stop->at.tv_sec - start->at.tv_sec) * 1e3 +
                (double)(stop->at.tv_nsec - start->at.tv_nsec) / 1e6);
  pthread_mutex_unlock(&ev_lock);
  return hipSuccess;
}

/* -- memory -- */

EXPORT hipError_t hipMalloc(void **out, size_t bytes) {
  if (!out) return ret(hipErrorInvalidValue);
  *out = dev_alloc(bytes);
  return *out ? hipSuccess : ret(hipErrorOutOfMemory);
}

EXPORT hipError_t hipMallocManaged(void **out, size_t bytes, unsigned int flags) {
  (void)flags;
  return hipMalloc(out, bytes);
}

EXPORT hipError_t hipMallocAsync(void **out, size_t bytes, stream_t *s) {
  (void)s;
  return hipMalloc(out, bytes);
}

EXPORT hipError_t hipHostMalloc(void **out, size_t bytes, unsigned int flags) {
  (void)flags;
  return hipMalloc(out, bytes);
}

EXPORT hipError_t hipFree(void *p) {
  dev_free(p);
  return hipSuccess;
}

EXPORT hipError_t hipHostFree(void *p) { return hipFree(p); }

EXPORT hipError_t hipFreeAsync(void *p, stream_t *s) {
  if (!ours(p)) return p ? ret(hipErrorInvalidValue) : hipSuccess;
  *(uint32_t *)((char *)p - ALLOC_HEADER) = 0;
  return submit(s, (op_t){.kind = OP_FREE, .dst = p});
}

EXPORT hipError_t hipHostRegister(void *p, size_t bytes, unsigned int flags) {
  (void)bytes; (void)flags;
  return p ? hipSuccess : ret(hipErrorInvalidValue);
}

EXPORT hipError_t hipHostUnregister(void *p) { return p ? hipSuccess : ret(hipErrorInvalidValue); }

EXPORT hipError_t hipHostGetDevicePointer(void **out, void *host, unsigned int flags) {
  (void)flags;
  if (!out || !host) return ret(hipErrorInvalidValue);
  *out = host;  /* device memory is host memory */
  return hipSuccess;
}

EXPORT hipError_t hipMemPrefetchAsync(const void *p, size_t bytes, int device, stream_t *s) {
  (void)p; (void)bytes; (void)device; (void)s;
  return hipSuccess;
}

EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t bytes, int kind) {
  (void)kind;
  if (bytes && (!dst || !src)) return ret(hipErrorInvalidValue);
  memmove(dst, src, bytes);
  return hipSuccess;
}

static const int MEMCPY_HOST_TO_DEVICE = 1;  /* hipMemcpyHostToDevice */

EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t bytes, int kind,
                                 stream_t *s) {
  if (bytes && (!dst || !src)) return ret(hipErrorInvalidValue);
  if (kind == MEMCPY_HOST_TO_DEVICE && s && bytes) {
    /* A copy from host memory reads its source before the call returns, as HIP does from
     * pageable memory (staged): the caller may reuse the memory at once (IREE's command
     * buffers free their arena copies when the stream still has to reach the copy). */
    void *staged = malloc(bytes);
    if (!staged) return ret(hipErrorOutOfMemory);
    memcpy(staged, src, bytes);
    return submit(s, (op_t){.kind = OP_COPY, .dst = dst, .src = staged, .bytes = bytes,
                            .arg = staged});
  }
  return submit(s, (op_t){.kind = OP_COPY, .dst = dst, .src = src, .bytes = bytes});
}

EXPORT hipError_t hipMemcpyHtoDAsync(void *dst, void *src, size_t bytes, stream_t *s) {
  return hipMemcpyAsync(dst, src, bytes, MEMCPY_HOST_TO_DEVICE, s);
}

EXPORT hipError_t hipMemset(void *dst, int value, size_t bytes) {
  if (bytes && !dst) return ret(hipErrorInvalidValue);
  memset(dst, value, bytes);
  return hipSuccess;
}

static hipError_t memset_async(void *dst, uint32_t value, int width, size_t count,
                               stream_t *s) {
  if (count && !dst) return ret(hipErrorInvalidValue);
  return submit(s, (op_t){.kind = OP_FILL, .dst = dst, .value = value, .width = width,
                          .bytes = count});
}

EXPORT hipError_t hipMemsetAsync(void *dst, int value, size_t bytes, stream_t *s) {
  return memset_async(dst, (uint32_t)value, 1, bytes, s);
}

EXPORT hipError_t hipMemsetD8Async(void *dst, char value, size_t count, stream_t *s) {
  return memset_async(dst, (uint8_t)value, 1, count, s);
}

EXPORT hipError_t hipMemsetD16Async(void *dst, short value, size_t count, stream_t *s) {
  return memset_async(dst, (uint16_t)value, 2, count, s);
}

EXPORT hipError_t hipMemsetD32Async(void *dst, int value, size_t count, stream_t *s) {
  return memset_async(dst, (uint32_t)value, 4, count, s);
}

/* -- memory pools: allocation from host memory, the peak counted -- */

typedef struct pool { size_t used_high; } pool_t;

EXPORT hipError_t hipMemPoolCreate(pool_t **out, const void *props) {
  if (!out || !props) return ret(hipErrorInvalidValue);
  *out = calloc(1, sizeof **out);
  return *out ? hipSuccess : ret(hipErrorOutOfMemory);
}

EXPORT hipError_t hipMemPoolDestroy(pool_t *p) {
  if (!p) return ret(hipErrorInvalidHandle);
  free(p);
  return hipSuccess;
}

EXPORT hipError_t hipMemPoolSetAttribute(pool_t *p, int attr, void *value) {
  (void)attr;
  return p && value ? hipSuccess : ret(hipErrorInvalidValue);
}

EXPORT hipError_t hipMemPoolGetAttribute(pool_t *p, int attr, void *value) {
  (void)attr;
  if (!p || !value) return ret(hipErrorInvalidValue);
  *(uint64_t *)value = __atomic_load_n(&p->used_high, __ATOMIC_RELAXED);
  return hipSuccess;
}

EXPORT hipError_t hipMemPoolTrimTo(pool_t *p, size_t keep) {
  (void)keep;
  return p ? hipSuccess : ret(hipErrorInvalidHandle);
}

EXPORT hipError_t hipMallocFromPoolAsync(void **out, size_t bytes, pool_t *p, stream_t *s) {
  (void)s;
  if (!p) return ret(hipErrorInvalidValue);
  __atomic_add_fetch(&p->used_high, bytes, __ATOMIC_RELAXED);
  return hipMalloc(out, bytes);
}

/* -- modules: AMDGPU code objects accepted, functions looked up by name, never run -- */

typedef struct function function_t;
typedef struct module {
  unsigned char *image;
  size_t size;
  pthread_mutex_t lock;
  function_t *functions;  /* handed out by hipModuleGetFunction, freed with the module */
} module_t;
struct function { module_t *module; function_t *next; char name[256]; };

static const int JIT_ERROR_LOG_BUFFER = 5;  /* hipJitOptionErrorLogBuffer */

static hipError_t load(module_t **out, const void *image, unsigned int n, const int *options,
                       void **values) {
  if (!out || !image) return ret(hipErrorInvalidValue);
  const unsigned char *e = image;
  uint16_t machine = 0;
  int elf = !memcmp(e, "\177ELF", 4) && e[4] == 2;  /* 64-bit ELF */
  if (elf) memcpy(&machine, e + 18, 2);
  if (!elf || machine != EM_AMDGPU_) {
    for (unsigned int i = 0; i < n && options && values; i++)
      if (options[i] == JIT_ERROR_LOG_BUFFER && values[i])
        snprintf(values[i], 256, "iree-stress stand-in HIP: not an AMDGPU code object "
                 "(%s, e_machine %u)", elf ? "ELF" : "not ELF", (unsigned)machine);
    return ret(hipErrorInvalidImage);
  }
  uint64_t shoff;
  uint16_t shentsize, shnum;
  memcpy(&shoff, e + 40, 8);
  memcpy(&shentsize, e + 58, 2);
  memcpy(&shnum, e + 60, 2);
  size_t size = (size_t)shoff + (size_t)shentsize * shnum;  /* section headers come last */
  module_t *m = calloc(1, sizeof *m);
  if (!m || !(m->image = malloc(size ? size : 1))) {
    free(m);
    return ret(hipErrorOutOfMemory);
  }
  memcpy(m->image, image, size);
  m->size = size;
  pthread_mutex_init(&m->lock, NULL);
  *out = m;
  return hipSuccess;
}

EXPORT hipError_t hipModuleLoadData(module_t **out, const void *image) {
  return load(out, image, 0, NULL, NULL);
}

EXPORT hipError_t hipModuleLoadDataEx(module_t **out, const void *image, unsigned int n,
                                      int *options, void **values) {
  return load(out, image, n, options, values);
}

EXPORT hipError_t hipModuleUnload(module_t *m) {
  if (!m) return ret(hipErrorInvalidHandle);
  for (function_t *f = m->functions, *next; f; f = next) {
    next = f->next;
    free(f);
  }
  pthread_mutex_destroy(&m->lock);
  free(m->image);
  free(m);
  return hipSuccess;
}

EXPORT hipError_t hipModuleGetFunction(function_t **out, module_t *m, const char *name) {
  if (!out || !m || !name) return ret(hipErrorInvalidValue);
  size_t len = strlen(name) + 1;  /* with its NUL: a whole name in the string table */
  if (len > sizeof((function_t *)0)->name || !memmem(m->image, m->size, name, len))
    return ret(hipErrorNotFound);
  function_t *f = calloc(1, sizeof *f);
  if (!f) return ret(hipErrorOutOfMemory);
  f->module = m;
  memcpy(f->name, name, len);
  pthread_mutex_lock(&m->lock);
  f->next = m->functions;  /* the module owns it (HIP has no call to free one) */
  m->functions = f;
  pthread_mutex_unlock(&m->lock);
  *out = f;
  return hipSuccess;
}

EXPORT hipError_t hipModuleGetGlobal(void **ptr, size_t *bytes, module_t *m, const char *name) {
  (void)ptr; (void)bytes; (void)m; (void)name;
  return ret(hipErrorNotFound);  /* the stand-in keeps no globals */
}

EXPORT hipError_t hipFuncGetAttribute(int *value, int attr, const void *f) {
  if (!value || !f) return ret(hipErrorInvalidValue);
  *value = attr == 0 ? 1024 : 0;  /* MAX_THREADS_PER_BLOCK; no shared or local memory */
  return hipSuccess;
}

EXPORT hipError_t hipFuncSetAttribute(const void *f, int attr, int value) {
  (void)attr; (void)value;
  return f ? hipSuccess : ret(hipErrorInvalidValue);
}

static hipError_t launch(const void *f, unsigned bx, unsigned by, unsigned bz, stream_t *s) {
  if (!f) return ret(hipErrorInvalidValue);
  if (!bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
    return ret(hipErrorInvalidConfiguration);
  return submit(s, (op_t){.kind = OP_KERNEL});
}

EXPORT hipError_t hipModuleLaunchKernel(function_t *f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                        stream_t *s, void **params, void **extra) {
  (void)gx; (void)gy; (void)gz; (void)shared; (void)params; (void)extra;
  return launch(f, bx, by, bz, s);
}

typedef struct { unsigned x, y, z; } dim3_t;

EXPORT hipError_t hipLaunchKernel(const void *f, dim3_t grid, dim3_t block, void **args,
                                  size_t shared, stream_t *s) {
  (void)grid; (void)args; (void)shared;
  return launch(f, block.x, block.y, block.z, s);
}

/* -- graphs: nodes recorded, a launch runs them on the stream's thread -- */

typedef struct {
  void *dst;
  unsigned int elementSize;
  size_t height, pitch;
  unsigned int value;
  size_t width;
} memset_params_t;

/* HIP_MEMCPY3D (the driver-style 3D copy; IREE's graphs use it for 1D copies only) */
typedef struct {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void *srcHost;
  void *srcDevice, *srcArray, *reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void *dstHost, *dstDevice, *dstArray, *reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
} memcpy3d_t;

static const int MEMORY_TYPE_HOST = 1;  /* hipMemoryTypeHost */

EXPORT hipError_t hipGraphCreate(graph_t **out, unsigned int flags) {
  (void)flags;
  if (!out) return ret(hipErrorInvalidValue);
  *out = calloc(1, sizeof **out);
  return *out ? hipSuccess : ret(hipErrorOutOfMemory);
}

EXPORT hipError_t hipGraphDestroy(graph_t *g) {
  if (!g) return ret(hipErrorInvalidHandle);
  for (size_t i = 0; i < g->count; i++)
    if (g->nodes[i].op.event) event_unref(g->nodes[i].op.event);
  free(g->nodes);
  free(g);
  return hipSuccess;
}

EXPORT hipError_t hipGraphAddEmptyNode(void **out, graph_t *g, void *const *deps, size_t n) {
  (void)deps; (void)n;
  return add_node(out, g, (op_t){.kind = OP_HOST, .fn = NULL});
}

EXPORT hipError_t hipGraphAddKernelNode(void **out, graph_t *g, void *const *deps, size_t n,
                                        const void *params) {
  (void)deps; (void)n;
  if (!params) return ret(hipErrorInvalidValue);
  return add_node(out, g, (op_t){.kind = OP_KERNEL});
}

EXPORT hipError_t hipGraphAddMemsetNode(void **out, graph_t *g, void *const *deps, size_t n,
                                        const memset_params_t *p) {
  (void)deps; (void)n;
  if (!p || !p->dst || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
    return ret(hipErrorInvalidValue);
  return add_node(out, g, (op_t){.kind = OP_FILL, .dst = p->dst, .value = p->value,
                                 .width = (int)p->elementSize,
                                 .bytes = p->width * (p->height ? p->height : 1)});
}

EXPORT hipError_t hipDrvGraphAddMemcpyNode(void **out, graph_t *g, void *const *deps, size_t n,
                                           const memcpy3d_t *p, ctx_t *c) {
  (void)deps; (void)n; (void)c;
  if (!p) return ret(hipErrorInvalidValue);
  const char *src = p->srcMemoryType == MEMORY_TYPE_HOST ? p->srcHost : p->srcDevice;
  char *dst = p->dstMemoryType == MEMORY_TYPE_HOST ? p->dstHost : p->dstDevice;
  if (!src || !dst) return ret(hipErrorInvalidValue);
  return add_node(out, g, (op_t){.kind = OP_COPY, .dst = dst + p->dstXInBytes,
                                 .src = src + p->srcXInBytes, .bytes = p->WidthInBytes});
}

EXPORT hipError_t hipGraphAddEventRecordNode(void **out, graph_t *g, void *const *deps,
                                             size_t n, event_t *e) {
  (void)deps; (void)n;
  if (!e) return ret(hipErrorInvalidHandle);
  pthread_mutex_lock(&ev_lock);
  e->refs++;
  pthread_mutex_unlock(&ev_lock);
  return add_node(out, g, (op_t){.kind = OP_RECORD, .event = e});
}

EXPORT hipError_t hipGraphInstantiate(graph_exec_t **out, graph_t *g, void **error_node,
                                      char *log, size_t log_size) {
  (void)error_node; (void)log; (void)log_size;
  if (!out || !g) return ret(hipErrorInvalidValue);
  graph_exec_t *x = calloc(1, sizeof *x);
  if (!x || !(x->nodes = calloc(g->count ? g->count : 1, sizeof *x->nodes))) {
    free(x);
    return ret(hipErrorOutOfMemory);
  }
  memcpy(x->nodes, g->nodes, g->count * sizeof *x->nodes);
  x->count = g->count;
  pthread_mutex_lock(&ev_lock);
  for (size_t i = 0; i < x->count; i++)
    if (x->nodes[i].op.event) x->nodes[i].op.event->refs++;
  pthread_mutex_unlock(&ev_lock);
  *out = x;
  return hipSuccess;
}

EXPORT hipError_t hipGraphExecDestroy(graph_exec_t *x) {
  if (!x) return ret(hipErrorInvalidHandle);
  for (size_t i = 0; i < x->count; i++)
    if (x->nodes[i].op.event) event_unref(x->nodes[i].op.event);
  free(x->nodes);
  free(x);
  return hipSuccess;
}

EXPORT hipError_t hipGraphLaunch(graph_exec_t *x, stream_t *s) {
  if (!x) return ret(hipErrorInvalidHandle);
  /* The launch runs its own copy: an event record node gets the record asked for now, and
   * the exec may be destroyed before the stream reaches it. */
  node_t *nodes = calloc(x->count ? x->count : 1, sizeof *nodes);
  if (!nodes) return ret(hipErrorOutOfMemory);
  memcpy(nodes, x->nodes, x->count * sizeof *nodes);
  pthread_mutex_lock(&ev_lock);
  for (size_t i = 0; i < x->count; i++) {
    event_t *e = nodes[i].op.event;
    if (e && nodes[i].op.kind == OP_RECORD) {
      nodes[i].op.gen = ++e->recorded;
      e->refs++;
    }
  }
  pthread_mutex_unlock(&ev_lock);
  return submit(s, (op_t){.kind = OP_GRAPH, .nodes = nodes, .node_count = x->count});
}
