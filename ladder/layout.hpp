// Where each part of a ladder goes: the model's events as rows (one per MPA frame, RDMAP
// message, violation or note), runs of identical exchanges collapsed into one drawing with
// "×N", the rows split into pages, and each row's height and vertical place.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "ladder/model.hpp"

namespace iwarp::ladder {

// The page's geometry (SVG user units, 1 = 1 px at 100%).
inline constexpr double kWidth = 1200;
inline constexpr double kTimeX = 12;           // time margin text starts here
inline constexpr double kInitiatorX = 330;     // the initiator's lifeline
inline constexpr double kResponderX = 930;     // the responder's lifeline
inline constexpr double kTop = 64;             // below the page title
inline constexpr double kHeaderHeight = 96;    // connection title, parameters, endpoint boxes
inline constexpr double kArrowRowHeight = 46;  // MPA frame or RDMAP message
inline constexpr double kTextRowHeight = 24;   // violation or note
inline constexpr double kLocalRowHeight = 16;  // a local event beside a message
inline constexpr double kBottom = 30;

struct Row {
  enum class Kind : std::uint8_t { Header, Event };
  Kind kind = Kind::Event;
  const Connection* conn = nullptr;
  const Event* event = nullptr;  // Kind::Event: the first occurrence
  const Event* last = nullptr;   // the same event in the run's last repetition (== event if none)
  std::uint32_t repeat = 1;      // how many times the exchange this row belongs to was seen
  bool single = true;            // the repeated exchange is this one row (else: a bracket)
  bool continued = false;        // Header: the connection began on an earlier page
  double y = 0;                  // top of the row
  double height = 0;
};

// A repeated exchange of several messages drawn once: its rows and how many times it ran.
struct Bracket {
  double y0 = 0, y1 = 0;
  std::uint32_t repeat = 0;
  std::size_t messages = 0;  // messages in one repetition
};

struct Page {
  std::size_t number = 1, count = 1;
  std::vector<Row> rows;
  std::vector<Bracket> brackets;
  double height = 0;
  std::uint64_t messages = 0;  // RDMAP messages this page stands for (repeats counted)
};

struct LayoutOptions {
  bool collapse = true;        // draw runs of identical exchanges once with ×N
  std::size_t max_rows = 150;  // rows per page (0: one page)
  std::size_t page = 1;        // 1-based
};

// Longest exchange (in messages) that collapsing looks for.
inline constexpr std::size_t kMaxPeriod = 8;

// Lays out page `opts.page`. Error: that page does not exist (one line, with the count).
std::expected<Page, std::string> layout(const Model& m, const LayoutOptions& opts);

// Whether two messages are the same exchange step: same direction, opcode, buffer (STag, or
// queue and MO), length, segmentation and body; MSNs may differ (they count up, RFC 5041
// §5.3) and so may a tagged message's TO (a benchmark walking through its buffer).
bool same_step(const Event& a, const Event& b);

}  // namespace iwarp::ladder
