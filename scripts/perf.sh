#!/usr/bin/env bash
# scripts/perf.sh - issue 15's benchmark run: the field's own tools (qperf, perftest) unmodified
# over the drop-in libraries (`rnic run -- PROG`), plus rnic_bench and `rnic enlarge-bench`, each
# figure compared with raw TCP measured in the SAME pass. These machines are shared and noisy:
# passes are interleaved (every test once per pass), figures are medians over the passes, and
# each ratio is the median of the per-pass ratios. See docs/performance.md for the columns.
set -uo pipefail  # no -e: a failing case is reported, recorded as failed, and the run goes on

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELP="Usage: scripts/perf.sh [--quick] [--passes N] [--sizes LIST] [--out DIR] [--only LIST] [--crc POLICY]
  --passes N     passes; each runs every selected test once (default 3)
  --sizes LIST   message sizes, comma-separated, K/M suffixes (default 8,64,256,1K,4K,16K,64K,256K,1M):
                 qperf's -m sweep, the perftest rows shown and enlarge-bench's --sizes
  --out DIR      where results go (default <repo>/build/perf): perf.md (table), results.csv
                 (medians), raw.tsv (every pass), qperf.png and perftest.png, logs/
  --only LIST    families to run, comma-separated (default all):
                 qperf, perftest, scale (ib_write_bw -q 1/4/16/64), rnic_bench, enlarge, memory
  --crc POLICY   the drop-in's and enlarge-bench's CRC32c policy: required (default: CRC on, as
                 issue 15's bandwidth targets say), optional (off unless the peer asks), off
  --quick        a smoke run: sizes 64,64K, 1 pass, short tests, perftest at -s SIZE instead of
                 its -a sweep, scale with 1 and 4 QPs only (explicit options still win)
Env: RNIC (default <repo>/build/rnic), RNIC_BENCH (default <repo>/build/bench/rnic_bench),
     PORT_BASE (default 20000 + a per-process offset, below the ephemeral ports; uses PORT_BASE..PORT_BASE+40)"

die() { echo "perf.sh: $*" >&2; exit 2; }
say() { echo "perf.sh: $*" >&2; }

PASSES=3 SIZES="8,64,256,1K,4K,16K,64K,256K,1M" OUT="$SRC/build/perf" CRC=required
ONLY="qperf,perftest,scale,rnic_bench,enlarge,memory" QUICK=0 set_passes=0 set_sizes=0
while (($#)); do
  case $1 in
    --help | -h) echo "$HELP"; exit 0 ;;
    --quick) QUICK=1 ;;
    --passes) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--passes needs a positive integer"; PASSES=$2; set_passes=1; shift ;;
    --sizes) [[ ${2:-} =~ ^[0-9]+[KM]?(,[0-9]+[KM]?)*$ ]] || die "--sizes needs sizes like 64,4K,1M"; SIZES=$2; set_sizes=1; shift ;;
    --out) [[ -n ${2:-} ]] || die "--out needs a directory"; OUT=$2; shift ;;
    --only) [[ ${2:-} =~ ^(qperf|perftest|scale|rnic_bench|enlarge|memory)(,(qperf|perftest|scale|rnic_bench|enlarge|memory))*$ ]] ||
              die "--only takes qperf,perftest,scale,rnic_bench,enlarge,memory (comma-separated)"; ONLY=$2; shift ;;
    --crc) [[ ${2:-} =~ ^(required|optional|off)$ ]] || die "--crc takes required, optional or off"; CRC=$2; shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

# Per-test effort. qperf's -t takes whole seconds only (0.5 never ends in qperf 0.4.11).
QT=2 PT_ITERS=200 PT_BW_ITERS=1000 SCALE_SECONDS=3 SCALE_QPS="1 4 16 64" BENCH_ARGS=(--reps 1) ENLARGE_ARGS=()
if ((QUICK)); then
  ((set_passes)) || PASSES=1
  ((set_sizes)) || SIZES="64,64K"
  QT=1 PT_ITERS=50 PT_BW_ITERS=50 SCALE_SECONDS=1 SCALE_QPS="1 4"
  BENCH_ARGS=(--reps 1 --mib 16 --messages 6400 --pingpongs 500) ENLARGE_ARGS=(--quick)
