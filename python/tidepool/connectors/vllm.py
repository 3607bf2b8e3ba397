"""vLLM KV offloading over tidepool's KV tier (docs/engines.md, "vLLM").

With vLLM importable, this module holds vLLM's own subclasses, built in
:mod:`tidepool.connectors.vllm_offload`: ``TidepoolOffloadingSpec``
(selected by ``kv_connector_extra_config`` ``{"spec_name":
"TidepoolOffloadingSpec", "spec_module_path":
"tidepool.connectors.vllm", ...}``, or by ``spec_name`` alone once the
``vllm.general_plugins`` entry point ``register()`` ran),
``TidepoolOffloadingManager``, ``TidepoolLoadStoreSpec`` and the worker
side (``TidepoolOffloadingWorker``, or a pair of ``OffloadingHandler``
subclasses). A vLLM that is missing or of an unsupported generation makes
``TidepoolOffloadingSpec`` raise ``UnsupportedVLLMError`` (vLLM's
factory raises it at selection).

Without vLLM, ``TidepoolOffloadingManager`` is the duck-typed manager
below, with the shape of vLLM's ``OffloadingManager``
(vllm/v1/kv_offload/abstract.py, up to vLLM 0.20: ``lookup``,
``prepare_load``, ``touch``, ``complete_load``, ``prepare_store``,
``complete_store``, ``take_events``), also accepting the calling
convention of the later base.py (one key per lookup, a ``req_context``
argument); its outputs are the small dataclasses below, with vLLM's
field names. vLLM's subclass is built on it.

Keys. A block hash (vLLM's ``BlockHash``/``OffloadKey`` bytes, an int, or
an object with ``hash_value``, vLLM's older ``BlockHash`` tuple) maps to::

    BLAKE2b-256(b"tidepool vllm block v1" || 0x00 || le32 len(ns) || ns
                || b"b" || hash bytes)          (bytes)
                || b"i" || ascii decimal of the int)   (int)

where ns is the UTF-8 ``namespace`` (the model, say). vLLM's hashes are
only equal across processes when they are seeded alike (``PYTHONHASHSEED``
set, the same ``--prefix-caching-hash-algo``), and they do not include the
model: set ``namespace`` per model. With several workers (tensor or
pipeline parallel) each stores its share under ``worker_key()``.

What tidepool gives and what it does not:

* lookup is one ``KV.exists`` (the longest present prefix), one round
  trip; a block is loadable once its put committed, which can be just
  before ``complete_store`` is called (the bytes are whole either way);
* ``prepare_load`` pins the blocks in memd (pins nest; this manager counts
  the pins it holds and ``complete_load``/``shutdown`` remove them). Pins
  belong to the tenant's store: a process that dies holding pins leaves
  them there;
* ``prepare_store`` returns the blocks after the present prefix; a block
  among them that is present after all costs one reserve round trip in
  the put (reported EEXIST), no data;
* ``block_hashes_evicted`` is always empty: memd evicts inside the store
  (S3-FIFO, docs/kv.md) and tells no client, so no manager can report it;
  an evicted block is simply a miss at the next lookup;
* ``touch`` does nothing: memd counts hits when blocks are read, and has
  no call to mark recency without reading.

The duck-typed manager's worker side is ``store()`` and ``load()``: a
``KV.put``/``KV.get_into`` of the spec's keys with one buffer (or tensor)
per block.

Threads: all methods may be called from several threads; the scheduler
calls them from one.
"""

from __future__ import annotations

import errno
import hashlib
import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional

import tidepool

from .lmcache import _open_kv

BLOCK_DOMAIN = b"tidepool vllm block v1"
MEDIUM = "TIDEPOOL"


