"""The audit log: who did what to which object, from where, and how it ended.

Recording is one line wherever a ``Store`` is at hand::

    from gateway import audit

    await audit.record(store, "kb.document.delete", ("kb.document", doc_id))
    await audit.record(store, "web.sign_in", ("web.account", name), outcome="denied",
                       reason="wrong name or password")
    async with audit.attempt(store, "delivery.retry", ("delivery", 7)):
        ...  # ok when the block ends, failed (and re-raised) on a GatewayError

Who acted and from where come from the context: the HTTP server sets them per request
(``gateway.audit.origin``), commands with ``audit.acting(audit.cli_actor(), surface="cli")``.
See ``gateway.audit.recorder`` for what happens when the event cannot be stored."""

from gateway.audit.context import SYSTEM, Who, acting, cli_actor, current
from gateway.audit.recorder import Object, Outcome, attempt, event, record

__all__ = [
    "SYSTEM",
    "Object",
    "Outcome",
    "Who",
    "acting",
    "attempt",
    "cli_actor",
    "current",
    "event",
    "record",
]
