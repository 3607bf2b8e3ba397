"""Stand-in of lmcache/v1/storage_backend/connector/base_connector.py, the
newer interface (LMCache/LMCache; the version found by content whose
constructor takes (config, metadata), docs/engines.md; the older one at
01712fbd51d033060d6a8851c06de0ebf351f74e has the same abstract methods
and no constructor). Abstract: exists, exists_sync, get, put, list,
close; the optional methods answer "not supported"."""

import abc
from typing import List, Optional


class RemoteConnector(metaclass=abc.ABCMeta):
    def __init__(self, config, metadata):
        assert metadata is not None
        extra = config.extra_config or {}
        self.save_chunk_meta = bool(extra.get("save_chunk_meta", True))
        self.meta_shapes = metadata.get_shapes()
        self.meta_dtypes = metadata.get_dtypes()
        self.init_args = (config, metadata)

    def post_init(self):
        pass

    @abc.abstractmethod
    async def exists(self, key) -> bool: ...

    @abc.abstractmethod
    def exists_sync(self, key) -> bool: ...

    @abc.abstractmethod
    async def get(self, key): ...

    @abc.abstractmethod
    async def put(self, key, memory_obj): ...

    @abc.abstractmethod
    async def list(self) -> List[str]: ...

    @abc.abstractmethod
    async def close(self): ...

    def support_ping(self) -> bool:
        return False

    async def ping(self) -> int:
        raise NotImplementedError

    def support_batched_get(self) -> bool:
        return False

    async def batched_get(self, keys) -> List[Optional[object]]:
        raise NotImplementedError

    def support_batched_put(self) -> bool:
        return False

    async def batched_put(self, keys, memory_objs):
        raise NotImplementedError

    def support_batched_async_contains(self) -> bool:
        return False

    async def batched_async_contains(self, lookup_id, keys, pin=False) -> int:
        raise NotImplementedError

    def support_batched_get_non_blocking(self) -> bool:
        return False

    async def batched_get_non_blocking(self, lookup_id, keys):
        raise NotImplementedError

    def remove_sync(self, key) -> bool:
        raise NotImplementedError

    def batched_contains(self, keys) -> int:
        raise NotImplementedError

    def support_batched_contains(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<%s>" % self.__class__.__name__
