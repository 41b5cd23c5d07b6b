#!/usr/bin/env bash
# The placement benchmark (docs/beyond-holes.md): what placing data beyond real TCP holes buys,
# against holding it until the hole closes and against discarding it, with two senders (--peer):
#   rnic  two rnic xfer processes across scripts/impair.sh's link (two network namespaces, VDE's
#         wirefilter), both in the real-segment mode (--real-segments tap0), the client Writing
#         16 x 1 MiB --loop times into the server;
#   siw   the kernel's siw in the VM (scripts/siwvm) on a TAP in a namespace this script makes,
#         netem on the guest's egress: siw's unmodified rping client (-V, --siw-pings pings of
#         65535 octets) against `rnic ping --server --real-segments tap0` on the host's end. Our
#         RDMA Reads bring siw's Read Responses in over the impaired direction; the Writes back
#         go out over the unimpaired one, and rping -V checks that every octet came back.
# Per condition, arm and run, on the receiving (server) side:
#   goodput      rnic: the client's, to the server's memory (a Read after the last Write fences
#                it); siw: the octets our server read from siw per second, first ping to last
#   holes        the server's segment path: holes opened, FPDUs placed beyond one, segments
#                dropped; the kernel's own account (TCP segments queued out of order and
#                retransmitted) says the holes were real
#   peak held    the most octets the server's segment receiver held for reassembly
#   copies       octets copied into reassembly storage per octet received
#   hole time    each hole, from closing to the octets beyond it delivered (--hole-times):
#                p50/p99 pooled over the runs, overall and by octets beyond the hole
#
#   scripts/beyond-holes-bench.sh [--peer "rnic siw"] [--loss "0.5 1 2 5"] [--jitter "0.2 0.5 1"]
#                                 [--reorder "5 15 30"] [--runs 3] [--loop 4] [--siw-pings 256]
#                                 [--arms "place hold discard"] [--markers off|required]
#                                 [--out DIR] [--quick]
#
# Conditions: each --loss PCT (1 ms delay, frames kept in order); for rnic each --jitter MS (1 +- MS
# ms delay, frames may overtake each other: reordering, no loss), for siw each --reorder PCT
# (netem's "delay 1ms reorder PCT%": that share of siw's frames sent at once, ahead of the others,
# which wait 1 ms; no loss). Neither wirefilter nor netem takes a seed: each run is a fresh
# random draw (--runs of them). --peer:
# rnic (the default), siw, or both; the siw peer's condition names start with "siw: ". --quick:
# one condition (2 % loss), one run, --loop 1, --siw-pings 100 (ctest BeyondHolesBench.Quick
# runs it for the rnic peer). --markers required: MPA markers both ways
# (RFC 5044 §5), by which the segment path finds FPDUs beyond a hole wherever TCP cut the
# stream; without them it needs segments that start with an FPDU (siw refuses markers, so the
# siw peer runs without). The rnic peer needs what impair.sh needs (root, vde2); the siw peer
# root, /dev/net/tun, qemu and the VM image (scripts/siwvm/build.sh). Exit 77 when the link
# cannot be made or the siw peer lacks one of those, 2 for a bad option, 1 when a run failed or
# the VM, with all of them here, did not boot on the TAP.
# Writes DIR/runs.csv (one row per run), DIR/holes/*.csv (every hole timed), DIR/table.md (the
# table docs/beyond-holes.md shows), DIR/beyond-holes.png (gnuplot; skipped without it),
# DIR/logs/*.log (what impair.sh printed of each rnic run: both programs' last lines, the
# segment-path lines among them) and, for siw,
# DIR/siw-vm/ (the VM's console, each run's logs and netem counters). A run whose server's tap
# handed its segment path no segment (it saw no SYN of the connection) measured the socket
# alone: it fails.
# Env: RNIC (default build/rnic); SIWVM_CACHE (the VM image, default build/siwvm).
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
RNIC=${RNIC:-$HERE/build/rnic}
LOSSES="0.5 1 2 5"
JITTERS="0.2 0.5 1"
REORDERS="5 15 30"
RUNS=3
LOOP=4
ARMS="place hold discard"
MARKERS=off
PEERS=rnic
SIW_PINGS=256
OUT=$HERE/bench-out/beyond-holes
die() { echo "beyond-holes-bench: $*" >&2; exit 2; }
num_list() {  # NAME VALUE: VALUE is numbers separated by blanks
  [[ $2 =~ ^[[:space:]]*([0-9]+(\.[0-9]+)?[[:space:]]*)*$ ]] || die "$1 \"$2\": not a list of numbers"
}
while [ $# -gt 0 ]; do
  case $1 in
    --loss) [ $# -ge 2 ] || die "--loss needs a value"; num_list --loss "$2"; LOSSES=$2; shift 2 ;;
    --jitter) [ $# -ge 2 ] || die "--jitter needs a value"; num_list --jitter "$2"; JITTERS=$2; shift 2 ;;
    --reorder) [ $# -ge 2 ] || die "--reorder needs a value"; num_list --reorder "$2"; REORDERS=$2; shift 2 ;;
    --runs) [[ ${2:-} =~ ^[1-9][0-9]?$ ]] || die "--runs ${2:-}: not 1..99"; RUNS=$2; shift 2 ;;
    --loop) [[ ${2:-} =~ ^[1-9][0-9]{0,2}$ ]] || die "--loop ${2:-}: not 1..999"; LOOP=$2; shift 2 ;;
    --siw-pings) [[ ${2:-} =~ ^[1-9][0-9]{0,4}$ ]] || die "--siw-pings ${2:-}: not 1..99999"; SIW_PINGS=$2; shift 2 ;;
    --arms)
      [ $# -ge 2 ] || die "--arms needs a value"
      for a in $2; do case $a in place|hold|discard) ;; *) die "--arms: unknown arm $a (place, hold, discard)" ;; esac; done
      ARMS=$2; shift 2 ;;
    --peer)
      [ $# -ge 2 ] || die "--peer needs a value"
      for p in $2; do case $p in rnic|siw) ;; *) die "--peer: unknown peer $p (rnic, siw)" ;; esac; done
      PEERS=$2; shift 2 ;;
    --markers)
      case ${2:-} in off|required) MARKERS=$2 ;; *) die "--markers ${2:-}: not off or required" ;; esac
      shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --quick) LOSSES=2; JITTERS=""; REORDERS=""; RUNS=1; LOOP=1; SIW_PINGS=100; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ -x "$RNIC" ] || die "no $RNIC (build first, or set RNIC)"
