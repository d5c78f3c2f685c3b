"""The profile stage resolves the place once per turn and the stages after it follow it:
``/model`` offers the profile's models, ``/profile`` says what the assistant is here, the
answer carries the profile's name, and a reload swaps the profiles whole (or not at all)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.core.config_file import parse_config_text
from gateway.core.config_watch import ConfigWatch
from gateway.core.domain import Reply
from gateway.core.errors import ConfigError
from gateway.core.settings import Settings
from gateway.profiles.parse import KnownTools, parse_profiles
from gateway.profiles.service import Profiles
from gateway.profiles.stage import ProfileCommand, ProfileStage
from gateway.turns.context import ContextPolicy
from gateway.turns.stages.commands import CommandsStage
from gateway.turns.stages.knowledge import KnowledgeStage
from gateway.turns.stages.streaming import StreamingStage
from tests.unit.turns.fakes import fake_turn, message, texts
from tests.unit.turns.test_commands import Choices
from tests.unit.turns.test_streaming_typing import AGENT, Stream, Streams

BASE = ContextPolicy(
    default_model="small", allowed_models=("small", "big", "huge"), system_prompt="Base."
)
CONFIG = """
[profiles.web]
system_prompt = "You are the web desk."
model = "big"
models = ["big", "huge"]
tools = ["search_*"]
knowledge = ["desk-docs"]
answer = "all"
streaming = false

