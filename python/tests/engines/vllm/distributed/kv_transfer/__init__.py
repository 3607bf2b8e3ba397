"""Stand-in package (python/tests/engines/README.md)."""
