"""Placeholder during development."""
