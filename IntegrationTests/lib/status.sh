# shellcheck shell=bash
# Reading the daemon's status, for the suites and the VM's guest scripts (guest-lib.sh
# sources this file). Source it:
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/status.sh"    (from IntegrationTests/suites)
#
# Functions:
#   status_jq JQ-OPTION FILTER CLI...   FILTER (jq with JQ-OPTION: -c, -r) applied to
#                               `CLI... status --json`; prints nothing when either fails.
#                               CLI is the command line before `status`, e.g. edgecoder-worker,
#                               or a function that adds --runtime-dir after its arguments:
#                                 cli() { "$WORKER_BIN" "$@" --runtime-dir "$RUNDIR"; }
#                                 status_jq -c .bluetooth.advertising cli

status_jq() {
  local option=$1 filter=$2; shift 2
  "$@" status --json 2>/dev/null | jq "$option" "$filter" 2>/dev/null
}
