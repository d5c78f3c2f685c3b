"""The Telegram fixtures (testsupport/telegram.py): the fake Bot API."""

from testsupport.telegram import fake  # noqa: F401
