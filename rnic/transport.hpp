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
#include <vector>

#include "common/bytes.hpp"

namespace iwarp::rnic {

using IoHandler = std::function<void(const boost::system::error_code&, std::size_t)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Writes every octet of `bufs` (gather), then calls `done` on the engine thread.
  virtual void async_write(const std::vector<boost::asio::const_buffer>& bufs, IoHandler done) = 0;
  // Reads some octets into `buf`; `done` gets operation_aborted after close().
  virtual void async_read_some(MutableByteSpan buf, IoHandler done) = 0;
  // Shuts both directions down and closes; pending operations end with operation_aborted.
  virtual void close() = 0;
  // The TCP segment size in use (RFC 5044 §4.1 EMSS), 0 when unknown.
  virtual std::size_t mss() const { return 0; }
};

// A connected TCP socket (Boost.Asio).
class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(boost::asio::ip::tcp::socket s) : sock_(std::move(s)) {}
  void async_write(const std::vector<boost::asio::const_buffer>& bufs, IoHandler done) override;
  void async_read_some(MutableByteSpan buf, IoHandler done) override;
  void close() override;
  std::size_t mss() const override;
  boost::asio::ip::tcp::socket& socket() { return sock_; }

 private:
  boost::asio::ip::tcp::socket sock_;
};

// A transport with no wire: writes complete at once (handed to `on_write` first, when set),
// reads never complete by themselves. For replaying captures through a QP.
class NullTransport final : public Transport {
 public:
  using WriteSink = std::function<void(ByteSpan)>;
  NullTransport(boost::asio::io_context& io, WriteSink on_write = {})
      : io_(io), on_write_(std::move(on_write)) {}
  void async_write(const std::vector<boost::asio::const_buffer>& bufs, IoHandler done) override;
  void async_read_some(MutableByteSpan buf, IoHandler done) override;
  void close() override;
  std::uint64_t bytes_written() const { return written_; }

 private:
  boost::asio::io_context& io_;
  WriteSink on_write_;
  IoHandler pending_read_;
  bool closed_ = false;
  std::uint64_t written_ = 0;
};

}  // namespace iwarp::rnic
