#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/connbench.py - the engine connectors (tidepool.connectors) against
the KV API they are built on, in one run on one memd
(docs/bench/python.md, "Engine connectors").

usage: /usr/bin/python3 bench/connbench.py [BUILD_DIR]   (default
           build/release, else build-bench)
       /usr/bin/python3 bench/connbench.py --summarize RAW.txt...
Knobs (options, or the environment): --reps REPS=5, --cap CAP=3584M,
  --slab SLAB=64M, --prompts PROMPTS=60, --hbm HBM=5,
  --impls IMPLS="direct vllm sglang lmcache", --parts PARTS="shared bulk",
  --bulk-iters BULK_ITERS=30, --out-dir OUT_DIR=
  <BUILD>/connbench-results/<time>.

pybench's shared-prefix workload (kvbench's: 60 prompts of 30,000 tokens,
the first 28,000 from one of 20 prefixes, one 1 MiB block per 256-token
chunk, an HBM LRU of 5 prefixes' chunks; bench/pybench.py's shared_run,
the same prompts, keys and HBM model, so the same hits) on pybench's
memd (CAP larger than pybench's 2560M, so that no path evicts: the
paths store different small values besides the 1 MiB blocks, LMCache's
metas and key log, whose slabs would shift what memd evicts and so the
hits), per repetition through, in an order that rotates with it:

