#!/usr/bin/env python3
"""Mode `on` end to end (issue 4): the real daemon binary against the development
coordinator (IntegrationTests/coordinator) and a real model server (llama.cpp's OpenAI-compatible
server with a tiny random model, IntegrationTests/model-server), all on loopback.

Each check prints `ok - ...` or `not ok - ...`; the exit status is 0 only if all pass.
The dev coordinator runs EdgeCoder's behavioural monitoring (BHV rules, permanent bans; see
IntegrationTests/coordinator/WIRE.md): every coordinator, when it stops, prints its rule hits and
checks that the worker was neither banned nor struck.
Usage: coordinator_suite.py BINARY [--only NAME[,NAME…]] [--except NAME[,NAME…]] [--jobs N]
--jobs N runs N scenarios at a time, each in a process of its own (its own coordinator,
workers and model server, as in a serial run), and prints each one's lines whole when it
ends. own-load measures the host's CPU: run it alone (--only own-load), never beside others.
"""
import contextlib, json, os, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BINARY = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".build/debug/edgecoder-worker"))


def names_after(flag):
    return set(sys.argv[sys.argv.index(flag) + 1].split(",")) if flag in sys.argv else None


ONLY = names_after("--only")
EXCEPT = names_after("--except") or set()
JOBS = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 1

failures = 0
passes = 0
# Scenarios that could not run here: a run with nothing else exits 77 (skipped, not passed).
skips = 0


def check(condition, what, detail=""):
    global failures, passes
    if condition:
        passes += 1
        print(f"ok - {what}", flush=True)
    else:
        failures += 1
        print(f"not ok - {what}" + (f": {detail}" if detail else ""), flush=True)
    return condition


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(predicate, timeout=15, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:
            pass
        time.sleep(interval)
    return None


def http(method, url, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read() or b"null")


class Coordinator:
    def __init__(self, *args):
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "IntegrationTests/coordinator/dev_coordinator.py"), "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        self.url = line.strip().split(" ")[-1]

    def dev(self, method, path, body=None):
        return http(method, self.url + path, body)

    def submit(self, *inputs, timeout_ms=30000):
        return self.dev("POST", "/_dev/subtasks", [{"input": text, "timeoutMs": timeout_ms} for text in inputs])["ids"]

    def switch(self, mode, **extra):
        return self.dev("POST", "/_dev/switch", {"mode": mode, **extra})

    def results(self):
        return self.dev("GET", "/_dev/results")

    def state(self):
        return self.dev("GET", "/_dev/state")

    def monitoring_verdict(self):
        """The dev coordinator runs EdgeCoder's behavioural monitoring (on by default): an
        honest worker must never be blacklisted by it, nor collect a strike. Printed and
        checked once per coordinator, when it stops."""
        try:
            state = self.state()
        except Exception as error:
            print(f"# monitoring: no /_dev/state ({error!r})", flush=True)
            return
        if not state.get("config", {}).get("monitoring"):
            return
        for hit in state.get("violations", []):
            print(f"# monitoring: {hit['agentId']} {hit['rule']} {hit['severity']} at {hit['at']}: {hit['description']}", flush=True)
        banned = state.get("blacklisted", {})
        for agent, ban in banned.items():
            print(f"# monitoring: {agent} BLACKLISTED at {ban['at']}: {ban['reason']}", flush=True)
        check(not banned, "behavioural monitoring (EdgeCoder's BHV rules) did not blacklist the worker",
              {a: b["rules"] for a, b in banned.items()})
        check(not state.get("violations"), "and recorded no rule hit (no strike)",
              sorted({(h["rule"], h["severity"]) for h in state.get("violations", [])}))

    def stop(self):
        if self.process.poll() is None:
            self.monitoring_verdict()
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class ModelServer:
    """llama.cpp's server from the cached test bed, plus optionally the Ollama fixture."""

    def __init__(self, env=None):
        prepared = subprocess.run(["bash", os.path.join(ROOT, "IntegrationTests/model-server/prepare.sh")], capture_output=True, text=True)
        if prepared.returncode != 0:
            raise RuntimeError("IntegrationTests/model-server/prepare.sh failed: " + prepared.stderr[-2000:])
        self.port = free_port()
        started = subprocess.run(["bash", os.path.join(ROOT, "IntegrationTests/model-server/start-llama.sh"), str(self.port)], capture_output=True, text=True,
                                 env={**os.environ, **(env or {})})
        if started.returncode != 0:
            raise RuntimeError("start-llama.sh failed: " + started.stderr[-2000:])
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "IntegrationTests/model-server/stop-llama.sh"), str(self.port)], capture_output=True)


class OllamaFixture:
    def __init__(self, upstream, *args, port=0):
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "IntegrationTests/model-server/ollama_fixture.py"), "--port", str(port),
                                         "--upstream", upstream + "/v1/completions", "--model", "tiny", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.process.stdout.readline().strip().split(" ")[-1]
        self.port = int(self.url.rsplit(":", 1)[-1])

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=5)


class PacedModel:
    """llama.cpp's server behind IntegrationTests/model-server/paced_proxy.py: every generation takes
    --delay-ms more, as a real model on a laptop does. The tiny test model answers in a few
    milliseconds, and three results under 500 ms get an agent banned by the coordinator's
    monitor (BHV001): scenarios that deliver several results use this."""
    def __init__(self, upstream, delay_ms=1200):
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "IntegrationTests/model-server/paced_proxy.py"), "--port", "0",
                                         "--upstream", upstream, "--delay-ms", str(delay_ms)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.process.stdout.readline().strip().split(" ")[-1]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=5)


