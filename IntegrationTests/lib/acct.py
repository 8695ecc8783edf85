#!/usr/bin/env python3
"""Experiment: kernel process accounting (acct v3) in a guest. on FILE | off | report FILE"""
import ctypes, struct, sys, collections
def comp(v):
    return (v & 0x1fff) << (3 * (v >> 13))
if sys.argv[1] == "on":
    open(sys.argv[2], "wb").close()
    r = ctypes.CDLL(None, use_errno=True).acct(sys.argv[2].encode())
    print("acct on", r, ctypes.get_errno())
elif sys.argv[1] == "off":
    ctypes.CDLL(None).acct(None)
else:
    data = open(sys.argv[2], "rb").read()
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i in range(0, len(data) - 63, 64):
        rec = data[i:i + 64]
        flag, ver = rec[0], rec[1]
        if ver != 3:
            continue
        etime, = struct.unpack_from("<f", rec, 28)
        ut, st = struct.unpack_from("<HH", rec, 32)
        comm = rec[48:64].split(b"\0")[0].decode(errors="replace")
        e = by[comm]; e[0] += 1; e[1] += (comp(ut) + comp(st)) / 100.0; e[2] += etime / 100.0
    tot = sum(v[1] for v in by.values())
    print(f"total CPU of exited processes {tot:.1f} s")
    for comm, (n, cpu, et) in sorted(by.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{cpu:8.1f} s  {n:5d}x  {comm}")
