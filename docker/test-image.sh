#!/usr/bin/env bash
# Build docker/Dockerfile's image and run it for real, on loopback only:
#   1. replay: a copy of cassettes/example mounted at /cassettes, the port published on
#      127.0.0.1; each recorded request gets its recorded answer, the health check passes,
#      PID 1 runs as uid 1000, `stop` exits 0, the run leaves its note in .tapeproxy/ and
#      the cassette as it was;
#   2. record: `serve --port P` on the command line (the health check must follow it) in the
#      host's network, against a stand-in provider on 127.0.0.1, into a temporary folder;
#      `stop` exits 0, the exchange file is there, readable by anyone, and `verify` passes;
#      then another uid replays it with the provider gone;
#   3. record into a folder uid 1000 cannot write: it refuses to start, naming the uid.
#
#   bash docker/test-image.sh
#
# It uses docker when its daemon answers, else podman (podman's host network and bind
# mounts of root-owned folders want root). Where neither runs it says so and exits 0, as it
# does where the base image can neither be found, pulled nor made. Environment:
#   TAPEPROXY_ENGINE=docker|podman  the engine to use
#   TAPEPROXY_INSTALL=1             as root with apt-get, install podman, runc and debootstrap
#                                 when needed (.ci/run sets it when CI is set)
#   PYTHON_IMAGE                  the base image (default: the Dockerfile's pinned one). If it
#                                 is not there and cannot be pulled, root with debootstrap
#                                 makes a stand-in from Debian's mirror (python3 of bookworm).
# Every step has a time limit. Measured here from nothing (installing podman, debootstrap,
# the build): 3 minutes; with the base image there, 1 minute; with the build cached, 20 s.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=localhost/tapeproxy:test
STANDIN=localhost/tapeproxy-base:bookworm
PREFIX=tapeproxy-test-$$
STARTED=$SECONDS

say() { echo "test-image: $* [$((SECONDS - STARTED))s]"; }
skip() {
    echo "test-image: skipped: $*"
    exit 0
}
fail() {
    echo "test-image: FAILED: $*" >&2
    exit 1
}
is_root() { [[ $(id -u) == 0 ]]; }
can_install() { [[ ${TAPEPROXY_INSTALL:-} == 1 ]] && is_root && command -v apt-get >/dev/null; }
install() {
    say "installing $* (apt-get)"
    local out
    out=$(DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -qq 2>&1 &&
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "$@" 2>&1) ||
        fail "apt-get install $*: $(tail -5 <<<"$out")"
}

# --- the engine ---------------------------------------------------------------------------
ENGINE=${TAPEPROXY_ENGINE:-}
if [[ -z $ENGINE ]]; then
    if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
        ENGINE=docker
    elif command -v podman >/dev/null; then
        ENGINE=podman
    elif can_install; then
        install podman runc
        ENGINE=podman
    else
        skip "no docker daemon answers and podman is not installed (TAPEPROXY_INSTALL=1 as root installs it)"
    fi
