# shellcheck shell=bash
# Waiting for a condition, for the suites and the VM's guest scripts (guest-lib.sh sources
# this file, so every guest script has wait_for). Source it:
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/wait.sh"    (from IntegrationTests/suites)
#
# Functions:
#   wait_for SECS DESC CMD...   run CMD (its output dropped) every 0.5 s until it succeeds:
#                               0; after SECS s, "timed out after SECS s: DESC" to stderr
#                               (bvm_log's stamp in a guest) and 1
#   poll_until SECS POLL MESSAGE CMD...   the same loop, CMD every POLL s, MESSAGE (whole)
#                               on the timeout (guest-lib.sh's own waits poll every 0.1 s)
# The time is the shell's SECONDS: a CMD that hangs is not cut short (give it a timeout).

poll_until() {
  local secs=$1 poll=$2 message=$3; shift 3
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= end)); then
      if declare -F bvm_log >/dev/null; then bvm_log "$message"; else echo "$message" >&2; fi
      return 1
    fi
    sleep "$poll"
  done
}

wait_for() { poll_until "$1" 0.5 "timed out after ${1}s: $2" "${@:3}"; }
