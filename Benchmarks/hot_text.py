#!/usr/bin/env python3
"""Writes the link order of the functions the daemon runs when it starts and idles in mode
`on` (Sources/edgecoder-worker/hot-text.order, read by the release link: Package.swift).

    python3 Benchmarks/hot_text.py [BINARY] [OUT]     (make hot-text)

Why: the kernel maps a program's text in pieces of 64 KiB or more around each page fault
(fault-around; larger over ext4's large folios). The idle path (heartbeat, pull, telemetry,
JSON, the Swift runtime) is about 0.9 MiB of code spread over the 8.6 MiB text, and touched
108 pieces of 64 KiB: 6.8 MiB resident for 0.9 of code. Laid out together they fit in
about 1 MiB.

How: BINARY (a release build, default .build/release/edgecoder-worker) runs under
valgrind's callgrind (its debug information removed first: valgrind 3.19 cannot read what
clang 21 writes) through the start, 10 s in mode `off`, 45 s in mode `on` against the dev
coordinator with the Ollama-API fixture (heartbeats every 15 s, pulls every 5 s), two
subtasks, and a clean stop. Every function of the binary that ran is written by its
symbol name, sorted so that a new profile diffs well; lld places them first
(`--symbol-ordering-file`; the release build gives each function a section of its own,
`-function-sections`, so that it can). A function renamed since the profile is simply not
placed: the file goes stale slowly, never wrong. The Swift runtime's own functions that
share a section with others (its local ones) stay where they are.
"""
import json, os, re, shutil, signal, subprocess, sys, tempfile, time
from bench_http import http, start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".build/release/edgecoder-worker"))
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "Sources/edgecoder-worker/hot-text.order")


def functions_run(profile, program):
    """The names of the functions of `program` in a callgrind profile (name compression:
    `ob=(n) name` once, `ob=(n)` after; the same for fn)."""
    objects, names, current, ran = {}, {}, None, set()
    with open(profile, errors="replace") as f:
        for line in f:
            m = re.match(r"^(ob|cob)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                kind, number, name = m.groups()
                if name:
                    objects[number] = name
                if kind == "ob":
                    current = objects.get(number)
                continue
            m = re.match(r"^(fn|cfn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                kind, number, name = m.groups()
                if name:
                    names[number] = name
                if kind == "fn" and current == program:
                    ran.add(names[number])
    # callgrind marks a recursive call's copy with 'N; the function is the same.
    return {name for name in ran if "'" not in name}


if not shutil.which("valgrind"):
    sys.exit("hot_text.py: valgrind is not installed (apt-get install valgrind)")
work = tempfile.mkdtemp(prefix="ecw-hot-")
procs = []
try:
    program = os.path.join(work, "edgecoder-worker")
    subprocess.run(["objcopy", "--strip-debug", binary, program], check=True)
    coordinator, curl = start([sys.executable, f"{ROOT}/IntegrationTests/coordinator/dev_coordinator.py", "--port", "0", "--no-mesh-token", "--no-monitoring"])
    procs.append(coordinator)
    fixture, furl = start([sys.executable, f"{ROOT}/IntegrationTests/model-server/ollama_fixture.py", "--port", "0", "--model", "tiny", "--quiet"])
    procs.append(fixture)
    config = {"coordinator": {"url": curl}, "backend": {"kind": "ollama", "url": furl, "model": "tiny", "maxTokens": 8}, "execution": {"mode": "text"}}
    with open(f"{work}/config.json", "w") as f:
        json.dump(config, f)
    cli = lambda *a: subprocess.run([binary, *a, "--runtime-dir", f"{work}/run"], capture_output=True, text=True)
    profile = f"{work}/callgrind.out"
    daemon = subprocess.Popen(["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={profile}", program, "run",
                               "--config", f"{work}/config.json", "--state-dir", f"{work}/state", "--runtime-dir", f"{work}/run"],
                              stderr=subprocess.DEVNULL)
    procs.append(daemon)
    deadline = time.monotonic() + 120
    while cli("status").returncode != 0:
        if daemon.poll() is not None or time.monotonic() > deadline:
            sys.exit("hot_text.py: the daemon did not start under valgrind")
        time.sleep(0.2)
    time.sleep(10)
    cli("mode", "on")
    time.sleep(45)
    ids = http("POST", curl + "/_dev/subtasks", [{"input": "one"}, {"input": "two"}])["ids"]
    deadline = time.monotonic() + 120
    while http("GET", curl + "/_dev/results")["total"] < len(ids) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(10)
    cli("mode", "off")
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=120)
    ran = functions_run(profile, program)
    with open(out, "w") as f:
        f.write("".join(f"{name}\n" for name in sorted(ran)))
    print(f"hot_text.py: {len(ran)} functions ran; their names written to {os.path.relpath(out, ROOT)}")
finally:
    for process in procs:
        if process.poll() is None:
            process.kill()
            process.wait()
    shutil.rmtree(work, ignore_errors=True)
