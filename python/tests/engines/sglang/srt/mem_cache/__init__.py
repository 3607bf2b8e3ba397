"""Stand-in of sglang.srt.mem_cache (python/tests/engines/README.md)."""
