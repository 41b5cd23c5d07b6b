// Instructions per operation, for callgrind (scripts/instructions.sh): performs N operations
// of one kind (an 8-octet Send, a 64 KiB RDMA Write or a 1 KiB RDMA Read) from one queue pair
// to another and marks exactly those operations for callgrind, so its instruction count repeats
// run to run and can be compared against a saved baseline (docs/instructions.md).
//
// Why it repeats: both QPs live on one Device and talk through an in-memory stream (no socket),
// and the operations are posted, polled and checked by a handler on the engine thread itself.
// So the whole measured region runs on one thread in one deterministic order, while the main
// thread sleeps on a future; nothing in it depends on the kernel's timing. Callgrind's
// instrumentation is switched on and off (valgrind/callgrind.h) around the N operations only,
// after a warm-up of the same operation (so buffers and queues have reached their steady size).
//
// Each operation is waited for before the next is posted: its completions are polled and the
// stream must be quiet (every octet one QP sent has been read by the other), so the count per
// operation is the whole cost of one operation, both ends, with nothing pipelined. The polling
// handler's own cost (a few CQ polls per operation) is included and constant. The in-memory
// stream's copies are not counted (they stand in for the kernel's socket copies): the figure is
// what the RNIC itself executes in user space.
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "rnic/completion_queue.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/transport.hpp"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define IWARP_HAVE_CALLGRIND 1
#else
#define IWARP_HAVE_CALLGRIND 0
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_TOGGLE_COLLECT
#define RUNNING_ON_VALGRIND 0
#endif

using namespace iwarp;
using namespace iwarp::rnic;

namespace {

// --- an in-memory TCP stream: what one end writes, the other end reads -----------------------

// The stream's own copies stand in for the kernel's (send and receive over a socket) and are
// not counted: callgrind stops collecting for the guard's lifetime (this thread only, which is
// the engine thread that runs everything counted).
struct Uncounted {
  Uncounted() { CALLGRIND_TOGGLE_COLLECT; }
  ~Uncounted() { CALLGRIND_TOGGLE_COLLECT; }
  Uncounted(const Uncounted&) = delete;
  Uncounted& operator=(const Uncounted&) = delete;
};

// Both directions of one stream. Only the engine thread touches it.
struct Wire {
  struct Direction {
    Bytes data;
    std::size_t read = 0;  // octets of `data` already read
    WaitHandler reader;    // the receiving end's pending wait, if any
    bool closed = false;   // the writing end closed: end of stream after `data`
  };
  Direction dir[2];  // dir[k]: what end k receives
};

class WireEnd final : public Transport {
 public:
  WireEnd(boost::asio::io_context& io, std::shared_ptr<Wire> w, int end)
      : io_(io), w_(std::move(w)), end_(end) {}

  void async_wait_readable(WaitHandler done) override {
    auto& in = w_->dir[end_];
    if (closed_)
      post(std::move(done), boost::asio::error::operation_aborted);
    else if (in.read < in.data.size() || in.closed)
      post(std::move(done), {});
    else
      in.reader = std::move(done);
  }
  void async_wait_writable(WaitHandler done) override {
    post(std::move(done),
         closed_ ? boost::asio::error::operation_aborted : boost::system::error_code{});
  }
  std::size_t read_some(MutableByteSpan buf, boost::system::error_code& ec) override {
    const Uncounted kernel_work;
    auto& in = w_->dir[end_];
    if (closed_) {
      ec = boost::asio::error::operation_aborted;
      return 0;
    }
    const std::size_t n = std::min(buf.size(), in.data.size() - in.read);
    if (n == 0) {
      if (in.closed)
        ec = boost::asio::error::eof;
      else
        ec = boost::asio::error::would_block;
      return 0;
    }
    std::copy_n(in.data.begin() + static_cast<std::ptrdiff_t>(in.read), n, buf.begin());
    in.read += n;
    if (in.read == in.data.size()) {
      in.data.clear();  // keeps its capacity: no allocation per operation once warm
      in.read = 0;
    }
    ec = {};
    return n;
  }
  std::size_t write_some(std::span<const boost::asio::const_buffer> bufs,
                         boost::system::error_code& ec) override {
    const Uncounted kernel_work;
    auto& out = w_->dir[1 - end_];
    if (closed_ || out.closed) {
      ec = boost::asio::error::broken_pipe;
      return 0;
    }
    std::size_t n = 0;
    for (const auto& b : bufs) {
      const auto* p = static_cast<const std::uint8_t*>(b.data());
      out.data.insert(out.data.end(), p, p + b.size());
      n += b.size();
    }
    wake(out);
    ec = {};
    return n;
  }
  void close() override {
    if (closed_) return;
    closed_ = true;
    auto& in = w_->dir[end_];
    if (auto h = std::move(in.reader)) {
      in.reader = nullptr;
      post(std::move(h), boost::asio::error::operation_aborted);
    }
    auto& out = w_->dir[1 - end_];
    out.closed = true;
    wake(out);
  }
  std::size_t mss() const override { return 0; }

