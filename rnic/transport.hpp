// What a queue pair runs over. The live transport is a connected TCP socket; a replay runs
// the same QP over a transport that takes what the QP transmits and never delivers octets by
// itself: its receive side is fed TCP segments from a capture (QueuePair::receive_segment).
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/bytes.hpp"

namespace iwarp::rnic {

// Move-only: a handler that holds no more than a shared_ptr (the queue pair's next read) is
// stored inside it (libstdc++: up to 24 octets), where libstdc++'s std::function, which keeps
// only trivially copyable callables inside, allocated one for every wait. Never called empty
// (that is undefined, where std::function threw).
using WaitHandler = std::move_only_function<void(const boost::system::error_code&)>;

// Readiness, not asynchronous transfers: the QP waits until the transport can move octets and
// then moves them itself, synchronously, on the engine thread. So no buffer of registered
// memory is ever handed to the I/O layer to be filled or drained later: between two handlers
// the engine holds no span the kernel may still use, and deregistration (which runs on the
// engine thread too) can take a region away at any point between them.
class Transport {
 public:
  virtual ~Transport() = default;
  // Calls `done` on the engine thread once octets can be read (or the end of the stream or an
  // error is there to be read); operation_aborted after close().
  virtual void async_wait_readable(WaitHandler done) = 0;
  // Calls `done` once octets can be written; operation_aborted after close().
  virtual void async_wait_writable(WaitHandler done) = 0;
  // Non-blocking: reads what is there now into `buf`. would_block when nothing is, eof at the
  // end of the stream.
  virtual std::size_t read_some(MutableByteSpan buf, boost::system::error_code& ec) = 0;
  // Non-blocking gather write of what fits now; would_block when nothing does.
  virtual std::size_t write_some(std::span<const boost::asio::const_buffer> bufs,
                                 boost::system::error_code& ec) = 0;
  // From a thread other than the engine's (a posting thread, docs/progress-model.md), while
  // the QP's transmit lock keeps close() and the engine's writes away: a non-blocking gather
  // write of what fits now, straight on the descriptor (the I/O object is not safe for
  // concurrent use, so it is not touched). would_block when nothing fits. A transport that
  // cannot (the default) refuses with operation_not_supported and the engine writes instead.
  virtual bool can_write_now() const { return false; }
  virtual std::size_t write_now(std::span<const boost::asio::const_buffer> bufs,
                                boost::system::error_code& ec);
  // Shuts both directions down and closes; pending waits end with operation_aborted.
  virtual void close() = 0;
  // The TCP segment size in use (RFC 5044 §4.1 EMSS), 0 when unknown.
  virtual std::size_t mss() const { return 0; }
};

// A connected TCP socket (Boost.Asio).
class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(boost::asio::ip::tcp::socket s);
  void async_wait_readable(WaitHandler done) override;
  void async_wait_writable(WaitHandler done) override;
  std::size_t read_some(MutableByteSpan buf, boost::system::error_code& ec) override;
  std::size_t write_some(std::span<const boost::asio::const_buffer> bufs,
                         boost::system::error_code& ec) override;
  bool can_write_now() const override { return fd_ >= 0; }
  std::size_t write_now(std::span<const boost::asio::const_buffer> bufs,
                        boost::system::error_code& ec) override;
  void close() override;
  std::size_t mss() const override;
  boost::asio::ip::tcp::socket& socket() { return sock_; }

 private:
  boost::asio::ip::tcp::socket sock_;
  int fd_ = -1;  // the socket's descriptor, cached for write_now() (until close())
};

// A transport with no wire: writes are taken whole at once (handed to `on_write` first, when
// set), it never becomes readable by itself. For replaying captures through a QP.
class NullTransport final : public Transport {
 public:
  using WriteSink = std::function<void(ByteSpan)>;
  NullTransport(boost::asio::io_context& io, WriteSink on_write = {})
      : io_(io), on_write_(std::move(on_write)) {}
  void async_wait_readable(WaitHandler done) override;
  void async_wait_writable(WaitHandler done) override;
  std::size_t read_some(MutableByteSpan buf, boost::system::error_code& ec) override;
  std::size_t write_some(std::span<const boost::asio::const_buffer> bufs,
                         boost::system::error_code& ec) override;
  void close() override;
  std::uint64_t bytes_written() const { return written_; }

 private:
  boost::asio::io_context& io_;
  WriteSink on_write_;
  WaitHandler pending_read_;
  bool closed_ = false;
  std::uint64_t written_ = 0;
};

}  // namespace iwarp::rnic
