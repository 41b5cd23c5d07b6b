// Writes octets into a named pipe from a thread of its own, for the tests that read a capture
// from a pipe: the writer opens the pipe without blocking (a reader that never comes does not
// hang the test: it gives up after 60 s) and survives a reader that stops early (SIGPIPE
// ignored; the write fails and it stops).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

namespace iwarp::testing_support {

class PipeWriter {
 public:
  PipeWriter(const std::string& fifo, std::string bytes) {
    ::signal(SIGPIPE, SIG_IGN);
    thread_ = std::thread([this, fifo, bytes = std::move(bytes)] {
      int fd = -1;
      for (int i = 0; i < 12000 && fd < 0; ++i)  // (ENXIO until a reader opens it)
        if ((fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK)) < 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (fd < 0) return;
      ::fcntl(fd, F_SETFL, 0);
      for (std::size_t at = 0; at < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
        if (n <= 0) break;
        at += static_cast<std::size_t>(n);
        written_ = at;
      }
      ::close(fd);
    });
  }
  PipeWriter(const PipeWriter&) = delete;
  PipeWriter& operator=(const PipeWriter&) = delete;
  ~PipeWriter() {
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the writer; the octets that went into the pipe.
  std::size_t join() {
    if (thread_.joinable()) thread_.join();
    return written_;
  }

 private:
  std::atomic<std::size_t> written_{0};
  std::thread thread_;
};

}  // namespace iwarp::testing_support
