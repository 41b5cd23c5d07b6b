// Options every program that runs the emulated RNIC shares: MPA policy (revision, CRC,
// markers, peer-to-peer RTR, IRD/ORD), timeouts, and --pcap recording of what it sends and
// receives.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <mutex>
#include <string>

#include "rnic/connection_manager.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::tools {

struct AppOptions {
  int mpa_rev = 2;
  std::string crc = "optional";
  std::string markers = "optional";  // send markers when the peer asks (RFC 5044 §7.1 M)
  bool p2p = false;
  std::string rtr = "write";
  int ird = 16, ord = 16;
  int timeout_ms = 10000;
  int mpa_timeout_ms = 0;  // --mpa-timeout; 0: --timeout, at most 5000 (CmOptions::mpa_timeout)
  int first_fpdu_delay_ms = 0;
  int llp_timeout_ms = static_cast<int>(rnic::kLlpTimeout.count());  // CmOptions::llp_timeout
  std::size_t emss = 0;
  std::string pcap;
  std::string wire;                    // --wire: simulated impaired wire on what this side receives
  std::string real_segments;           // --real-segments IFACE: the real-segment receive mode
  std::string beyond_holes = "place";  // --beyond-holes: place, hold or discard
  std::string hole_times;              // --hole-times FILE: each hole's timing, CSV
};

// The two sides of a two-process program: --server (-s), --client ADDR (-c), the address the
// server listens on (`bind_flags`, default --bind,-a) and --port (-p, 0-65535).
void add_peer_options(CLI::App& sub, bool& server, std::string& client, std::string& bind,
                      int& port, const std::string& server_help, const std::string& port_help,
                      const std::string& bind_flags = "--bind,-a");

// Registers the shared options on a subcommand.
void add_app_options(CLI::App& app, AppOptions& o);

// --llp-timeout's values: 0 (the kernel's defaults) or rnic::kMinLlpTimeout..kMaxLlpTimeout ms.
CLI::Validator llp_timeout_check();

// Endpoint options from the command line; the pcap tap is set up when --pcap was given.
verbs::EndpointOptions endpoint_options(const AppOptions& o);

// With --wire or --real-segments: what the segment path did (segments out of order, holes,
// FPDUs placed beyond a hole, completions released when holes closed, reassembly memory and
// copies, the time from a hole closing to the octets beyond it delivered). Empty otherwise.
// Every line starts with `prefix` ("client: "). With --hole-times FILE it also writes each
// timed hole there (CSV: octets_beyond,ns); a file it cannot write is said in the text.
std::string describe_segment_path(const AppOptions& o, verbs::Endpoint& ep,
                                  const std::string& prefix = {});

// A line saying what MPA negotiated, for programs to print.
std::string describe_params(const mpa::ConnectionParams& p);

}  // namespace iwarp::tools
