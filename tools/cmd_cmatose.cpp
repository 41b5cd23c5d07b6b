// rnic cmatose: the exchange of librdmacm's ucmatose example, so that messages larger than
// rping allows (64 KiB) can be exchanged with other iWARP stacks such as Linux siw. Both sides
// post COUNT receives of SIZE octets before connecting; the server sends COUNT messages of SIZE
// octets, the client receives them all and then sends COUNT back; the server disconnects.
// (ucmatose's server sends first: over iWARP that needs a responder that does not wait for the
// initiator's first FPDU, as siw's does not; ours does (RFC 5044 §7.1), so our server needs
// --p2p, where the initiator's RTR comes first.)
#include <fmt/format.h>

#include <iostream>

#include "tools/app_options.hpp"
#include "tools/commands.hpp"

namespace iwarp::tools {

namespace {

using namespace verbs;

struct CmatoseOptions {
  bool server = false;
  std::string client;
  std::string bind = "0.0.0.0";
  int port = 7471;
  int count = 10;
  std::size_t size = 100;
  AppOptions app;
};

int run(const CmatoseOptions& o) {
  const char* side = o.server ? "server" : "client";
  auto fail = [&](const std::string& why) {
    std::cerr << "rnic cmatose " << side << ": " << why << "\n";
    return 1;
  };
  std::vector<std::uint8_t> mem(o.size, 0x5A);
  ibv_mr* mr = nullptr;
  auto eo = endpoint_options(o.app);
  eo.cap.max_send_wr = eo.cap.max_recv_wr = static_cast<std::uint32_t>(o.count);
  eo.cq_depth = o.count;
  eo.ird = eo.ord = 1;  // as ucmatose asks
  bool posted = true;
  eo.on_qp_created = [&](Endpoint& ep) {
    mr = ep.reg(mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    for (int i = 0; i < o.count; ++i)
      posted = posted && post_one_recv(ep.qp(), mem.data(), static_cast<std::uint32_t>(o.size),
                                       mr->lkey, static_cast<std::uint64_t>(i)) == 0;
  };
  Endpoint ep(eo);
  if (o.server) {
    auto port = ep.listen(o.bind, static_cast<std::uint16_t>(o.port));
    if (!port) return fail(port.error());
    std::cout << fmt::format("cmatose server listening on {}:{}", o.bind, *port) << std::endl;
    if (auto a = ep.accept_one(); !a) return fail(a.error());
  } else if (auto c = ep.connect(o.client, static_cast<std::uint16_t>(o.port)); !c) {
    return fail(fmt::format("connecting to {}:{}: {}", o.client, o.port, c.error()));
  }
  if (!posted) return fail("posting the receives: " + ibv_last_error());
  std::cout << fmt::format("{} {}: {}", o.server ? "connection from" : "connected to",
                           ep.id()->cm->peer(), describe_params(*ep.params()))
            << std::endl;

  auto send_all = [&]() -> std::expected<void, std::string> {
    for (int i = 0; i < o.count; ++i)
      if (post_one(ep.qp(), {.addr = mem.data(),
                             .len = static_cast<std::uint32_t>(o.size),
                             .lkey = mr->lkey,
                             .wr_id = static_cast<std::uint64_t>(i)}) != 0)
        return std::unexpected("posting a Send: " + ibv_last_error());
    for (int i = 0; i < o.count; ++i) {
      auto wc = ep.wait(ep.send_cq());
      if (!wc) return std::unexpected("Send completion: " + wc.error());
      if (wc->status != IBV_WC_SUCCESS)
        return std::unexpected(fmt::format("Send completed {}: {}", ibv_wc_status_str(wc->status),
                                           ep.qp()->qp->error_reason()));
    }
    return {};
  };
  auto receive_all = [&]() -> std::expected<void, std::string> {
    for (int i = 0; i < o.count; ++i) {
      auto wc = ep.wait(ep.recv_cq());
      if (!wc) return std::unexpected("receive completion: " + wc.error());
      if (wc->status != IBV_WC_SUCCESS)
        return std::unexpected(fmt::format("receive {} completed {}: {}", i,
                                           ibv_wc_status_str(wc->status),
                                           ep.qp()->qp->error_reason()));
      if (wc->byte_len != o.size)
        return std::unexpected(
            fmt::format("receive {} holds {} octets, expected {}", i, wc->byte_len, o.size));
    }
    return {};
  };
  if (o.server) {
    if (auto r = send_all(); !r) return fail(r.error());
    if (auto r = receive_all(); !r) return fail(r.error());
    std::cout << fmt::format("sent and received {} messages of {} octets", o.count, o.size)
              << std::endl;
    rdma_disconnect(ep.id());
  } else {
    if (auto r = receive_all(); !r) return fail(r.error());
    if (auto r = send_all(); !r) return fail(r.error());
    std::cout << fmt::format("received and sent {} messages of {} octets", o.count, o.size)
              << std::endl;
  }
  if (auto ev = ep.wait_event(RDMA_CM_EVENT_DISCONNECTED); !ev)
    return fail("waiting for the disconnect: " + ev.error());
  return 0;
}

}  // namespace

Runner add_cmatose_command(CLI::App& app) {
  auto o = std::make_shared<CmatoseOptions>();
  auto* sub = app.add_subcommand(
      "cmatose",
      "The exchange of librdmacm's ucmatose example: the server sends COUNT messages of SIZE\n"
      "octets, the client receives them and sends COUNT back. Talks to ucmatose on Linux siw\n"
      "(our server needs --p2p: it holds its first FPDU until the client's, RFC 5044 7.1).");
  auto* srv = sub->add_flag("--server,-s", o->server, "Serve one client");
  auto* cli = sub->add_option("--client,-c", o->client, "Connect to the server at ADDR");
  srv->excludes(cli);
  sub->add_option("--bind,-b", o->bind, "Address the server listens on")->capture_default_str();
  sub->add_option("--port,-p", o->port, "TCP port")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  sub->add_option("--count,-C", o->count, "Messages each way")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_option("--size,-S", o->size, "Octets per message")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  add_app_options(*sub, o->app);
  return [o]() -> int {
    if (!o->server && o->client.empty()) {
      std::cerr << "rnic cmatose: give --server or --client ADDR (see rnic cmatose --help)\n";
      return 2;
    }
    return run(*o);
  };
}

}  // namespace iwarp::tools
