"""The runtime: composition root, supervisor, leadership, live events, plugin registry."""
