# interop: siw's rping (or ucmatose, or perftest's ib_write_bw) in the guest against the host's
# `rnic ping` / `rnic cmatose` / unmodified programs under `rnic run`, one case per plan line.
# The host (scripts/siw-interop.sh) writes /mnt/host/plan.txt, one case a line:
#   ID srv PORT SIZE COUNT   siw is the rping server on 10.0.2.15:PORT (the host reaches it through
#                            a slirp hostfwd); the guest marks $OUT/ID.ready once it listens
#   ID ucm PORT SIZE COUNT   siw's ucmatose is the server on 10.0.2.15:PORT (messages beyond rping's
#                            64 KiB); marked ready like srv
#   ID cli PORT SIZE COUNT   siw is the rping client of 10.0.2.2:PORT (the host's 127.0.0.1:PORT);
#                            it starts when the host creates /mnt/host/ID.go
#   ID bws PORT SIZE COUNT   siw's `ib_write_bw -R -F -d siw0` is the server on PORT (SIZE octets,
#                            COUNT iterations); marked ready like srv
#   ID bwc PORT SIZE COUNT   siw's `ib_write_bw -R -F -d siw0` is the client of 10.0.2.2:PORT;
#                            it starts on /mnt/host/ID.go like cli
# A line may end in "gated" (a spare attempt of a case): the guest then starts nothing until the
# host creates /mnt/host/ID.go, and skips the line (rc "skipped") on /mnt/host/ID.skip.
# For each case the guest writes $OUT/ID.guest.log and $OUT/ID.guest.rc (the program's exit status,
# or "killed" when it was still running CASE_TIMEOUT seconds in, or 3 s after the host's ID.done).
# A case with a file /mnt/host/ID.netem runs over an impaired link: its words are netem's options
# (e.g. "loss 2% delay 2ms 1ms"), set on eth0's egress (siw -> host) for that case only;
# $OUT/ID.netem.txt keeps `tc -s qdisc` after it (sent, dropped), so the host can tell the
# impairment happened, and $OUT/ID.snmp.before / .after the guest's TCP counters around the case
# (/proc/net/snmp: how many segments siw's TCP retransmitted).
# The whole session is captured on eth0 (siw's side of slirp) straight into $OUT/guest.pcap:
# outgoing frames after netem (a frame it drops is not in the capture), incoming ones before it;
# GUEST_CAPTURE=off (a benchmark's many megabytes) captures nothing.
. "$SDIR/lib.sh"
H=/mnt/host
CASE_TIMEOUT=${CASE_TIMEOUT:-90}
# siw's connection-manager debug messages (MPA negotiation) go to dmesg
echo 'file siw_cm.c +p' > /proc/dynamic_debug/control 2>/dev/null || log "no dynamic debug"
TP=""
if [ "${GUEST_CAPTURE:-on}" != off ]; then
  tcpdump -i eth0 -n -s 0 -U --immediate-mode -B 16384 -w "$OUT/guest.pcap" tcp > /tmp/tcpdump.log 2>&1 &
  TP=$!
  i=0; while [ $i -lt 100 ] && ! grep -q 'listening on' /tmp/tcpdump.log; do sleep 0.1; i=$((i + 1)); done
  log "capture started"
else
  : > /tmp/tcpdump.log
