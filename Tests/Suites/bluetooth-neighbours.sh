#!/usr/bin/env bash
# The host's Bluetooth neighbours, in a BlueZ VM of its own: a plain LE device that only
# connects is never counted, refused or disconnected (phase neighbours), and one that
# connects 50 times in a row, under security open then encrypted, always completes service
# discovery with no pairing attempt toward it in btmon (phase bystanders). It is
# Tests/Suites/bluetooth.sh with those two phases, which that suite leaves out, so that
# `make test` runs the two VMs side by side. Environment: as bluetooth.sh.
set -u
cd "$(dirname "$0")/../.."
EDGECODER_BT_PHASES="neighbours bystanders" exec bash Tests/Suites/bluetooth.sh
