"""Stand-in of sglang.srt.managers.cache_controller.HiCacheController, its
storage half.

Upstream: sgl-project/sglang python/sglang/srt/managers/cache_controller.py
at commit 001067fffe33427bee0ed2f007fb7551a1d76b44, written from its
contract (not copied): how the controller builds the storage
configuration, selects the backend through StorageBackendFactory, picks
the page I/O functions, and calls the backend from its threads:

* attach_storage_backend: HiCacheStorageConfig from the ranks, the model
  name and extra_config (tp_lcm_size popped); backup is skipped on MLA
  ranks other than 0; ``StorageBackendFactory.create_backend(name,
  config, host_pool)`` then ``register_mem_pool_host(host_pool)``; the
  zero-copy page functions (batch_get_v1/batch_set_v1) for the built-in
  zero-copy backends, or for "dynamic" when extra_config["interface_v1"]
  is truthy (read after the backend was created), else the generic ones
  (batch_get into get_dummy_flat_data_page() targets then
  set_from_flat_data_page; batch_set of get_data_page(flat=True)); then
  four threads. A failure closes the backend and re-raises.
* prefetch thread: per request, the page hashes of its tokens, then
  batch_exists over batches of STORAGE_BATCH_SIZE pages until one comes
  back short; the hit count (all-reduced over ranks: here one rank) goes
  to prefetch_hit_queue.
* the scheduler (HiRadixCache upstream; schedule_prefetch_io here)
  allocates host memory for the hit pages and queues the operation to
  prefetch_buffer.
* prefetch I/O thread: page_get_func per batch, stopping at the first
  page that did not load; a PrefetchAck(completed_tokens) per batch, then
  one PrefetchAck(completed_req=True), through the sync thread to
  ack_prefetch_queue.
* backup thread: page_set_func per batch, stopping at the first failed
  batch (completed_tokens counts what was stored); the operation goes to
  ack_backup_queue.
* detach_storage_backend: stop the threads, then the backend's close().

Left out: the device pool and its transfers, process groups (one rank),
the v2 (hybrid pool) paths, rate limiting and metrics. The rank numbers
upstream reads from the process groups are constructor arguments here.
"""
import logging
import threading
from dataclasses import dataclass
from queue import Empty, Queue
from typing import List, Optional

import torch

from sglang.srt.mem_cache.hicache_storage import (STORAGE_BATCH_SIZE,
                                                  HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo)

logger = logging.getLogger(__name__)

ZERO_COPY_BACKENDS = ("hf3fs", "mooncake", "eic", "nixl", "simm", "mori",
                      "kvcc")


class StorageOperation:
    counter = 0

    def __init__(self, host_indices, token_ids, last_hash=None,
                 hash_value=None, prefix_keys=None):
        self.host_indices = host_indices
        self.token_ids = token_ids
        self.last_hash = last_hash
        self.completed_tokens = 0
        self.hash_value = hash_value if hash_value is not None else []
        self.prefix_keys = prefix_keys
        self.id = StorageOperation.counter
        StorageOperation.counter += 1


class PrefetchOperation(StorageOperation):
    def __init__(self, request_id, token_ids, last_hash=None,
                 prefix_keys=None):
        self.request_id = request_id
        self._lock = threading.Lock()
        self._terminated = False
        self.storage_hit_count = 0
        super().__init__(None, token_ids, last_hash, prefix_keys=prefix_keys)

    def mark_terminate(self):
        with self._lock:
            self._terminated = True

    def is_terminated(self) -> bool:
        with self._lock:
            return self._terminated


@dataclass
class PrefetchAck:
    rid: str
    operation: PrefetchOperation
    completed_tokens: Optional[int] = None
    completed_req: Optional[bool] = None


