"""``GET /api/v1/settings/fingerprint``: the settings this gateway runs with, as one hash per
setting name (never a value), so that ``gateway doctor`` can say which settings of the
``.env`` it reads differ from the running gateway's, and that a restart applies them."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter
from pydantic import BaseModel

from gateway.http.admin import API_PREFIX, AccessPolicy, admin_api_router


class SettingsFingerprint(BaseModel):
    #: each setting's environment name, with a hash of the value in force
    settings: dict[str, str]


def settings_router(fingerprint: Mapping[str, str], policy: AccessPolicy) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/settings", tag="settings")
    frozen = SettingsFingerprint(settings=dict(fingerprint))

    @router.get(
        "/fingerprint",
        response_model=SettingsFingerprint,
        summary="The settings in force, one hash per setting",
    )
    async def fingerprint_of_settings() -> SettingsFingerprint:
        """Read at start-up: a changed ``.env`` shows here only after a restart."""
        return frozen

    return router
