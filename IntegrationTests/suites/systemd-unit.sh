#!/usr/bin/env bash
# IntegrationTests/suites/systemd-unit.sh: checks the systemd integration files (service §1).
#
# Usage (from the repository root):
#   IntegrationTests/suites/systemd-unit.sh [UNIT_FILE [SYSUSERS_FILE [TMPFILES_FILE]]]
# Defaults: systemd/edgecoder-worker.service, systemd/sysusers.d/edgecoder-worker.conf,
#           systemd/tmpfiles.d/edgecoder-worker.conf
# Pass a deliberately broken copy to see that the suite catches it.
#
# Prints one "ok - ..." / "not ok - ..." line per check and exits 0 only if all pass.
# Needs systemd-analyze and systemd-sysusers (systemd >= 252). It does not need root.
set -u

UNIT=${1:-systemd/edgecoder-worker.service}
SYSUSERS=${2:-systemd/sysusers.d/edgecoder-worker.conf}
TMPFILES=${3:-systemd/tmpfiles.d/edgecoder-worker.conf}
MAX_EXPOSURE=2.0

source "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"

TMP=$(mktemp -d) || { not_ok "mktemp failed"; tap_done; exit 1; }
trap 'rm -rf "$TMP"' EXIT

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

# directive KEY: the values of KEY in [Service]/[Unit], one per line, in file
# order. Comments and leading blanks are ignored. An empty assignment ("Key=") is
# printed as an empty line, because systemd uses it to reset lists.
directive() {
    awk -v key="$1" '
        /^[ \t]*[#;]/ { next }
        {
            line = $0
            sub(/^[ \t]+/, "", line)
            n = index(line, "=")
            if (n == 0) next
            k = substr(line, 1, n - 1); sub(/[ \t]+$/, "", k)
            if (k != key) next
            v = substr(line, n + 1); sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v)
            print v
        }' "$UNIT"
}

# last_value KEY: the effective value of a single-valued directive (last one wins).
last_value() { directive "$1" | tail -n 1; }

# list_value KEY: the effective value of a list directive. An empty assignment
# resets the list. Items are printed one per line.
list_value() {
    directive "$1" | awk '
        $0 == "" { n = 0; next }
        { for (i = 1; i <= NF; i++) items[++n] = $i }
        END { for (i = 1; i <= n; i++) print items[i] }'
}

# has_item KEY ITEM: ITEM is in the effective list of KEY.
has_item() { list_value "$1" | grep -qxF -- "$2"; }
has_line() { directive "$1" | grep -qxF -- "$2"; }    # has_line KEY VALUE: one of the KEY= lines

# parse_exposure: read systemd-analyze security output on stdin and print the
# "Overall exposure level" number (e.g. 1.5), or nothing if there is none.
parse_exposure() {
    sed -n 's/.*Overall exposure level for [^:]*: *\([0-9][0-9]*\(\.[0-9][0-9]*\)\{0,1\}\).*/\1/p' | tail -n 1
}

# le NUMBER LIMIT: NUMBER <= LIMIT (decimals). Fails if NUMBER is not a number.
le() {
    [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]] || return 1
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'
}

# not COMMAND...: succeeds when COMMAND fails (works with shell functions too).
not() { ! "$@"; }

# quiet COMMAND...: run COMMAND with its output discarded.
quiet() { "$@" >/dev/null 2>&1; }

# is_yes VALUE: VALUE is a systemd "true" boolean.
is_yes() { [[ ${1,,} =~ ^(yes|true|on|1)$ ]]; }

# gt_usec SPAN LIMIT_USEC: SPAN is a valid time span longer than LIMIT_USEC.
gt_usec() {
    local us
    us=$(usec "${1:-}")
    [[ $us =~ ^[0-9]+$ ]] && (( us > $2 ))
}

# usec SPAN: a systemd time span ("20s", "1min 30s") in microseconds.
usec() {
    systemd-analyze timespan "$1" 2>/dev/null | awk '/μs:/ { print $2; exit }'
}

# ---------------------------------------------------------------------------
# 0. Tools and inputs
# ---------------------------------------------------------------------------
if ! command -v systemd-analyze >/dev/null 2>&1; then
    not_ok "systemd-analyze is not installed (apt-get install systemd); cannot check the unit"
    tap_done
    exit 1
