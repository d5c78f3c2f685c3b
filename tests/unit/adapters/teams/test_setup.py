"""``gateway setup teams`` and ``gateway doctor``'s Teams checks against the fake Bot
Framework: the app id and secret are validated at the token endpoint, the settings written,
and an app package (manifest and icons) zipped beside them, ready to upload."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from adapters.teams.manifest import PACKAGE_NAME
from tests.unit.ops.test_setup import env_file, setup_env, setup_piped
from testsupport.fakes.teams import APP_ID, APP_PASSWORD, FakeTeams
from testsupport.teams import teams_adapter


async def test_setup_checks_the_secret_then_writes_the_settings_and_the_app_package(
    tmp_path: Path, fake: FakeTeams
) -> None:
    code, out, err = await setup_piped(
        tmp_path,
        [
            "teams",
            "--app-id",
            APP_ID,
            "--token-url",
            fake.token_url,
            "--openid-metadata-url",
            fake.openid_url,
        ],
        stdin=APP_PASSWORD + "\n",
    )
    assert code == 0, err
    assert APP_PASSWORD not in out + err
    assert f"ok  teams: app {APP_ID}: the token endpoint issued a Bot Framework token" in out
    env = setup_env(tmp_path)
    assert env_file(env) == {
        "TEAMS_APP_ID": APP_ID,
        "TEAMS_APP_PASSWORD": APP_PASSWORD,
        "TEAMS_TOKEN_URL": fake.token_url,
        "TEAMS_OPENID_METADATA_URL": fake.openid_url,
    }
    package = env.parent / PACKAGE_NAME
    assert f"Wrote {package}." in out
    with zipfile.ZipFile(package) as archive:
        assert sorted(archive.namelist()) == ["color.png", "manifest.json", "outline.png"]
        manifest = json.loads(archive.read("manifest.json"))
        assert archive.read("color.png").startswith(b"\x89PNG")
    assert manifest["id"] == APP_ID
    assert manifest["bots"] == [
        {
            "botId": APP_ID,
            "scopes": ["personal", "team", "groupChat"],
            "supportsFiles": False,
            "isNotificationOnly": False,
        }
    ]
    assert manifest["icons"] == {"color": "color.png", "outline": "outline.png"}


async def test_setup_with_a_wrong_secret_writes_nothing(tmp_path: Path, fake: FakeTeams) -> None:
    code, out, _ = await setup_piped(
        tmp_path,
        ["teams", "--app-id", APP_ID, "--token-url", fake.token_url],
        stdin="not-the-secret\n",
    )
    assert code == 1
    assert f"BAD teams: the token endpoint refused app {APP_ID}" in out
    assert "invalid_client" in out and "not-the-secret" not in out
    assert not setup_env(tmp_path).exists()
    assert not (setup_env(tmp_path).parent / PACKAGE_NAME).exists()


async def test_doctor_checks_the_secret_and_the_signing_keys(fake: FakeTeams) -> None:
    good = {c.name: c for c in await teams_adapter(fake).check()}
    assert good["teams"].ok and good["teams signing keys"].ok
    bad = {
        c.name: c
        for c in await teams_adapter(
            fake,
            TEAMS_APP_PASSWORD="wrong",
            TEAMS_OPENID_METADATA_URL=f"{fake.url}/nowhere",
        ).check()
    }
    assert not bad["teams"].ok and "TEAMS_APP_PASSWORD" in (bad["teams"].fix or "")
    assert not bad["teams signing keys"].ok
    assert "TEAMS_OPENID_METADATA_URL" in (bad["teams signing keys"].fix or "")