fi
bytes() { awk -v s="$1" 'BEGIN { n = s + 0; u = substr(s, length(s)); if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; print n }'; }
SIZE_BYTES=()
for s in ${SIZES//,/ }; do SIZE_BYTES+=("$(bytes "$s")"); done
SIZES_CSV=$(IFS=,; echo "${SIZE_BYTES[*]}")

# Tools first: one line naming what is missing.
RNIC="${RNIC:-$SRC/build/rnic}"
RNIC_BENCH="${RNIC_BENCH:-$SRC/build/bench/rnic_bench}"
[[ -x $RNIC ]] || die "$RNIC missing: cmake --build build --target rnic dropin"
DROPIN_DIR="$(dirname "$RNIC")/verbs_abi/lib"
if want qperf || want perftest || want scale; then
  [[ -e $DROPIN_DIR/libibverbs.so.1 ]] || die "$DROPIN_DIR/libibverbs.so.1 missing: cmake --build build --target dropin"
fi
! want rnic_bench || [[ -x $RNIC_BENCH ]] || die "$RNIC_BENCH missing: cmake --build build --target rnic_bench"
needed=(timeout awk gnuplot)
want qperf || want perftest || want scale && needed+=(qperf)
want perftest || want scale && needed+=(ib_write_bw ib_send_lat ib_read_lat)
for p in "${needed[@]}"; do
  command -v "$p" > /dev/null || die "$p missing: install it with scripts/install-deps.sh"
done

LOGS="$OUT/logs"
mkdir -p "$LOGS" || die "cannot create $LOGS"
rm -f "$LOGS"/*.log "$LOGS"/*.csv
RAW="$OUT/raw.tsv"
printf 'pass\tfamily\ttest\tsize\tmetric\tvalue\tunit\tbaseline\tratio\tdiff\tstatus\tlog\n' > "$RAW"
# Listening ports below Linux's ephemeral range (32768-60999 by default), where the many
# connections of a run would otherwise take them; per process, so two runs do not collide.
PORT_BASE="${PORT_BASE:-$((20000 + ($$ % 250) * 50))}"
QPORT=$PORT_BASE PORT_N=0 QSERVER=""
next_port() { PORT_N=$((PORT_N + 1)); PORT=$((PORT_BASE + 1 + PORT_N % 39)); }

cleanup() {  # only the processes this script started
  [[ -n $QSERVER ]] && kill "$QSERVER" 2> /dev/null
  wait 2> /dev/null
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# rec PASS FAMILY TEST SIZE METRIC VALUE UNIT BASELINE LOG: one row of raw.tsv. VALUE "" means the
# case failed: it is recorded as failed (never dropped) and one line says where its log is.
rec() {
  local pass=$1 fam=$2 test=$3 size=$4 metric=$5 v=$6 unit=$7 base=${8:--} log=$9 ratio=- diff=-
  if [[ -z $v ]]; then
    printf '%s\t%s\t%s\t%s\t%s\t-\t%s\t-\t-\t-\tfailed\t%s\n' "$pass" "$fam" "$test" "$size" "$metric" "$unit" "$log" >> "$RAW"
    say "FAILED $fam $test${size:+ size $size} (pass $pass): see $log"
    return
  fi
  if [[ $base != - && -n $base ]]; then
    read -r ratio diff < <(awk -v m="$metric" -v v="$v" -v b="$base" 'BEGIN {
      if (v <= 0 || b <= 0) { print "- -"; exit }
      if (m == "lat") printf "%.4f %.3f\n", b / v, v - b; else printf "%.4f -\n", v / b }')
  else base=-; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\tok\t%s\n' "$pass" "$fam" "$test" "$size" "$metric" "$v" "$unit" "$base" "$ratio" "$diff" "$log" >> "$RAW"
}
# lookup PASS FAMILY TEST SIZE: a figure recorded earlier in this pass ("" if none)
lookup() { awk -F'\t' -v p="$1" -v f="$2" -v t="$3" -v s="$4" '$1 == p && $2 == f && $3 == t && $4 == s && $11 == "ok" { v = $6 } END { print v }' "$RAW"; }

qperf_server() {  # (re)starts the qperf server under the drop-in if it is not running
  [[ -n $QSERVER ]] && kill -0 "$QSERVER" 2> /dev/null && return
  timeout 7200 "$RNIC" run --rnr-wait 1000 --crc "$CRC" -- qperf -lp "$QPORT" >> "$LOGS/qperf-server.log" 2>&1 &
  QSERVER=$!
  sleep 1
}

# One qperf client per size and pass: raw TCP first, then the rc_* tests, all at -m SIZE.
run_qperf() {
  local pass=$1 size=$2 tests=(tcp_bw tcp_lat) t v log out
  want qperf && tests+=(rc_bw rc_lat rc_rdma_write_bw rc_rdma_write_lat rc_rdma_read_bw rc_rdma_read_lat)
  log="$LOGS/qperf-p$pass-$size.log"
  say "pass $pass/$PASSES: qperf ${tests[*]} at $size B"
  qperf_server
  timeout $((${#tests[@]} * (QT + 15) + 30)) "$RNIC" run --rnr-wait 1000 --crc "$CRC" -- \
    qperf -cm1 -lp "$QPORT" -t "$QT" -m "$size" 127.0.0.1 "${tests[@]}" > "$log" 2>&1 ||
    say "qperf at $size B exited with status $? (pass $pass): see $log"
  out=$(awk -f "$SRC/scripts/perf/qperf.awk" "$log")
  for t in "${tests[@]}"; do
    v=$(awk -v t="$t" '$1 == t { print $2 }' <<< "$out")
    case $t in
      tcp_*) rec "$pass" tcp "$t" "$size" "${t##*_}" "$v" "$([[ $t == *bw ]] && echo MB/s || echo us)" - "$log" ;;
      *_bw) rec "$pass" qperf "$t" "$size" bw "$v" MB/s "$(lookup "$pass" tcp tcp_bw "$size")" "$log" ;;
      *) rec "$pass" qperf "$t" "$size" lat "$v" us "$(lookup "$pass" tcp tcp_lat "$size")" "$log" ;;
    esac
  done
}

# run_pair NAME PROG ARGS...: a perftest server and client under the drop-in; the client's log
# path in LOG; status 0 when both ended well.
# RUN_FLAGS (an array) adds `rnic run` flags to both sides (the busy-poll variants).
RUN_FLAGS=()
run_pair() {
  local name=$1 prog=$2 spid crc src try
  shift 2
  LOG="$LOGS/$name.client.log"
  for try in 1 2 3; do  # a server that ended at once could not listen there: the next port
    next_port
    timeout 600 "$RNIC" run --crc "$CRC" "${RUN_FLAGS[@]}" -- "$prog" -R -F -d rnic0 -p "$PORT" "$@" > "$LOGS/$name.server.log" 2>&1 &
    spid=$!
    sleep 1
    kill -0 "$spid" 2> /dev/null && break
    ((try < 3)) && say "$prog server on port $PORT ended at once (see $LOGS/$name.server.log): trying the next port"
  done
  timeout 600 "$RNIC" run --crc "$CRC" "${RUN_FLAGS[@]}" -- "$prog" -R -F -d rnic0 -p "$PORT" "$@" 127.0.0.1 > "$LOG" 2>&1
  crc=$?
  for _ in $(seq 1 100); do kill -0 "$spid" 2> /dev/null || break; sleep 0.1; done
  kill "$spid" 2> /dev/null  # a server whose client failed waits for it forever
  wait "$spid"
  src=$?
  ((crc == 0 && src == 0)) && return 0
  say "$prog $* exited with status $crc (client), $src (server): see $LOG and ${LOG%client.log}server.log"
  return 1
}

# perftest's -a sweep (2 B .. 8 MiB) once per program and pass; --quick runs -s SIZE per size.
# The latency tests run twice: as they are, and with `rnic run --busy-poll` (recorded as
# ib_send_lat_busypoll, ib_read_lat_busypoll): the thread that polls the CQ receives itself.
run_perftest() {
  local pass=$1 prog rows s v kind runs run iters variant test
  for variant in ib_write_bw ib_send_lat ib_send_lat+busypoll ib_read_lat ib_read_lat+busypoll; do
    prog=${variant%%+*} test=${variant/+/_}
    RUN_FLAGS=()
    [[ $variant == *+busypoll ]] && RUN_FLAGS=(--busy-poll)
    kind=$([[ $prog == *_bw ]] && echo bw || echo lat)
    iters=$([[ $kind == bw ]] && echo "$PT_BW_ITERS" || echo "$PT_ITERS")
    if ((QUICK)); then runs=("${SIZE_BYTES[@]}"); else runs=(a); fi
    for run in "${runs[@]}"; do
      if [[ $run == a ]]; then
        say "pass $pass/$PASSES: $prog -a -n $iters ${RUN_FLAGS[*]}"
        run_pair "$test-p$pass" "$prog" -a -n "$iters"
      else
        say "pass $pass/$PASSES: $prog -s $run -n $iters ${RUN_FLAGS[*]}"
        run_pair "$test-p$pass-$run" "$prog" -s "$run" -n "$iters"
      fi
      rows=$(awk -v kind="$kind" -f "$SRC/scripts/perf/perftest.awk" "$LOG")
      # Every size qperf ran that this run covers must have a row (else it is recorded failed).
      for s in "${SIZE_BYTES[@]}"; do
        if [[ $run == a ]]; then ((s >= 2 && s <= 8388608)) || continue; else ((s == run)) || continue; fi
        awk -v s="$s" '$1 == s { f = 1 } END { exit !f }' <<< "$rows" || rows+=$'\n'"$s"
      done
      while read -r s v _; do
        [[ -n $s ]] || continue
        if [[ $kind == bw ]]; then
          rec "$pass" perftest "$test" "$s" bw "$v" MB/s "$(lookup "$pass" tcp tcp_bw "$s")" "$LOG"
        else
          rec "$pass" perftest "$test" "$s" lat "$v" us "$(lookup "$pass" tcp tcp_lat "$s")" "$LOG"
        fi
      done <<< "$rows"
    done
  done
  RUN_FLAGS=()
  # Issue 15's rate target: 64-byte RDMA Writes for a fixed time (a -n run of small messages
  # lasts milliseconds), against qperf tcp_bw's 64-byte rate (one send() per message).
  # Again under `rnic run --busy-poll` (ib_write_rate_busypoll): the WRs posted between two
  # polls of the CQ leave in one gather write (docs/progress-model.md "Posts batched by the poll").
  local variant
  for variant in ib_write_rate ib_write_rate+busypoll; do
    RUN_FLAGS=()
    [[ $variant == *+busypoll ]] && RUN_FLAGS=(--busy-poll)
    say "pass $pass/$PASSES: ib_write_bw -s 64 -D $SCALE_SECONDS ${RUN_FLAGS[*]}"
    v=""
    run_pair "${variant/+/_}-p$pass" ib_write_bw -s 64 -D "$SCALE_SECONDS" &&
      v=$(awk -v kind=bw -f "$SRC/scripts/perf/perftest.awk" "$LOG" | awk '$1 == 64 { print $3 }')
    rec "$pass" perftest "${variant/+/_}" 64 rate "$v" "M msg/s" \
      "$(awk -v b="$(lookup "$pass" tcp tcp_bw 64)" 'BEGIN { if (b != "") print b / 64 }')" "$LOG"
  done
  RUN_FLAGS=()
}

run_scale() {
  local pass=$1 q v base
  base=$(lookup "$pass" tcp tcp_bw 65536)
  if [[ -z $base ]]; then  # 64 KiB not swept by qperf in this pass: raw TCP at 64 KiB now
    local log="$LOGS/qperf-scale-p$pass.log"
    qperf_server
    timeout $((QT + 45)) "$RNIC" run --crc "$CRC" -- qperf -lp "$QPORT" -t "$QT" -m 65536 127.0.0.1 tcp_bw > "$log" 2>&1
    rec "$pass" tcp tcp_bw 65536 bw "$(awk -f "$SRC/scripts/perf/qperf.awk" "$log" | awk '$1 == "tcp_bw" { print $2 }')" MB/s - "$log"
    base=$(lookup "$pass" tcp tcp_bw 65536)
  fi
  for q in $SCALE_QPS; do
    say "pass $pass/$PASSES: ib_write_bw -q $q -s 65536 -D $SCALE_SECONDS"
    v=""
    run_pair "scale-q$q-p$pass" ib_write_bw -q "$q" -s 65536 -D "$SCALE_SECONDS" &&
      v=$(awk -v kind=bw -f "$SRC/scripts/perf/perftest.awk" "$LOG" | awk '$1 == 65536 { print $2 }')
    rec "$pass" scale "ib_write_bw_q$q" 65536 bw "$v" MB/s "$base" "$LOG"
  done
}

# rnic_bench prints "MEASUREMENT (UNIT)  RNIC  TCP  RATIOx" rows, the ratio oriented like ours.
run_rnic_bench() {
  local pass=$1
  local log="$LOGS/rnic_bench-p$pass.log" name unit v base ratio metric
  say "pass $pass/$PASSES: rnic_bench ${BENCH_ARGS[*]}"
  timeout 900 "$RNIC_BENCH" "${BENCH_ARGS[@]}" > "$log" 2>&1 || say "rnic_bench exited with status $? (pass $pass): see $log"
  local rows
  rows=$(awk 'NF >= 4 && $NF ~ /^[0-9.]+x$/ && $(NF-1) ~ /^[0-9.]+$/ && $(NF-2) ~ /^[0-9.]+$/ {
      name = ""; for (i = 1; i <= NF - 3; i++) name = name " " $i
      unit = name; sub(/.*\(/, "", unit); sub(/\).*/, "", unit); sub(/ *\(.*/, "", name)
      gsub(/[^A-Za-z0-9]+/, "_", name); gsub(/^_|_$/, "", name); gsub(/ /, "", unit)
      print name, unit, $(NF-2), $(NF-1), substr($NF, 1, length($NF) - 1) }' "$log")
  [[ -n $rows ]] || { rec "$pass" rnic_bench rnic_bench - - "" - - "$log"; return; }
  while read -r name unit v base ratio; do
    case $unit in MB/s) metric=bw ;; us) metric=lat ;; *) metric=rate ;; esac
    rec "$pass" rnic_bench "$name" - "$metric" "$v" "$unit" "$base" "$log"
  done <<< "$rows"
}

