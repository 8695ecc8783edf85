#!/usr/bin/env python3
"""A TEST STAND-IN for a model that writes programs: the tiny llama.cpp test model writes
random words, and the code-subtask loop needs answers that are programs. It answers like
an OpenAI-compatible server (llama.cpp's, as the worker's `openai` backend speaks it):

  GET  /health            {"status": "ok"}
  GET  /v1/models         {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
  POST /v1/completions    {"model", "prompt", "max_tokens", "stream"} -> {"choices":
                          [{"text", "index": 0, "finish_reason": "stop"}], "usage"}; with
                          "stream": true, server-sent events of the same, then [DONE]

What it answers is scripted by the subtask's text, which the worker quotes in each prompt:
a line `program: <code>` is the program it writes, `first: <code>` the one it writes first
(the reflection, which quotes the failure, gets `program:`). The three prompts of the loop
are told apart by their words: a plan ("numbered list of steps"), a program ("Write a
complete"), a reflection ("failed"). With no such line it answers "no code here". Code lines
may use `\\n` for a newline. Every request is logged to --log as one JSON line (the prompt).

    coder_model.py [--port 0] [--model coder] [--delay-ms N] [--log FILE]

Prints "coder-model listening on http://127.0.0.1:PORT". Exits 0 on SIGTERM.
"""
import argparse
import json
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()


def scripted(prompt, key):
    match = re.search(r"^%s: (.*)$" % key, prompt, re.MULTILINE)
    return match.group(1).replace("\\n", "\n") if match else None


def answer(prompt):
    if "numbered list of steps" in prompt:
        return "1. Work it out.\n2. Print the answer."
    language = "javascript" if "javascript program" in prompt else "python"
    if "failed" in prompt and "What went wrong" in prompt:
        code = scripted(prompt, "program")
    else:
        code = scripted(prompt, "first") or scripted(prompt, "program")
    if code is None:
        return "no code here"
    return "Here it is:\n```%s\n%s\n```\n" % (language, code)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def send(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self.send(200, {"object": "list", "data": [{"id": ARGS.model, "object": "model", "owned_by": "test"}]})
        else:
            self.send(404, {"error": {"message": "not found", "code": 404}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.send(400, {"error": {"message": "not JSON", "code": 400}})
            return
        if self.path != "/v1/completions" or not isinstance(body.get("prompt"), str):
            self.send(404, {"error": {"message": "only /v1/completions with a prompt", "code": 404}})
            return
        prompt = body["prompt"]
        if ARGS.log:
            with LOCK, open(ARGS.log, "a") as f:
                f.write(json.dumps({"prompt": prompt}) + "\n")
        time.sleep(ARGS.delay_ms / 1000)
        text = answer(prompt)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split()), "total_tokens": 0}
        if not body.get("stream"):
            self.send(200, {"id": "cmpl-coder", "object": "text_completion", "created": int(time.time()), "model": ARGS.model,
                            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for piece, last in ((text, False), ("", True)):
            event = {"id": "cmpl-coder", "object": "text_completion", "model": ARGS.model,
                     "choices": [{"text": piece, "index": 0, "finish_reason": "stop" if last else None}]}
            if last:
                event["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="coder")
    parser.add_argument("--delay-ms", type=int, default=0)
    parser.add_argument("--log")
    ARGS = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print("coder-model listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
