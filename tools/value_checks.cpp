#include "tools/value_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace iwarp::tools {

namespace {

// Digits, then letters only: CLI11's conversion alone would also take "0x10", "010" (octal),
// "-1" and " 1.5k".
bool decimal_then_unit(const std::string& s) {
  auto unit =
      std::find_if_not(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
  return unit != s.begin() &&
         std::all_of(unit, s.end(), [](unsigned char ch) { return std::isalpha(ch); });
}

}  // namespace

std::string trimmed_text(std::string s) {
  auto space = [](unsigned char ch) { return std::isspace(ch) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  return s;
}

CLI::Validator trimmed() {
  return CLI::Validator(
      [](std::string& value) {
        value = trimmed_text(value);
        return std::string{};
      },
      "");
}

CLI::Validator with_message(CLI::Validator check,
                            std::function<std::string(const std::string& value)> message) {
  return CLI::Validator(
      [check = std::move(check), message = std::move(message)](std::string& value) {
        const std::string given = value;
        std::string why;
        try {
          why = check(value);
        } catch (const CLI::ValidationError& e) {
          why = e.what();
        }
        if (why.empty()) return why;
        value = given;
        return message(given);
      },
      "");
}

CLI::Validator byte_size(std::function<std::string(const std::string& value)> message) {
  // Not CLI::AsSizeValue: it also takes kb, ki, t, p and e.
  static const std::map<std::string, std::uint64_t> kBinaryUnits = {
      {"b", 1},           {"k", 1ull << 10},   {"kib", 1ull << 10},
      {"m", 1ull << 20},  {"mib", 1ull << 20}, {"g", 1ull << 30},
      {"gib", 1ull << 30}};
  const CLI::AsNumberWithUnit units(kBinaryUnits);
  const CLI::Validator decimal(
      [](std::string& value) -> std::string {
        value = trimmed_text(value);
        return decimal_then_unit(value) ? "" : "not a size";
      },
      "");
  return with_message(decimal & units, std::move(message));
}

CLI::Validator byte_size_in(std::uint64_t lo, std::uint64_t hi) {
  auto message = [lo, hi](const std::string& value) {
    return fmt::format("'{}' is not a number from {} to {}", trimmed_text(value), lo, hi);
  };
  return with_message(byte_size(message) & CLI::Range(lo, hi), message);
}

}  // namespace iwarp::tools
