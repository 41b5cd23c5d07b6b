#include "rnic/transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace iwarp::rnic {

std::size_t Transport::write_now(std::span<const boost::asio::const_buffer>,
                                 boost::system::error_code& ec) {
  ec = boost::asio::error::operation_not_supported;
  return 0;
}

SocketTransport::SocketTransport(boost::asio::ip::tcp::socket s) : sock_(std::move(s)) {
  boost::system::error_code ignored;
  sock_.non_blocking(true, ignored);
  if (sock_.is_open()) fd_ = sock_.native_handle();
}

std::size_t SocketTransport::write_now(std::span<const boost::asio::const_buffer> bufs,
                                       boost::system::error_code& ec) {
  if (fd_ < 0) {
    ec = boost::asio::error::bad_descriptor;
    return 0;
  }
  constexpr std::size_t kIov = 1024;  // IOV_MAX on Linux
  iovec iov[kIov];
  const std::size_t n = std::min(bufs.size(), kIov);
  for (std::size_t i = 0; i < n; ++i)
    iov[i] = iovec{const_cast<void*>(bufs[i].data()), bufs[i].size()};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n;
  for (;;) {
    // MSG_NOSIGNAL: a reset connection is an error here, never SIGPIPE; MSG_DONTWAIT: never
    // blocks the application.
    const ssize_t r = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      ec = {};
      return static_cast<std::size_t>(r);
    }
    if (errno == EINTR) continue;
    ec = (errno == EAGAIN || errno == EWOULDBLOCK)
             ? boost::system::error_code(boost::asio::error::would_block)
             : boost::system::error_code(errno, boost::system::system_category());
    return 0;
  }
}

void SocketTransport::async_wait_readable(WaitHandler done) {
  sock_.async_wait(boost::asio::ip::tcp::socket::wait_read, std::move(done));
}

void SocketTransport::async_wait_writable(WaitHandler done) {
  sock_.async_wait(boost::asio::ip::tcp::socket::wait_write, std::move(done));
}

std::size_t SocketTransport::read_some(MutableByteSpan buf, boost::system::error_code& ec) {
  return sock_.read_some(boost::asio::buffer(buf.data(), buf.size()), ec);
}

std::size_t SocketTransport::write_some(std::span<const boost::asio::const_buffer> bufs,
                                        boost::system::error_code& ec) {
  // MSG_NOSIGNAL: a peer that reset the connection is an error here, never SIGPIPE.
  return sock_.send(bufs, MSG_NOSIGNAL, ec);
}

void SocketTransport::close() {
  fd_ = -1;
  boost::system::error_code ignored;
  sock_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  sock_.close(ignored);
}

std::size_t SocketTransport::mss() const {
  int mss = 0;
  socklen_t len = sizeof mss;
  if (!sock_.is_open() ||
      ::getsockopt(const_cast<boost::asio::ip::tcp::socket&>(sock_).native_handle(), IPPROTO_TCP,
                   TCP_MAXSEG, &mss, &len) != 0 ||
      mss <= 0)
    return 0;
  return static_cast<std::size_t>(mss);
}

void NullTransport::async_wait_readable(WaitHandler done) {
  if (closed_) {
    boost::asio::post(
        io_, [done = std::move(done)]() mutable { done(boost::asio::error::operation_aborted); });
    return;
  }
  pending_read_ = std::move(done);
}

void NullTransport::async_wait_writable(WaitHandler done) {
  const auto ec = closed_ ? boost::system::error_code(boost::asio::error::operation_aborted)
                          : boost::system::error_code{};
  boost::asio::post(io_, [done = std::move(done), ec]() mutable { done(ec); });
}

std::size_t NullTransport::read_some(MutableByteSpan, boost::system::error_code& ec) {
  ec = closed_ ? boost::asio::error::operation_aborted : boost::asio::error::would_block;
  return 0;
}

std::size_t NullTransport::write_some(std::span<const boost::asio::const_buffer> bufs,
                                      boost::system::error_code& ec) {
  if (closed_) {
    ec = boost::asio::error::operation_aborted;
    return 0;
  }
  ec = {};
  std::size_t n = 0;
  for (const auto& b : bufs) {
    if (on_write_) on_write_(ByteSpan(static_cast<const std::uint8_t*>(b.data()), b.size()));
    n += b.size();
  }
  written_ += n;
  return n;
}

void NullTransport::close() {
  if (closed_) return;
  closed_ = true;
  if (auto h = std::move(pending_read_)) {
    pending_read_ = nullptr;
    boost::asio::post(io_,
                      [h = std::move(h)]() mutable { h(boost::asio::error::operation_aborted); });
  }
}

}  // namespace iwarp::rnic
