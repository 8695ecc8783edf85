#!/usr/bin/env bash
# Mode `on` end to end: the daemon against the development coordinator and a real
# llama.cpp server (IntegrationTests/coordinator/coordinator_suite.py). The model server's venv is
# compiled once and cached (IntegrationTests/model-server/prepare.sh; ~10 min the first time).
# Scenarios run EDGECODER_COORDINATOR_JOBS (default 4) at a time, each with its own
# coordinator, worker and model server; own-load, which measures the host's CPU, is a
# suite of its own (IntegrationTests/suites/own-load.sh) that runs alone.
set -u
cd "$(dirname "$0")/../.." || exit 1
exec python3 IntegrationTests/coordinator/coordinator_suite.py "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}" \
  --jobs "${EDGECODER_COORDINATOR_JOBS:-4}" --except own-load,code
