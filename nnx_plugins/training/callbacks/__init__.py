"""Callbacks of a run: what happens around the steps (early stopping, an EMA of the weights)."""
