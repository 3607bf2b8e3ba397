"""LMCache connectors over tidepool's KV tier (docs/engines.md, "LMCache";
docs/python.md).

Pure Python over :class:`tidepool.KV`. LMCache is imported only by this
module and only when the remote-backend classes are first asked for:

``TidepoolNativeConnector``
    LMCache's *native connector* protocol, the one its C++ connectors
    expose through ``LMCACHE_BIND_CONNECTOR_METHODS``
    (csrc/storage_backends/connector_pybind_utils.h) and that
    ``NativeConnectorL2Adapter`` (MP mode, ``native_plugin`` L2 adapter)
    and ``ConnectorClientBase`` (non-MP mode) drive: ``event_fd()``,
    ``submit_batch_get/set/exists/delete()`` returning a future id,
    ``drain_completions()`` returning ``(future_id, ok, error, per-key
    bools or None)`` tuples, ``close()``. Needs no LMCache import.

``TidepoolConnectorAdapter`` and ``TidepoolLMCacheConnector``
    LMCache's remote backend (``remote_url: tidepool://HOST:PORT``,
    ``remote_storage_plugins: [tidepool]``): subclasses of LMCache's own
    ``ConnectorAdapter`` and ``RemoteConnector``, built from them on first
    access (module ``__getattr__``); the connector takes and returns
    LMCache ``MemoryObj``s, reading straight into objects allocated from
    LMCache's local CPU backend.

``TidepoolRemoteConnector``
    The ``RemoteConnector`` method set on CPU torch tensors, without
    LMCache (for programs that hold LMCache-shaped chunks themselves);
    LMCache loads the adapter above instead.

Keys. An LMCache key is a string (``CacheEngineKey.to_string()`` in
non-MP mode, ``model@rank@group@hash[@salt]`` in MP mode); anything with a
``to_string()`` method is accepted too. Its 32-byte tidepool key is::

    base = BLAKE2b-256(b"tidepool lmcache key v1" || 0x00 || utf8(key))

Values. Each LMCache value of L bytes is stored as

* a 64-byte *meta* value under ``base`` (see ``_META``: magic ``TPLC``,
  version 1, dtype code, ndim, LMCache memory format code, L, piece size
  P, shape), and
* ``ceil(L / P)`` *pieces*, piece i holding bytes ``[i P, min(L, (i+1) P))``
  under ``BLAKE2b-256(b"tidepool lmcache piece v1" || 0x00 || base ||
  le64 L || le64 P || le32 i)``; P is ``piece_bytes`` (1 MiB by default),
  or L when the value is smaller or ``piece_bytes`` is 0.

Why pieces: a whole chunk (32 MiB for Llama-3-8B at 256 tokens) is a
value that takes a whole 64 MiB slab in memd (docs/kv.md, "Size
classes", 50% efficiency) and a chunk of a large model is over the 64 MiB
value limit; 1 MiB pieces are stored at 98%. Because the length is part of
every piece's key, a get with a buffer of another length finds no pieces
(a miss), never a torn or short value. The meta value lets ``exists``
and the tensor ``get`` learn a value's length and shape (a partial chunk
has fewer tokens). All the classes use the same layout, so each reads
what another stored (the native connector's raw bytes have no dtype and
are a miss for the others). A value is present only when its meta and
all its pieces are; an eviction of any of them is a miss.

Threads. All classes may be used from several threads at once (a lock
guards the native connector's pending table; the KV handle is
thread-safe). ``close()`` must not overlap other calls.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import struct
import threading
from typing import Any, Callable, Generator, List, Optional, Sequence

import tidepool

KEY_DOMAIN = b"tidepool lmcache key v1"
PIECE_DOMAIN = b"tidepool lmcache piece v1"
PIECE_BYTES = 1 << 20
META_BYTES = 64

# magic, version, dtype code, ndim, LMCache memory format code, nbytes,
# piece bytes, 6 dims
_META = struct.Struct("<4sHHHHQQ6I12x")
_META_MAGIC = b"TPLC"
_META_VERSION = 1
_MAX_DIMS = 6
assert _META.size == META_BYTES

# dtype codes of the meta value (0: raw bytes, the native connector's)
_DTYPE_NAMES = {
    1: "float16",
    2: "bfloat16",
    3: "float32",
    4: "uint8",
    5: "int8",
    6: "float8_e4m3fn",
    7: "float8_e5m2",
    8: "int32",
    9: "float64",
    10: "int64",
    11: "int16",
}

# LMCache MemoryFormat codes of the meta value, by member name (LMCache
# numbers its enum with auto(), so the values may differ by version)
_FMT_NAMES = {
    1: "KV_2LTD",
    2: "KV_T2D",
    3: "KV_2TD",
    4: "KV_MLA_FMT",
    5: "BINARY",
}


def lmcache_key(key: Any) -> bytes:
    """The 32-byte tidepool key (the *base* key) of an LMCache key.

    ``key`` is a string or an object with ``to_string()`` (LMCache's
    ``CacheEngineKey``). The rule, BLAKE2b-256 of ``"tidepool lmcache key
    v1"``, a zero byte and the UTF-8 string, is documented in
    docs/python.md and must not change: every process derives the same
    key for the same string.
    """
    if not isinstance(key, str):
        to_string = getattr(key, "to_string", None)
        if to_string is None:
            raise TypeError("an LMCache key is a str or has to_string(), "
                            "not %s" % type(key).__name__)
        key = to_string()
    return _base_key(key)


# Keys cached: LMCache asks for the same chunks again and again (every
# lookup, load and store of a shared prefix), and a BLAKE2b per key and
# per piece is most of a get's own work after LMCache's allocator. Bounded
# LRUs (lru_cache: thread-safe); the piece keys of a 1 MiB value are one
# key, of a 32 MiB chunk 32 (~1 KiB an entry). Callers must not mutate
# what they return (tuples).
_KEY_CACHE = 1 << 14


@functools.lru_cache(maxsize=_KEY_CACHE)
def _base_key(key: str) -> bytes:
    """lmcache_key of a string."""
    h = hashlib.blake2b(digest_size=32)
    h.update(KEY_DOMAIN)
    h.update(b"\0")
    h.update(key.encode("utf-8"))
    return h.digest()


def _piece_size(nbytes: int, piece_bytes: int) -> int:
    """The piece size P actually used for a value of nbytes bytes."""
    if piece_bytes <= 0 or piece_bytes >= nbytes:
        return nbytes
    return piece_bytes


def piece_keys(base: bytes, nbytes: int, piece_bytes: int) -> List[bytes]:
    """The keys of the pieces of a value of ``nbytes`` bytes under ``base``.

    ``piece_bytes`` is the configured piece size (0: one piece); the keys
    bind the length and the piece size, so readers that disagree on either
    find nothing instead of wrong bytes.
    """
    return list(_piece_keys(base, nbytes, _piece_size(nbytes, piece_bytes)))


@functools.lru_cache(maxsize=_KEY_CACHE)
def _piece_keys(base: bytes, nbytes: int, p: int) -> tuple:
    """piece_keys for the piece size p actually used (cached)."""
    prefix = PIECE_DOMAIN + b"\0" + base + struct.pack("<QQ", nbytes, p)
    return tuple(hashlib.blake2b(prefix + struct.pack("<I", i),
                                 digest_size=32).digest()
                 for i in range((nbytes + p - 1) // p))


def _pieces(base: bytes, view: memoryview, piece_bytes: int):
    """(keys, views) of the pieces of the bytes of ``view``."""
    n = len(view)
    p = _piece_size(n, piece_bytes)
    keys = piece_keys(base, n, piece_bytes)
    return keys, [view[off:off + p] for off in range(0, n, p)]


def _byte_view(buf: Any, what: str, writable: bool) -> memoryview:
    """A 1-D unsigned-byte memoryview of a C-contiguous buffer."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError("%s: a buffer (memoryview, bytearray, numpy "
                        "array) is needed, not %s" %
                        (what, type(buf).__name__)) from None
    if writable and mv.readonly:
        raise ValueError("%s: the buffer is read-only" % what)
    if not mv.c_contiguous:
        raise ValueError("%s: the buffer is not C-contiguous" % what)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    if len(mv) == 0:
        raise ValueError("%s: the buffer is empty" % what)
    return mv


_UBYTE_ARRAYS: dict = {}  # nbytes -> ctypes.c_ubyte * nbytes


def _obj_view(o: Any, nbytes: int, what: str) -> memoryview:
    """A writable byte view of the first nbytes bytes of LMCache
    MemoryObj o's memory. From its ``data_ptr`` (an int property of
    LMCache's newer MemoryObj, the address ``byte_array`` is built from;
    the caller checked ``get_size() == nbytes``): a ctypes array at that
    address, about a microsecond, where ``byte_array`` (a tensor view, a
    cast and the array) takes three. Without it, ``byte_array``, cut to
    nbytes (newer LMCache sizes it to the aligned allocation)."""
    ptr = getattr(o, "data_ptr", None)
    if type(ptr) is int and ptr:
        t = _UBYTE_ARRAYS.get(nbytes)
        if t is None:
            if len(_UBYTE_ARRAYS) >= 64:
                _UBYTE_ARRAYS.clear()
            t = _UBYTE_ARRAYS[nbytes] = ctypes.c_ubyte * nbytes
        return memoryview(t.from_address(ptr))
    view = _byte_view(o.byte_array, what, True)
    if len(view) < nbytes:
        raise ValueError("%s: %d bytes where %d are needed" %
                         (what, len(view), nbytes))
    return view if len(view) == nbytes else view[:nbytes]


def _meta_pack(nbytes: int, piece_bytes: int, dtype_code: int = 0,
               shape: Sequence[int] = (), fmt_code: int = 0) -> bytes:
    """The 64-byte meta value of a value of nbytes bytes (fmt_code: the
    LMCache MemoryFormat of ``_FMT_NAMES``, 0 when none)."""
    dims = list(shape) + [0] * (_MAX_DIMS - len(shape))
    return _META.pack(_META_MAGIC, _META_VERSION, dtype_code, len(shape),
                      fmt_code, nbytes, _piece_size(nbytes, piece_bytes),
                      *dims)


