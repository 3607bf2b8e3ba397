"""vLLM's OffloadingConnector on tidepool's KV tier (docs/engines.md, "vLLM").

Imported by :mod:`tidepool.connectors.vllm` when vLLM is importable (never
by anything else): the classes here subclass vLLM's own, read from
vllm/v1/kv_offload/base.py (the commits are in docs/engines.md), so that

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "TidepoolOffloadingSpec",
        "spec_module_path": "tidepool.connectors.vllm",
        "addr": "HOST:PORT", "tenant": "...", "secret_file": "..."}}'

makes vLLM's ``OffloadingSpecFactory`` build ``TidepoolOffloadingSpec``.

Supported vLLM: the generations whose vllm/v1/kv_offload/base.py holds
``OffloadingManager``, ``OffloadingSpec``, ``LoadStoreSpec``,
``PrepareStoreOutput``, ``GPULoadStoreSpec`` and ``CanonicalKVCaches``
(one ``OffloadKey`` per lookup), with either worker API:

* ``OffloadingWorker`` in base.py (``submit_store``/``submit_load``/
  ``get_finished``/``wait``; ``OffloadingSpec.get_worker``), the newest;
* ``OffloadingHandler`` in vllm/v1/kv_offload/worker/worker.py
  (``transfer_async``/``get_finished``/``wait``; ``get_handlers``).

``lookup`` answers ``LookupResult`` where base.py has it (a request's
first key at once; when it hits, ``RETRY`` for the keys after it, asked
together as one ``KV.exists`` at the end of the step), else a bool.
Anything older (vllm/v1/kv_offload/abstract.py only, a lookup over a list
of hashes, per-layer ``kv_caches`` dicts) is refused at import with
``UnsupportedVLLMError``, which ``OffloadingSpecFactory`` raises at
selection.

Layout. The worker gets vLLM's ``CanonicalKVCaches``: tensors of shape
``(num_blocks, ...)`` and, per KV-cache group, the tensors its layers use.
One offloaded block is one tidepool value: the block's row of each of its
group's tensors, in that order. Each worker (tensor/pipeline rank) stores
its own share under ``worker_key(key, rank, world_size)``; the scheduler
counts a block present when every worker's share is.

Transfers (one job = one vLLM job id):

* store: the GPU rows are gathered into a pinned staging tensor on a copy
  stream (after the model's stream), then ``KV.put_async``;
* load: ``KV.get_into_async`` into staging, then, when every block hit,
  the rows are copied to the device on the copy stream;
* a group of one tensor in CPU memory (CPU tensors standing in for the
  GPU) skips staging: ``put_async``/``get_into_async`` take the rows
  themselves, no copy at all.

Rows and staging tensors reach the KV calls as numpy arrays over their
memory (the buffer protocol): the extension copies a CPU torch tensor
through a bounce buffer (docs/python.md, a tensor's storage can be
reallocated under a call), which cost 5x in get throughput here
(docs/bench/python.md, "Engine connectors"). That is safe for these
buffers: the KV cache tensors are vLLM's, held by this worker for its
life and never resized or re-pointed by vLLM, and the staging tensors
are this connector's own, referenced by their job only.

A load with a block missing (deleted, or a donor lost, since
``prepare_load`` pinned it) is a failed transfer (``success`` False);
with staging its rows are never written. A store always reports success
once it ran: a block whose put failed is simply not in the tier, and the
next lookup misses it (lookups ask memd, not the manager).

Threads: the scheduler side and the worker side are each called from one
thread by vLLM; both are also safe from several.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import logging
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import tidepool

from . import vllm as _tv

logger = logging.getLogger(__name__)


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


import vllm as _vllm  # noqa: E402  (the caller checked it imports)

VLLM_VERSION: str = str(getattr(_vllm, "__version__", "unknown"))

_base = _module("vllm.v1.kv_offload.base")
_NEEDED = ("OffloadingManager", "OffloadingSpec", "LoadStoreSpec",
           "PrepareStoreOutput", "GPULoadStoreSpec", "CanonicalKVCaches")
_missing = [n for n in _NEEDED if _base is None or not hasattr(_base, n)]
if _missing:
    raise _tv.UnsupportedVLLMError(
        "tidepool.connectors.vllm: vLLM %s is not supported: its "
        "vllm/v1/kv_offload/base.py %s (needed: %s; docs/engines.md, "
        "\"vLLM\", lists the supported generations)" % (
            VLLM_VERSION,
            "does not exist" if _base is None else
            "lacks " + ", ".join(_missing), ", ".join(_NEEDED)))

_WorkerBase = getattr(_base, "OffloadingWorker", None)
if _WorkerBase is not None and not hasattr(_WorkerBase, "submit_store"):
    _WorkerBase = None  # not the newest worker API
_wmod = _module("vllm.v1.kv_offload.worker.worker")
_HandlerBase = getattr(_wmod, "OffloadingHandler", None)
if _WorkerBase is None and _HandlerBase is None:
    raise _tv.UnsupportedVLLMError(
        "tidepool.connectors.vllm: vLLM %s is not supported: neither "
        "vllm.v1.kv_offload.base.OffloadingWorker (submit_store/"
        "submit_load) nor vllm.v1.kv_offload.worker.worker."
        "OffloadingHandler exists" % VLLM_VERSION)

LookupResult = getattr(_base, "LookupResult", None)
_RequestContext = getattr(_base, "RequestOffloadingContext", None)
_Medium = getattr(_base, "Medium", None)
_Locality = getattr(_base, "Locality", None)
_TransferResult = (getattr(_base, "TransferResult", None)
                   if _WorkerBase is not None else
                   getattr(_wmod, "TransferResult", None))

WORKER_API = "worker" if _WorkerBase is not None else "handlers"


def _fields(cls: Any) -> Tuple[str, ...]:
    try:
        return tuple(f.name for f in dataclasses.fields(cls))
    except TypeError:
        return ()


def _result(job_id: int, ok: bool, nbytes: int, secs: float,
            ttype: Tuple[str, str], cls: Any = None) -> Any:
    """vLLM's TransferResult with the fields this version has."""
    cls = cls or _TransferResult
    names = _fields(cls)
    if not names:  # a plain (job_id, success) tuple
        return (job_id, ok)
    kw: Dict[str, Any] = {"job_id": job_id, "success": ok}
    if "transfer_size" in names:
        kw["transfer_size"] = nbytes
    if "transfer_time" in names:
        kw["transfer_time"] = secs
    if "transfer_type" in names:
        kw["transfer_type"] = ttype
    return cls(**kw)


