"""``on_edit`` / ``on_delete``: a place's profile over ``GATEWAY_ON_EDIT`` /
``GATEWAY_ON_DELETE``, and what the core's door asks of an edit or deletion with them."""

from __future__ import annotations

from gateway.core.config_file import parse_config_text
from gateway.core.domain import Envelope, EventKind, ReplyTarget, Sender, SessionKey
from gateway.core.profile import ConversationRules
from gateway.core.settings import Settings
from gateway.inbound.ingress import FOLLOW_UP, follow_up
from gateway.inbound.intake import to_inbound
from gateway.profiles.parse import KnownTools, parse_profiles
from gateway.profiles.service import Profiles
from gateway.turns.context import ContextPolicy
from session_store.records import InboundAnnotation

CONFIG = """
[profiles.quiet]
on_edit = "context"
[profiles.tidy]
on_delete = "retract"
[places]
"web:local:quiet" = "quiet"
"web:local:tidy" = "tidy"
"""


def place(chat: str) -> SessionKey:
    return SessionKey(platform="web", scope="local", chat_id=chat, thread_id="t")


def change(chat: str, kind: EventKind) -> Envelope:
    key = place(chat)
    target = ReplyTarget(platform="web", scope="local", chat_id=chat, thread_id="t")
    return Envelope(
        key=key, target=target, message_id="m1", text="new", sender=Sender(id="ann"), kind=kind
    )


def test_a_profile_sets_the_rules_of_its_places_over_the_settings() -> None:
    book = parse_profiles(parse_config_text(CONFIG), models=["m"], tools=KnownTools())
    defaults = Settings(_env_file=None, GATEWAY_ON_DELETE="retract")  # type: ignore[call-arg]
    base = ConversationRules(on_edit=defaults.gateway_on_edit, on_delete=defaults.gateway_on_delete)
    profiles = Profiles(book, ContextPolicy(), base)
    assert profiles.conversation(place("quiet")) == ConversationRules("context", "retract")
    assert profiles.conversation(place("tidy")) == ConversationRules("update", "retract")
    assert profiles.conversation(place("general")) == ConversationRules("update", "retract")
    assert book.profiles["quiet"].describe()["on_edit"] == "context"


def test_the_door_asks_an_update_or_a_retraction_only_where_the_rules_say_so() -> None:
    update = follow_up(change("c", EventKind.EDIT), ConversationRules("update", "keep"))
    assert update.metadata[FOLLOW_UP] == "update"  # type: ignore[union-attr]
    stored = to_inbound(update)
    assert isinstance(stored, InboundAnnotation) and stored.follow_up == "update"
    quiet = follow_up(change("c", EventKind.EDIT), ConversationRules("context", "retract"))
    assert FOLLOW_UP not in quiet.metadata  # type: ignore[union-attr]
    retract = to_inbound(follow_up(change("c", EventKind.DELETE), ConversationRules()))
    assert isinstance(retract, InboundAnnotation) and retract.follow_up is None
    gone = follow_up(change("c", EventKind.DELETE), ConversationRules("update", "retract"))
    assert to_inbound(gone).follow_up == "retract"  # type: ignore[union-attr]