class _Meta:
    """A decoded meta value (None from ``parse`` when it is not one)."""

    __slots__ = ("nbytes", "piece_bytes", "dtype_code", "shape", "fmt_code")

    def __init__(self, nbytes, piece_bytes, dtype_code, shape, fmt_code=0):
        self.nbytes = nbytes
        self.piece_bytes = piece_bytes
        self.dtype_code = dtype_code
        self.shape = shape
        self.fmt_code = fmt_code

    @classmethod
    def parse(cls, raw) -> Optional["_Meta"]:
        """Decodes and checks 64 bytes; None when they are not a meta."""
        (magic, version, dtype_code, ndim, fmt_code, nbytes, piece,
         *dims) = _META.unpack(bytes(raw))
        if (magic != _META_MAGIC or version != _META_VERSION or
                ndim > _MAX_DIMS or nbytes == 0 or piece == 0 or
                piece > nbytes or
                (dtype_code and dtype_code not in _DTYPE_NAMES)):
            return None
        return cls(nbytes, piece, dtype_code, tuple(dims[:ndim]), fmt_code)

    def piece_keys(self, base: bytes) -> tuple:
        """The keys of this value's pieces (cached: do not mutate)."""
        return _piece_keys(base, self.nbytes, self.piece_bytes)


# ---------------------------------------------------------------------
# Plans: the steps of a batch as generators that yield lists of KV
# operations and receive their outcomes (a result, or the exception the
# operation raised). One plan runs synchronously, in asyncio, or driven
# by drain_completions(), without three copies of the logic.


class _Op:
    """One KV call of a plan: kind is get, put, exists or delete."""

    __slots__ = ("kind", "keys", "bufs")

    def __init__(self, kind: str, keys: List[bytes], bufs=None):
        self.kind = kind
        self.keys = keys
        self.bufs = bufs


Plan = Generator[List[_Op], List[Any], Any]


def _is_size_error(exc: Any) -> bool:
    """A get's ValueError: a stored value's length is not its buffer's."""
    return (isinstance(exc, ValueError) and
            not isinstance(exc, tidepool.ClosedError))


def _plan_get_each(groups, bufs) -> Plan:
    """Per-key gets, a size error counting as a miss (the fallback when a
    batch get raised ValueError). groups[i]: the keys of key i."""
    ops = [_Op("get", ks, bs) for ks, bs in zip(groups, bufs) if ks]
    outs = yield ops
    hits, it = [], iter(outs)
    for ks in groups:
        if not ks:
            hits.append(False)
            continue
        o = next(it)
        if _is_size_error(o):
            hits.append(False)
        elif isinstance(o, BaseException):
            raise o
        else:
            hits.append(all(o))
    return hits


def _plan_get_grouped(groups, bufs) -> Plan:
    """Reads groups[i] into bufs[i] (lists); per group: all pieces hit."""
    flat_k = [k for ks in groups for k in ks]
    flat_b = [b for bs in bufs for b in bs]
    if not flat_k:
        return [False] * len(groups)
    o = (yield [_Op("get", flat_k, flat_b)])[0]
    if _is_size_error(o):
        return (yield from _plan_get_each(groups, bufs))
    if isinstance(o, BaseException):
        raise o
    hits, pos = [], 0
    for ks in groups:
        hits.append(bool(ks) and all(o[pos:pos + len(ks)]))
        pos += len(ks)
    return hits


def _plan_metas(bases: List[bytes]) -> Plan:
    """The decoded meta values of bases (None where absent or invalid)."""
    raws = [bytearray(META_BYTES) for _ in bases]
    hits = yield from _plan_get_grouped([[b] for b in bases],
                                        [[r] for r in raws])
    return [_Meta.parse(r) if h else None for h, r in zip(hits, raws)]


def _plan_exists_each(bases: List[bytes]) -> Plan:
    """Per key: meta and every piece present."""
    metas = yield from _plan_metas(bases)
    cands = [(i, m.piece_keys(b)) for i, (b, m) in
             enumerate(zip(bases, metas)) if m is not None]
    found = [False] * len(bases)
    if not cands:
        return found
    # One exists over all pieces answers up to the first missing one;
    # tidepool's exists is a prefix, so what follows is asked per key.
    flat = [k for _, ks in cands for k in ks]
    m = (yield [_Op("exists", flat)])[0]
    if isinstance(m, BaseException):
        raise m
    rest, pos = [], 0
    for i, ks in cands:
        if pos + len(ks) <= m:
            found[i] = True
        elif pos > m:
            rest.append((i, ks))
        pos += len(ks)
    if rest:
        outs = yield [_Op("exists", ks) for _, ks in rest]
        for (i, ks), o in zip(rest, outs):
            if isinstance(o, BaseException):
                raise o
            found[i] = o == len(ks)
    return found


def _plan_contains_prefix(bases: List[bytes]) -> Plan:
    """How many leading keys are present (meta and every piece)."""
    metas = yield from _plan_metas(bases)
    groups = []
    for b, m in zip(bases, metas):
        if m is None:
            break
        groups.append(m.piece_keys(b))
    if not groups:
        return 0
    flat = [k for ks in groups for k in ks]
    m = (yield [_Op("exists", flat)])[0]
    if isinstance(m, BaseException):
        raise m
    n, pos = 0, 0
    for ks in groups:
        pos += len(ks)
        if pos > m:
            break
        n += 1
    return n


def _plan_delete(bases: List[bytes]) -> Plan:
    """Deletes meta and pieces; per key: its meta was there and deleted."""
    metas = yield from _plan_metas(bases)
    keys = list(bases)
    for b, m in zip(bases, metas):
        if m is not None:
            keys.extend(m.piece_keys(b))
    o = (yield [_Op("delete", keys)])[0]
    if isinstance(o, BaseException):
        raise o
    return [bool(x) for x in o[:len(bases)]]


def _plan_put(bases: List[bytes], metas: List[bytes],
              views: List[memoryview], piece_bytes: int) -> Plan:
    """Stores meta and pieces of each value; returns (stored flags, first
    failure as (index, errno) or None). A value whose pieces did not all
    go in has what this call added deleted again (best effort), so that
    its meta never claims a value that is not there."""
    keys, vals, owner = [], [], []
    for i, (b, meta, v) in enumerate(zip(bases, metas, views)):
        pk, pv = _pieces(b, v, piece_bytes)
        keys.append(b)
        vals.append(meta)
        owner.append(i)
        keys.extend(pk)
        vals.extend(pv)
        owner.extend([i] * len(pk))
    o = (yield [_Op("put", keys, vals)])[0]
    if isinstance(o, BaseException):
        raise o
    stored = [True] * len(bases)
    first = None
    for st, i in zip(o, owner):
        if st not in (0, errno.EEXIST):
            stored[i] = False
            if first is None:
                first = (i, st)
    undo = [k for k, st, i in zip(keys, o, owner)
            if not stored[i] and st == 0]
    if undo:
        yield [_Op("delete", undo)]  # best effort: outcome ignored
    return stored, first


def _fail_text(first) -> str:
    """The error text of a put's first failing key."""
    i, err = first
    return "key %d: %s (errno %d)" % (i, tidepool.strerror(err), err)


# ---------------------------------------------------------------------
# Running plans


def _parts(op: _Op):
    """op cut at BATCH_MAX keys: [(keys, bufs)]."""
    step = tidepool.BATCH_MAX
    n = len(op.keys)
    return [(op.keys[i:i + step],
             op.bufs[i:i + step] if op.bufs is not None else None)
            for i in range(0, n, step)]


# kind -> (synchronous KV method, asynchronous one, takes buffers)
_KV_CALLS = {
    "get": ("get_into", "get_into_async", True),
    "put": ("put", "put_async", True),
    "exists": ("exists", "exists_async", False),
    "delete": ("delete", "delete_async", False),
}


def _invoke(kv, kind: str, keys: List[bytes], bufs, background: bool):
    """One KV call of at most BATCH_MAX keys: its KVFuture when
    background, else its result (run in this thread)."""
    sync, bg, takes_bufs = _KV_CALLS[kind]
    fn = getattr(kv, bg if background else sync)
    kb = b"".join(keys)
    return fn(kb, bufs) if takes_bufs else fn(kb)


def _start(kv, kind: str, keys: List[bytes], bufs):
    """Starts one KV call (at most BATCH_MAX keys); returns its KVFuture."""
    return _invoke(kv, kind, keys, bufs, True)


def _call(kv, kind: str, keys: List[bytes], bufs):
    """Runs one KV call (at most BATCH_MAX keys) in this thread."""
    return _invoke(kv, kind, keys, bufs, False)


def _combine(kind: str, parts, results) -> Any:
    """The outcome of an op from the outcomes of its parts."""
    for r in results:
        if isinstance(r, BaseException):
            return r
    if kind == "exists":
        # each part's prefix is independent: add up to the first short one
        total = 0
        for (keys, _), r in zip(parts, results):
            total += r
            if r < len(keys):
                break
        return total
    out = []
    for r in results:
        out.extend(r)
    return out


def _future_outcome(fut) -> Any:
    """A completed KVFuture's result, or its exception."""
    exc = fut.exception()
    return exc if exc is not None else fut.result()


def _run_sync(kv, plan: Plan) -> Any:
    """Runs a plan in this thread: one call at a time, or several at once
    as KVFutures when a step has more than one."""
    try:
        ops = next(plan)
        while True:
            jobs = [(op, _parts(op)) for op in ops]
            if sum(len(p) for _, p in jobs) == 1:
                op, ((keys, bufs),) = jobs[0]
                try:
                    outs = [_call(kv, op.kind, keys, bufs)]
                except (tidepool.PoolError, ValueError) as e:
                    outs = [e]
            else:
                outs = []
                for op, parts, futs in _start_all(kv, jobs):
                    res = [f if isinstance(f, BaseException)
                           else _wait_outcome(f) for f in futs]
                    outs.append(_combine(op.kind, parts, res))
            ops = plan.send(outs)
    except StopIteration as stop:
        return stop.value


