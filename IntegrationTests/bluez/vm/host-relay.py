#!/usr/bin/python3
"""Relay one guest TCP connection to the host's 127.0.0.1:PORT (run-in-vm.sh --host-port).

    host-relay.py PORT

qemu's user network (slirp) with `guestfwd=tcp:ADDR:PORT-cmd:host-relay.py PORT` spawns
this program on the HOST for each connection a guest opens to ADDR:PORT, with the
connection as stdin, stdout and stderr (one socket). It connects to 127.0.0.1:PORT and copies
bytes both ways until both sides have closed. Standard library only; the host needs
no socat or netcat.
"""
import os
import selectors
import socket
import sys


def main():
    port = int(sys.argv[1])
    # slirp hands the connection over as stdin, stdout AND stderr: nothing may be printed,
    # or the guest reads it as the server's bytes. A host port that refuses connections
    # becomes, for the guest, a connection closed without a byte (slirp has accepted it
    # already).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    guest = socket.socket(fileno=os.dup(0))
    try:
        host = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return 1
    host.settimeout(None)
    sel = selectors.DefaultSelector()
    peers = {guest: host, host: guest}
    open_ = {guest, host}
    for s in open_:
        sel.register(s, selectors.EVENT_READ)
    while open_:
        for key, _ in sel.select():
            src = key.fileobj
            dst = peers[src]
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if data:
                try:
                    dst.sendall(data)
                    continue
                except OSError:
                    return 0
            # EOF from src: pass the half-close on, stop reading src
            sel.unregister(src)
            open_.discard(src)
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
