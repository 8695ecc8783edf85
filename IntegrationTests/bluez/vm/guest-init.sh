#!/bin/bash
# Stage 2 of the BlueZ test VM, run by the initramfs's /init inside the chroot (the host's
# / read-only) with the host's bash:  guest-init.sh RESULTS_PATH
# Sets up Bluetooth (modules, btvirt, system D-Bus, bluetoothd), runs the guest script
# with its output in RESULTS/output.log and its exit code in RESULTS/exit-code.
RES="$1"
exec </dev/null >>"$RES/setup.log" 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/libexec/bluetooth
export HOME=/tmp/home LANG=C.UTF-8
mkdir -p "$HOME"

console() { echo "bluez-vm: $*" >/dev/console; echo "bluez-vm: $*"; }
setup_failed() {
  console "SETUP FAILED: $*"
  echo "$*" >"$RES/setup-error"
  exit 1
}

# run.env (written by run-in-vm.sh): VM_SCRIPT, VM_ARGS (array), VM_CWD, BLUEZ_VM_DIR,
# BLUEZ_VM_CACHE, BLUEZ_VM_KVER, BLUETOOTHD_ARGS, BLUEZ_VM_NO_BLUETOOTHD, BLUEZ_VM_BTMON,
# BLUEZ_VM_CONTROLLERS, BLUEZ_VM_HOST_ADDR, BLUEZ_VM_HOST_PORTS, user variables.
# shellcheck source=/dev/null
source "$RES/run.env" || setup_failed "cannot read $RES/run.env"
export VM_RESULTS="$RES"
export BLUEZ_VM_KDIR="$BLUEZ_VM_CACHE/kernel-$BLUEZ_VM_KVER"
export BLUEZ_VM_PYTHON="$BLUEZ_VM_CACHE/venv/bin/python3"
export REPO_ROOT BLUEZ_VM_DIR BLUEZ_VM_CACHE BLUEZ_VM_KVER
# shellcheck source=guest-lib.sh
source "$BLUEZ_VM_DIR/guest-lib.sh" || setup_failed "cannot source guest-lib.sh"

bvm_log "guest up: kernel $(uname -r)"
load_bt_modules || setup_failed "loading Bluetooth/crypto modules from $BLUEZ_VM_KDIR"
NCTRL="${BLUEZ_VM_CONTROLLERS:-2}"
# BLUEZ_VM_BTVIRT_MODE=dual (run-in-vm.sh --env): BR/EDR and LE controllers, for the checks
# that need Bluetooth Classic; LE only otherwise.
if [[ ${BLUEZ_VM_BTVIRT_MODE:-le} == dual ]]; then start_btvirt "-l$NCTRL"; else start_btvirt -L "-l$NCTRL"; fi
wait_for_controllers "$NCTRL" 60 || setup_failed "btvirt did not create $NCTRL controllers (see btvirt.log)"
bvm_log "controllers: $(ls /sys/class/bluetooth | tr '\n' ' ')"
if [[ -n "${BLUEZ_VM_HOST_ADDR:-}" ]]; then   # run-in-vm.sh --host-port
  setup_host_network || setup_failed "guest network for --host-port (virtio_net, eth0)"
  bvm_log "eth0 up: host ports ${BLUEZ_VM_HOST_PORTS} at $BLUEZ_VM_HOST_ADDR"
fi
start_dbus || setup_failed "dbus-daemon --system"
[[ "${BLUEZ_VM_BTMON:-0}" == 1 ]] && start_btmon
if [[ "${BLUEZ_VM_NO_BLUETOOTHD:-0}" != 1 ]]; then
  # BLUETOOTHD_ARGS is split on spaces on purpose (e.g. "-f /path/main.conf -d").
  # shellcheck disable=SC2086
  start_bluetoothd $BLUETOOTHD_ARGS || setup_failed "bluetoothd did not come up (see bluetoothd.log)"
  bvm_log "bluetoothd ready"
fi

cd "$VM_CWD" 2>/dev/null || cd /
console "BEGIN $VM_SCRIPT (uptime $(cut -d' ' -f1 /proc/uptime)s)"
bash "$VM_SCRIPT" "${VM_ARGS[@]}" </dev/null >"$RES/output.log" 2>&1
rc=$?
echo "$rc" >"$RES/exit-code.tmp" && mv "$RES/exit-code.tmp" "$RES/exit-code"
console "END $VM_SCRIPT exit=$rc (uptime $(cut -d' ' -f1 /proc/uptime)s)"
sync
exit 0
