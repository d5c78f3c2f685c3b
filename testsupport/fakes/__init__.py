"""Platform fakes: real local servers speaking each platform's wire protocol (the Telegram Bot
API, Slack's Web API, Events API and Socket Mode, Mattermost's REST API and websocket) with a
user-side API, a recorder and fault injection; and the sink surface, a minimal adapter over HTTP.

The tests drive the real adapters against them, and so do the benchmarks and the campaigns.
They live in ``testsupport`` (never in the wheel), so that ``python -m benchmarks`` never
imports ``tests``."""
