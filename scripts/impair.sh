#!/bin/bash
# scripts/impair.sh - run two programs across an impaired link: loss, burst loss, delay, jitter,
# reordering, duplication, rate. The host kernel has no netem, so the link is a userspace one
# (docs/impaired-link.md): two network namespaces this script creates, a TAP device in each,
# joined through two VDE switches by VDE's `wirefilter` (Debian vde2), which drops, delays,
# reorders and duplicates Ethernet frames on the way. The programs' kernel TCP sees real loss and
# reordering: it retransmits, and its receiver holds segments beyond holes. Everything the script
# creates is removed when it ends, however it ends.
#
#   scripts/impair.sh [LINK OPTIONS] -- SUBCOMMAND [ARGS...]
#       `rnic SUBCOMMAND ARGS --server --bind 10.77.0.2` in one namespace, then
#       `rnic SUBCOMMAND ARGS --client 10.77.0.2` in the other (xfer, ping: every rnic program
#       with --server/--client)
#   scripts/impair.sh [LINK OPTIONS] --server-cmd CMD --client-cmd CMD
#       any two commands (bash -c), e.g. the drop-in: --server-cmd 'rnic run -- rping -s -a $PEER'
#       --client-cmd 'rnic run -- rping -c -a $PEER -C 10 -V'; $PEER is the server's address
#
# LINK OPTIONS (both directions; wirefilter's own units):
#   --loss PCT       frames lost, percent (0-100, fractions allowed)
#   --burst LEN      mean length of a loss burst, frames (Gilbert model; with --loss). The model
#                    moves on per frame, so on a link that carries nothing but one TCP
#                    retransmission per timeout a burst lasts about LEN timeouts, each twice the
#                    last (one operation of `xfer` stalled 13, 30 and 56 s in 3 of 22 runs): each
#                    side also sends a 1-octet UDP datagram every 10 ms (to the discard port), so
#                    that a burst lasts tens of milliseconds, as a real network's congestion does
#                    (19 runs, no operation over 3.2 s)
#   --delay MS       one-way delay, milliseconds
#   --jitter MS      uniform jitter of +-MS around --delay, milliseconds (without --delay: around
#                    0, so about half the frames get none)
#   --reorder        let frames overtake each other (with --jitter: reordering)
#   --dup PCT        frames duplicated, percent
#   --rate BYTES     bandwidth, octets per second
#   --timeout S      bound on each program, 1..86400 (default 300); it is killed after that
#   --expect-holes   fail unless TCP retransmitted (with --loss) and a receiver queued segments out
#                    of order (with --reorder/--loss). The VDE link also drops frames by itself
#                    when bulk TCP overruns its socket buffers, so this shows holes happened, not
#                    that the options alone made them; what wirefilter applied is printed.
# Env: RNIC (default build/rnic). Exit status: the client's, or the server's when the client
# passed (a server still running 20 s after the client ended is stopped); 1 when --expect-holes
# is not met or wirefilter did not take the settings; 2 for a bad option (one line, before
# anything is made); 77 when the machine cannot make the link (not root, no /dev/net/tun, no
# ip/vde_switch/wirefilter): the one line printed says which. SIGINT/SIGTERM stop the programs
# and remove the link at once. A run killed outright (SIGKILL) leaves its namespaces and daemons:
# the next run removes them (their owner's PID is in their names).
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RNIC="${RNIC:-$SRC/build/rnic}"
LOSS="" BURST="" DELAY="" JITTER="" REORDER=0 DUP="" RATE="" TIMEOUT=300 EXPECT=0
SCMD="" CCMD="" SUB=()
die() { echo "impair: $*" >&2; exit 2; }
num() { [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "$1 wants a number, not '$2'"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --loss) num "$1" "${2-}"; LOSS=$2; shift 2 ;;
    --burst) num "$1" "${2-}"; BURST=$2; shift 2 ;;
    --delay) num "$1" "${2-}"; DELAY=$2; shift 2 ;;
    --jitter) num "$1" "${2-}"; JITTER=$2; shift 2 ;;
    --reorder) REORDER=1; shift ;;
    --dup) num "$1" "${2-}"; DUP=$2; shift 2 ;;
    --rate) num "$1" "${2-}"; RATE=$2; shift 2 ;;
    --timeout) num "$1" "${2-}"; TIMEOUT=$2; shift 2 ;;
    --expect-holes) EXPECT=1; shift ;;
    --server-cmd|--client-cmd)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 wants a command"
      if [ "$1" = --server-cmd ]; then SCMD=$2; else CCMD=$2; fi
      shift 2 ;;
    --) shift; SUB=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ -z "$LOSS" ] || awk -v v="$LOSS" 'BEGIN { exit !(v <= 100) }' || die "--loss $LOSS is above 100 percent"
