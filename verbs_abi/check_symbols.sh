#!/usr/bin/env bash
# Checks that the drop-in libraries in DROPIN_DIR (libibverbs.so.1, librdmacm.so.1 and the stub
# libmlx5.so.1 / libefa.so.1) can stand in for rdma-core 44's:
#  1. every symbol@version that a target program (rping, ucmatose, ibv_devices, ibv_devinfo,
#     qperf, /usr/bin/ib_*_bw, /usr/bin/ib_*_lat; those installed) imports from one of the four
#     libraries is exported by the drop-in library of that name at that version; the real
#     libmlx5.so.1 / libefa.so.1 are checked the same way for their public libibverbs imports
#     (their IBVERBS_PRIVATE_* imports are rdma-core's provider interface, which the drop-in
#     deliberately lacks: the stub libmlx5/libefa replace those providers);
#  2. every public symbol the real libibverbs.so.1 / librdmacm.so.1 exports at its default (@@)
#     version is exported by ours at that version (of IBVERBS_PRIVATE_* only ibv_query_gid_type),
#     and each library defines the real library's version nodes with the same inheritance;
#  3. each program loads with everything bound: `LD_BIND_NOW=1 LD_LIBRARY_PATH=DROPIN_DIR ldd -r`
#     reports no undefined symbol, missing library or missing version, and finds the four
#     libraries in DROPIN_DIR.
# Prints one line per problem and exits 1 if there is any.
#
# Usage: check_symbols.sh DROPIN_DIR
# Environment: IWARP_SYSTEM_LIBDIR (default /usr/lib/x86_64-linux-gnu), where the real rdma-core
# libraries are; IWARP_BINDIR (default /usr/bin), where the target programs are.
set -euo pipefail

