# smoke: siw is up in the guest (device, link, rping binary runs)
. "$SDIR/lib.sh"
log "kernel $(uname -r)"
rdma link show
ibv_devices
rping -h 2>&1 | head -2
[ -e /sys/class/infiniband/siw0 ]
