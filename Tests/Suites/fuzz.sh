#!/usr/bin/env bash
# The fuzz targets of Tests/Fuzz, briefly: every input kept in a target's regressions/
# (what once crashed it) and its seed corpus are replayed, then it fuzzes for
# FUZZ_SUITE_SECONDS (default 3) so a crash found once stays found. `make fuzz` is the
# long run. Plain TAP-like output: one ok / not ok line per target.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${FUZZ_BUILD:-$ROOT/.build/fuzz}
SECONDS_EACH=${FUZZ_SUITE_SECONDS:-3}
export SWIFT_BACKTRACE=enable=no

if ! bins=$(nice -n 5 bash Tests/Fuzz/build.sh); then
    echo "not ok 1 - the fuzz targets build"
    exit 1
fi
echo "ok 1 - the fuzz targets build"
failed=0
n=1
for bin in $bins; do
    target=${bin##*/fuzz-}
    scratch=$OUT/suite/$target
    rm -rf "$scratch"; mkdir -p "$scratch/corpus"
    regressions=()
    if [ -d "Tests/Fuzz/$target/regressions" ]; then
        while IFS= read -r f; do regressions+=("$f"); done < <(find "Tests/Fuzz/$target/regressions" -type f | sort)
    fi
    ok=1
    if [ ${#regressions[@]} -gt 0 ]; then
        # Given files (not directories), libFuzzer runs each once and fails on a crash.
        if ! "$bin" -timeout=10 -malloc_limit_mb=256 "${regressions[@]}" > "$scratch/regressions.log" 2>&1; then
            ok=0; echo "# $target: a kept regression input fails again; see $scratch/regressions.log"
        fi
    fi
    dict=()
    [ -f "Tests/Fuzz/$target/dict" ] && dict=(-dict="Tests/Fuzz/$target/dict")
    if ! "$bin" "$scratch/corpus" "Tests/Fuzz/$target/corpus" "${dict[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 \
        -malloc_limit_mb=256 -artifact_prefix="$scratch/" > "$scratch/log" 2>&1; then
        ok=0; echo "# $target: fuzzing found a failure; the input is in $scratch (keep it in Tests/Fuzz/$target/regressions/)"
        grep -E 'Fatal error|ERROR:' "$scratch/log" | head -3 | sed 's/^/#   /'
    fi
    n=$((n + 1))
    if [ $ok = 1 ]; then
        echo "ok $n - fuzz $target (${#regressions[@]} regression inputs; $(grep -E '^#[0-9]+' "$scratch/log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+'))"
    else
        echo "not ok $n - fuzz $target"; failed=1
    fi
done
echo "1..$n"
exit $failed
