"""Stand-in of vllm/v1/kv_offload/base.py, read at vllm-project/vllm
0105e232b7fa4e1b59ec87531f167c0443a5095d (the newest generation read:
``lookup`` of one ``OffloadKey`` answering ``LookupResult``, abstract
``on_new_request``, the ``OffloadingWorker`` API, ``OffloadingSpec``
built from an ``OffloadingConfig``). The classes, fields and abstract
methods are upstream's; the bodies are only what the contract needs.
Left out: tier filters, KV hints, metric metadata, canonical page
mappings, ``get_load_source`` (it returns vLLM's CacheHitSource)."""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Collection, Dict, Iterable, List, NamedTuple
from typing import NewType, Optional, Sequence

import numpy as np

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    """A block hash and its KV-cache group, as upstream packs them."""
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big"))


class Medium(Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Optional[Dict[str, Any]] = None


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


class OffloadPolicy(Enum):
    CHUNK_LEVEL = "chunk_level"
    REQUEST_LEVEL = "request_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.CHUNK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


class LoadStoreSpec:
    """Where a worker loads / stores blocks (no medium() in this
    generation)."""


@dataclass
class PrepareStoreOutput:
    keys_to_store: List[OffloadKey]
    store_spec: LoadStoreSpec
    evicted_keys: List[OffloadKey]


@dataclass
class OffloadingEvent:
    keys: List[OffloadKey]
    medium: Medium
    removed: bool
    locality: Optional[Locality] = None
    ownership: Optional[str] = None
    removal_expected: bool = False


@dataclass(frozen=True)
class OffloadingKVEventsConfig:
    enable_kv_cache_events: bool
    self_describing_kv_events: bool


class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext
               ) -> LookupResult: ...

    @abstractmethod
    def prepare_load(self, keys: Collection[OffloadKey],
                     req_context: ReqContext) -> LoadStoreSpec: ...

    def touch(self, keys, req_context):
        return

    def complete_load(self, keys, req_context):
        return

    @abstractmethod
    def prepare_store(self, keys: Collection[OffloadKey],
                      req_context: ReqContext
                      ) -> Optional[PrepareStoreOutput]: ...

    def complete_store(self, keys, req_context, success: bool = True):
        return

    @abstractmethod
    def on_new_request(self, req_context: ReqContext
                       ) -> RequestOffloadingContext: ...

    def on_request_finished(self, req_context: ReqContext) -> None:
        return

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        return

    def has_pending_work(self) -> bool:
        return False

    def reset_cache(self) -> None:
        return

    def get_stats(self):
        return None

    def shutdown(self) -> None:
        return


class BlockIDsLoadStoreSpec(LoadStoreSpec, ABC):
    def __init__(self, block_ids: List[int]):
        self.block_ids = np.array(block_ids, dtype=np.int32)


class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    """GPU block ids, ordered by KV-cache group (group_sizes[i] of group
    i); block_indices[i]: the index in the request of group i's first
    block."""

    def __init__(self, block_ids: List[int], group_sizes: Sequence[int],
                 block_indices: Sequence[int]):
        super().__init__(block_ids)
        assert sum(group_sizes) == len(block_ids)
        assert len(block_indices) == len(group_sizes)
        self.group_sizes = group_sizes
        self.block_indices = block_indices


@dataclass
class CanonicalKVCacheTensor:
    tensor: Any  # torch.Tensor of shape (num_blocks, ...)
    page_size_bytes: int


@dataclass
class CanonicalKVCacheRef:
    tensor_idx: int
    page_size_bytes: int
    mapping: Any = None


@dataclass
class CanonicalKVCaches:
    tensors: List[CanonicalKVCacheTensor]
    group_data_refs: List[List[CanonicalKVCacheRef]]


@dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: Optional[int] = None
    transfer_time: Optional[float] = None


class OffloadingWorker(ABC):
    """One offloaded medium's asynchronous transfers, in the worker."""

    @abstractmethod
    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec,
                     dst_spec: LoadStoreSpec) -> bool: ...

    @abstractmethod
    def submit_load(self, job_id: int, src_spec: LoadStoreSpec,
                    dst_spec: GPULoadStoreSpec) -> bool: ...

    @abstractmethod
    def get_finished(self) -> List[TransferResult]: ...

    @abstractmethod
    def wait(self, job_ids) -> None: ...

    def shutdown(self) -> None:
        return


class OffloadingSpec(ABC):
    def __init__(self, config):
        self.config = config
        self.extra_config = config.extra_config
        self.replicated_layout = False
        self.kv_events_config = OffloadingKVEventsConfig(
            enable_kv_cache_events=config.enable_kv_cache_events,
            self_describing_kv_events=bool(
                self.extra_config.get("self_describing_kv_events", False)))
        self.tokens_per_block = tuple(g.tokens_per_block
                                      for g in config.groups)
        self.tokens_per_hash = config.cache.tokens_per_hash
        self.blocks_per_chunk = config.cache.blocks_per_chunk

    @abstractmethod
    def get_manager(self) -> OffloadingManager: ...

    @abstractmethod
    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        ...
