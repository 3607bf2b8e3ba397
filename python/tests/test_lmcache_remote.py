"""LMCache's remote backend selecting tidepool by configuration, driven
through stand-ins of LMCache's own classes (python/tests/engines/lmcache:
config, MemoryObj and its allocator, RemoteConnector, ConnectorAdapter,
CreateConnector with its plugin loader, the instrumented wrapper, the
RemoteBackend call sequence) against a real memd and a tenant of the
2-donor cluster (conftest.py). Every value is derived from its key; any
wrong byte, leaked allocation or wrong reference count fails."""

import asyncio
import hashlib
import importlib
import logging
import sys
import threading
import types
import uuid

import pytest

import tidepool
from conftest import in_threads, kv_warmed

torch = pytest.importorskip("torch")

LAYERS, HEADS, HEAD_DIM, TOKENS = 4, 4, 64, 256
HIDDEN = HEADS * HEAD_DIM  # a full chunk [2, 4, 256, 256] fp16: 1 MiB
DEADLINE_S = 20.0


@pytest.fixture
def target(pool_args):
    """pool_args, once the tenant's KV store takes values of the sizes
    used here: 64 B metas, pieces of 1 MiB, 256 KiB and 128 KiB."""
    return kv_warmed(pool_args, (64, 1 << 20, 256 << 10, 128 << 10))


@pytest.fixture
def loop():
    """An event loop in its own thread, as LMCache's storage manager
    runs one for its backends."""
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, name="lmcache-loop",
                         daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(10)
    lp.close()


def lmcache_config(target, **extra):
    """The configuration a user writes (docs/engines.md, "LMCache"), as
    LMCache's YAML loader hands it over."""
    ec = {
        "remote_storage_plugin.tidepool.module_path":
            "tidepool.connectors.lmcache",
        "remote_storage_plugin.tidepool.class_name":
            "TidepoolConnectorAdapter",
    }
    if target.get("tenant"):
        ec["tidepool.tenant"] = target["tenant"]
        ec["tidepool.secret_file"] = target["secret_file"]
    ec.update(extra)
    return {
        "chunk_size": TOKENS,
        "local_cpu": False,
        "max_local_cpu_size": 1,
        "remote_url": "tidepool://%s" % target["addr"],
        "remote_storage_plugins": ["tidepool"],
        "remote_serde": "naive",
        "extra_config": ec,
    }


class Env(types.SimpleNamespace):
    """LMCache's side of one test: modules, config, metadata, the local
    CPU backend (allocator) and the RemoteBackend."""

    def backend(self, cfg=None, plugin_name=None):
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend
        config = LMCacheEngineConfig.from_dict(cfg or self.cfg)
        rb = RemoteBackend(config, self.metadata, self.loop, self.cpu,
                           plugin_name=plugin_name)
        self.opened.append(rb)
        return rb

    @property
    def live(self):
        return self.cpu.memory_allocator.num_active_allocations

    def key(self, tag=""):
        from lmcache.utils import CacheEngineKey
        return CacheEngineKey("vllm", "test-model" + tag, 1, 0,
                              uuid.uuid4().hex)

    def obj(self, key, tokens=TOKENS, dtype=torch.float16):
        """A MemoryObj from the allocator (count 1: its owner's), every
        byte derived from key."""
        from lmcache.v1.memory_management import MemoryFormat
        o = self.cpu.allocate(torch.Size([2, LAYERS, tokens, HIDDEN]), dtype,
                              MemoryFormat.KV_2LTD)
        assert o is not None
        o.tensor.reshape(-1).view(torch.uint8).copy_(
            content(key, tokens, dtype))
        return o


def content(key, tokens=TOKENS, dtype=torch.float16):
    """The bytes of key's chunk of tokens tokens."""
    n = 2 * LAYERS * tokens * HIDDEN * torch.empty((), dtype=dtype
                                                   ).element_size()
    seed = int.from_bytes(hashlib.blake2b(
        ("%s/%d" % (key.to_string(), tokens)).encode(),
        digest_size=8).digest(), "little") >> 1
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


def has_bytes(obj, key, tokens=TOKENS, dtype=torch.float16):
    return (obj is not None and
            tuple(obj.get_shape()) == (2, LAYERS, tokens, HIDDEN) and
            obj.get_dtype() == dtype and
            torch.equal(obj.tensor.reshape(-1).view(torch.uint8),
                        content(key, tokens, dtype)))


@pytest.fixture
def env(engines, target, loop):
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    cfg = lmcache_config(target)
    md = LMCacheMetadata("test-model", 1, 0, "vllm", torch.float16,
                         (LAYERS, 2, TOKENS, HEADS, HEAD_DIM))
    e = Env(cfg=cfg, metadata=md, loop=loop, target=target, opened=[],
            cpu=LocalCPUBackend(cfg, md, nbytes=96 << 20))
    yield e
    for rb in e.opened:
        if rb.connection is not None:
            rb.close()


def wait_all(futures):
    for f in futures:
        f.result(DEADLINE_S)


def _stored(env, rb, n):
    """Puts an object for each of n new keys through rb (owners'
    references dropped); returns the keys and env.live after."""
    keys = [env.key() for _ in range(n)]
    objs = [env.obj(k) for k in keys]
    wait_all([rb.submit_put_task(k, o) for k, o in zip(keys, objs)])
    for o in objs:
        o.ref_count_down()
    return keys, env.live


