"""People: one person across platform accounts, joined with /link or by an operator."""
