#!/bin/bash
# ctest ImpairedLink.*: scripts/impair.sh, the link with real loss, delay, jitter, reordering,
# duplication and rate limits between two network namespaces (VDE's wirefilter).
#   options  a bad option or value is one line naming it, exit 2, before anything is created
#   xfer     rnic xfer, every operation (Send, Write, Read, Write with Immediate, atomics) at
#            0 B..16 MiB, each verified byte for byte: CRC off over 2 % loss, 1 +- 1 ms delay,
#            reordering and 1 % duplication; CRC on over 1 % loss in bursts and a 40 MB/s rate
#   realseg  rnic xfer as in xfer with --real-segments tap0 on both sides (the real-segment
#            receive mode): holes opened and closed and FPDUs placed beyond them, CRC off and on
#   arms     the real-segment mode's other two arms (--beyond-holes hold, discard; realseg runs
#            place): every operation verified; hold places nothing beyond a hole and times
#            its holes, discard drops what is beyond the in-order point, opens no hole and
#            still times the holes TCP closed (docs/beyond-holes.md)
#   rping    unmodified rping -V (100 x 65535 octets, verified) over the drop-in, both sides, over
#            loss in bursts with jitter and reordering
#   rpingseg unmodified rping -V over the drop-in with `rnic run --real-segments tap0` (the server
#            places beyond holes, the client holds), over 2 % loss: each QP's segment path,
#            printed when rping destroys it, shows holes opened and closed
# In each run TCP must have retransmitted and a receiver must have queued segments out of order
# (--expect-holes): the impairment happened. Skipped (77) only where the machine cannot make the
# link (impair.sh says which: not root, no /dev/net/tun, no vde2).
set -uo pipefail
CASE=${1:?usage: impaired_link.sh options|xfer|realseg|arms|rping|rpingseg RNIC}
export RNIC=${2:?usage: impaired_link.sh options|xfer|realseg|arms|rping|rpingseg RNIC}
IMPAIR="$(cd "$(dirname "$0")/.." && pwd)/scripts/impair.sh"
fails=0
fail() { echo "FAILED: $*"; fails=1; }
# num TEXT WORDS: the number just before WORDS in TEXT
num() { grep -oE "[0-9]+ $2" <<< "$1" | head -1 | cut -d' ' -f1; }
# verified_run LABEL OPS IMPAIR_ARGS...: one impair.sh run, its output printed and left in $out;
# it must exit 0 (77 skips the case), the client must verify OPS operations (a number or an ERE)
# with none failed, and the server must pass its checks.
verified_run() {
  local label=$1 ops=$2 rc
  shift 2
  out=$(bash "$IMPAIR" --expect-holes --timeout 150 "$@" 2>&1); rc=$?
  echo "$out"
  [ $rc = 77 ] && exit 77
  [ $rc = 0 ] || fail "$label: impair.sh exited $rc"
  grep -qE "client: $ops operations verified, 0 failed" <<< "$out" ||
    fail "$label: the client did not verify $ops operations"
  grep -q 'server: all checks passed' <<< "$out" || fail "$label: the server did not pass its checks"
}
# rping_run LABEL SERVER_RUN_OPTIONS CLIENT_RUN_OPTIONS COUNT IMPAIR_ARGS...: unmodified rping -V,
# COUNT x 65535 octets, under `rnic run` on both sides; its output is printed and left in $out.
# It must exit 0 (77 skips the case), the server must have seen the client's disconnect, and the
# client must not have been cut short.
rping_run() {
  local label=$1 sopt=$2 copt=$3 count=$4 rc
  shift 4
  out=$(bash "$IMPAIR" --expect-holes --timeout 300 "$@" \
    --server-cmd "'$RNIC' run $sopt -- rping -s -a \$PEER -C $count -S 65535 -V" \
    --client-cmd "'$RNIC' run $copt -- rping -c -a \$PEER -C $count -S 65535 -V" 2>&1); rc=$?
  echo "$out"
  [ $rc = 77 ] && exit 77
  [ $rc = 0 ] || fail "$label: rping over the impaired link exited $rc"
  # rping's client may exit before its CM thread prints the disconnect; the server's main waits
  # for it, so the server's line is certain. A client cut short says where it waited.
  grep -q 'server DISCONNECT EVENT' <<< "$out" || fail "$label: the rping server did not see the client end its connection"
  if grep -qE 'wait for RDMA_WRITE_(ADV|COMPLETE) state' <<< "$out"; then
    fail "$label: the rping client was cut short"
  fi
}