class Worker:
    def __init__(self, coordinator_url, backend, extra=None, sysfs_root=None):
        self.dir = tempfile.mkdtemp(prefix="ecw-coord-")
        os.chmod(self.dir, 0o755)
        config = {"coordinator": {"url": coordinator_url, "heartbeatIntervalMs": 1000, "pullIntervalMs": 500,
                                  "requestTimeoutMs": 3000, "connectTimeoutMs": 1000, "stopGraceMs": 3000},
                  "backend": {**backend, "maxTokens": 16},
                  # The development coordinator gives every subtask a language, as EdgeCoder's
                  # does: under mode auto, on a host whose sandbox engine works and has the
                  # image, the model's text would run as a program. The code scenario sets
                  # its own mode.
                  "execution": {"mode": "text"}}
        for key, value in (extra or {}).items():
            config.setdefault(key, {}).update(value)
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(config, f)
        # A quiet fake host (on mains, a /proc/stat that never moves) unless the test
        # brings its own: the real host's load must not decide what the policy does.
        if sysfs_root is None:
            sysfs_root = os.path.join(self.dir, "sysroot")
            fake_laptop(sysfs_root, battery=100, on_mains=True)
        self.sysfs_root = sysfs_root
        self.process = None
        self.log = open(os.path.join(self.dir, "daemon.log"), "ab")

    def start(self, state_tmpfs_bytes=None, env=None):
        args = [BINARY, "run", "--config", f"{self.dir}/config.json", "--state-dir", f"{self.dir}/state", "--runtime-dir", f"{self.dir}/run"]
        args += ["--sysfs-root", self.sysfs_root]
        if state_tmpfs_bytes:
            # The state directory on a tmpfs of its own, seen only in the daemon's mount
            # namespace (unshare execs, so the daemon keeps this process's pid).
            os.makedirs(f"{self.dir}/state", exist_ok=True)
            args = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    f'mount -t tmpfs -o size={state_tmpfs_bytes},mode=0750 ecw-state "$0" && exec "$@"', f"{self.dir}/state"] + args
        self.process = subprocess.Popen(args, stderr=self.log, env={**os.environ, **(env or {})})
        # 0: its work proceeds (or mode off), 3: it answers but holds (not yet registered, …)
        wait_for(lambda: self.cli("status").returncode in (0, 3), timeout=10)

    def cli(self, *args):
        return subprocess.run([BINARY, *args, "--runtime-dir", f"{self.dir}/run"], capture_output=True, text=True)

    def status(self):
        return json.loads(self.cli("status", "--json").stdout)

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        code = self.process.returncode if self.process else None
        self.process = None
        return code

    def logtext(self):
        with open(os.path.join(self.dir, "daemon.log"), errors="replace") as f:
            return f.read()

    def cleanup(self):
        self.stop(signal.SIGKILL)
        if failures and os.environ.get("ECW_SUITE_LOGS", "1") == "1":
            print("# daemon log tail:\n# " + "\n# ".join([l for l in self.logtext().splitlines() if "power-supply" not in l][-int(os.environ.get("ECW_LOG_LINES", "15")):]), flush=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def in_namespace(worker, script):
    """Runs a shell script in the daemon's mount namespace (where its tmpfs is)."""
    return subprocess.run(["nsenter", "-t", str(worker.process.pid), "-m", "sh", "-c", script], capture_output=True, text=True)


def delivered(coordinator, ids, timeout=20):
    return wait_for(lambda: all(coordinator.results()["counts"].get(i, 0) >= 1 for i in ids), timeout=timeout)


def scenario(name):
    def wrap(function):
        function.scenario = name
        return function
    return wrap


@scenario("loop")
def the_whole_loop(model):
    paced = PacedModel(model.url, delay_ms=800)
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": paced.url, "model": "tiny"})
    try:
        w.start()
        w.cli("mode", "on")
        ids = c.submit("def fib(n):", "print('hello')", "sort a list")
        check(delivered(c, ids), "three subtasks are pulled, run on llama.cpp and posted", json.dumps(c.results())[:500])
        results = c.results()
        check(all(results["counts"][i] == 1 for i in ids), "each result arrives exactly once", results["counts"])
        outputs = [r for r in results["results"] if r["subtaskId"] in ids]
        check(all(r["ok"] and len(r["output"]) > 0 for r in outputs), "every result is ok with the model's text", outputs[:1])
        state = c.state()
        check(len(state["registrations"]) >= 1 and state["registrations"][0]["body"]["os"] == "linux", "registered with os linux")
        check(state["unknownKeys"] == [], "no body field the coordinator would drop", state["unknownKeys"])
        beats = wait_for(lambda: c.state()["heartbeatCount"] >= 2, timeout=5)
        check(beats, "heartbeats follow the configured cadence")
        hb = c.state()["heartbeats"][-1]["body"]
        telemetry = hb.get("powerTelemetry", {})
        check("onExternalPower" in telemetry and "updatedAtMs" in telemetry and None not in telemetry.values(),
              "heartbeats carry powerTelemetry without nulls", telemetry)
        status = w.status()["coordinator"]
        check(status["registered"] and status["subtasksDone"] == 3 and status["outboxDepth"] == 0, "status shows registered, 3 done, empty outbox", status)
        check(status["lastHeartbeat"] is not None and status["lastHeartbeatLatencyMs"] is not None, "status shows the last heartbeat and its latency", status)
        backend = w.status()["backend"]
        check(backend["modelState"] == "ready" and "tiny" in backend["detail"], "status shows the backend's readiness probe: modelState ready", backend)
        tasks = json.loads(w.cli("tasks", "--json").stdout)["tasks"]
        check(sorted(t["id"] for t in tasks if t["source"] == "coordinator") == sorted(ids) and all(t["state"] == "done" for t in tasks),
              "every coordinator task is in `tasks`, done", tasks[:1])
        check(w.stop() == 0, "SIGTERM stops the worker cleanly")
    finally:
        w.cleanup(); c.stop(); paced.stop()


@scenario("token")
def token_lifecycle(model):
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        check(delivered(c, c.submit("first")), "work flows before the 401")
        token_file = os.path.join(w.dir, "state", "mesh-token")
        check(os.path.exists(token_file) and (os.stat(token_file).st_mode & 0o077) == 0, "the mesh token is persisted with mode 0600")
        c.switch("unauthorized-once")
        ids = c.submit("after the 401")
        check(delivered(c, ids), "after a 401 mid-run the worker registers again and delivers", c.state()["registrations"][-1:])
        check(len(c.state()["registrations"]) >= 2, "a second registration happened")
        check("forgetting the mesh token" in w.logtext(), "the log says why it registered again")
    finally:
        w.cleanup(); c.stop()


@scenario("rejected")
def forbidden_and_blacklisted(model):
    # EdgeCoder answers a blacklisted agent's pull with blocked: true and its heartbeat
    # with blacklisted: true; whichever the worker sees first names the reason.
    for mode, expect in (("forbidden", "agent_blacklisted"), ("blacklisted", "bl")):
        c = Coordinator()
        w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
        try:
            w.start(); w.cli("mode", "on")
            wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
            c.switch(mode, reason="operator_ban")
            rejected = wait_for(lambda: w.status()["coordinator"].get("rejection"), timeout=10)
            check(rejected and expect in rejected and "operator_ban" in rejected, f"{mode}: status shows the coordinator's reason", rejected)
            pulls = c.state()["pulls"]
            time.sleep(2)
            check(c.state()["pulls"] == pulls, f"{mode}: the loop stops (no pulls while rejected)", (pulls, c.state()["pulls"]))
            retry = w.status()["coordinator"].get("retryAt")
            check(retry is not None, f"{mode}: a retry no sooner than 5 minutes is scheduled", retry)
        finally:
            w.cleanup(); c.stop()


@scenario("hostile")
def malformed_oversized_hanging_and_gone(model):
    # A pull that timed out on our side may still be answered by the coordinator later,
    # handing a subtask to a connection nobody reads; EdgeCoder re-queues such subtasks
    # on the next heartbeat after 30 s. The dev coordinator does the same, sooner.
    paced = PacedModel(model.url, delay_ms=800)
    c = Coordinator("--requeue-stale-ms", "3000")
    w = Worker(c.url, {"kind": "openai", "url": paced.url, "model": "tiny"}, extra={"log": {"level": "debug"}})
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        for mode in ("malformed", "oversized", "hang", "down"):
            c.switch(mode, paths=["/pull"])
            failing = wait_for(lambda: w.status()["coordinator"]["consecutiveFailures"] >= 2, timeout=20)
            status = w.status()["coordinator"]
            check(failing, f"{mode} pull answers count as failures with a backoff", status)
            check(w.process.poll() is None, f"the daemon survives {mode} answers")
            if mode == "oversized":
                check("response-too-large" in (status.get("lastError") or ""), "an oversized answer is refused by the body cap", status.get("lastError"))
            if mode == "hang":
                check("timed-out" in (status.get("lastError") or ""), "a hanging coordinator hits the request timeout", status.get("lastError"))
            c.switch("normal")
            ids = c.submit(f"after {mode}")
            check(delivered(c, ids, timeout=90), f"after {mode} the worker recovers and delivers", w.status()["coordinator"])
        # Gone and back: the listening socket closes for a while.
        c.switch("offline", seconds=4)
        wait_for(lambda: w.status()["coordinator"]["consecutiveFailures"] >= 1, timeout=10)
        backoffs = set()
        wait_for(lambda: backoffs.add(w.status()["coordinator"].get("backoffMs")) or False, timeout=3.5)
        check(any(b for b in backoffs if b is not None), "while the coordinator is gone the worker backs off", backoffs)
        check("could-not-connect" in w.logtext(), "the log names the connection failure")
        ids = wait_for(lambda: c.submit("after the outage"), timeout=30)  # the dev API is offline too
        ids = ids or []
        check(delivered(c, ids, timeout=120), "when the coordinator comes back the worker recovers", w.status()["coordinator"])
        check(w.status()["coordinator"]["consecutiveFailures"] == 0, "failures reset after recovery")
    finally:
        w.cleanup(); c.stop(); paced.stop()


@scenario("deferred")
def power_deferred(model):
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        # Registered and the model ready (the readiness probe backs off on a busy host: make
        # test runs this beside the VM suites), so the next pull is the one deferred.
        wait_for(lambda: w.status()["coordinator"]["registered"] and w.status()["backend"]["modelState"] == "ready", timeout=40)
        c.switch("power-deferred", deferMs=2500, reason="high_cpu_defer")
        # The status may still show the readiness gate's hold from before the model was
        # ready until the next pull's answer replaces it: wait for the coordinator's reason.
        wait_for(lambda: "high_cpu_defer" in (w.status()["coordinator"].get("deferredReason") or ""), timeout=30)
        first = w.status()["coordinator"].get("deferredReason")
        check(first and "high_cpu_defer" in first, "status shows the coordinator's deferral", first)
        before = c.state()["pulls"]
        time.sleep(2.0)
        check(c.state()["pulls"] - before <= 1, "a powerDeferred answer waits deferMs before the next pull", c.state()["pulls"] - before)
    finally:
        w.cleanup(); c.stop()


def fake_laptop(root, battery, on_mains):
    def write(path, text):
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text + "\n")
    write("sys/class/power_supply/AC/type", "Mains")
    write("sys/class/power_supply/AC/online", "1" if on_mains else "0")
    write("sys/class/power_supply/BAT0/type", "Battery")
    write("sys/class/power_supply/BAT0/status", "Charging" if on_mains else "Discharging")
    write("sys/class/power_supply/BAT0/capacity", str(battery))
    write("proc/stat", "cpu  100 0 100 10000 0 0 0 0 0 0")
    write("proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 6000000 kB")