def _exact_then_dropped(got, keys):
    """Asserts every object of got holds its key's bytes, then drops the
    references the get gave."""
    assert all(has_bytes(o, k) for o, k in zip(got, keys))
    for o in got:
        o.ref_count_down()


def _spy_byte_array(monkeypatch):
    """Records every MemoryObj whose byte_array is read; returns the
    list."""
    from lmcache.v1.memory_management import TensorMemoryObj
    real = TensorMemoryObj.byte_array
    read = []

    def byte_array(o):
        read.append(o)
        return real.fget(o)
    monkeypatch.setattr(TensorMemoryObj, "byte_array", property(byte_array))
    return read


# ---------------------------------------------------------------------
# selection


def test_selection_from_configuration(env):
    """The user's configuration through LMCache's plugin loader and
    CreateConnector yields tidepool's classes, subclasses of LMCache's."""
    from lmcache.v1.storage_backend.connector import ConnectorAdapter
    from lmcache.v1.storage_backend.connector.base_connector import (
        RemoteConnector)
    from lmcache.v1.storage_backend.connector.instrumented_connector import (
        InstrumentedRemoteConnector)
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    rb = env.backend()
    assert rb.connect_error is None
    assert isinstance(rb.connection, InstrumentedRemoteConnector)
    conn = rb.connection.getWrappedConnector()
    assert type(conn) is tlm.TidepoolLMCacheConnector
    assert isinstance(conn, RemoteConnector)
    assert issubclass(tlm.TidepoolConnectorAdapter, ConnectorAdapter)
    # LMCache's base was initialized with the config and metadata
    assert conn.init_args[1] is env.metadata
    assert conn.meta_shapes == env.metadata.get_shapes()
    a = tlm.TidepoolConnectorAdapter()
    assert a.can_parse("tidepool://h:1") and a.can_parse("plugin://tidepool")
    assert a.can_parse("plugin://tidepool.b")
    assert not a.can_parse("plugin://fs") and not a.can_parse("redis://h:1")


def test_selection_per_plugin(env):
    """LMCache's newer per-plugin backends (plugin://tidepool) take the
    address from remote_storage_plugin.tidepool.url."""
    cfg = lmcache_config(env.target, **{
        "remote_storage_plugin.tidepool.url":
            "tidepool://%s" % env.target["addr"]})
    cfg["remote_url"] = None
    rb = env.backend(cfg, plugin_name="tidepool")
    assert rb.connect_error is None
    k = env.key()
    o = env.obj(k)
    wait_all([rb.submit_put_task(k, o)])
    got = rb.get_blocking(k)
    assert has_bytes(got, k)
    got.ref_count_down()
    o.ref_count_down()


@pytest.mark.parametrize("change, words", [
    ({"remote_url": "tidepool://nohostport"}, "HOST:PORT"),
    ({"remote_url": "tidepool://127.0.0.1:1/path"}, "HOST:PORT"),
    ({"remote_serde": "cachegen"}, "remote_serde"),
    ({"extra_config.tidepool.tenent": "x"}, "unknown extra_config key"),
    ({"extra_config.tidepool.replicas": "two"}, "is not int"),
    ({"extra_config.tidepool.piece_bytes": -1}, "piece_bytes"),
])
def test_bad_configuration_is_a_clear_error(env, change, words):
    cfg = lmcache_config(env.target)
    for k, v in change.items():
        if k.startswith("extra_config."):
            cfg["extra_config"][k[len("extra_config."):]] = v
        else:
            cfg[k] = v
    if "remote_serde" in change:
        # the stand-in has only the naive serde; the connector refuses
        # first, at selection
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.storage_backend.connector import CreateConnector
        with pytest.raises(ValueError, match=words):
            CreateConnector(cfg["remote_url"], env.loop, env.cpu,
                            LMCacheEngineConfig.from_dict(cfg), env.metadata)
        return
    rb = env.backend(cfg)
    assert rb.connection is None
    assert words in str(rb.connect_error)


def test_unsupported_lmcache_is_a_clear_error(engines, target, loop,
                                              caplog):
    """An LMCache whose RemoteConnector requires a method tidepool does
    not implement: the plugin fails to load with a message that says so
    (LMCache logs it), and no adapter is found."""
    import abc

    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.storage_backend import connector as conn_pkg
    from lmcache.v1.storage_backend.connector import base_connector as bc

    class NewerRemoteConnector(bc.RemoteConnector):
        @abc.abstractmethod
        def batched_frob(self):
            ...

    old = bc.RemoteConnector
    bc.RemoteConnector = NewerRemoteConnector
    try:
        with caplog.at_level(logging.ERROR, logger="lmcache.connector"):
            with pytest.raises(ValueError, match="No adapter found"):
                conn_pkg.CreateConnector(
                    "tidepool://%s" % target["addr"], loop, None,
                    LMCacheEngineConfig.from_dict(lmcache_config(target)))
        assert "not supported" in caplog.text
        assert "batched_frob" in caplog.text
    finally:
        bc.RemoteConnector = old


