"""What the Slack code uses, as data: the Web API methods it calls and the events it handles,
with the scopes and subscriptions they need. ``check`` compares a token's granted scopes with
these, and ``tests/slack/test_manifest.py`` checks both the code and the app manifests in
``deploy/slack/`` against them, so a new call or event cannot ship without its scope."""

from __future__ import annotations

_HISTORY = ("channels:history", "groups:history", "im:history", "mpim:history")

#: Web API method -> bot scopes it needs (docs.slack.dev/reference/methods/<method>)
WEB_API_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "chat.postMessage": ("chat:write",),
    # approval cards: retired in place once decided, and a notice only the person
    # who pressed someone else's button sees
    "chat.update": ("chat:write",),
    "chat.delete": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    # first contact inside a thread: the earlier messages as context (optional: without the
    # scope the mention is answered without them)
    "conversations.replies": _HISTORY,
    # answers that carry files: uploaded into the thread (files.uploadV2)
    "files.upload.v2": ("files:write",),
    # the typing indicator of an assistant thread (optional: without the scope, none is shown)
    "assistant.threads.setStatus": ("assistant:write",),
    # an assistant thread's suggested prompts and its title (optional, like the status)
    "assistant.threads.setSuggestedPrompts": ("assistant:write",),
    "assistant.threads.setTitle": ("assistant:write",),
    # answers streamed natively: slack_sdk's chat_stream helper (chat.startStream and
    # chat.appendStream), and chat.stopStream for a stream a dead run left
    "chat.stream": ("chat:write",),
    "chat.stopStream": ("chat:write",),
    # a thread's agent session "processing" while a turn runs (Slack's own stop button), then
    # "active" (optional, like the status)
    "agents.sessions.setStatus": ("chat:write",),
}

#: event subscription -> the event ``type`` extraction sees, and the bot scope it needs
EVENT_SUBSCRIPTIONS: dict[str, tuple[str, str]] = {
    "app_mention": ("app_mention", "app_mentions:read"),
    "message.channels": ("message", "channels:history"),
    "message.groups": ("message", "groups:history"),
    "message.im": ("message", "im:history"),
    "message.mpim": ("message", "mpim:history"),
    # 👍/👎 on the bot's answers are their feedback
    "reaction_added": ("reaction_added", "reactions:read"),
    "reaction_removed": ("reaction_removed", "reactions:read"),
    # a person opened the app's assistant container: the thread's suggested prompts
    "assistant_thread_started": ("assistant_thread_started", "assistant:write"),
    # Slack's stop button of a thread's agent session was pressed: that person's /stop there
    "agent_session_stopped": ("agent_session_stopped", "assistant:write"),
}

#: scopes for what is not a Web API method: a shared file's ``url_private`` download (files
#: shared with a question join the thread's knowledge base)
DOWNLOAD_SCOPES: tuple[str, ...] = ("files:read",)

#: every bot scope the code needs, sorted
BOT_SCOPES: tuple[str, ...] = tuple(
    sorted(
        {s for scopes in WEB_API_SCOPES.values() for s in scopes}
        | {scope for _, scope in EVENT_SUBSCRIPTIONS.values()}
        | set(DOWNLOAD_SCOPES)
    )
)

#: the app-level token's scope (Socket Mode: ``apps.connections.open``)
APP_TOKEN_SCOPE = "connections:write"
#: Web API methods called with the app-level token, not the bot token
APP_TOKEN_METHODS: dict[str, tuple[str, ...]] = {"apps.connections.open": (APP_TOKEN_SCOPE,)}