def _start_all(kv, jobs) -> list:
    """Starts every part of every (op, parts) in jobs: (op, parts, futs),
    futs holding a KVFuture, or the exception that kept it from
    starting, for each part."""
    started = []
    for op, parts in jobs:
        futs = []
        for keys, bufs in parts:
            try:
                futs.append(_start(kv, op.kind, keys, bufs))
            except (tidepool.PoolError, ValueError) as e:
                futs.append(e)
        started.append((op, parts, futs))
    return started


def _wait_outcome(fut) -> Any:
    """Waits for a KVFuture; its result or its exception."""
    try:
        return fut.result()
    except (tidepool.PoolError, ValueError) as e:
        return e


async def _run_async(kv, plan: Plan) -> Any:
    """Runs a plan in asyncio: each step's calls start at once and are
    awaited through the KV handle's eventfd."""
    try:
        ops = next(plan)
        while True:
            outs = []
            for op, parts, futs in _start_all(
                    kv, [(op, _parts(op)) for op in ops]):
                res = []
                for f in futs:
                    if isinstance(f, BaseException):
                        res.append(f)
                        continue
                    try:
                        res.append(await f)
                    except (tidepool.PoolError, ValueError) as e:
                        res.append(e)
                outs.append(_combine(op.kind, parts, res))
            ops = plan.send(outs)
    except StopIteration as stop:
        return stop.value


def _open_kv(pool, addr, tenant, secret_file, replicas, nthreads,
             timeout_ms, client_name):
    """(pool, owned, kv): a KV handle on pool, or on a Pool opened here
    (closed again when the handle cannot be made). Every connector opens
    its handle this way."""
    owned = pool is None
    if owned:
        pool = tidepool.Pool(addr, tenant, secret_file,
                             timeout_ms=timeout_ms, client_name=client_name)
    try:
        kv = pool.kv(replicas, nthreads=nthreads)
    except BaseException:
        if owned:
            pool.close()
        raise
    return pool, owned, kv


# ---------------------------------------------------------------------
# The native connector


class _Batch:
    """A submitted batch: its plan, and the parts of the step under way."""

    __slots__ = ("fid", "n", "plan", "finish", "step", "keepalive")

    def __init__(self, fid, n, plan, finish, keepalive):
        self.fid = fid
        self.n = n
        self.plan = plan
        self.finish = finish  # plan's return value -> (ok, error, results)
        self.step = []  # [(op, parts, futures or exceptions)]
        self.keepalive = keepalive


class TidepoolNativeConnector:
    """LMCache's native-connector protocol on a tidepool KV handle.

    Load it in LMCache's MP mode as a ``native_plugin`` L2 adapter
    (``module_path`` ``tidepool.connectors.lmcache``, ``class_name``
    ``TidepoolNativeConnector``); ``adapter_params`` are this
    constructor's keyword arguments. It also satisfies
    ``ConnectorClientBase`` (non-MP mode).

    Semantics, as LMCache's ``IStorageConnector`` (connector_interface.h)
    and ``ConnectorBase`` (connector_base.h) define them:

    * every ``submit_*`` returns at once with a future id (1, 2, ...);
      each batch completes exactly once, as one tuple of
      ``drain_completions()``, after ``event_fd()`` polls readable;
    * get: per key True when the value was read into its buffer (exactly
      its bytes), False on a miss (absent, evicted, stored with another
      length, a check failed); ``ok`` stays True with misses. A missed
      key's buffer may have been written (libpool reads before it checks):
      do not read it, as LMCache's ``ConnectorClientBase`` says;
    * set: per key True when stored (or already present); ``ok`` is False
      and ``error`` names the first failing key when one was not stored
      (LMCache's C++ connectors report ``None`` here; the per-key list is
      what ``NativeConnectorL2Adapter`` prefers when a connector gives one);
    * exists: per key True when present, each key on its own (not a
      prefix);
    * delete: per key True when it was present and is deleted;
    * a batch that failed as a whole (the pool lost, the handle closed
      under it) completes with ``ok`` False, the error text and all-False
      per-key results.

    Buffers (``memoryviews``) must stay valid and untouched until their
    batch has completed, as in LMCache; the connector also keeps a
    reference to them until then.

    Arguments (all keyword-able, JSON-friendly for ``adapter_params``):
    ``addr``, ``tenant``, ``secret_file``, ``timeout_ms``,
    ``client_name``: the ``tidepool.Pool`` to open (None: LIBPOOL_*
    environment); ``replicas``, ``nthreads``: of the KV handle;
    ``piece_bytes``: the piece size (module docstring; every client of a
    tenant must use the same); ``pool``: an open ``tidepool.Pool`` to use
    instead (not closed by ``close()``).
    """

    def __init__(self, addr: Optional[str] = None,
                 tenant: Optional[str] = None,
                 secret_file: Optional[str] = None, *,
                 replicas: int = 1, nthreads: int = 0, timeout_ms: int = 0,
                 client_name: Optional[str] = None,
                 piece_bytes: int = PIECE_BYTES,
                 pool: Optional["tidepool.Pool"] = None) -> None:
        if piece_bytes < 0 or piece_bytes > tidepool.VALUE_MAX:
            raise ValueError("piece_bytes must be 0 .. %d, not %d" %
                             (tidepool.VALUE_MAX, piece_bytes))
        self._piece_bytes = piece_bytes
        self._pool, self._owns_pool, self._kv = _open_kv(
            pool, addr, tenant, secret_file, replicas, nthreads,
            timeout_ms, client_name)
        self._fd = self._kv.eventfd()
        self._lock = threading.Lock()
        self._pending = {}  # fid -> _Batch
        self._next_fid = 1
        self._closed = False

    # -- the protocol --------------------------------------------------

    def event_fd(self) -> int:
        """The completion descriptor: polls readable when a batch may have
        completed; then call ``drain_completions()``. Owned by the
        connector (closed by ``close()``)."""
        self._check_open()
        return self._fd

    def submit_batch_get(self, keys: Sequence[Any],
                         memoryviews: Sequence[Any]) -> int:
        """Reads keys[i] into memoryviews[i] (writable, C-contiguous, the
        value's exact length); returns the batch's future id. Raises
        ValueError for an empty batch, a length mismatch or an unusable
        buffer, ClosedError when closed."""
        views = self._views(keys, memoryviews, writable=True)
        bases = [lmcache_key(k) for k in keys]
        groups, bufs = [], []
        for b, v in zip(bases, views):
            pk, pv = _pieces(b, v, self._piece_bytes)
            groups.append(pk)
            bufs.append(pv)
        plan = _plan_get_grouped(groups, bufs)
        return self._submit(len(bases), plan, lambda r: (True, "", r),
                            views)

    def submit_batch_set(self, keys: Sequence[Any],
                         memoryviews: Sequence[Any]) -> int:
        """Stores memoryviews[i] under keys[i]; returns the future id.
        Raises as ``submit_batch_get``."""
        views = self._views(keys, memoryviews, writable=False)
        bases = [lmcache_key(k) for k in keys]
        metas = [_meta_pack(len(v), self._piece_bytes) for v in views]
        for i, v in enumerate(views):
            if _piece_size(len(v), self._piece_bytes) > tidepool.VALUE_MAX:
                raise ValueError(
                    "memoryviews[%d]: %d bytes in one piece is over the "
                    "%d-byte value limit (set piece_bytes)" %
                    (i, len(v), tidepool.VALUE_MAX))
        plan = _plan_put(bases, metas, views, self._piece_bytes)

        def finish(res):
            stored, first = res
            return (first is None, "" if first is None else
                    _fail_text(first), stored)
        return self._submit(len(bases), plan, finish, views)

    def submit_batch_exists(self, keys: Sequence[Any]) -> int:
        """Asks which keys are present, each on its own; returns the
        future id. Raises ValueError for an empty batch."""
        bases = self._bases(keys)
        return self._submit(len(bases), _plan_exists_each(bases),
                            lambda r: (True, "", r), None)

    def submit_batch_delete(self, keys: Sequence[Any]) -> int:
        """Deletes keys; per key True when it was present. Returns the
        future id. Raises ValueError for an empty batch."""
        bases = self._bases(keys)
        return self._submit(len(bases), _plan_delete(bases),
                            lambda r: (True, "", r), None)

    def drain_completions(self) -> List[tuple]:
        """Clears ``event_fd()`` and returns the batches completed since
        the last call, as ``(future_id, ok, error, per-key bools)``; an
        empty list when none (the fd may poll readable for a step of a
        batch that is not complete yet). Never blocks; safe to call from
        any thread. After ``close()`` it returns an empty list."""
        out = []
        with self._lock:
            if self._closed:
                return out
            try:
                self._kv.poll()
            except tidepool.ClosedError:
                return out
            for fid in sorted(self._pending):
                b = self._pending[fid]
                done = self._advance(b)
                if done is not None:
                    del self._pending[fid]
                    out.append(done)
        return out

    def close(self) -> None:
        """Waits for the operations under way, then closes the KV handle
        (and the Pool when the connector opened it). Batches not drained
        are dropped, as LMCache's ``ConnectorBase.close()`` drops its
        completion queue. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, {}
        try:
            self._kv.close()  # waits for every op; buffers free after
        finally:
            pending.clear()
            if self._owns_pool:
                self._pool.close()

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    def __enter__(self) -> "TidepoolNativeConnector":
        """The connector itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the connector."""
        self.close()

    # -- internals -----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise tidepool.ClosedError("tidepool: the LMCache native "
                                       "connector is closed")

    def _bases(self, keys) -> List[bytes]:
        self._check_open()
        keys = list(keys)
        if not keys:
            raise ValueError("keys list is empty")
        return [lmcache_key(k) for k in keys]

    def _views(self, keys, bufs, writable) -> List[memoryview]:
        self._check_open()
        keys, bufs = list(keys), list(bufs)
        if not keys:
            raise ValueError("keys list is empty")
        if len(keys) != len(bufs):
            raise ValueError("keys and memoryviews size mismatch: %d keys, "
                             "%d buffers" % (len(keys), len(bufs)))
        return [_byte_view(b, "memoryviews[%d]" % i, writable)
                for i, b in enumerate(bufs)]

    def _submit(self, n, plan, finish, keepalive) -> int:
        with self._lock:
            self._check_open()
            fid = self._next_fid
            self._next_fid += 1
            b = _Batch(fid, n, plan, finish, keepalive)
            try:
                self._step(b, next(plan))
            except StopIteration as stop:  # nothing to ask: complete now
                b.step = [(None, None, [_Ready(stop.value)])]
            self._pending[fid] = b
        return fid

    def _step(self, b: _Batch, ops: List[_Op]) -> None:
        """Starts the KV calls of ops for batch b (lock held)."""
        b.step = []
        for op in ops:
            parts = _parts(op)
            futs = []
            for keys, bufs in parts:
                try:
                    futs.append(_start(self._kv, op.kind, keys, bufs))
                except tidepool.ClosedError:
                    raise
                except (tidepool.PoolError, ValueError) as e:
                    futs.append(e)
            b.step.append((op, parts, futs))

    def _advance(self, b: _Batch) -> Optional[tuple]:
        """Moves b on if its step is done; its completion tuple when the
        plan has finished, else None (lock held)."""
        while True:
            for _, _, futs in b.step:
                for f in futs:
                    if not isinstance(f, BaseException) and not f.done():
                        return None
            if b.step and b.step[0][0] is None:  # finished at submit
                return self._finish(b, b.step[0][2][0].value)
            outs = []
            for op, parts, futs in b.step:
                res = [f if isinstance(f, BaseException)
                       else _future_outcome(f) for f in futs]
                outs.append(_combine(op.kind, parts, res))
            try:
                ops = b.plan.send(outs)
            except StopIteration as stop:
                return self._finish(b, stop.value)
            except (tidepool.PoolError, ValueError, RuntimeError) as e:
                return (b.fid, False, str(e) or type(e).__name__,
                        [False] * b.n)
            try:
                self._step(b, ops)
            except tidepool.ClosedError as e:
                return (b.fid, False, str(e), [False] * b.n)

    @staticmethod
    def _finish(b: _Batch, value) -> tuple:
        ok, error, results = b.finish(value)
        return (b.fid, bool(ok), error, [bool(x) for x in results])


class _Ready:
    """A stand-in future for a batch whose plan finished without asking
    anything (no plan here does, but a batch must still complete once)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def done(self) -> bool:
        return True


