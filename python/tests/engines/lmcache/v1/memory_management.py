"""Stand-in of lmcache/v1/memory_management.py (LMCache/LMCache
004446a04251774aae68bc880b61a1d7771501a2): ``MemoryFormat``,
``MemoryObjMetadata``, the ``MemoryObj`` interface, ``TensorMemoryObj``
(a flat uint8 tensor viewed with the object's dtype and shape; its
``byte_array`` a ctypes memoryview of format "<B" as upstream; its
``data_ptr`` property, the raw tensor's address, from the newer
memory_management.py at b98a5592cb81317ba4c5c520415339cb0e074d78, where
it is abstract in ``MemoryObj`` and ``byte_array`` is built from it; reference
counts under a lock, freed to its allocator when the count reaches 0)
and a first-fit ``TensorMemoryAllocator`` over one torch buffer that
counts its live allocations (what the tests check leaks with).
``batched_allocate(shape, dtype, batch_size, fmt)`` takes one first-fit
block for the whole batch and cuts it with ``torch.chunk`` into pieces of
the *aligned* size (as upstream at that commit: an object of a size that
is not a multiple of 512 then reports the aligned size from
``get_size()``); None when no free block holds the batch."""

import abc
import ctypes
import dataclasses
import threading
from enum import Enum, auto
from typing import List, Optional

import torch


class MemoryFormat(Enum):
    UNDEFINED = 0
    KV_2LTD = auto()
    KV_T2D = auto()
    KV_2TD = auto()
    BINARY = auto()
    BINARY_BUFFER = auto()
    KV_MLA_FMT = auto()


@dataclasses.dataclass
class MemoryObjMetadata:
    shape: torch.Size
    dtype: Optional[torch.dtype]
    address: int
    phy_size: int
    ref_count: int
    is_pin: bool = False
    fmt: MemoryFormat = MemoryFormat.UNDEFINED


class MemoryObj(metaclass=abc.ABCMeta):
    """The interface: size, shape, dtype, format, reference counts, the
    tensor and byte views."""

    @abc.abstractmethod
    def get_size(self) -> int: ...

    @abc.abstractmethod
    def get_shape(self) -> torch.Size: ...

    def get_dtype(self) -> Optional[torch.dtype]:
        return None

    @abc.abstractmethod
    def get_memory_format(self) -> MemoryFormat: ...

    @abc.abstractmethod
    def ref_count_up(self) -> None: ...

    @abc.abstractmethod
    def ref_count_down(self) -> None: ...

    @abc.abstractmethod
    def get_ref_count(self) -> int: ...

    @property
    @abc.abstractmethod
    def tensor(self) -> Optional[torch.Tensor]: ...

    @property
    @abc.abstractmethod
    def byte_array(self): ...

    @property
    @abc.abstractmethod
    def data_ptr(self) -> int: ...


class TensorMemoryObj(MemoryObj):
    def __init__(self, raw_data: torch.Tensor, metadata: MemoryObjMetadata,
                 parent_allocator=None):
        self.raw_data = raw_data
        self.meta = metadata
        self.valid = True
        self.lock = threading.Lock()
        self.parent_allocator = parent_allocator

    def get_size(self) -> int:
        return self.raw_data.numel() * self.raw_data.element_size()

    def get_shape(self) -> torch.Size:
        return self.meta.shape

    def get_dtype(self) -> Optional[torch.dtype]:
        return self.meta.dtype

    def get_memory_format(self) -> MemoryFormat:
        return self.meta.fmt

    def ref_count_up(self) -> None:
        with self.lock:
            self.meta.ref_count += 1

    def ref_count_down(self) -> None:
        with self.lock:
            self.meta.ref_count -= 1
            if self.meta.ref_count < 0:
                raise AssertionError("reference count below zero")
            free = (self.meta.ref_count == 0 and
                    self.parent_allocator is not None)
        if free:
            self.parent_allocator.free(self)

    def get_ref_count(self) -> int:
        with self.lock:
            return self.meta.ref_count

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        if not self.valid:
            return None
        return self.raw_data.view(self.meta.dtype).view(self.meta.shape)

    @property
    def byte_array(self):
        t = self.tensor
        if t is None:
            raise ValueError("the memory object was freed")
        n = t.numel() * t.element_size()
        return memoryview((ctypes.c_ubyte * n).from_address(t.data_ptr()))

    @property
    def data_ptr(self) -> int:
        return self.raw_data.data_ptr()


class TensorMemoryAllocator:
    """First fit over one flat uint8 tensor, 512-byte aligned."""

    ALIGN = 512

    def __init__(self, nbytes: int):
        self.buffer = torch.zeros(nbytes, dtype=torch.uint8)
        self.free_list: List[List[int]] = [[0, nbytes]]  # [start, size]
        self.lock = threading.Lock()
        self.live = {}  # start -> size

    @property
    def num_active_allocations(self) -> int:
        with self.lock:
            return len(self.live)

    def allocate(self, shape, dtype, fmt=MemoryFormat.UNDEFINED
                 ) -> Optional[TensorMemoryObj]:
        shape = torch.Size(shape)
        raw = shape.numel() * torch.empty((), dtype=dtype).element_size()
        size = (raw + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        with self.lock:
            for blk in self.free_list:
                if blk[1] >= size:
                    start = blk[0]
                    blk[0] += size
                    blk[1] -= size
                    if blk[1] == 0:
                        self.free_list.remove(blk)
                    self.live[start] = size
                    break
            else:
                return None
        meta = MemoryObjMetadata(shape, dtype, start, size, 1, fmt=fmt)
        return TensorMemoryObj(self.buffer[start:start + raw], meta, self)

    def batched_allocate(self, shape, dtype, batch_size,
                         fmt=MemoryFormat.UNDEFINED
                         ) -> Optional[List[TensorMemoryObj]]:
        shape = torch.Size(shape)
        raw = shape.numel() * torch.empty((), dtype=dtype).element_size()
        unit = (raw + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        total = unit * batch_size
        with self.lock:
            for blk in self.free_list:
                if blk[1] >= total:
                    start = blk[0]
                    blk[0] += total
                    blk[1] -= total
                    if blk[1] == 0:
                        self.free_list.remove(blk)
                    for i in range(batch_size):
                        self.live[start + i * unit] = unit
                    break
            else:
                return None
        raws = torch.chunk(self.buffer[start:start + total], batch_size)
        objs = []
        addr = start
        for r in raws:
            meta = MemoryObjMetadata(shape, dtype, addr, unit, 1, fmt=fmt)
            objs.append(TensorMemoryObj(r, meta, self))
            addr += unit
        return objs

    def free(self, obj: TensorMemoryObj) -> None:
        with self.lock:
            start = obj.meta.address
            size = self.live.pop(start)
            obj.valid = False
            self.free_list.append([start, size])
            self.free_list.sort()
            merged = []
            for b in self.free_list:
                if merged and merged[-1][0] + merged[-1][1] == b[0]:
                    merged[-1][1] += b[1]
                else:
                    merged.append(b)
            self.free_list = merged
