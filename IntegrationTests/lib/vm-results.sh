# shellcheck shell=bash
# Reading a VM run's results (IntegrationTests/bluez/vm/run-in-vm.sh --results DIR), for the
# suites that boot a VM (bluetooth.sh, systemd-deb.sh). Needs tap.sh. Source it:
#   source IntegrationTests/lib/vm-results.sh    (from the repository's root)
#
# Functions:
#   vm_verdict RC               one result line for run-in-vm.sh's exit code RC: 0 the guest
#                               suite passed, 124 the VM timed out, 125 it failed before the
#                               guest suite ended, else the guest suite's own exit code
#   vm_results_count KEEP       the guest's result lines ($results/output.log) counted with
#                               the suite's (tap_count); then $results is removed when
#                               nothing failed and KEEP is not 1, else its path printed.
#                               Nothing when $results is unset or empty.

vm_verdict() {
  case $1 in
    0) ok "the guest suite exited 0" ;;
    124) not_ok "the VM timed out (see $results/console.log)" ;;
    125) not_ok "the VM failed before the guest suite ended (see $results/setup.log, console.log)" ;;
    *) not_ok "the guest suite exited $1" ;;
  esac
}

vm_results_count() {
  [[ -n "${results:-}" ]] || return 0
  tap_count "$results/output.log"
  if ((TAP_FAILED == 0)) && [[ "${1:-0}" != 1 ]]; then
    rm -rf "$results"
  else
    echo "# results: $results"
  fi
}
