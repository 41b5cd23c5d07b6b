// rnic generate: write a sample iWARP conversation (every RDMAP opcode) as a pcap.
#include <fmt/format.h>

#include <memory>

#include "tools/commands.hpp"
#include "tools/value_checks.hpp"
#include "trace/trace_generator.hpp"

namespace iwarp::tools {

Runner add_generate_command(CLI::App& app) {
  struct Opts {
    std::string out;
    int rev = 1;
    bool crc = false, markers = false, p2p = false;
    std::string rtr = "write";
    std::uint16_t mss = 1460;
    std::uint32_t seed = 1;
    std::uint64_t bulk = 0, bulk_message = trace::GeneratorOptions::kBulkMessage;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Write a sample iWARP conversation as a pcap: the MPA exchange, then every RDMAP message\n"
      "type (Send family, Write, Read, Terminate, RFC 7306 atomics and immediate data) in both\n"
      "directions, framed by this stack's encoders. Opens in Wireshark; decode with `rnic "
      "decode`.");
  cmd->add_option("output", o->out, "Capture file to write")->required();
  cmd->add_option("--mpa-rev", o->rev, "MPA revision: 1 (RFC 5044) or 2 (RFC 6581)")
      ->check(CLI::IsMember({1, 2}));
  cmd->add_flag("--crc", o->crc, "Negotiate CRC32c (C=1)");
  cmd->add_flag("--markers", o->markers, "Negotiate MPA markers in both directions (M=1)");
  cmd->add_flag("--p2p", o->p2p, "RFC 6581 peer-to-peer mode with an RTR message (needs rev 2)");
  cmd->add_option("--rtr", o->rtr, "RTR message for --p2p: write, read or send")
      ->check(CLI::IsMember({"write", "read", "send"}));
  cmd->add_option("--mss", o->mss, "TCP MSS of the capture (sets the MULPDU)")
      ->check(CLI::Range(128, 65495));
  cmd->add_option("--seed", o->seed, "Seed for the payload bytes");
  auto* bulk =
      cmd->add_option(
             "--bulk", o->bulk,
             "Add this many octets of RDMA Write payload (Writes of --bulk-message octets,\n"
             "64 KiB by default, cycling over 1 MiB of one STag) before the closing Terminate: a\n"
             "capture of about that size, for benchmarks (scripts/replay-bench.sh); units k, m,\n"
             "g (powers of 1024)")
          ->transform(byte_size_in(0, 1ull << 42));
  auto* bulk_message =
      cmd->add_option("--bulk-message", o->bulk_message,
                      "With --bulk: octets of each bulk Write (default 64k; at most 1m): fewer,\n"
                      "larger messages in as many segments")
          ->transform(byte_size_in(1, trace::GeneratorOptions::kBulkSpan))
          ->needs(bulk);
  return [o, bulk_message]() {
    if (bulk_message->count() > 0 && o->bulk == 0) {
      fmt::print(stderr, "rnic generate: --bulk-message needs --bulk above 0\n");
      return 2;
    }
    if (o->p2p && o->rev != 2) {
      fmt::print(stderr, "rnic generate: --p2p needs --mpa-rev 2\n");
      return 2;
    }
    trace::GeneratorOptions g;
    for (auto* p : {&g.initiator, &g.responder}) {
      p->revision = static_cast<std::uint8_t>(o->rev);
      p->crc = o->crc ? mpa::CrcPolicy::Required : mpa::CrcPolicy::Optional;
      p->markers = o->markers ? mpa::MarkerPolicy::Required : mpa::MarkerPolicy::Optional;
      p->peer_to_peer = o->p2p;
    }
    g.initiator.rtr = o->rtr == "write"  ? static_cast<mpa::RtrMask>(mpa::RtrType::Write)
                      : o->rtr == "read" ? static_cast<mpa::RtrMask>(mpa::RtrType::Read)
                                         : static_cast<mpa::RtrMask>(mpa::RtrType::Send);
    g.pcap.mss = o->mss;
    g.seed = o->seed;
    g.bulk_bytes = o->bulk;
    g.bulk_message = o->bulk_message;
    auto r = trace::generate_conversation(o->out, g);
    if (!r) {
      fmt::print(stderr, "rnic generate: {}\n", r.error());
      return 2;
    }
    fmt::print("{}: {} FPDUs, {}\n", o->out, r->fpdus, mpa::describe(r->params));
    return 0;
  };
}

}  // namespace iwarp::tools
