/* A worker for the restart benchmark. Appends "start <ns>" to $STAMP_FILE as
 * its first act, then, unless TORCHELASTIC_RESTART_COUNT has reached
 * $STAMP_LAST, appends "exit <ns>" and exits 1 so that the launcher restarts
 * it. With --fork it instead measures the floor: fork+exec of itself. With
 * --hold it stamps its start and then waits to be stopped (the recovery
 * benchmark: when did the survivors' new workers start?). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void stamp(const char* what, long long ns) {
  const char* path = getenv("STAMP_FILE");
  if (!path) return;
  char line[64];
  int len = snprintf(line, sizeof line, "%s %lld\n", what, ns);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  if (write(fd, line, (size_t)len) != len) _exit(3);
  close(fd);
}

int main(int argc, char** argv) {
  long long start = now_ns();
  if (argc > 2 && strcmp(argv[1], "--fork") == 0) {
    /* The floor: N rounds of "stamp exit, fork, exec a child that stamps start". */
    int rounds = atoi(argv[2]);
    for (int i = 0; i < rounds; ++i) {
      stamp("exit", now_ns());
      pid_t pid = fork();
      if (pid == 0) {
        execl(argv[0], argv[0], (char*)NULL);
        _exit(127);
      }
      waitpid(pid, NULL, 0);
    }
    return 0;
  }
  stamp("start", start);
  if (argc > 1 && strcmp(argv[1], "--hold") == 0) {
    for (;;) pause();
  }
  const char* count = getenv("TORCHELASTIC_RESTART_COUNT");
  const char* last = getenv("STAMP_LAST");
  if (count && last && atoi(count) < atoi(last)) {
    stamp("exit", now_ns());
    _exit(1);
  }
  return 0;
}
