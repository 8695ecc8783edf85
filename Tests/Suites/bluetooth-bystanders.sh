#!/usr/bin/env bash
# A device that only connects, in a BlueZ VM of its own: it connects 50 times in a row, under
# bluetooth.security open then encrypted, always completes service discovery, and btmon
# records no pairing attempt toward it (phase bystanders). It is Tests/Suites/bluetooth.sh
# with that one phase, which that suite leaves out, so that `make test` can run it in the lane
# that would otherwise end first (the 100 connects are about five minutes under TCG).
# Environment: as bluetooth.sh.
set -u
cd "$(dirname "$0")/../.."
EDGECODER_BT_PHASES="bystanders" exec bash Tests/Suites/bluetooth.sh
