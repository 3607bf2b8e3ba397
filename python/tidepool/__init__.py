"""tidepool: pooled DRAM for LLM inference, from Python.

A thin layer over libpool (the C extension ``_tidepool``): sessions
(:class:`Pool`), raw regions, the shared KV-block tier (:class:`KV`) with
futures that work with and without asyncio, GPU prefetch engines and
pooled tensors (:func:`empty`). Keys, hashing and the wire are libpool's;
nothing of them is re-implemented here. See docs/python.md.

Every blocking call releases the GIL. Errors are :class:`PoolError`
(an :class:`OSError`) subclasses carrying errno and libpool's text;
wrong arguments raise :class:`TypeError` / :class:`ValueError`; a closed
handle raises :class:`ClosedError`; a handle used in a fork()ed child
raises :class:`ForkError`.
"""
from __future__ import annotations

import asyncio
import errno as _errno
import os
import sys
import threading
from typing import Any, Callable, List, Optional, Sequence, Union

try:  # installed: the extension lives in the package
    from . import _tidepool as _c
except ImportError:  # a build tree: build/<cfg>/python on sys.path
    import _tidepool as _c  # type: ignore[no-redef]

    # one name for the extension either way, for the import below
    sys.modules[__name__ + "._tidepool"] = _c

# the extension's exceptions, types and limits, as the package's own
from ._tidepool import (  # noqa: E402
    BATCH_MAX, CHUNK_TOKENS, GPU, KEY_BYTES, VALUE_MAX, ClosedError,
    ForkError, GPUStream, Mapping, PoolCapacityError, PoolConnectionError,
    PoolError, PoolFileNotFoundError, PoolPermissionError, PoolTimeoutError,
    Region)

__version__ = "0.4.0"

__all__ = [
    "Pool", "KV", "KVFuture", "Region", "Mapping", "GPU", "GPUStream",
    "PoolError", "PoolConnectionError", "PoolPermissionError",
    "PoolCapacityError", "PoolTimeoutError", "PoolFileNotFoundError",
    "ClosedError", "ForkError", "prefix_keys", "strerror", "empty",
    "empty_numpy", "default_pool", "KEY_BYTES", "VALUE_MAX", "BATCH_MAX",
    "CHUNK_TOKENS",
]


def strerror(err: int) -> str:
    """libpool's text for an errno value (positive or negative)."""
    return _c.strerror(err)


def _tokens(tokens: Any) -> Any:
    # torch tensors have no buffer protocol: hand numpy a CPU view
    if hasattr(tokens, "detach") and hasattr(tokens, "numpy"):
        t = tokens.detach()
        if t.dim() != 1:
            raise ValueError("tidepool: tokens must be one-dimensional, "
                             f"not of shape {tuple(t.shape)}")
        if t.is_floating_point() or t.is_complex():
            raise TypeError(f"tidepool: tokens must be integers, not {t.dtype}")
        return t.cpu().contiguous().numpy()
    ndim = getattr(tokens, "ndim", 1)
    if ndim != 1:
        raise ValueError("tidepool: tokens must be one-dimensional, not "
                         f"{ndim}-dimensional")
    return tokens


def prefix_keys(tokens: Any, tenant: str, model: str,
                chunk_tokens: int = CHUNK_TOKENS) -> List[bytes]:
    """The chained prefix keys of a token sequence (pool_kv_prefix_keys,
    docs/kv.md "Keys"): one 32-byte key per whole chunk of chunk_tokens
    tokens, the same in every process for the same (tenant, model,
    prefix). tokens: a list of ints or a 1-D numpy/torch integer array,
    values 0 .. 2**32-1."""
    return _c.prefix_keys(_tokens(tokens), tenant, model, chunk_tokens)


