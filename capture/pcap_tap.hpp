// Records a live connection as a capture: every octet the RNIC sends and receives (MPA frames
// and FPDUs), as TCP segments between the connection's real addresses and ports, with real
// timestamps. rnic decode and Wireshark read the result.
#pragma once

#include <memory>
#include <string>

#include "rnic/cm_options.hpp"
#include "trace/pcap_writer.hpp"

namespace iwarp::capture {

// A factory for CmOptions::tap: the first connection writes `path`, later ones path-2, path-3...
rnic::TapFactory pcap_tap_factory(const std::string& path);

}  // namespace iwarp::capture
