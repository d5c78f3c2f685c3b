"""The Mattermost fixtures (testsupport/mattermost.py): the fake server, a running adapter."""

from testsupport.mattermost import fake, running  # noqa: F401
