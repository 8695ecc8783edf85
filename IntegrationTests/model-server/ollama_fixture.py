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
  POST /api/chat       {"model", "messages": [{"role", "content"}], "stream", "options",
                        "format", "think", "keep_alive"} -> the same, with "message":
                       {"role": "assistant", "content", "thinking"?} instead of "response"
  GET  /api/ps         {"models": [{"name", "model", "size", "digest", "details",
                         "expires_at", "size_vram", "context_length"}]}: the models loaded
  GET  /  and  HEAD /  "Ollama is running";  GET /api/version  {"version": ...}
  POST /api/pull      {"model", "stream"?} -> NDJSON progress as docs/api.md "Pull a Model"
                       shows it ("pulling manifest", "pulling <digest>" with total and
                       completed, "verifying sha256 digest", "writing manifest", "success"),
                       streamed in chunks over --pull-ms; the model is then listed. A model
                       not in --pullable streams {"error": ...} inside the 200, as Ollama's
                       PullHandler does once the stream has started.

Loading and keep_alive, as Ollama does them: a model is loaded by the first request that
names it (an empty prompt, or empty messages, only loads it: done_reason "load"), stays
loaded for that request's keep_alive (a Go duration string, or seconds as a number;
negative = forever, 0 = unload now; default "5m"), and is in /api/ps only while loaded.
Loading takes --load-ms N. --loaded starts with every model loaded.