if [[ $# -ne 1 || ! -d $1 ]]; then
  echo "usage: $0 DROPIN_DIR" >&2
  exit 2
fi
dropin=$(cd "$1" && pwd -P)
syslib=${IWARP_SYSTEM_LIBDIR:-/usr/lib/x86_64-linux-gnu}
bindir=${IWARP_BINDIR:-/usr/bin}
libs=(libibverbs.so.1 librdmacm.so.1 libmlx5.so.1 libefa.so.1)

for tool in objdump ldd; do
  if ! command -v "$tool" > /dev/null; then
    echo "check_symbols: $tool is required (binutils / libc-bin)" >&2
    exit 2
  fi
done

problems=0
problem() {
  echo "check_symbols: $*"
  problems=$((problems + 1))
}

# Defined dynamic symbols of $1, one "name@version" per line; a hidden (non-default) version is
# printed in parentheses by objdump and here without them, unless $2 is "default-only", which
# drops those.
exports_of() {
  objdump -T "$1" | awk -v only_default="${2:-}" '
    NF >= 6 && $0 !~ /\*UND\*/ && $1 ~ /^[0-9a-f]+$/ {
      name = $NF; ver = $(NF - 1)
      if (ver ~ /^\./) ver = $(NF - 2)  # .hidden / .protected marker before the name
      if (ver == "Base" || ver ~ /^\*/) next
      if (ver ~ /^\(.*\)$/) {
        if (only_default == "default-only") next
        ver = substr(ver, 2, length(ver) - 2)
      }
      print name "@" ver
    }'
}

# Undefined dynamic symbols of $1 that come from one of the four libraries, one
# "library name@version" per line. The library of each version is taken from the file's version
# references (objdump -p: "required from libibverbs.so.1:" ...).
imports_of() {
  {
    objdump -p "$1" | awk '
      /^Version References:/ { in_refs = 1; next }
      in_refs && /required from/ { lib = $3; sub(/:$/, "", lib); next }
      in_refs && NF == 4 && $1 ~ /^0x/ { print "REF", $4, lib; next }
      in_refs && NF == 0 { in_refs = 0 }'
    objdump -T "$1" | awk '
      NF >= 6 && $0 ~ /\*UND\*/ {
        name = $NF; ver = $(NF - 1)
        if (ver ~ /^\(.*\)$/) ver = substr(ver, 2, length(ver) - 2); else next
        print "UND", ver, name
      }'
  } | awk '
    $1 == "REF" { lib[$2] = $3; next }
    $1 == "UND" && ($2 in lib) {
      l = lib[$2]
      if (l == "libibverbs.so.1" || l == "librdmacm.so.1" || l == "libmlx5.so.1" ||
          l == "libefa.so.1")
        print l, $3 "@" $2
    }' | sort -u
}

# Version definitions of $1, one "NODE<-PARENT" line per inheritance edge ("NODE<-" for a node
# without parent), the file's own base definition (its soname) left out.
verdefs_of() {
  objdump -p "$1" | awk '
    /^Version definitions:/ { in_defs = 1; next }
    /^Version References:/ || (in_defs && NF == 0) { in_defs = 0 }
    !in_defs { next }
    $1 ~ /^[0-9]+$/ && NF == 4 {
      if (node != "" && !has_parent) print node "<-"
      if ($2 == "0x01") { node = ""; next }  # VER_FLG_BASE: the soname
      node = $4; has_parent = 0; next
    }
    NF == 1 && node != "" { print node "<-" $1; has_parent = 1 }
    END { if (node != "" && !has_parent) print node "<-" }' | sort -u
}

# "NODE<-PARENT" as words.
describe_edge() {
  local node=${1%%<-*} parent=${1#*<-}
  if [[ -n $parent ]]; then
    echo "node $node inheriting $parent"
  else
    echo "node $node (no parent)"
  fi
}

# ---- the drop-in libraries themselves ----
declare -A have_lib=()
declare -A exported=()  # "lib name@version" -> 1
declare -A exported_name=()  # "lib name" -> versions, for the diagnostics
for lib in "${libs[@]}"; do
  if [[ ! -f $dropin/$lib ]]; then
    problem "$dropin/$lib does not exist"
    continue
  fi
  have_lib[$lib]=1
  while read -r sv; do
    exported["$lib $sv"]=1
    key="$lib ${sv%@*}"
    exported_name[$key]="${exported_name[$key]:-}${exported_name[$key]:+ }${sv#*@}"
  done < <(exports_of "$dropin/$lib")
done

# ---- 1. imports of the target programs (and the real providers) ----
binaries=()
for name in rping ucmatose ibv_devices ibv_devinfo qperf; do
  [[ -x $bindir/$name ]] && binaries+=("$bindir/$name")
done
for bin in "$bindir"/ib_*_bw "$bindir"/ib_*_lat; do
  [[ -x $bin ]] && binaries+=("$bin")
done
providers=()
for lib in libmlx5.so.1 libefa.so.1; do
  [[ -f $syslib/$lib ]] && providers+=("$syslib/$lib")
done
if [[ ${#binaries[@]} -eq 0 ]]; then
  problem "no target program found in $bindir (rping, ucmatose, ibv_devinfo, qperf, ib_*)"
fi

checked_files=0
checked_imports=0
for file in "${binaries[@]}" "${providers[@]}"; do
  checked_files=$((checked_files + 1))
  is_provider=0
  [[ $file == "$syslib"/* ]] && is_provider=1
  while read -r lib sv; do
    [[ -n $lib ]] || continue
    if [[ $is_provider -eq 1 && ${sv#*@} == IBVERBS_PRIVATE_* ]]; then continue; fi
    checked_imports=$((checked_imports + 1))
    [[ -n ${have_lib[$lib]:-} ]] || continue  # already reported missing
    if [[ -z ${exported["$lib $sv"]:-} ]]; then
      others=${exported_name["$lib ${sv%@*}"]:-}
      problem "$file imports ${sv%@*} version ${sv#*@} from $lib, not exported by" \
        "$dropin/$lib${others:+ (it has version(s) $others)}"
    fi
  done < <(imports_of "$file")
done

# ---- 2. the real libraries' public exports and version nodes ----
for lib in libibverbs.so.1 librdmacm.so.1; do
  if [[ ! -f $syslib/$lib ]]; then
    problem "real $syslib/$lib not found: cannot compare exports (set IWARP_SYSTEM_LIBDIR)"
    continue
  fi
  [[ -n ${have_lib[$lib]:-} ]] || continue
  while read -r sv; do
    name=${sv%@*}
    ver=${sv#*@}
    if [[ $ver == IBVERBS_PRIVATE_* && $name != ibv_query_gid_type && $name != "$ver" ]]; then
      continue
    fi
    if [[ -z ${exported["$lib $sv"]:-} ]]; then
      others=${exported_name["$lib $name"]:-}
      problem "real $lib exports $name@@$ver, $dropin/$lib does not" \
        "${others:+(it has version(s) $others)}"
    fi
  done < <(exports_of "$syslib/$lib" default-only)
done

for lib in "${libs[@]}"; do
  [[ -f $syslib/$lib && -n ${have_lib[$lib]:-} ]] || continue
  ours=$(verdefs_of "$dropin/$lib")
  while read -r edge; do
    [[ -n $edge ]] || continue
    if ! grep -qxF -- "$edge" <<< "$ours"; then
      problem "$dropin/$lib lacks the real $lib's version $(describe_edge "$edge")"
    fi
  done < <(verdefs_of "$syslib/$lib")
  real=$(verdefs_of "$syslib/$lib")
  while read -r edge; do
    [[ -n $edge && $edge != IWARP_PRIVATE_* ]] || continue
    if ! grep -qxF -- "$edge" <<< "$real"; then
      problem "$dropin/$lib has version $(describe_edge "$edge"), the real $lib does not"
    fi
  done <<< "$ours"
done

# ---- 3. each program loads with everything bound, from DROPIN_DIR ----
for bin in "${binaries[@]}"; do
  out=$(LD_BIND_NOW=1 LD_LIBRARY_PATH=$dropin ldd -r "$bin" 2>&1 || true)
  while IFS= read -r line; do
    problem "ldd -r $bin: ${line#"${line%%[![:space:]]*}"}"
  done < <(grep -E 'undefined symbol|not found|no version information' <<< "$out" || true)
  for lib in "${libs[@]}"; do
    path=$(awk -v lib="$lib" '$1 == lib && $2 == "=>" { print $3 }' <<< "$out")
    if [[ -n $path && $(cd "$(dirname "$path")" && pwd -P) != "$dropin" ]]; then
      problem "ldd -r $bin: $lib resolves to $path, not to $dropin"
    fi
  done
done

if [[ $problems -ne 0 ]]; then
  echo "check_symbols: $problems problem(s)"
  exit 1
fi
echo "check_symbols: $checked_files binaries, $checked_imports imports, all resolve"
