#!/usr/bin/env bash
# Figures, not assertions: the Bluetooth response throughput of edgecoder-worker in the
# BlueZ test VM (btvirt, bluetoothd 5.66, MTU 517, chunkPacingMs 10): the bytes per second
# of one 15000-token answer (over 64 KiB with the tiny model), from the first notification
# to the last as a bleak central on hci1 receives them, against 51200 B/s (EdgeCoder's
# phone: 512-byte chunks every 10 ms). Runs IntegrationTests/suites/bluetooth.sh's "bench" phase, and
# its "pacing" and "badflood" phases for the figures of issue 15 (below).
#
#   Benchmarks/bluetooth_bench.sh [BINARY]     (default $EDGECODER_WORKER_BIN, else the
#                          newer of .build/release/edgecoder-worker and .build/debug/...)
# Prints "bluetooth throughput: N B/s (R x 51200 B/s)"; exits non-zero if no figure came.
set -u
cd "$(dirname "$0")/.." || exit 1
bin="${1:-${EDGECODER_WORKER_BIN:-}}"
if [[ -z "$bin" ]]; then
  bin=.build/debug/edgecoder-worker
  [[ -x .build/release/edgecoder-worker && .build/release/edgecoder-worker -nt "$bin" ]] &&
    bin=.build/release/edgecoder-worker
fi
echo "# bluetooth bench: $bin" >&2
# Pacing (issue 15): 64 KiB answers from an echo model server at MTU 517 and 48 with
# bluetoothd on one ATT bearer, paced by bytes (the new rule) against the old fixed 10 ms
# after every chunk, two of each; and the daemon's RSS after a one-minute flood of bad
# writes (the flooder comes back after each cut-off) against before it.
out="$(EDGECODER_WORKER_BIN="$bin" EDGECODER_BT_PHASES="badflood bench proxy pacing" EDGECODER_BT_PROXY_BENCH=1 EDGECODER_BT_PIECE_REPS=5 \
  EDGECODER_BT_FLOOD_SECS=60 EDGECODER_BT_PACING_CHANNELS=1 EDGECODER_BT_PACING_MTUS="517 48" \
  EDGECODER_BT_PACING_SET="10/chunks 10/bytes" EDGECODER_BT_PACING_REPS=2 bash IntegrationTests/suites/bluetooth.sh 2>&1)"
rc=$?
printf '%s\n' "$out" | grep -E '^(not ok|# throughput|# proxy-|# model-|# worker-first|# rss)' >&2
rate="$(printf '%s\n' "$out" | sed -n 's/^# throughput: \([0-9]*\) bytes\/s.*MTU 517, [0-9]* notifications)$/\1/p' | tail -n1)"
if [[ -z "$rate" ]]; then
  printf '%s\n' "$out" | tail -n 20 >&2
  echo "bluetooth throughput: no figure (suite exit $rc)"
  exit 1
fi
awk -v r="$rate" 'BEGIN { printf "bluetooth throughput: %d B/s (%.2f x 51200 B/s, EdgeCoder phone pacing)\n", r, r / 51200 }'
# The proxy's figures from the same VM run: a short request's time minus the worker's
# model time (the link and both programs), and a long answer's bytes per second.
printf '%s\n' "$out" | sed -n 's/^# proxy-latency-ms: /proxy latency, short request minus model time (ms): /p; s/^# proxy-throughput: /proxy throughput of a long answer: /p'
# Pacing: the median of each rule's runs per MTU, and new against old.
printf '%s\n' "$out" | awk '
  /^# throughput: .*by-(bytes|chunks)-/ {
    match($0, /by-(bytes|chunks)-[0-9]+ms-mtu[0-9]+-bearers[0-9]+/); label = substr($0, RSTART, RLENGTH)
    split(label, f, "-"); key = f[2] " " f[4]; n[key]++; rate[key, n[key]] = $3 }
  function median(key,   i, j, t, m) {
    m = n[key]; for (i = 1; i <= m; i++) v[i] = rate[key, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
  END {
    for (mtu = 0; mtu < 2; mtu++) {
      m = mtu ? "mtu48" : "mtu517"
      if (!n["bytes " m] || !n["chunks " m]) { printf "pacing at %s: no figure\n", m; continue }
      b = median("bytes " m); c = median("chunks " m)
      printf "pacing at %s, one ATT bearer: by bytes %d B/s, old 10 ms per chunk %d B/s (%.2f x; medians of %d and %d runs)\n", m, b, c, b / c, n["bytes " m], n["chunks " m] } }'
printf '%s\n' "$out" | sed -n 's/^# rss before \([0-9]*\) KiB, after \([0-9]*\) KiB (\([0-9]*\) s of flood)/daemon RSS: \1 KiB idle before, \2 KiB after \3 s of flood/p'
# Streaming (issue 14): the first piece through proxy and worker against the model server's
# own first piece and against the whole answer, in the same run.
printf '%s\n' "$out" | sed -n 's/^# model-first-piece-ms: /model server alone, first piece (ms): /p; s/^# proxy-first-piece-ms: /through proxy and worker, first piece (ms): /p'
printf '%s\n' "$out" | sed -n 's/^# proxy-whole-ms: /through proxy and worker, whole answer without stream (ms): /p'
printf '%s\n' "$out" | sed -n 's/^# worker-first-piece-ms: /through the worker alone (a BlueZ central), first piece (ms; goal: the model alone + 35): /p'
printf '%s\n' "$out" | awk '
  /^# model-first-piece-ms: / { model = $4 + 0 }
  /^# proxy-first-piece-ms: / { first = $4 + 0 }
  /^# proxy-whole-ms: / { whole = $3 + 0 }
  END { if (first && whole) printf "first streamed piece: %d ms after the model alone gives its first (goal 60), %.1fx sooner than the whole answer without stream\n", first - model, whole / first }'
# The same at a laptop's pace (paced_proxy.py, 30 tokens/s): goal 100x sooner.
printf '%s\n' "$out" | sed -n 's/^# proxy-paced-first-piece-ms: /a model at a laptop'"'"'s pace, through proxy and worker (ms): /p'
# The Bluetooth path alone (no model, no proxy): a central's read of the status
# characteristic, there and back through both bluetoothds and the VM's virtual controllers.
printf '%s\n' "$out" | sed -n 's/^# gatt-read-ms: /the Bluetooth path alone, a GATT read there and back (ms): /p'
exit "$rc"
