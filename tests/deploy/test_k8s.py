"""The Kubernetes manifests are valid objects (schemas bundled with kubernetes-validate, offline)
and say what the service needs: probes on /readyz and /healthz, resource limits, non-root."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

kv = pytest.importorskip("kubernetes_validate")

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.30.0"


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def merged_gpu_deployment() -> dict:
    """The CPU Deployment with the GPU overlay's strategic-merge patch applied (by container name)."""
    base = documents(K8S / "deployment.yaml")[0]
    patch = documents(K8S / "gpu" / "deployment-gpu.yaml")[0]
    container = base["spec"]["template"]["spec"]["containers"][0]
    p = patch["spec"]["template"]["spec"]["containers"][0]
    assert p["name"] == container["name"]
    container["image"] = p["image"]
    env = {e["name"]: e for e in container["env"]}
    env.update({e["name"]: e for e in p["env"]})
    container["env"] = list(env.values())
    container["resources"] = p["resources"]
    return base


def manifests() -> list[tuple[str, dict]]:
    out = [
        (f"{p.name}[{i}]", d)
        for p in (K8S / "deployment.yaml", K8S / "service.yaml")
        for i, d in enumerate(documents(p))
    ]
    return [*out, ("gpu deployment", merged_gpu_deployment())]


@pytest.mark.parametrize(("name", "manifest"), manifests(), ids=[n for n, _ in manifests()])
def test_manifests_are_valid_kubernetes_objects(name, manifest):
    kv.validate(manifest, VERSION, strict=True)


def test_kustomizations_list_existing_files():
    for k in (K8S / "kustomization.yaml", K8S / "gpu" / "kustomization.yaml"):
        spec = documents(k)[0]
        for ref in spec.get("resources", []) + [p["path"] for p in spec.get("patches", [])]:
            assert (k.parent / ref).exists(), (k, ref)


@pytest.mark.parametrize("deployment", [documents(K8S / "deployment.yaml")[0], merged_gpu_deployment()])
def test_the_deployment_probes_limits_and_runs_as_non_root(deployment):
    pod = deployment["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's user
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    service = documents(K8S / "service.yaml")[0]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert "sessionAffinity" not in service["spec"]  # stateless: any replica answers


def test_the_gpu_variant_asks_for_a_gpu():
    c = merged_gpu_deployment()["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["ATTNSCOPE_DEVICE"] == "cuda"


def test_the_validator_catches_a_broken_manifest():
    broken = documents(K8S / "deployment.yaml")[0]
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, VERSION, strict=True)