# enlarge-bench's CSV: speed rows "speed,SCHEME,1,,SIZE,...,latency_median_us(14),...,
# throughput_MBps(16),..."; the tcp scheme is its raw TCP of the same run.
run_enlarge() {
  local pass=$1
  local log="$LOGS/enlarge-p$pass.log" csv="$LOGS/enlarge-p$pass.csv" s lat tput tlat ttput rw
  say "pass $pass/$PASSES: rnic enlarge-bench --part speed --schemes enlarge --sizes $SIZES ${ENLARGE_ARGS[*]}"
  timeout 900 "$RNIC" enlarge-bench --part speed --schemes enlarge --sizes "$SIZES" --crc "$CRC" \
    "${ENLARGE_ARGS[@]}" --csv "$csv" --png '' > "$log" 2>&1 || say "enlarge-bench exited with status $? (pass $pass): see $log"
  for s in "${SIZE_BYTES[@]}"; do
    read -r lat tput tlat ttput < <(awk -F, -v s="$s" '$1 == "speed" && $5 == s {
        if ($2 == "enlarge") { l = $14; t = $16 } else if ($2 == "tcp") { tl = $14; tt = $16 } }
        END { print (l == "" ? "-" : l), (t == "" ? "-" : t), (tl == "" ? "-" : tl), (tt == "" ? "-" : tt) }' "$csv" 2> /dev/null || echo "- - - -")
    [[ $lat == - ]] && lat="" ; [[ $tput == - ]] && tput=""
    rec "$pass" enlarge enlarge_latency "$s" lat "$lat" us "$tlat" "$log"
    rec "$pass" enlarge enlarge_throughput "$s" bw "$tput" MB/s "$ttput" "$log"
    rw=$(lookup "$pass" qperf rc_rdma_write_bw "$s")
    ((s >= 65536)) && [[ -n $rw && -n $tput ]] &&
      rec "$pass" enlarge enlarge_throughput_vs_rc_rdma_write_bw "$s" bw "$tput" MB/s "$rw" "$log"
  done
}

