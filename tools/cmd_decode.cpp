// rnic decode: one line per MPA frame and FPDU of every iWARP connection in a capture.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "tools/commands.hpp"
#include "tools/value_checks.hpp"
#include "trace/explain.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::tools {

namespace {

using nlohmann::json;

json frame_json(const mpa::MpaFrame& f) {
  json j{{"kind", f.kind == mpa::FrameKind::Request ? "request" : "reply"},
         {"revision", f.revision},
         {"markers", f.markers},
         {"crc", f.crc},
         {"reject", f.reject},
         {"enhanced", f.enhanced},
         {"private_data_length", f.private_data.size()},
         {"private_data", hex(f.private_data, 512)}};
  if (f.params) {
    j["ird"] = f.params->ird;
    j["ord"] = f.params->ord;
    j["peer_to_peer"] = f.params->peer_to_peer;
    j["rtr_mask"] = f.params->rtr;
  }
  return j;
}

json params_json(const mpa::ConnectionParams& p) {
  return json{{"revision", p.revision},
              {"enhanced", p.enhanced},
              {"crc", p.crc},
              {"markers_to_responder", p.markers_to_responder},
              {"markers_to_initiator", p.markers_to_initiator},
              {"initiator_ird", p.initiator_ird},
              {"initiator_ord", p.initiator_ord},
              {"responder_ird", p.responder_ird},
              {"responder_ord", p.responder_ord},
              {"peer_to_peer", p.peer_to_peer},
              {"rtr", mpa::rtr_name(p.rtr)}};
}

json record_json(const trace::Record& r) {
  static constexpr const char* kKinds[] = {"mpa_frame", "fpdu", "violation", "note"};
  json j{{"kind", kKinds[static_cast<int>(r.kind)]},
         {"connection", r.flow},
         {"frame", r.frame},
         {"time_us", r.time_us},
         {"direction", r.dir == mpa::Direction::FromInitiator ? "i2r" : "r2i"},
         {"offset", r.offset}};
  if (r.mpa) j["mpa"] = frame_json(*r.mpa);
  if (r.kind == trace::Record::Kind::Fpdu) {
    j["wire_length"] = r.length;
    j["ulpdu_length"] = r.ulpdu_length;
    j["crc"] = mpa::to_string(r.crc);
    if (r.crc != mpa::CrcStatus::NotChecked) j["crc_value"] = r.crc_value;
    j["markers"] = r.markers;
    j["summary"] = r.summary;
    if (r.ddp) {
      const auto& h = *r.ddp;
      j["opcode"] = h.opcode;
      j["opcode_name"] = rdmap::opcode_name(h.opcode);
      j["tagged"] = h.tagged;
      j["last"] = h.last;
      if (h.tagged) {
        j["stag"] = h.stag.value();
        j["to"] = h.to.value();
      } else {
        j["qn"] = h.qn.value();
        j["msn"] = h.msn.value();
        j["mo"] = h.mo.value();
        j["rsvd_ulp"] = h.rsvd_ulp;
      }
      j["payload_length"] = r.payload_length;
    }
    if (r.siw_terminate_quirk) j["siw_terminate_bitfield_quirk"] = true;
  }
  if (r.error) {
    auto t = term_code(r.error->code);
    j["error"] =
        json{{"name", errc_name(r.error->code)},
             {"rule", r.error->rule},
             {"detail", r.error->detail},
             {"terminate",
              {{"layer", static_cast<int>(t.layer)}, {"etype", t.etype}, {"ecode", t.ecode}}}};
  }
  if (!r.text.empty()) j["text"] = r.text;
  return j;
}

std::string counts_text(const trace::FlowReport& f) {
  std::string s;
  for (const auto& [name, n] : f.opcode_counts)
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, n);
  return s.empty() ? "none" : s;
}

// The rest of the JSON document after the records: everything but them, as one object.
json report_json(const trace::DecodeReport& rep) {
  json doc{{"file", rep.path},         {"link", rep.link_name},
           {"frames", rep.frames},     {"iwarp_connections", rep.iwarp_flows()},
           {"problems", rep.problems}, {"violations", rep.violations()}};
  json conns = json::array();
  for (const auto& f : rep.flows) {
    json c{{"initiator", f.initiator.to_string()},
           {"responder", f.responder.to_string()},
           {"iwarp", f.iwarp},
           {"verdict", f.verdict},
           {"fpdus", f.fpdus},
           {"opcodes", f.opcode_counts},
           {"crc", {{"good", f.crc_good}, {"bad", f.crc_bad}, {"absent", f.crc_absent}}},
           {"markers", f.markers},
           {"violations", f.violations},
           {"notes", f.notes}};
    if (f.request) c["request"] = frame_json(*f.request);
    if (f.reply) c["reply"] = frame_json(*f.reply);
    if (f.params) c["params"] = params_json(*f.params);
    conns.push_back(std::move(c));
  }
  doc["connections"] = std::move(conns);
  return doc;
}

}  // namespace