# ---------------------------------------------------------------------
# the scheduler side


class TidepoolLoadStoreSpec(_base.LoadStoreSpec):
    """vLLM's ``LoadStoreSpec`` for tidepool: the blocks' tidepool keys,
    in order (the worker side derives each worker's own key)."""

    def __init__(self, keys: List[bytes], block_hashes: Any = ()) -> None:
        self.keys = list(keys)
        self.block_hashes = list(block_hashes)

    @staticmethod
    def medium() -> str:
        """The medium name, ``"TIDEPOOL"``."""
        return _tv.MEDIUM

    def __repr__(self) -> str:
        return "TidepoolLoadStoreSpec(%d blocks)" % len(self.keys)


class _Lookup:
    """One request's lookups (``TidepoolOffloadingManager.lookup``):
    verdicts by tidepool key (hits, and misses with the step they were
    taken in), keys waiting for the end of the step, and the one
    ``KV.exists_async`` in flight with its keys."""

    __slots__ = ("known", "pending", "inflight", "one_by_one")

    def __init__(self) -> None:
        self.known: Dict[bytes, Any] = {}  # True, or the step of a miss
        self.pending: List[bytes] = []
        self.inflight: Optional[Tuple[Any, List[bytes]]] = None
        # a batch of one key that hit: the scheduler stops its scan at a
        # RETRY, so batching would cost a step per block: ask per key
        self.one_by_one = False


# requests whose lookups are kept at most (those vLLM never finishes, a
# test's contexts, say, are dropped oldest first)
_MAX_LOOKUPS = 4096


