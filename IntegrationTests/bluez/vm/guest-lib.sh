# shellcheck shell=bash
# Helpers for scripts that run INSIDE the BlueZ test VM (see run-in-vm.sh).
# A guest script sources it:   source "$BLUEZ_VM_DIR/guest-lib.sh"
#
# Environment a guest script gets (set by guest-init.sh):
#   VM_RESULTS        writable folder shared with the host (same path on both sides)
#   BLUEZ_VM_DIR      this folder (IntegrationTests/bluez/vm)      REPO_ROOT   the repository
#   BLUEZ_VM_CACHE    REPO/.cache/bluez-vm              BLUEZ_VM_KDIR, BLUEZ_VM_KVER
#   BLUEZ_VM_PYTHON   venv python with bleak (+ system dbus/gi)
#   HCI0_ADDR=00:AA:01:00:00:00  HCI1_ADDR=00:AA:01:01:00:01  (btvirt -L -l2)
#   HCI2_ADDR=00:AA:01:02:00:02  HCI3_ADDR=00:AA:01:03:00:03  (run-in-vm.sh --controllers 3, 4)
#     Two connections at once to ONE controller: btvirt 5.66 gives a new LE connection the
#     initiator's first free handle (from 42) on both ends, so a second central connecting
#     to hci0 while hci1 is connected makes a second handle 42 on hci0 and the guest kernel
#     panics (duplicate sysfs "hci0:42", then a list_del BUG). Pad the second central
#     first: e.g. hci2 connects to hci3 (advertising), then its next handle, 43, is free on
#     hci0 too (see IntegrationTests/bluez/worker_central.py pad_connection).
#   BLUEZ_VM_CONTROLLERS  number of controllers (run-in-vm.sh --controllers; default 2)
#   BLUEZ_VM_HOST_ADDR    with run-in-vm.sh --host-port PORT: the address at which the
#                         guest reaches the host's 127.0.0.1:PORT (else empty);
#                         BLUEZ_VM_HOST_PORTS the forwarded ports (space-separated)
#   HOME=/tmp/home (the root filesystem is the host's /, read-only; /tmp, /run,
#   /var/lib/bluetooth and /dev/shm are fresh tmpfs; the repository, BLUEZ_VM_CACHE and
#   run-in-vm.sh --share folders are mounted read-only at their host paths over them)
#
# Timeouts are generous: under TCG on a loaded host guest time crawls while guest timers
# follow the host's clock.
#
# Functions:
#   start_bluetoothd [ARGS...]  start `bluetoothd -n ARGS` in the background (log:
#                               $VM_RESULTS/bluetoothd.log) and wait_for_bluez
#                               (started again if it dies of a signal: see below)
#   stop_bluetoothd             stop it and wait until org.bluez is gone from the bus
#   bluetoothd_crash_report     "# " lines naming each bluetoothd crash of the run
#   restart_bluetoothd [ARGS..] stop + start (e.g. `-f conf` with [GATT] ExchangeMTU = 247)
#   wait_for_bluez [SECS]       until bluetoothd owns org.bluez and hci0/hci1 are powered
#   wait_for_controllers [N] [SECS]   until N controllers (hci0..) exist in the kernel
#   start_btmon                 HCI trace of both controllers to $VM_RESULTS/btmon.log
#   btmgmt_run ARGS...          btmgmt without a terminal (plain btmgmt prints nothing)
#   kick_advertising [hciN]     re-enable hciN's advertising so scanners see it now
#   bluez_example NAME [hciN]   copy of BlueZ's example script NAME pinned to hciN
#   load_bt_modules / start_btvirt [ARGS] / start_dbus / setup_host_network
#                               (done by guest-init.sh already)
#   ok DESC / not_ok DESC / check DESC CMD... / run_tap DESC CMD... / tap_done
#                               result lines and counts from IntegrationTests/lib/tap.sh (end
#                               a guest script with `tap_done; exit $?`)
#   wait_for SECS DESC CMD...   poll CMD every 0.5 s (IntegrationTests/lib/wait.sh)
#   status_jq OPT FILTER CLI... jq on `CLI status --json` (IntegrationTests/lib/status.sh)
#
# Python centrals: bvm_bleak.py in this folder (find/connect with bleak from hci1, with
# workarounds for btvirt and BlueZ races; read its docstring).

