#include "ddp/rdmap_opcode.hpp"

#include <array>

namespace iwarp::rdmap {

namespace {
using F = MessageFamily;
// clang-format off
constexpr std::array<OpcodeInfo, kMaxOpcode + 1> kTable{{
  // opcode                  name                          tagged qn             body                     payload single SE     inval  family
  {Opcode::Write,            "RDMA Write",                  true,  0,             0,                       true,   false, false, false, F::Write},
  {Opcode::ReadRequest,      "RDMA Read Request",           false, kQnReadReq,    kReadRequestBodySize,    false,  true,  false, false, F::ReadRequest},
  {Opcode::ReadResponse,     "RDMA Read Response",          true,  0,             0,                       true,   false, false, false, F::ReadResponse},
  {Opcode::Send,             "Send",                        false, kQnSend,       0,                       true,   false, false, false, F::Send},
  {Opcode::SendInvalidate,   "Send with Invalidate",        false, kQnSend,       0,                       true,   false, false, true,  F::Send},
  {Opcode::SendSe,           "Send with SE",                false, kQnSend,       0,                       true,   false, true,  false, F::Send},
  {Opcode::SendSeInvalidate, "Send with SE and Invalidate", false, kQnSend,       0,                       true,   false, true,  true,  F::Send},
  {Opcode::Terminate,        "Terminate",                   false, kQnTerminate,  kTerminateControlSize,   true,   true,  false, false, F::Terminate},
  {Opcode::ImmediateData,    "Immediate Data",              false, kQnSend,       kImmediateDataSize,      false,  true,  false, false, F::ImmediateData},
  {Opcode::ImmediateDataSe,  "Immediate Data with SE",      false, kQnSend,       kImmediateDataSize,      false,  true,  true,  false, F::ImmediateData},
  {Opcode::AtomicRequest,    "Atomic Request",              false, kQnReadReq,    kAtomicRequestBodySize,  false,  true,  false, false, F::AtomicRequest},
  {Opcode::AtomicResponse,   "Atomic Response",             false, kQnAtomicResp, kAtomicResponseBodySize, false,  true,  false, false, F::AtomicResponse},
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
