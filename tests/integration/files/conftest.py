"""The fake Bot API as ``fake`` (testsupport/telegram.py); the transcription server is the
root conftest's ``speech``."""

from testsupport.telegram import fake  # noqa: F401
