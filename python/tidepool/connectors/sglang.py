"""SGLang HiCache L3 storage over tidepool's KV tier (docs/engines.md,
"SGLang").

``TidepoolHiCacheStorage`` is an SGLang ``HiCacheStorage``
(sglang/srt/mem_cache/hicache_storage.py), the storage tier below the
host KV pool that Mooncake, 3FS and NIXL also provide. SGLang selects it
by configuration, through its ``StorageBackendFactory`` ("dynamic"
backend, which constructs ``cls(storage_config, kwargs)``)::

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "tidepool",
        "module_path": "tidepool.connectors.sglang",
        "class_name": "TidepoolHiCacheStorage", "interface_v1": 1,
        "addr": "HOST:PORT", "tenant": "...", "secret_file": "..."}'

SGLang is imported here only, lazily: when it is importable the class
subclasses its ``HiCacheStorage`` (the factory checks ``issubclass``);
an SGLang whose ``HiCacheStorage`` lacks the zero-copy interface
(``batch_get_v1``/``batch_set_v1``) makes this
module fail to import with a message saying so, which the factory reports
when the backend is selected. Without SGLang the class is a plain class
with the same methods (for tests and benchmarks).

Settings (``extra_config``; also accepted in the factory's ``kwargs``):
``addr``, ``tenant``, ``secret_file`` (None: the LIBPOOL_* environment,
libpool(3)), ``replicas``, ``nthreads``, ``timeout_ms``, ``client_name``,
``namespace`` (part of every key). ``clear_track_keys`` (an integer
>= 0) is accepted for older configurations and has no effect: ``clear``
no longer tracks keys. SGLang's own keys
(``backend_name``, ``module_path``, ``class_name``, ``interface_v1``) are
ignored here; any other key is logged as unknown.

Keys. SGLang names a page by its page hash (a string, chained over the
tokens). The host pool's ``get_page_buffer_meta`` splits a page into
*pieces* (MHA page_first: K and V of all layers; layer_first: K and V of
each layer; MLA: one latent piece, or one per layer), and each piece is
one tidepool value under::

    prefix = BLAKE2b-256("tidepool sglang page v1" || 0x00 ||
                         lp(namespace) || lp(model) || lp(rank))
    key    = BLAKE2b-256(prefix || lp(layout) || lp(dtype) || le32 npieces
                         || lp(page hash) || le32 piece || le64 bytes)

lp(s) = le32 len(s) || s. rank follows SGLang's own backends: MHA keys
are per TP rank (``tp{rank}/{size}``: each rank holds its own heads), MLA
keys are shared by all TP ranks (``mla``: rank 0 writes them), and
``pp{rank}/{size}`` / ``cp{rank}/{size}`` are added with pipeline or
context parallelism. The layout and dtype are in every key because the
same piece size has another byte order in another layout (page_first
against page_first_direct) or another meaning in another dtype: a pool
of another geometry finds nothing (a miss), never wrong bytes.

The generic interface (``get``/``set`` of flat pages, SGLang's default
path) and the zero-copy ``interface_v1`` (``batch_get_v1``/
``batch_set_v1`` straight into the registered host pool) store the same
pieces under the same keys: a flat page is its pieces, at the offsets the
host pool's ``get_data_page`` puts them. ``batch_exists`` is therefore
right for both, and instances using either path share the store. Gets
read straight into their targets (host pool pages, or SGLang's flat page
buffers): no copy is made here.

What tidepool gives: ``batch_exists`` is one ``KV.exists`` of every piece
of the pages (the present prefix, in pages); a page is read back only
when every piece of it hits (a miss is reported, never wrong bytes);
pages present at ``batch_exists`` may be evicted before they are read
(SGLang then loads the shorter prefix). No pins are taken. ``clear``
empties the tenant's whole store (``KV.clear``, on every donor), as
SGLang's own backends empty theirs: keys stored by other processes, other
namespaces or before a restart go too, pinned ones included; other
tenants' keys stay.

Threads: every method may be called from several threads at once
(SGLang's prefetch, prefetch-IO and backup threads, and the scheduler's
``clear``); ``close`` must not overlap other calls.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import logging
import struct
from typing import Any, List, Optional, Sequence, Tuple

import tidepool

from .lmcache import _open_kv

log = logging.getLogger(__name__)

PAGE_DOMAIN = b"tidepool sglang page v1"
SUPPORTED = ("SGLang whose HiCacheStorage has batch_get_v1/batch_set_v1 "
             "(interface_v1) and whose StorageBackendFactory has the "
             "'dynamic' backend (read at sgl-project/sglang 001067ff)")
# HiCacheStorage methods this backend relies on (SGLang calls the rest)
_REQUIRED = ("register_mem_pool_host", "batch_get_v1", "batch_set_v1",
             "batch_exists", "exists", "get", "set", "batch_get",
             "batch_set")
_OURS = frozenset(("addr", "tenant", "secret_file", "replicas", "nthreads",
                   "timeout_ms", "client_name", "namespace",
                   "clear_track_keys"))
_SGLANGS = frozenset(("backend_name", "module_path", "class_name",
                      "interface_v1", "tp_lcm_size"))
_CONFIG_FIELDS = ("tp_rank", "tp_size", "is_mla_model", "model_name",
                  "extra_config")


def _engine_base() -> Tuple[type, Optional[str]]:
    """SGLang's HiCacheStorage when SGLang is importable (checked for
    the interface this backend needs), else object."""
    try:
        import sglang
    except ImportError:
        return object, None
    version = getattr(sglang, "__version__", "of unknown version")
    try:
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
    except ImportError as e:
        raise ImportError(
            f"tidepool.connectors.sglang: SGLang {version} has no "
            f"sglang.srt.mem_cache.hicache_storage.HiCacheStorage ({e}); "
            f"supported: {SUPPORTED}") from e
    missing = [m for m in _REQUIRED
               if not callable(getattr(HiCacheStorage, m, None))]
    if missing:
        raise ImportError(
            f"tidepool.connectors.sglang: SGLang {version} is not "
            f"supported: its HiCacheStorage has no {', '.join(missing)}; "
            f"supported: {SUPPORTED}")
    return HiCacheStorage, version


_Base, SGLANG_VERSION = _engine_base()


def _lp(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def _chunks(n: int, step: int):
    for i in range(0, n, step):
        yield i, min(n, i + step)


class _Region:
    """One registered host buffer: its address range and a writable
    byte view of it (no copy)."""

    __slots__ = ("base", "end", "mv", "tensor")

    def __init__(self, t: Any) -> None:
        import torch

        if t.device.type != "cpu":
            raise ValueError("tidepool: the host KV pool's buffers must be "
                             f"CPU tensors, not on {t.device}")
        if not t.is_contiguous():
            raise ValueError("tidepool: the host KV pool's buffers must be "
                             "contiguous")
        flat = t.detach().reshape(-1).view(torch.uint8)
        self.tensor = t  # keeps the memory alive
        self.base = t.data_ptr()
        self.end = self.base + flat.numel()
        self.mv = memoryview(flat.numpy())


class TidepoolHiCacheStorage(_Base):  # type: ignore[misc, valid-type]
    """SGLang's ``HiCacheStorage`` over a tidepool KV handle.

    ``TidepoolHiCacheStorage(storage_config, kwargs=None, *, pool=None)``:
    storage_config is SGLang's ``HiCacheStorageConfig`` (ranks, MLA or
    not, model name, ``extra_config`` holding the settings of the module
    docstring); kwargs a dict of more settings (the factory passes its
    keyword arguments). ``pool``: an open ``tidepool.Pool`` to use (not
    closed by ``close``) instead of connecting.

    Raises ValueError for a bad configuration, tidepool.PoolError when
    the pool cannot be reached.
    """

    def __init__(self, storage_config: Any = None,
                 kwargs: Optional[dict] = None, *,
                 pool: Optional["tidepool.Pool"] = None) -> None:
        if storage_config is None:
            raise ValueError("tidepool: TidepoolHiCacheStorage needs "
                             "SGLang's HiCacheStorageConfig")
        missing = [f for f in _CONFIG_FIELDS
                   if not hasattr(storage_config, f)]
        if missing:
            raise ValueError(
                "tidepool: this SGLang's HiCacheStorageConfig has no "
                f"{', '.join(missing)}; supported: {SUPPORTED}")
        settings = dict(storage_config.extra_config or {})
        if kwargs:
            if not isinstance(kwargs, dict):
                raise TypeError("tidepool: kwargs must be a dict, not "
                                f"{type(kwargs).__name__}")
            settings.update(kwargs)
        unknown = sorted(k for k in settings
                         if k not in _OURS and k not in _SGLANGS)
        if unknown:
            log.warning("tidepool: unknown extra_config keys ignored: %s",
                        ", ".join(unknown))
        if getattr(storage_config, "should_split_heads", False):
            raise ValueError("tidepool: heterogeneous TP (tp_lcm_size with "
                             "split heads) is not supported")
        self._rank = self._rank_name(storage_config)
        model = storage_config.model_name or ""
        ns = settings.get("namespace") or ""
        if not isinstance(ns, str) or not isinstance(model, str):
            raise ValueError("tidepool: namespace and model_name must be "
                             "strings")
        self.namespace = ns
        self.model = model
        self.is_mla = bool(storage_config.is_mla_model)
        self.storage_config = storage_config
        self._prefix = hashlib.blake2b(
            PAGE_DOMAIN + b"\0" + _lp(ns.encode("utf-8")) +
            _lp(model.encode("utf-8")) + _lp(self._rank.encode("utf-8")),
            digest_size=32).digest()
        track = settings.get("clear_track_keys", 0)
        if not isinstance(track, int) or isinstance(track, bool) or \
                track < 0:
            raise ValueError("tidepool: clear_track_keys must be an "
                             f"integer >= 0, not {track!r}")
        if "clear_track_keys" in settings:
            log.info("tidepool: clear_track_keys has no effect: clear "
                     "empties the tenant's store")
        self._geom: Optional[dict] = None
        self._closed = False

        def num(name: str, default: int) -> int:
            v = settings.get(name, default)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"tidepool: {name} must be an integer "
                                 f">= 0, not {v!r}")
            return v

        replicas = num("replicas", 1)
        nthreads = num("nthreads", 0)
        timeout_ms = num("timeout_ms", 0)
        self._pool, self._owns_pool, self.kv = _open_kv(
            pool, settings.get("addr"), settings.get("tenant"),
            settings.get("secret_file"), replicas, nthreads, timeout_ms,
            settings.get("client_name") or f"sglang-{self._rank}")

    @staticmethod
    def _rank_name(cfg: Any) -> str:
        def rank(r: str, s: str, dr: int, ds: int) -> Tuple[int, int]:
            rv, sv = getattr(cfg, r, dr), getattr(cfg, s, ds)
            if sv is None and rv in (None, 0):
                return 0, 1
            if not isinstance(rv, int) or not isinstance(sv, int) or \
                    sv < 1 or not 0 <= rv < sv:
                raise ValueError(f"tidepool: bad {r}/{s} in SGLang's "
                                 f"storage config: {rv!r}/{sv!r}")
            return rv, sv

        tp, tps = rank("tp_rank", "tp_size", 0, 1)
        pp, pps = rank("pp_rank", "pp_size", 0, 1)
        cp, cps = rank("attn_cp_rank", "attn_cp_size", 0, 1)
        name = "mla" if cfg.is_mla_model else f"tp{tp}/{tps}"
        if pps > 1:
            name += f" pp{pp}/{pps}"
        if cps > 1:
            name += f" cp{cp}/{cps}"
        return name

    # -- the host pool ---------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Registers SGLang's host KV pool: learns its page geometry from
        ``get_page_buffer_meta`` (pieces per page and their sizes), checks
        that every piece lies in one of its buffers and fits a value, and
        where the generic path's flat page puts each piece. Raises
        ValueError for a pool this backend cannot serve."""
        import torch

        sup = getattr(super(), "register_mem_pool_host", None)
        if sup is not None:
            sup(mem_pool_host)
        else:
            self.mem_pool_host = mem_pool_host
        hp = mem_pool_host
        page = int(hp.page_size)
        layout = str(getattr(hp, "layout", ""))
        dtype = str(getattr(hp, "dtype", ""))
        regions: List[_Region] = []
        tensors = []
        hybrid = getattr(hp, "get_hybrid_pool_buffer", None)
        if callable(hybrid):
            tensors.extend(hybrid())
        for name in ("kv_buffer", "k_buffer", "v_buffer", "index_k_buffer",
                     "index_k_scale_buffer"):
            t = getattr(hp, name, None)
            if isinstance(t, torch.Tensor):
                tensors.append(t)
        for t in tensors:
            if t is None or t.numel() == 0:
                continue
            r = _Region(t)
            if any(o.base <= r.base and r.end <= o.end for o in regions):
                continue
            regions = [o for o in regions
                       if not (r.base <= o.base and o.end <= r.end)]
            regions.append(r)
        if not regions:
            raise ValueError("tidepool: the host KV pool has no buffers "
                             "(kv_buffer)")
        regions.sort(key=lambda r: r.base)
        npages = int(hp.size) // page
        if npages < 1:
            raise ValueError(f"tidepool: the host KV pool has no whole page "
                             f"({hp.size} tokens, pages of {page})")
        ptrs, sizes = hp.get_page_buffer_meta(torch.arange(page))
        if not ptrs or len(ptrs) != len(sizes) or \
                any(not isinstance(s, int) for s in sizes):
            raise ValueError("tidepool: host KV pool layout "
                             f"{layout!r} is not supported (page metadata "
                             f"{len(ptrs)} pointers, {len(sizes)} sizes)")
        sizes = [int(s) for s in sizes]
        for s in sizes:
            if not 0 < s <= tidepool.VALUE_MAX:
                raise ValueError(f"tidepool: a page piece of {s} bytes "
                                 "does not fit a tidepool value (at most "
                                 f"{tidepool.VALUE_MAX}): use a smaller "
                                 "--page-size")
        self._regions = regions
        self._bases = [r.base for r in regions]
        last = torch.arange((npages - 1) * page, npages * page)
        for idx in (torch.arange(page), last):
            p, s = hp.get_page_buffer_meta(idx)
            self._views(p, s)  # raises when outside the buffers
        npieces = len(sizes)
        # where the generic path's flat page holds each piece
        offsets: Optional[List[int]] = None
        flat_bytes = None
        try:
            flat = hp.get_dummy_flat_data_page()
            flat_bytes = flat.numel() * flat.element_size()
        except Exception:  # noqa: BLE001 - the generic path is then off
            flat = None
        layers = int(getattr(hp, "layer_num", 0) or 0)
        if flat_bytes == sum(sizes):
            if layout == "layer_first" and not self.is_mla and \
                    npieces == 2 * layers and len(set(sizes)) == 1:
                # flat (2, layers, page, ...): K of each layer, then V;
                # the pieces alternate K and V layer by layer
                s = sizes[0]
                offsets = [((i % 2) * layers + i // 2) * s
                           for i in range(npieces)]
            elif layout in ("page_first", "page_first_direct", "page_head",
                            "layer_first"):
                offsets, o = [], 0
                for s in sizes:
                    offsets.append(o)
                    o += s
        tag = hashlib.blake2b(
            self._prefix + _lp(layout.encode()) + _lp(dtype.encode()) +
            struct.pack("<I", npieces), digest_size=32)
        self._geom = {"layout": layout, "dtype": dtype, "page": page,
                      "npieces": npieces, "sizes": sizes, "tag": tag,
                      "offsets": offsets, "flat_bytes": flat_bytes}

    def _views(self, ptrs: Sequence[int], sizes: Sequence[int]) -> list:
        """Byte views of the host pool at ptrs (no copy)."""
        out = []
        bases, regions = self._bases, self._regions
        for p, s in zip(ptrs, sizes):
            i = bisect.bisect_right(bases, p) - 1
            r = regions[i] if i >= 0 else None
            if r is None or p + s > r.end:
                raise ValueError(f"tidepool: host pool piece at {p:#x} "
                                 f"({s} bytes) is outside its registered "
                                 "buffers")
            off = p - r.base
            out.append(r.mv[off:off + s])
        return out

    def _need_geom(self) -> dict:
        g = self._geom
        if g is None:
            raise RuntimeError("tidepool: register_mem_pool_host() first: "
                               "the keys depend on the host pool's layout")
        return g

    # -- keys -------------------------------------------------------------

    def page_keys(self, keys: Sequence[str]) -> List[bytes]:
        """The tidepool keys of SGLang page hashes, npieces per page in
        the host pool's piece order (module docstring)."""
        g = self._need_geom()
        tag, sizes = g["tag"], g["sizes"]
        out = []
        for k in keys:
            if not isinstance(k, str):
                raise TypeError("tidepool: SGLang page keys are strings, "
                                f"not {type(k).__name__}")
            h = tag.copy()
            h.update(_lp(k.encode("utf-8")))
            for i, s in enumerate(sizes):
                hi = h.copy()
                hi.update(struct.pack("<IQ", i, s))
                out.append(hi.digest())
        return out

    # -- the tier -----------------------------------------------------------

    def _get(self, tkeys: List[bytes], views: list) -> List[bool]:
        hits: List[bool] = []
        try:
            for a, b in _chunks(len(tkeys), tidepool.BATCH_MAX):
                hits.extend(self.kv.get_into(tkeys[a:b], views[a:b]))
        except tidepool.ClosedError:
            raise
        except (tidepool.PoolError, ValueError) as e:
            # ValueError: a hit of another length, which the size in
            # every key rules out; a miss either way, never a dead thread
            log.warning("tidepool: get of %d pieces failed: %s",
                        len(tkeys), e)
            return [False] * len(tkeys)
        return hits

    def _put(self, tkeys: List[bytes], views: list) -> List[bool]:
        ok: List[bool] = []
        try:
            for a, b in _chunks(len(tkeys), tidepool.BATCH_MAX):
                st = self.kv.put(tkeys[a:b], views[a:b])
                ok.extend(s in (0, errno.EEXIST) for s in st)
        except tidepool.PoolError as e:
            log.warning("tidepool: put of %d pieces failed: %s",
                        len(tkeys), e)
            return [False] * len(tkeys)
        return ok

    def _per_page(self, flags: List[bool], n: int) -> List[bool]:
        per = len(flags) // n if n else 0
        return [all(flags[i * per:(i + 1) * per]) for i in range(n)]

    # -- the zero-copy interface (interface_v1) -----------------------------

    def _meta(self, keys: Sequence[str], host_indices: Any
              ) -> Tuple[List[bytes], list]:
        g = self._need_geom()
        n = len(keys)
        if len(host_indices) != n * g["page"]:
            raise ValueError(f"tidepool: {n} pages need {n * g['page']} "
                             f"host indices, not {len(host_indices)}")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(ptrs) != n * g["npieces"] or \
                list(sizes) != g["sizes"] * n:
            raise ValueError("tidepool: the host pool's page metadata "
                             "changed since register_mem_pool_host")
        return self.page_keys(keys), self._views(ptrs, sizes)

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Reads pages straight into the host pool at host_indices
        (page_size indices per key). Per page: True when every piece of
        it hit (its bytes are exactly what was stored), else False (its
        host memory then holds unspecified bytes)."""
        if not keys:
            return []
        tkeys, views = self._meta(keys, host_indices)
        return self._per_page(self._get(tkeys, views), len(keys))

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Stores pages straight from the host pool at host_indices. Per
        page: True when every piece is stored (or was already)."""
        if not keys:
            return []
        tkeys, views = self._meta(keys, host_indices)
        return self._per_page(self._put(tkeys, views), len(keys))

    # -- existence --------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading pages are present (every piece of each): one
        KV.exists. A pool that cannot be reached answers 0."""
        if not keys:
            return 0
        tkeys = self.page_keys(keys)
        per = self._need_geom()["npieces"]
        n = 0
        try:
            for a, b in _chunks(len(tkeys), tidepool.BATCH_MAX):
                got = self.kv.exists(tkeys[a:b])
                n += got
                if got < b - a:
                    break
        except tidepool.PoolError as e:
            log.warning("tidepool: exists of %d pages failed: %s",
                        len(keys), e)
            return 0
        return n // per

    def exists(self, key: str) -> bool:
        """True when every piece of the page is present."""
        return self.batch_exists([key]) == 1

    # -- the generic interface (flat pages) --------------------------------

    def _flat_views(self, t: Any, what: str) -> list:
        import torch

        g = self._need_geom()
        if g["offsets"] is None:
            raise ValueError("tidepool: the generic (flat page) interface "
                             f"is not supported for layout {g['layout']!r}"
                             "; use interface_v1")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tidepool: {what} must be a torch tensor (a "
                            f"flat page), not {type(t).__name__}")
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"tidepool: {what} must be a contiguous CPU "
                             "tensor")
        nbytes = t.numel() * t.element_size()
        if nbytes != g["flat_bytes"]:
            raise ValueError(f"tidepool: {what} has {nbytes} bytes; a page "
                             f"of this host pool has {g['flat_bytes']}")
        mv = memoryview(t.detach().reshape(-1).view(torch.uint8).numpy())
        return [mv[o:o + s] for o, s in zip(g["offsets"], g["sizes"])]

    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> List[Any]:
        """Reads flat pages into target_locations (one tensor per key,
        SGLang's ``get_dummy_flat_data_page()``; None: allocated from the
        host pool). Per key the target on a hit, None on a miss."""
        if not keys:
            return []
        if target_locations is None:
            target_locations = [self.mem_pool_host.get_dummy_flat_data_page()
                                for _ in keys]
        if len(target_locations) != len(keys):
            raise ValueError(f"tidepool: {len(keys)} keys but "
                             f"{len(target_locations)} targets")
        views = [v for t in target_locations
                 for v in self._flat_views(t, "a target")]
        ok = self._per_page(self._get(self.page_keys(keys), views),
                            len(keys))
        return [t if o else None for t, o in zip(target_locations, ok)]

    def get(self, key: str, target_location: Any = None,
            target_sizes: Any = None) -> Any:
        """One flat page: the target on a hit, None on a miss."""
        return self.batch_get([key], None if target_location is None
                              else [target_location])[0]

    def batch_set(self, keys: List[str], values: Any = None,
                  target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Stores flat pages (SGLang's ``get_data_page(i, flat=True)``).
        True when every one is stored (or was already)."""
        if not keys:
            return True
        if values is None or len(values) != len(keys):
            raise ValueError(f"tidepool: {len(keys)} keys need as many "
                             "values")
        views = [v for t in values
                 for v in self._flat_views(t.contiguous()
                                           if hasattr(t, "contiguous")
                                           else t, "a value")]
        return all(self._put(self.page_keys(keys), views))

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """One flat page; True when stored."""
        return self.batch_set([key], [value])

    # -- hybrid pools (v2) --------------------------------------------------

    def register_mem_host_pool_v2(self, host_pool: Any,
                                  host_pool_name: Any) -> None:
        """Only the KV pool is served: hybrid models' side pools (Mamba,
        SWA, DSA indexer, draft) are not supported (ValueError)."""
        if str(host_pool_name) == "kv":
            return
        raise ValueError(f"tidepool: the {host_pool_name} host pool is not "
                         "supported (hybrid models: KV pool only)")

    # -- lifecycle ----------------------------------------------------------

    def clear(self) -> None:
        """Empties the tenant's store on every donor (``KV.clear``):
        every key of the tenant's, whoever stored it. Raises what
        ``KV.clear`` raises (EOPNOTSUPP: a memd older than protocol 4)."""
        self.kv.clear()
        log.info("tidepool: clear emptied the tenant's store")

    def get_stats(self) -> Any:
        """SGLang's storage metrics: none (the KV handle's counters are
        ``self.kv.stats()``)."""
        return None

    def close(self) -> None:
        """Closes the KV handle (and the pool when opened here);
        idempotent."""
        if self._closed:
            return
        self._closed = True
        self.kv.close()
        if self._owns_pool:
            self._pool.close()

    @property
    def closed(self) -> bool:
        return self._closed
