// Target 4: the whole receive path of a queue pair (rnic/queue_pair.hpp): segment receiver,
// FPDU reader, DDP/RDMAP checks, placement, Read Responses, atomics, Terminates, flush. The QP
// runs over a NullTransport and is fed through its SegmentInput (rnic/segment_input.hpp), as `rnic
// replay` does.
//
// Memory: eight regions at fixed STags, each inside a larger allocation with canary guard
// octets before and after it:
//   0  STag 0x101  local write, remote write, remote read    (Write target)
//   1  STag 0x202  remote read only                          (Read source: never changes)
//   2  STag 0x303  local write, remote atomic                (atomic target)
//   3  STag 0x404  local write                               (receive buffers)
//   4  STag 0x505  local write                               (our RDMA Read's sink, atomic result)
//   5  STag 0x606  local write, remote write, ANOTHER PD     (never changes)
//   6  STag 0x707  no access rights                         (never changes)
//   7  STag 0x808  local write, remote write                 (deregistered midway)
// TO of region k's first octet: (k + 1) * 0x10000.
//
// Input (8 octets, then the received stream from the first octet of Full Operation):
//   0: bit 0 CRC, bit 1 markers, bit 2 we are the initiator, bit 3 peer-to-peer, bits 4-5 the
//      RTR type (1 Send, 2 Write, 3 Read), bit 6 post an RDMA Read (sink region 4 at +64, 256
//      octets, from the peer's STag 0xaa01 TO 0x5000), bit 7 post a fetch-and-add (result in
//      region 4 at +0, peer's STag 0xaa01 TO 0x6000)
//   1: bits 0-1 how the stream is cut (0 one segment, 1 random pieces in order, 2 random
//      pieces disordered with duplicates, 3 pieces of 1-64 octets in order); bits 2-4 receive
//      WRs posted (256 octets each, from region 3); bit 5 some receives get two SGEs; bit 6 a
//      FIN after the stream; bit 7 deregister region 7 (else region 0) when it is deregistered
//   2-3: seed of the cutting and disorder
//   4-5: after how many segments a region is deregistered (0xffff: never)
//   6: IRD (low nibble) and ORD (high nibble) we negotiated
//   7: first TCP sequence number's low octet (the rest is fixed near the wrap)
//
// Checks, after the whole input: every guard octet is intact; regions that are not remotely
// writable (1, 5, 6), the receive area beyond the posted receives and the sink area beyond our
// Read's range are unchanged; a region is unchanged from the moment it was deregistered or
// invalidated; the engine answers within 10 s at every step (no hang); the QP ends in ERROR
// after modify_to_error and nothing leaks (LeakSanitizer).
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "rnic/completion_queue.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/segment_input.hpp"
#include "rnic/transport.hpp"

using namespace iwarp;
using namespace iwarp::rnic;
using iwarp::fuzz::Input;
using iwarp::fuzz::Rng;

