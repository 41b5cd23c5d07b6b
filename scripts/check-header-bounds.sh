#!/usr/bin/env bash
# The applications' view of the engine stays narrow: every public header of the C++ verbs API
# (verbs_shim/), of the drop-in libraries (verbs_abi/) and the enlarge options compiles on its
# own, and none of them reaches the engine (rnic/queue_pair.hpp, rnic/device.hpp,
# rnic/connection_manager.hpp) or Boost.Asio, directly or through another header. Their .cpp
# files may include the engine.
#
# Usage: check-header-bounds.sh CXX SOURCE_DIR
set -euo pipefail
cxx=${1:?compiler}
src=${2:?source dir}
forbidden='boost/asio|rnic/queue_pair\.hpp|rnic/device\.hpp|rnic/connection_manager\.hpp'
status=0
for h in "$src"/verbs_shim/*.hpp "$src"/verbs_abi/*.hpp "$src"/enlarge/options.hpp; do
  rel=${h#"$src"/}
  # -H lists every header the compiler opens, one per line, dots giving the depth.
  if ! trace=$("$cxx" -std=c++23 -fsyntax-only -H -I"$src" -x c++ "$h" 2>&1 >/dev/null); then
    echo "FAIL $rel does not compile on its own:"
    echo "$trace" | grep -v '^\.' | head -20
    status=1
    continue
  fi
  if hits=$(echo "$trace" | grep -E '^\.+ ' | grep -E "$forbidden"); then
    echo "FAIL $rel reaches the engine or Boost.Asio:"
    echo "$hits" | head -5
    status=1
  else
    echo "ok   $rel"
  fi
done
exit $status
