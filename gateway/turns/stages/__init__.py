"""The stages of a turn, one module each (the composition root lists the ones in use)."""
