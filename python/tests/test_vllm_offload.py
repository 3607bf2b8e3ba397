"""vLLM selects tidepool by configuration: tidepool.connectors.vllm driven
through the stand-ins of vLLM's classes, factory, plugin loader and
OffloadingConnector call sequence (python/tests/engines/vllm, each module
naming the upstream file and commit), against a real standalone memd and
a tenant of the 2-donor cluster. CPU tensors stand in for the GPU's KV
caches. No timing is asserted.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import torch

import tidepool
from conftest import in_threads

# what the user types (issue 27), HOST:PORT etc. filled in per target
KV_TRANSFER_CONFIG = (
    '{"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
    '"kv_connector_extra_config":{"spec_name":"TidepoolOffloadingSpec",'
    '"spec_module_path":"tidepool.connectors.vllm","addr":"HOST:PORT",'
    '"tenant":"...","secret_file":"..."}}')

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def extra_config(pool_args, module_path=True, **more):
    """kv_connector_extra_config of KV_TRANSFER_CONFIG for a target."""
    cfg = json.loads(KV_TRANSFER_CONFIG)
    assert cfg["kv_connector"] == "OffloadingConnector"
    extra = cfg["kv_connector_extra_config"]
    extra["addr"] = pool_args["addr"]
    extra["tenant"] = pool_args.get("tenant")
    extra["secret_file"] = pool_args.get("secret_file")
    if not module_path:
        del extra["spec_module_path"]
    extra.update(more)
    return extra


def offloading_config(extra, *, rank=0, world=1, tokens=16, events=False,
                      model="test-model", per_chunk=1):
    """vLLM's OffloadingConfig (stand-in) as vLLM builds it."""
    from vllm.v1.kv_offload import config as c

    return c.OffloadingConfig(
        groups=(c.OffloadingGroupConfig(tokens, ("l0", "l1")),),
        worker_kv_bytes_per_block=0, enable_kv_cache_events=events,
        extra_config=extra, engine_id="engine-0",
        model=c.OffloadingModelConfig(model, "float16"),
        cache=c.OffloadingCacheConfig(tokens, per_chunk),
        parallel=c.OffloadingParallelConfig(
            rank, world, world, 1, 1, 1, 0, False))


def create_spec(extra, **kw):
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    return OffloadingSpecFactory.create_spec(offloading_config(extra, **kw))


def kv_caches(num_blocks=32, layout=(4096,), seed=0, fill=True):
    """vLLM's CanonicalKVCaches (stand-in) over CPU tensors: one tensor
    per entry of layout (its row bytes), all in group 0. Returns (caches,
    tensors)."""
    from vllm.v1.kv_offload import base as b

    g = torch.Generator().manual_seed(seed)
    ts = []
    for width in layout:
        t = torch.zeros((num_blocks, width), dtype=torch.int8)
        if fill:
            t.copy_(torch.randint(-128, 128, t.shape, generator=g,
                                  dtype=torch.int8))
        ts.append(t)
    caches = b.CanonicalKVCaches(
        [b.CanonicalKVCacheTensor(t, t.shape[1]) for t in ts],
        [[b.CanonicalKVCacheRef(i, t.shape[1]) for i, t in enumerate(ts)]])
    return caches, ts


def offload_keys(n, tag=""):
    """n vLLM OffloadKeys (block hash + group 0)."""
    from vllm.v1.kv_offload.base import make_offload_key

    run = uuid.uuid4().bytes + tag.encode()
    return [make_offload_key(hashlib.sha256(run + struct.pack("<I", i))
                             .digest(), 0) for i in range(n)]


def rows(ts, ids):
    return [torch.cat([t[i] for t in ts]) for i in ids]


def drain(worker, jobs):
    """Waits for jobs; returns {job_id: TransferResult}."""
    worker.wait(set(jobs))
    out = {}
    while set(jobs) - set(out):
        for r in worker.get_finished():
            out[r.job_id] = r
    return out


def prefix(m, keys, ctx):
    """How many leading keys vLLM's scheduler finds present through
    manager m: lookups in order until a MISS, going on after a RETRY;
    while one deferred, the step ends (on_schedule_end) and it scans
    again."""
    from vllm.v1.kv_offload.base import LookupResult, ScheduleEndContext

    for _ in range(10):
        n, defer = 0, False
        for k in keys:
            r = m.lookup(k, ctx)
            if r is LookupResult.HIT:
                n += 1
            elif r is LookupResult.RETRY:
                defer = True
            else:
                break
        if not defer:
            return n
        m.on_schedule_end(ScheduleEndContext((), ()))
    raise AssertionError("the lookup stayed deferred")


class CountingKV:
    """A KV handle recording the number of keys of each exists call."""

    def __init__(self, kv):
        self.kv, self.exists_calls = kv, []

    def __getattr__(self, name):
        return getattr(self.kv, name)

    def exists(self, keys):
        self.exists_calls.append(len(keys))
        return self.kv.exists(keys)

    def exists_async(self, keys):
        self.exists_calls.append(len(keys))
        return self.kv.exists_async(keys)


@pytest.fixture
def vllm_engine(engines):
    """The vLLM stand-ins on sys.path, with a fresh plugin/factory state.
    The engines fixture makes tidepool.connectors.vllm import afresh;
    the package's attributes still name the modules imported before, so
    ``from tidepool.connectors import vllm`` would find those: they are
    dropped here (and put back after)."""
    import tidepool.connectors as pkg
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    names = ("vllm", "vllm_offload")
    before = {n: pkg.__dict__.pop(n) for n in names if n in pkg.__dict__}
    saved = dict(OffloadingSpecFactory._registry)
    yield engines
    OffloadingSpecFactory._registry.clear()
    OffloadingSpecFactory._registry.update(saved)
    for n in names:
        pkg.__dict__.pop(n, None)
    pkg.__dict__.update(before)