[ -n "${PEERS// /}" ] || die "--peer: no peer given (rnic, siw)"
[ -n "${ARMS// /}" ] || die "--arms: no arm given (place, hold, discard)"
case " $PEERS " in *" siw "*) [ "$MARKERS" = off ] || die "--markers $MARKERS: siw refuses markers (run it with --peer rnic)" ;; esac
mkdir -p "$OUT/holes" "$OUT/logs" || die "cannot make $OUT"
rm -f "$OUT"/holes/*.csv "$OUT"/logs/*.log
CSV=$OUT/runs.csv
echo "condition,arm,run,goodput_MBps,kernel_ooo_pct,retransmitted,holes_opened,placed_beyond,dropped,peak_held,copied_per_octet,holes_timed,octets_beyond,p50_us,p99_us" > "$CSV"

# conditions: "NAME|PEER|impair.sh's options|netem's words", NAME unique over the peers
conditions=()
for peer in $PEERS; do
  pre=""; [ "$peer" = siw ] && pre="siw: "
  for l in $LOSSES; do conditions+=("${pre}loss $l %|$peer|--loss $l --delay 1|loss $l% delay 1ms"); done
  if [ "$peer" = rnic ]; then
    for j in $JITTERS; do conditions+=("reorder 1+-$j ms|rnic|--delay 1 --jitter $j --reorder|"); done
  else
    for r in $REORDERS; do conditions+=("siw: reorder $r %|siw||delay 1ms reorder $r%"); done
  fi
done
narms=$(wc -w <<< "$ARMS")
total=$(( ${#conditions[@]} * narms * RUNS ))
what=()
case " $PEERS " in *" rnic "*) what+=("rnic: $((16 * LOOP)) MiB of Writes a run") ;; esac
case " $PEERS " in *" siw "*) what+=("siw: $SIW_PINGS pings of 65535 octets a run") ;; esac
echo "beyond-holes-bench: ${#conditions[@]} condition(s) x arms ($ARMS) x $RUNS run(s) = $total runs ($(IFS=';'; echo "${what[*]}" | sed 's/;/; /g')); results in $OUT"
tagof() { tr -c 'a-zA-Z0-9.\n' '_' <<< "$1"; }

# val TEXT REGEX: the first number matched by REGEX (a sed -E group) in TEXT, "" when absent.
val() { sed -nE "s#.*$2.*#\\1#p" <<< "$1" | head -1; }
failed=0
n=0
# record NAME ARM RUN GOODPUT SEGMENTS_IN OOO_QUEUED RETRANSMITTED SERVER_OUTPUT: one row of
# runs.csv from the server's two segment-path lines, and a progress line
record() {
  local path arms ooo_pct opened placed dropped peak copies timed beyond p50 p99
  path=$(grep 'server: segment path' <<< "$8"); arms=$(grep 'server: beyond holes' <<< "$8")
  ooo_pct=$(awk -v o="$6" -v i="$5" 'BEGIN { printf "%.1f", i ? 100 * o / i : 0 }')
  opened=$(val "$path" ' ([0-9]+) holes opened'); placed=$(val "$path" ' ([0-9]+) FPDUs placed')
  dropped=$(val "$arms" ' ([0-9]+) segments dropped'); peak=$(val "$arms" 'peak ([0-9]+) octets')
  copies=$(val "$arms" '\(([0-9.]+) per octet received\)')
  timed=$(val "$arms" ': ([0-9]+) holes \('); beyond=$(val "$arms" 'holes \(([0-9]+) octets beyond')
  p50=$(val "$arms" 'p50 ([0-9.]+) us'); p99=$(val "$arms" 'p99 ([0-9.]+) us')
  echo "$1,$2,$3,$4,$ooo_pct,$7,$opened,$placed,$dropped,$peak,$copies,$timed,$beyond,$p50,$p99" >> "$CSV"
  echo "[$n/$total] $1, $2, run $3: $4 MB/s; kernel: ${ooo_pct} % of segments queued out of order, ${7:-?} retransmitted; holes opened $opened, FPDUs placed beyond $placed, dropped $dropped; peak held $peak; hole closed -> delivered p50 $p50 us, p99 $p99 us over $timed holes"
}
# complete OUTPUT HOLES_CSV: the server printed both segment-path lines and timed its holes
complete() {
  grep -q 'server: segment path' <<< "$1" && grep -q 'server: beyond holes' <<< "$1" && [ -s "$2" ]
}
# untapped OUTPUT: true when the server's tap handed its segment path no segment of the
# connection (it needs the connection's SYN to number them; a count it cannot read counts as
# none): the run measured the socket's stream alone.
untapped() {
  local got
  got=$(val "$(grep 'server: segment path' <<< "$1")" '\): ([0-9]+) segments received')
  [ -z "$got" ] || [ "$got" = 0 ]
}

# ------------------------------------------------------------------ rnic -> rnic (impair.sh)
XFER="xfer --sizes 1048576 --ops write --timeout 60000 --real-segments tap0 --markers $MARKERS"
run_rnic() {  # NAME IMPAIR_OPTIONS ARM RUN
  local holes log out rc good tcp sin sooo cre
  holes=$OUT/holes/rnic-$(tagof "$1")-$3-$4.csv; log=$OUT/logs/rnic-$(tagof "$1")-$3-$4.log
  # shellcheck disable=SC2086  # $2 is a list of options
  out=$(bash "$HERE/scripts/impair.sh" --timeout 300 $2 \
    --server-cmd "'$RNIC' $XFER --beyond-holes $3 --hole-times $holes --server --bind \$PEER" \
    --client-cmd "'$RNIC' $XFER --beyond-holes $3 --loop $LOOP --client \$PEER" 2>&1)
  rc=$?
  [ $rc = 77 ] && { echo "$out" | tail -3; exit 77; }
  echo "$out" > "$log"
  good=$(val "$out" 'client: write loop: .* ([0-9.]+) MB/s goodput')
  if [ $rc != 0 ] || [ -z "$good" ] || ! complete "$out" "$holes"; then
    echo "[$n/$total] $1, $3, run $4: FAILED (exit $rc; $log)"; echo "$out" | tail -15 | sed 's/^/    /'
    failed=1; return
  fi
  if untapped "$out"; then
    echo "[$n/$total] $1, $3, run $4: FAILED: the server's tap handed no segment of the connection to its segment path (did it see the SYN? $log)"
    failed=1; return
  fi
  tcp=$(grep 'impair: TCP' <<< "$out")
  sin=$(val "$tcp" '\(server\): ([0-9]+) in'); sooo=$(val "$tcp" '\(server\): [0-9]+ in, [0-9]+ retransmitted, ([0-9]+) queued')
  cre=$(val "$tcp" '\(client\): [0-9]+ segments in, ([0-9]+) retransmitted')
  record "$1" "$3" "$4" "$good" "$sin" "$sooo" "$cre" "$out"
}

# ------------------------------------------------------------------ siw -> rnic (the VM on a TAP)
# One VM boot serves every siw run: its plan (scripts/siwvm/scenarios/interop.sh) holds one rping
# client line per run, each with its own netem; the host starts our server for a run, says go,
# and waits for it. The namespace holds the TAP (10.0.2.2/24, the guest keeps 10.0.2.15), QEMU
# and our servers, and goes when the script ends.
SIW_NS=""; SIW_VM=""; SIW_RES=$OUT/siw-vm
siw_cleanup() {
  [ -n "$SIW_VM" ] && kill "$SIW_VM" 2>/dev/null
  if [ -n "$SIW_NS" ]; then
    ip netns pids "$SIW_NS" 2>/dev/null | xargs -r kill -9 2>/dev/null
    [ -n "$SIW_VM" ] && wait "$SIW_VM" 2>/dev/null
    ip netns del "$SIW_NS" 2>/dev/null
  fi
  SIW_NS=""; SIW_VM=""
}
trap siw_cleanup EXIT
trap 'exit 130' INT TERM
# tcp_counters NS (scripts/tcp-counters.sh)
. "$HERE/scripts/tcp-counters.sh"
retrans_segs() {  # FILE: RetransSegs of /proc/net/snmp's two Tcp: lines (0 when absent)
  awk '!h { for (i = 1; i <= NF; i++) f[i] = $i; h = 1; next }
       { for (i = 1; i <= NF; i++) if (f[i] == "RetransSegs") r = $i } END { print r + 0 }' "$1" 2>/dev/null || echo 0
}
siw_skip() { echo "beyond-holes-bench: siw peer: $*"; exit 77; }
# siw_boot: the namespace, the TAP and the VM with one plan line per siw run; true once the guest
# is up
siw_boot() {
  local cache=${SIWVM_CACHE:-$HERE/build/siwvm} cond name peer link netem arm run k=0 end ns pid
  [ "$(id -u)" = 0 ] || siw_skip "needs root (a namespace and a TAP)"
  [ -c /dev/net/tun ] || siw_skip "no /dev/net/tun"
  command -v qemu-system-x86_64 > /dev/null || siw_skip "no qemu-system-x86_64 (scripts/install-deps.sh)"
  [ -s "$cache/vmlinuz" ] && [ -s "$cache/initramfs.cpio.gz" ] || siw_skip "no VM image in $cache (scripts/siwvm/build.sh)"
  source "$HERE/scripts/siwvm/signatures.sh"
  # a namespace left by an earlier run that was killed (SIGKILL runs no trap): its script is gone
  # (its PID is no live beyond-holes-bench.sh, or is ours: we have not made ours yet)
  for ns in $(ip netns list 2>/dev/null | grep -oE '^rnic-bhsiw-[0-9]+'); do
    pid=${ns#rnic-bhsiw-}
    if [ "$pid" = $$ ] || ! grep -q beyond-holes-bench "/proc/$pid/cmdline" 2>/dev/null; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; ip netns del "$ns" 2>/dev/null
    fi
  done
  SIW_NS=rnic-bhsiw-$$
  ip netns add "$SIW_NS" 2>/dev/null || { SIW_NS=""; siw_skip "cannot make a network namespace"; }
  ip -n "$SIW_NS" link set lo up
  ip netns exec "$SIW_NS" ip tuntap add dev tap0 mode tap 2>/dev/null || siw_skip "cannot make a TAP device"
  ip -n "$SIW_NS" addr add 10.0.2.2/24 dev tap0 && ip -n "$SIW_NS" link set tap0 up || siw_skip "cannot set up tap0"
  rm -rf "$SIW_RES"; mkdir -p "$SIW_RES/out"
  for cond in "${conditions[@]}"; do
    IFS='|' read -r name peer link netem <<< "$cond"
    [ "$peer" = siw ] || continue
    for arm in $ARMS; do
      for run in $(seq 1 "$RUNS"); do
        k=$((k + 1))
        echo "s$k cli $((19000 + k)) 65535 $SIW_PINGS" >> "$SIW_RES/plan.txt"
        echo "$netem" > "$SIW_RES/s$k.netem"
      done
    done
  done
  # A run is bounded by CASE_TIMEOUT in the guest; the VM by all of them.
  SIW_CASE_TIMEOUT=$((60 + SIW_PINGS / 2))
  ip netns exec "$SIW_NS" env SIWVM_CACHE="$cache" SIWVM_RESULTS="$SIW_RES" SIWVM_TAP=tap0 \
    SIWVM_TIMEOUT=$((120 + k * (SIW_CASE_TIMEOUT + 10))) \
    bash "$HERE/scripts/siwvm/run.sh" interop CASE_TIMEOUT=$SIW_CASE_TIMEOUT \
    SCEN_TIMEOUT=$((100 + k * (SIW_CASE_TIMEOUT + 10))) GUEST_CAPTURE=off > "$SIW_RES/run.log" 2>&1 &
  SIW_VM=$!
  end=$((SECONDS + 150))
  while [ ! -e "$SIW_RES/out/guest-up" ]; do
    if [ $SECONDS -ge $end ] || ! kill -0 "$SIW_VM" 2>/dev/null; then
      # QEMU and the image are here: a VM that does not boot on the TAP is a failure, not a skip
      echo "beyond-holes-bench: the siw VM never came up on the TAP:"; tail -15 "$SIW_RES/console.log" 2>/dev/null | sed 's/^/    /'
      siw_cleanup; exit 1
    fi
    sleep 0.2
  done
  echo "beyond-holes-bench: siw VM up after $((SECONDS + 150 - end)) s; $k run(s) planned"
}
SIW_K=0
run_siw() {  # NAME ARM RUN: the next line of the VM's plan
  local id port holes slog spid rc good before after grc glog drops end
  SIW_K=$((SIW_K + 1)); id=s$SIW_K; port=$((19000 + SIW_K))
  holes=$OUT/holes/siw-$(tagof "$1")-$2-$3.csv; slog=$SIW_RES/$id.server.log
  if ! kill -0 "$SIW_VM" 2>/dev/null; then  # no guest left to send: do not wait for one
    echo "[$n/$total] $1, $2, run $3: FAILED: the siw VM is gone ($(tail -1 "$SIW_RES/run.log" 2>/dev/null))"
    failed=1; return
  fi
  read -r -a before < <(tcp_counters "$SIW_NS")
  ip netns exec "$SIW_NS" timeout -k 5 $((SIW_CASE_TIMEOUT + 10)) "$RNIC" ping --server --bind 10.0.2.2 \
    --port "$port" --real-segments tap0 --beyond-holes "$2" --hole-times "$holes" --timeout 60000 \
    > "$slog" 2>&1 &
  spid=$!
  for _ in $(seq 1 100); do
    ip netns exec "$SIW_NS" ss -ltnH "sport = :$port" | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  : > "$SIW_RES/$id.go"  # the guest starts its rping client (it waits for this even if we failed)
  wait "$spid"; rc=$?
  : > "$SIW_RES/$id.done"
  end=$((SECONDS + 30))
  while [ ! -e "$SIW_RES/out/$id.guest.rc" ] && [ $SECONDS -lt $end ] && kill -0 "$SIW_VM" 2>/dev/null; do sleep 0.1; done
  read -r -a after < <(tcp_counters "$SIW_NS")
  grc=$(cat "$SIW_RES/out/$id.guest.rc" 2>/dev/null || echo none); glog=$SIW_RES/out/$id.guest.log
  drops=$(sed -nE 's/.*dropped ([0-9]+).*/\1/p' "$SIW_RES/out/$id.netem.txt" 2>/dev/null | head -1)
  local retrans
  retrans=$(( $(retrans_segs "$SIW_RES/out/$id.snmp.after") - $(retrans_segs "$SIW_RES/out/$id.snmp.before") ))
  good=$(val "$(cat "$slog")" "pings served in [0-9.]+ s: ([0-9.]+) MB/s")
  local verdict=""
  if [ "$grc" = 255 ] && rping_exit_race "$glog" 255; then grc=0; fi
  if [ "$grc" != 0 ]; then verdict="siw's rping client: exit $grc ($(tail -1 "$glog" 2>/dev/null))"
  elif rping_client_cut "$glog"; then verdict="siw's rping client was cut short: $(grep -m1 'wait for' "$glog")"
  elif [ $rc != 0 ] || ! grep -q "^server done: $SIW_PINGS pings served in" "$slog"; then verdict="our server: exit $rc"
  elif [ -z "$good" ] || ! complete "$(cat "$slog")" "$holes"; then verdict="our server printed no goodput or segment path"
  elif untapped "$(cat "$slog")"; then verdict="our server's tap handed its segment path no segment of the connection (did it see the SYN?)"
  fi
  if [ -n "$verdict" ]; then
    echo "[$n/$total] $1, $2, run $3: FAILED: $verdict"; tail -8 "$slog" | sed 's/^/    ours: /'
    tail -4 "$glog" 2>/dev/null | sed 's/^/    siw: /'
    failed=1; return
  fi
  record "$1" "$2" "$3" "$good" $((after[2] - before[2])) $((after[1] - before[1])) "$retrans" "$(cat "$slog")"
  echo "    siw's egress netem dropped ${drops:-?} frames; rping -V: every octet came back"
}

