"""Stand-in of sglang.srt.mem_cache.pool_host.base.HostKVCache.

Upstream: sgl-project/sglang python/sglang/srt/mem_cache/pool_host/base.py
at commit 049f8e64daef5f97982ffd46d89c2277ce260a16, written from its
contract: a host pool of ``size`` tokens in pages of ``page_size``
(``page_num`` pages), a ``layout``, the device pool's ``dtype``, one
``kv_buffer`` made by the subclass, and a token allocator (``alloc`` of a
multiple of page_size tokens, ``free``). Differences: no device pool (the
geometry is given directly), no pinned memory, and ``alloc`` hands out
whole pages in a shuffled order (seeded) so tests see scattered host
indices; upstream hands out the free list's head.
"""
import abc
import random
import threading
from typing import Optional

import torch


class HostKVCache(abc.ABC):
    def __init__(self, layer_num: int, head_num: int, head_dim: int,
                 dtype: torch.dtype, size: int, page_size: int,
                 layout: str, seed: int = 0) -> None:
        self.layer_num = layer_num
        self.head_num = head_num
        self.head_dim = head_dim
        self.dtype = dtype
        # dtype.itemsize (torch 1.13 has no such attribute)
        self.itemsize = torch.empty((), dtype=dtype).element_size()
        self.page_size = page_size
        self.layout = layout
        self.device = "cpu"
        self.pin_memory = False
        self.page_num = size // page_size
        self.size = self.page_num * page_size
        self.size_per_token = self.get_size_per_token()
        self.kv_buffer = self.init_kv_buffer()
        self.lock = threading.RLock()
        self._rng = random.Random(seed)
        self.clear()

    @abc.abstractmethod
    def get_size_per_token(self) -> int: ...

    @abc.abstractmethod
    def init_kv_buffer(self) -> torch.Tensor: ...

    @abc.abstractmethod
    def get_data_page(self, index, flat: bool = True) -> torch.Tensor: ...

    @abc.abstractmethod
    def get_dummy_flat_data_page(self) -> torch.Tensor: ...

    @abc.abstractmethod
    def set_from_flat_data_page(self, index: int,
                                data_page: torch.Tensor) -> None: ...

    @abc.abstractmethod
    def get_page_buffer_meta(self, indices): ...

    def clear(self) -> None:
        with self.lock:
            pages = list(range(self.page_num))
            self._rng.shuffle(pages)
            self._free_pages = pages

    def available_size(self) -> int:
        return len(self._free_pages) * self.page_size

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        assert need_size % self.page_size == 0
        n = need_size // self.page_size
        with self.lock:
            if n > len(self._free_pages):
                return None
            pages, self._free_pages = (self._free_pages[:n],
                                       self._free_pages[n:])
        if not pages:
            return torch.empty(0, dtype=torch.int64)
        return torch.cat([torch.arange(p * self.page_size,
                                       (p + 1) * self.page_size)
                          for p in pages])

    def free(self, indices: torch.Tensor) -> int:
        with self.lock:
            for i in range(0, len(indices), self.page_size):
                self._free_pages.append(int(indices[i]) // self.page_size)
        return len(indices)
