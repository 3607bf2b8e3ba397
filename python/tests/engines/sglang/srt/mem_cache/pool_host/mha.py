"""Stand-in of sglang.srt.mem_cache.pool_host.mha.MHATokenToKVPoolHost.

Upstream: sgl-project/sglang python/sglang/srt/mem_cache/pool_host/mha.py
at commit 0047d999bb3a3ad311df5a4b6356bfb5586e0d66, written from its
contract: ``kv_buffer`` of shape, per layout (K at [0], V at [1]),

  layer_first        (2, layers, size, heads, head_dim)
  page_first         (2, size, layers, heads, head_dim)
  page_first_direct  (2, page_num, layers, page_size, heads, head_dim)
  page_head          (2, page_num, heads, page_size, layers, head_dim)

the generic path's flat pages (``get_data_page(i, flat=True)``, the
``get_dummy_flat_data_page()`` target, ``set_from_flat_data_page``), and
``get_page_buffer_meta(indices)``, the zero-copy path's (pointer, bytes)
list: per page its K then V piece covering all layers, except layer_first,
whose pages are scattered over the layers: a K and a V piece per layer,
layer by layer. The device transfers (GPU kernels) are left out.
"""
import torch

from sglang.srt.mem_cache.pool_host.base import HostKVCache


class MHATokenToKVPoolHost(HostKVCache):
    def get_size_per_token(self) -> int:
        return (2 * self.layer_num * self.head_num * self.head_dim *
                self.itemsize)

    def get_ksize_per_token(self) -> int:
        return self.get_size_per_token() // 2

    def init_kv_buffer(self) -> torch.Tensor:
        L, H, D, P = (self.layer_num, self.head_num, self.head_dim,
                      self.page_size)
        dims = {"layer_first": (2, L, self.size, H, D),
                "page_first": (2, self.size, L, H, D),
                "page_first_direct": (2, self.page_num, L, P, H, D),
                "page_head": (2, self.page_num, H, P, L, D)}
        if self.layout not in dims:
            raise ValueError(f"Unsupported layout: {self.layout}")
        return torch.zeros(dims[self.layout], dtype=self.dtype)

    @property
    def k_buffer(self) -> torch.Tensor:
        return self.kv_buffer[0]

    @property
    def v_buffer(self) -> torch.Tensor:
        return self.kv_buffer[1]

    def get_hybrid_pool_buffer(self):
        return [self.k_buffer, self.v_buffer]

    def _page(self, index: int) -> torch.Tensor:
        P = self.page_size
        if self.layout == "layer_first":
            return self.kv_buffer[:, :, index:index + P]
        if self.layout == "page_first":
            return self.kv_buffer[:, index:index + P]
        return self.kv_buffer[:, index // P:index // P + 1]

    def get_data_page(self, index, flat: bool = True) -> torch.Tensor:
        page = self._page(int(index))
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(2 * self.layer_num * self.page_size *
                           self.head_num * self.head_dim, dtype=self.dtype)

    def set_from_flat_data_page(self, index: int,
                                data_page: torch.Tensor) -> None:
        page = self._page(int(index))
        page.copy_(data_page.reshape(page.shape))

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        isz = self.itemsize
        L, H, D, P = (self.layer_num, self.head_num, self.head_dim,
                      self.page_size)
        base = self.kv_buffer.data_ptr()
        v_off = L * self.size * H * D * isz  # half of kv_buffer
        idx = indices.tolist()
        ptrs, sizes = [], []
        for i in range(0, len(idx), P):
            if self.layout == "layer_first":
                for layer in range(L):
                    k = base + (layer * self.size + idx[i]) * H * D * isz
                    ptrs += [k, k + v_off]
                    sizes += [P * H * D * isz] * 2
            elif self.layout in ("page_first", "page_first_direct",
                                 "page_head"):
                k = base + idx[i] * L * H * D * isz
                ptrs += [k, k + v_off]
                sizes += [L * P * H * D * isz] * 2
            else:
                raise ValueError(f"Unsupported layout: {self.layout}")
        return ptrs, sizes
