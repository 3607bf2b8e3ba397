"""tidepool.connectors.sglang (TidepoolHiCacheStorage) driven through the
stand-ins of SGLang's classes (python/tests/engines/sglang: the storage
backend factory, HiCacheStorage, the host KV pools and the
HiCacheController's threads), against a real standalone memd and a
tenant of the 2-donor cluster (conftest.py). Every page is derived from
its key, so any wrong byte fails; no timing is asserted."""

import hashlib
import sys
import time
import uuid
import warnings

import pytest

import tidepool
from conftest import kv_warmed, threads_running

torch = pytest.importorskip("torch")

DEADLINE_S = 60.0
P = 4  # tokens per page
MHA = dict(layer_num=2, head_num=2, head_dim=16)  # fp16: 512 B pieces
MLA_DIM = 64


def config(args, **more):
    """The extra_config a user types (docs/engines.md), for args."""
    c = {"backend_name": "tidepool", "module_path": "tidepool.connectors."
         "sglang", "class_name": "TidepoolHiCacheStorage",
         "addr": args["addr"]}
    if args.get("tenant"):
        c["tenant"] = args["tenant"]
        c["secret_file"] = args["secret_file"]
    c.update(more)
    return c


@pytest.fixture
def target(pool_args):
    """pool_args, once the tenant's KV store takes values of every size
    used here (a new tenant's allowance arrives with the donors'
    reports: docs/cluster.md)."""
    return kv_warmed(pool_args, (256, 512, 1024, 2048, 128 << 10))


def host_pool(kind="mha", layout="page_first", pages=64, seed=0):
    from sglang.srt.mem_cache.pool_host import (MHATokenToKVPoolHost,
                                                MLATokenToKVPoolHost)
    if kind == "mha":
        return MHATokenToKVPoolHost(dtype=torch.float16, size=pages * P,
                                    page_size=P, layout=layout, seed=seed,
                                    **MHA)
    return MLATokenToKVPoolHost(2, MLA_DIM, torch.bfloat16, pages * P, P,
                                layout, seed=seed)


def controller(args, hp, model, mla=False, tp_rank=0, tp_size=1, **more):
    from sglang.srt.managers.cache_controller import HiCacheController
    return HiCacheController(hp, P, "dynamic", model_name=model,
                             storage_backend_extra_config=config(args,
                                                                 **more),
                             tp_rank=tp_rank, tp_size=tp_size,
                             is_mla_model=mla)


def tokens_of(tag, npages):
    """npages pages of tokens derived from tag."""
    h = hashlib.sha256(tag.encode()).digest()
    return [int.from_bytes(hashlib.sha256(h + bytes([i % 256, i // 256]))
                           .digest()[:3], "little")
            for i in range(npages * P)]


def page_value(hp, key):
    """The flat page stored under key: bytes derived from it."""
    n = hp.get_dummy_flat_data_page().numel() * hp.itemsize
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:7],
                          "little")
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8,
                         generator=g).view(hp.dtype)


def raw(t):
    return t.contiguous().view(-1).view(torch.uint8)


def same(a, b):
    return torch.equal(raw(a), raw(b))


def fill(hp, idx, keys):
    for i, k in enumerate(keys):
        hp.set_from_flat_data_page(int(idx[i * P]), page_value(hp, k))


def check(hp, idx, keys):
    """Which pages at idx hold their keys' values."""
    return [same(hp.get_data_page(int(idx[i * P])), page_value(hp, k))
            for i, k in enumerate(keys)]


def backup(ctrl, hp, toks):
    """The tree cache's write-back: the pages in host memory, then
    write_storage; waits for the backup thread. Returns (hashes, host
    indices, completed tokens)."""
    hashes = ctrl.get_hash_str(toks, None, page_size=P)
    idx = hp.alloc(len(hashes) * P)
    fill(hp, idx, hashes)
    oid = ctrl.write_storage(idx, toks, hash_value=hashes)
    op = ctrl.ack_backup_queue.get(timeout=DEADLINE_S)
    assert op.id == oid
    return hashes, idx, op.completed_tokens


