#include "bench/tcp_baseline.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace iwarp::bench {

namespace {

bool write_all(int fd, const std::uint8_t* hdr, std::size_t hlen, const std::uint8_t* data,
               std::size_t len) {
  iovec v[2] = {{const_cast<std::uint8_t*>(hdr), hlen}, {const_cast<std::uint8_t*>(data), len}};
  int idx = 0;
  while (idx < 2) {
    msghdr mh{};
    mh.msg_iov = v + idx;
    mh.msg_iovlen = static_cast<std::size_t>(2 - idx);
    const ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    auto left = static_cast<std::size_t>(n);
    while (idx < 2 && left >= v[idx].iov_len) {
      left -= v[idx].iov_len;
      ++idx;
    }
    if (idx < 2) {
      v[idx].iov_base = static_cast<std::uint8_t*>(v[idx].iov_base) + left;
      v[idx].iov_len -= left;
    }
  }
  return true;
}

bool read_all(int fd, std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) errno = 0;  // the peer closed: no error code to report
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool send_msg(int fd, const Bytes& m) {
  std::uint8_t hdr[4];
  const auto n = static_cast<std::uint32_t>(m.size());
  hdr[0] = static_cast<std::uint8_t>(n >> 24);
  hdr[1] = static_cast<std::uint8_t>(n >> 16);
  hdr[2] = static_cast<std::uint8_t>(n >> 8);
  hdr[3] = static_cast<std::uint8_t>(n);
  return write_all(fd, hdr, 4, m.data(), m.size());
}

bool recv_msg(int fd, Bytes& m) {
  std::uint8_t hdr[4];
  if (!read_all(fd, hdr, 4)) return false;
  const std::uint32_t n = std::uint32_t{hdr[0]} << 24 | std::uint32_t{hdr[1]} << 16 |
                          std::uint32_t{hdr[2]} << 8 | hdr[3];
  m.resize(n);
  return read_all(fd, m.data(), n);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_recv_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// The server's reads wait in slices of this long (its SO_RCVTIMEO): a slice that ends with no
// data is the only extra call, so messages that follow each other cost two recv() each, as on
// the client, and the baseline is not slowed by the wait that a resting connection needs.
constexpr std::chrono::milliseconds kReadSlice{200};

// Reads n octets of a message at the server. Before its first octet the connection may rest
// for as long as the other schemes' cells take (seconds under a sanitizer): the wait ends only
// when the client stops us or closes. Once the message has begun, `slices` slices in all.
bool server_read(int fd, std::uint8_t* p, std::size_t n, bool& begun, long& slices,
                 const std::atomic<bool>& stop) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      begun = true;
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !stop.load() &&
        (!begun || --slices > 0))
      continue;
    if (k == 0) errno = 0;  // the peer closed: no error code to report
    return false;
  }
  return true;
}

bool server_recv_msg(int fd, Bytes& m, long slices, const std::atomic<bool>& stop) {
  std::uint8_t hdr[4];
  bool begun = false;
  if (!server_read(fd, hdr, 4, begun, slices, stop)) return false;
  const std::uint32_t n = std::uint32_t{hdr[0]} << 24 | std::uint32_t{hdr[1]} << 16 |
                          std::uint32_t{hdr[2]} << 8 | hdr[3];
  m.resize(n);
  return server_read(fd, m.data(), n, begun, slices, stop);
}

void tcp_server(int listener, std::chrono::milliseconds timeout, ServerShared& shared) {
  set_recv_timeout(listener, timeout);
  const int fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (fd < 0) {
    shared.error = fmt::format("TCP server: accept: {}", std::strerror(errno));
    return;
  }
  set_nodelay(fd);
  // Set here, not inherited from the listener: a connection the kernel completed before this
  // thread set the listener's timeout would have none.
  set_recv_timeout(fd, kReadSlice);
  const long slices = std::max<long>(1, timeout / kReadSlice);
  Bytes m, ack(8, 'A');
  for (;;) {
    if (!server_recv_msg(fd, m, slices, shared.stop)) {
      if (!shared.stop.load())
        shared.error = fmt::format("TCP server: the client's message: {}",
                                   errno ? std::strerror(errno) : "connection closed");
      break;
    }
    const std::uint8_t kind = m.empty() ? 0 : m[0];
    bool ok = true;
    if (kind == 'E') ok = send_msg(fd, m);
    if (kind == 'L') ok = send_msg(fd, ack);
    if (kind == 'Q') break;
    if (!ok) {
      shared.error = fmt::format("TCP server: sending: {}", std::strerror(errno));
      break;
    }
  }
  ::close(fd);
}

}  // namespace

std::expected<std::unique_ptr<TcpClient>, std::string> TcpClient::start(
    std::chrono::milliseconds timeout) {
  auto self = std::unique_ptr<TcpClient>(new TcpClient());
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(lfd, 1) != 0 || ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string why = std::strerror(errno);
    if (lfd >= 0) ::close(lfd);
    return std::unexpected("TCP baseline: cannot listen on 127.0.0.1: " + why);
  }
  self->thread_ = std::thread(tcp_server, lfd, timeout, std::ref(self->shared_));
  self->fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (self->fd_ < 0 || ::connect(self->fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return std::unexpected(fmt::format("TCP baseline: cannot connect to 127.0.0.1:{}: {}",
                                       ntohs(a.sin_port), std::strerror(errno)));
  set_nodelay(self->fd_);
  set_recv_timeout(self->fd_, timeout);
  return self;
}

TcpClient::~TcpClient() {
  shared_.stop = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::expected<void, std::string> TcpClient::send(const Bytes& m) {
  if (!send_msg(fd_, m)) return std::unexpected(std::string("TCP send: ") + std::strerror(errno));
  return {};
}

std::expected<Bytes, std::string> TcpClient::recv() {
  Bytes m;
  if (!recv_msg(fd_, m))
    return std::unexpected(std::string("TCP receive: ") +
                           (errno ? std::strerror(errno) : "connection closed"));
  return m;
}

std::string TcpClient::finish() {
  Bytes q(1, 'Q');
  send_msg(fd_, q);
  shared_.stop = true;
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  fd_ = -1;
  return shared_.error;
}

}  // namespace iwarp::bench
