#!/usr/bin/env bash
# Checks that dependencies point down only: every `#include "folder/..."` in a folder's sources
# names the folder itself or one it may depend on (the README's Layout section draws the same
# graph). Prints each include that breaks the rule with its file and line; exits 1 if any does.
# Usage: scripts/check-layers.sh [source dir] (default: the repository this script is in).
set -euo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root"

# folder -> the folders it may include from (besides itself).
declare -A allowed=(
  [common]=""
  [mpa]="common"
  [ddp]="common mpa"
  [trace]="common mpa ddp"
  [rnic]="common mpa ddp"
  [sim]="common mpa ddp rnic"
  [capture]="common mpa ddp trace rnic"
  [verbs_shim]="common mpa ddp rnic"
  [verbs_abi]="common mpa ddp rnic capture"
  [enlarge]="common mpa ddp rnic verbs_shim"
  [replay]="common mpa ddp trace rnic sim"
  [ladder]="common mpa ddp trace"
  [htmlview]="common mpa ddp trace rnic sim replay ladder"
  [bench]="common mpa ddp trace rnic sim capture verbs_shim enlarge replay"
  [tools]="common mpa ddp trace rnic sim capture verbs_shim enlarge replay bench ladder htmlview"
  [fuzz]="common mpa ddp trace rnic sim capture verbs_shim enlarge replay"
)

bad=0
checked=0
for folder in "${!allowed[@]}"; do
  [ -d "$folder" ] || continue
  while IFS= read -r hit; do
    # hit: path:line:#include "dep/..."
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    # (bash's own regex: a sed per include took 25 s of CI's plain tests)
    if ! [[ $rest =~ include[[:space:]]+\"([A-Za-z0-9_]+)/ ]]; then
      echo "$file:$line: an include this script cannot read: ${rest#*:}"
      bad=1
      continue
    fi
    dep=${BASH_REMATCH[1]}
    checked=$((checked + 1))
    [ "$dep" = "$folder" ] && continue
    case " ${allowed[$folder]} " in
      *" $dep "*) ;;
      *)
        echo "$file:$line: $folder/ may not include $dep/ (allowed: ${allowed[$folder]:-none})"
        bad=1
        ;;
    esac
  done < <(grep -rn -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[A-Za-z0-9_]+/' "$folder" \
             --include='*.cpp' --include='*.hpp' --include='*.h' || true)
done
# A folder this script does not know is a new layer: say where it belongs.
for d in */; do
  d=${d%/}
  case "$d" in build* | tests | scripts | docs | pcap_traces | .*) continue ;; esac
  if ls "$d"/*.cpp "$d"/*.hpp >/dev/null 2>&1 && [ -z "${allowed[$d]+x}" ]; then
    echo "$d/: a source folder scripts/check-layers.sh does not place in the layering"
    bad=1
  fi
done
if [ "$bad" = 0 ]; then echo "layers: $checked project includes, all point down"; fi
exit "$bad"