namespace {

constexpr std::size_t kGuard = 64;
constexpr int kRegions = 8;

struct RegionSpec {
  std::uint32_t stag;
  std::uint32_t access;
  std::size_t length;
  bool other_pd;
};
constexpr RegionSpec kSpec[kRegions] = {
    {0x101, kLocalWrite | kRemoteWrite | kRemoteRead, 4096, false},
    {0x202, kRemoteRead, 1024, false},
    {0x303, kLocalWrite | kRemoteAtomic, 256, false},
    {0x404, kLocalWrite, 2048, false},
    {0x505, kLocalWrite, 512, false},
    {0x606, kLocalWrite | kRemoteWrite, 1024, true},
    {0x707, 0, 512, false},
    {0x808, kLocalWrite | kRemoteWrite, 1024, false},
};
constexpr std::uint64_t base_to(int k) {
  return static_cast<std::uint64_t>(k + 1) * 0x10000;
}
constexpr std::uint32_t kPeerStag = 0xaa01;

std::uint8_t canary(std::size_t i) {
  return static_cast<std::uint8_t>(0xC3 ^ (i * 7));
}
std::uint8_t fill(int k, std::size_t i) {
  return static_cast<std::uint8_t>(0x11 * (k + 1) ^ (i * 13));
}

struct Region {
  std::vector<std::uint64_t> store;  // guard | region | guard, 8-octet aligned
  std::uint8_t* all() { return reinterpret_cast<std::uint8_t*>(store.data()); }
  std::uint8_t* data() { return all() + kGuard; }
  std::size_t length = 0;
  bool registered = false;
  std::optional<Bytes> frozen;  // content when deregistered or invalidated
};

Device& device() {
  // One engine for the whole run (a Device per input would be a thread per input). Never
  // destroyed: reachable, so not a leak.
  static Device* d = new Device("fuzz", 1);
  return *d;
}

void on_engine(const std::function<void()>& fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  boost::asio::post(device().io(), [&fn, done] {
    fn();
    done->set_value();
  });
  FUZZ_CHECK(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready,
             "the engine thread did not answer within 10 s (a hang)");
}
// Lets every handler queued so far (and those they queue) run.
void drain() {
  for (int i = 0; i < 3; ++i) on_engine([] {});
}

struct Segment {
  std::uint64_t off;
  ByteSpan data;
};

std::vector<Segment> cut(ByteSpan s, int style, Rng& rng) {
  std::vector<Segment> out;
  if (s.empty()) return out;
  if (style == 0) return {{0, s}};
  for (std::size_t p = 0; p < s.size();) {
    const std::size_t n =
        std::min(s.size() - p, style == 3 ? 1 + rng.below(64) : 1 + rng.below(1 + rng.below(1600)));
    out.push_back({p, s.subspan(p, n)});
    p += n;
  }
  if (style == 2) {
    const std::size_t n = out.size();
    for (std::size_t i = n; i > 1; --i)
      if (rng.below(3) == 0) std::swap(out[i - 1], out[rng.below(i)]);
    for (std::size_t k = rng.below(4); k > 0; --k) {
      Segment d = out[rng.below(n)];
      if (rng.below(2) && d.data.size() > 1) {
        const std::size_t a = rng.below(d.data.size());
        d = {d.off + a, d.data.subspan(a, 1 + rng.below(d.data.size() - a))};
      }
      out.insert(out.begin() + rng.below(out.size() + 1), d);
    }
  }
  return out;
}

// The input's 8-octet header (see the top of this file) and the stream after it.
struct Header {
  std::uint8_t h0 = 0, h1 = 0;  // octets 0 and 1: framing, roles, posted work, cutting
  std::uint16_t cut_seed = 0;   // octets 2-3
  std::uint16_t dereg_after = 0;
  std::uint8_t irdord = 0;
  TcpSeq start{0};
  ByteSpan stream;

