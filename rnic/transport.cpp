#include "rnic/transport.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace iwarp::rnic {

void SocketTransport::async_write(const std::vector<boost::asio::const_buffer>& bufs,
                                  IoHandler done) {
  boost::asio::async_write(sock_, bufs, std::move(done));
}

void SocketTransport::async_read_some(MutableByteSpan buf, IoHandler done) {
  sock_.async_read_some(boost::asio::buffer(buf.data(), buf.size()), std::move(done));
}

void SocketTransport::close() {
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

void NullTransport::async_write(const std::vector<boost::asio::const_buffer>& bufs,
                                IoHandler done) {
  std::size_t n = 0;
  for (const auto& b : bufs) {
    if (on_write_) on_write_(ByteSpan(static_cast<const std::uint8_t*>(b.data()), b.size()));
    n += b.size();
  }
  written_ += n;
  const auto ec = closed_ ? boost::system::error_code(boost::asio::error::operation_aborted)
                          : boost::system::error_code{};
  boost::asio::post(io_, [done = std::move(done), ec, n] { done(ec, ec ? 0 : n); });
}

void NullTransport::async_read_some(MutableByteSpan, IoHandler done) {
  if (closed_) {
    boost::asio::post(io_,
                      [done = std::move(done)] { done(boost::asio::error::operation_aborted, 0); });
    return;
  }
  pending_read_ = std::move(done);
}

void NullTransport::close() {
  if (closed_) return;
  closed_ = true;
  if (auto h = std::move(pending_read_)) {
    pending_read_ = nullptr;
    boost::asio::post(io_, [h = std::move(h)] { h(boost::asio::error::operation_aborted, 0); });
  }
}

}  // namespace iwarp::rnic
