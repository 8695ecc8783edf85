#!/usr/bin/env bash
# The Debian package (`make deb`) under a real systemd as PID 1: one boot of the BlueZ test
# VM with run-in-vm.sh --systemd (the host's / read-only under a tmpfs overlay, so dpkg,
# sysusers and systemd write nothing to the host), btvirt controllers hci0/hci1, systemd's
# own dbus and bluetooth services. The guest side, Tests/Systemd/deb-guest.sh, installs the
# .deb with dpkg -i and checks with systemctl and journalctl: enabled and READY in mode
# off; mode on against the dev coordinator (Tests/DevCoordinator) on this host with a real
# llama.cpp server (Tests/ModelServer), both reached through run-in-vm.sh --host-port;
# systemctl reload with a good and a bad config (journal fields EDGECODER_EVENT=…); the
# watchdog (SIGSTOP); a SIGKILL with a result in the outbox; mode bluetooth across
# `systemctl restart bluetooth` with a bleak central on hci1; dpkg --purge.
#
#   Tests/Suites/systemd-deb.sh
#
# Environment: EDGECODER_DEB (a .deb to test; default: `make deb` builds
# .build/deb/edgecoder-worker_*.deb, a release build the first time), EDGECODER_SD_KEEP=1
# (keep the results folder after a pass), EDGECODER_SD_TIMEOUT (VM seconds, default 900),
# BLUEZ_VM_* (run-in-vm.sh). Needs root (apt-get, the VM): else skipped (exit 77).
# Prints "# name: value" figures: package and installed size, dpkg -i time, start to
# READY, systemd-analyze security of the running unit.
# Results (kept on failure): .cache/bluez-vm/runs/systemd-deb.XXXXXX: output.log,
# console.log, setup.log, journal-edgecoder-worker.log, security.txt, dpkg-*.log.
set -u
cd "$(dirname "$0")/../.."
source Tests/Suites/lib/tap.sh
REPO="$PWD"
START=$SECONDS

finish() {
  if [[ -n "${results:-}" ]]; then
    tap_count "$results/output.log"
    if ((TAP_FAILED == 0)) && [[ "${EDGECODER_SD_KEEP:-0}" != 1 ]]; then
      rm -rf "$results"
    else
      echo "# results: $results"
    fi
  fi
  echo "# suite took $((SECONDS - START))s"
  tap_done
  exit $?
}

[[ "$(id -u)" == 0 ]] || tap_skip "systemd-deb: needs root (make deb's packages, the VM, dpkg in the guest)"

# ------------------------------------------------------------------ the package
log="$(mktemp)"
deb="${EDGECODER_DEB:-}"
if [[ -z "$deb" ]]; then
  t0=$SECONDS
  if make --no-print-directory deb >"$log" 2>&1; then
    deb="$(ls -t .build/deb/edgecoder-worker_*.deb | head -n1)"
    ok "make deb builds $(basename "$deb") and lintian finds no error ($((SECONDS - t0))s)"
  else
    tail -n 30 "$log" | sed 's/^/# /'
    not_ok "make deb"
    rm -f "$log"
    finish
  fi
  grep -E '^[EWI]: ' "$log" | sed 's/^/# lintian: /'
fi
rm -f "$log"
deb="$(realpath "$deb")"
[[ -f "$deb" ]] || { not_ok "no package at $deb"; finish; }
echo "# package size: $(stat -c %s "$deb") bytes ($(basename "$deb"))"
echo "# installed size: $(dpkg-deb -f "$deb" Installed-Size) KiB"

# ------------------------------------------------------------------ prepare
prep="$(mktemp)"
if ! Tests/BlueZ/vm/prepare.sh >"$prep" 2>&1; then
  tail -n 20 "$prep" | sed 's/^/# /'; rm -f "$prep"
  not_ok "Tests/BlueZ/vm/prepare.sh"; finish
fi
if ! ms_env="$(Tests/ModelServer/prepare.sh 2>>"$prep")"; then
  tail -n 20 "$prep" | sed 's/^/# /'; rm -f "$prep"
  not_ok "Tests/ModelServer/prepare.sh"; finish
fi
rm -f "$prep"
eval "$(grep '^EDGECODER_' <<<"$ms_env")"
ok "VM and model server prepared"

mkdir -p .cache/bluez-vm/runs
results="$(mktemp -d "$REPO/.cache/bluez-vm/runs/systemd-deb.XXXXXX")"
chmod 755 "$results"
share_deb=()
[[ "$deb" == "$REPO"/* ]] || share_deb=(--share "$(dirname "$deb")")

# ------------------------------------------------------------------ servers on this host
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
llama_port=""
for _ in 1 2 3; do
  llama_port="$(free_port)"
  Tests/ModelServer/start-llama.sh "$llama_port" >/dev/null 2>>"$results/llama-start.log" && break
  llama_port=""
done
[[ -n "$llama_port" ]] || { tail -n 20 "$results/llama-start.log" | sed 's/^/# /'; not_ok "llama.cpp server started"; finish; }
coproc COORD { exec python3 Tests/DevCoordinator/dev_coordinator.py --port 0 2>>"$results/coordinator.log"; }
coord_pid=$COORD_PID
read -r -t 30 line <&"${COORD[0]}"
coord_port="${line##*:}"
cleanup() {
  kill "$coord_pid" 2>/dev/null && wait "$coord_pid" 2>/dev/null
  Tests/ModelServer/stop-llama.sh "$llama_port" >/dev/null 2>&1
}
trap 'cleanup; exit 130' INT TERM
[[ "$coord_port" =~ ^[0-9]+$ ]] || { cleanup; not_ok "dev coordinator started (said: ${line:-nothing})"; finish; }
ok "dev coordinator on 127.0.0.1:$coord_port, llama.cpp on 127.0.0.1:$llama_port"

# ------------------------------------------------------------------ the VM
Tests/BlueZ/vm/run-in-vm.sh --systemd --controllers 2 \
  --host-port "$coord_port" --host-port "$llama_port" --timeout "${EDGECODER_SD_TIMEOUT:-900}" \
  --results "$results" "${share_deb[@]}" \
  --env "DEB=$deb" --env "COORD_PORT=$coord_port" --env "LLAMA_PORT=$llama_port" \
  Tests/Systemd/deb-guest.sh
rc=$?
trap - INT TERM
cleanup
case $rc in
  0) ok "the guest suite exited 0" ;;
  124) not_ok "the VM timed out (see $results/console.log)" ;;
  125) not_ok "the VM failed before the guest suite ended (see $results/setup.log, console.log)" ;;
  *) not_ok "the guest suite exited $rc" ;;
esac
finish
