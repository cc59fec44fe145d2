/* Writes at least N bytes of short numbered lines to stdout, as a chatty
 * training script would: the log-throughput benchmark's worker. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  long long total = argc > 1 ? atoll(argv[1]) : 1000000;
  static char buf[1 << 16];
  setvbuf(stdout, buf, _IOFBF, sizeof buf);
  long long written = 0;
  for (long long i = 0; written < total; ++i) {
    int n = printf("step %lld loss 0.%06lld\n", i, i % 1000000);
    if (n < 0) return 1;
    written += n;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}
