"""Files people share, understood: voice notes and audio transcribed (``transcribe``,
``voice``)."""
