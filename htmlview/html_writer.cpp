#include "htmlview/html_writer.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ladder/svg_writer.hpp"

namespace iwarp::htmlview {

namespace {

// Inline only: the page must work from disk with no network, and the policy says so to the
// browser too (no fetch, no external script, style, font or image).
constexpr const char* kHead = R"(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
)";

constexpr const char* kStyle = R"(<style>
body { margin: 0; font: 13px/1.4 system-ui, sans-serif; color: #212121; background: #fafafa; }
header { padding: 8px 16px; background: #263238; color: #eceff1; }
header h1 { font-size: 16px; margin: 0 0 2px 0; }
header .sub { font-size: 12px; color: #b0bec5; }
#notes { margin: 4px 0 0 0; padding-left: 18px; color: #ffcc80; font-size: 12px; }
main { display: flex; height: calc(100vh - 80px); }
#ladder { flex: 1 1 auto; overflow: auto; background: #fff; border-right: 1px solid #cfd8dc; }
#ladder svg { width: 100%; height: auto; display: block; }
#ladder [data-ev] { cursor: pointer; }
#ladder [data-ev]:hover { filter: drop-shadow(0 0 2px #90caf9); }
#ladder [data-ev].selected { filter: drop-shadow(0 0 3px #ff6f00); }
#details { flex: 0 0 520px; overflow: auto; padding: 10px 14px; }
#details h2 { font-size: 16px; margin: 4px 0; }
#details h3 { font-size: 13px; margin: 12px 0 4px 0; color: #37474f; border-bottom: 1px solid #cfd8dc; }
#details details summary { font-family: monospace; font-size: 12px; cursor: pointer; margin-top: 4px; }
#details h4 { font-size: 12px; margin: 8px 0 2px 0; font-weight: 600; font-family: monospace; }
#details .meta { color: #607d8b; font-size: 12px; }
#details table { border-collapse: collapse; font-family: monospace; font-size: 12px; }
#details td { padding: 1px 6px 1px 0; vertical-align: top; }
#details td.value { padding-right: 18px; }
#details td.layer { color: #78909c; }
#details pre.tl { white-space: pre-wrap; }
#details pre { font-size: 11px; background: #eceff1; padding: 6px; margin: 0; overflow-x: auto; }
#details .why { color: #33691e; margin: 2px 0 6px 0; }
#details .more, #details .note { color: #bf360c; font-size: 12px; }
#details .side { margin: 4px 0 8px 0; padding: 4px 8px; background: #fff; border: 1px solid #e0e0e0; }
#details .side b { display: block; }
#details .hint { color: #607d8b; }
</style>
)";

constexpr const char* kScript = R"JS(<script>
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('view-data').textContent);
  var panel = document.getElementById('details');
  var notes = document.getElementById('notes');
  // Capture strings go into the page as text only (textContent), never as markup.
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function section(title) {
    var s = el('section');
    s.appendChild(el('h3', null, title));
    panel.appendChild(s);
    return s;
  }
  (data.notes || []).forEach(function (n) { notes.appendChild(el('li', null, n)); });
  var selected = null;
  function show(id, group) {
    var ev = data.events[id];
    if (!ev) return;
    if (selected) selected.classList.remove('selected');
    selected = group;
    if (group) group.classList.add('selected');
    panel.replaceChildren();
    panel.setAttribute('data-event', String(id));
    panel.appendChild(el('h2', null, 'Event ' + id + ': ' + ev.title));
    panel.appendChild(el('div', 'meta', 'connection c' + ev.conn + ' \u00b7 ' + ev.dir +
        ' \u00b7 frame ' + ev.frame + (ev.last_frame > ev.frame ? '..' + ev.last_frame : '') +
        ' \u00b7 t=' + ev.time + ' s'));
    if (ev.summary) panel.appendChild(el('div', 'meta', ev.summary));
    if (ev.cut) {
      panel.appendChild(el('p', 'note', 'The details of this event were left out: the view\'s size limit (see the notes at the top).'));
      return;
    }
    var s = section('What it means');
    (ev.explain || []).forEach(function (w) { s.appendChild(el('p', 'why', w)); });
    s = section('Decoded headers');
    // The first segment's fields in full, the others folded (one click opens them).
    (ev.segments || []).forEach(function (seg, k) {
      var box = s;
      if (k > 0) {
        box = el('details');
        box.appendChild(el('summary', null, 'frame ' + seg.frame + ' @' + seg.offset + ': ' + seg.summary));
        s.appendChild(box);
      } else {
        box.appendChild(el('h4', null, 'frame ' + seg.frame + ' @' + seg.offset + ': ' + seg.summary));
      }
      if (seg.problem) box.appendChild(el('div', 'note', seg.problem));
      var t = el('table'), tr = null;
      seg.fields.forEach(function (f, i) {
        if (i % 2 === 0) { tr = el('tr'); t.appendChild(tr); }
        tr.appendChild(el('td', 'layer', f[0]));
        tr.appendChild(el('td', null, f[1]));
        var v = el('td', 'value', f[2]);
        if (k === 0) v.setAttribute('data-f', f[0] + '.' + f[1]);
        tr.appendChild(v);
      });
      box.appendChild(t);
    });
    if (ev.segments_more) s.appendChild(el('div', 'more', '... ' + ev.segments_more + ' more segment(s)'));
    if (ev.replay) {
      s = section('What the replay did');
      if (!ev.replay.length) s.appendChild(el('div', 'hint', 'no timeline event of the receiving side is about its octets'));
      ev.replay.forEach(function (r) {
        s.appendChild(el('pre', 'tl', r.text.trim()));
        s.appendChild(el('p', 'why', r.why));
      });
      if (ev.replay_more) s.appendChild(el('div', 'more', '... ' + ev.replay_more + ' more timeline event(s)'));
    }
    s = section('Queue pairs after frame ' + (ev.last_frame || ev.frame));
    (ev.state || []).forEach(function (q) {
      var d = el('div', 'side');
      d.appendChild(el('b', null, q.side + ': ' + q.state));
      d.appendChild(el('div', null, 'receives: ' + q.receives));
      d.appendChild(el('div', null, 'RDMA Reads: ' + q.reads));
      if (q.atomics) d.appendChild(el('div', null, 'atomics: ' + q.atomics));
      d.appendChild(el('div', null, 'holes open: ' + (q.holes.length ? q.holes.join(', ') : 'none')));
      d.appendChild(el('div', 'hint', q.counts));
      if (q.note) d.appendChild(el('div', 'note', q.note));
      s.appendChild(d);
    });
    if (!(ev.state || []).length) s.appendChild(el('div', 'hint', 'not replayed'));
    s = section('Memory it touched');
    if (!(ev.memory || []).length) s.appendChild(el('div', 'hint', 'none'));
    (ev.memory || []).forEach(function (m) {
      var d = el('div', 'side');
      d.appendChild(el('b', null, m.side + ': STag ' + m.stag + (m.range ? ', ' + m.range : '')));
      d.appendChild(el('div', null, m.role));
      if (m.shadow) d.appendChild(el('div', 'hint', m.shadow));
      s.appendChild(d);
    });
    s = section('Bytes (first FPDUs as on the wire)');
    if (ev.hex) s.appendChild(el('pre', 'hex', ev.hex));
    if (ev.hex_more) s.appendChild(el('div', 'more', '... ' + ev.hex_more + ' more octet(s)'));
    if (ev.hex_missing) s.appendChild(el('div', 'note', ev.hex_missing));
  }
  var groups = document.querySelectorAll('#ladder [data-ev]');
  Array.prototype.forEach.call(groups, function (g) {
    var id = Number(g.getAttribute('data-ev'));
    g.addEventListener('click', function () {
      show(id, g);
      if (window.history && history.replaceState) history.replaceState(null, '', '#event=' + id);
    });
    g.addEventListener('keydown', function (e) { if (e.key === 'Enter') g.dispatchEvent(new MouseEvent('click', {bubbles: true})); });
  });
  // #event=N selects event N through the same path as a click.
  function fromHash() {
    var m = /^#event=(\d+)$/.exec(window.location.hash);
    if (!m) return;
    var g = document.querySelector('#ladder [data-ev="' + m[1] + '"]');
    if (!g) return;
    g.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    if (g.scrollIntoView) g.scrollIntoView({block: 'center'});
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
})();
</script>
)JS";

}  // namespace

