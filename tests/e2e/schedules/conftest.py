"""The Telegram fixtures (testsupport/telegram.py): the fake Bot API."""

from testsupport.telegram import fake, intake, start_adapter  # noqa: F401
