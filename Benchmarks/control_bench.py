#!/usr/bin/env python3
"""Root's `status` on the control socket while non-members hold every place they can
(issue 12 §3), against the same daemon idle, in the same run.

Figures, not assertions. Non-members (uids 40000-40008, in no group, made with
os.setuid in child processes) open hundreds of connections and hold them; one of them
keeps reconnecting as fast as it can. Root's round trips are measured over a raw
connection (`{"cmd":"status"}`, BENCH_CONTROL_TRIPS, default 300) and as whole
`edgecoder-worker status` commands (BENCH_CONTROL_EXECS, default 20).
Needs root (setuid); without it only the idle figures are printed.
"""
import os, signal, socket, statistics, subprocess, sys, tempfile, time

binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/release/edgecoder-worker")
trips = int(os.environ.get("BENCH_CONTROL_TRIPS", "300"))
execs = int(os.environ.get("BENCH_CONTROL_EXECS", "20"))


def start_daemon(root):
    notify_path = os.path.join(root, "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(20)
    config = os.path.join(root, "config.json")
    with open(config, "w") as f:
        f.write("{}")
    os.chmod(root, 0o755)
    proc = subprocess.Popen([binary, "run", "--config", config, "--state-dir", os.path.join(root, "state"),
                             "--runtime-dir", os.path.join(root, "run")], env=dict(os.environ, NOTIFY_SOCKET=notify_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while "READY=1" not in notify.recv(4096).decode():
        pass
    notify.close()
    return proc, os.path.join(root, "run", "control.sock")


def round_trips(path, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(b'{"cmd":"status"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        if b'"ok":true' not in data:
            raise SystemExit(f"status failed: {data[:200]!r}")
        times.append((time.perf_counter() - start) * 1000)
    return times


def cli_runs(path, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        subprocess.run([binary, "status", "--runtime-dir", os.path.dirname(path)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def hold(path, uid, count, reconnect):
    """A child that becomes `uid` and holds `count` connections (reconnecting in a loop if asked)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        held = []
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(path)
                held.append(s)
            except OSError:
                s.close()
        while True:
            if reconnect:
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(path)
                    held.append(s)
                except OSError:
                    s.close()
                if len(held) > 900:
                    for old in held[:400]:
                        old.close()
                    del held[:400]
            else:
                time.sleep(1)
    finally:
        os._exit(0)


def line(name, values):
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"   {name:<44} median {statistics.median(values):7.2f} ms, p99 {p99:7.2f} ms, max {values[-1]:7.2f} ms ({len(values)} runs)"


root = tempfile.mkdtemp(prefix="ecw-control-bench-")
proc = None
children = []
try:
    proc, path = start_daemon(root)
    idle = round_trips(path, trips)
    idle_cli = cli_runs(path, execs)
    print("== control socket: root's `status` while non-members hold every place they can (issue 12 §3)")
    print(f"   command: python3 Benchmarks/control_bench.py {binary}")
    print(line("idle, raw round trip:", idle))
    print(line("idle, `edgecoder-worker status`:", idle_cli))
    if os.getuid() != 0:
        print("   (not root: cannot switch to non-member users; the figures under load are skipped)")
    else:
        # Nine users of eight places each fill the 64 shared places; the first also reconnects without pause.
        children = [hold(path, 40000 + i, 40, reconnect=(i == 0)) for i in range(9)]
        time.sleep(1.5)
        # Holders' connections close after the 5 s idle time and are taken again: re-fill while measuring.
        loaded = round_trips(path, trips)
        loaded_cli = cli_runs(path, execs)
        print(line("shared places full + a reconnect flood, raw:", loaded))
        print(line("shared places full + a reconnect flood, CLI:", loaded_cli))
finally:
    for child in children:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    if proc:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    subprocess.run(["rm", "-rf", root])
