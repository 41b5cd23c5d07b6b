#include "tools/enlarge_options.hpp"

namespace iwarp::tools {

namespace {

constexpr enlarge::Mode kModes[] = {enlarge::Mode::Enlarge, enlarge::Mode::Pieces,
                                    enlarge::Mode::Rendezvous};

}  // namespace

std::vector<std::string> enlarge_mode_names() {
  std::vector<std::string> names;
  for (auto m : kModes) names.emplace_back(enlarge::to_string(m));
  return names;
}

enlarge::Mode enlarge_mode(const std::string& name) {
  for (auto m : kModes)
    if (name == enlarge::to_string(m)) return m;
  return enlarge::Mode::Enlarge;  // the option's check lets only the names through
}

void add_enlarge_options(CLI::App& app, EnlargeCli& o) {
  auto* g = "Buffer enlargement";
  app.add_option("--slot-size", o.opts.slot_size,
                 "Bytes of each pre-registered slot: the largest eager Send (protocol: 100-2000)")
      ->check(CLI::Range(64u, 1u << 20))
      ->capture_default_str()
      ->group(g);
  app.add_option("--recv-slots", o.opts.recv_slots, "Receive slots posted per connection")
      ->check(CLI::Range(4u, 1024u))
      ->capture_default_str()
      ->group(g);
  app.add_option("--send-slots", o.opts.send_slots, "Send staging slots per connection")
      ->check(CLI::Range(2u, 1024u))
      ->capture_default_str()
      ->group(g);
  app.add_option("--threshold", o.opts.threshold,
                 "Data (message or iovec element) above this many bytes is enlarged; 0: what "
                 "fits one slot")
      ->capture_default_str()
      ->group(g);
  app.add_option("--min-enlarged", o.opts.min_enlarged, "Smallest enlarged buffer (bytes)")
      ->check(CLI::Range(1u, 1u << 30))
      ->capture_default_str()
      ->group(g);
  app.add_option("--depth", o.opts.depth,
                 "An enlargement asks for room for this many of the data that needed it (a ring "
                 "of RDMA Writes in flight)")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str()
      ->group(g);
  app.add_option("--max-enlarged", o.opts.max_enlarged,
                 "Largest enlarged buffer (bytes); larger data goes through it in parts")
      ->check(CLI::Range(1u, 1u << 30))
      ->capture_default_str()
      ->group(g);
  app.add_flag("--free-small", o.opts.free_small,
               "Once enlarged, move the slots into the enlarged buffer and free the small one")
      ->group(g);
  app.add_option("--idle-shrink", o.idle_shrink_ms,
                 "Release an enlarged buffer unused for this many ms (0: keep it)")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str()
      ->group(g);
  app.add_option("--refusal-backoff", o.refusal_backoff_ms,
                 "After a refusal, send in pieces for this many ms before asking again")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str()
      ->group(g);
  app.add_option("--mode", o.mode,
                 "enlarge (the protocol), pieces (never enlarge) or rendezvous (register per "
                 "message)")
      ->check(CLI::IsMember(enlarge_mode_names()))
      ->capture_default_str()
      ->group(g);
  app.add_option("--budget", o.budget,
                 "Registered-memory budget of this process in bytes (0: none); a receiver over "
                 "it refuses enlargements")
      ->capture_default_str()
      ->group(g);
  app.add_option("--busy-poll", o.busy_poll_us,
                 "Poll the completion queues for up to this many microseconds before blocking, "
                 "this thread running the receive path (0: block at once)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str()
      ->group(g);
  app.add_flag("--malloc-as-is", o.malloc_as_is,
               "Leave malloc as it is (by default blocks up to 32 MiB come from a heap kept "
               "mapped, so large messages do not map and fault in their pages each time)")
      ->group(g);
}

std::expected<enlarge::Options, std::string> enlarge_options(const EnlargeCli& o,
                                                             const AppOptions& app) {
  enlarge::Options e = o.opts;
  e.mode = enlarge_mode(o.mode);
  e.idle_shrink = std::chrono::milliseconds(o.idle_shrink_ms);
  e.refusal_backoff = std::chrono::milliseconds(o.refusal_backoff_ms);
  if (o.budget) e.budget = std::make_shared<enlarge::Budget>(o.budget);
  e.tune_malloc = !o.malloc_as_is;
  e.busy_poll = std::chrono::microseconds(o.busy_poll_us);
  e.cm = endpoint_options(app).cm;
  if (auto why = enlarge::validate(e); !why.empty()) return std::unexpected(why);
  return e;
}

}  // namespace iwarp::tools
