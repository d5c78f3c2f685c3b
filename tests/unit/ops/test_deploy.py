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

from gateway.core.registry import all_settings_classes, check_settings
from gateway.core.settings import Settings
from testsupport.paths import REPO

DEPLOY = REPO / "deploy"


def _kube() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _one(kind: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def _setting_names() -> set[str]:
    return {
        field.alias
        for settings in all_settings_classes()
        for field in settings.model_fields.values()
        if field.alias
    }


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


def test_every_deploy_file_and_guide_names_the_units_env_file() -> None:
    # the guides said /etc/gateway/gateway.env, the unit /etc/chat-gateway/gateway.env
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    text = (DEPLOY / "systemd" / "chat-gateway.service").read_text()
    unit.read_string(text)
    env_file = unit["Service"]["EnvironmentFile"]
    assert env_file == "/etc/chat-gateway/gateway.env"
    # the CLI run beside the service (doctor, users, setup) reads the same file
    environment = unit["Service"].get("Environment", "")
    assert f"GATEWAY_ENV_FILE={env_file}" in text, environment
    assert f"GATEWAY_ENV_FILE={env_file}" in text.split("[Unit]")[0]  # the steps use it too
    places = [*DEPLOY.rglob("*"), *(REPO / "docs").rglob("*.md"), REPO / "README.md"]
    for path in places:
        if path.is_file():
            # settings files (*.env) under /etc: only the unit's; other files there (a tools
            # file) may sit beside it, but in the same directory
            found = re.findall(r"/etc/[\w.-]*gateway[\w.-]*/[\w.-]+", path.read_text())
            assert {f for f in found if f.endswith(".env")} <= {env_file}, (path, found)
            assert {f.rsplit("/", 1)[0] for f in found} <= {"/etc/chat-gateway"}, (path, found)


def test_the_deploy_readme_says_where_each_ingress_runs() -> None:
    text = (DEPLOY / "README.md").read_text()
    for name in ("Dockerfile", "compose.yaml", "kubernetes/", "systemd/chat-gateway.service"):
        assert name in text
    assert "every replica" in text and "**one replica**" in text
    for ingress in ("Telegram webhook", "Slack Events API", "long polling", "Socket Mode"):
        assert ingress in text
    assert "GATEWAY_ADMIN_TOKEN" in text and "loopback" in text


# --- safe defaults, working systemd steps, consistent Socket Mode statements ---------


def _env_example() -> dict[str, str]:
    values = {}
    for line in (DEPLOY / "gateway.env.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def _dockerfile_env() -> dict[str, str]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    return dict(re.findall(r"\b(GATEWAY_[A-Z_]+)=(\S+)", text))


def test_every_deployment_serves_the_web_chat_only_behind_sign_in() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    compose_env = {
        k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v))
        for k, v in compose["services"]["gateway"]["environment"].items()
    }
    config = _one("ConfigMap", _kube())["data"]
    deployments = {
        "Dockerfile": _dockerfile_env(),
        "compose": {**_env_example(), **compose_env},
        "kubernetes": config,
        "systemd": _env_example(),
    }
    for name, env in deployments.items():
        chat_on = env.get("GATEWAY_WEB_CHAT", "true").lower() != "false"
        assert not chat_on or env.get("GATEWAY_WEB_AUTH") in ("accounts", "proxy"), name
        # and the gateway accepts these settings as they stand (no exit 2)
        values = {k: v for k, v in env.items() if k in _setting_names() and v}
        check_settings(Settings(_env_file=None, **values))  # type: ignore[call-arg]


def test_the_systemd_steps_work_as_written(tmp_path: Path) -> None:
    """Run the unit's install steps with / moved under a temporary directory (and without the
    owner flags, which need root): each must succeed in order."""
    text = (DEPLOY / "systemd" / "chat-gateway.service").read_text()
    steps = [
        line.lstrip("#").strip()
        for line in text.splitlines()
        if line.startswith("#   install ") or line.startswith("#   cp ")
    ]
    assert any(s.startswith("install -d") and "/etc/chat-gateway" in s for s in steps)
    for step in steps:
        command = step.split(" && ")[0]
        command = re.sub(r"-o \S+ -g \S+ ", "", command)
        command = command.replace(" /etc/", f" {tmp_path}/etc/")
        if command.startswith("cp "):
            (tmp_path / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            command, shell=True, cwd=REPO, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"{step}: {result.stderr}"
    assert (tmp_path / "etc/chat-gateway/gateway.env").is_file()


def test_socket_mode_statements_agree() -> None:
    example = (DEPLOY / "gateway.env.example").read_text()
    [slack_line] = [line for line in example.splitlines() if line.startswith("# Slack:")]
    assert "every replica" in slack_line and "on one" not in slack_line
    deploy_readme = (DEPLOY / "README.md").read_text()
    [row] = [line for line in deploy_readme.splitlines() if line.startswith("| Slack Socket Mode")]
    assert "every replica" in row
    scaling = (REPO / "docs" / "explanation" / "scaling.md").read_text()
    [row] = [line for line in scaling.splitlines() if line.startswith("| Slack Socket Mode")]
    assert "every replica" in row
