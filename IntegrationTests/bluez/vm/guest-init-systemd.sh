#!/bin/bash
# Stage 2 of the BlueZ test VM under systemd as PID 1 (run-in-vm.sh --systemd): run by
# the unit bluez-vm-guest.service as  guest-init-systemd.sh RESULTS_PATH.
# Like guest-init.sh, but D-Bus and bluetoothd are systemd's own services: btvirt makes
# the controllers, then `systemctl start bluetooth`. The guest script's output goes to
# RESULTS/output.log, its exit code to RESULTS/exit-code; then the VM powers off.
RES="$1"
exec </dev/null >>"$RES/setup.log" 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/libexec/bluetooth
export HOME=/tmp/home LANG=C.UTF-8
mkdir -p "$HOME"

console() { echo "bluez-vm: $*" >/dev/console; echo "bluez-vm: $*"; }
finish() { # EXIT-CODE: record it and power off (always, or the VM runs until its timeout)
  echo "$1" >"$RES/exit-code.tmp" && mv "$RES/exit-code.tmp" "$RES/exit-code"
  console "END exit=$1 (uptime $(cut -d' ' -f1 /proc/uptime)s)"
  sync
  systemctl poweroff --no-block
  exit 0
}
setup_failed() {
  console "SETUP FAILED: $*"
  echo "$*" >"$RES/setup-error"
  sync
  systemctl poweroff --no-block
  exit 1
}

# shellcheck source=/dev/null
source "$RES/run.env" || setup_failed "cannot read $RES/run.env"
export VM_RESULTS="$RES"
export BLUEZ_VM_KDIR="$BLUEZ_VM_CACHE/kernel-$BLUEZ_VM_KVER"
export BLUEZ_VM_PYTHON="$BLUEZ_VM_CACHE/venv/bin/python3"
export REPO_ROOT BLUEZ_VM_DIR BLUEZ_VM_CACHE BLUEZ_VM_KVER
# shellcheck source=guest-lib.sh
source "$BLUEZ_VM_DIR/guest-lib.sh" || setup_failed "cannot source guest-lib.sh"

bvm_log "guest up under systemd $(systemctl --version | head -n1 | cut -d' ' -f2): kernel $(uname -r)"
load_bt_modules || setup_failed "loading Bluetooth/crypto modules from $BLUEZ_VM_KDIR"
NCTRL="${BLUEZ_VM_CONTROLLERS:-2}"
mgmt_lists() { # N: the kernel's management interface lists N controllers
  timeout 15 btmgmt info < <(exec sleep 15) | grep -q "^Index list with $1 item"
}
# btvirt once the boot has settled: a controller whose set-up commands time out (a busy
# TCG guest) never reaches the kernel's management index and bluetoothd never sees it
# (seen for hci0 while systemd was still starting units). So also check the index, and
# start btvirt again when a controller is missing from it.
_bvm_wait 120 "the boot to finish" bash -c '[[ "$(systemctl is-system-running)" == @(running|degraded) ]]' ||
  bvm_log "system state after 120 s: $(systemctl is-system-running)"
for attempt in 1 2 3; do
  # A transient unit of its own: it shows in systemctl and is stopped cleanly at poweroff.
  systemd-run --unit="bluez-vm-btvirt-$attempt" --quiet \
    --property=StandardOutput=append:"$RES/btvirt.log" --property=StandardError=append:"$RES/btvirt.log" \
    btvirt -L "-l$NCTRL" || setup_failed "systemd-run btvirt"
  wait_for_controllers "$NCTRL" 60 || setup_failed "btvirt did not create $NCTRL controllers (see btvirt.log)"
  _bvm_wait 20 "$NCTRL controllers in the management interface" mgmt_lists "$NCTRL" && break
  bvm_log "attempt $attempt: the management interface lists fewer than $NCTRL controllers; btvirt again"
  systemctl stop "bluez-vm-btvirt-$attempt"
  _bvm_wait 30 "the controllers to go" bash -c '! compgen -G "/sys/class/bluetooth/hci*"'
done
mgmt_lists "$NCTRL" || setup_failed "the management interface lists fewer than $NCTRL controllers after 3 btvirt starts"
bvm_log "controllers: $(ls /sys/class/bluetooth | tr '\n' ' ')"
virtio_netdev() { # the name udev left on the virtio-net interface (it may rename eth0)
  local d
  for d in /sys/class/net/*; do
    [[ "$(basename "$(readlink -f "$d/device/driver" 2>/dev/null)")" == virtio_net ]] && { basename "$d"; return 0; }
  done
  return 1
}
if [[ -n "${BLUEZ_VM_HOST_ADDR:-}" ]]; then   # run-in-vm.sh --host-port: as setup_host_network
  modprobe -d "$BLUEZ_VM_KDIR" virtio_net || setup_failed "modprobe virtio_net"
  _bvm_wait 30 "the virtio-net interface" virtio_netdev || setup_failed "no virtio-net interface"
  udevadm settle --timeout=30
  dev="$(virtio_netdev)"
  { ip link set lo up && ip link set "$dev" up && ip addr add 10.0.2.15/24 dev "$dev" &&
      ip route add default via 10.0.2.2 dev "$dev"; } || { ip -o link >&2; setup_failed "guest network for --host-port ($dev)"; }
  bvm_log "$dev up: host ports ${BLUEZ_VM_HOST_PORTS} at $BLUEZ_VM_HOST_ADDR"
fi
_bvm_wait 60 "dbus.service" systemctl is-active --quiet dbus.service || setup_failed "dbus.service is not active"
if [[ "${BLUEZ_VM_NO_BLUETOOTHD:-0}" != 1 ]]; then
  # run-in-vm.sh masks bluetooth.target, so udev has not started it before the controllers
  # were ready.
  systemctl start bluetooth.service || setup_failed "systemctl start bluetooth"
  if ! wait_for_bluez 120; then
    { systemctl status --no-pager bluetooth.service; journalctl -b --no-pager -u bluetooth.service | tail -n 30
      btmgmt_run info; } >>"$RES/setup.log" 2>&1
    setup_failed "bluetooth.service did not power the controllers"
  fi
  bvm_log "bluetooth.service ready"
fi

cd "$VM_CWD" 2>/dev/null || cd /
console "BEGIN $VM_SCRIPT under systemd (uptime $(cut -d' ' -f1 /proc/uptime)s)"
bash "$VM_SCRIPT" "${VM_ARGS[@]}" </dev/null >"$RES/output.log" 2>&1
finish $?
