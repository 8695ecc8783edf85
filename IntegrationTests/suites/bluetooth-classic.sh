#!/usr/bin/env bash
# Bluetooth Classic toward the worker's adapter, in a BlueZ VM of its own with dual-mode
# (BR/EDR and LE) controllers: with the worker's Just Works agent registered no first
# Classic pairing gets a bond, and the agent stands back while its adapter is
# Classic-connectable (switched on behind bluetoothd with btmgmt, seen in the kernel's
# settings by a daemon without CAP_NET_ADMIN) or discoverable (phase classic of
# IntegrationTests/bluez/worker-guest.sh). Its own VM: in a dual-mode VM bleak's LE connects to the
# worker time out (bluetoothd tries BR/EDR first), so the other phases run LE-only.
# `make test` runs it in the systemd VM suite's lane, after it.
# Environment: as bluetooth.sh.
set -u
cd "$(dirname "$0")/../.." || exit 1
EDGECODER_BT_PHASES="classic" EDGECODER_BT_BTVIRT_MODE=dual exec bash IntegrationTests/suites/bluetooth.sh
