"""The Telegram fixtures (testsupport/telegram.py): the fake Bot API, an intake, an adapter."""

from testsupport.telegram import fake, intake, start_adapter  # noqa: F401