@scenario("held")
def held_policy(model):
    c = Coordinator()
    root = tempfile.mkdtemp(prefix="ecw-sysfs-")
    fake_laptop(root, battery=10, on_mains=False)
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"}, sysfs_root=root)
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        c.submit("should wait")
        time.sleep(3)
        state = c.state()
        check(state["pulls"] == 0, "a held policy pulls nothing", state["pulls"])
        check(state["heartbeatCount"] >= 2, "heartbeats continue while held", state["heartbeatCount"])
        check(state["heartbeats"][-1]["body"]["powerTelemetry"].get("batteryPct") == 10, "heartbeats report the battery")
        held = w.status()["power"]["held"]
        check(held["battery-low"] >= 2, "the battery-low counter rises with each held pull", held)
        fake_laptop(root, battery=90, on_mains=True)
        check(wait_for(lambda: c.results()["total"] >= 1, timeout=60), "plugged in and charged, work resumes after the dwell")
    finally:
        w.cleanup(); c.stop(); shutil.rmtree(root, ignore_errors=True)


@scenario("crash")
def crash_safety(model):
    """kill -9 while a subtask runs, and after its result is in the outbox but before it
    is posted: each result reaches the coordinator exactly once."""
    slow = OllamaFixture(model.url, "--delay-ms", "4000", "--fault-path", "/api/generate", "--loaded")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": slow.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        # Nothing is pulled before the model is ready (the readiness gate).
        wait_for(lambda: w.status()["backend"]["modelState"] == "ready", timeout=20)
        [running] = c.submit("killed while running", timeout_ms=120000)
        check(wait_for(lambda: any(n.startswith("journal-") for n in os.listdir(os.path.join(w.dir, "state"))), timeout=10),
              "the pulled subtask is in the journal before it runs")
        w.stop(signal.SIGKILL)
        check(c.results()["counts"].get(running, 0) == 0, "nothing was posted before the kill")
        w.start()
        check(delivered(c, [running], timeout=40), "after restart the journaled subtask runs again and is posted")
        time.sleep(1)
        check(c.results()["counts"].get(running) == 1, "exactly once", c.results()["counts"])

        # Result written to the outbox, the post hangs, kill -9.
        c.switch("hang", paths=["/result"])
        [outboxed] = c.submit("killed while posting", timeout_ms=120000)
        outbox = os.path.join(w.dir, "state")
        check(wait_for(lambda: any(n.startswith("outbox-") for n in os.listdir(outbox)), timeout=30), "the result is in the outbox before it is posted")
        # Kill only once the coordinator holds the post: killed earlier, the request can
        # still sit unread in the listener's queue and be counted after the switch back.
        check(wait_for(lambda: c.state()["hungNow"] >= 1, timeout=30), "the coordinator holds the post unanswered")
        w.stop(signal.SIGKILL)
        c.switch("normal")
        time.sleep(0.5)
        before = c.results()["counts"].get(outboxed, 0)
        w.start()
        check(delivered(c, [outboxed], timeout=40), "after restart the outbox is delivered")
        time.sleep(1.5)
        counts = c.results()["counts"]
        check(before == 0 and counts.get(outboxed) == 1, "exactly once, and the hung post was never counted", (before, counts))
        check(not any(n.startswith(("journal-", "outbox-")) for n in os.listdir(outbox)), "journal and outbox are empty afterwards", os.listdir(outbox))

        # Claimed over 30 s before the restart: the coordinator has re-queued it, so the
        # worker releases it (a failed result would complete it for the whole swarm); the
        # coordinator hands it out again and it is answered once, ok.
        c.switch("normal")
        [late] = c.submit("its claim expires while the worker is down", timeout_ms=120000)
        wait_for(lambda: any(n.startswith("journal-") for n in os.listdir(outbox)), timeout=10, interval=0.01)
        w.stop(signal.SIGKILL)
        time.sleep(31)
        w.start()
        check(delivered(c, [late], timeout=60), "a subtask whose claim expired is released at restart, re-queued and answered")
        results = [r for r in c.results()["results"] if r["subtaskId"] == late]
        check(len(results) == 1 and results[0]["ok"] is True, "once, ok: never reported failed", results)
        check(f"releasing subtask {late}: it was claimed" in w.logtext(), "the log says it was released and why")
        check(w.status()["coordinator"]["conduct"]["released"] >= 1, "and status counts it", w.status()["coordinator"]["conduct"])
    finally:
        w.cleanup(); c.stop(); slow.stop()


@scenario("sigterm")
def sigterm_grace(model):
    slow = OllamaFixture(model.url, "--delay-ms", "1500", "--fault-path", "/api/generate", "--loaded")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": slow.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        [sub] = c.submit("finishes during the grace")
        wait_for(lambda: w.status()["coordinator"].get("running"), timeout=10)
        started = time.time()
        code = w.stop(signal.SIGTERM)
        check(code == 0, "SIGTERM with a subtask running exits 0")
        check(c.results()["counts"].get(sub) == 1, "the running subtask finished within stopGraceMs and was posted", c.results()["counts"])
        check(time.time() - started < 10, "and the stop took less than the grace plus a margin")
    finally:
        w.cleanup(); c.stop(); slow.stop()