class TidepoolOffloadingManager(_tv._ManagerCore,
                                _base.OffloadingManager):
    """vLLM's ``OffloadingManager`` (scheduler side) over tidepool.

    The arguments are those of the duck-typed manager in
    :mod:`tidepool.connectors.vllm`; ``TidepoolOffloadingSpec.get_manager``
    passes them from ``kv_connector_extra_config``.
    """

    _spec_types = (TidepoolLoadStoreSpec,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _tv._ManagerCore.__init__(self, *args, **kwargs)
        self._epoch = 0
        self._lookups: Dict[Any, _Lookup] = {}  # req_id -> its lookups
        self._step = 0  # on_schedule_end calls

    def lookup(self, key: Any, req_context: Any = None) -> Any:
        """One ``OffloadKey``: ``LookupResult.HIT`` when every worker's
        share of the block is in the tier, ``MISS`` when not (or the pool
        cannot be reached), ``RETRY`` when the answer comes after the
        step; a bool where vLLM has no ``LookupResult`` (one round trip
        per key). A list of hashes (abstract.py's convention): the
        number of leading blocks present.

        vLLM's scheduler asks for a request's blocks one key at a time,
        in order, and keeps asking after a ``RETRY`` until a ``MISS``.
        The first key of a request is asked of the pool at once (one
        round trip: a request with nothing in the tier is answered
        without delay); when it is a hit, the keys after it answer
        ``RETRY`` and are asked together, as one ``KV.exists``, at the
        end of the step (``on_schedule_end``, started there and read at
        the next lookup): a prefix of n blocks costs two round trips and
        one step, not n round trips of the scheduler's time. The
        verdicts are kept for the request until ``prepare_load`` uses
        them, it finishes, is preempted, or ``reset_cache``; a miss only
        for the step it was taken in and the next (another engine may
        store the block meanwhile)."""
        if not _tv._is_one_block(key):
            return _tv._ManagerCore.lookup(self, key)
        k = self._key(key)
        req_id = getattr(req_context, "req_id", None)
        if LookupResult is None or req_id is None:
            hit = self._exists([k]) == 1
            if LookupResult is None:
                return hit
            return LookupResult.HIT if hit else LookupResult.MISS
        st = self._request_lookups(req_id)
        self._settle_lookups(st)
        with self._lock:
            verdict = st.known.get(k)
            if verdict is not None and verdict is not True and \
                    verdict < self._step - 1:
                del st.known[k]  # a miss two steps old: ask again
                verdict = None
            if verdict is None and (st.known or st.pending or
                                    st.inflight is not None) and not (
                    st.one_by_one and st.inflight is None and
                    k not in st.pending):
                if k not in st.pending:
                    st.pending.append(k)
                return LookupResult.RETRY
        if verdict is None:
            hit = self._exists([k]) == 1
            with self._lock:
                verdict = st.known[k] = True if hit else self._step
        return LookupResult.HIT if verdict is True else LookupResult.MISS

    def prepare_load(self, block_hashes: Any, req_context: Any = None
                     ) -> Any:
        """``prepare_load`` of the duck-typed manager (pins the blocks);
        the request's lookup verdicts are used up (a later lookup asks the
        pool again)."""
        self._forget_lookups(req_context)
        return _tv._ManagerCore.prepare_load(self, block_hashes,
                                             req_context)

    def on_new_request(self, req_context: Any) -> Any:
        """vLLM's default offloading policy for every request."""
        self._check_open()
        return _RequestContext() if _RequestContext is not None else None

    def on_request_finished(self, req_context: Any) -> None:
        """Drops the request's lookup verdicts."""
        self._forget_lookups(req_context)

    def on_schedule_end(self, context: Any) -> None:
        """Starts one ``KV.exists_async`` per request for the keys its
        lookups deferred this step (their present prefix); drops the
        lookups of preempted requests."""
        with self._lock:
            self._step += 1
            for req_id in getattr(context, "preempted_req_ids", None) or ():
                self._lookups.pop(req_id, None)
            todo = [st for st in self._lookups.values()
                    if st.pending and st.inflight is None]
            batches = []
            most = max(1, tidepool.BATCH_MAX // self.world_size)
            for st in todo:
                keys, st.pending = st.pending[:most], st.pending[most:]
                batches.append((st, keys))
        for st, keys in batches:
            try:
                fut = self._kv.exists_async(self._expand(keys))
            except tidepool.ClosedError:
                raise
            except (tidepool.PoolError, ValueError) as e:
                fut = e
            with self._lock:
                st.inflight = (fut, keys)

    def has_pending_work(self) -> bool:
        """True while lookups wait for the end of a step or for their
        ``KV.exists`` to complete (so that vLLM keeps stepping); a
        completed one waits for the request's next lookup, not for a
        step (a request vLLM stops asking for keeps no engine busy)."""
        with self._lock:
            return any(st.pending or (st.inflight is not None and
                                      not isinstance(st.inflight[0],
                                                     BaseException) and
                                      not st.inflight[0].done())
                       for st in self._lookups.values())

    def reset_cache(self) -> None:
        """vLLM resets its prefix caches (new weights, say): this manager
        stops seeing every block stored before, its own and other
        engines' (a new key epoch; the old blocks age out of memd), and
        removes the pins it holds."""
        with self._lock:
            pins, self._pins = self._pins, {}
            self._storing = {}
            self._lookups = {}
            self._epoch += 1
            self._key_ns = "%s\0reset %d" % (self.namespace, self._epoch)
        keys = [k for k, n in pins.items() for _ in range(n)]
        while keys:
            uniq = list(dict.fromkeys(keys))
            try:
                self._batched(self._kv.unpin, uniq)
            except tidepool.PoolError:
                break
            for k in uniq:
                keys.remove(k)

    def get_stats(self) -> Any:
        """No connector stats of its own (the KV handle's counters:
        ``python -m tidepool status``)."""
        return None

    def _request_lookups(self, req_id: Any) -> _Lookup:
        with self._lock:
            st = self._lookups.get(req_id)
            if st is None:
                if len(self._lookups) >= _MAX_LOOKUPS:
                    del self._lookups[next(iter(self._lookups))]
                st = self._lookups[req_id] = _Lookup()
            return st

    def _forget_lookups(self, req_context: Any) -> None:
        req_id = getattr(req_context, "req_id", None)
        if req_id is not None:
            with self._lock:
                self._lookups.pop(req_id, None)

    def _settle_lookups(self, st: _Lookup) -> None:
        """Takes the verdicts of st's exists in flight (waiting for it:
        started at the end of the step before, it is done by now in
        practice): its keys' present prefix are hits, the key after them
        a miss (the scheduler stops there); a failed call is a miss of
        its first key."""
        with self._lock:
            inflight, st.inflight = st.inflight, None
        if inflight is None:
            return
        fut, keys = inflight
        if isinstance(fut, BaseException):
            n = 0
        else:
            try:
                n = fut.result() // self.world_size
            except tidepool.ClosedError:
                raise
            except (tidepool.PoolError, ValueError):
                n = 0
        with self._lock:
            for k in keys[:n]:
                st.known[k] = True
            if n == len(keys) == 1:
                st.one_by_one = True
            if n < len(keys):
                st.known[keys[n]] = self._step
                st.pending = []  # keys after a miss: the scan stops there

    def _make_spec(self, keys: List[bytes], hashes: List[Any]) -> Any:
        return TidepoolLoadStoreSpec(keys, hashes)

    def _make_store_output(self, hashes: List[Any], spec: Any) -> Any:
        return _base.PrepareStoreOutput(list(hashes), spec, [])

    def _make_event(self, hashes: List[Any]) -> Any:
        cls = getattr(_base, "OffloadingEvent", None)
        names = _fields(cls)
        kw: Dict[str, Any] = {"removed": False}
        kw["keys" if "keys" in names else "block_hashes"] = list(hashes)
        kw["medium"] = _Medium.CPU if _Medium is not None else _tv.MEDIUM
        if "locality" in names and _Locality is not None:
            kw["locality"] = _Locality.REMOTE
        if "block_size" in names:
            kw["block_size"] = self.block_size
        return cls(**kw)


# ---------------------------------------------------------------------
# settings from kv_connector_extra_config

_STR = ("addr", "tenant", "secret_file", "namespace", "client_name")
_INT = {"replicas": (1, 2), "nthreads": (0, 1024),
        "timeout_ms": (0, 1 << 31)}


def settings(extra: Any) -> Dict[str, Any]:
    """The tidepool settings of a ``kv_connector_extra_config``: addr,
    tenant, secret_file, namespace, client_name (strings), replicas (1 or
    2), nthreads, timeout_ms; other keys are vLLM's. A bad value is a
    ValueError naming the key."""
    extra = dict(extra or {})
    out: Dict[str, Any] = {}
    for k in _STR:
        v = extra.get(k)
        if v is not None and not isinstance(v, str):
            raise ValueError("tidepool: kv_connector_extra_config.%s must "
                             "be a string, not %r" % (k, v))
        out[k] = v or None
    for k, (lo, hi) in _INT.items():
        v = extra.get(k, lo if k != "replicas" else 1)
        try:
            n = int(v)
            if isinstance(v, bool) or n != float(v):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError("tidepool: kv_connector_extra_config.%s must "
                             "be an integer, not %r" % (k, v)) from None
        if not lo <= n <= hi:
            raise ValueError("tidepool: kv_connector_extra_config.%s=%d "
                             "is not in [%d, %d]" % (k, n, lo, hi))
        out[k] = n
    if out["tenant"] and not out["secret_file"]:
        raise ValueError("tidepool: kv_connector_extra_config.tenant "
                         "needs secret_file")
    return out


def _path(obj: Any, *names: str) -> Any:
    for n in names:
        obj = getattr(obj, n, None)
        if obj is None:
            return None
    return obj


# ---------------------------------------------------------------------
# the spec


class TidepoolOffloadingSpec(_base.OffloadingSpec):
    """vLLM's ``OffloadingSpec`` for tidepool, built by vLLM's
    ``OffloadingSpecFactory`` from ``spec_name`` "TidepoolOffloadingSpec"
    (and ``spec_module_path`` "tidepool.connectors.vllm", or the
    ``vllm.general_plugins`` entry point). Takes what the factory passes
    (an ``OffloadingConfig``, or ``vllm_config`` and ``kv_cache_config``
    in older generations) and reads the tidepool settings from
    ``kv_connector_extra_config`` (``settings()``). The default namespace
    is the model's name, its KV dtype and the tokens per block."""

    # read by vLLM's worker side in some generations; the base sets it
    # where it exists
    compact_group_layout = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tidepool = settings(getattr(self, "extra_config", None))
        cfg = getattr(self, "config", None)  # OffloadingConfig
        vcfg = getattr(self, "vllm_config", None)
        per_chunk = _path(cfg, "cache", "blocks_per_chunk")
        if per_chunk is None:
            per_chunk = getattr(self, "block_size_factor", 1)
        if int(per_chunk) != 1:
            raise ValueError(
                "tidepool: an offloaded block must be one GPU block "
                "(kv_connector_extra_config.block_size unset or equal to "
                "the GPU block size), not %d of them" % int(per_chunk))
        tokens = None
        groups = getattr(cfg, "groups", None)
        if groups:
            tokens = groups[0].tokens_per_block
        elif getattr(self, "gpu_block_size", None):
            gbs = self.gpu_block_size
            tokens = gbs[0] if isinstance(gbs, (tuple, list)) else gbs
        self.block_tokens = int(tokens or 0)
        model = _path(cfg, "model", "name") or _path(
            vcfg, "model_config", "model") or ""
        dtype = _path(cfg, "model", "dtype") or _path(
            vcfg, "cache_config", "cache_dtype") or ""
        if self.tidepool["namespace"] is None:
            self.tidepool["namespace"] = "%s|%s|%d" % (
                model, dtype, self.block_tokens)
        par = _path(cfg, "parallel")
        if par is not None:
            self.world_size = int(par.world_size)
            self.rank = int(par.rank)
        else:
            pc = _path(vcfg, "parallel_config")
            self.world_size = int(getattr(pc, "world_size", 1) or 1)
            self.rank = int(getattr(pc, "rank", 0) or 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError("tidepool: worker rank %d of %d" %
                             (self.rank, self.world_size))
        self._enable_events = bool(
            _path(self, "kv_events_config", "enable_kv_cache_events") or
            getattr(cfg, "enable_kv_cache_events", False) or
            _path(vcfg, "kv_events_config", "enable_kv_cache_events"))
        self._manager: Optional[TidepoolOffloadingManager] = None

    def _pool_args(self) -> Dict[str, Any]:
        t = self.tidepool
        return {"addr": t["addr"], "tenant": t["tenant"],
                "secret_file": t["secret_file"],
                "timeout_ms": t["timeout_ms"],
                "client_name": t["client_name"]}

    def get_manager(self) -> TidepoolOffloadingManager:
        """The scheduler's manager (one per spec; it opens its Pool)."""
        if self._manager is None:
            t = self.tidepool
            self._manager = TidepoolOffloadingManager(
                replicas=t["replicas"], nthreads=t["nthreads"],
                namespace=t["namespace"], block_size=self.block_tokens,
                enable_events=self._enable_events,
                world_size=self.world_size, **self._pool_args())
        return self._manager

    def _transfers(self, kv_caches: Any) -> "_Transfers":
        return _Transfers(kv_caches, self._pool_args(),
                          self.tidepool["replicas"],
                          self.tidepool["nthreads"], self.rank,
                          self.world_size)

    def get_worker(self, kv_caches: Any) -> Any:
        """The worker of base.py's ``OffloadingWorker`` API."""
        if _WorkerBase is None:
            raise _tv.UnsupportedVLLMError(
                "tidepool: vLLM %s has no OffloadingWorker; it calls "
                "get_handlers()" % VLLM_VERSION)
        return TidepoolOffloadingWorker(self._transfers(kv_caches))

    def get_handlers(self, kv_caches: Any, *args: Any
                     ) -> Iterator[Tuple[type, type, Any]]:
        """Yields (GPULoadStoreSpec, TidepoolLoadStoreSpec, store
        handler) and (TidepoolLoadStoreSpec, GPULoadStoreSpec, load
        handler): vLLM's ``OffloadingHandler`` API."""
        if _HandlerBase is None:
            raise _tv.UnsupportedVLLMError(
                "tidepool: vLLM %s has no OffloadingHandler; it calls "
                "get_worker()" % VLLM_VERSION)
        t = self._transfers(kv_caches)
        gpu = _base.GPULoadStoreSpec
        yield gpu, TidepoolLoadStoreSpec, TidepoolStoreHandler(t)
        yield TidepoolLoadStoreSpec, gpu, TidepoolLoadHandler(t)


# ---------------------------------------------------------------------
# the worker side


class _Job:
    __slots__ = ("job_id", "store", "keys", "values", "futs", "state",
                 "event", "scatter", "nbytes", "t0", "ok", "stage", "keep")

    def __init__(self, job_id: int, store: bool) -> None:
        self.job_id = job_id
        self.store = store
        self.keys: List[bytes] = []
        self.values: List[Any] = []
        self.futs: List[Any] = []
        self.state = "new"
        self.event: Any = None
        self.scatter: List[Any] = []  # load: (tensor idx, ids, stage, off)
        self.stage: List[Any] = []
        self.keep: List[Any] = []  # device tensors the copy stream uses
        self.nbytes = 0
        self.t0 = time.monotonic()
        self.ok = False


class _Transfers:
    """The transfers of one worker process over vLLM's canonical KV
    caches (module docstring). One per spec's get_worker/get_handlers."""

    def __init__(self, kv_caches: Any, pool_args: Dict[str, Any],
                 replicas: int, nthreads: int, rank: int,
                 world_size: int) -> None:
        import torch

        self._torch = torch
        self.rank = rank
        self.world_size = world_size
        self._rows: List[Any] = []  # per tensor: (num_blocks, row) bytes
        for ct in kv_caches.tensors:
            t = ct.tensor
            rows = t.reshape(t.shape[0], -1)
            if rows.data_ptr() != t.data_ptr() or rows.stride(-1) != 1:
                raise ValueError("tidepool: a KV cache tensor whose blocks "
                                 "are not contiguous rows")
            self._rows.append(rows.view(torch.uint8))
        # CPU rows as numpy arrays over the same memory: the values handed
        # to the KV calls (buffer protocol, no copy; see _plan)
        self._np_rows = [r.numpy() if r.device.type == "cpu" else None
                         for r in self._rows]
        # per group: the tensors its layers use, in order, once each
        self._groups: List[List[int]] = [
            list(dict.fromkeys(r.tensor_idx for r in refs))
            for refs in kv_caches.group_data_refs]
        self._group_bytes = [sum(self._rows[i].shape[1] for i in g)
                             for g in self._groups]
        dev = {r.device for r in self._rows}
        if len(dev) > 1:
            raise ValueError("tidepool: KV caches on several devices")
        self.device = dev.pop() if dev else torch.device("cpu")
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._lock = threading.Lock()
        self._jobs: Dict[int, _Job] = {}
        self._closed = False
        self._pool = tidepool.Pool(**pool_args)
        try:
            self._kv = self._pool.kv(replicas, nthreads=nthreads)
        except BaseException:
            self._pool.close()
            raise

    # -- submitting ------------------------------------------------------

    def _blocks(self, gpu_spec: Any, tp_spec: Any) -> Tuple[Any, List[int]]:
        """(block ids, group of each block) of a job; ValueError when
        the two specs do not describe the same blocks."""
        torch = self._torch
        if not isinstance(tp_spec, TidepoolLoadStoreSpec):
            raise ValueError("not a TidepoolLoadStoreSpec: %r" % (tp_spec,))
        ids = [int(b) for b in gpu_spec.block_ids]
        if len(ids) != len(tp_spec.keys):
            raise ValueError("%d GPU blocks for %d tidepool blocks" %
                             (len(ids), len(tp_spec.keys)))
        sizes = getattr(gpu_spec, "group_sizes", None) or [len(ids)]
        groups: List[int] = []
        for g, n in enumerate(sizes):
            groups.extend([g] * int(n))
        if len(groups) != len(ids) or (groups and
                                       groups[-1] >= len(self._groups)):
            raise ValueError("group sizes %r do not match %d blocks of %d "
                             "groups" % (list(sizes), len(ids),
                                         len(self._groups)))
        return torch.tensor(ids, dtype=torch.long), groups

    def _direct(self, groups: List[int]) -> bool:
        """True when the rows themselves are the values (no staging)."""
        return (not self._cuda and
                all(len(self._groups[g]) == 1 for g in set(groups)))

    def _plan(self, job: _Job, ids: Any, groups: List[int],
              gather: bool) -> None:
        """job.values (one buffer per block) and, with staging, the
        copies between the rows and the staging tensors."""
        torch = self._torch
        if self._direct(groups):
            for b, g in zip(ids.tolist(), groups):
                job.values.append(self._np_rows[self._groups[g][0]][b])
            job.nbytes = sum(v.nbytes for v in job.values)
            return
        job.values = [None] * len(groups)
        copy_ctx = (torch.cuda.stream(self._stream) if self._cuda
                    else _nullctx())
        if self._cuda and gather:
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with copy_ctx:
            for g in sorted(set(groups)):
                pos = [i for i, gg in enumerate(groups) if gg == g]
                gid = ids[pos].to(self.device)
                shape = (len(pos), self._group_bytes[g])
                stage = torch.empty(shape, dtype=torch.uint8,
                                    pin_memory=self._cuda)
                job.stage.append(stage)
                # on the device the rows are gathered into (or scattered
                # from) one contiguous tensor, so that the copy between
                # device and pinned host memory is one contiguous copy
                # (a strided host side would make torch stage it again)
                flat = (torch.empty(shape, dtype=torch.uint8,
                                    device=self.device)
                        if self._cuda else stage)
                off = 0
                for ti in self._groups[g]:
                    width = self._rows[ti].shape[1]
                    if gather:
                        flat[:, off:off + width].copy_(
                            self._rows[ti].index_select(0, gid))
                    else:
                        job.scatter.append((ti, gid, stage, off, width))
                    off += width
                if self._cuda and gather:
                    stage.copy_(flat, non_blocking=True)
                    job.keep.append(flat)
                rows = stage.numpy()
                for k, i in enumerate(pos):
                    job.values[i] = rows[k]
        job.nbytes = sum(s.numel() for s in job.stage)
        if self._cuda and gather:
            job.event = torch.cuda.Event()
            job.event.record(self._stream)

    def submit(self, job_id: int, store: bool, gpu_spec: Any,
               tp_spec: Any) -> bool:
        """Starts a store (GPU -> tidepool) or a load; False when it
        cannot start (closed, a job id in use)."""
        job = _Job(job_id, store)
        with self._lock:
            if self._closed or job_id in self._jobs:
                return False
            self._jobs[job_id] = job
        try:
            ids, groups = self._blocks(gpu_spec, tp_spec)
            job.keys = [_tv.worker_key(k, self.rank, self.world_size)
                        for k in tp_spec.keys]
            self._plan(job, ids, groups, gather=store)
            if store and job.event is not None:
                job.state = "staging"
            else:
                self._start_io(job)
        except Exception as e:  # noqa: BLE001 - a failed job, reported
            logger.warning("tidepool: %s job %d failed to start: %s",
                           "store" if store else "load", job_id, e)
            job.state = "done"
            job.ok = False
        return True

    def _start_io(self, job: _Job) -> None:
        n = tidepool.BATCH_MAX
        for i in range(0, len(job.keys), n):
            k, v = job.keys[i:i + n], job.values[i:i + n]
            job.futs.append(self._kv.put_async(k, v) if job.store else
                            self._kv.get_into_async(k, v))
        job.state = "io"
        if not job.keys:
            job.ok = True
            job.state = "done"

    # -- completing ------------------------------------------------------

    def _step(self, job: _Job) -> Any:
        """Advances job without blocking; returns what it waits on (a
        future or an event), or None once done."""
        while job.state != "done":
            if job.state == "staging":
                if not job.event.query():
                    return job.event
                job.event = None
                try:
                    self._start_io(job)
                except Exception as e:  # noqa: BLE001
                    logger.warning("tidepool: store job %d: %s",
                                   job.job_id, e)
                    job.ok, job.state = False, "done"
            elif job.state == "io":
                for f in job.futs:
                    if not f.done():
                        return f
                self._io_done(job)
            elif job.state == "scatter":
                if not job.event.query():
                    return job.event
                job.event = None
                job.state = "done"
        return None

    def _io_done(self, job: _Job) -> None:
        out: List[Any] = []
        err = None
        for f in job.futs:
            try:
                out.extend(f.result())
            except Exception as e:  # noqa: BLE001 - reported as failure
                err = e
        job.futs = []
        if job.store:
            # a put that failed leaves its block out of the tier: the
            # next lookup misses it (module docstring)
            bad = [s for s in out if s not in (0, errno.EEXIST)]
            if bad or err is not None:
                logger.info("tidepool: store job %d: %d of %d blocks not "
                            "stored (%s)", job.job_id,
                            len(bad) if err is None else len(job.keys),
                            len(job.keys), err or tidepool.strerror(bad[0]))
            job.ok = err is None or not isinstance(err, tidepool.ClosedError)
            job.values = []
            job.state = "done"
            return
        hit = err is None and len(out) == len(job.keys) and all(out)
        if not hit:
            logger.warning("tidepool: load job %d failed: %s", job.job_id,
                           err or "%d of %d blocks missing" % (
                               out.count(False), len(job.keys)))
            job.ok, job.state = False, "done"
            return
        job.ok = True
        if not job.scatter:
            job.state = "done"
            return
        torch = self._torch
        ctx = torch.cuda.stream(self._stream) if self._cuda else _nullctx()
        with ctx:
            dev: Dict[int, Any] = {}
            for ti, gid, stage, off, width in job.scatter:
                if self._cuda:  # one contiguous copy per staging tensor
                    if id(stage) not in dev:
                        dev[id(stage)] = stage.to(self.device,
                                                  non_blocking=True)
                    src = dev[id(stage)]
                else:
                    src = stage
                self._rows[ti].index_copy_(0, gid,
                                           src[:, off:off + width])
            job.keep.extend(dev.values())
        job.scatter = []
        if self._cuda:
            job.event = torch.cuda.Event()
            job.event.record(self._stream)
            job.state = "scatter"
        else:
            job.state = "done"

    def finished(self, store: Optional[bool] = None
                 ) -> List[Tuple[int, bool, int, float, bool]]:
        """(job id, ok, bytes, seconds, store) of the jobs done since the
        last call (only stores or only loads when store is given)."""
        out = []
        with self._lock:
            for jid, job in list(self._jobs.items()):
                if store is not None and job.store != store:
                    continue
                self._step(job)
                if job.state == "done":
                    del self._jobs[jid]
                    out.append((jid, job.ok, job.nbytes,
                                time.monotonic() - job.t0, job.store))
        return out

    def wait(self, job_ids: Any) -> None:
        """Blocks until the jobs are done (those not known: at once)."""
        want = set(job_ids)
        while True:
            with self._lock:
                pending = None
                for jid in want & set(self._jobs):
                    pending = self._step(self._jobs[jid])
                    if pending is not None:
                        break
            if pending is None:
                return
            if hasattr(pending, "synchronize"):
                pending.synchronize()
            else:
                try:
                    pending.result()
                except Exception:  # noqa: BLE001 - _step reports it
                    pass

    def close(self) -> None:
        """Waits for the jobs in flight, then closes the KV handle and
        the Pool. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ids = list(self._jobs)
        try:
            self.wait(ids)
        finally:
            self._kv.close()
            self._pool.close()

    @property
    def closed(self) -> bool:
        return self._closed


class _nullctx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


if _WorkerBase is not None:

    class TidepoolOffloadingWorker(_WorkerBase):
        """vLLM's ``OffloadingWorker`` (base.py) for the tidepool medium:
        ``submit_store``/``submit_load`` start jobs, ``get_finished``
        reports them, ``wait`` blocks on them."""

        def __init__(self, transfers: _Transfers) -> None:
            self.transfers = transfers

        def submit_store(self, job_id: int, src_spec: Any,
                         dst_spec: Any) -> bool:
            return self.transfers.submit(job_id, True, src_spec, dst_spec)

        def submit_load(self, job_id: int, src_spec: Any,
                        dst_spec: Any) -> bool:
            return self.transfers.submit(job_id, False, dst_spec, src_spec)

        def get_finished(self) -> List[Any]:
            return [_result(j, ok, n, s,
                            ("GPU", _tv.MEDIUM) if st else (_tv.MEDIUM,
                                                             "GPU"))
                    for j, ok, n, s, st in self.transfers.finished()]

        def wait(self, job_ids: Any) -> None:
            self.transfers.wait(job_ids)

        def shutdown(self) -> None:
            self.transfers.close()
else:
    TidepoolOffloadingWorker = None  # type: ignore[assignment,misc]


if _HandlerBase is not None:

    class _Handler(_HandlerBase):
        _store = True

        def __init__(self, transfers: _Transfers) -> None:
            self.transfers = transfers

        def transfer_async(self, job_id: int, spec: Any) -> bool:
            src, dst = spec
            if self._store:
                return self.transfers.submit(job_id, True, src, dst)
            return self.transfers.submit(job_id, False, dst, src)

        def get_finished(self) -> List[Any]:
            tt = ("GPU", _tv.MEDIUM) if self._store else (_tv.MEDIUM, "GPU")
            return [_result(j, ok, n, s, tt,
                            getattr(_wmod, "TransferResult", None))
                    for j, ok, n, s, _ in self.transfers.finished(
                        self._store)]

        def wait(self, job_ids: Any) -> None:
            self.transfers.wait(job_ids)

        def shutdown(self) -> None:
            self.transfers.close()

    class TidepoolStoreHandler(_Handler):
        """vLLM's ``OffloadingHandler`` for (GPU, TIDEPOOL)."""

        _store = True

    class TidepoolLoadHandler(_Handler):
        """vLLM's ``OffloadingHandler`` for (TIDEPOOL, GPU)."""

        _store = False
else:
    TidepoolStoreHandler = TidepoolLoadHandler = None  # type: ignore
