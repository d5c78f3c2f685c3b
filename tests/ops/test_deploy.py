"""The deployment files parse and agree with the gateway: the image runs non-root with a
health check, compose wires the database, the Kubernetes manifests probe the right endpoints
and read credentials from a Secret, and the systemd unit runs `gateway run`."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPO = DEPLOY.parent


def _kube() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _one(kind: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def _setting_names() -> set[str]:
    return {field.alias for field in Settings.model_fields.values() if field.alias}


def test_dockerfile_is_multi_stage_non_root_with_a_health_check() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines()]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) >= 2 and " AS build" in stages[0]
    final = lines[lines.index(stages[-1]) :]
    assert any(line.startswith("COPY --from=build ") for line in final)
    [user] = [line.split()[1] for line in final if line.startswith("USER ")]
    assert user.split(":")[0] not in ("root", "0")
    [health] = [line for line in final if line.startswith("HEALTHCHECK ")]
    assert "/healthz" in health
    assert final[-1] == 'CMD ["gateway", "run"]'
    assert "GATEWAY_HTTP_HOST=0.0.0.0" in text
    for line in lines:  # everything copied from the context exists in the repository
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), source
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text()
    assert "!gateway/" in ignore and "!migrations/" in ignore


def test_compose_runs_the_gateway_against_postgres_on_a_volume() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    gateway, postgres = services["gateway"], services["postgres"]
    volume = postgres["volumes"][0].split(":")[0]
    assert volume in compose["volumes"]
    assert postgres["healthcheck"]["test"]
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "@postgres:5432/" in gateway["environment"]["DATABASE_URL"]
    assert gateway["env_file"][0]["path"] == "gateway.env"
    assert (DEPLOY / gateway["build"]["context"] / gateway["build"]["dockerfile"]).is_file()
    assert gateway["ports"] == ["127.0.0.1:8080:8080"]
    assert gateway["command"] == ["gateway", "run"]


def test_the_env_example_names_only_real_settings() -> None:
    names = _setting_names()
    found = re.findall(
        r"^#?\s*([A-Z][A-Z0-9_]+)=", (DEPLOY / "gateway.env.example").read_text(), re.M
    )
    assert found and set(found) <= names, set(found) - names


def test_compose_config_validates_when_docker_compose_is_available() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the docker client has no compose plugin")
    result = subprocess.run(
        [docker, "compose", "-f", str(DEPLOY / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_kubernetes_deployment_probes_migrates_and_reads_a_secret() -> None:
    docs = _kube()
    deployment = _one("Deployment", docs)
    config = _one("ConfigMap", docs)
    secret = _one("Secret", docs)
    service = _one("Service", docs)
    pdb = _one("PodDisruptionBudget", docs)
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pod["securityContext"]["runAsNonRoot"] is True

    [container] = pod["containers"]
    assert container["command"] == ["gateway", "run"]
    [port] = container["ports"]
    assert port["containerPort"] == int(config["data"]["GATEWAY_HTTP_PORT"])
    assert config["data"]["GATEWAY_HTTP_HOST"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]

    [migrate] = pod["initContainers"]
    assert migrate["command"] == ["gateway", "migrate"]
    secret_name = secret["metadata"]["name"]
    for c in (container, migrate):
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert refs["DATABASE_URL"] == {"name": secret_name, "key": "DATABASE_URL"}
    from_secrets = {e["name"] for e in container["env"] if "valueFrom" in e}
    assert "GATEWAY_ADMIN_TOKEN" in from_secrets
    assert set(secret["stringData"]) <= _setting_names()
    assert set(config["data"]) <= _setting_names()

    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (DEPLOY / "kubernetes" / resource).is_file(), resource
    assert "secret.example.yaml" not in kustomization["resources"]  # never applied as is


def test_systemd_unit_runs_the_gateway_as_its_own_user() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((DEPLOY / "systemd" / "chat-gateway.service").read_text())
    service = unit["Service"]
    assert service["ExecStart"].endswith("/gateway run")
    assert service["User"] not in ("root", "0")
    assert service["EnvironmentFile"].startswith("/etc/chat-gateway/")
    assert service["KillSignal"] == "SIGTERM"
    assert service["RestartPreventExitStatus"] == "2"  # bad configuration: do not loop
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert "network-online.target" in unit["Unit"]["After"]


def test_the_deploy_readme_says_where_each_ingress_runs() -> None:
    text = (DEPLOY / "README.md").read_text()
    for name in ("Dockerfile", "compose.yaml", "kubernetes/", "systemd/chat-gateway.service"):
        assert name in text
    assert "every replica" in text and "**one replica**" in text
    for ingress in ("Telegram webhook", "Slack Events API", "long polling", "Socket Mode"):
        assert ingress in text
    assert "GATEWAY_ADMIN_TOKEN" in text and "loopback" in text
