#!/usr/bin/env bash
# Builds the fuzz targets and runs each for SECONDS (default $FUZZ_SECONDS, else 60) from
# its seed corpus. libFuzzer writes what it finds to a scratch directory, never to the
# committed corpus. A crash, hang or over-limit allocation is copied to
# Fuzz/<target>/regressions/ (replayed by IntegrationTests/suites/fuzz.sh from then on) and
# makes the run fail. The last status line of each target (exec/s, cov, ft) is printed.
#
# Usage: Fuzz/run.sh [seconds] [target…]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
SECONDS_EACH=${1:-${FUZZ_SECONDS:-60}}
shift || true
OUT=${FUZZ_BUILD:-$ROOT/.build/fuzz}
bins=$(bash Fuzz/build.sh "$@") || exit 1
# Swift's own backtracer fights ASan over a trap; libFuzzer prints the stack itself.
export SWIFT_BACKTRACE=enable=no
failed=0
for bin in $bins; do
    target=${bin##*/fuzz-}
    scratch=$OUT/run/$target
    rm -rf "$scratch"; mkdir -p "$scratch/corpus"
    dict=()
    [ -f "Fuzz/$target/dict" ] && dict=(-dict="Fuzz/$target/dict")
    # -malloc_limit_mb: no parser should allocate that much for a few KiB of input.
    "$bin" "$scratch/corpus" "Fuzz/$target/corpus" "${dict[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 \
        -rss_limit_mb=2048 -malloc_limit_mb=256 -artifact_prefix="$scratch/" -print_final_stats=1 \
        > "$scratch/log" 2>&1
    rc=$?
    status=$(grep -E '^#[0-9]+' "$scratch/log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$scratch/log")
    echo "$target: rc=$rc ${rate:-?} exec/s; $status"
    artifacts=$(find "$scratch" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' -o -maxdepth 1 -name 'leak-*')
    if [ $rc -ne 0 ] || [ -n "$artifacts" ]; then
        failed=1
        mkdir -p "Fuzz/$target/regressions"
        for a in $artifacts; do cp "$a" "Fuzz/$target/regressions/"; echo "  kept $a as Fuzz/$target/regressions/${a##*/}"; done
        echo "  log: $scratch/log"
    fi
done
exit $failed