  bool read_posted() const { return h0 & 0x40; }
  bool atomic_posted() const { return h0 & 0x80; }
  int receives() const { return (h1 >> 2) & 7; }
  int dereg_region() const { return (h1 & 0x80) ? 7 : 0; }
};

Header read_header(Input& in) {
  Header hd;
  hd.h0 = in.u8();
  hd.h1 = in.u8();
  hd.cut_seed = in.u16();
  hd.dereg_after = in.u16();
  hd.irdord = in.u8();
  hd.start = TcpSeq{0xFFFFF000u + in.u8() * 16u};
  hd.stream = in.rest();
  return hd;
}

// What one input runs on: the regions (and their content before the stream), the CQs, the QP.
struct Harness {
  Device& dev = device();
  MemoryTable& mem = dev.memory();
  PdHandle pd = mem.alloc_pd(), other_pd = mem.alloc_pd();
  Region regions[kRegions];
  std::vector<Bytes> initial;
  CompletionQueue scq{64, nullptr, nullptr}, rcq{64, nullptr, nullptr};
  std::shared_ptr<QueuePair> qp;
  SegmentInput* input = nullptr;  // the segments go in through this view of `qp` only
};

// Registers the eight regions, each between canary guards and filled with its own pattern.
void register_regions(Harness& t) {
  for (int k = 0; k < kRegions; ++k) {
    Region& r = t.regions[k];
    r.length = kSpec[k].length;
    r.store.resize((2 * kGuard + r.length) / 8);
    for (std::size_t i = 0; i < 2 * kGuard + r.length; ++i) r.all()[i] = canary(i);
    for (std::size_t i = 0; i < r.length; ++i) r.data()[i] = fill(k, i);
    r.registered =
        t.mem.register_region_at(STag{kSpec[k].stag}, kSpec[k].other_pd ? t.other_pd : t.pd,
                                 r.data(), r.length, base_to(k), kSpec[k].access);
    FUZZ_CHECK(r.registered, "region %d not registered (left over from an earlier input?)", k);
  }
  for (auto& r : t.regions) t.initial.emplace_back(r.data(), r.data() + r.length);
}

// Creates the QP and posts its receives: 256 octets each from region 3, some split over two
// SGEs.
void create_qp_with_receives(Harness& t, const Header& hd) {
  QpInit init;
  init.pd = t.pd;
  init.send_cq = &t.scq;
  init.recv_cq = &t.rcq;
  init.caps.max_send_wr = 16;
  init.caps.max_recv_wr = 16;
  init.caps.max_recv_sge = 2;
  t.qp = std::make_shared<QueuePair>(t.dev, init);
  t.input = t.qp.get();
  for (int i = 0; i < hd.receives(); ++i) {
    RecvWr wr;
    wr.wr_id = 100 + i;
    const std::uint64_t a = base_to(3) + 256 * i;
    if ((hd.h1 & 0x20) && (i & 1)) {
      wr.sg_list.push_back(Sge{a, 100, STag{0x404}});
      wr.sg_list.push_back(Sge{a + 100, 156, STag{0x404}});
    } else {
      wr.sg_list.push_back(Sge{a, 256, STag{0x404}});
    }
    FUZZ_CHECK(t.qp->post_recv(wr) == 0, "post_recv");
  }
}

// Starts the QP in Full Operation with the negotiated parameters the header gives, over a
// NullTransport (what it transmits is only counted).
void start_qp(Harness& t, const Header& hd) {
  StreamSetup st;
  auto& p = st.params;
  p.revision = 2;
  p.enhanced = true;
  p.crc = hd.h0 & 1;
  p.markers_to_initiator = p.markers_to_responder = (hd.h0 & 2) != 0;
  const std::uint16_t ird = hd.irdord & 0xF, ord = hd.irdord >> 4;
  p.initiator_ird = p.responder_ird = ird;
  p.initiator_ord = p.responder_ord = ord;
  p.peer_to_peer = hd.h0 & 8;
  static constexpr mpa::RtrType kRtr[4] = {mpa::RtrType::Write, mpa::RtrType::Send,
                                           mpa::RtrType::Write, mpa::RtrType::Read};
  p.rtr = p.peer_to_peer ? kRtr[(hd.h0 >> 4) & 3] : mpa::RtrType::None;
  st.initiator = hd.h0 & 4;
  RxOptions rx;
  rx.stream_start = hd.start;
  auto transmitted = std::make_shared<std::uint64_t>(0);
  on_engine([&] {
    auto tr = std::make_unique<NullTransport>(
        t.dev.io(), [transmitted](ByteSpan b) { *transmitted += b.size(); });
    if (st.initiator && p.peer_to_peer) t.qp->send_rtr(p.rtr);
    t.qp->start(
        std::move(tr), st, {}, nullptr, [](const QpClosed&) {}, rx);
  });
}

// Our own RDMA Read and atomic, so Read Responses and Atomic Responses have something to
// answer.
void post_read_and_atomic(Harness& t, const Header& hd) {
  if (hd.read_posted()) {
    SendWr wr;
    wr.wr_id = 1;
    wr.opcode = WrOpcode::RdmaRead;
    wr.flags = kSendSignaled;
    wr.sg_list.push_back(Sge{base_to(4) + 64, 256, STag{0x505}});
    wr.remote_addr = 0x5000;
    wr.rkey = STag{kPeerStag};
    t.qp->post_send(wr);
  }
  if (hd.atomic_posted()) {
    SendWr wr;
    wr.wr_id = 2;
    wr.opcode = WrOpcode::AtomicFetchAndAdd;
    wr.flags = kSendSignaled;
    wr.sg_list.push_back(Sge{base_to(4), 8, STag{0x505}});
    wr.remote_addr = 0x6000;
    wr.rkey = STag{kPeerStag};
    wr.compare_add = 1;
    t.qp->post_send(wr);
  }
}

// A region the peer invalidated (Send with Invalidate) may not change from now on.
void freeze_invalidated(Harness& t) {
  for (int k : {0, 7}) {
    Region& r = t.regions[k];
    if (!r.registered || r.frozen) continue;
    if (!t.mem.check_remote(STag{kSpec[k].stag}, t.pd, base_to(k), 1, kRemoteWrite, true))
      r.frozen.emplace(r.data(), r.data() + r.length);
  }
}

void check_frozen(Harness& t, const char* when) {
  for (int k = 0; k < kRegions; ++k) {
    Region& r = t.regions[k];
    if (!r.frozen) continue;
    for (std::size_t i = 0; i < r.length; ++i)
      FUZZ_CHECK(r.data()[i] == (*r.frozen)[i],
                 "region %d octet %zu changed after it was %s (%s): 0x%02x -> 0x%02x", k, i,
                 r.registered ? "invalidated" : "deregistered", when, (*r.frozen)[i], r.data()[i]);
  }
}

// Feeds the stream, cut and disordered as the header says, one segment at a time; a region is
// deregistered midway; frozen regions are checked after every segment. Then the FIN.
void feed_stream(Harness& t, const Header& hd) {
  Rng rng(hd.cut_seed * 0x9e37ull + 7);
  const int dereg = hd.dereg_region();
  const auto segs = cut(hd.stream, hd.h1 & 3, rng);
  std::size_t done = 0;
  for (const auto& s : segs) {
    Region& d = t.regions[dereg];
    if (done == hd.dereg_after && d.registered) {
      on_engine([&] {
        // ibv_dereg_mr's path: out of the table and out of every QP (revoke) at once.
        t.dev.deregister(STag{kSpec[dereg].stag});
        d.registered = false;
        d.frozen.emplace(d.data(), d.data() + d.length);
      });
    }
    t.input->receive_segment(hd.start + static_cast<std::uint32_t>(s.off),
                             Bytes(s.data.begin(), s.data.end()));
    drain();
    ++done;
    check_frozen(t, "during the stream");
    freeze_invalidated(t);
  }
  if (hd.h1 & 0x40) t.input->receive_fin(hd.start + static_cast<std::uint32_t>(hd.stream.size()));
  drain();
}

// Empties the CQs and moves the QP to ERROR, which it must reach.
void close_qp(Harness& t) {
  Wc wc[16];
  while (t.scq.poll(wc) > 0) {
  }
  while (t.rcq.poll(wc) > 0) {
  }
  t.qp->modify_to_error();
  drain();
  drain();
  FUZZ_CHECK(t.qp->state() == QpState::Error, "QP in state %s after modify_to_error",
             std::string(to_string(t.qp->state())).c_str());
}

// Guards intact everywhere; regions nobody may write unchanged.
void check_guards_and_unwritable(Harness& t, const Header& hd) {
  const bool read_posted = hd.read_posted(), atomic_posted = hd.atomic_posted();
  for (int k = 0; k < kRegions; ++k) {
    Region& r = t.regions[k];
    for (std::size_t i = 0; i < kGuard; ++i) {
      FUZZ_CHECK(r.all()[i] == canary(i), "guard octet %zu before region %d changed", i, k);
      const std::size_t j = kGuard + r.length + i;
      FUZZ_CHECK(r.all()[j] == canary(j), "guard octet %zu after region %d changed", i, k);
    }
    std::size_t from = 0, to = r.length;  // the part that may change
    if (k == 1 || k == 5 || k == 6) from = to = 0;
    if (k == 3) to = 256 * static_cast<std::size_t>(hd.receives());
    if (k == 4) {
      from = atomic_posted ? 0 : 64;
      to = read_posted ? 64 + 256 : (atomic_posted ? 8 : 0);
      if (!atomic_posted && !read_posted) from = to = 0;
    }
    for (std::size_t i = 0; i < r.length; ++i)
      if (i < from || i >= to)
        FUZZ_CHECK(r.data()[i] == t.initial[k][i],
                   "region %d (access 0x%x%s) octet %zu changed: 0x%02x -> 0x%02x", k,
                   kSpec[k].access, kSpec[k].other_pd ? ", other PD" : "", i, t.initial[k][i],
                   r.data()[i]);
  }
}

// Destroys the QP and deregisters what is still registered, so the next input starts clean.
void tear_down(Harness& t) {
  t.qp.reset();
  drain();
  for (int k = 0; k < kRegions; ++k)
    if (t.regions[k].registered) t.mem.deregister(STag{kSpec[k].stag});
  drain();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  Input in(data, size);
  const Header hd = read_header(in);
  Harness t;
  register_regions(t);
  create_qp_with_receives(t, hd);
  start_qp(t, hd);
  post_read_and_atomic(t, hd);
  drain();
  feed_stream(t, hd);
  close_qp(t);
  check_frozen(t, "at the end");
  check_guards_and_unwritable(t, hd);
  tear_down(t);
  return 0;
}
