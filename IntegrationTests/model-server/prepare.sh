#!/usr/bin/env bash
# Prepare the cached test bed for a REAL model server (llama.cpp through
# llama-cpp-python's OpenAI-compatible server) and the tiny random-weight model.
#
#   IntegrationTests/model-server/prepare.sh [--force]
#
# Idempotent. The first run compiles llama.cpp (about 5 minutes on 2 cores) into a wheel
# and a virtual environment under ${EDGECODER_TEST_CACHE:-$HOME/.cache/edgecoder-worker};
# later runs check a version stamp and finish in about a second. --force rebuilds the
# virtual environment (the compiled wheel is kept; delete $CACHE/wheels to recompile).
#
# On success the last lines on stdout are, for scripts and tests:
#   EDGECODER_LLAMA_PYTHON=/…/llama-venv/bin/python
#   EDGECODER_TINY_MODEL=/…/models/tiny-llama-<hash>.gguf
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FORCE=0
for a in "$@"; do
    case "$a" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) ms_die "unknown argument: $a" ;;
    esac
done

mkdir -p "$MS_CACHE" "$MS_WHEELS" "$MS_MODELS" "$MS_RUN" "$MS_CACHE/logs"

# One preparer at a time (a Swift test and a shell suite may start together).
exec 9>"$MS_CACHE/.prepare.lock"
if ! flock -n 9; then
    ms_log "another prepare.sh holds $MS_CACHE/.prepare.lock; waiting (up to 30 min)"
    flock -w 1800 9 || ms_die "timed out waiting for the lock"
fi

# --- Which Python -------------------------------------------------------------------
# Debian's /usr/bin/python3 (3.11) by default: it is the system interpreter that apt
# manages at a fixed path, python3-venv gives it ensurepip, and it does not depend on a
# pyenv shim resolving to a version that a .python-version file may change. llama-cpp-python
# talks to libllama through ctypes, so no Python headers are needed. The pyenv 3.11 works
# as well (EDGECODER_TEST_PYTHON=/root/.pyenv/versions/3.11.7/bin/python).
pick_python() {
    if [ -n "${EDGECODER_TEST_PYTHON:-}" ]; then printf '%s\n' "$EDGECODER_TEST_PYTHON"; return; fi
    if [ -x /usr/bin/python3 ]; then printf '%s\n' /usr/bin/python3; return; fi
    command -v python3 || ms_die "no python3 found"
}
BASE_PY="$(pick_python)"

py_has_venv() { "$1" -c 'import venv, ensurepip' >/dev/null 2>&1; }
have_cmake() {   # cmake >= 3.21 (llama-cpp-python's minimum)
    command -v cmake >/dev/null 2>&1 || return 1
    cmake --version | awk 'NR==1{split($3,v,"."); exit !((v[1]>3)||(v[1]==3&&v[2]>=21))}'
}

