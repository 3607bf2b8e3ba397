"""Stand-in of lmcache/utils.py: ``CacheEngineKey`` (read at
LMCache/LMCache lmcache/v1/storage_backend/connector/redis_connector.py
030c77181580e304e20810d709acec6f16f53bef, which keys by
``key.to_string()``). The string form follows LMCache's
``fmt@model@world_size@worker_id@chunk_hash`` shape."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class CacheEngineKey:
    fmt: str
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: str

    def to_string(self) -> str:
        return "%s@%s@%d@%d@%s" % (self.fmt, self.model_name,
                                   self.world_size, self.worker_id,
                                   self.chunk_hash)

    def with_new_worker_id(self, worker_id: int) -> "CacheEngineKey":
        return dataclasses.replace(self, worker_id=worker_id)
