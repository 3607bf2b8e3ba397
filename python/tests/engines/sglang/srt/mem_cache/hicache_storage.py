"""Stand-in of sglang.srt.mem_cache.hicache_storage.

Upstream: sgl-project/sglang python/sglang/srt/mem_cache/hicache_storage.py
at commit 001067fffe33427bee0ed2f007fb7551a1d76b44, written here from its
contract (not copied): the storage configuration every rank's backend is
built with, the extra-info passed with each batch, the per-pool transfer
descriptors of the v2 interface, and the abstract HiCacheStorage with the
defaults its subclasses inherit. The file backend (HiCacheFile) and the
metadata cache are left out.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional

# pages per batched storage call of the controller
STORAGE_BATCH_SIZE = 128


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


class PoolName(str, Enum):
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DRAFT = "draft"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    name: PoolName
    host_indices: Any = None
    device_indices: Any = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


@dataclass
class PoolTransferResult:
    kv_hit_pages: int
    extra_pool_hit_pages: dict = field(default_factory=dict)


def count_pool_hits(results: dict) -> dict:
    """Per pool, the leading run of successes."""
    return {name: (rs.index(False) if False in rs else len(rs))
            for name, rs in results.items()}


class HiCacheStorage(ABC):
    """The storage tier below the host KV pool: a key-value store of
    pages. Keys are page hashes (strings)."""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any,
                                  host_pool_name: Any) -> None:
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        raise NotImplementedError()

    def batch_get_v2(self, transfers, extra_info=None):
        raise NotImplementedError()

    def batch_set_v2(self, transfers, extra_info=None):
        raise NotImplementedError()

    # Zero-copy: straight into / out of the registered host pool at
    # host_indices (page_size indices per key); a list of per-key bools.
    # Upstream raises rather than returning None (the controller indexes
    # the result on a daemon thread that is never restarted).
    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> List[bool]:
        raise NotImplementedError()

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> List[bool]:
        raise NotImplementedError()

    @abstractmethod
    def get(self, key: str, target_location: Any = None,
            target_sizes: Any = None) -> Any:
        """The value (in target_location), or None when absent."""

    @abstractmethod
    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> Any:
        """Per key a tensor or None."""

    @abstractmethod
    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """True when stored."""

    @abstractmethod
    def batch_set(self, keys: List[str], values: Any = None,
                  target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """True when every value is stored."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """True when the key is present."""

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> int:
        """How many leading keys are present (the default asks one by
        one)."""
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def clear(self) -> None:
        pass

    def get_stats(self):
        return None
