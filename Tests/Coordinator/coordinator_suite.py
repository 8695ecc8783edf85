#!/usr/bin/env python3
"""Mode `on` end to end (issue 4): the real daemon binary against the development
coordinator (Tests/DevCoordinator) and a real model server (llama.cpp's OpenAI-compatible
server with a tiny random model, Tests/ModelServer), all on loopback.

Each check prints `ok - ...` or `not ok - ...`; the exit status is 0 only if all pass.
Usage: coordinator_suite.py BINARY [--only NAME]
"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BINARY = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".build/debug/edgecoder-worker"))
ONLY = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None

failures = 0
passes = 0


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
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/DevCoordinator/dev_coordinator.py"), "--port", "0", *args],
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

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class ModelServer:
    """llama.cpp's server from the cached test bed, plus optionally the Ollama fixture."""

    def __init__(self):
        prepared = subprocess.run(["bash", os.path.join(ROOT, "Tests/ModelServer/prepare.sh")], capture_output=True, text=True)
        if prepared.returncode != 0:
            raise RuntimeError("Tests/ModelServer/prepare.sh failed: " + prepared.stderr[-2000:])
        self.port = free_port()
        started = subprocess.run(["bash", os.path.join(ROOT, "Tests/ModelServer/start-llama.sh"), str(self.port)], capture_output=True, text=True)
        if started.returncode != 0:
            raise RuntimeError("start-llama.sh failed: " + started.stderr[-2000:])
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "Tests/ModelServer/stop-llama.sh"), str(self.port)], capture_output=True)


class OllamaFixture:
    def __init__(self, upstream, *args):
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/ModelServer/ollama_fixture.py"), "--port", "0",
                                         "--upstream", upstream + "/v1/completions", "--model", "tiny", *args],
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
                  "backend": {**backend, "maxTokens": 16}}
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

    def start(self, env=None):
        args = [BINARY, "run", "--config", f"{self.dir}/config.json", "--state-dir", f"{self.dir}/state", "--runtime-dir", f"{self.dir}/run"]
        args += ["--sysfs-root", self.sysfs_root]
        self.process = subprocess.Popen(args, stderr=self.log, env={**os.environ, **(env or {})})
        wait_for(lambda: self.cli("status").returncode == 0, timeout=10)

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


def delivered(coordinator, ids, timeout=20):
    return wait_for(lambda: all(coordinator.results()["counts"].get(i, 0) >= 1 for i in ids), timeout=timeout)


def scenario(name):
    def wrap(function):
        function.scenario = name
        return function
    return wrap


@scenario("loop")
def the_whole_loop(model):
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
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
        w.cleanup(); c.stop()


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
    c = Coordinator("--requeue-stale-ms", "3000")
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"}, extra={"log": {"level": "debug"}})
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
        w.cleanup(); c.stop()


@scenario("deferred")
def power_deferred(model):
    c = Coordinator()
    w = Worker(c.url, {"kind": "openai", "url": model.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
        c.switch("power-deferred", deferMs=2500, reason="high_cpu_defer")
        first = wait_for(lambda: w.status()["coordinator"].get("deferredReason"), timeout=10)
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
    slow = OllamaFixture(model.url, "--delay-ms", "4000")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": slow.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        wait_for(lambda: w.status()["coordinator"]["registered"], timeout=10)
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

        # Too late to run again: reported as worker_restarted.
        c.switch("normal")
        [late] = c.submit("times out while the worker is down", timeout_ms=3000)
        wait_for(lambda: any(n.startswith("journal-") for n in os.listdir(outbox)), timeout=10, interval=0.01)
        w.stop(signal.SIGKILL)
        time.sleep(3.5)
        w.start()
        check(delivered(c, [late], timeout=30), "a subtask whose timeout passed is reported after restart")
        result = [r for r in c.results()["results"] if r["subtaskId"] == late][-1]
        check(result["ok"] is False and result.get("error") == "worker_restarted", "as ok: false, worker_restarted", result)
    finally:
        w.cleanup(); c.stop(); slow.stop()


@scenario("sigterm")
def sigterm_grace(model):
    slow = OllamaFixture(model.url, "--delay-ms", "1500")
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
        check(w.status()["backend"]["modelState"] == "ready", "the ollama readiness probe (/api/tags) says ready")
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


@scenario("model-error")
def model_error(model):
    failing = OllamaFixture(model.url, "--fail-status", "500", "--fault-path", "/api/generate")
    c = Coordinator()
    w = Worker(c.url, {"kind": "ollama", "url": failing.url, "model": "tiny"})
    try:
        w.start(); w.cli("mode", "on")
        [sub] = c.submit("the model server fails")
        check(delivered(c, [sub]), "a subtask the model server fails is still posted")
        result = [r for r in c.results()["results"] if r["subtaskId"] == sub][-1]
        check(result["ok"] is False and str(result.get("error", "")).startswith("model_rejected_500: ") and len(result["error"]) > 20,
              "as ok: false with error \"model_rejected_500: <detail>\" (ModelError's code, as on Bluetooth)", result)
        tasks = json.loads(w.cli("tasks", "--json").stdout)["tasks"]
        check([t.get("error") for t in tasks if t["id"] == sub] == [result.get("error")], "`tasks` keeps the same error", tasks[:1])
    finally:
        w.cleanup(); c.stop(); failing.stop()


def main():
    model = ModelServer()
    try:
        scenarios = [the_whole_loop, token_lifecycle, forbidden_and_blacklisted, malformed_oversized_hanging_and_gone,
                     power_deferred, held_policy, crash_safety, sigterm_grace, ollama_backend, backend_key, model_error]
        for run in scenarios:
            if ONLY and run.scenario != ONLY:
                continue
            print(f"# {run.scenario}", flush=True)
            try:
                run(model)
            except Exception as error:  # a scenario that crashes is a failure, not a stop
                check(False, f"scenario {run.scenario} ran to the end", repr(error))
    finally:
        model.stop()
    print(f"{passes} passed, {failures} failed")
    sys.exit(1 if failures else 0)


main()
