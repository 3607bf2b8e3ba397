"""Stand-in of lmcache/v1/metadata.py: ``LMCacheMetadata`` as the newer
``RemoteConnector.__init__`` reads it (LMCache/LMCache
lmcache/v1/storage_backend/connector/base_connector.py, the version whose
constructor takes ``(config, metadata)`` and calls ``get_shapes()``,
``get_dtypes()``, ``get_num_groups()``; docs/engines.md)."""

import dataclasses
from typing import Tuple

import torch


@dataclasses.dataclass
class LMCacheMetadata:
    model_name: str
    world_size: int
    worker_id: int
    fmt: str
    kv_dtype: torch.dtype
    kv_shape: Tuple[int, ...]  # (layers, 2, chunk tokens, heads, head dim)
    use_mla: bool = False
    chunk_size: int = 256
    role: str = "worker"

    def get_shapes(self):
        layers, two, tokens, heads, hd = self.kv_shape
        return [torch.Size([two, layers, tokens, heads * hd])]

    def get_dtypes(self):
        return [self.kv_dtype]

    def get_num_groups(self) -> int:
        return 1
