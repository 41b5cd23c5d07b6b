#include "mpa/connection_decoder.hpp"

#include "common/log.hpp"

namespace iwarp::mpa {

std::string_view to_string(Direction d) {
  return d == Direction::FromInitiator ? "initiator->responder" : "responder->initiator";
}

class ConnectionDecoder::Forwarder final : public StreamVisitor {
 public:
  Forwarder(ConnectionDecoder& self, Direction d, ConnectionVisitor& v)
      : self_(self), d_(d), v_(v) {}
  void on_mpa_frame(const MpaFrame& f, std::uint64_t off, std::size_t len) override {
    v_.on_mpa_frame(d_, f, off, len);
    self_.on_frame(d_, f, v_);
  }
  void on_fpdu(const Fpdu& f) override { v_.on_fpdu(d_, f); }
  void on_error(const WireError& e) override { v_.on_error(d_, e); }

 private:
  ConnectionDecoder& self_;
  Direction d_;
  ConnectionVisitor& v_;
};

ConnectionDecoder::ConnectionDecoder(StreamDecoderOptions opts)
    : streams_{StreamDecoder(FrameKind::Request, opts), StreamDecoder(FrameKind::Reply, opts)} {}

void ConnectionDecoder::on_frame(Direction d, const MpaFrame& f, ConnectionVisitor& v) {
  (d == Direction::FromInitiator ? request_ : reply_) = f;
  log::layer("mpa").debug("{}: {}", to_string(d), describe(f));
  if (!request_ || !reply_) return;
  auto& from_init = streams_[static_cast<int>(Direction::FromInitiator)];
  auto& from_resp = streams_[static_cast<int>(Direction::FromResponder)];
  if (reply_->reject) {
    from_init.close();  // RFC 5044 §7.1: the initiator closes after a rejecting Reply
    return;
  }
  params_ = params_from_frames(*request_, *reply_);
  from_init.set_framing(params_->framing_to_responder());
  from_resp.set_framing(params_->framing_to_initiator());
  log::layer("mpa").debug("negotiated: {}", describe(*params_));
  v.on_negotiated(*params_);
}

void ConnectionDecoder::feed(Direction d, ByteSpan data, ConnectionVisitor& v) {
  Forwarder fw(*this, d, v);
  auto& s = streams_[static_cast<int>(d)];
  s.feed(data, fw);
  // The Reply may just have fixed the framing of initiator bytes held back until now, or
  // rejected the connection, which those bytes then break (RFC 5044 §7.1): either way they
  // are decoded now, as they would have been had they arrived after the Reply.
  if (params_ || (reply_ && reply_->reject)) {
    Direction other =
        d == Direction::FromInitiator ? Direction::FromResponder : Direction::FromInitiator;
    auto& o = streams_[static_cast<int>(other)];
    const auto st = o.state();
    if ((st == StreamDecoder::State::Fpdus || st == StreamDecoder::State::Closed) &&
        o.pending() > 0) {
      Forwarder fo(*this, other, v);
      o.feed({}, fo);
    }
  }
}

}  // namespace iwarp::mpa
