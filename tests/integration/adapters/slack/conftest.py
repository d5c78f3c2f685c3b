"""The Slack fixtures (testsupport/slack.py): the fake Web API, a recording intake, no proxy."""

from testsupport.slack import _no_proxy_from_env, fake, intake  # noqa: F401
