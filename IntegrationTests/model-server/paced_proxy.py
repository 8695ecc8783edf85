#!/usr/bin/env python3
"""A TEST STAND-IN for a model server that answers at a laptop's pace.

The test bed's model is a tiny random-weight GGUF that llama.cpp runs in a few
milliseconds; a real model on a laptop takes a second or more. EdgeCoder's coordinator
bans an agent whose results come back in under 500 ms three times (its behaviour
monitor, BHV001), so tests of mode `on` against a monitoring coordinator need answers
that take a real model's time. This proxy forwards every request to the real server
unchanged and delays each generation (a POST) by --delay-ms before forwarding it; GETs
(the readiness probe) pass at once. The answer, streamed or not, is relayed as it comes,
its body delimited by closing the connection.

    paced_proxy.py --port 0 --upstream http://127.0.0.1:PORT --delay-ms 1200

With --tokens-per-second N it also generates at that pace (a laptop's 30 tokens/s where
the tiny model writes thousands): a streamed answer's events (server-sent `data:` lines,
NDJSON lines) are relayed no sooner than the k-th at k/N s after the request; a whole
answer is held until its token count (`usage.completion_tokens`, Ollama's `eval_count`)
divided by N. Used by `make bench`'s first-piece figures (IntegrationTests/bluez/proxy-phase.sh).

The first stdout line is "listening on http://127.0.0.1:PORT". Python standard library only.
"""
import argparse
import http.client
import http.server
import json
import sys
import time
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade", "te", "trailer"}


def answer_tokens(body):
    """The token count a whole answer reports; 0 when it says none."""
    try:
        answer = json.loads(body)
    except ValueError:
        return 0
    if not isinstance(answer, dict):
        return 0
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    count = usage.get("completion_tokens", answer.get("eval_count", 0))
    return count if isinstance(count, int) and count > 0 else 0


def handler(upstream, delay_ms, tokens_per_second=0.0):
    target = urllib.parse.urlsplit(upstream)

    class Pace(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request a connection: the body ends at the close

        def log_message(self, *args):
            pass

        def relay(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length > 0 else None
            if self.command == "POST":
                time.sleep(delay_ms / 1000)
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=600)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "host"}
            headers["Host"] = target.netloc
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
            except OSError as error:
                self.send_error(502, f"upstream: {error}")
                return
            self.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Connection", "close")
            self.end_headers()
            started = time.monotonic()
            kind = (answer.getheader("content-type") or "").lower()
            paced = tokens_per_second > 0 and self.command == "POST"
            try:
                if paced and ("event-stream" in kind or "ndjson" in kind):
                    # One event a token: the k-th leaves k/N s after the start.
                    events = 0
                    while True:
                        line = answer.readline()
                        if not line:
                            break
                        if line.strip() and line.strip() != b"data: [DONE]":
                            events += 1
                            wait = started + events / tokens_per_second - time.monotonic()
                            if wait > 0:
                                time.sleep(wait)
                        self.wfile.write(line)
                        self.wfile.flush()
                elif paced:
                    body = answer.read()
                    wait = started + answer_tokens(body) / tokens_per_second - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    self.wfile.write(body)
                    self.wfile.flush()
                while True:
                    piece = answer.read1(65536)
                    if not piece:
                        break
                    self.wfile.write(piece)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away: so does the upstream request
            finally:
                conn.close()

        do_GET = do_POST = do_HEAD = relay

    return Pace


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="the real server's base URL, http://HOST:PORT")
    ap.add_argument("--delay-ms", type=int, default=1200)
    ap.add_argument("--tokens-per-second", type=float, default=0.0, help="generate at this pace (0: as fast as the upstream)")
    args = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.upstream, args.delay_ms, args.tokens_per_second))
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
