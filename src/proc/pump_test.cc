#include "proc/pump.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace trun::proc {
namespace {

// An in-memory file that collects what a sink wrote; unlike a pipe it never
// blocks the writer.
class Sink {
 public:
  Sink() : fd_(memfd_create("sink", MFD_CLOEXEC)) { EXPECT_GE(fd_, 0); }
  ~Sink() { close(fd_); }
  int fd() const { return fd_; }
  std::string Take() {
    std::string out;
    char buf[4096];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd_, buf, sizeof buf, off)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      off += n;
    }
    return out;
  }

 private:
  int fd_;
};

TEST(LinePumpTest, PrefixesConsoleLinesAndKeepsFileRaw) {
  Sink console, file;
  LinePump pump("[default0]:", console.fd(), file.fd());
  pump.Feed("hello\nwor");
  pump.Feed("ld\npartial");
  pump.Finish();
  EXPECT_EQ(console.Take(), "[default0]:hello\n[default0]:world\n[default0]:partial");
  EXPECT_EQ(file.Take(), "hello\nworld\npartial");
}

TEST(LinePumpTest, HoldsAPartialLineUntilItEnds) {
  Sink console;
  LinePump pump("[p]:", console.fd(), -1);
  pump.Feed("abc");
  pump.Feed("def\n");
  EXPECT_EQ(console.Take(), "[p]:abcdef\n");
}

TEST(LinePumpTest, CarriageReturnsShowProgressAtOnce) {
  Sink console;
  LinePump pump("[p]:", console.fd(), -1);
  pump.Feed("10%\r20%\r");
  pump.Feed("done\r\n");
  EXPECT_EQ(console.Take(), "[p]:10%\r[p]:20%\r[p]:done\r\n");
}

TEST(LinePumpTest, BytesArePassedThroughUnchanged) {
  Sink console, file;
  LinePump pump("", console.fd(), file.fd());
  std::string bytes = std::string("\xff\xfe\x00z\n", 5);
  pump.Feed(bytes);
  pump.Finish();
  EXPECT_EQ(console.Take(), bytes);
  EXPECT_EQ(file.Take(), bytes);
}

TEST(LinePumpTest, AHugeLineIsNotHeldWithoutBound) {
  Sink console;
  LinePump pump("", console.fd(), -1);
  std::string big(100 * 1024, 'x');
  pump.Feed(big);
  EXPECT_EQ(console.Take().size(), big.size());
}

}  // namespace
}  // namespace trun::proc
