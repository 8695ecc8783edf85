#!/usr/bin/env bash
# Host-side smoke test of the BlueZ test VM: prepare.sh, then run-in-vm.sh smoke-guest.sh.
#   IntegrationTests/bluez/vm/smoke.sh [run-in-vm.sh options]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$HERE/prepare.sh"
exec "$HERE/run-in-vm.sh" "$@" "$HERE/smoke-guest.sh"