Runner add_decode_command(CLI::App& app) {
  struct Opts {
    std::string file;
    bool json = false, summary = false, explain = false;
    std::uint64_t window = trace::kDefaultWindow;
    std::uint64_t total_window = trace::kDefaultTotalWindow;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "decode",
      "Decode every iWARP connection in a capture (pcap or pcapng; Ethernet, Linux cooked,\n"
      "raw IP; IPv4 and IPv6): one line per MPA frame and FPDU with time, direction, stream\n"
      "offset, RDMAP opcode, DDP fields, lengths, CRC and markers, printed as the capture is\n"
      "read (in capture order; the file is never loaded whole); then a summary per connection.\n"
      "Exit status: 0 clean, 1 protocol violations found, 2 unreadable input.");
  cmd->add_option("file", o->file, "Capture file")->required();
  cmd->add_flag("--json", o->json,
                "Print one JSON document (records first, streamed; then the connections)");
  auto* summary = cmd->add_flag("--summary", o->summary, "Print only the per-connection summary");
  cmd->add_flag("--explain", o->explain,
                "After each line, one indented sentence starting \"why:\" saying what it means\n"
                "in RDMA terms (which segment of which message, where its data goes, what\n"
                "completes) and the RFC rule behind it; violations name the rule broken and the\n"
                "Terminate a receiver would send. With --json each record gets an\n"
                "\"explanation\" member. Filter the sentences out with grep -v ' why: '")
      ->excludes(summary);
  cmd->add_option("--window", o->window,
                  "Reassembly window per direction: octets arriving more than this beyond a gap\n"
                  "are dropped with a note (each held piece also counts 176 octets for its\n"
                  "bookkeeping; default 16m; units k, m, g). A connection's state is freed once\n"
                  "both directions have ended (RST, or FIN with all data before it)")
      ->transform(byte_size_in(1024, 1ull << 40));
  cmd->add_option("--total-window", o->total_window,
                  "Limit on what all open connections hold together beyond their gaps: octets\n"
                  "that would exceed it are dropped with a note (default 256m; units k, m, g)")
      ->transform(byte_size_in(1024, 1ull << 40));
  return [o]() {
    const trace::StreamOptions so{.window = static_cast<std::size_t>(o->window),
                                  .total_window = static_cast<std::size_t>(o->total_window)};
    std::uint64_t t0 = 0;
    bool first = true;
    trace::RecordExplainer explainer;
    trace::RecordSink sink;
    if (o->json) {
      // The records are streamed as the "records" member; the rest follows when known.
      sink = [&](trace::Record&& r) {
        json rj = record_json(r);
        if (o->explain) rj["explanation"] = explainer.explain(r);
        std::string j = rj.dump(1);
        std::string ind;
        ind.reserve(j.size() + 64);
        for (char c : j) {
          ind += c;
          if (c == '\n') ind += "  ";
        }
        fmt::print("{}  {}", first ? "{\n \"records\": [\n" : ",\n", ind);
        first = false;
      };
    } else if (!o->summary) {
      sink = [&](trace::Record&& r) {
        if (first) {
          t0 = r.time_us;
          fmt::print("{:>6} {:>10} {:>2} {} {:<9} {}\n", "frame", "time", "cn", "dir", "offset",
                     "what");
          first = false;
        }
        fmt::print("{}\n", trace::format_record(r, t0));
        if (o->explain) fmt::print("{:>11}{}\n", "why: ", explainer.explain(r));
      };
    }
    auto rep = trace::decode_file(o->file, sink, so);
    if (!rep) {
      if (o->json && !first) fmt::print("\n ]\n}}\n");
      fmt::print(stderr, "rnic decode: {}\n", rep.error());
      return 2;
    }
    if (o->json) {
      const std::string rest = report_json(*rep).dump(1);  // "{\n \"connections\" ... }"
      fmt::print("{}\n",
                 first ? "{\n \"records\": [],\n" + rest.substr(2) : "\n ],\n" + rest.substr(2));
      return rep->violations() ? 1 : 0;
    }
    fmt::print("{}: {} frames, link {}, {} TCP connection(s), {} iWARP\n", rep->path, rep->frames,
               rep->link_name, rep->flows.size(), rep->iwarp_flows());
    for (const auto& p : rep->problems) fmt::print("capture problem: {}\n", p);
    for (std::size_t i = 0; i < rep->flows.size(); ++i) {
      const auto& f = rep->flows[i];
      fmt::print("connection c{}: {} -> {}: {}\n", i, f.initiator.to_string(),
                 f.responder.to_string(), f.verdict);
      if (f.params) fmt::print("  negotiated: {}\n", mpa::describe(*f.params));
      if (f.iwarp)
        fmt::print("  FPDUs {} ({}); CRC good {} bad {} absent {}; markers {}; violations {}\n",
                   f.fpdus, counts_text(f), f.crc_good, f.crc_bad, f.crc_absent, f.markers,
                   f.violations);
      for (const auto& n : f.notes) fmt::print("  note: {}\n", n);
    }
    if (rep->iwarp_flows() == 0) fmt::print("no iWARP connection in this capture\n");
    return rep->violations() ? 1 : 0;
  };
}

}  // namespace iwarp::tools
