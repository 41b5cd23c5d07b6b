// Writes a laid-out ladder page as a standalone SVG 1.1 document: valid XML, every text
// escaped, a viewBox, one <g class="msg ..."> per drawn RDMAP message (data-repeat says how
// many messages it stands for) and one <g class="mpa"> per MPA frame.
#pragma once

#include <string>
#include <string_view>

#include "ladder/layout.hpp"

namespace iwarp::ladder {

std::string render_svg(const Model& m, const Page& page);

// XML character escaping (&, <, >, ", ').
std::string xml_escape(std::string_view s);

}  // namespace iwarp::ladder
