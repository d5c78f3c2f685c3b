"""Schedules: questions the assistant is asked in a place at a time or on a cron expression,
each firing run once across replicas as a normal turn of the place's session."""