fi
if [[ ! -f $UNIT ]]; then
    not_ok "unit file $UNIT not found (run from the repository root)"
    tap_done
    exit 1
fi
ok "unit file $UNIT exists"

# ---------------------------------------------------------------------------
# 1. Test the exposure parser first, so the real check can't pass on a bad parse
# ---------------------------------------------------------------------------
sample=$'✗ UMask=  Files created by service are group-readable by default   0.1\n\n→ Overall exposure level for edgecoder-worker.service: 1.5 OK 🙂'
got=$(printf '%s\n' "$sample" | parse_exposure)
check "exposure parser reads 1.5 from a known sample (got '$got')" [ "$got" = "1.5" ]
got=$(printf '%s\n' "→ Overall exposure level for x.service: 9.6 UNSAFE 😨" | parse_exposure)
check "exposure parser reads 9.6 from an UNSAFE sample (got '$got')" [ "$got" = "9.6" ]
check "le() rejects 9.6 > $MAX_EXPOSURE" not le "$got" "$MAX_EXPOSURE"
check "le() accepts 2.0 <= $MAX_EXPOSURE" le 2.0 "$MAX_EXPOSURE"
check "le() refuses a non-number" not le OK "$MAX_EXPOSURE"
got=$(printf '%s\n' "no such line here" | parse_exposure)
check "exposure parser yields nothing for output without the summary line" [ -z "$got" ]

# ---------------------------------------------------------------------------
# 2. systemd-analyze security: exposure <= 2.0
# ---------------------------------------------------------------------------
sec_out=$(systemd-analyze security --offline=true "$UNIT" 2>&1)
sec_rc=$?
exposure=$(printf '%s\n' "$sec_out" | parse_exposure)
if [[ $sec_rc -ne 0 || -z $exposure ]]; then
    not_ok "systemd-analyze security --offline=true $UNIT did not report an exposure (rc=$sec_rc): $(printf '%s' "$sec_out" | tail -n 3)"
elif le "$exposure" "$MAX_EXPOSURE"; then
    ok "systemd-analyze security rates $UNIT at $exposure (<= $MAX_EXPOSURE)"
else
    not_ok "systemd-analyze security rates $UNIT at $exposure, above $MAX_EXPOSURE; exposed settings:"
    printf '%s\n' "$sec_out" | grep '✗' | sed 's/^/#   /'
fi
# Also ask systemd: --threshold is in tenths, and the exit code is non-zero above it.
threshold=$(awk -v m="$MAX_EXPOSURE" 'BEGIN { printf "%d", m * 10 }')
check "systemd-analyze security --threshold=$threshold agrees (exit code 0)" \
    quiet systemd-analyze security --offline=true --threshold="$threshold" "$UNIT"

# ---------------------------------------------------------------------------
# 3. systemd-analyze verify: no error except the binary not being installed here
# ---------------------------------------------------------------------------
verify_out=$(systemd-analyze verify "$UNIT" 2>&1 |
    grep -v 'Command /usr/local/bin/edgecoder-worker is not executable: No such file or directory' |
    grep -v '^[[:space:]]*$')
if [[ -z $verify_out ]]; then
    ok "systemd-analyze verify reports nothing beyond the uninstalled binary"
else
    not_ok "systemd-analyze verify complains:"
    printf '%s\n' "$verify_out" | sed 's/^/#   /'
fi

# ---------------------------------------------------------------------------
# 4. What the daemon needs is still there
# ---------------------------------------------------------------------------
eq() { [ "$(last_value "$1")" = "$2" ]; }     # eq KEY VALUE
not_yes() { ! is_yes "$(last_value "$1")"; }   # not_yes KEY
check "Type=notify (READY=1 after the control socket listens)" eq Type notify
check "NotifyAccess=main (hooks cannot notify)" eq NotifyAccess main
check "WatchdogSec= is set and non-zero (got '$(last_value WatchdogSec)')" gt_usec "$(last_value WatchdogSec)" 0
check "Restart=on-failure" eq Restart on-failure
check "RestartSec= is set and non-zero (got '$(last_value RestartSec)')" gt_usec "$(last_value RestartSec)" 0
check "TimeoutStopSec= longer than the 10 s drain grace (got '$(last_value TimeoutStopSec)')" \
    gt_usec "$(last_value TimeoutStopSec)" 10000000
