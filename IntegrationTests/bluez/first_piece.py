#!/usr/bin/env python3
"""Time to the first streamed piece of text and to the whole answer, for one HTTP request.

    first_piece.py URL PATH JSON-BODY [STAMPS-FILE]

Prints "FIRST-MS WHOLE-MS", both counted from the moment the request was handed to the
socket (after the connection is open): the client's own start-up (a process exec under
TCG costs hundreds of ms) is not part of what is measured, on either side of a comparison.
The first piece is the first NDJSON `"response":"x` / `"content":"x` or server-sent event
`"text":"x` / `"content":"x` with text in it. With STAMPS-FILE, appends wall-clock stamps
(seconds, as bash's EPOCHREALTIME) of the send and of the first piece, to line up with
the worker's and the proxy's logs.
"""
import re
import socket
import sys
import time
from urllib.parse import urlsplit

TEXT = re.compile(rb'"(response|text|content)": ?"(?!")')


def main():
    url, path, body = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    stamps = sys.argv[4] if len(sys.argv) > 4 else None
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=600)
    request = (f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    sent_wall = time.time()
    start = time.monotonic()
    sock.sendall(request)
    seen = b""
    first = None
    while True:
        data = sock.recv(65536)
        if not data:
            break
        if first is None:
            seen += data
            if TEXT.search(seen):
                first = time.monotonic()
                first_wall = time.time()
    whole = time.monotonic()
    if stamps:
        with open(stamps, "a") as out:
            out.write(f"{sent_wall:.6f} client sent {path}\n")
            if first is not None:
                out.write(f"{first_wall:.6f} client first piece {path}\n")
    first_ms = 0 if first is None else round((first - start) * 1000)
    print(first_ms, round((whole - start) * 1000))


if __name__ == "__main__":
    main()