def test_older_lmcache_generation(engines, target, loop):
    """LMCache's older RemoteConnector (no constructor arguments; its
    manager calls init_chunk_meta afterwards) and its older
    batched_contains(keys, stop_after_first_not_exits) -> per-key bools
    are served too."""
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.storage_backend import connector as conn_pkg
    from lmcache.v1.storage_backend.connector import base_connector as bc
    from lmcache.v1.memory_management import MemoryFormat
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    class OlderRemoteConnector(bc.RemoteConnector):
        __init__ = object.__init__

    old = bc.RemoteConnector
    bc.RemoteConnector = OlderRemoteConnector
    try:
        cfg = LMCacheEngineConfig.from_dict(lmcache_config(target))
        cpu = LocalCPUBackend(cfg, None, nbytes=8 << 20)
        wrapped = conn_pkg.CreateConnector(cfg.remote_url, loop, cpu, cfg,
                                           None)
        conn = wrapped.getWrappedConnector()
        assert isinstance(conn, OlderRemoteConnector)
        assert not hasattr(conn, "init_args")  # no base constructor run
        env = Env(cpu=cpu)
        keys = [env.key() for _ in range(3)]
        obj = cpu.allocate(torch.Size([2, LAYERS, 8, HIDDEN]),
                           torch.float16, MemoryFormat.KV_2LTD)
        obj.tensor.reshape(-1).view(torch.uint8).copy_(
            content(keys[0], 8))
        asyncio.run_coroutine_threadsafe(
            wrapped.put(keys[0], obj), loop).result(DEADLINE_S)
        assert obj.get_ref_count() == 0  # the wrapper dropped the owner's
        assert conn.batched_contains(keys, True) == [True, False, False]
        assert conn.batched_contains(keys) == 1
        asyncio.run_coroutine_threadsafe(wrapped.close(),
                                         loop).result(DEADLINE_S)
    finally:
        bc.RemoteConnector = old


def test_scheduler_role_without_allocator(env):
    """LMCache's scheduler role passes no local CPU backend: lookups
    work, a get is a clear error (RemoteBackend makes it a miss)."""
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.storage_backend.connector import CreateConnector
    rb = env.backend()
    k = env.key()
    o = env.obj(k)
    wait_all([rb.submit_put_task(k, o)])
    cfg = LMCacheEngineConfig.from_dict(env.cfg)
    sched = CreateConnector(cfg.remote_url, env.loop, None, cfg,
                            env.metadata)
    try:
        assert sched.batched_contains([k, env.key()]) == 1
        assert sched.exists_sync(k)
        with pytest.raises(ValueError, match="no local CPU backend"):
            asyncio.run_coroutine_threadsafe(
                sched.get(k), env.loop).result(DEADLINE_S)
    finally:
        asyncio.run_coroutine_threadsafe(sched.close(),
                                         env.loop).result(DEADLINE_S)
    o.ref_count_down()


def test_module_imports_without_lmcache():
    """Without LMCache, tidepool.connectors.lmcache imports (the native
    connector needs no LMCache) and the adapter is an ImportError that
    says what is missing."""
    for n in [n for n in sys.modules if n.split(".")[0] == "lmcache"]:
        assert False, "lmcache imported outside the engines fixture: %s" % n
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    assert "lmcache" not in sys.modules
    with pytest.raises(ImportError, match="not importable"):
        tlm.TidepoolConnectorAdapter
    with pytest.raises(AttributeError):
        tlm.NoSuchThing


# ---------------------------------------------------------------------
# put, get, reference counts


def test_put_get_reference_counts(env):
    """Full and partial chunks, fp16 and bf16: put through
    submit_put_task leaves the owner's count as it was; a get hit is a
    new MemoryObj (count 1, the caller's) holding the same bytes, shape,
    dtype and format; a miss allocates nothing that stays."""
    from lmcache.v1.memory_management import MemoryFormat
    rb = env.backend()
    specs = [(env.key(), TOKENS, torch.float16),
             (env.key(), 100, torch.float16),
             (env.key(), 1, torch.bfloat16)]
    objs = [env.obj(k, t, d) for k, t, d in specs]
    base_live = env.live
    assert all(not rb.contains(k) for k, _, _ in specs)
    wait_all([rb.submit_put_task(k, o) for (k, _, _), o in zip(specs, objs)])
    assert [o.get_ref_count() for o in objs] == [1, 1, 1]
    assert env.live == base_live
    wrapper = rb.connection
    for (k, t, d) in specs:
        assert rb.contains(k)
        got = rb.get_blocking(k)
        assert has_bytes(got, k, t, d)
        assert got.get_ref_count() == 1
        assert got.get_memory_format() == MemoryFormat.KV_2LTD
        assert env.live == base_live + 1
        got.ref_count_down()
        assert env.live == base_live
    assert wrapper.bytes_read == sum(o.get_size() for o in objs)
    missing = env.key()
    assert rb.get_blocking(missing) is None
    assert not rb.contains(missing)
    assert env.live == base_live
    for o in objs:
        o.ref_count_down()
    assert env.live == base_live - 3


def test_put_twice_and_put_refused(env):
    """A key put again stays as it is; an object the connector cannot
    store (no dtype) fails the put without touching the count, and the
    wrapper drops its reference as always."""
    rb = env.backend()
    k = env.key()
    o = env.obj(k)
    wait_all([rb.submit_put_task(k, o)])
    wait_all([rb.submit_put_task(k, o)])
    assert o.get_ref_count() == 1
    got = rb.get_blocking(k)
    assert has_bytes(got, k)
    got.ref_count_down()

    class NoDtype:
        """A serialized buffer (remote_serde other than naive)."""
        count = 1

        def get_size(self):
            return 8

        def get_dtype(self):
            return None

        def ref_count_up(self):
            self.count += 1

        def ref_count_down(self):
            self.count -= 1

    bad = NoDtype()
    fut = rb.submit_put_task(env.key(), bad)
    with pytest.raises(ValueError, match="remote_serde naive"):
        fut.result(DEADLINE_S)
    assert bad.count == 1
    o.ref_count_down()


