#!/usr/bin/env bash
# Installs the real clients the proxy is tested with (the `ollama` and `openai` packages
# from PyPI, pinned in IntegrationTests/proxy/requirements.txt) into .cache/proxy-clients/venv, once
# per requirements file; prints that venv's python on stdout. Used by
# IntegrationTests/suites/proxy-clients.sh and, for the BlueZ VM's proxy phase, by
# IntegrationTests/suites/bluetooth.sh (the guest has no PyPI; it sees the repository's .cache).
# Exit: 0 ready, 77 PyPI cannot be reached, 1 anything else (the log on stderr).
set -u
cd "$(dirname "$0")/../.." || exit 1
cache=.cache/proxy-clients
venv="$cache/venv"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 900 9 || { echo "another prepare-clients.sh holds $cache/.lock" >&2; exit 1; }
log="$cache/prepare.log"
stamp="$(sha256sum IntegrationTests/proxy/requirements.txt | cut -c1-16)"
if [[ "$(cat "$venv/.stamp" 2>/dev/null)" == "$stamp" ]]; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
: >"$log"
if ! /usr/bin/python3 -m venv "$venv" >>"$log" 2>&1; then
  # Debian's python3 has venv and ensurepip only with python3-venv.
  if [[ "$(id -u)" == 0 ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq python3-venv >>"$log" 2>&1 || { apt-get update -qq >>"$log" 2>&1; apt-get install -y -qq python3-venv >>"$log" 2>&1; }
  fi
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv" >>"$log" 2>&1 || { cat "$log" >&2; echo "python3 -m venv failed (install python3-venv)" >&2; exit 1; }
fi
if timeout 600 "$venv/bin/pip" install -q --disable-pip-version-check -r IntegrationTests/proxy/requirements.txt >>"$log" 2>&1; then
  echo "$stamp" >"$venv/.stamp"
  echo "$PWD/$venv/bin/python"
  exit 0
fi
tail -n 20 "$log" >&2
probe="$(mktemp -d)"
# pip's own index setting decides where PyPI is: ask it for one small file.
if timeout 120 "$venv/bin/pip" download -q --no-deps -d "$probe" ollama==0.6.3 >/dev/null 2>&1; then
  rm -rf "$probe"
  exit 1
fi
rm -rf "$probe"
exit 77
