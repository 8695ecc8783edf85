#!/usr/bin/env bash
# Runs the shell suites in lanes: the suites of one lane one after another, the lanes side by
# side, then the "alone" suites one at a time with nothing else running. Used by `make test`
# (IntegrationTests/run lanes, which names the lanes); `make suites` runs them one by one.
#
#   run-suites.sh BINARY --lane "A.sh B.sh" --lane "C.sh …" [--nice-lane N] --alone "D.sh …"
#
# Why lanes: the BlueZ VM suite is most of `make test` and spends much of its time waiting on
# the guest, the radio's pacing and llama.cpp; the other suites fit beside it. The first lane
# keeps the normal priority, the others run at `nice` N (default 10) so that the long lane
# is not the one that waits. A suite that measures the host's CPU (own-load) is "alone".
# A suite's lines go to a log and are printed whole when it ends (lanes never interleave),
# followed by "=== passed|FAILED|skipped SUITE (Ns)"; the last line counts them as `make
# suites` does: "N passed, N failed, N skipped". Exit 0 only if no suite failed.
# Logs stay in .build/suite-logs (SUITE_LOGS).
set -u
bin="$1"; shift
lanes=() alone="" nice_level=10
while (($#)); do
  case "$1" in
    --lane) lanes+=("$2"); shift 2 ;;
    --alone) alone="$2"; shift 2 ;;
    --nice-lane) nice_level="$2"; shift 2 ;;
    *) echo "run-suites.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done
logs="${SUITE_LOGS:-.build/suite-logs}"
rm -rf "$logs"; mkdir -p "$logs"
results="$logs/results"; : >"$results"
print_lock="$logs/.print.lock"; : >"$print_lock"
export EDGECODER_WORKER_BIN="$bin"

# The CPU time (ms, user + system) of this shell's children that have ended, from `times`
# written to FILE: a suite's processes are its children, so the difference around a suite
# is what it used (a process it leaves running, or one that detached, is not counted).
# `times` must run in this shell (a command substitution's subshell has no children).
cpu_ms_of() { awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); n += p[1] * 60000 + p[2] * 1000 } printf "%d\n", n }' "$1"; }

# The host's busy and total jiffies from /proc/stat's first line: busy is all but idle and
# iowait.
host_jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat; }

run_one() { # SUITE NICE: runs it into its log, then prints the log and a result line
  local suite=$1 niceness=$2 name start rc took verdict cpu0 cpu1
  name=$(basename "$suite" .sh)
  times >"$logs/.$name.cpu"; cpu0=$(cpu_ms_of "$logs/.$name.cpu")
  start=$(date +%s)
  echo "=== $(date -u +%T) started $suite${niceness:+ (nice $niceness)}" >&2
  if [[ -n $niceness ]]; then nice -n "$niceness" bash "$suite" >"$logs/$name.log" 2>&1; rc=$?
  else bash "$suite" >"$logs/$name.log" 2>&1; rc=$?; fi
  took=$(( $(date +%s) - start ))
  times >"$logs/.$name.cpu"; cpu1=$(cpu_ms_of "$logs/.$name.cpu"); rm -f "$logs/.$name.cpu"
  case $rc in 0) verdict=passed ;; 77) verdict=skipped ;; *) verdict=FAILED ;; esac
  {
    flock 9
    echo "=== suite $suite"
    cat "$logs/$name.log"
    if [[ $verdict == FAILED ]]; then echo "=== FAILED $suite (exit $rc, ${took}s)"; else echo "=== $verdict $suite (${took}s)"; fi
    echo "=== cpu $suite: $(( (cpu1 - cpu0) / 1000 )) s of CPU in ${took} s"
    echo "$verdict $suite" >>"$results"
  } 9>>"$print_lock"
}

read -r busy0 total0 < <(host_jiffies)
lanes_start=$(date +%s)
lane_pids=()
for i in "${!lanes[@]}"; do
  niceness=""; ((i > 0)) && niceness=$nice_level
  ( for suite in ${lanes[$i]}; do run_one "$suite" "$niceness"; done ) &
  lane_pids+=($!)
done
# Ctrl-C reaches every suite (they share the terminal's process group); a TERM ends the lanes.
trap 'kill "${lane_pids[@]}" 2>/dev/null; exit 130' INT TERM
for pid in "${lane_pids[@]}"; do wait "$pid"; done
read -r busy1 total1 < <(host_jiffies)
# How full the host was while the lanes ran: near 100 % means the lanes only share the CPU,
# and only less work (not another order) makes them shorter.
echo "=== lanes took $(( $(date +%s) - lanes_start )) s, the host's CPUs $(( 100 * (busy1 - busy0) / (total1 - total0 > 0 ? total1 - total0 : 1) )) % busy"
for suite in $alone; do run_one "$suite" ""; done

passed=$(grep -c '^passed ' "$results") failed=$(grep -c '^FAILED ' "$results") skipped=$(grep -c '^skipped ' "$results")
skips=$(sed -n 's/^skipped //p' "$results" | tr '\n' ' ') failures=$(sed -n 's/^FAILED //p' "$results" | tr '\n' ' ')
[[ -z $skips ]] || echo "skipped suites: $skips"
[[ -z $failures ]] || echo "failed suites: $failures"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