# ---------------------------------------------------------------------
# selection


def test_selection_through_the_factory(vllm_engine, pool_args):
    """The exact configuration, through OffloadingSpecFactory, yields
    tidepool's classes, each a subclass of vLLM's own."""
    from vllm.v1.kv_offload import base as b
    from tidepool.connectors import vllm as tv

    spec = create_spec(extra_config(pool_args))
    assert type(spec) is tv.TidepoolOffloadingSpec
    assert isinstance(spec, b.OffloadingSpec)
    m = spec.get_manager()
    assert spec.get_manager() is m
    assert isinstance(m, b.OffloadingManager)
    caches, _ = kv_caches(4)
    w = spec.get_worker(caches)
    try:
        assert isinstance(w, b.OffloadingWorker)
        keys = offload_keys(1)
        ctx = b.ReqContext("r")
        assert isinstance(m.on_new_request(ctx), b.RequestOffloadingContext)
        assert m.lookup(keys[0], ctx) is b.LookupResult.MISS
        out = m.prepare_store(keys, ctx)
        assert isinstance(out, b.PrepareStoreOutput)
        assert out.keys_to_store == keys and out.evicted_keys == []
        assert isinstance(out.store_spec, b.LoadStoreSpec)
        assert out.store_spec.medium() == "TIDEPOOL"
        assert not m.has_pending_work() and m.get_stats() is None
    finally:
        w.shutdown()
        m.shutdown()


