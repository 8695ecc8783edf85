#!/usr/bin/env bash
# The Swift unit and integration tests (`swift test`, one at a time, as `make unit`) as a
# suite: `make test` runs it first in its third lane, beside the VM suites, so that the
# lanes start as soon as the build is done (the tests are 90 s of timers and servers and
# about 17 s of CPU; measured beside two TCG guests, the coordinator suite and a release
# build, at nice 10: 1 128 of 1 128 passed in 101 s). Needs the test build (`make
# test-build`). The whole output goes to .build/unit-tests.log; here, the count and every
# failing test with its issue lines.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
log=.build/unit-tests.log
mkdir -p .build
"${SWIFT:-swift}" test --skip-build --no-parallel >"$log" 2>&1
rc=$?
plain() { sed 's/\x1b\[[0-9;]*m//g' "$log"; }
# swift-testing's count ("Test run with N tests in M suites passed|failed …"); XCTest's
# ("Executed N tests, with F failures") when it ran any.
summary="$(plain | grep -oE 'Test run with [0-9]+ tests?.*' | tail -n 1)"
xctest="$(plain | grep -oE 'Executed [1-9][0-9]* tests?, with [0-9]+ failures?' | tail -n 1)"
summary="${summary}${xctest:+; XCTest: $xctest}"
if [[ $rc -eq 0 ]]; then
  ok "swift test: ${summary:-every test passed}"
else
  # Each failing test and what it recorded (swift-testing's ✘ lines, XCTest's "error:").
  plain | grep -E '✘|error:|Fatal error|Crash' | head -n 60 | sed 's/^/# /'
  not_ok "swift test exited $rc: ${summary:-no summary: the tests did not run to the end} (whole output: $log)"
fi
tap_done
exit $?
