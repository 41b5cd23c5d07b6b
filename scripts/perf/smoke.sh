#!/usr/bin/env bash
# scripts/perf/smoke.sh BUILD_DIR - ctest's Perf.QuickSmoke: `scripts/perf.sh --quick` against
# BUILD_DIR's binaries, then checks that its outputs exist and parse (never the figures, which
# belong to benchmarks): perf.md has the targets table and a table per family; results.csv and
# raw.tsv have their columns on every row, numbers where a figure was measured, and every family
# has at least one measured figure; qperf.png and perftest.png are PNG files.
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build=${1:?usage: smoke.sh BUILD_DIR}
out="$build/perf-smoke"
fail() { echo "Perf.QuickSmoke: $*" >&2; exit 1; }

families=qperf,perftest,scale,rnic_bench,enlarge,memory
if [[ ! -x $build/bench/rnic_bench ]]; then
  echo "Perf.QuickSmoke: $build/bench/rnic_bench not built (-DIWARP_BUILD_BENCH=OFF): rnic_bench left out" >&2
  families=qperf,perftest,scale,enlarge,memory
fi
rm -rf "$out"
RNIC="$build/rnic" RNIC_BENCH="$build/bench/rnic_bench" \
  bash "$SRC/scripts/perf.sh" --quick --only "$families" --out "$out" > "$out.stdout" 2> "$out.stderr" ||
  fail "perf.sh --quick failed with status $?: see $out.stderr"

for f in perf.md results.csv raw.tsv qperf.png perftest.png; do
  [[ -s $out/$f ]] || fail "$out/$f missing or empty"
done
for f in qperf.png perftest.png; do
  [[ $(head -c 8 "$out/$f" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$out/$f is not a PNG"
done
grep -q '^| target (issue 15) | figure | measured | met? |$' "$out/perf.md" || fail "perf.md: no targets table"

[[ $(head -1 "$out/results.csv") == family,test,size_bytes,metric,unit,median,baseline_median,ratio_median,diff_median_us,passes_ok,passes_failed,failed_log ]] ||
  fail "results.csv: wrong header"
awk -F, -v fams="tcp,${families}" '
  function num(x) { return x ~ /^-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$/ }
  NR == 1 { next }
  NF != 12 { print "results.csv line " NR ": " NF " fields, not 12"; bad = 1; next }
  $10 !~ /^[0-9]+$/ || $11 !~ /^[0-9]+$/ { print "results.csv line " NR ": pass counts not integers"; bad = 1 }
  $10 > 0 && !num($6) { print "results.csv line " NR ": measured but median \"" $6 "\" is not a number"; bad = 1 }
  $10 == 0 && $11 == 0 { print "results.csv line " NR ": neither measured nor failed"; bad = 1 }
  $11 > 0 && $12 == "" { print "results.csv line " NR ": failed without a log"; bad = 1 }
  ($7 != "-" && !num($7)) || ($8 != "-" && !num($8)) || ($9 != "-" && !num($9)) { print "results.csv line " NR ": a baseline, ratio or diff is not a number"; bad = 1 }
  $10 > 0 { measured[$1] = 1 }
  END {
    n = split(fams, f, ",")
    for (i = 1; i <= n; i++) if (!(f[i] in measured)) { print "results.csv: no measured figure for " f[i]; bad = 1 }
    exit bad
  }' "$out/results.csv" >&2 || fail "results.csv does not parse (see above; logs in $out/logs)"
awk -F'\t' 'NF != 12 { print "raw.tsv line " NR ": " NF " fields"; bad = 1 } END { exit bad }' "$out/raw.tsv" >&2 ||
  fail "raw.tsv does not parse"
# The 64-byte rate ran both ways, the second under --busy-poll (posts batched by the poll).
if [[ ,$families, == *,perftest,* ]]; then
  for t in ib_write_rate ib_write_rate_busypoll; do
    awk -F, -v t="$t" '$1 == "perftest" && $2 == t && $3 == 64 && $10 > 0 { ok = 1 } END { exit !ok }' \
      "$out/results.csv" || fail "results.csv: no measured perftest $t at 64 B (logs in $out/logs)"
  done
  grep -q 'ib_write_bw 64 B under rnic run --busy-poll' "$out/perf.md" ||
    fail "perf.md: no busy-poll 64-byte rate row in the targets table"
fi
# a table per family, plus the targets and the raw TCP baseline
want=$(($(tr ',' '\n' <<< "$families" | wc -l) + 2))
[[ $(grep -c '^#### ' "$out/perf.md") -ge $want ]] || fail "perf.md: fewer than $want tables"
echo "Perf.QuickSmoke: outputs in $out parse ($(($(wc -l < "$out/results.csv") - 1)) figures)"
