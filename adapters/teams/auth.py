"""Inbound authentication: every request's ``Authorization: Bearer`` JWT is checked before
anything of its body is believed (platforms.md §9).

1. The signing key: the ``kid`` of the token's header among the keys of the OpenID metadata
   document's ``jwks_uri`` (``TEAMS_OPENID_METADATA_URL``). The keys are cached; a ``kid`` not
   in the cache fetches the document and the keys again (Bot Framework rotates them), at most
   once per ``refetch_interval`` so a stream of made-up kids cannot make us hammer the issuer.
   A key that lists ``endorsements`` must endorse the activity's channel (``msteams``).
2. RS256 only; the issuer (Bot Framework's, the metadata document's own, and a single-tenant
   bot's tenant issuers), the audience (the app id) and the expiry, with 5 minutes of skew.
3. The ``serviceurl`` claim equals the activity's ``serviceUrl``: a token issued for one
   connector cannot send us replies to another.

PyJWT does the cryptography; the SDK's own validator reads its keys from fixed Microsoft
hosts, which a test (or a sovereign cloud) cannot point elsewhere."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
import structlog
from jwt.algorithms import RSAAlgorithm

log = structlog.get_logger(__name__)

#: Bot Framework's issuer of channel tokens
BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
#: clock skew allowed on ``exp`` and ``nbf`` (Bot Framework's own validators allow 5 minutes)
LEEWAY_SECONDS = 300.0
#: cached keys are fetched again after this long even when every kid is known
KEYS_MAX_AGE_SECONDS = 24 * 3600.0


class AuthError(Exception):
    """The request is not from Bot Framework (or not for this bot): answer 401. The message
    says which check failed, never the token."""


class KeysUnavailable(AuthError):
    """The issuer's keys could not be fetched: the request may be genuine, so it is answered
    503 (Bot Framework retries) rather than refused."""


@dataclass(frozen=True, slots=True)
class _Key:
    key: Any
    endorsements: tuple[str, ...] | None


class OpenIdKeys:
    """The signing keys of one OpenID metadata document, cached and refreshed on an unknown
    kid (one fetch at a time; the others wait for it)."""

    def __init__(
        self,
        metadata_url: str,
        *,
        refetch_interval: float = 5.0,
        timeout: float = 10.0,
    ) -> None:
        self.metadata_url = metadata_url
        self._refetch_interval = refetch_interval
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._keys: dict[str, _Key] = {}
        self._issuer: str | None = None
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        #: how many times the keys were fetched (the tests watch the cache with it)
        self.fetches = 0

    @property
    def issuer(self) -> str | None:
        """The metadata document's ``issuer``, once fetched."""
        return self._issuer

    async def key(self, kid: str) -> _Key:
        found = self._keys.get(kid)
        if found is not None and not self._stale():
            return found
        async with self._lock:
            found = self._keys.get(kid)
            if found is not None and not self._stale():
                return found  # another request fetched it meanwhile
            if self._may_fetch():
                try:
                    await self._fetch()
                except KeysUnavailable:
                    if found is None:
                        raise
                    return found  # a key we knew, past its age: still better than none
            found = self._keys.get(kid)
        if found is None:
            raise AuthError("unknown signing key")
        return found

    def _stale(self) -> bool:
        return (
            self._fetched_at is None or time.monotonic() - self._fetched_at > KEYS_MAX_AGE_SECONDS
        )

    def _may_fetch(self) -> bool:
        return (
            self._fetched_at is None
            or time.monotonic() - self._fetched_at >= self._refetch_interval
        )

    async def _fetch(self) -> None:
        try:
            async with aiohttp.ClientSession(timeout=self._timeout) as session:
                metadata = await _get_json(session, self.metadata_url)
                jwks_uri = metadata.get("jwks_uri")
                if not isinstance(jwks_uri, str) or not jwks_uri.startswith(
                    ("https://", "http://")
                ):
                    raise ValueError("the OpenID metadata has no jwks_uri")
                jwks = await _get_json(session, jwks_uri)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            # keep the keys we have: a signing key we knew is still good
            log.warning("teams_openid_fetch_failed", error=exc.__class__.__name__)
            raise KeysUnavailable("the signing keys could not be fetched") from exc
        keys: dict[str, _Key] = {}
        for entry in jwks.get("keys") or []:
            if not isinstance(entry, Mapping) or entry.get("kty") != "RSA":
                continue
            kid = entry.get("kid")
            if not isinstance(kid, str):
                continue
            try:
                key = RSAAlgorithm.from_jwk(dict(entry))
            except (jwt.InvalidKeyError, ValueError, TypeError):
                continue
            endorsements = entry.get("endorsements")
            keys[kid] = _Key(
                key=key,
                endorsements=tuple(str(e) for e in endorsements)
                if isinstance(endorsements, list)
                else None,
            )
        issuer = metadata.get("issuer")
        self._issuer = issuer if isinstance(issuer, str) else None
        self._keys = keys
        self._fetched_at = time.monotonic()
        self.fetches += 1
        log.info("teams_openid_keys_fetched", keys=len(keys))


async def _get_json(session: aiohttp.ClientSession, url: str) -> Mapping[str, Any]:
    async with session.get(url) as response:
        if response.status != 200:
            raise ValueError(f"{url} answered {response.status}")
        body = await response.json(content_type=None)
    if not isinstance(body, Mapping):
        raise ValueError(f"{url} did not answer a JSON object")
    return body


class BotFrameworkAuth:
    """Checks one request's bearer token against the activity it carries."""

    def __init__(self, keys: OpenIdKeys, *, app_id: str, tenant_id: str | None = None) -> None:
        self.keys = keys
        self._app_id = app_id
        issuers = {BOT_FRAMEWORK_ISSUER}
        if tenant_id:
            issuers |= {
                f"https://sts.windows.net/{tenant_id}/",
                f"https://login.microsoftonline.com/{tenant_id}/v2.0",
            }
        self._issuers = issuers

    async def verify(
        self, authorization: str | None, *, service_url: str | None, channel_id: str | None
    ) -> Mapping[str, Any]:
        """The token's claims, or ``AuthError``."""
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthError("no bearer token")
        token = authorization.removeprefix("Bearer ").strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthError("not a JWT") from exc
        if header.get("alg") != "RS256":
            raise AuthError("signing algorithm not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthError("no key id")
        key = await self.keys.key(kid)
        if key.endorsements is not None and channel_id and channel_id not in key.endorsements:
            raise AuthError("the signing key is not endorsed for this channel")
        issuers = set(self._issuers)
        if self.keys.issuer:
            issuers.add(self.keys.issuer)
        try:
            claims: Mapping[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=["RS256"],
                audience=self._app_id,
                issuer=sorted(issuers),
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.InvalidSignatureError as exc:
            raise AuthError("bad signature") from exc
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("token expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError("token is for another audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("token from another issuer") from exc
        except jwt.PyJWTError as exc:
            raise AuthError(f"token refused ({exc.__class__.__name__})") from exc
        claimed = claims.get("serviceurl", claims.get("serviceUrl"))
        if not isinstance(claimed, str) or not service_url or not _same_url(claimed, service_url):
            raise AuthError("serviceUrl does not match the token")
        return claims


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()
