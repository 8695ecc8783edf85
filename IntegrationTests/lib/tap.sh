# shellcheck shell=bash
# Result lines for the shell suites (IntegrationTests/suites/*.sh) and the scripts they run, the BlueZ
# VM's guest scripts included (guest-lib.sh sources this file). Source it:
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"   (from IntegrationTests/suites)
#
# Lines are TAP-like without numbers: "ok - DESC", "not ok - DESC", "# comment".
# Exit codes of a suite (the Makefile's `suites` target reads them):
#   0  every check passed     77  skipped: it cannot run here (not root, no kernel
#   other  something failed       feature), as automake's test drivers count 77
# A skip is never a pass: call tap_skip before the first check, never after a failure.
#
# Functions:
#   ok DESC / not_ok DESC       one result line, counted
#   check DESC CMD...           ok if CMD succeeds, else not_ok; CMD's stdout goes to
#                               stderr so its own output is never read as a result line.
#                               A suite may define tap_detail (prints text): on failure
#                               its output is appended to DESC, e.g. the last HTTP body.
#                               With TAP_SLOW_SECS=N, a check that took N s or more is
#                               followed by "# (that check took S s)": where a suite's time goes
#   run_tap DESC CMD...         run CMD, pass its lines through and count its "ok - " and
#                               "not ok - " lines; a non-zero exit adds "not ok - DESC (exit N)"
#   tap_count FILE              add FILE's "ok - " / "not ok - " lines to the counts
#                               (output another process wrote, e.g. a VM guest's log)
#   tap_skip REASON             print "# SKIP REASON" and exit 77
#   tap_done                    print "# N passed, N failed" and return 0 only if nothing
#                               failed and something passed (a suite that checked
#                               nothing did not pass): end a suite with `tap_done; exit $?`
# Counters: TAP_PASSED, TAP_FAILED.

TAP_SKIP_EXIT=77
TAP_PASSED=0
TAP_FAILED=0

ok() { TAP_PASSED=$((TAP_PASSED + 1)); echo "ok - $*"; }
not_ok() { TAP_FAILED=$((TAP_FAILED + 1)); echo "not ok - $*"; }

check() {
  local desc=$1 detail started=$SECONDS
  shift
  if "$@" >&2; then
    ok "$desc"
  else
    detail=""
    declare -F tap_detail >/dev/null && detail=" ($(tap_detail))"
    not_ok "$desc$detail"
  fi
  if [[ -n ${TAP_SLOW_SECS:-} ]] && ((SECONDS - started >= TAP_SLOW_SECS)); then
    echo "# (that check took $((SECONDS - started)) s)"
  fi
}

run_tap() {
  local desc=$1 line rc=0
  shift
  while IFS= read -r line; do
    case $line in
      __run_tap_rc=*) rc=${line#__run_tap_rc=}; continue ;;
      "ok - "*|"ok "[0-9]*) TAP_PASSED=$((TAP_PASSED + 1)) ;;
      "not ok"*) TAP_FAILED=$((TAP_FAILED + 1)) ;;
    esac
    printf '%s\n' "$line"
  done < <("$@" 2>&1; echo "__run_tap_rc=$?")
  if [[ $rc != 0 ]]; then not_ok "$desc (exit $rc)"; fi
}

tap_count() {
  [[ -f $1 ]] || return 0
  TAP_PASSED=$((TAP_PASSED + $(grep -c '^ok - ' "$1")))
  TAP_FAILED=$((TAP_FAILED + $(grep -c '^not ok - ' "$1")))
}

tap_skip() {
  if ((TAP_FAILED > 0)); then   # a failure already seen must not turn into a skip
    not_ok "skipped after a failure: $*"
    exit 1
  fi
  echo "# SKIP $*"
  exit "$TAP_SKIP_EXIT"
}

tap_done() {
  ((TAP_PASSED + TAP_FAILED > 0)) || not_ok "the suite ran no checks"
  echo "# $TAP_PASSED passed, $TAP_FAILED failed"
  ((TAP_FAILED == 0))
}
