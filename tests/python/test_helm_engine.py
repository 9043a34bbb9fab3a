"""The Helm chart through Helm itself: Helm's own engine (Helm v4, built as a C library and
shipped in the PyPI wheel `helm-python-sdk`, module `helm_python`; no `helm` command installs
from the package registries this project's machines reach) renders the chart offline as
`helm template` does and lints it as `helm lint --strict` does. Its output must equal
deploy/helm/render's object for object, for the defaults and for other values, and it must
refuse the same missing secrets. So the chart is checked by real Helm, and the renderer that
test_deploy.py validates against the Kubernetes schemas is checked against Helm.

Needs what test_deploy.py needs plus helm-python-sdk (`make deps` installs it).
"""
import pytest
import yaml

from test_deploy import AUTH, CHART, render, renderer  # noqa: F401  (renderer: a fixture)

try:
    import helm_python
except ImportError:  # the assertion below says what to install
    helm_python = None

RELEASE, NAMESPACE = "latticekv", "latticekv"

# The second case of test_deploy.py: an existing Secret, one tier, no RBAC, a LoadBalancer.
OTHER_VALUES = {
    "auth": {"existingSecret": "from-vault"},
    "image": {"repository": "registry.example/latticekv", "tag": "1.2"},
    "tiers": {
        "memory": {
            "replicas": 5,
            "storageClassName": "fast",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
        },
        "disk": {"enabled": False},
    },
    "service": {"type": "LoadBalancer"},
    "monitor": {"manager": "none", "rbac": False},
    "podDisruptionBudget": {"maxUnavailable": 2},
}


def helm():
    assert helm_python is not None, (
        "no helm_python: `pip install helm-python-sdk` (`make deps` does), Helm's engine as a "
        "library"
    )
    return helm_python


def values_of(sets: list) -> dict:
    """`--set a.b=c,...` as Helm parses it, merged into one values dict."""
    out: dict = {}
    for s in sets:
        merge(out, helm().parse_set_string(s))
    return out


def merge(into: dict, extra: dict):
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v


def helm_objects(values: dict) -> list:
    """`helm template latticekv deploy/helm/latticekv -n latticekv` with `values`, parsed."""
    chart = helm().Chart.load(str(CHART))
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert manifests, "Helm rendered nothing"
    objects = []
    for path in sorted(manifests):
        objects += [d for d in yaml.safe_load_all(manifests[path]) if d is not None]
    return objects


def ours(renderer, sets: list, values: dict = None) -> list:  # noqa: F811
    out = render(renderer, sets, values)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def keyed(objects: list) -> dict:
    keys = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(set(keys)) == len(keys), keys
    return dict(zip(keys, objects))


def assert_same(helm_list: list, our_list: list):
    h, o = keyed(helm_list), keyed(our_list)
    assert set(h) == set(o)
    for key in h:
        assert h[key] == o[key], key


def test_helm_renders_what_our_renderer_renders_with_the_defaults(renderer):  # noqa: F811
    objects = helm_objects(values_of(AUTH))
    assert len(objects) >= 10
    assert_same(objects, ours(renderer, AUTH))


def test_helm_renders_what_our_renderer_renders_with_other_values(renderer):  # noqa: F811
    objects = helm_objects(OTHER_VALUES)
    assert {o["kind"] for o in objects} >= {"StatefulSet", "Service", "Deployment"}
    assert_same(objects, ours(renderer, [], OTHER_VALUES))


def test_helm_refuses_the_chart_without_the_secrets(renderer):  # noqa: F811
    h = helm()
    chart = h.Chart.load(str(CHART))
    for sets, missing in [
        ([], "set auth.clusterSecret (or auth.existingSecret)"),
        (AUTH[:1], "set auth.password (or auth.existingSecret)"),
    ]:
        with pytest.raises(h.HelmError) as e:
            chart.render(values_of(sets), name=RELEASE, namespace=NAMESPACE, is_install=True)
        assert missing in str(e.value)
        out = render(renderer, sets)
        assert out.returncode != 0 and missing in out.stderr, out.stderr


def test_helm_lint_strict_finds_nothing_to_fix():
    for values in (values_of(AUTH), OTHER_VALUES):
        report = helm().lint(str(CHART), values, strict=True, namespace=NAMESPACE)
        assert report["errors"] == [], report
        # Severity 1 is information ("icon is recommended"); 2 a warning, 3 an error.
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_helm_lint_can_fail(tmp_path):
    """The lint is not vacuous: a template that is not YAML is an error."""
    chart = tmp_path / "broken"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: broken\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("x: 1\n")
    (chart / "templates" / "cm.yaml").write_text("kind: ConfigMap\n  bad: [indent\n")
    report = helm().lint(str(chart), {}, strict=True)
    assert report["errors"] or [m for m in report["messages"] if m["severity"] >= 2], report