# ---------------------------------------------------------------------
# The RemoteConnector-shaped class


def _torch():
    import torch
    return torch


def _dtype_code(dtype) -> int:
    for code, name in _DTYPE_NAMES.items():
        if getattr(_torch(), name, None) == dtype:
            return code
    raise ValueError("tidepool: dtype %s is not supported" % (dtype,))


class _RemoteConnectorBase:
    """What ``TidepoolRemoteConnector`` and ``TidepoolLMCacheConnector``
    share of LMCache's ``RemoteConnector`` interface: the calls whose
    values do not matter (presence, pings, deletes) and closing. A
    subclass sets ``_kv``, ``_pool``, ``_owns_pool`` and ``_closed``."""

    async def exists(self, key: Any) -> bool:
        """True when the value of key is present (meta and all pieces)."""
        base = self._base(key)
        return (await _run_async(self._kv, _plan_exists_each([base])))[0]

    def exists_sync(self, key: Any) -> bool:
        """``exists`` in the calling thread (not the event loop's)."""
        base = self._base(key)
        return _run_sync(self._kv, _plan_exists_each([base]))[0]

    async def close(self) -> None:
        """Closes the KV handle (and the Pool when opened here);
        idempotent."""
        self.close_sync()

    def support_ping(self) -> bool:
        """True: ``ping`` is supported."""
        return True

    async def ping(self) -> int:
        """One round trip to the pool: 0, or the errno of the failure."""
        self._check_open()
        return await _ping(self._kv)

    def support_batched_contains(self) -> bool:
        """True."""
        return True

    def support_batched_async_contains(self) -> bool:
        """True."""
        return True

    async def batched_async_contains(self, lookup_id: str,
                                     keys: Sequence[Any],
                                     pin: bool = False) -> int:
        """How many leading keys are present, as a coroutine;
        ``lookup_id`` and ``pin`` are ignored (no pins are taken)."""
        bases = [self._base(k) for k in keys]
        if not bases:
            return 0
        return await _run_async(self._kv, _plan_contains_prefix(bases))

    def support_batched_get_non_blocking(self) -> bool:
        """True."""
        return True

    def remove_sync(self, key: Any) -> bool:
        """Deletes key; True when it was present."""
        return _run_sync(self._kv, _plan_delete([self._base(key)]))[0]

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise tidepool.ClosedError("tidepool: the LMCache remote "
                                       "connector is closed")

    def _base(self, key: Any) -> bytes:
        self._check_open()
        return lmcache_key(key)

    def _close_kv(self) -> None:
        try:
            self._kv.close()
        finally:
            if self._owns_pool:
                self._pool.close()