for cond in "${conditions[@]}"; do
  IFS='|' read -r name peer link netem <<< "$cond"
  [ "$peer" = siw ] && [ -z "$SIW_VM" ] && siw_boot
  for arm in $ARMS; do
    for run in $(seq 1 "$RUNS"); do
      n=$((n + 1))
      if [ "$peer" = siw ]; then run_siw "$name" "$arm" "$run"; else run_rnic "$name" "$link" "$arm" "$run"; fi
    done
  done
done
if [ -n "$SIW_VM" ]; then
  # the guest has gone through its plan: the VM powers off by itself
  for _ in $(seq 1 300); do kill -0 "$SIW_VM" 2>/dev/null || break; sleep 0.1; done
  cp "$SIW_RES/console.log" "$SIW_RES/out/" 2>/dev/null
  siw_cleanup
fi
[ "$(wc -l < "$CSV")" -gt 1 ] || { echo "beyond-holes-bench: no run succeeded"; exit 1; }

# The table: per condition and arm, medians over the runs; hole times pooled over the runs.
# pooled COND_TAG ARM: "count p50 p99" of every hole timed in those runs (microseconds).
pooled() {
  cat "$OUT"/holes/"$1"-"$2"-*.csv 2>/dev/null | grep -v '^octets' | cut -d, -f2 | sort -n |
    awk '{ v[NR] = $1 } END {
      if (!NR) { print 0, "-", "-"; exit }
      r50 = int(0.50 * NR + 0.999999); r99 = int(0.99 * NR + 0.999999)
      printf "%d %.1f %.1f\n", NR, v[r50] / 1000, v[r99] / 1000 }'
}
median_col() {  # COND ARM COLUMN: the median of a column of runs.csv over the runs
  awk -F, -v c="$1" -v a="$2" -v k="$3" 'NR > 1 && $1 == c && $2 == a { print $k }' "$CSV" | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
{
  echo "| condition | arm | runs | goodput MB/s | segments the kernel queued out of order, % | holes opened | FPDUs placed beyond | peak held KB | copies into reassembly per octet | holes timed | hole closed -> delivered p50 µs | p99 µs |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for cond in "${conditions[@]}"; do
    IFS='|' read -r name peer _ <<< "$cond"; tag=$peer-$(tagof "$name")
    for arm in $ARMS; do
      runs=$(awk -F, -v c="$name" -v a="$arm" 'NR > 1 && $1 == c && $2 == a' "$CSV" | wc -l)
      [ "$runs" -gt 0 ] || continue
      peak=$(median_col "$name" "$arm" 10)
      read -r cnt p50 p99 < <(pooled "$tag" "$arm")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$arm" "$runs" \
        "$(median_col "$name" "$arm" 4)" "$(median_col "$name" "$arm" 5)" "$(median_col "$name" "$arm" 7)" \
        "$(median_col "$name" "$arm" 8)" "$(awk -v p="$peak" 'BEGIN { printf "%.0f", p / 1024 }')" \
        "$(median_col "$name" "$arm" 11)" "$cnt" "$p50" "$p99"
    done
  done
  echo
  per=()
  case " $PEERS " in *" rnic "*) per+=("rnic: $((16 * LOOP)) MiB of 1 MiB Writes per run, markers $MARKERS") ;; esac
  case " $PEERS " in *" siw "*) per+=("siw: $SIW_PINGS rping pings of 65535 octets per run (Read Responses from siw's VM, TCG), markers off") ;; esac
  echo "Medians over the runs; hole times pooled over every hole of the runs. $(date -u +%Y-%m-%d), $(nproc) cores; $(IFS=';'; echo "${per[*]}" | sed 's/;/; /g')."
} > "$OUT/table.md"
cat "$OUT/table.md"

