#!/usr/bin/env bash
# Builds the libFuzzer targets of Fuzz with swiftc (SwiftPM cannot link a libFuzzer
# main). Each Sources module a target needs is compiled once, instrumented
# (-sanitize=fuzzer,address), into a static library under $FUZZ_BUILD; a module is
# rebuilt only when its sources or a module it depends on changed. Then each harness
# (Fuzz/<target>/*.swift plus Fuzz/Common) is linked against those.
#
# Usage: Fuzz/build.sh [target…]   (default: every target)
# Prints the path of each built binary: $FUZZ_BUILD/fuzz-<target>.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=/opt/swift/usr/bin:$PATH
OUT=${FUZZ_BUILD:-$ROOT/.build/fuzz}
# -O: the targets run several times faster than -Onone, which matters more than the
# extra minutes of compiling for a long run; bounds and overflow checks stay on (-O keeps
# them). make test's brief run (fuzz.sh) builds at -Onone in a folder of its own.
OPT=${FUZZ_OPT:--O}
mkdir -p "$OUT/include"

ALL_TARGETS=(json jsoncost config bluetooth rtnetlink uevent http httpresponse coordinator modelwire dbus pairing)

# The modules each target links, dependents before dependencies (static link order).
modules_of() {
    case $1 in
        uevent) echo "Telemetry Posix Tasks Logging WorkerCore" ;;
        modelwire) echo "ModelBackend HTTP Posix Tasks Logging WorkerCore" ;;
        httpresponse) echo "HTTP Posix Tasks Logging WorkerCore" ;;
        dbus) echo "BlueZ DBus Posix Tasks Logging WorkerCore" ;;
        http) echo "Proxy Posix Tasks Logging WorkerCore" ;;
        *) echo "WorkerCore" ;;
    esac
}
deps_of() {
    case $1 in
        WorkerCore|Logging|Tasks) echo "" ;;
        DBus) echo "Posix Logging" ;;
        Posix) echo "Logging WorkerCore Tasks" ;;
        Telemetry) echo "WorkerCore Posix" ;;
        HTTP) echo "Posix Logging" ;;
        ModelBackend) echo "HTTP WorkerCore Posix" ;;
        BlueZ) echo "DBus Posix Tasks WorkerCore Logging" ;;
        Proxy) echo "WorkerCore Logging Posix Tasks" ;;
    esac
}

# C shims: plain objects, and a module map the Swift modules import them through.
c_shim() {
    local name=$1
    local lib=$OUT/lib$name.a
    if [ ! -f "$lib" ] || [ -n "$(find Sources/$name -newer "$lib" -print -quit)" ]; then
        clang -c -O1 -fPIC -I Sources/$name/include Sources/$name/shims.c -o "$OUT/$name.o"
        rm -f "$lib"; ar rcs "$lib" "$OUT/$name.o"
    fi
    mkdir -p "$OUT/include/$name"
    printf 'module %s {\n    header "%s"\n    export *\n}\n' "$name" "$ROOT/Sources/$name/include/$name.h" > "$OUT/include/$name/module.modulemap"
}

C_INCLUDES=(-I "$OUT/include/CWorkerShims" -I "$OUT/include/CCurlShims" -I Sources/CCurl -I Sources/CSystemd -I Sources/CBluetooth)

build_module() {
    local name=$1
    local lib=$OUT/lib$name.a
    local stale=0
    if [ ! -f "$lib" ] || [ -n "$(find Sources/$name -newer "$lib" -print -quit)" ]; then stale=1; fi
    for dep in $(deps_of "$name"); do
        [ "$OUT/lib$dep.a" -nt "$lib" ] && stale=1
    done
    [ $stale = 1 ] || return 0
    echo "fuzz build: module $name ($OPT)" >&2
    local sources
    mapfile -t sources < <(find Sources/"$name" -name "*.swift" | sort)
    # -enable-testing: the D-Bus harness reads BlueZ's internal decoders (@testable).
    swiftc -parse-as-library -emit-library -static -wmo -module-name "$name" -package-name edgecoder_worker \
        -emit-module -emit-module-path "$OUT/$name.swiftmodule" -o "$lib.tmp" \
        -sanitize=fuzzer,address "$OPT" -enable-testing -suppress-warnings -swift-version 6 \
        -I "$OUT" "${C_INCLUDES[@]}" "${sources[@]}" 2>&1 | grep -v "Cannot export local symbol" >&2 || true
    [ -f "$lib.tmp" ] || { echo "fuzz build: module $name failed" >&2; exit 1; }
    mv "$lib.tmp" "$lib"
}

link_target() {
    local target=$1
    local bin=$OUT/fuzz-$target
    local libs=()
    for m in $(modules_of "$target"); do libs+=("-l$m"); done
    case $target in
        uevent | http) libs+=(-lCWorkerShims) ;;
        modelwire | httpresponse) libs+=(-lCCurlShims -lCWorkerShims -ldl) ;;
        dbus) libs+=(-lCWorkerShims -lsystemd -lbluetooth) ;;
    esac
    local stale=0
    [ -f "$bin" ] || stale=1
    for f in Fuzz/"$target"/*.swift Fuzz/Common/*.swift; do [ "$f" -nt "$bin" ] && stale=1; done
    for m in $(modules_of "$target"); do [ "$OUT/lib$m.a" -nt "$bin" ] && stale=1; done
    if [ $stale = 1 ]; then
        echo "fuzz build: target $target" >&2
        swiftc -parse-as-library -sanitize=fuzzer,address "$OPT" -suppress-warnings -swift-version 6 -module-name "Fuzz_$target" -package-name edgecoder_worker \
            -I "$OUT" "${C_INCLUDES[@]}" -L "$OUT" Fuzz/"$target"/*.swift Fuzz/Common/*.swift \
            "${libs[@]}" -o "$bin.tmp" 2>&1 | grep -v "Cannot export local symbol" >&2 || true
        [ -f "$bin.tmp" ] || { echo "fuzz build: target $target failed" >&2; exit 1; }
        mv "$bin.tmp" "$bin"
    fi
    echo "$bin"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")
needed=" "
for t in "${targets[@]}"; do needed+="$(modules_of "$t") "; done
has() { [[ "$needed" == *" $1 "* ]]; }

c_shim CWorkerShims
c_shim CCurlShims
# Two lanes, as the machine has two cores: WorkerCore alone (the largest) beside the
# modules that need nothing of it; then the rest in order (Posix imports WorkerCore, DBus Posix).
lane_pid=""
if has WorkerCore; then build_module WorkerCore & lane_pid=$!; fi
for m in Logging Tasks; do if has "$m"; then build_module "$m"; fi; done
if [ -n "$lane_pid" ]; then wait "$lane_pid"; fi
for m in Posix DBus HTTP Telemetry ModelBackend BlueZ Proxy; do if has $m; then build_module $m; fi; done
for t in "${targets[@]}"; do link_target "$t"; done
