#!/usr/bin/env bash
# The shell completions in real shells: `make generated install-files` into a scratch
# DESTDIR (PREFIX /usr/local) with the binary under test, then the installed files loaded
# the way each shell loads them — bash by `source`, zsh from $fpath by
# `autoload -U compinit; compinit` in an interactive zsh on a pseudo-terminal
# (IntegrationTests/completion/zsh_complete.zsh), fish from $fish_complete_path by `complete -C`.
# Each must offer every command name, complete `st` to `status`, the modes after `mode`,
# a command's options and file names after --config; an empty completion directory must
# offer none of it (so the checks see the completion, not the shell's defaults).
# zsh and fish come from `make deps`; without them their checks are skipped (a comment).
#
#   EDGECODER_WORKER_BIN=.build/debug/edgecoder-worker bash IntegrationTests/suites/completion.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin="$(realpath "${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}")"
work="$(mktemp -d /tmp/completion-suite.XXXXXX)"
trap 'rm -rf "$work"' EXIT
if [[ ! -x "$bin" ]]; then not_ok "no binary at $bin (build it first: swift build)"; tap_done; exit $?; fi

# --- install ------------------------------------------------------------------------------
root="$work/root"
if make --no-print-directory generated install-files RELEASE_BIN="$bin" GEN="$work/gen" DESTDIR="$root" PREFIX=/usr/local >"$work/make.log" 2>&1; then
  ok "make generated install-files with the binary under test"
else
  sed 's/^/# /' "$work/make.log" | tail -n 5; not_ok "make generated install-files"; tap_done; exit $?
fi
bash_file="$root/usr/local/share/bash-completion/completions/edgecoder-worker"
zsh_dir="$root/usr/local/share/zsh/site-functions"
fish_dir="$root/usr/local/share/fish/vendor_completions.d"
for f in "$bash_file" "$zsh_dir/_edgecoder-worker" "$fish_dir/edgecoder-worker.fish"; do
  check "installed ${f#"$root"}" test -s "$f"
done

# The command names, from `--help` (the table the completions are generated from).
mapfile -t names < <("$bin" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z-]*\) .*/\1/p')
if (( ${#names[@]} >= 10 )); then ok "--help lists ${#names[@]} commands"; else not_ok "--help lists ${#names[@]} commands: ${names[*]}"; fi
# offers_all FILE: every command name appears in FILE as a word.
offers_all() {
  local name missing=()
  for name in "${names[@]}"; do grep -qw -- "$name" "$1" || missing+=("$name"); done
  (( ${#missing[@]} == 0 )) || { echo "missing: ${missing[*]}"; return 1; }
}

# A directory with one file, for file-name completion after --config.
mkdir -p "$work/cwd" && : >"$work/cwd/conf-here.json"
cd "$work/cwd" || exit 1

# --- bash -----------------------------------------------------------------------------------
# bash_complete WORD...: COMPREPLY for the line "edgecoder-worker WORD..." (the last word is completed).
bash_complete() {
  bash -c 'source "$0"; COMP_WORDS=(edgecoder-worker "$@"); COMP_CWORD=$#; _edgecoder_worker; printf "%s\n" "${COMPREPLY[@]}"' "$bash_file" "$@"
}
bash_complete "" >"$work/bash-first"
check "bash offers every command name first" offers_all "$work/bash-first"
check "bash completes 'st' to status" test "$(bash_complete st)" = status
check "bash completes 'mode b' to bluetooth" test "$(bash_complete mode b)" = bluetooth

# --- zsh ------------------------------------------------------------------------------------
zsh_complete() { timeout 20 zsh "$OLDPWD/IntegrationTests/completion/zsh_complete.zsh" "$@"; }
if command -v zsh >/dev/null; then
  zsh_complete "$zsh_dir" 'edgecoder-worker ' >"$work/zsh-first" 2>&1
  check "zsh (compinit from \$fpath) lists every command name" offers_all "$work/zsh-first"
  out=$(zsh_complete "$zsh_dir" 'edgecoder-worker st' 2>&1)
  check "zsh completes 'st' to status" grep -qF 'BUFFER=[edgecoder-worker status ]' <<<"$out"
  out=$(zsh_complete "$zsh_dir" 'edgecoder-worker mode b' 2>&1)
  check "zsh completes 'mode b' to bluetooth" grep -qF 'BUFFER=[edgecoder-worker mode bluetooth ]' <<<"$out"
  out=$(zsh_complete "$zsh_dir" 'edgecoder-worker status --j' 2>&1)
  check "zsh completes 'status --j' to --json" grep -qF 'BUFFER=[edgecoder-worker status --json ]' <<<"$out"
  out=$(zsh_complete "$zsh_dir" 'edgecoder-worker run --config conf' 2>&1)
  check "zsh completes a file name after run --config" grep -qF 'BUFFER=[edgecoder-worker run --config conf-here.json ]' <<<"$out"
  mkdir -p "$work/empty"
  out=$(zsh_complete "$work/empty" 'edgecoder-worker st' 2>&1)
  check "zsh without the completion does not complete 'st' (the checks above see ours)" grep -qF 'BUFFER=[edgecoder-worker st]' <<<"$out"
else
  echo "# zsh is not installed (make deps installs it): its checks are skipped"
fi

# --- fish -----------------------------------------------------------------------------------
# fish_complete DIR LINE: what fish offers for LINE with DIR first on its completion path.
# fish loads a command's completion only when the command is on $PATH: the installed one is.
fish_complete() { PATH="$root/usr/local/bin:$PATH" timeout 20 fish --no-config -c 'set -p fish_complete_path $argv[1]; complete -C $argv[2]' "$1" "$2" | cut -f1; }
if command -v fish >/dev/null; then
  fish_complete "$fish_dir" 'edgecoder-worker ' >"$work/fish-first" 2>&1
  check "fish (\$fish_complete_path) offers every command name" offers_all "$work/fish-first"
  check "fish completes 'st' to status" test "$(fish_complete "$fish_dir" 'edgecoder-worker st')" = status
  check "fish completes 'mode b' to bluetooth" test "$(fish_complete "$fish_dir" 'edgecoder-worker mode b')" = bluetooth
  check "fish completes 'status --j' to --json" test "$(fish_complete "$fish_dir" 'edgecoder-worker status --j')" = --json
  check "fish completes a file name after run --config" test "$(fish_complete "$fish_dir" 'edgecoder-worker run --config conf')" = conf-here.json
  mkdir -p "$work/empty"
  check "fish without the completion does not offer status" test -z "$(fish_complete "$work/empty" 'edgecoder-worker st')"
else
  echo "# fish is not installed (make deps installs it): its checks are skipped"
fi
tap_done
