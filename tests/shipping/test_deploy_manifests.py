"""What no linter checks in deploy/: the rendered overlays agree with themselves, the image and the server.

Offline and fast: every overlay is rendered once with `kubectl kustomize` (skipped, with the reason, where
kubectl is absent; deploy/check.sh always has it). The running checks -- image, container, pod -- are in
deploy/check.sh.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.engine.bounds import CostModel
from service.engine.memory import MIB, default_memory_budget
from service.http.settings import ENV_PREFIX, Settings
from service.sizing import REFERENCE, choose_plan
from testkit import jobs
from testkit.engine import memory_limit_for_budget

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists())
DOCKERFILE = (REPO / "Dockerfile").read_text()
KUBECTL = os.environ.get("KUBECTL") or shutil.which("kubectl")
EXPECTED_KINDS = {
    "Deployment",
    "Service",
    "ConfigMap",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ServiceAccount",
}
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl not installed: cannot render the overlays "
    "(deploy/check.sh installs what it needs and runs these tests)",
)


def dockerfile_value(pattern: str) -> str:
    match = re.search(pattern, DOCKERFILE, re.M)
    assert match, f"Dockerfile lost {pattern!r}"
    return match.group(1)


APP_UID = int(dockerfile_value(r"^ARG APP_UID=(\d+)$"))
HF_HOME = dockerfile_value(r"^\s+HF_HOME=(\S+) \\$")  # the runtime ENV, not the build step's


class Rendered:
    """One overlay's objects, with the lookups the checks need."""

    def __init__(self, name: str, docs: list[dict[str, Any]]) -> None:
        self.name = name
        self.docs = docs

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.all(kind)
        assert len(found) == 1, f"{self.name}: {len(found)} {kind} objects"
        return found[0]

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["spec"]["containers"]
        assert len(containers) == 1, "one container per pod: the server"
        return containers[0]

    def settings(self) -> dict[str, str]:
        """The TOKENIZER_SERVICE_* variables the container gets from its ConfigMaps and env values."""
        configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in self.all("ConfigMap")}
        values: dict[str, str] = {}
        for source in self.container.get("envFrom", []):
            name = source["configMapRef"]["name"]
            assert name in configmaps, f"{self.name}: envFrom names ConfigMap {name!r}, which is not rendered"
            values.update(configmaps[name])
        values.update({e["name"]: e["value"] for e in self.container.get("env", []) if "value" in e})
        return values

    def grace_seconds(self) -> float:
        return self.setting("graceful_shutdown_seconds")

    def setting(self, name: str) -> float:
        """A numeric setting as the server will read it: the rendered variable, else the default."""
        value = self.settings().get(ENV_PREFIX + name.upper())
        return float(value) if value is not None else float(Settings.model_fields[name].default)


def render(target: Path) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {target.relative_to(REPO)}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> Rendered:
    if KUBECTL is None:
        pytest.skip(needs_kubectl.kwargs["reason"])
    return Rendered(request.param, render(DEPLOY / "overlays" / request.param))


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def port_of(container: dict[str, Any], port: int | str) -> dict[str, Any]:
    """The container port a probe, Service or NetworkPolicy refers to, by name or number."""
    for declared in container["ports"]:
        if port in (declared.get("name"), declared["containerPort"]):
            return declared
    raise AssertionError(f"port {port!r} is not a port of container {container['name']!r}")


def test_there_are_dev_and_prod_overlays():
    assert {"dev", "prod"} <= set(OVERLAYS)


@needs_kubectl
def test_every_overlay_and_the_base_render_with_every_object():
    for overlay_dir in [DEPLOY / "base", *(DEPLOY / "overlays" / name for name in OVERLAYS)]:
        kinds = {doc["kind"] for doc in render(overlay_dir)}
        assert kinds == EXPECTED_KINDS, f"{overlay_dir.relative_to(REPO)}: {sorted(kinds)}"


def test_overlays_live_in_their_own_namespace(overlay: Rendered):
    namespaces = {doc["metadata"].get("namespace") for doc in overlay.docs}
    assert len(namespaces) == 1 and None not in namespaces and "default" not in namespaces, namespaces


