#!/usr/bin/env bash
# `edgecoder-worker metrics` against the real daemon (debug binary, temp directories, no
# root): the text parsed by prometheus_client's own parser from PyPI (pinned in
# IntegrationTests/metrics/requirements.txt, installed into .cache/metrics/venv), every family with
# its type, counters that move (heartbeats to the development coordinator after `mode
# on`, a subtask answered through the Ollama test fixture, the mode gauge after each
# change), `--write` atomic for node_exporter, and exit 69 with the previous file kept
# when no daemon answers. Hostile label values (quotes, backslashes, newlines) go through
# `internal metrics-from-status`, the same renderer without a daemon, and must read back.
#
#   EDGECODER_WORKER_BIN=.build/debug/edgecoder-worker bash IntegrationTests/suites/metrics.sh
#
# Exits 77 only when PyPI cannot be reached (the parser cannot be installed).
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin="${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}"
work="$(mktemp -d /tmp/metrics-suite.XXXXXX)"
daemon_pid=
coordinator_pid=
fixture_pid=
cleanup() {
  [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  [[ -n "$fixture_pid" ]] && kill "$fixture_pid" 2>/dev/null && wait "$fixture_pid" 2>/dev/null
  [[ -n "$coordinator_pid" ]] && kill "$coordinator_pid" 2>/dev/null && wait "$coordinator_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
[[ -n ${EDGECODER_METRICS_KEEP:-} ]] && trap - EXIT

if [[ ! -x "$bin" ]]; then
  not_ok "no binary at $bin (build it first: swift build)"
  tap_done; exit $?
fi

# --- prometheus_client from PyPI, once per requirements file -----------------------------
venv=.cache/metrics/venv
stamp="$(sha256sum IntegrationTests/metrics/requirements.txt | cut -c1-16)"
mkdir -p .cache/metrics
exec 9>.cache/metrics/.lock
flock -w 600 9 || { not_ok "another run holds .cache/metrics/.lock"; tap_done; exit $?; }
if [[ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$venv"
  if ! /usr/bin/python3 -m venv "$venv" >"$work/venv.log" 2>&1; then
    sed 's/^/# /' "$work/venv.log"; not_ok "python3 -m venv (install python3-venv)"; tap_done; exit $?
  fi
  if ! timeout 300 "$venv/bin/pip" install -q --disable-pip-version-check -r IntegrationTests/metrics/requirements.txt >"$work/pip.log" 2>&1; then
    sed 's/^/# /' "$work/pip.log" | tail -n 5
    tap_skip "metrics: PyPI cannot be reached, so prometheus_client cannot be installed"
  fi
  echo "$stamp" >"$venv/.stamp"
fi
exec 9>&-
py="$venv/bin/python"
ok "prometheus_client $("$py" -c 'import importlib.metadata as m; print(m.version("prometheus_client"))') from PyPI"

parse() { "$py" IntegrationTests/metrics/parse_metrics.py "$@"; }
# q FILE EXPR: EXPR holds for the parsed FILE (see IntegrationTests/metrics/parse_metrics.py).
q() { parse "$1" "$2" 2>&1 | head -n 3 >&2; return "${PIPESTATUS[0]}"; }
metrics() { "$bin" metrics --runtime-dir "$work/run" "$@"; }

# --- hostile label values: the renderer's escaping, read back by the real parser -------------
cat >"$work/hostile.json" <<'JSON'
{"agentId": "id \"quoted\" \\back\\slash\nnew line", "daemon": {"version": "1\"} 9\n# TYPE x counter", "uptimeMs": 5},
 "mode": {"mode": "warp\"drive"}, "backend": {"modelState": "melt\\ing\n"},
 "power": {"held": {"x}\n# HELP y": 3, "thermal": 2}, "decision": {"reason": "é ✓ \"ok\""}}}
JSON
"$bin" internal metrics-from-status <"$work/hostile.json" >"$work/hostile.prom"
run_tap "prometheus_client parses output with quotes, backslashes and newlines in label values" parse "$work/hostile.prom"
check "every hostile label value reads back exactly" q "$work/hostile.prom" "(
v('edgecoder_worker_info', version='1\"} 9\n# TYPE x counter', agent_id='id \"quoted\" \\\\back\\\\slash\nnew line') == 1
and v('edgecoder_worker_mode', mode='warp\"drive') == 1
and v('edgecoder_worker_model_state', state='melt\\\\ing\n') == 1
and v('edgecoder_worker_pulls_held_total', reason='x}\n# HELP y') == 3
and v('edgecoder_worker_pulls_held_total', reason='thermal') == 2
and v('edgecoder_worker_power_decision', reason='é ✓ \"ok\"') == 1)"
check "an empty status still gives every family" bash -c "echo '{}' | '$bin' internal metrics-from-status | grep -c '^# TYPE' | grep -qx 23"

# --- no daemon: exit 69, nothing written ----------------------------------------------------
mkdir -p "$work/run" "$work/state" "$work/textfile"
echo "# the previous scrape" >"$work/textfile/edgecoder-worker.prom"
metrics >"$work/none.out" 2>"$work/none.err"; rc=$?
check "no daemon: metrics exits 69 (got $rc)" test "$rc" = 69
check "no daemon: the message says the daemon is not running" grep -q "the daemon is not running" "$work/none.err"
check "no daemon: nothing on stdout" test ! -s "$work/none.out"
metrics --write "$work/textfile/edgecoder-worker.prom" 2>/dev/null; rc=$?
check "no daemon: metrics --write exits 69 (got $rc)" test "$rc" = 69
check "no daemon: the previous file is kept as it was" grep -qx "# the previous scrape" "$work/textfile/edgecoder-worker.prom"

# --- the development coordinator, the Ollama fixture and the daemon --------------------------
python3 IntegrationTests/model-server/ollama_fixture.py --port 0 --model tiny --quiet >"$work/fixture.out" 2>"$work/fixture.err" &
fixture_pid=$!
for _ in $(seq 100); do grep -q 'listening on ' "$work/fixture.out" 2>/dev/null && break; sleep 0.05; done
model_url="$(sed -n 's/.*listening on //p' "$work/fixture.out" | head -n1)"
check "the Ollama test fixture listens ($model_url)" test -n "$model_url"
python3 IntegrationTests/coordinator/dev_coordinator.py --port 0 >"$work/coordinator.out" 2>"$work/coordinator.err" &
coordinator_pid=$!
for _ in $(seq 100); do grep -q '^listening on ' "$work/coordinator.out" 2>/dev/null && break; sleep 0.05; done
url="$(sed -n 's/^listening on //p' "$work/coordinator.out" | head -n1)"
check "the development coordinator listens ($url)" test -n "$url"
cat >"$work/config.json" <<JSON
{"coordinator": {"url": "$url", "heartbeatIntervalMs": 1000, "pullIntervalMs": 500},
 "backend": {"kind": "ollama", "url": "$model_url", "model": "tiny", "maxTokens": 16},
 "execution": {"mode": "text"}}
JSON
# execution.mode text: the development coordinator gives every subtask a language, as
# EdgeCoder's does, and with the sandbox image on this host (sandbox.sh builds it earlier in
# the same lane) mode auto would run the fixture's answer as a program and fail the subtask.
# A quiet fake host (on mains, a /proc/stat that never moves): make test runs suites side by
# side, and the real host's load would hold the subtask as cpu-busy.
sysroot="$work/sysroot"
mkdir -p "$sysroot/sys/class/power_supply/AC" "$sysroot/sys/class/power_supply/BAT0" "$sysroot/proc"
echo Mains >"$sysroot/sys/class/power_supply/AC/type"; echo 1 >"$sysroot/sys/class/power_supply/AC/online"
echo Battery >"$sysroot/sys/class/power_supply/BAT0/type"; echo Charging >"$sysroot/sys/class/power_supply/BAT0/status"
echo 80 >"$sysroot/sys/class/power_supply/BAT0/capacity"
echo "cpu  100 0 100 10000 0 0 0 0 0 0" >"$sysroot/proc/stat"
printf 'MemTotal: 8000000 kB\nMemAvailable: 6000000 kB\n' >"$sysroot/proc/meminfo"
"$bin" run --config "$work/config.json" --state-dir "$work/state" --runtime-dir "$work/run" --sysfs-root "$sysroot" >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [[ -S "$work/run/control.sock" ]] && break; sleep 0.05; done
check "the daemon's control socket is there" test -S "$work/run/control.sock"
if [[ ! -S "$work/run/control.sock" ]]; then
  sed 's/^/# /' "$work/daemon.log"; tap_done; exit $?
fi

metrics >"$work/off.prom" 2>"$work/off.err"; rc=$?
check "metrics exits 0 (got $rc)" test "$rc" = 0
run_tap "prometheus_client parses the output of mode off" parse "$work/off.prom"
# Families as prometheus_client names them: counters without _total.
for family in info:gauge uptime_seconds:gauge subtasks_done:counter subtasks_failed:counter \
    subtasks_released:counter pulls_held:counter heartbeats_sent:counter heartbeats_failed:counter \
    coordinator_backoff_seconds:gauge coordinator_registered:gauge bluetooth_requests_served:counter \
    bluetooth_requests_failed:counter bluetooth_requests_refused:counter bluetooth_requests_cancelled:counter \
    bluetooth_notified_bytes:counter bluetooth_clients_refused:counter bluetooth_clients_cooled_down:counter \
    mode:gauge power_decision:gauge battery_percent:gauge model_state:gauge \
    process_resident_memory_bytes:gauge process_cpu_seconds:counter; do
  name="edgecoder_worker_${family%%:*}" type="${family##*:}"
  check "family $name is a $type" q "$work/off.prom" "types.get('$name') == '$type'"
done
check "mode off: mode{mode=\"off\"} is 1, the others 0" q "$work/off.prom" \
  "v('edgecoder_worker_mode', mode='off') == 1 and v('edgecoder_worker_mode', mode='on') == 0 and v('edgecoder_worker_mode', mode='bluetooth') == 0"
check "mode off: no heartbeat sent yet" q "$work/off.prom" "v('edgecoder_worker_heartbeats_sent_total') == 0"
check "one model state is 1" q "$work/off.prom" \
  "sum(s.value for f in families if f.name == 'edgecoder_worker_model_state' for s in f.samples) == 1"
check "every release and hold reason has a series from the start" q "$work/off.prom" \
  "v('edgecoder_worker_subtasks_released_total', reason='host-failure') == 0 and v('edgecoder_worker_pulls_held_total', reason='model-unavailable') is not None"
check "the daemon's resident memory is between 1 MB and 1 GB" q "$work/off.prom" \
  "1e6 < v('edgecoder_worker_process_resident_memory_bytes') < 1e9"
check "the daemon's CPU seconds are there" q "$work/off.prom" "v('edgecoder_worker_process_cpu_seconds_total') >= 0"

# --- mode on: heartbeats count ----------------------------------------------------------------
"$bin" mode on --runtime-dir "$work/run" >/dev/null 2>"$work/mode.err"
check "mode on is taken" test $? = 0
moved=
deadline=$((SECONDS + 90))   # a loaded 2-core machine (make test runs suites side by side)
while ((SECONDS < deadline)); do
  metrics >"$work/on.prom" 2>/dev/null
  if parse "$work/on.prom" "v('edgecoder_worker_heartbeats_sent_total') >= 2 and v('edgecoder_worker_coordinator_registered') == 1" 2>/dev/null; then
    moved=1; break
  fi
  sleep 0.1
done
check "mode on: heartbeats_sent_total reaches 2 and the worker is registered" test -n "$moved"
run_tap "prometheus_client parses the output of mode on" parse "$work/on.prom"
check "mode on: mode{mode=\"on\"} is 1, off 0" q "$work/on.prom" \
  "v('edgecoder_worker_mode', mode='on') == 1 and v('edgecoder_worker_mode', mode='off') == 0"
check "mode on: no heartbeat failed" q "$work/on.prom" "v('edgecoder_worker_heartbeats_failed_total') == 0"
check "mode on: no subtask done yet" q "$work/on.prom" "v('edgecoder_worker_subtasks_done_total') == 0"

# --- a subtask: subtasks_done_total moves ------------------------------------------------------
curl -s -o /dev/null --max-time 5 -H 'content-type: application/json' \
  --data-binary '{"input": "say hi", "id": "metrics-1"}' "$url/_dev/subtasks"
done_=
deadline=$((SECONDS + 90))   # a loaded 2-core machine (make test runs suites side by side)
while ((SECONDS < deadline)); do
  metrics >"$work/done.prom" 2>/dev/null
  if parse "$work/done.prom" "v('edgecoder_worker_subtasks_done_total') == 1" 2>/dev/null; then done_=1; break; fi
  sleep 0.1
done
check "a subtask answered: subtasks_done_total is 1" test -n "$done_"
check "and nothing failed or was released" q "$work/done.prom" \
  "v('edgecoder_worker_subtasks_failed_total') == 0 and sum(s.value for f in families if f.name == 'edgecoder_worker_subtasks_released' for s in f.samples) == 0"
check "the model is ready: model_state{state=\"ready\"} is 1" q "$work/done.prom" "v('edgecoder_worker_model_state', state='ready') == 1"

# --- --write for node_exporter's textfile collector ------------------------------------------
metrics --write "$work/textfile/edgecoder-worker.prom"; rc=$?
check "metrics --write exits 0 (got $rc)" test "$rc" = 0
check "the written file replaced the previous one" bash -c "! grep -q 'the previous scrape' '$work/textfile/edgecoder-worker.prom'"
run_tap "prometheus_client parses the written file" parse "$work/textfile/edgecoder-worker.prom"
check "the written file is mode 0644 (node_exporter reads it)" test "$(stat -c %a "$work/textfile/edgecoder-worker.prom")" = 644
check "no temporary file is left beside it" test "$(ls -A "$work/textfile")" = "edgecoder-worker.prom"
metrics --write "$work/no-such-dir/a/b.prom" 2>"$work/write.err"; rc=$?
check "an unwritable path exits 1 (got $rc) and says why" bash -c "test $rc = 1 && grep -q 'cannot write' '$work/write.err'"

# --- mode off again: the gauge follows, the counters never go back ---------------------------
before="$("$py" IntegrationTests/metrics/parse_metrics.py "$work/done.prom" "print(v('edgecoder_worker_heartbeats_sent_total')) or True" 2>/dev/null)"
"$bin" mode off --runtime-dir "$work/run" >/dev/null 2>&1
metrics >"$work/off2.prom"
check "mode off again: mode{mode=\"off\"} is 1" q "$work/off2.prom" "v('edgecoder_worker_mode', mode='off') == 1"
check "mode off again: heartbeats_sent_total did not go back (was $before)" q "$work/off2.prom" \
  "v('edgecoder_worker_heartbeats_sent_total') >= $before"
check "mode off again: subtasks_done_total is still 1 (counted since the daemon started)" q "$work/off2.prom" \
  "v('edgecoder_worker_subtasks_done_total') == 1"
metrics --write "$work/textfile/edgecoder-worker.prom"

# --- the daemon stopped: 69, and the last file stays --------------------------------------------
cp "$work/textfile/edgecoder-worker.prom" "$work/last.prom"
kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
metrics --write "$work/textfile/edgecoder-worker.prom" 2>"$work/stopped.err"; rc=$?
check "daemon stopped: metrics --write exits 69 (got $rc)" test "$rc" = 69
check "daemon stopped: the last written file is kept byte for byte" cmp -s "$work/last.prom" "$work/textfile/edgecoder-worker.prom"

tap_done; exit $?