@scenario("stop-extend")
def stop_extends_systemds_timeout(model):
    """A grace longer than systemd's TimeoutStopSec: while the stop waits for the running
    subtask, EXTEND_TIMEOUT_USEC= reaches the notification socket (a stand-in for
    systemd's: a datagram socket of our own) every 5 s until the subtask is done."""
    slow = OllamaFixture(model.url, "--delay-ms", "7000", "--fault-path", "/api/generate", "--loaded")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": slow.url, "model": "tiny"}, extra={"coordinator": {"stopGraceMs": 30000}})
    notify_path = os.path.join(w.dir, "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(0.2)
    messages = []
    def drain():
        while True:
            try:
                messages.append((time.time(), notify.recv(4096).decode()))
            except socket.timeout:
                return
    try:
        w.start(env={"NOTIFY_SOCKET": notify_path}); w.cli("mode", "on")
        [sub] = c.submit("finishes during a long grace")
        check(wait_for(lambda: (drain(), w.status()["coordinator"].get("running"))[1], timeout=10), "the subtask runs")
        drain()
        started = time.time()
        w.process.send_signal(signal.SIGTERM)
        while w.process.poll() is None and time.time() - started < 30:
            drain()
        drain()
        code = w.stop(signal.SIGTERM)
        extends = [(at - started, m) for at, m in messages if at >= started and "EXTEND_TIMEOUT_USEC=" in m]
        check(code == 0, "the stop exits 0", code)
        check(len(extends) >= 2 and extends[0][0] < 1.5, "EXTEND_TIMEOUT_USEC= at once and again while the subtask runs",
              [(round(t, 1), m) for t, m in extends])
        check(all(int(m.split("EXTEND_TIMEOUT_USEC=")[1].split("\n")[0]) >= 5_000_000 for _, m in extends),
              "each extension covers at least the next 5 s", extends)
        check(any(f"subtask {sub}" in m for _, m in extends), "and STATUS= names the subtask", extends)
        check(c.results()["counts"].get(sub) == 1, "the subtask finished within the grace and was posted", c.results()["counts"])
        check(time.time() - started < 15, "the stop ended once the subtask was done, not at the end of the grace")
    finally:
        notify.close(); w.cleanup(); c.stop(); slow.stop()


@scenario("ollama")
def ollama_backend(model):
    fixture = OllamaFixture(model.url)
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        ids = c.submit("through the ollama API")
        check(delivered(c, ids), "the ollama backend runs subtasks (fixture following Ollama's API, forwarding to llama.cpp)")
        result = [r for r in c.results()["results"] if r["subtaskId"] == ids[0]][0]
        check(result["ok"] and result["output"], "with the model's text", result)
        check(c.state()["registrations"][0]["body"]["localModelProvider"] == "ollama-local", "registered as ollama-local")
        # Ready means loaded: the worker loads the model when mode on starts (/api/ps lists it then).
        check(wait_for(lambda: w.status()["backend"]["modelState"] == "ready", timeout=10),
              "the ollama readiness probe (/api/tags, then /api/ps once loaded) says ready", w.status()["backend"])
        # The fixture's /api/tags says parameter_size "0.15M": 0.00015 billion, a number.
        sized = wait_for(lambda: [h["body"] for h in c.state()["heartbeats"] if "activeModelParamSize" in h["body"]], timeout=40)
        check(sized and sized[-1]["activeModelParamSize"] == 0.00015 and sized[-1]["activeModel"] == "tiny",
              "heartbeats carry activeModelParamSize (billions, from /api/tags) with activeModel", sized[-1:] if sized else c.state()["heartbeats"][-1:])
        check(c.state()["unknownKeys"] == [], "no heartbeat field the coordinator would drop", c.state()["unknownKeys"])
    finally:
        w.cleanup(); c.stop(); fixture.stop()


@scenario("backend-key")
def backend_key(model):
    """The model server's key from the systemd credential backend-api-key: sent with every
    call, never in status or the log; without it the probe itself says unauthorized."""
    key = "cred-key-5f1c"
    fixture = OllamaFixture(model.url, "--api-key", key)
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "tiny"})
    keyless = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "tiny"})
    try:
        credentials = os.path.join(w.dir, "credentials")
        os.makedirs(credentials)
        with open(os.path.join(credentials, "backend-api-key"), "w") as f:
            f.write(key + "\n")
        w.start(env={"CREDENTIALS_DIRECTORY": credentials}); w.cli("mode", "on")
        ids = c.submit("with the key from the credential")
        check(delivered(c, ids), "subtasks run with the key from $CREDENTIALS_DIRECTORY/backend-api-key")
        result = [r for r in c.results()["results"] if r["subtaskId"] == ids[0]][0]
        check(result["ok"] and result["output"], "with the model's text", result)
        check(wait_for(lambda: w.status()["backend"]["modelState"] == "ready", timeout=10), "modelState ready (loaded, key accepted)", w.status()["backend"])
        status_text = w.cli("status", "--json").stdout + w.cli("status").stdout
        check(key not in status_text and key not in w.logtext(), "the key is in neither status nor the log")
        keyless.start(); keyless.cli("mode", "on")
        check(wait_for(lambda: keyless.status()["backend"]["modelState"] == "unauthorized", timeout=10),
              "without the key the probe itself says unauthorized", keyless.status()["backend"])
        check("backend-api-key" in keyless.status()["backend"]["detail"], "and says where the key goes", keyless.status()["backend"])
    finally:
        keyless.cleanup(); w.cleanup(); c.stop(); fixture.stop()


def acks(c):
    return c.state()["orchestrationAcks"]


@scenario("switch")
def model_switch(model):
    """protocol-coordinator §7: the coordinator's model switch, refused by default, then allowed on this host
    (policy set), pulled through /api/pull with progress, persisted across a restart."""
    fixture = OllamaFixture(model.url, "--pullable", "big:7b", "--pull-ms", "3000")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        c.dev("POST", "/_dev/orchestration", {"model": "big:7b"})
        refused = wait_for(lambda: acks(c), timeout=15)
        check(refused and refused[0]["ok"] is False and "allowRemoteModelSwitch" in refused[0].get("error", ""),
              "by default a switch is refused with the reason (ack ok: false)", refused)
        check(c.state()["orchestration"] and all(not o["pending"] for o in c.state()["orchestration"].values()), "the ack ends the request")
        check(w.status()["backend"]["model"] == "tiny" and w.status()["backend"]["modelSwitch"]["phase"] == "refused",
              "status shows the model unchanged and the refusal", w.status()["backend"])
        check(c.state()["unknownKeys"] == [], "no orchestration field the coordinator would drop", c.state()["unknownKeys"])

        shown = w.cli("policy", "set", "allowRemoteModelSwitch", "true")
        check(shown.returncode == 0, "policy set allowRemoteModelSwitch true is accepted on this host", shown.stderr)
        c.dev("POST", "/_dev/orchestration", {"model": "big:7b"})
        swapping = wait_for(lambda: any(h["body"].get("modelSwapInProgress") for h in c.state()["heartbeats"]), timeout=15)
        check(swapping, "heartbeats say modelSwapInProgress while the model is pulled")
        done = wait_for(lambda: len(acks(c)) >= 2 and acks(c), timeout=30)
        check(done and done[1]["ok"] is True and "error" not in done[1], "allowed, the model is pulled, switched and acknowledged ok", done)
        statuses = [x for x in c.state()["orchestrationStatuses"] if x["rolloutId"] == (done or [{}, {}])[1].get("rolloutId")]
        phases = [x["phase"] for x in statuses]
        check(phases[:1] == ["starting"] and "pulling_model" in phases and phases[-1] == "done", "progress is reported: starting, pulling, done", phases)
        check(any("progressPct" in x for x in statuses if x["phase"] == "pulling_model"), "pull progress carries progressPct", statuses[:3])
        check(phases.count("pulling_model") <= 4, "progress is rate-limited (a pull streams dozens of lines)", phases)
        beat = wait_for(lambda: c.state()["heartbeats"][-1]["body"].get("activeModel") == "big:7b", timeout=5)
        check(beat, "heartbeats carry the new activeModel", c.state()["heartbeats"][-1]["body"])
        backend = w.status()["backend"]
        check(backend["model"] == "big:7b" and backend["modelSource"] == "coordinator" and backend["configuredModel"] == "tiny",
              "status shows the active model and where it came from", backend)
        ids = c.submit("runs on the new model")
        check(delivered(c, ids), "subtasks run on the switched model")

        w.stop()
        check(os.path.exists(os.path.join(w.dir, "state", "active-model.json")), "the active model is persisted in the state directory")
        w.start()
        check(w.status()["backend"]["model"] == "big:7b", "after a restart the worker runs the switched model", w.status()["backend"])
        beat = wait_for(lambda: any(h["body"].get("activeModel") == "big:7b" for h in c.state()["heartbeats"][-2:]), timeout=10)
        check(beat, "and reports it in heartbeats")

        c.dev("POST", "/_dev/orchestration", {"model": "nosuch:1b"})
        failed = wait_for(lambda: len(acks(c)) >= 3 and acks(c), timeout=20)
        check(failed and failed[2]["ok"] is False and "does not exist" in failed[2].get("error", ""),
              "a pull Ollama fails is acknowledged ok: false with Ollama's reason", failed)
        check(w.status()["backend"]["model"] == "big:7b", "and the model stays as it was")
    finally:
        w.cleanup(); c.stop(); fixture.stop()


