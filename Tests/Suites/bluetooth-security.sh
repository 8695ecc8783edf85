#!/usr/bin/env bash
# Who may touch the worker over Bluetooth, part two, in a BlueZ VM of its own: a device that
# connects 50 times in a row under security encrypted always completes service discovery
# with no pairing attempt toward it in btmon (bystanders, encrypted), then bluetooth.security
# and the pairing agent and window (security). Part one (neighbours, and the same loop under
# open) is Tests/Suites/bluetooth-neighbours.sh; bluetooth.sh leaves these phases out, so that
# `make test` spreads the VMs over its two VM lanes.
# The bystander loop pauses a second between connects: the worker's kernel re-arms its
# advertising 35-50 ms after each link ends, and a connect btvirt receives in that gap fails
# at once and leaves hci1 unable to reach the worker (see sc_bystander_loop).
# security comes last: after its pairings, Debian 12's guest kernel has crashed in
# hci_chan_del (list_del) when bluetoothd closed its sockets later (the restart phase).
# Environment: as bluetooth.sh.
set -u
cd "$(dirname "$0")/../.."
EDGECODER_BT_PHASES="bystanders security" EDGECODER_BT_BYSTANDER_LEVELS=enc exec bash Tests/Suites/bluetooth.sh