# Memory per idle connection: enlarge-bench's memory part with 1 and 64 idle connections (one QP
# at each end, client in one process and server in another). Its rss_bytes_per_connection is
# the growth of the two processes' VmRSS together since each process started, divided by N:
# at N = 1 that is mostly the fixed cost (engine thread, buffers); the marginal figure
# (growth(64) - growth(1)) / 63 / 2 is what one more idle QP costs one process.
run_memory() {
  local pass=$1
  local log="$LOGS/memory-p$pass.log" csv="$LOGS/memory-p$pass.csv" g1 g64 reg
  say "pass $pass/$PASSES: rnic enlarge-bench --part memory --connections 1,64"
  timeout 900 "$RNIC" enlarge-bench --part memory --connections 1,64 --crc "$CRC" --csv "$csv" --png '' \
    > "$log" 2>&1 || say "enlarge-bench (memory) exited with status $? (pass $pass): see $log"
  field() { awk -F, -v n="$1" -v c="$2" '$1 == "memory" && $2 == "enlarge" && $3 == n && $4 == "idle" { print $c }' "$csv" 2> /dev/null; }
  g1=$(field 1 12) g64=$(field 64 12) reg=$(field 64 8)
  rec "$pass" memory rss_growth_per_connection_N1 - bytes "$(awk -v g="$g1" 'BEGIN { if (g != "") print g / 1024 }')" KiB - "$log"
  rec "$pass" memory rss_growth_per_connection_N64 - bytes "$(awk -v g="$g64" 'BEGIN { if (g != "") print g / 1024 }')" KiB - "$log"
  rec "$pass" memory rss_marginal_per_idle_qp - bytes \
    "$(awk -v a="$g1" -v b="$g64" 'BEGIN { if (a != "" && b != "") print (b * 64 - a) / 63 / 2 / 1024 }')" KiB - "$log"
  rec "$pass" memory registered_per_connection_N64 - bytes "$(awk -v g="$reg" 'BEGIN { if (g != "") print g / 1024 }')" KiB - "$log"
}

