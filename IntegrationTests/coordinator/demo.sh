#!/usr/bin/env bash
# `make demo`: a whole round trip on loopback. The development coordinator hands a
# subtask to the worker, which runs it on a real llama.cpp server (a tiny random model:
# the text is nonsense, the plumbing is real) and posts the result back.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}
work=$(mktemp -d /tmp/ecw-demo-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -n "${llama_port:-}" ] && bash IntegrationTests/model-server/stop-llama.sh "$llama_port" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== preparing the model server (cached after the first time)"
bash IntegrationTests/model-server/prepare.sh >/dev/null
llama_port=$(free_port)
bash IntegrationTests/model-server/start-llama.sh "$llama_port" >/dev/null
echo "   llama.cpp server on http://127.0.0.1:$llama_port (model 'tiny')"

python3 IntegrationTests/coordinator/dev_coordinator.py --port 0 >"$work/coordinator.out" 2>/dev/null &
pids+=($!)
until [ -s "$work/coordinator.out" ]; do sleep 0.1; done
coordinator=$(head -n1 "$work/coordinator.out" | awk '{print $NF}')
echo "== development coordinator on $coordinator"

cat >"$work/config.json" <<JSON
{"coordinator": {"url": "$coordinator", "heartbeatIntervalMs": 2000, "pullIntervalMs": 500},
 "backend": {"kind": "openai", "url": "http://127.0.0.1:$llama_port", "model": "tiny", "maxTokens": 24},
 "execution": {"mode": "text"}}
JSON
"$bin" run --config "$work/config.json" --state-dir "$work/state" --runtime-dir "$work/run" 2>"$work/daemon.log" &
pids+=($!)
until "$bin" status --runtime-dir "$work/run" >/dev/null 2>&1; do sleep 0.1; done
echo "== worker started; switching it on"
"$bin" mode on --runtime-dir "$work/run" | head -n1

echo "== submitting a subtask to the coordinator"
id=$(curl -s -X POST "$coordinator/_dev/subtasks" -d '{"input": "Write a Python function that reverses a string."}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"][0])')
echo "   subtask $id"
for _ in $(seq 100); do
  curl -s "$coordinator/_dev/results" | grep -q "$id" && break
  sleep 0.2
done
echo "== the coordinator received:"
curl -s "$coordinator/_dev/results" | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print(json.dumps({k: r[k] for k in ("subtaskId","ok","durationMs","output")}, indent=2))'
echo "== the worker's view:"
"$bin" status --runtime-dir "$work/run" | grep -A2 '^coordinator'
"$bin" tasks --runtime-dir "$work/run"
