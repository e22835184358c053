"""Shared facts one floor below everything: log-space helpers, sampling, the resumable JSON Lines store."""
