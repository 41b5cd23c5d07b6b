#include "ddp/rdmap_opcode.hpp"

#include <array>

namespace iwarp::rdmap {

namespace {
using F = MessageFamily;
// clang-format off
constexpr std::array<OpcodeInfo, kMaxOpcode + 1> kTable{{
  // opcode                  name                          tagged qn             body                     payload single SE     inval  family             RQE
  {Opcode::Write,            "RDMA Write",                  true,  0,             0,                       true,   false, false, false, F::Write,          false},
  {Opcode::ReadRequest,      "RDMA Read Request",           false, kQnReadReq,    kReadRequestBodySize,    false,  true,  false, false, F::ReadRequest,    false},
  {Opcode::ReadResponse,     "RDMA Read Response",          true,  0,             0,                       true,   false, false, false, F::ReadResponse,   false},
  {Opcode::Send,             "Send",                        false, kQnSend,       0,                       true,   false, false, false, F::Send,           true},
  {Opcode::SendInvalidate,   "Send with Invalidate",        false, kQnSend,       0,                       true,   false, false, true,  F::Send,           true},
  {Opcode::SendSe,           "Send with SE",                false, kQnSend,       0,                       true,   false, true,  false, F::Send,           true},
  {Opcode::SendSeInvalidate, "Send with SE and Invalidate", false, kQnSend,       0,                       true,   false, true,  true,  F::Send,           true},
  {Opcode::Terminate,        "Terminate",                   false, kQnTerminate,  kTerminateControlSize,   true,   true,  false, false, F::Terminate,      false},
  {Opcode::ImmediateData,    "Immediate Data",              false, kQnSend,       kImmediateDataSize,      false,  true,  false, false, F::ImmediateData,  true},
  {Opcode::ImmediateDataSe,  "Immediate Data with SE",      false, kQnSend,       kImmediateDataSize,      false,  true,  true,  false, F::ImmediateData,  true},
  {Opcode::AtomicRequest,    "Atomic Request",              false, kQnReadReq,    kAtomicRequestBodySize,  false,  true,  false, false, F::AtomicRequest,  false},
  {Opcode::AtomicResponse,   "Atomic Response",             false, kQnAtomicResp, kAtomicResponseBodySize, false,  true,  false, false, F::AtomicResponse, false},
}};
// clang-format on
}  // namespace

const OpcodeInfo* opcode_info(std::uint8_t op) {
  return op <= kMaxOpcode ? &kTable[op] : nullptr;
}

std::string_view opcode_name(std::uint8_t op) {
  auto* i = opcode_info(op);
  return i ? i->name : std::string_view("Unknown");
}

}  // namespace iwarp::rdmap