 private:
  void post(WaitHandler h, boost::system::error_code ec) {
    boost::asio::post(io_, [h = std::move(h), ec]() mutable { h(ec); });
  }
  void wake(Wire::Direction& d) {
    if (auto h = std::move(d.reader)) {
      d.reader = nullptr;
      post(std::move(h), {});
    }
  }
  boost::asio::io_context& io_;
  std::shared_ptr<Wire> w_;
  int end_;
  bool closed_ = false;
};

// --- the main thread must be asleep while callgrind counts ----------------------------------

// Callgrind counts every thread's instructions. The main thread posts the work to the engine
// and then blocks on a future; valgrind lets the engine run as soon as the main thread enters
// any system call (the post's eventfd write), so the main thread may still be on its way to
// the futex when the engine starts. The count would then include a varying share of the main
// thread's path to sleep (seen: one run in four, +4,730 instructions). So before the counted
// region the engine waits until the kernel shows the main thread inside futex(2), bounded.
std::string wait_main_thread_asleep() {
  const std::string path = "/proc/self/task/" + std::to_string(::getpid()) + "/syscall";
  for (int i = 0; i < 10000; ++i) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return "";  // no /proc: nothing to check (outside Linux the count may then vary)
    long nr = -1;
    const int got = std::fscanf(f, "%ld", &nr);
    std::fclose(f);
    if (got == 1 && nr == SYS_futex) return "";
    ::usleep(1000);
  }
  return "the main thread did not go to sleep within 10 s";
}

// --- the two queue pairs and the operations -----------------------------------------------

enum class Op { Send8, Write64k, Read1k };

constexpr std::size_t kBuf = 64 * 1024;
constexpr std::uint64_t kToA = 0x100000, kToB = 0x200000;

std::size_t op_size(Op op) {
  return op == Op::Send8 ? 8 : op == Op::Write64k ? kBuf : 1024;
}