def host_busy_pct(seconds=2.0):
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        return fields[3] + fields[4], sum(fields)
    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return 100.0 * (1 - (idle1 - idle0) / max(1, total1 - total0))


@scenario("own-load")
def own_load(model):
    """modes-and-power §3.2: the model server working for the worker is not "other load". Real /proc
    (a fake sys tree on mains, proc linked to the host's): back-to-back subtasks on the
    llama.cpp server flow without a cpu-busy hold; an unrelated CPU burner holds."""
    baseline = host_busy_pct()
    if baseline > 30:
        global skips
        skips += 1
        print(f"# SKIP own-load: the host is already {baseline:.0f} % busy with other work; cpu-busy cannot be told apart (not counted as passed)", flush=True)
        return
    root = tempfile.mkdtemp(prefix="ecw-ownload-")
    fake_laptop(root, battery=100, on_mains=True)
    shutil.rmtree(os.path.join(root, "proc"))
    os.symlink("/proc", os.path.join(root, "proc"))
    # A server of its own whose generations use every core and last seconds, as a real
    # model's do: the tiny model's usual few milliseconds would be three results under
    # 500 ms (BHV001) and would never saturate the host.
    cores = os.cpu_count() or 2
    busy_model = ModelServer(env={"EDGECODER_LLAMA_CTX": "2048", "EDGECODER_LLAMA_THREADS": str(cores)})
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": busy_model.url, "model": "tiny"}, sysfs_root=root,
               extra={"backend": {"maxTokens": 1500}, "policy": {"maxCpuUsagePct": 45, "resumeDwellSec": 0}})
    burners = []
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        beats0 = c.state()["heartbeatCount"]
        ids = c.submit(*[f"write a long story number {i}" for i in range(6)])
        time.sleep(1.5)
        generating = host_busy_pct(2.0)
        check(delivered(c, ids, timeout=240), "back-to-back subtasks on the real llama.cpp server are delivered")
        sent = [h["body"]["powerTelemetry"].get("cpuUsagePct") for h in c.state()["heartbeats"][-(c.state()["heartbeatCount"] - beats0):]]
        print(f"# own model on {cores} threads: host {generating:.0f} % busy; heartbeats' cpuUsagePct {sent}", flush=True)
        measured = [p for p in sent if p is not None]  # the first reading has no CPU share yet: omitted
        check(generating > 85 and measured and all(p <= 85 for p in measured),
              "the worker's own model saturating the host: no heartbeat says cpuUsagePct over 85", (generating, sent))
        held = w.status()["power"]["held"]
        check(held["cpu-busy"] == 0, "with no cpu-busy hold: the model server's CPU is the worker's own", held)
        doctor = json.loads(w.cli("doctor", "--json", "--sysfs-root", root).stdout)
        share = doctor["power"].get("cpuShare")
        check(share and {"hostPct", "ownPct", "otherPct"} <= set(share), "doctor shows the host's figure and the one the policy compares", doctor["power"])
        check("listens on port" in (doctor["power"].get("ownProcesses") or ""), "doctor names the model server's process", doctor["power"].get("ownProcesses"))
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        busy = wait_for(lambda: w.status()["power"]["decision"]["reason"] == "cpu-busy", timeout=20, interval=0.5)
        check(busy, "an unrelated CPU burner holds new work (cpu-busy)", w.status()["power"])
    finally:
        for b in burners:
            b.kill(); b.wait()
        w.cleanup(); c.stop(); busy_model.stop(); shutil.rmtree(root, ignore_errors=True)


@scenario("hostile-id")
def hostile_id(model):
    """A subtask id of 90 ':' once made a journal name over 255 bytes (ENAMETOOLONG) and
    the loop pulled ~1 000 times a second without answering it."""
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        hostile = ":" * 90
        before = c.state()["pulls"]
        started = time.time()
        c.dev("POST", "/_dev/subtasks", [{"id": hostile, "input": "say hi"}])
        check(delivered(c, [hostile]), "a subtask id of 90 ':' is run and answered", c.results()["counts"])
        result = [r for r in c.results()["results"] if r["subtaskId"] == hostile][-1]
        check(result["ok"] is True, "with ok: true", result)
        time.sleep(2)
        rate = (c.state()["pulls"] - before) / (time.time() - started)
        check(rate < 3, f"no spin: {rate:.2f} pulls per second (pullIntervalMs 500)", rate)
        check(w.status()["coordinator"]["consecutiveFailures"] == 0, "and no failure", w.status()["coordinator"])
    finally:
        w.cleanup(); c.stop()


