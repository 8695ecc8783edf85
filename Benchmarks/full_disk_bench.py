#!/usr/bin/env python3
"""Pulls per second while the state directory is full (issue 12; goal: at most one pull per
backoff step), beside the same daemon's idle pull rate with space in the same run.

The state directory is a 128 KiB tmpfs in a mount namespace of the daemon's own (needs
root, unshare and nsenter); it is filled once the worker is registered, with subtasks
queued at the coordinator so that every pull would get work. BENCH_FULL_SECONDS (default
30) is the measuring window. Figures, not assertions."""
import json, os, shutil, signal, subprocess, sys, tempfile, time
from bench_http import http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/release/edgecoder-worker")
seconds = float(os.environ.get("BENCH_FULL_SECONDS", "30"))

if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
    print("== pulls per second with a full state directory: skipped (needs root, unshare and nsenter)")
    sys.exit(0)


work = tempfile.mkdtemp(prefix="ecw-fullbench-")
procs = []
try:
    coordinator = subprocess.Popen([sys.executable, f"{ROOT}/IntegrationTests/coordinator/dev_coordinator.py", "--port", "0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(coordinator)
    curl = coordinator.stdout.readline().strip().split(" ")[-1]
    fixture = subprocess.Popen([sys.executable, f"{ROOT}/IntegrationTests/model-server/ollama_fixture.py", "--port", "0", "--model", "tiny", "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(fixture)
    furl = fixture.stdout.readline().strip().split(" ")[-1]

    config = {"coordinator": {"url": curl, "pullIntervalMs": 500, "heartbeatIntervalMs": 1000},
              "backend": {"kind": "ollama", "url": furl, "model": "tiny", "maxTokens": 8},
              "execution": {"mode": "text"}}
    with open(f"{work}/config.json", "w") as f:
        json.dump(config, f)
    state = f"{work}/state"
    os.makedirs(state)
    # A quiet fake host on mains: the real host's load must not hold work (cpu-busy).
    for path, text in (("sys/class/power_supply/AC/type", "Mains"), ("sys/class/power_supply/AC/online", "1"),
                       ("proc/stat", "cpu  100 0 100 10000 0 0 0 0 0 0"), ("proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 6000000 kB")):
        os.makedirs(os.path.dirname(f"{work}/sysroot/{path}"), exist_ok=True)
        with open(f"{work}/sysroot/{path}", "w") as f:
            f.write(text + "\n")
    daemon = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               'mount -t tmpfs -o size=131072,mode=0750 ecw-state "$0" && exec "$@"', state,
                               binary, "run", "--config", f"{work}/config.json", "--state-dir", state, "--runtime-dir", f"{work}/run",
                               "--sysfs-root", f"{work}/sysroot"],
                              stderr=subprocess.DEVNULL)
    procs.append(daemon)
    cli = lambda *a: subprocess.run([binary, *a, "--runtime-dir", f"{work}/run"], capture_output=True, text=True)
    while cli("status").returncode != 0:
        time.sleep(0.05)
    cli("mode", "on")
    while not json.loads(cli("status", "--json").stdout)["coordinator"].get("registered"):
        time.sleep(0.05)

    def pull_rate(window):
        before, t0 = http("GET", curl + "/_dev/state")["pulls"], time.perf_counter()
        failures0 = json.loads(cli("status", "--json").stdout)["coordinator"]["consecutiveFailures"]
        time.sleep(window)
        pulls, elapsed = http("GET", curl + "/_dev/state")["pulls"] - before, time.perf_counter() - t0
        failures = json.loads(cli("status", "--json").stdout)["coordinator"]["consecutiveFailures"]
        return pulls, elapsed, failures - failures0

    idle_pulls, idle_s, _ = pull_rate(min(10.0, seconds))
    subprocess.run(["nsenter", "-t", str(daemon.pid), "-m", "sh", "-c", f"dd if=/dev/zero of={state}/filler bs=4096 2>/dev/null"])
    http("POST", curl + "/_dev/subtasks", [{"input": f"s{i}"} for i in range(50)])
    full_pulls, full_s, steps = pull_rate(seconds)
    final = json.loads(cli("status", "--json").stdout)
    held = final["power"]["held"].get("state-unwritable")
    if any(v for k, v in final["power"]["held"].items() if k != "state-unwritable"):
        print(f"   (the power policy held work too: {final['power']['held']})")
    print(f"== pulls per second with the state directory full (128 KiB tmpfs, 50 subtasks queued; {os.path.basename(binary)} {binary})")
    print(f"   full:  {full_pulls} pulls in {full_s:.1f} s = {full_pulls / full_s:.3f} per second, over {steps} backoff steps "
          f"({full_pulls / max(steps, 1):.2f} pulls per step; goal <= 1); held pulls counted: {held}")
    print(f"   space: {idle_pulls} pulls in {idle_s:.1f} s = {idle_pulls / idle_s:.3f} per second (pullIntervalMs 500, nothing queued)")
finally:
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)