def test_services_select_the_pods_and_target_the_http_port(overlay: Rendered):
    labels = overlay.pod["metadata"]["labels"]
    services = {s["metadata"]["name"]: s for s in overlay.all("Service")}
    assert len(services) == 2
    for service in services.values():
        assert matches(service["spec"]["selector"], labels), f"{service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            assert port_of(overlay.container, port["targetPort"])["protocol"] == port.get("protocol", "TCP")
    headless = [s for s in services.values() if s["spec"].get("clusterIP") == "None"]
    assert len(headless) == 1, "one headless Service, for client-side spreading over the pods"
    assert not headless[0]["spec"].get("publishNotReadyAddresses", False), "a draining pod must leave DNS"


def test_the_container_port_is_the_servers_and_the_images(overlay: Rendered):
    http = port_of(overlay.container, "http")
    port = int(overlay.settings().get(ENV_PREFIX + "PORT", Settings.model_fields["port"].default))
    assert http["containerPort"] == port
    assert f"EXPOSE {port}" in DOCKERFILE


def test_probes_hit_the_right_endpoints_on_a_container_port(overlay: Rendered):
    container = overlay.container
    expected = {"startupProbe": "/readyz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in expected.items():
        assert probe in container, f"{overlay.name}: no {probe}"
        http_get = container[probe]["httpGet"]
        assert http_get["path"] == path, f"{probe} must ask {path}"
        port_of(container, http_get["port"])
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60, "give a hub tokenizer time to load"


def test_rust_threads_come_from_the_cpu_limit(overlay: Rendered):
    container = overlay.container
    threads = [e for e in container.get("env", []) if e["name"] == ENV_PREFIX + "THREADS"]
    assert len(threads) == 1, "TOKENIZER_SERVICE_THREADS must be set once, in the container's env"
    ref = threads[0].get("valueFrom", {}).get("resourceFieldRef")
    assert ref, "TOKENIZER_SERVICE_THREADS must come from the downward API (resourceFieldRef)"
    assert ref["resource"] == "limits.cpu" and ref.get("containerName") == container["name"]
    assert str(ref.get("divisor", "1")) == "1"
    assert ENV_PREFIX + "THREADS" not in overlay.settings(), "a ConfigMap must not override the thread count"
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    # divisor 1 rounds a fractional limit up (1500m -> 2 threads on 1.5 CPUs): whole CPUs only.
    assert re.fullmatch(r"[1-9]\d*", str(limits["cpu"])), f"CPU limit {limits['cpu']!r} is not a whole number"
    assert str(requests["cpu"]) == str(limits["cpu"]), "requests == limits: Guaranteed QoS, HPA measured on it"
    assert "memory" in limits and str(requests["memory"]) == str(limits["memory"])


def test_a_pod_is_one_process_and_gets_the_default_plans_threads_and_says_how_to_measure_yours(overlay: Rendered):
    """Replicas stay pods in Kubernetes: one server process per pod (no --replicas), and its CPU limit within the
    threads the default plan gives a process (the planner on service.sizing.REFERENCE, any node size): past them a
    pool gains little, add pods. The manifest and the guide say how to measure the node's own: calibrate."""
    container = overlay.container
    limit = int(str(container["resources"]["limits"]["cpu"]))
    default_threads = max(choose_plan(REFERENCE, cores).threads for cores in (8, 16, 32, 64, 128))
    assert limit <= default_threads, f"{overlay.name}: {limit} CPUs, the default plan gives a process {default_threads}"
    names = {e["name"] for e in container.get("env", [])} | set(overlay.settings())
    assert ENV_PREFIX + "REPLICAS" not in names, "replicas are pods here (the HPA's), not processes of one pod"
    for said in ("docs/guides/deploying.md", "deploy/base/deployment.yaml"):  # what they say follows the planner
        text = (REPO / said).read_text()
        assert "tokenizer-service calibrate" in text and f"gives {default_threads}" in text, said


MEMORY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def memory_bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kMG]i?|Ki)?", str(quantity)).groups()
    return int(number) * MEMORY_UNITS[unit or ""]


def largest_response_cost(max_response_tokens: int, budget: int) -> int:
    """What admission reserves for the largest response ``max_response_tokens`` allows, as deploy/smoke.py
    asks for it (4096 rows padded with max_length, ids, type ids and mask): the output columns, one slice
    of Rust encodings (an eighth of the budget) and the rows."""
    costs = CostModel()
    return max_response_tokens * 3 * costs.out_per_position_column + budget // 8 + 4096 * 1024


