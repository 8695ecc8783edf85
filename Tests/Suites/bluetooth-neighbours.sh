#!/usr/bin/env bash
# Who may touch the worker over Bluetooth, part one, in a BlueZ VM of its own: a plain LE
# device that only connects is never counted, refused or disconnected (phase neighbours),
# and one that connects 50 times in a row under security open always completes service
# discovery with no pairing attempt toward it in btmon (bystanders, open). Part two, the same
# loop under encrypted and the pairing phases, is Tests/Suites/bluetooth-security.sh: make
# test runs the two in its two VM lanes, after bluetooth.sh and systemd-deb.sh.
# Environment: as bluetooth.sh.
set -u
cd "$(dirname "$0")/../.."
EDGECODER_BT_PHASES="neighbours bystanders" EDGECODER_BT_BYSTANDER_LEVELS=open exec bash Tests/Suites/bluetooth.sh
