#!/usr/bin/env bash
# make bench: streaming figures against the test bed's llama.cpp server (docs/reference/model-backends.md): time to
# the first streamed piece against time to the whole answer for 500 tokens, and the
# worker's own cost per streamed piece. Figures, not assertions.
set -u
cd "$(dirname "$0")/.." || exit 1
eval "$(IntegrationTests/model-server/prepare.sh | grep '^EDGECODER_')" || { echo "stream bench: the model-server test bed cannot be prepared"; exit 0; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
IntegrationTests/model-server/start-llama.sh "$PORT" >/dev/null || { echo "stream bench: llama.cpp did not start"; exit 0; }
trap 'IntegrationTests/model-server/stop-llama.sh "$PORT" >/dev/null 2>&1' EXIT
.build/release/worker-bench stream "http://127.0.0.1:$PORT"