check "KillSignal=SIGTERM" eq KillSignal SIGTERM
check "ExecReload= runs 'edgecoder-worker reload' (returns once the config is applied or refused)" eq ExecReload '/usr/local/bin/edgecoder-worker reload --runtime-dir /run/edgecoder-worker'
check "MemoryMax= is set (got '$(last_value MemoryMax)')" bash -c '[[ $1 =~ ^[0-9]+[KMG]$ ]]' _ "$(last_value MemoryMax)"
exec_start=$(last_value ExecStart)
check "ExecStart= runs '/usr/local/bin/edgecoder-worker run' (prefix replaceable by the Makefile; got '$exec_start')" \
    bash -c '[[ $1 == "/usr/local/bin/edgecoder-worker run"* ]]' _ "$exec_start"
check "StateDirectory=edgecoder-worker" eq StateDirectory edgecoder-worker
check "StateDirectoryMode=0750" eq StateDirectoryMode 0750
check "RuntimeDirectory=edgecoder-worker" eq RuntimeDirectory edgecoder-worker
check "RuntimeDirectoryMode=0755 (group edgecoder must reach control.sock)" eq RuntimeDirectoryMode 0755
check "ConfigurationDirectory=edgecoder-worker" eq ConfigurationDirectory edgecoder-worker
check "LoadCredential= loads the model server's key (backend-api-key) from the credstore" \
    has_line LoadCredential backend-api-key:edgecoder-worker.backend-api-key
check "User=edgecoder-worker" eq User edgecoder-worker
check "no DynamicUser=yes (static sysusers user)" not_yes DynamicUser
check "SupplementaryGroups includes bluetooth (BlueZ D-Bus policy)" has_item SupplementaryGroups bluetooth
check "SupplementaryGroups includes edgecoder (chgrp of control.sock)" has_item SupplementaryGroups edgecoder

raf=$(list_value RestrictAddressFamilies | tr '\n' ' ')
check "RestrictAddressFamilies= is an allow list (got '$raf')" \
    bash -c '[[ -n $1 && $1 != "~"* && $1 != none* ]]' _ "$raf"
for fam in AF_UNIX AF_NETLINK AF_BLUETOOTH AF_INET AF_INET6; do
    check "RestrictAddressFamilies allows $fam" has_item RestrictAddressFamilies "$fam"
done
check "AF_PACKET stays blocked (no raw sockets needed)" not has_item RestrictAddressFamilies AF_PACKET

check "no ProcSubset=pid (/proc/stat and /proc/meminfo must stay readable)" \
    not grep -Eq '^[[:space:]]*ProcSubset[[:space:]]*=[[:space:]]*pid' "$UNIT"
check "no PrivateNetwork=yes (coordinator, rtnetlink)" not_yes PrivateNetwork
check "no PrivateUsers=yes (would hide group edgecoder in peer credentials)" not_yes PrivateUsers
check "SystemCallFilter keeps @system-service (fork/exec for hooks, sockets)" \
    has_item SystemCallFilter @system-service
check "SystemCallFilter does not deny @process or @network-io" \
    not grep -Eq '^[[:space:]]*SystemCallFilter=~.*@(process|network-io)' "$UNIT"
check "no NoExecPaths= (the hooks.networkRestored command must stay runnable)" \
    [ -z "$(last_value NoExecPaths)" ]

# Key hardening lines (the exposure check covers them too, but this names the culprit).
for kv in ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
          NoNewPrivileges=yes MemoryDenyWriteExecute=yes SystemCallArchitectures=native \
          UMask=0027; do
    check "$kv" eq "${kv%%=*}" "${kv#*=}"
done
check "CapabilityBoundingSet= present and empty (no capabilities at all)" \
    bash -c '[[ $(grep -Ec "^[[:space:]]*CapabilityBoundingSet=" "$1") -gt 0 && -z $2 ]]' _ "$UNIT" "$(last_value CapabilityBoundingSet)"

# ---------------------------------------------------------------------------
# 5. sysusers.d: creates the user, the readers' group and bluetooth membership
# ---------------------------------------------------------------------------
if ! command -v systemd-sysusers >/dev/null 2>&1; then
    not_ok "systemd-sysusers is not installed; cannot check $SYSUSERS"
