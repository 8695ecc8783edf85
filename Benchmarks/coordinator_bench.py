#!/usr/bin/env python3
"""Mode `on` figures (issue 4), each beside a baseline measured in the same run:
  * per-subtask overhead of the worker over BENCH_SUBTASKS (default 200) subtasks: from the
    coordinator handing a subtask out to receiving its result, minus the model's time
    (the backend is the Ollama-API fixture answering at once, so the model costs ~0), against
    a minimal Python client doing the same pull + result calls with no journal and no model;
  * idle resident memory and CPU over BENCH_IDLE_SECONDS (default 60) in mode `on`, with
    heartbeats every 15 s, against mode `off` in the same run.
Figures, not assertions."""
import json, os, shutil, signal, statistics, subprocess, sys, tempfile, time
from bench_http import http, start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/release/edgecoder-worker")
count = int(os.environ.get("BENCH_SUBTASKS", "200"))
idle_seconds = float(os.environ.get("BENCH_IDLE_SECONDS", "60"))


work = tempfile.mkdtemp(prefix="ecw-cbench-")
procs = []
try:
    # No behavioural monitoring: a model that answers at once makes every result "suspiciously
    # fast" (BHV001) and the baseline's identical ones "duplicate forgery" (BHV003), and both
    # clients would be banned mid-run; conduct is the coordinator suite's to test.
    coordinator, curl = start([sys.executable, f"{ROOT}/IntegrationTests/coordinator/dev_coordinator.py", "--port", "0", "--no-mesh-token", "--no-monitoring"])
    procs.append(coordinator)
    fixture, furl = start([sys.executable, f"{ROOT}/IntegrationTests/model-server/ollama_fixture.py", "--port", "0", "--model", "tiny", "--quiet"])
    procs.append(fixture)

    # Baseline: the same two calls per subtask from a minimal client.
    http("POST", curl + "/register", {"agentId": "baseline", "os": "linux", "version": "0", "mode": "swarm-only"})
    http("POST", curl + "/_dev/subtasks", [{"input": f"b{i}"} for i in range(count)])
    t0 = time.perf_counter()
    for _ in range(count):
        subtask = http("POST", curl + "/pull", {"agentId": "baseline"})["subtask"]
        http("POST", curl + "/result", {"subtaskId": subtask["id"], "taskId": subtask["taskId"], "agentId": "baseline", "ok": True, "output": "x", "durationMs": 0})
    baseline_ms = (time.perf_counter() - t0) * 1000 / count
    http("POST", curl + "/_dev/reset")

    cli = lambda *a: subprocess.run([binary, *a, "--runtime-dir", f"{work}/run"], capture_output=True, text=True)

    def start_daemon(coordinator):
        config = {"coordinator": {"url": curl, **coordinator}, "backend": {"kind": "ollama", "url": furl, "model": "tiny", "maxTokens": 8},
                  "execution": {"mode": "text"}}  # the model's answer, never a program in a container
        with open(f"{work}/config.json", "w") as f:
            json.dump(config, f)
        daemon = subprocess.Popen([binary, "run", "--config", f"{work}/config.json", "--state-dir", f"{work}/state", "--runtime-dir", f"{work}/run"],
                                  stderr=subprocess.DEVNULL)
        procs.append(daemon)
        while cli("status").returncode != 0:
            time.sleep(0.05)
        return daemon

    def sample(daemon, seconds):
        """RSS and anonymous memory (MiB) at the end, CPU (%) and wake-ups (voluntary
        context switches of every thread, per minute) over `seconds`."""
        ticks = os.sysconf("SC_CLK_TCK")
        def cpu():
            with open(f"/proc/{daemon.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        def status(key):
            with open(f"/proc/{daemon.pid}/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))
        def wakeups():
            total = 0
            for task in os.listdir(f"/proc/{daemon.pid}/task"):
                try:
                    with open(f"/proc/{daemon.pid}/task/{task}/status") as f:
                        total += next(int(l.split()[1]) for l in f if l.startswith("voluntary_ctxt_switches:"))
                except (OSError, StopIteration):
                    pass
            return total
        c0, w0, t = cpu(), wakeups(), time.perf_counter()
        time.sleep(seconds)
        elapsed = time.perf_counter() - t
        return (status("VmRSS") / 1024, status("RssAnon") / 1024, (cpu() - c0) / ticks / elapsed * 100,
                (wakeups() - w0) / elapsed * 60)

    # Idle with the defaults (heartbeats every 15 s, pulls every 5 s, nothing queued): off
    # first (the comparison), then on.
    daemon = start_daemon({})
    off = sample(daemon, idle_seconds / 2)
    cli("mode", "on")
    time.sleep(1)
    on = sample(daemon, idle_seconds)
    beats = http("GET", curl + "/_dev/state")["heartbeatCount"]
    cli("mode", "off")
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    procs.remove(daemon)

    # The subtasks: pulls every 500 ms so that the queue, not the interval, sets the pace.
    daemon = start_daemon({"pullIntervalMs": 500})
    cli("mode", "on")
    ids = http("POST", curl + "/_dev/subtasks", [{"input": f"s{i}"} for i in range(count)])["ids"]
    t0 = time.perf_counter()
    while http("GET", curl + "/_dev/results")["total"] < count:
        time.sleep(0.05)
    wall_ms = (time.perf_counter() - t0) * 1000
    results = http("GET", curl + "/_dev/results")["results"]
    model_ms = statistics.mean(r["durationMs"] for r in results)
    per_subtask = wall_ms / count
    overhead = per_subtask - model_ms
    print(f"== mode on: {count} subtasks, backend answering at once (release build)")
    print(f"   worker, handed out -> result received: {per_subtask:7.2f} ms per subtask, of which model {model_ms:.2f} ms")
    print(f"   worker overhead (journal, outbox, fsyncs, HTTP): {overhead:7.2f} ms per subtask")
    print(f"   baseline: bare pull + result from Python, no disk: {baseline_ms:7.2f} ms per subtask")
    print(f"   ratio worker overhead / baseline: {overhead / baseline_ms:.2f}x")
    print(f"== idle in mode on, heartbeats every 15 s and pulls every 5 s ({beats} heartbeats in {idle_seconds:.0f} s), against off in the same run")
    for name, (rss, anon, cpu_pct, wakes) in (("mode on: ", on), ("mode off:", off)):
        print(f"   {name} RSS {rss:6.2f} MiB (anonymous {anon:5.2f}), CPU {cpu_pct:6.3f} %, {wakes:5.0f} wake-ups a minute")
    print("   (goal for mode on: CPU <= 0.05 %, RSS <= 14 MiB; RSS counts the binary's text and libcurl's libraries as the kernel maps them)")
finally:
    for p in procs:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)
