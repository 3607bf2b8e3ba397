"""Stand-in of sglang.srt.mem_cache.storage: exports the backend factory,
as upstream's package does (python/sglang/srt/mem_cache/storage/
__init__.py; the controller imports StorageBackendFactory from here)."""
from sglang.srt.mem_cache.storage.backend_factory import (  # noqa: F401
    StorageBackendFactory)
