// The client side of the stat server (rnic/stat_server.hpp): finds the emulated RNICs of a
// process and asks each for its live state. What `rnic stat PID` runs; tests use it too.
#pragma once

#include <chrono>
#include <expected>
#include <string>
#include <vector>

namespace iwarp::rnic {

struct StatError {
  enum class Kind : std::uint8_t {
    NoProcess,  // no such process
    NoRnic,     // the process has no emulated RNIC listening (not under rnic run, RNIC_STAT=0)
    Timeout,    // it did not answer in time
    NoAnswer,   // it closed the connection without an answer (another user, too many clients)
    BadAnswer,  // what came back is not an answer
  };
  Kind kind;
  std::string message;  // one line, for the user
};

// The abstract socket names (no leading NUL) process `pid`'s emulated RNICs listen on, from
// /proc/net/unix, in device index order.
std::vector<std::string> stat_sockets(long pid);

// Asks one socket for its document (one JSON text); waits at most `bound` in all. With
// `expected_pid`, a socket that process did not open (SO_PEERCRED) is refused unread.
std::expected<std::string, StatError> query_stat_socket(const std::string& name,
                                                        std::chrono::milliseconds bound,
                                                        long expected_pid = 0);

// The documents of every emulated RNIC of `pid`, in device index order; waits at most `bound`
// in all.
std::expected<std::vector<std::string>, StatError> query_stat(long pid,
                                                              std::chrono::milliseconds bound);

}  // namespace iwarp::rnic