direct   tidepool.KV: exists, get_into numpy buffers, put_async
         (pybench's impl=numpy): the baseline.
vllm     vLLM's OffloadingConnector call sequence on TidepoolOffloadingSpec
         made by OffloadingSpecFactory.create_spec: the scheduler's
         manager.lookup per block until a miss, again after
         on_schedule_end when one answered RETRY (a request per
         prompt); load = prepare_load,
         worker submit_load into a CPU int8 tensor (N, 1 MiB) standing in
         for the GPU KV cache, wait, get_finished, complete_load; store =
         prepare_store, submit_store, then wait/get_finished/
         complete_store before the next prompt.
sglang   SGLang's HiCache L3 storage made by StorageBackendFactory
         ("dynamic", interface_v1) over an MLA host pool, page_first, one
         page per chunk = one piece of 1 MiB (so the same values as
         direct): batch_exists, batch_get_v1 into the host pool; stores
         by batch_set_v1 on a thread (HiCache's backup thread).
lmcache  LMCache's RemoteBackend on the tidepool:// connector (its plugin
         loader and CreateConnector), an event loop thread, 1 MiB
         MemoryObjs (chunk [2, 1, 256, 1024] fp16) from its local CPU
         backend's allocator: batched_contains, batched_get_blocking
         (the measured get; hits freed after the check), stores by
         batched_submit_put_task.

bulk: one prefix's 109 blocks stored through every path on one memd,
then got through each path in turn, call by call, the order rotating,
BULK_ITERS calls each after a tenth as many unmeasured (pybench's bulk
part): the same gets without the workload's noise.

The engines are the stand-ins in python/tests/engines (put first on
sys.path here). Every block fetched is checked (its first 32 bytes are
its chunk's key as stored): bad= counts wrong ones. Each run gets a
fresh memd (pybench's start, CAP donated), so that every path starts
from an empty tier with every slab free: on one memd emptied between
runs the paths' hits differed while memd was still zeroing the emptied
slabs (seconds under load).

Output in OUT_DIR: raw.txt, summary.txt (printed): medians, a ratio line
per connector (get MB/s over direct's of the same repetition, the median
of those, target 0.9), whether the hits of every impl equal direct's in
every repetition, and last

  connbench result vllm_ratio=R sglang_ratio=R lmcache_ratio=R
      bulk_vllm_ratio=R ... target=0.9 same_hits=yes|no bad=N pass=yes|no
      direct_get_MBps=.. ...

Raw lines: connbench part=shared impl=direct|vllm|sglang|lmcache
  get_MBps=.. put_MBps=.. exists_ms=.. get_ms=.. submit_ms=.. hit=..
  tier_hit=.. local_hit=.. chunks=.. get_bytes=.. put_bytes=.. bad=.. rep=N
  connbench part=bulk impl=.. batch=109 size=1048576 iters=.. ms_call=..
  MBps=.. bad=.. rep=N

Builds nothing: cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release &&
cmake --build build/release -j2 --target memd kvbench _tidepool
"""
import asyncio
import concurrent.futures
import os
import statistics
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import benchutil  # noqa: E402
import pybench  # noqa: E402

IMPLS = ("direct", "vllm", "sglang", "lmcache")
TARGET = pybench.TARGET
BLOCK = pybench.BLOCK
TOK = pybench.CHUNK_TOK
MODEL = pybench.MODEL
MLA_DIM = BLOCK // (TOK * 2)  # bf16 latent: one page of 256 tokens, 1 MiB


class VllmIO:
    """vLLM's OffloadingConnector calls (scheduler + worker)."""

    def __init__(self, addr, maxblk):
        import torch
        from vllm.v1.kv_offload import base as b
        from vllm.v1.kv_offload import config as c
        from vllm.v1.kv_offload.factory import OffloadingSpecFactory

        self.b = b
        extra = {"spec_name": "TidepoolOffloadingSpec",
                 "spec_module_path": "tidepool.connectors.vllm",
                 "addr": addr, "client_name": "connbench-vllm"}
        cfg = c.OffloadingConfig(
            groups=(c.OffloadingGroupConfig(TOK, ("l0",)),),
            worker_kv_bytes_per_block=0, enable_kv_cache_events=False,
            extra_config=extra, engine_id="connbench",
            model=c.OffloadingModelConfig(MODEL, "float16"),
            cache=c.OffloadingCacheConfig(TOK, 1),
            parallel=c.OffloadingParallelConfig(0, 1, 1, 1, 1, 1, 0, False))
        self.spec = OffloadingSpecFactory.create_spec(cfg)
        # the "GPU" KV cache: loads into rows 0.., stores from maxblk..
        self.t = torch.zeros((2 * maxblk, BLOCK), dtype=torch.int8)
        self.rows = self.t.numpy().view("uint8")
        self.maxblk = maxblk
        caches = b.CanonicalKVCaches([b.CanonicalKVCacheTensor(self.t,
                                                               BLOCK)],
                                     [[b.CanonicalKVCacheRef(0, BLOCK)]])
        self.worker = self.spec.get_worker(caches)
        self.manager = self.spec.get_manager()
        self.ctx = b.ReqContext("connbench-0")
        self.nreq = 0
        self.job = 0
        self.done = {}
        self.block_bytes = BLOCK

    def _keys(self, chunks):
        return [self.b.make_offload_key(c, 0) for c in chunks]

    def _finish(self, job):
        self.worker.wait({job})
        while job not in self.done:
            for r in self.worker.get_finished():
                self.done[r.job_id] = r.success
        return self.done.pop(job)

    def expected(self, chunk_key, layer):
        return chunk_key

    def exists(self, chunks):
        """The scheduler's lookup of a new request: per block until a
        miss, going on after a RETRY; when one deferred, the step ends
        (on_schedule_end) and the scan runs again."""
        r = self.b.LookupResult
        self.manager.on_request_finished(self.ctx)
        self.nreq += 1
        self.ctx = self.b.ReqContext("connbench-%d" % self.nreq)
        keys = self._keys(chunks)
        while True:
            n, defer = 0, False
            for k in keys:
                v = self.manager.lookup(k, self.ctx)
                if v is r.HIT:
                    n += 1
                elif v is r.HIT_PENDING:
                    n += 1
                    defer = True
                elif v is r.RETRY:
                    defer = True
                else:
                    break
            if not defer:
                return n
            self.manager.on_schedule_end(self.b.ScheduleEndContext((), ()))

    def prepare_get(self, chunks):
        self.rows[:len(chunks), :32] = 0

    def get(self, chunks):
        keys = self._keys(chunks)
        n = len(keys)
        src = self.manager.prepare_load(keys, self.ctx)
        self.job += 1
        job = self.job
        self.worker.submit_load(job, src, self.b.GPULoadStoreSpec(
            list(range(n)), [n], [0]))
        ok = self._finish(job)
        self.manager.complete_load(keys, self.ctx)
        return [ok] * n

    def head(self, b):
        return self.rows[b, :32].tobytes()

    def release(self):
        pass

    def prepare_put(self, chunks):
        for i, c in enumerate(chunks):
            self.rows[self.maxblk + i, :32] = bytearray(c)

    def submit_put(self, chunks):
        keys = self._keys(chunks)
        out = self.manager.prepare_store(keys, self.ctx)
        todo = len(out.store_spec.keys)
        ids = list(range(self.maxblk + len(keys) - todo,
                         self.maxblk + len(keys)))
        self.job += 1
        self.worker.submit_store(self.job, self.b.GPULoadStoreSpec(
            ids, [todo], [len(keys) - todo]), out.store_spec)
        return self.job, keys[len(keys) - todo:]

    def wait_put(self, handle):
        job, keys = handle
        self._finish(job)
        self.manager.complete_store(keys, self.ctx)


    def close(self):
        self.worker.shutdown()
        self.manager.shutdown()


class SglangIO:
    """SGLang's HiCache storage, zero-copy interface_v1."""

    def __init__(self, addr, maxblk):
        import torch
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
        from sglang.srt.mem_cache.pool_host import MLATokenToKVPoolHost
        from sglang.srt.mem_cache.storage import StorageBackendFactory

        self.torch = torch
        self.hp = MLATokenToKVPoolHost(1, MLA_DIM, torch.bfloat16,
                                       2 * maxblk * TOK, TOK, "page_first")
        extra = {"backend_name": "tidepool",
                 "module_path": "tidepool.connectors.sglang",
                 "class_name": "TidepoolHiCacheStorage", "addr": addr,
                 "interface_v1": 1}
        cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, True, False, True,
                                   MODEL, extra_config=extra)
        self.st = StorageBackendFactory.create_backend("dynamic", cfg,
                                                       self.hp)
        self.st.register_mem_pool_host(self.hp)
        self.pages = self.hp.kv_buffer.view(-1).view(torch.uint8).numpy() \
            .reshape(2 * maxblk, BLOCK)
        self.maxblk = maxblk
        self.pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="hicache-backup")
        self.block_bytes = BLOCK

    @staticmethod
    def _keys(chunks):
        return [c.hex() for c in chunks]  # page hashes: strings

    def _idx(self, first, n):
        return self.torch.arange(first * TOK, (first + n) * TOK)

    def expected(self, chunk_key, layer):
        return chunk_key

    def exists(self, chunks):
        return self.st.batch_exists(self._keys(chunks))

    def prepare_get(self, chunks):
        self.pages[:len(chunks), :32] = 0
        self._idx_get = self._idx(0, len(chunks))

    def get(self, chunks):
        return self.st.batch_get_v1(self._keys(chunks), self._idx_get)

    def head(self, b):
        return self.pages[b, :32].tobytes()

    def release(self):
        pass

    def prepare_put(self, chunks):
        for i, c in enumerate(chunks):
            self.pages[self.maxblk + i, :32] = bytearray(c)
        self._idx_put = self._idx(self.maxblk, len(chunks))

    def submit_put(self, chunks):
        return self.pool.submit(self.st.batch_set_v1, self._keys(chunks),
                                self._idx_put)

    def wait_put(self, handle):
        handle.result()


    def close(self):
        self.pool.shutdown()
        self.st.close()


class LmcacheIO:
    """LMCache's RemoteBackend on tidepool's remote connector."""

    def __init__(self, addr, maxblk):
        import torch
        from lmcache.utils import CacheEngineKey
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.memory_management import MemoryFormat
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.local_cpu_backend import (
            LocalCPUBackend)
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend

        self.torch, self.Key, self.fmt = torch, CacheEngineKey, MemoryFormat
        cfg = {
            "chunk_size": TOK, "local_cpu": False, "max_local_cpu_size": 1,
            "remote_url": "tidepool://" + addr,
            "remote_storage_plugins": ["tidepool"], "remote_serde": "naive",
            "extra_config": {
                "remote_storage_plugin.tidepool.module_path":
                    "tidepool.connectors.lmcache",
                "remote_storage_plugin.tidepool.class_name":
                    "TidepoolConnectorAdapter",
                "tidepool.client_name": "connbench-lmcache"}}
        self.md = LMCacheMetadata(MODEL, 1, 0, "vllm", torch.float16,
                                  (1, 2, TOK, 8, 128))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="lmcache-loop", daemon=True)
        self.thread.start()
        self.cpu = LocalCPUBackend(cfg, self.md,
                                   nbytes=(2 * maxblk + 8) * BLOCK)
        self.rb = RemoteBackend(LMCacheEngineConfig.from_dict(cfg), self.md,
                                self.loop, self.cpu)
        if self.rb.connection is None:
            raise RuntimeError(f"connbench: LMCache found no tidepool "
                               f"connector: {self.rb.connect_error}")
        self.got = []
        self.block_bytes = BLOCK

    def _keys(self, chunks):
        return [self.Key("vllm", MODEL, 1, 0, c.hex()) for c in chunks]

    def expected(self, chunk_key, layer):
        return chunk_key

    def exists(self, chunks):
        return self.rb.batched_contains(self._keys(chunks))

    def prepare_get(self, chunks):
        self._get_keys = self._keys(chunks)

    def get(self, chunks):
        self.got = self.rb.batched_get_blocking(self._get_keys)
        return [o is not None for o in self.got]

    def head(self, b):
        return self.got[b].tensor.view(-1).view(self.torch.uint8)[:32] \
            .numpy().tobytes()

    def release(self):
        for o in self.got:
            if o is not None:
                o.ref_count_down()
        self.got = []

    def prepare_put(self, chunks):
        objs = []
        for c in chunks:
            o = self.cpu.allocate(self.torch.Size([2, 1, TOK, 1024]),
                                  self.torch.float16, self.fmt.KV_2LTD)
            if o is None:
                raise RuntimeError("connbench: LMCache's allocator is full")
            o.tensor.view(-1).view(self.torch.uint8)[:32] = \
                self.torch.frombuffer(bytearray(c), dtype=self.torch.uint8)
            objs.append(o)
        self._put = (self._keys(chunks), objs)

    def submit_put(self, chunks):
        keys, objs = self._put
        return self.rb.batched_submit_put_task(keys, objs), objs

    def wait_put(self, handle):
        futs, objs = handle
        for f in futs:
            f.result()
        for o in objs:
            o.ref_count_down()  # the owner's reference


    def close(self):
        self.rb.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        if self.cpu.memory_allocator.num_active_allocations:
            raise RuntimeError("connbench: LMCache allocations leaked")


