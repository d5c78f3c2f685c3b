"""Profiles: parsing, every kind of bad file, resolution by specificity, the context policy
a profile makes, and the tools it narrows."""

from __future__ import annotations

import pytest

from gateway.core.config_file import parse_config_text
from gateway.core.domain import SessionKey
from gateway.core.errors import ConfigError
from gateway.profiles.model import DEFAULT
from gateway.profiles.parse import KnownTools, parse_profiles
from gateway.profiles.service import Profiles
from gateway.turns.context import ContextPolicy

MODELS = ("gpt-4o-mini", "gpt-4o", "small")
TOOLS = KnownTools(names=("search_knowledge", "current_time", "files.read_file"), servers=("gh",))

CONFIG = """
[profiles.support]
system_prompt = "You are the support desk's assistant."
model = "gpt-4o-mini"
models = ["gpt-4o-mini", "gpt-4o"]
tools = ["search_knowledge", "files.read_*"]
knowledge = ["support-docs"]
answer = "all"
streaming = false

[profiles.eng]
system_prompt = "You help engineers."
model = "gpt-4o"

[profiles.private]
model = "small"
tools = []

[profiles.topic]
system_prompt = "This topic is about releases."

[places]
"*" = "default"
"slack:*:C0SUPPORT" = "support"
"telegram:*:-100123" = "eng"
"telegram:*:-100123:77" = "topic"
"telegram:*:*:77" = "private"
"slack:T1:*" = "private"
"""


def book(text: str = CONFIG):
    return parse_profiles(parse_config_text(text), models=MODELS, tools=TOOLS)


def key(place: str) -> SessionKey:
    parts = place.split(":")
    return SessionKey(
        platform=parts[0],
        scope=parts[1],
        chat_id=parts[2],
        thread_id=parts[3] if len(parts) > 3 else None,
    )


@pytest.mark.parametrize(
    ("place", "profile", "entry"),
    [
        # a chat's entry covers its every thread, in any scope
        ("slack:T9:C0SUPPORT", "support", "slack:*:C0SUPPORT"),
        ("slack:T9:C0SUPPORT:1700000000.0001", "support", "slack:*:C0SUPPORT"),
        # a chat over a wildcard chat (same scope fixed on the other: the chat is more specific)
        ("slack:T1:C0SUPPORT", "support", "slack:*:C0SUPPORT"),
        ("slack:T1:C0OTHER", "private", "slack:T1:*"),
        # a thread over its chat; a thread of a wildcard chat under a named chat
        ("telegram:bot:-100123:77", "topic", "telegram:*:-100123:77"),
        ("telegram:bot:-100123:78", "eng", "telegram:*:-100123"),
        ("telegram:bot:-100123", "eng", "telegram:*:-100123"),
        ("telegram:bot:-100999:77", "private", "telegram:*:*:77"),
        # "*" alone: the default
        ("mattermost:srv:town-square", DEFAULT, "*"),
        ("web:local:general:abc", DEFAULT, "*"),
    ],
)
def test_the_most_specific_entry_wins(place: str, profile: str, entry: str) -> None:
    resolved = book().resolve(key(place))
    assert resolved.profile.name == profile
    assert resolved.entry is not None and resolved.entry.text == entry


def test_without_places_everything_is_the_builtin_default() -> None:
    resolved = book("").resolve(key("slack:T1:C1"))
    assert resolved.profile.name == DEFAULT and resolved.entry is None
    assert resolved.profile.answers_all is None and resolved.profile.tools is None


def test_a_default_profile_in_the_file_replaces_the_builtin_one() -> None:
    text = '[profiles.default]\nsystem_prompt = "Be brief."\n'
    resolved = book(text).resolve(key("slack:T1:C1"))
    assert resolved.profile.system_prompt == "Be brief." and resolved.entry is None


def test_a_tie_goes_to_the_earlier_entry() -> None:
    text = '[profiles.a]\n[profiles.b]\n[places]\n"slack:T1:*" = "a"\n"slack:*:C1" = "b"\n'
    # the chat is more specific than the scope: b, whatever the order
    assert book(text).resolve(key("slack:T1:C1")).profile.name == "b"
    text = '[profiles.a]\n[profiles.b]\n[places]\n"slack:*:C1" = "a"\n"*:*:C1" = "b"\n'
    assert book(text).resolve(key("slack:T1:C1")).profile.name == "a"


