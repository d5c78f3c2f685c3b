"""Usage and budgets: prices, the ledger's charges, the budget check, and their views."""