def test_batched_paths(env):
    """batched_get_blocking (misses in the middle), the prefix counts of
    batched_contains and batched_async_contains, and the non-blocking
    get: the prefix up to the first miss, later hits freed."""
    rb = env.backend()
    keys = [env.key() for _ in range(5)]
    present = [0, 1, 3]
    objs = {i: env.obj(keys[i], 100 if i == 1 else TOKENS) for i in present}
    base_live = env.live
    wait_all(rb.batched_submit_put_task([keys[i] for i in present],
                                        [objs[i] for i in present]))
    got = rb.batched_get_blocking(keys)
    for i, g in enumerate(got):
        if i in present:
            assert has_bytes(g, keys[i], 100 if i == 1 else TOKENS)
            g.ref_count_down()
        else:
            assert g is None
    assert env.live == base_live
    assert rb.batched_contains(keys) == 2
    assert rb.batched_contains(keys[3:]) == 1
    fut = asyncio.run_coroutine_threadsafe(
        rb.batched_async_contains("req-1", keys), env.loop)
    assert fut.result(DEADLINE_S) == 2
    fut = asyncio.run_coroutine_threadsafe(
        rb.batched_get_non_blocking("req-1", keys), env.loop)
    prefix = fut.result(DEADLINE_S)
    assert len(prefix) == 2
    assert has_bytes(prefix[0], keys[0])
    assert has_bytes(prefix[1], keys[1], 100)
    assert env.live == base_live + 2  # key 3's hit was freed
    for p in prefix:
        p.ref_count_down()
    assert env.live == base_live
    for o in objs.values():
        o.ref_count_down()


def test_eviction_between_lookup_and_get(env):
    """A piece gone (evicted, or failing its checksum) after contains()
    said yes: the get is a miss, and what it allocated is freed."""
    cfg = lmcache_config(env.target, **{"tidepool.piece_bytes": 256 << 10})
    rb = env.backend(cfg)
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    keys = [env.key() for _ in range(2)]
    objs = [env.obj(k) for k in keys]
    wait_all([rb.submit_put_task(k, o) for k, o in zip(keys, objs)])
    base_live = env.live
    assert rb.contains(keys[0]) and rb.contains(keys[1])
    nbytes = objs[0].get_size()
    pieces = tlm.piece_keys(tlm.lmcache_key(keys[0]), nbytes, 256 << 10)
    assert len(pieces) == 4
    with tidepool.Pool(env.target["addr"], env.target.get("tenant"),
                       env.target.get("secret_file")) as p, p.kv() as kv:
        assert kv.delete([pieces[2]]) == [True]
    assert rb.get_blocking(keys[0]) is None
    assert env.live == base_live
    assert not rb.contains(keys[0])
    got = rb.batched_get_blocking(keys)
    assert got[0] is None and has_bytes(got[1], keys[1])
    got[1].ref_count_down()
    assert env.live == base_live
    for o in objs:
        o.ref_count_down()


def test_allocator_full_is_a_miss(env):
    """LMCache's allocator out of memory: the get is a miss, nothing is
    held."""
    rb = env.backend()
    k = env.key()
    o = env.obj(k)
    wait_all([rb.submit_put_task(k, o)])
    hog = []
    while True:
        h = env.cpu.allocate(torch.Size([1 << 18]), torch.float32)
        if h is None:
            break
        hog.append(h)
    live = env.live
    assert rb.get_blocking(k) is None
    assert env.live == live
    for h in hog:
        h.ref_count_down()
    got = rb.get_blocking(k)
    assert has_bytes(got, k)
    got.ref_count_down()
    o.ref_count_down()


@pytest.fixture(scope="module")
def quiet_memd():
    """A memd of this module's own: the key log's records are one-shot
    entries, the first a store under pressure evicts (docs/engines.md),
    so the list test does not share the session's memd."""
    import shutil
    import tempfile
    from conftest import start_memd, stop
    tmp = tempfile.mkdtemp(prefix="tp-lmcache-")
    proc, addr = start_memd(tmp, donate="256M")
    yield addr
    stop(proc)
    shutil.rmtree(tmp, ignore_errors=True)


def test_list_and_remove(env, quiet_memd):
    """list() names what any tidepool connector of the tenant stored and
    is still present (another connector lists this one's keys); remove()
    deletes."""
    cfg = lmcache_config({"addr": quiet_memd})
    rb = env.backend(cfg)
    other = env.backend(cfg)
    keys = [env.key() for _ in range(3)]
    objs = [env.obj(k) for k in keys]
    wait_all([rb.submit_put_task(k, o) for k, o in zip(keys, objs)])
    names = {k.to_string() for k in keys}

    def listed(backend):
        out = asyncio.run_coroutine_threadsafe(
            backend.connection.list(), env.loop).result(DEADLINE_S)
        assert out == sorted(out)
        return set(out)

    assert names <= listed(rb)
    assert names <= listed(other)
    assert rb.remove(keys[1]) is True
    assert rb.remove(keys[1]) is False
    assert not rb.contains(keys[1])
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    with tidepool.Pool(quiet_memd) as p, p.kv() as kv:
        assert kv.delete([tlm.lmcache_key(keys[2])]) == [True]  # evicted
    got = listed(other)
    assert keys[0].to_string() in got
    assert keys[1].to_string() not in got
    assert keys[2].to_string() not in got
    fut = asyncio.run_coroutine_threadsafe(rb.connection.ping(), env.loop)
    assert fut.result(DEADLINE_S) == 0
    for o in objs:
        o.ref_count_down()