@scenario("full-disk")
def full_disk(model):
    """The state directory on a 128 KiB tmpfs that fills up: the subtask pulled then is
    released unanswered, nothing is pulled until a write succeeds (at most one pull per
    backoff step), status and doctor say why, and work resumes once there is space."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        print("ok - # SKIP full-disk needs root, unshare and nsenter", flush=True)
        return
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        w.start(state_tmpfs_bytes=128 * 1024)
        w.cli("mode", "on")
        check(wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10), "registered with the state directory on a 128 KiB tmpfs")
        state = f"{w.dir}/state"
        filled = in_namespace(w, f'dd if=/dev/zero of={state}/filler bs=4096 2>/dev/null; df -k {state} | tail -1')
        check(" 0 " in filled.stdout or "100%" in filled.stdout, "the tmpfs is full", filled.stdout + filled.stderr)
        ids = c.submit("first", "second")
        released = wait_for(lambda: [t for t in json.loads(w.cli("tasks", "--json").stdout)["tasks"] if t["id"] in ids and t["state"] == "released"], timeout=15)
        check(released and "journal could not be written" in (released[0].get("error") or ""),
              "the subtask pulled onto a full disk is released unanswered (the disk's fault), with the reason", released)
        check(c.results()["total"] == 0, "nothing is posted for it: the coordinator gives it to another agent", c.results()["results"][:1])
        status = w.status()
        failures0, pulls0, t0 = status["coordinator"]["consecutiveFailures"], c.state()["pulls"], time.time()
        time.sleep(10)
        status = w.status()
        pulls, seconds = c.state()["pulls"] - pulls0, time.time() - t0
        steps = status["coordinator"]["consecutiveFailures"] - failures0
        print(f"# full state directory: {pulls} pulls in {seconds:.1f} s ({pulls / seconds:.2f} per second) over {steps} backoff steps", flush=True)
        check(pulls <= max(steps, 1), "at most one pull per backoff step while the disk is full", (pulls, steps))
        check(pulls / seconds < 1, "far from a spin", pulls / seconds)
        check(c.state()["heartbeatCount"] > 0, "heartbeats go on")
        coordinator = status["coordinator"]
        check(status["daemon"]["persistenceProblem"] and "state not writable" in status["summary"], "status shows the problem", status["daemon"])
        check((coordinator.get("deferredReason") or "").startswith("held: state-unwritable"), "status says new work is held", coordinator)
        check(status["power"]["held"]["state-unwritable"] >= 1, "each held pull is counted", status["power"]["held"])
        doctor = json.loads(w.cli("doctor", "--json").stdout or "{}")
        check(doctor.get("stateDirectory", {}).get("persistenceProblem") and any("cannot write its state directory" in a for a in doctor.get("advice", [])),
              "doctor shows it, with advice", doctor.get("stateDirectory"))
        check(w.process.poll() is None, "the daemon survives a full disk")
        in_namespace(w, f"rm -f {state}/filler")
        check(delivered(c, ids, timeout=90),
              "space again: work resumes, the released subtask too once the coordinator re-queued it", w.status()["coordinator"])
        check(wait_for(lambda: w.status()["daemon"]["persistenceProblem"] is None, timeout=10), "and the problem clears")
    finally:
        w.cleanup(); c.stop()


@scenario("largest")
def largest_values_across_kill(model):
    """The largest subtask accepted (coordinator.maxResponseBytes 8 MiB: a 1 MiB input and
    5 MiB of other fields) and a model output over what is posted, across kill -9 while
    running and while posting: journal and outbox are read back, nothing quarantined."""
    # The echo fixture, without the upstream: its output grows with the input (4 MiB here).
    slow = subprocess.Popen([sys.executable, os.path.join(ROOT, "IntegrationTests/model-server/ollama_fixture.py"), "--port", "0", "--model", "tiny",
                             "--delay-ms", "4000", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    fixture_url = slow.stdout.readline().strip().split(" ")[-1]
    c = Coordinator("--body-limit", str(64 * 1024 * 1024))
    w = Worker(c.url, {"kind": "ollama", "url": fixture_url, "model": "tiny"},
               extra={"coordinator": {"maxResponseBytes": 8 * 1024 * 1024, "requestTimeoutMs": 30000},
                      "backend": {"maxOutputBytes": 16 * 1024 * 1024, "maxTokens": 32768}})
    state = os.path.join(w.dir, "state")
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        word = "w" * 65535 + " "
        big_input = (word * 16)[: 1024 * 1024]
        [sub] = c.dev("POST", "/_dev/subtasks", [{"input": big_input, "timeoutMs": 300000, "snapshotRef": "s" * (5 * 1024 * 1024)}])["ids"]
        check(wait_for(lambda: any(n.startswith("journal-") for n in os.listdir(state)), timeout=30), "the largest subtask is journaled")
        w.stop(signal.SIGKILL)
        w.start()
        check(delivered(c, [sub], timeout=60), "after kill -9 it runs again and is posted")
        result = [r for r in c.results()["results"] if r["subtaskId"] == sub][-1]
        check(result["ok"] and 500_000 < len(result["output"]) <= 1024 * 1024, "with its output cut to the coordinator's body", len(result["output"]))
        check(w.status()["recoveredStateFiles"] == [] and not any("corrupt" in n for n in os.listdir(state)), "nothing was quarantined", os.listdir(state))

        c.switch("hang", paths=["/result"])
        [posting] = c.dev("POST", "/_dev/subtasks", [{"input": big_input, "timeoutMs": 300000, "snapshotRef": "s" * (5 * 1024 * 1024)}])["ids"]
        check(wait_for(lambda: any(n.startswith("outbox-") for n in os.listdir(state)), timeout=60), "its result is in the outbox")
        check(wait_for(lambda: c.state()["hungNow"] >= 1, timeout=60), "the coordinator holds its post unanswered")
        w.stop(signal.SIGKILL)
        c.switch("normal")
        w.start()
        check(delivered(c, [posting], timeout=60), "after kill -9 the outbox is delivered")
        time.sleep(1)
        check(c.results()["counts"].get(posting) == 1, "exactly once", c.results()["counts"])
        check(w.status()["recoveredStateFiles"] == [] and not any("corrupt" in n for n in os.listdir(state)), "nothing was quarantined", os.listdir(state))
    finally:
        w.cleanup(); c.stop(); slow.terminate(); slow.wait(timeout=5)


# --- A citizen of a monitored network -------------------------------------------------
# The dev coordinator enforces the EdgeCoder coordinator's behaviour monitor (a CRITICAL
# finding or three strikes in an hour ban for good). Each scenario below ends by checking
# that the worker was never banned and no rule found it.

def standing(c, agent=None):
    """The monitor's verdicts on the (only) agent: (banned, findings)."""
    state = c.state()
    banned = state.get("blacklisted") or {}
    findings = [v for v in state.get("violations", []) if agent is None or v.get("agentId") == agent]
    return banned, findings


def never_banned(c, what):
    banned, findings = standing(c)
    check(not banned and not findings, f"{what}: never banned, no monitor finding", (banned, findings))


def answered_once_ok(c, ids):
    results = [r for r in c.results()["results"] if r["subtaskId"] in ids]
    counts = c.results()["counts"]
    return all(counts.get(i) == 1 for i in ids) and all(r["ok"] for r in results)


@scenario("model-down")
def model_server_down_then_back(model):
    """The model server down 20 s with 6 subtasks queued: none claimed, none failed; back
    up, all 6 answered ok exactly once."""
    laptop = ("--loaded", "--delay-ms", "1200", "--fault-path", "/api/generate")  # a real model's time
    fixture = OllamaFixture(model.url, *laptop)
    port = fixture.port
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        check(wait_for(lambda: w.status()["backend"]["modelState"] == "ready", timeout=20), "the model is ready first")
        fixture.stop()
        # The probe must have seen the server gone (modelState), not only the hold named.
        check(wait_for(lambda: w.status()["backend"]["modelState"] != "ready"
                       and "model-unavailable" in (w.status()["coordinator"].get("deferredReason") or ""), timeout=40),
              "with the model server gone, pulls are held (model-unavailable)", w.status()["coordinator"])
        ids = c.submit(*[f"queued while the model is down {i}" for i in range(6)])
        pulls = c.state()["pulls"]
        time.sleep(20)
        subtasks = c.dev("GET", "/_dev/subtasks")
        claimed = [s for s in subtasks.get("subtasks", subtasks) if s.get("id") in ids and s.get("handOuts", 0) > 0]
        check(claimed == [] and c.results()["total"] == 0 and c.state()["pulls"] == pulls,
              "20 s down: none claimed, none failed, no pull", (claimed, c.results()["total"], c.state()["pulls"] - pulls))
        held = w.status()["power"]["held"]
        check(held.get("model-unavailable", 0) > 0, "each held pull is counted under model-unavailable", held)
        events = json.loads(w.cli("events", "--json").stdout)
        check(any(e["kind"] == "work-held" and "model-unavailable" in e["reason"] for e in events.get("events", events)),
              "an event says why work is held", events)
        fixture = OllamaFixture(model.url, *laptop, port=port)
        check(wait_for(lambda: answered_once_ok(c, ids), timeout=90), "back up: all 6 answered ok exactly once", c.results()["counts"])
        never_banned(c, "model server down 20 s")
    finally:
        w.cleanup(); c.stop(); fixture.stop()


@scenario("model-ready-wakes")
def model_ready_wakes_the_pull_loop(model):
    """Held for the model with a 60 s pull interval: once the probe sees the model ready,
    the hold clears from status and the worker pulls at once, not at the interval's end."""
    fixture = OllamaFixture(model.url, "--loaded")
    port = fixture.port
    fixture.stop()
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "tiny"},
               extra={"coordinator": {"pullIntervalMs": 60000}})
    try:
        w.start(); w.cli("mode", "on")
        check(wait_for(lambda: "model-unavailable" in (w.status()["coordinator"].get("deferredReason") or "")
                       and w.status()["backend"]["modelState"] == "unavailable", timeout=30),
              "with no model server, pulls are held (model-unavailable)", w.status())
        ids = c.submit("asked while the model server was down")
        time.sleep(1)
        fixture = OllamaFixture(model.url, "--loaded", port=port)
        # The probe looks again 2, 4, 8, 16 s after its first miss.
        check(wait_for(lambda: w.status()["backend"]["modelState"] == "ready", timeout=40), "the probe sees the model ready")
        ready_at = time.monotonic()
        check(wait_for(lambda: answered_once_ok(c, ids), timeout=30), "the queued subtask is answered", c.results()["counts"])
        waited = time.monotonic() - ready_at
        check(waited < 20, f"pulled when the hold lifted, not at the 60 s interval's end ({waited:.1f} s after ready)", waited)
        check(not (w.status()["coordinator"].get("deferredReason") or "").startswith("held:"),
              "status no longer shows the hold", w.status()["coordinator"])
        never_banned(c, "model server back")
    finally:
        w.cleanup(); c.stop(); fixture.stop()


