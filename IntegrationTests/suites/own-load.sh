#!/usr/bin/env bash
# The own-load accounting end to end (IntegrationTests/coordinator/coordinator_suite.py, scenario
# own-load): the worker's own model server busy is no reason to hold work, an unrelated CPU
# burner is. It reads the host's CPU, so it must run with nothing else busy: `make test`
# runs it after the other suites (IntegrationTests/lib/run-suites.sh, its "alone" list).
set -u
cd "$(dirname "$0")/../.." || exit 1
exec python3 IntegrationTests/coordinator/coordinator_suite.py "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}" --only own-load