def test_list_sees_concurrent_writers(env, quiet_memd):
    """Many puts in flight on two connectors at once: every key is in
    the list (the log packs names into few records, the registry takes
    both logs)."""
    cfg = lmcache_config({"addr": quiet_memd})
    rbs = [env.backend(cfg), env.backend(cfg)]
    keys = [env.key() for _ in range(40)]
    objs = [env.obj(k, 64) for k in keys]
    futs = [rbs[i % 2].submit_put_task(k, o)
            for i, (k, o) in enumerate(zip(keys, objs))]
    wait_all(futs)
    fresh = env.backend(cfg)
    got = asyncio.run_coroutine_threadsafe(
        fresh.connection.list(), env.loop).result(DEADLINE_S)
    assert {k.to_string() for k in keys} <= set(got)
    for o in objs:
        o.ref_count_down()


def test_key_log_registry_slot_busy_takes_the_next():
    """Two connectors registering their key logs at once put the same
    free registry slot: the one whose reserve finds the other's open put
    (EBUSY) takes the next slot instead of dropping its names (the flake
    of test_list_sees_concurrent_writers). Driven as a plan, no memd."""
    import errno
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    log = tlm._KeyLog(kv=None)
    plan = log._plan_append(["vllm@m@1@0@abc"])
    ops = next(plan)
    assert ops[0].kind == "exists"
    ops = plan.send([0])  # no slot taken yet
    assert ops[0].kind == "put" and ops[0].keys == [tlm._registry_key(0)]
    ops = plan.send([[errno.EBUSY]])  # another connector's reservation
    assert ops[0].kind == "put" and ops[0].keys == [tlm._registry_key(1)]
    ops = plan.send([[0]])
    assert ops[0].keys == [tlm._log_key(log._id, 0)]
    with pytest.raises(StopIteration):
        plan.send([[0]])
    assert log._registered


def test_list_log_record_lost(env, quiet_memd):
    """A log record evicted: its names leave the list, the records
    after the hole are still read."""
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    rb = env.backend(lmcache_config({"addr": quiet_memd}))
    conn = rb.connection.getWrappedConnector()
    keys = [env.key() for _ in range(2)]
    objs = [env.obj(k, 64) for k in keys]
    for k, o in zip(keys, objs):  # one record each
        wait_all([rb.submit_put_task(k, o)])
    with tidepool.Pool(quiet_memd) as p, p.kv() as kv:
        assert kv.delete([tlm._log_key(conn._log._id, 0)]) == [True]
    got = asyncio.run_coroutine_threadsafe(
        conn.list(), env.loop).result(DEADLINE_S)
    assert keys[0].to_string() not in got
    assert keys[1].to_string() in got
    for o in objs:
        o.ref_count_down()


def test_put_returns_once_its_name_is_logged(env, quiet_memd):
    """A name added while another coroutine writes the log is in the log
    when its own flush returns (the writer under way does not take it)."""
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    rb = env.backend(lmcache_config({"addr": quiet_memd}))
    log = rb.connection.getWrappedConnector()._log

    def logged():
        names = set()
        with tidepool.Pool(quiet_memd) as p, p.kv() as kv:
            for i in range(log._next):
                buf = bytearray(tlm.LOG_RECORD_BYTES)
                if kv.get_into([tlm._log_key(log._id, i)], [buf])[0]:
                    names.update(tlm._unpack_record(buf))
        return names

    async def main():
        with log._lock:
            log._flushing = True  # another coroutine's write under way
        task = asyncio.ensure_future(log.flush(log.add(["name-b"])))
        for _ in range(5):
            await asyncio.sleep(0.001)
        assert not task.done()  # waits for that write
        with log._lock:
            log._flushing = False  # which ends without taking name-b
        await task
        assert "name-b" in logged()

    asyncio.run_coroutine_threadsafe(main(), env.loop).result(DEADLINE_S)


def test_key_log_records():
    """Records hold as many names as fit; names that cannot be listed
    (a newline, longer than a record) are left out, not mangled."""
    tlm = importlib.import_module("tidepool.connectors.lmcache")
    names = ["vllm@m@1@0@%060x" % i for i in range(200)]
    recs = tlm._pack_records(names + ["bad\nname", "x" * 5000])
    assert all(len(r) == tlm.LOG_RECORD_BYTES for r in recs)
    assert 1 < len(recs) < 10
    back = [n for r in recs for n in tlm._unpack_record(r)]
    assert back == names
    assert tlm._unpack_record(bytes(tlm.LOG_RECORD_BYTES)) == []


def test_exists_sync_path(env):
    """contains() through exists_sync (extra_config use_exists_sync)."""
    rb = env.backend(lmcache_config(env.target, use_exists_sync=True))
    k = env.key()
    o = env.obj(k)
    assert not rb.contains(k)
    wait_all([rb.submit_put_task(k, o)])
    assert rb.contains(k)
    o.ref_count_down()


