"""OpenID Connect for the web chat (``GATEWAY_WEB_AUTH=oidc``): the protocol half.

``OidcClient`` reads the provider's discovery document and keys, builds the authorization
request (``state``, ``nonce``, PKCE with S256) and, on the way back, exchanges the code and
verifies the ID token: its signature against the provider's JWKS, ``iss``, ``aud`` (and
``azp``), ``exp`` and the ``nonce`` sent. Who may sign in (``allowed``) and which web account a
subject becomes are decided by ``gateway.http.webauth``.

Authlib (``AsyncOAuth2Client``) speaks OAuth 2.0; joserfc verifies the JWT. Authlib's client
is an ``httpx2`` client (the successor of httpx, which ``mcp`` brings too), so this module
speaks to the provider with httpx2 throughout and catches its errors.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2
import structlog

if TYPE_CHECKING:
    from authlib.integrations.httpx_client import AsyncOAuth2Client
    from joserfc.jwk import KeySet

    from gateway.core.settings import Settings

log = structlog.get_logger(__name__)

#: the discovery document and the keys are read again after this long (keys rotate)
METADATA_SECONDS = 3600.0
#: keys are read again for a token they do not verify, at most this often
KEYS_REFRESH_SECONDS = 60.0
#: a provider that does not answer within this long is reported unreachable
HTTP_TIMEOUT = 10.0
#: signature algorithms accepted on ID tokens (never ``none``, never HMAC with a public key)
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")
#: clock difference tolerated on ``exp``/``iat``
LEEWAY = 60


class OidcDenied(Exception):
    """The sign-in is refused (403): a bad or mismatched answer from the browser or the
    provider. ``reason`` is safe to show."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class OidcUnavailable(Exception):
    """The provider could not be reached or answered nonsense (502)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """What the browser carries between ``/login`` and the callback (in a signed cookie)."""

    state: str
    nonce: str
    verifier: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """A verified ID token's facts the gateway uses."""

    issuer: str
    subject: str
    email: str | None
    email_verified: bool
    preferred_username: str | None
    groups: tuple[str, ...]
    #: every verified claim of the ID token (the operator sign-in reads its roles claim)
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class _Provider:
    authorization_endpoint: str
    token_endpoint: str
    keys: KeySet
    fetched: float


class OidcClient:
    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str | None,
        scopes: str,
        redirect_uri: str,
    ) -> None:
        #: exactly as configured: the ID tokens' iss must equal it (some issuers end in "/")
        self.issuer = issuer
        self._client_id = client_id
        self._client_secret = client_secret
        self._scopes = scopes
        self.redirect_uri = redirect_uri
        self._provider: _Provider | None = None

    @classmethod
    def from_settings(cls, settings: Settings, callback: str) -> OidcClient:
        """The ``GATEWAY_OIDC_*`` provider, answering at ``callback`` under
        ``GATEWAY_PUBLIC_URL`` (the web chat's sign-in and the operators' share the provider)."""
        secret = settings.gateway_oidc_client_secret
        return cls(
            issuer=settings.gateway_oidc_issuer or "",
            client_id=settings.gateway_oidc_client_id or "",
            client_secret=secret.get_secret_value() if secret else None,
            scopes=settings.gateway_oidc_scopes,
            redirect_uri=f"{settings.gateway_public_url}{callback}",
        )

    def _oauth(self) -> AsyncOAuth2Client:
        # Authlib and joserfc are imported where used: only a gateway signing in with OIDC
        # pays for them (every command and `gateway run` imports this module)
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        return AsyncOAuth2Client(
            client_id=self._client_id,
            client_secret=self._client_secret,
            # a public client (no secret) proves itself with PKCE alone
            token_endpoint_auth_method="client_secret_basic" if self._client_secret else "none",
            scope=self._scopes,
            redirect_uri=self.redirect_uri,
            code_challenge_method="S256",
            timeout=HTTP_TIMEOUT,
        )

    async def _get_json(self, client: AsyncOAuth2Client, url: str) -> dict[str, Any]:
        try:
            response = await client.request("GET", url, withhold_token=True)
            response.raise_for_status()
            data = response.json()
        except httpx2.HTTPError as exc:
            raise OidcUnavailable(f"the sign-in provider did not answer ({url})") from exc
        except ValueError as exc:
            raise OidcUnavailable(f"the sign-in provider answered no JSON ({url})") from exc
        if not isinstance(data, dict):
            raise OidcUnavailable(f"the sign-in provider answered no JSON object ({url})")
        return data

    async def _load(self, *, fresh: bool = False) -> _Provider:
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        now = time.monotonic()
        if not fresh and self._provider and now - self._provider.fetched < METADATA_SECONDS:
            return self._provider
        async with self._oauth() as client:
            discovery = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
            meta = await self._get_json(client, discovery)
            # OpenID Connect Discovery 1.0, section 4.3: the issuer must be the one asked for
            if meta.get("issuer") != self.issuer:
                raise OidcUnavailable(
                    f"the discovery document names issuer {meta.get('issuer')!r}, "
                    f"not GATEWAY_OIDC_ISSUER {self.issuer!r}"
                )
            try:
                authorize, token, jwks_uri = (
                    str(meta["authorization_endpoint"]),
                    str(meta["token_endpoint"]),
                    str(meta["jwks_uri"]),
                )
            except KeyError as exc:
                raise OidcUnavailable(f"the discovery document lacks {exc.args[0]}") from exc
            jwks = await self._get_json(client, jwks_uri)
        try:
            keys = KeySet.import_key_set(jwks)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise OidcUnavailable("the sign-in provider's keys (JWKS) cannot be read") from exc
        self._provider = _Provider(authorize, token, keys, now)
        return self._provider

    async def begin(self) -> tuple[str, Pending]:
        """The provider's authorization URL to send the browser to, and what to remember."""
        provider = await self._load()
        pending = Pending(
            state=secrets.token_urlsafe(24),
            nonce=secrets.token_urlsafe(24),
            verifier=secrets.token_urlsafe(48),
        )
        async with self._oauth() as oauth:
            url, _ = oauth.create_authorization_url(
                provider.authorization_endpoint,
                state=pending.state,
                code_verifier=pending.verifier,
                nonce=pending.nonce,
            )
        return str(url), pending

    async def finish(self, code: str, pending: Pending) -> Identity:
        """Exchange ``code`` and verify the ID token (the state was checked by the caller)."""
        from authlib.integrations.base_client import OAuthError

        provider = await self._load()
        async with self._oauth() as oauth:
            try:
                token = await oauth.fetch_token(
                    provider.token_endpoint,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=pending.verifier,
                )
            except OAuthError as exc:
                raise OidcDenied(f"the provider refused the code ({exc.error})") from exc
            except httpx2.HTTPError as exc:
                raise OidcUnavailable("the sign-in provider's token endpoint failed") from exc
            except ValueError as exc:  # not JSON
                raise OidcUnavailable("the sign-in provider's token answer is not JSON") from exc
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise OidcDenied("the provider sent no ID token")
        claims = await self._verified_claims(id_token, provider, pending.nonce)
        return _identity(self.issuer, claims)

    async def _verified_claims(
        self, id_token: str, provider: _Provider, nonce: str
    ) -> dict[str, Any]:
        try:
            claims = signed_claims(id_token, provider.keys)
        except OidcDenied:
            if time.monotonic() - provider.fetched < KEYS_REFRESH_SECONDS:
                raise
            # the provider may have rotated its keys since we read them: read them once more
            provider = await self._load(fresh=True)
            claims = signed_claims(id_token, provider.keys)
        check_claims(claims, issuer=self.issuer, client_id=self._client_id, nonce=nonce)
        return claims


