#include "proc/pystack.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "proc/ready_child_for_tests.h"

namespace trun::proc {
namespace {

// A Python with a known stack: the main thread sleeps in inner() (line 6),
// called by Outer's __init__ (line 9) from outer() (line 11), a second
// thread sleeps in helper_loop() (line 3). The earlier calls of Outer() let
// 3.12 and later specialise the call, whose __init__ then runs below one of
// the interpreter's shim frames (3.13, 3.14), which is no frame of the
// script's. Once both threads are there it prints "ready", the main thread's
// threading.get_ident(), then the helper's ident and native id.
constexpr const char* kScript =
    "import sys, threading, time\n"                                                      // 1
    "def helper_loop():\n"                                                               // 2
    "    time.sleep(600)\n"                                                              // 3
    "def inner():\n"                                                                     // 4
    "    print('ready', threading.get_ident(), h.ident, h.native_id, flush=True)\n"      // 5
    "    time.sleep(600)\n"                                                              // 6
    "class Outer:\n"                                                                     // 7
    "    def __init__(self, last):\n"                                                    // 8
    "        if last: inner()\n"                                                         // 9
    "def outer():\n"                                                                     // 10
    "    for i in range(100): Outer(i == 99)\n"                                          // 11
    "h = threading.Thread(target=helper_loop, name='helper', daemon=True); h.start()\n"  // 12
    "outer()\n";                                                                         // 13

class KnownStack {
 public:
  // Starts `argv` (a Python that runs kScript, or a shell that prints
  // "ready") and waits for its "ready" line.
  explicit KnownStack(std::vector<std::string> argv) : child_(std::move(argv)) {
    // The main thread printed before it called sleep: give it time to get
    // there (and the helper to start sleeping).
    usleep(300 * 1000);
  }
  pid_t pid() const { return child_.pid(); }
  bool ready() const { return child_.ready(); }
  const std::string& ready_line() const { return child_.ready_line(); }

