"""The fault campaign's surfaces offer the faults their platform can script, and no other: a
driver that cannot rate-limit sends or drop a connection keeps the ``Driver`` defaults, which
offer none, report nothing pending and do nothing when asked."""

from __future__ import annotations

import random

from campaigns.platforms import DRIVERS, Driver, Reach

#: what each surface can inject: (send faults, connection drop)
FAULTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "telegram": (("telegram_429",), None),
    "slack": (("slack_429",), None),
    "mattermost": ((), "mattermost_socket_drop"),
    "web": ((), None),
    "matrix": ((), None),
    "discord": (("discord_429",), "discord_gateway_drop"),
    "teams": (("teams_429",), None),
}


def test_each_surface_offers_the_faults_its_platform_can_script() -> None:
    reach = Reach(random.Random(1))
    drivers = {name: make(reach) for name, make in DRIVERS.items()}
    assert {name: (d.send_faults, d.drop_kind) for name, d in drivers.items()} == FAULTS
    assert all(Driver in type(d).__mro__ for d in drivers.values()), "each names Driver as its base"


async def test_a_surface_without_faults_keeps_the_quiet_defaults() -> None:
    for name in ("web", "matrix"):
        driver = DRIVERS[name](Reach(random.Random(1)))
        driver.send_fault("any")
        assert driver.send_faults_pending() is False
        await driver.drop()  # nothing to drop: returns at once