def wait_prefetch(ctrl, op):
    """Waits for op's completed_req ack; op.completed_tokens then holds
    what was loaded."""
    end = time.monotonic() + DEADLINE_S
    while True:
        ack = ctrl.ack_prefetch_queue.get(timeout=end - time.monotonic())
        if ack.operation is op and ack.completed_req:
            return op.completed_tokens


def prefetch(ctrl, toks, before_io=None):
    """The scheduler's prefetch: the hit query on the prefetch thread,
    host memory for the hits, the I/O thread's loads. before_io(op) runs
    between the hit query and the loads. Returns (op, pages found, pages
    loaded)."""
    op = ctrl.prefetch(f"req-{uuid.uuid4().hex[:8]}", toks)
    got = ctrl.prefetch_hit_queue.get(timeout=DEADLINE_S)
    assert got is op
    found = len(op.hash_value)
    if not found:
        return op, 0, 0
    if before_io:
        before_io(op)
    assert ctrl.schedule_prefetch_io(op)
    return op, found, wait_prefetch(ctrl, op) // P


def prefetch_exact(ctrl, hp, toks, hashes, n):
    """prefetch of toks, which must find and load n pages, every one
    holding its page of hashes; returns the operation.

    A prefetch may come back short with nothing lost: the hit query or
    the load missed because a read outlived its lease or a donor was out
    of touch with its registry for a moment (docs/kv.md, "Get" and
    "Donors that come and go"; libpool names the cause at
    LIBPOOL_LOG=info). Such a prefetch is warned about and made again
    (its host pages freed) until DEADLINE_S: pages really lost fail
    every try. No read may fail a check (bad_reads): nothing here
    replaces or deletes a page under a read."""
    kv = ctrl.storage_backend.kv
    bad = kv.stats()["bad_reads"]
    end = time.monotonic() + DEADLINE_S
    while True:
        op, found, loaded = prefetch(ctrl, toks)
        assert kv.stats()["bad_reads"] == bad
        if (found, loaded) == (n, n):
            break
        assert time.monotonic() < end, \
            f"{n} pages stored, prefetch found {found}, loaded {loaded}"
        warnings.warn(f"prefetch of {n} stored pages found {found}, loaded "
                      f"{loaded}; made again")
        if op.host_indices is not None:
            hp.free(op.host_indices)
        time.sleep(0.2)
    assert all(check(hp, op.host_indices, hashes))
    return op


LAYOUTS = [("mha", "page_first"), ("mha", "page_first_direct"),
           ("mha", "page_head"), ("mha", "layer_first"),
           ("mla", "page_first"), ("mla", "page_first_direct"),
           ("mla", "layer_first")]