def test_concurrent_puts_and_gets(env):
    """Several threads put and get through one backend at once; every
    value comes back exact. Its 24 values (12 of 1 MiB, 12 of 256 KiB,
    and their metas) take three size classes, a 16 MiB slab each at
    most, on any memd: within the tenant's share (standalone: 16 slabs;
    cluster: 5 or 6 per memd), which conftest empties after each test,
    so nothing of this test's is evicted before its get. (It used to
    run on a memd of its own on standalone and to take a miss on the
    cluster as a cache's answer: other tests' leftovers held slabs of
    their classes, and S3-FIFO evicted this test's fresh values.)"""
    rb = env.backend()
    base_live = env.live
    sizes = (TOKENS, 64)  # values of 1 MiB and 256 KiB (see target)

    def worker(w):
        keys = [env.key("-w%d" % w) for _ in range(6)]
        objs = [env.obj(k, sizes[i % 2]) for i, k in enumerate(keys)]
        wait_all([rb.submit_put_task(k, o) for k, o in zip(keys, objs)])
        for _ in range(2):
            got = rb.batched_get_blocking(keys)
            for i, (k, g) in enumerate(zip(keys, got)):
                assert has_bytes(g, k, sizes[i % 2]), (w, i)
                g.ref_count_down()
        for o in objs:
            assert o.get_ref_count() == 1
            o.ref_count_down()

    in_threads(worker, 4, join_s=60)
    assert env.live == base_live


def test_close(env):
    """close() closes the pool; afterwards the backend's calls fail as
    LMCache handles a lost connection (a miss), the connector's raise
    ClosedError."""
    rb = env.backend()
    k = env.key()
    o = env.obj(k)
    wait_all([rb.submit_put_task(k, o)])
    conn = rb.connection.getWrappedConnector()
    rb.close()
    assert conn.closed
    base_live = env.live
    assert rb.get_blocking(k) is None
    assert env.live == base_live
    assert not rb.contains(k)
    with pytest.raises(tidepool.ClosedError):
        conn.exists_sync(k)
    rb.close()  # idempotent
    rb.connection = None  # closed: the fixture must not close it again
    o.ref_count_down()


# ---------------------------------------------------------------------
# the example model through LMCache's remote backend


class LMCacheTier:
    """The example's tier (exists, get_into, put_async) on LMCache's
    remote-backend call sequence: one CacheEngineKey per (chunk, layer)
    key; exists is batched_contains; a load is batched_get_blocking and
    the copy of each MemoryObj into the model's buffer (on a GPU host
    LMCache's copy into the paged KV cache), then the reference dropped;
    a store allocates MemoryObjs from LMCache's allocator, copies the
    K/V in (LMCache's copy out of the KV cache), submits them and, once
    stored, the owner drops its reference."""

    def __init__(self, env, rb):
        self.env, self.rb = env, rb

    @staticmethod
    def ckeys(keys):
        from lmcache.utils import CacheEngineKey
        return [CacheEngineKey("vllm", "tinylm", 1, 0, k.hex())
                for k in keys]

    def exists(self, keys):
        return self.rb.batched_contains(self.ckeys(keys))

    def get_into(self, keys, bufs):
        hits = []
        for o, b in zip(self.rb.batched_get_blocking(self.ckeys(keys)),
                        bufs):
            if o is None:
                hits.append(False)
                continue
            assert tuple(o.get_shape()) == tuple(b.shape)
            b.copy_(o.tensor)
            o.ref_count_down()
            hits.append(True)
        return hits

    def put_async(self, keys, values):
        from lmcache.v1.memory_management import MemoryFormat
        objs = []
        for v in values:
            o = self.env.cpu.allocate(v.shape, v.dtype, MemoryFormat.KV_2LTD)
            assert o is not None
            o.tensor.copy_(v)
            objs.append(o)
        futs = self.rb.batched_submit_put_task(self.ckeys(keys), objs)
        return Stored(futs, objs)


class Stored:
    """put_async's future: result() waits for the remote puts, then the
    owner drops its references; per key 0 (stored), else raises."""

    def __init__(self, futs, objs):
        self.futs, self.objs = futs, objs

    def result(self):
        try:
            wait_all(self.futs)
        finally:
            for o in self.objs:
                o.ref_count_down()
        return [0] * len(self.objs)


def test_model_reuses_kv_bit_exactly(env, model_name):
    """python/examples/prefix_cache.py served through LMCache's remote
    backend: prefill with K/V loaded through tidepool is bit-equal to
    recomputing, every cached chunk came from the tier, and no
    MemoryObj is leaked."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                    "examples"))
    try:
        import prefix_cache as pc
    finally:
        sys.path.pop(0)
    cfg = pc.Config(layers=2, d_model=64, heads=2, vocab=1000, seed=3)
    rb = env.backend()
    base_live = env.live
    out = pc.run(LMCacheTier(env, rb), cfg=cfg, model=model_name)
    res = out["results"]
    assert [r.chunks for r in res] == [5, 6, 5, 6, 5, 6, 5]
    assert [r.cached_chunks for r in res] == [0, 5, 3, 5, 2, 6, 5]
    assert [r.exists_chunks for r in res] == [0, 5, 3, 5, 2, 6, 5]
    assert all(r.equal for r in res), [r.name for r in res if not r.equal]
    assert out["put_errors"] == 0
    assert rb.connection.bytes_read == (sum(r.cached_chunks for r in res) *
                                        cfg.layers * cfg.kv_bytes)
    assert env.live == base_live


class _CountingKV:
    """A KV handle counting the get calls started on it."""

    def __init__(self, kv):
        self.kv, self.gets = kv, 0

    def __getattr__(self, name):
        fn = getattr(self.kv, name)
        if name not in ("get_into", "get_into_async"):
            return fn

        def count(*a, **kw):
            self.gets += 1
            return fn(*a, **kw)
        return count


def test_batched_get_one_round_trip_once_a_layout_is_known(env):
    """A batched get reads metas and pieces in one KV call once the
    connector has seen a value of that layout (a put or a get); a value
    of another layout among them (a partial chunk), a miss and a key
    stored under a different shape are still exact, read in a second
    call; nothing leaks."""
    rb = env.backend()
    conn = rb.connection.getWrappedConnector()
    spy = _CountingKV(conn._kv)
    conn._kv = spy
    full = [env.key() for _ in range(4)]
    part = env.key()
    objs = [env.obj(k) for k in full] + [env.obj(part, 64)]
    wait_all([rb.submit_put_task(k, o) for k, o in zip(full + [part], objs)])
    for o in objs:
        o.ref_count_down()
    live = env.live
    spy.gets = 0
    got = rb.batched_get_blocking(full)
    assert spy.gets == 1
    _exact_then_dropped(got, full)
    spy.gets = 0
    keys = [full[0], part, env.key(), full[3]]
    got = rb.batched_get_blocking(keys)
    assert spy.gets == 2
    assert has_bytes(got[0], full[0]) and has_bytes(got[3], full[3])
    assert has_bytes(got[1], part, 64) and got[2] is None
    for o in (got[0], got[1], got[3]):
        o.ref_count_down()
    assert env.live == live


class _RecordingKV:
    """A KV handle logging the buffers of each asynchronous get started
    on it into log, as ("get", buffers)."""

    def __init__(self, kv, log):
        self.kv, self.log = kv, log

    def __getattr__(self, name):
        fn = getattr(self.kv, name)
        if name != "get_into_async":
            return fn

        def record(keys, bufs):
            self.log.append(("get", list(bufs)))
            return fn(keys, bufs)
        return record


def _address(buf):
    """The address of a writable buffer's first byte."""
    import ctypes
    return ctypes.addressof((ctypes.c_ubyte * len(buf)).from_buffer(buf))


