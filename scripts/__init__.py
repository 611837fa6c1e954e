"""Maintainer scripts: ``python -m scripts.<name>`` from the repository root."""