@pytest.mark.parametrize("v1", [1, 0], ids=["interface_v1", "generic"])
def test_selection_and_round_trip(engines, target, model_name, v1):
    """The configuration a user types selects tidepool's class through
    SGLang's factory; pages written back by the backup thread come back
    bit-exactly through the prefetch threads, on the zero-copy path
    (interface_v1) and the generic one."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
    from tidepool.connectors.sglang import TidepoolHiCacheStorage

    hp = host_pool()
    ctrl = controller(target, hp, model_name, interface_v1=v1)
    try:
        b = ctrl.storage_backend
        assert type(b) is TidepoolHiCacheStorage
        assert isinstance(b, HiCacheStorage)
        assert b.mem_pool_host is hp
        zc = ctrl.page_get_func == ctrl._page_get_zero_copy
        assert zc == bool(v1)
        toks = tokens_of(model_name, 10)
        hashes, _, done = backup(ctrl, hp, toks)
        assert done == 10 * P
        assert b.batch_exists(hashes) == 10
        prefetch_exact(ctrl, hp, toks, hashes, 10)
        # a longer prompt: the stored prefix, then nothing
        prefetch_exact(ctrl, hp, toks + tokens_of("tail", 3), hashes, 10)
        st = b.kv.stats()
        assert st["hits"] >= 40  # 2 loads of 10 pages of 2 pieces
    finally:
        ctrl.detach_storage_backend()


@pytest.mark.parametrize("kind,layout", LAYOUTS,
                         ids=[f"{k}-{lay}" for k, lay in LAYOUTS])
def test_layouts(engines, memd, model_name, kind, layout):
    """Every host pool layout, MHA and MLA: stored with the zero-copy
    path by one instance, read by another with the generic path, and the
    other way round (both paths store the same pieces)."""
    args = {"addr": memd.addr}
    mla = kind == "mla"
    hp1, hp2 = host_pool(kind, layout, seed=1), host_pool(kind, layout,
                                                         seed=2)
    c1 = controller(args, hp1, model_name, mla=mla, interface_v1=1)
    c2 = controller(args, hp2, model_name, mla=mla)
    try:
        npieces = c1.storage_backend._geom["npieces"]
        assert npieces == (1 if mla else 2) * (2 if layout == "layer_first"
                                               else 1)
        for w, r, hpw, hpr, tag in ((c1, c2, hp1, hp2, "v1-generic"),
                                    (c2, c1, hp2, hp1, "generic-v1")):
            toks = tokens_of(model_name + tag, 5)
            hashes, _, done = backup(w, hpw, toks)
            assert done == 5 * P
            prefetch_exact(r, hpr, toks, hashes, 5)
    finally:
        c1.detach_storage_backend()
        c2.detach_storage_backend()


def test_keys_and_namespaces(engines, memd, model_name):
    """The key rule of the module docstring; MHA keys are per TP rank,
    MLA keys shared by the ranks (only rank 0 writes them back); another
    model, layout or namespace finds nothing."""
    from tidepool.connectors.sglang import PAGE_DOMAIN

    args = {"addr": memd.addr}
    hp = host_pool()
    c = controller(args, hp, model_name, tp_rank=1, tp_size=2,
                   namespace="ns", interface_v1=1)
    try:
        b = c.storage_backend

        def lp(s):
            return len(s).to_bytes(4, "little") + s

        prefix = hashlib.blake2b(PAGE_DOMAIN + b"\0" + lp(b"ns") +
                                 lp(model_name.encode()) + lp(b"tp1/2"),
                                 digest_size=32).digest()
        piece = 2 * P * 2 * 16 * 2
        want = [hashlib.blake2b(
            prefix + lp(b"page_first") + lp(b"torch.float16") +
            (2).to_bytes(4, "little") + lp(b"abc") +
            i.to_bytes(4, "little") + piece.to_bytes(8, "little"),
            digest_size=32).digest() for i in range(2)]
        assert b.page_keys(["abc"]) == want
        toks = tokens_of(model_name, 3)
        hashes, _, _ = backup(c, hp, toks)
        assert b.batch_exists(hashes) == 3
    finally:
        c.detach_storage_backend()
    others = [dict(tp_rank=0, tp_size=2, namespace="ns"),
              dict(tp_rank=1, tp_size=2, namespace="other"),
              dict(tp_rank=1, tp_size=4, namespace="ns")]
    for o in others:
        c = controller(args, host_pool(), model_name, **o)
        try:
            assert c.storage_backend.batch_exists(hashes) == 0, o
        finally:
            c.detach_storage_backend()
    for model, layout in ((model_name + "x", "page_first"),
                          (model_name, "page_first_direct")):
        c = controller(args, host_pool(layout=layout), model,
                       tp_rank=1, tp_size=2, namespace="ns")
        try:
            assert c.storage_backend.batch_exists(hashes) == 0
        finally:
            c.detach_storage_backend()
    # MLA: rank 0 backs up, rank 1 finds it; rank 1's backup is skipped
    hp0, hp1 = host_pool("mla"), host_pool("mla", seed=5)
    c0 = controller(args, hp0, model_name, mla=True, tp_rank=0, tp_size=2)
    c1 = controller(args, hp1, model_name, mla=True, tp_rank=1, tp_size=2)
    try:
        toks = tokens_of(model_name + "mla", 4)
        hashes, _, done = backup(c1, hp1, toks)
        assert done == 0 and c1.storage_backend.batch_exists(hashes) == 0
        backup(c0, hp0, toks)
        prefetch_exact(c1, hp1, toks, hashes, 4)
    finally:
        c0.detach_storage_backend()
        c1.detach_storage_backend()


@pytest.mark.parametrize("v1", [1, 0], ids=["interface_v1", "generic"])
def test_eviction_between_exists_and_get(engines, target, model_name, v1):
    """A piece that disappears after the hit query (evicted, deleted) is
    a miss at the load: the prefix stops there, the pages before it are
    exact, nothing wrong is reported loaded."""
    hp = host_pool()
    ctrl = controller(target, hp, model_name, interface_v1=v1)
    try:
        b = ctrl.storage_backend
        toks = tokens_of(model_name, 8)
        hashes, _, _ = backup(ctrl, hp, toks)
        with tidepool.Pool(**target) as p, p.kv() as other:
            gone = b.page_keys([hashes[5]])[1]  # page 5's V piece

            def evict(op):
                assert other.delete([gone]) == [True]

            op, found, loaded = prefetch(ctrl, toks, before_io=evict)
        assert (found, loaded) == (8, 5)
        assert all(check(hp, op.host_indices[:5 * P], hashes[:5]))
        # per page, directly: misses reported, hits exact
        idx = hp.alloc(8 * P)
        if v1:
            got = b.batch_get_v1(hashes, idx)
        else:
            targets = [hp.get_dummy_flat_data_page() for _ in hashes]
            got = [t is not None for t in b.batch_get(hashes, targets)]
            for i, t in enumerate(targets):
                if got[i]:
                    hp.set_from_flat_data_page(int(idx[i * P]), t)
        assert got == [True] * 5 + [False] + [True] * 2
        assert [c for c, g in zip(check(hp, idx, hashes), got) if g] == \
            [True] * 7
        assert b.batch_exists(hashes) == 5
        assert not b.exists(hashes[5]) and b.exists(hashes[6])
        # never stored at all
        assert b.batch_exists(["nope"] + hashes) == 0
        assert b.batch_get_v1(["nope"], hp.alloc(P)) == [False]
        assert b.get("nope", hp.get_dummy_flat_data_page()) is None
    finally:
        ctrl.detach_storage_backend()


def test_concurrency(engines, target, model_name):
    """The controller's threads and several more at once: prefetches and
    write-backs of many requests in flight, and threads calling
    batch_set_v1 / batch_get_v1 / batch_exists on their own pages."""
    hp = host_pool(pages=512)
    ctrl = controller(target, hp, model_name, interface_v1=1)
    b = ctrl.storage_backend

    def worker(w):
        my = hp.alloc(6 * P)
        back = hp.alloc(6 * P)
        for r in range(5):
            keys = [f"{model_name}-w{w}-r{r}-{i}" for i in range(6)]
            fill(hp, my, keys)
            assert b.batch_set_v1(keys, my) == [True] * 6
            assert b.batch_exists(keys) == 6
            assert b.batch_get_v1(keys, back) == [True] * 6
            assert all(check(hp, back, keys))

    try:
        with threads_running(worker, 4):
            concurrent_traffic(ctrl, hp, target, model_name)
    finally:
        ctrl.detach_storage_backend()


def concurrent_traffic(ctrl, hp, target, model_name):
    """test_concurrency's main thread: write-backs and prefetches of 12
    requests through the controller's own threads."""
    reqs = [tokens_of(f"{model_name}-{i}", 3 + i % 4) for i in range(12)]
    stored = {}
    for toks in reqs:
        hashes = ctrl.get_hash_str(toks, None, page_size=P)
        idx = hp.alloc(len(hashes) * P)
        fill(hp, idx, hashes)
        stored[ctrl.write_storage(idx, toks, hash_value=hashes)] = \
            len(hashes)
    for _ in reqs:
        op = ctrl.ack_backup_queue.get(timeout=DEADLINE_S)
        assert op.completed_tokens == stored.pop(op.id) * P
    ops = [ctrl.prefetch(f"r{i}", toks) for i, toks in enumerate(reqs)]
    for _ in ops:
        op = ctrl.prefetch_hit_queue.get(timeout=DEADLINE_S)
        assert ctrl.schedule_prefetch_io(op)
    done = set()
    end = time.monotonic() + DEADLINE_S
    while len(done) < len(ops):
        ack = ctrl.ack_prefetch_queue.get(timeout=end - time.monotonic())
        if ack.completed_req:
            done.add(id(ack.operation))
    full = 0
    for op, toks in zip(ops, reqs):
        n = len(toks) // P
        got = op.completed_tokens // P
        # A page can miss here on the cluster, which the whole suite
        # shares: the tenant's store evicts, or a donor whose
        # registry membership is in doubt answers EAGAIN (docs/kv.md).
        # A miss shortens the prefix; what was loaded must be exact.
        assert op.completed_tokens == got * P and got <= n
        assert all(check(hp, op.host_indices, op.hash_value[:got]))
        full += got == n
    # The standalone memd (512 MiB, this module's keys only) keeps
    # every page; on the shared cluster S3-FIFO's small queue (a
    # tenth of the tenant's small allowance) evicts write-backs read
    # once under the workers' puts (CI: 5 of 12 whole), so there only
    # the bytes are checked.
    if "tenant" not in target:
        assert full == len(ops), f"{full} of {len(ops)} whole"


