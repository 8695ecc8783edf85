#!/usr/bin/env bash
# End-to-end smoke test of the model-server test bed:
# prepare (cached) -> tiny model -> real llama.cpp server on a free loopback port ->
# /v1/models, /v1/completions, /v1/chat/completions -> the Ollama API fixture forwarding
# to it -> /api/tags, /api/generate, its errors and failure switches -> stop everything.
#
#   IntegrationTests/model-server/smoke.sh
#
# Prints TAP-like "ok - ..." / "not ok - ..." lines, "# ..." measurements, and a closing
# "# N passed, N failed" line (IntegrationTests/lib/tap.sh); exits non-zero on any failure.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"
verdict() { if [ $? -eq 0 ]; then ok "$1"; else not_ok "$1"; fi; }   # after a [[ ... ]]
ms_now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/edgecoder-modelserver-smoke.XXXXXX")"
LPORT=""; FX_PIDS=()
cleanup() {
    for p in "${FX_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    [ -n "$LPORT" ] && "$MS_DIR/stop-llama.sh" "$LPORT" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

# JSON field extraction with Python (jq is not assumed).
jget() {  # jget FILE EXPR  -> prints eval(EXPR) with d = the parsed JSON
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print(v if not isinstance(v,(dict,list)) else json.dumps(v))' "$1" "$2" 2>/dev/null
}

# --- 1. prepare --------------------------------------------------------------------
T=$(ms_now_ms)
if "$MS_DIR/prepare.sh" >"$WORK/prepare.out" 2>"$WORK/prepare.err"; then
    ok "prepare.sh ($(( $(ms_now_ms) - T )) ms)"
else
    not_ok "prepare.sh failed"; sed 's/^/# /' "$WORK/prepare.err"
    tap_done; exit 1
fi
MODEL="$(sed -n 's/^EDGECODER_TINY_MODEL=//p' "$WORK/prepare.out")"
[[ -s "$MODEL" ]]; verdict "tiny model is cached at $MODEL"

T=$(ms_now_ms)
"$MS_PY" "$MS_DIR/make_tiny_model.py" "$WORK/a.gguf" 2>/dev/null && "$MS_PY" "$MS_DIR/make_tiny_model.py" "$WORK/b.gguf" 2>/dev/null
echo "# make_tiny_model.py x2: $(( $(ms_now_ms) - T )) ms"
[[ "$(sha256sum <"$WORK/a.gguf")" == "$(sha256sum <"$WORK/b.gguf")" && "$(sha256sum <"$WORK/a.gguf")" == "$(sha256sum <"$MODEL")" ]]; verdict "make_tiny_model.py is deterministic (and matches the cached model)"

# --- 2. llama.cpp server -----------------------------------------------------------
LPORT="$(ms_free_port)"
T=$(ms_now_ms)
if LPID="$("$MS_DIR/start-llama.sh" "$LPORT" "$MODEL" 2>"$WORK/start.err")"; then
    ok "start-llama.sh on 127.0.0.1:$LPORT, pid $LPID ($(( $(ms_now_ms) - T )) ms to ready)"
else
    not_ok "start-llama.sh"; sed 's/^/# /' "$WORK/start.err"
    tap_done; exit 1
fi
L="http://127.0.0.1:$LPORT"

curl -s --max-time 10 "$L/v1/models" -o "$WORK/models.json"
[[ "$(jget "$WORK/models.json" 'd["data"][0]["id"]')" == tiny ]]; verdict "GET /v1/models lists \"tiny\""

post() {  # post URL JSON OUTFILE -> prints "HTTP_CODE TIME_MS"
    curl -s --max-time 60 -H 'Content-Type: application/json' -d "$2" -o "$3" \
        -w '%{http_code} %{time_total}' "$1" | awk '{printf "%s %d\n", $1, $2*1000}'
}

read -r CODE MS < <(post "$L/v1/completions" '{"model":"tiny","prompt":"hello","max_tokens":16}' "$WORK/c.json")
TEXT="$(jget "$WORK/c.json" 'd["choices"][0]["text"]')"
[[ "$CODE" == 200 && -n "${TEXT// /}" ]]; verdict "POST /v1/completions max_tokens 16: HTTP $CODE, ${MS} ms, text \"$TEXT\""

read -r CODE MS < <(post "$L/v1/chat/completions" '{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":16}' "$WORK/cc.json")
TEXT="$(jget "$WORK/cc.json" 'd["choices"][0]["message"]["content"]')"
[[ "$CODE" == 200 && -n "${TEXT// /}" ]]; verdict "POST /v1/chat/completions: HTTP $CODE, ${MS} ms, content \"$TEXT\""

read -r CODE MS < <(post "$L/v1/completions" '{"model":"tiny","prompt":"Write a function that adds two numbers.","max_tokens":64,"temperature":0}' "$WORK/c64.json")
N="$(jget "$WORK/c64.json" 'd["usage"]["completion_tokens"]')"
echo "# 64-token completion: ${MS} ms"
[[ "$CODE" == 200 && "$N" == 64 ]]; verdict "64-token completion: HTTP $CODE, $N tokens, finish_reason $(jget "$WORK/c64.json" 'd["choices"][0]["finish_reason"]'), ${MS} ms"

for p in "" "x" "日本語 ü 🚀 <s> </s> \\n\\t" ; do
    read -r CODE MS < <(post "$L/v1/completions" "{\"model\":\"tiny\",\"prompt\":\"$p\",\"max_tokens\":8}" "$WORK/p.json")
    TEXT="$(jget "$WORK/p.json" 'd["choices"][0]["text"]')"
    [[ "$CODE" == 200 && -n "${TEXT// /}" ]]; verdict "odd prompt \"$p\" still gives text: \"$TEXT\""
done

# --- 3. Ollama fixture forwarding to llama.cpp ------------------------------------
start_fixture() {  # start_fixture NAME ARGS... -> sets FX_URL
    local name="$1"; shift
    python3 "$MS_DIR/ollama_fixture.py" --port 0 --quiet "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    FX_PIDS+=($!); FX_PID=$!
    for _ in $(seq 50); do
        FX_URL="$(sed -n 's/^ollama-fixture listening on //p' "$WORK/$name.out")"
        [ -n "$FX_URL" ] && return 0
        sleep 0.1
    done
    return 1
}

check "ollama_fixture.py starts with --upstream $L/v1/completions" \
    start_fixture fx --upstream "$L/v1/completions" --gguf "$MODEL"
O="$FX_URL"; O_PID="$FX_PID"

curl -s --max-time 10 "$O/api/tags" -o "$WORK/tags.json"
[[ "$(jget "$WORK/tags.json" '(d["models"][0]["name"], d["models"][0]["model"], d["models"][0]["digest"]==__import__("hashlib").sha256(open("'"$MODEL"'","rb").read()).hexdigest(), d["models"][0]["details"]["format"])')" == "('tiny:latest', 'tiny:latest', True, 'gguf')" ]]; verdict "GET /api/tags lists tiny:latest with digest and details"

read -r CODE MS < <(post "$O/api/generate" '{"model":"tiny","prompt":"hello","stream":false,"options":{"num_predict":16}}' "$WORK/g.json")
TEXT="$(jget "$WORK/g.json" 'd["response"]')"
[[ "$CODE" == 200 && -n "${TEXT// /}" && "$(jget "$WORK/g.json" '(d["done"], d["done_reason"], d["eval_count"], d["model"])')" == "(True, 'length', 16, 'tiny')" ]]; verdict "POST /api/generate (upstream llama.cpp) num_predict 16: HTTP $CODE, ${MS} ms, response \"$TEXT\""
[[ "$(jget "$WORK/g.json" 'sorted(d)')" == '["created_at", "done", "done_reason", "eval_count", "eval_duration", "load_duration", "model", "prompt_eval_count", "prompt_eval_duration", "response", "total_duration"]' ]]; verdict "/api/generate carries Ollama's documented fields"

read -r CODE MS < <(post "$O/api/generate" '{"model":"missing","prompt":"hello","stream":false}' "$WORK/e.json")
[[ "$CODE" == 404 && -n "$(jget "$WORK/e.json" 'd["error"]')" ]]; verdict "unknown model: HTTP $CODE $(cat "$WORK/e.json")"
read -r CODE MS < <(post "$O/api/generate" '{"model": tiny' "$WORK/e.json")
[[ "$CODE" == 400 && -n "$(jget "$WORK/e.json" 'd["error"]')" ]]; verdict "bad JSON: HTTP $CODE $(cat "$WORK/e.json")"

T=$(ms_now_ms); kill -TERM "$O_PID"; wait "$O_PID"; RC=$?; E=$(( $(ms_now_ms) - T ))
[[ "$RC" == 0 ]]; verdict "fixture exits 0 on SIGTERM (${E} ms)"

# --- 4. fixture without upstream, and its failure switches -------------------------
start_fixture echo
read -r CODE MS < <(post "$FX_URL/api/generate" '{"model":"tiny","prompt":"alpha beta gamma","stream":false,"options":{"num_predict":5}}' "$WORK/g2.json")
[[ "$(jget "$WORK/g2.json" 'd["response"]')" == "alpha beta gamma alpha beta" ]]; verdict "echo mode is bounded by num_predict: \"$(jget "$WORK/g2.json" 'd["response"]')\""
kill -TERM "$FX_PID"; wait "$FX_PID"

start_fixture fail --fail-status 503
read -r CODE MS < <(post "$FX_URL/api/generate" '{"model":"tiny","prompt":"x","stream":false}' "$WORK/f.json")
[[ "$CODE" == 503 ]]; verdict "--fail-status 503 answers 503 $(cat "$WORK/f.json")"
kill -TERM "$FX_PID"; wait "$FX_PID"

start_fixture bad --malformed --fault-path /api/generate
read -r CODE MS < <(post "$FX_URL/api/generate" '{"model":"tiny","prompt":"x","stream":false}' "$WORK/m.json")
curl -s "$FX_URL/api/tags" -o "$WORK/mt.json"
[[ "$CODE" == 200 && -z "$(jget "$WORK/m.json" 'd')" && -n "$(jget "$WORK/mt.json" 'd["models"]')" ]]; verdict "--malformed --fault-path /api/generate: generate is not JSON, tags still is"
kill -TERM "$FX_PID"; wait "$FX_PID"

start_fixture slow --delay-ms 400
read -r CODE MS < <(post "$FX_URL/api/generate" '{"model":"tiny","prompt":"x","stream":false}' "$WORK/s.json")
[[ "$CODE" == 200 && "$MS" -ge 400 ]]; verdict "--delay-ms 400 delays the answer (${MS} ms)"
# SIGTERM during a delayed answer: still a prompt, clean exit.
curl -s --max-time 30 "$FX_URL/api/tags" >/dev/null &
CURL=$!; sleep 0.1
T=$(ms_now_ms); kill -TERM "$FX_PID"; wait "$FX_PID"; RC=$?; E=$(( $(ms_now_ms) - T )); wait "$CURL" 2>/dev/null
[[ "$RC" == 0 && "$E" -lt 2000 ]]; verdict "SIGTERM during a delayed answer exits 0 promptly (${E} ms)"
FX_PIDS=()

# --- 5. stop llama -----------------------------------------------------------------
"$MS_DIR/stop-llama.sh" "$LPORT" 2>/dev/null
[[ ! -d "/proc/$LPID" || "$(awk '{print $3}' "/proc/$LPID/stat" 2>/dev/null)" == Z ]]; verdict "stop-llama.sh stops pid $LPID"
check "port $LPORT is free again" bash -c "! curl -s -o /dev/null --max-time 2 $L/v1/models"
LPORT=""

tap_done
