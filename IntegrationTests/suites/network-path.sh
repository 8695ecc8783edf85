#!/usr/bin/env bash
# The network path monitor against real interfaces (issue 5): the daemon runs inside
# a network namespace with a veth interface, an address and a default route, and the
# suite takes them away with `ip`, as an outage would. Needs root (ip netns).
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin=$(realpath "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}")
[ "$(id -u)" = 0 ] || tap_skip "network-path: needs root for ip netns"
# Root without network namespaces (a container without CAP_SYS_ADMIN) cannot run it either.
if ! probe=$(ip netns add "ecwprobe$$" 2>&1); then tap_skip "network-path: ip netns does not work here: $probe"; fi
ip netns del "ecwprobe$$"

ns=ecwp$$
host_if=ecwh$$
work=$(mktemp -d /tmp/ecw-path-XXXXXX)
chmod 755 "$work"
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  ip link del "$host_if" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

in_ns() { ip netns exec "$ns" "$@"; }
cli() { "$bin" "$@" --runtime-dir "$work/run"; }

# Addresses from the documentation ranges (RFC 5737, RFC 3849): no traffic is sent.
setup_network() {
  ip netns add "$ns"
  ip link add "$host_if" type veth peer name veth0 netns "$ns"
  ip link set "$host_if" up
  in_ns ip link set lo up
  in_ns ip link set veth0 up
  in_ns ip addr add 198.51.100.2/24 dev veth0
  in_ns ip -6 addr add 2001:db8:1::2/64 dev veth0 nodad
  in_ns ip route add default via 198.51.100.1 dev veth0
  in_ns ip -6 route add default via 2001:db8:1::1 dev veth0
}

# Puts back what a test took away; a link going down also flushes its IPv6 addresses.
restore_network() {
  in_ns ip link set veth0 up
  in_ns ip addr replace 198.51.100.2/24 dev veth0
  in_ns ip -6 addr replace 2001:db8:1::2/64 dev veth0 nodad
  in_ns ip route replace default via 198.51.100.1 dev veth0
  in_ns ip -6 route replace default via 2001:db8:1::1 dev veth0
}

start_daemon() {  # grace_ms
  cat > "$work/config.json" <<EOF
{"network": {"pathLossGraceMs": $1},
 "hooks": {"networkRestored": "ls -l /proc/\$\$/fd > $work/hook.fds; echo \"\$EDGECODER_EVENT \$EDGECODER_INTERFACE \$EDGECODER_MODE\" >> $work/hook.out; env > $work/hook.env; sleep 300 & echo \$! > $work/hook.bg; head -c 100000 /dev/zero | tr -c x x; exit 3", "timeoutMs": 5000}}
EOF
  # A secret in the environment and a descriptor without close-on-exec: the hook must
  # get neither (issue 12 §4).
  CREDENTIALS_DIRECTORY=/run/credentials/edgecoder-worker.service \
    ip netns exec "$ns" "$bin" run --config "$work/config.json" --state-dir "$work/state" --runtime-dir "$work/run" 2>>"$work/daemon.log" 7</dev/null &
  daemon_pid=$!
  for _ in $(seq 100); do cli status >/dev/null 2>&1 && break; sleep 0.05; done
  wait_for_status '"satisfied":true' 5 || not_ok "the path is satisfied at start"
}

stop_daemon() {
  kill "$daemon_pid"; wait "$daemon_pid"; local rc=$?; daemon_pid=
  return $rc
}

# wait_for_status PATTERN SECONDS: polls `status --json` until it matches.
wait_for_status() {
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    cli status --json 2>/dev/null | grep -q -- "$1" && return 0
    sleep 0.05
  done
  return 1
}

count_events() { cli events --json | grep -o "\"kind\":\"$1\"" | wc -l; }
mode_now() { cli mode | head -n1; }
now_ms() { date +%s%3N; }
last_event_time() { cli events --json | python3 -c "import json,sys; e=[x for x in json.load(sys.stdin)['events'] if x['kind']=='$1']; print(e[-1]['timeMs'] if e else 0)"; }

setup_network

# 1. Deleting the default routes downgrades `on` to `bluetooth`, after the grace.
start_daemon 400
cli mode on >/dev/null
t0=$(now_ms)
in_ns ip route del default
in_ns ip -6 route del default
if wait_for_status '"mode":"bluetooth"' 5; then
  t1=$(last_event_time downgrade)
  if [ $((t1 - t0)) -ge 400 ]; then ok "route removal downgrades on -> bluetooth after the grace ($((t1 - t0)) ms >= 400 ms)"
  else not_ok "downgrade came before the grace: $((t1 - t0)) ms"; fi
  cli events | grep -q 'downgrade  on -> bluetooth  network path lost: no default route' \
    && ok "the downgrade event names the reason" || not_ok "downgrade event: $(cli events | grep downgrade)"
  grep -q '"downgraded":true' "$work/state/mode.json" && ok "the downgrade is persisted" || not_ok "mode.json: $(cat "$work/state/mode.json")"
else
  not_ok "route removal did not downgrade: $(cli status)"
fi

