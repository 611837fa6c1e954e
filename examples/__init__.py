"""Runnable examples: ``python -m examples.<name>`` from the repository root."""
