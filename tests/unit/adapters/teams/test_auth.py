"""``BotFrameworkAuth.verify`` against the fake's OpenID issuer: each forged part of a token
is refused for its own reason; keys are cached and fetched again for an unknown kid only."""

from __future__ import annotations

import time

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from adapters.teams.auth import AuthError, BotFrameworkAuth, KeysUnavailable, OpenIdKeys
from testsupport.fakes.teams import FakeTeams


def auth(fake: FakeTeams, *, refetch: float = 0.0) -> BotFrameworkAuth:
    return BotFrameworkAuth(
        OpenIdKeys(fake.openid_url, refetch_interval=refetch), app_id=fake.app_id
    )


async def verify(a: BotFrameworkAuth, fake: FakeTeams, token: str, **kw: str) -> None:
    await a.verify(
        f"Bearer {token}",
        service_url=kw.get("service_url", fake.service_url),
        channel_id=kw.get("channel_id", "msteams"),
    )


async def test_each_forgery_is_refused_for_its_reason(fake: FakeTeams) -> None:
    a = auth(fake)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    cases = {
        "bad signature": fake.token(key=stranger),
        "token is for another audience": fake.token(aud="someone-else"),
        "token expired": fake.token(exp=now - 301 - 5, nbf=now - 4000),
        "unknown signing key": fake.token(key=stranger, kid="unpublished"),
        "serviceUrl does not match the token": fake.token(service_url="https://evil.example/"),
        "token from another issuer": fake.token(iss="https://login.example/"),
    }
    for reason, token in cases.items():
        with pytest.raises(AuthError, match=reason):
            await verify(a, fake, token)
    with pytest.raises(AuthError, match="not endorsed"):
        await verify(a, fake, fake.token(), channel_id="slack")
    # within the 5 minutes of skew, and with the serviceUrl written differently: accepted
    await verify(a, fake, fake.token(exp=now - 200), service_url=fake.service_url.rstrip("/"))


async def test_keys_are_cached_and_refetched_for_a_new_kid_at_most_so_often(
    fake: FakeTeams,
) -> None:
    a = auth(fake, refetch=60.0)
    await verify(a, fake, fake.token())
    await verify(a, fake, fake.token())
    assert fake.key_fetches == 1
    fake.rotate_keys()
    # the first fetch was moments ago: a new kid cannot make it fetch again yet
    with pytest.raises(AuthError, match="unknown signing key"):
        await verify(a, fake, fake.token())
    assert fake.key_fetches == 1
    rotating = auth(fake)
    await verify(rotating, fake, fake.token())
    fake.rotate_keys()
    await verify(rotating, fake, fake.token())
    assert fake.key_fetches == 3


async def test_an_issuer_out_of_reach_is_not_a_forgery(fake: FakeTeams) -> None:
    """The keys cannot be fetched: ``KeysUnavailable`` (answered 503, so Bot Framework
    retries), not a refusal."""
    a = BotFrameworkAuth(OpenIdKeys(f"{fake.url}/gone"), app_id=fake.app_id)
    with pytest.raises(KeysUnavailable):
        await verify(a, fake, fake.token())
