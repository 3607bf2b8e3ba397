"""Stand-in of lmcache/v1/storage_backend/local_cpu_backend.py
(LMCache/LMCache 000620e37eb7e8e54bd6f0aa0809b7dbef8a11e8): the allocator
side the remote backend uses. ``allocate(shapes, dtypes, fmt=None,
eviction=True, busy_loop=True)`` returns a MemoryObj with reference count
1, or None when the memory is full (no hot cache to evict here); a None
fmt means KV_2LTD, as upstream without layerwise. ``batched_allocate(
shapes, dtypes, batch_size, fmt=None, eviction=True, busy_loop=True)``:
``batch_size`` such objects from the allocator's ``batched_allocate`` (one
block), or None."""

from lmcache.v1.memory_management import MemoryFormat, TensorMemoryAllocator


class LocalCPUBackend:
    def __init__(self, config, metadata=None, nbytes: int = 64 << 20):
        self.config = config
        self.metadata = metadata
        self.memory_allocator = TensorMemoryAllocator(nbytes)

    def allocate(self, shapes, dtypes, fmt=None, eviction=True,
                 busy_loop=True):
        if isinstance(shapes, list):
            shapes = shapes[0]
        if isinstance(dtypes, list):
            dtypes = dtypes[0]
        if fmt is None:
            fmt = MemoryFormat.KV_2LTD
        return self.memory_allocator.allocate(shapes, dtypes, fmt)

    def __str__(self):
        return "LocalCPUBackend"

    def batched_allocate(self, shapes, dtypes, batch_size, fmt=None,
                         eviction=True, busy_loop=True):
        if isinstance(shapes, list):
            shapes = shapes[0]
        if isinstance(dtypes, list):
            dtypes = dtypes[0]
        if fmt is None:
            fmt = MemoryFormat.KV_2LTD
        return self.memory_allocator.batched_allocate(shapes, dtypes,
                                                      batch_size, fmt)
