"""Shared pytest fixtures for the whole suite (none needed yet: each test module keeps its own)."""