elif [[ ! -f $SYSUSERS ]]; then
    not_ok "sysusers file $SYSUSERS not found"
else
    sysusers_abs=$(cd "$(dirname "$SYSUSERS")" && pwd)/$(basename "$SYSUSERS")
    root=$TMP/root
    mkdir -p "$root/etc"
    if su_out=$(systemd-sysusers --root="$root" "$sysusers_abs" 2>&1); then
        ok "systemd-sysusers applies $SYSUSERS to an empty root"
    else
        not_ok "systemd-sysusers failed on $SYSUSERS: $su_out"
    fi
    passwd=$root/etc/passwd
    group=$root/etc/group
    uid=$(awk -F: '$1 == "edgecoder-worker" { print $3 }' "$passwd" 2>/dev/null)
    shell=$(awk -F: '$1 == "edgecoder-worker" { print $7 }' "$passwd" 2>/dev/null)
    check "passwd has user edgecoder-worker with a system UID (got '$uid')" \
        bash -c '[[ $1 =~ ^[0-9]+$ ]] && (( $1 > 0 && $1 < 1000 ))' _ "$uid"
    check "edgecoder-worker has a nologin shell (got '$shell')" \
        bash -c '[[ $1 == */nologin || $1 == */false ]]' _ "$shell"
    in_group_file() { grep -q "^$1:" "$group" 2>/dev/null; }      # in_group_file GROUP
    member_of() {                                                 # member_of GROUP USER
        awk -F: -v g="$1" -v u="$2" '$1 == g { n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) f = 1 } END { exit !f }' "$group" 2>/dev/null
    }
    check "group edgecoder-worker exists (the daemon's primary group)" in_group_file edgecoder-worker
    check "group edgecoder (control-socket readers) exists" in_group_file edgecoder
    check "group bluetooth exists" in_group_file bluetooth
    check "edgecoder-worker is a member of bluetooth in /etc/group (dbus-daemon group policy)" \
        member_of bluetooth edgecoder-worker
    check "edgecoder-worker is a member of edgecoder in /etc/group (chgrp of control.sock)" \
        member_of edgecoder edgecoder-worker
    check "the unit's User= ($(last_value User)) is the user sysusers creates" \
        grep -q "^$(last_value User):" "$passwd"
    check "the unit's Group= ($(last_value Group)) is a group sysusers creates" \
        in_group_file "$(last_value Group)"
fi

# ---------------------------------------------------------------------------
# 6. tmpfiles.d: /etc/edgecoder-worker is 0750 root:edgecoder-worker
# ---------------------------------------------------------------------------
if [[ ! -f $TMPFILES ]]; then
    not_ok "tmpfiles file $TMPFILES not found"
else
    check "tmpfiles makes /etc/edgecoder-worker 0750 root:edgecoder-worker" \
        grep -Eq '^d[[:space:]]+/etc/edgecoder-worker/?[[:space:]]+0750[[:space:]]+root[[:space:]]+edgecoder-worker([[:space:]]|$)' "$TMPFILES"
    check "tmpfiles makes config.json 0640 root:edgecoder-worker (may hold a token)" \
        grep -Eq '^z[[:space:]]+/etc/edgecoder-worker/config\.json[[:space:]]+0640[[:space:]]+root[[:space:]]+edgecoder-worker([[:space:]]|$)' "$TMPFILES"
    # Syntax: systemd 252 has no tmpfiles --dry-run, so apply the file to a scratch
    # root and keep only per-line parse errors ("FILE:LINE: ..."). The users and
    # groups may not exist on this host, and an unknown group stops the parser
    # before it checks the rest of the line. So the parsed copy names root
    # instead ("-" is kept).
    mkdir -p "$TMP/tfroot"
    tf_copy=$TMP/tmpfiles-syntax.conf
    awk '/^[ \t]*(#|$)/ { print; next }
         { if (NF >= 4 && $4 != "-") $4 = "root"; if (NF >= 5 && $5 != "-") $5 = "root"; print }' \
        "$TMPFILES" > "$tf_copy"
    tf_err=$(systemd-tmpfiles --root="$TMP/tfroot" --create "$tf_copy" 2>&1 | grep -F "$tf_copy:")
    check "systemd-tmpfiles parses $TMPFILES${tf_err:+: $tf_err}" [ -z "$tf_err" ]
fi

tap_done
