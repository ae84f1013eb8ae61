"""Tasks of a run: what the model is asked (its loss) and what is reported about it."""