fi
mark guest-up
netem_on() {  # netem_on ID: the case's impairment on eth0's egress (siw -> host)
  args=$(cat "$H/$1.netem")
  grep '^Tcp:' /proc/net/snmp > "$OUT/$1.snmp.before"
  # shellcheck disable=SC2086
  tc qdisc replace dev eth0 root netem $args || log "$1: netem $args could not be set on eth0"
  log "$1: netem $args on eth0 (egress)"
}
netem_off() {  # netem_off ID: keep the counters, then a plain link again
  tc -s qdisc show dev eth0 > "$OUT/$1.netem.txt" 2>&1
  grep '^Tcp:' /proc/net/snmp > "$OUT/$1.snmp.after"
  tc qdisc del dev eth0 root 2>/dev/null; sync
}
wait_file() {  # wait_file FILE TENTHS
  j=0; while [ ! -e "$1" ] && [ "$j" -lt "$2" ]; do sleep 0.1; j=$((j + 1)); done; [ -e "$1" ]
}
while read -r id role port size count gate; do
  [ -n "$id" ] || continue
  if [ "$gate" = gated ]; then
    j=0; while [ ! -e "$H/$id.go" ] && [ ! -e "$H/$id.skip" ] && [ "$j" -lt $((CASE_TIMEOUT * 10)) ]; do sleep 0.1; j=$((j + 1)); done
    if [ ! -e "$H/$id.go" ]; then echo skipped > "$OUT/$id.guest.rc"; continue; fi
  fi
  netem=0; if [ -e "$H/$id.netem" ]; then netem_on "$id"; netem=1; fi
  case "$role" in
    srv)
      rping -s -a 10.0.2.15 -p "$port" -C "$count" -S "$size" -V > "$OUT/$id.guest.log" 2>&1 &
      pid=$!
      wait_listen "$port" 100
      mark "$id.ready"
      ;;
    ucm)
      # librdmacm's ucmatose server: sends COUNT messages of SIZE octets, then receives COUNT
      ucmatose -b 10.0.2.15 -p "$port" -C "$count" -S "$size" > "$OUT/$id.guest.log" 2>&1 &
      pid=$!
      wait_listen "$port" 100
      mark "$id.ready"
      ;;
    cli)
      if ! wait_file "$H/$id.go" $((CASE_TIMEOUT * 10)); then
        echo "host never said go" > "$OUT/$id.guest.log"; echo nogo > "$OUT/$id.guest.rc"; [ "$netem" = 1 ] && netem_off "$id"; continue
      fi
      rping -c -a 10.0.2.2 -p "$port" -C "$count" -S "$size" -V > "$OUT/$id.guest.log" 2>&1 &
      pid=$!
      ;;
    bws)
      # perftest over rdma_cm (-R): a data-exchange connection, then the test QP's, both to PORT
      ib_write_bw -R -F -d siw0 -p "$port" -s "$size" -n "$count" > "$OUT/$id.guest.log" 2>&1 &
      pid=$!
      wait_listen "$port" 100
      mark "$id.ready"
      ;;
    bwc)
      if ! wait_file "$H/$id.go" $((CASE_TIMEOUT * 10)); then
        echo "host never said go" > "$OUT/$id.guest.log"; echo nogo > "$OUT/$id.guest.rc"; [ "$netem" = 1 ] && netem_off "$id"; continue
      fi
      ib_write_bw -R -F -d siw0 -p "$port" -s "$size" -n "$count" 10.0.2.2 > "$OUT/$id.guest.log" 2>&1 &
      pid=$!
      ;;
    *) log "bad plan line: $id $role"; [ "$netem" = 1 ] && netem_off "$id"; continue ;;
  esac
  prog=rping; case "$role" in ucm) prog=ucmatose ;; bws|bwc) prog=ib_write_bw ;; esac
  log "$id: $prog $role port $port size $size count $count (pid $pid)"
  j=0; grace=30
  while kill -0 "$pid" 2>/dev/null && [ "$j" -lt $((CASE_TIMEOUT * 10)) ]; do
    if [ -e "$H/$id.done" ]; then grace=$((grace - 1)); [ "$grace" -le 0 ] && break; fi
    sleep 0.1; j=$((j + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    # a process stuck in the kernel does not die: never wait for it unbounded
    kill "$pid" 2>/dev/null; j=0
    while kill -0 "$pid" 2>/dev/null && [ "$j" -lt 50 ]; do [ "$j" = 10 ] && kill -9 "$pid" 2>/dev/null; sleep 0.1; j=$((j + 1)); done
    if kill -0 "$pid" 2>/dev/null; then rc=stuck; log "$id: $prog does not die: $(cat /proc/$pid/stack 2>/dev/null | head -3 | tr '\n' ' ')"
    else wait "$pid" 2>/dev/null; rc=killed; fi
  else
    wait "$pid"; rc=$?
  fi
  log "$id: $prog exit $rc"
  [ "$netem" = 1 ] && netem_off "$id"
  echo "$rc" > "$OUT/$id.guest.rc"; sync
done < "$H/plan.txt"
sleep 0.5
[ -n "$TP" ] && { kill -INT "$TP" 2>/dev/null; wait "$TP" 2>/dev/null; }
cat /tmp/tcpdump.log
dmesg | grep -i siw > "$OUT/siw-dmesg.txt"
log "plan done"
