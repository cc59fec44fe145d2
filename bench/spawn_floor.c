/* The launch-overhead floor: posix_spawnp N copies of a command and wait for
 * them all. `spawn_floor N CMD [ARGS...]` exits 0 iff every copy did. trun's
 * launch benchmark is measured against this. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spawn_floor N CMD [ARGS...]\n");
    return 2;
  }
  int n = atoi(argv[1]);
  if (n <= 0 || n > 4096) return 2;
  pid_t* pids = calloc((size_t)n, sizeof *pids);
  if (!pids) return 1;
  for (int i = 0; i < n; ++i) {
    if (posix_spawnp(&pids[i], argv[2], NULL, NULL, argv + 2, environ) != 0) return 1;
  }
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    int status = 0;
    if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed = 1;
    }
  }
  free(pids);
  return failed;
}
