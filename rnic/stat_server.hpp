// The stat server: each emulated RNIC answers `rnic stat PID` (docs/stat.md) on an abstract
// Unix socket named "rnic-stat-<pid>-<device index>" (Linux abstract namespace: no file to
// clean up, gone with the process, reachable only from its network namespace). It runs on the
// engine thread, so the state it reports is read without a race; it never blocks the engine.
//
// Protocol: the client connects and sends one line, "stat"; the server answers with one JSON
// document (rnic/live_state.hpp) and a newline, and closes. Only the process's own user (or
// root) is answered (SO_PEERCRED); at most kStatMaxClients connections at once (more are closed
// at once); a client that sends no request within kStatRequestBound, or does not take the
// answer within kStatWriteBound, is closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

namespace iwarp::rnic {

class Device;

inline constexpr int kStatMaxClients = 4;
inline constexpr std::chrono::milliseconds kStatRequestBound{2000};
inline constexpr std::chrono::milliseconds kStatWriteBound{5000};
inline constexpr std::size_t kStatMaxRequest = 256;

// "rnic-stat-<pid>-<index>": the abstract socket name (without its leading NUL).
std::string stat_socket_name(long pid, int index);

// False when RNIC_STAT is 0, off or no: the process's emulated RNICs do not listen.
bool stat_enabled();

class StatServer {
 public:
  // Listens on `name` for `dev`; nullptr (with `why`) when the socket cannot be had. Call before
  // the engine runs handlers, or on the engine thread.
  static std::unique_ptr<StatServer> listen(Device& dev, const std::string& name, std::string* why);
  ~StatServer();
  StatServer(const StatServer&) = delete;
  StatServer& operator=(const StatServer&) = delete;
  // The listening descriptor (for a forked child to close its copy: rnic/device.hpp).
  int native_handle() const;

  struct Impl;

 private:
  explicit StatServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace iwarp::rnic
