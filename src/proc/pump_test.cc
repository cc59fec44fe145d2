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
  // A line arriving in three pieces is still written once, whole: the
  // second piece does not push out the first.
  pump.Feed("gh");
  pump.Feed("ij");
  EXPECT_EQ(console.Take(), "[p]:abcdef\n");
  pump.Feed("k\n");
  EXPECT_EQ(console.Take(), "[p]:abcdef\n[p]:ghijk\n");
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

TEST(LinePumpTest, DuplicatesMatchingLinesWithPrefix) {
  Sink console, dup;
  LinePump pump("[default0]:", console.fd(), -1);
  pump.DuplicateMatching(dup.fd(), {"apple", "or,ange"});
  pump.Feed("an apple\nbanana\nor,an");
  EXPECT_EQ(dup.Take(), "[default0]:an apple\n");  // written as its end arrives
  pump.Feed("ge\r\nkiwi\rapple pie\r");
  pump.Feed("\nlast apple");
  pump.Finish();
  EXPECT_EQ(dup.Take(),
            "[default0]:an apple\n[default0]:or,ange\n[default0]:apple pie\n"
            "[default0]:last apple\n");
  // The console copy is not affected (a "\r\n" split between reads is a
  // redraw there).
  EXPECT_EQ(console.Take(),
            "[default0]:an apple\n[default0]:banana\n[default0]:or,ange\r\n"
            "[default0]:kiwi\r[default0]:apple pie\r[default0]:\n[default0]:last apple");
}

TEST(LinePumpTest, EmptyNeedleMatchesEveryLineAndNewlineIsPartOfTheLine) {
  Sink dup;
  LinePump pump("p:", -1, -1);
  pump.DuplicateMatching(dup.fd(), {""});
  pump.Feed("a\n\nb\n");
  pump.Finish();
  EXPECT_EQ(dup.Take(), "p:a\np:\np:b\n");

  Sink nl;
  LinePump by_end("", -1, -1);
  by_end.DuplicateMatching(nl.fd(), {"x\n"});
  by_end.Feed("x\nyx\nx");
  by_end.Finish();  // the last "x" has no line end, so does not match "x\n"
  EXPECT_EQ(nl.Take(), "x\nyx\n");
}

TEST(LinePumpTest, KeepsTheTail) {
  LinePump pump("", -1, -1);
  pump.KeepTail(8);
  pump.Feed("0123456789");
  EXPECT_EQ(pump.Tail(), "23456789");
  pump.Feed("ab");
  EXPECT_EQ(pump.Tail(), "456789ab");
  LinePump none("", -1, -1);
  none.Feed("abc");
  EXPECT_EQ(none.Tail(), "");
}

}  // namespace
}  // namespace trun::proc
