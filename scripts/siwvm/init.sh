#!/bin/sh
# /init of the siw test VM (busybox sh), installed by scripts/siwvm/build.sh.
# Kernel command line: siwvm.scenario=NAME runs /mnt/host/scenarios/NAME.sh from the 9p share
# "hostshare" (set up by run.sh) with OUT=/mnt/host/out; then the VM powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo "SIWVM-INIT uptime=$(cut -d' ' -f1 /proc/uptime)"

SCEN=""
for w in $(cat /proc/cmdline); do
  case "$w" in siwvm.scenario=*) SCEN="${w#*=}" ;; esac
done

# modules, in the order modprobe --show-depends gave on the build host
while read -r mod args; do
  [ -n "$mod" ] || continue
  insmod "$mod" $args 2>/tmp/insmod.err || grep -q 'File exists' /tmp/insmod.err \
    || { echo "SIWVM: insmod $mod failed: $(cat /tmp/insmod.err)"; }
done < /modules.insmod

mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=none hostshare /mnt/host \
  || echo "SIWVM: no 9p share"

# slirp: guest 10.0.2.15/24, host (and the host's 127.0.0.1) is 10.0.2.2
/bin/ip link set lo up
/bin/ip link set eth0 up
/bin/ip addr add 10.0.2.15/24 dev eth0
/bin/ip route add default via 10.0.2.2 dev eth0
ulimit -l unlimited
# only siw0 on eth0: siw on lo cannot be used through rdma_cm on 6.1 (zero GID)
/usr/bin/rdma link add siw0 type siw netdev eth0 || echo "SIWVM: rdma link add siw0 failed"
echo "SIWVM-READY uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r) devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"

OUT=/mnt/host/out; SDIR=/mnt/host/scenarios
mkdir -p "$OUT"
export OUT SDIR
[ -f /mnt/host/env.sh ] && . /mnt/host/env.sh
rc=127
if [ -n "$SCEN" ] && [ -f "$SDIR/$SCEN.sh" ]; then
  echo "SIWVM-SCENARIO-START $SCEN"
  ( cd /tmp && timeout "${SCEN_TIMEOUT:-300}" sh "$SDIR/$SCEN.sh" ) > "$OUT/scenario.log" 2>&1
  rc=$?
  cat "$OUT/scenario.log"
  echo "SIWVM-SCENARIO-END $SCEN rc=$rc"
else
  echo "SIWVM: no scenario '$SCEN' in $SDIR"
fi
echo "$rc" > "$OUT/scenario.rc"
dmesg > "$OUT/dmesg.txt" 2>/dev/null
sync
umount /mnt/host 2>/dev/null
echo "SIWVM-POWEROFF"
poweroff -f
sleep 5
echo o > /proc/sysrq-trigger
