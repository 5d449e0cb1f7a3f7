"""Bundled real models and their one-time preparation."""
