#!/usr/bin/env bash
# The fuzz targets of Fuzz, briefly: every input kept in a target's regressions/
# (what once crashed it or hung it) and its seed corpus are replayed, then it fuzzes for
# FUZZ_SUITE_SECONDS (default 3) so a crash found once stays found. `make fuzz` is the
# long run. Builds with swiftc into .build/fuzz-suite at -Onone (FUZZ_OPT): 48 s of CPU from
# cold against 160 at -O, which `make fuzz` keeps in .build/fuzz for its speed per input; for
# a replay and 3 s a target the build is what costs, and make test's lanes share 2 cores.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
ROOT=$PWD
OUT=${FUZZ_BUILD:-$ROOT/.build/fuzz-suite}
export FUZZ_BUILD=$OUT FUZZ_OPT=${FUZZ_OPT:--Onone}
SECONDS_EACH=${FUZZ_SUITE_SECONDS:-3}
# Swift's own backtracer fights ASan over a trap; libFuzzer prints the stack itself.
export SWIFT_BACKTRACE=enable=no

if ! bins=$(nice -n 5 bash Fuzz/build.sh); then
    not_ok "the fuzz targets build"
    tap_done; exit $?
fi
ok "the fuzz targets build"
for bin in $bins; do
    target=${bin##*/fuzz-}
    if [ "$target" = dbus ] && [ ! -x /usr/bin/dbus-daemon ]; then
        echo "# fuzz dbus not run: it needs /usr/bin/dbus-daemon (Debian package dbus-daemon; make deps)"
        continue
    fi
    scratch=$OUT/suite/$target
    rm -rf "$scratch"; mkdir -p "$scratch/corpus"
    regressions=()
    if [ -d "Fuzz/$target/regressions" ]; then
        while IFS= read -r f; do regressions+=("$f"); done < <(find "Fuzz/$target/regressions" -type f | sort)
    fi
    if [ ${#regressions[@]} -gt 0 ]; then
        # Given files (not directories), libFuzzer runs each once and fails on a crash.
        if "$bin" -timeout=10 -malloc_limit_mb=256 "${regressions[@]}" > "$scratch/regressions.log" 2>&1; then
            ok "fuzz $target: the ${#regressions[@]} kept regression inputs pass"
        else
            not_ok "fuzz $target: a kept regression input fails again (see $scratch/regressions.log)"
        fi
    fi
    dict=()
    [ -f "Fuzz/$target/dict" ] && dict=(-dict="Fuzz/$target/dict")
    if "$bin" "$scratch/corpus" "Fuzz/$target/corpus" "${dict[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 \
        -malloc_limit_mb=256 -artifact_prefix="$scratch/" > "$scratch/log" 2>&1; then
        ok "fuzz $target: corpus and ${SECONDS_EACH} s of fuzzing ($(grep -E '^#[0-9]+' "$scratch/log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+'))"
    else
        grep -E 'Fatal error|ERROR:' "$scratch/log" | head -3 | sed 's/^/# /'
        not_ok "fuzz $target: fuzzing found a failure; the input is in $scratch (keep it in Fuzz/$target/regressions/)"
    fi
done
tap_done; exit $?
