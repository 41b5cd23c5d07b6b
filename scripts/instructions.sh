#!/usr/bin/env bash
# Instructions and heap allocations per operation (8-octet Send, 64 KiB RDMA Write, 1 KiB RDMA
# Read) counted under callgrind, which repeats exactly run to run: figures for regression checks
# that machine noise does not move (docs/instructions.md).
#
#   bash scripts/instructions.sh                      # build build-callgrind, count, print, write JSON
#   bash scripts/instructions.sh --compare bench/instructions-baseline.json   # exit 1 above +2 %
#                                                     # or on more allocations per operation
#
# Each operation is counted for N1 and N2 operations; instructions per operation is
# (count(N2) - count(N1)) / (N2 - N1), so whatever does not scale with N cancels out.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-callgrind"
BIN=""
JSON=""
COMPARE=""
ALLOCS_ONLY=0
THRESHOLD=2
SMOKE=0
REPEAT=0
OPS=(send8 write64k read1k)

usage() {
  cat <<EOF
usage: bash scripts/instructions.sh [options]
  --compare FILE     compare with a saved JSON; exit 1 when an operation costs more than
                     --threshold percent more instructions than there, or more heap
                     allocations (by over 0.5 per operation, counted over the same numbers
                     of operations: a few are amortized, as a queue's storage grows)
  --allocs-only      with --compare: judge allocations only (instruction counts depend on the
                     build, allocations do not: for an op_instructions of another build, --bin)
  --threshold PCT    regression threshold for --compare (default $THRESHOLD)
  --json FILE        where to write the figures (default build-callgrind/instructions.json)
  --build-dir DIR    the separate build tree (default build-callgrind)
  --bin PATH         count this op_instructions instead of building one (the figures then
                     depend on how it was built)
  --repeat           count everything twice and fail unless both runs agree exactly
  --smoke            small counts, --repeat (a quick check of the counting; its figures do
                     not compare with a baseline counted over the default numbers)
EOF
}

die() {
  echo "instructions.sh: $*" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --compare) COMPARE="${2:?--compare needs a file}"; shift 2 ;;
    --allocs-only) ALLOCS_ONLY=1; shift ;;
    --threshold) THRESHOLD="${2:?--threshold needs a percentage}"; shift 2 ;;
    --json) JSON="${2:?--json needs a file}"; shift 2 ;;
    --build-dir) BUILD="${2:?--build-dir needs a directory}"; shift 2 ;;
    --bin) BIN="${2:?--bin needs a path}"; shift 2 ;;
    --repeat) REPEAT=1; shift ;;
    --smoke) SMOKE=1; REPEAT=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help lists the options)" ;;
  esac
