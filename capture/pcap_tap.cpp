#include "capture/pcap_tap.hpp"

#include <fmt/format.h>

#include <atomic>

#include "common/log.hpp"
#include "rnic/connection_manager.hpp"

namespace iwarp::capture {

namespace {

class PcapTap : public rnic::WireTap {
 public:
  PcapTap(std::unique_ptr<trace::PcapWriter> w, bool initiator)
      : w_(std::move(w)), initiator_(initiator) {}
  void on_data(bool outbound, ByteSpan data) override {
    // The initiator is the capture's client.
    w_->write(outbound == initiator_ ? trace::Side::Client : trace::Side::Server, data);
  }
  void on_fpdus(bool outbound, ByteSpan data, std::span<const std::size_t> ends) override {
    w_->write_records(outbound == initiator_ ? trace::Side::Client : trace::Side::Server, data,
                      ends);
  }
  void on_close(bool outbound) override {
    w_->close(outbound == initiator_ ? trace::Side::Client : trace::Side::Server);
  }

 private:
  std::unique_ptr<trace::PcapWriter> w_;
  bool initiator_;
};

trace::Ipv4Endpoint v4(const boost::asio::ip::tcp::endpoint& ep) {
  trace::Ipv4Endpoint e;
  if (ep.address().is_v4()) e.addr = ep.address().to_v4().to_bytes();
  e.port = ep.port();
  return e;
}

}  // namespace

rnic::TapFactory pcap_tap_factory(const std::string& path) {
  auto n = std::make_shared<std::atomic<int>>(0);
  return [path, n](const rnic::TapInfo& ti) -> std::shared_ptr<rnic::WireTap> {
    const int k = ++*n;
    std::string file = path;
    if (k > 1) {
      auto dot = path.rfind('.');
      file = dot == std::string::npos
                 ? fmt::format("{}-{}", path, k)
                 : fmt::format("{}-{}{}", path.substr(0, dot), k, path.substr(dot));
    }
    trace::PcapWriterOptions o;
    o.client = v4(ti.initiator ? ti.local : ti.remote);
    o.server = v4(ti.initiator ? ti.remote : ti.local);
    o.mss = static_cast<std::uint16_t>(std::min<std::size_t>(ti.emss ? ti.emss : 1460, 65000));
    o.wall_clock = true;
    auto w = trace::PcapWriter::open(file, o);
    if (!w) {
      log::layer("tool").error("{}", w.error());
      return nullptr;
    }
    log::layer("tool").info("recording connection {} to {}", k, file);
    return std::make_shared<PcapTap>(std::move(*w), ti.initiator);
  };
}

}  // namespace iwarp::capture