started=$(date +%s)
say "passes $PASSES, sizes $SIZES, families $ONLY, CRC $CRC; results in $OUT"
for pass in $(seq 1 "$PASSES"); do
  if want qperf || want perftest; then
    for s in "${SIZE_BYTES[@]}"; do run_qperf "$pass" "$s"; done
  fi
  want perftest && run_perftest "$pass"
  want scale && run_scale "$pass"
  want rnic_bench && run_rnic_bench "$pass"
  want enlarge && run_enlarge "$pass"
  want memory && run_memory "$pass"
  say "pass $pass/$PASSES done ($(($(date +%s) - started)) s so far)"
done

awk -v mode=csv -f "$SRC/scripts/perf/summarize.awk" "$RAW" > "$OUT/results.csv"
{
  echo "Median of $PASSES pass(es), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average" \
    "$(cut -d' ' -f1-3 /proc/loadavg) at the end; CRC $CRC; commit $(git -C "$SRC" rev-parse --short HEAD 2> /dev/null || echo unknown)."
  echo "Command: scripts/perf.sh --passes $PASSES --sizes $SIZES --only $ONLY --crc $CRC$( ((QUICK)) && echo ' --quick')"
  echo
  echo "#### Issue 15's targets"
  echo
  awk -f "$SRC/scripts/perf/targets.awk" "$OUT/results.csv"
  awk -v mode=md -v sizes="$SIZES_CSV" -f "$SRC/scripts/perf/summarize.awk" "$RAW"
} > "$OUT/perf.md"
bash "$SRC/scripts/perf/plot.sh" "$OUT/results.csv" "$OUT"
failed=$(awk -F'\t' 'NR > 1 && $11 == "failed"' "$RAW" | wc -l)
cat "$OUT/perf.md"
say "done in $(($(date +%s) - started)) s: $OUT/perf.md, $OUT/results.csv, $OUT/raw.tsv, PNGs in $OUT; $failed failed case(s)"
