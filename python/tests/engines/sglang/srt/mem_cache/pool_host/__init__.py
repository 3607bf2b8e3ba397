"""Stand-in of sglang.srt.mem_cache.pool_host (upstream's package of the
host KV pools, python/sglang/srt/mem_cache/pool_host/__init__.py; before
it, python/sglang/srt/mem_cache/memory_pool_host.py)."""
from sglang.srt.mem_cache.pool_host.base import HostKVCache  # noqa: F401
from sglang.srt.mem_cache.pool_host.mha import (  # noqa: F401
    MHATokenToKVPoolHost)
from sglang.srt.mem_cache.pool_host.mla import (  # noqa: F401
    MLATokenToKVPoolHost)