def block_key(block_hash: Any, namespace: str = "") -> bytes:
    """The 32-byte tidepool key of a vLLM block hash (module docstring)."""
    h = getattr(block_hash, "hash_value", block_hash)
    if isinstance(h, (bytes, bytearray, memoryview)):
        tag, data = b"b", bytes(h)
    elif isinstance(h, int) and not isinstance(h, bool):
        tag, data = b"i", str(h).encode("ascii")
    else:
        raise TypeError("a block hash is bytes or int, not %s" %
                        type(h).__name__)
    ns = namespace.encode("utf-8")
    d = hashlib.blake2b(digest_size=32)
    d.update(BLOCK_DOMAIN)
    d.update(b"\0")
    d.update(struct.pack("<I", len(ns)))
    d.update(ns)
    d.update(tag)
    d.update(data)
    return d.digest()


def worker_key(key: bytes, rank: int, world_size: int) -> bytes:
    """The key worker ``rank`` of ``world_size`` stores its share of a
    block under: the block's key itself with one worker, else
    BLAKE2b-256(b"tidepool vllm rank v1" || key || le32 rank ||
    le32 world_size). Tensor- and pipeline-parallel workers each hold
    different bytes of a block, so each stores its own value."""
    if world_size == 1:
        return key
    if not 0 <= rank < world_size:
        raise ValueError("rank %d is not in [0, %d)" % (rank, world_size))
    d = hashlib.blake2b(digest_size=32)
    d.update(b"tidepool vllm rank v1")
    d.update(key)
    d.update(struct.pack("<II", rank, world_size))
    return d.digest()


def _is_one_block(x: Any) -> bool:
    """True for a single block hash rather than an iterable of them."""
    return (isinstance(x, (bytes, bytearray, memoryview, int)) or
            hasattr(x, "hash_value"))


@dataclass
class TidepoolLoadStoreSpec:
    """vLLM's ``LoadStoreSpec`` for tidepool: the blocks' keys, in order."""

    keys: List[bytes]
    block_hashes: List[Any] = field(default_factory=list)

    @staticmethod
    def medium() -> str:
        """The medium name, ``"TIDEPOOL"``."""
        return MEDIUM


@dataclass
class PrepareStoreOutput:
    """vLLM's ``PrepareStoreOutput``: what to store, where, what left."""

    block_hashes_to_store: List[Any]
    store_spec: TidepoolLoadStoreSpec
    block_hashes_evicted: List[Any]

    @property
    def keys_to_store(self) -> List[Any]:
        """base.py's name of ``block_hashes_to_store``."""
        return self.block_hashes_to_store

    @property
    def evicted_keys(self) -> List[Any]:
        """base.py's name of ``block_hashes_evicted``."""
        return self.block_hashes_evicted


@dataclass
class OffloadingEvent:
    """vLLM's ``OffloadingEvent``: blocks stored (removed False)."""

    block_hashes: List[Any]
    block_size: int
    medium: str
    removed: bool

    @property
    def keys(self) -> List[Any]:
        """base.py's name of ``block_hashes``."""
        return self.block_hashes


