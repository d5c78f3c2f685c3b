"""The Teams fixtures (testsupport/teams.py): the fake Bot Framework."""

from testsupport.teams import fake  # noqa: F401
