#!/bin/bash
# edgecoder-worker's Bluetooth Local mode end to end, INSIDE the BlueZ test VM (started by
# IntegrationTests/suites/bluetooth.sh through run-in-vm.sh --controllers 4 --host-port PORT).
# The daemon runs as root on hci0; worker_central.py drives it from hci1 (and hci2 for a
# second client; hci3 only advertises, see worker_central.py pad_connection).
#
# Environment (run-in-vm.sh --env): WORKER_BIN (the daemon binary, visible in the guest),
# LLAMA_PORT (llama.cpp's server on the host, reached at $BLUEZ_VM_HOST_ADDR:LLAMA_PORT),
# optional BT_PHASES (space-separated subset of: main clients neighbours bystanders badflood idle leave-mid
# classic restart smallmtu off adapter stream proxy pacing security; default all, in that order; or "bench": only the
# throughput of a 64 KiB answer at MTU 517); "pacing": 64 KiB answers from an echo model
# server in the guest at each of BT_PACING_CHANNELS (bluetoothd's [GATT] Channels, "1")
# x BT_PACING_MTUS ("517 48") x BT_PACING_SET (MS/MODE items: chunkPacingMs/bluetooth.pacing,
# "10/auto"), BT_PACING_REPS times (3), each waited for BT_PACING_WAIT s (120): the
# measurement behind docs/operating/bluetooth.md's "Pacing" and `make bench`'s pacing figures).
# Phases main, clients, neighbours, badflood, idle and leave-mid need the hci3 advertisement
# started below (pad_connection), which a bluetoothd
# restart (phases restart, smallmtu, off) takes away: keep them first.
# Daemon stderr: $VM_RESULTS/daemon.log. Prints "ok - ..."/"not ok - ..." lines and
# "# N passed, N failed" (IntegrationTests/lib/tap.sh); exits 1 if anything failed.
source "$BLUEZ_VM_DIR/guest-lib.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONUNBUFFERED=1

export WORKER_BIN="${WORKER_BIN:?WORKER_BIN not set}"
export WORKER_AGENT_ID=vmworker-0123456789abcdef
W=/tmp/ecw
export WORKER_RUNDIR=$W/run
STATE=$W/state
export HCI3_ADDR=00:AA:01:03:00:03
export LLAMA_URL="http://${BLUEZ_VM_HOST_ADDR:?no --host-port}:${LLAMA_PORT:?LLAMA_PORT not set}"
PHASES="${BT_PHASES:-main clients neighbours bystanders badflood idle leave-mid classic restart smallmtu off adapter stream proxy pacing security}"
# BT_SKIP_PHASES: phases left out of that list (another VM runs them: classic, in bluetooth-classic.sh).
for skipped in ${BT_SKIP_PHASES:-}; do PHASES=" $PHASES "; PHASES="${PHASES/ $skipped / }"; done
mkdir -p "$W" "$STATE" "$WORKER_RUNDIR"
DAEMON_PID=

cli() { "$WORKER_BIN" "$@" --runtime-dir "$WORKER_RUNDIR"; }
btj() { status_jq -c "$1" cli; } # btj JQ-FILTER: the filter applied to `status --json` (empty when it fails)
# wait_for SECS DESC CMD...: guest-lib.sh's (IntegrationTests/lib/wait.sh)
is_advertising() { [[ "$(btj '.bluetooth.advertising')" == true ]]; }
bt_summary() { btj '.bluetooth | del(.clients) ' | cut -c1-400; }

write_config() { # NAME MAXCLIENTS MAXREQUESTBYTES MAXQUEUED [MORE-BLUETOOTH-KEYS]
  cat >"$W/$1.json" <<EOF
{"agentId": "$WORKER_AGENT_ID",
 "backend": {"kind": "openai", "url": "$LLAMA_URL", "model": "tiny", "timeoutMs": 600000},
 "bluetooth": {"adapter": "hci0", "maxClients": $2, "chunkPacingMs": 10,
               "maxRequestBytes": $3, "maxQueuedRequests": $4, "maxTokens": 32768${5:+, $5}},
 "policy": {"maxCpuUsagePct": 100, "resumeDwellSec": 0},
 "log": {"level": "debug"}}
EOF
}

# BT_STAMP_LOGS=1: each line of the daemon's and the proxy's log carries the wall clock it
# was logged at (EDGECODER_LOG_CLOCK), comparable with first_piece.py's stamps.log: to
# follow one request through both programs.
DAEMON_WRAP=() # a command the daemon is started under (the classic phase drops a capability)
start_daemon() { # CONFIG-NAME
  echo "=== $(date -u +%T) run --config $1.json ===" >>"$VM_RESULTS/daemon.log"
  EDGECODER_LOG_CLOCK="${BT_STAMP_LOGS:-0}" "${DAEMON_WRAP[@]}" "$WORKER_BIN" run --config "$W/$1.json" --state-dir "$STATE" --runtime-dir "$WORKER_RUNDIR" \
    </dev/null 2>>"$VM_RESULTS/daemon.log" >>"$VM_RESULTS/daemon.log" &
  DAEMON_PID=$!
  wait_for 60 "the daemon's control socket" cli status
}