class KVFuture:
    """One asynchronous KV operation (``KV.*_async``).

    ``result(timeout)`` waits with the GIL released; ``await future``
    waits in asyncio through the handle's eventfd. Done-callbacks run in
    the thread that completes the future: the one in ``result()``, or
    the one running ``KV.poll()`` (asyncio's reader). A started operation
    cannot be cancelled: it runs to its end (every libpool call is
    bounded by the session timeout).
    """

    __slots__ = ("_kv", "_op", "_done", "_result", "_exc", "_callbacks",
                 "_lock", "_aio")

    def __init__(self, kv: "KV", op: Any) -> None:
        self._kv = kv
        self._op = op
        self._done = False
        self._result: Any = None
        self._exc: Optional[BaseException] = None
        self._callbacks: List[Callable[["KVFuture"], None]] = []
        self._lock = threading.Lock()
        self._aio: List[asyncio.Future] = []

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<tidepool.KVFuture {self._op.kind} {state}>"

    def _settle(self) -> None:
        # the op is complete: fetch its result once, then run callbacks
        with self._lock:
            if self._done:
                return
            try:
                self._result = self._op.result()
            except BaseException as e:  # noqa: BLE001 - stored for result()
                self._exc = e
            self._done = True
            self._op = None
            callbacks, self._callbacks = self._callbacks, []
            aio, self._aio = self._aio, []
        self._kv._forget(self)
        if aio:
            running = asyncio._get_running_loop()
        for fut in aio:
            loop = fut.get_loop()
            if loop is running:
                # settled by the loop's own reader (KV.poll): resolve now,
                # not through the loop's self-pipe and another turn
                self._resolve_aio(fut)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(self._resolve_aio, fut)
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # noqa: BLE001 - like concurrent.futures
                pass

    def _resolve_aio(self, fut: asyncio.Future) -> None:
        if fut.done():
            return
        if self._exc is not None:
            fut.set_exception(self._exc)
        else:
            fut.set_result(self._result)

    def _check(self) -> bool:
        # non-blocking: settle when libpool says the op is complete
        op = self._op
        if self._done:
            return True
        if op is not None and op.test():
            self._settle()
        return self._done

    def done(self) -> bool:
        """True once the operation has completed."""
        return self._check()

    def running(self) -> bool:
        """True while the operation runs."""
        return not self._check()

    def cancel(self) -> bool:
        """Always False: a started operation runs to its end."""
        return False

    def cancelled(self) -> bool:
        """Always False."""
        return False

    def _wait(self, timeout: Optional[float]) -> None:
        if self._done:
            return
        if timeout is not None and timeout < 0:
            raise ValueError("tidepool: timeout must be >= 0 or None")
        ms = -1 if timeout is None else int(timeout * 1000)
        op = self._op
        if op is not None and op.wait(ms):
            self._settle()
        if not self._done:
            raise TimeoutError(f"tidepool: KV {op.kind} still running "
                               f"after {timeout} s")

    def result(self, timeout: Optional[float] = None) -> Any:
        """Waits up to timeout seconds (None: until done) and returns the
        result of the synchronous call (put: list of errno, get_into:
        list of hits, exists: prefix length, delete/pin/unpin: list of
        bools), or raises its error. TimeoutError while it still runs."""
        self._wait(timeout)
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self, timeout: Optional[float] = None
                  ) -> Optional[BaseException]:
        """The error the operation ended with, or None."""
        self._wait(timeout)
        return self._exc

    def add_done_callback(self, fn: Callable[["KVFuture"], None]) -> None:
        """Calls fn(self) once done (at once when already done)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        fn(self)

    def __await__(self):
        if self._check():
            return self.result()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            pending = not self._done
            if pending:
                self._aio.append(fut)
        if not pending:
            return self.result()
        self._kv._watch(loop)
        self._check()  # completed before the reader was in place
        return (yield from fut.__await__())


class KV:
    """A handle on the KV tier (``Pool.kv()``): batch put/get/exists/
    delete/pin of values under 32-byte keys, shared by every process of
    the tenant. The contract (docs/kv.md): a get returns exactly the
    committed bytes or a miss, never wrong bytes.

    Values are C-contiguous CPU buffers (torch tensors through their
    data pointer, no copy; numpy arrays; bytearray; memoryview), or, on
    the GPU path, CUDA tensors. Thread-safe; blocking calls release the
    GIL.
    """

    def __init__(self, pool: "Pool", ckv: Any) -> None:
        self._pool = pool
        self._c = ckv
        self._pending: "set[KVFuture]" = set()
        self._plock = threading.Lock()
        self._loops: "dict[int, asyncio.AbstractEventLoop]" = {}

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<tidepool.KV {state} on {self._pool.addr}>"

    def __enter__(self) -> "KV":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once the handle (or its pool) is closed."""
        return self._c.closed

    prefix_keys = staticmethod(prefix_keys)

    def exists(self, keys: Any) -> int:
        """The length of the longest prefix of keys whose every key is
        present (a present key may still miss later: evicted)."""
        return self._c.exists(keys)

    def put(self, keys: Any, values: Sequence[Any], *, stream: Any = None,
            gpu: Any = None) -> List[int]:
        """Stores values[i] under keys[i]. Per key: 0 stored,
        errno.EEXIST already present (a key names one value: counts as
        stored), else the errno why not (ENOSPC, EBUSY, ENOTCONN,
        EMSGSIZE, ETIMEDOUT...). CUDA tensors (or a stream / gpu given):
        copied out on the stream after its earlier work, then stored;
        returns once stored."""
        return self._c.put(keys, values, stream=stream, gpu=gpu)

    def get_into(self, keys: Any, bufs: Sequence[Any], *,
                 stream: Any = None, gpu: Any = None,
                 exact: bool = True) -> List[Any]:
        """Reads keys[i] into bufs[i]. Per key: True hit (bufs[i] holds
        exactly the committed value), False miss (its bytes are then
        unspecified). A hit whose value is not exactly len(bufs[i])
        bytes raises ValueError (after the call; nothing is lost).

        exact=False: per key the value's length in bytes, or -1 for a
        miss. A length up to len(bufs[i]) is a hit whose bytes fill the
        start of bufs[i]; a larger one means the buffer was too small
        (its bytes are unspecified): bring a buffer of that size.

        CUDA tensors (or a stream / gpu given): the copies to the device
        are enqueued on the stream and the call returns; work enqueued on
        that stream afterwards sees the bytes."""
        return self._c.get_into(keys, bufs, stream=stream, gpu=gpu,
                                exact=exact)

    def delete(self, keys: Any) -> List[bool]:
        """Deletes keys; per key True when it was deleted."""
        return self._c.delete(keys)

    def pin(self, keys: Any) -> List[bool]:
        """Pins keys against eviction (pins belong to the tenant)."""
        return self._c.pin(keys)

    def unpin(self, keys: Any) -> List[bool]:
        """Removes one pin of each key."""
        return self._c.unpin(keys)

    def clear(self) -> None:
        """Empties the tenant's store on every donor: every key of the
        tenant's, whoever stored it, pinned ones too; other tenants'
        keys stay. Raises PoolError (EOPNOTSUPP: a memd older than
        protocol 4) when a donor could not; the others are still asked.
        Releases the GIL."""
        self._c.clear()

    def _future(self, op: Any) -> KVFuture:
        f = KVFuture(self, op)
        with self._plock:
            self._pending.add(f)
        return f

    def _forget(self, f: KVFuture) -> None:
        with self._plock:
            self._pending.discard(f)

    def put_async(self, keys: Any, values: Sequence[Any]) -> KVFuture:
        """put() in the background; the buffers must stay untouched
        until the future is done (they are kept alive until then)."""
        return self._future(self._c.put_async(keys, values))

    def get_into_async(self, keys: Any, bufs: Sequence[Any], *,
                       exact: bool = True) -> KVFuture:
        """get_into() in the background (CPU buffers)."""
        return self._future(self._c.get_into_async(keys, bufs, exact=exact))

    def exists_async(self, keys: Any) -> KVFuture:
        """exists() in the background."""
        return self._future(self._c.exists_async(keys))

    def delete_async(self, keys: Any) -> KVFuture:
        """delete() in the background."""
        return self._future(self._c.delete_async(keys))

    def pin_async(self, keys: Any) -> KVFuture:
        """pin() in the background."""
        return self._future(self._c.pin_async(keys))

    def unpin_async(self, keys: Any) -> KVFuture:
        """unpin() in the background."""
        return self._future(self._c.unpin_async(keys))

    def eventfd(self) -> int:
        """The completion eventfd: readable once an asynchronous op has
        completed since it was last read (owned by the handle)."""
        return self._c.eventfd()

    def poll(self) -> int:
        """Clears the eventfd and completes every future whose op has
        finished (running their callbacks); returns how many. Never
        blocks."""
        if self._c.closed:
            fd = -1
        else:
            fd = self._c.eventfd()
        if fd >= 0:
            try:
                os.read(fd, 8)
            except BlockingIOError:
                pass
        with self._plock:
            pending = list(self._pending)
        n = 0
        for f in pending:
            if f._check():
                n += 1
        return n

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        # one eventfd reader per event loop, for the loop's life
        for k, lp in list(self._loops.items()):
            if lp.is_closed():
                del self._loops[k]
        if id(loop) in self._loops:
            return
        loop.add_reader(self.eventfd(), self.poll)
        self._loops[id(loop)] = loop

    def stats(self) -> dict:
        """The handle's counters: puts, put_bytes, gets, hits, get_bytes,
        bad_reads, donor_refreshes, ndonors, replica_hits."""
        return self._c.stats()

    @property
    def npending(self) -> int:
        """Asynchronous operations not yet complete."""
        return self._c.npending

    def close(self) -> None:
        """Waits for the operations in flight, then closes the handle;
        their futures then raise ClosedError unless already done."""
        for loop in list(self._loops.values()):
            try:
                if not loop.is_closed():
                    loop.remove_reader(self._c.eventfd())
            except (ValueError, RuntimeError, OSError):
                pass
        self._loops.clear()
        self._c.close()
        self.poll()


