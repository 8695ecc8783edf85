#!/usr/bin/env bash
# Mode `on` end to end: the daemon against the development coordinator and a real
# llama.cpp server (Tests/Coordinator/coordinator_suite.py). The model server's venv is
# compiled once and cached (Tests/ModelServer/prepare.sh; ~10 min the first time).
set -u
cd "$(dirname "$0")/../.."
exec python3 Tests/Coordinator/coordinator_suite.py "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}"