def budget_of(settings: dict[str, str]) -> int:
    mib = settings.get(ENV_PREFIX + "MEMORY_BUDGET_MIB")
    assert mib is not None, "set TOKENIZER_SERVICE_MEMORY_BUDGET_MIB from the memory limit, so it is visible"
    return int(mib) * MIB


def check_memory(where: str, limit: int, settings: dict[str, str]) -> None:
    budget = budget_of(settings)
    needed = memory_limit_for_budget(budget)
    assert needed <= limit, (
        f"{where}: a budget of {budget / MIB:.0f} MiB needs a memory limit of {needed / MIB:.0f} MiB "
        f"(256 MiB + 4/3 x the budget); the limit is {limit / MIB:.0f} MiB"
    )
    assert budget >= default_memory_budget(limit) * 0.9, f"{where}: the budget wastes the memory limit"
    tokens = int(settings.get(ENV_PREFIX + "MAX_RESPONSE_TOKENS", Settings.model_fields["max_response_tokens"].default))
    assert largest_response_cost(tokens, budget) <= budget, (
        f"{where}: the largest response TOKENIZER_SERVICE_MAX_RESPONSE_TOKENS={tokens} allows would be refused by "
        f"the memory budget: lower it or raise the budget (and the limit)"
    )


def test_the_memory_budget_follows_the_memory_limit(overlay: Rendered):
    check_memory(overlay.name, memory_bytes(overlay.container["resources"]["limits"]["memory"]), overlay.settings())


def test_termination_grace_covers_prestop_and_the_drain(overlay: Rendered):
    spec = overlay.pod["spec"]
    command = overlay.container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, "preStop pauses with the image's /bin/sleep"
    pause = float(command[1])
    assert pause >= 3, "preStop must outlast the endpoint-removal lag"
    # serving.py exits hard 1 s after the grace period; the kubelet must not SIGKILL before that.
    assert spec["terminationGracePeriodSeconds"] > pause + overlay.grace_seconds() + 1, (
        f"{overlay.name}: terminationGracePeriodSeconds {spec['terminationGracePeriodSeconds']} <= preStop "
        f"{pause} + graceful shutdown {overlay.grace_seconds()} + 1"
    )
    # The listen window (503s to clients still routed here) is the drain's first part: within the grace
    # period, or the server would cut it short; preStop and the window together cover the endpoint removal.
    window = overlay.setting("drain_listen_seconds")
    assert 0 < window < overlay.grace_seconds(), f"{overlay.name}: drain listen window {window}s"
    assert pause + window >= 5, f"{overlay.name}: preStop {pause}s + listen window {window}s"


def test_rolling_updates_and_disruptions_never_drop_below_the_budget(overlay: Rendered):
    deployment = overlay.deployment
    pdb, hpa = overlay.one("PodDisruptionBudget"), overlay.one("HorizontalPodAutoscaler")
    labels = overlay.pod["metadata"]["labels"]
    assert matches(deployment["spec"]["selector"]["matchLabels"], labels)
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels), "the PDB selects no pod"
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] >= 1, "replace pods only after the new one is ready"
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    if "minAvailable" in pdb["spec"]:  # else a node drain could never proceed
        assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]
    else:
        assert pdb["spec"]["maxUnavailable"] >= 1


