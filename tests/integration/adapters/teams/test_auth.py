"""Bot Framework's sign-in, checked on every request: forged activities are refused with 401
and leave nothing in the store; the issuer's key rotation is picked up."""

from __future__ import annotations

import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.runtime.gateway import Gateway
from testsupport.fakes.teams import ANN, ISSUER, FakeTeams
from testsupport.harness import wait_for
from testsupport.teams import teams_gateway


async def stored_events(gw: Gateway) -> int:
    async with gw.store.db.connection() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM inbound_events"))


def forgeries(fake: FakeTeams) -> dict[str, str]:
    """Authorization headers, each wrong in one way."""
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    return {
        "wrong signature": f"Bearer {fake.token(key=stranger)}",
        "wrong audience": f"Bearer {fake.token(aud='another-bots-app-id')}",
        "expired": f"Bearer {fake.token(exp=now - 600, nbf=now - 4000)}",
        "unknown key": f"Bearer {fake.token(key=stranger, kid='not-published')}",
        "serviceUrl mismatch": f"Bearer {fake.token(service_url='https://evil.example/connector/')}",
        "another issuer": f"Bearer {fake.token(iss='https://sts.example/')}",
        "unsigned": "Bearer "
        + jwt.encode({"aud": fake.app_id, "iss": ISSUER, "exp": now + 60}, "", algorithm="none"),
        "no token": "",
        "not a JWT": "Bearer not-a-jwt",
    }


async def test_forged_requests_are_refused_with_401_and_nothing_is_stored(
    database_url: str, fake: FakeTeams
) -> None:
    async with teams_gateway(database_url, fake) as gw:
        refused: dict[str, Any] = {}
        for reason, header in forgeries(fake).items():
            activity = fake._activity("message", fake.channel, person=ANN, root=None)
            activity["text"] = f"forged: {reason}"
            answer = await fake.deliver(activity, authorization=header)
            refused[reason] = (answer.status, answer.json())
        # an activity whose serviceUrl was changed after signing (the claim is the fake's)
        activity = fake._activity("message", fake.channel, person=ANN)
        activity["serviceUrl"] = "https://evil.example/connector/"
        moved = await fake.deliver(activity)
        refused["activity serviceUrl changed"] = (moved.status, moved.json())
        assert await stored_events(gw) == 0
        assert fake.bot_messages() == []
        # the real thing passes
        ok = await fake.user_posts(fake.channel, "genuine")
        assert ok.status == 200
        await wait_for(lambda: fake.bot_messages(fake.channel), message="the answer")
    assert refused == {reason: (401, {"error": "unauthorized"}) for reason in refused}
    assert len(refused) == 10


async def test_a_rotated_key_is_fetched_when_its_kid_first_appears(
    database_url: str, fake: FakeTeams
) -> None:
    async with teams_gateway(database_url, fake):
        assert (await fake.user_posts(fake.channel, "one")).status == 200
        assert (await fake.user_posts(fake.channel, "two")).status == 200
        assert fake.key_fetches == 1  # cached
        old = fake.keys[-1]
        fake.rotate_keys()
        assert (await fake.user_posts(fake.channel, "three")).status == 200
        assert fake.key_fetches == 2  # the new kid fetched the keys again
        # the old key is no longer published: a token signed with it is refused
        activity = fake._activity("message", fake.channel, person=ANN)
        stale = await fake.deliver(activity, token=fake.token(key=old.private, kid=old.kid))
        assert stale.status == 401
        await wait_for(lambda: len(fake.bot_messages(fake.channel)) == 3, message="answers")
