"""The deploy files (deploy/, docs/operations.md#deploying-a-cluster) are valid and fit
together: Compose accepts the compose file (and refuses it without the secrets), every
Kubernetes manifest parses and its objects reference each other consistently, and the Helm
chart's templates use only values its values.yaml defines. The chart is rendered (with its
defaults and with other values) and every object, rendered or plain, is validated against the
Kubernetes schemas.

Needs PyYAML, kubernetes-validate and Go (`make deps` installs them) and a Compose tool:
`docker compose` (v2) or `docker-compose` (v1.29, Debian's). `config` only reads the file: no
Docker daemon, no image.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "compose" / "compose.yaml"
KUBERNETES = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "latticekv"

NODES = ["n1", "n2", "n3", "disk1"]
STATEFULSETS = {"latticekv-memory": "memory", "latticekv-disk": "disk"}


def compose_command() -> list:
    """`docker compose` if the v2 plugin is there, else `docker-compose`."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise AssertionError(
        "no Compose tool: install Docker's compose plugin or Debian's docker-compose"
    )


def compose_config(extra_env: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATTICEKV_")}
    env.update(extra_env)
    return subprocess.run(
        compose_command() + ["-p", "latticekv", "-f", str(COMPOSE_FILE), "config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_compose_config_is_a_secured_cluster_with_volumes():
    out = compose_config(
        {"LATTICEKV_CLUSTER_SECRET": "s3cret-peers", "LATTICEKV_PASSWORD": "s3cret-clients"}
    )
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    assert set(services) == set(NODES) | {"monitor"}
    for name in NODES:
        s = services[name]
        command = s["command"]
        assert command[0] == "server", command
        # Its id and the name peers reach it by are its service name.
        assert command[command.index("--node-id") + 1] == name
        assert command[command.index("--advertise") + 1] == name
        assert "--no-leave" in command
        if name != "n1":
            assert command[command.index("--seeds") + 1] == "n1:7700"
        env = s["environment"]
        assert env["LATTICEKV_CLUSTER_SECRET"] == "s3cret-peers"
        assert env["LATTICEKV_PASSWORD"] == "s3cret-clients"
        assert env["LATTICEKV_REPLICATION"] == "3"
        # State on a named volume at the image's /data.
        volumes = [str(v) for v in s["volumes"]]
        assert any(v.startswith(f"{name}-data:/data") for v in volumes), volumes
        assert f"{name}-data" in config["volumes"]
        assert "/latticekv" in s["healthcheck"]["test"]
    disk = services["disk1"]["command"]
    assert disk[disk.index("--tier") + 1] == "disk"
    # Only n1 publishes ports, and only on the host's loopback.
    for name in NODES[1:] + ["monitor"]:
        assert not services[name].get("ports"), name
    published = [str(p) for p in services["n1"]["ports"]]
    assert len(published) == 2
    for p in published:
        assert "127.0.0.1" in p, published
    monitor = services["monitor"]
    assert monitor["command"][:3] == ["monitor", "--addr", "n1:7700"]
    assert monitor["environment"]["LATTICEKV_PASSWORD"] == "s3cret-clients"


def test_compose_refuses_to_start_without_the_secrets():
    out = compose_config({"LATTICEKV_PASSWORD": "only-the-password"})
    assert out.returncode != 0, out.stdout
    assert "LATTICEKV_CLUSTER_SECRET" in out.stderr, out.stderr
    out = compose_config({"LATTICEKV_CLUSTER_SECRET": "only-the-secret"})
    assert out.returncode != 0, out.stdout
    assert "LATTICEKV_PASSWORD" in out.stderr, out.stderr


def kubernetes_objects() -> list:
    objects = []
    files = sorted(KUBERNETES.glob("*.yaml"))
    assert {f.name for f in files} >= {"latticekv.yaml", "secret.yaml", "monitor-rbac.yaml"}
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc is None:
                continue
            assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{f.name}: {doc}"
            objects.append(doc)
    return objects


def by_kind(objects, kind) -> dict:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_kubernetes_manifests_fit_together():
    objects = kubernetes_objects()
    assert "latticekv" in by_kind(objects, "Namespace")
    check_fit_together(objects)


def check_fit_together(objects: list):
    """The objects (the plain manifests, or the chart rendered into namespace latticekv)
    reference each other consistently."""
    for o in objects:
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == "latticekv", o["metadata"]
    secrets = by_kind(objects, "Secret")
    assert set(secrets["latticekv"]["stringData"]) == {"cluster-secret", "password"}
    services = by_kind(objects, "Service")
    statefulsets = by_kind(objects, "StatefulSet")
    pdbs = by_kind(objects, "PodDisruptionBudget")
    accounts = by_kind(objects, "ServiceAccount")
    assert set(statefulsets) == set(STATEFULSETS)

    for name, tier in STATEFULSETS.items():
        sts = statefulsets[name]["spec"]
        pod_labels = sts["template"]["metadata"]["labels"]
        assert sts["selector"]["matchLabels"].items() <= pod_labels.items()
        # The headless Service of the same name: the monitor's manager and the pods'
        # advertised DNS names rely on it.
        assert sts["serviceName"] == name
        headless = services[name]["spec"]
        assert headless["clusterIP"] == "None"
        assert headless["publishNotReadyAddresses"] is True
        assert headless["selector"].items() <= pod_labels.items()
        assert pdbs[name]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

        pod = sts["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["args"][0] == "server"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for port in headless["ports"]:
            assert port["targetPort"] in ports, port
        env = {e["name"]: e for e in container["env"]}
        assert env["LATTICEKV_TIER"]["value"] == tier
        assert env["LATTICEKV_NODE_ID"]["value"] == "$(POD_NAME)"
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["LATTICEKV_ADVERTISE"]["value"] == f"$(POD_NAME).{name}.latticekv.svc"
        assert env["LATTICEKV_SEEDS"]["value"] == (
            "latticekv-memory-0.latticekv-memory.latticekv.svc:7700"
        )
        for var, key in [("LATTICEKV_CLUSTER_SECRET", "cluster-secret"), ("LATTICEKV_PASSWORD", "password")]:
            ref = env[var]["valueFrom"]["secretKeyRef"]
            assert ref["name"] in secrets and key in secrets[ref["name"]]["stringData"], ref
        # Probes on /health, served on the HTTP port LATTICEKV_HTTP opens.
        http_port = int(env["LATTICEKV_HTTP"]["value"].rsplit(":", 1)[1])
        assert ports["http"] == http_port
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
        # State on the claim at the data directory.
        mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mount["data"] == env["LATTICEKV_DATA_DIR"]["value"] == "/data"
        assert [c["metadata"]["name"] for c in sts["volumeClaimTemplates"]] == ["data"]

    client = services["latticekv"]["spec"]
    assert client["selector"].items() <= (
        statefulsets["latticekv-memory"]["spec"]["template"]["metadata"]["labels"].items()
    )

    monitor = by_kind(objects, "Deployment")["latticekv-monitor"]["spec"]
    assert monitor["replicas"] == 1
    pod = monitor["template"]["spec"]
    assert pod["serviceAccountName"] in accounts
    args = pod["containers"][0]["args"]
    assert args[args.index("--manager") + 1] == "kubernetes"
    assert args[args.index("--namespace") + 1] == "latticekv"
    # The Role lets the monitor scale exactly these StatefulSets.
    role = by_kind(objects, "Role")["latticekv-monitor"]
    scale = [r for r in role["rules"] if "statefulsets/scale" in r["resources"]]
    assert set(scale[0]["resourceNames"]) == set(STATEFULSETS)
    binding = by_kind(objects, "RoleBinding")["latticekv-monitor"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def lookup(values: dict, path: list):
    node = values
    for part in path:
        assert isinstance(node, dict) and part in node, f"values.yaml has no {'.'.join(path)}"
        node = node[part]
    return node


def test_helm_chart_uses_only_defined_values():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "latticekv"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    templates = sorted((CHART / "templates").glob("*"))
    assert {t.name for t in templates} >= {"tiers.yaml", "monitor.yaml", "service.yaml", "secret.yaml"}
    used = set()
    for t in templates:
        text = t.read_text()
        assert text.count("{{") == text.count("}}"), t.name
        for m in re.finditer(r"\$?\.Values((?:\.\w+)+)", text):
            used.add(m.group(1)[1:])
        # Per-tier values, read through `$t := index $.Values.tiers $tier`.
        for m in re.finditer(r"\$t\.(\w+)", text):
            for tier in ("memory", "disk"):
                used.add(f"tiers.{tier}.{m.group(1)}")
    for path in sorted(used):
        lookup(values, path.split("."))
    # The defaults are the plain manifests' (deploy/kubernetes/latticekv.yaml).
    objects = kubernetes_objects()
    statefulsets = by_kind(objects, "StatefulSet")
    for name, tier in STATEFULSETS.items():
        assert values["tiers"][tier]["replicas"] == statefulsets[name]["spec"]["replicas"]
    assert {"auth.existingSecret", "auth.clusterSecret", "auth.password"} <= used
    assert {"tiers.memory.replicas", "tiers.disk.storage", "monitor.manager"} <= used


def test_helm_monitor_role_matches_the_manifest():
    """The chart's Role grants what deploy/kubernetes/monitor-rbac.yaml grants (which a
    test of the monitor crate checks against what its Kubernetes manager uses)."""
    text = (CHART / "templates" / "monitor.yaml").read_text()
    block = re.search(r"^rules:\n(.*?)^---", text, re.S | re.M).group(1)
    assert "{{" not in block
    chart_rules = yaml.safe_load(block)
    role = by_kind(kubernetes_objects(), "Role")["latticekv-monitor"]
    assert chart_rules == role["rules"]


# --- Rendering the chart and validating every object against the Kubernetes schemas ---
#
# No `helm` command can be installed from the package registries, so deploy/helm/render (Go,
# standard library only: text/template is Helm's template engine) renders the chart
# (test_helm_engine.py checks it against Helm's own engine, a library from PyPI); Go
# comes from Debian's golang-go (`make deps`). kubernetes-validate (PyPI, `make deps`)
# bundles the JSON schemas generated from the Kubernetes OpenAPI documents.

# A version a cluster still runs, and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ["1.30", "latest"]
RENDERER = DEPLOY / "helm" / "render"
AUTH = ["auth.clusterSecret=s3cret-peers", "auth.password=s3cret-clients"]


def validate_object(obj: dict):
    """Raises kubernetes_validate.ValidationError unless `obj` is valid for each of
    KUBERNETES_VERSIONS; strict: unknown fields are errors too."""
    import kubernetes_validate

    for version in KUBERNETES_VERSIONS:
        if version == "latest":
            version = kubernetes_validate.latest_version()
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.fixture(scope="module")
def renderer(tmp_path_factory) -> pathlib.Path:
    go = shutil.which("go")
    assert go, "no `go` to build deploy/helm/render: install Debian's golang-go (`make deps`)"
    tmp = tmp_path_factory.mktemp("render")
    # Standard library only: no module downloads (GOPROXY=off), a throwaway build cache.
    env = dict(os.environ, GOCACHE=str(tmp / "cache"), GO111MODULE="on", GOPROXY="off", GOFLAGS="")
    out = subprocess.run(
        [go, "build", "-o", str(tmp / "render"), "."],
        cwd=RENDERER,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    for name in ("Chart", "values"):
        doc = yaml.safe_load((CHART / f"{name}.yaml").read_text())
        (tmp / f"{name}.json").write_text(json.dumps(doc))
    return tmp


def render(renderer: pathlib.Path, sets: list, values: dict = None) -> subprocess.CompletedProcess:
    """`helm template latticekv deploy/helm/latticekv -n latticekv` with the chart's
    values.yaml, then `values` (a values file's contents), then `--set`s."""
    args = [
        str(renderer / "render"),
        "--chart", str(CHART),
        "--chart-json", str(renderer / "Chart.json"),
        "--values", str(renderer / "values.json"),
        "--release", "latticekv",
        "--namespace", "latticekv",
    ]
    if values is not None:
        extra = renderer / f"extra-{len(list(renderer.glob('extra-*')))}.json"
        extra.write_text(json.dumps(values))
        args += ["--values", str(extra)]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def rendered_objects(renderer: pathlib.Path, sets: list, values: dict = None) -> list:
    out = render(renderer, sets, values)
    assert out.returncode == 0, out.stderr
    objects = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
    for o in objects:
        validate_object(o)
    return objects


def test_kubernetes_manifests_are_valid_against_the_schemas():
    objects = kubernetes_objects()
    assert len(objects) >= 10
    for o in objects:
        validate_object(o)


def test_the_schema_check_can_fail():
    import kubernetes_validate

    sts = by_kind(kubernetes_objects(), "StatefulSet")["latticekv-memory"]
    unknown = json.loads(json.dumps(sts))
    unknown["spec"]["replicaz"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_object(unknown)
    wrong_type = json.loads(json.dumps(sts))
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "seventy"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_object(wrong_type)
    no_selector = json.loads(json.dumps(sts))
    del no_selector["spec"]["selector"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_object(no_selector)


def test_helm_chart_defaults_render_the_manifests_objects(renderer):
    objects = rendered_objects(renderer, AUTH)
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    plain = {
        (o["kind"], o["metadata"]["name"])
        for o in kubernetes_objects()
        if o["kind"] != "Namespace"
    }
    # A StatefulSet, headless Service and PDB per tier, the client Service, the Secret,
    # the monitor's Deployment and its RBAC.
    assert names == plain
    assert len(objects) == len(names)
    check_fit_together(objects)
    # Object for object the plain manifests, but for Helm's own labels, the Service type
    # the chart spells out (ClusterIP, Kubernetes' default) and the Secret's values.
    manifests = {
        (o["kind"], o["metadata"]["name"]): without_helm_labels(o) for o in kubernetes_objects()
    }
    for o in objects:
        o = without_helm_labels(o)
        key = (o["kind"], o["metadata"]["name"])
        if o["kind"] == "Service" and o["spec"].get("type") == "ClusterIP":
            del o["spec"]["type"]
        if o["kind"] == "Secret":
            o["stringData"] = {k: "?" for k in o["stringData"]}
            manifests[key]["stringData"] = {k: "?" for k in manifests[key]["stringData"]}
        assert o == manifests[key], key
    secret = by_kind(objects, "Secret")["latticekv"]
    assert secret["stringData"] == {"cluster-secret": "s3cret-peers", "password": "s3cret-clients"}
    for o in objects:
        assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "latticekv", o["metadata"]


HELM_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}


def without_helm_labels(node):
    """A copy of `node` without the labels (and selector terms) only the chart sets."""
    if isinstance(node, dict):
        out = {k: without_helm_labels(v) for k, v in node.items() if k not in HELM_LABELS}
        if out.get("labels") == {}:
            del out["labels"]
        return out
    if isinstance(node, list):
        return [without_helm_labels(v) for v in node]
    return node


def test_helm_chart_other_values_render_valid_objects(renderer):
    values = {
        "auth": {"existingSecret": "from-vault"},
        "image": {"repository": "registry.example/latticekv", "tag": 1.2},
        "tiers": {
            "memory": {
                "replicas": 5,
                "storageClassName": "fast",
                "resources": {
                    "requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"memory": "8Gi"},
                },
            },
            "disk": {"enabled": False},
        },
        "service": {"type": "LoadBalancer"},
        "monitor": {"manager": "none", "rbac": False},
    }
    objects = rendered_objects(renderer, ["podDisruptionBudget.maxUnavailable=2"], values)
    assert not by_kind(objects, "Secret")
    assert not by_kind(objects, "ServiceAccount") and not by_kind(objects, "Role")
    statefulsets = by_kind(objects, "StatefulSet")
    assert set(statefulsets) == {"latticekv-memory"}
    assert set(by_kind(objects, "PodDisruptionBudget")) == {"latticekv-memory"}
    pdb = by_kind(objects, "PodDisruptionBudget")["latticekv-memory"]["spec"]
    assert pdb["maxUnavailable"] == 2
    sts = statefulsets["latticekv-memory"]["spec"]
    assert sts["replicas"] == 5
    assert sts["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast"
    (container,) = sts["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/latticekv:1.2"
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}
    refs = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {"from-vault"}
    assert by_kind(objects, "Service")["latticekv"]["spec"]["type"] == "LoadBalancer"
    monitor = by_kind(objects, "Deployment")["latticekv-monitor"]["spec"]["template"]["spec"]
    assert "serviceAccountName" not in monitor
    args = monitor["containers"][0]["args"]
    assert args[args.index("--manager") + 1] == "none" and "--namespace" not in args


def test_helm_chart_refuses_to_render_without_the_secrets(renderer):
    out = render(renderer, [])
    assert out.returncode != 0, out.stdout
    assert "set auth.clusterSecret (or auth.existingSecret)" in out.stderr, out.stderr
    out = render(renderer, ["auth.clusterSecret=s3cret-peers"])
    assert out.returncode != 0, out.stdout
    assert "set auth.password (or auth.existingSecret)" in out.stderr, out.stderr


def test_renderer_to_yaml_and_quote_round_trip(renderer, tmp_path):
    """The renderer's toYaml and quote give back, through a YAML parser, exactly the values
    they were given: strings that look like other types stay strings."""
    tricky = [
        "", "true", "no", "NULL", "y", "1.0", "0x10", "2026-11-27", "a: b", "- x", "#c", "&a",
        "*b", "{x}", "[y]", "quote\"d", "back\\slash", "two\nlines", " padded ", "ünï", "<&>",
        "plain/path.name_1", "~",
    ]
    values = {
        "v": {
            "strings": tricky,
            "numbers": [0, 3, -2, 1.5],
            "flags": [True, False, None],
            "empty": {"map": {}, "list": []},
            "nested": [{"a": [1, {"b": "c"}], "weird key: x": "y"}, [["deep"]]],
        },
        "s": tricky,
    }
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "templates" / "out.yaml").write_text(
        "v:\n  {{- toYaml .Values.v | nindent 2 }}\n"
        "s:\n{{- range .Values.s }}\n  - {{ . | quote }}\n{{- end }}\n"
    )
    (tmp_path / "chart.json").write_text(json.dumps({"name": "t", "version": "0.0.1"}))
    (tmp_path / "values.json").write_text(json.dumps(values))
    out = subprocess.run(
        [str(renderer / "render"), "--chart", str(chart), "--chart-json",
         str(tmp_path / "chart.json"), "--values", str(tmp_path / "values.json")],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout) == values, out.stdout


def test_renderer_refuses_functions_it_does_not_implement(renderer, tmp_path):
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "templates" / "out.yaml").write_text("x: {{ sha256sum .Values.x }}\n")
    (tmp_path / "chart.json").write_text(json.dumps({"name": "t", "version": "0.0.1"}))
    out = subprocess.run(
        [str(renderer / "render"), "--chart", str(chart), "--chart-json",
         str(tmp_path / "chart.json"), "--set", "x=1"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0, out.stdout
    assert 'function "sha256sum" not defined' in out.stderr, out.stderr