@pytest.mark.parametrize("piece", [1 << 20, 256 << 10])
def test_batched_get_starts_calls_while_allocating(env, piece):
    """Once a layout is known, a batched get starts one KV call per
    _overlap_keys keys as soon as their objects are allocated (one
    batched_allocate per call of several keys), so that LMCache's
    allocator runs for the next keys while the previous ones' bytes
    arrive; every piece goes to the KV call as a byte view of its
    MemoryObj's own memory (no torch tensor: no bounce copy, no copy at
    all), and every key comes back exact, nothing leaked."""
    rb = env.backend(lmcache_config(env.target,
                                    **{"tidepool.piece_bytes": piece}))
    conn = rb.connection.getWrappedConnector()
    keys, live = _stored(env, rb, 5)
    log = []
    conn._kv = _RecordingKV(conn._kv, log)
    allocate, batched = env.cpu.allocate, env.cpu.batched_allocate

    def logged(*a, **kw):
        o = allocate(*a, **kw)
        log.append(("alloc", [o]))
        return o

    def logged_batch(*a, **kw):
        objs = batched(*a, **kw)
        log.append(("batch", objs))
        return objs
    env.cpu.allocate, env.cpu.batched_allocate = logged, logged_batch
    conn._overlap_keys = 2
    try:
        got = rb.batched_get_blocking(keys)
    finally:
        del env.cpu.allocate, env.cpu.batched_allocate
    per = (1 << 20) // piece  # pieces per key: each has a meta too
    assert [(e[0], len(e[1])) for e in log] == [
        ("batch", 2), ("get", 2 * (1 + per)), ("batch", 2),
        ("get", 2 * (1 + per)), ("alloc", 1), ("get", 1 + per)]
    allocated = [o for e in log if e[0] != "get" for o in e[1]]
    assert all(g is a for g, a in zip(got, allocated))
    assert all(has_bytes(o, k) for o, k in zip(got, keys))
    bufs = [b for kind, bs in log if kind == "get" for b in bs]
    assert len(bufs) == len(keys) * (1 + per)
    for i, o in enumerate(got):
        meta, *pieces = bufs[i * (1 + per):(i + 1) * (1 + per)]
        assert len(meta) == 64
        base = o.tensor.data_ptr()
        for n, b in enumerate(pieces):
            assert isinstance(b, memoryview) and not b.readonly
            assert _address(b) == base + n * piece and len(b) == piece
    for o in got:
        o.ref_count_down()
    assert env.live == live


def test_batched_get_allocates_a_batch_at_once(env, monkeypatch):
    """A batched get of a known layout takes its objects from one
    batched_allocate of LMCache's local CPU backend (one free block,
    without eviction or busy wait), never one allocate per key, and
    gives the pieces to the KV call as views at the objects' data_ptr,
    never reading byte_array (a tensor view and a ctypes cast per
    object); every key exact, nothing leaked."""
    rb = env.backend()
    keys, live = _stored(env, rb, 6)
    calls = []
    allocate, batched = env.cpu.allocate, env.cpu.batched_allocate

    def one(*a, **kw):
        calls.append(("allocate", kw))
        return allocate(*a, **kw)

    def many(*a, **kw):
        calls.append(("batched_allocate", a[2], kw))
        return batched(*a, **kw)
    env.cpu.allocate, env.cpu.batched_allocate = one, many
    read = _spy_byte_array(monkeypatch)
    try:
        got = rb.batched_get_blocking(keys)
    finally:
        del env.cpu.allocate, env.cpu.batched_allocate
    monkeypatch.undo()
    assert calls == [("batched_allocate", 6,
                      {"eviction": False, "busy_loop": False})]
    assert read == []
    _exact_then_dropped(got, keys)
    assert env.live == live


