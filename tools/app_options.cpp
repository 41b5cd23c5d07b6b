#include "tools/app_options.hpp"

#include <fmt/format.h>
#include <charconv>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "capture/pcap_tap.hpp"
#include "common/log.hpp"
#include "rnic/segment_report.hpp"
#include "rnic/segment_tap.hpp"
#include "sim/impaired_wire.hpp"

namespace iwarp::tools {

namespace {

// The names of each policy on the command line, in the order --help lists them.
template <typename T>
using Names = std::vector<std::pair<std::string, T>>;

const Names<mpa::CrcPolicy> kCrcPolicies = {{"required", mpa::CrcPolicy::Required},
                                            {"optional", mpa::CrcPolicy::Optional},
                                            {"off", mpa::CrcPolicy::Off}};
const Names<mpa::MarkerPolicy> kMarkerPolicies = {{"required", mpa::MarkerPolicy::Required},
                                                  {"optional", mpa::MarkerPolicy::Optional},
                                                  {"off", mpa::MarkerPolicy::Off}};
const Names<rnic::BeyondHoles> kBeyondHoles = {{"place", rnic::BeyondHoles::Place},
                                               {"hold", rnic::BeyondHoles::Hold},
                                               {"discard", rnic::BeyondHoles::Discard}};
const Names<mpa::RtrType> kRtrTypes = {
    {"write", mpa::RtrType::Write}, {"read", mpa::RtrType::Read}, {"send", mpa::RtrType::Send}};

// What `name` stands for; the option's IsMember check lets only these names through.
template <typename T>
T named(const Names<T>& names, const std::string& name) {
  for (const auto& [n, v] : names)
    if (n == name) return v;
  return names.front().second;
}

}  // namespace

void add_peer_options(CLI::App& sub, bool& server, std::string& client, std::string& bind,
                      int& port, const std::string& server_help, const std::string& port_help,
                      const std::string& bind_flags) {
  auto* srv = sub.add_flag("--server,-s", server, server_help);
  auto* cli = sub.add_option("--client,-c", client, "Connect to the server at ADDR");
  srv->excludes(cli);
  sub.add_option(bind_flags, bind, "Address the server listens on")->capture_default_str();
  sub.add_option("--port,-p", port, port_help)->check(CLI::Range(0, 65535))->capture_default_str();
}

CLI::Validator llp_timeout_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        long v = -1;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc{} && p == s.data() + s.size() &&
            (v == 0 || (v >= rnic::kMinLlpTimeout.count() && v <= rnic::kMaxLlpTimeout.count())))
          return {};
        return fmt::format("milliseconds: 0 (the kernel's defaults) or {} to {}, not {}",
                           rnic::kMinLlpTimeout.count(), rnic::kMaxLlpTimeout.count(), s);
      },
      "0|1000..3600000");
}

