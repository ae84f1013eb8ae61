"""Datasets of a run: the interface, in-memory arrays, bounded file reading, the built-in sets."""