fi
command -v "$ENGINE" >/dev/null || skip "$ENGINE is not installed"
command -v python3 >/dev/null || skip "python3 is needed for the stand-in provider and the checks"
command -v curl >/dev/null || skip "curl is needed for the checks"
if [[ $ENGINE == podman && -z ${CONTAINERS_CONF:-} ]]; then
    # podman's default limits (nofile, nproc) ask more than a sandbox may grant, and the
    # container then fails to start; ask no more than this shell has, and at most 32768
    # processes. runc, where crun cannot set the limits or cannot use hybrid cgroups.
    export CONTAINERS_CONF
    CONTAINERS_CONF=$(mktemp --suffix=.conf)
    nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
    [[ $nofile == unlimited || $nofile -gt 1048576 ]] && nofile=1048576
    [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    {
        echo "[containers]"
        echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
        if command -v runc >/dev/null; then printf '[engine]\nruntime = "runc"\n'; fi
    } >"$CONTAINERS_CONF"
fi
e() { timeout "${LIMIT:-120}" "$ENGINE" "$@"; }
e info >/dev/null 2>&1 || skip "$ENGINE does not run here: $(e info 2>&1 | tail -1)"
say "engine: $ENGINE"

WORK=$(mktemp -d)
PROVIDER_PID=
cleanup() {
    for name in $(e ps -a --format '{{.Names}}' 2>/dev/null | grep "^$PREFIX" || true); do
        e rm -f "$name" >/dev/null 2>&1 || true
    done
    [[ -n $PROVIDER_PID ]] && kill "$PROVIDER_PID" 2>/dev/null || true
    rm -rf "$WORK"
    [[ -n ${CONTAINERS_CONF:-} && $CONTAINERS_CONF == /tmp/* ]] && rm -f "$CONTAINERS_CONF" || true
}
trap cleanup EXIT

# --- the base image -----------------------------------------------------------------------
pinned=$(sed -n 's/^ARG PYTHON_IMAGE=//p' docker/Dockerfile)
BASE=${PYTHON_IMAGE:-$pinned}
have() { e image inspect "$1" >/dev/null 2>&1; }
mirror() {
    # The Debian mirror apt uses here (deb822 or one-line sources), else deb.debian.org.
    local found
    found=$(grep -hs -m1 -oE '(URIs:|deb) +https?://[^ ]+/debian/?( |$)' \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
        head -1 | awk '{print $2}')
    echo "${found:-http://deb.debian.org/debian}"
}
make_standin() {
    is_root || skip "no base image $BASE (not found, not pulled), and making a stand-in needs root"
    command -v debootstrap >/dev/null || { can_install && install debootstrap; } ||
        skip "no base image $BASE (not found, not pulled), and no debootstrap to make a stand-in"
    local rootfs=$WORK/rootfs source
    source=$(mirror)
    say "making a stand-in base from $source (debootstrap bookworm, python3)"
    timeout 900 debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$rootfs" "$source" >"$WORK/debootstrap.log" 2>&1 ||
        fail "debootstrap: $(tail -3 "$WORK/debootstrap.log")"
    ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
    ln -sf /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # Where outbound TLS is intercepted, pip in the build needs this machine's extra CAs.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
    fi
    tar -C "$rootfs" -c . | LIMIT=300 e import - "$STANDIN" >"$WORK/import.log" 2>&1 ||
        fail "import: $(tail -5 "$WORK/import.log")"
    rm -rf "$rootfs"
}
if ! have "$BASE"; then
    if ! LIMIT=300 e pull -q "$BASE" >/dev/null 2>&1; then
        have "$STANDIN" || make_standin
        say "$BASE cannot be pulled here: building on the stand-in $STANDIN"
        BASE=$STANDIN
    fi
fi

# --- build --------------------------------------------------------------------------------
say "building $IMAGE on $BASE"
build=(build -f docker/Dockerfile -t "$IMAGE" --build-arg "PYTHON_IMAGE=$BASE")
# podman drops HEALTHCHECK in its default OCI format; the base is local (or pulled above).
[[ $ENGINE == podman ]] && build+=(--format docker --pull=never)
LIMIT=900 e "${build[@]}" . >"$WORK/build.log" 2>&1 || fail "build: $(tail -20 "$WORK/build.log")"
health=$(e image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")
[[ $health == *healthcheck.sh* ]] || fail "the image has no health check: $health"
[[ $(e image inspect --format '{{.Config.User}}' "$IMAGE") == tapeproxy ]] || fail "not USER tapeproxy"
say "built: $(e image inspect --format '{{.Size}}' "$IMAGE") bytes"

detach() { # run -d ARGS: podman without systemd warns about health check timers; keep it aside
    e run -d "$@" >/dev/null 2>>"$WORK/engine.log" || fail "run: $(tail -5 "$WORK/engine.log")"
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_healthy() { # NAME URL: the health endpoint answers, then the image's own check passes
    local name=$1 url=$2 deadline=$((SECONDS + 60))
    until curl -sf --max-time 2 "$url/__tapeproxy/health" >/dev/null; do
        [[ $(e inspect --format '{{.State.Running}}' "$name") == true ]] ||
            fail "$name stopped: $(e logs "$name" 2>&1 | tail -5)"
        ((SECONDS < deadline)) || fail "$name not ready in 60 s: $(e logs "$name" 2>&1 | tail -5)"
        sleep 0.5
    done
    if [[ $ENGINE == podman ]]; then
        e healthcheck run "$name" >/dev/null || fail "$name: the image's health check failed"
    else
        until [[ $(e inspect --format '{{.State.Health.Status}}' "$name") == healthy ]]; do
            ((SECONDS < deadline)) || fail "$name: the image's health check never passed"
            sleep 1
        done
    fi
}
stop_cleanly() { # NAME: SIGTERM, exit status 0
    LIMIT=60 e stop -t 20 "$1" >/dev/null 2>>"$WORK/engine.log"
    local code
    code=$(e inspect --format '{{.State.ExitCode}}' "$1")
    [[ $code == 0 ]] || fail "$1 exited $code: $(e logs "$1" 2>&1 | tail -5)"
}

# --- 1. replay ----------------------------------------------------------------------------
library=$WORK/replay
mkdir -p "$library" && cp -r cassettes/example "$library/"
chown -R 1000:1000 "$library" 2>/dev/null || chmod -R a+rwX "$library"
port=$(free_port)
name=$PREFIX-replay
say "1. replay cassettes/example through the container on 127.0.0.1:$port"
detach --name "$name" -p "127.0.0.1:$port:8787" -v "$library:/cassettes" \
    -e TAPEPROXY_CASSETTE=example "$IMAGE"
wait_healthy "$name" "http://127.0.0.1:$port"
# shellcheck disable=SC2016 # awk's own $2
[[ $(e exec "$name" awk '/^Uid:/ {print $2}' /proc/1/status) == 1000 ]] || fail "PID 1 is not uid 1000"
timeout 60 python3 - "http://127.0.0.1:$port" cassettes/example <<'EOF' || fail "replay"
import json, pathlib, sys, urllib.request
base, folder = sys.argv[1], pathlib.Path(sys.argv[2])
for path in sorted(folder.glob("*.json")):
    recorded = json.loads(path.read_text())
    ask, answer = recorded["request"], recorded["response"]
    request = urllib.request.Request(
        f"{base}/{ask['upstream']}{ask['path']}", method=ask["method"],
        data=json.dumps(ask["body"]["json"]).encode(),
        headers={"content-type": "application/json", **ask["headers"]},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == answer["status"], (path.name, response.status)
        assert response.headers["x-tapeproxy-key"] == recorded["key"], path.name
        body = response.read()
    frames = answer.get("frames")
    if frames:  # a stream: every recorded frame comes back, in order
        assert body.decode() == "".join(f["text"] for f in frames), path.name
    print(f"  replayed {path.name[:12]}: {response.status}, {len(body)} bytes")
EOF
stop_cleanly "$name"
e logs "$name" 2>&1 | grep -q "stopped: 3 replayed, 0 recorded, 0 misses, 0 errors" ||
    fail "the replay summary: $(e logs "$name" 2>&1 | tail -3)"
[[ -f $library/.tapeproxy/runs/example.json ]] || fail "the replay run left no note in .tapeproxy/"
diff -r cassettes/example "$library/example" >/dev/null || fail "the replay changed the cassette"

# --- 2. record ----------------------------------------------------------------------------
upstream_port=$(free_port)
timeout 600 python3 -c '
import sys; sys.path.insert(0, "examples")
from http.server import ThreadingHTTPServer
from demo import StandInProvider
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), StandInProvider).serve_forever()
' "$upstream_port" &
PROVIDER_PID=$!
library=$WORK/record
mkdir -p "$library"
chown 1000:1000 "$library" 2>/dev/null || chmod a+rwx "$library"
port=$(free_port)
name=$PREFIX-record
say "2. record through the container (serve --port $port) from a stand-in provider"
detach --name "$name" --network host -v "$library:/cassettes" "$IMAGE" serve --mode record \
    --host 127.0.0.1 --port "$port" --upstream "openai=http://127.0.0.1:$upstream_port"
wait_healthy "$name" "http://127.0.0.1:$port"
question='{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}'
ask() {
    curl -sS --fail-with-body --max-time 30 "http://127.0.0.1:$1/openai/v1/chat/completions" \
        -H "authorization: Bearer sk-test-not-a-key" -H "content-type: application/json" -d "$question"
}
ask "$port" | grep -q "Hello from the provider" || fail "the recorded answer"
stop_cleanly "$name"
mapfile -t files < <(find "$library" -name '*.json')
((${#files[@]} == 1)) || fail "expected one exchange file, found: ${files[*]:-none}"
[[ $(stat -c '%u %a' "${files[0]}") == "1000 644" ]] ||
    fail "the exchange file is $(stat -c 'uid %u mode %a' "${files[0]}"), not uid 1000 mode 644"
! grep -q "sk-test-not-a-key" "${files[0]}" || fail "the key reached the cassette"
e run --rm -v "$library:/cassettes:ro" "$IMAGE" verify >/dev/null 2>>"$WORK/engine.log" || fail "verify"
kill "$PROVIDER_PID" && wait "$PROVIDER_PID" 2>/dev/null || true
PROVIDER_PID=
name=$PREFIX-again
port=$(free_port)
say "   replay it as another uid with the provider gone"
detach --name "$name" --user 1001:1001 -p "127.0.0.1:$port:8787" \
    -v "$library:/cassettes:ro" "$IMAGE"
wait_healthy "$name" "http://127.0.0.1:$port"
ask "$port" | grep -q "Hello from the provider" || fail "the replayed answer"
stop_cleanly "$name"

# --- 3. a library it cannot write ---------------------------------------------------------
library=$WORK/not-yours
mkdir -p "$library" && chmod 755 "$library"
is_root || chmod 555 "$library"
say "3. record into a folder uid 1000 cannot write: refused at start"
code=0
LIMIT=60 e run --name "$PREFIX-refused" -v "$library:/cassettes" "$IMAGE" serve --mode record \
    >"$WORK/refused.log" 2>&1 || code=$?
[[ $code == 1 ]] || fail "exit $code, not 1: $(tail -5 "$WORK/refused.log")"
grep -q "uid 1000 (gid 1000) needs write access to /cassettes" "$WORK/refused.log" ||
    fail "the refusal does not say who needs what: $(tail -3 "$WORK/refused.log")"

say "passed: the image builds, replays, records, stops with 0 and refuses what it cannot write"
