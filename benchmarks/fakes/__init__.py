"""Platform fakes: real local servers speaking each platform's wire protocol (the Telegram Bot
API, Slack's Web API, Events API and Socket Mode, Mattermost's REST API and websocket) with a
user-side API, a recorder and fault injection; and the sink surface, a minimal adapter over HTTP.

The benchmarks drive the real adapters against them, and so do the tests. They ship with the
benchmarks so that ``python -m benchmarks`` never imports ``tests``."""