stop_daemon() { # sends SIGTERM; returns the daemon's exit status (124: it did not exit)
  [[ -n $DAEMON_PID ]] || return 0
  local pid=$DAEMON_PID end=$((SECONDS + 45)) rc
  DAEMON_PID=
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= end)); then kill -KILL "$pid"; wait "$pid" 2>/dev/null; return 124; fi
    sleep 0.2
  done
  wait "$pid"; rc=$?
  return $rc
}

# The echo model server: an Ollama-shaped server in the guest (ollama_fixture.py's echo
# mode) that answers N tokens at once, for the checks where the time must be the link's,
# not llama's (an answer of thousands of tokens from llama.cpp at nice 19 on a busy host
# took 77 s at MTU 48). Started once, by the first phase that needs it; ECHO_URL.
ECHO_PID="" ECHO_URL=""
start_echo_model() {
  [[ -n $ECHO_PID ]] && return 0
  /usr/bin/python3 -u "$REPO_ROOT/IntegrationTests/model-server/ollama_fixture.py" --port 0 --model tiny --loaded --quiet --echo-cycles 100000 \
    >"$VM_RESULTS/echo-model.out" 2>"$VM_RESULTS/echo-model.log" &
  ECHO_PID=$!
  wait_for 30 "the echo model server" grep -q listening "$VM_RESULTS/echo-model.out"
  ECHO_URL="$(sed -n 's/^ollama-fixture listening on //p' "$VM_RESULTS/echo-model.out")"
}

with_echo_backend() { # NAME NEW-NAME: NEW-NAME.json is NAME.json answered by the echo model server
  jq --arg url "$ECHO_URL" '.backend = {"kind": "ollama", "url": $url, "model": "tiny", "timeoutMs": 60000, "maxTokens": 32768}' \
    "$W/$1.json" >"$W/$2.json"
}

ensure_daemon() { # CONFIG-NAME: start the daemon in mode bluetooth unless it runs (a phase alone)
  [[ -n $DAEMON_PID ]] && return 0
  check "the daemon starts (config $1)" start_daemon "$1"
  check "mode bluetooth is accepted" test "$(cli mode bluetooth 2>/dev/null | head -n1)" = bluetooth
}

