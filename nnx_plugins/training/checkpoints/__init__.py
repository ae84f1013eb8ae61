"""Checkpoints: writing (one or many processes), reading, rotating and keeping the best."""
