// CLI11 validators the rnic subcommands share for values CLI11 has no ready check for: byte
// sizes with binary units, and any check answering in the subcommand's own words.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

namespace iwarp::tools {

// `s` without leading and trailing whitespace.
std::string trimmed_text(std::string s);

// Trims the value's leading and trailing whitespace.
CLI::Validator trimmed();

// `check`, but a value it rejects gets `message(value)` instead of CLI11's own words.
CLI::Validator with_message(CLI::Validator check,
                            std::function<std::string(const std::string& value)> message);

// A byte size: decimal digits, then optionally a binary unit: b, k or kib, m or mib, g or gib,
// in any case ("64", "4K", "4KiB", "1M", "2G"). The value becomes its count of bytes. A value it
// rejects gets `message(value)`.
CLI::Validator byte_size(std::function<std::string(const std::string& value)> message);

// A byte size (as byte_size) from lo to hi, else "'VALUE' is not a number from LO to HI".
CLI::Validator byte_size_in(std::uint64_t lo, std::uint64_t hi);

}  // namespace iwarp::tools
