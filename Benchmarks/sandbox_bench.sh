#!/usr/bin/env bash
# make bench: the code sandbox's cost (docs/operating/sandbox.md). The same trivial program
# run N times through `edgecoder-worker sandbox run` (engine start, container, program,
# removal) and N times bare on the host; the medians, the overhead (goal: at most 300 ms)
# and the ratio, in the same command. Figures, not assertions. Skipped without the engine
# or the image (`edgecoder-worker sandbox build` makes it).
#
#   bash Benchmarks/sandbox_bench.sh [BIN] [N]
set -u
cd "$(dirname "$0")/.." || exit 1
bin="${1:-.build/release/edgecoder-worker}"
n="${2:-10}"
engine="${EDGECODER_SANDBOX_ENGINE:-podman}"
image="${EDGECODER_SANDBOX_IMAGE:-localhost/edgecoder-sandbox:1}"
command -v "$engine" >/dev/null || { echo "sandbox bench: $engine is not installed"; exit 0; }
"$engine" image inspect "$image" >/dev/null 2>&1 || { echo "sandbox bench: no image $image (edgecoder-worker sandbox build)"; exit 0; }
args=()
[[ $(stat -fc %T /sys/fs/cgroup) != cgroup2fs && $engine == podman ]] && args=(--engine-arg=--runtime=runc)

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
# time_ms CMD...: the wall time of one run, in ms, stdin from $program.
time_ms() {
  local start
  start=$(date +%s%N)
  "$@" <<<"$program" >/dev/null 2>&1 || echo "sandbox bench: $* failed" >&2
  echo $(( ($(date +%s%N) - start) / 1000000 ))
}
for language in python javascript; do
  case $language in
    python) program='print(sum(range(1000)))'; bare=(/usr/bin/python3 -I -) ;;
    javascript) program='console.log([...Array(1000).keys()].reduce((a, b) => a + b, 0))'; bare=(node -) ;;
  esac
  time_ms "$bin" sandbox run --language "$language" --engine "$engine" "${args[@]}" --image "$image" >/dev/null  # warm the page cache
  sandboxed=$(for _ in $(seq "$n"); do time_ms "$bin" sandbox run --language "$language" --engine "$engine" "${args[@]}" --image "$image"; done | median)
  plain=$(for _ in $(seq "$n"); do time_ms "${bare[@]}"; done | median)
  overhead=$((sandboxed - plain))
  ratio=$(awk -v s="$sandboxed" -v p="$plain" 'BEGIN { printf "%.1f", (p > 0 ? s / p : 0) }')
  verdict=$([[ $overhead -le 300 ]] && echo "within" || echo "over")
  echo "sandbox $language: median of $n: ${sandboxed} ms in the container, ${plain} ms bare; overhead ${overhead} ms ($verdict the 300 ms goal), ratio ${ratio}x"
done
