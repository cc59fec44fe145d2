#include "store/connection.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace trun::store {

using asio::ip::tcp;

// What a connection holds only while it is busy: a request arriving,
// replies waiting for the socket, a nonce awaiting its proof.
struct Connection::InFlight {
  InFlight(const Limits& limits, Generation generation) : parser(limits, generation) {}

  bool Empty() const {
    return parser.held() == 0 && parser.pending() == nullptr && parser.allocated() == 0 &&
           out.empty() && auth_nonce.empty();
  }

  RequestParser parser;
  std::string out;         // replies not yet written
  std::string auth_nonce;  // the job token's nonce, until used
  size_t judged_args = 0;  // args of the unfinished request already shown
};

Connection::Connection(std::shared_ptr<ConnectionHost> keep_host, tcp::socket socket, uint64_t id,
                       const asio::ip::address& peer)
    : id(id), peer(peer), host_(std::move(keep_host)) {
  std::error_code ec;
  fd_ = socket.release(ec);
  if (ec) fd_ = -1;
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

void Connection::Start() {
  // Reads happen when the socket is readable and must fail rather than
  // wait once it is empty; writes likewise.
  int one = 1;
  Status s = fd_ < 0 || ::ioctl(fd_, FIONBIO, &one) != 0
                 ? Status::IOError(fmt::format("cannot use its socket: {}", std::strerror(errno)))
                 : host_->shared().poller.Add(fd_, id, EPOLLIN);
  if (!s.ok()) host_->Drop(shared_from_this(), s.message());
}

void Connection::OnEvents(uint32_t events) {
  if (closed) return;
  if (writing_ && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) Flush();
  if (!closed && !closing && !broken_ && (events & (EPOLLIN | EPOLLERR | EPOLLHUP))) OnReadable();
  if (!closed) ReleaseIfIdle();
}

// A connection has no read buffer of its own: it reads through the host's
// one large buffer until the socket is empty, or for at most 16 of those
// reads (1 MiB) before the other connections get their turn (the Poller
// reports it again). The replies to each read go out after it, together.
void Connection::OnReadable() {
  auto& buf = host_->shared().read_buf;
  bool more = true;
  for (int turn = 0; turn < 16 && more; ++turn) {
    ssize_t k = ::read(fd_, buf.data(), buf.size());
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (k <= 0) {
      bool quiet = k == 0 || errno == ECONNRESET;
      return host_->Drop(shared_from_this(), quiet ? "" : std::strerror(errno));
    }
    in_read_ = true;
    more = Consume(buf.data(), static_cast<size_t>(k)) && static_cast<size_t>(k) == buf.size();
    in_read_ = false;
    if (closed) return;
    Flush();
    if (closed) return;
  }
  // Refused: nothing more it sends is read; it is closed once its last
  // answer is written.
  if (closing && !writing_) return host_->Drop(shared_from_this(), "");
  if (closing) Watch();
}

// Parses and handles what arrived; false when the connection is gone or
// refused.
bool Connection::Consume(const char* data, size_t n) {
  if (closed || closing) return false;
  if (!spoke_) {
    spoke_ = true;
    host_->Spoke(*this);
  }
  if (link) return host_->LinkBytes(shared_from_this(), data, n);
  RequestParser& parser = Busy().parser;
  if (!parser.Append(data, n)) {
    host_->Drop(shared_from_this(), parser.error());
    return false;
  }
  Request req;
  while (true) {
    auto r = parser.Next(&req);
    if (r == RequestParser::Result::kNeedMore) break;
    if (r == RequestParser::Result::kError) {
      host_->Drop(shared_from_this(), parser.error());
      return false;
    }
    busy_->judged_args = 0;
    host_->Handle(shared_from_this(), req);
    if (closed || closing) return false;
    if (link) {
      // The relay sends its first frame after the handshake's answer, so
      // nothing may follow the handshake in what it sent before.
      if (parser.buffered() == 0) break;
      host_->Drop(shared_from_this(), "bytes after the link's handshake, before its answer");
      return false;
    }
  }
  return host_->AfterRead(shared_from_this(), n);
}

Connection::InFlight& Connection::Busy() {
  if (!busy_) busy_ = std::make_unique<InFlight>(host_->shared().limits, generation_);
  return *busy_;
}

// An idle connection holds no side part, whatever it once carried: between
// its requests a connection then costs its object alone.
void Connection::ReleaseIfIdle() {
  if (!busy_ || writing_ || in_read_ || !busy_->Empty()) return;
  generation_ = busy_->parser.generation();
  busy_.reset();
}

Generation Connection::generation() const {
  return busy_ ? busy_->parser.generation() : generation_;
}

size_t Connection::held() const { return busy_ ? busy_->parser.held() : 0; }

const Request* Connection::NewlyParsedPending() {
  if (!busy_) return nullptr;
  const Request* p = busy_->parser.pending();
  if (p == nullptr || p->args.size() == busy_->judged_args) return nullptr;
  busy_->judged_args = p->args.size();
  return p;
}

void Connection::SetAuthNonce(std::string nonce) { Busy().auth_nonce = std::move(nonce); }

std::string Connection::TakeAuthNonce() {
  if (!busy_) return "";
  return std::exchange(busy_->auth_nonce, "");
}

bool Connection::CanQueue(size_t n) const { return n <= ReplyRoom(); }

size_t Connection::ReplyRoom() const {
  size_t queued = busy_ ? busy_->out.size() : 0;
  size_t max = host_->shared().max_pending_reply_bytes;
  return queued < max ? max - queued : 0;
}

bool Connection::Sending() const { return writing_ || (busy_ && !busy_->out.empty()); }

void Connection::Send(std::string_view bytes) {
  if (closed || broken_) return;
  if (!CanQueue(bytes.size())) return host_->Drop(shared_from_this(), "too many unread replies");
  if (!in_read_ && !Sending()) {
    size_t k = WriteNow(bytes);
    if (k == bytes.size() || broken_) return;
    bytes.remove_prefix(k);
  }
  Busy().out.append(bytes);
  if (!in_read_ && !writing_) {
    writing_ = true;
    Watch();
  }
}

void Connection::Flush() {
  if (closed || broken_ || !busy_ || busy_->out.empty()) {
    if (writing_ && !closed) {
      writing_ = false;
      Watch();
    }
    return;
  }
  size_t k = WriteNow(busy_->out);
  if (broken_) return;
  busy_->out.erase(0, k);
  bool full = !busy_->out.empty();
  if (full) {
    // What is left of a large reply is written from the same buffer later.
    if (!writing_) {
      writing_ = true;
      Watch();
    }
    return;
  }
  std::string().swap(busy_->out);  // idle connections hold no buffer
  if (writing_) {
    writing_ = false;
    Watch();
  }
  if (closing) host_->Drop(shared_from_this(), "");
}

size_t Connection::WriteNow(std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t k = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (k >= 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    bool quiet = errno == EPIPE || errno == ECONNRESET;
    DropLater(quiet ? "" : std::strerror(errno));
    break;
  }
  return done;
}

void Connection::Watch() {
  if (closed) return;
  uint32_t events = 0;
  if (!closing && !broken_) events |= EPOLLIN;
  if (writing_) events |= EPOLLOUT;
  Status s = host_->shared().poller.Change(fd_, id, events);
  if (!s.ok()) DropLater(s.message());
}

void Connection::DropLater(std::string why) {
  if (broken_) return;
  broken_ = true;
  writing_ = false;
  host_->shared().poller.Remove(fd_);
  asio::post(host_->shared().poller.io(),
             [self = shared_from_this(), why = std::move(why)] { self->host_->Drop(self, why); });
}

void Connection::Close() {
  if (closed) return;
  closed = true;
  host_->shared().poller.Remove(fd_);
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  fd_ = -1;
}

size_t Connection::BufferBytes() const {
  if (!busy_) return 0;
  return busy_->parser.allocated() + HeapBytes(busy_->out);
}

std::string Connection::RemoteName(asio::ip::address* address) const {
  tcp::endpoint ep;
  socklen_t len = static_cast<socklen_t>(ep.capacity());
  if (fd_ < 0 || ::getpeername(fd_, ep.data(), &len) != 0) return "?";
  ep.resize(len);
  *address = ep.address();
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

}  // namespace trun::store