struct Options {
  Op op = Op::Send8;
  std::uint64_t count = 100, warmup = 32;
  bool crc = true, markers = false;
  std::size_t emss = 1448;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o), dev_("instr", 1) {
    auto& mem = dev_.memory();
    pd_ = mem.alloc_pd();
    for (std::size_t i = 0; i < kBuf; ++i) {
      a_buf_[i] = static_cast<std::uint8_t>(i * 7 + 1);
      b_buf_[i] = static_cast<std::uint8_t>(i * 13 + 5);
    }
    a_stag_ = mem.register_region(pd_, a_buf_.data(), kBuf, kToA,
                                  kLocalWrite | kRemoteWrite);  // an iWARP Read sink needs both
    b_stag_ = mem.register_region(pd_, b_buf_.data(), kBuf, kToB,
                                  kLocalWrite | kRemoteWrite | kRemoteRead);
    b_recv_stag_ = mem.register_region(pd_, b_recv_.data(), kBuf, 0, kLocalWrite);
    a_ = make_qp(a_scq_, a_rcq_);
    b_ = make_qp(b_scq_, b_rcq_);
  }
  // The engine stops before the CQs and buffers below are freed: the connected QPs hold
  // themselves and refer to them (an `rnic stat` query on the engine would read them).
  ~Bench() { dev_.stop(std::chrono::seconds(5)); }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // Runs the warm-up and the counted operations on the engine thread; "" or what went wrong.
  std::string run() {
    auto done = std::make_shared<std::promise<std::string>>();
    auto f = done->get_future();
    boost::asio::post(dev_.io(), [this, done] {
      start_stream();
      done_ = [done](std::string e) { done->set_value(std::move(e)); };
      next_op();
      step();
    });
    // Generous: callgrind runs some 50x slower than the machine.
    if (f.wait_for(std::chrono::minutes(10)) != std::future_status::ready)
      return "the operations did not finish within 10 minutes";
    return f.get();
  }

  // The data moved must be what was posted (a benchmark of a broken path measures nothing).
  std::string check() const {
    const std::size_t n = op_size(o_.op);
    switch (o_.op) {
      case Op::Send8:
        for (std::size_t i = 0; i < n; ++i)
          if (b_recv_[i] != a_buf_[i]) return "the Send's payload arrived changed";
        break;
      case Op::Write64k:
        for (std::size_t i = 0; i < n; ++i)
          if (b_buf_[i] != a_buf_[i]) return "the Write's payload arrived changed";
        break;
      case Op::Read1k:
        for (std::size_t i = 0; i < n; ++i)
          if (a_buf_[i] != b_buf_[i]) return "the Read Response's payload arrived changed";
        break;
    }
    return "";
  }

  void stop() {
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    boost::asio::post(dev_.io(), [this, done] {
      a_->modify_to_error();
      b_->modify_to_error();
      done->set_value();
    });
    f.wait_for(std::chrono::seconds(30));
  }

 private:
  std::shared_ptr<QueuePair> make_qp(CompletionQueue& scq, CompletionQueue& rcq) {
    QpInit init;
    init.pd = pd_;
    init.send_cq = &scq;
    init.recv_cq = &rcq;
    return std::make_shared<QueuePair>(dev_, init);
  }

  void start_stream() {
    StreamSetup st;
    auto& p = st.params;
    p.revision = 2;
    p.enhanced = true;
    p.crc = o_.crc;
    p.markers_to_initiator = p.markers_to_responder = o_.markers;
    p.initiator_ird = p.initiator_ord = p.responder_ird = p.responder_ord = 16;
    st.emss = o_.emss;
    auto wire = std::make_shared<Wire>();
    const auto on_closed = [](const QpClosed&) {};
    st.initiator = true;
    a_->start(std::make_unique<WireEnd>(dev_.io(), wire, 0), st, {}, nullptr, on_closed);
    st.initiator = false;
    b_->start(std::make_unique<WireEnd>(dev_.io(), wire, 1), st, {}, nullptr, on_closed);
  }

  // Posts operation number `posted_` (engine thread; post_send rings the doorbell, whose
  // handler transmits).
  void next_op() {
    if (posted_ == o_.warmup) {
      if (auto e = wait_main_thread_asleep(); !e.empty()) return fail(e);
      CALLGRIND_START_INSTRUMENTATION;
    }
    ++posted_;
    const auto n = static_cast<std::uint32_t>(op_size(o_.op));
    SendWr wr;
    wr.wr_id = posted_;
    wr.flags = kSendSignaled;
    std::string why;
    switch (o_.op) {
      case Op::Send8: {
        RecvWr r;
        r.wr_id = posted_;
        r.sg_list.push_back(Sge{0, n, b_recv_stag_});
        if (b_->post_recv(r, &why) != 0) return fail("post_recv: " + why);
        wr.opcode = WrOpcode::Send;
        wr.sg_list.push_back(Sge{kToA, n, a_stag_});
        break;
      }
      case Op::Write64k:
        wr.opcode = WrOpcode::RdmaWrite;
        wr.sg_list.push_back(Sge{kToA, n, a_stag_});
        wr.remote_addr = kToB;
        wr.rkey = b_stag_;
        break;
      case Op::Read1k:
        wr.opcode = WrOpcode::RdmaRead;
        wr.sg_list.push_back(Sge{kToA, n, a_stag_});
        wr.remote_addr = kToB;
        wr.rkey = b_stag_;
        break;
    }
    if (a_->post_send(wr, &why) != 0) fail("post_send: " + why);
    want_send_cqe_ = true;
    want_recv_cqe_ = o_.op == Op::Send8;
    polls_ = 0;
  }

  // Polls the CQs once and re-posts itself behind whatever the engine has queued meanwhile.
  void step() {
    if (finished_) return;
    Wc wc[4];
    if (want_send_cqe_ && take(a_scq_, wc) && !finished_) want_send_cqe_ = false;
    if (want_recv_cqe_ && take(b_rcq_, wc) && !finished_) want_recv_cqe_ = false;
    if (finished_) return;
    if (!want_send_cqe_ && !want_recv_cqe_ && quiet()) {
      if (posted_ == o_.warmup + o_.count) {
        CALLGRIND_STOP_INSTRUMENTATION;
        return finish("");
      }
      next_op();
      if (finished_) return;
    } else if (++polls_ > 100000) {
      return fail("operation " + std::to_string(posted_) + " did not complete (QP state " +
                  a_->error_reason() + b_->error_reason() + ")");
    }
    boost::asio::post(dev_.io(), [this] { step(); });
  }

  // One CQE off `cq`, which must be operation `posted_`'s and successful.
  bool take(CompletionQueue& cq, Wc* wc) {
    const int got = cq.poll(std::span<Wc>(wc, 4));
    if (got == 0) return false;
    if (got != 1 || wc[0].wr_id != posted_ || wc[0].status != WcStatus::Success) {
      fail("operation " + std::to_string(posted_) + ": unexpected completion (wr_id " +
           std::to_string(wc[0].wr_id) + ", status " +
           std::to_string(static_cast<int>(wc[0].status)) + ")");
      return false;
    }
    return true;
  }

  // Every octet either end sent has been read by the other.
  bool quiet() const {
    const auto sa = a_->stats(), sb = b_->stats();
    return sa.bytes_sent == sb.bytes_received && sb.bytes_sent == sa.bytes_received;
  }

  void fail(std::string e) {
    CALLGRIND_STOP_INSTRUMENTATION;
    finish(std::move(e));
  }
  void finish(std::string e) {
    if (finished_) return;
    finished_ = true;
    done_(std::move(e));
  }

  Options o_;
  Device dev_;
  PdHandle pd_ = 0;
  std::vector<std::uint8_t> a_buf_ = std::vector<std::uint8_t>(kBuf),
                            b_buf_ = std::vector<std::uint8_t>(kBuf),
                            b_recv_ = std::vector<std::uint8_t>(kBuf);
  STag a_stag_{0}, b_stag_{0}, b_recv_stag_{0};
  CompletionQueue a_scq_{64, nullptr, nullptr}, a_rcq_{64, nullptr, nullptr};
  CompletionQueue b_scq_{64, nullptr, nullptr}, b_rcq_{64, nullptr, nullptr};
  std::shared_ptr<QueuePair> a_, b_;
  std::function<void(std::string)> done_;
  std::uint64_t posted_ = 0;
  std::uint64_t polls_ = 0;
  bool want_send_cqe_ = false, want_recv_cqe_ = false, finished_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Performs N RDMA operations of one kind between two queue pairs in one process "
      "and marks them for callgrind (scripts/instructions.sh counts them)."};
  Options o;
  std::string op = "send8";
  app.add_option("--op", op,
                 "send8 (8-octet Send), write64k (64 KiB RDMA Write) or read1k (1 KiB "
                 "RDMA Read)")
      ->check(CLI::IsMember({"send8", "write64k", "read1k"}));
  app.add_option("--count", o.count, "operations counted")->check(CLI::Range(1, 10000000));
  app.add_option("--warmup", o.warmup, "operations before the counted ones")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--emss", o.emss, "TCP segment size the FPDUs are cut for (RFC 5044 §4.1)")
      ->check(CLI::Range(64, 65535));
  bool no_crc = false;
  app.add_flag("--no-crc", no_crc, "no MPA CRC (RFC 5044 §4.4)");
  app.add_flag("--markers", o.markers, "MPA markers both ways (RFC 5044 §4.3)");
  CLI11_PARSE(app, argc, argv);
  o.crc = !no_crc;
  o.op = op == "send8" ? Op::Send8 : op == "write64k" ? Op::Write64k : Op::Read1k;

  std::string err;
  {
    Bench b(o);
    err = b.run();
    if (err.empty()) err = b.check();
    b.stop();
  }
  if (!err.empty()) {
    std::fprintf(stderr, "op_instructions: %s\n", err.c_str());
    return 1;
  }
  std::printf(
      "op_instructions: %s x %llu (after %llu warm-up), crc %s, markers %s, emss %zu; "
      "callgrind markers %s, %s valgrind\n",
      op.c_str(), static_cast<unsigned long long>(o.count),
      static_cast<unsigned long long>(o.warmup), o.crc ? "on" : "off", o.markers ? "on" : "off",
      o.emss, IWARP_HAVE_CALLGRIND ? "compiled in" : "absent",
      RUNNING_ON_VALGRIND ? "under" : "not under");
  return 0;
}
