"""A small classifier and its training loop: the project whose memory the tests' budgets guard."""
