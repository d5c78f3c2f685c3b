"""The store's repositories, one per area, each with its SQL in a ``.sql`` file beside it."""
