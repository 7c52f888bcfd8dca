/* A compiler-like helper for exec-engine tests (issue 27 item 5): a process that a test runs
 * the way IREE's tests run iree-compile (through iree.compiler, or subprocess), and that
 * segfaults inside its "compile" when asked to.
 *
 *   compilerlike [INPUT] [FLAGS...]
 *
 * prints "compiling INPUT" to stderr, then returns 0; when INPUT is `crash` or HELPER_CRASH
 * is set in its environment it writes through a null pointer in helper_crash_in_compile()
 * (called from helper_compile(), called from main()), so its core's crashing frames are those
 * three. Installed as `iree-compile` in a folder named by IREE_TOOL_PATH, iree.compiler's
 * compile_str runs it (`iree-compile - --iree-hal-target-backends=...`). Built -O0 -g so the
 * frames have names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void helper_crash_in_compile(volatile int *where) { *where = 1; }

__attribute__((noinline)) int helper_compile(const char *input) {
  fprintf(stderr, "compiling %s\n", input);
  if (strcmp(input, "crash") == 0 || getenv("HELPER_CRASH") != NULL)
    helper_crash_in_compile(NULL);
  return 0;
}

int main(int argc, char **argv) { return helper_compile(argc > 1 ? argv[1] : "-"); }
