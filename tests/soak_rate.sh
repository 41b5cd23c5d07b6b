#!/usr/bin/env bash
# tests/soak_rate.sh RNIC: `rnic soak --rate` (SOAK_RATE in scripts/soak.sh) keeps each connection
# to at most RATE operations a second: a 6-second soak of 2 connections at 20 a second does at
# most 2 x 20 x 6 operations plus one per opening (each opening starts its own schedule; a kill
# reopens), where an unpaced one does thousands. The bound holds however slow the machine is.
# An out-of-range --rate is one line and exit 2.
set -uo pipefail
RNIC=${1:?usage: soak_rate.sh RNIC}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
out=$(SOAK_RATE=20 SOAK_QPS=2 SOAK_EVERY=1 SOAK_KILL_EVERY=1 RNIC=$RNIC \
      bash "$ROOT/scripts/soak.sh" 0.1 2>&1)
rc=$?
echo "$out" | tail -n 4
[ "$rc" = 0 ] || { echo "FAIL: the paced soak failed (exit $rc)"; exit 1; }
ops=$(echo "$out" | sed -nE 's/^PASS: ops ([0-9]+),.* kills ([0-9]+);.*/\1/p')
kills=$(echo "$out" | sed -nE 's/^PASS: ops ([0-9]+),.* kills ([0-9]+);.*/\2/p')
[ -n "$ops" ] && [ -n "$kills" ] || { echo "FAIL: no PASS line with the figures"; exit 1; }
bound=$((2 * 20 * 6 + 2 + kills))
if [ "$ops" -gt "$bound" ]; then
  echo "FAIL: $ops operations at --rate 20 on 2 connections for 6 s ($kills kills): at most $bound"
  exit 1
fi
echo "ok: $ops operations, at most $bound allowed"
for bad in -1 0.05 abc 2e6; do
  err=$("$RNIC" soak --client 127.0.0.1 --port 7190 --rate "$bad" 2>&1)
  erc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$erc" != 2 ] || [ "$lines" -gt 2 ] || ! grep -q -- "--rate" <<<"$err"; then
    echo "FAIL: --rate $bad: exit $erc, output:"; echo "$err"; exit 1
  fi
done
echo "ok: an out-of-range --rate is refused"