def signed_claims(id_token: str, keys: KeySet) -> dict[str, Any]:
    """The claims of ``id_token`` if one of ``keys`` signed it (with an asymmetric algorithm);
    else ``OidcDenied``."""
    from joserfc import jwt
    from joserfc.errors import JoseError

    try:
        return dict(jwt.decode(id_token, keys, algorithms=ALGORITHMS).claims)
    except (JoseError, ValueError) as exc:
        raise OidcDenied("the ID token's signature does not verify") from exc


def check_claims(claims: dict[str, Any], *, issuer: str, client_id: str, nonce: str) -> None:
    """``OidcDenied`` unless the ID token is from ``issuer``, for ``client_id``, unexpired, of
    a subject, and answers this sign-in (``nonce``): OpenID Connect Core 1.0, 3.1.3.7."""
    from joserfc import jwt
    from joserfc.errors import JoseError

    registry = jwt.JWTClaimsRegistry(
        leeway=LEEWAY,
        iss={"essential": True, "value": issuer},
        aud={"essential": True, "value": client_id},
        sub={"essential": True},
        exp={"essential": True},
        nonce={"essential": True, "value": nonce},
    )
    try:
        registry.validate(claims)
    except JoseError as exc:
        raise OidcDenied(f"the ID token is not valid here: {exc.description}") from exc
    # with more than one audience, or an azp at all, the authorized party must be us
    aud = claims.get("aud")
    azp = claims.get("azp")
    several = isinstance(aud, list) and len(aud) > 1
    if (several or azp is not None) and azp != client_id:
        raise OidcDenied("the ID token was issued to another client (azp)")


def _identity(issuer: str, claims: dict[str, Any]) -> Identity:
    email = claims.get("email")
    username = claims.get("preferred_username")
    groups = claims.get("groups")
    if isinstance(groups, str):
        groups = [groups]
    return Identity(
        issuer=issuer,
        subject=str(claims["sub"]),
        email=email if isinstance(email, str) and email else None,
        # some providers send "true" as a string
        email_verified=claims.get("email_verified") in (True, "true"),
        preferred_username=username if isinstance(username, str) and username else None,
        groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
        claims=claims,
    )


def allowed(identity: Identity, *, domains: list[str], groups: list[str]) -> str | None:
    """Why ``identity`` may not sign in, or ``None``: a verified e-mail in one of ``domains``
    (``*``: any verified e-mail) or a membership in one of ``groups`` lets a person in."""
    if domains and identity.email and identity.email_verified:
        domain = identity.email.rpartition("@")[2].lower()
        if "*" in domains or domain in (d.lower().lstrip("@") for d in domains):
            return None
    if groups and set(groups) & set(identity.groups):
        return None
    if domains and not groups:
        if not identity.email:
            return "the provider sent no e-mail address"
        if not identity.email_verified:
            return "the e-mail address is not verified by the provider"
        return "this e-mail domain may not use the chat"
    if groups and not domains:
        return "not in a group that may use the chat"
    return "neither the e-mail domain nor a group may use the chat"
