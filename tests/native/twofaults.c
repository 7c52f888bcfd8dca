/* A native test command that dies by SIGSEGV in one of two functions, picked by its argument's
 * parity (iree-stress passes {job}): two crash modes at one step that only where each faulted
 * tells apart (no Python dump, the same output). Built by the `two_faults` fixture. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static volatile uintptr_t nowhere = 0;  /* read at run time: the compiler cannot see the fault */

__attribute__((noinline, noipa)) int fault_reading(void) { return *(volatile int *)nowhere; }

__attribute__((noinline, noipa)) void fault_writing(void) { *(volatile int *)nowhere = 1; }

int main(int argc, char **argv) {
  long job = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
  puts("working");
  fflush(stdout);
  if (job % 2) {
    fault_writing();
  } else {
    printf("%d\n", fault_reading());
  }
  return 0;
}
