/* A small test program shaped like one of fusilli's GPU tests (issue 38's end-to-end bisect):
 * it creates the device, uploads, "runs", reads back, checks, prints that its test passed,
 * and exits. It links against libamdhip64 with no rpath: which one it gets is the stack's
 * (`--engine exec` puts a ROCm tree's lib/ first on LD_LIBRARY_PATH).
 *
 * Build: cc -O1 -o fusilli_like fusilli_like.c -L DIR_WITH_LIBAMDHIP64 -lamdhip64
 */
#include <stdio.h>
#include <stdlib.h>

int hipGetDeviceCount(int *count);
int hipSetDevice(int device);
int hipMalloc(void **ptr, size_t size);
int hipMemcpy(void *dst, const void *src, size_t size, int kind);
int hipFree(void *ptr);
int hipDeviceSynchronize(void);

int main(void) {
  int n = 0;
  if (hipGetDeviceCount(&n) || n < 1 || hipSetDevice(0)) {
    fprintf(stderr, "no device\n");
    return 2;
  }
  float host[64], back[64];
  for (int i = 0; i < 64; i++) host[i] = (float)i;
  void *dev = NULL;
  if (hipMalloc(&dev, sizeof host) || hipMemcpy(dev, host, sizeof host, 1) ||
      hipDeviceSynchronize() || hipMemcpy(back, dev, sizeof back, 2)) {
    fprintf(stderr, "device call failed\n");
    return 3;
  }
  hipFree(dev);
  for (int i = 0; i < 64; i++) {
    if (back[i] != host[i]) {
      printf("[FAILED] conv_fprop_nhwc\n");
      return 1;
    }
  }
  printf("[PASSED] conv_fprop_nhwc\nAll tests passed\n");
  fflush(stdout);
  return 0; /* the library's teardown runs after this */
}