: "${VM_RESULTS:=/tmp}"
BLUEZ_VM_RUN=/run/bluez-vm
BLUETOOTHD=/usr/libexec/bluetooth/bluetoothd
HCI0_ADDR=00:AA:01:00:00:00
HCI1_ADDR=00:AA:01:01:00:01
HCI2_ADDR=00:AA:01:02:00:02
HCI3_ADDR=00:AA:01:03:00:03
export HCI0_ADDR HCI1_ADDR HCI2_ADDR HCI3_ADDR
mkdir -p "$BLUEZ_VM_RUN" 2>/dev/null

bvm_log() { printf '[%s] %s\n' "$(cut -d' ' -f1 /proc/uptime)" "$*" >&2; }

_bvm_wait() { # _bvm_wait SECS DESC CMD... : poll CMD every 0.1 s (wait.sh's loop)
  poll_until "$1" 0.1 "timed out after ${1}s waiting for $2" "${@:3}"
}

load_bt_modules() {
  # ctr, sha512_generic and drbg first (drbg's self-tests use ctr(aes) and hmac(sha512);
  # without them the kernel logs a failed self-test for those variants): drbg provides "stdrng", the kernel's default RNG, which
  # SMP needs for its ECDH (P-256) key pair. The kernel cannot load them on demand here (its
  # request_module runs the initramfs's modprobe, which knows no module folder), so without
  # them ecdh-nist-p256's self-test fails ("test failed on vector 2, err=-14": -EFAULT from
  # ecc_gen_privkey when crypto_get_default_rng fails), bluetooth logs "Unable to create
  # ECDH crypto context" for every controller and no LE pairing can ever work.
  local m
  for m in ctr sha512_generic drbg hci_vhci af_alg algif_hash algif_skcipher aes_generic ecb cmac; do
    modprobe -d "$BLUEZ_VM_KDIR" "$m" || { bvm_log "modprobe $m failed"; return 1; }
  done
}

setup_host_network() { # virtio-net eth0 on qemu's user network (run-in-vm.sh --host-port):
  # static 10.0.2.15/24 (no DHCP client needed), loopback up too.
  modprobe -d "$BLUEZ_VM_KDIR" virtio_net || { bvm_log "modprobe virtio_net failed"; return 1; }
  _bvm_wait 30 "eth0" test -e /sys/class/net/eth0 || return 1
  ip link set lo up &&
    ip link set eth0 up &&
    ip addr add 10.0.2.15/24 dev eth0 &&
    ip route add default via 10.0.2.2 dev eth0
}

_bvm_hci_count() { local n=0 d; for d in /sys/class/bluetooth/hci*; do [[ -e $d ]] && n=$((n + 1)); done; echo $n; }
wait_for_controllers() { # [N=2] [SECS=60]
  _bvm_wait "${2:-60}" "${1:-2} controllers" _bvm_hci_at_least "${1:-2}"
}
_bvm_hci_at_least() { (($(_bvm_hci_count) >= $1)); }