def test_clear(engines, target, model_name):
    """clear (SGLang's clear_storage_backend) empties the tenant's store:
    what this backend stored and what another instance stored, pinned
    keys too (docs/engines.md)."""
    hp1, hp2 = host_pool(), host_pool(seed=3)
    c1 = controller(target, hp1, model_name, interface_v1=1)
    c2 = controller(target, hp2, model_name)
    try:
        mine, _, _ = backup(c1, hp1, tokens_of(model_name + "a", 6))
        theirs, _, _ = backup(c2, hp2, tokens_of(model_name + "b", 3))
        b1 = c1.storage_backend
        assert b1.batch_exists(mine) == 6 and b1.batch_exists(theirs) == 3
        with tidepool.Pool(**target) as pool, pool.kv() as kv:
            pinned = b1.page_keys(theirs[:1])
            assert kv.pin(pinned) == [True] * len(pinned)
        assert c1.clear_storage_backend()
        assert b1.batch_exists(mine) == 0
        assert all(not b1.exists(h) for h in mine)
        assert b1.batch_exists(theirs) == 0
        assert c2.storage_backend.batch_exists(theirs) == 0
        b1.clear()  # nothing left to delete
        # stored again after a clear, cleared again
        backup(c1, hp1, tokens_of(model_name + "a", 6))
        assert b1.batch_exists(mine) == 6
        b1.clear()
        assert b1.batch_exists(mine) == 0
    finally:
        c1.detach_storage_backend()
        c2.detach_storage_backend()