class TidepoolRemoteConnector(_RemoteConnectorBase):
    """The shape of LMCache's ``RemoteConnector`` on a tidepool KV handle.

    Values are CPU torch tensors: what an LMCache ``MemoryObj.tensor``
    holds, e.g. ``[2, num_layers, tokens, num_heads * head_dim]``
    (KV_2LTD) or ``[1, num_layers, tokens, head_dim]`` (MLA), fp16 or bf16
    (module docstring: layout; 1 to 6 dims; the dtypes of ``_DTYPE_NAMES``).
    ``get`` returns a tensor of the shape and dtype that was put, so a
    partial chunk comes back with its own token count. This class needs
    no LMCache; LMCache's remote backend loads ``TidepoolConnectorAdapter``
    instead (docs/engines.md, "LMCache").

    Differences from LMCache's connectors, by design: ``list()`` raises
    NotImplementedError (use ``TidepoolLMCacheConnector``'s, which keeps
    a key log); ``put`` raises
    ``tidepool.PoolError`` when a value was not stored (LMCache's callers
    log and drop it); the ``pin`` of ``batched_async_contains`` is ignored
    (LMCache has no matching unpin on this interface).

    Arguments: as ``TidepoolNativeConnector`` (``pool`` or ``addr``,
    ``tenant``, ``secret_file``...), plus ``chunk_shape`` and ``dtype``
    (when given, ``put`` checks each tensor against them: same dtype, same
    dims but the token dim 2, at most the full chunk's tokens),
    ``allocate`` (``allocate(shape, dtype) -> tensor``, default
    ``torch.empty``: where ``get`` puts what it reads) and ``loop``
    (accepted for LMCache's signature, unused: coroutines run in the
    caller's loop).
    """

    def __init__(self, pool: Optional["tidepool.Pool"] = None, *,
                 addr: Optional[str] = None, tenant: Optional[str] = None,
                 secret_file: Optional[str] = None, replicas: int = 1,
                 nthreads: int = 0, timeout_ms: int = 0,
                 client_name: Optional[str] = None,
                 piece_bytes: int = PIECE_BYTES,
                 chunk_shape: Optional[Sequence[int]] = None,
                 dtype: Any = None,
                 allocate: Optional[Callable[..., Any]] = None,
                 loop: Any = None) -> None:
        if piece_bytes < 0 or piece_bytes > tidepool.VALUE_MAX:
            raise ValueError("piece_bytes must be 0 .. %d, not %d" %
                             (tidepool.VALUE_MAX, piece_bytes))
        self._piece_bytes = piece_bytes
        self._chunk_shape = tuple(chunk_shape) if chunk_shape else None
        self._dtype = dtype
        self._allocate = allocate
        self.loop = loop
        self._pool, self._owns_pool, self._kv = _open_kv(
            pool, addr, tenant, secret_file, replicas, nthreads,
            timeout_ms, client_name)
        self._closed = False

    # -- RemoteConnector's abstract methods ----------------------------

    async def get(self, key: Any) -> Optional[Any]:
        """The tensor stored under key, or None (absent, evicted, any
        piece missing or failing its checks)."""
        return (await self.batched_get([key]))[0]

    async def put(self, key: Any, memory_obj: Any) -> None:
        """Stores a CPU tensor under key (idempotent: a present key is
        left as it is). Raises ValueError for a tensor this connector
        cannot store, ``tidepool.PoolError`` when it was not stored."""
        await self.batched_put([key], [memory_obj])

    async def list(self) -> List[str]:
        """Not supported: tidepool's KV tier cannot enumerate keys, and
        a list of what this process stored would claim evicted keys and
        miss every other process's. Raises NotImplementedError."""
        raise NotImplementedError(
            "tidepool's KV tier cannot list keys (LMCache v1 does not "
            "need list(); see docs/python.md)")

    # -- optional parts of the interface ---------------------------------

    def support_batched_get(self) -> bool:
        """True: ``batched_get`` reads all keys in two round trips."""
        return True

    async def batched_get(self, keys: Sequence[Any]) -> List[Optional[Any]]:
        """The tensors of keys (None for each miss): one round trip for
        the metas, one for every piece of every hit."""
        bases = [self._base(k) for k in keys]
        if not bases:
            return []
        return await _run_async(self._kv, self._plan_get_tensors(bases))

    def support_batched_put(self) -> bool:
        """True: ``batched_put`` stores all values in one call."""
        return True

    async def batched_put(self, keys: Sequence[Any],
                          memory_objs: Sequence[Any]) -> None:
        """Stores tensors under keys, all in one KV call. Raises
        ValueError (nothing stored) for a tensor that does not fit,
        ``tidepool.PoolError`` naming the first key that was not
        stored."""
        bases, metas, views = self._prepare_put(keys, memory_objs)
        if not bases:
            return
        stored, first = await _run_async(
            self._kv, _plan_put(bases, metas, views, self._piece_bytes))
        if first is not None:
            raise tidepool.PoolError(first[1], _fail_text(first))

    def batched_contains(self, keys: Sequence[Any]) -> int:
        """How many leading keys are present (the prefix LMCache can
        retrieve), in the calling thread."""
        bases = [self._base(k) for k in keys]
        if not bases:
            return 0
        return _run_sync(self._kv, _plan_contains_prefix(bases))

    async def batched_get_non_blocking(self, lookup_id: str,
                                       keys: Sequence[Any]) -> List[Any]:
        """The tensors of the leading keys up to the first miss (LMCache's
        contract: a prefix, later hits dropped)."""
        out = []
        for t in await self.batched_get(keys):
            if t is None:
                break
            out.append(t)
        return out

    def close_sync(self) -> None:
        """``close`` outside asyncio. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close_kv()

    def __repr__(self) -> str:
        return "<TidepoolRemoteConnector>"

    # -- internals -----------------------------------------------------

    def _prepare_put(self, keys, tensors):
        """(bases, metas, byte views) of tensors; ValueError if one does
        not fit."""
        self._check_open()
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors):
            raise ValueError("%d keys but %d tensors" %
                             (len(keys), len(tensors)))
        bases, metas, views = [], [], []
        for i, (k, t) in enumerate(zip(keys, tensors)):
            self._check_tensor(i, t)
            code = _dtype_code(t.dtype)
            flat = t.reshape(-1).view(_torch().uint8)
            view = memoryview(flat.numpy())
            n = len(view)
            if _piece_size(n, self._piece_bytes) > tidepool.VALUE_MAX:
                raise ValueError("tensor %d: %d bytes in one piece is over "
                                 "the value limit (set piece_bytes)" % (i, n))
            bases.append(lmcache_key(k))
            metas.append(_meta_pack(n, self._piece_bytes, code,
                                    tuple(t.shape)))
            views.append(view)
        return bases, metas, views

    def _check_tensor(self, i: int, t: Any) -> None:
        torch = _torch()
        if not isinstance(t, torch.Tensor):
            raise TypeError("tensor %d: a torch.Tensor is needed, not %s" %
                            (i, type(t).__name__))
        if t.device.type != "cpu":
            raise ValueError("tensor %d: on %s; the remote connector takes "
                             "CPU tensors" % (i, t.device))
        if not t.is_contiguous():
            raise ValueError("tensor %d: not contiguous" % i)
        if t.numel() == 0:
            raise ValueError("tensor %d: empty" % i)
        if not 1 <= t.dim() <= _MAX_DIMS:
            raise ValueError("tensor %d: %d dims (1 .. %d)" %
                             (i, t.dim(), _MAX_DIMS))
        if self._dtype is not None and t.dtype != self._dtype:
            raise ValueError("tensor %d: dtype %s, this connector stores %s"
                             % (i, t.dtype, self._dtype))
        full = self._chunk_shape
        if full is not None:
            shape = tuple(t.shape)
            if (len(shape) != len(full) or len(full) < 3 or
                    shape[:2] != full[:2] or shape[3:] != full[3:] or
                    not 1 <= shape[2] <= full[2]):
                raise ValueError("tensor %d: shape %s does not fit chunks "
                                 "of shape %s" % (i, list(shape),
                                                  list(full)))

    def _alloc(self, shape, dtype):
        if self._allocate is not None:
            return self._allocate(shape, dtype)
        return _torch().empty(shape, dtype=dtype)

    def _plan_get_tensors(self, bases: List[bytes]) -> Plan:
        """Metas, then every piece of every hit into new tensors."""
        torch = _torch()
        metas = yield from _plan_metas(bases)
        tensors, groups, bufs = [], [], []
        for b, m in zip(bases, metas):
            t = None
            if m is not None and m.dtype_code and m.shape:
                dtype = getattr(torch, _DTYPE_NAMES[m.dtype_code])
                numel = 1
                for d in m.shape:
                    numel *= d
                if numel * torch.empty((), dtype=dtype).element_size() == \
                        m.nbytes:
                    t = self._alloc(m.shape, dtype)
            if t is not None and not t.is_contiguous():
                raise ValueError("allocate() returned a non-contiguous "
                                 "tensor")
            if t is None:
                tensors.append(None)
                groups.append([])
                bufs.append([])
                continue
            flat = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            pk = m.piece_keys(b)
            p = m.piece_bytes
            tensors.append(t)
            groups.append(pk)
            bufs.append([flat[off:off + p] for off in range(0, m.nbytes, p)])
        hits = yield from _plan_get_grouped(groups, bufs)
        return [t if h else None for t, h in zip(tensors, hits)]


# ---------------------------------------------------------------------
# LMCache's remote backend: a ConnectorAdapter and a RemoteConnector
#
# LMCache is imported only here, and only when its classes are asked
# for (the module's __getattr__ below): importing this module never
# imports LMCache. The logic lives in plain classes (_LMCacheConnector,
# _LMCacheAdapter); _lmcache_classes() derives the classes LMCache loads
# from them and from LMCache's own ConnectorAdapter and RemoteConnector.

ADAPTER_SCHEME = "tidepool://"
PLUGIN_TYPE = "tidepool"

# the abstract methods of LMCache's RemoteConnector this module implements
# (base_connector.py; any other abstract method: an unsupported LMCache)
_REMOTE_ABSTRACT = frozenset(("exists", "exists_sync", "get", "put", "list",
                              "close"))

# extra_config keys this adapter reads ("tidepool." + name): converter
_SETTINGS = {
    "tenant": str,
    "secret_file": str,
    "client_name": str,
    "replicas": int,
    "nthreads": int,
    "timeout_ms": int,
    "piece_bytes": int,
}

_LMC_CLASSES = None
_LMC_LOCK = threading.Lock()


def _key_string(key: Any) -> str:
    """An LMCache key's string (``CacheEngineKey.to_string()``)."""
    if isinstance(key, str):
        return key
    to_string = getattr(key, "to_string", None)
    if to_string is None:
        raise TypeError("an LMCache key is a str or has to_string(), not %s"
                        % type(key).__name__)
    return to_string()


def _settings(context) -> dict:
    """The connector's settings from LMCache's ConnectorContext: the
    address from the URL (``tidepool://HOST:PORT``; with LMCache's
    ``plugin://NAME`` form, from ``remote_storage_plugin.NAME.url`` or
    else ``remote_url``), the rest from ``extra_config["tidepool.*"]``.
    Raises ValueError naming what is wrong."""
    from urllib.parse import urlsplit

    config = getattr(context, "config", None)
    extra = dict(getattr(config, "extra_config", None) or {})
    url = context.url or ""
    if url.startswith("plugin://"):
        name = url[len("plugin://"):]
        url = (extra.get("remote_storage_plugin.%s.url" % name) or
               getattr(config, "remote_url", None) or "")
        if not url:
            raise ValueError(
                "tidepool: plugin %r has no address: set extra_config "
                "remote_storage_plugin.%s.url (or remote_url) to "
                "tidepool://HOST:PORT" % (name, name))
    if not url.startswith(ADAPTER_SCHEME):
        raise ValueError("tidepool: remote URL %r is not tidepool://HOST:PORT"
                         % url)
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if (not parts.hostname or port is None or parts.path not in ("", "/")
            or parts.query or parts.fragment or parts.username):
        raise ValueError("tidepool: remote URL %r is not tidepool://HOST:PORT"
                         % url)
    out = {"addr": parts.netloc}
    for k, v in extra.items():
        if not isinstance(k, str) or not k.startswith("tidepool."):
            continue
        name = k[len("tidepool."):]
        conv = _SETTINGS.get(name)
        if conv is None:
            raise ValueError("tidepool: unknown extra_config key %r "
                             "(known: %s)" % (k, ", ".join("tidepool." + n
                                             for n in sorted(_SETTINGS))))
        try:
            out[name] = conv(v)
        except (TypeError, ValueError):
            raise ValueError("tidepool: extra_config %r: %r is not %s" %
                             (k, v, conv.__name__)) from None
    serde = getattr(config, "remote_serde", None)
    if serde not in (None, "naive"):
        raise ValueError("tidepool: remote_serde %r is not supported: the "
                         "tidepool remote backend stores LMCache's tensors "
                         "as they are (remote_serde: naive)" % (serde,))
    return out


# The key log behind RemoteConnector.list(). The KV tier cannot enumerate
# keys, so each connector appends the names it stored to a log of its own
# in the pool, and registers that log once in a registry shared by the
# tenant; list() reads every registered log and keeps the names whose
# values are still present. Write-once values make both safe without
# locks: a registry slot is claimed by a put that does not get EEXIST, a
# log has one writer. Best effort: a log record or registry slot that is
# evicted drops its names from list() (never a name that is not there).
#
#   registry slot j: BLAKE2b-256(LIST_DOMAIN || 0x00 || "r" || le64 j),
#       64 bytes: magic "TPLR", u16 version 1, u16 0, 16-byte log id
#   log record i:    BLAKE2b-256(LIST_DOMAIN || 0x00 || "l" || log id
#       || le64 i), LOG_RECORD_BYTES: magic "TPLN", u16 version 1, u16
#       count, u32 n, then n bytes of UTF-8 names separated by "\n"

LIST_DOMAIN = b"tidepool lmcache list v1"
LOG_RECORD_BYTES = 4096
_REG = struct.Struct("<4sHH16s40x")
_REC = struct.Struct("<4sHHI")
_SCAN = 64  # slots read per round trip when scanning
assert _REG.size == META_BYTES


def _list_key(*parts: bytes) -> bytes:
    return hashlib.blake2b(LIST_DOMAIN + b"\0" + b"".join(parts),
                           digest_size=32).digest()


def _registry_key(j: int) -> bytes:
    return _list_key(b"r", struct.pack("<Q", j))


def _log_key(log_id: bytes, i: int) -> bytes:
    return _list_key(b"l", log_id, struct.pack("<Q", i))