[places]
"web:local:c1" = "web"
"""


def profiles(text: str = CONFIG) -> Profiles:
    book = parse_profiles(
        parse_config_text(text), models=BASE.allowed, tools=KnownTools(names=["search_thread"])
    )
    return Profiles(book, BASE)


async def test_the_stage_puts_the_profile_and_its_policy_on_the_turn() -> None:
    p = profiles()
    turn = fake_turn(message(1, "hello"))
    stage = ProfileStage(p)
    assert await stage.before(turn) is None
    assert turn.profile is not None and turn.profile.name == "web"
    assert turn.policy is not None and turn.policy.system_prompt == "You are the web desk."
    assert turn.policy.default_model == "big" and turn.policy.allowed == ("big", "huge")
    answer = await stage.after(turn, [Reply(text="hi", metadata={"usage": {}})])
    assert answer[0].metadata == {"usage": {}, "profile": "web"}


async def test_model_offers_the_profiles_models_only() -> None:
    p = profiles()
    turn = fake_turn(message(1, "/model", command="model"))
    await ProfileStage(p).before(turn)
    await CommandsStage(Choices(), BASE).before(turn)
    assert texts(turn) == [
        "Models:\n- big (default, in use here)\n- huge\nSwitch this thread with /model NAME."
    ]
    turn = fake_turn(message(1, "/model small", command="model"))
    await ProfileStage(p).before(turn)
    await CommandsStage(Choices(), BASE).before(turn)
    assert texts(turn)[0].startswith("Unknown model 'small'. Available: big, huge.")


async def test_profile_says_what_the_assistant_is_here() -> None:
    p = profiles()
    turn = fake_turn(message(1, "/profile", command="profile"))
    await ProfileStage(p).before(turn)
    stage = CommandsStage(Choices(), BASE, handlers=[ProfileCommand(p, tools_on=True)])
    await stage.before(turn)
    assert texts(turn) == [
        "Profile: web\nModel: big\nOther models (/model NAME): huge\nTools: search_*\n"
        "Knowledge: this thread's and this chat's files, desk-docs\n"
        "I answer every message here."
    ]
    assert "/profile - What the assistant is here" in stage.help_text


async def test_profile_in_a_place_without_one_is_the_default() -> None:
    p = profiles("")
    turn = fake_turn(message(1, "/profile", command="profile"))
    await ProfileStage(p).before(turn)
    await CommandsStage(Choices(), BASE, handlers=[ProfileCommand(p, tools_on=False)]).before(turn)
    assert texts(turn) == [
        "Profile: default\nModel: small\nOther models (/model NAME): big, huge\nTools: none\n"
        "Knowledge: this thread's and this chat's files"
    ]


def settings(path: Path) -> Settings:
    values = {
        "GATEWAY_CONFIG_FILE": str(path),
        "AGENT_MODEL": "small",
        "AGENT_MODELS": "small,big,huge",
        "AGENT_SYSTEM_PROMPT": "Base.",
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg,arg-type]


def test_a_reload_swaps_the_profiles_and_a_broken_file_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(CONFIG)
    watch = ConfigWatch(path)
    p = Profiles.watching(watch, settings(path))
    seen: list[int] = []
    watch.subscribe("other", lambda config: len(config.section("places")), seen.append)
    key = fake_turn(message(1, "x")).claim.key
    assert p.resolve(key).profile.name == "web" and seen == [1]
    # a changed file is read again: the new profile is in force, for every subscriber
    path.write_text(CONFIG.replace('"web:local:c1" = "web"', '"web:*:*" = "web"\n"*" = "web"'))
    assert watch.reload().ok and seen == [1, 2]
    entry = p.resolve(key).entry
    assert entry is not None and entry.text == "web:*:*"
    before = p.book
    # broken in each way: refused, nothing applied, the reason said
    for broken, reason in [
        ("[profiles.web\n", "not valid TOML"),
        ('[places]\n"*" = "nobody"\n', "unknown profile 'nobody'"),
        ('[profiles.web]\nmodel = "gpt-9"\n', "model 'gpt-9' is not in AGENT_MODELS"),
        ('[profiles.web]\ntools = ["rm_*"]\n', "tool pattern 'rm_*' matches no known tool"),
        ('[profiles.web]\n[places]\n"web:c1" = "web"\n', "is not platform:scope:chat"),
    ]:
        path.write_text(broken)
        result = watch.reload()
        assert not result.ok and result.error is not None and reason in result.error
        assert p.book is before and seen == [1, 2]
    path.unlink()
    assert not watch.reload().ok and p.book is before
    assert (watch.reloads, watch.refused) == (1, 6)


def test_a_bad_file_at_start_raises(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[places]\n"*" = "nobody"\n')
    with pytest.raises(ConfigError, match=r'\[places\]\."\*": unknown profile'):
        Profiles.watching(ConfigWatch(path), settings(path))


def test_policy_for_is_built_once_per_load() -> None:
    p = profiles()
    web = p.book.profiles["web"]
    assert p.policy_for(web) is p.policy_for(web)
    assert p.policy_for(replace(web, name="other")).default_model == "big"


class Bases:
    """Knowledge retrieval recording which extra bases a turn searched."""

    def __init__(self) -> None:
        self.bases: list[tuple[str, ...]] = []

    async def prepare(self, *args: object, bases: Sequence[str] = (), **kw: object) -> None:
        self.bases.append(tuple(bases))

    def count_access(self, hits: object) -> None:
        """Passages an answer cited (none here: the turn never reaches an answer)."""


async def test_the_stages_after_it_follow_the_profile() -> None:
    p = profiles()
    turn = fake_turn(message(1, "hello"))
    await ProfileStage(p).before(turn)
    # knowledge: the profile's bases are searched besides the thread's and chat's own
    retrieval = Bases()
    await KnowledgeStage(retrieval, {}, wait_seconds=0).before(turn)
    assert retrieval.bases == [("desk-docs",)]
    # streaming: off in this profile's places, so no preview is even opened
    streams = Streams(Stream(shown=True))
    await StreamingStage(streams, AGENT).before(turn)
    assert streams.opened == [] and turn.request.stream is None
    # elsewhere (the default profile) both follow the settings
    other = fake_turn(message(1, "hello"))
    await ProfileStage(profiles("")).before(other)
    await KnowledgeStage(retrieval, {}, wait_seconds=0).before(other)
    await StreamingStage(streams, AGENT).before(other)
    assert retrieval.bases[-1] == () and len(streams.opened) == 1