# --- Debian build dependencies (only as root, only what is missing) -----------------
install_debian_deps() {
    local pkgs=()
    command -v gcc >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || pkgs+=(build-essential)
    have_cmake || pkgs+=(cmake)
    command -v ninja >/dev/null 2>&1 || pkgs+=(ninja-build)
    if [ "$BASE_PY" = /usr/bin/python3 ] && ! py_has_venv "$BASE_PY"; then pkgs+=(python3-venv); fi
    [ ${#pkgs[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        ms_log "missing ${pkgs[*]} and not root with apt-get: continuing (pip brings cmake/ninja from PyPI; a compiler and venv are still needed)"
        return 0
    fi
    ms_log "apt-get install ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${pkgs[@]}" >"$MS_CACHE/logs/apt.log" 2>&1; then
        ms_log "apt-get install failed; running apt-get update and retrying"
        apt-get update -q >>"$MS_CACHE/logs/apt.log" 2>&1 || true
        apt-get install -y -q --no-install-recommends "${pkgs[@]}" >>"$MS_CACHE/logs/apt.log" 2>&1 \
            || { tail -20 "$MS_CACHE/logs/apt.log" >&2; ms_log "apt-get install failed (see $MS_CACHE/logs/apt.log); continuing"; }
    fi
}

# --- Stamp: what the cached environment was built from ------------------------------
REQ="$MS_DIR/requirements.txt"
BASE_PY_REAL="$(readlink -f "$(command -v "$BASE_PY")")"
stamp_text() {
    printf 'format=1\n'
    printf 'python=%s %s\n' "$BASE_PY_REAL" "$("$BASE_PY" -c 'import sys; print(sys.version.split()[0])')"
    printf 'requirements=%s\n' "$(sha256sum "$REQ" | cut -c1-16)"
    printf 'llama-cpp-python=%s\n' "$MS_LLAMA_CPP_PYTHON_VERSION"
    printf 'cmake-args=%s\n' "$MS_CMAKE_ARGS"
}
STAMP_FILE="$MS_VENV/.edgecoder-stamp"
WANT_STAMP="$(stamp_text)"

venv_works() {
    "$MS_PY" -c 'import llama_cpp, llama_cpp.server.app, gguf, numpy' >/dev/null 2>&1
}

finish() {
    local model
    model="$(ms_ensure_model)"
    ms_log "ready: llama-cpp-python $("$MS_PY" -c 'import llama_cpp; print(llama_cpp.__version__)'), model $(basename "$model")"
    printf 'EDGECODER_LLAMA_PYTHON=%s\n' "$MS_PY"
    printf 'EDGECODER_TINY_MODEL=%s\n' "$model"
}

if [ "$FORCE" -eq 0 ] && [ -f "$STAMP_FILE" ] && [ "$(cat "$STAMP_FILE")" = "$WANT_STAMP" ] && venv_works; then
    ms_log "cached environment is up to date: $MS_VENV"
    finish
    exit 0
fi

T0=$(date +%s)
ms_log "preparing $MS_VENV (python: $BASE_PY_REAL)"
install_debian_deps
py_has_venv "$BASE_PY" || ms_die "$BASE_PY has no venv/ensurepip (apt-get install python3-venv, or set EDGECODER_TEST_PYTHON)"
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || ms_die "no C compiler (apt-get install build-essential)"

rm -rf "$MS_VENV"
"$BASE_PY" -m venv "$MS_VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# --- The llama-cpp-python wheel, compiled once per version/flags/compiler -----------
WHEEL_KEY="$(printf '%s|%s|%s|%s\n' "$MS_LLAMA_CPP_PYTHON_VERSION" "$MS_CMAKE_ARGS" "$(uname -m)" "$(gcc -dumpfullversion 2>/dev/null || true)" | sha256sum | cut -c1-12)"
WHEEL_DIR="$MS_WHEELS/llama-cpp-python-$MS_LLAMA_CPP_PYTHON_VERSION-$WHEEL_KEY"
if ! ls "$WHEEL_DIR"/llama_cpp_python-"$MS_LLAMA_CPP_PYTHON_VERSION"-*.whl >/dev/null 2>&1; then
    BUILD_LOG="$MS_CACHE/logs/build-llama-cpp-python.log"
    ms_log "compiling llama-cpp-python $MS_LLAMA_CPP_PYTHON_VERSION (llama.cpp; ~5 min on 2 cores); log: $BUILD_LOG"
    TMPW="$WHEEL_DIR.tmp.$$"
    rm -rf "$TMPW"; mkdir -p "$TMPW"
    TB=$(date +%s)
    if ! CMAKE_ARGS="$MS_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" \
         nice -n "${EDGECODER_BUILD_NICE:-19}" "$MS_PY" -m pip wheel -v --no-deps --no-binary llama-cpp-python \
            --wheel-dir "$TMPW" "llama-cpp-python==$MS_LLAMA_CPP_PYTHON_VERSION" >"$BUILD_LOG" 2>&1; then
        tail -40 "$BUILD_LOG" >&2
        rm -rf "$TMPW"
        ms_die "building llama-cpp-python failed (full log: $BUILD_LOG)"
    fi
    rm -rf "$WHEEL_DIR"; mv "$TMPW" "$WHEEL_DIR"
    ms_log "compiled in $(( $(date +%s) - TB )) s: $(ls "$WHEEL_DIR")"
else
    ms_log "using cached wheel $(ls "$WHEEL_DIR")"
fi

ms_log "installing pinned packages from $REQ"
"$MS_PY" -m pip install -q --find-links "$WHEEL_DIR" --only-binary=llama-cpp-python -r "$REQ" \
    >"$MS_CACHE/logs/pip-install.log" 2>&1 \
    || { tail -30 "$MS_CACHE/logs/pip-install.log" >&2; ms_die "pip install failed (log: $MS_CACHE/logs/pip-install.log)"; }
venv_works || ms_die "the environment does not import llama_cpp/llama_cpp.server/gguf"
printf '%s\n' "$WANT_STAMP" >"$STAMP_FILE"
ms_log "prepared in $(( $(date +%s) - T0 )) s"
finish
