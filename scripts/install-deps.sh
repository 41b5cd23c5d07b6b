#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages, non-interactively.
# Safe to run again: apt-get skips what is already installed.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer "no" up front.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections

PKGS=(
  build-essential cmake ninja-build pkg-config clang-format
  libboost-dev libboost-system-dev   # Boost.Asio (header-only, system for error codes)
  libspdlog-dev libfmt-dev           # per-layer logging
  libgtest-dev libgmock-dev googletest  # unit and integration tests
  libpcap-dev                        # pcap read/write
  libisal-dev                        # CRC32c (crc32_iscsi)
  libcli11-dev                       # command line
  nlohmann-json3-dev                 # --json output
  libbenchmark-dev                   # benchmarks
  valgrind                           # callgrind instruction counts (scripts/instructions.sh)
  tshark                             # verifies the pcaps we write
  gnuplot-nox                        # rnic enlarge-bench's plot
  python3
  iproute2 util-linux                # ip, unshare: tests in network namespaces of their own
  vde2                               # wirefilter: the impaired link (scripts/impair.sh; no netem here)
  jq                                 # the README examples pipe --json output through it
  gdb                                # backtraces of a real program a test kills at its deadline
  time                               # GNU time: a command's peak memory in tests (tests/child_rss.hpp)
  strace                             # tests/single_threaded_check.sh: which test sources start no thread
  chromium fonts-dejavu-core         # headless browser test of rnic replay --html (tests/test_html_view.cpp)
  librsvg2-bin libxml2-utils         # rsvg-convert: rnic ladder --png; xmllint checks its SVG
  ccache                             # shared compile cache across the plain, sanitizer and fuzz builds
  clang-19 libclang-rt-19-dev        # libFuzzer targets (fuzz/, scripts/fuzz.sh); test.sh's ASan build
  libibverbs-dev librdmacm-dev       # rdma-core 44's headers: the drop-in libraries' ABI (verbs_abi/)
  rdmacm-utils ibverbs-utils perftest qperf  # unmodified programs run over the drop-in
  qemu-system-x86 cpio kmod xz-utils zstd bc tcpdump  # the siw interop VM (scripts/siwvm/build.sh)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
