"""One agent run at a time per session: the scheduler's mechanics and the stages of a turn."""
