// Decodes every iWARP connection in a capture: reassembles each TCP direction, follows the MPA
// exchange, decodes FPDUs and DDP/RDMAP segments, and checks them (CRC, markers, MSN/MO/TO
// continuity). The result is a list of records, one per MPA frame, FPDU, violation or note,
// in the order the receiver would see them.
#pragma once

#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/segment.hpp"
#include "mpa/connection_decoder.hpp"
#include "trace/pcap_reader.hpp"

namespace iwarp::trace {

struct Record {
  enum class Kind : std::uint8_t { MpaFrame, Fpdu, Violation, Note };
  Kind kind = Kind::Note;
  std::size_t flow = 0;     // index into DecodeReport::flows
  std::uint64_t frame = 0;  // capture frame that completed this unit
  std::uint64_t time_us = 0;
  mpa::Direction dir = mpa::Direction::FromInitiator;
  std::uint64_t offset = 0;  // stream offset in its direction
  std::uint32_t length = 0;  // octets on the wire (frame or FPDU)

  std::optional<mpa::MpaFrame> mpa;  // Kind::MpaFrame

  // Kind::Fpdu
  std::uint16_t ulpdu_length = 0;
  mpa::CrcStatus crc = mpa::CrcStatus::NotChecked;
  std::uint32_t crc_value = 0;
  std::uint16_t markers = 0;
  std::optional<ddp::DdpHeader> ddp;  // when the DDP header parsed
  std::uint32_t payload_length = 0;
  std::string summary;  // describe(segment)
  // The RDMAP body (Read Request, Terminate, atomic, immediate data) when the segment parsed.
  decltype(ddp::Segment::body) body;
  bool siw_terminate_quirk = false;

  std::optional<WireError> error;  // Kind::Violation (or an FPDU whose segment is bad)
  std::string text;                // Kind::Note, and the one-line rendering of violations
};

struct FlowReport {
  IpEndpoint initiator, responder;
  bool iwarp = false;   // an MPA Request opened the client's stream
  std::string verdict;  // "iWARP", "no iWARP: ...", ...
  std::optional<mpa::MpaFrame> request, reply;
  std::optional<mpa::ConnectionParams> params;
  std::map<std::string, std::uint64_t> opcode_counts;  // by RDMAP opcode name
  std::uint64_t fpdus = 0, crc_good = 0, crc_bad = 0, crc_absent = 0, markers = 0;
  std::uint64_t violations = 0;
  std::vector<std::string> notes;  // capture problems, stream ends, rejects
};

struct DecodeReport {
  std::string path;
  std::string link_name;
  std::uint64_t frames = 0;
  std::vector<std::string> problems;  // capture problems that belong to no connection
  // A deque: decode_file() fills it as connections appear, each open one's state referring to
  // its entry, so that the reports are not held twice.
  std::deque<FlowReport> flows;
  std::vector<Record> records;
  std::uint64_t max_held = 0;  // decode_file(): high-water mark of the held cost of reassembly

  std::uint64_t violations() const;
  std::uint64_t iwarp_flows() const;
};

struct DecodeOptions {
  bool keep_records = true;      // false: counts only (large captures)
  bool keep_violations = false;  // with keep_records false: keep the Violation records only
  // Held octets per direction beyond a gap (as StreamOptions::window): octets further beyond
  // are dropped with a note. The default holds everything.
  std::size_t window = SIZE_MAX;
};

// Decodes every flow of a capture. A capture read with payloads_in_file has its payloads read
// back from its file (throws CaptureChanged when the file changed since it was read).
DecodeReport decode_capture(const Capture& cap, const DecodeOptions& opts = {});

// Takes each record as soon as it is known.
using RecordSink = std::function<void(Record&&)>;

// Reassembly window of decode_file(): octets more than this beyond a direction's in-order point
// (after a gap the capture has not filled yet) are dropped, with a note on their connection.
inline constexpr std::size_t kDefaultWindow = 16u << 20;
// Total limit of decode_file() on what all connections hold together: octets that would take
// it further are dropped, with a note on their connection.
inline constexpr std::size_t kDefaultTotalWindow = 256u << 20;

struct StreamOptions {
  std::size_t window = kDefaultWindow;             // per direction of each connection
  std::size_t total_window = kDefaultTotalWindow;  // all connections together
};

// Where direction `dir` (0: from the client) of flow `flow` starts, when the caller knows it;
// nullopt: as decode_file() takes it.
using StartOf = std::function<std::optional<TcpSeq>(std::size_t flow, int dir)>;

// Reads and decodes a capture in one pass without loading it: frame by frame, each connection's
// directions reassembled within `window`, every record handed to `on_record` when it is known,
// in capture order across connections. A connection is finished (its closing notes emitted, its
// state freed) once both directions have ended (sent RST, or FIN with every octet before it
// delivered), the others at the end of the file;
// data of a finished connection beyond what it delivered is counted in a note, not decoded.
// What it holds: one frame, and per open connection what lies beyond a gap plus one FPDU being
// decoded per direction. What lies beyond gaps is counted as its held cost (octets plus
// kHeldPieceOverhead per piece held) and is at most `window` per direction, so at most
// (open connections) x 2 x window, and never more than `total_window` in all. The report has no
// records; its max_held is the high-water mark of that held cost (all connections).
// A direction whose SYN is not in the capture starts at its first segment with data (where
// decode_capture() takes the lowest sequence number seen).
std::expected<DecodeReport, std::string> decode_file(const std::string& path,
                                                     const RecordSink& on_record,
                                                     const StreamOptions& opts = {});

// decode_file()'s decoding as a SegmentSink, for a caller that reads the capture itself and
// hands the same segments to other sinks too (`rnic replay` learns its plan in the same read).
// `rep` (which must outlive the decoder) gets the flows' reports as decode_file() makes them,
// `on_record` each record. Call finish() once, with the Capture the read returned.
class FileDecoder final : public SegmentSink {
 public:
  // `start_of`: where the streams start (`rnic replay` reads the capture once before it decodes
  // it, and gives each direction with data the start stream_start() takes from the whole flow).
  // `violations_only`: `on_record` gets the Violation and Note records only (the reports are
  // the same; no MPA frame or FPDU record is made).
  FileDecoder(DecodeReport& rep, const RecordSink& on_record, const StreamOptions& opts = {},
              StartOf start_of = {}, bool violations_only = false);
  ~FileDecoder() override;
  void on_segment(std::size_t index, TcpFlow& flow, int dir, const SegmentView& s) override;
  // Ends every flow still open (their closing records) and adds the flows' problems.
  void finish(const Capture& cap);

 private:
  RecordSink on_record_;               // (a copy: the decoder refers to it)
  std::unique_ptr<SegmentSink> impl_;  // the decoder
  std::function<void(const Capture&)> finish_;
};

// The record as one text line ("  12  0.000345 i->r @1448 FPDU Send QN 0 MSN 1 ...").
std::string format_record(const Record& r, std::uint64_t t0_us);

}  // namespace iwarp::trace
