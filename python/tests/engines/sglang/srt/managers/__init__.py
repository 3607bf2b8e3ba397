"""Stand-in of sglang.srt.managers (python/tests/engines/README.md)."""
