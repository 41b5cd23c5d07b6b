#!/usr/bin/env bash
# Speed and memory of `rnic decode` and `rnic replay` on one large generated capture, against
# `tshark -V` on the same file in the same run (not run in CI; docs/replay.md has the figures).
#
#   scripts/replay-bench.sh [SIZE] [--dir DIR] [--rnic PATH] [--passes N] [--no-tshark]
#
# SIZE: octets of RDMA Write payload in the capture (k, m, g units; default 2g): `rnic generate
# --bulk` writes the sample conversation with that many octets of 64 KiB Writes cycling over
# 1 MiB of one STag, so the replay's shadow memory stays 1 MiB whatever the size. The capture
# goes to DIR (default /tmp) and is deleted at the end. Each tool runs N passes (default 1; the
# median is reported) with its output to /dev/null, under /usr/bin/time for the peak resident
# set. Prints one markdown table: seconds, MB/s of capture, max RSS, and the ratio of MB/s to
# tshark -V's.
#
#   scripts/replay-bench.sh --compare OLD_RNIC [--rnic PATH]
#
# Instead: checks that `rnic replay` (--json, text, --drop, --permute 7) and `rnic decode`
# (exit status) give the same output with both binaries on every capture in pcap_traces/ (log
# timestamps aside); exit status 1 and the captures that differ otherwise.
set -euo pipefail

size=2g
dir=/tmp
here=$(cd "$(dirname "$0")/.." && pwd)
rnic=$here/build/rnic
passes=1
tshark=1
compare=
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --rnic) rnic=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    --no-tshark) tshark=0; shift ;;
    --compare) compare=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "replay-bench.sh: unknown option $1" >&2; exit 2 ;;
    *) size=$1; shift ;;
  esac
done
[ -x "$rnic" ] || { echo "replay-bench.sh: no rnic binary at $rnic (build it first)" >&2; exit 2; }
if [ -n "$compare" ]; then
  [ -x "$compare" ] || { echo "replay-bench.sh: no rnic binary at $compare" >&2; exit 2; }
  strip() { sed -E 's/^\[[0-9:.]+\] //'; }
  # out BIN ARGS...: stdout and stderr (timestamps stripped) and the exit status.
  out() { local b=$1; shift; { "$b" "$@" 2>&1; echo "exit status $?"; } | strip; }
  differ=0 n=0
  for f in "$here"/pcap_traces/*/*.pcap; do
    for args in "replay --json --no-progress" "replay --no-progress" \
                "replay --json --no-progress --drop 5,7,8,20,21,22" \
                "replay --no-progress --timeline --drop 9" \
                "replay --json --no-progress --permute 7" "decode --summary"; do
      # shellcheck disable=SC2086
      if [ "$(out "$compare" $args "$f")" != "$(out "$rnic" $args "$f")" ]; then
        echo "differs: rnic $args ${f#"$here"/}"
        differ=1
      fi
      n=$((n + 1))
    done
  done
  [ $differ = 0 ] && echo "identical: $n runs on $(ls "$here"/pcap_traces/*/*.pcap | wc -l) captures"
  exit $differ
fi
[ -x /usr/bin/time ] || { echo "replay-bench.sh: needs /usr/bin/time (package time)" >&2; exit 2; }
if [ $tshark = 1 ] && ! command -v tshark >/dev/null; then
  echo "replay-bench.sh: tshark not found (or pass --no-tshark)" >&2
  exit 2
fi

cap=$(mktemp "$dir/replay-bench-XXXXXX.pcap")
tmp=$(mktemp -d)
trap 'rm -f "$cap"; rm -rf "$tmp"' EXIT

"$rnic" generate --bulk "$size" "$cap" >/dev/null
bytes=$(stat -c %s "$cap")
echo "capture: $cap, $bytes octets ($((bytes >> 20)) MiB), $passes pass(es) per tool" >&2

# run NAME CMD...: the median seconds and the largest max RSS (KiB) over the passes.
declare -A secs rss
run() {
  local name=$1; shift
  local i times=() peak=0
  for ((i = 0; i < passes; i++)); do
    echo "  $name, pass $((i + 1)) ..." >&2
    # Exit status 1 (violations found) is a result, not a failure, for decode and replay.
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err" || {
      rc=$?
      if [ $rc -ne 1 ]; then
        echo "replay-bench.sh: $name failed (exit status $rc):" >&2
        tail -3 "$tmp/err" >&2
        exit 1
      fi
    }
    read -r t m < <(tail -1 "$tmp/time")
    times+=("$t")
    [ "$m" -gt "$peak" ] && peak=$m
  done
  secs[$name]=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  rss[$name]=$peak
}

tools=("rnic decode" "rnic replay")
run "rnic decode" "$rnic" decode "$cap"
run "rnic replay" "$rnic" replay --no-progress "$cap"
if [ $tshark = 1 ]; then
  run "tshark -V" tshark -V -r "$cap"
  tools+=("tshark -V")
fi

echo "| tool | seconds | MB/s of capture | max RSS (MiB) | x tshark -V |"
echo "| --- | --- | --- | --- | --- |"
for t in "${tools[@]}"; do
  mbs=$(awk -v b="$bytes" -v s="${secs[$t]}" 'BEGIN {printf "%.1f", (s > 0 ? b / 1e6 / s : 0)}')
  ratio=-
  if [ $tshark = 1 ]; then
    ratio=$(awk -v a="${secs["tshark -V"]}" -v s="${secs[$t]}" \
      'BEGIN {printf "%.2fx", (s > 0 ? a / s : 0)}')
  fi
  echo "| $t | ${secs[$t]} | $mbs | $(( ${rss[$t]} / 1024 )) | $ratio |"
done