case "$CASE" in
  options)
    # ARGS | the word the one line must name
    while IFS='|' read -r args word; do
      err=$(bash "$IMPAIR" $args 2>&1 >/dev/null); rc=$?
      lines=$(printf '%s\n' "$err" | grep -c .)
      if [ $rc != 2 ] || [ "$lines" != 1 ] || ! grep -qF -- "$word" <<< "$err"; then
        fail "impair.sh $args: exit $rc, $lines line(s), want 2 and one line naming '$word': $err"
      else
        echo "ok: impair.sh $args -> $err"
      fi
    done <<'EOF'
--loss abc -- xfer|--loss
--loss 150 -- xfer|above 100
--dup 101 -- xfer|--dup 101
--burst 3 -- xfer|--burst needs --loss
--rate -5 -- xfer|--rate
--timeout|--timeout
--timeout 0 -- xfer|not 1..86400
--frobnicate -- xfer|--frobnicate
--loss 1|nothing to run
--server-cmd true -- xfer|either
--server-cmd true|nothing to run
--server-cmd|--server-cmd wants a command
--client-cmd|--client-cmd wants a command
--dup 100 -- xfer|not below 100
EOF
    bash "$IMPAIR" --help | grep -q -- '--expect-holes' || fail "--help does not list --expect-holes"
    # rnic's --real-segments: an interface that does not exist, or --wire beside it, is refused
    # in the one line CLI11 gives every bad option (then its "Run with --help" hint)
    while IFS='|' read -r args word; do
      # shellcheck disable=SC2086
      err=$(timeout 10 "$RNIC" xfer --server $args 2>&1); rc=$?
      if [ $rc != 2 ] || ! head -1 <<< "$err" | grep -qF -- "$word" || [ "$(grep -vc 'Run with --help' <<< "$err")" != 1 ]; then
        fail "rnic xfer --server $args: exit $rc, want 2 and one line naming '$word': $err"
      else
        echo "ok: rnic xfer --server $args -> $(head -1 <<< "$err")"
      fi
    done <<'EOF2'