@scenario("model-missing")
def model_missing(model):
    """The configured model is not on the server: nothing is claimed, nothing fails."""
    fixture = OllamaFixture(model.url, "--loaded")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": fixture.url, "model": "not-pulled:7b"})
    try:
        w.start(); w.cli("mode", "on")
        c.submit("for a model this host does not have", "and another")
        check(wait_for(lambda: "model-unavailable" in (w.status()["coordinator"].get("deferredReason") or ""), timeout=20),
              "pulls are held: model-unavailable", w.status()["coordinator"])
        time.sleep(8)
        check(c.state()["pulls"] == 0 and c.results()["total"] == 0, "none claimed, none failed", (c.state()["pulls"], c.results()["total"]))
        doctor = w.cli("doctor")
        check("not-pulled:7b" in doctor.stdout, "doctor names the missing model", doctor.stdout[-800:])
        advice = json.loads(w.cli("doctor", "--json").stdout).get("advice", [])
        check(any(a.startswith("model-unavailable: ") for a in advice), "doctor says pulls are held for it", advice)
        never_banned(c, "model missing")
    finally:
        w.cleanup(); c.stop(); fixture.stop()


@scenario("slow-model")
def slow_model_short_timeout(model):
    """A 4 s model and subtasks whose timeoutMs is 1500: answered, none failed."""
    slow = OllamaFixture(model.url, "--loaded", "--delay-ms", "4000", "--fault-path", "/api/generate")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": slow.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        ids = c.submit("slow one", "slow two", "slow three", timeout_ms=1500)
        check(wait_for(lambda: answered_once_ok(c, ids), timeout=60), "answered ok past their timeoutMs, each once", c.results())
        durations = [r["durationMs"] for r in c.results()["results"]]
        check(all(d >= 4000 for d in durations), "with their true durations", durations)
        never_banned(c, "a 4 s model, timeoutMs 1500")
    finally:
        w.cleanup(); c.stop(); slow.stop()


@scenario("failing-model")
def failing_model_is_released(model):
    """A model server that fails every generation: each subtask is released (no result),
    the breaker holds pulls after three, and the coordinator gives the work to others."""
    failing = OllamaFixture(model.url, "--loaded", "--fail-status", "500", "--fault-path", "/api/generate")
    c = Coordinator("--requeue-stale-ms", "2000")
    w = Worker(c.url, {"kind": "ollama", "url": failing.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        c.submit(*[f"the model fails {i}" for i in range(5)])
        check(wait_for(lambda: (w.status()["coordinator"]["conduct"]["hold"] == "local-failures"), timeout=30),
              "three local failures in a row open the breaker", w.status()["coordinator"])
        conduct = w.status()["coordinator"]["conduct"]
        check(conduct["released"] >= 3 and c.results()["total"] == 0, "each was released, none posted", (conduct, c.results()["total"]))
        pulls = c.state()["pulls"]
        time.sleep(5)
        check(c.state()["pulls"] == pulls, "no pull while the breaker holds", c.state()["pulls"] - pulls)
        tasks = json.loads(w.cli("tasks", "--json").stdout)["tasks"]
        check([t["state"] for t in tasks][:3] == ["released"] * 3 and all("model_rejected_500" in (t.get("error") or "") for t in tasks[:3]),
              "tasks shows them released with the model's error", tasks[:3])
        never_banned(c, "a failing model server")
    finally:
        w.cleanup(); c.stop(); failing.stop()


@scenario("gap")
def heartbeat_gap_after_mode_off(model):
    """Work, then mode off longer than the monitor's heartbeat gap, then work: the gap is
    seen by at most one evaluation, and the worker is never banned. The monitor's windows
    are shrunk 60 times on both sides (an hour is a minute, 5 minutes 5 s)."""
    paced = PacedModel(model.url, delay_ms=800)
    c = Coordinator("--monitor-window-ms", "60000", "--heartbeat-gap-ms", "5000")
    w = Worker(c.url, {"kind": "openai", "url": paced.url, "model": "tiny"})
    try:
        w.start(env={"EDGECODER_WORKER_TEST_MONITOR_SCALE": "60"}); w.cli("mode", "on")
        first = c.submit("before the gap")
        check(wait_for(lambda: answered_once_ok(c, first), timeout=30), "work before the gap")
        w.cli("mode", "off")
        time.sleep(7)
        w.cli("mode", "on")
        check(wait_for(lambda: w.status()["coordinator"]["conduct"]["hold"] == "heartbeat-gap", timeout=15),
              "after the gap pulls wait (heartbeat-gap)", w.status()["coordinator"])
        advice = json.loads(w.cli("doctor", "--json").stdout).get("advice", [])
        check(any(a.startswith("heartbeat-gap until ") for a in advice), "doctor says why and until when", advice)
        after = c.submit("after the gap", "and more")
        time.sleep(5)
        check(c.results()["total"] == 1, "nothing claimed while the gap is in the window", c.results()["counts"])
        check(wait_for(lambda: answered_once_ok(c, after), timeout=90), "work resumes once the gap left the window", c.results()["counts"])
        banned, findings = standing(c)
        check(not banned and not findings, "not banned, and no evaluation saw the gap", (banned, findings))
    finally:
        w.cleanup(); c.stop(); paced.stop()


@scenario("bhv-restarts")
def bhv_restarts(model):
    """Ten restarts within an hour would be ten registrations (BHV008, HIGH): the tenth
    strikes, the twelfth bans. The worker registers once and goes on with its mesh token
    at every later start."""
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        for _ in range(12):
            w.start(); w.cli("mode", "on")
            wait_for(lambda: w.status()["coordinator"]["registered"] or c.state()["blacklisted"], timeout=10)
            w.stop()
        state = c.state()
        print(f"# 12 restarts: {len(state['registrations'])} registrations", flush=True)
        check(len(state["registrations"]) == 1, "one registration for 12 starts", len(state["registrations"]))
        check(not state["blacklisted"], "12 restarts within the hour: the worker is not blacklisted", state["blacklisted"])
        check(not state["violations"], "12 restarts: no rule hit", [(v["rule"], v["at"]) for v in state["violations"]])
    finally:
        w.cleanup(); c.stop()


@scenario("sandbox")
def sandbox_required(model):
    """A tenant's subtask needs an agent with a sandbox: the coordinator answers
    sandboxRequired and keeps it queued; the worker counts that as its own hold reason."""
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        c.dev("POST", "/_dev/subtasks", [{"input": "tenant work", "id": "tenant-1",
                                          "projectMeta": {"projectId": "p", "tenantId": "acme", "resourceClass": "cpu", "priority": 50}}])
        check(wait_for(lambda: w.status()["power"]["held"].get("sandbox-required", 0) >= 2, timeout=20),
              "each sandboxRequired answer is counted under sandbox-required", w.status()["power"]["held"])
        check("sandbox-required" in (w.status()["coordinator"].get("deferredReason") or ""), "status says why", w.status()["coordinator"])
        check(c.results()["total"] == 0 and c.state()["pullAnswers"].get("subtask", 0) == 0, "nothing claimed, nothing posted")
    finally:
        w.cleanup(); c.stop()


class CoderModel:
    """IntegrationTests/model-server/coder_model.py: a stand-in model that writes the programs the
    subtask's text scripts (the tiny llama.cpp model writes random words)."""
    def __init__(self, delay_ms=300):
        self.log = tempfile.mktemp(prefix="ecw-coder-", suffix=".jsonl")
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "IntegrationTests/model-server/coder_model.py"), "--port", "0",
                                         "--delay-ms", str(delay_ms), "--log", self.log],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.process.stdout.readline().strip().split(" ")[-1]

    def prompts(self):
        try:
            with open(self.log) as f:
                return [json.loads(line)["prompt"] for line in f]
        except FileNotFoundError:
            return []

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.log)


