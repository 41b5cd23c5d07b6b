// Writes the view of `rnic replay --html` as one self-contained HTML file: the ladder as inline
// SVG, the data as one JSON document in a <script type="application/json"> element (every '<',
// '>' and '&' in it written as \u003c, \u003e, \u0026, so that no "</script>" in a capture
// string can end it), inline CSS and a small inline script that shows an event's details when
// its arrow is clicked (or named by the URL: #event=N), putting capture strings into the page
// only as text (textContent), never as markup. No network, no server: it works from disk.
#pragma once

#include <expected>
#include <string>

#include "htmlview/view_model.hpp"

namespace iwarp::htmlview {

std::string render_html(const View& v);

// The JSON text as embedded: dumped, invalid UTF-8 replaced, '<' '>' '&' escaped.
std::string embed_json(const nlohmann::json& j);

// Checks that `path` can be written, before the replay runs (leaves no file behind, and an
// existing one unchanged).
std::expected<void, std::string> check_writable(const std::string& path);
std::expected<void, std::string> write_file(const std::string& path, const std::string& text);

}  // namespace iwarp::htmlview
