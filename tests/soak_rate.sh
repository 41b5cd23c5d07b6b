#!/usr/bin/env bash
# tests/soak_rate.sh RNIC: `rnic soak --rate` (SOAK_RATE in scripts/soak.sh) keeps each connection
# to at most RATE operations a second: a 6-second soak of 2 connections at 20 a second does at
# most 2 x 20 x 6 operations plus one per opening (each opening starts its own schedule; a kill
# reopens), where an unpaced one does thousands. The bound holds however slow the machine is.
# (Both programs must end cleanly; the script's judgement of memory growth is the soak's own test.)
# An out-of-range --rate is one line and exit 2.
set -uo pipefail
RNIC=${1:?usage: soak_rate.sh RNIC}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# 0.1 minutes: scripts/soak.sh runs the client for 6 s (it rounds to whole seconds).
out=$(SOAK_RATE=20 SOAK_QPS=2 SOAK_EVERY=1 SOAK_KILL_EVERY=1 RNIC=$RNIC \
      bash "$ROOT/scripts/soak.sh" 0.1 2>&1)
grep -q '^soak: 2 connections for 6 s, .* at most 20 operations a second' <<<"$out" ||
  { echo "FAIL: scripts/soak.sh did not run 2 paced connections for 6 s:"; echo "$out"; exit 1; }
echo "$out" | tail -n 4
fail() { echo "FAIL: $1; the soak's output:"; echo "$out"; exit 1; }
# Both programs' own verdicts, not the script's: six seconds are too few for its judgement of
# resident memory under ThreadSanitizer, whose shadow memory grows as the run reaches new memory.
grep -q '^server: exit 0: ' <<<"$out" || fail "the soak server did not end cleanly"
line=$(grep -E '^client: exit 0: client: [0-9]+ operations, .* [0-9]+ kills, no errors$' <<<"$out")
[ -n "$line" ] || fail "the soak client did not end cleanly"
ops=$(sed -E 's/^client: exit 0: client: ([0-9]+) operations.*/\1/' <<<"$line")
kills=$(sed -E 's/.* ([0-9]+) kills, no errors$/\1/' <<<"$line")
[ "$ops" -gt 0 ] || fail "the paced soak did no operation"
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
  if [ "$erc" != 2 ] || [ "$lines" != 1 ] || ! grep -q -- "^rnic soak: --rate" <<<"$err"; then
    echo "FAIL: --rate $bad: exit $erc, output:"; echo "$err"; exit 1
  fi
done
echo "ok: an out-of-range --rate is refused"
