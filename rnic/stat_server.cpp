#include "rnic/stat_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <istream>
#include <string_view>

#include "common/log.hpp"
#include "rnic/device.hpp"
#include "rnic/live_state.hpp"

namespace iwarp::rnic {

namespace {

using boost::asio::local::stream_protocol;

// Asio opens sockets without SOCK_CLOEXEC: a program's exec()ed child must not inherit them.
void close_on_exec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// The abstract address: a leading NUL, then the name (no terminating NUL: the length counts).
stream_protocol::endpoint abstract_endpoint(const std::string& name) {
  return stream_protocol::endpoint(std::string(1, '\0') + name);
}

}  // namespace

std::string stat_socket_name(long pid, int index) {
  return "rnic-stat-" + std::to_string(pid) + "-" + std::to_string(index);
}

bool stat_enabled() {
  const char* v = std::getenv("RNIC_STAT");
  if (!v) return true;
  const std::string_view s(v);
  return !(s == "0" || s == "off" || s == "no" || s == "false");
}

struct StatServer::Impl {
  Device& dev;
  stream_protocol::acceptor acceptor;
  boost::asio::steady_timer backoff;
  int clients = 0;
  std::uint64_t queries = 0;

  Impl(Device& d) : dev(d), acceptor(d.io()), backoff(d.io()) {}

  struct Client : std::enable_shared_from_this<Client> {
    Impl& server;
    stream_protocol::socket sock;
    boost::asio::steady_timer deadline;
    boost::asio::streambuf request{kStatMaxRequest};
    std::string reply;
    bool ended = false;
    Client(Impl& s, stream_protocol::socket so)
        : server(s), sock(std::move(so)), deadline(s.dev.io()) {}

    void end() {
      if (ended) return;
      ended = true;
      boost::system::error_code ec;
      sock.shutdown(stream_protocol::socket::shutdown_both, ec);
      sock.close(ec);
      deadline.cancel();
      --server.clients;
    }
    void arm(std::chrono::milliseconds bound) {
      deadline.expires_after(bound);
      deadline.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec) self->end();  // too slow: the engine does not wait for it
      });
    }
    void start() {
      arm(kStatRequestBound);
      boost::asio::async_read_until(
          sock, request, '\n',
          [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
            if (ec || self->ended) return self->end();  // closed, too long, or timed out
            self->answer();
          });
    }
    void answer() {
      std::istream in(&request);
      std::string line;
      std::getline(in, line);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      try {
        if (line == "stat")
          reply = live_state_json(server.dev, ++server.queries);
        else
          reply = R"({"error":"unknown request; send \"stat\""})";
      } catch (const std::exception& e) {
        // Whatever went wrong gathering the state, the engine goes on (an exception leaving
        // this handler would stop it and every connection of the device).
        log::layer("rnic").warn("rnic stat: cannot answer: {}", e.what());
        reply = R"({"error":"the state could not be gathered; see the process's log"})";
      }
      reply += '\n';
      arm(kStatWriteBound);
      boost::asio::async_write(sock, boost::asio::buffer(reply),
                               [self = shared_from_this()](const boost::system::error_code&,
                                                           std::size_t) { self->end(); });
    }
  };

  void accept() {
    acceptor.async_accept(
        [this](const boost::system::error_code& ec, stream_protocol::socket sock) {
          if (ec == boost::asio::error::operation_aborted) return;
          if (ec) {
            // Out of descriptors, say: try again a little later rather than spin.
            backoff.expires_after(std::chrono::milliseconds(100));
            backoff.async_wait([this](const boost::system::error_code& e) {
              if (!e) accept();
            });
            return;
          }
          close_on_exec(sock.native_handle());
          if (allowed(sock.native_handle()) && clients < kStatMaxClients) {
            ++clients;
            std::make_shared<Client>(*this, std::move(sock))->start();
          } else {
            boost::system::error_code ignored;
            sock.close(ignored);
          }
          accept();
        });
  }

  // Only the process's own user, or root, may see its state.
  static bool allowed(int fd) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
    return cred.uid == ::geteuid() || cred.uid == 0;
  }
};

std::unique_ptr<StatServer> StatServer::listen(Device& dev, const std::string& name,
                                               std::string* why) {
  auto impl = std::make_unique<Impl>(dev);
  boost::system::error_code ec;
  // Close-on-exec from the start: a thread of the program that forks and execs meanwhile
  // must not hand the listener (and the name) to another program.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (why) *why = std::strerror(errno);
    return nullptr;
  }
  impl->acceptor.assign(stream_protocol(), fd, ec);
  if (ec) ::close(fd);
  if (!ec) impl->acceptor.bind(abstract_endpoint(name), ec);
  if (!ec) impl->acceptor.listen(kStatMaxClients, ec);
  if (ec) {
    if (why) *why = ec.message();
    return nullptr;
  }
  impl->accept();
  return std::unique_ptr<StatServer>(new StatServer(std::move(impl)));
}

StatServer::StatServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int StatServer::native_handle() const {
  return impl_->acceptor.native_handle();
}

StatServer::~StatServer() {
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  impl_->backoff.cancel();
}

}  // namespace iwarp::rnic
