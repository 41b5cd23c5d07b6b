#!/usr/bin/env bash
# ctest Layers.AnUpwardIncludeIsNamed: scripts/check-layers.sh on a small tree of its own names
# an include that points up (common/ including mpa/), with its file and line, and exits 1; the
# same tree without it passes. (Layers.DependenciesPointDown runs the script on the real tree.)
set -euo pipefail
check=$(cd "$(dirname "$0")/.." && pwd)/scripts/check-layers.sh
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/common" "$tree/mpa"
printf '#include <vector>\n#include "common/bytes.hpp"\n' > "$tree/common/a.cpp"
printf '  #  include "common/bytes.hpp"\n#\tinclude "mpa/sub/x.hpp"  // "tools/y.hpp"\n' \
  > "$tree/mpa/b.cpp"
out=$(bash "$check" "$tree") || { echo "a tree that points down failed: $out"; exit 1; }
[ "$out" = "layers: 3 project includes, all point down" ] || { echo "unexpected: $out"; exit 1; }
printf '\n#include "mpa/mpa_frame.hpp"\n' >> "$tree/common/a.cpp"
rc=0
out=$(bash "$check" "$tree") || rc=$?
[ "$rc" = 1 ] || { echo "an upward include: exit $rc, not 1: $out"; exit 1; }
[ "$out" = 'common/a.cpp:4: common/ may not include mpa/ (allowed: none)' ] ||
  { echo "an upward include, unexpected report: $out"; exit 1; }
echo "check-layers.sh: passes a tree that points down, names the upward include"
