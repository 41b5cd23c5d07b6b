#!/usr/bin/env bash
# Runs the README's "Using it" examples as written (ctest Docs.ReadmeExamplesRunAsWritten), or
# the commands of another document such as docs/tutorial.md (ctest Docs.TutorialRunsAsWritten;
# docs/explain.md, replay.md, ladder.md, html-view.md and enlarge.md likewise, Docs.*RunsAsWritten):
# every `rnic ...` line of the indented blocks of the "## Using it" section, comments dropped,
# through bash with this build's `rnic` first on PATH (pipes such as `| jq` work), from a
# scratch directory where `pcap_traces` is the repository's. A `--server` line starts in the
# background and serves the `--client` line right below it (as in the README's two terminals);
# any other line runs on its own. Each must exit 0 within its bound, and a client's server must
# then end by itself (each serves one client), exit 0 too (in the README; in another document,
# where a server line ends in "&", its status is shown but not required).
# The default ports are used as written: the run happens in a fresh network namespace of its
# own (unshare -n, or -rn without root) when the machine allows one, so parallel tests cannot
# take the ports; otherwise on the host's loopback.
#
#   scripts/readme-examples.sh BUILD_DIR [README.md | docs/tutorial.md]
#
# Not run: `rnic enlarge-bench` (a benchmark of minutes; its options and outputs are tested by
# the EnlargeBench tests with smaller sizes). Said on stdout.
set -euo pipefail

BUILD_DIR=${1:?usage: readme-examples.sh BUILD_DIR [README.md | docs/tutorial.md]}
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
README=${2:-$HERE/README.md}
RNIC=$BUILD_DIR/rnic
[ -x "$RNIC" ] || { echo "readme-examples: no $RNIC (build first)"; exit 2; }
[ -f "$README" ] || { echo "readme-examples: no $README"; exit 2; }

# In a namespace of our own: re-run this script there (loopback up first).
if [ -z "${README_EXAMPLES_NETNS:-}" ]; then
  for u in "unshare -n" "unshare -rn"; do
    if $u true 2>/dev/null; then
      exec $u env README_EXAMPLES_NETNS=1 bash -c 'ip link set lo up 2>/dev/null || true; exec bash "$0" "$@"' \
        "$0" "$@"
    fi
  done
  echo "readme-examples: no network namespace here; on the host's loopback (default ports)"
fi

# The example lines, in order. The README: the `rnic` lines of the indented blocks under
# "## Using it". Any other document (docs/tutorial.md): every line starting with "$ " inside a
# ``` block, whatever the command, its trailing comment and then a trailing "&" dropped (a
# server line, see below). Any other line that ends in "&" (marked "&" here; a --server line
# not followed by its --client line too) runs in the background for the lines after it, which
# may name it as "$!" (as in a shell); it is stopped at the end, its status not required.
# strip_comment(LINE): LINE without a shell comment: from the first "#" that is outside quotes
# and follows a blank (so '.records[]#x', "a # b" and file.html#event=N stay), trailing blanks
# dropped.
STRIP_COMMENT='
  function strip_comment(line,    i, c, q, out) {
    q = ""
    for (i = 1; i <= length(line); i++) {
      c = substr(line, i, 1)
      if (q != "") { if (c == q) q = "" }
      else if (c == "\x27" || c == "\"") q = c
      else if (c == "#" && i > 1 && substr(line, i - 1, 1) ~ /[[:space:]]/) break
    }
    out = substr(line, 1, i - 1); sub(/[[:space:]]+$/, "", out); return out
  }'
