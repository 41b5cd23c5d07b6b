// PNG from a ladder's SVG through rsvg-convert (Debian package librsvg2-bin).
#pragma once

#include <expected>
#include <string>

namespace iwarp::ladder {

inline constexpr const char* kPngConverter = "rsvg-convert";

// Runs `rsvg-convert -f png -o png_path svg_path` (found on PATH). Errors are one line: the
// converter is missing (with the package to install), or it failed (its exit status).
std::expected<void, std::string> svg_to_png(const std::string& svg_path,
                                            const std::string& png_path);

}  // namespace iwarp::ladder
