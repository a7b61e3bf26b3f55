#!/usr/bin/env bash
# Offline proof that the Dockerfile builds an image that serves attnscope.
#
# Made for a machine with no Docker engine and no registry access (only Debian and PyPI):
#   1. a Debian bookworm base (Python 3.11, what python:3.11-slim is) built with mmdebstrap
#      and imported into podman (reused on later runs);
#   2. every wheel the image needs downloaded into wheels/ with the host's pip (the CPU torch
#      wheel comes from the host's local wheel directory), so the build itself needs no network;
#   3. `podman build` of the unchanged Dockerfile with BASE_IMAGE=that base, PIP_NO_INDEX=1,
#      vfs storage and chroot isolation (no overlay, no user namespaces needed);
#   4. the image's own ENTRYPOINT + CMD started with `buildah run`, then the image's own
#      HEALTHCHECK command run inside it and /healthz fetched from inside and printed;
#   5. the image size.
#
# Usage: scripts/container_check.sh            build and check (root; idempotent)
#        scripts/container_check.sh --clean    remove the images, containers and wheels it made
# Environment: CHECK_PORT (default 18000: the chroot shares the host's network),
#              DEBIAN_MIRROR, REBUILD_BASE=1 (make the base again), REUSE_IMAGE=1 (skip the
#              build when the image exists), WORK (scratch directory).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASE_IMAGE=localhost/attnscope-base:bookworm
IMAGE=localhost/attnscope:check
CTR=attnscope-check
PORT=${CHECK_PORT:-18000}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=${WORK:-/var/tmp/attnscope-container-check}
TORCH_VERSION=2.13.0

export BUILDAH_ISOLATION=chroot
PODMAN=(podman --storage-driver vfs)
BUILDAH=(buildah --storage-driver vfs)
podman() { command "${PODMAN[@]}" "$@"; }
buildah() { command "${BUILDAH[@]}" "$@"; }

start=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - start))" "$*"; }

server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM -- "-$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    buildah rm "$CTR" >/dev/null 2>&1 || true
    rm -f "$WORK/bookworm.tar" "$WORK/requirements.txt"
}
trap cleanup EXIT

if [ "${1:-}" = "--clean" ]; then
    buildah rm "$CTR" >/dev/null 2>&1 || true
    podman rmi -f "$IMAGE" "$BASE_IMAGE" >/dev/null 2>&1 || true
    podman image prune -f >/dev/null
    find wheels -mindepth 1 ! -name README.md -delete
    rm -rf "$WORK"
    echo "removed $IMAGE, $BASE_IMAGE, wheels/*.whl and $WORK"
    exit 0
fi

[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap, podman with vfs storage)" >&2; exit 1; }
mkdir -p "$WORK"

# ------------------------------------------------------------------------------- tools
missing=()
for tool in podman buildah mmdebstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    step "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update </dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y podman buildah mmdebstrap uidmap </dev/null
fi
if ss -ltn "sport = :$PORT" 2>/dev/null | grep -q LISTEN; then
    echo "port $PORT is in use on this machine; set CHECK_PORT to a free one" >&2
    exit 1
fi

