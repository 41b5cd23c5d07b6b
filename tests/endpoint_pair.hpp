// Two verbs-shim endpoints in one process, connected over 127.0.0.1 (each with its own emulated
// RNIC and engine thread): the server listens on an ephemeral port and accepts on a thread
// while the client connects.
#pragma once

#include <gtest/gtest.h>

#include <expected>
#include <memory>
#include <string>
#include <thread>

#include "verbs_shim/endpoint.hpp"

namespace iwarp::testing {

struct Pair {
  std::unique_ptr<verbs::Endpoint> server, client;
};

inline Pair connect_pair(verbs::EndpointOptions so = {}, verbs::EndpointOptions co = {}) {
  Pair p;
  p.server = std::make_unique<verbs::Endpoint>(so);
  p.client = std::make_unique<verbs::Endpoint>(co);
  auto port = p.server->listen("127.0.0.1", 0);
  EXPECT_TRUE(port) << port.error();
  std::expected<void, std::string> acc;
  std::thread t([&] { acc = p.server->accept_one(); });
  auto c = p.client->connect("127.0.0.1", *port);
  t.join();
  EXPECT_TRUE(c) << c.error();
  EXPECT_TRUE(acc) << acc.error();
  return p;
}

}  // namespace iwarp::testing
