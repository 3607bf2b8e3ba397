"""Stand-in of sglang.srt (python/tests/engines/README.md)."""