# 2. Restoring the route records network-restored, runs the hook, stays in bluetooth.
in_ns ip route add default via 198.51.100.1 dev veth0
if wait_for_status '"networkRestoredAt"' 5; then
  ok "restoring the route records network-restored"
  [ "$(mode_now)" = bluetooth ] && ok "the mode stays bluetooth (no automatic escalation)" || not_ok "mode is $(mode_now)"
  for _ in $(seq 50); do [ -s "$work/hook.out" ] && break; sleep 0.1; done
  grep -q '^network-restored veth0 bluetooth$' "$work/hook.out" 2>/dev/null \
    && ok "hooks.networkRestored ran with the event, interface and mode" || not_ok "hook output: $(cat "$work/hook.out" 2>&1)"
  wait_for_status '"outcome":"exited with status 3"' 5 \
    && ok "the hook's exit status is recorded in status" || not_ok "hook status: $(cli status --json)"
  cli events | grep -q 'hook-ran.*exited with status 3' && ok "the hook's exit status is an event" || not_ok "no hook-ran event"
  names=$(cut -d= -f1 "$work/hook.env" | grep -v '^PWD$' | sort | tr '\n' ' ')
  [ "$names" = "EDGECODER_AGENT_ID EDGECODER_EVENT EDGECODER_INTERFACE EDGECODER_MODE LANG PATH " ] \
    && ok "the hook's environment is PATH, LANG and the EDGECODER_* variables" || not_ok "hook environment: $names"
  # The shell keeps descriptors of its own (a saved stdout at 10): look for the daemon's.
  ! grep -q ' 7 -> \| socket:' "$work/hook.fds" && grep -q ' 2 -> ' "$work/hook.fds" \
    && ok "the hook inherits none of the daemon's descriptors" || not_ok "hook descriptors: $(cat "$work/hook.fds")"
  bg=$(cat "$work/hook.bg" 2>/dev/null)
  gone=no
  for _ in $(seq 50); do
    if [ -n "$bg" ] && { ! kill -0 "$bg" 2>/dev/null || grep -q '^State:.*Z' "/proc/$bg/status" 2>/dev/null; }; then gone=yes; break; fi
    sleep 0.1
  done
  [ "$gone" = yes ] && ok "the hook's background child died with it" || { not_ok "sleep '$bg' outlived the hook"; [ -n "$bg" ] && kill "$bg" 2>/dev/null; }
  grep -q 'hooks.networkRestored: \[output cut after 8192 bytes: 91808 more bytes not logged\]' "$work/daemon.log" \
    && ok "the hook's output is cut with a note before the journal" || not_ok "hook output in the log: $(grep -c hooks.networkRestored "$work/daemon.log") lines"
  [ "$(grep -o 'hooks.networkRestored: x*' "$work/daemon.log" | wc -c)" -lt 9000 ] && ok "at most the limit of the output is logged" \
    || not_ok "the log has more of the hook's output than the limit"
  grep -q '<5>edgecoder-worker: network path satisfied again via veth0' "$work/daemon.log" \
    && ok "the restore is logged at notice level" || not_ok "no notice line in the log: $(grep -i restored "$work/daemon.log")"
  cli status | grep -q "NOTICE:   the network path is back" && ok "status shows the restore notice" || not_ok "status: $(cli status)"
else
  not_ok "no network-restored: $(cli status)"
fi
sleep 0.6
[ "$(mode_now)" = bluetooth ] && ok "still bluetooth after the grace" || not_ok "mode escalated to $(mode_now)"
cli mode on >/dev/null && [ "$(mode_now)" = on ] && ok "mode on then works" || not_ok "mode on failed"

# 3. The link going down downgrades.
in_ns ip link set veth0 down
wait_for_status '"mode":"bluetooth"' 5 && ok "link down downgrades" || not_ok "link down: $(cli status)"
cli status --json | grep -q 'veth0 is down\|no default route' && ok "status says why the path is unsatisfied" || not_ok "$(cli status --json)"
in_ns ip link set veth0 up
restore_network
wait_for_status '"satisfied":true' 5 || not_ok "path back after link up"
cli mode on >/dev/null

# 4. Removing the address downgrades (the route goes with it in the kernel, or
#    stays without a global address: either way the path is lost).
in_ns ip -6 route del default
in_ns ip -6 addr del 2001:db8:1::2/64 dev veth0
in_ns ip addr del 198.51.100.2/24 dev veth0
wait_for_status '"mode":"bluetooth"' 5 && ok "address removal downgrades" || not_ok "address removal: $(cli status)"
stop_daemon && ok "SIGTERM: exit 0" || not_ok "daemon exit status $?"

# 5. An IPv6-only path counts as satisfied.
restore_network
in_ns ip route del default
in_ns ip addr del 198.51.100.2/24 dev veth0
rm -rf "$work/state"
start_daemon 400
cli status --json | grep -q '"reason":"IPv6 default route via veth0"' && ok "an IPv6-only path is satisfied" || not_ok "IPv6 only: $(cli status --json)"
restore_network
stop_daemon >/dev/null

# 6. A route flap shorter than the grace does not downgrade.
start_daemon 1500
cli mode on >/dev/null
in_ns ip route del default; in_ns ip -6 route del default
sleep 0.2
in_ns ip route add default via 198.51.100.1 dev veth0; in_ns ip -6 route add default via 2001:db8:1::1 dev veth0
sleep 2
[ "$(mode_now)" = on ] && [ "$(count_events downgrade)" = 0 ] && ok "a 200 ms flap under a 1500 ms grace does not downgrade" || not_ok "flap downgraded: $(cli events)"

# 7. In off nothing changes mode.
cli mode off >/dev/null
in_ns ip route del default; in_ns ip -6 route del default
sleep 2
[ "$(mode_now)" = off ] && [ "$(count_events downgrade)" = 0 ] && ok "in off a lost path changes nothing" || not_ok "off changed: $(cli events)"
cli status --json | grep -q '"satisfied":false' && ok "in off the monitor still reports the path" || not_ok "$(cli status --json)"
stop_daemon >/dev/null

tap_done
