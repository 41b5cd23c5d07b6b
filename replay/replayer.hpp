// Runs a replay plan: two emulated endpoints per connection, each a queue pair of our RNIC over
// a transport with no wire, with shadow memory registered at the STags the capture uses and one
// receive buffer posted per Send. Every TCP segment goes, in capture order (or in a seeded
// disorder), into the queue pair that receives its direction; the Reads and atomics an endpoint
// issued are posted on its queue pair where the capture shows their requests. What the receive
// engines report (placements, holes, deferred completions released, doorbells, Terminates,
// violations) makes the timeline; the CQEs and the shadow memory are the outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mpa/segment_receiver.hpp"
#include "replay/replay_plan.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/rx_observer.hpp"
#include "rnic/segment_input.hpp"
#include "rnic/work_request.hpp"
#include "sim/impaired_wire.hpp"

namespace iwarp::replay {

// A seeded disorder of each direction's segments: some held back and delivered later (as a
// retransmission would be), some delivered twice or again as an overlapping retransmission
// (sim::SegmentDisorder), and, before that, some cut into two overlapping pieces.
struct Permutation {
  sim::WireImpairment wire{.reorder = 0.25, .dup = 0.1, .delay = 4, .seed = 1, .mss = 0};
  double split = 0.1;  // probability that a segment is re-cut into two overlapping pieces
  std::string describe() const;
};

class TimelineSpool;  // replay/timeline_spool.hpp

struct ReplayOptions {
  std::optional<Permutation> permutation;  // none: capture order
  bool keep_memory = false;                // keep every shadow region's octets (tests)
  // Called after each step with the steps done and the total (progress display).
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
  // Timeline events kept per connection (the first ones; all are counted, and every Terminate
  // and violation is found): what the report will print, so that a long capture's timeline
  // does not grow the replay's memory.
  std::size_t timeline_keep = SIZE_MAX;
  // The events past timeline_keep are kept in a temporary file (TimelineSpool, one for all the
  // connections of a replay(), made once more than 1 MiB of them wait) rather than only counted:
  // a report that prints them all holds no more of them in memory than timeline_keep. The
  // replay throws std::runtime_error, in one line, when that file cannot be made or written.
  bool spool_timeline = false;
};

struct TimelineEntry {
  std::uint64_t frame = 0, time_us = 0;  // the capture frame being injected when it happened
  Side side = Side::Initiator;           // the endpoint whose queue pair reported it
  rnic::RxEvent event;
};
std::string_view event_name(rnic::RxEvent::Kind k);

// A region of shadow memory: [base_to, base_to + bytes.size()) under `stag`; receive buffers
// and atomic results are regions too (kind says which).
struct RegionImage {
  std::string kind;  // "stag", "receive buffers", "atomic results"
  STag stag{0};
  std::uint64_t base_to = 0;
  Bytes bytes;  // only with ReplayOptions::keep_memory
  std::uint64_t hash = 0;
  std::uint64_t nonzero = 0;  // octets that are not zero (what the traffic wrote)
};

struct EndpointResult {
  std::vector<rnic::Wc> send_cqes, recv_cqes;  // in completion order
  std::vector<RegionImage> memory;
  std::uint64_t memory_hash = 0;  // of every region, in order
  std::uint64_t shadow_bytes = 0;
  std::vector<rnic::HoleInfo> holes_open;  // at the end
  mpa::SegmentReceiver::Stats segments;
  rnic::QueuePair::Stats qp;
  std::string state;                  // queue pair state at the end
  std::optional<std::string> closed;  // why its queue pair ended, when it did
  std::uint64_t transmitted = 0;      // octets its queue pair sent (Read Responses, ...)
  std::vector<std::string> problems;  // regions that could not be registered, posts refused
};

struct Counts {
  std::uint64_t placed_in_order = 0, placed_beyond_hole = 0, deferred = 0, deferred_errors = 0;
  std::uint64_t holes_opened = 0, holes_closed = 0, releases = 0;
  std::uint64_t released_sends = 0, released_read_responses = 0, released_read_requests = 0,
                released_writes = 0;
  std::uint64_t completions = 0, doorbells = 0, terminates_sent = 0, terminates_received = 0;
  std::uint64_t violations = 0, duplicates = 0;
  Counts& operator+=(const Counts& o);
};

// A Terminate or violation, and whether the trace holds it.
struct Finding {
  Side side = Side::Initiator;
  std::uint64_t frame = 0;
  std::string text;
  bool expected = false;
  std::string why;  // why it is expected, or "not in the trace"
};

struct ConnectionResult {
  std::size_t flow = 0;
  EndpointResult ep[2];
  std::vector<TimelineEntry> timeline;  // the first ReplayOptions::timeline_keep events
  std::uint64_t timeline_events = 0;    // all of them
  // With ReplayOptions::spool_timeline: the events after those (for_each_timeline_event), the
  // spool's run from octet spool_offset, spool_count events.
  std::shared_ptr<const TimelineSpool> timeline_spool;
  std::uint64_t spool_offset = 0, spool_count = 0, spool_octets = 0;
  Counts counts;
  std::vector<Finding> terminates_sent, terminates_received, violations;
  std::vector<std::string> not_reproduced;  // Terminates of the trace the emulation did not send
  std::vector<std::string> cut_short;       // the plan's reasons, and holes left open
  std::uint64_t steps = 0, segments_injected = 0;
  sim::SegmentDisorder::Stats disorder[2];
  std::uint64_t split = 0;           // segments re-cut
  std::uint64_t unexpected() const;  // Terminates sent and violations the trace does not hold
};

// Every timeline event a connection's replay kept, in order: those in memory, then those in its
// spool (ReplayOptions::spool_timeline). Throws std::runtime_error when the spool cannot be read.
void for_each_timeline_event(const ConnectionResult& r,
                             const std::function<void(const TimelineEntry&)>& fn);
// How many that is.
std::uint64_t kept_timeline_events(const ConnectionResult& r);

struct ReplayResult {
  std::vector<ConnectionResult> connections;
  Counts totals;
  std::uint64_t unexpected = 0;
};

ConnectionResult replay_connection(const ConnectionPlan& plan, const ReplayOptions& opts);
ReplayResult replay(const Plan& plan, const ReplayOptions& opts);

// The differences between two replays of the same connection (CQEs and shadow memory), one
// line each; empty when they agree.
std::vector<std::string> compare(const ConnectionResult& a, const ConnectionResult& b);

}  // namespace iwarp::replay
