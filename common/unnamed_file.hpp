// A new unnamed file in $TMPDIR (default /tmp), read and written through its descriptor, that no
// other process sees and that goes when the descriptor is closed, even if the program is killed:
// O_TMPFILE, or where the file system has none, a file made with mkostemp() and unlinked before
// anything is written. `rnic replay` copies a pipe into one (trace::copy_to_unnamed_file) and
// keeps the timeline it prints in one (replay::TimelineSpool).
#pragma once

#include <expected>
#include <string>

namespace iwarp {

struct UnnamedFileError {
  std::string dir;  // the directory it was to be made in
  int error = 0;    // errno
};

// $TMPDIR, or /tmp where it is unset or empty.
std::string temp_dir();

// How the file is made: Any tries O_TMPFILE first, and falls back to Named (mkostemp, then
// unlink) where the file system has no O_TMPFILE; Named goes there at once (tests).
enum class UnnamedFileMethod : unsigned char { Any, Named };

// Opened read-write, close-on-exec.
std::expected<int, UnnamedFileError> open_unnamed_file(
    UnnamedFileMethod how = UnnamedFileMethod::Any);

}  // namespace iwarp
