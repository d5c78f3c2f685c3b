"""One suite over the surfaces: the promises every surface keeps, written once."""
