/* A worker for the watchdog benchmark. Unless TORCHELASTIC_RESTART_COUNT
 * has reached $TIMER_LAST (then it exits 0), it asks the launcher's file
 * timer server for a SIGKILL $TIMER_AFTER_MS (default 200) milliseconds from
 * now plus 0-100 ms of jitter (so that deadlines do not line up with a
 * poller's 0.1 s period), with the very line torch's FileTimerClient writes, appends
 * "<pid> <deadline, wall-clock seconds>" to $TIMER_STAMPS and waits to be
 * killed. A tiny program, so that its death is not slowed by tearing down a
 * big address space: the benchmark sees the kill, not the exit. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* As the client: a non-blocking open, which fails until the server holds
 * the FIFO open for reading (torchrun's may not have opened it yet). */
static int open_fifo(const char* path) {
  for (int i = 0; i < 5000; ++i) {
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    if (fd >= 0 || (errno != ENXIO && errno != ENOENT)) return fd;
    usleep(1000);
  }
  return -1;
}

int main(void) {
  const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
  const char* last = getenv("TIMER_LAST");
  const char* fifo = getenv("TORCHELASTIC_TIMER_FILE");
  const char* stamps = getenv("TIMER_STAMPS");
  if (restart && last && atoi(restart) >= atoi(last)) return 0;
  if (!fifo || !stamps) return 2;
  const char* after = getenv("TIMER_AFTER_MS");
  double now = now_s();
  double jitter = (double)((long long)(now * 1e6) % 100000) / 1e6;
  double deadline = now + (after ? atof(after) : 200.0) / 1000.0 + jitter;
  char line[256];
  int len = snprintf(line, sizeof line,
                     "{\"version\": 1, \"pid\": %d, \"scope_id\": \"bench\", "
                     "\"expiration_time\": %.6f, \"signal\": 9}\n",
                     (int)getpid(), deadline);
  int fd = open_fifo(fifo);
  if (fd < 0 || write(fd, line, (size_t)len) != len) return 3;
  close(fd);
  len = snprintf(line, sizeof line, "%d %.6f\n", (int)getpid(), deadline);
  fd = open(stamps, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0 || write(fd, line, (size_t)len) != len) return 4;
  close(fd);
  for (;;) pause();
}