def test_selection_through_the_entry_point(vllm_engine, pool_args,
                                           tmp_path, monkeypatch):
    """vLLM's plugin loader finds the "vllm.general_plugins" entry point
    of python/setup.py (an installed package's metadata, here a
    dist-info on sys.path), which registers the spec: spec_module_path
    may be left out. Loading it twice is harmless."""
    from vllm import plugins
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    setup = open(os.path.join(ROOT, "python", "setup.py")).read()
    assert '"vllm.general_plugins": [' in setup
    ep = "tidepool = tidepool.connectors.vllm:register"
    assert f'"{ep}"' in setup
    with pytest.raises(ValueError, match="Unsupported spec type"):
        create_spec(extra_config(pool_args, module_path=False))
    dist = tmp_path / "tidepool-0.2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tidepool\n"
                                   "Version: 0.2.0\n")
    (dist / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\n{ep}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("VLLM_PLUGINS", "tidepool")
    monkeypatch.setattr(plugins, "plugins_loaded", False)
    plugins.load_general_plugins()
    assert "TidepoolOffloadingSpec" in OffloadingSpecFactory._registry
    from tidepool.connectors import vllm as tv

    tv.register()  # another process's load, in effect: no error
    spec = create_spec(extra_config(pool_args, module_path=False))
    assert type(spec).__name__ == "TidepoolOffloadingSpec"
    spec.get_manager().shutdown()


def test_unsupported_vllm_is_an_error_at_selection(tmp_path):
    """A vLLM of the abstract.py generation (no kv_offload/base.py):
    selecting the spec through its factory raises UnsupportedVLLMError
    naming the version, while the entry point's register() does not
    raise (vLLM calls it in every process); no vLLM at all is the same
    error, and the vLLM-free manager stays usable. Run in a child: its
    own sys.path, no stand-ins."""
    old = tmp_path / "vllm"
    (old / "v1" / "kv_offload").mkdir(parents=True)
    (old / "__init__.py").write_text('__version__ = "0.10.2"\n')
    (old / "v1" / "__init__.py").write_text("")
    (old / "v1" / "kv_offload" / "__init__.py").write_text("")
    (old / "v1" / "kv_offload" / "abstract.py").write_text(textwrap.dedent(
        """
        class LoadStoreSpec: pass
        class OffloadingManager: pass
        """))
    (old / "v1" / "kv_offload" / "spec.py").write_text(
        "class OffloadingSpec: pass\n")
    (old / "v1" / "kv_offload" / "factory.py").write_text(textwrap.dedent(
        """
        import importlib
        from vllm.v1.kv_offload.spec import OffloadingSpec
        class OffloadingSpecFactory:
            _registry = {}
            @classmethod
            def register_spec(cls, name, module_path, class_name):
                if name in cls._registry:
                    raise ValueError(name)
                cls._registry[name] = (module_path, class_name)
            @classmethod
            def create_spec(cls, extra):
                mod, name = cls._registry.get(
                    extra["spec_name"],
                    (extra.get("spec_module_path"), extra["spec_name"]))
                return getattr(importlib.import_module(mod), name)(extra)
        """))
    code = textwrap.dedent(
        """
        import sys
        from tidepool.connectors import vllm as tv
        if sys.argv[1] == "old":
            from vllm.v1.kv_offload.factory import OffloadingSpecFactory
            tv.register()
            tv.register()
            try:
                OffloadingSpecFactory.create_spec(
                    {"spec_name": "TidepoolOffloadingSpec"})
            except tv.UnsupportedVLLMError as e:
                print("ERR", e)
        else:
            try:
                tv.TidepoolOffloadingSpec
            except tv.UnsupportedVLLMError as e:
                print("ERR", e)
            m = tv.TidepoolOffloadingManager  # the vLLM-free manager
            print("OK", m.__module__)
        """)
    # where this process found the package and its extension
    paths = [os.path.dirname(os.path.dirname(tidepool.__file__)),
             os.path.dirname(tidepool._c.__file__)]
    for which, extra in (("old", [str(tmp_path)]), ("none", [])):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(extra + paths))
        # -S: no site-packages, so an installed vLLM stays out of it
        r = subprocess.run([sys.executable, "-S", "-c", code, which],
                           env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        if which == "old":
            assert "ERR tidepool.connectors.vllm: vLLM 0.10.2 is not " \
                   "supported: its vllm/v1/kv_offload/base.py does not " \
                   "exist" in r.stdout, r.stdout
        else:
            assert "ERR tidepool.connectors.vllm: vLLM is not " \
                   "importable" in r.stdout, r.stdout
            assert "OK tidepool.connectors.vllm" in r.stdout


@pytest.mark.parametrize("bad,match", [
    ({"replicas": 3}, "replicas=3 is not in"),
    ({"timeout_ms": "soon"}, "timeout_ms must be an integer"),
    ({"addr": 7470}, "addr must be a string"),
    ({"secret_file": None}, "tenant needs secret_file"),
])
def test_bad_settings_fail_at_selection(vllm_engine, cluster, bad, match):
    extra = extra_config({"addr": cluster.addr, "tenant": cluster.tenant,
                          "secret_file": cluster.secret_file}, **bad)
    with pytest.raises(ValueError, match=match):
        create_spec(extra)


def test_offloaded_blocks_larger_than_gpu_blocks_refused(vllm_engine,
                                                         memd):
    with pytest.raises(ValueError, match="one GPU block"):
        create_spec(extra_config({"addr": memd.addr}), per_chunk=4)


# ---------------------------------------------------------------------
# the call sequence: scheduler + worker


class Engine:
    """One vLLM engine's connector halves (stand-ins) over a spec built
    by the factory, with CPU "GPU" KV caches."""

    def __init__(self, extra, caches, **kw):
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (
            scheduler, worker)

        self.sched_spec = create_spec(extra, **kw)
        self.sched = scheduler.OffloadingConnectorScheduler(self.sched_spec)
        self.worker_spec = create_spec(extra, **kw)
        self.worker = worker.OffloadingConnectorWorker(self.worker_spec)
        self.worker.register_kv_caches(caches)
        self.Request = scheduler.Request

    def matched(self, req, computed):
        """get_num_new_matched_tokens as vLLM's engine gets it: asked
        again after a step while the connector defers (None)."""
        for _ in range(10):
            got = self.sched.get_num_new_matched_tokens(req, computed)
            if got[0] is not None:
                return got
            self.step()
        raise AssertionError("the lookup stayed deferred")

    def step(self, computed=None):
        """One engine step: the scheduler's metadata, the worker's
        transfers (stores of the step before are started here, as
        upstream defers them), waiting for all of them, their
        completions back to the scheduler."""
        meta = self.sched.build_connector_meta(computed or {})
        self.worker.start_kv_transfers(meta)
        self.worker.prepare_store_kv(meta)
        self.worker.start_kv_transfers(type(meta)())
        jobs = list(meta.load_jobs) + list(meta.store_jobs)
        self.worker.worker.wait(set(jobs))
        done = set()
        while not set(jobs) <= done:
            self.worker.get_finished()
            c = self.worker.take_completed()
            done |= set(c)
            self.sched.update_connector_output(c)
        return meta

    def close(self):
        self.worker.shutdown()
        self.sched.shutdown()


@pytest.mark.parametrize("layout", [(4096,), (1024, 3072, 512)],
                         ids=["one-tensor", "three-tensors"])
def test_store_then_load_bytes_equal(vllm_engine, pool_args, layout):
    """Engine A computes 6 blocks and stores them; engine B (other KV
    caches, other block ids) finds them with lookup and loads them: the
    bytes of every block are A's. The pins taken by prepare_load are
    gone after the load."""
    extra = extra_config(pool_args)
    ca, ta = kv_caches(32, layout, seed=1)
    cb, tb = kv_caches(32, layout, fill=False)
    a, b = Engine(extra, ca, events=True), Engine(extra, cb)
    try:
        keys = offload_keys(6)
        req = a.Request("a1", 6 * 16 + 5, keys)
        assert a.sched.get_num_new_matched_tokens(req, 0) == (0, False)
        ids_a = [3, 9, 1, 30, 7, 12]
        a.sched.update_state_after_alloc(req, ids_a, 0, 0)
        meta = a.step({"a1": 4 * 16 + 3})  # 4 whole blocks this step
        assert [len(j.dst_spec.keys) for j in meta.store_jobs.values()] == [4]
        meta = a.step({"a1": 6 * 16 + 5})
        assert [len(j.dst_spec.keys) for j in meta.store_jobs.values()] == [2]
        assert not a.worker.failed
        ev = a.sched.take_events()
        assert [e.keys for e in ev] == [keys[:4], keys[4:]]
        assert all(e.removed is False for e in ev)
        a.sched.request_finished(req)

        req = b.Request("b1", 7 * 16, keys + offload_keys(1))
        assert b.matched(req, 0) == (96, True)
        assert b.sched.get_num_new_matched_tokens(req, 32) == (64, True)
        ids_b = [20, 21, 5, 6, 0, 31, 2]
        b.sched.update_state_after_alloc(req, ids_b, 0, 96)
        spec = b.sched._meta.load_jobs[max(b.sched._meta.load_jobs)]
        tkeys = spec.src_spec.keys
        with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
            # pinned by prepare_load: a pin each, which another handle
            # may remove and put back
            assert kv.unpin(tkeys) == [True] * 6
            assert kv.pin(tkeys) == [True] * 6
            b.step()
            assert kv.unpin(tkeys) == [False] * 6  # complete_load unpinned
        assert not b.worker.failed
        assert all(r.success and r.transfer_size == 6 * sum(layout)
                   for r in b.worker.results)
        for x, y in zip(rows(ta, ids_a), rows(tb, ids_b[:6])):
            assert torch.equal(x, y)
        assert not tb[0][ids_b[6]].any()  # not loaded: untouched
    finally:
        a.close()
        b.close()


def test_block_gone_between_lookup_and_load(vllm_engine, pool_args):
    """A block deleted after lookup (before prepare_load could pin it):
    its load job is a failed transfer, reported to vLLM; with staging
    (two tensors) the destination blocks keep their bytes; the other
    jobs are unaffected and nothing raises."""
    extra = extra_config(pool_args)
    layout = (2048, 2048)
    ca, ta = kv_caches(16, layout, seed=2)
    cb, tb = kv_caches(16, layout, fill=False)
    a, b = Engine(extra, ca), Engine(extra, cb)
    try:
        keys = offload_keys(4)
        req = a.Request("a", 64, keys)
        a.sched.update_state_after_alloc(req, [0, 1, 2, 3], 0, 0)
        a.step({"a": 64})
        req = b.Request("b", 64, keys)
        assert b.matched(req, 0) == (64, True)
        from tidepool.connectors.vllm import block_key

        ns = b.sched_spec.tidepool["namespace"]
        with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
            assert kv.delete([block_key(keys[2], ns)]) == [True]
        b.sched.update_state_after_alloc(req, [8, 9, 10, 11], 0, 64)
        before = tb[0].clone(), tb[1].clone()
        b.step()
        assert len(b.worker.failed) == 1
        (r,) = b.worker.results
        assert r.success is False
        assert torch.equal(tb[0], before[0]) and torch.equal(tb[1],
                                                             before[1])
        # the next lookup sees the prefix up to the hole
        req2 = b.Request("b2", 64, keys)
        assert b.matched(req2, 0) == (32, True)
    finally:
        a.close()
        b.close()


def test_direct_load_of_a_missing_block_fails(vllm_engine, memd):
    """One tensor in CPU memory: values go straight into the rows (no
    staging); a missing block still fails the job."""
    spec = create_spec(extra_config({"addr": memd.addr}))
    caches, ts = kv_caches(8, (8192,), seed=3)
    w = spec.get_worker(caches)
    m = spec.get_manager()
    try:
        from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext

        keys = offload_keys(3)
        ctx = ReqContext("r")
        out = m.prepare_store(keys[:2], ctx)
        assert w.submit_store(1, GPULoadStoreSpec([0, 1], [2], [0]),
                              out.store_spec)
        assert drain(w, [1])[1].success
        m.complete_store(keys[:2], ctx)
        src = m.prepare_load(keys, ctx)
        assert w.submit_load(2, src, GPULoadStoreSpec([5, 6, 7], [3], [0]))
        assert drain(w, [2])[2].success is False
        m.complete_load(keys, ctx)
        src = m.prepare_load(keys[:2], ctx)
        assert w.submit_load(3, src, GPULoadStoreSpec([5, 6], [2], [0]))
        assert drain(w, [3])[3].success
        assert torch.equal(ts[0][5], ts[0][0]) and torch.equal(ts[0][6],
                                                               ts[0][1])
        m.complete_load(keys[:2], ctx)
        # specs that do not match: a failed job, not an exception
        assert w.submit_load(4, src, GPULoadStoreSpec([5], [1], [0]))
        assert drain(w, [4])[4].success is False
        assert not w.submit_load(4, src, GPULoadStoreSpec([5, 6], [2],
                                                          [0])) or True
    finally:
        w.shutdown()
        m.shutdown()


def test_many_jobs_in_flight_and_threads(vllm_engine, pool_args):
    """64 store jobs in flight at once from 4 threads, then 64 loads,
    collected by get_finished as they end: every block's bytes equal."""
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext

    extra = extra_config(pool_args)
    spec = create_spec(extra)
    ca, ta = kv_caches(64, (2048, 1024), seed=4)
    cb, tb = kv_caches(64, (2048, 1024), fill=False)
    wa, wb = spec.get_worker(ca), spec.get_worker(cb)
    m = spec.get_manager()
    try:
        keys = offload_keys(64)
        ctx = ReqContext("r")
        outs = [m.prepare_store([k], ctx).store_spec for k in keys]

        def submit(t):  # jobs t, t + 4, ...
            for i in range(t, 64, 4):
                assert wa.submit_store(
                    i, GPULoadStoreSpec([i], [1], [i]), outs[i])

        in_threads(submit, 4)
        res = drain(wa, range(64))
        assert all(r.success for r in res.values())
        m.complete_store(keys, ctx)
        src = m.prepare_load(keys, ctx)
        perm = list(reversed(range(64)))
        for j in range(8):
            sub = type(src)(src.keys[j * 8:(j + 1) * 8])
            assert wb.submit_load(100 + j, sub, GPULoadStoreSpec(
                perm[j * 8:(j + 1) * 8], [8], [j * 8]))
        res = drain(wb, range(100, 108))
        assert all(r.success for r in res.values())
        m.complete_load(keys, ctx)
        for i in range(64):
            for x, y in zip(ta, tb):
                assert torch.equal(x[i], y[perm[i]])
    finally:
        wa.shutdown()
        wb.shutdown()
        m.shutdown()


def test_shutdown_waits_unpins_and_refuses(vllm_engine, pool_args):
    """worker.shutdown() lets the jobs in flight end and closes; a job
    after it is refused (False); manager.shutdown() removes its pins and
    later calls raise ClosedError; both are idempotent."""
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext

    spec = create_spec(extra_config(pool_args))
    caches, ts = kv_caches(8, (4096,), seed=5)
    w = spec.get_worker(caches)
    m = spec.get_manager()
    keys = offload_keys(4)
    ctx = ReqContext("r")
    out = m.prepare_store(keys, ctx)
    assert w.submit_store(1, GPULoadStoreSpec([0, 1, 2, 3], [4], [0]),
                          out.store_spec)
    w.shutdown()
    w.shutdown()
    assert not w.submit_store(2, GPULoadStoreSpec([0], [1], [0]),
                              out.store_spec)
    m.complete_store(keys, ctx)
    assert prefix(m, keys, ReqContext("r2")) == 4
    m.prepare_load(keys, ctx)
    m.prepare_load(keys[:1], ctx)  # pins nest
    m.shutdown()
    m.shutdown()
    from tidepool.connectors.vllm import block_key

    ns = spec.tidepool["namespace"]
    with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
        assert kv.unpin([block_key(k, ns) for k in keys]) == [False] * 4
    with pytest.raises(tidepool.ClosedError):
        m.lookup(keys[0], ctx)


def test_tensor_parallel_workers_and_reset(vllm_engine, memd):
    """World size 2: each rank stores its own bytes under its own key;
    a block is a HIT only once both ranks stored it, and each rank loads
    its own bytes back. reset_cache() hides every earlier block."""
    from vllm.v1.kv_offload.base import (GPULoadStoreSpec, LookupResult,
                                         ReqContext)

    extra = extra_config({"addr": memd.addr})
    sched = create_spec(extra, world=2)
    m = sched.get_manager()
    ranks = [create_spec(extra, world=2, rank=r) for r in range(2)]
    caches = [kv_caches(4, (1024,), seed=10 + r) for r in range(2)]
    back = [kv_caches(4, (1024,), fill=False) for r in range(2)]
    ws = [s.get_worker(c[0]) for s, c in zip(ranks, caches)]
    wb = [s.get_worker(c[0]) for s, c in zip(ranks, back)]
    try:
        keys = offload_keys(2)
        ctx = ReqContext("r")
        out = m.prepare_store(keys, ctx)
        g = GPULoadStoreSpec([0, 1], [2], [0])
        assert ws[0].submit_store(1, g, out.store_spec)
        assert drain(ws[0], [1])[1].success
        assert m.lookup(keys[0], ctx) is LookupResult.MISS  # rank 1 not yet
        assert ws[1].submit_store(1, g, out.store_spec)
        assert drain(ws[1], [1])[1].success
        m.complete_store(keys, ctx)
        assert m.lookup(keys[1], ReqContext("r2")) is LookupResult.HIT
        src = m.prepare_load(keys, ctx)
        for r in range(2):
            assert wb[r].submit_load(2, src, g)
            assert drain(wb[r], [2])[2].success
            assert torch.equal(back[r][1][0][:2], caches[r][1][0][:2])
        assert not torch.equal(back[0][1][0][:2], back[1][1][0][:2])
        m.complete_load(keys, ctx)
        m.reset_cache()
        assert m.lookup(keys[0], ctx) is LookupResult.MISS
    finally:
        for w in ws + wb:
            w.shutdown()
        m.shutdown()


def _store(m, w, keys, ctx):
    """Stores one block per key through manager m and worker w (block
    ids 0..)."""
    from vllm.v1.kv_offload.base import GPULoadStoreSpec

    out = m.prepare_store(keys, ctx)
    n = len(keys)
    assert w.submit_store(99, GPULoadStoreSpec(list(range(n)), [n], [0]),
                          out.store_spec)
    assert drain(w, [99])[99].success
    m.complete_store(keys, ctx)


def test_lookup_of_a_prefix_is_one_exists(vllm_engine, pool_args):
    """vLLM's scheduler looks a request's blocks up one key at a time:
    the first key is one KV.exists, and when it hits, the keys after it
    answer RETRY (the scheduler scans on and defers the request) and go
    to the pool together as one KV.exists at the end of the step; the
    next scan counts the present prefix, up to a block missing in the
    middle, with no further round trip. prepare_load uses the verdicts
    up: a later lookup asks the pool again."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (
        scheduler)
    from vllm.v1.kv_offload.base import ReqContext
    from tidepool.connectors.vllm import block_key

    spec = create_spec(extra_config(pool_args))
    caches, _ = kv_caches(40, (1024,), seed=7)
    w = spec.get_worker(caches)
    sched = scheduler.OffloadingConnectorScheduler(spec)
    m = sched.manager
    try:
        keys = offload_keys(40)
        _store(m, w, keys, ReqContext("store"))
        ns = spec.tidepool["namespace"]
        with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
            assert kv.delete([block_key(keys[25], ns)]) == [True]
        spy = CountingKV(m._kv)
        m._kv = spy
        req = scheduler.Request("q", 40 * 16, keys)
        assert sched.get_num_new_matched_tokens(req, 0) == (None, False)
        assert spy.exists_calls == [1] and m.has_pending_work()
        sched.build_connector_meta({})  # the step ends
        assert spy.exists_calls == [1, 39]
        # no work left for vLLM once that exists completed
        deadline = time.monotonic() + 60
        while m.has_pending_work():
            assert time.monotonic() < deadline, "KV.exists never completed"
            time.sleep(0.01)
        assert sched.get_num_new_matched_tokens(req, 0) == (25 * 16, True)
        assert sched.get_num_new_matched_tokens(req, 16) == (24 * 16, True)
        assert spy.exists_calls == [1, 39] and not m.has_pending_work()
        sched.update_state_after_alloc(req, list(range(25)), 0, 25 * 16)
        with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
            assert kv.unpin([block_key(keys[0], ns)]) == [True]
            assert kv.delete([block_key(keys[0], ns)]) == [True]
        assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
        assert spy.exists_calls == [1, 39, 1]
    finally:
        w.shutdown()
        m.shutdown()


def test_lookup_of_a_cold_request_is_answered_at_once(vllm_engine,
                                                      pool_args):
    """A request whose first block is not in the tier: one KV.exists and
    a MISS at once, nothing deferred. The miss holds for that step and
    the next; after that the pool is asked again (the block stored by
    another engine meanwhile is found)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (
        scheduler)
    from tidepool.connectors.vllm import block_key

    spec = create_spec(extra_config(pool_args))
    sched = scheduler.OffloadingConnectorScheduler(spec)
    m = sched.manager
    try:
        spy = CountingKV(m._kv)
        m._kv = spy
        keys = offload_keys(8)
        req = scheduler.Request("cold", 8 * 16, keys)
        assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
        assert spy.exists_calls == [1] and not m.has_pending_work()
        ns = spec.tidepool["namespace"]
        with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
            assert kv.put([block_key(k, ns) for k in keys[:3]],
                          [b"x" * 64] * 3) == [0] * 3
        sched.build_connector_meta({})
        assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
        assert spy.exists_calls == [1]
        sched.build_connector_meta({})
        assert sched.get_num_new_matched_tokens(req, 0) == (None, False)
        sched.build_connector_meta({})
        assert sched.get_num_new_matched_tokens(req, 0) == (48, True)
        assert spy.exists_calls == [1, 1, 7]
    finally:
        m.shutdown()


def test_lookup_under_a_scheduler_that_stops_at_retry(vllm_engine, memd):
    """A scheduler that ends its scan at the first RETRY (not vLLM's
    _maximal_prefix_lookup) hands the manager one deferred key per step:
    once such a batch of one key hits, the manager asks the request's
    next keys one at a time, so the whole prefix is known in two steps,
    not one step per block."""
    from vllm.v1.kv_offload.base import (LookupResult, ReqContext,
                                         ScheduleEndContext)
    from tidepool.connectors.vllm import block_key

    spec = create_spec(extra_config({"addr": memd.addr}))
    m = spec.get_manager()
    try:
        keys = offload_keys(12)
        ns = spec.tidepool["namespace"]
        with tidepool.Pool(memd.addr) as pool, pool.kv() as kv:
            assert kv.put([block_key(k, ns) for k in keys[:9]],
                          [b"x" * 64] * 9) == [0] * 9
        ctx = ReqContext("stops")
        steps = 0
        while True:
            steps += 1
            assert steps < 5, "one step per block"
            n, deferred = 0, False
            for k in keys:
                r = m.lookup(k, ctx)
                if r is LookupResult.RETRY:
                    deferred = True
                    break
                if r is not LookupResult.HIT:
                    break
                n += 1
            if not deferred:
                break
            m.on_schedule_end(ScheduleEndContext((), ()))
        assert (n, steps) == (9, 2)
    finally:
        m.shutdown()

def test_batched_lookup_counts_every_workers_share(vllm_engine, memd):
    """World size 2: the deferred keys' KV.exists asks for both ranks'
    shares of each; a block with one rank's share ends the prefix. A
    preempted request's verdicts are dropped (asked again)."""
    from vllm.v1.kv_offload.base import ReqContext, ScheduleEndContext
    from tidepool.connectors.vllm import block_key, worker_key

    spec = create_spec(extra_config({"addr": memd.addr}), world=2)
    m = spec.get_manager()
    try:
        keys = offload_keys(5)
        ns = spec.tidepool["namespace"]
        wk = [[worker_key(block_key(k, ns), r, 2) for r in range(2)]
              for k in keys]
        with tidepool.Pool(memd.addr) as pool, pool.kv() as kv:
            put = [wk[0][0], wk[0][1], wk[1][0], wk[1][1], wk[2][0],
                   wk[3][0], wk[3][1]]
            assert kv.put(put, [b"x" * 64] * len(put)) == [0] * len(put)
            spy = CountingKV(m._kv)
            m._kv = spy
            ctx = ReqContext("tp")
            assert prefix(m, keys, ctx) == 2
            assert spy.exists_calls == [2, 8]
            assert kv.put([wk[2][1]], [b"x" * 64]) == [0]
            assert prefix(m, keys, ctx) == 2  # the verdicts are kept
            m.on_schedule_end(ScheduleEndContext((), ("tp",)))
            assert prefix(m, keys, ctx) == 4  # preempted: asked again
            assert spy.exists_calls == [2, 8, 2, 8]
    finally:
        m.shutdown()

def test_handler_api(vllm_engine, pool_args):
    """The OffloadingHandler generation (worker/worker.py): get_handlers
    yields (GPU, TIDEPOOL) and (TIDEPOOL, GPU) handlers, routed by their
    spec classes; transfer_async / get_finished / wait round-trip the
    bytes, each handler reporting only its own jobs."""
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext
    from vllm.v1.kv_offload.worker.worker import (HandlerRouter,
                                                  OffloadingHandler)
    from tidepool.connectors import vllm as tv

    spec = create_spec(extra_config(pool_args))
    ca, ta = kv_caches(8, (1024, 1024), seed=6)
    cb, tb = kv_caches(8, (1024, 1024), fill=False)
    routers = []
    for caches in (ca, cb):
        r = HandlerRouter()
        got = list(spec.get_handlers(caches))
        assert [(s, d) for s, d, _ in got] == [
            (GPULoadStoreSpec, tv.TidepoolLoadStoreSpec),
            (tv.TidepoolLoadStoreSpec, GPULoadStoreSpec)]
        for s, d, h in got:
            assert isinstance(h, OffloadingHandler)
            r.register_handler(s, d, h)
        routers.append(r)
    m = spec.get_manager()
    try:
        keys = offload_keys(3)
        ctx = ReqContext("r")
        out = m.prepare_store(keys, ctx)
        g = GPULoadStoreSpec([4, 5, 6], [3], [0])
        assert routers[0].transfer_async(7, (g, out.store_spec))
        routers[0].wait({7})
        (res,) = routers[0].get_finished()
        assert (res.job_id, res.success) == (7, True)
        assert res.transfer_type == ("GPU", "TIDEPOOL")
        m.complete_store(keys, ctx)
        src = m.prepare_load(keys, ctx)
        assert routers[1].transfer_async(8, (src, g))
        routers[1].wait({8})
        (res,) = routers[1].get_finished()
        assert res.success and res.transfer_type == ("TIDEPOOL", "GPU")
        m.complete_load(keys, ctx)
        for x, y in zip(ta, tb):
            assert torch.equal(x[4:7], y[4:7])
    finally:
        for r in routers:
            r.shutdown()
        m.shutdown()


# ---------------------------------------------------------------------
# the generation before (base.py at 14d6506e): bool lookups,
# get_handlers, OffloadingSpec(vllm_config, kv_cache_config)

OLD_BASE = '''"""vllm/v1/kv_offload/base.py as read at vllm-project/vllm
14d6506e258a4e59702f2690c05de70cbcec87f1 (a stand-in: the classes,
fields and abstract methods the connector meets)."""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, List, NewType, Optional

import numpy as np

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash, group_idx):
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big"))


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Optional[dict] = None


class LoadStoreSpec(ABC):
    @staticmethod
    @abstractmethod
    def medium() -> str: ...


@dataclass
class PrepareStoreOutput:
    keys_to_store: list
    store_spec: LoadStoreSpec
    evicted_keys: list


@dataclass
class OffloadingEvent:
    keys: list
    medium: str
    removed: bool


class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, key, req_context): ...

    @abstractmethod
    def prepare_load(self, keys, req_context): ...

    def touch(self, keys, req_context):
        return

    def complete_load(self, keys, req_context):
        return

    @abstractmethod
    def prepare_store(self, keys, req_context): ...

    def complete_store(self, keys, req_context, success=True):
        return

    def take_events(self):
        return ()

    def shutdown(self):
        return


class BlockIDsLoadStoreSpec(LoadStoreSpec, ABC):
    def __init__(self, block_ids):
        self.block_ids = np.array(block_ids, dtype=np.int64)


class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    def __init__(self, block_ids, group_sizes, block_indices):
        super().__init__(block_ids)
        self.group_sizes = group_sizes
        self.block_indices = block_indices

    @staticmethod
    def medium():
        return "GPU"


@dataclass
class CanonicalKVCacheTensor:
    tensor: Any
    page_size_bytes: int


@dataclass
class CanonicalKVCacheRef:
    tensor_idx: int
    page_size_bytes: int


@dataclass
class CanonicalKVCaches:
    tensors: List[CanonicalKVCacheTensor]
    group_data_refs: List[List[CanonicalKVCacheRef]]


class OffloadingSpec(ABC):
    def __init__(self, vllm_config, kv_cache_config):
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.extra_config = (
            vllm_config.kv_transfer_config.kv_connector_extra_config)
        self.hash_block_size = vllm_config.cache_config.block_size
        self.gpu_block_size = tuple(
            g.kv_cache_spec.block_size
            for g in kv_cache_config.kv_cache_groups)
        self.block_size_factor = 1
        bs = self.extra_config.get("block_size")
        if bs is not None:
            self.block_size_factor = int(bs) // self.gpu_block_size[0]

    @abstractmethod
    def get_manager(self): ...

    @abstractmethod
    def get_handlers(self, kv_caches): ...
'''

OLD_FACTORY = '''"""vllm/v1/kv_offload/factory.py's contract (bf17660a) with the spec
constructor of base.py at 14d6506e: spec_cls(vllm_config,
kv_cache_config)."""
import importlib

from vllm.v1.kv_offload.base import OffloadingSpec


class OffloadingSpecFactory:
    _registry = {}

    @classmethod
    def create_spec(cls, config, kv_cache_config):
        extra = config.kv_transfer_config.kv_connector_extra_config
        name = extra.get("spec_name", "CPUOffloadingSpec")
        spec_cls = getattr(importlib.import_module(
            extra["spec_module_path"]), name)
        assert issubclass(spec_cls, OffloadingSpec)
        return spec_cls(config, kv_cache_config)
'''


@pytest.fixture
def old_vllm(tmp_path):
    """The stand-ins with base.py and factory.py of the generation
    before, first on sys.path for one test (as the engines fixture)."""
    import shutil
    import types

    import tidepool.connectors as pkg

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "engines", "vllm")
    shutil.copytree(here, tmp_path / "vllm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "vllm" / "v1" / "kv_offload" / "base.py").write_text(
        OLD_BASE)
    (tmp_path / "vllm" / "v1" / "kv_offload" / "factory.py").write_text(
        OLD_FACTORY)

    def ours(n):
        return n.split(".")[0] == "vllm" or n.startswith(
            "tidepool.connectors.")

    saved = {n: m for n, m in sys.modules.items() if ours(n)}
    for n in saved:
        del sys.modules[n]
    names = ("vllm", "vllm_offload")
    before = {n: pkg.__dict__.pop(n) for n in names if n in pkg.__dict__}
    sys.path.insert(0, str(tmp_path))
    try:
        yield types.SimpleNamespace
    finally:
        sys.path.remove(str(tmp_path))
        for n in [n for n in sys.modules if ours(n)]:
            del sys.modules[n]
        sys.modules.update(saved)
        for n in names:
            pkg.__dict__.pop(n, None)
        pkg.__dict__.update(before)


