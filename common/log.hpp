// Per-layer loggers (spdlog): "mpa", "ddp", "trace", "tool", ... all writing to stderr, each
// with its own level, so `--log-level mpa=trace,ddp=debug` shows just the layers asked for.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

namespace iwarp::log {

// The logger of a layer, created on first use at the default level.
spdlog::logger& layer(std::string_view name);

// Applies "LEVEL" to every layer, or "LAYER=LEVEL,LAYER=LEVEL" (with an optional bare LEVEL as
// the default for the rest). Returns an error message for an unknown level, else empty.
std::string configure(std::string_view spec);

}  // namespace iwarp::log