# ------------------------------------------------------------------------------- 1. base
if [ "${REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then
    step "mmdebstrap: Debian bookworm + python3, python3-venv -> $BASE_IMAGE"
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        bookworm "$WORK/bookworm.tar" "$DEBIAN_MIRROR" </dev/null
    podman rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
    podman import --change 'CMD ["/bin/bash"]' "$WORK/bookworm.tar" "$BASE_IMAGE" >/dev/null
    rm -f "$WORK/bookworm.tar"
else
    step "reusing $BASE_IMAGE (REBUILD_BASE=1 to make it again)"
fi
buildah from --pull-never --name "$CTR" "$BASE_IMAGE" >/dev/null
buildah run "$CTR" -- python3 -c 'import sys, venv; print("base python", sys.version.split()[0])'
buildah rm "$CTR" >/dev/null

# ------------------------------------------------------------------------------- 2. wheels
step "pip download: torch==$TORCH_VERSION (local CPU wheel) and what the image installs -> wheels/"
# what the Dockerfile installs (".[transformers,gguf,vision,audio]", read from it): the dependencies and
# those extras', at the versions CI tested
EXTRAS=$(sed -n 's/.*"\.\[\([a-z,]*\)\]".*/\1/p' Dockerfile | head -n 1)
[ -n "$EXTRAS" ] || { echo "container_check: no \".[EXTRAS]\" install found in the Dockerfile" >&2; exit 1; }
EXTRAS="$EXTRAS" python3 -c 'import os, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + [r for e in os.environ["EXTRAS"].split(",") for r in p["optional-dependencies"][e]]))' \
    >"$WORK/requirements.txt"
grep -v '^torch==' constraints.txt >"$WORK/constraints.txt"
# setuptools and wheel: the build backend pip sets up to build the project inside the image
python3 -m pip download --disable-pip-version-check --quiet --only-binary=:all: --dest wheels \
    "torch==$TORCH_VERSION" -r "$WORK/requirements.txt" -c "$WORK/constraints.txt" "setuptools>=68" wheel </dev/null
echo "$(find wheels -name '*.whl' | wc -l) wheels, $(du -sh wheels | cut -f1)"

# ------------------------------------------------------------------------------- 3. build
if [ "${REUSE_IMAGE:-0}" = 1 ] && podman image exists "$IMAGE"; then
    step "reusing $IMAGE (REUSE_IMAGE=1)"
else
    step "podman build (vfs, chroot isolation, no index: wheels/ only) -> $IMAGE"
    podman build --isolation chroot --format docker --pull=never --layers=false \
        --build-arg BASE_IMAGE="$BASE_IMAGE" \
        --build-arg PIP_NO_INDEX=1 \
        -t "$IMAGE" . </dev/null
    podman image prune -f >/dev/null # the previous run's image, now untagged
fi

# ------------------------------------------------------------------------------- 4. serve
step "start the image's default command with buildah run (port $PORT)"
json_args() { python3 -c 'import json, sys; [print(a) for line in sys.stdin for a in json.loads(line) or []]'; }
mapfile -t argv < <(podman image inspect --format $'{{json .Config.Entrypoint}}\n{{json .Config.Cmd}}' "$IMAGE" | json_args)
echo "image user $(podman image inspect --format '{{.Config.User}}' "$IMAGE"), command: ${argv[*]}"
buildah from --pull-never --name "$CTR" "$IMAGE" >/dev/null
setsid "${BUILDAH[@]}" run --env ATTNSCOPE_PORT="$PORT" "$CTR" -- "${argv[@]}" </dev/null >"$WORK/server.log" 2>&1 &
server_pid=$!

# the image's HEALTHCHECK, exactly as Docker would run it
mapfile -t health < <(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE" | json_args)
[ "${health[0]:-}" = CMD ] || { echo "the image has no exec-form HEALTHCHECK: ${health[*]}" >&2; exit 1; }
health=("${health[@]:1}")
healthy=0
for _ in $(seq 1 180); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "the server exited; its log:" >&2
        cat "$WORK/server.log" >&2
        exit 1
    fi
    if buildah run --env ATTNSCOPE_PORT="$PORT" "$CTR" -- "${health[@]}" >/dev/null 2>&1; then
        healthy=1
        break
    fi
    sleep 1
done
if [ "$healthy" != 1 ]; then
    echo "HEALTHCHECK still failing after 180 s; server log:" >&2
    cat "$WORK/server.log" >&2
    exit 1
fi
echo "HEALTHCHECK passed after $((SECONDS - start)) s of the script"
echo "GET /healthz from inside the image:"
buildah run "$CTR" -- python3 -c \
    "import urllib.request as u; r = u.urlopen('http://127.0.0.1:$PORT/healthz', timeout=5); print(r.status, r.read().decode())"
buildah run "$CTR" -- python3 -c \
    "import json, urllib.request as u; m = json.load(u.urlopen('http://127.0.0.1:$PORT/api/model', timeout=30)); print('GET /api/model:', {k: m.get(k) for k in ('name', 'n_layer', 'n_head', 'device', 'parameters')})" ||
    echo "(GET /api/model failed; /healthz above is the check)"
echo "server log (tail):"
tail -n 5 "$WORK/server.log"

# ------------------------------------------------------------------------------- 5. size
step "image size"
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "$IMAGE: $size bytes ($((size / 1000000)) MB)"
podman images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep attnscope
step "container check passed"