--real-segments nosuch0|--real-segments: nosuch0: no such interface
--real-segments lo --wire reorder=0.1|--wire excludes --real-segments
EOF2
    ;;
  xfer)
    # 30 operations: 5 operations x 7 sizes, minus the atomics' 4 sizes other than 8 octets.
    SIZES=(--sizes 0 1 4095 4096 65537 1048576 16777216)
    verified_run "loss, dup" 30 --loss 2 --delay 1 --jitter 1 --reorder --dup 1 -- \
      xfer "${SIZES[@]}" --crc off --timeout 60000 -v
    verified_run "burst, rate" 30 --loss 1 --burst 3 --rate 40000000 --reorder --jitter 1 -- \
      xfer "${SIZES[@]}" --crc required --timeout 60000 -v
    ;;
  realseg)
    # The real-segment receive mode: each side also reads its connection's TCP segments off its
    # TAP device as they arrive, so octets beyond a real hole are placed before the kernel's TCP
    # delivers them; both sides must report holes opened and closed and FPDUs placed beyond
    # them, and every operation still verifies.
    SIZES=(--sizes 0 1 4095 4096 65537 1048576 16777216)
    for crc in off required; do
      verified_run "CRC $crc" 30 --loss 2 --delay 1 --jitter 1 --reorder -- \
        xfer "${SIZES[@]}" --crc $crc --timeout 60000 -v --real-segments tap0
      for side in client server; do
        line=$(grep "$side: segment path (real TCP segments on tap0)" <<< "$out")
        [ -n "$line" ] || { fail "CRC $crc: the $side printed no segment-path line"; continue; }
        opened=$(sed -E 's/.* ([0-9]+) holes opened.*/\1/' <<< "$line")
        closed=$(sed -E 's/.* ([0-9]+) closed;.*/\1/' <<< "$line")
        [ "$opened" -gt 0 ] && [ "$opened" = "$closed" ] || fail "CRC $crc: the $side's holes: $line"
      done
      placed=$(grep 'server: segment path' <<< "$out" | sed -E 's/.* ([0-9]+) FPDUs placed beyond a hole.*/\1/')
      [ "${placed:-0}" -gt 0 ] || fail "CRC $crc: the server placed no FPDU beyond a hole"
    done
    ;;
  arms)
    # num LINE WORDS: the number just before WORDS in LINE ("" when absent).
    for arm in hold discard; do
      # 17 operations: 5 operations x 4 sizes, minus the atomics' 3 sizes other than 8 octets.
      verified_run "$arm" 17 --loss 2 --delay 1 --jitter 1 --reorder -- \
        xfer --sizes 0 4096 65537 4194304 --crc required --timeout 60000 --real-segments tap0 \
        --beyond-holes $arm
      for side in client server; do
        path=$(grep "$side: segment path (real TCP segments on tap0)" <<< "$out")
        arms=$(grep "$side: beyond holes: $arm;" <<< "$out")
        [ -n "$path" ] && [ -n "$arms" ] || { fail "$arm: the $side printed no segment-path lines"; continue; }
        opened=$(num "$path" "holes opened"); placed=$(num "$path" "FPDUs placed")
        dropped=$(num "$arms" "segments dropped")
        peak=$(grep -oE "peak [0-9]+" <<< "$arms" | cut -d' ' -f2)
        [ "$placed" = 0 ] || fail "$arm: the $side placed $placed FPDUs beyond a hole"
        if [ $arm = hold ]; then
          [ "$opened" -gt 0 ] && [ "$peak" -gt 0 ] || fail "hold: the $side held nothing: $path / $arms"
        else
          [ "$opened" = 0 ] && [ "$peak" = 0 ] && [ "$dropped" -gt 0 ] || fail "discard: the $side: $path / $arms"
        fi
      done
      # The server receives the bulk: TCP's holes closed under it and were timed.
      st=$(num "$(grep "server: beyond holes" <<< "$out")" "holes \\(")
      [ "${st:-0}" -gt 0 ] || fail "$arm: the server timed no hole"
    done
    ;;
  rping)
    rping_run rping "" "" 100 --loss 1 --burst 3 --jitter 1 --reorder
    ;;
  rpingseg)
    # The real-segment mode in an unmodified program: `rnic run --real-segments` on both sides,
    # the server placing beyond holes, the client holding; rping moves 64 KiB both ways (the
    # server Reads the client's buffer, then Writes its own back), so both see holes. Each QP's
    # segment path is printed when rping destroys it.
    rping_run rpingseg "--real-segments tap0" "--real-segments tap0 --beyond-holes hold" 50 --loss 2 --delay 1
    for arm in place hold; do
      # the two lines of one QP's report come together: the segment path, then the arm's
      path=$(grep -B1 -E "rnic verbs: rping qp [0-9]+: beyond holes: $arm;" <<< "$out" | head -1 |
             grep -E "rnic verbs: rping qp [0-9]+: segment path \(real TCP segments on tap0\)")
      arms=$(grep -E "rnic verbs: rping qp [0-9]+: beyond holes: $arm;" <<< "$out" | head -1)
      [ -n "$path" ] && [ -n "$arms" ] || { fail "$arm: no segment path reported by rping's QP"; continue; }
      opened=$(num "$path" "holes opened"); closed=$(num "$path" "closed;"); placed=$(num "$path" "FPDUs placed")
      [ "${opened:-0}" -gt 0 ] && [ "$opened" = "$closed" ] || fail "$arm: holes opened/closed: $path"
      [ "$arm" = hold ] && [ "${placed:-1}" != 0 ] && fail "hold placed FPDUs beyond a hole: $path"
      [ "$arm" = place ] && [ "${placed:-0}" = 0 ] && fail "place placed no FPDU beyond a hole: $path"
      echo "rpingseg: $arm: ${opened} holes opened and closed, ${placed} FPDUs placed beyond them"
    done
    ;;
  *) echo "impaired_link.sh: unknown case $CASE"; exit 2 ;;
esac
[ $fails = 0 ] && echo "ImpairedLink.$CASE passed"
exit $fails
