"""Profiles: what the assistant is in each place (``[profiles.*]`` and ``[places]`` of the
config file), resolved from memory once per turn."""