Thinking, as Ollama does it: a model named by --thinking-model thinks when the request's
"think" is absent or true (Ollama's default for models that can think); the thinking goes
to "thinking" (generate) or "message.thinking" (chat), counts against num_predict
(--think-words N words of it, default 6), so with num_predict <= N the answer is empty.
"think": true for a model that cannot think is 400 "\"NAME\" does not support thinking".
"format": "json" makes the echo answer a JSON object.

Streamed answers (stream absent or true) go out piece by piece with chunked encoding, as
they are produced (upstream: relayed from the upstream's own stream); a client that goes
away stops the generation (counted as "aborted" in GET /_fixture/state).

GET /_fixture/state (not Ollama's): {"requests": [{"path", "body"}...] (last 200),
"aborted": N, "loaded": [names]}, for tests to check what the client sent.
--api-key K: every request but GET / needs "Authorization: Bearer K", else 401
{"error": "unauthorized"} (an authenticating proxy in front of Ollama).

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
from datetime import datetime, timedelta, timezone
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


def parse_keep_alive(value):
    """Seconds to keep a model loaded; None = forever. Ollama: a number is seconds, a
    string is a Go duration; negative means forever; absent means 5 minutes."""
    if value is None:
        return 300.0
    if isinstance(value, bool):
        raise ValueError("keep_alive must be a duration or a number")
    if isinstance(value, (int, float)):
        return None if value < 0 else float(value)
    if not isinstance(value, str):
        raise ValueError("keep_alive must be a duration or a number")
    text = value.strip()
    if text in ("0", "-0"):
        return 0.0
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    total, i = 0.0, 0
    if not text:
        raise ValueError("time: invalid duration %r" % value)
    while i < len(text):
        j = i
        while j < len(text) and (text[j].isdigit() or text[j] == "."):
            j += 1
        if j == i:
            raise ValueError("time: invalid duration %r" % value)
        number = float(text[i:j])
        for unit in ("ns", "us", "µs", "ms", "s", "m", "h"):
            if text.startswith(unit, j) and not (unit == "m" and text.startswith("ms", j)):
                total += number * units[unit]
                i = j + len(unit)
                break
        else:
            raise ValueError("time: missing unit in duration %r" % value)
    return None if sign < 0 else total


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
        self.thinking = [normalize(m) for m in (args.thinking_model or [])]
        # name -> monotonic expiry (None: forever); a model is in /api/ps while loaded
        self.loaded = {m: time.monotonic() + 300 for m in self.models} if args.loaded else {}
        self.loading = set()
        self.log = []
        self.aborted = 0

    def is_loaded(self, name):
        with self.lock:
            if name not in self.loaded:
                return False
            expiry = self.loaded[name]
            if expiry is not None and time.monotonic() >= expiry:
                del self.loaded[name]
                return False
            return True

    def load(self, name, keep_alive):
        """Loads `name` (taking --load-ms the first time), then keeps it for keep_alive."""
        if not self.is_loaded(name):
            with self.lock:
                self.loading.add(name)
            try:
                if self.args.load_ms > 0:
                    STOP.wait(self.args.load_ms / 1000.0)
            finally:
                with self.lock:
                    self.loading.discard(name)
        self.keep(name, keep_alive)

    def keep(self, name, keep_alive):
        seconds = parse_keep_alive(keep_alive)
        with self.lock:
            if seconds is not None and seconds == 0:
                self.loaded.pop(name, None)
            else:
                self.loaded[name] = None if seconds is None else time.monotonic() + seconds

    def find(self, name):
        """The listed model `name` means: Ollama compares names case-insensitively."""
        n = normalize(name).lower()
        return next((m for m in self.models if m.lower() == n), None)


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
        if path == "/_fixture/state":
            with self.cfg.lock:
                state = {"requests": list(self.cfg.log), "aborted": self.cfg.aborted,
                         "loaded": sorted(self.cfg.loaded)}
            self.send_json(200, state)
            return
        with self.cfg.lock:
            try:
                logged = json.loads(body.decode("utf-8")) if body else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                logged = body.decode("utf-8", "replace")
            self.cfg.log.append({"path": path, "body": logged})
            del self.cfg.log[:-200]
        key = self.cfg.args.api_key
        if key and path != "/" and self.headers.get("Authorization") != "Bearer " + key:
            self.error(401, "unauthorized")
            return
        if self.faults(path):
            return
        routes = {
            "/": ("GET", "HEAD"),
            "/api/version": ("GET",),
            "/api/tags": ("GET",),
            "/api/ps": ("GET",),
            "/api/generate": ("POST",),
            "/api/chat": ("POST",),
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
        elif path == "/api/ps":
            self.ps()
        elif path == "/api/pull":
            self.pull(body)
        else:
            self.generate(body, chat=(path == "/api/chat"))

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

    def ps(self):
        models = []
        for m in self.cfg.models:
            if not self.cfg.is_loaded(m):
                continue
            with self.cfg.lock:
                expiry = self.cfg.loaded.get(m)
            expires = datetime.now(timezone.utc) + (timedelta(days=365 * 200) if expiry is None
                                                   else timedelta(seconds=max(0.0, expiry - time.monotonic())))
            models.append({
                "name": m, "model": m, "size": self.cfg.size, "digest": self.cfg.digest,
                "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                            "parameter_size": "0.15M", "quantization_level": "F32"},
                "expires_at": expires.astimezone().isoformat(), "size_vram": 0, "context_length": 512,
            })
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

    def generate(self, body, chat=False):
        t0 = time.monotonic_ns()
        kind = "api.ChatRequest" if chat else "api.GenerateRequest"
        try:
            req = json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self.error(400, "invalid JSON: %s" % e)
            return
        if req is None:
            self.error(400, "missing request body")
            return
        if not isinstance(req, dict):
            self.error(400, "json: cannot unmarshal %s into Go value of type %s" % (type(req).__name__, kind))
            return
        name = req.get("model")
        if not isinstance(name, str) or not name.strip():
            self.error(400, "model is required")
            return
        if not self.cfg.find(name):
            self.error(404, "model '%s' not found, try pulling it first" % name)
            return
        full = self.cfg.find(name)
        system = req.get("system")
        if chat:
            messages = req.get("messages") or []
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                self.error(400, "json: cannot unmarshal messages into Go value of type []api.Message")
                return
            users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
            prompt = users[-1] if users else ""
            system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        else:
            messages = None
            prompt = req.get("prompt") or ""
            if not isinstance(prompt, str):
                self.error(400, "json: cannot unmarshal prompt into Go value of type string")
                return
        options = req.get("options") or {}
        if not isinstance(options, dict):
            self.error(400, "json: cannot unmarshal options into Go value of type map[string]interface {}")
            return
        think = req.get("think")
        if think is not None and not isinstance(think, (bool, str)):
            self.error(400, "invalid think value")
            return
        can_think = full in self.cfg.thinking
        if think is True and not can_think:
            self.error(400, "\"%s\" does not support thinking" % name)
            return
        thinks = can_think and think is not False
        try:
            parse_keep_alive(req.get("keep_alive"))
        except ValueError as e:
            self.error(400, str(e))
            return
        stream = req.get("stream", True) is not False
        self.cfg.load(full, req.get("keep_alive"))
        load_ns = time.monotonic_ns() - t0

        if (chat and not messages) or (not chat and prompt == "" and not system):
            # Ollama: an empty prompt (no messages) only loads the model
            final = {"model": name, "created_at": now_rfc3339(), "done": True, "done_reason": "load"}
            if chat:
                final["message"] = {"role": "assistant", "content": ""}
            else:
                final["response"] = ""
            self.reply(stream, iter(()), final, chat)
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
        counts = {"prompt": len(prompt.split()), "eval": 0, "reason": "stop", "text": "", "thinking": ""}
        thinking_words = min(self.cfg.args.think_words, num_predict) if thinks else 0
        answer_tokens = num_predict - thinking_words

        def pieces():
            # (kind, text) pairs as they are produced: thinking first, then the answer.
            for i in range(thinking_words):
                counts["eval"] += 1
                piece = ("" if i == 0 else " ") + ["Let", "me", "think", "about", "this", "carefully"][i % 6]
                counts["thinking"] += piece
                yield "thinking", piece
            if answer_tokens <= 0:
                counts["reason"] = "length"
                return
            if self.cfg.args.upstream:
                source = self.upstream_stream(prompt, answer_tokens, options, messages, system, req.get("format"), counts)
            else:
                source = self.echo_stream(prompt, answer_tokens, req.get("format"), counts)
            for piece in source:
                counts["text"] += piece
                yield "text", piece

        def final():
            t2 = time.monotonic_ns()
            prompt_eval_ns = max(1, (t2 - t1) // 10)
            out = {
                "model": name,
                "created_at": now_rfc3339(),
                "done": True,
                "done_reason": counts["reason"],
                "total_duration": time.monotonic_ns() - t0,
                "load_duration": load_ns,
                "prompt_eval_count": counts["prompt"],
                "prompt_eval_duration": prompt_eval_ns,
                "eval_count": counts["eval"],
                "eval_duration": max(1, (t2 - t1) - prompt_eval_ns),
            }
            return out

        if stream:
            self.reply(True, pieces(), final, chat)
            return
        try:
            for _ in pieces():
                pass
        except Exception as e:  # noqa: BLE001 - any upstream failure is a 500, as Ollama's runner errors are
            self.error(500, "ollama-fixture: upstream %s: %s" % (self.cfg.args.upstream, e))
            return
        out = final()
        if chat:
            out["message"] = {"role": "assistant", "content": counts["text"]}
            if counts["thinking"]:
                out["message"]["thinking"] = counts["thinking"]
        else:
            out["response"] = counts["text"]
            if counts["thinking"]:
                out["thinking"] = counts["thinking"]
        self.send_json(200, out)

    def reply(self, stream, pieces, final, chat):
        """Sends the pieces as Ollama's NDJSON stream, each as it is produced, then the
        final object (a callable, so its counts include every piece); or, not streaming,
        the final object alone."""
        if not stream:
            self.send_json(200, final if isinstance(final, dict) else final())
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        model = (final if isinstance(final, dict) else {"model": None}).get("model")

        def send(obj):
            data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            try:
                for kind, piece in pieces:
                    line = {"model": model or self.model_name, "created_at": now_rfc3339(), "done": False}
                    if chat:
                        line["message"] = {"role": "assistant", "content": piece if kind == "text" else ""}
                        if kind == "thinking":
                            line["message"]["thinking"] = piece
                    else:
                        line["response"] = piece if kind == "text" else ""
                        if kind == "thinking":
                            line["thinking"] = piece
                    send(line)
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception as e:  # noqa: BLE001 - Ollama reports a failure mid-stream as an error line
                send({"error": "ollama-fixture: upstream %s: %s" % (self.cfg.args.upstream, e)})
                self.wfile.write(b"0\r\n\r\n")
                return
            last = final if isinstance(final, dict) else final()
            last = dict(last, created_at=now_rfc3339())
            if chat:
                last.setdefault("message", {"role": "assistant", "content": ""})
            else:
                last.setdefault("response", "")
            send(last)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.cfg.lock:
                self.cfg.aborted += 1
            self.close_connection = True

    # ---- text sources --------------------------------------------------------------
    @property
    def model_name(self):
        return self.cfg.models[0].split(":")[0]

    def echo_stream(self, prompt, num_predict, fmt, counts):
        """The prompt's words, cycled, one word per "token", at most num_predict of them
        and at most --echo-cycles (default 4) times the prompt's words; "format": "json"
        wraps them in an object."""
        words = prompt.split() or ["..."]
        cycles = self.cfg.args.echo_cycles
        out = [words[i % len(words)] for i in range(min(num_predict, max(len(words), 1) * cycles))]
        # A prompt of N words answers 4N words at most, so done_reason is "stop" when the
        # answer ends before num_predict and "length" when num_predict cut it, as in Ollama.
        counts["reason"] = "length" if len(out) >= num_predict else "stop"
        delay = self.cfg.args.piece_delay_ms / 1000.0
        if fmt == "json":
            counts["eval"] += len(out)
            yield json.dumps({"echo": " ".join(out)})
            return
        for i, w in enumerate(out):
            if delay and i and STOP.wait(delay):
                return
            counts["eval"] += 1
            yield (" " if i else "") + w

    def upstream_stream(self, prompt, num_predict, options, messages, system, fmt, counts):
        """The answer of the OpenAI-compatible upstream, relayed piece by piece from its own
        stream; closing our side stops the upstream's generation too."""
        a = self.cfg.args
        url = a.upstream
        payload = {"model": a.upstream_model, "max_tokens": num_predict, "stream": True}
        if messages is not None or fmt == "json":
            url = url.rsplit("/v1/", 1)[0] + "/v1/chat/completions"
            chat = list(messages) if messages is not None else (
                ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}])
            payload["messages"] = [{"role": m.get("role"), "content": m.get("content") or ""} for m in chat]
            if fmt == "json":
                payload["response_format"] = {"type": "json_object"}
        else:
            payload["prompt"] = (system + "\n\n" + prompt) if system else prompt
        for k in ("temperature", "top_p", "top_k", "seed", "stop"):
            if k in options:
                payload[k] = options[k]
        req = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            response = urllib.request.urlopen(req, timeout=a.upstream_timeout)
        except urllib.error.HTTPError as e:
            raise RuntimeError("HTTP %d %s" % (e.code, e.read(300).decode("utf-8", "replace")))
        with response:
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                usage = chunk.get("usage") or {}
                if usage.get("prompt_tokens"):
                    counts["prompt"] = int(usage["prompt_tokens"])
                choices = chunk.get("choices") or []
                if not choices:
                    continue
                choice = choices[0]
                text = choice.get("text")
                if text is None:
                    text = (choice.get("delta") or {}).get("content") or ""
                if choice.get("finish_reason"):
                    counts["reason"] = "length" if choice["finish_reason"] == "length" else "stop"
                if text:
                    counts["eval"] += 1
                    yield text


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
    ap.add_argument("--load-ms", type=int, default=0, help="loading a model takes this long")
    ap.add_argument("--loaded", action="store_true", help="every model starts loaded (in /api/ps)")
    ap.add_argument("--thinking-model", action="append", help="a model that can think (repeatable)")
    ap.add_argument("--think-words", type=int, default=6, help="words a thinking model thinks (count against num_predict)")
    ap.add_argument("--echo-cycles", type=int, default=4,
                    help="echo mode: the answer repeats the prompt's words at most this many times")
    ap.add_argument("--piece-delay-ms", type=int, default=0, help="echo mode: pause between streamed pieces")
    ap.add_argument("--api-key", help="require Authorization: Bearer KEY on every request but GET /")
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
