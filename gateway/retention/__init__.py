"""Retention: how long each kind of stored data is kept, and the one loop (on one replica, on
the cold path) that drops what is past it without ever breaking dedupe."""
