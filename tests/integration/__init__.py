"""A whole gateway in the test process, against the platform fakes."""