def test_generation_before_bool_lookup_and_handlers(old_vllm, pool_args):
    """base.py at 14d6506e: the spec built from (vllm_config,
    kv_cache_config), lookup answering True/False, get_handlers serving
    the worker side (get_worker refused with a clear error), bytes
    equal."""
    ns = old_vllm
    from vllm.v1.kv_offload import base as b
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.worker.worker import HandlerRouter
    from tidepool.connectors import vllm as tv

    vcfg = ns(kv_transfer_config=ns(
                  kv_connector_extra_config=extra_config(pool_args)),
              cache_config=ns(block_size=16, cache_dtype="auto"),
              model_config=ns(model="old-gen-%s" % uuid.uuid4().hex),
              parallel_config=ns(world_size=1, rank=0),
              kv_events_config=None)
    kcfg = ns(kv_cache_groups=[ns(kv_cache_spec=ns(block_size=16))])
    spec = OffloadingSpecFactory.create_spec(vcfg, kcfg)
    assert isinstance(spec, b.OffloadingSpec)
    assert spec.tidepool["namespace"].startswith("old-gen-")
    with pytest.raises(tv.UnsupportedVLLMError, match="get_handlers"):
        spec.get_worker(None)
    m = spec.get_manager()
    ca, ta = kv_caches(8, (1024, 512), seed=7)
    cb, tb = kv_caches(8, (1024, 512), fill=False)
    ra, rb = HandlerRouter(), HandlerRouter()
    for r, caches in ((ra, ca), (rb, cb)):
        for s, d, h in spec.get_handlers(caches):
            r.register_handler(s, d, h)
    try:
        keys = offload_keys(2)
        ctx = b.ReqContext("r")
        assert m.lookup(keys[0], ctx) is False
        out = m.prepare_store(keys, ctx)
        g = b.GPULoadStoreSpec([2, 3], [2], [0])
        assert ra.transfer_async(1, (g, out.store_spec))
        ra.wait({1})
        assert [x.success for x in ra.get_finished()] == [True]
        m.complete_store(keys, ctx)
        assert m.lookup(keys[1], ctx) is True
        src = m.prepare_load(keys, ctx)
        assert src.medium() == "TIDEPOOL"
        assert rb.transfer_async(2, (src, g))
        rb.wait({2})
        assert [x.success for x in rb.get_finished()] == [True]
        m.complete_load(keys, ctx)
        for x, y in zip(ta, tb):
            assert torch.equal(x[2:4], y[2:4])
    finally:
        ra.shutdown()
        rb.shutdown()
        m.shutdown()