std::string embed_json(const nlohmann::json& j) {
  const std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(s.size() + s.size() / 16);
  for (char c : s) {
    // Only inside JSON strings can these occur; as \uXXXX escapes they mean the same to
    // JSON.parse and nothing to the HTML parser (no "</script>", no "<!--").
    if (c == '<')
      out += "\\u003c";
    else if (c == '>')
      out += "\\u003e";
    else if (c == '&')
      out += "\\u0026";
    else
      out += c;
  }
  return out;
}

std::string render_html(const View& v) {
  const std::string file = v.data.contains("file") ? v.data["file"].get<std::string>() : "";
  std::size_t events = v.data.contains("events") ? v.data["events"].size() : 0;
  std::size_t conns = v.data.contains("connections") ? v.data["connections"].size() : 0;
  // A live program's view carries its own heading; a replay's names the file.
  const std::string heading = v.data.contains("heading") ? v.data["heading"].get<std::string>()
                                                         : "rnic replay --html: " + file;
  std::string out = kHead;
  out += fmt::format(
      "<title>{}</title>\n",
      ladder::xml_escape(v.data.contains("heading") ? heading : "rnic replay: " + file));
  out += kStyle;
  out += "</head>\n<body>\n<header>\n";
  out += fmt::format("<h1>{}</h1>\n", ladder::xml_escape(heading));
  if (v.data.contains("order"))
    out += fmt::format("<div class=\"sub\">replayed in {}</div>\n",
                       ladder::xml_escape(v.data["order"].get<std::string>()));
  out += fmt::format(
      "<div class=\"sub\">{} iWARP connection(s), {} event(s). Click an arrow (or open "
      "#event=N) to see its headers, bytes, meaning, the queue pairs' state and the memory it "
      "touched.</div>\n",
      conns, events);
  out += "<ul id=\"notes\"></ul>\n</header>\n<main>\n<div id=\"ladder\">\n";
  out += v.svg;
  out +=
      "</div>\n<aside id=\"details\"><p class=\"hint\">Click an event of the ladder.</p>"
      "</aside>\n</main>\n";
  out += "<script type=\"application/json\" id=\"view-data\">";
  out += embed_json(v.data);
  out += "</script>\n";
  out += kScript;
  out += "</body>\n</html>\n";
  return out;
}

std::expected<void, std::string> check_writable(const std::string& path) {
  // Opened for appending, so that an existing file is kept as it is until the page is written,
  // and a file made only for this check is removed again.
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) return std::unexpected(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  std::fclose(f);
  if (!existed) std::filesystem::remove(path, ec);
  return {};
}

std::expected<void, std::string> write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return std::unexpected(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed)
    return std::unexpected(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  return {};
}

}  // namespace iwarp::htmlview
