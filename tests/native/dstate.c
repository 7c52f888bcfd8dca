/* A thread stuck in uninterruptible wait (state D), like a driver ioctl that never returns,
 * for the evidence tests. Never shipped.
 *
 * iree_stuck_in_d() vforks a child that pauses instead of exec'ing: the calling thread waits
 * for the child in the kernel (vfork's wait is uninterruptible, shown as D) until the child
 * dies. Kill the caller's process group to end both. ptrace cannot stop such a thread, so
 * py-spy --native and gdb attach block on it: the evidence code must notice and not try.
 */
#include <unistd.h>

__attribute__((noinline)) void iree_stuck_in_d(void) {
  pid_t child = vfork();
  if (child == 0) {
    pause();
    _exit(0);
  }
}
