"""deploy/: the Dockerfile, the KubeRay manifests and the `ray up` config, checked statically
(including that every one keeps Ray's token authentication on and the dashboard off public networks).

There is no container engine or Kubernetes here: the Dockerfile is parsed (not
built) and the manifests are checked against the fields KubeRay's ray.io/v1 CRDs
define and require; the `ray up` YAML goes through Ray's own schema validation.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import pytest
import ray
import yaml

from raylink.cli.conf import build_conf, normalize

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
IMAGE = "raylink:0.1.0"

# ray.io/v1 field names (kuberay ray-operator/apis/ray/v1/*_types.go)
CLUSTER_SPEC_FIELDS = {
    "headGroupSpec",
    "workerGroupSpecs",
    "rayVersion",
    "enableInTreeAutoscaling",
    "autoscalerOptions",
    "headServiceAnnotations",
    "suspend",
    "managedBy",
    "gcsFaultToleranceOptions",
    "authOptions",
}
AUTH_FIELDS = {"mode", "secretName", "enableK8sTokenAuth"}  # AuthOptions (KubeRay >= 1.5.1)
PUBLIC_HOSTS = {"0.0.0.0", "::", "[::]", "*"}
HEAD_FIELDS = {"serviceType", "headService", "enableIngress", "rayStartParams", "template"}
WORKER_FIELDS = {
    "groupName",
    "replicas",
    "minReplicas",
    "maxReplicas",
    "idleTimeoutSeconds",
    "rayStartParams",
    "template",
    "scaleStrategy",
    "numOfHosts",
    "suspend",
}
RAYJOB_SPEC_FIELDS = {
    "activeDeadlineSeconds",
    "backoffLimit",
    "rayClusterSpec",
    "submitterPodTemplate",
    "metadata",
    "clusterSelector",
    "submitterConfig",
    "managedBy",
    "deletionStrategy",
    "entrypoint",
    "runtimeEnvYAML",
    "jobId",
    "submissionMode",
    "entrypointResources",
    "entrypointNumCpus",
    "entrypointNumGpus",
    "ttlSecondsAfterFinished",
    "shutdownAfterJobFinishes",
    "suspend",
}


def load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, pending = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    assert not pending, "dangling line continuation"
    return out


def check_cluster_spec(spec: dict) -> None:
    assert set(spec) <= CLUSTER_SPEC_FIELDS, set(spec) - CLUSTER_SPEC_FIELDS
    assert spec["rayVersion"] == ray.__version__  # the image's Ray = the Ray raylink is tested with
    head = spec["headGroupSpec"]
    assert set(head) <= HEAD_FIELDS, set(head) - HEAD_FIELDS
    assert isinstance(head["rayStartParams"], dict)
    assert all(isinstance(v, str) for v in head["rayStartParams"].values())  # map[string]string
    check_token_auth_and_private_dashboard(spec)
    container = head["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert {p["containerPort"]: p["name"] for p in container["ports"]} == {
        6379: "gcs-server",
        8265: "dashboard",
        10001: "client",
    }
    assert spec["workerGroupSpecs"], "no worker group"
    for group in spec["workerGroupSpecs"]:
        assert set(group) <= WORKER_FIELDS, set(group) - WORKER_FIELDS
        assert {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= set(group)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", group["groupName"])
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert isinstance(group["rayStartParams"], dict)
        worker = group["template"]["spec"]["containers"][0]
        assert worker["image"] == IMAGE
        assert worker["resources"]["requests"]["cpu"] and worker["resources"]["limits"]["memory"]


def pod_specs(spec: dict) -> list[dict]:
    return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]


def check_token_auth_and_private_dashboard(spec: dict) -> None:
    """Job submission runs code: token auth on, and the dashboard reachable inside the cluster only."""
    auth = spec.get("authOptions")
    assert isinstance(auth, dict) and set(auth) <= AUTH_FIELDS, auth
    assert auth["mode"] == "token"  # KubeRay: token Secret + RAY_AUTH_MODE / RAY_AUTH_TOKEN in every pod
    assert not auth.get("enableK8sTokenAuth")  # unsupported for RayJob; plain token auth everywhere
    for pod in pod_specs(spec):
        assert not pod.get("hostNetwork"), "a host-network pod binds the node's public interfaces"
        for container in pod["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            assert env.get("RAY_AUTH_MODE", "token") == "token", env  # nothing turns auth back off
            assert all("hostPort" not in p for p in container.get("ports", [])), container["ports"]
    head = spec["headGroupSpec"]
    # the dashboard listens on the head pod's own network namespace (KubeRay's default 0.0.0.0 there:
    # pod IP + loopback); what decides public exposure is the Service, which must stay cluster-internal
    assert head["rayStartParams"].get("dashboard-host", "0.0.0.0") in ("0.0.0.0", "127.0.0.1", "localhost")
    assert head.get("serviceType", "ClusterIP") == "ClusterIP"
    assert not head.get("enableIngress")
    assert (head.get("headService") or {}).get("spec", {}).get("type", "ClusterIP") == "ClusterIP"


def test_dockerfile_builds_on_the_ray_image_with_java_17_and_raylink():
    instructions = dockerfile_instructions()
    args = dict(a.split("=", 1) for k, a in instructions if k == "ARG" and "=" in a)
    froms = [a for k, a in instructions if k == "FROM"]
    assert len(froms) == 1
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], froms[0])
    assert re.fullmatch(rf"rayproject/ray:{re.escape(ray.__version__)}-py3\d+", base), base
    runs = " ".join(a for k, a in instructions if k == "RUN")
    assert re.search(r"apt-get install -y --no-install-recommends openjdk-17-jre-headless", runs)
    assert "python -m pip install --no-cache-dir /tmp/raylink-src" in runs
    assert "import raylink.api, raylink.cli" in runs and "java -version" in runs
    assert ("COPY", "--chown=1000:100 . /tmp/raylink-src") in instructions
    env = " ".join(a for k, a in instructions if k == "ENV")
    assert "JAVA_HOME=/opt/java-17" in env and "PYSPARK_PYTHON=python" in env
    users = [a for k, a in instructions if k == "USER"]
    assert users[0] == "root" and users[-1] == "ray"  # installs as root, runs as Ray's user
    # the RayJob's entrypoint file is where the image puts the examples
    assert "cp -r /tmp/raylink-src/examples /home/ray/raylink/examples" in runs
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {".git", ".venv", "**/__pycache__"} <= set(ignored)


def test_raycluster_manifest_has_what_kuberay_requires():
    doc = load("kuberay/raycluster.yaml")
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == ("ray.io/v1", "RayCluster", "raylink")
    check_cluster_spec(doc["spec"])
    assert doc["spec"]["headGroupSpec"]["serviceType"] == "ClusterIP"


def test_rayjob_manifest_runs_the_demo_job_and_cleans_up():
    from raylink.cli.main import build_parser

    doc = load("kuberay/rayjob.yaml")
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == ("ray.io/v1", "RayJob", "raylink-demo")
    spec = doc["spec"]
    assert set(spec) <= RAYJOB_SPEC_FIELDS, set(spec) - RAYJOB_SPEC_FIELDS
    assert ("rayClusterSpec" in spec) != ("clusterSelector" in spec)
    check_cluster_spec(spec["rayClusterSpec"])
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    assert spec["submissionMode"] in ("K8sJobMode", "HTTPMode")
    argv = shlex.split(spec["entrypoint"])
    assert argv[:3] == ["python", "-m", "raylink"] and argv[3] == "demo"
    args = build_parser().parse_args(argv[3:])  # the CLI accepts exactly these options
    assert (args.command, args.parallelism) == ("demo", 2)
    # `raylink demo` loads examples/ next to the installed package: the image puts it there
    runs = " ".join(a for k, a in dockerfile_instructions() if k == "RUN")
    assert "print(os.path.dirname(raylink.__file__))')/examples" in runs
    assert (ROOT / "examples" / "clicks_demo.py").is_file()
    # the word-count alternative in the header comment points at a file the image has
    alternative = re.search(r"entrypoint: (python -m raylink run .*)", (DEPLOY / "kuberay/rayjob.yaml").read_text())
    job = shlex.split(alternative.group(1))[-1]
    assert job.startswith("/home/ray/raylink/examples/") and (ROOT / "examples" / Path(job).name).is_file()
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    conf = json.loads(runtime_env["env_vars"]["RAYLINK_CONF"])
    assert {k: normalize(k, v) for k, v in conf.items()} == conf  # valid keys and values for raylink


def test_ray_up_config_passes_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = load("vm/cluster.yaml")
    validate_config(prepare_config(copy.deepcopy(config)))
    assert config["docker"]["image"] == IMAGE
    head = " ".join(config["head_start_ray_commands"])
    assert re.search(r"ray start --head --port=6379 .*--dashboard-port=8265", head)
    assert "--ray-client-server-port=10001" in head
    assert any("ray start --address=$RAY_HEAD_IP:6379" in c for c in config["worker_start_ray_commands"])


def test_ray_up_config_starts_every_node_with_token_auth_and_a_loopback_dashboard():
    config = load("vm/cluster.yaml")
    starts = [
        c for key in ("head_start_ray_commands", "worker_start_ray_commands") for c in config[key] if "ray start" in c
    ]
    assert len(starts) == 2
    for command in starts:  # the variable on the same shell command as `ray start`
        assert re.search(r"\bRAY_AUTH_MODE=token ray start\b", command), command
    # Ray looks for the token at ~/.ray/auth_token; `ray get-auth-token --generate` writes it here
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    head = " ".join(config["head_start_ray_commands"])
    host = re.search(r"--dashboard-host[= ](\S+)", head)
    assert host and host.group(1) in ("127.0.0.1", "localhost"), head  # reached through `ray dashboard`
    header = (DEPLOY / "vm/cluster.yaml").read_text()
    assert "ray get-auth-token --generate" in header and "ray dashboard deploy/vm/cluster.yaml" in header


def test_no_manifest_or_doc_binds_the_dashboard_publicly_without_auth():
    docs = {
        path: path.read_text()
        for path in [ROOT / "README.md", *sorted(DEPLOY.rglob("*.md")), *sorted(DEPLOY.rglob("*.yaml"))]
    }
    for path, text in docs.items():
        for command in re.findall(r"(?:RAY_AUTH_MODE=\S+ )?ray start\b[^\n`#]*", text):
            assert command.startswith("RAY_AUTH_MODE=token "), (path, command)  # every node: token auth
            host = re.search(r"--dashboard-host[= ]+(\S+)", command)
            assert not host or host.group(1).strip("'\"") not in PUBLIC_HOSTS, (path, command)
        if path.suffix == ".yaml":
            assert not re.search(r"RAY_AUTH_MODE\W+disabled|mode: *disabled", text), path
    readme = docs[ROOT / "README.md"]
    assert "ray get-auth-token --generate" in readme and "deploy/README.md" in readme
    notes = (DEPLOY / "README.md").read_text()
    for text in ("kubectl port-forward", "ray dashboard", "proxy", "RAY_AUTH_MODE=token", "TLS"):
        assert text in notes, text


def test_readme_shows_the_three_paths():
    readme = (ROOT / "README.md").read_text()
    for heading in ("## Running on a Ray cluster", "## Kubernetes"):
        assert heading in readme
    for text in (
        "raylink run examples/word_count.py",
        "raylink submit --address http://",
        "kubectl apply -f deploy/kuberay/rayjob.yaml",
        "ray up deploy/vm/cluster.yaml",
        "docker build -f deploy/Dockerfile",
    ):
        assert text in readme, text


def test_conf_file_example_in_readme_is_valid(tmp_path):
    """The README's job.yaml snippet parses into known keys."""
    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"```yaml\n# job\.yaml\n(.*?)```", readme, re.S)
    assert snippet, "README has no job.yaml example"
    path = tmp_path / "job.yaml"
    path.write_text(snippet.group(1))
    conf, warnings = build_conf(str(path), [])
    assert warnings == [] and conf["parallelism.default"] >= 1
