#!/usr/bin/env bash
# The development coordinator that the coordinator-client tests use: its own checks
# (every schema, the token lifecycle, every failure switch) against curl.
set -u
cd "$(dirname "$0")/../coordinator" && exec bash test_dev_coordinator.sh