def test_batched_get_without_a_free_block_allocates_per_key(env):
    """LMCache's memory fragmented so that no free block holds the batch
    (batched_allocate None) while each object still fits: the get falls
    back to one allocate per key and reads every key exactly; nothing
    leaks."""
    rb = env.backend()
    keys, live = _stored(env, rb, 4)
    # fill LMCache's memory, then free every other object: 1 MiB holes
    fill = []
    while True:
        o = env.obj(keys[0])
        fill.append(o)
        if env.cpu.memory_allocator.free_list == []:
            break
        if len(fill) > 200:
            pytest.fail("the allocator never filled up")
    for o in fill[::2]:
        o.ref_count_down()
    assert env.cpu.batched_allocate(fill[0].get_shape(), torch.float16,
                                    2) is None
    got = rb.batched_get_blocking(keys)
    _exact_then_dropped(got, keys)
    for o in fill[1::2]:
        o.ref_count_down()
    assert env.live == live


def test_batched_get_of_unaligned_objects_allocates_per_key(env):
    """Objects of a size that is not a multiple of LMCache's allocator
    alignment: its batched_allocate cuts its block at the aligned size,
    so the objects report the wrong size; the get frees them and takes
    one allocate per key, and every key is exact; nothing leaks."""
    from lmcache.v1.memory_management import MemoryFormat
    rb = env.backend()
    keys = [env.key() for _ in range(3)]
    shape = torch.Size([2, 1, 3, 5])  # 60 bytes of fp16
    for k in keys:
        o = env.cpu.allocate(shape, torch.float16, MemoryFormat.KV_2LTD)
        o.tensor.reshape(-1).view(torch.uint8).copy_(
            content(k)[:o.get_size()])
        wait_all([rb.submit_put_task(k, o)])
        o.ref_count_down()
    live = env.live
    cut = env.cpu.batched_allocate(shape, torch.float16, 3)
    assert [o.get_size() for o in cut] == [512] * 3  # upstream's cut
    for o in cut:
        o.ref_count_down()
    got = rb.batched_get_blocking(keys)
    for o, k in zip(got, keys):
        assert o is not None and o.get_shape() == shape
        assert torch.equal(o.tensor.reshape(-1).view(torch.uint8),
                           content(k)[:60])
        o.ref_count_down()
    assert env.live == live


def test_batched_get_with_another_batched_allocate(env):
    """A local CPU backend whose batched_allocate takes other arguments
    (TypeError, before allocating): the get allocates per key, every key
    exact, and later gets do not try batched_allocate again; nothing
    leaks."""
    rb = env.backend()
    keys, live = _stored(env, rb, 3)
    calls = []

    def other(shape, dtype, batch_size):
        calls.append(batch_size)
        raise AssertionError("not reached")
    env.cpu.batched_allocate = lambda *a, **kw: (calls.append(kw),
                                                 other(*a, **kw))
    try:
        for _ in range(2):
            got = rb.batched_get_blocking(keys)
            _exact_then_dropped(got, keys)
    finally:
        del env.cpu.batched_allocate
    assert len(calls) == 1 and env.live == live

def test_batched_get_without_data_ptr_reads_byte_array(env, monkeypatch):
    """An LMCache whose MemoryObj has no data_ptr (the older interface):
    the pieces go to the KV call as views of byte_array, every key
    exact, nothing leaked."""
    from lmcache.v1.memory_management import MemoryObj, TensorMemoryObj
    rb = env.backend()
    keys, live = _stored(env, rb, 3)
    monkeypatch.delattr(TensorMemoryObj, "data_ptr")
    monkeypatch.delattr(MemoryObj, "data_ptr")
    read = _spy_byte_array(monkeypatch)
    got = rb.batched_get_blocking(keys)
    monkeypatch.undo()
    assert len(read) == 3 and all(r is g for r, g in zip(read, got))
    _exact_then_dropped(got, keys)
    assert env.live == live


def test_batched_get_hashes_a_key_once(env, monkeypatch):
    """A key's tidepool keys (its base and its pieces', a BLAKE2b each)
    are computed once and cached: a get of keys already seen hashes
    nothing."""
    rb = env.backend()
    keys, live = _stored(env, rb, 3)
    real = hashlib.blake2b
    calls = []

    def counting(*a, **kw):
        calls.append(a)
        return real(*a, **kw)
    monkeypatch.setattr(hashlib, "blake2b", counting)
    got = rb.batched_get_blocking(keys)
    monkeypatch.undo()
    assert calls == []
    _exact_then_dropped(got, keys)
    assert env.live == live


def test_batched_get_allocation_error_waits_and_frees(env):
    """LMCache's allocator raising in the middle of a batched get whose
    first calls are under way: the calls are waited for before anything
    is freed, the error reaches LMCache (a miss for every key there) and
    nothing leaks; the next get reads every key."""
    rb = env.backend()
    conn = rb.connection.getWrappedConnector()
    keys, live = _stored(env, rb, 4)
    conn._overlap_keys = 1
    spy = _CountingKV(conn._kv)
    conn._kv = spy
    allocate = env.cpu.allocate
    n = [0]

    def failing(*a, **kw):
        n[0] += 1
        if n[0] == 3:
            raise RuntimeError("allocator failed")
        return allocate(*a, **kw)
    env.cpu.allocate = failing
    try:
        assert rb.batched_get_blocking(keys) == [None] * 4
    finally:
        del env.cpu.allocate
    assert spy.gets == 2 and env.live == live
    got = rb.batched_get_blocking(keys)
    _exact_then_dropped(got, keys)
    assert env.live == live
