// Target 7: the buffer-enlargement protocol's connection state machine (enlarge/connection.cpp,
// enlarge/node.cpp), driven over a real connection (loopback TCP, MPA, the emulated RNIC) by a
// peer that sends what the input says.
//
// Input: a sequence of messages, each one octet of kind and then its fields:
//   kind & 0x0F: 0 Piece, 1 EnlargeReq, 2 EnlargeAck, 3 EnlargeNak, 4 Done, 5 Ready, 6 Release,
//                7 Cycle, 8 Credit, 9 raw octets (u16 length, then the octets), else Piece;
//   kind & 0x10: the seq is the next one in order (else a u32 from the input);
//   kind & 0x20: the encoded message is cut short (by an octet count from the input);
//   kind & 0x40: the type octet is replaced by one from the input.
// Field values come as u8 (small, usually in range) or, with a flag octet, as u32.
//
// Checks: besides no crash, leak, hang or write outside memory (ASan), the node keeps at most
// the one connection, a failed connection says why, a protocol violation is named as one, and
// the registered memory stays within what the node's options allow.
#include <atomic>
#include <chrono>
#include <thread>

#include "enlarge/node.hpp"
#include "enlarge/wire_format.hpp"
#include "fuzz/fuzz_support.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::enlarge;
using namespace std::chrono_literals;

namespace {

constexpr int kSlots = 8;
constexpr std::uint32_t kSlotSize = 1024;
constexpr std::size_t kMaxMessages = 16;

// The peer: an Endpoint whose hello says Enlarge mode, 8 slots of 1 KiB, with its receives
// posted (the node may answer, e.g. with an EnlargeAck).
struct Peer {
  static inline std::uint8_t rx[kSlots][kSlotSize];
  verbs::Endpoint ep;
  Bytes out = Bytes(2048);
  verbs::ibv_mr* mr = nullptr;

  static verbs::EndpointOptions options() {
    verbs::EndpointOptions eo;
    eo.private_data = encode_hello(Hello{kSlotSize, kSlots, Mode::Enlarge});
    eo.timeout = 2s;
    eo.cm.connect_timeout = 2s;
    eo.on_qp_created = [](verbs::Endpoint& e) {
      for (int i = 0; i < kSlots; ++i) {
        auto* rmr = e.reg(rx[i], kSlotSize, verbs::IBV_ACCESS_LOCAL_WRITE);
        verbs::post_one_recv(e.qp(), rx[i], kSlotSize, rmr->lkey, 100 + i);
      }
    };
    return eo;
  }
  Peer() : ep(options()) { mr = ep.reg(out.data(), out.size(), verbs::IBV_ACCESS_LOCAL_WRITE); }

  // Sends the first n octets of `out`; false once the connection no longer carries Sends.
  bool send(std::size_t n) {
    if (verbs::post_one(ep.qp(), {.op = verbs::IBV_WR_SEND,
                                  .addr = out.data(),
                                  .len = static_cast<std::uint32_t>(n),
                                  .lkey = mr->lkey,
                                  .wr_id = 1}) != 0)
      return false;
    auto wc = ep.wait(ep.send_cq());
    return wc && wc->status == verbs::IBV_WC_SUCCESS;
  }
};

std::uint32_t value(fuzz::Input& in) {
  const std::uint8_t how = in.u8();
  return (how & 0x80) ? in.u32() : std::uint32_t{how} * 97u;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  fuzz::Input in(data, size);
  Options opts;
  auto created = Node::create(opts);
  FUZZ_CHECK(created.has_value(), "Node::create: %s", created ? "" : created.error().c_str());
  std::unique_ptr<Node> node = std::move(*created);
  auto port = node->listen("127.0.0.1", 0);
  FUZZ_CHECK(port.has_value(), "listen: %s", port ? "" : port.error().c_str());
  std::atomic<bool> stop{false};
  std::thread driver([&] {
    while (!stop) node->progress(1ms);
  });
  {
    Peer peer;
    if (peer.ep.connect("127.0.0.1", *port)) {
      std::uint32_t next_seq = 1;
      for (std::size_t k = 0; k < kMaxMessages && !in.empty(); ++k) {
        const std::uint8_t kind = in.u8();
        Message m;
        m.seq = (kind & 0x10) ? next_seq++ : in.u32();
        m.credits = static_cast<std::uint16_t>(in.u8() & 7);
        std::size_t n = 0;
        if ((kind & 0x0F) == 9) {
          ByteSpan raw = in.take(in.u16() % (peer.out.size() + 1));
          std::copy(raw.begin(), raw.end(), peer.out.begin());
          n = raw.size();
        } else {
          const ByteSpan payload = in.take(in.u16() % 900);
          switch (kind & 0x0F) {
            case 1:
              m.body = EnlargeReq{value(in)};
              break;
            case 2: {
              EnlargeAck a{value(in), value(in), 0};
              a.to = value(in);
              m.body = a;
              break;
            }
            case 3:
              m.body = EnlargeNak{static_cast<NakReason>(1 + in.u8() % 4), value(in)};
              break;
            case 4: {
              Done d;
              d.total = value(in);
              d.offset = value(in);
              d.length = value(in);
              d.at = value(in);
              m.body = d;
              break;
            }
            case 5:
              m.body = Ready{value(in)};
              break;
            case 6:
              m.body = Release{value(in)};
              break;
            case 7:
              m.body = Cycle{value(in)};
              break;
            case 8:
              m.body = Credit{};
              break;
            default: {
              Piece p;
              p.total = value(in);
              p.offset = value(in);
              p.data = payload;
              m.body = p;
            }
          }
          if (encoded_size(m) > peer.out.size()) continue;
          n = encode(m, peer.out);
          if (kind & 0x20) n = in.u16() % (n + 1);
          if ((kind & 0x40) && n > 1) peer.out[1] = in.u8();
        }
        if (!peer.send(n)) break;
      }
      // Let the node take what is in flight before the peer goes.
      std::this_thread::sleep_for(2ms);
    }
  }
  std::this_thread::sleep_for(2ms);  // the disconnect
  stop = true;
  driver.join();
  FUZZ_CHECK(node->size() <= 1, "%zu connections from one peer", node->size());
  for (std::size_t i = 0; i < node->size(); ++i) {
    const Connection& c = node->at(i);
    if (c.state() == Connection::State::Failed)
      FUZZ_CHECK(!c.error().empty(), "a connection failed without a reason");
    // Its slots and at most one enlarged buffer.
    const std::uint64_t most =
        std::uint64_t{opts.recv_slots + opts.send_slots} * opts.slot_size + opts.max_enlarged;
    FUZZ_CHECK(c.registered_bytes() <= most, "%llu octets registered, at most %llu expected",
               (unsigned long long)c.registered_bytes(), (unsigned long long)most);
  }
  return 0;
}
