#!/usr/bin/env bash
# Start llama.cpp's OpenAI-compatible server (llama-cpp-python) on loopback, in the
# background, and wait until it answers.
#
#   IntegrationTests/model-server/start-llama.sh PORT [MODEL.gguf]
#
# Needs IntegrationTests/model-server/prepare.sh to have run. MODEL defaults to the cached tiny
# random-weight model (generated on first use). The model is served under the alias
# "tiny" (EDGECODER_LLAMA_ALIAS), with n_ctx 512 (EDGECODER_LLAMA_CTX) and 1 thread
# (EDGECODER_LLAMA_THREADS: one is fastest for a model this small). A new request never
# interrupts a running stream (llama-cpp-python's default does, llama.cpp's server never
# does). EDGECODER_LLAMA_API_KEY, when set, makes the server require that key.
#
# On success prints the server's PID (one line on stdout) and exits 0; the PID is also in
# $CACHE/run/llama-PORT.pid and the server's log in $CACHE/run/llama-PORT.log.
# Stop it with IntegrationTests/model-server/stop-llama.sh PORT (or kill -TERM PID).
# Fails (exit 1, log tail on stderr) if the port is taken, the server dies, or it does not
# answer GET /v1/models within EDGECODER_LLAMA_START_TIMEOUT seconds (default 60).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ $# -ge 1 ] && [ $# -le 2 ] || ms_die "usage: start-llama.sh PORT [MODEL.gguf]"
PORT="$1"
case "$PORT" in ''|*[!0-9]*) ms_die "PORT must be a number: $PORT" ;; esac
[ -x "$MS_PY" ] && [ -f "$MS_VENV/.edgecoder-stamp" ] \
    || ms_die "no prepared environment at $MS_VENV: run IntegrationTests/model-server/prepare.sh first"

if [ $# -eq 2 ]; then MODEL="$2"; else MODEL="$(ms_ensure_model)"; fi
[ -s "$MODEL" ] || ms_die "model file not found: $MODEL"

ALIAS="${EDGECODER_LLAMA_ALIAS:-tiny}"
CTX="${EDGECODER_LLAMA_CTX:-512}"
THREADS="${EDGECODER_LLAMA_THREADS:-1}"
TIMEOUT="${EDGECODER_LLAMA_START_TIMEOUT:-60}"
mkdir -p "$MS_RUN"
find "$MS_RUN" -name 'llama-*.log' -mtime +1 -delete 2>/dev/null || true   # old logs
PIDFILE="$MS_RUN/llama-$PORT.pid"
LOG="$MS_RUN/llama-$PORT.log"
URL="http://127.0.0.1:$PORT"

if curl -s -o /dev/null --max-time 2 "$URL/" 2>/dev/null; then
    ms_die "something already answers on 127.0.0.1:$PORT"
fi

: >"$LOG"
# Started in the background with its output in the log, so that a caller reading our
# stdout through a pipe (a Swift Process) sees EOF when this script exits.
# EDGECODER_LLAMA_NICE: the server's nice value (the BlueZ VM suite: 19, see there); every
# thread it starts inherits it.
nice -n "${EDGECODER_LLAMA_NICE:-0}" "$MS_PY" -m llama_cpp.server \
    --model "$MODEL" --model_alias "$ALIAS" \
    --host 127.0.0.1 --port "$PORT" \
    --n_ctx "$CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS" \
    --interrupt_requests false ${EDGECODER_LLAMA_API_KEY:+--api_key "$EDGECODER_LLAMA_API_KEY"} \
    </dev/null >>"$LOG" 2>&1 &
PID=$!
disown "$PID" 2>/dev/null || true
printf '%s\n' "$PID" >"$PIDFILE"

T0=$(date +%s%N)
DEADLINE=$(( $(date +%s) + TIMEOUT ))
while :; do
    if ! kill -0 "$PID" 2>/dev/null; then
        tail -30 "$LOG" >&2
        rm -f "$PIDFILE"
        ms_die "llama server exited during start (log: $LOG)"
    fi
    if curl -sf -o /dev/null --max-time 2 ${EDGECODER_LLAMA_API_KEY:+-H "Authorization: Bearer $EDGECODER_LLAMA_API_KEY"} "$URL/v1/models" 2>/dev/null; then
        break
    fi
    if [ "$(date +%s)" -ge "$DEADLINE" ]; then
        tail -30 "$LOG" >&2
        kill -TERM "$PID" 2>/dev/null || true
        rm -f "$PIDFILE"
        ms_die "llama server did not answer $URL/v1/models within ${TIMEOUT}s (log: $LOG)"
    fi
    sleep 0.1
done
ms_log "llama server ready on $URL in $(( ($(date +%s%N) - T0) / 1000000 )) ms (pid $PID, model $(basename "$MODEL") as \"$ALIAS\", log $LOG)"
printf '%s\n' "$PID"