done
[[ "$THRESHOLD" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--threshold must be a number of percent, not '$THRESHOLD'"
[ -z "$COMPARE" ] || [ -r "$COMPARE" ] || die "cannot read '$COMPARE'"
[ "$ALLOCS_ONLY" = 0 ] || [ -n "$COMPARE" ] || die "--allocs-only goes with --compare FILE"
command -v valgrind >/dev/null || die "valgrind not found (scripts/install-deps.sh installs it)"
command -v python3 >/dev/null || die "python3 not found"

# Operations counted per run: N1 and N2 for each kind (small ones in the smoke).
declare -A N1=([send8]=200 [write64k]=20 [read1k]=200)
declare -A N2=([send8]=400 [write64k]=40 [read1k]=400)
if [ "$SMOKE" = 1 ]; then
  N1=([send8]=10 [write64k]=2 [read1k]=10)
  N2=([send8]=20 [write64k]=4 [read1k]=20)
fi

if [ -z "$BIN" ]; then
  # A generic x86-64 build (no AVX-512, which valgrind 3.19 does not decode). ISA-L and glibc
  # choose their code by CPUID, which valgrind answers without AVX-512 too.
  LAUNCHER=()
  if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  mkdir -p "$BUILD"
  if ! { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${LAUNCHER[@]}" \
           -DIWARP_WERROR=ON -DIWARP_SANITIZE=OFF -DIWARP_BUILD_TESTS=OFF -DIWARP_BUILD_DROPIN=OFF \
           -DCMAKE_CXX_FLAGS="-march=x86-64 -mtune=generic" &&
         cmake --build "$BUILD" -j2 --target op_instructions; } >"$BUILD/instructions-build.log" 2>&1; then
    tail -30 "$BUILD/instructions-build.log" >&2
    die "building $BUILD failed (whole log: $BUILD/instructions-build.log)"
  fi
  BIN="$BUILD/bench/op_instructions"
  [ -n "$JSON" ] || JSON="$BUILD/instructions.json"
fi
[ -x "$BIN" ] || die "no executable at '$BIN'"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# count OP N: callgrind's instruction count (Ir) of N operations of kind OP, and the heap
# allocations among them (calls of malloc, calloc, realloc and the aligned allocators, which
# operator new calls too), as "IR ALLOCS".
count() {
  local op="$1" n="$2" out="$WORK/callgrind.$1.$2.$RANDOM"
  if ! timeout 600 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
      "$BIN" --op "$op" --count "$n" >"$out.log" 2>&1; then
    cat "$out.log" >&2
    die "$op x $n failed under callgrind"
  fi
  grep -q "callgrind markers compiled in, under valgrind" "$out.log" ||
    die "$BIN was built without valgrind/callgrind.h: it marks nothing to count"
  local c
  c="$(sed -n 's/^totals: *//p' "$out")"
  [[ "$c" =~ ^[0-9]+$ ]] && [ "$c" -gt 0 ] || die "no instruction count in callgrind's output for $op x $n"
  local a
  a="$(python3 - "$out" <<'PY'
import re, sys
# callgrind's format: "fn=(id) name" and "cfn=(id) name" name a function the first time, then
# "(id)" alone; a "calls=N ..." line counts the calls to the last cfn.
alloc = {"malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign", "memalign"}
names, callee, total = {}, None, 0
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
    if m:
        if m.group(3) is not None:
            names[m.group(2)] = m.group(3)
        if m.group(1) == "cfn":
            callee = names.get(m.group(2))
    elif line.startswith("calls=") and callee in alloc:
        total += int(line[6:].split()[0])
# A run that never reaches malloc cannot be told from a parser that misses it: refuse both.
print(total if "malloc" in names.values() else "none")
PY
)"
  [[ "$a" =~ ^[0-9]+$ ]] || die "no call of malloc in callgrind's output for $op x $n: cannot count allocations"
  echo "$c $a"
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
for op in "${OPS[@]}"; do
  n1="${N1[$op]}" n2="${N2[$op]}"
  # (count's output goes into a variable by a plain assignment first: set -e then ends the
  # script when count fails, which it would not inside read's here-string)
  x="$(count "$op" "$n1")"
  read -r c1 a1 <<<"$x"
  x="$(count "$op" "$n2")"
  read -r c2 a2 <<<"$x"
  if [ "$REPEAT" = 1 ]; then
    x="$(count "$op" "$n1")"
    read -r r1 b1 <<<"$x"
    x="$(count "$op" "$n2")"
    read -r r2 b2 <<<"$x"
    if [ "$r1 $b1" != "$c1 $a1" ] || [ "$r2 $b2" != "$c2 $a2" ]; then
      echo "instructions.sh: $op: two runs differ: $c1 then $r1 instructions, $a1 then $b1" \
        "allocations ($n1 ops); $c2 then $r2, $a2 then $b2 ($n2 ops)" >&2
      exit 1
    fi
    echo "$op: two runs agree: $c1 instructions, $a1 allocations ($n1 ops); $c2, $a2 ($n2 ops)"
  fi
  echo "$op $n1 $c1 $n2 $c2 $a1 $a2" >>"$RESULTS"
done

VG="$(valgrind --version)"
CXX="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$(dirname "$(dirname "$BIN")")/CMakeCache.txt" 2>/dev/null || true)"
CXXV="$( [ -n "$CXX" ] && "$CXX" --version | head -1 || echo unknown)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
CPU="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -1)"

python3 - "$RESULTS" "${JSON:-}" "$COMPARE" "$THRESHOLD" "$VG" "$CXXV" "$COMMIT" "$CPU" "$ALLOCS_ONLY" <<'EOF'
import json, sys
results, out, compare, threshold, vg, cxx, commit, cpu, allocs_only = sys.argv[1:10]
allocs_only = allocs_only == "1"
ALLOC_SLACK = 0.5  # allocations per operation: an amortized one moves the figure by 1/(N2-N1)
threshold = float(threshold)
names = {"send8": "8 B Send", "write64k": "64 KiB RDMA Write", "read1k": "1 KiB RDMA Read"}
ops = {}
for line in open(results):
    op, n1, c1, n2, c2, a1, a2 = line.split()
    n1, c1, n2, c2, a1, a2 = int(n1), int(c1), int(n2), int(c2), int(a1), int(a2)
    ops[op] = {"per_op": round((c2 - c1) / (n2 - n1), 1), "n1": n1, "count_n1": c1,
               "n2": n2, "count_n2": c2,
               "allocs_per_op": round((a2 - a1) / (n2 - n1), 2), "allocs_n1": a1, "allocs_n2": a2}
doc = {"what": "instructions and heap allocations per operation under callgrind, both QPs, CRC "
               "on, no markers, EMSS 1448 (bench/op_instructions.cpp)",
       "valgrind": vg, "compiler": cxx, "cpu": cpu, "commit": commit, "ops": ops}

print("| operation | instructions per operation | heap allocations per operation "
      "| counted for N1 ops | counted for N2 ops |")
print("| --- | ---: | ---: | ---: | ---: |")
for op, r in ops.items():
    print(f"| {names[op]} | {r['per_op']:,.1f} | {r['allocs_per_op']:,.2f} "
          f"| {r['count_n1']:,} ({r['n1']}) | {r['count_n2']:,} ({r['n2']}) |")
if out:
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"\nwritten to {out}")

