#!/usr/bin/env bash
# Where the daemon's log records go (service §2). Structured journal records read by a
# stand-in journald: no journald runs on
# the build machines, so a private mount namespace puts a datagram socket of our own at
# /run/systemd/journal/socket, where sd_journal_sendv sends, and this suite decodes the
# native protocol the real journald reads. The VM suite checks the same records with
# `journalctl EDGECODER_EVENT=…` under a real systemd.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=$(realpath "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}")
source IntegrationTests/lib/tap.sh

[ "$(id -u)" = 0 ] || tap_skip "needs root for a private mount namespace (unshare -m)"
unshare -m --propagation private true 2>/dev/null || tap_skip "unshare -m is not permitted here"
command -v script >/dev/null || tap_skip "script(1) is missing (util-linux)"

work=$(mktemp -d /tmp/ecw-journal-XXXXXX)
trap 'rm -rf "$work"' EXIT
echo '{"policy": {"minBatteryPct": 20}}' > "$work/config.json"

run_tap "the stand-in journald suite ran" unshare -m --propagation private python3 - "$bin" "$work" <<'PY'
import json, os, signal, socket, struct, subprocess, sys, time
binary, work = sys.argv[1], sys.argv[2]
# Only this namespace sees the tmpfs: the host's /run is untouched.
subprocess.run(["mount", "-t", "tmpfs", "stand-in-journald", "/run"], check=True)
os.makedirs("/run/systemd/journal")
journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
journal.bind("/run/systemd/journal/socket")
journal.settimeout(0.2)

def parse(datagram):
    """journald's native protocol: KEY=value\n, or KEY\n + le64 length + bytes + \n."""
    fields, i = {}, 0
    while i < len(datagram):
        nl = datagram.index(b"\n", i)
        line = datagram[i:nl]
        if b"=" in line:
            key, value = line.split(b"=", 1); i = nl + 1
        else:
            key = line; size = struct.unpack("<Q", datagram[nl + 1:nl + 9])[0]
            value = datagram[nl + 9:nl + 9 + size]; i = nl + 9 + size + 1
        fields.setdefault(key.decode(), []).append(value.decode("utf-8", "replace"))
    return fields

records = []
def drain(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            records.append(parse(journal.recv(1 << 20)))
        except socket.timeout:
            pass

def ok(cond, desc, detail=""):
    print(("ok - " if cond else "not ok - ") + desc + ("" if cond else f" ({detail})"), flush=True)

stderr_path = f"{work}/stderr"
err = open(stderr_path, "w")
st = os.fstat(err.fileno())
env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
env.pop("NOTIFY_SOCKET", None)
run = f"{work}/run"
daemon = subprocess.Popen([binary, "run", "--config", f"{work}/config.json", "--state-dir", f"{work}/state", "--runtime-dir", run],
                          stderr=err, env=env)
for _ in range(200):
    if os.path.exists(f"{run}/control.sock"): break
    time.sleep(0.05)
drain(1)
subprocess.run([binary, "policy", "set", "minBatteryPct", "25", "--runtime-dir", run], capture_output=True)
with open(f"{work}/config.json", "w") as f: f.write('{"policy": {"minBatteryPct": 20}, "bluetooth": {"maxClients": 2}}')
daemon.send_signal(signal.SIGHUP)
drain(1.5)
daemon.send_signal(signal.SIGTERM)
daemon.wait(timeout=20)
drain(0.5)
err.close()

def find(pred):
    return [r for r in records if pred(r)]
ready = find(lambda r: any("ready: mode off" in m for m in r.get("MESSAGE", [])))
ok(len(ready) == 1, "the ready line is one journal record", [r.get("MESSAGE") for r in records][:5])
if ready:
    r = ready[0]
    ok(r.get("PRIORITY") == ["5"] and r.get("SYSLOG_IDENTIFIER") == ["edgecoder-worker"], "with PRIORITY=5 and SYSLOG_IDENTIFIER=edgecoder-worker", r)
    ok(r.get("EDGECODER_COMPONENT") == ["edgecoder-worker"], "and the daemon's part as EDGECODER_COMPONENT", r)
    ok(r.get("EDGECODER_EVENT") == ["daemon-started"] and r.get("EDGECODER_MODE") == ["off"], "and EDGECODER_EVENT=daemon-started, EDGECODER_MODE=off", r)
ok(len(find(lambda r: r.get("EDGECODER_EVENT") == ["daemon-stopped"])) == 1, "the stop is a record with EDGECODER_EVENT=daemon-stopped")
policy = find(lambda r: r.get("EDGECODER_EVENT") == ["policy-changed"])
ok(len(policy) == 1 and "minBatteryPct set to 25" in policy[0]["MESSAGE"][0], "policy set is a record with EDGECODER_EVENT=policy-changed", policy)
reload = find(lambda r: r.get("EDGECODER_EVENT") == ["config-reloaded"])
ok(len(reload) == 1 and reload[0].get("EDGECODER_NEEDS_RESTART") == ["bluetooth.maxClients"],
   "the reload is a record with EDGECODER_EVENT=config-reloaded and the keys that need a restart", reload)
ok(all(r.get("SYSLOG_IDENTIFIER") == ["edgecoder-worker"] and "PRIORITY" in r for r in records) and len(records) >= 4,
   f"every record ({len(records)}) has its identifier and priority")
text = open(stderr_path).read()
ok(text == "", "nothing went to stderr as lines", text[:300])
ok(daemon.returncode == 0, "the daemon stopped cleanly", daemon.returncode)
PY
# On a terminal (script(1) gives the daemon a pseudo-terminal as stderr): plain lines,
# without the <N> priority prefixes that only journald and syslog read.
mkdir -p "$work/tty/state" "$work/tty/run"
script -qfec "$bin run --config $work/config.json --state-dir $work/tty/state --runtime-dir $work/tty/run" "$work/tty/typescript" >/dev/null 2>&1 &
script_pid=$!
for _ in $(seq 200); do grep -q "ready:" "$work/tty/typescript" 2>/dev/null && break; sleep 0.02; done
daemon_pid=$("$bin" status --json --runtime-dir "$work/tty/run" | python3 -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["pid"])')
[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid"
wait "$script_pid" 2>/dev/null
check "on a terminal the ready line is plain" grep -q "^edgecoder-worker: ready: mode off" "$work/tty/typescript"
check "and no line has a priority prefix" bash -c '! grep -q "^<[0-7]>" "$1"' _ "$work/tty/typescript"

tap_done; exit $?
