"""The turn: scheduling mechanics and the pipeline of stages around the agent call."""
