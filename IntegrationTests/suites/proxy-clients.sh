#!/usr/bin/env bash
# The proxy (docs/reference/proxy-api.md) against the real clients people point at "a local Ollama": the
# `ollama` and `openai` packages from PyPI (pinned in IntegrationTests/proxy/requirements.txt,
# installed by this suite into .cache/proxy-clients/venv) and EdgeCoder's IDE router's
# exact calls, through real TCP to the real binary. The Bluetooth link is replaced by
# the test-only stand-in (`proxy --test-upstream-script`, Sources/Proxy/StandInUpstream.swift):
# this machine has no Bluetooth; the same clients against a real worker run in the BlueZ
# VM (IntegrationTests/bluez/proxy-phase.sh). Checks: IntegrationTests/proxy/clients_check.py.
#
#   EDGECODER_WORKER_BIN=.build/debug/edgecoder-worker bash IntegrationTests/suites/proxy-clients.sh
#
# Exits 77 only when PyPI cannot be reached (the clients cannot be installed).
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin="${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}"
work="$(mktemp -d /tmp/proxy-clients.XXXXXX)"
proxy_pid=
cleanup() {
  [[ -n "$proxy_pid" ]] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if [[ ! -x "$bin" ]]; then
  not_ok "no binary at $bin (build it first: swift build)"
  tap_done; exit $?
fi

# --- the clients, from PyPI ------------------------------------------------------------
py="$(IntegrationTests/proxy/prepare-clients.sh 2>"$work/prepare.log")"
case $? in
  0) ;;
  77) sed 's/^/# /' "$work/prepare.log"; tap_skip "proxy-clients: PyPI cannot be reached, so the real ollama and openai packages cannot be installed" ;;
  *) sed 's/^/# /' "$work/prepare.log"; not_ok "IntegrationTests/proxy/prepare-clients.sh (pip install -r IntegrationTests/proxy/requirements.txt)"; tap_done; exit $? ;;
esac
ok "the ollama and openai packages from PyPI ($("$py" -c 'import importlib.metadata as m; print("ollama", m.version("ollama"), "openai", m.version("openai"))'))"

# --- the proxy, with the stand-in for the Bluetooth link -------------------------------
cat >"$work/script.json" <<JSON
{"deltas": ["Hel", "lo", " wor", "ld"], "delayMs": 150, "record": "$work/record.ndjson"}
JSON
: >"$work/record.ndjson"
"$bin" proxy --port 0 --test-upstream-script "$work/script.json" --allow-origin 'https://app.example.com' --log-level info \
  </dev/null >"$work/proxy.log" 2>&1 &
proxy_pid=$!
port=
for _ in $(seq 1 100); do
  port="$(grep -o 'http://127.0.0.1:[0-9]*' "$work/proxy.log" | head -n1 | cut -d: -f3)"
  [[ -n "$port" ]] && break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  sed 's/^/# /' "$work/proxy.log"
  not_ok "the proxy starts and prints its port"
  tap_done; exit $?
fi
ok "the proxy listens on 127.0.0.1:$port (stand-in upstream)"
check "… and on [::1]:$port" grep -q "http://\[::1\]:$port" "$work/proxy.log"

run_tap "clients_check.py" "$py" IntegrationTests/proxy/clients_check.py "http://127.0.0.1:$port" --record "$work/record.ndjson"

# --- a few things only curl shows -------------------------------------------------------
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
check "curl: HEAD / is 200" test "$(code -I "http://127.0.0.1:$port/")" = 200
check "curl: the same API on [::1]" test "$(code "http://[::1]:$port/api/tags")" = 200
check "curl: an allowed --allow-origin is served" test "$(code -H 'Origin: https://app.example.com' "http://127.0.0.1:$port/api/tags")" = 200
check "curl: its CORS pre-flight is answered 204" \
  test "$(code -X OPTIONS -H 'Origin: https://app.example.com' -H 'Access-Control-Request-Method: POST' "http://127.0.0.1:$port/api/chat")" = 204
check "curl: a foreign pre-flight is 403" test "$(code -X OPTIONS -H 'Origin: https://evil.example' "http://127.0.0.1:$port/api/chat")" = 403
check "curl: a browser's cross-site text/plain POST is 403 and never reaches the worker" bash -c "
  before=\$(grep -c asked '$work/record.ndjson')
  test \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: https://evil.example' -H 'Content-Type: text/plain' -d '{\"prompt\":\"x\"}' http://127.0.0.1:$port/api/generate)\" = 403 &&
  test \"\$(grep -c asked '$work/record.ndjson')\" = \"\$before\""
printf '{"model":"m","prompt":"%s","stream":false}' "$(head -c 3000 /dev/zero | tr '\0' a)" >"$work/big.json"
check "curl: a big body with Expect: 100-continue is answered without curl's 1 s wait" bash -c "
  t=\$(curl -s -o /dev/null -w '%{time_starttransfer}' -H 'Expect: 100-continue' -d @'$work/big.json' http://127.0.0.1:$port/api/generate)
  awk -v t=\"\$t\" 'BEGIN { exit !(t < 0.95) }'"
check "/status says the stand-in is the selected device" bash -c "curl -s http://127.0.0.1:$port/status | grep -q '\"selection\":\"device\"'"

kill "$proxy_pid" 2>/dev/null
for _ in $(seq 1 50); do kill -0 "$proxy_pid" 2>/dev/null || break; sleep 0.1; done
check "SIGTERM stops the proxy" bash -c "! kill -0 $proxy_pid 2>/dev/null"
wait "$proxy_pid" 2>/dev/null
proxy_pid=
crashes="$(grep -E -i 'fatal error|segmentation|stack dump' "$work/proxy.log" | head -n 3)"
check "no crash in the proxy's log${crashes:+: $crashes}" test -z "$crashes"
tap_done
exit $?
