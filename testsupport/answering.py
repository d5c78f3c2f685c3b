"""The answer rules each surface's plugin declares, as the core's ingress builds them
(``gateway.inbound.policy.surface_rules``), for tests that apply the door (``admit``) to an
extract's result without a running gateway."""

from __future__ import annotations

from adapters.mattermost.plugin import plugin as mattermost_plugin
from adapters.mattermost.settings import MattermostSettings
from adapters.slack.plugin import plugin as slack_plugin
from adapters.slack.settings import SlackSettings
from adapters.telegram.plugin import plugin as telegram_plugin
from adapters.telegram.settings import TelegramSettings
from gateway.core.settings import Settings
from gateway.inbound.policy import AnswerRules, PlaceAnswerRule, surface_rules


def telegram_rules(
    settings: TelegramSettings,
    core: Settings | None = None,
    *,
    answer_bots: bool | None = None,
    place_answers_all: PlaceAnswerRule | None = None,
) -> AnswerRules:
    return surface_rules(
        telegram_plugin,
        settings,
        core,
        answer_bots=answer_bots,
        place_answers_all=place_answers_all,
    )


def slack_rules(
    settings: SlackSettings,
    core: Settings | None = None,
    *,
    answer_bots: bool | None = None,
    place_answers_all: PlaceAnswerRule | None = None,
) -> AnswerRules:
    return surface_rules(
        slack_plugin, settings, core, answer_bots=answer_bots, place_answers_all=place_answers_all
    )


def mattermost_rules(
    settings: MattermostSettings,
    core: Settings | None = None,
    *,
    answer_bots: bool | None = None,
    place_answers_all: PlaceAnswerRule | None = None,
) -> AnswerRules:
    return surface_rules(
        mattermost_plugin,
        settings,
        core,
        answer_bots=answer_bots,
        place_answers_all=place_answers_all,
    )