def test_network_policy_lets_in_only_the_http_port(overlay: Rendered):
    policy = overlay.one("NetworkPolicy")
    assert matches(policy["spec"]["podSelector"]["matchLabels"], overlay.pod["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    http = port_of(overlay.container, "http")
    for rule in policy["spec"]["ingress"]:
        assert rule.get("ports"), "an ingress rule without ports opens every port"
        for port in rule["ports"]:
            assert port_of(overlay.container, port["port"]) is http and port["protocol"] == "TCP"


def test_pods_run_locked_down_as_the_images_user(overlay: Rendered):
    spec, security = overlay.pod["spec"], overlay.container["securityContext"]
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] and pod_security["runAsUser"] == APP_UID
    assert pod_security["seccompProfile"]["type"] == "RuntimeDefault"
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and not security["capabilities"].get("add")
    assert security.get("runAsUser", APP_UID) == APP_UID
    assert spec["automountServiceAccountToken"] is False
    [account] = overlay.all("ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert account["automountServiceAccountToken"] is False
    # A Service named tokenizer-service would inject TOKENIZER_SERVICE_PORT=tcp://...: our --port setting.
    assert spec["enableServiceLinks"] is False


def test_the_writable_paths_are_volumes(overlay: Rendered):
    mounts = {m["mountPath"]: m for m in overlay.container["volumeMounts"]}
    volumes = {v["name"]: v for v in overlay.pod["spec"]["volumes"]}
    for path in ("/tmp", HF_HOME):
        assert path in mounts, f"{path} must be a volume: the root filesystem is read-only"
        assert not mounts[path].get("readOnly", False)
        assert mounts[path]["name"] in volumes


def test_configmap_settings_are_real_settings_with_valid_values(overlay: Rendered):
    settings = {key: value for key, value in overlay.settings().items()}
    fields = {}
    for key, value in settings.items():
        assert key.startswith(ENV_PREFIX), f"{key} is not a TOKENIZER_SERVICE_* setting"
        name = key[len(ENV_PREFIX) :].lower()
        assert name in Settings.model_fields, f"{key} is not a setting (tokenizer-service serve --help)"
        fields[name] = value
    Settings(**fields)  # raises on a value the server would refuse at start


def test_every_checkov_skip_has_a_reason():
    skips = yaml.safe_load((DEPLOY / "checkov-skips.yaml").read_text())
    assert skips and all(re.fullmatch(r"CKV2?_[A-Z0-9]+_\d+", check) for check in skips)
    assert all(isinstance(reason, str) and len(reason) > 40 for reason in skips.values())


def test_compose_threads_match_its_cpu_limit_and_it_stops_gracefully():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    [service] = compose["services"].values()
    environment = service["environment"]
    cpus = service["deploy"]["resources"]["limits"]["cpus"]
    assert environment[ENV_PREFIX + "THREADS"] == str(int(float(cpus)))
    limit = memory_bytes(service["deploy"]["resources"]["limits"]["memory"].replace("G", "Gi"))
    check_memory("docker-compose.yml", limit, environment)
    grace = float(environment.get(ENV_PREFIX + "GRACEFUL_SHUTDOWN_SECONDS", 30))
    assert float(service["stop_grace_period"].rstrip("s")) > grace + 1
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
    assert service["user"].split(":")[0] == str(APP_UID)
    assert any(v.endswith(":" + HF_HOME) for v in service["volumes"])
    assert all(p.startswith("127.0.0.1:") for p in service["ports"]), "local use: publish on loopback only"


def test_bake_script_copies_the_snapshot_and_records_what_it_baked(tmp_path, monkeypatch):
    """The Dockerfile's `baked` stage, minus the hub: a snapshot laid out as huggingface_hub caches it."""
    import importlib.util
    import json

    import huggingface_hub

    from service.engine.loading import DEFAULT_TOKENIZER_DIR, load_tokenizer

    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot, blobs = tmp_path / "snapshots" / commit, tmp_path / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for source in DEFAULT_TOKENIZER_DIR.iterdir():
        (blobs / source.name).write_bytes(source.read_bytes())
        (snapshot / source.name).symlink_to(blobs / source.name)
    asked = []
    monkeypatch.setattr(
        huggingface_hub,
        "snapshot_download",
        lambda repo, revision, allow_patterns: asked.append((repo, revision)) or str(snapshot),
    )
    spec = importlib.util.spec_from_file_location("bake_tokenizer", DEPLOY / "bake_tokenizer.py")
    bake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bake)

    out = tmp_path / "opt-tokenizer"
    assert bake.main(["org/model", commit, str(out)]) == 0
    assert asked == [("org/model", commit)]
    assert not any(p.is_symlink() for p in out.iterdir()), "the image needs the files, not links into a cache"
    source = json.loads((out / "source.json").read_text())
    expected = load_tokenizer(None).fingerprint
    assert source == {"model": "org/model", "revision": commit, "commit": commit, "fingerprint": expected}
    assert load_tokenizer(str(out)).fingerprint == expected
    assert bake.main(["org/model", "", str(out)]) == 2, "a revision is required"


def test_the_image_lock_satisfies_pyproject():
    """The image installs requirements/server.lock with --require-hashes and the project with --no-deps: a
    dependency added to pyproject.toml but not locked would only fail the image build. Fix: run
    requirements/update-lock.sh."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = (REPO / "requirements" / "server.lock").read_text()
    pins = {canonicalize_name(name): version for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock, re.M)}
    for line in [*project["dependencies"], *project["optional-dependencies"]["server"]]:
        requirement = Requirement(line)
        if requirement.marker and not requirement.marker.evaluate({"sys_platform": "linux"}):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements/server.lock: run requirements/update-lock.sh"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"server.lock pins {name}=={pins[name]}, pyproject.toml asks {requirement}: run requirements/update-lock.sh"
        )


# -- the pre-tokenize Job (deploy/jobs/pretokenize) ------------------------------------------------------
JOBS = sorted(p.name for p in (DEPLOY / "jobs").iterdir() if (p / "kustomization.yaml").exists())


@pytest.fixture(scope="module")
def pretokenize_job() -> Rendered:
    if KUBECTL is None:
        pytest.skip(needs_kubectl.kwargs["reason"])
    return Rendered("jobs/pretokenize", render(DEPLOY / "jobs" / "pretokenize"))


def job_container(job: Rendered) -> dict[str, Any]:
    [container] = job.one("Job")["spec"]["template"]["spec"]["containers"]
    return container


def test_the_pretokenize_job_is_an_indexed_job_that_knows_its_total(pretokenize_job: Rendered):
    assert JOBS == ["pretokenize", "pretokenize-s3", "train", "train-s3"]
    assert {doc["kind"] for doc in pretokenize_job.docs} == {"Job", "NetworkPolicy"}
    namespaces = {doc["metadata"].get("namespace") for doc in pretokenize_job.docs}
    assert len(namespaces) == 1 and None not in namespaces and "default" not in namespaces
    spec = pretokenize_job.one("Job")["spec"]
    env = {e["name"]: e["value"] for e in job_container(pretokenize_job)["env"]}
    assert spec["completionMode"] == "Indexed"
    # worker 0 waits for the others to write the manifest: all must run at once
    assert int(env["JOB_COMPLETIONS"]) == spec["completions"] == spec["parallelism"]
    assert spec["backoffLimitPerIndex"] >= 1 and spec["maxFailedIndexes"] == 0
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    [usage] = [r for r in spec["podFailurePolicy"]["rules"] if r["action"] == "FailIndex"]
    assert usage["onExitCodes"] == {"containerName": "pretokenize", "operator": "In", "values": [2]}


def test_the_pretokenize_job_calls_the_service_of_the_prod_overlay(pretokenize_job: Rendered):
    prod = Rendered("prod", render(DEPLOY / "overlays" / "prod"))
    service = next(s for s in prod.all("Service") if s["spec"].get("clusterIP") != "None")
    url = {e["name"]: e["value"] for e in job_container(pretokenize_job)["env"]}["TOKENIZER_SERVICE_URL"]
    assert url == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert service["metadata"]["namespace"] == pretokenize_job.one("Job")["metadata"]["namespace"]
    policy = pretokenize_job.one("NetworkPolicy")
    job_labels = pretokenize_job.one("Job")["spec"]["template"]["metadata"]["labels"]
    assert matches(policy["spec"]["podSelector"]["matchLabels"], job_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and not policy["spec"].get("ingress")
    to_service = policy["spec"]["egress"][0]
    assert matches(to_service["to"][0]["podSelector"]["matchLabels"], prod.pod["metadata"]["labels"])
    assert to_service["ports"] == [{"port": port_of(prod.container, "http")["containerPort"], "protocol": "TCP"}]


def test_the_pretokenize_job_runs_locked_down_with_its_volumes(pretokenize_job: Rendered):
    pod = pretokenize_job.one("Job")["spec"]["template"]["spec"]
    container = job_container(pretokenize_job)
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == APP_UID
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"] and pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    args = container["args"]
    corpus, out = args[1], args[args.index("--out") + 1]
    assert mounts[corpus]["readOnly"] and volumes[mounts[corpus]["name"]]["persistentVolumeClaim"]["readOnly"]
    assert out.startswith(next(path for path, m in mounts.items() if not m.get("readOnly") and path != "/tmp"))
    assert "/tmp" in mounts and "emptyDir" in volumes[mounts["/tmp"]["name"]]


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


class LocalPods:
    """A Job's pods run here as its container would run them: its command, args and env, Kubernetes'
    JOB_COMPLETION_INDEX, with each volume a local folder (``path`` maps a container path to it)."""

    def __init__(self, job: Rendered, tmp_path: Path) -> None:
        self.spec = job.one("Job")["spec"]
        self.container = job_container(job)
        self.mounts = {m["mountPath"]: tmp_path / m["name"] for m in self.container["volumeMounts"]}
        assert self.container["command"] == ["tokenizer-service"]

    def path(self, value: str) -> str:
        for mount, folder in self.mounts.items():
            if value == mount or value.startswith(mount + "/"):
                return str(folder) + value[len(mount) :]
        return value

    def arg_after(self, flag: str) -> Path:
        args = self.container["args"]
        return Path(self.path(args[args.index(flag) + 1]))

    def run_every_index(self, env: dict[str, str] | None = None) -> list[str]:
        """Start every index at once, wait for all; each must succeed and say which worker it is. Their stderr."""
        env = {**{e["name"]: e["value"] for e in self.container["env"]}, **(env or {})}
        workers = []
        for index in range(self.spec["completions"]):
            pod_env = {**os.environ, **env, "JOB_COMPLETION_INDEX": str(index)}
            args = [self.path(expand(arg, pod_env)) for arg in self.container["args"]]
            workers.append(jobs.start(args, pod_env))
        errors = [worker.communicate(timeout=240)[1] for worker in workers]
        assert [w.returncode for w in workers] == [0] * len(workers), [err[-2000:] for err in errors]
        for index, err in enumerate(errors):
            assert f"worker {index} of {self.spec['completions']} (JOB_COMPLETION_INDEX, JOB_COMPLETIONS)" in err
        return errors


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_pretokenize_jobs_container_command_runs_against_a_live_service(
    pretokenize_job: Rendered, tmp_path, servers
):
    """Every index of the Job, run as its container would (its command, args and env, Kubernetes'
    JOB_COMPLETION_INDEX), with the volumes as local folders and the Service's URL pointing at a live
    server: all succeed, and worker 0 writes the manifest of every document."""
    import json

    from testkit import corpora

    pods = LocalPods(pretokenize_job, tmp_path)
    corpus_dir = Path(pods.path(pods.container["args"][1]))
    corpus_dir.mkdir(parents=True)
    documents = sum(corpora.write_jsonl(corpus_dir / f"part-{i}.jsonl", 30_000, seed=i) for i in range(6))
    pods.run_every_index({"TOKENIZER_SERVICE_URL": servers["wordpiece_default"].url})  # the Service, here
    manifest = json.loads((pods.arg_after("--out") / "manifest.json").read_text())
    assert manifest["totals"]["documents"] == documents and manifest["format"] == "flat"


# -- the train Job (deploy/jobs/train) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def train_job() -> Rendered:
    if KUBECTL is None:
        pytest.skip(needs_kubectl.kwargs["reason"])
    return Rendered("jobs/train", render(DEPLOY / "jobs" / "train"))


def train_args(job: Rendered) -> Any:
    from service.training.cli import build_parser

    return build_parser("train").parse_args(job_container(job)["args"][1:])


def test_the_train_job_is_an_indexed_job_whose_workers_all_run_at_once(train_job: Rendered):
    assert {doc["kind"] for doc in train_job.docs} == {"Job", "NetworkPolicy"}
    namespaces = {doc["metadata"].get("namespace") for doc in train_job.docs}
    assert len(namespaces) == 1 and None not in namespaces and "default" not in namespaces
    spec = train_job.one("Job")["spec"]
    container = job_container(train_job)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert spec["completionMode"] == "Indexed" and container["args"][0] == "train"
    # worker 0 waits for every worker's counts before it trains: all must run at once
    assert int(env["JOB_COMPLETIONS"]) == spec["completions"] == spec["parallelism"]
    assert spec["backoffLimitPerIndex"] >= 1 and spec["maxFailedIndexes"] == 0
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    [usage] = [r for r in spec["podFailurePolicy"]["rules"] if r["action"] == "FailIndex"]
    assert usage["onExitCodes"] == {"containerName": container["name"], "operator": "In", "values": [2]}
    args = train_args(train_job)
    assert args.phase == "all" and args.shard_index is None and args.num_shards is None  # from the environment
    assert args.progress == "log"  # a pod's log is no terminal


def test_the_train_job_runs_locked_down_on_a_shared_volume_and_talks_to_nobody(train_job: Rendered):
    pod = train_job.one("Job")["spec"]["template"]["spec"]
    container = job_container(train_job)
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == APP_UID
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"] and pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    args = train_args(train_job)
    [corpus] = args.inputs
    assert mounts[corpus]["readOnly"] and volumes[mounts[corpus]["name"]]["persistentVolumeClaim"]["readOnly"]
    [shared] = [path for path, m in mounts.items() if not m.get("readOnly") and path != "/tmp"]
    assert str(args.out).startswith(shared + "/") and str(args.counts_dir).startswith(shared + "/")
    assert "persistentVolumeClaim" in volumes[mounts[shared]["name"]]
    assert "/tmp" in mounts and "emptyDir" in volumes[mounts["/tmp"]["name"]]
    # every counting process (one per CPU of the limit) may hold --count-memory: the limit must cover them
    cpus = int(container["resources"]["limits"]["cpu"])
    assert memory_bytes(container["resources"]["limits"]["memory"]) >= cpus * args.count_memory + 2**30
    policy = train_job.one("NetworkPolicy")
    labels = train_job.one("Job")["spec"]["template"]["metadata"]["labels"]
    assert matches(policy["spec"]["podSelector"]["matchLabels"], labels)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert not policy["spec"].get("ingress") and not policy["spec"].get("egress")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_train_jobs_container_command_trains_one_tokenizer_from_every_index(train_job: Rendered, tmp_path):
    """Every index of the Job, run as its container would (its command, args and env, Kubernetes'
    JOB_COMPLETION_INDEX), all at once, with the volumes as local folders: all succeed, and worker 0 writes a
    tokenizer trained on every document."""
    import json

    from testkit import corpora

    pods = LocalPods(train_job, tmp_path)
    corpus_dir = Path(pods.path(pods.container["args"][1]))
    corpus_dir.mkdir(parents=True)
    documents = sum(corpora.write_jsonl(corpus_dir / f"part-{i}.jsonl", 12_000, seed=i) for i in range(6))
    pods.run_every_index()
    out = pods.arg_after("--out")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == documents and manifest["counts"]["units"] == 6
    assert (out / "tokenizer.json").exists() and (out / "tokenizer_config.json").exists()


# -- the object-storage variants (deploy/jobs/pretokenize-s3, deploy/jobs/train-s3) ----------------------
OBJECT_STORAGE_JOBS = {"pretokenize-s3": "pretokenize", "train-s3": "train"}


@pytest.fixture(scope="module", params=sorted(OBJECT_STORAGE_JOBS))
def object_storage_job(request: pytest.FixtureRequest) -> tuple[Rendered, Rendered]:
    """An object-storage Job and the shared-volume Job it is a variant of, rendered."""
    if KUBECTL is None:
        pytest.skip(needs_kubectl.kwargs["reason"])
    base = OBJECT_STORAGE_JOBS[request.param]
    return Rendered(f"jobs/{request.param}", render(DEPLOY / "jobs" / request.param)), Rendered(
        f"jobs/{base}", render(DEPLOY / "jobs" / base)
    )


def job_args(job: Rendered) -> Any:
    from service.pretokenize.cli import build_parser as pretokenize_parser
    from service.training.cli import build_parser as train_parser

    args = job_container(job)["args"]
    return {"pretokenize": pretokenize_parser, "train": train_parser}[args[0]](args[0]).parse_args(args[1:])


def test_object_storage_jobs_are_their_base_jobs_without_claims_and_with_an_identity(object_storage_job):
    import json

    job, base = object_storage_job
    spec, base_spec = job.one("Job")["spec"], base.one("Job")["spec"]
    for key in ("completionMode", "completions", "parallelism", "backoffLimitPerIndex", "maxFailedIndexes"):
        assert spec[key] == base_spec[key], key
    assert spec["podFailurePolicy"] == base_spec["podFailurePolicy"]
    pod, container, base_container = spec["template"]["spec"], job_container(job), job_container(base)
    assert pod["securityContext"] == base_spec["template"]["spec"]["securityContext"]
    assert container["securityContext"] == base_container["securityContext"]
    assert container["resources"] == base_container["resources"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["JOB_COMPLETIONS"]) == spec["completions"] == spec["parallelism"]
    # no shared volume: every path is a URL, /tmp (spool, spills) the only volume
    assert [v for v in pod["volumes"] if "emptyDir" not in v] == []
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]
    args = job_args(job)
    assert all(path.startswith("s3://") for path in [*args.inputs, args.out])
    assert args.progress == "log" and args.shard_index is None and args.num_shards is None
    assert json.loads(env["TOKENIZER_SERVICE_STORAGE_OPTIONS"]) == {}  # the options, never credentials
    # credentials: the pods' identity (a ServiceAccount with IRSA / Workload Identity annotations) or the
    # optional Secret; none in the manifest
    [account] = job.all("ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert account["metadata"]["namespace"] == job.one("Job")["metadata"]["namespace"]
    assert {"eks.amazonaws.com/role-arn", "iam.gke.io/gcp-service-account"} <= set(account["metadata"]["annotations"])
    assert account["automountServiceAccountToken"] is False and pod["automountServiceAccountToken"] is False
    assert container["envFrom"] == [{"secretRef": {"name": "object-store-credentials", "optional": True}}]
    assert set(env) <= {"JOB_COMPLETIONS", "TOKENIZER_SERVICE_URL", "TOKENIZER_SERVICE_STORAGE_OPTIONS"}
    assert container["image"].rsplit(":", 1)[0].endswith("/tokenizer-service-jobs")
    # the network: what the base allows, plus HTTPS to the store
    policy, base_policy = job.one("NetworkPolicy"), base.one("NetworkPolicy")
    assert policy["spec"]["podSelector"] == base_policy["spec"]["podSelector"]
    assert not policy["spec"].get("ingress")
    assert all(rule in policy["spec"]["egress"] for rule in base_policy["spec"].get("egress") or [])
    assert {"ports": [{"port": 443, "protocol": "TCP"}]} in policy["spec"]["egress"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_object_storage_jobs_container_commands_run_against_a_loopback_store(object_storage_job, tmp_path, servers):
    """Every index of each object-storage Job, run as its container would (command, args, env, Kubernetes'
    JOB_COMPLETION_INDEX), against a real S3-protocol server on 127.0.0.1 holding the corpus at the Job's
    input URL, with the credentials the Secret would give and the store's endpoint in the options variable:
    worker 0 writes the manifest (pre-tokenize, against a live service) or the tokenizer (train) at --out."""
    import json

    from testkit import corpora
    from testkit.objectstore import LoopbackS3

    job, _ = object_storage_job
    pods = LocalPods(job, tmp_path)
    args = job_args(job)
    local = tmp_path / "corpus"
    local.mkdir()
    documents = sum(corpora.write_jsonl(local / f"part-{i}.jsonl", 12_000, seed=i) for i in range(4))
    with LoopbackS3() as s3:
        fs = s3.filesystem()
        [inputs] = args.inputs
        for bucket in {url.removeprefix("s3://").split("/")[0] for url in (inputs, args.out)}:
            if not fs.exists(bucket):  # moto's buckets outlive a server in this process
                fs.mkdir(bucket)
        for path in sorted(local.iterdir()):
            fs.put_file(str(path), f"{inputs.removeprefix('s3://').rstrip('/')}/{path.name}")
        env = {**s3.client_env(), "TOKENIZER_SERVICE_STORAGE_OPTIONS": s3.options_json}
        out = args.out.removeprefix("s3://")
        if job_container(job)["args"][0] == "pretokenize":
            pods.run_every_index({**env, "TOKENIZER_SERVICE_URL": servers["wordpiece_default"].url})
            manifest = json.loads(s3.tree(out)["manifest.json"])
            assert manifest["totals"]["documents"] == documents and manifest["format"] == "flat"
        else:
            pods.run_every_index(env)
            written = s3.tree(out)
            assert set(written) == {"tokenizer.json", "tokenizer_config.json", "manifest.json"}
            assert json.loads(written["manifest.json"])["counts"]["documents"] == documents