void add_app_options(CLI::App& app, AppOptions& o) {
  app.add_option("--mpa-rev", o.mpa_rev,
                 "Highest MPA revision to speak (1 or 2; 2 adds RFC 6581 IRD/ORD)")
      ->check(CLI::Range(1, 2))
      ->capture_default_str();
  app.add_option(
         "--crc", o.crc,
         "CRC32c policy: required (ask for it), optional (follow the peer), off (refuse it)")
      ->check(CLI::IsMember(kCrcPolicies))
      ->capture_default_str();
  app.add_option("--markers", o.markers,
                 "MPA markers policy: required (ask the peer for markers), optional (send them\n"
                 "when the peer asks), off (refuse a peer that asks, as siw does)")
      ->check(CLI::IsMember(kMarkerPolicies))
      ->capture_default_str();
  app.add_flag("--p2p", o.p2p,
               "RFC 6581 peer-to-peer mode: the initiator sends a zero-length RTR first (needs "
               "--mpa-rev 2)");
  app.add_option("--rtr", o.rtr, "RTR message offered in --p2p mode: write, read or send")
      ->check(CLI::IsMember(kRtrTypes))
      ->capture_default_str();
  app.add_option("--ird", o.ird, "Inbound RDMA Read queue depth (responder resources)")
      ->check(CLI::Range(1, 128))
      ->capture_default_str();
  app.add_option("--ord", o.ord, "Outbound RDMA Reads outstanding (initiator depth)")
      ->check(CLI::Range(1, 128))
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_ms, "Milliseconds to wait for the peer at each step")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  app.add_option("--mpa-timeout", o.mpa_timeout_ms,
                 "Milliseconds the MPA exchange waits for the peer's Request (responder) or\n"
                 "Reply (initiator) (default: --timeout, at most 5000, as siw's responder; siw's\n"
                 "initiator waits 10000). Longer helps where a lost SYN-ACK delays the Request:\n"
                 "behind QEMU's slirp, which accepts for the initiator first, about 6 s")
      ->check(CLI::Range(100, 3600000));
  app.add_option("--first-fpdu-delay", o.first_fpdu_delay_ms,
                 "Milliseconds the initiator waits after the MPA Reply before its first FPDU\n"
                 "(siw 6.1 can stall if it comes within ~2 ms)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app.add_option("--llp-timeout", o.llp_timeout_ms,
                 "Milliseconds a connection may go without an acknowledgement from the peer (a\n"
                 "zero window, a vanished peer, an idle connection whose peer is gone) before it\n"
                 "is lost and its work requests flushed (TCP_USER_TIMEOUT and keepalive; 0: the\n"
                 "kernel's defaults, which wait for ever on a zero window; else 1000 to 3600000)")
      ->check(llp_timeout_check())
      ->capture_default_str();
  app.add_option("--mss", o.emss, "TCP segment size to frame FPDUs for (default: the socket's MSS)")
      ->check(CLI::Range(64, 65495));
  app.add_option("--wire", o.wire,
                 "SIMULATION: receive through an impaired wire. The stream the kernel delivered\n"
                 "is cut again into MSS-sized TCP segments (FPDU-aligned, RFC 5044 §8) and\n"
                 "presented out of order, so the segment path places FPDUs beyond TCP holes and\n"
                 "defers their completions until the holes close. Keys (comma-separated):\n"
                 "  reorder=P  probability a segment is held back (0..1)\n"
                 "  dup=P      probability a segment arrives twice or as an overlapping resend\n"
                 "  delay=N    a held segment arrives after 1..N later ones (default 4)\n"
                 "  seed=S     the disorder's random seed (default 1)\n"
                 "  mss=N      segment size (default: the connection's MSS)\n"
                 "e.g. --wire reorder=0.3,dup=0.05,seed=7")
      ->check([](const std::string& s) -> std::string {
        auto w = sim::parse_wire_impairment(s);
        return w ? std::string{} : w.error();
      });
  auto* wire = app.get_option("--wire");
  app.add_option("--real-segments", o.real_segments,
                 "Receive the real TCP segments as they arrive on interface IFACE, in arrival\n"
                 "order (an AF_PACKET socket: root or CAP_NET_RAW; IPv4 over Ethernet), besides\n"
                 "the socket's in-order stream: a segment beyond a real TCP hole (loss,\n"
                 "reordering) is placed at once and its completion deferred until the hole\n"
                 "closes. The connection must be made after the program starts (the tap learns\n"
                 "the peer's ISN from its SYN). See docs/impaired-link.md")
      ->type_name("IFACE")
      ->excludes(wire)
      ->check([](const std::string& ifname) { return rnic::SegmentTap::check(ifname); });
  auto* real = app.get_option("--real-segments");
  app.add_option("--beyond-holes", o.beyond_holes,
                 "What the segment path does with data beyond a TCP hole (--real-segments,\n"
                 "--wire): place (at once, completions deferred until the hole closes), hold\n"
                 "(kept, placed in order when it closes), discard (dropped: the socket's\n"
                 "stream brings it again; needs --real-segments). See docs/beyond-holes.md")
      ->check(CLI::IsMember(kBeyondHoles))
      // Validators run once the whole command line is parsed, so the order does not matter.
      // A simulated wire presents what it dropped never again: discarded data would be lost.
      ->check([real, wire](const std::string& v) -> std::string {
        if (v == "discard" && real->count() == 0)
          return "--beyond-holes discard needs --real-segments (the socket's stream brings the "
                 "discarded data again; a simulated --wire would lose it)";
        if (v != "place" && real->count() == 0 && wire->count() == 0)
          return "--beyond-holes " + v +
                 " needs --real-segments or --wire (over the socket alone no segment arrives "
                 "beyond a hole)";
        return {};
      })
      ->capture_default_str();
  app.add_option("--hole-times", o.hole_times,
                 "With --real-segments or --wire: at the end, write each TCP hole's octets\n"
                 "beyond it and the time from its closing to them delivered (ns) to FILE, CSV\n"
                 "(docs/beyond-holes.md)")
      ->type_name("FILE")
      ->check([](const std::string& path) -> std::string {
        std::ofstream f(path, std::ios::binary | std::ios::app);
        if (!f) return fmt::format("cannot write {}: {}", path, std::strerror(errno));
        return {};
      });
  app.add_option("--pcap", o.pcap, "Record what this side sends and receives to a pcap file")
      ->check([](const std::string& path) -> std::string {
        // Say so now, not after the connection is up.
        std::ofstream f(path, std::ios::binary | std::ios::app);
        if (!f) return fmt::format("cannot write capture {}: {}", path, std::strerror(errno));
        return {};
      });
}