if [ "$(basename "$README")" = README.md ]; then
  mapfile -t LINES < <(awk "$STRIP_COMMENT"'
    /^## Using it/ { in_section = 1; next }
    in_section && /^## / { exit }
    in_section && /^    rnic / { print strip_comment(substr($0, 5)) }
  ' "$README")
else
  mapfile -t LINES < <(awk "$STRIP_COMMENT"'
    /^```/ { in_block = !in_block; next }
    in_block && /^\$ / {
      line = strip_comment(substr($0, 3))
      bg = sub(/[[:space:]]*&[[:space:]]*$/, "", line)
      print (bg ? "&" : "") line
    }
  ' "$README")
fi
[ "${#LINES[@]}" -gt 0 ] || { echo "readme-examples: no example lines in $README"; exit 1; }

WORK=$(mktemp -d /tmp/readme-examples-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir bin
ln -s "$RNIC" bin/rnic
export PATH=$WORK/bin:$PATH
ln -s "$HERE/pcap_traces" pcap_traces
failed=0
n=0

# run LIMIT_S NAME CMD...: runs to the end within LIMIT_S, prints a verdict line.
run() {
  local limit=$1 name=$2
  shift 2
  local out=$WORK/$n.out
  local t0=$SECONDS
  if timeout -k 5 "$limit" "$@" >"$out" 2>&1; then
    echo "ok    ($((SECONDS - t0)) s) $name"
  else
    local rc=$?
    echo "FAIL  (exit $rc after $((SECONDS - t0)) s) $name"
    sed 's/^/      | /' "$out" | tail -25
    failed=1
  fi
}

# wait_listening PID BOUND_S: true once process PID has a listening TCP socket (ss -p names
# the owner: our own processes need no privilege); false if PID ended or BOUND_S passed.
wait_listening() {
  local pid=$1 k
  for k in $(seq 1 $(($2 * 10))); do
    # Not `ss | grep -q`: under pipefail, ss killed by SIGPIPE after grep's match fails it.
    [[ $(ss -ltnpH 2>/dev/null) == *"pid=$pid,"* ]] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

i=0
bgpid=""
while [ $i -lt ${#LINES[@]} ]; do
  line=${LINES[$i]}
  n=$((n + 1))
  # "$!" is the last background line's process, as a shell has it.
  [ -n "$bgpid" ] && line=${line//\$!/$bgpid}
  nextl=${LINES[$((i + 1))]:-}
  if [ "${line:0:1}" = "&" ] && [[ " $line " == *" --server "* ]] && [[ " $nextl " == *" --client "* ]]; then
    line=${line:1}  # a server and its client: below
  elif [ "${line:0:1}" = "&" ]; then
    line=${line:1}
    [ -n "$bgpid" ] && { kill "$bgpid" 2>/dev/null || true; wait "$bgpid" 2>/dev/null || true; }
    bash -c "exec $line" >"$WORK/$n.bg.out" 2>&1 &
    bgpid=$!
    sleep 1  # as a person would before the next line; the program is up by then
    if kill -0 "$bgpid" 2>/dev/null; then
      echo "ok    (started in the background, pid $bgpid) $line"
    else
      echo "FAIL  '$line' ended at once:"; sed 's/^/      | /' "$WORK/$n.bg.out" | tail -10; failed=1
    fi
    i=$((i + 1))
    continue
  fi
  case " $line " in
    *" enlarge-bench "*)
      echo "not run: $line (a benchmark of minutes; see the EnlargeBench tests)"
      i=$((i + 1))
      continue
      ;;
    *" --server "*)
      client=${LINES[$((i + 1))]:-}
      [[ " $client " == *" --client "* ]] ||
        { echo "FAIL  '$line' is not followed by a --client line"; failed=1; i=$((i + 1)); continue; }
      sout=$WORK/$n.server.out
      bash -c "exec $line" >"$sout" 2>&1 &
      spid=$!
      # A person types the client's line once the server is up; a slow build (TSan, a loaded
      # machine) can take seconds to listen, so wait for its listening socket (bounded).
      if ! wait_listening "$spid" 60; then
        echo "FAIL  the server of '$line' was not listening within 60 s:"
        sed 's/^/      | /' "$sout" | tail -25
        failed=1
      fi
      n=$((n + 1))
      run 120 "$line  +  $client" bash -c "set -o pipefail; $client"
      # Its one client served, the server ends by itself.
      for _ in $(seq 1 100); do kill -0 $spid 2>/dev/null || break; sleep 0.1; done
      if kill -0 $spid 2>/dev/null; then
        echo "FAIL  the server of '$line' did not end after its client"
        kill $spid 2>/dev/null || true
        failed=1
      elif ! wait $spid; then
        if [ "$(basename "$README")" = README.md ]; then
          echo "FAIL  the server of '$line' exited with an error:"
          sed 's/^/      | /' "$sout" | tail -25
          failed=1
        else
          # A document's server runs behind "&", whose status a terminal does not show: a
          # ping server whose one client broke the rules on purpose ends with status 1.
          echo "      (its background server ended with status $?, as a terminal would not show)"
        fi
      fi
      i=$((i + 2))
      ;;
    *)
      run 120 "$line" bash -c "set -o pipefail; $line"
      i=$((i + 1))
      ;;
  esac
done
[ -n "$bgpid" ] && { kill "$bgpid" 2>/dev/null || true; wait "$bgpid" 2>/dev/null || true; }
[ $failed -eq 0 ] && echo "every example of $(basename "$README") ran as written"
exit $failed