class Run(pybench.Run):
    """pybench's memd, header and raw file; the shared part per impl."""

    def __init__(self, a):
        super().__init__(a)
        # the engines: the stand-ins, as an engine's process imports them
        sys.path.insert(0, os.path.join(ROOT, "python", "tests", "engines"))

    def line(self, s):
        super().line(s.replace("# pybench", "# connbench", 1))

    def start_memd(self):
        ready = os.path.join(self.tmp, "memd.ready")
        if os.path.exists(ready):
            os.unlink(ready)  # the previous memd's
        super().start_memd()

    def shared(self, rep):
        import tidepool
        a = self.a
        keys = pybench.prompt_keys(rep, a.prompts)
        maxblk = pybench.max_blocks(keys, 1)
        order = list(a.impls)
        k = (rep - 1) % len(order)
        order = order[k:] + order[:k]
        for impl in order:
            # a fresh memd per run: every path starts from an empty tier
            # and every slab free (see the top of this file)
            self.start_memd()
            try:
                self.log(f"rep {rep}/{a.reps} shared: {impl} "
                         f"(memd {self.addr})")
                if impl == "direct":
                    with tidepool.Pool(self.addr, client_name="connbench") \
                            as pool, pool.kv() as kv:
                        io = pybench.DirectIO(kv, "numpy", maxblk, 1)
                        f = pybench.shared_run(io, keys, a)
                else:
                    io = {"vllm": VllmIO, "sglang": SglangIO,
                          "lmcache": LmcacheIO}[impl](self.addr, maxblk)
                    try:
                        f = pybench.shared_run(io, keys, a)
                    finally:
                        io.close()
            finally:
                self.stop_memd()
            self.fields_line(f"connbench part=shared impl={impl} "
                             f"prompts={a.prompts}", f, rep)

    def bulk(self, rep):
        """One prefix's 109 blocks stored through every path, then got
        through each path in turn, call by call, the order rotating
        (pybench's bulk part): the connectors' get without the
        workload's noise. One memd for all paths (every get a hit)."""
        import tidepool
        a = self.a
        chunks = pybench.prompt_keys(rep, 1)[0][:pybench.BULK_BATCH]
        n = len(chunks)
        self.start_memd()
        ios = []
        try:
            with tidepool.Pool(self.addr, client_name="connbench") as pool, \
                    pool.kv() as kv:
                for impl in a.impls:
                    io = (pybench.DirectIO(kv, "numpy", n, 1)
                          if impl == "direct" else
                          {"vllm": VllmIO, "sglang": SglangIO,
                           "lmcache": LmcacheIO}[impl](self.addr, n))
                    ios.append((impl, io))
                    io.prepare_put(chunks)
                    io.wait_put(io.submit_put(chunks))
                iters = a.bulk_iters
                warm = max(1, iters // 10)
                ns = {impl: [] for impl, _ in ios}
                bad = {impl: 0 for impl, _ in ios}
                now = time.perf_counter_ns
                self.log(f"rep {rep}/{a.reps} bulk: {n} blocks x "
                         f"{warm}+{iters}")
                for it in range(warm + iters):
                    for j in range(len(ios)):
                        impl, io = ios[(it + j) % len(ios)]
                        io.prepare_get(chunks)
                        t0 = now()
                        hit = io.get(chunks)
                        dt = now() - t0
                        bad[impl] += sum(
                            1 for b in range(n) if not hit[b] or
                            io.head(b) != io.expected(chunks[b], 0))
                        io.release()
                        if it >= warm:
                            ns[impl].append(dt)
                for impl, _ in ios:
                    med = statistics.median(ns[impl])
                    self.line(f"connbench part=bulk impl={impl} batch={n} "
                              f"size={BLOCK} iters={len(ns[impl])} "
                              f"ms_call={med / 1e6:.3f} "
                              f"MBps={n * BLOCK / (med / 1e9) / 1e6:.1f} "
                              f"bad={bad[impl]} rep={rep}")
        finally:
            for impl, io in ios:
                if impl != "direct":
                    io.close()
            self.stop_memd()

    def run(self):
        self.start_memd()  # the header names one; each run has its own
        try:
            self.header()
        finally:
            self.stop_memd()
        with self.recording(summarize):
            for rep in range(1, self.a.reps + 1):
                if "shared" in self.a.parts:
                    self.shared(rep)
                if "bulk" in self.a.parts:
                    self.bulk(rep)


def summarize(paths):
    def key(bench, kv):
        if bench != "connbench":
            return None
        if kv.get("part") == "bulk":
            return ("bulk", kv["impl"])
        return kv["impl"] if kv.get("part") == "shared" else None

    rows, comments = benchutil.load(paths, key)
    med = benchutil.median
    out = list(comments)
    res, bad = {}, 0
    if any(isinstance(k, str) for k in rows):
        out.append("")
        out.append("shared-prefix workload (kvbench's) through each path, "
                   "medians over repetitions:")
        out.append(f"{'impl':<8} {'runs':>4} {'get MB/s':>9} "
                   f"{'range':>13} {'put MB/s':>9} {'exists ms':>9} "
                   f"{'get ms':>8} {'submit ms':>9} {'hit':>6} {'tier':>6} "
                   f"{'bad':>4}")
    for impl in IMPLS:
        if impl not in rows:
            continue
        g = benchutil.values(rows, impl, "get_MBps") or [float("nan")]
        b = int(max(benchutil.values(rows, impl, "bad")))
        bad += b
        out.append(
            f"{impl:<8} {len(rows[impl]):>4} "
            f"{benchutil.fmt(med(rows, impl, 'get_MBps')):>9} "
            f"{min(g):>6.0f}..{max(g):<6.0f} "
            f"{benchutil.fmt(med(rows, impl, 'put_MBps')):>9} "
            f"{med(rows, impl, 'exists_ms'):>9.3f} "
            f"{benchutil.fmt(med(rows, impl, 'get_ms'), 1):>8} "
            f"{med(rows, impl, 'submit_ms'):>9.3f} "
            f"{med(rows, impl, 'hit'):>6.3f} "
            f"{med(rows, impl, 'tier_hit'):>6.3f} {b:>4}")
        res[f"{impl}_get_MBps"] = med(rows, impl, "get_MBps")
    same = True
    base = {r["rep"]: r for r in rows.get("direct", [])}
    ratios = {}
    for impl in IMPLS[1:]:
        if impl not in rows or not base:
            continue
        per, diff = [], []
        for r in rows[impl]:
            d = base.get(r["rep"])
            if d is None:
                continue
            for f in ("hit", "tier_hit", "local_hit", "get_bytes",
                      "put_bytes", "chunks"):
                if r[f] != d[f]:
                    diff.append(f"rep {r['rep']} {f} {r[f]} vs {d[f]}")
            if float(d.get("get_MBps", 0)) and float(r.get("get_MBps", 0)):
                per.append(float(r["get_MBps"]) / float(d["get_MBps"]))
        same = same and not diff
        out.append(f"hits impl={impl} same_as_direct="
                   f"{'no' if diff else 'yes'} reps={len(rows[impl])}"
                   + ("" if not diff else " differ: " + "; ".join(diff)))
        if per:
            r = statistics.median(per)
            ratios[impl] = r
            out.append(
                f"ratio name=get_MBps_{impl}_vs_direct value={r:.3f} "
                f"target={TARGET} pass={'yes' if r >= TARGET else 'no'} "
                "per_rep=" + ",".join(f"{x:.3f}" for x in per))
    if any(isinstance(k, tuple) for k in rows):
        out.append("")
        out.append(f"get of {pybench.BULK_BATCH} blocks of 1 MiB in one "
                   "call through each path in turn, medians over calls, "
                   "then repetitions:")
        out.append(f"{'impl':<8} {'runs':>4} {'MB/s':>7} {'range':>13} "
                   f"{'ms/call':>8} {'bad':>4}")
        base = {r["rep"]: r for r in rows.get(("bulk", "direct"), [])}
        for impl in IMPLS:
            k = ("bulk", impl)
            if k not in rows:
                continue
            g = benchutil.values(rows, k, "MBps")
            b = int(max(benchutil.values(rows, k, "bad")))
            bad += b
            out.append(f"{impl:<8} {len(rows[k]):>4} "
                       f"{med(rows, k, 'MBps'):>7.0f} "
                       f"{min(g):>6.0f}..{max(g):<6.0f} "
                       f"{med(rows, k, 'ms_call'):>8.2f} {b:>4}")
            res[f"bulk_{impl}_MBps"] = med(rows, k, "MBps")
            if impl == "direct" or not base:
                continue
            per = [float(r["MBps"]) / float(base[r["rep"]]["MBps"])
                   for r in rows[k] if r["rep"] in base]
            r = statistics.median(per)
            ratios["bulk_" + impl] = r
            out.append(
                f"ratio name=bulk_get_MBps_{impl}_vs_direct value={r:.3f} "
                f"target={TARGET} pass={'yes' if r >= TARGET else 'no'} "
                "per_rep=" + ",".join(f"{x:.3f}" for x in per))
    ok = bool(ratios) and all(v >= TARGET for v in ratios.values()) and \
        same and not bad
    out.append("")
    out.append("connbench result " + " ".join(
        [f"{k}_ratio={v:.3f}" for k, v in ratios.items()]
        + [f"target={TARGET}", f"same_hits={'yes' if same else 'no'}",
           f"bad={bad}", f"pass={'yes' if ok else 'no'}"]
        + [f"{k}={v:.1f}" for k, v in res.items() if v is not None]))
    return "\n".join(out) + "\n"


def main():
    env = os.environ.get
    ap = pybench.bench_args(
        "The engine connectors against the KV API, one memd.", "3584M")
    ap.add_argument("--hbm", type=int, default=int(env("HBM", 5)))
    ap.add_argument("--impls", default=env("IMPLS", " ".join(IMPLS)))
    ap.add_argument("--parts", default=env("PARTS", "shared bulk"))
    ap.add_argument("--bulk-iters", type=int,
                    default=int(env("BULK_ITERS", 30)))
    a = pybench.bench_parse(ap, summarize)
    a.impls = a.impls.replace(",", " ").split()
    if not set(a.impls) <= set(IMPLS) or not a.impls or a.reps < 1:
        ap.error("bad --impls or --reps")
    # pybench's settings that this bench does not vary
    a.layers, a.tps, a.calls_scale = 1, "10000", 1.0
    a.parts = a.parts.replace(",", " ").split()
    if not a.parts or not set(a.parts) <= {"shared", "bulk"}:
        ap.error("bad --parts")
    pybench.bench_dirs(a, os.path.join("memd", "memd"), "connbench-results")
    pybench.size_bytes(a.cap)
    Run(a).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