if compare:
    base = json.load(open(compare))
    # glibc and ISA-L pick their code by the CPUID valgrind passes on from the host.
    for k in ("valgrind", "compiler", "cpu"):
        if base.get(k) != doc[k]:
            print(f"note: the baseline was counted with {k} '{base.get(k)}', this run with "
                  f"'{doc[k]}': counts may differ for that reason alone")
    print(f"\n| operation | instructions: baseline | now | change "
          f"| allocations per op: baseline | now |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    worse = []
    for op, r in ops.items():
        b = base.get("ops", {}).get(op)
        if not b:
            print(f"| {names[op]} | (none) | {r['per_op']:,.1f} | | (none) | {r['allocs_per_op']:,.2f} |")
            if allocs_only:
                worse.append(f"{names[op]}: not in {compare}")
            continue
        change = 100.0 * (r["per_op"] - b["per_op"]) / b["per_op"]
        ba = b.get("allocs_per_op")
        if ba is None and allocs_only:
            worse.append(f"{names[op]}: {compare} has no allocation figures (regenerate it: "
                         f"docs/instructions.md)")
        elif ba is not None and (b["n1"], b["n2"]) != (r["n1"], r["n2"]):
            # Some allocations are amortized (a queue's storage grows every so many operations):
            # per-operation figures compare only over the same counts.
            worse.append(f"{names[op]}: counted over {r['n1']}/{r['n2']} operations, "
                         f"{compare} over {b['n1']}/{b['n2']}: allocations do not compare")
            ba = None
        print(f"| {names[op]} | {b['per_op']:,.1f} | {r['per_op']:,.1f} | {change:+.2f} % "
              f"| {'(none)' if ba is None else f'{ba:,.2f}'} | {r['allocs_per_op']:,.2f} |")
        if not allocs_only and change > threshold:
            worse.append(f"{names[op]} {change:+.2f} % instructions")
        if ba is not None and r["allocs_per_op"] > ba + ALLOC_SLACK:
            worse.append(f"{names[op]} {r['allocs_per_op']:,.2f} heap allocations per operation "
                         f"against {ba:,.2f}")
    what = "allocations" if allocs_only else f"+{threshold:g} % instructions or allocations"
    if worse:
        print(f"\nregression ({what}): {'; '.join(worse)}", file=sys.stderr)
        sys.exit(1)
    print(f"\nno operation costs more ({what}) than {compare} says")
EOF
