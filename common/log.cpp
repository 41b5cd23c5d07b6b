#include "common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace iwarp::log {

namespace {

struct Registry {
  std::mutex mu;
  std::shared_ptr<spdlog::sinks::sink> sink =
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
  std::map<std::string, spdlog::level::level_enum, std::less<>> levels;
  spdlog::level::level_enum default_level = spdlog::level::warn;
};

std::string configure_locked(struct Registry& r, std::string_view spec);

Registry& reg() {
  // RNIC_LOG in the environment sets the starting levels ("debug", "rnic=trace,cm=info").
  // Never destroyed: the engine thread of a drop-in library may still log while a program
  // exit()s and runs the static destructors (a destroyed sink crashed ucmatose at exit).
  static Registry& r = *new Registry;
  static const bool from_env = [] {
    if (const char* env = std::getenv("RNIC_LOG")) configure_locked(r, env);
    return true;
  }();
  (void)from_env;
  return r;
}

bool parse_level(std::string_view s, spdlog::level::level_enum& out) {
  static const std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (auto [name, lvl] : kLevels)
    if (s == name) {
      out = lvl;
      return true;
    }
  return false;
}

}  // namespace

spdlog::logger& layer(std::string_view name) {
  auto& r = reg();
  std::lock_guard lock(r.mu);
  auto it = r.loggers.find(name);
  if (it == r.loggers.end()) {
    auto l = std::make_shared<spdlog::logger>(std::string(name), r.sink);
    l->set_pattern("[%H:%M:%S.%f] [%n] %^%l%$: %v");
    auto lv = r.levels.find(name);
    l->set_level(lv != r.levels.end() ? lv->second : r.default_level);
    it = r.loggers.emplace(std::string(name), std::move(l)).first;
  }
  return *it->second;
}

std::string configure(std::string_view spec) {
  auto& r = reg();
  std::lock_guard lock(r.mu);
  return configure_locked(r, spec);
}

namespace {
std::string configure_locked(Registry& r, std::string_view spec) {
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t comma = spec.find(',', pos);
    std::string_view item =
        spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos);
    pos = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    spdlog::level::level_enum lvl;
    std::size_t eq = item.find('=');
    std::string_view level_name = eq == std::string_view::npos ? item : item.substr(eq + 1);
    if (!parse_level(level_name, lvl))
      return "unknown log level \"" + std::string(level_name) +
             "\" (use trace, debug, info, warn, error or off)";
    if (eq == std::string_view::npos) {
      r.default_level = lvl;
      r.levels.clear();
    } else {
      r.levels[std::string(item.substr(0, eq))] = lvl;
    }
  }
  for (auto& [name, l] : r.loggers) {
    auto lv = r.levels.find(name);
    l->set_level(lv != r.levels.end() ? lv->second : r.default_level);
  }
  return {};
}
}  // namespace

}  // namespace iwarp::log
