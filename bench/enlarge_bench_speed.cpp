#include "bench/enlarge_bench_speed.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <thread>
#include <vector>

#include "bench/enlarge_bench_support.hpp"
#include "common/byte_units.hpp"
#include "enlarge/node.hpp"

namespace iwarp::bench {

namespace {

using namespace std::chrono_literals;
using enlarge::Connection;
using enlarge::Node;

void node_server(enlarge::Options opts, std::chrono::milliseconds timeout,
                 std::promise<std::expected<std::uint16_t, std::string>> port_out,
                 ServerShared& shared) {
  auto nv = Node::create(std::move(opts));
  if (!nv) return port_out.set_value(std::unexpected(nv.error()));
  auto node = std::move(*nv);
  auto port = node->listen(kHost, 0);
  port_out.set_value(port);
  if (!port) return;
  auto acc = node->accept(timeout);
  if (!acc) {
    shared.error = "accepting: " + acc.error();
    return;
  }
  Connection* c = *acc;
  while (!shared.stop.load()) {
    auto m = node->recv(*c, 200ms);
    if (!m) {
      if (c->state() != Connection::State::Established) {
        shared.error = "server: " + m.error();
        return;
      }
      continue;
    }
    const std::uint8_t kind = m->data.empty() ? 0 : m->data[0];
    std::expected<std::uint32_t, std::string> p = 0;
    if (kind == 'E') {
      std::vector<Bytes> iov;
      iov.push_back(std::move(m->data));
      p = c->post(std::move(iov));
    } else if (kind == 'L') {
      p = c->post(Bytes(8, 'A'));
    } else if (kind == 'Q') {
      (void)node->flush(*c, timeout);
      return;
    }
    if (!p) {
      shared.error = "server: posting: " + p.error();
      return;
    }
  }
}

class NodeClient final : public BenchClient {
 public:
  static std::expected<std::unique_ptr<NodeClient>, std::string> start(
      const enlarge::Options& opts, std::chrono::milliseconds timeout) {
    auto self = std::unique_ptr<NodeClient>(new NodeClient(timeout));
    std::promise<std::expected<std::uint16_t, std::string>> port_p;
    auto port_f = port_p.get_future();
    self->thread_ =
        std::thread(node_server, opts, timeout, std::move(port_p), std::ref(self->shared_));
    auto port = port_f.get();
    if (!port) return std::unexpected("server: " + port.error());
    auto nv = Node::create(opts);
    if (!nv) return std::unexpected(nv.error());
    self->node_ = std::move(*nv);
    auto c = self->node_->connect(kHost, *port, timeout);
    if (!c) return std::unexpected(c.error());
    self->conn_ = *c;
    return self;
  }
  ~NodeClient() override {
    shared_.stop = true;
    if (thread_.joinable()) thread_.join();
  }
  std::expected<void, std::string> send(const Bytes& m) override {
    auto p = conn_->post(m);
    if (!p) return std::unexpected(p.error());
    // A window of queued messages (about 1 MiB: 2-256 messages), like a socket's send buffer:
    // the stream is timed by what was sent, not by what was queued.
    const std::size_t window =
        std::clamp<std::size_t>((1u << 20) / std::max<std::size_t>(1, m.size()), 2, 256);
    const auto deadline = Clock::now() + timeout_;
    while (conn_->tx_queued() > window) {
      if (conn_->state() != Connection::State::Established) return std::unexpected(conn_->error());
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("{} messages still queued after {} ms",
                                           conn_->tx_queued(), timeout_.count()));
      node_->progress(1ms);
    }
    return {};
  }
  std::expected<Bytes, std::string> recv() override {
    auto r = node_->recv(*conn_, timeout_);
    if (!r) return std::unexpected(r.error());
    return std::move(r->data);
  }
  std::string finish() override {
    Bytes q(1, 'Q');
    if (conn_->post(q)) (void)node_->flush(*conn_, timeout_);
    const auto deadline = Clock::now() + timeout_;
    // The server ends on 'Q'; if it does not, stop it.
    while (!shared_.stop.load() && Clock::now() < deadline) {
      node_->progress(5ms);
      if (conn_->state() != Connection::State::Established) break;
    }
    shared_.stop = true;
    if (thread_.joinable()) thread_.join();
    node_.reset();
    return shared_.error;
  }

 private:
  explicit NodeClient(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  std::chrono::milliseconds timeout_;
  ServerShared shared_;
  std::thread thread_;
  std::unique_ptr<Node> node_;
  Connection* conn_ = nullptr;
};

}  // namespace

std::expected<std::unique_ptr<BenchClient>, std::string> start_node_client(
    const enlarge::Options& opts, std::chrono::milliseconds timeout) {
  return NodeClient::start(opts, timeout);
}

std::expected<SpeedCell, std::string> run_cell(BenchClient& c, const std::string& scheme,
                                               std::uint64_t size, const SpeedBudget& b) {
  SpeedCell cell;
  cell.scheme = scheme;
  cell.size = size;
  Bytes msg(size);
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(i * 31 + 7);
  msg[0] = 'E';
  auto fail = [&](const std::string& what, const std::string& why) {
    return std::unexpected(fmt::format("{}, {} messages, {}: {}", scheme,
                                       format_bytes(size, ByteFormat::Exact), what, why));
  };
  auto round_trip = [&](bool check) -> std::expected<void, std::string> {
    if (auto s = c.send(msg); !s) return std::unexpected(s.error());
    auto r = c.recv();
    if (!r) return std::unexpected(r.error());
    if (r->size() != size)
      return std::unexpected(fmt::format("the echo has {} bytes, not {}", r->size(), size));
    if (check && *r != msg)
      return std::unexpected(std::string("the echo differs from the message"));
    return {};
  };
  // Warm-up (the enlarge scheme asks for its buffer here), checking the echo byte for byte.
  for (std::size_t i = 0; i < b.warmup; ++i)
    if (auto r = round_trip(true); !r) return fail("warm-up", r.error());
  std::vector<double> us;
  const auto lat_start = Clock::now();
  while (us.size() < b.max_iterations &&
         (us.size() < b.min_iterations || seconds_since(lat_start) < b.latency_s)) {
    const auto t0 = Clock::now();
    if (auto r = round_trip(false); !r) return fail("latency", r.error());
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::ranges::sort(us);
  cell.latency_us = us[us.size() / 2];
  cell.latency_iterations = us.size();

  msg[0] = 'D';
  std::uint64_t sent = 0;
  const auto t0 = Clock::now();
  for (;;) {
    const bool enough = sent + 1 >= b.min_messages &&
                        (seconds_since(t0) >= b.stream_s || (sent + 1) * size >= b.max_bytes);
    if (enough) msg[0] = 'L';
    if (auto s = c.send(msg); !s) return fail("stream", s.error());
    ++sent;
    if (enough) break;
  }
  auto ack = c.recv();
  if (!ack) return fail("stream acknowledgement", ack.error());
  if (ack->size() != 8)
    return fail("stream", fmt::format("a {}-byte acknowledgement", ack->size()));
  const double secs = seconds_since(t0);
  cell.stream_messages = sent;
  cell.mbps = static_cast<double>(sent * size) / secs / 1e6;
  return cell;
}

}  // namespace iwarp::bench
