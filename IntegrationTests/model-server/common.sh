# shellcheck shell=bash
# The settings are read by the scripts that source this file.
# shellcheck disable=SC2034
# Shared settings for the model-server test bed. Sourced by the scripts beside it.
#
# Environment (all optional):
#   EDGECODER_TEST_CACHE   cache root (default $HOME/.cache/edgecoder-worker). It must
#                          outlive the work tree: the llama.cpp build takes minutes.
#   EDGECODER_TEST_PYTHON  interpreter to build the virtual environment from
#                          (default /usr/bin/python3, else python3 on PATH).

MS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MS_CACHE="${EDGECODER_TEST_CACHE:-${HOME:-/root}/.cache/edgecoder-worker}"
MS_VENV="$MS_CACHE/llama-venv"
MS_PY="$MS_VENV/bin/python"
MS_WHEELS="$MS_CACHE/wheels"
MS_MODELS="$MS_CACHE/models"
MS_RUN="$MS_CACHE/run"

# Pinned versions (known to work together; see requirements.txt for the full set).
MS_LLAMA_CPP_PYTHON_VERSION="0.3.36"

# llama.cpp build switches. GGML_NATIVE=OFF: no -march=native, so the cached build runs
# on any x86-64 machine with AVX2/FMA/F16C (the ggml defaults when NATIVE is off), not
# only on the CPU that compiled it. LLAVA_BUILD=OFF skips libmtmd (multimodal; imported
# lazily by llama_cpp only for vision chat handlers). LLAMA_OPENSSL=OFF: no libssl-dev.
# Tests/tools/examples/server of llama.cpp are already OFF when it is a subproject;
# they are listed to make that explicit.
MS_CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"

ms_log() { printf '[model-server] %s\n' "$*" >&2; }
ms_die() { printf '[model-server] ERROR: %s\n' "$*" >&2; exit 1; }

# Hash of the model generator: a changed generator makes a new cached model file.
ms_model_path() {
    local h
    h="$(sha256sum "$MS_DIR/make_tiny_model.py" | cut -c1-12)"
    printf '%s/tiny-llama-%s.gguf\n' "$MS_MODELS" "$h"
}

# Generate the tiny model into the cache if it is not there yet; print its path.
ms_ensure_model() {
    local out tmp
    out="$(ms_model_path)"
    if [ ! -s "$out" ]; then
        mkdir -p "$MS_MODELS"
        tmp="$out.tmp.$$"
        "$MS_PY" "$MS_DIR/make_tiny_model.py" "$tmp" >&2 || { rm -f "$tmp"; ms_die "make_tiny_model.py failed"; }
        mv -f "$tmp" "$out"
    fi
    printf '%s\n' "$out"
}

# A free TCP port on 127.0.0.1 (bind to port 0 and read it back).
ms_free_port() {
    local py=python3
    [ -x "$MS_PY" ] && py="$MS_PY"
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
