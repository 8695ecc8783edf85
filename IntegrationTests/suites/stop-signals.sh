#!/usr/bin/env bash
# A stop that never ends (issue 12 §6): a daemon under `make run` got SIGTERM from the
# process-group kill and again from make, which forwards it; if the second came while
# the graceful stop was under way, the cancelled Bluetooth and coordinator services
# restarted their runtimes in a loop for ever. Here: the same shape (make in its own
# process group, killed as a group) and two signals at varied delays, many times; the
# daemon must be gone within the bound every time. Then the bound itself, on a process
# that really hangs: the C handler's alarm ends it.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=$(realpath "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}")
# DaemonMain.secondSignalBoundSeconds, plus the time to notice.
bound_ms=${STOP_BOUND_MS:-4500}
runs_make=${STOP_RUNS_MAKE:-16}
runs_double=${STOP_RUNS_DOUBLE:-30}

source IntegrationTests/lib/tap.sh

work=$(mktemp -d /tmp/ecw-stop-XXXXXX)
groups=""   # process groups started here, killed by id if a run left one behind
cleanup() {
  for group in $groups; do kill -KILL -- "-$group" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
echo '{}' > "$work/config.json"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# 1. `make run`'s shape: make (its own process group) execs the daemon; the group gets
#    SIGTERM, at a varied moment after start, sometimes twice.
cat > "$work/Makefile" <<EOF
run:
	exec $bin run --config $work/config.json --state-dir \$(STATE) --runtime-dir \$(RUN)
EOF
slow=0
for i in $(seq "$runs_make"); do
  state="$work/m$i/state"; run="$work/m$i/run"
  mkdir -p "$state" "$run"
  setsid make -s -f "$work/Makefile" STATE="$state" RUN="$run" run 2>>"$work/make.log" &
  make_pid=$!
  groups="$groups $make_pid"
  for _ in $(seq 200); do "$bin" status --runtime-dir "$run" >/dev/null 2>&1 && break; sleep 0.02; done
  # Varied: at once, or after a while; the group once or twice.
  sleep "0.$(( (i * 37) % 30 ))"
  kill -TERM -- "-$make_pid" 2>/dev/null
  if [ $((i % 2)) = 0 ]; then sleep "0.0$(( i % 10 ))"; kill -TERM -- "-$make_pid" 2>/dev/null; fi
  started=$(now_ms)
  while pgrep -g "$make_pid" >/dev/null 2>&1 && [ $(( $(now_ms) - started )) -lt $((bound_ms + 1000)) ]; do sleep 0.02; done
  took=$(( $(now_ms) - started ))
  if pgrep -g "$make_pid" >/dev/null 2>&1 || [ "$took" -gt "$bound_ms" ]; then
    slow=$((slow + 1))
    echo "# run $i: the group took ${took} ms to end; log lines: $(wc -l < "$work/make.log")"
    kill -KILL -- "-$make_pid" 2>/dev/null
  fi
  { wait "$make_pid"; } 2>/dev/null
done
grep -q "did not finish in time" "$work/make.log" && not_ok "a stop under make needed the forced exit: $(grep -c 'did not finish' "$work/make.log") times"
[ "$slow" = 0 ] && ok "under make, SIGTERM to the group ends the daemon within ${bound_ms} ms ($runs_make runs)" \
  || not_ok "$slow of $runs_make runs under make did not end within ${bound_ms} ms"

# 2. Two SIGTERMs a few microseconds to a millisecond apart, the window in which the
#    second lands while the graceful stop is under way (shell sleeps are too coarse).
python3 - "$bin" "$work" "$runs_double" "$bound_ms" <<'EOF' && ok "two SIGTERMs 0-1.5 ms apart end the daemon within the bound (${runs_double} runs)" || not_ok "two close SIGTERMs left a daemon running"
import os, signal, subprocess, sys, time
binary, work, runs, bound = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) / 1000
failed = 0
for i in range(runs):
    delay = (i * 53 % 1500) / 1e6
    state, run = f"{work}/d{i}/state", f"{work}/d{i}/run"
    os.makedirs(state); os.makedirs(run)
    with open(f"{work}/d{i}/log", "w") as log:
        p = subprocess.Popen([binary, "run", "--config", f"{work}/config.json", "--state-dir", state, "--runtime-dir", run], stderr=log)
    deadline = time.monotonic() + 10
    while not os.path.exists(f"{run}/control.sock") and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    os.kill(p.pid, signal.SIGTERM)
    t = time.perf_counter()
    while time.perf_counter() - t < delay:
        pass
    os.kill(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        failed += 1
        lines = sum(1 for _ in open(f"{work}/d{i}/log"))
        print(f"# run {i}: second SIGTERM {delay * 1e6:.0f} us after the first: still running after {bound} s, {lines} log lines")
        p.kill()
        p.wait()
sys.exit(1 if failed else 0)
EOF

# 3. The bound on a process that really hangs: the signal pipe's handler, armed as the
#    daemon arms it, with nobody ever reading the pipe and the main thread spinning.
shims=Sources/CWorkerShims
cat > "$work/hang.c" <<'EOF'
#include "CWorkerShims.h"
#include <unistd.h>
int main(void) {
    int fds[2];
    ecw_pipe_nonblocking(fds);
    ecw_install_signal_pipe(fds[1]);
    ecw_arm_forced_exit(0, 1, 7);
    write(1, "armed\n", 6);
    for (;;) {}
}
EOF
if cc -O1 -I "$shims/include" -o "$work/hang" "$work/hang.c" "$shims/shims.c" 2>"$work/cc.log"; then
  "$work/hang" > "$work/hang.out" 2>"$work/hang.err" &
  hang_pid=$!
  for _ in $(seq 100); do grep -q armed "$work/hang.out" 2>/dev/null && break; sleep 0.01; done
  # SIGHUP asks for a reload: however many come, they never arm the forced exit.
  kill -HUP "$hang_pid"; kill -HUP "$hang_pid"
  sleep 1.5
  kill -0 "$hang_pid" 2>/dev/null && ok "two SIGHUPs do not arm the forced exit (the bound after a second signal is 1 s)" \
    || not_ok "SIGHUP ended the hung process"
  kill -TERM "$hang_pid"
  sleep 0.3
  kill -0 "$hang_pid" 2>/dev/null && ok "after one signal (bound 0: none) the hung process still runs" || not_ok "the first signal alone ended it"
  kill -TERM "$hang_pid"
  started=$(now_ms)
  while kill -0 "$hang_pid" 2>/dev/null && [ $(( $(now_ms) - started )) -lt 3000 ]; do sleep 0.02; done
  took=$(( $(now_ms) - started ))
  wait "$hang_pid"; status=$?
  [ "$status" = 7 ] && [ "$took" -lt 1800 ] && ok "a hung process exits ${took} ms after the second signal (bound 1 s), status 7" \
    || { not_ok "the hung process: status $status after ${took} ms"; kill -KILL "$hang_pid" 2>/dev/null; }
  grep -q "did not finish in time" "$work/hang.err" && ok "the forced exit says why on stderr" || not_ok "stderr: $(cat "$work/hang.err")"
else
  not_ok "cannot compile the shim test: $(cat "$work/cc.log")"
fi

# 4. SIGHUP reloads (systemctl reload's ExecReload=): the daemon keeps running, a valid
#    file's live keys apply, an invalid file is refused with the reason in status.
state="$work/r/state"; run="$work/r/run"; mkdir -p "$state" "$run"
echo '{"policy": {"minBatteryPct": 20}}' > "$work/reload.json"
"$bin" run --config "$work/reload.json" --state-dir "$state" --runtime-dir "$run" 2>"$work/reload.log" &
reload_pid=$!
for _ in $(seq 200); do "$bin" status --runtime-dir "$run" >/dev/null 2>&1 && break; sleep 0.02; done
status_key() { "$bin" status --json --runtime-dir "$run" | python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
echo '{"policy": {"minBatteryPct": 25}, "bluetooth": {"maxClients": 2}}' > "$work/reload.json"
kill -HUP "$reload_pid"
for _ in $(seq 100); do [ "$(status_key "d['policy']['minBatteryPct']['value']")" = 25 ] && break; sleep 0.05; done
check "SIGHUP: the daemon runs on" kill -0 "$reload_pid"
check "SIGHUP: policy.minBatteryPct 25 applied live" test "$(status_key "d['policy']['minBatteryPct']['value']")" = 25
check "SIGHUP: bluetooth.maxClients waits for a restart" test "$(status_key "d['daemon']['configReload']['needsRestart']")" = "['bluetooth.maxClients']"
echo '{"policy": {"minBatteryPct": 400}}' > "$work/reload.json"
kill -HUP "$reload_pid"
for _ in $(seq 100); do [ "$(status_key "d['daemon']['configReload']['outcome']")" = refused ] && break; sleep 0.05; done
check "SIGHUP with an invalid file: refused, the daemon runs on" kill -0 "$reload_pid"
check "the refusal names the key in status" bash -c '[[ $1 == *policy.minBatteryPct* ]]' _ "$(status_key "d['daemon']['configReload']['problems']")"
check "the running value is kept" test "$(status_key "d['policy']['minBatteryPct']['value']")" = 25
check "the refusal is in the log" grep -q "config reload refused, the running config is kept" "$work/reload.log"
kill -TERM "$reload_pid"; wait "$reload_pid"
check "and SIGTERM still stops it cleanly" test $? = 0

tap_done; exit $?