class Pool(_c.Pool):
    """A session with a tidepool pool (pool_connect).

    Pool(addr=None, tenant=None, secret_file=None, *, timeout_ms=0,
    client_name=None, max_inflight=0): without a tenant, a standalone
    session with the memd at addr; with a tenant (and its secret file),
    a cluster session at the pool's registry. None takes LIBPOOL_ADDR,
    LIBPOOL_TENANT and LIBPOOL_SECRET_FILE, as in C. A context manager;
    close() is idempotent.
    """

    def __init__(self, addr: Optional[str] = None,
                 tenant: Optional[str] = None,
                 secret_file: Optional[Union[str, os.PathLike]] = None, *,
                 timeout_ms: int = 0, client_name: Optional[str] = None,
                 max_inflight: int = 0) -> None:
        if tenant is None:
            tenant = os.environ.get("LIBPOOL_TENANT") or None
        if secret_file is None and tenant:
            secret_file = os.environ.get("LIBPOOL_SECRET_FILE") or None
        if tenant and secret_file is None:
            raise ValueError(f"tidepool: tenant {tenant!r} needs a "
                             "secret_file (or LIBPOOL_SECRET_FILE)")
        self.tenant = tenant
        super().__init__(addr, tenant, secret_file, timeout_ms=timeout_ms,
                         client_name=client_name, max_inflight=max_inflight)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        who = f" tenant={self.tenant}" if self.tenant else ""
        return f"<tidepool.Pool {self.addr}{who} {state}>"

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def kv(self, replicas: int = 1, *, nthreads: int = 0,
           refresh_ms: int = 0, lease_ms: int = 0,
           prefill_tokens_per_s: int = 0, bytes_per_token: int = 0) -> KV:
        """Opens a KV handle (pool_kv_open): replicas 1 or 2 (cluster
        sessions with two donors or more keep a second copy).
        prefill_tokens_per_s and bytes_per_token (both or neither) tell
        memd the client's model, the cost model of its capacity reports
        ("recompute seconds saved", docs/capacity.md); 0 and 0 take
        LIBPOOL_KV_PREFILL_TOKENS_PER_S / LIBPOOL_KV_BYTES_PER_TOKEN, and
        without those memd uses the tenant's or memd.conf's model."""
        return KV(self, super().kv(
            replicas, nthreads=nthreads, refresh_ms=refresh_ms,
            lease_ms=lease_ms, prefill_tokens_per_s=prefill_tokens_per_s,
            bytes_per_token=bytes_per_token))

    def status(self) -> dict:
        """What this session sees of the pool: address, tenant, every
        memd's answer to STATUS (capacity, free, leased, sessions; one
        that could not be asked has "error"), totals over them, the
        session's counters, the donors serving its KV tier and the GPU
        backends usable here."""
        memds = self.memds()
        up = [m for m in memds if not m["err"]]
        total = {k: sum(m[k] * m["slab_bytes"] for m in up)
                 for k in ("slabs_total", "slabs_free", "slabs_leased")}
        out: dict = {"addr": self.addr, "tenant": self.tenant,
                     "kind": "cluster" if self.tenant else "standalone",
                     "memds": memds,
                     "capacity_bytes": total["slabs_total"],
                     "free_bytes": total["slabs_free"],
                     "leased_bytes": total["slabs_leased"],
                     "session": self.stats()}
        try:
            with self.kv() as kv:
                out["kv"] = kv.stats()
        except PoolError as e:
            out["kv"] = {"error": f"{e.strerror} (errno {e.errno})"}
        out["gpu"] = {b: _c.gpu_probe(b) for b in ("cuda", "host")}
        return out


