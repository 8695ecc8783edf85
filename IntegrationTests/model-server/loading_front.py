#!/usr/bin/env python3
"""A TEST FIXTURE in front of the llama.cpp test server that plays llama.cpp's own server
(llama-server) while it loads its model: llama-cpp-python, our test bed, loads before it
listens and has no /health, so this stands in for that phase.

What llama-server does, from its README ("GET /health: 503 while the model is loading,
{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}; 200
{"status": "ok"} once ready") and its source (every other API path answers that same 503
while loading):

  for --loading-ms N after start: GET /health and every other path -> 503, the body above
  afterwards: GET /health -> 200 {"status": "ok"}; everything else is forwarded to
              --upstream (the real llama.cpp test server), headers and body as they come

Prints "loading-front listening on http://127.0.0.1:PORT" once it accepts connections.
Exits 0 on SIGTERM.
"""

import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STOP = threading.Event()
LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


class Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def send(self, status, body, ctype="application/json; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else None
        path = self.path.split("?", 1)[0]
        if time.monotonic() < self.server.ready_at:
            self.send(503, json.dumps(LOADING).encode())
            return
        if path == "/health":
            self.send(200, b'{"status":"ok"}')
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
        req = urllib.request.Request(self.server.upstream + self.path, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                self.send(r.status, r.read(), r.headers.get("Content-Type", "application/json"))
        except urllib.error.HTTPError as e:
            self.send(e.code, e.read(), e.headers.get("Content-Type", "application/json"))

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")


def main():
    ap = argparse.ArgumentParser(description="llama-server's loading phase in front of a llama.cpp test server")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="the llama.cpp server's root URL")
    ap.add_argument("--loading-ms", type=int, default=2000)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.upstream = args.upstream.rstrip("/")
    server.ready_at = time.monotonic() + args.loading_ms / 1000.0
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    signal.signal(signal.SIGINT, lambda *_: STOP.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    print("loading-front listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    while not STOP.wait(0.5):
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
