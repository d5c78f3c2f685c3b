"""``GET /api/v1/models/health``: the model provider as the replicas see it, for the
operator pages (``/ops``): open circuit breakers and the models that failed lately, with the
last error each gave (``gateway.agents.breakers``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from gateway.http.admin import API_PREFIX, AccessPolicy, admin_api_router
from session_store.repos.breakers import Breakers


class ModelHealthItem(BaseModel):
    model: str
    #: the breaker is open: new turns go straight to a fallback
    open: bool
    #: failed requests in a row
    failures: int
    open_until: datetime | None
    opened_at: datetime | None
    #: rate_limited, unavailable or timed_out
    last_cause: str | None
    last_error: str | None
    last_error_at: datetime | None


def models_router(repo: Breakers, policy: AccessPolicy) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/models", tag="models")

    @router.get("/health", response_model=list[ModelHealthItem], summary="Model health")
    async def health(
        recent_seconds: Annotated[float, Query(gt=0, le=7 * 86400)] = 3600,
    ) -> list[ModelHealthItem]:
        """Open breakers and the models that failed within ``recent_seconds``, newest
        error first."""
        return [
            ModelHealthItem(
                model=b.model,
                open=b.is_open,
                failures=b.failures,
                open_until=b.open_until,
                opened_at=b.opened_at,
                last_cause=b.last_cause,
                last_error=b.last_error,
                last_error_at=b.last_error_at,
            )
            for b in await repo.breakers(recent_seconds=recent_seconds)
        ]

    return router