def _pack_records(names) -> List[bytes]:
    """Log records holding names (a name that cannot be stored in one,
    or holds a newline, is left out: list() then misses it)."""
    room = LOG_RECORD_BYTES - _REC.size
    out, cur, used = [], [], 0

    def close():
        blob = b"\n".join(cur)
        out.append((_REC.pack(b"TPLN", 1, len(cur), len(blob)) +
                    blob).ljust(LOG_RECORD_BYTES, b"\0"))

    for n in names:
        b = n.encode("utf-8")
        if b"\n" in b or len(b) > room:
            continue
        if cur and used + 1 + len(b) > room:
            close()
            cur, used = [], 0
        used += len(b) + (1 if cur else 0)
        cur.append(b)
    if cur:
        close()
    return out


def _unpack_record(raw) -> List[str]:
    magic, version, count, n = _REC.unpack_from(raw)
    if (magic != b"TPLN" or version != 1 or
            n > LOG_RECORD_BYTES - _REC.size):
        return []
    names = bytes(raw[_REC.size:_REC.size + n]).split(b"\n")
    if len(names) != count:
        return []
    out = []
    for b in names:
        try:
            out.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return out


def _plan_scan(keyfn, nbytes: int) -> Plan:
    """The values of slots keyfn(0), keyfn(1), ... read _SCAN at a time
    until a whole batch misses (holes left by evictions are skipped)."""
    out, start = [], 0
    while True:
        keys = [keyfn(start + t) for t in range(_SCAN)]
        bufs = [bytearray(nbytes) for _ in keys]
        hits = yield from _plan_get_grouped([[k] for k in keys],
                                            [[b] for b in bufs])
        got = [b for b, h in zip(bufs, hits) if h]
        if not got:
            return out
        out.extend(got)
        start += _SCAN


def _plan_list() -> Plan:
    """Every name in every registered log whose value is present."""
    ids = []
    for raw in (yield from _plan_scan(_registry_key, META_BYTES)):
        magic, version, _, log_id = _REG.unpack(bytes(raw))
        if magic == b"TPLR" and version == 1 and log_id not in ids:
            ids.append(log_id)
    names = set()
    for log_id in ids:
        recs = yield from _plan_scan(lambda i: _log_key(log_id, i),
                                     LOG_RECORD_BYTES)
        for r in recs:
            names.update(_unpack_record(r))
    names = sorted(names)
    if not names:
        return []
    found = yield from _plan_exists_each([lmcache_key(n) for n in names])
    return [n for n, f in zip(names, found) if f]


async def _ping(kv) -> int:
    """One round trip to the pool on kv: 0, or the errno of the failure
    (both RemoteConnector classes' ``ping``); a closed handle raises."""
    try:
        await kv.exists_async(bytes(tidepool.KEY_BYTES))
    except tidepool.ClosedError:
        raise
    except tidepool.PoolError as e:
        return e.errno or errno.EIO
    return 0


def _check_put(o) -> int:
    """The status of a one-key put op's outcome (raises its exception)."""
    if isinstance(o, BaseException):
        raise o
    return o[0]


class _KeyLog:
    """This connector's log of the names it stored (see above). A put
    returns once its names are in the log (or failed to go in): names
    added while a write is under way wait for it and go in the next
    record, so a burst of puts writes few records."""

    def __init__(self, kv) -> None:
        import os
        self._kv = kv
        self._id = os.urandom(16)
        self._registered = False
        self._next = 0
        self._lock = threading.Lock()
        self._pending: List[str] = []
        self._added = 0  # names added so far
        self._written = 0  # of those, the ones the log has taken care of
        self._flushing = False

    def add(self, names) -> int:
        """Queues names; returns the ticket flush() waits for."""
        with self._lock:
            self._pending.extend(names)
            self._added += len(names)
            return self._added

    def ticket(self) -> int:
        with self._lock:
            return self._added

    async def flush(self, ticket: int) -> None:
        """Returns once every name up to ticket was written (or failed
        to be: those are lost from list() only)."""
        import asyncio
        while True:
            with self._lock:
                if self._written >= ticket:
                    return
                mine = not self._flushing
                if mine:
                    self._flushing = True
                    names, self._pending = self._pending, []
                    upto = self._added
            if not mine:  # another coroutine is writing: wait for it
                await asyncio.sleep(0.0005)
                continue
            try:
                try:
                    await _run_async(self._kv, self._plan_append(names))
                except (tidepool.PoolError, ValueError):
                    pass
            finally:
                with self._lock:
                    self._flushing = False
                    self._written = max(self._written, upto)

    def flush_sync(self) -> None:
        """Writes the names queued so far in the calling thread, without
        waiting for a write under way elsewhere (close() runs in the
        event loop that write needs)."""
        with self._lock:
            names, self._pending = self._pending, []
            upto = self._added
        if names:
            try:
                _run_sync(self._kv, self._plan_append(names))
            except (tidepool.PoolError, ValueError):
                pass
        with self._lock:
            self._written = max(self._written, upto)

    def _plan_append(self, names) -> Plan:
        if not self._registered:
            j = 0
            while True:  # the first free registry slot
                n = (yield [_Op("exists", [_registry_key(j + t)
                                           for t in range(_SCAN)])])[0]
                if isinstance(n, BaseException):
                    raise n
                j += n
                if n < _SCAN:
                    break
            rec = _REG.pack(b"TPLR", 1, 0, self._id)
            while True:
                st = _check_put((yield [_Op("put", [_registry_key(j)],
                                            [rec])])[0])
                if st == 0:
                    break
                # EBUSY: another connector is putting this slot right now
                # (its reservation); it takes the slot, we the next
                if st not in (errno.EEXIST, errno.EBUSY):
                    raise tidepool.PoolError(st, tidepool.strerror(st))
                j += 1
            self._registered = True
        for rec in _pack_records(names):
            while True:
                st = _check_put((yield [_Op("put", [_log_key(self._id,
                                                              self._next)],
                                            [rec])])[0])
                self._next += 1
                if st == 0:
                    break
                if st != errno.EEXIST:
                    raise tidepool.PoolError(st, tidepool.strerror(st))


# Keys per KV call of the LMCache connector's batched get once a layout is
# known: each call starts as soon as its objects are allocated. One call
# per batch (up to BATCH_MAX keys): calls of 8..32 keys, overlapping
# LMCache's allocator with the transfer, measured 2-5% slower on a loaded
# 2-vCPU host, where a same-host get is a CPU copy that competes with the
# allocator for the same cores (docs/bench/python.md, "Engine connectors").
_OVERLAP_KEYS = 1 << 30