# wirefilter sends a frame again while a draw says so: at 100 % for ever
[ -z "$DUP" ] || awk -v v="$DUP" 'BEGIN { exit !(v < 100) }' || die "--dup $DUP is not below 100 percent"
[ -n "$BURST" ] && [ -z "$LOSS" ] && die "--burst needs --loss"
awk -v t="$TIMEOUT" 'BEGIN { exit !(t >= 1 && t <= 86400) }' || die "--timeout $TIMEOUT is not 1..86400 s"
if [ ${#SUB[@]} -gt 0 ]; then
  [ -z "$SCMD$CCMD" ] || die "give either -- SUBCOMMAND or --server-cmd/--client-cmd, not both"
elif [ -z "$SCMD" ] || [ -z "$CCMD" ]; then
  die "nothing to run: give -- SUBCOMMAND ARGS, or --server-cmd and --client-cmd (see --help)"
fi

# What the machine must allow (else skip, exit 77, one line).
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "making network namespaces and TAP devices needs root"
[ -c /dev/net/tun ] || skip "no /dev/net/tun"
for t in ip vde_switch vde_plug wirefilter; do
  command -v $t >/dev/null || skip "no $t (scripts/install-deps.sh installs iproute2 and vde2)"
done
[ -z "$BURST" ] || command -v python3 >/dev/null || skip "no python3 (scripts/install-deps.sh installs it)"
[ ${#SUB[@]} -eq 0 ] || [ -x "$RNIC" ] || die "no rnic binary at $RNIC (build first)"

# What runs killed outright left (rnicimpPIDa/b, /tmp/rnic-impair.PID.*): removed once PID is gone.
for d in /tmp/rnic-impair.*.*; do
  [ -d "$d" ] || continue
  old=${d#/tmp/rnic-impair.}; old=${old%%.*}
  [[ "$old" =~ ^[0-9]+$ ]] && ! kill -0 "$old" 2>/dev/null || continue
  for f in "$d"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  ip netns pids "rnicimp${old}a" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "rnicimp${old}b" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "rnicimp${old}a" 2>/dev/null; ip netns del "rnicimp${old}b" 2>/dev/null
  rm -rf "$d"
done
W=$(mktemp -d "/tmp/rnic-impair.$$.XXXXXX")
NA="rnicimp$$a" NB="rnicimp$$b"   # client side, server side
A=10.77.0.1 B=10.77.0.2
PIDS=()
cleanup() {
  local all=("${PIDS[@]}") f
  for f in "$W"/*.pid; do [ -f "$f" ] && all+=("$(cat "$f")"); done
  # what still runs in the namespaces (a program's children too)
  all+=($(ip netns pids "$NA" 2>/dev/null) $(ip netns pids "$NB" 2>/dev/null))
  kill "${all[@]}" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "${all[@]}" 2>/dev/null || break; sleep 0.1; done
  kill -9 "${all[@]}" 2>/dev/null
  wait 2>/dev/null
  ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The link: tapA (in NA) - vde_plug - switch 1 - wirefilter - switch 2 - vde_plug - tapB (in NB).
ip netns add "$NA" && ip netns add "$NB" || skip "ip netns add refused"
for side in "$NA:$A" "$NB:$B"; do
  ns=${side%%:*} addr=${side#*:}
  ip -n "$ns" link set lo up && ip -n "$ns" tuntap add dev tap0 mode tap &&
    ip -n "$ns" addr add "$addr/24" dev tap0 && ip -n "$ns" link set tap0 up ||
    skip "cannot make a TAP device in a network namespace"
done
for k in 1 2; do
  vde_switch -s "$W/sw$k" -d -p "$W/sw$k.pid" > "$W/sw$k.log" 2>&1 || die "vde_switch failed: $(cat "$W/sw$k.log")"
done
ip netns exec "$NA" vde_plug "vde://$W/sw1" tap://tap0 > "$W/plugA.log" 2>&1 & PIDS+=($!)
ip netns exec "$NB" vde_plug "vde://$W/sw2" tap://tap0 > "$W/plugB.log" 2>&1 & PIDS+=($!)
WF=(wirefilter -v "$W/sw1:$W/sw2")
DESC=""
[ -n "$LOSS" ] && { WF+=(-l "$LOSS"); DESC="$DESC loss ${LOSS}%"; }
[ -n "$BURST" ] && { WF+=(-L "$BURST"); DESC="$DESC in bursts of ~$BURST"; }
if [ -n "$DELAY$JITTER" ]; then
  d="${DELAY:-0}"; [ -n "$JITTER" ] && d="$d+${JITTER}U"
  WF+=(-d "$d"); DESC="$DESC delay ${DELAY:-0} ms${JITTER:+ +-$JITTER ms}"
fi
[ "$REORDER" = 1 ] && { WF+=(-N); DESC="$DESC reordering"; }
[ -n "$DUP" ] && { WF+=(-D "$DUP"); DESC="$DESC duplication ${DUP}%"; }
[ -n "$RATE" ] && { WF+=(-b "$RATE"); DESC="$DESC rate $RATE B/s"; }
"${WF[@]}" -M "$W/wf.mgmt" --daemon --pidfile "$W/wf.pid" > "$W/wf.log" 2>&1 ||
  die "wirefilter failed: $(head -1 "$W/wf.log")"
echo "impair: link $A ($NA) <->$([ -n "$DESC" ] && echo "$DESC" || echo " no wirefilter impairment") <-> $B ($NB)"
# What wirefilter took (its management socket's showinfo): each asked setting must be there.
for _ in $(seq 1 50); do [ -S "$W/wf.mgmt" ] && break; sleep 0.1; done
# Asked again (up to 5 times, 3 s each) until it answers in full: a loaded machine's daemon
# can be slow to serve its first client (the placement benchmark saw an empty answer).
INFO=$(timeout 20 python3 - "$W/wf.mgmt" <<'PY' 2>&1
import socket, sys, time
out = b""
for attempt in range(5):
    out = b""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(sys.argv[1])
        s.sendall(b"showinfo\n")
        end = time.time() + 3
        while b"1000 Success" not in out and time.time() < end:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        s.close()
    except OSError as e:
        out = str(e).encode()
    if b"1000 Success" in out:
        break
    time.sleep(0.5)
print(out.decode(errors="replace"))
PY
)
want() {  # LABEL VALUE: wirefilter's line LABEL shows VALUE both ways ("Loss L->R 2+0U R->L 2+0U")
  awk -v l="$1" -v v="$2" '$1 == l && $2 == "L->R" && $3 == v && $4 == "R->L" && $5 == v { f = 1 }
                           END { exit !f }' <<< "$INFO" || {
    echo "impair: FAILED: wirefilter did not take $1 $2: $(grep -m1 "^$1" <<< "$INFO")"; exit 1; }
}
[ -z "$LOSS" ] || want Loss "$LOSS+0U"
[ -z "$BURST" ] || want Lburst "$BURST+0U"
[ -z "$DELAY$JITTER" ] || want Delay "${DELAY:-0}+${JITTER:-0}U"
[ -z "$DUP" ] || want Dup "$DUP+0U"
[ "$REORDER" = 0 ] || grep -q 'Fifoness FALSE' <<< "$INFO" || { echo "impair: FAILED: wirefilter keeps frames in order"; exit 1; }
echo "impair: wirefilter: $(grep -E '^(Loss|Lburst|Delay|Dup|Bandw|Fifoness) ' <<< "$INFO" | sed -E 's/ +/ /g' | paste -sd ';' | sed 's/;/; /g')"

# The link is up when the client side has the server side's link address: a UDP datagram
# (not TCP: its counters are the report's) makes ARP ask through the filter; a lost frame is
# asked again by the next try.
up=0
for _ in $(seq 1 100); do
  ip netns exec "$NA" bash -c "echo > /dev/udp/$B/9" 2>/dev/null
  if ip -n "$NA" neigh show "$B" | grep -q lladdr; then up=1; break; fi
  sleep 0.1
done
[ "$up" = 1 ] || { echo "impair: the link never came up ($B unreachable from $NA)" >&2; exit 2; }

# With burst loss, a frame both ways every 10 ms (see --burst): a burst then ends in time.
if [ -n "$BURST" ]; then
  for side in "$NA:$B" "$NB:$A"; do
    ip netns exec "${side%%:*}" python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
while True:
    try:
        s.sendto(b"x", (sys.argv[1], 9))
    except OSError:
        pass
    time.sleep(0.01)' "${side#*:}" > /dev/null 2>&1 &
    PIDS+=($!)
  done
fi

# tcp_counters NS (scripts/tcp-counters.sh)
. "$SRC/scripts/tcp-counters.sh"

export PEER=$B
if [ ${#SUB[@]} -gt 0 ]; then
  printf -v SCMD '%q ' "$RNIC" "${SUB[@]}" --server --bind "$B"
  printf -v CCMD '%q ' "$RNIC" "${SUB[@]}" --client "$B"
fi
echo "impair: server ($NB): $SCMD"
ip netns exec "$NB" timeout -k 5 "$TIMEOUT" bash -c "$SCMD" > "$W/server.log" 2>&1 &
SPID=$!; PIDS+=("$SPID")
for _ in $(seq 1 100); do
  ip netns exec "$NB" ss -ltnH | grep -q . && break
  kill -0 $SPID 2>/dev/null || break
  sleep 0.1
done
echo "impair: client ($NA): $CCMD"
# In the background, so that a signal to this script is handled at once (bash runs a trap only
# between commands; `wait` is one it interrupts).
ip netns exec "$NA" timeout -k 5 "$TIMEOUT" bash -c "$CCMD" > "$W/client.log" 2>&1 &
CPID=$!; PIDS+=("$CPID")
wait "$CPID"; crc=$?
# The server gets 20 s after the client ended (a failed client leaves it waiting for nobody).
for _ in $(seq 1 200); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SPID" 2>/dev/null; then
  echo "impair: the server still ran 20 s after the client ended: stopped"
  kill "$SPID" 2>/dev/null; ip netns pids "$NB" 2>/dev/null | xargs -r kill 2>/dev/null
fi
wait "$SPID"; src=$?
# Log lines ("[...]") left out; 40 lines hold `rnic xfer -v`'s line per operation at the 30
# operations of its default sizes.
for side in client server; do
  echo "impair: the $side's last lines:"; grep -v '^\[' "$W/$side.log" | tail -n 40 | sed 's/^/  /'
done
case $crc in 124|137) echo "impair: the client ran past --timeout $TIMEOUT s (killed)" ;; esac
case $src in 124|137) echo "impair: the server ran past --timeout $TIMEOUT s (killed)" ;; esac
read -r ra oa ia < <(tcp_counters "$NA")
read -r rb ob ib < <(tcp_counters "$NB")
echo "impair: TCP $NA (client): $ia segments in, $ra retransmitted, $oa queued out of order;" \
  "$NB (server): $ib in, $rb retransmitted, $ob queued out of order"
rc=$crc; [ $rc = 0 ] && rc=$src
if [ "$EXPECT" = 1 ]; then
  if [ -n "$LOSS" ] && [ $((ra + rb)) = 0 ]; then echo "impair: FAILED: --loss $LOSS but TCP retransmitted nothing"; rc=1; fi
  if { [ "$REORDER" = 1 ] || [ -n "$LOSS" ]; } && [ $((oa + ob)) = 0 ]; then echo "impair: FAILED: no receiver queued a segment out of order"; rc=1; fi
fi
echo "impair: exit $rc (client $crc, server $src)"
exit $rc
