#!/usr/bin/env bash
# Stop a llama server started by start-llama.sh.
#
#   IntegrationTests/model-server/stop-llama.sh PORT
#
# Reads $CACHE/run/llama-PORT.pid, checks that the PID is still a llama_cpp.server process
# (a PID can be reused), sends SIGTERM, waits up to 10 s, then SIGKILL. Exits 0 when the
# server is gone (also when it was not running).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ $# -eq 1 ] || ms_die "usage: stop-llama.sh PORT"
PIDFILE="$MS_RUN/llama-$1.pid"
[ -f "$PIDFILE" ] || { ms_log "no pid file $PIDFILE: nothing to stop"; exit 0; }
PID="$(cat "$PIDFILE")"
rm -f "$PIDFILE"
if ! tr '\0' ' ' <"/proc/$PID/cmdline" 2>/dev/null | grep -q 'llama_cpp.server'; then
    ms_log "pid $PID is not a running llama server: nothing to stop"
    exit 0
fi
alive() {   # running and not a zombie (an orphan may wait to be reaped)
    kill -0 "$1" 2>/dev/null && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null
}
kill -TERM "$PID" 2>/dev/null || true
for _ in $(seq 100); do
    alive "$PID" || { ms_log "stopped llama server pid $PID"; exit 0; }
    sleep 0.1
done
ms_log "pid $PID ignored SIGTERM for 10 s: SIGKILL"
kill -KILL "$PID" 2>/dev/null || true