def test_resolution_is_memoised_and_bounded() -> None:
    b = book()
    b.memo_size = 3
    first = b.resolve(key("slack:T9:C0SUPPORT"))
    assert b.resolve(key("slack:T9:C0SUPPORT")) is first
    for n in range(10):
        b.resolve(key(f"slack:T9:C{n}"))
    assert len(b._memo) <= 3


def test_models_default_to_the_model_and_the_model_to_the_first_of_models() -> None:
    b = book('[profiles.a]\nmodel = "gpt-4o"\n[profiles.b]\nmodels = ["small", "gpt-4o"]\n')
    assert b.profiles["a"].models == ("gpt-4o",)
    assert b.profiles["b"].model == "small"


def test_a_profile_makes_its_own_context_policy() -> None:
    base = ContextPolicy(default_model="gpt-4o-mini", allowed_models=MODELS, system_prompt="Hi.")
    profiles = Profiles(book(), base)
    support = profiles.policy_for(profiles.resolve(key("slack:T1:C0SUPPORT")).profile)
    assert support.system_prompt == "You are the support desk's assistant."
    assert support.allowed == ("gpt-4o-mini", "gpt-4o")
    topic = profiles.policy_for(profiles.resolve(key("telegram:b:-100123:77")).profile)
    # what the profile leaves unset follows the settings
    assert topic.system_prompt == "This topic is about releases."
    assert (topic.default_model, topic.allowed) == ("gpt-4o-mini", MODELS)
    default = profiles.policy_for(profiles.resolve(key("web:local:x")).profile)
    assert default == base


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        # an unknown profile
        ('[places]\n"slack:*:C1" = "nobody"\n', '[places]."slack:*:C1": unknown profile'),
        # a model outside AGENT_MODELS
        ('[profiles.a]\nmodel = "gpt-5"\n', "[profiles.a].model: model 'gpt-5' is not in"),
        ('[profiles.a]\nmodels = ["small", "o9"]\n', "[profiles.a].models: model 'o9'"),
        ('[profiles.a]\nmodel = "small"\nmodels = ["gpt-4o"]\n', "[profiles.a].model:"),
        # a tool pattern matching nothing known
        ('[profiles.a]\ntools = ["shell.*"]\n', "[profiles.a].tools: tool pattern 'shell.*'"),
        ('[profiles.a]\ntools = ["search_*", "rm"]\n', "[profiles.a].tools: tool pattern 'rm'"),
        # bad place patterns
        ('[profiles.a]\n[places]\n"slack:C1" = "a"\n', '[places]."slack:C1": place'),
        ('[profiles.a]\n[places]\n"slack::C1" = "a"\n', '[places]."slack::C1": place'),
        ('[profiles.a]\n[places]\n"a:b:c:d:e" = "a"\n', '[places]."a:b:c:d:e": place'),
        ('[profiles.a]\n[places]\n"slack:* :C1" = "a"\n', '[places]."slack:* :C1": place'),
        ('[profiles.a]\n[places]\n"slack:*:C1" = 3\n', '[places]."slack:*:C1": must be'),
        # other bad values
        ('[profiles.a]\nanswer = "always"\n', '[profiles.a].answer: must be "mentions"'),
        ('[profiles.a]\nstreaming = "yes"\n', "[profiles.a].streaming: must be true"),
        ('[profiles.a]\ncolour = "red"\n', "[profiles.a].colour: unknown key"),
        ('[profiles.a]\nsystem_prompt = ""\n', "[profiles.a].system_prompt: must be"),
        ("[profiles]\na = 1\n", "[profiles.a]: must be a table"),
    ],
)
def test_a_bad_file_names_the_entry(text: str, entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        book(text)
    assert caught.value.setting == "GATEWAY_CONFIG_FILE"
    assert str(caught.value).startswith(f"GATEWAY_CONFIG_FILE: {entry}"), str(caught.value)


def test_bad_toml_and_unknown_tables_are_refused() -> None:
    with pytest.raises(ConfigError, match="GATEWAY_CONFIG_FILE: not valid TOML"):
        book("[profiles.a\n")
    with pytest.raises(ConfigError, match=r"GATEWAY_CONFIG_FILE: \[profile\]: unknown table"):
        book("[profile.a]\n")


def test_a_tool_pattern_may_name_an_mcp_servers_tools() -> None:
    b = book('[profiles.a]\ntools = ["gh.*", "gh.issues_list", "current_time"]\n')
    assert b.profiles["a"].tools == ("gh.*", "gh.issues_list", "current_time")
