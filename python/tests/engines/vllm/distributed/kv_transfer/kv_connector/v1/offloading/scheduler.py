"""Stand-in of the scheduler half of vLLM's OffloadingConnector
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py).

The call sequence was read at vllm-project/vllm
e57c0d427864471fe231b58b2cd9a73453322cb2 (get_num_new_matched_tokens,
update_state_after_alloc, build_connector_meta, update_connector_output,
request_finished, take_events) and is driven here with the manager
contract of base.py at 0105e232b7fa4e1b59ec87531f167c0443a5095d: one
``lookup(key, req_context)`` per block, in order, as the newer
scheduler.py's ``_maximal_prefix_lookup`` does (found by content in the
index, no commit recorded): ``HIT`` counts, ``HIT_PENDING`` counts and
defers, ``RETRY`` defers and the scan goes on (so that the manager can
start the lookups of the keys after it; vllm/v1/kv_offload/tiering/
async_lookup.py at 030ea52effcb05071543c8c42b8f0145e94cee43 flushes them
in ``on_schedule_end``), ``MISS`` ends it; a deferred lookup answers
None (ask again next step), ``on_new_request`` once per
request, ``prepare_load``/``complete_load`` around a load job,
``prepare_store``/``complete_store`` around a store job (completion from
the worker's completed job ids, as worker.py at 0078e9d2 reports them),
``on_schedule_end`` after every step. One KV-cache group, offloaded block
= GPU block, no GPU prefix cache: a request's blocks are
``block_ids[i]`` for block i of the request.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from vllm.v1.kv_offload.base import (GPULoadStoreSpec, LookupResult,
                                     ReqContext, ScheduleEndContext)


@dataclass
class Request:
    """What the connector reads of vLLM's Request."""
    request_id: str
    num_tokens: int
    offload_keys: List[bytes]  # one per whole block, group 0


@dataclass
class TransferJob:
    src_spec: object
    dst_spec: object
    req_id: str


@dataclass
class OffloadingConnectorMetadata:
    load_jobs: Dict[int, TransferJob] = field(default_factory=dict)
    store_jobs: Dict[int, TransferJob] = field(default_factory=dict)
    jobs_to_flush: set = field(default_factory=set)


class OffloadingConnectorScheduler:
    def __init__(self, spec):
        self.manager = spec.get_manager()
        self.block_size = spec.tokens_per_block[0]
        self._ctx: Dict[str, ReqContext] = {}
        self._requests: Dict[str, Request] = {}
        self._block_ids: Dict[str, List[int]] = {}
        self._next_stored: Dict[str, int] = {}
        self._jobs: Dict[int, Tuple[str, bool, List[bytes]]] = {}
        self._next_job = 0
        self._meta = OffloadingConnectorMetadata()
        self._new: List[str] = []

    def _context(self, req: Request) -> ReqContext:
        ctx = self._ctx.get(req.request_id)
        if ctx is None:
            ctx = self._ctx[req.request_id] = ReqContext(req.request_id)
            self.manager.on_new_request(ctx)
            self._new.append(req.request_id)
        return ctx

    def _job(self) -> int:
        self._next_job += 1
        return self._next_job

    def get_num_new_matched_tokens(self, req: Request,
                                   num_computed_tokens: int
                                   ) -> Tuple[Optional[int], bool]:
        ctx = self._context(req)
        start = num_computed_tokens // self.block_size
        hits, defer = 0, False
        for key in req.offload_keys[start:]:
            r = self.manager.lookup(key, ctx)
            if r is LookupResult.HIT:
                hits += 1
            elif r is LookupResult.HIT_PENDING:
                hits += 1
                defer = True
            elif r is LookupResult.RETRY:
                defer = True
            else:
                break
        if defer:
            return None, False
        if not hits:
            return 0, False
        return hits * self.block_size, True

    def update_state_after_alloc(self, req: Request, block_ids: List[int],
                                 num_computed_tokens: int,
                                 num_external_tokens: int) -> None:
        self._requests[req.request_id] = req
        self._block_ids[req.request_id] = list(block_ids)
        start = num_computed_tokens // self.block_size
        n = num_external_tokens // self.block_size
        self._next_stored[req.request_id] = start + n
        if not n:
            return
        ctx = self._context(req)
        keys = req.offload_keys[start:start + n]
        src = self.manager.prepare_load(keys, ctx)
        dst = GPULoadStoreSpec(block_ids[start:start + n], [n], [start])
        job = self._job()
        self._jobs[job] = (req.request_id, False, keys)
        self._meta.load_jobs[job] = TransferJob(src, dst, req.request_id)

    def build_connector_meta(self, num_computed_tokens: Dict[str, int]
                             ) -> OffloadingConnectorMetadata:
        """One step: the requests scheduled and their computed tokens
        after it; stores the whole blocks not stored yet."""
        for req_id, tokens in num_computed_tokens.items():
            req = self._requests[req_id]
            ctx = self._context(req)
            nblocks = min(tokens, req.num_tokens) // self.block_size
            start = self._next_stored.get(req_id, 0)
            if nblocks <= start:
                continue
            keys = req.offload_keys[start:nblocks]
            out = self.manager.prepare_store(keys, ctx)
            if out is None:
                continue
            self._next_stored[req_id] = nblocks
            todo = set(out.keys_to_store)
            if not todo:
                continue
            ids = self._block_ids[req_id]
            src_ids, stored = [], []
            for i, k in enumerate(keys):
                if k in todo:
                    src_ids.append(ids[start + i])
                    stored.append(k)
            job = self._job()
            self._jobs[job] = (req_id, True, stored)
            self._meta.store_jobs[job] = TransferJob(
                GPULoadStoreSpec(src_ids, [len(src_ids)], [start]),
                out.store_spec, req_id)
        meta, self._meta = self._meta, OffloadingConnectorMetadata()
        self.manager.on_schedule_end(ScheduleEndContext(self._new, ()))
        self._new = []
        return meta

    def update_connector_output(self, completed_jobs) -> None:
        for job in completed_jobs:
            req_id, store, keys = self._jobs.pop(job)
            ctx = self._ctx[req_id]
            if store:
                self.manager.complete_store(keys, ctx, True)
            else:
                self.manager.complete_load(keys, ctx)

    def request_finished(self, req: Request) -> None:
        ctx = self._ctx.pop(req.request_id, None)
        self._requests.pop(req.request_id, None)
        self._block_ids.pop(req.request_id, None)
        self._next_stored.pop(req.request_id, None)
        if ctx is not None:
            self.manager.on_request_finished(ctx)

    def take_events(self):
        return list(self.manager.take_events())

    def shutdown(self) -> None:
        self.manager.shutdown()
