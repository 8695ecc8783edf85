#!/usr/bin/env bash
# Who may touch the worker over Bluetooth, in a BlueZ VM of its own: a plain LE device that
# only connects is never counted, refused or disconnected (phase neighbours);
# bluetooth.security and the pairing agent and window (security). It is
# Tests/Suites/bluetooth.sh with those two phases, which that suite leaves out, so that
# `make test` can balance its two VM lanes (the bystanders phase is bluetooth-bystanders.sh).
# security comes last: after its pairings, Debian 12's guest kernel has crashed in
# hci_chan_del (list_del) when bluetoothd closed its sockets later (the restart phase).
# Environment: as bluetooth.sh.
set -u
cd "$(dirname "$0")/../.."
EDGECODER_BT_PHASES="neighbours security" exec bash Tests/Suites/bluetooth.sh
