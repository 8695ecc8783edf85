#!/usr/bin/env python3
"""A TEST FIXTURE that answers like an Ollama server (Ollama itself cannot be installed here).

It follows Ollama's documented HTTP API for what edgecoder-worker uses:

  GET  /api/tags       {"models": [{"name", "model", "modified_at", "size", "digest",
                         "details": {"parent_model", "format", "family", "families",
                                     "parameter_size", "quantization_level"}}]}
  POST /api/generate   {"model", "prompt", "stream": false, "options": {"num_predict": N}}
                       -> {"model", "created_at", "response", "done": true, "done_reason",
                           "total_duration", "load_duration", "prompt_eval_count",
                           "prompt_eval_duration", "eval_count", "eval_duration"}
                       (durations in nanoseconds; "stream" absent or true gives Ollama's
                       NDJSON stream: one object per piece, then the final one)
  GET  /  and  HEAD /  "Ollama is running";  GET /api/version  {"version": ...}
  POST /api/pull      {"model", "stream"?} -> NDJSON progress as docs/api.md "Pull a Model"
                       shows it ("pulling manifest", "pulling <digest>" with total and
                       completed, "verifying sha256 digest", "writing manifest", "success"),
                       streamed in chunks over --pull-ms; the model is then listed. A model
                       not in --pullable streams {"error": ...} inside the 200, as Ollama's
                       PullHandler does once the stream has started.

Errors as Ollama gives them, a JSON object {"error": "..."}: 404 "model 'x' not found, try
pulling it first" for a model that is not listed, 400 for a body that is not JSON or has no
model, 405 for a wrong method, 404 for an unknown path.

Sources: Ollama's docs/api.md ("Generate a completion", "List Local Models", "Conventions:
durations in nanoseconds") and docs.ollama.com/api/tags (its OpenAPI example lists both
"name" and "model"); the error texts of Ollama's server/routes.go.

Answers are real when --upstream names an OpenAI-compatible completions endpoint (the
llama.cpp server of start-llama.sh): the prompt goes there with max_tokens = num_predict,
and the text, token counts and finish reason come back. Without --upstream the fixture
answers deterministically: the prompt's words, cycled, one word per "token", at most
num_predict of them (default 128).

Switches for failure tests (applied to the paths chosen by --fault-path, default all):
  --delay-ms N       wait N ms before answering (a SIGTERM still stops it at once)
  --fail-status CODE answer every request with CODE and {"error": "..."}
  --malformed        answer 200 with a body that is not valid JSON
  --hang             read the request and never answer (until the client gives up)

Prints "ollama-fixture listening on http://127.0.0.1:PORT" on stdout once it accepts
connections (--port 0 picks a free port). Exits 0 on SIGTERM or SIGINT.
"""

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STOP = threading.Event()
DEFAULT_NUM_PREDICT = 128


def now_rfc3339():
    # Go's time.Time JSON form in UTC, e.g. 2023-08-04T19:22:45.499127Z
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def normalize(name):
    """Ollama model names are model[:tag]; a missing tag means "latest"."""
    name = (name or "").strip()
    if not name:
        return ""
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else name + ":latest"


class Config:
    def __init__(self, args):
        self.args = args
        self.models = [normalize(m) for m in (args.model or ["tiny"])]
        size, digest = 601760, hashlib.sha256(b"edgecoder-tiny").hexdigest()
        if args.gguf and os.path.exists(args.gguf):
            with open(args.gguf, "rb") as f:
                data = f.read()
            size, digest = len(data), hashlib.sha256(data).hexdigest()
        self.size, self.digest = size, digest
        self.modified_at = datetime.now().astimezone().isoformat()
        self.requests = 0
        self.pulls = []
        self.pullable = [normalize(m) for m in (args.pullable or [])]
        self.lock = threading.Lock()

    def find(self, name):
        n = normalize(name)
        return n if n in self.models else None