class _LMCacheConnector(_RemoteConnectorBase):
    """The logic of ``TidepoolLMCacheConnector``, LMCache's
    ``RemoteConnector`` on a tidepool KV handle (see that class)."""

    def __init__(self, context, settings: dict) -> None:
        # None in LMCache's scheduler role, which only looks keys up
        backend = context.local_cpu_backend
        if not callable(getattr(backend, "allocate", None)):
            backend = None
        piece_bytes = settings.get("piece_bytes", PIECE_BYTES)
        if piece_bytes < 0 or piece_bytes > tidepool.VALUE_MAX:
            raise ValueError("tidepool.piece_bytes must be 0 .. %d, not %d" %
                             (tidepool.VALUE_MAX, piece_bytes))
        self._allocator = backend
        self._piece_bytes = piece_bytes
        self._pool, self._owns_pool, self._kv = _open_kv(
            None, settings["addr"], settings.get("tenant"),
            settings.get("secret_file"), settings.get("replicas", 1),
            settings.get("nthreads", 0), settings.get("timeout_ms", 0),
            settings.get("client_name"))
        self.loop = context.loop
        self._log = _KeyLog(self._kv)
        # (meta bytes, _Meta) of the largest value stored or read with a
        # dtype and shape (the latest of that size): gets guess that a
        # key's value looks like it (LMCache's full chunks do; only a
        # prompt's last chunk is smaller) and read meta and pieces at once
        self._guess: Optional[tuple] = None
        self._specs: dict = {}  # layout -> _alloc_spec
        self._batched_allocate = True  # until it turns out unusable
        # keys per KV call of a guessed batched get (_get_objs)
        self._overlap_keys = _OVERLAP_KEYS
        self._closed = False

    # -- RemoteConnector's abstract methods ----------------------------

    async def get(self, key: Any) -> Optional[Any]:
        """The MemoryObj of key, allocated from LMCache's local CPU
        backend and read into directly; None on a miss (what was
        allocated for it is freed)."""
        return (await self.batched_get([key]))[0]

    async def put(self, key: Any, memory_obj: Any) -> None:
        """Stores memory_obj's bytes under key. Leaves its reference
        count alone: LMCache's wrapper drops the reference once this
        returns. Raises ValueError for an object this connector cannot
        store, ``tidepool.PoolError`` when it was not stored."""
        await self.batched_put([key], [memory_obj])

    async def list(self) -> List[str]:
        """The key strings stored by any tidepool LMCache connector of
        the tenant whose values are still present, sorted (the key log
        above: best effort, never a key that is not there)."""
        self._check_open()
        await self._log.flush(self._log.ticket())
        return await _run_async(self._kv, _plan_list())

    # -- optional parts --------------------------------------------------

    def support_batched_get(self) -> bool:
        """True: metas and pieces in one round trip once a value of the
        layout was seen (``_get_objs``), else metas, then pieces."""
        return True

    async def batched_get(self, keys: Sequence[Any]) -> List[Optional[Any]]:
        """The MemoryObjs of keys (None for each miss), each allocated
        from the local CPU backend and read into in place."""
        names = [_key_string(k) for k in keys]
        self._check_open()
        if not names:
            return []
        held = []  # allocated here: freed again on a miss or an error
        try:
            objs = await self._get_objs([lmcache_key(n) for n in names],
                                        held)
        except BaseException:
            for o in held:
                o.ref_count_down()
            raise
        return objs

    def support_batched_put(self) -> bool:
        """False, on purpose: LMCache's wrapper drops the references of a
        batched put only in some versions (instrumented_connector.py),
        while it always does after put(); RemoteBackend then submits one
        put per key, all in flight at once."""
        return False

    async def batched_put(self, keys: Sequence[Any],
                          memory_objs: Sequence[Any]) -> None:
        """Stores all objects in one KV call; reference counts untouched.
        Raises as ``put``."""
        names = [_key_string(k) for k in keys]
        bases, metas, views = self._prepare_put(names, memory_objs)
        if not bases:
            return
        for meta in metas:
            self._learn(meta)
        stored, first = await _run_async(
            self._kv, _plan_put(bases, metas, views, self._piece_bytes))
        await self._log.flush(self._log.add([n for n, s in
                                             zip(names, stored) if s]))
        if first is not None:
            raise tidepool.PoolError(first[1], _fail_text(first))

    async def batched_get_non_blocking(self, lookup_id: str,
                                       keys: Sequence[Any]) -> List[Any]:
        """The MemoryObjs of the leading keys up to the first miss; hits
        after it are freed again (LMCache's contract)."""
        out, missed = [], False
        for o in await self.batched_get(keys):
            if o is None:
                missed = True
            elif missed:
                o.ref_count_down()
            else:
                out.append(o)
        return out

    def batched_contains(self, keys: Sequence[Any], *older) -> Any:
        """How many leading keys are present (LMCache's newer contract);
        called with LMCache's older second argument
        (``stop_after_first_not_exits``), per key True for that prefix."""
        bases = [self._base(k) for k in keys]
        n = _run_sync(self._kv, _plan_contains_prefix(bases)) if bases else 0
        if older:
            return [i < n for i in range(len(bases))]
        return n

    def close_sync(self) -> None:
        """``close`` outside asyncio: writes the key log's last names,
        closes the KV handle and the Pool. Idempotent."""
        if self._closed:
            return
        try:
            self._log.flush_sync()
        finally:
            self._closed = True
            self._close_kv()

    def __repr__(self) -> str:
        return "<TidepoolLMCacheConnector %s>" % self._pool.addr

    # -- internals -----------------------------------------------------

    def _prepare_put(self, names, objs):
        """(bases, metas, byte views) of MemoryObjs; ValueError (nothing
        stored) if one cannot be stored."""
        self._check_open()
        objs = list(objs)
        if len(names) != len(objs):
            raise ValueError("%d keys but %d memory objects" %
                             (len(names), len(objs)))
        torch = _torch()
        bases, metas, views = [], [], []
        for i, (name, o) in enumerate(zip(names, objs)):
            dtype = o.get_dtype()
            if dtype is None:
                raise ValueError("memory object %d has no dtype (a "
                                 "serialized buffer): use remote_serde "
                                 "naive" % i)
            shape = tuple(o.get_shape())
            if not 1 <= len(shape) <= _MAX_DIMS:
                raise ValueError("memory object %d: %d dims (1 .. %d)" %
                                 (i, len(shape), _MAX_DIMS))
            view = _byte_view(o.byte_array, "memory object %d" % i, False)
            n = len(view)
            numel = 1
            for d in shape:
                numel *= d
            if n != numel * _itemsize(dtype):
                raise ValueError("memory object %d: %d bytes for shape %s "
                                 "of %s" % (i, n, list(shape), dtype))
            if _piece_size(n, self._piece_bytes) > tidepool.VALUE_MAX:
                raise ValueError("memory object %d: %d bytes in one piece "
                                 "is over the value limit (set "
                                 "tidepool.piece_bytes)" % (i, n))
            bases.append(lmcache_key(name))
            metas.append(_meta_pack(n, self._piece_bytes, _dtype_code(dtype),
                                    shape, _fmt_code(o.get_memory_format())))
            views.append(view)
        return bases, metas, views

    def _learn(self, raw: bytes, m: Optional["_Meta"] = None) -> None:
        """Takes raw (a meta value) as the next gets' guess when it
        describes a value LMCache can hold (a dtype and a shape) at
        least as large as the guess's."""
        if m is None:
            m = _Meta.parse(raw)
        if m is None or not m.dtype_code or not m.shape:
            return
        g = self._guess
        if g is None or m.nbytes >= g[1].nbytes:
            self._guess = (bytes(raw), m)

    async def _get_objs(self, bases: List[bytes], held: list) -> list:
        """The MemoryObjs of bases (None for a miss), read in place;
        misses freed. held: every object allocated and not yet freed
        (for the caller to free if this raises).

        With a guess (the largest value stored or read before: LMCache's
        chunks share their size and shape, but for a last partial one), one
        round trip: every meta, and into an object allocated per key
        for a value like the guess, its pieces. The keys go in calls of
        ``_overlap_keys``, each started as soon as its objects are
        allocated, so that LMCache's allocator and the byte views of the
        next keys run while the previous keys' bytes arrive; a call's
        objects come from one ``batched_allocate`` (``_allocate_many``). A
        key whose
        meta is the guess's and whose pieces all hit is read; one with
        another meta is freed and read as without a guess (its pieces'
        keys hold the value's length, so the guessed ones missed or held
        a value of the same length); a missing meta is a miss. Without a
        guess: the metas, then the pieces of each hit."""
        torch = _torch()
        guess = self._guess
        if guess is None:
            return await _run_async(self._kv,
                                    self._plan_by_metas(bases, held, torch))
        graw, gm = guess
        n = len(bases)
        spec = self._alloc_spec(gm, torch)
        p, nbytes = gm.piece_bytes, gm.nbytes
        per = -(-nbytes // p)
        whole = per == 1  # one piece: the object's view itself
        step = max(1, min(self._overlap_keys,
                          tidepool.BATCH_MAX // (per + 1)))
        raws = [bytearray(META_BYTES) for _ in bases]
        objs: List[Any] = []
        started = []  # KVFutures, or the exception a start raised
        keys: List[bytes] = []
        bufs: list = []
        kv = self._kv
        try:
            for s0 in range(0, n, step):
                part = bases[s0:s0 + step]
                for j, o in enumerate(self._allocate_many(gm, torch, spec,
                                                          len(part), held)):
                    b = part[j]
                    objs.append(o)
                    keys.append(b)
                    bufs.append(raws[s0 + j])
                    if o is None:
                        continue
                    view = _obj_view(o, nbytes, "allocated memory object")
                    keys += _piece_keys(b, nbytes, p)
                    if whole:
                        bufs.append(view)
                    else:
                        bufs.extend(view[off:off + p]
                                    for off in range(0, nbytes, p))
                try:
                    started.append(_start(kv, "get", keys, bufs))
                except (tidepool.PoolError, ValueError) as e:
                    started.append(e)
                keys, bufs = [], []
        finally:
            # every call started writes into held objects: wait for all
            # before anything is freed (also when an allocation raised)
            r: list = []
            err = None
            for f in started:
                if not isinstance(f, BaseException):
                    try:
                        f = await f
                    except (tidepool.PoolError, ValueError) as e:
                        f = e
                if isinstance(f, BaseException):
                    if err is None or _is_size_error(err):
                        err = f
                else:
                    r.extend(f)
        if err is not None and _is_size_error(err):
            # a value of another length at one of these keys: read as
            # without a guess (per key where the batch fails so)
            for o in objs:
                if o is not None:
                    held.remove(o)
                    o.ref_count_down()
            return await _run_async(self._kv,
                                    self._plan_by_metas(bases, held, torch))
        if err is not None:
            raise err
        out: List[Any] = [None] * n
        redo, redo_metas = [], []
        pos = 0
        for i, o in enumerate(objs):
            meta_hit = r[pos]
            pos += 1
            got = False
            if o is not None:
                got = all(r[pos:pos + per])
                pos += per
            if got and meta_hit and raws[i] == graw:
                out[i] = o
                continue
            if o is not None:
                held.remove(o)
                o.ref_count_down()
            m = _Meta.parse(raws[i]) if meta_hit else None
            if m is not None:
                redo.append(i)
                redo_metas.append(m)
        if redo:
            objs2 = await _run_async(self._kv, self._plan_read_objs(
                [bases[i] for i in redo], redo_metas, held, torch))
            for i, o in zip(redo, objs2):
                out[i] = o
        held.clear()
        return out

    def _plan_by_metas(self, bases: List[bytes], held: list, torch) -> Plan:
        """The MemoryObjs of bases without a guess: the metas, then the
        pieces of each hit."""
        metas = yield from _plan_metas(bases)
        return (yield from self._plan_read_objs(bases, metas, held, torch))

    def _plan_read_objs(self, bases: List[bytes], metas: list, held: list,
                        torch) -> Plan:
        """An allocation per meta and every piece read into it (one
        round trip); misses freed."""
        objs, groups, bufs = [], [], []
        for b, m in zip(bases, metas):
            o = None
            if m is not None and m.dtype_code and m.shape:
                o = self._allocate(m, torch)
            if o is None:
                objs.append(None)
                groups.append([])
                bufs.append([])
                continue
            held.append(o)
            view = _obj_view(o, m.nbytes, "allocated memory object")
            p = m.piece_bytes
            objs.append(o)
            groups.append(m.piece_keys(b))
            bufs.append([view[off:off + p] for off in range(0, m.nbytes, p)])
        hits = yield from _plan_get_grouped(groups, bufs)
        out = []
        for o, h, m in zip(objs, hits, metas):
            if o is not None and not h:
                held.remove(o)
                o.ref_count_down()
                o = None
            elif o is not None:
                self._learn(_meta_pack(m.nbytes, m.piece_bytes, m.dtype_code,
                                       m.shape, m.fmt_code), m)
            out.append(o)
        return out

    def _alloc_spec(self, m: "_Meta", torch) -> Optional[tuple]:
        """(torch.Size, dtype, MemoryFormat) to allocate the value of m
        with, or None when LMCache cannot hold it (cached per layout)."""
        key = (m.dtype_code, m.shape, m.fmt_code, m.nbytes)
        spec = self._specs.get(key, False)
        if spec is not False:
            return spec
        dtype = getattr(torch, _DTYPE_NAMES[m.dtype_code], None)
        spec = None
        if dtype is not None:
            numel = 1
            for d in m.shape:
                numel *= d
            if numel * _itemsize(dtype) == m.nbytes:
                spec = (torch.Size(m.shape), dtype,
                        _lmcache_format(m.fmt_code))
        if len(self._specs) >= 64:
            self._specs.clear()
        self._specs[key] = spec
        return spec

    def _allocate_many(self, m: "_Meta", torch, spec: Any, k: int,
                       held: list) -> list:
        """k MemoryObjs (None where LMCache has no memory) for values
        like m's, each appended to held. spec: ``_alloc_spec(m)``.

        Two or more come from the local CPU backend's
        ``batched_allocate`` when it has one: one free block for all,
        without eviction or LMCache's busy wait (a quarter of the time
        of k ``allocate`` calls, most of a get's own work before its
        transfer). When that finds no block, or its objects are not of
        m's size (an older LMCache cuts the block at its alignment), they
        are freed and each key gets its own ``allocate`` as before
        (which may evict from LMCache's hot cache); so do all later
        gets when it does not take these arguments (TypeError)."""
        if spec is None:
            return [None] * k
        batched = (getattr(self._allocator, "batched_allocate", None)
                   if self._batched_allocate else None)
        if k > 1 and batched is not None:
            try:
                got = batched(spec[0], spec[1], k, spec[2], eviction=False,
                              busy_loop=False)
            except TypeError:
                # a batched_allocate of another signature (before it
                # allocated anything): allocate per key from now on
                self._batched_allocate = False
                got = None
            if got is not None:
                got = list(got)
                held.extend(got)
                if len(got) == k and all(o.get_size() == m.nbytes
                                         for o in got):
                    return got
                del held[len(held) - len(got):]
                for o in got:
                    o.ref_count_down()
        out = []
        for _ in range(k):
            o = self._allocate(m, torch, spec)
            if o is not None:
                held.append(o)
            out.append(o)
        return out

    def _allocate(self, m: "_Meta", torch,
                  spec: Any = False) -> Optional[Any]:
        """A MemoryObj for the value of m from LMCache's allocator, or
        None (no memory, or a value LMCache cannot hold: a miss). spec:
        ``_alloc_spec(m)`` when the caller has it."""
        if spec is False:
            spec = self._alloc_spec(m, torch)
        if spec is None:
            return None
        if self._allocator is None:
            raise ValueError("tidepool: LMCache gave this connector no local "
                             "CPU backend to allocate from (its scheduler "
                             "role only looks keys up)")
        o = self._allocator.allocate(*spec)
        if o is None:
            return None
        if o.get_size() != m.nbytes:
            o.ref_count_down()
            raise ValueError("LMCache allocated %d bytes for %d" %
                             (o.get_size(), m.nbytes))
        return o


def _fmt_code(fmt: Any) -> int:
    """The meta code of an LMCache MemoryFormat (0: none or unknown)."""
    name = getattr(fmt, "name", None)
    for code, n in _FMT_NAMES.items():
        if n == name:
            return code
    return 0


_ITEMSIZES: dict = {}


def _itemsize(dtype) -> int:
    """Bytes per element of a torch dtype."""
    size = _ITEMSIZES.get(dtype)
    if size is None:
        size = getattr(dtype, "itemsize", None)  # torch >= 2.1
        if size is None:
            size = _torch().empty((), dtype=dtype).element_size()
        _ITEMSIZES[dtype] = size
    return size


_FORMATS: dict = {}


def _lmcache_format(code: int) -> Any:
    """The LMCache MemoryFormat of a meta code, or None (LMCache's
    allocator then picks its default)."""
    try:
        return _FORMATS[code]
    except KeyError:
        pass
    from lmcache.v1.memory_management import MemoryFormat
    name = _FMT_NAMES.get(code)
    fmt = getattr(MemoryFormat, name, None) if name else None
    _FORMATS[code] = fmt
    return fmt


class _LMCacheAdapter:
    """The logic of ``TidepoolConnectorAdapter`` (see that class)."""

    def can_parse(self, url: str) -> bool:
        """tidepool://HOST:PORT, or LMCache's plugin://tidepool[.NAME]."""
        if not isinstance(url, str):
            return False
        if url.startswith(ADAPTER_SCHEME):
            return True
        if url.startswith("plugin://"):
            name = url[len("plugin://"):]
            return name.split(".", 1)[0] == PLUGIN_TYPE
        return False

    def create_connector(self, context) -> Any:
        """A ``TidepoolLMCacheConnector`` for LMCache's ConnectorContext.
        Raises ValueError for a configuration it cannot use."""
        cls = _lmcache_classes()["TidepoolLMCacheConnector"]
        return cls(context, _settings(context))


def _lmcache_classes() -> dict:
    """Builds (once) the classes LMCache loads: subclasses of its own
    ``ConnectorAdapter`` and ``RemoteConnector``. Raises ImportError
    naming what is missing when LMCache is not importable or is a
    version whose remote-backend interface this module does not
    implement."""
    global _LMC_CLASSES
    with _LMC_LOCK:
        if _LMC_CLASSES is not None:
            return _LMC_CLASSES
        _LMC_CLASSES = _build_lmcache_classes()
        return _LMC_CLASSES


_SUPPORTED = ("LMCache's v1 remote backend with remote storage plugins "
              "(docs/engines.md, \"LMCache\")")


def _build_lmcache_classes() -> dict:
    try:
        import lmcache
        from lmcache.v1.storage_backend.connector import ConnectorAdapter
        from lmcache.v1.storage_backend.connector.base_connector import (
            RemoteConnector)
        from lmcache.v1.memory_management import MemoryFormat
    except ImportError as e:
        raise ImportError("tidepool: TidepoolConnectorAdapter needs %s, "
                          "which is not importable here: %s" %
                          (_SUPPORTED, e)) from e
    version = getattr(lmcache, "__version__", "unknown")
    missing = [n for n in ("create_connector", "can_parse")
               if not callable(getattr(ConnectorAdapter, n, None))]
    extra = set(getattr(RemoteConnector, "__abstractmethods__", ())) - \
        _REMOTE_ABSTRACT
    if missing or extra or not hasattr(MemoryFormat, "KV_2LTD"):
        raise ImportError(
            "tidepool: LMCache %s is not supported by "
            "TidepoolConnectorAdapter (%s): %s" % (version, _SUPPORTED,
                                                   "; ".join(
                ["ConnectorAdapter lacks " + n for n in missing] +
                ["RemoteConnector requires %s()" % n for n in sorted(extra)] +
                (["MemoryFormat lacks KV_2LTD"]
                 if not hasattr(MemoryFormat, "KV_2LTD") else []))))
    base_takes_args = RemoteConnector.__init__ is not object.__init__

    def connector_init(self, context, settings):
        # LMCache's newer RemoteConnector takes (config, metadata); the
        # older one none (its manager calls init_chunk_meta afterwards)
        if base_takes_args:
            RemoteConnector.__init__(self, context.config, context.metadata)
        _LMCacheConnector.__init__(self, context, settings)

    connector = type("TidepoolLMCacheConnector",
                     (_LMCacheConnector, RemoteConnector), {
                         "__init__": connector_init,
                         "__module__": __name__,
                         "__doc__": _CONNECTOR_DOC})

    def adapter_init(self):
        ConnectorAdapter.__init__(self, ADAPTER_SCHEME)

    adapter = type("TidepoolConnectorAdapter",
                   (_LMCacheAdapter, ConnectorAdapter), {
                       "__init__": adapter_init,
                       "__module__": __name__,
                       "__doc__": _ADAPTER_DOC})
    for cls in (connector, adapter):
        if cls.__abstractmethods__:
            raise ImportError(
                "tidepool: LMCache %s is not supported: %s leaves %s "
                "abstract (%s)" % (version, cls.__name__,
                                   ", ".join(sorted(cls.__abstractmethods__)),
                                   _SUPPORTED))
    return {"TidepoolLMCacheConnector": connector,
            "TidepoolConnectorAdapter": adapter}


_CONNECTOR_DOC = """LMCache's ``RemoteConnector`` on tidepool's KV tier.

Created by ``TidepoolConnectorAdapter`` from LMCache's ConnectorContext
(never by hand). Values are LMCache ``MemoryObj``s stored in the layout of
the module docstring (meta value with dtype, shape and memory format;
1 MiB pieces); ``get`` allocates the MemoryObj from the local CPU backend
LMCache passes and reads the pieces straight into its bytes (no copy),
returning None on a miss after freeing what it allocated; ``put`` stores
the object's bytes and never changes its reference count (LMCache's
wrapper drops the reference after ``put``). ``list`` names the keys any
tidepool LMCache connector of the tenant stored that are still present
(the key log). Thread-safe; the coroutines run in LMCache's event loop.
"""

_ADAPTER_DOC = """LMCache's ``ConnectorAdapter`` for tidepool.

LMCache constructs it with no arguments from its configuration::

    remote_url: tidepool://HOST:PORT
    remote_storage_plugins: [tidepool]
    extra_config:
      remote_storage_plugin.tidepool.module_path: tidepool.connectors.lmcache
      remote_storage_plugin.tidepool.class_name: TidepoolConnectorAdapter
      tidepool.tenant: TENANT              # a cluster's tenant (optional)
      tidepool.secret_file: /path/secret   # its secret (optional)

It parses ``tidepool://HOST:PORT`` and ``plugin://tidepool[.NAME]`` and
creates a ``TidepoolLMCacheConnector`` whose settings come from the
configuration (docs/engines.md, "LMCache").
"""


def __getattr__(name: str) -> Any:
    """``TidepoolConnectorAdapter`` and ``TidepoolLMCacheConnector``,
    built from LMCache's classes on first use (ImportError when LMCache
    is missing or unsupported)."""
    if name in ("TidepoolConnectorAdapter", "TidepoolLMCacheConnector"):
        return _lmcache_classes()[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