class HiCacheController:
    def __init__(self, mem_pool_host, page_size: int,
                 storage_backend: Optional[str] = None,
                 prefetch_threshold: int = 256,
                 model_name: Optional[str] = None,
                 storage_backend_extra_config: Optional[dict] = None,
                 tp_rank: int = 0, tp_size: int = 1, pp_rank: int = 0,
                 pp_size: int = 1, is_mla_model: bool = False):
        self.mem_pool_host = mem_pool_host
        self.storage_host_pool = mem_pool_host
        self.page_size = page_size
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.pp_rank, self.pp_size = pp_rank, pp_size
        self.is_mla_model = is_mla_model
        self.enable_storage = False
        self.storage_backend = None
        self.storage_backend_type = None
        self.page_get_func = self._generic_page_get
        self.page_set_func = self._generic_page_set
        self.storage_stop_event = threading.Event()
        self.ack_prefetch_queue: Queue = Queue()
        if storage_backend is not None:
            try:
                self.attach_storage_backend(storage_backend,
                                            prefetch_threshold, model_name,
                                            storage_backend_extra_config)
            except ValueError as e:
                raise ValueError(
                    f"Failed to create storage backend: {e}") from e

    # -- attach / detach --------------------------------------------------

    def _generate_storage_config(self, model_name, extra_config):
        if extra_config is None:
            extra_config = {}
        tp_lcm_size = extra_config.pop("tp_lcm_size", None)
        return HiCacheStorageConfig(
            tp_rank=self.tp_rank, tp_size=self.tp_size,
            pp_rank=self.pp_rank, pp_size=self.pp_size, attn_cp_rank=0,
            attn_cp_size=1, is_mla_model=self.is_mla_model,
            enable_storage_metrics=False,
            is_page_first_layout=self.mem_pool_host.layout == "page_first",
            model_name=model_name, tp_lcm_size=tp_lcm_size,
            should_split_heads=False, extra_config=extra_config)

    def attach_storage_backend(self, storage_backend: str,
                               prefetch_threshold: int = 256,
                               model_name: Optional[str] = None,
                               storage_backend_extra_config=None):
        if self.enable_storage:
            raise RuntimeError("Storage backend already attached.")
        from sglang.srt.mem_cache.storage import StorageBackendFactory
        from sglang.srt.mem_cache.utils import get_hash_str

        self.get_hash_str = get_hash_str
        self.storage_backend_type = storage_backend
        self.storage_config = self._generate_storage_config(
            model_name, storage_backend_extra_config)
        self.backup_skip = (self.storage_config.is_mla_model and
                            self.storage_config.tp_rank != 0)
        try:
            self.storage_backend = StorageBackendFactory.create_backend(
                storage_backend, self.storage_config, self.storage_host_pool)
            self.storage_backend.register_mem_pool_host(
                self.storage_host_pool)
            self.enable_storage = True
            self.prefetch_threshold = max(prefetch_threshold,
                                          self.page_size)
            self.page_get_func = self._generic_page_get
            self.page_set_func = self._generic_page_set
            if storage_backend in ZERO_COPY_BACKENDS or (
                    storage_backend == "dynamic" and bool(
                        self.storage_config.extra_config.get(
                            "interface_v1", 0))):
                self.page_get_func = self._page_get_zero_copy
                self.page_set_func = self._page_set_zero_copy
            self.storage_stop_event.clear()
            self._start_storage_threads()
        except Exception:
            self._stop_storage_threads()
            if self.storage_backend is not None and \
                    hasattr(self.storage_backend, "close"):
                try:
                    self.storage_backend.close()
                except Exception:  # noqa: BLE001 - best effort, as upstream
                    pass
            self.storage_backend = None
            self.storage_backend_type = None
            self.enable_storage = False
            raise

    def detach_storage_backend(self):
        self._stop_storage_threads()
        if self.storage_backend is not None and \
                hasattr(self.storage_backend, "close"):
            self.storage_backend.close()
        self.storage_backend = None
        self.storage_backend_type = None
        self.enable_storage = False
        self.storage_stop_event.clear()

    def _start_storage_threads(self):
        self.prefetch_queue: Queue = Queue()
        self.backup_queue: Queue = Queue()
        self.prefetch_buffer: Queue = Queue()
        self.prefetch_sync_queue: Queue = Queue()
        self.prefetch_hit_queue: Queue = Queue()
        self.ack_prefetch_queue = Queue()
        self.ack_backup_queue: Queue = Queue()
        self._threads = [
            threading.Thread(target=f, daemon=True, name=n) for f, n in (
                (self.prefetch_thread_func, "hicache-prefetch"),
                (self.prefetch_io_aux_func, "hicache-prefetch-io"),
                (self.prefetch_sync_thread_func, "hicache-prefetch-sync"),
                (self.backup_thread_func, "hicache-backup"))]
        for t in self._threads:
            t.start()

    def _stop_storage_threads(self):
        self.storage_stop_event.set()
        for q in ("prefetch_queue", "backup_queue", "prefetch_buffer",
                  "prefetch_sync_queue"):
            if hasattr(self, q):
                getattr(self, q).put_nowait(None)
        for t in getattr(self, "_threads", []):
            t.join(timeout=10)
            if t.is_alive():
                raise RuntimeError("Failed to stop HiCache storage threads "
                                   "cleanly.")
        self._threads = []

    def clear_storage_backend(self) -> bool:
        """HiRadixCache.clear_storage_backend: the backend's clear()."""
        if not self.enable_storage or \
                not hasattr(self.storage_backend, "clear"):
            return False
        self.storage_backend.clear()
        return True

    # -- prefetch -----------------------------------------------------------

    def prefetch(self, request_id: str, new_input_tokens: List[int],
                 last_hash: Optional[str] = None,
                 prefix_keys: Optional[List[str]] = None
                 ) -> PrefetchOperation:
        op = PrefetchOperation(request_id, new_input_tokens, last_hash,
                               prefix_keys)
        self.prefetch_queue.put(op)
        return op

    def terminate_prefetch(self, operation):
        operation.mark_terminate()
        return operation.completed_tokens, operation.hash_value

    def _storage_hit_query(self, operation):
        prefix_keys = (operation.prefix_keys.copy()
                       if operation.prefix_keys else None)
        hash_value: List[str] = []
        count = 0
        page_hashes = self.get_hash_str(operation.token_ids,
                                        operation.last_hash,
                                        page_size=self.page_size)
        for start in range(0, len(page_hashes), STORAGE_BATCH_SIZE):
            batch = page_hashes[start:start + STORAGE_BATCH_SIZE]
            extra = HiCacheStorageExtraInfo(prefix_keys=prefix_keys)
            hit = self.storage_backend.batch_exists(batch, extra)
            hash_value.extend(batch[:hit])
            count += hit * self.page_size
            if hit < len(batch):
                break
            if prefix_keys:
                prefix_keys += batch
        return hash_value, count

    def prefetch_thread_func(self):
        while not self.storage_stop_event.is_set() or \
                not self.prefetch_queue.empty():
            try:
                op = self.prefetch_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if op is None:
                continue
            if op.is_terminated():
                hash_value, hits = [], 0
            else:
                hash_value, hits = self._storage_hit_query(op)
            op.hash_value = hash_value[:hits // self.page_size]
            op.storage_hit_count = hits
            self.prefetch_hit_queue.put(op)

    def schedule_prefetch_io(self, operation) -> bool:
        """The tree cache's part: host memory for the hit pages, then the
        operation to the prefetch I/O thread. False when the host pool is
        full (the prefetch is then revoked)."""
        n = len(operation.hash_value) * self.page_size
        idx = self.mem_pool_host.alloc(n)
        if idx is None:
            return False
        operation.host_indices = idx
        self.prefetch_buffer.put(operation)
        return True

    def _page_get_zero_copy(self, operation, hash_values, host_indices,
                            extra_info=None) -> int:
        results = self.storage_backend.batch_get_v1(hash_values,
                                                    host_indices, extra_info)
        inc = 0
        for r in results[:len(hash_values)]:
            if not r:
                break
            inc += 1
        return inc

    def _generic_page_get(self, operation, hash_values, host_indices,
                          extra_info=None) -> int:
        dst = [self.storage_host_pool.get_dummy_flat_data_page()
               for _ in hash_values]
        data = self.storage_backend.batch_get(hash_values, dst)
        if data is None:
            return 0
        count = 0
        for i in range(len(hash_values)):
            if data[i] is None or operation.is_terminated():
                break
            self.storage_host_pool.set_from_flat_data_page(
                host_indices[i * self.page_size], data[i])
            count += 1
        return count

    def _page_transfer(self, operation) -> int:
        all_success = True
        completed = 0
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            if all_success and operation.is_terminated():
                all_success = False
            if all_success:
                batch = operation.hash_value[i:i + STORAGE_BATCH_SIZE]
                idx = operation.host_indices[
                    i * self.page_size:(i + len(batch)) * self.page_size]
                extra = HiCacheStorageExtraInfo(
                    prefix_keys=operation.prefix_keys)
                hits = self.page_get_func(operation, batch, idx, extra)
                if hits != len(batch):
                    all_success = False
                completed += hits
            self.prefetch_sync_queue.put(PrefetchAck(
                rid=operation.request_id, operation=operation,
                completed_tokens=completed * self.page_size))
        return completed

    def prefetch_io_aux_func(self):
        while not self.storage_stop_event.is_set():
            try:
                op = self.prefetch_buffer.get(block=True, timeout=1)
            except Empty:
                continue
            if op is None:
                continue
            self._page_transfer(op)
            self.prefetch_sync_queue.put(PrefetchAck(
                rid=op.request_id, operation=op, completed_req=True))

    def prefetch_sync_thread_func(self):
        # upstream all-reduces completed_tokens (MIN) over the ranks
        while not self.storage_stop_event.is_set():
            try:
                ack = self.prefetch_sync_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if ack is None:
                continue
            if ack.completed_tokens is not None:
                ack.operation.completed_tokens = ack.completed_tokens
            self.ack_prefetch_queue.put(ack)

    # -- backup -------------------------------------------------------------

    def write_storage(self, host_indices: torch.Tensor, token_ids,
                      hash_value=None, prefix_keys=None) -> int:
        op = StorageOperation(host_indices, token_ids,
                              hash_value=hash_value, prefix_keys=prefix_keys)
        self.backup_queue.put(op)
        return op.id

    def _generic_page_set(self, hash_values, host_indices,
                          extra_info=None) -> bool:
        data = [self.storage_host_pool.get_data_page(
                    host_indices[i * self.page_size])
                for i in range(len(hash_values))]
        return self.storage_backend.batch_set(hash_values, data)

    def _page_set_zero_copy(self, hash_values, host_indices,
                            extra_info=None) -> bool:
        return all(self.storage_backend.batch_set_v1(hash_values,
                                                     host_indices,
                                                     extra_info))

    def _page_backup(self, operation):
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            batch = operation.hash_value[i:i + STORAGE_BATCH_SIZE]
            idx = operation.host_indices[
                i * self.page_size:(i + len(batch)) * self.page_size]
            extra = HiCacheStorageExtraInfo(prefix_keys=operation.prefix_keys)
            if not self.page_set_func(batch, idx, extra):
                logger.warning("Write page to storage: %d pages failed.",
                               len(batch))
                break
            operation.completed_tokens += self.page_size * len(batch)

    def backup_thread_func(self):
        while not self.storage_stop_event.is_set():
            try:
                op = self.backup_queue.get(block=True, timeout=1)
            except Empty:
                continue
            if op is None:
                continue
            if not self.backup_skip:
                self._page_backup(op)
            self.ack_backup_queue.put(op)