def sandbox_execution(mode):
    """execution.* for the container engine of this host: ECW_SANDBOX_ENGINE (podman when
    unset), ECW_SANDBOX_ENGINE_ARGS (a JSON list, e.g. ["--runtime","runc"] where crun
    cannot run) and ECW_SANDBOX_IMAGE."""
    execution = {"mode": mode, "engineArguments": json.loads(os.environ.get("ECW_SANDBOX_ENGINE_ARGS", "[]"))}
    if os.environ.get("ECW_SANDBOX_ENGINE"):
        execution["engine"] = os.environ["ECW_SANDBOX_ENGINE"]
    if os.environ.get("ECW_SANDBOX_IMAGE"):
        execution["image"] = os.environ["ECW_SANDBOX_IMAGE"]
    return execution


TENANT = {"projectId": "p", "tenantId": "acme", "resourceClass": "cpu", "priority": 50}


@scenario("code")
def code_subtasks(model):
    """#29: code subtasks as EdgeCoder's swarm workers do them. With execution.mode text the
    worker registers sandboxMode none and a tenant's subtask stays queued (sandboxRequired);
    with a usable container engine it registers docker, gets the work, and posts what the
    programs printed: a broken first program is fixed by the reflection (python and
    javascript), a program that fails twice is posted as failed with its stderr.
    Needs the sandbox image (IntegrationTests/suites/sandbox.sh builds it and runs this)."""
    coder = CoderModel()
    c = Coordinator()
    backend = {"kind": "openai", "url": coder.url, "model": "coder"}
    w = Worker(c.url, backend, extra={"execution": sandbox_execution("text")})
    try:
        w.start(); w.cli("mode", "on")
        check(wait_for(lambda: c.state()["registrations"], timeout=20) and c.state()["registrations"][-1]["body"].get("sandboxMode") == "none",
              "execution.mode text: registered with sandboxMode none", c.state()["registrations"][-1:])
        c.dev("POST", "/_dev/subtasks", [{"id": "py-1", "language": "python", "projectMeta": TENANT,
                                          "input": "Print the sum of 1 to 10.\nfirst: print(sum(range(1, 11))\nprogram: print(sum(range(1, 11)))"}])
        check(wait_for(lambda: w.status()["power"]["held"].get("sandbox-required", 0) >= 1, timeout=20),
              "a tenant's subtask is kept from it (sandboxRequired)", w.status()["power"]["held"])
        check(w.status()["execution"]["answering"] == "text", "status: code subtasks answered as text", w.status()["execution"])
        check(w.stop() == 0, "stopped")

        w2 = Worker(c.url, backend, extra={"execution": sandbox_execution("container"), "coordinator": {"pullIntervalMs": 1000}})
        w.cleanup()
        w = w2
        w.start(); w.cli("mode", "on")
        check(wait_for(lambda: any(r["body"].get("sandboxMode") == "docker" for r in c.state()["registrations"]), timeout=60),
              "with a usable engine: registered with sandboxMode docker", [r["body"].get("sandboxMode") for r in c.state()["registrations"]])
        c.dev("POST", "/_dev/subtasks", [
            {"id": "js-1", "language": "javascript", "projectMeta": TENANT,
             "input": "Print twice the sum of 1, 2 and 3.\nfirst: console.log([1, 2, 3].reduce((a, b) => a + b) * 2\nprogram: console.log([1, 2, 3].reduce((a, b) => a + b, 0) * 2)"},
            {"id": "fail-1", "language": "python", "projectMeta": TENANT,
             "input": "Fail on purpose.\nprogram: import sys\\nprint('half way')\\nsys.stderr.write('boom on purpose')\\nsys.exit(3)"},
        ])
        ids = ["py-1", "js-1", "fail-1"]
        check(delivered(c, ids, timeout=180), "the three code subtasks are claimed, run and posted", json.dumps(c.results())[:600])
        by_id = {r["subtaskId"]: r for r in c.results()["results"]}
        py, js, fail = by_id.get("py-1", {}), by_id.get("js-1", {}), by_id.get("fail-1", {})
        check(py.get("ok") is True and py.get("output") == "55\n", "python: the broken program was fixed by the reflection; output is its stdout", py)
        check(js.get("ok") is True and js.get("output") == "12\n", "javascript: the same, run by node", js)
        check(fail.get("ok") is False and fail.get("output") == "half way\n" and "boom on purpose" in (fail.get("error") or ""),
              "a program that fails twice: ok false, its stdout and its stderr", fail)
        prompts = coder.prompts()
        reflections = [p for p in prompts if "What went wrong" in p]
        check(any("print(sum(range(1, 11))" in p and "SyntaxError" in p for p in reflections),
              "the reflection showed the model its program and python's SyntaxError", [p[-300:] for p in reflections][:2])
        check(sum(1 for p in prompts if "numbered list of steps" in p) == 3, "one plan per subtask", len(prompts))
        beats = [h["body"].get("sandboxMode") for h in c.state()["heartbeats"][-3:]]
        check(beats and all(b == "docker" for b in beats), "heartbeats say sandboxMode docker", beats)
        execution = w.status()["execution"]
        check(execution["answering"] == "container" and execution["sandboxMode"] == "docker", "status: code subtasks run in a container", execution)
        shown = w.cli("tasks", "show", "py-1", "--json")
        check(shown.returncode == 0 and json.loads(shown.stdout)["task"]["output"] == "55\n", "tasks show py-1 has the program's output", shown.stdout[:300])
    finally:
        w.cleanup(); c.stop(); coder.stop()


SCENARIOS = [the_whole_loop, token_lifecycle, forbidden_and_blacklisted, malformed_oversized_hanging_and_gone,
             power_deferred, held_policy, crash_safety, sigterm_grace, stop_extends_systemds_timeout, ollama_backend, backend_key,
             hostile_id, full_disk, largest_values_across_kill, model_switch, own_load,
             model_server_down_then_back, model_ready_wakes_the_pull_loop, model_missing, slow_model_short_timeout, failing_model_is_released, heartbeat_gap_after_mode_off,
             bhv_restarts, sandbox_required, code_subtasks]


def chosen():
    unknown = ((ONLY or set()) | EXCEPT) - {run.scenario for run in SCENARIOS}
    if unknown:
        sys.exit(f"coordinator_suite.py: unknown scenario(s): {', '.join(sorted(unknown))}")
    return [run for run in SCENARIOS if (not ONLY or run.scenario in ONLY) and run.scenario not in EXCEPT]


def run_in_processes(runs):
    """Each scenario in a child process (`--only NAME`), JOBS at a time. A child's lines are
    printed together when it ends, so that one scenario reads as in a serial run; its
    summary line is added to this run's counts (a child that ends without one failed)."""
    import concurrent.futures, re
    global passes, failures

    def child(run):
        started = time.time()
        done = subprocess.run([sys.executable, os.path.abspath(__file__), BINARY, "--only", run.scenario],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return run, done, time.time() - started

    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        for future in concurrent.futures.as_completed([pool.submit(child, run) for run in runs]):
            run, done, took = future.result()
            lines = done.stdout.splitlines()
            summary = re.fullmatch(r"(\d+) passed, (\d+) failed", lines[-1]) if lines else None
            print("\n".join(lines[:-1] if summary else lines), flush=True)
            if summary:
                passes += int(summary.group(1))
                failures += int(summary.group(2))
            if not summary or (done.returncode != 0 and int(summary.group(2)) == 0):
                check(False, f"scenario {run.scenario} ran to the end", f"exit {done.returncode}, no summary line")
            print(f"# {run.scenario} took {took:.0f} s", flush=True)


def main():
    runs = chosen()
    if JOBS > 1 and len(runs) > 1:
        run_in_processes(runs)
        print(f"{passes} passed, {failures} failed")
        sys.exit(1 if failures else 0)
    model = ModelServer()
    try:
        for run in runs:
            print(f"# {run.scenario}", flush=True)
            try:
                run(model)
            except Exception as error:  # a scenario that crashes is a failure, not a stop
                check(False, f"scenario {run.scenario} ran to the end", repr(error))
    finally:
        model.stop()
    print(f"{passes} passed, {failures} failed")
    sys.exit(1 if failures else 77 if skips and not passes else 0)


main()