class _SpyKV:
    """A KV handle that records the types of the buffers its transfers
    get, then calls the real one."""

    def __init__(self, kv):
        self.kv, self.types = kv, set()

    def __getattr__(self, name):
        fn = getattr(self.kv, name)
        if name not in ("put_async", "get_into_async", "put", "get_into"):
            return fn

        def spy(keys, bufs, *a, **kw):
            self.types.update(type(b) for b in bufs)
            return fn(keys, bufs, *a, **kw)
        return spy


def test_cpu_rows_reach_the_kv_calls_as_buffers(vllm_engine, memd):
    """A one-tensor group in CPU memory hands its rows to put/get as
    numpy arrays over the rows (the buffer protocol, no bounce copy),
    never as torch tensors, which the extension copies through a bounce
    buffer (docs/bench/python.md, "Engine connectors"); bytes equal."""
    import numpy as np
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext

    spec = create_spec(extra_config({"addr": memd.addr}))
    caches, ts = kv_caches(8, (8192,), seed=5)
    w = spec.get_worker(caches)
    m = spec.get_manager()
    spy = _SpyKV(w.transfers._kv)
    w.transfers._kv = spy
    try:
        keys = offload_keys(3)
        ctx = ReqContext("r")
        out = m.prepare_store(keys, ctx)
        assert w.submit_store(1, GPULoadStoreSpec([0, 1, 2], [3], [0]),
                              out.store_spec)
        assert drain(w, [1])[1].success
        m.complete_store(keys, ctx)
        src = m.prepare_load(keys, ctx)
        assert w.submit_load(2, src, GPULoadStoreSpec([5, 6, 7], [3], [0]))
        assert drain(w, [2])[2].success
        m.complete_load(keys, ctx)
        for a, b in ((0, 5), (1, 6), (2, 7)):
            assert torch.equal(ts[0][a], ts[0][b])
        assert spy.types == {np.ndarray}
    finally:
        w.shutdown()
        m.shutdown()