verbs::EndpointOptions endpoint_options(const AppOptions& o) {
  verbs::EndpointOptions e;
  auto& p = e.cm.policy;
  p.revision = static_cast<std::uint8_t>(o.mpa_rev);
  p.crc = named(kCrcPolicies, o.crc);
  p.markers = named(kMarkerPolicies, o.markers);
  p.peer_to_peer = o.p2p;
  if (o.p2p) p.rtr = static_cast<mpa::RtrMask>(named(kRtrTypes, o.rtr));
  e.ird = static_cast<std::uint8_t>(o.ird);
  e.ord = static_cast<std::uint8_t>(o.ord);
  e.timeout = std::chrono::milliseconds(o.timeout_ms);
  e.cm.mpa_timeout =
      std::chrono::milliseconds(o.mpa_timeout_ms ? o.mpa_timeout_ms : std::min(o.timeout_ms, 5000));
  e.cm.first_fpdu_delay = std::chrono::milliseconds(o.first_fpdu_delay_ms);
  e.cm.llp_timeout = std::chrono::milliseconds(o.llp_timeout_ms);
  e.cm.emss = o.emss;
  if (!o.pcap.empty()) e.cm.tap = capture::pcap_tap_factory(o.pcap);
  if (!o.wire.empty())
    e.cm.rx_shaper = sim::impaired_wire_shaper(*sim::parse_wire_impairment(o.wire));
  e.cm.beyond_holes = named(kBeyondHoles, o.beyond_holes);
  if (!o.real_segments.empty()) {
    // Checked when the option was parsed; should it fail now, the program runs on the socket's
    // stream alone and says so.
    auto tap = rnic::SegmentTap::open(o.real_segments);
    if (tap)
      e.cm.segment_tap = std::shared_ptr<rnic::SegmentTap>(std::move(*tap));
    else
      log::layer("tool").error("--real-segments {}: receiving from the socket only", tap.error());
  }
  return e;
}

std::string describe_segment_path(const AppOptions& o, verbs::Endpoint& ep,
                                  const std::string& prefix) {
  if ((o.wire.empty() && o.real_segments.empty()) || !ep.qp() || !ep.qp()->qp) return {};
  const std::string source = o.wire.empty()
                                 ? fmt::format("real TCP segments on {}", o.real_segments)
                                 : fmt::format("simulated wire {}", o.wire);
  return rnic::describe_segment_path(*ep.qp()->qp, source, named(kBeyondHoles, o.beyond_holes),
                                     prefix, o.hole_times);
}

std::string describe_params(const mpa::ConnectionParams& p) {
  return fmt::format(
      "MPA rev {}{}, CRC {}, markers {}/{}, IRD/ORD {}/{} (initiator) {}/{} (responder){}",
      p.revision, p.enhanced ? " enhanced" : "", p.crc ? "on" : "off",
      p.markers_to_responder ? "on" : "off", p.markers_to_initiator ? "on" : "off", p.initiator_ird,
      p.initiator_ord, p.responder_ird, p.responder_ord,
      p.peer_to_peer ? fmt::format(", peer-to-peer RTR {}", mpa::rtr_name(p.rtr)) : "");
}

}  // namespace iwarp::tools
