// Work requests and work completions of the emulated RNIC. Numbering follows libibverbs
// (ibv_wr_opcode, ibv_send_flags, ibv_wc_status, ibv_wc_opcode, ibv_wc_flags) so the verbs shim
// maps them one to one and a verbs user reads the same numbers in logs.
#pragma once

#include <cstdint>
#include <string_view>

#include <boost/container/small_vector.hpp>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"

namespace iwarp::rnic {

// One scatter/gather element: [addr, addr + length) of the region named by lkey.
struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  STag lkey{0};
};

// A work request's scatter/gather list. rping, perftest and qperf post one SGE per WR: it is
// kept inside the WR, so posting a WR and copying it into its send queue slot allocate nothing;
// more SGEs go to the heap. Every slot of a send queue holds one list, so the part kept inside
// is one SGE (16 octets a slot).
using SgeList = boost::container::small_vector<Sge, 1>;

enum class WrOpcode : std::uint8_t {
  RdmaWrite = 0,
  RdmaWriteWithImm = 1,  // RFC 7306: RDMA Write followed by an Immediate Data message
  Send = 2,
  SendWithImm = 3,  // RFC 7306 Immediate Data message alone (no payload)
  RdmaRead = 4,
  AtomicCmpAndSwp = 5,
  AtomicFetchAndAdd = 6,
  LocalInv = 7,
  SendWithInv = 9,
};
std::string_view to_string(WrOpcode op);

enum SendFlags : std::uint32_t {
  kSendFence = 1,      // wait for earlier Reads and atomics to complete (RFC 5040 §5.5)
  kSendSignaled = 2,   // produce a completion on success
  kSendSolicited = 4,  // Send with Solicited Event (RFC 5040 §4.3)
  kSendInline = 8,     // copy the data at post time; lkeys are not checked
};

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::Send;
  std::uint32_t flags = 0;
  SgeList sg_list;
  std::uint64_t remote_addr = 0;  // Write, Read, atomics: the peer's TO
  STag rkey{0};                   // Write, Read, atomics: the peer's STag
  std::uint64_t compare_add = 0;  // CompareSwap: compare value; FetchAdd: value to add
  std::uint64_t swap = 0;         // CompareSwap: value to store
  std::uint32_t imm_data = 0;     // *WithImm (host order)
  STag invalidate_rkey{0};        // SendWithInv: the peer's STag to invalidate; LocalInv: ours
  Bytes inline_data;              // filled by post_send for kSendInline
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  SgeList sg_list;
};

// ibv_wc_status values.
enum class WcStatus : std::uint8_t {
  Success = 0,
  LocLenErr = 1,
  LocQpOpErr = 2,
  LocProtErr = 4,
  WrFlushErr = 5,
  BadRespErr = 7,
  LocAccessErr = 8,
  RemInvReqErr = 9,
  RemAccessErr = 10,
  RemOpErr = 11,
  FatalErr = 19,
  GeneralErr = 21,
};
std::string_view to_string(WcStatus s);  // "WR_FLUSH_ERR", as ibv_wc_status_str names them

// ibv_wc_opcode values.
enum class WcOpcode : std::uint8_t {
  Send = 0,
  RdmaWrite = 1,
  RdmaRead = 2,
  CompSwap = 3,
  FetchAdd = 4,
  LocalInv = 6,
  Recv = 128,
  RecvRdmaWithImm = 129,
};
std::string_view to_string(WcOpcode op);

enum WcFlags : std::uint32_t { kWcWithImm = 2, kWcWithInv = 8 };

struct Wc {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  WcOpcode opcode = WcOpcode::Send;
  std::uint32_t vendor_err = 0;  // for errors caused by a Terminate: layer<<16 | etype<<8 | code
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;
  STag invalidated_rkey{0};
  std::uint32_t qp_num = 0;
  std::uint32_t wc_flags = 0;
};

}  // namespace iwarp::rnic
