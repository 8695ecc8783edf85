#!/usr/bin/env python3
"""Latency of the automatic downgrade (issue 5): from a default route's removal to the
daemon's downgrade decision, minus the grace, over BENCH_PATH_TRIALS (default 50) trials,
with the daemon in a network namespace. Compared in the same report with detection by
heartbeat failures as EdgeCoder's agents do it (3 failed heartbeats at a 15 s cadence).
Needs root (ip netns). Figures, not assertions."""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/release/edgecoder-worker")
trials = int(os.environ.get("BENCH_PATH_TRIALS", "50"))
grace_ms = int(os.environ.get("BENCH_PATH_GRACE_MS", "200"))
if os.geteuid() != 0:
    print("== path-loss detection: skipped (needs root for ip netns)")
    sys.exit(0)

ns, host_if = f"ecwb{os.getpid()}", f"ecwbh{os.getpid()}"
work = tempfile.mkdtemp(prefix="ecw-pathbench-")
os.chmod(work, 0o755)
run = lambda *a: subprocess.run(list(a), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
in_ns = lambda *a: run("ip", "netns", "exec", ns, *a)
daemon = None

def cli(*args):
    out = subprocess.run([binary, *args, "--runtime-dir", f"{work}/run"], capture_output=True, text=True)
    return out.stdout

def wait_for(predicate, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False

try:
    run("ip", "netns", "add", ns)
    run("ip", "link", "add", host_if, "type", "veth", "peer", "name", "veth0", "netns", ns)
    run("ip", "link", "set", host_if, "up")
    in_ns("ip", "link", "set", "lo", "up")
    in_ns("ip", "link", "set", "veth0", "up")
    in_ns("ip", "addr", "add", "198.51.100.2/24", "dev", "veth0")
    in_ns("ip", "route", "add", "default", "via", "198.51.100.1", "dev", "veth0")
    with open(f"{work}/config.json", "w") as f:
        json.dump({"network": {"pathLossGraceMs": grace_ms}}, f)
    daemon = subprocess.Popen(["ip", "netns", "exec", ns, binary, "run", "--config", f"{work}/config.json",
                               "--state-dir", f"{work}/state", "--runtime-dir", f"{work}/run"],
                              stderr=subprocess.DEVNULL)
    wait_for(lambda: '"satisfied":true' in cli("status", "--json"))
    latencies = []
    for _ in range(trials):
        cli("mode", "on")
        wait_for(lambda: '"satisfied":true' in cli("status", "--json"))
        seen = len([e for e in json.loads(cli("events", "--json"))["events"] if e["kind"] == "downgrade"])
        t0 = time.time()
        in_ns("ip", "route", "del", "default")
        def downgraded():
            events = [e for e in json.loads(cli("events", "--json"))["events"] if e["kind"] == "downgrade"]
            return events if len(events) > seen else None
        if not wait_for(lambda: downgraded() is not None):
            print("   a trial saw no downgrade"); continue
        decided = downgraded()[-1]["timeMs"]
        latencies.append(decided - t0 * 1000 - grace_ms)
        in_ns("ip", "route", "add", "default", "via", "198.51.100.1", "dev", "veth0")
    heartbeat_s = 3 * 15
    print(f"== path-loss detection over {len(latencies)} trials (grace {grace_ms} ms subtracted; event times have 1 ms resolution)")
    print(f"   rtnetlink, this daemon:    median {statistics.median(latencies):6.1f} ms, worst {max(latencies):6.1f} ms   (goal < 50 ms)")
    print(f"   3 failed heartbeats @ 15 s: about {heartbeat_s * 1000} ms (EdgeCoder's agents)")
    print(f"   ratio heartbeat / rtnetlink (median): {heartbeat_s * 1000 / max(statistics.median(latencies), 1):.0f}x")
finally:
    if daemon:
        daemon.terminate(); daemon.wait()
    subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "link", "del", host_if], stderr=subprocess.DEVNULL)
    shutil.rmtree(work, ignore_errors=True)