daemon_alive() { [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; }

central() { # central SCENARIO... : worker_central.py, its ok/not ok lines counted here
  run_tap "worker_central.py $*" env PYTHONPATH="$HERE" "$BLUEZ_VM_PYTHON" -u -m worker_central "$@"
}

advertise_on() { # ADAPTER LOGNAME: BlueZ's example advertisement on ADAPTER; prints its pid
  local py pid end=$((SECONDS + 90))
  py="$(bluez_example example-advertisement "$1")" || return 1
  /usr/bin/python3 -u "$py" >"$VM_RESULTS/$2" 2>&1 &
  pid=$!
  until grep -q '^Advertisement registered' "$VM_RESULTS/$2"; do
    if ! kill -0 $pid 2>/dev/null || ((SECONDS >= end)); then sed 's/^/# /' "$VM_RESULTS/$2" >&2; return 1; fi
    sleep 0.2
  done
  echo $pid
}

expect_advertising() { # DESC [SECS]: the daemon (re-)registers by itself
  local t0=$SECONDS
  if wait_for "${2:-120}" "advertising" is_advertising; then
    ok "$1 (after $((SECONDS - t0))s)"
  else
    not_ok "$1: $(bt_summary)"
  fi
}

phase() { echo "# ===== phase $1 ($(cut -d' ' -f1 /proc/uptime)s): $2"; }
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

trap 'stop_daemon >/dev/null 2>&1' EXIT

bluetoothd --version | sed 's/^/# bluetoothd /'
echo "# worker: $WORKER_BIN; model server: $LLAMA_URL"
check "the guest reaches the model server on the host ($LLAMA_URL/v1/models)" \
  curl -sf --max-time 30 -o /dev/null "$LLAMA_URL/v1/models"

# bluetoothd as docs/operating/bluetooth.md ("Pacing") tells an operator to run it: one ATT
# bearer ([GATT] Channels = 1). With its default 3, BlueZ peers open Enhanced ATT bearers and
# bluetoothd 5.66 hands notifications and write commands to whichever bearer can write: a
# chunked answer or request arrives shuffled now and then (seen once in ~10 runs each: a
# write-without-response request at MTU 517, a long answer at MTU 48), which no pause in the
# daemon can prevent. The pacing phase measures EATT on purpose (BT_PACING_CHANNELS).
# The file is the one the daemon reads for its pacing rule, so the daemon paces by bytes.
printf '[Policy]\nAutoEnable = true\n[GATT]\nChannels = 1\n' >/tmp/one-bearer.conf
mount --bind /tmp/one-bearer.conf /etc/bluetooth/main.conf
restart_bluetoothd
check "bluetoothd restarted with [GATT] Channels = 1 (one ATT bearer)" _bvm_all_powered
export BT_PACING_BY=bytes   # worker_central.py's default "by" for its pacing floor

# hci3 advertises (BlueZ's example) so hci2 can make its handle-padding connection.
PAD_PID="$(advertise_on hci3 pad-advertisement.log)" || not_ok "example advertisement on hci3 (for the second client)"

write_config small 1 4096 2
write_config two 2 65536 8
write_config chunks 2 65536 8 '"pacing": "chunks"'

# ------------------------------------------------------------------ main
if has_phase main; then
  phase main "maxClients 1, maxRequestBytes 4096, maxQueuedRequests 2, bluetoothd defaults (MTU 517)"
  check "the daemon starts (config small)" start_daemon small
  out="$(cli mode bluetooth 2>&1)"
  printf '%s\n' "$out" | sed 's/^/# mode: /'
  check "mode bluetooth is accepted" test "$(head -n1 <<<"$out")" = bluetooth
  expect_advertising "the daemon registers its GATT application and advertisement"
  st="$(btj .bluetooth)"
  echo "# status.bluetooth: $st"
  check "status: adapter hci0, address $HCI0_ADDR, state advertising, applicationRegistered" \
    test "$(jq -r '[.adapter, .address, .state, .applicationRegistered, .advertising, .problem] | @tsv' <<<"$st")" \
         = "$(printf 'hci0\t%s\tadvertising\ttrue\ttrue\t' "$HCI0_ADDR")"
  check "status: bluetoothd's one ATT bearer read from its main.conf, notifications paced by bytes" \
    test "$(jq -c '[.attBearers, .pacing]' <<<"$st")" = '[1,"bytes"]'
  # The real model's long answer crosses many chunks; answers over 64 KiB (15000 tokens) are
  # the pacing phase's, from the echo model server, where the time is the link's, not llama's.
  central discover subscribe proxy request wnr bad-input:max=4096 flood:n=5 \
          long:tokens=4000,min=16384,throughput=1 periodic two-clients:max=1 status-change tasks
  doc="$(cli doctor 2>&1)"; drc=$?
  printf '%s\n' "$doc" | grep -i -E 'bluez|bluetooth|508|hci' | head -n 20 | sed 's/^/# doctor: /'
  check "doctor names the BlueZ version (5.66) and its 508-byte write limit" \
    bash -c 'grep -q "5\.66" <<<"$1" && grep -q 508 <<<"$1"' _ "$doc"
  echo "# doctor exit $drc"
  st="$(btj .bluetooth)"
  echo "# status.bluetooth: $st"
  check "status counts served requests (requestsServed > 0)" test "$(jq '.requestsServed // 0' <<<"$st")" -gt 0
  check "the daemon is still running" daemon_alive
fi

# ------------------------------------------------------------------ two clients
if has_phase clients; then
  phase clients "maxClients 2 (daemon restarted; the mode persists)"
  stop_daemon; rc=$?
  check "the daemon stops on SIGTERM with exit 0 (exit $rc)" test $rc -eq 0
  check "the daemon starts (config two)" start_daemon two
  check "mode bluetooth persisted across the restart" test "$(cli mode 2>/dev/null | head -n1)" = bluetooth
  expect_advertising "advertising again after the daemon's restart"
  central two-clients:max=2 proxy:bytes=20000,tokens=32
  check "the daemon is still running" daemon_alive
fi

# ------------------------------------------------------------------ neighbours (protocol-bluetooth §3)
restart_with() { # CONFIG-NAME: the daemon (re)started on CONFIG-NAME, mode bluetooth, advertising
  if [[ -n $DAEMON_PID ]]; then stop_daemon; fi
  check "the daemon starts (config $1)" start_daemon "$1"
  check "mode bluetooth" test "$(cli mode bluetooth 2>/dev/null | head -n1)" = bluetooth
  expect_advertising "the daemon advertises (config $1)"
}
if has_phase neighbours; then
  phase neighbours "a plain LE device on hci1 never touches the service: never counted, refused or disconnected; allowedClients [hci3] refuses hci2"
  write_config nb 1 65536 8
  write_config nballow 1 65536 8 "\"allowedClients\": [\"$HCI3_ADDR\"]"
  restart_with nb
  by_state="$VM_RESULTS/bystander.state" by_stop="$VM_RESULTS/bystander.stop"
  rm -f "$by_state" "$by_stop"
  PYTHONPATH="$HERE" "$BLUEZ_VM_PYTHON" -u -m worker_central "bystander:file=$by_state,stop=$by_stop" >"$VM_RESULTS/bystander.log" 2>&1 &
  BY_PID=$!
  bystander_up() { grep -q '^connected' "$by_state" 2>/dev/null && ! grep -q '^disconnected' "$by_state"; }
  check "the bystander (hci1) connects to hci0" wait_for 150 "the bystander's link" bystander_up
  central neighbour-client
  check "the bystander is still connected after a client was served" bystander_up
  check "status lists no client for the bystander" test "$(btj '.bluetooth.clients | length')" = 0
  check "mode off is accepted" test "$(cli mode off 2>/dev/null | head -n1)" = off
  wait_for 30 "advertising false" bash -c '[[ "$("$0" status --json --runtime-dir "$1" | jq .bluetooth.advertising)" == false ]]' "$WORKER_BIN" "$WORKER_RUNDIR"
  sleep 3
  check "the bystander is still connected after mode off" bystander_up
  restart_with nb
  sleep 3
  check "the bystander is still connected after mode bluetooth and a daemon restart" bystander_up
  restart_with nballow
  central stranger
  check "the bystander is still connected after a stranger was refused" bystander_up
  check "the bystander was never counted: clientsNotAllowed is the stranger's 1" test "$(btj .bluetooth.clientsNotAllowed)" = 1
  touch "$by_stop"
  wait "$BY_PID"; rc=$?
  sed -n 's/^\(ok\|not ok\) - /&/p' "$VM_RESULTS/bystander.log" | sed 's/^/# bystander: /'
  check "the bystander saw no disconnect (exit $rc)" test $rc -eq 0
  check "the daemon is still running" daemon_alive
fi

# ------------------------------------------------------------------ bystanders (protocol-bluetooth §3)
# A device that only connects is never asked to pair: BT_BYSTANDER_CONNECTS (50) connects in
# a row with security open, then encrypted, each completing service discovery, and btmon
# recording no SMP PDU (no Pairing or Security Request) and no LE Start Encryption command.
# (bluetoothd -d logs "bonding_attempt_complete() … status 0xe" at every disconnect: its own
# bookkeeping, MGMT_STATUS_DISCONNECTED, not a bonding attempt: see bluetooth-pairing.md.)
if has_phase bystanders; then
  # BT_BYSTANDER_LEVELS: which security levels (open, enc), so that make test can run the
  # two loops (about 200 s each) in its two VM lanes.
  phase bystanders "${BT_BYSTANDER_CONNECTS:-50} connects in a row of a device that only connects, security ${BT_BYSTANDER_LEVELS:-open enc}: no pairing attempt"
  write_config bysopen 1 65536 8
  write_config bysenc 1 65536 8 '"security": "encrypted"'
  for level in ${BT_BYSTANDER_LEVELS:-open enc}; do
    restart_with "bys$level"
    stdbuf -oL btmon -T >"$VM_RESULTS/btmon-bystanders-$level.log" 2>&1 &
    BTMON_PID=$!
    sleep 0.5
    central "bystander-loop:n=${BT_BYSTANDER_CONNECTS:-50},label= ($level)"
    kill "$BTMON_PID"; wait "$BTMON_PID" 2>/dev/null
    check "btmon recorded the bystander's links ($level)" grep -q 'LE Connection Complete\|LE Enhanced Connection Complete' "$VM_RESULTS/btmon-bystanders-$level.log"
    check "no SMP PDU toward the bystander ($level): nobody asked it to pair" \
      bash -c '! grep -q "SMP: " "$0"' "$VM_RESULTS/btmon-bystanders-$level.log"
    check "no LE Start Encryption toward the bystander ($level)" \
      bash -c '! grep -q "LE Start Encryption (0x08|0x0019)" "$0"' "$VM_RESULTS/btmon-bystanders-$level.log"
    check "status lists no client for the bystander ($level)" test "$(btj '.bluetooth.clients | length')" = 0
  done
  check "the daemon is still running" daemon_alive
fi

if has_phase badflood; then
  phase badflood "200 writes of 254 {} from hci1: memory bounded, flooder cut off, hci2 still served"
  restart_with two
  central "badflood:n=200${BT_FLOOD_SECS:+,secs=$BT_FLOOD_SECS}"
  check "the daemon is still running" daemon_alive
  # A long flood keeps hci1 cooling down (the daemon's memory of it): the phases after it
  # use hci1 for their own clients (the proxy's central), so they start on a new daemon.
  [[ -n ${BT_FLOOD_SECS:-} ]] && stop_daemon
fi

if has_phase idle; then
  phase idle "clientIdleSec 5, maxClients 1: an idle client is evicted when another waits"
  write_config idle 1 65536 8 '"clientIdleSec": 5'
  restart_with idle
  central idle:idle=5
  check "the daemon is still running" daemon_alive
fi

if has_phase leave-mid; then
  phase leave-mid "a client leaves mid-answer with a request queued: cancelled, the next client gets nothing of it"
  restart_with two
  central leave-mid:tokens=15000
  check "the daemon is still running" daemon_alive
fi

# ------------------------------------------------------------------ Bluetooth Classic
# Needs BR/EDR controllers, so it has a VM of its own (IntegrationTests/suites/bluetooth-classic.sh: in
# a dual-mode VM bleak's LE connects to the worker time out: bluetoothd takes the worker
# for a dual-mode device and tries BR/EDR first):
#   EDGECODER_BT_PHASES=classic EDGECODER_BT_BTVIRT_MODE=dual bash IntegrationTests/suites/bluetooth.sh
# Registered, the worker's NoInputNoOutput default agent makes hci0 bondable, and the kernel
# accepts a Classic Just Works pairing by itself: kept out only while hci0 is not
# Classic-connectable (bluetoothd's default), so while hci0 is connectable (btmgmt, seen only
# in the kernel's settings) or discoverable the agent stands back
# (docs/operating/bluetooth-pairing.md).
classic_pair() { # a Classic (BR/EDR) Just Works pairing from hci1 toward hci0; 0 if it paired
  timeout 40 btmgmt --index 1 pair -t 0 -c 3 "$HCI0_ADDR" < <(exec sleep 40) 2>&1 | tee -a "$VM_RESULTS/classic.log" | grep -q "^Paired with"
}
hci0_bonded_with_hci1() { # a bond kept (Bonded), not a pairing for one link only (Paired)
  [[ "$(busctl get-property org.bluez "/org/bluez/hci0/dev_${HCI1_ADDR//:/_}" org.bluez.Device1 Bonded 2>/dev/null)" == "b true" ]]
}
set_discoverable() { # bluetoothd answers Busy while a mode change is under way: tried again
  local _
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    busctl set-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Discoverable b "$1" 2>>"$VM_RESULTS/classic.log" && return 0
    sleep 1
  done
  return 1
}
if has_phase classic; then
  phase classic "Bluetooth Classic: no first Classic pairing toward the worker's adapter, its agent standing back while hci0 is Classic-connectable or discoverable"
  if ! btmgmt_run --index 0 info | grep -q "supported settings:.*br/edr"; then
    echo "# classic: hci0 is LE only (btvirt -L): nothing to check (EDGECODER_BT_BTVIRT_MODE=dual boots BR/EDR controllers)"
  else
    write_config classic 1 65536 8 '"security": "encrypted"'
    # Without CAP_NET_ADMIN, as under the shipped unit: the kernel's settings are read
    # through an untrusted management socket.
    DAEMON_WRAP=(setpriv --bounding-set=-net_admin --inh-caps=-net_admin --)
    restart_with classic
    DAEMON_WRAP=()
    no_net_admin() { local eff; eff="$(awk '/^CapEff:/ {print $2}' "/proc/$DAEMON_PID/status")"; (( (0x$eff >> 12 & 1) == 0 )); }
    check "the daemon runs without CAP_NET_ADMIN" no_net_admin
    wait_for 30 "the worker's agent registered" test "$(btj '.bluetooth.pairingAgentRegistered')" = true
    check "the worker's agent is registered (security encrypted, pairingAgent auto on this headless guest)" \
      test "$(btj '.bluetooth.pairingAgentRegistered')" = true
    check "hci0 is bondable with the agent registered, and not Classic-connectable (bluetoothd's default)" \
      eval 'btmgmt_run --index 0 info | grep "current settings" | grep -q bondable && ! btmgmt_run --index 0 info | grep "current settings" | grep -qw connectable'
    check "a Classic Just Works pairing from hci1 fails (hci0 cannot be paged)" eval '! classic_pair'
    check "hci0 has no bond with hci1" eval '! hci0_bonded_with_hci1'
    # Page scan switched on behind bluetoothd's back: D-Bus shows nothing, the kernel's
    # settings do, and the agent stands back as for discoverable.
    check "btmgmt connectable on (hci0 Classic-connectable; bluetoothd's Adapter1 shows no change)" eval 'btmgmt_run --index 0 connectable on 2>&1 | tee -a "$VM_RESULTS/classic.log" | grep -q "Set Connectable complete"'
    wait_for 30 "the agent stands back (connectable)" test "$(btj '.bluetooth.pairingAgentRegistered')" = false
    check "hci0 Classic-connectable: the worker's agent stands back (pairingAgentRegistered false, pairingAgentReason says why)" \
      eval 'test "$(btj .bluetooth.pairingAgentRegistered)" = false && btj .bluetooth.pairingAgentReason | grep -q "hci0 is Bluetooth Classic connectable"'
    check "the journal says why (connectable)" grep -q "hci0 is Bluetooth Classic connectable (page scan on" "$VM_RESULTS/daemon.log"
    check "hci0 is not bondable with the agent standing back" eval '! btmgmt_run --index 0 info | grep "current settings" | grep -q bondable'
    # Back: in this VM the kernel answers a second scan-mode change Busy for good (a command
    # btvirt never completes: so does Discoverable false below), and a power-off ends every
    # pending one. Off, connectable off, on: bluetoothd sees the adapter come back.
    connectable_off() {
      local step
      for step in "power off:Set Powered complete" "connectable off:Set Connectable complete" "power on:Set Powered complete"; do
        # shellcheck disable=SC2086  # the step's words are btmgmt's arguments
        btmgmt_run --index 0 ${step%%:*} 2>&1 | tee -a "$VM_RESULTS/classic.log" | grep -q "${step#*:}" || return 1
      done
    }
    check "hci0 not Classic-connectable again (btmgmt power off, connectable off, power on)" connectable_off
    expect_advertising "the daemon advertises again after hci0's power cycle"
    wait_for 30 "the agent registered again" test "$(btj '.bluetooth.pairingAgentRegistered')" = true
    check "hci0 not connectable: the worker's agent is registered again" test "$(btj '.bluetooth.pairingAgentRegistered')" = true
    stands_back() {
      set_discoverable true
      wait_for 30 "the agent stands back" test "$(btj '.bluetooth.pairingAgentRegistered')" = false
      test "$(btj .bluetooth.pairingAgentRegistered)" = false && btj .bluetooth.pairingAgentReason | grep -q "hci0 is discoverable"
    }
    check "hci0 discoverable: the worker's agent stands back (status: pairingAgentRegistered false, pairingAgentReason says why)" stands_back
    check "the journal says why" grep -q "hci0 is discoverable: while it is, a Bluetooth Classic device can pair" "$VM_RESULTS/daemon.log"
    btmgmt_run --index 0 info | grep "current settings" | sed 's/^/# hci0 standing back: /'
    # Not checked here: the agent's return once hci0 is not discoverable (unit tests do):
    # bluetoothd 5.66 answered every `Discoverable false` here Busy, for good.
    classic_pair
    echo "# while discoverable, hci1's Classic pairing: $(tail -n 1 "$VM_RESULTS/classic.log"); at hci0: $(busctl get-property org.bluez "/org/bluez/hci0/dev_${HCI1_ADDR//:/_}" org.bluez.Device1 Paired 2>&1) paired, $(busctl get-property org.bluez "/org/bluez/hci0/dev_${HCI1_ADDR//:/_}" org.bluez.Device1 Bonded 2>&1) bonded"
    check "while hci0 is discoverable (the agent standing back, hci0 not bondable) hci0 keeps no bond with hci1" eval '! hci0_bonded_with_hci1'
    check "the daemon is still running" daemon_alive
  fi
fi

# ------------------------------------------------------------------ bluetoothd restart
if has_phase restart; then
  phase restart "bluetoothd restarted under the daemon"
  ensure_daemon two
  expect_advertising "the daemon advertises"
  regs="$(btj '.bluetooth.registrations // 0')"
  restart_bluetoothd
  check "bluetoothd restarted" _bvm_name_owned org.bluez
  # the daemon notices (org.bluez left and came back) and registers again by itself
  wait_for 60 "registrations to change" bash -c '[[ "$("$0" status --json --runtime-dir "$1" | jq ".bluetooth.registrations // 0")" != "$2" ]]' "$WORKER_BIN" "$WORKER_RUNDIR" "$regs"
  expect_advertising "the daemon re-registers by itself after bluetoothd's restart"
  echo "# status.bluetooth: $(bt_summary)"
  central request:tag=after-bluetoothd-restart,what=a-request-after-bluetoothd-restart
fi

# ------------------------------------------------------------------ small MTU
# ExchangeMTU below 48 is not possible here: bluetoothd 5.66 then fails "Failed to create
# GATT database for adapter" (its ATT listening socket's L2CAP IMTU must be >= 48), and
# without the [Policy] AutoEnable line a bluetoothd started with -f leaves the adapters off.
if has_phase smallmtu; then
  phase smallmtu "bluetoothd with [GATT] ExchangeMTU = 48 (both adapters; the smallest it accepts)"
  # Paced by chunks by hand (bluetooth.pacing): by bytes, a 6000-token answer at MTU 48 is
  # all out before bleak's disconnect ends, and disconnect-mid would see it whole. MTU 48 by
  # bytes is the pacing phase's.
  # The long answers come from the echo model server: what is checked here is the link at
  # MTU 48 (chunk sizes, a disconnect mid-answer), and disconnect-mid's answer would
  # otherwise wait for llama.cpp to write all 6000 tokens before its first chunk.
  start_echo_model
  with_echo_backend chunks chunks-echo
  if [[ -n $DAEMON_PID ]]; then check "the daemon stops on SIGTERM (to start paced by chunks)" stop_daemon; fi
  check "the daemon starts (config two, pacing chunks, the echo model server)" start_daemon chunks-echo
  check "mode bluetooth is accepted" test "$(cli mode bluetooth 2>/dev/null | head -n1)" = bluetooth
  printf '[Policy]\nAutoEnable = true\n[GATT]\nExchangeMTU = 48\nChannels = 1\n' >/tmp/mtu48.conf
  restart_bluetoothd -f /tmp/mtu48.conf
  check "bluetoothd restarted with ExchangeMTU = 48" _bvm_all_powered
  expect_advertising "the daemon re-registers after bluetoothd's restart (MTU 48)"
  check "status: notifications paced by chunks (bluetooth.pacing)" test "$(btj .bluetooth.pacing)" = '"chunks"'
  BT_PACING_BY=chunks central long:tokens=3800,min=16384,mtu=48 wnr disconnect-mid:tokens=6000
  check "the daemon is still running" daemon_alive
  # The phases after this one run on the daemon it leaves: back on llama.cpp.
  check "the daemon stops on SIGTERM (back to llama.cpp)" stop_daemon
  check "the daemon starts (config two, pacing chunks, llama.cpp)" start_daemon chunks
  check "mode bluetooth is accepted" test "$(cli mode bluetooth 2>/dev/null | head -n1)" = bluetooth
fi

# ------------------------------------------------------------------ mode off
if has_phase off; then
  phase off "mode off withdraws the advertisement and the GATT application"
  ensure_daemon two
  restart_bluetoothd
  expect_advertising "advertising again with bluetoothd's defaults"
  left_before=$(grep -c 'bluetoothd left the bus' "$VM_RESULTS/daemon.log")
  out="$(cli mode off 2>&1)"
  check "mode off is accepted" test "$(head -n1 <<<"$out")" = off
  central gone
  check "mode off does not log that bluetoothd left the bus (it did not)" \
    test "$(grep -c 'bluetoothd left the bus' "$VM_RESULTS/daemon.log")" = "$left_before"
  check "the journal says the runtime withdrew its application and advertisement" \
    grep -q 'Bluetooth runtime stopped: application and advertisement withdrawn' "$VM_RESULTS/daemon.log"
  if ADV_PID="$(advertise_on hci0 hci0-advertisement.log)"; then
    central no-service
    kill "$ADV_PID"; wait "$ADV_PID" 2>/dev/null
  else
    not_ok "example advertisement on hci0 (to look for the GATT application)"
  fi
  out="$(cli mode bluetooth 2>&1)"
  check "mode bluetooth again" test "$(head -n1 <<<"$out")" = bluetooth
  expect_advertising "advertising again after mode bluetooth"
  central discover request:tag=after-mode-off-on,what=a-request-after-mode-off-and-on
fi

# ------------------------------------------------------------------ adapter power
if has_phase adapter; then
  phase adapter "the adapter powered off and on under the daemon"
  write_config adapter 1 65536 8
  ensure_daemon adapter
  expect_advertising "the daemon advertises"
  btmgmt_run --index 0 power off >/dev/null
  bt_state_is() { [[ "$(btj .bluetooth.state)" == "\"$1\"" ]]; }
  bt_problem_has() { [[ "$(btj .bluetooth.problem)" == *"$1"* ]]; }
  if wait_for 60 "the daemon to notice" bt_state_is waiting; then
    ok "with hci0 powered off, status says waiting"
  else
    not_ok "with hci0 powered off, status says waiting: $(bt_summary)"
  fi
  check "… and names the problem (powered off)" bt_problem_has "powered off"
  check "… and advertises nothing" test "$(btj .bluetooth.advertising)" = false
  btmgmt_run --index 0 power on >/dev/null
  expect_advertising "powered on again, the daemon registers again by itself"
  central discover request:tag=after-power-cycle,what=a-request-after-the-adapter-came-back
fi

# ------------------------------------------------------------------ streaming, chat, cancel (protocol-bluetooth §2)
if has_phase stream; then
  phase stream "protocol-bluetooth §2: a streamed answer, a streamed chat, a cancel mid-stream, a client leaving mid-stream"
  write_config stream 1 65536 8
  ensure_daemon stream
  expect_advertising "the daemon advertises"
  # 3 000 tokens: the check wants the first partial before a fifth of the whole answer; with
  # 1 000, llama.cpp on a quiet host wrote the answer in 2.5 s and a first partial after 0.57 s
  # failed it (run62).
  central stream:tokens=3000 chat cancel:tokens=15000 stream-drop:tokens=15000 request:tag=after-stream-drop,what=a-request-after-a-client-left-mid-stream
  check "the daemon is still running" daemon_alive
fi

# ------------------------------------------------------------------ proxy (issue #7)
if has_phase proxy; then
  # shellcheck source=proxy-phase.sh
  source "$HERE/proxy-phase.sh"
fi

# ------------------------------------------------------------------ bench
if has_phase bench; then
  phase bench "throughput of a long answer at MTU 517 (default config); the first streamed piece through the worker alone"
  write_config bench 1 65536 8
  ensure_daemon bench
  expect_advertising "the daemon advertises"
  central long:tokens=15000,min=65536,throughput=1 read-rtt:n=30 "first-piece:reps=${BT_PIECE_REPS:-5}"
fi

# ------------------------------------------------------------------ pacing
if has_phase pacing; then
  # The link alone: the echo model server answers 15000 tokens (about 75 KB) at once, so
  # the time is the notifications'.
  start_echo_model
  with_echo_backend two two-echo
  # BT_PACING_CHANNELS: bluetoothd's [GATT] Channels (ATT bearers; 1 disables EATT), put in
  # /etc/bluetooth/main.conf itself (bind-mounted in the guest), where the daemon reads it.
  for channels in ${BT_PACING_CHANNELS:-1}; do
  for mtu in ${BT_PACING_MTUS:-517 48}; do
    stop_daemon >/dev/null 2>&1
    printf '[Policy]\nAutoEnable = true\n[GATT]\nExchangeMTU = %d\nChannels = %d\n' "$mtu" "$channels" >/tmp/pacing-main.conf
    mount --bind /tmp/pacing-main.conf /etc/bluetooth/main.conf
    restart_bluetoothd
    _bvm_all_powered
    # BT_PACING_SET: MS/MODE items, bluetooth.chunkPacingMs and bluetooth.pacing (auto when
    # only MS is given).
    for setting in ${BT_PACING_SET:-10/auto}; do
      p=${setting%%/*} mode=auto
      [[ $setting == */* ]] && mode=${setting#*/}
      by=$mode
      [[ $mode == auto ]] && { by=chunks; ((channels == 1)) && by=bytes; }
      phase pacing "MTU $mtu, chunkPacingMs $p, pacing $mode ($by), ATT bearers $channels"
      jq --argjson p "$p" --arg mode "$mode" '.bluetooth.chunkPacingMs = $p | .bluetooth.pacing = $mode' "$W/two-echo.json" >"$W/pacing.json"
      stop_daemon >/dev/null 2>&1
      check "the daemon starts (pacing $p/$mode)" start_daemon pacing
      cli mode bluetooth >/dev/null 2>&1
      expect_advertising "advertising (MTU $mtu, pacing $p/$mode)"
      check "status: bluetoothd's $channels ATT bearer(s) read from its main.conf, notifications paced by $by" \
        test "$(btj '[.bluetooth.attBearers, .bluetooth.pacing]')" = "[$channels,\"$by\"]"
      for _ in $(seq "${BT_PACING_REPS:-3}"); do
        central "long:tokens=15000,min=65536,throughput=1,pacing=$p,by=$by,wait=${BT_PACING_WAIT:-120},label=by-$by-${p}ms-mtu$mtu-bearers$channels"
      done
    done
    stop_daemon >/dev/null 2>&1
    umount /etc/bluetooth/main.conf
  done
  done
  restart_bluetoothd
  _bvm_all_powered
fi

# ------------------------------------------------------------------ security (protocol-bluetooth §3): the last phase
# LE pairing needs the kernel's ECDH (P-256): guest-lib.sh's load_bt_modules loads drbg
# first (see there). Linux (since 5.8) asks user space to confirm every LE Secure
# Connections pairing, Just Works included, at both ends; bluetoothd refuses without an
# agent. With pairingAgent "host" (and no desktop agent, as here) a central pairs only in the
# window of `edgecoder-worker bluetooth pair`, answered by worker_central.py on its stdin.
# With the default "auto" this guest counts as headless (Debian's stock default.target ->
# graphical.target, no display manager), so the daemon registers its own Just Works agent.
# The central's end gets its own agent (worker_central.py CentralAgent): one bluetoothd
# serves both ends here (see agent-pair there).
# Last: after its pairings, Debian 12's guest kernel has crashed in hci_chan_del (list_del)
# when bluetoothd closed its sockets later (the restart phase). Its second central (hci2)
# needs the padding link to hci3, whose advertisement a bluetoothd restart since the start
# (phases restart, smallmtu, off, proxy, pacing) took away: hci3 advertises again first.
if has_phase security; then
  phase security "bluetooth.security encrypted (the worker's Just Works agent, or the pairing window)/authenticated and allowedClients bonded"
  [[ -n $PAD_PID ]] && { kill "$PAD_PID" 2>/dev/null; wait "$PAD_PID" 2>/dev/null; }
  PAD_PID="$(advertise_on hci3 pad-advertisement-security.log)" || not_ok "example advertisement on hci3 again (for the second client)"
  write_config secenchost 1 65536 8 '"security": "encrypted", "pairingAgent": "host"'
  # clientIdleSec 20: agent-pair-idle waits that long for a bond the worker's agent made
  # for a device that never used the service to be removed (the other scenarios use it at once).
  write_config secenc 1 65536 8 '"security": "encrypted", "clientIdleSec": 20'
  write_config secauth 1 65536 8 '"security": "authenticated"'
  write_config secbond 2 65536 8 '"allowedClients": "bonded"'
  t_sec=$SECONDS
  restart_with secenchost
  check "pairingAgent host: the worker registers no agent (status)" \
    test "$(btj '.bluetooth.pairingAgent + " " + (.bluetooth.pairingAgentRegistered|tostring)')" = '"host false"'
  central encrypted-refused
  central window-pair:cap=NoInputNoOutput,answer=y bonded-client
  central window-pair:adapter=hci2,cap=NoInputNoOutput,answer=n
  t_agent=$SECONDS
  restart_with secenc
  check "pairingAgent auto on this headless guest: the journal says the worker's agent is registered" \
    grep -q "pairing agent registered (NoInputNoOutput" "$VM_RESULTS/daemon.log"
  # By itself, with Device1.Pair, under the operator's window (which takes over as the
  # default agent), and by itself again once the window has closed (the worker's is back).
  # hci1 only: a second central needs hci2's padding link, and btvirt's handle reuse has
  # crashed the guest kernel after several pairings on both (list_del BUG in hci_chan_del).
  central agent-pair:how=write agent-pair:how=pair \
    window-pair:cap=NoInputNoOutput,answer=y,agent=worker agent-pair:how=write agent-pair-idle:idle=20
  # A reload to authenticated: the session starts again with the new flags, without the agent.
  write_config secenc 1 65536 8 '"security": "authenticated"'
  # Only this daemon's lines after the reload count: earlier phases (bystanders at
  # encrypted) registered and unregistered agents of their own daemons.
  reload_line=$(wc -l <"$VM_RESULTS/daemon.log")
  kill -HUP "$DAEMON_PID"
  central agent-gone bonded-client:expect=refused
  check "the reload applied bluetooth.security" test "$(btj '.daemon.configReload.applied | index("bluetooth.security") != null')" = true
  check "after the reload no pairing was accepted (journal)" \
    test -z "$(tail -n +"$((reload_line + 1))" "$VM_RESULTS/daemon.log" | awk '/pairing agent unregistered/ {after=1; next} after && /accepted a Just Works pairing/')"
  echo "# the worker's agent part took $((SECONDS - t_agent)) s"
  restart_with secauth
  central bonded-client:expect=refused window-pair:cap=KeyboardDisplay,answer=y bonded-client auth-refused
  restart_with secbond
  central forget:adapter=hci2 bonded-client stranger forget:adapter=hci1 forget:adapter=hci2
  check "the daemon is still running" daemon_alive
  # A phase after this one starts its own daemon (ensure_daemon), not this allowedClients one.
  stop_daemon; rc=$?
  check "the daemon stops on SIGTERM with exit 0 (exit $rc)" test $rc -eq 0
  echo "# phase security took $((SECONDS - t_sec)) s"
fi

# ------------------------------------------------------------------ the end
if [[ -n $DAEMON_PID ]]; then
  stop_daemon; rc=$?
  check "the daemon stops on SIGTERM with exit 0 (exit $rc)" test $rc -eq 0
fi
[[ -n $PAD_PID ]] && kill "$PAD_PID" 2>/dev/null
[[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null
crashes="$(grep -E -i 'fatal error|segmentation|assertion failed|stack dump|panic' "$VM_RESULTS/daemon.log" | head -n 5)"
check "no crash in the daemon's log${crashes:+: $crashes}" test -z "$crashes"
echo "# daemon log: $(grep -c . "$VM_RESULTS/daemon.log") lines, $(grep -c '^<[0-3]>' "$VM_RESULTS/daemon.log") at error level or worse"
bluetoothd_crash_report
tap_done
