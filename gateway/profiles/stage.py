"""The profile stage: the place's profile, resolved once per turn, and ``/profile``.

Before everything else: resolves the turn's place to its profile (from memory) and puts it
on the turn with its context policy; the stages after it read them (commands: ``/model``'s
choices; streaming: whether to preview; tools: the allow-list narrowing the policy;
context: system prompt and models; knowledge: the bases searched). After the agent: the
profile's name goes on the answer's metadata (``/ops``, ``gateway sessions show``).
"""

from __future__ import annotations

from dataclasses import replace

from gateway.core.domain import Reply
from gateway.profiles.model import Profile, Resolved
from gateway.profiles.service import Profiles
from gateway.turns.context import ContextPolicy
from gateway.turns.stage import COMMAND_MODEL, Answer, Stage, TurnRun
from session_store.records import MessageRecord

#: the answer's metadata key naming the profile that answered
PROFILE_KEY = "profile"


class ProfileStage(Stage):
    name = "profile"

    def __init__(self, profiles: Profiles) -> None:
        self._profiles = profiles

    async def before(self, turn: TurnRun) -> Answer | None:
        profile = self._profiles.resolve(turn.claim.key).profile
        turn.profile = profile
        turn.policy = self._profiles.policy_for(profile)
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        profile = turn.profile
        if profile is None:
            return replies
        return [replace(r, metadata={**r.metadata, PROFILE_KEY: profile.name}) for r in replies]


class ProfileCommand:
    """``/profile``: what the assistant is here (profile, model, tools, knowledge)."""

    name = "profile"

    def __init__(self, profiles: Profiles, *, tools_on: bool) -> None:
        self._profiles = profiles
        self._tools_on = tools_on

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        resolved = self._profiles.resolve(turn.claim.key)
        policy = turn.policy or self._profiles.policy_for(resolved.profile)
        text = describe_here(resolved, policy, tools_on=self._tools_on)
        return Reply(text=text, model=COMMAND_MODEL, metadata={PROFILE_KEY: resolved.profile.name})


def describe_here(resolved: Resolved, policy: ContextPolicy, *, tools_on: bool) -> str:
    """``/profile``'s answer, in plain lines."""
    profile: Profile = resolved.profile
    models = ", ".join(m for m in policy.allowed if m != policy.default_model)
    lines = [f"Profile: {profile.name}", f"Model: {policy.default_model}"]
    if models:
        lines.append(f"Other models (/model NAME): {models}")
    if not tools_on:
        lines.append("Tools: none")
    elif profile.tools is None:
        lines.append("Tools: the gateway's tools policy")
    else:
        lines.append("Tools: " + (", ".join(profile.tools) or "none"))
    extra = ", ".join(profile.knowledge)
    lines.append("Knowledge: this thread's and this chat's files" + (f", {extra}" if extra else ""))
    if profile.answer == "all":
        lines.append("I answer every message here.")
    return "\n".join(lines)
