// common/unnamed_file.hpp: the temporary files `rnic replay` keeps a pipe's copy and a long
// timeline in. Both ways of making one (O_TMPFILE, and mkostemp then unlink where a file system
// has no O_TMPFILE) give a read-write, close-on-exec descriptor of a file that leaves no name in
// $TMPDIR; a $TMPDIR that is missing is an error naming it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "common/unnamed_file.hpp"

namespace iwarp {
namespace {

// Sets TMPDIR for the scope of the test, and puts it back.
class TmpDir {
 public:
  explicit TmpDir(const std::string& dir) {
    if (const char* old = std::getenv("TMPDIR")) saved_ = old;
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~TmpDir() {
    if (saved_)
      ::setenv("TMPDIR", saved_->c_str(), 1);
    else
      ::unsetenv("TMPDIR");
  }

 private:
  std::optional<std::string> saved_;
};

std::filesystem::path scratch(const std::string& tag) {
  auto d = std::filesystem::path(::testing::TempDir()) /
           ("unnamed_file_" + std::to_string(::getpid()) + "_" + tag);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(UnnamedFile, EitherWayLeavesNoNameAndReadsBackWhatWasWritten) {
  for (const auto how : {UnnamedFileMethod::Any, UnnamedFileMethod::Named}) {
    SCOPED_TRACE(how == UnnamedFileMethod::Any ? "O_TMPFILE" : "mkostemp and unlink");
    const auto dir = scratch(how == UnnamedFileMethod::Any ? "any" : "named");
    TmpDir env(dir.string());
    EXPECT_EQ(temp_dir(), dir.string());
    auto fd = open_unnamed_file(how);
    ASSERT_TRUE(fd) << std::strerror(fd.error().error);
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a name is left in " << dir;
    EXPECT_NE(::fcntl(*fd, F_GETFD) & FD_CLOEXEC, 0);
    const std::string text = "what the replay keeps";
    ASSERT_EQ(::pwrite(*fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
    std::string back(text.size(), '\0');
    ASSERT_EQ(::pread(*fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
    EXPECT_EQ(back, text);
    ::close(*fd);
    std::filesystem::remove_all(dir);
  }
}

TEST(UnnamedFile, AMissingDirectoryIsAnErrorNamingIt) {
  const auto dir = scratch("missing") / "not-there";
  TmpDir env(dir.string());
  for (const auto how : {UnnamedFileMethod::Any, UnnamedFileMethod::Named}) {
    auto fd = open_unnamed_file(how);
    ASSERT_FALSE(fd);
    EXPECT_EQ(fd.error().dir, dir.string());
    EXPECT_EQ(fd.error().error, ENOENT);
  }
  // An empty TMPDIR is /tmp.
  TmpDir empty("");
  EXPECT_EQ(temp_dir(), "/tmp");
}

}  // namespace
}  // namespace iwarp
