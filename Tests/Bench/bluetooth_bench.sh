#!/usr/bin/env bash
# Figures, not assertions: the Bluetooth response throughput of edgecoder-worker in the
# BlueZ test VM (btvirt, bluetoothd 5.66, MTU 517, chunkPacingMs 10): the bytes per second
# of one 15000-token answer (over 64 KiB with the tiny model), from the first notification
# to the last as a bleak central on hci1 receives them, against 51200 B/s (EdgeCoder's
# phone: 512-byte chunks every 10 ms). Runs Tests/Suites/bluetooth.sh's "bench" phase.
#
#   Tests/Bench/bluetooth_bench.sh [BINARY]     (default $EDGECODER_WORKER_BIN, else the
#                          newer of .build/release/edgecoder-worker and .build/debug/...)
# Prints "bluetooth throughput: N B/s (R x 51200 B/s)"; exits non-zero if no figure came.
set -u
cd "$(dirname "$0")/../.."
bin="${1:-${EDGECODER_WORKER_BIN:-}}"
if [[ -z "$bin" ]]; then
  bin=.build/debug/edgecoder-worker
  [[ -x .build/release/edgecoder-worker && .build/release/edgecoder-worker -nt "$bin" ]] &&
    bin=.build/release/edgecoder-worker
fi
echo "# bluetooth bench: $bin" >&2
out="$(EDGECODER_WORKER_BIN="$bin" EDGECODER_BT_PHASES="bench proxy" EDGECODER_BT_PROXY_BENCH=1 bash Tests/Suites/bluetooth.sh 2>&1)"
rc=$?
printf '%s\n' "$out" | grep -E '^(not ok|# throughput|# proxy-|# model-)' >&2
rate="$(printf '%s\n' "$out" | sed -n 's/^# throughput: \([0-9]*\) bytes\/s.*/\1/p' | tail -n1)"
if [[ -z "$rate" ]]; then
  printf '%s\n' "$out" | tail -n 20 >&2
  echo "bluetooth throughput: no figure (suite exit $rc)"
  exit 1
fi
awk -v r="$rate" 'BEGIN { printf "bluetooth throughput: %d B/s (%.2f x 51200 B/s, EdgeCoder phone pacing)\n", r, r / 51200 }'
# The proxy's figures from the same VM run: a short request's time minus the worker's
# model time (the link and both programs), and a long answer's bytes per second.
printf '%s\n' "$out" | sed -n 's/^# proxy-latency-ms: /proxy latency, short request minus model time (ms): /p; s/^# proxy-throughput: /proxy throughput of a long answer: /p'
# Streaming (issue 14): the first piece through proxy and worker against the model server's
# own first piece and against the whole answer, in the same run.
printf '%s\n' "$out" | sed -n 's/^# model-first-piece-ms: /model server alone, first piece (ms): /p; s/^# proxy-first-piece-ms: /through proxy and worker, first piece (ms): /p'
exit "$rc"
