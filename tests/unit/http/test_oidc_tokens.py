"""ID token checks (gateway.http.oidc): a token signed by a key the provider did not publish,
with ``alg: none`` or an HMAC made with the public key, from another issuer, for another
client, expired, or answering another sign-in's nonce is refused; who may sign in by e-mail
domain and group."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from gateway.http.oidc import Identity, OidcDenied, allowed, check_claims, signed_claims

ISSUER = "https://id.example.com"
CLIENT = "chat"
NONCE = "n-123"


@pytest.fixture(scope="module")
def key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "k1"}, private=True)


def published(key: RSAKey) -> KeySet:
    """The provider's JWKS: public halves only."""
    return KeySet.import_key_set({"keys": [key.as_dict(private=False)]})


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": CLIENT,
        "sub": "s1",
        "iat": now,
        "exp": now + 300,
        "nonce": NONCE,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def token(key: RSAKey, payload: dict[str, Any]) -> str:
    return jwt.encode({"alg": "RS256", "kid": key.kid}, payload, key)


def check(payload: dict[str, Any]) -> None:
    check_claims(payload, issuer=ISSUER, client_id=CLIENT, nonce=NONCE)


def test_a_good_token_passes(key: RSAKey) -> None:
    got = signed_claims(token(key, claims()), published(key))
    check(got)
    assert got["sub"] == "s1"


def test_a_token_signed_by_another_key_or_tampered_is_refused(key: RSAKey) -> None:
    stranger = RSAKey.generate_key(2048, parameters={"kid": "k1"}, private=True)
    with pytest.raises(OidcDenied, match="signature"):
        signed_claims(token(stranger, claims()), published(key))
    header, _, signature = token(key, claims()).split(".")
    forged = base64.urlsafe_b64encode(json.dumps(claims(sub="admin")).encode()).rstrip(b"=")
    with pytest.raises(OidcDenied, match="signature"):
        signed_claims(f"{header}.{forged.decode()}.{signature}", published(key))
    with pytest.raises(OidcDenied, match="signature"):
        signed_claims("not a token", published(key))


def test_alg_none_and_hmac_with_the_public_key_are_refused(key: RSAKey) -> None:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    unsigned = f"{b64({'alg': 'none'})}.{b64(claims())}."
    with pytest.raises(OidcDenied):
        signed_claims(unsigned, published(key))
    # the classic confusion: the RSA public key's bytes used as an HMAC secret
    signing_input = f"{b64({'alg': 'HS256', 'kid': key.kid})}.{b64(claims())}"
    mac = hmac.new(key.as_pem(private=False), signing_input.encode(), hashlib.sha256)
    confused = f"{signing_input}.{base64.urlsafe_b64encode(mac.digest()).rstrip(b'=').decode()}"
    with pytest.raises(OidcDenied):
        signed_claims(confused, published(key))


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"iss": "https://evil.example.com"}, "iss"),
        ({"iss": None}, "iss"),
        ({"aud": "another-client"}, "aud"),
        ({"aud": None}, "aud"),
        ({"exp": int(time.time()) - 3600}, "exp"),
        ({"exp": None}, "exp"),
        ({"nonce": "replayed"}, "nonce"),
        ({"nonce": None}, "nonce"),
        ({"sub": None}, "sub"),
        ({"aud": [CLIENT, "other"]}, "azp"),
        ({"aud": [CLIENT, "other"], "azp": "other"}, "azp"),
    ],
)
def test_a_token_not_meant_for_this_sign_in_is_refused(
    key: RSAKey, changes: dict[str, Any], why: str
) -> None:
    got = signed_claims(token(key, claims(**changes)), published(key))
    with pytest.raises(OidcDenied, match=why):
        check(got)


def test_several_audiences_pass_with_azp_naming_us() -> None:
    check(claims(aud=[CLIENT, "other"], azp=CLIENT))


def person(email: str | None, verified: bool, *groups: str) -> Identity:
    return Identity(
        issuer=ISSUER,
        subject="s",
        email=email,
        email_verified=verified,
        preferred_username=None,
        groups=groups,
    )


def test_domains_need_a_verified_address_and_groups_need_membership() -> None:
    domains = ["example.com"]
    assert allowed(person("a@example.com", True), domains=domains, groups=[]) is None
    assert allowed(person("a@EXAMPLE.com", True), domains=domains, groups=[]) is None
    assert allowed(person("a@example.com", False), domains=domains, groups=[]) is not None
    assert allowed(person("a@sub.example.com", True), domains=domains, groups=[]) is not None
    assert allowed(person("a@example.com.evil.org", True), domains=domains, groups=[])
    assert allowed(person(None, True), domains=domains, groups=[]) is not None
    assert allowed(person("x@y.org", True), domains=["*"], groups=[]) is None
    assert allowed(person("x@y.org", False), domains=["*"], groups=[]) is not None
    assert allowed(person("x@y.org", True, "staff"), domains=[], groups=["staff"]) is None
    assert allowed(person("x@y.org", True, "Staff"), domains=[], groups=["staff"]) is not None
    assert allowed(person("x@y.org", True, "staff"), domains=domains, groups=["staff"]) is None
    assert allowed(person(None, False), domains=domains, groups=["staff"]) is not None