class Handler(BaseHTTPRequestHandler):
    # Headers and body go out in separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (40 ms). Real servers (Node, Go, Ollama) set TCP_NODELAY too.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "ollama-fixture/1"
    sys_version = ""

    # ---- plumbing ------------------------------------------------------------------
    @property
    def cfg(self):
        return self.server.cfg

    def log_message(self, fmt, *a):
        if not self.cfg.args.quiet:
            sys.stderr.write("[ollama-fixture] %s %s\n" % (self.address_string(), fmt % a))

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    break
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the empty line
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send_bytes(self, status, body, ctype="application/json; charset=utf-8", head=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def send_json(self, status, obj):
        self.send_bytes(status, json.dumps(obj, separators=(",", ":")).encode())

    def error(self, status, msg):
        self.send_json(status, {"error": msg})

    def faults(self, path):
        """Apply the failure switches. True when the request has been answered."""
        a = self.cfg.args
        if a.fault_path and not path.startswith(a.fault_path):
            return False
        if a.delay_ms > 0 and STOP.wait(a.delay_ms / 1000.0):
            self.close_connection = True
            return True
        if a.hang:
            STOP.wait()
            self.close_connection = True
            return True
        if a.fail_status:
            self.error(a.fail_status, "ollama-fixture: forced status %d" % a.fail_status)
            return True
        if a.malformed:
            self.send_bytes(200, b'{"model":"tiny","created_at":"2024-01-01T00:00:00Z","response":"trunc')
            return True
        return False

    def route(self, method):
        with self.cfg.lock:
            self.cfg.requests += 1
        path = self.path.split("?", 1)[0]
        body = self.read_body() if method == "POST" else b""
        if self.faults(path):
            return
        routes = {
            "/": ("GET", "HEAD"),
            "/api/version": ("GET",),
            "/api/tags": ("GET",),
            "/api/generate": ("POST",),
            "/api/pull": ("POST",),
        }
        if path not in routes:
            self.send_bytes(404, b"404 page not found", "text/plain", head=(method == "HEAD"))
            return
        if method not in routes[path]:
            self.send_bytes(405, b"405 method not allowed", "text/plain", head=(method == "HEAD"))
            return
        if path == "/":
            self.send_bytes(200, b"Ollama is running", "text/plain; charset=utf-8", head=(method == "HEAD"))
        elif path == "/api/version":
            self.send_json(200, {"version": "0.0.0-fixture"})
        elif path == "/api/tags":
            self.tags()
        elif path == "/api/pull":
            self.pull(body)
        else:
            self.generate(body)

    def do_GET(self):
        self.route("GET")

    def do_HEAD(self):
        self.route("HEAD")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")

    # ---- endpoints -----------------------------------------------------------------
    def tags(self):
        models = [{
            "name": m,
            "model": m,
            "modified_at": self.cfg.modified_at,
            "size": self.cfg.size,
            "digest": self.cfg.digest,
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "llama",
                "families": ["llama"],
                "parameter_size": "0.15M",
                "quantization_level": "F32",
            },
        } for m in self.cfg.models]
        self.send_json(200, {"models": models})

    def pull(self, body):
        try:
            req = json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self.error(400, "invalid JSON: %s" % e)
            return
        if req is None:
            self.error(400, "missing request body")
            return
        if not isinstance(req, dict):
            self.error(400, "json: cannot unmarshal %s into Go value of type api.PullRequest" % type(req).__name__)
            return
        name = req.get("model") or req.get("name")
        if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name.strip()):
            self.error(400, "invalid model name")
            return
        name = normalize(name)
        with self.cfg.lock:
            self.cfg.pulls.append(name)
        known = name in self.cfg.pullable or name in self.cfg.models
        layers = [("sha256:" + hashlib.sha256((name + str(i)).encode()).hexdigest(), size)
                  for i, size in enumerate((40_000_000, 1_200, 310))]
        lines = [{"status": "pulling manifest"}]
        if known:
            steps = 8
            for i in range(1, steps + 1):
                for digest, size in layers:
                    lines.append({"status": "pulling %s" % digest[7:19], "digest": digest, "total": size,
                                  "completed": size * i // steps})
            lines += [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
        else:
            lines.append({"error": "pull model manifest: file does not exist"})
        if req.get("stream") is False:
            last = lines[-1]
            if "error" in last:
                self.error(500, last["error"])
            else:
                self.finish_pull(name)
                self.send_json(200, last)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pause = max(0, self.cfg.args.pull_ms) / 1000.0 / max(1, len(lines))
        for line in lines:
            if line.get("status") == "success":
                self.finish_pull(name)
            data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if pause and STOP.wait(pause):
                break
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def finish_pull(self, name):
        with self.cfg.lock:
            if name not in self.cfg.models:
                self.cfg.models.append(name)

    def generate(self, body):
        t0 = time.monotonic_ns()
        try:
            req = json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self.error(400, "invalid JSON: %s" % e)
            return
        if req is None:
            self.error(400, "missing request body")
            return
        if not isinstance(req, dict):
            self.error(400, "json: cannot unmarshal %s into Go value of type api.GenerateRequest"
                       % type(req).__name__)
            return
        name = req.get("model")
        if not isinstance(name, str) or not name.strip():
            self.error(400, "model is required")
            return
        if not self.cfg.find(name):
            self.error(404, "model '%s' not found, try pulling it first" % name)
            return
        prompt = req.get("prompt") or ""
        if not isinstance(prompt, str):
            self.error(400, "json: cannot unmarshal prompt into Go value of type string")
            return
        options = req.get("options") or {}
        if not isinstance(options, dict):
            self.error(400, "json: cannot unmarshal options into Go value of type map[string]interface {}")
            return
        stream = req.get("stream", True) is not False
        load_ns = time.monotonic_ns() - t0

        if prompt == "":   # Ollama: an empty prompt only loads the model
            self.reply(stream, [], {"model": name, "created_at": now_rfc3339(), "response": "",
                                    "done": True, "done_reason": "load"})
            return

        num_predict = options.get("num_predict", DEFAULT_NUM_PREDICT)
        try:
            num_predict = int(num_predict)
        except (TypeError, ValueError):
            self.error(400, "option \"num_predict\" must be of type integer")
            return
        if num_predict <= 0:   # -1 (infinite) and -2 (fill context): bounded here
            num_predict = DEFAULT_NUM_PREDICT

        t1 = time.monotonic_ns()
        if self.cfg.args.upstream:
            try:
                text, pieces, n_prompt, n_eval, reason = self.upstream(prompt, num_predict, options)
            except Exception as e:  # noqa: BLE001 - any upstream failure is a 500, as Ollama's runner errors are
                self.error(500, "ollama-fixture: upstream %s: %s" % (self.cfg.args.upstream, e))
                return
        else:
            text, pieces, n_prompt, n_eval, reason = self.echo(prompt, num_predict)
        t2 = time.monotonic_ns()
        prompt_eval_ns = max(1, (t2 - t1) // 10)
        final = {
            "model": name,
            "created_at": now_rfc3339(),
            "response": "" if stream else text,
            "done": True,
            "done_reason": reason,
            "total_duration": time.monotonic_ns() - t0,
            "load_duration": load_ns,
            "prompt_eval_count": n_prompt,
            "prompt_eval_duration": prompt_eval_ns,
            "eval_count": n_eval,
            "eval_duration": max(1, (t2 - t1) - prompt_eval_ns),
        }
        self.reply(stream, pieces if stream else [], final)

    def reply(self, stream, pieces, final):
        if not stream:
            self.send_json(200, final)
            return
        lines = [json.dumps({"model": final["model"], "created_at": now_rfc3339(),
                             "response": p, "done": False}, separators=(",", ":")) for p in pieces]
        final = dict(final, created_at=now_rfc3339())
        lines.append(json.dumps(final, separators=(",", ":")))
        self.send_bytes(200, ("\n".join(lines) + "\n").encode(), "application/x-ndjson")

    # ---- text sources --------------------------------------------------------------
    @staticmethod
    def echo(prompt, num_predict):
        words = prompt.split() or ["..."]
        out = [words[i % len(words)] for i in range(min(num_predict, max(len(words), 1) * 4))]
        # A prompt of N words answers 4N words at most, so done_reason is "stop" when the
        # answer ends before num_predict and "length" when num_predict cut it, as in Ollama.
        reason = "length" if len(out) >= num_predict else "stop"
        pieces = [(" " if i else "") + w for i, w in enumerate(out)]
        return "".join(pieces), pieces, len(words), len(out), reason

    def upstream(self, prompt, num_predict, options):
        a = self.cfg.args
        payload = {"model": a.upstream_model, "prompt": prompt, "max_tokens": num_predict}
        for k in ("temperature", "top_p", "top_k", "seed", "stop"):
            if k in options:
                payload[k] = options[k]
        req = urllib.request.Request(a.upstream, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=a.upstream_timeout) as r:
                data = json.loads(r.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            raise RuntimeError("HTTP %d %s" % (e.code, e.read(300).decode("utf-8", "replace")))
        choice = data["choices"][0]
        text = choice.get("text")
        if text is None:   # a chat endpoint as upstream
            text = (choice.get("message") or {}).get("content") or ""
        usage = data.get("usage") or {}
        n_eval = int(usage.get("completion_tokens") or len(text.split()))
        n_prompt = int(usage.get("prompt_tokens") or len(prompt.split()))
        reason = choice.get("finish_reason") or "stop"
        return text, [text], n_prompt, n_eval, ("length" if reason == "length" else "stop")


def main():
    ap = argparse.ArgumentParser(description="Ollama API test fixture (not Ollama).")
    ap.add_argument("--port", type=int, required=True, help="TCP port; 0 picks a free one")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--model", action="append",
                    help="a model name to list and serve (repeatable; default tiny, i.e. tiny:latest)")
    ap.add_argument("--gguf", help="a GGUF file whose size and sha256 /api/tags reports")
    ap.add_argument("--upstream", help="OpenAI-compatible completions URL, e.g. http://127.0.0.1:PORT/v1/completions")
    ap.add_argument("--upstream-model", default="tiny", help="model name sent upstream (default tiny)")
    ap.add_argument("--upstream-timeout", type=float, default=60.0)
    ap.add_argument("--pullable", action="append", help="a model /api/pull can fetch (repeatable)")
    ap.add_argument("--pull-ms", type=int, default=1500, help="how long a pull streams its progress")
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=0)
    ap.add_argument("--malformed", action="store_true")
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--fault-path", default="",
                    help="apply the failure switches only to paths starting with this (e.g. /api/generate)")
    ap.add_argument("--pid-file")
    ap.add_argument("--quiet", action="store_true", help="no per-request log on stderr")
    args = ap.parse_args()

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.cfg = Config(args)

    def on_signal(signum, _frame):
        STOP.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write("%d\n" % os.getpid())
    host, port = server.server_address[:2]
    print("ollama-fixture listening on http://%s:%d" % (host, port), flush=True)
    while not STOP.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    if args.pid_file:
        try:
            os.unlink(args.pid_file)
        except OSError:
            pass
    sys.stderr.write("[ollama-fixture] stopped after %d requests\n" % server.cfg.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