class TidepoolOffloadingManager:
    """vLLM's ``OffloadingManager`` over a tidepool KV handle.

    Arguments: ``pool`` (an open ``tidepool.Pool``, not closed by
    ``shutdown``) or ``addr``, ``tenant``, ``secret_file``, ``timeout_ms``,
    ``client_name`` (a Pool opened here; all None: the LIBPOOL_*
    environment); ``replicas``, ``nthreads`` of the KV handle;
    ``namespace`` (part of every key); ``block_size`` (reported in
    events); ``enable_events`` (collect ``OffloadingEvent`` for
    ``take_events``); ``world_size`` (the engine's workers: a block is
    present when every worker's share is, ``worker_key()``).
    """

    def __init__(self, pool: Optional["tidepool.Pool"] = None, *,
                 addr: Optional[str] = None, tenant: Optional[str] = None,
                 secret_file: Optional[str] = None, namespace: str = "",
                 replicas: int = 1, nthreads: int = 0, timeout_ms: int = 0,
                 client_name: Optional[str] = None, block_size: int = 0,
                 enable_events: bool = False, world_size: int = 1) -> None:
        if world_size < 1:
            raise ValueError("world_size must be >= 1, not %d" % world_size)
        self._pool, self._owns_pool, self._kv = _open_kv(
            pool, addr, tenant, secret_file, replicas, nthreads,
            timeout_ms, client_name)
        self.namespace = namespace
        self._key_ns = namespace
        self.world_size = world_size
        self.block_size = block_size
        self.medium = MEDIUM
        self._events: Optional[List[OffloadingEvent]] = (
            [] if enable_events else None)
        self._lock = threading.Lock()
        self._pins = {}  # worker key -> pins this manager holds
        self._storing = {}  # key -> prepared stores not completed
        self._closed = False

    # -- OffloadingManager ---------------------------------------------

    def lookup(self, block_hashes: Any, req_context: Any = None) -> Any:
        """The number of leading blocks that are offloaded (abstract.py).
        Given one block hash (base.py's ``lookup(key, req_context)``):
        True when that block is offloaded. A pool that cannot be reached
        answers 0 / False (a loss is a miss)."""
        if _is_one_block(block_hashes):
            return self._exists([self._key(block_hashes)]) == 1
        keys = self._keys(block_hashes)
        if not keys:
            return 0
        return self._exists(keys)

    def prepare_load(self, block_hashes: Iterable[Any],
                     req_context: Any = None) -> TidepoolLoadStoreSpec:
        """Pins the blocks (protected from eviction until
        ``complete_load``) and returns the spec the worker loads from. A
        block that is gone already (evicted since ``lookup``) is not
        pinned; its load will miss."""
        hashes = list(block_hashes)
        keys = self._keys(hashes)
        uniq = list(dict.fromkeys(self._expand(keys)))
        if uniq:
            try:
                pinned = self._batched(self._kv.pin, uniq)
            except tidepool.ClosedError:
                raise
            except tidepool.PoolError:
                pinned = [False] * len(uniq)
            with self._lock:
                for k, ok in zip(uniq, pinned):
                    if ok:
                        self._pins[k] = self._pins.get(k, 0) + 1
        return self._make_spec(keys, hashes)

    def touch(self, block_hashes: Iterable[Any],
              req_context: Any = None) -> None:
        """Does nothing: memd keeps recency from reads (module
        docstring)."""
        self._check_open()

    def complete_load(self, block_hashes: Iterable[Any],
                      req_context: Any = None) -> None:
        """Removes the pins ``prepare_load`` took on these blocks."""
        keys = list(dict.fromkeys(self._expand(self._keys(block_hashes))))
        drop = []
        with self._lock:
            for k in keys:
                n = self._pins.get(k, 0)
                if n:
                    drop.append(k)
                    if n == 1:
                        del self._pins[k]
                    else:
                        self._pins[k] = n - 1
        if drop:
            try:
                self._batched(self._kv.unpin, drop)
            except tidepool.PoolError:
                pass  # the pins stay with a lost donor's store

    def prepare_store(self, block_hashes: Iterable[Any],
                      req_context: Any = None
                      ) -> Optional[PrepareStoreOutput]:
        """The blocks to store (those after the longest present prefix),
        their spec and the blocks evicted (always empty: module
        docstring). None when the pool cannot be reached."""
        hashes = list(block_hashes)
        keys = self._keys(hashes)
        have = 0
        if keys:
            try:
                have = self._prefix(keys)
            except tidepool.ClosedError:
                raise
            except tidepool.PoolError:
                return None
        todo_h, todo_k = hashes[have:], keys[have:]
        with self._lock:
            for k in todo_k:
                self._storing[k] = self._storing.get(k, 0) + 1
        return self._make_store_output(todo_h,
                                       self._make_spec(todo_k, todo_h))

    def complete_store(self, block_hashes: Iterable[Any], *args: Any,
                       req_context: Any = None,
                       success: bool = True) -> None:
        """Ends stores ``prepare_store`` began. success False: the blocks
        of those stores are deleted again (they may be partly there).
        Takes ``(block_hashes, success)`` (abstract.py) or
        ``(keys, req_context, success)`` (base.py)."""
        if args:
            if isinstance(args[0], bool):
                success = args[0]
            elif len(args) > 1:
                success = bool(args[1])
        hashes = list(block_hashes)
        keys = self._keys(hashes)
        mine_h, mine_k = [], []
        with self._lock:
            for h, k in zip(hashes, keys):
                n = self._storing.get(k, 0)
                if not n:
                    continue
                if n == 1:
                    del self._storing[k]
                else:
                    self._storing[k] = n - 1
                mine_h.append(h)
                mine_k.append(k)
        if not mine_k:
            return
        if not success:
            try:
                self._batched(self._kv.delete,
                              list(dict.fromkeys(self._expand(mine_k))))
            except tidepool.PoolError:
                pass  # best effort: what is left is evicted in time
            return
        if self._events is not None:
            ev = self._make_event(mine_h)
            with self._lock:
                self._events.append(ev)

    def take_events(self) -> List[OffloadingEvent]:
        """The events collected since the last call (stored blocks only;
        memd reports no evictions). Empty unless ``enable_events``."""
        if self._events is None:
            return []
        with self._lock:
            out, self._events = self._events, []
        return out

    def shutdown(self) -> None:
        """Removes the pins still held, closes the KV handle (and the Pool
        when opened here). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pins, self._pins = self._pins, {}
        try:
            while pins:
                keys = list(pins)
                try:
                    self._batched(self._kv.unpin, keys)
                except tidepool.PoolError:
                    break
                pins = {k: n - 1 for k, n in pins.items() if n > 1}
            self._kv.close()
        finally:
            if self._owns_pool:
                self._pool.close()

    close = shutdown

    @property
    def closed(self) -> bool:
        """True once shut down."""
        return self._closed

    # -- the worker side -------------------------------------------------

    def store(self, spec: Any, values: List[Any], **kw: Any) -> List[bool]:
        """Stores one value per block of ``spec`` (a
        ``TidepoolLoadStoreSpec`` or a ``PrepareStoreOutput``): buffers or
        tensors, passed to ``KV.put`` with ``kw`` (``stream``, ``gpu``).
        Per block: True when stored or already present."""
        st = self._per_block(self._kv.put, spec, values, "values", kw)
        return [s in (0, errno.EEXIST) for s in st]

    def load(self, spec: Any, bufs: List[Any], **kw: Any) -> List[bool]:
        """Reads the blocks of ``spec`` into ``bufs`` (one per block, the
        block's exact size) with ``KV.get_into`` and ``kw``; per block:
        True on a hit."""
        return self._per_block(self._kv.get_into, spec, bufs, "buffers",
                               kw)

    # -- internals -----------------------------------------------------

    def _per_block(self, call: Any, spec: Any, items: List[Any], what: str,
                   kw: dict) -> List[Any]:
        """call(keys, items, **kw) over the blocks of spec and their items
        (one per block: ValueError else), BATCH_MAX blocks a call; every
        call's results in order."""
        keys = self._spec_keys(spec)
        if len(items) != len(keys):
            raise ValueError("%d blocks but %d %s" %
                             (len(keys), len(items), what))
        out: List[Any] = []
        for i in range(0, len(keys), tidepool.BATCH_MAX):
            j = i + tidepool.BATCH_MAX
            out.extend(call(keys[i:j], items[i:j], **kw))
        return out

    # what the manager hands out; tidepool.connectors.vllm_offload makes
    # them vLLM's own classes
    _spec_types: tuple = ()

    def _make_spec(self, keys: List[bytes], hashes: List[Any]) -> Any:
        return TidepoolLoadStoreSpec(keys, hashes)

    def _make_store_output(self, hashes: List[Any], spec: Any) -> Any:
        return PrepareStoreOutput(hashes, spec, [])

    def _make_event(self, hashes: List[Any]) -> Any:
        return OffloadingEvent(hashes, self.block_size, MEDIUM, False)

    def _check_open(self) -> None:
        if self._closed:
            raise tidepool.ClosedError("tidepool: the offloading manager "
                                       "is shut down")

    def _key(self, h: Any) -> bytes:
        self._check_open()
        return block_key(h, self._key_ns)

    def _keys(self, hashes: Iterable[Any]) -> List[bytes]:
        self._check_open()
        return [block_key(h, self._key_ns) for h in hashes]

    def _expand(self, keys: List[bytes]) -> List[bytes]:
        """Every worker's key of each block, block by block."""
        w = self.world_size
        if w == 1:
            return keys
        return [worker_key(k, r, w) for k in keys for r in range(w)]

    def _spec_keys(self, spec: Any) -> List[bytes]:
        self._check_open()
        if hasattr(spec, "store_spec"):  # a PrepareStoreOutput
            spec = spec.store_spec
        if not isinstance(spec, (TidepoolLoadStoreSpec,) + self._spec_types):
            raise TypeError("a TidepoolLoadStoreSpec is needed, not %s" %
                            type(spec).__name__)
        return spec.keys

    def _batched(self, call, keys: List[bytes]) -> list:
        """call (pin, unpin, delete) over keys in BATCH_MAX pieces."""
        out = []
        for i in range(0, len(keys), tidepool.BATCH_MAX):
            out.extend(call(keys[i:i + tidepool.BATCH_MAX]))
        return out

    def _prefix(self, keys: List[bytes]) -> int:
        """The number of leading blocks of keys whose every worker's
        share is present (KV.exists in BATCH_MAX pieces)."""
        keys = self._expand(keys)
        total = 0
        for i in range(0, len(keys), tidepool.BATCH_MAX):
            part = keys[i:i + tidepool.BATCH_MAX]
            n = self._kv.exists(part)
            total += n
            if n < len(part):
                break
        return total // self.world_size

    def _exists(self, keys: List[bytes]) -> int:
        try:
            return self._prefix(keys)
        except tidepool.ClosedError:
            raise
        except tidepool.PoolError:
            return 0


# the manager without vLLM's base class; vllm_offload's subclasses it
_ManagerCore = TidepoolOffloadingManager


# ---------------------------------------------------------------------
# vLLM's own classes (tidepool.connectors.vllm_offload), when vLLM imports

SPEC_NAME = "TidepoolOffloadingSpec"
_VLLM_NAMES = ("TidepoolOffloadingSpec", "TidepoolOffloadingWorker",
               "TidepoolStoreHandler", "TidepoolLoadHandler")


class UnsupportedVLLMError(ImportError):
    """vLLM is missing, or of a generation this connector does not
    support (docs/engines.md, "vLLM"); raised when vLLM selects
    ``TidepoolOffloadingSpec``."""


_unsupported: Optional[UnsupportedVLLMError] = None
try:
    import vllm as _vllm  # noqa: F401
except ImportError as _e:
    _unsupported = UnsupportedVLLMError(
        "tidepool.connectors.vllm: vLLM is not importable (%s); "
        "TidepoolOffloadingSpec needs it" % _e)
else:
    try:
        from .vllm_offload import (  # noqa: F401
            TidepoolLoadHandler, TidepoolLoadStoreSpec,
            TidepoolOffloadingManager, TidepoolOffloadingSpec,
            TidepoolOffloadingWorker, TidepoolStoreHandler)
    except UnsupportedVLLMError as _e:
        _unsupported = _e


def __getattr__(name: str) -> Any:
    # the vLLM classes of a vLLM that is missing or not supported: the
    # error says why (OffloadingSpecFactory's getattr raises it)
    if name in _VLLM_NAMES and _unsupported is not None:
        raise _unsupported
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def register() -> None:
    """The ``vllm.general_plugins`` entry point ("tidepool", see
    python/setup.py): registers ``TidepoolOffloadingSpec`` with vLLM's
    ``OffloadingSpecFactory``, so that ``spec_name`` alone selects it.
    Loaded by vLLM in every process; registering twice is harmless. It
    never raises: a vLLM without the factory gets a warning, and an
    unsupported one its error when the spec is selected."""
    try:
        from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    except ImportError as e:
        import logging

        logging.getLogger(__name__).warning(
            "tidepool: vLLM has no OffloadingSpecFactory (%s); "
            "TidepoolOffloadingSpec not registered", e)
        return
    try:
        OffloadingSpecFactory.register_spec(SPEC_NAME, __name__, SPEC_NAME)
    except ValueError:
        pass  # registered already (plugins loaded again)