_default_pool: Optional[Pool] = None
_default_lock = threading.Lock()


def default_pool() -> Pool:
    """The process's Pool from LIBPOOL_ADDR / LIBPOOL_TENANT /
    LIBPOOL_SECRET_FILE, connected at first use (and again after it was
    closed, or in a fork()ed child)."""
    global _default_pool
    with _default_lock:
        p = _default_pool
        if p is None or p.closed or getattr(p, "_pid", None) != os.getpid():
            p = Pool()
            p._pid = os.getpid()  # type: ignore[attr-defined]
            _default_pool = p
        return p


def _shape(shape: Any) -> tuple:
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"tidepool: negative dimension in {shape}")
    return shape


def _mapping(nbytes: int, local_bytes: int, pool: Optional[Pool]) -> Any:
    if local_bytes < 0:
        raise ValueError("tidepool: local_bytes must be >= 0")
    p = pool if pool is not None else default_pool()
    region = p.alloc(nbytes)
    try:
        return p.map(region, local_bytes, owns_region=True)
    except BaseException:
        region.free()
        raise


def empty(shape: Any, dtype: Any = None, *, local_bytes: int = 0,
          pool: Optional[Pool] = None) -> Any:
    """A torch tensor (CPU) whose storage is pooled memory: a pool_map()
    region of the pool, its pages fetched when touched and at most
    local_bytes of them resident (0: LIBPOOL_LOCAL_BYTES, else 256 MiB),
    unmapped and freed when the tensor is collected. Contents start as
    zeros. dtype: a torch dtype (default torch.float32)."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    shape = _shape(shape)
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * itemsize
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    m = _mapping(nbytes, local_bytes, pool)
    # frombuffer keeps a reference to m until the storage is freed
    flat = torch.frombuffer(m, dtype=torch.uint8, count=nbytes)
    return flat.view(dtype).view(shape)


def empty_numpy(shape: Any, dtype: Any = None, *, local_bytes: int = 0,
                pool: Optional[Pool] = None) -> Any:
    """empty() as a numpy array (default dtype float32); the array's base
    keeps the mapping alive."""
    import numpy as np

    dt = np.dtype(np.float32 if dtype is None else dtype)
    shape = _shape(shape)
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * dt.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype=dt)
    m = _mapping(nbytes, local_bytes, pool)
    return np.frombuffer(m, dtype=dt, count=numel).reshape(shape)


# errno values callers compare put() results with
EEXIST = _errno.EEXIST