 private:
  ReadyChild child_;
};

void ExpectKnownStack(const KnownStack& p, const std::string& version_prefix) {
  const pid_t pid = p.pid();
  std::string word;
  uint64_t main_ident = 0, helper_ident = 0;
  pid_t helper_native = 0;
  std::istringstream ready(p.ready_line());
  ASSERT_TRUE(ready >> word >> main_ident >> helper_ident >> helper_native) << p.ready_line();
  auto stacks = ReadPythonStacks(pid);
  ASSERT_TRUE(stacks.ok()) << stacks.status().ToString();
  EXPECT_EQ(stacks->pid, pid);
  EXPECT_EQ(stacks->version.rfind(version_prefix, 0), 0u) << stacks->version;
  ASSERT_EQ(stacks->threads.size(), 2u);
  const auto& main = stacks->threads[0];
  EXPECT_EQ(main.native_id, pid);
  EXPECT_EQ(main.thread_id, main_ident);
  EXPECT_FALSE(main.partial);
  ASSERT_EQ(main.frames.size(), 4u);
  EXPECT_EQ(main.frames[0].function, "inner");
  EXPECT_EQ(main.frames[0].line, 6);
  EXPECT_EQ(main.frames[0].file, "<string>");
  EXPECT_EQ(main.frames[1].function, "Outer.__init__");
  EXPECT_EQ(main.frames[1].line, 9);
  EXPECT_EQ(main.frames[2].function, "outer");
  EXPECT_EQ(main.frames[2].line, 11);
  EXPECT_EQ(main.frames[3].function, "<module>");
  EXPECT_EQ(main.frames[3].line, 13);
  // The thread's name is the kernel's (3.14 gives it Python's, 3.11 not).
  const PyThreadStack* helper = &stacks->threads[1];
  EXPECT_EQ(helper->native_id, helper_native);
  EXPECT_EQ(helper->thread_id, helper_ident);
  EXPECT_FALSE(helper->name.empty());
  ASSERT_FALSE(helper->frames.empty());
  EXPECT_EQ(helper->frames[0].function, "helper_loop");
  EXPECT_EQ(helper->frames[0].line, 3);
  EXPECT_EQ(helper->frames.back().function, "Thread._bootstrap");
}

// Reads kScript run by `python` (skipped where there is none), expecting
// version `version_prefix`.
void ExpectKnownStackOf(const std::string& python, const std::string& version_prefix) {
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python;
  KnownStack p({python, "-c", kScript});
  ASSERT_TRUE(p.ready());
  ExpectKnownStack(p, version_prefix);
}

// Debian's /usr/bin/python3.11 (the interpreter in the executable): the
// fixed 3.11 offsets of pystack.h.
TEST(PyStack, ReadsPython311) { ExpectKnownStackOf("/usr/bin/python3.11", "3.11."); }

// pyenv's 3.12 (the interpreter in libpython3.12.so, which the executable
// links): the fixed 3.12 offsets of pystack.h, and its entry frames skipped.
TEST(PyStack, ReadsPython312) {
  ExpectKnownStackOf("/root/.pyenv/versions/3.12.1/bin/python3.12", "3.12.");
}

// pyenv's 3.13: its debug offsets at 3.13's indices, and no cframe.
TEST(PyStack, ReadsPython313) {
  ExpectKnownStackOf("/root/.pyenv/versions/3.13.0/bin/python3.13", "3.13.");
}

// The torch 2.x root's Python 3.14 (its debug offsets), read from outside
// the chroot it runs in.
TEST(PyStack, ReadsPython314InChroot) {
  const char* root = "/var/cache/trun/torch2";
  if (access((std::string(root) + "/usr/bin/python3.14").c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no torch 2.x root at " << root;
  }
  KnownStack p({"/usr/sbin/chroot", root, "/usr/bin/python3.14", "-c", kScript});
  ASSERT_TRUE(p.ready());
  ExpectKnownStack(p, "3.14.");
}

TEST(PyStack, NotPython) {
  KnownStack p({"/bin/sh", "-c", "echo ready; exec sleep 600"});
  ASSERT_TRUE(p.ready());
  auto stacks = ReadPythonStacks(p.pid());
  ASSERT_FALSE(stacks.ok());
  EXPECT_EQ(stacks.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(stacks.status().message().find("_PyRuntime"), std::string::npos);
}

TEST(PyStack, GoneProcess) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  auto stacks = ReadPythonStacks(pid);
  ASSERT_FALSE(stacks.ok());
  EXPECT_EQ(stacks.status().code(), StatusCode::kNotFound);
}

TEST(PyStack, ProcStatOfSleeper) {
  KnownStack p({"/bin/sh", "-c", "echo ready; exec sleep 600"});
  ASSERT_TRUE(p.ready());
  auto stat = ReadProcStat(p.pid());
  ASSERT_TRUE(stat.ok()) << stat.status().ToString();
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->ppid, getpid());
  EXPECT_GE(stat->cpu_seconds, 0);
  EXPECT_LT(stat->cpu_seconds, 5);
}

// Hand-made location tables, one of each form, covering 2 units each.
TEST(PyStack, LineTableForms) {
  // Short form (0), one-line form 11 (+1), no-column form 13 (+3, svarint
  // 6), long form 14 (-2: svarint 5; end line, column, end column), no
  // location (15).
  const std::string table = std::string("\x81\x05", 2) + std::string("\xd9\x01\x02", 3) +
                            std::string("\xe9\x06", 2) + std::string("\xf1\x05\x00\x01\x02", 5) +
                            std::string("\xf9", 1) + std::string("\x81\x00", 2);
  EXPECT_EQ(LineForOffset(table, 10, 0), 10);
  EXPECT_EQ(LineForOffset(table, 10, 2), 10);
  EXPECT_EQ(LineForOffset(table, 10, 4), 11);
  EXPECT_EQ(LineForOffset(table, 10, 8), 14);
  EXPECT_EQ(LineForOffset(table, 10, 12), 12);
  EXPECT_EQ(LineForOffset(table, 10, 16), -1);
  EXPECT_EQ(LineForOffset(table, 10, 20), 12);
  EXPECT_EQ(LineForOffset(table, 10, 24), -1);                     // past the table
  EXPECT_EQ(LineForOffset(std::string("\xf1\xff", 2), 1, 0), -1);  // cut short
}

}  // namespace
}  // namespace trun::proc
