#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace trun {

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::FromErrno("cannot read " + path, errno);
  }
  auto data = ReadToEnd(fd, path);
  ::close(fd);
  return data;
}

Result<std::string> ReadToEnd(int fd, const std::string& what, size_t limit) {
  std::string data;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("cannot read " + what, errno);
    if (n == 0) return data;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > limit) {
      return Status::InvalidArgument(what + ": more than " + std::to_string(limit) + " bytes");
    }
  }
}

Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::FromErrno("cannot write " + tmp, errno);
  // Exactly `mode` whatever the umask (never wider: open's mode is masked).
  (void)::fchmod(fd, mode);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::FromErrno("cannot write " + tmp, err);
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno("cannot rename " + tmp + " to " + path, err);
  }
  return Status::OK();
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "trun";
}

}  // namespace trun
