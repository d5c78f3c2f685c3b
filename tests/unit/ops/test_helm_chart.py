"""The Helm chart (deploy/helm/chat-gateway): what it promises without a ``helm`` binary (every
value a template reads is declared, every setting it sets is a real one, the migration Job is
a pre-install/pre-upgrade hook reading only the existing Secret), and ``helm lint`` plus
``helm template`` when ``helm`` is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from gateway.core.settings import Settings
from gateway.core.settings_groups import settings_groups
from testsupport.paths import REPO

CHART = REPO / "deploy" / "helm" / "chat-gateway"
TEMPLATES = CHART / "templates"
_VALUE_REF = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def _declared(values: dict[str, Any], path: list[str]) -> bool:
    node: Any = values
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_the_chart_is_described() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "chat-gateway"
    assert chart["version"] and chart["appVersion"]


def test_every_value_a_template_reads_is_declared() -> None:
    values = _values()
    seen = 0
    for template in sorted(TEMPLATES.glob("*")):
        for match in _VALUE_REF.finditer(template.read_text()):
            path = match[1].strip(".").split(".")
            seen += 1
            assert _declared(values, path), f"{template.name}: .Values.{'.'.join(path)}"
    assert seen > 20, "the scanner found no value references"


def test_its_settings_are_real_ones() -> None:
    classes: list[type[BaseSettings]] = [Settings, *settings_groups(Settings).values()]
    known = {f.alias for cls in classes for f in cls.model_fields.values() if f.alias}
    for name in _values()["config"]:
        assert name in known, name


def test_probes_pdb_replicas_and_the_migration_hook() -> None:
    values = _values()
    assert values["replicaCount"] >= 2
    assert values["probes"]["liveness"]["httpGet"]["path"] == "/healthz"
    assert values["probes"]["readiness"]["httpGet"]["path"] == "/readyz"
    assert values["podDisruptionBudget"]["enabled"]
    assert values["existingSecret"] and values["secretKeys"]["databaseUrl"] == "DATABASE_URL"
    job = (TEMPLATES / "migrate-job.yaml").read_text()
    assert '"helm.sh/hook": pre-install,pre-upgrade' in job
    assert 'command: ["gateway", "migrate"]' in job
    # the hook runs before the chart's ConfigMap exists: it must not need it
    assert "configMapRef" not in job
    deployment = (TEMPLATES / "deployment.yaml").read_text()
    assert 'command: ["gateway", "run"]' in deployment
    assert "checksum/config" in deployment
    assert "kind: PodDisruptionBudget" in (TEMPLATES / "poddisruptionbudget.yaml").read_text()


HELM = shutil.which("helm")


@pytest.mark.skipif(HELM is None, reason="helm is not installed")
def test_helm_lint_and_template() -> None:
    assert HELM is not None
    lint = subprocess.run(
        [HELM, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = subprocess.run(
        [HELM, "template", "gw", str(CHART), "--set", "replicaCount=3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) >= {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "Job"}
    deployment = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    job = kinds["Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["gateway", "migrate"]
    without = subprocess.run(
        [HELM, "template", "gw", str(CHART), "--set", "migrations.enabled=false"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "kind: Job" not in without.stdout
