#!/usr/bin/env python3
"""Start-up and idle figures for the edgecoder-worker daemon (issue 2).

Figures, not assertions. Each figure is reported next to a baseline measured in the
same run on the same machine:
  * exec -> READY=1 of `edgecoder-worker run`, against exec -> exit of `edgecoder-worker
    version` (the cost of loading the binary and the Swift runtime) and of /bin/true;
  * idle resident memory and CPU over BENCH_IDLE_SECONDS (default 60) in mode off.
"""
import contextlib
import os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/release/edgecoder-worker")
trials = int(os.environ.get("BENCH_TRIALS", "30"))
idle_seconds = float(os.environ.get("BENCH_IDLE_SECONDS", "60"))


def exec_to_exit(argv):
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def start_daemon(root):
    notify_path = os.path.join(root, "notify.sock")
    if os.path.exists(notify_path):
        os.unlink(notify_path)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(10)
    config = os.path.join(root, "config.json")
    with open(config, "w") as f:
        f.write("{}")
    env = dict(os.environ, NOTIFY_SOCKET=notify_path)
    start = time.perf_counter()
    proc = subprocess.Popen([binary, "run", "--config", config, "--state-dir", os.path.join(root, "state"),
                             "--runtime-dir", os.path.join(root, "run")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        message = notify.recv(4096).decode()
        if "READY=1" in message:
            ready_ms = (time.perf_counter() - start) * 1000
            break
    notify.close()
    return proc, ready_ms


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def median(values):
    return statistics.median(values)


root = tempfile.mkdtemp(prefix="ecw-bench-")
try:
    baseline_true = [exec_to_exit(["/bin/true"]) for _ in range(trials)]
    baseline_version = [exec_to_exit([binary, "version"]) for _ in range(trials)]
    ready = []
    for i in range(trials):
        trial_root = os.path.join(root, f"t{i}")
        os.makedirs(trial_root)
        proc, ms = start_daemon(trial_root)
        ready.append(ms)
        stop(proc)

    print(f"== exec -> READY=1 over {trials} runs (release build)")
    print(f"   edgecoder-worker run:      median {median(ready):7.2f} ms, worst {max(ready):7.2f} ms   (goal < 50 ms)")
    print(f"   baseline `version` exit:   median {median(baseline_version):7.2f} ms")
    print(f"   baseline /bin/true exit:   median {median(baseline_true):7.2f} ms")
    print(f"   ratio READY / version:     {median(ready) / median(baseline_version):.2f}x")

    idle_root = os.path.join(root, "idle")
    os.makedirs(idle_root)
    proc, _ = start_daemon(idle_root)
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")

    def cpu_ticks():
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    def rss_kib():
        with open(f"/proc/{proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def wakeups():
        # Voluntary context switches of every thread: each is the daemon going to sleep
        # after something woke it (a timer, a socket, a read).
        total = 0
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/task/{tid}/status") as f:
                total += sum(int(l.split()[1]) for l in f if l.startswith("voluntary_ctxt_switches:"))
        return total

    time.sleep(1)
    t0, c0, w0 = time.perf_counter(), cpu_ticks(), wakeups()
    peak = rss_kib()
    while time.perf_counter() - t0 < idle_seconds:
        time.sleep(min(5, idle_seconds))
        peak = max(peak, rss_kib())
    elapsed, c1, w1 = time.perf_counter() - t0, cpu_ticks(), wakeups()
    cpu_pct = (c1 - c0) / ticks_per_second / elapsed * 100
    rss = rss_kib()
    stop(proc)
    # Baseline: the idle RSS of a process that only sleeps (python's own is not
    # comparable), the smallest thing that can hold a control socket open: `sleep`.
    sleeper = subprocess.Popen(["sleep", "5"])
    time.sleep(0.3)
    with open(f"/proc/{sleeper.pid}/status") as f:
        sleep_rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    sleeper.kill(); sleeper.wait()
    print(f"== idle in mode off for {elapsed:.0f} s")
    print(f"   resident memory:           {rss / 1024:6.2f} MiB (peak {peak / 1024:.2f} MiB)   (goal < 12 MiB)")
    print(f"   baseline `sleep` RSS:      {sleep_rss / 1024:6.2f} MiB   ratio {rss / sleep_rss:.1f}x")
    print(f"   CPU:                       {cpu_pct:6.3f} %   ({c1 - c0} ticks of 1/{ticks_per_second} s)   (goal <= 0.01 %)")
    print(f"   wake-ups:                  {(w1 - w0) / elapsed * 60:6.1f} per minute   (goal: none of the daemon's own; about 60 are libdispatch's 1 s thread-pool monitor)")
finally:
    shutil.rmtree(root, ignore_errors=True)
