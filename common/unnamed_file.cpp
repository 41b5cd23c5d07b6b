#include "common/unnamed_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace iwarp {

std::string temp_dir() {
  const char* env = std::getenv("TMPDIR");
  return env && *env ? env : "/tmp";
}

std::expected<int, UnnamedFileError> open_unnamed_file(UnnamedFileMethod how) {
  const std::string dir = temp_dir();
  int fd = -1;
  errno = EOPNOTSUPP;
  if (how == UnnamedFileMethod::Any) fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // (A file system without O_TMPFILE: a named file, unlinked before anything is written.)
    std::string name = dir + "/rnic-tmp-XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) return std::unexpected(UnnamedFileError{dir, errno});
  return fd;
}

}  // namespace iwarp
