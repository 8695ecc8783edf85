#!/usr/bin/env bash
# The container sandbox with docker as its engine (issue 29): a dockerd of its own (Debian's
# docker.io, its socket, store and state under a private directory, no network set-up of
# its own), the image podman has (sandbox.sh builds it) loaded into it, then every check of
# sandbox.sh again with EDGECODER_SANDBOX_ENGINE=/usr/bin/docker.
#
#   EDGECODER_WORKER_BIN=.build/debug/edgecoder-worker bash IntegrationTests/suites/sandbox-docker.sh
#
# The store is fuse-overlayfs where /dev/fuse is there (this machine is itself a container,
# where overlay2 cannot stack), vfs elsewhere (every run then copies the whole image: about
# 4 s a create, 2 min for the suite). Exits 77 when docker.io is not installed and cannot be,
# or when this host does not let a dockerd run.
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin="${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}"
image="${EDGECODER_SANDBOX_IMAGE:-localhost/edgecoder-sandbox:1}"
docker=/usr/bin/docker
work="$(mktemp -d /tmp/sandbox-docker.XXXXXX)"
dockerd_pid=
cleanup() {
  if [[ -n $dockerd_pid ]]; then
    # Containers first (a dockerd stopping with running ones waits for them), then dockerd.
    local ids
    mapfile -t ids < <(DOCKER_HOST="unix://$work/docker.sock" "$docker" ps -aq 2>/dev/null)
    ((${#ids[@]} == 0)) || DOCKER_HOST="unix://$work/docker.sock" "$docker" rm --force "${ids[@]}" >/dev/null 2>&1
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$dockerd_pid" 2>/dev/null
  fi
  # The store's mounts (fuse-overlayfs) are dockerd's and gone with it; never follow one.
  umount -R "$work/root" 2>/dev/null
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

[[ -x $bin ]] || { not_ok "no binary at $bin (build it first: swift build)"; tap_done; exit $?; }
command -v dockerd >/dev/null && [[ -x $docker ]] || tap_skip "docker.io is not installed (make deps as root installs it)"
[[ $(id -u) == 0 ]] || tap_skip "dockerd needs root"
command -v podman >/dev/null || tap_skip "podman is not installed: it holds the image this suite loads into docker"

# --- a dockerd of our own -------------------------------------------------------------------
driver=vfs
[[ -c /dev/fuse ]] && command -v fuse-overlayfs >/dev/null && driver=fuse-overlayfs
dockerd --host "unix://$work/docker.sock" --data-root "$work/root" --exec-root "$work/exec" \
  --pidfile "$work/dockerd.pid" --storage-driver "$driver" \
  --iptables=false --ip6tables=false --bridge=none --ip-masq=false >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
export DOCKER_HOST="unix://$work/docker.sock"
for _ in $(seq 1 300); do "$docker" version >/dev/null 2>&1 && break; kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
if ! "$docker" version >/dev/null 2>&1; then
  # The host does not let a dockerd run (no cgroups or namespaces for it, a container
  # without the privileges): not this project's failure, so a skip that says why.
  sed 's/^/# /' "$work/dockerd.log" | tail -20
  tap_skip "dockerd (store $driver) did not answer on its socket within 30 s on this host"
fi
ok "dockerd $("$docker" version --format '{{.Server.Version}}') answers on its socket (store $driver, cgroup driver $("$docker" info --format '{{.CgroupDriver}}'))"

# --- the image, from podman's store ----------------------------------------------------------
source IntegrationTests/lib/sandbox-image.sh
read -ra podman_args <<<"$(sandbox_runtime_args podman)"
sandbox_image_ensure "$bin" podman "$image" "$work/build.log" "${podman_args[@]}"
case $? in
  0) ;;
  1) not_ok "sandbox build (podman)"; sed 's/^/# /' "$work/build.log"; tap_done; exit $? ;;
  *) not_ok "another run holds .cache/sandbox/.lock"; tap_done; exit $? ;;
esac
start=$(date +%s%N)
if podman save "$image" 2>"$work/save.err" | "$docker" load >"$work/load.out" 2>&1; then
  ok "podman save | docker load: $image in dockerd's store ($(( ($(date +%s%N) - start) / 1000000 )) ms)"
else
  not_ok "podman save | docker load"; sed 's/^/# /' "$work/save.err" "$work/load.out"; tap_done; exit $?
fi

# --- every check of the sandbox suite, with docker ------------------------------------------
run_tap "sandbox.sh with docker" env EDGECODER_SANDBOX_ENGINE="$docker" EDGECODER_SANDBOX_IMAGE="$image" bash IntegrationTests/suites/sandbox.sh
check "no container is left in dockerd" test -z "$("$docker" ps -aq)"
tap_done; exit $?