# The plot: hole closed -> delivered (p50 and p99, pooled over every condition and run) against
# the octets beyond the hole, by powers of two, per peer and arm; and each arm's goodput per
# condition.
if command -v gnuplot > /dev/null; then
  for peer in $PEERS; do for arm in $ARMS; do
    cat "$OUT"/holes/"$peer"-*-"$arm"-*.csv 2>/dev/null | grep -v '^octets' |
      awk -F, '$1 > 0 { b = int(log($1) / log(2)); print b, $2 }' | sort -k1,1n -k2,2n |
      awk '{ k[NR] = $1; v[NR] = $2 } END {
        i = 1
        while (i <= NR) {
          j = i; while (j < NR && k[j + 1] == k[i]) j++
          m = j - i + 1
          if (m >= 5) printf "%d %.1f %.1f %d\n", 2 ^ k[i], v[i + int(0.50 * m + 0.999999) - 1] / 1000,
                             v[i + int(0.99 * m + 0.999999) - 1] / 1000, m
          i = j + 1
        }
      }' > "$OUT/buckets-$peer-$arm.dat"
  done; done
  awk -F, 'NR > 1 { print }' "$CSV" > "$OUT/runs.dat"
  {
    echo "set terminal pngcairo size 1400,560 font ',10'"
    echo "set output '$OUT/beyond-holes.png'"
    echo "set multiplot layout 1,2 title 'Data beyond real TCP holes: place, hold or discard (senders: ${PEERS// /, }; receiver: ours with --real-segments)'"
    echo "set logscale xy; set grid; set key top left"
    echo "set xlabel 'octets beyond the hole when it closed (bucket: at least)'; set ylabel 'hole closed -> octets beyond delivered, µs'"
    echo "set title 'p50 (solid) and p99 (dashed), holes pooled over conditions and runs'"
    plot="plot"
    c=1
    for peer in $PEERS; do for arm in $ARMS; do
      [ -s "$OUT/buckets-$peer-$arm.dat" ] || continue
      plot+=" '$OUT/buckets-$peer-$arm.dat' using 1:2 with linespoints lc $c dt 1 title '$peer $arm p50', '' using 1:3 with linespoints lc $c dt 2 title '$peer $arm p99',"
      c=$((c + 1))
    done; done
    [ "$plot" = plot ] && plot="plot 1 title 'no holes timed'"
    echo "${plot%,}"
    echo "unset logscale; set logscale y 10; set grid; set key below horizontal; set style data histograms"
    echo "set style histogram clustered; set style fill solid 0.7; set boxwidth 0.9"
    echo "set xlabel 'condition'; set ylabel 'goodput MB/s (median over runs)'; set title 'goodput'; set xtics rotate by -20"
    echo "unset logscale y; set yrange [0:*]"
    # one column per arm: the medians
    for arm in $ARMS; do
      for cond in "${conditions[@]}"; do
        name=${cond%%|*}; echo "\"$name\" $(median_col "$name" "$arm" 4)"
      done > "$OUT/goodput-$arm.dat"
    done
    plot="plot"
    for arm in $ARMS; do plot+=" '$OUT/goodput-$arm.dat' using 2:xtic(1) title '$arm',"; done
    echo "${plot%,}"
    echo "unset multiplot"
  } > "$OUT/plot.gp"
  if gnuplot "$OUT/plot.gp" 2> "$OUT/gnuplot.err"; then
    echo "plot: $OUT/beyond-holes.png"
  else
    echo "beyond-holes-bench: gnuplot failed: $(head -3 "$OUT/gnuplot.err")"; failed=1
  fi
else
  echo "plot: not made: gnuplot is not installed (apt-get install gnuplot-nox)"
fi
exit $failed
