#!/usr/bin/env bash
# The container sandbox of code subtasks (issue 29) with the real engine, driven through
# the real binary (`edgecoder-worker sandbox run|check|build`): hostile programs against
# the limits. The image is built once into the engine's local store (`sandbox build`,
# about 70 s here) and kept; a run skips the build when the tag exists.
#
#   EDGECODER_WORKER_BIN=.build/debug/edgecoder-worker bash IntegrationTests/suites/sandbox.sh
#
# EDGECODER_SANDBOX_ENGINE (default podman) and EDGECODER_SANDBOX_IMAGE (default
# localhost/edgecoder-sandbox:1) choose what runs. On a host whose cgroups are not the
# unified v2 hierarchy (a v1/v2 hybrid) crun refuses every container, so the suite passes
# `--runtime runc` there. Exits 77 when the engine is not installed and cannot be (not root).
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin="${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}"
engine="${EDGECODER_SANDBOX_ENGINE:-podman}"
image="${EDGECODER_SANDBOX_IMAGE:-localhost/edgecoder-sandbox:1}"
work="$(mktemp -d /tmp/sandbox-suite.XXXXXX)"
chmod 755 "$work"
socket_pid=
cleanup() {
  [[ -n "$socket_pid" ]] && kill "$socket_pid" 2>/dev/null && wait "$socket_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if [[ ! -x "$bin" ]]; then
  not_ok "no binary at $bin (build it first: swift build)"
  tap_done; exit $?
fi
if ! command -v "$engine" >/dev/null; then
  tap_skip "sandbox: $engine is not installed (make deps as root installs podman, runc, uidmap, mmdebstrap)"
fi
source IntegrationTests/lib/sandbox-image.sh
read -ra engine_args <<<"$(sandbox_runtime_args "$engine")"
((${#engine_args[@]})) && echo "# cgroups are not the unified v2 hierarchy here: crun cannot run, so --runtime runc"
sandbox() { "$bin" sandbox "$1" --engine "$engine" "${engine_args[@]}" "${@:2}"; }
containers() { "$engine" "${engine_args[@]/--engine-arg=--runtime=runc/--runtime=runc}" ps -a --filter name=edgecoder-sandbox- --format '{{.Names}}'; }

# --- the image, once -------------------------------------------------------------------
sandbox_image_ensure "$bin" "$engine" "$image" "$work/build.log" "${engine_args[@]}"
case $? in
  0) if ((SANDBOX_IMAGE_BUILT)); then
       ok "sandbox build made $image from Debian's packages"
       sed 's/^/# /' "$work/build.log"
     else
       echo "# $image is in $engine's store: no build"
     fi ;;
  1) not_ok "sandbox build"; sed 's/^/# /' "$work/build.log" ;;
  *) not_ok "another run holds .cache/sandbox/.lock"; tap_done; exit $? ;;
esac

# run LANG [OPTIONS...]: the program on stdin; stdout in $work/out, stderr in $work/err,
# exit status in $rc, wall time in $ms.
run() {
  local language=$1 start
  shift
  start=$(date +%s%N)
  sandbox run --language "$language" "$@" >"$work/out" 2>"$work/err"
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
}
tap_detail() { echo "exit $rc, ${ms} ms, stdout: $(head -c 300 "$work/out" | tr '\n' '|'), stderr: $(head -c 300 "$work/err" | tr '\n' '|')"; }
has() { grep -q -- "$2" "$work/$1"; }

check "sandbox check: the engine, the image and a trivial program" sandbox check --image "$image"

# --- the languages: a trivial program succeeds, a broken one fails with its error ------
run python --image "$image" <<<'print("hello from python")'
check "python: a trivial program prints and exits 0" test "$rc" = 0 -a "$(cat "$work/out")" = "hello from python"
run python --image "$image" <<<'print(undefined_name)'
check "python: a broken program exits 1 with its error on stderr" eval 'test $rc = 1 && has err NameError && test ! -s $work/out'
run javascript --image "$image" <<<'console.log("hello from " + "javascript")'
check "javascript: a trivial program prints and exits 0" test "$rc" = 0 -a "$(cat "$work/out")" = "hello from javascript"
run javascript --image "$image" <<<'console.log(notDefined.x)'
check "javascript: a broken program exits 1 with its error on stderr" eval 'test $rc = 1 && has err ReferenceError'
printf 'import sys\nprint("from a file", file=sys.stderr)\nsys.exit(3)\n' >"$work/program.py"
run python --image "$image" "$work/program.py" </dev/null
check "a program from a file: its stderr and its own exit status 3" eval 'test $rc = 3 && has err "from a file"'

# --- the network: none --------------------------------------------------------------------
run python --image "$image" <<'PY'
import socket
results = []
for host, port in [("1.1.1.1", 53), ("10.0.2.2", 80), ("127.0.0.1", 22)]:
    try:
        socket.create_connection((host, port), timeout=1).close()
        results.append(f"{host} CONNECTED")
    except OSError as error:
        results.append(f"{host} refused ({error.__class__.__name__})")
try:
    socket.getaddrinfo("deb.debian.org", 80)
    results.append("dns RESOLVED")
except OSError:
    results.append("dns refused")
print("\n".join(results))
print(open("/proc/net/dev").read())
PY
check "network: no connection and no name resolution leave the container" eval 'test $rc = 0 && ! has out CONNECTED && ! has out RESOLVED && has out "dns refused"'
check "network: the container has no interface but lo" eval '! grep -Eq "^ *(eth|en|wl|veth|tap)" $work/out'

# --- processes: 50 at most; a fork bomb is stopped ------------------------------------------
run python --image "$image" <<'PY'
import os, time
children = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
except OSError as error:
    print(f"fork refused after {children} children: {error.strerror}")
PY
forks=$(grep -o 'after [0-9]* children' "$work/out" | grep -o '[0-9]*')
check "pids: fork refused within the limit of 50 (after ${forks:-?} children)" eval 'test $rc = 0 && test -n "$forks" && test "$forks" -lt 50'
run python --image "$image" --timeout-ms 3000 <<'PY'
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
PY
check "a fork bomb runs into the time limit (exit 124), not the host" test "$rc" = 124
check "the fork bomb's processes are gone from the host" eval '! pgrep -u 65534 -f "python3 -I -" >/dev/null'

# --- memory: 1 GiB is killed -------------------------------------------------------------
run python --image "$image" --json <<'PY'
block = bytearray(1 << 30)
for i in range(0, len(block), 4096):
    block[i] = 1
print("allocated 1 GiB")
PY
check "memory: 1 GiB allocated is killed by signal 9 (exit 137) and reported" \
  eval 'test $rc = 137 && has out "\"kind\":\"killed\",\"signal\":9" && ! has out "allocated 1 GiB"'

# --- time: an endless loop is killed at the limit with its whole container ------------------
run python --image "$image" --timeout-ms 2000 <<'PY'
import subprocess
subprocess.Popen(["sleep", "987654"])
print("looping", flush=True)
while True:
    pass
PY
check "an endless loop is killed at the 2000 ms limit (exit 124, ${ms} ms)" eval 'test $rc = 124 && has err "2000 ms limit"'
check "nothing of it is left on the host (ps)" eval '! pgrep -f "sleep 987654" >/dev/null && ! pgrep -u 65534 -f "python3 -I -" >/dev/null'
check "no container is left ($engine ps -a)" test -z "$(containers)"

# --- the file system: read-only but /tmp --------------------------------------------------
run python --image "$image" <<'PY'
import os
for path in ["/etc/edgecoder", "/root-file", "/var/tmp/x", "/usr/bin/x", "/home/x", "/run/x", "/dev/shm/x", "/tmp/allowed"]:
    try:
        with open(path, "w") as f:
            f.write("x")
        print(f"{path} WRITTEN")
    except OSError as error:
        print(f"{path} refused ({error.strerror})")
print("uid", os.getuid(), "gid", os.getgid())
PY
check "writes outside /tmp (and /dev/shm, private as /tmp) are refused" \
  eval 'test $rc = 0 && test $(grep -c WRITTEN $work/out) = 2 && has out "^/tmp/allowed WRITTEN" && has out "^/dev/shm/x WRITTEN"'
check "the program runs as uid 65534, not root" has out "uid 65534 gid 65534"
run python --image "$image" <<'PY'
for line in open("/proc/self/status"):
    if line.split(":")[0] in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp"):
        print(line.split()[0], line.split()[1])
PY
check "no capabilities, no new privileges, a seccomp filter" \
  eval 'has out "^CapEff: 0000000000000000" && has out "^CapBnd: 0000000000000000" && has out "^NoNewPrivs: 1" && has out "^Seccomp: 2"'
run python --image "$image" <<'PY'
import os, stat
path = "/tmp/run-me"
open(path, "w").write("#!/bin/sh\necho EXECUTED\n")
os.chmod(path, 0o755)
try:
    os.execv(path, [path])
except OSError as error:
    print(f"exec refused ({error.strerror})")
PY
check "/tmp is noexec" eval 'has out "exec refused" && ! has out EXECUTED'

# --- the host's secrets: not there ----------------------------------------------------------
token="secret-$RANDOM$RANDOM$RANDOM"
mkdir -p "$work/state" "$work/credentials" "$work/run"
echo "$token" >"$work/credentials/registration-token"
echo "agent-$token" >"$work/state/agent-id"
python3 -c 'import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); time.sleep(600)' "$work/run/control.sock" &
socket_pid=$!
for _ in $(seq 50); do [[ -S $work/run/control.sock ]] && break; sleep 0.1; done
sed "s|@WORK@|$work|g; s|@TOKEN@|$token|g" >"$work/probe.py" <<'PY'
import os
found = []
for path in ["@WORK@", "@WORK@/state/agent-id", "@WORK@/credentials/registration-token", "@WORK@/run/control.sock",
             "/var/lib/edgecoder-worker", "/run/edgecoder-worker/control.sock", "/etc/edgecoder-worker", "/run/credentials",
             "/run/dbus/system_bus_socket", "/run/podman/podman.sock", "/var/run/docker.sock", "/proc/1/root/@WORK@"]:
    if os.path.lexists(path):
        found.append(path)
print("visible:", found)
print("token in environment:", "@TOKEN@" in repr(dict(os.environ)))
print("token in mounts:", "@WORK@" in open("/proc/self/mountinfo").read())
print("pid 1:", open("/proc/1/cmdline").read().replace("\0", " "))
PY
CREDENTIALS_DIRECTORY="$work/credentials" EDGECODER_TOKEN="$token" run python --image "$image" "$work/probe.py" </dev/null
check "the state dir, the token and the control socket are not visible" eval 'test $rc = 0 && has out "^visible: \[\]"'
check "no variable of the worker reaches the program" has out "token in environment: False"
check "nothing of the host is mounted" has out "token in mounts: False"
check "the program sees its own processes only (pid 1 is its interpreter)" has out "^pid 1: python3 -I -"
kill "$socket_pid" 2>/dev/null; wait "$socket_pid" 2>/dev/null; socket_pid=

# --- output: 100 MiB to stdout is capped and the run still ends promptly ---------------------
# The limit is 20 s, not the default 4 s: on a 2-core host busy with other suites' VMs the
# 100 MiB took 4.99 s once (run42, docker) and the check is about what is kept and dropped;
# the time it took is printed.
run python --image "$image" --json --timeout-ms 20000 <<'PY'
import sys
block = b"x" * (1 << 20)
for _ in range(100):
    sys.stdout.buffer.write(block)
sys.stderr.write("wrote 100 MiB\n")
PY
dropped=$(grep -o '"droppedBytes":[0-9]*' "$work/out" | grep -o '[0-9]*$')
check "100 MiB to stdout: 64 KiB kept, the rest read and dropped (${dropped:-?} bytes, ${ms} ms)" \
  eval 'test $rc = 0 && test "$dropped" = $((100 * 1048576 - 65536))'
run python --image "$image" <<'PY'
import sys
sys.stdout.write("y" * (5 << 20))
PY
check "printed stdout is cut at 64 KiB with a note on stderr" eval 'test $rc = 0 && test $(wc -c <$work/out) = 65536 && has err "output cut"'

# --- the engine's failures: exit 125 with its reason -------------------------------------
run python --image localhost/edgecoder-sandbox-missing:0 <<<'print(1)'
check "an image not in the store: exit 125, the engine's reason" eval 'test $rc = 125 && has err "image not known\|No such image\|not found"'
start=$(date +%s%N)
"$bin" sandbox run --language python --engine /nonexistent/podman <<<'print(1)' >"$work/out" 2>"$work/err"; rc=$?
check "an engine that is not installed: exit 125" eval 'test $rc = 125 && has err "not an executable file"'
check "sandbox check says why the sandbox is not usable (exit 1)" eval '! sandbox check --image localhost/edgecoder-sandbox-missing:0 2>$work/err && has err "not in"'

# --- hostile command lines ---------------------------------------------------------------
head -c 2000000 /dev/zero | tr '\0' '#' >"$work/big.py"
run python --image "$image" "$work/big.py" </dev/null
check "a program over 1 MiB is refused before any engine runs (exit 1)" eval 'test $rc = 1 && has err "larger than"'
run python --image=--privileged </dev/null
check "an image that looks like an option is a usage error (exit 64)" test "$rc" = 64
run ruby --image "$image" </dev/null
check "an unknown language is a usage error (exit 64)" test "$rc" = 64

check "no container is left at the end ($engine ps -a)" test -z "$(containers)"

# --- the daemon's code loop against a coordinator, with this engine and image --------------
# The coordinator suite's `code` scenario needs the image this suite builds, so it runs here
# (coordinator.sh leaves it out), with the same engine arguments and image.
# --engine-arg=--runtime=runc → ["--runtime=runc"] for execution.engineArguments.
engine_json=$(python3 -c 'import json, sys; print(json.dumps([a.split("=", 1)[1] for a in sys.argv[1:]]))' "${engine_args[@]}")
run_tap "the coordinator suite's code scenario" env ECW_SANDBOX_ENGINE="$engine" ECW_SANDBOX_ENGINE_ARGS="$engine_json" ECW_SANDBOX_IMAGE="$image" \
  python3 IntegrationTests/coordinator/coordinator_suite.py "$bin" --only code --jobs 1
check "no container is left after the code scenario ($engine ps -a)" test -z "$(containers)"
tap_done; exit $?