def test_close(engines, target, model_name):
    """detach closes the backend (KV handle and its own Pool); close is
    idempotent; calls afterwards raise ClosedError; a Pool handed in is
    not closed."""
    from tidepool.connectors.sglang import TidepoolHiCacheStorage
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    hp = host_pool()
    ctrl = controller(target, hp, model_name, interface_v1=1)
    b = ctrl.storage_backend
    ctrl.detach_storage_backend()
    assert b.closed and b._pool.closed
    b.close()
    with pytest.raises(tidepool.ClosedError):
        b.batch_exists(["x"])
    with pytest.raises(tidepool.ClosedError):
        b.batch_get_v1(["x"], hp.alloc(P))
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True,
                               model_name, extra_config={})
    with tidepool.Pool(**target) as pool:
        b = TidepoolHiCacheStorage(cfg, {}, pool=pool)
        b.register_mem_pool_host(hp)
        idx = hp.alloc(P)
        fill(hp, idx, ["k"])
        assert b.batch_set_v1(["k"], idx) == [True]
        b.close()
        assert not pool.closed
        with pool.kv() as kv:
            assert kv.exists(b.page_keys(["k"])) == 2


def test_errors(engines, memd, model_name, monkeypatch):
    """Bad configurations are clear errors when the backend is selected
    (through the controller's attach, as SGLang reports them); bad
    arguments raise before anything is stored."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from tidepool.connectors.sglang import TidepoolHiCacheStorage

    args = {"addr": memd.addr}
    for bad, msg in (({"replicas": "2"}, "replicas"),
                     ({"nthreads": -1}, "nthreads"),
                     ({"clear_track_keys": 1.5}, "clear_track_keys"),
                     ({"namespace": 3}, "namespace")):
        with pytest.raises(ValueError, match=msg):
            controller(args, host_pool(), model_name, **bad)
    with pytest.raises(ValueError, match="tp_rank"):
        controller(args, host_pool(), model_name, tp_rank=2, tp_size=2)
    with pytest.raises(tidepool.PoolError):
        controller({"addr": "127.0.0.1:1"}, host_pool(), model_name,
                   timeout_ms=500)
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True,
                               model_name, should_split_heads=True,
                               extra_config=dict(addr=memd.addr))
    with pytest.raises(ValueError, match="heterogeneous"):
        TidepoolHiCacheStorage(cfg, {})
    with pytest.raises(ValueError, match="HiCacheStorageConfig"):
        TidepoolHiCacheStorage(object(), {})
    cfg.should_split_heads = False
    b = TidepoolHiCacheStorage(cfg, {})
    try:
        with pytest.raises(RuntimeError, match="register_mem_pool_host"):
            b.batch_exists(["a"])
        hp = host_pool()
        b.register_mem_pool_host(hp)
        with pytest.raises(ValueError, match="host indices"):
            b.batch_set_v1(["a", "b"], hp.alloc(P))
        with pytest.raises(TypeError, match="strings"):
            b.batch_exists([b"a"])
        with pytest.raises(ValueError, match="bytes"):
            b.set("a", torch.zeros(3, dtype=torch.float16))
        with pytest.raises(ValueError, match="contiguous"):
            b.get("a", torch.zeros(2, 4096, dtype=torch.float16)[:, ::2])
        with pytest.raises(ValueError, match="hybrid"):
            b.register_mem_host_pool_v2(hp, "mamba")
        b.register_mem_host_pool_v2(hp, "kv")
        # a host pool whose pieces are over the value limit
        big = host_pool()
        monkeypatch.setattr(big, "get_page_buffer_meta",
                            lambda idx: ([big.kv_buffer.data_ptr()],
                                         [tidepool.VALUE_MAX + 1]))
        with pytest.raises(ValueError, match="does not fit"):
            b.register_mem_pool_host(big)
        # pieces outside the registered buffers
        monkeypatch.setattr(big, "get_page_buffer_meta",
                            lambda idx: ([big.kv_buffer.data_ptr() - 64],
                                         [512]))
        with pytest.raises(ValueError, match="outside"):
            b.register_mem_pool_host(big)
        assert b.batch_exists([]) == 0 and b.batch_get_v1([], None) == []
    finally:
        b.close()


def test_unsupported_sglang(engines, monkeypatch):
    """An SGLang whose HiCacheStorage has no zero-copy interface fails at
    selection, through the factory, saying what is supported."""
    from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage,
                                                      HiCacheStorageConfig)
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    monkeypatch.delattr(HiCacheStorage, "batch_get_v1")
    cfg = HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m",
                               extra_config=config({"addr": "x:1"}))
    with pytest.raises(ImportError, match="not supported.*batch_get_v1.*"
                       "supported: SGLang"):
        StorageBackendFactory.create_backend("dynamic", cfg, None)


def test_without_sglang(memd, model_name):
    """Without SGLang the module imports and the class works duck-typed
    (for benchmarks); it is then no HiCacheStorage subclass."""
    import importlib
    import types

    assert "sglang" not in sys.modules
    saved = sys.modules.pop("tidepool.connectors.sglang", None)
    tsg = importlib.import_module("tidepool.connectors.sglang")
    try:
        assert tsg.SGLANG_VERSION is None
        assert tsg.TidepoolHiCacheStorage.__bases__ == (object,)
        cfg = types.SimpleNamespace(tp_rank=0, tp_size=1,
                                    is_mla_model=False,
                                    model_name=model_name,
                                    extra_config={"addr": memd.addr})
        b = tsg.TidepoolHiCacheStorage(cfg)
        t = torch.arange(16, dtype=torch.float32)

        class Pool1:  # the least a host pool needs
            page_size = 1
            size = 16
            layout = "page_first"
            dtype = torch.float32
            kv_buffer = t

            def get_page_buffer_meta(self, idx):
                return ([t.data_ptr() + 4 * int(i) for i in idx],
                        [4] * len(idx))

            def get_dummy_flat_data_page(self):
                return torch.zeros(1)

        b.register_mem_pool_host(Pool1())
        assert b.batch_set_v1(["a", "b"], torch.tensor([3, 4])) == [True] * 2
        assert b.set("c", torch.tensor([7.0]))
        assert b.batch_get_v1(["b", "a", "c"], torch.tensor([0, 1, 2])) == \
            [True] * 3
        assert t[:3].tolist() == [4.0, 3.0, 7.0]
        b.close()
    finally:
        sys.modules.pop("tidepool.connectors.sglang", None)
        if saved is not None:
            sys.modules["tidepool.connectors.sglang"] = saved


def test_pool_failures_are_misses(engines, memd, model_name, monkeypatch):
    """A KV call that fails (pool lost: PoolError; or a ValueError) is
    reported to SGLang as misses / not stored / nothing present, never
    raised into its prefetch and backup threads (which are not
    restarted)."""
    import errno

    hp = host_pool()
    ctrl = controller({"addr": memd.addr}, hp, model_name, interface_v1=1)
    b = ctrl.storage_backend
    try:
        toks = tokens_of(model_name, 3)
        hashes, _, _ = backup(ctrl, hp, toks)

        def lost(*a, **k):
            raise tidepool.PoolConnectionError(errno.ENOTCONN, "lost")

        def odd(*a, **k):
            raise ValueError("a hit of another length")

        for name in ("get_into", "put", "exists"):
            monkeypatch.setattr(b.kv, name, lost)
        assert b.batch_get_v1(hashes, hp.alloc(3 * P)) == [False] * 3
        assert b.batch_get(hashes) == [None] * 3
        assert b.batch_set_v1(hashes, hp.alloc(3 * P)) == [False] * 3
        assert b.set(hashes[0], page_value(hp, hashes[0])) is False
        assert b.batch_exists(hashes) == 0 and not b.exists(hashes[0])
        op, found, loaded = prefetch(ctrl, toks)  # threads alive
        assert found == 0
        monkeypatch.undo()
        monkeypatch.setattr(b.kv, "get_into", odd)
        assert b.batch_get_v1(hashes, hp.alloc(3 * P)) == [False] * 3
        assert b.batch_get(hashes) == [None] * 3
        op, found, loaded = prefetch(ctrl, toks)
        assert (found, loaded) == (3, 0)
        monkeypatch.undo()
        op, found, loaded = prefetch(ctrl, toks)
        assert (found, loaded) == (3, 3)
    finally:
        ctrl.detach_storage_backend()