start_btvirt() { # [ARGS...] default: -L -l2 (two linked LE controllers)
  (($#)) || set -- -L -l2
  btvirt "$@" >>"$VM_RESULTS/btvirt.log" 2>&1 &
  echo $! >"$BLUEZ_VM_RUN/btvirt.pid"
}

start_dbus() {
  mkdir -p /run/dbus
  dbus-daemon --system --fork --nopidfile || return 1
  _bvm_wait 60 "system bus" test -S /run/dbus/system_bus_socket
}

_bvm_name_owned() {
  dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus.NameHasOwner "string:$1" 2>/dev/null | grep -q 'boolean true'
}
_bvm_powered() {
  dbus-send --system --print-reply --dest=org.bluez "/org/bluez/$1" \
    org.freedesktop.DBus.Properties.Get string:org.bluez.Adapter1 string:Powered 2>/dev/null |
    grep -q 'boolean true'
}
_bvm_all_powered() {
  local d
  for d in /sys/class/bluetooth/hci*; do
    # hciN:HANDLE entries are connections, not adapters (seen: hci0:42 failed the check).
    [[ -e $d && $d != *:* ]] || continue
    _bvm_powered "$(basename "$d")" || return 1
  done
}

# SECS is optional; every caller so far takes the default.
# shellcheck disable=SC2120
wait_for_bluez() { # [SECS=60]: org.bluez owned and every controller powered
  local secs=${1:-60}
  _bvm_wait "$secs" "org.bluez on the system bus" _bvm_name_owned org.bluez &&
    _bvm_wait "$secs" "adapters powered" _bvm_all_powered
}

start_bluetoothd() { # [ARGS...] extra bluetoothd options, e.g. -f /path/main.conf -d
  if [[ -s $BLUEZ_VM_RUN/bluetoothd.pid ]] && kill -0 "$(cat "$BLUEZ_VM_RUN/bluetoothd.pid")" 2>/dev/null; then
    bvm_log "bluetoothd already running; use restart_bluetoothd"; return 1
  fi
  echo "=== bluetoothd -n $* ===" >>"$VM_RESULTS/bluetoothd.log"
  rm -f "$BLUEZ_VM_RUN/bluetoothd.pid"
  _bvm_supervise_bluetoothd "$@" &
  local supervisor=$! end=$((SECONDS + 60))
  echo "$supervisor" >"$BLUEZ_VM_RUN/bluetoothd-supervisor.pid"
  until _bvm_name_owned org.bluez; do   # fail fast when bluetoothd exits (bad options)
    if ! kill -0 "$supervisor" 2>/dev/null; then
      bvm_log "bluetoothd exited early: $(tail -n 3 "$VM_RESULTS/bluetoothd.log" | tr '\n' ' ')"
      return 1
    fi
    if ((SECONDS >= end)); then bvm_log "timed out waiting for org.bluez"; return 1; fi
    sleep 0.1
  done
  wait_for_bluez
}

# bluetoothd as a host's bluetooth.service with Restart=on-failure runs it: a bluetoothd
# that dies of a signal nobody sent (BlueZ 5.66 segfaulted once in CI, in the proxy phase,
# while a central in the same daemon reconnected) is started again, and the crash is
# written to $VM_RESULTS/bluetoothd-crashes with the log's last lines, so that a suite
# tests what the worker and the proxy do when bluetoothd comes back and reports the crash
# (bluetoothd_crash_report) rather than failing on BlueZ's own fault. An exit status
# (bad options) ends the supervision; stop_bluetoothd ends it before it stops bluetoothd.
_bvm_supervise_bluetoothd() {
  local pid rc crashes=0
  trap 'exit 0' TERM
  while :; do
    "$BLUETOOTHD" -n "$@" >>"$VM_RESULTS/bluetoothd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$BLUEZ_VM_RUN/bluetoothd.pid"
    wait "$pid"; rc=$?
    ((rc > 128)) || exit "$rc"
    crashes=$((crashes + 1))
    { echo "bluetoothd (pid $pid) died of signal $((rc - 128)) at $(cut -d' ' -f1 /proc/uptime) s; started again; its log's last lines:"
      tail -n 12 "$VM_RESULTS/bluetoothd.log" | sed 's/^/    /'; } >>"$VM_RESULTS/bluetoothd-crashes"
    ((crashes < 5)) || exit "$rc"
    sleep 1
  done
}

bluetoothd_crash_report() { # "# " lines for a suite's output: each crash the supervisor saw
  [[ -s $VM_RESULTS/bluetoothd-crashes ]] || return 0
  echo "# bluetoothd crashed in this run (BlueZ's fault, restarted as Restart=on-failure would):"
  sed 's/^/# /' "$VM_RESULTS/bluetoothd-crashes"
}

stop_bluetoothd() {
  local pid supervisor
  supervisor=$(cat "$BLUEZ_VM_RUN/bluetoothd-supervisor.pid" 2>/dev/null) &&
    kill "$supervisor" 2>/dev/null && _bvm_wait 10 "bluetoothd's supervisor to exit" _bvm_gone "$supervisor"
  rm -f "$BLUEZ_VM_RUN/bluetoothd-supervisor.pid"
  pid=$(cat "$BLUEZ_VM_RUN/bluetoothd.pid" 2>/dev/null) || return 0
  rm -f "$BLUEZ_VM_RUN/bluetoothd.pid"
  kill "$pid" 2>/dev/null || return 0
  _bvm_wait 30 "bluetoothd to exit" _bvm_gone "$pid" || kill -9 "$pid" 2>/dev/null
  _bvm_wait 30 "org.bluez to leave the bus" _bvm_not_owned org.bluez
}
_bvm_gone() { ! kill -0 "$1" 2>/dev/null; }
_bvm_not_owned() { ! _bvm_name_owned "$1"; }

restart_bluetoothd() { stop_bluetoothd && start_bluetoothd "$@"; }

start_btmon() { # record all HCI traffic to $VM_RESULTS/btmon.log (text) until poweroff
  stdbuf -oL btmon -T >"$VM_RESULTS/btmon.log" 2>&1 &
  echo $! >"$BLUEZ_VM_RUN/btmon.pid"
  sleep 0.3
}

kick_advertising() { # [hciN=hci0]: switch hciN's advertising off and on (raw HCI). btvirt
  # reports an advertisement to scanners only at that edge or when they start scanning,
  # and the kernel may drop the latter (see bvm_bleak.py). Only while hciN advertises.
  local hci=${1:-hci0}
  hcitool -i "$hci" cmd 0x08 0x000a 00 >/dev/null && hcitool -i "$hci" cmd 0x08 0x000a 01 >/dev/null
}

btmgmt_run() { # btmgmt ARGS... without a terminal: btmgmt quits at EOF on stdin before
  # its reply arrives (prints nothing), so give it a stdin that stays open.
  timeout 15 btmgmt "$@" < <(exec sleep 15)
}

bluez_example() { # NAME [ADAPTER=hci0]: copy BlueZ's example NAME (bluez-test-scripts,
  # maybe gzipped) to /tmp, pinned to ADAPTER (the examples take the first adapter the
  # bus lists, which may be hci1); prints the copy's path. Run it with /usr/bin/python3 -u.
  local name=$1 adapter=${2:-hci0} src=/usr/share/doc/bluez-test-scripts/examples/$1
  local dst=/tmp/bluez-example-$name-$adapter.py
  if [[ -f $src ]]; then cp "$src" "$dst"
  elif [[ -f $src.gz ]]; then gzip -dc "$src.gz" >"$dst"
  else bvm_log "no BlueZ example $name (install bluez-test-scripts)"; return 1; fi
  sed -i "s|^\( *adapter = \)find_adapter(bus)\$|\1'/org/bluez/$adapter'|" "$dst"
  grep -q "adapter = '/org/bluez/$adapter'" "$dst" || { bvm_log "cannot pin $name to $adapter"; return 1; }
  echo "$dst"
}

# ------------------------------------------------------------- the suites' library
# ok, not_ok, check, run_tap, tap_done (tap.sh); wait_for, poll_until (wait.sh); status_jq
# (status.sh).
# shellcheck source=../../lib/tap.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/tap.sh"
# shellcheck source=../../lib/wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/wait.sh"
# shellcheck source=../../lib/status.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/status.sh"
