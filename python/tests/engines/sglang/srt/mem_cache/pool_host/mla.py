"""Stand-in of sglang.srt.mem_cache.pool_host.mla.MLATokenToKVPoolHost.

Upstream: sgl-project/sglang python/sglang/srt/mem_cache/pool_host/mla.py
at commit 01c0ede38cc9645488fd2847dbea8a2f6a9241d8, written from its
contract: one latent buffer (kv_lora_rank + rope dims per token and
layer), ``kv_buffer`` of shape, per layout,

  layer_first        (layers, size, 1, kv_cache_dim)
  page_first         (size, layers, 1, kv_cache_dim)
  page_first_direct  (page_num, layers, page_size, 1, kv_cache_dim)

flat pages for the generic path, and ``get_page_buffer_meta``: one piece
per page (all layers), or one per layer for layer_first. The Ascend
page_first_kv_split layout and the device transfers are left out.
"""
import torch

from sglang.srt.mem_cache.pool_host.base import HostKVCache


class MLATokenToKVPoolHost(HostKVCache):
    def __init__(self, layer_num: int, kv_cache_dim: int,
                 dtype: torch.dtype, size: int, page_size: int,
                 layout: str, seed: int = 0) -> None:
        self.kv_cache_dim = kv_cache_dim
        super().__init__(layer_num, 1, kv_cache_dim, dtype, size, page_size,
                         layout, seed)

    def get_size_per_token(self) -> int:
        return self.kv_cache_dim * self.itemsize * self.layer_num

    def get_ksize_per_token(self) -> int:
        return self.get_size_per_token()

    def init_kv_buffer(self) -> torch.Tensor:
        L, D, P = self.layer_num, self.kv_cache_dim, self.page_size
        dims = {"layer_first": (L, self.size, 1, D),
                "page_first": (self.size, L, 1, D),
                "page_first_direct": (self.page_num, L, P, 1, D)}
        if self.layout not in dims:
            raise ValueError(f"Unsupported layout: {self.layout}")
        return torch.zeros(dims[self.layout], dtype=self.dtype)

    def get_hybrid_pool_buffer(self):
        return [self.kv_buffer]

    def _page(self, index: int) -> torch.Tensor:
        P = self.page_size
        if self.layout == "layer_first":
            return self.kv_buffer[:, index:index + P]
        if self.layout == "page_first":
            return self.kv_buffer[index:index + P]
        return self.kv_buffer[index // P:index // P + 1]

    def get_data_page(self, index, flat: bool = True) -> torch.Tensor:
        page = self._page(int(index))
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(self.layer_num * self.page_size *
                           self.kv_cache_dim, dtype=self.dtype)

    def set_from_flat_data_page(self, index: int,
                                data_page: torch.Tensor) -> None:
        page = self._page(int(index))
        page.copy_(data_page.reshape(page.shape))

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        isz = self.itemsize
        L, D, P = self.layer_num, self.kv_cache_dim, self.page_size
        base = self.kv_buffer.data_ptr()
        idx = indices.tolist()
        ptrs, sizes = [], []
        for i in range(0, len(idx), P):
            if self.layout == "layer_first":
                for layer in range(L):
                    ptrs.append(base + (layer * self.size + idx[i]) * D * isz)
                    sizes.append(P * D * isz)
            elif self.layout in ("page_first", "page_first_direct"):
                ptrs.append(base + idx[i] * L * D * isz)
                sizes.append(L * P * D * isz)
            else:
                raise ValueError(f"Unsupported layout: {self.layout}")
        return ptrs, sizes
