"""Tests of tidepool.connectors: LMCache's native-connector protocol, the
RemoteConnector-shaped class and the vLLM OffloadingManager adapter,
driven through exactly the methods LMCache and vLLM call, against a real
memd and a real cluster (python/tests/conftest.py). Every value is
derived from its key, so any wrong byte fails."""

import asyncio
import hashlib
import select
import struct
import threading
import time
import uuid

import pytest

import tidepool
from conftest import kv_warmed
from tidepool.connectors import lmcache as lmc
from tidepool.connectors import vllm as tv

torch = pytest.importorskip("torch")

LAYERS = 2  # chunk [2, LAYERS, tokens, HIDDEN]: 128 KiB of fp16 at 256
HIDDEN = 64
TOKENS = 256
SMALL_PIECE = 48 << 10  # several pieces per chunk, the last one short
DEADLINE_S = 20.0


@pytest.fixture
def target(pool_args):
    """conftest's pool_args (a standalone memd; a tenant of a registry
    with two donors): the keyword arguments that reach the pool, once
    the pool takes KV values of both sizes the tests use (64 B metas,
    128 KiB pieces)."""
    return kv_warmed(pool_args, (64, 128 << 10))


@pytest.fixture
def pool(target):
    """An open Pool on target."""
    p = tidepool.Pool(target["addr"], target.get("tenant"),
                      target.get("secret_file"))
    yield p
    p.close()


@pytest.fixture
def kv(pool):
    """A KV handle of its own, to look behind the connectors' backs."""
    k = pool.kv()
    yield k
    k.close()


def lmkeys(n, tag=""):
    """n fresh LMCache key strings (CacheEngineKey.to_string() form)."""
    run = uuid.uuid4().hex[:12]
    return ["vllm@test-model%s@1@0@%s%04x" % (tag, run, i)
            for i in range(n)]


def chunk(key, tokens=TOKENS, dtype=None):
    """An LMCache KV chunk [2, LAYERS, tokens, HIDDEN] whose every byte
    comes from key."""
    seed = int.from_bytes(hashlib.blake2b(
        ("%s/%d" % (key, tokens)).encode(), digest_size=8).digest(),
        "little") >> 1
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-32768, 32768, (2, LAYERS, tokens, HIDDEN),
                         dtype=torch.int16, generator=g)
    return bits.view(dtype or torch.float16)


def raw(t):
    """The bytes of a tensor as a writable memoryview (MemoryObj's
    byte_array: itemsize 1)."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def same(a, b):
    """a and b are bit for bit the same tensor (NaN patterns included)."""
    return (a is not None and b is not None and a.dtype == b.dtype and
            a.shape == b.shape and
            torch.equal(a.reshape(-1).view(torch.uint8),
                        b.reshape(-1).view(torch.uint8)))


def collect(conn, fids, timeout=DEADLINE_S):
    """Waits for the batches fids the way NativeConnectorL2Adapter's demux
    thread does (poll event_fd, drain); {fid: (ok, error, results)}.
    Checks that each batch completes once."""
    want, got = set(fids), {}
    poller = select.poll()
    poller.register(conn.event_fd(), select.POLLIN)
    end = time.monotonic() + timeout
    while not want <= got.keys():
        assert time.monotonic() < end, "batches %s never completed" % (
            sorted(want - got.keys()),)
        poller.poll(200)
        for fid, ok, err, res in conn.drain_completions():
            assert fid not in got, "batch %d completed twice" % fid
            got[fid] = (ok, err, res)
    return got


def one(conn, fid):
    """The (ok, error, results) of one batch."""
    return collect(conn, [fid])[fid]


# ---------------------------------------------------------------------
# keys


def test_lmcache_key_rule():
    """The documented rule, computed here independently."""
    s = "vllm@m@1@0@abc"
    want = hashlib.blake2b(b"tidepool lmcache key v1\0" + s.encode(),
                           digest_size=32).digest()
    assert lmc.lmcache_key(s) == want

    class Key:
        def to_string(self):
            return s
    assert lmc.lmcache_key(Key()) == want
    assert lmc.lmcache_key(s + "d") != want
    with pytest.raises(TypeError):
        lmc.lmcache_key(42)
    base = want
    pk = lmc.piece_keys(base, 100, 40)
    assert len(pk) == 3
    assert pk[2] == hashlib.blake2b(
        b"tidepool lmcache piece v1\0" + base +
        struct.pack("<QQI", 100, 40, 2), digest_size=32).digest()
    # one piece when the value is not larger than the piece size
    assert lmc.piece_keys(base, 100, 0) == lmc.piece_keys(base, 100, 200)
    assert len(set(pk + lmc.piece_keys(base, 101, 40))) == 6


def test_vllm_block_key_rule():
    """bytes and int hashes, namespaces, vLLM's old BlockHash tuple."""
    h = bytes(range(32))
    want = hashlib.blake2b(b"tidepool vllm block v1\0" +
                           struct.pack("<I", 3) + b"m-1" + b"b" + h,
                           digest_size=32).digest()
    assert tv.block_key(h, "m-1") == want
    assert tv.block_key(h, "m-2") != want
    assert tv.block_key(-5) == hashlib.blake2b(
        b"tidepool vllm block v1\0" + struct.pack("<I", 0) + b"i-5",
        digest_size=32).digest()
    assert tv.block_key(5) != tv.block_key(-5)

    class OldBlockHash:
        hash_value = 12345
    assert tv.block_key(OldBlockHash()) == tv.block_key(12345)
    with pytest.raises(TypeError):
        tv.block_key("not a hash")


# ---------------------------------------------------------------------
# LMCache native connector


@pytest.fixture
def native(target):
    """The native connector as LMCache's native_plugin factory builds it:
    connector_cls(**adapter_params)."""
    conn = lmc.TidepoolNativeConnector(**target)
    yield conn
    conn.close()


@pytest.mark.parametrize("piece_bytes", [lmc.PIECE_BYTES, SMALL_PIECE])
def test_native_set_get(target, piece_bytes):
    """set, then get into fresh buffers: every byte back; a miss among
    hits leaves ok True; per-key results are lists of bools."""
    conn = lmc.TidepoolNativeConnector(piece_bytes=piece_bytes, **target)
    try:
        keys = lmkeys(5)
        vals = [chunk(k) for k in keys[:4]]
        ok, err, res = one(conn, conn.submit_batch_set(
            keys[:4], [raw(v) for v in vals]))
        assert (ok, err, res) == (True, "", [True] * 4)

        outs = [torch.zeros_like(v) for v in vals] + [
            torch.zeros_like(vals[0])]
        order = [0, 4, 1, 2, 3]  # the miss in the middle
        fid = conn.submit_batch_get([keys[i] for i in order],
                                    [raw(outs[i]) for i in order])
        ok, err, res = one(conn, fid)
        assert ok and err == ""
        assert res == [True, False, True, True, True]
        for v, o in zip(vals, outs):
            assert same(v, o)

        # a second set of present keys: stored (idempotent), no error
        ok, _, res = one(conn, conn.submit_batch_set(
            keys[:2], [raw(v) for v in vals[:2]]))
        assert ok and res == [True, True]
    finally:
        conn.close()


def test_native_exists_delete(native):
    """exists answers per key (not a prefix); delete per key."""
    keys = lmkeys(4)
    vals = [chunk(k) for k in keys]
    assert one(native, native.submit_batch_set(
        keys[:3], [raw(v) for v in vals[:3]]))[0]
    assert one(native, native.submit_batch_exists(keys)) == (
        True, "", [True, True, True, False])

    assert one(native, native.submit_batch_delete([keys[1], keys[3]])) == (
        True, "", [True, False])
    assert one(native, native.submit_batch_exists(keys))[2] == [
        True, False, True, False]
    assert one(native, native.submit_batch_exists(keys[::-1]))[2] == [
        False, True, False, True]
    assert one(native, native.submit_batch_delete([keys[1]]))[2] == [False]

    out = torch.zeros_like(vals[1])
    assert one(native, native.submit_batch_get(
        [keys[1]], [raw(out)]))[2] == [False]
    out = torch.zeros_like(vals[2])
    assert one(native, native.submit_batch_get(
        [keys[2]], [raw(out)]))[2] == [True]
    assert same(out, vals[2])


def test_native_lengths_and_pieces(target, kv):
    """Values of several lengths, each in pieces; a buffer of another
    length is a miss, not an error; a lost piece makes the value absent."""
    conn = lmc.TidepoolNativeConnector(piece_bytes=SMALL_PIECE, **target)
    try:
        keys = lmkeys(3)
        vals = [chunk(keys[0]), chunk(keys[1], tokens=100),
                chunk(keys[2], tokens=3)]
        assert one(conn, conn.submit_batch_set(
            keys, [raw(v) for v in vals]))[:2] == (True, "")

        wrong = torch.zeros_like(chunk(keys[0], tokens=200))
        right = torch.zeros_like(vals[1])
        ok, _, res = one(conn, conn.submit_batch_get(
            [keys[0], keys[1]], [raw(wrong), raw(right)]))
        assert ok and res == [False, True]
        assert same(right, vals[1])

        # drop the middle piece of the first value behind its back
        base = lmc.lmcache_key(keys[0])
        nbytes = vals[0].numel() * 2
        pk = lmc.piece_keys(base, nbytes, SMALL_PIECE)
        assert len(pk) == 3
        assert kv.delete([pk[1]]) == [True]
        assert one(conn, conn.submit_batch_exists(keys))[2] == [
            False, True, True]
        out = torch.zeros_like(vals[0])
        assert one(conn, conn.submit_batch_get(
            [keys[0]], [raw(out)]))[2] == [False]
        # and a delete still removes what is left of it
        assert one(conn, conn.submit_batch_delete([keys[0]]))[2] == [True]
        assert kv.exists([pk[0]]) == 0 and kv.exists([pk[2]]) == 0
    finally:
        conn.close()


def test_native_many_batches_in_flight(native):
    """Many batches submitted before any is drained each complete once,
    with their own results."""
    keys = lmkeys(24)
    vals = {k: chunk(k) for k in keys}
    fids = [native.submit_batch_set(keys[i:i + 3],
                                    [raw(vals[k]) for k in keys[i:i + 3]])
            for i in range(0, 24, 3)]
    assert len(set(fids)) == len(fids) and fids == sorted(fids)
    for ok, err, res in collect(native, fids).values():
        assert ok and res == [True] * 3
    outs = {k: torch.zeros_like(vals[k]) for k in keys}
    gets = {native.submit_batch_get([k], [raw(outs[k])]): k for k in keys}
    exists = native.submit_batch_exists(keys + lmkeys(2))
    done = collect(native, list(gets) + [exists])
    assert done[exists][2] == [True] * 24 + [False, False]
    for fid, k in gets.items():
        assert done[fid] == (True, "", [True])
        assert same(outs[k], vals[k])


def test_native_asyncio_client(native):
    """Driven as LMCache's ConnectorClientBase drives it: a reader on
    event_fd in an asyncio loop resolves one future per batch."""

    async def main():
        loop = asyncio.get_running_loop()
        pending = {}

        def on_ready():
            while True:
                items = native.drain_completions()
                if not items:
                    return
                for fid, ok, error, res in items:
                    fut = pending.pop(fid)
                    if ok:
                        fut.set_result(res)
                    else:
                        fut.set_exception(RuntimeError(error))

        def submit(fid):
            fut = loop.create_future()
            pending[fid] = fut
            return fut

        loop.add_reader(native.event_fd(), on_ready)
        try:
            keys = lmkeys(8)
            vals = [chunk(k, dtype=torch.bfloat16) for k in keys]
            sets = [submit(native.submit_batch_set([k], [raw(v)]))
                    for k, v in zip(keys, vals)]
            assert await asyncio.wait_for(asyncio.gather(*sets),
                                          DEADLINE_S) == [[True]] * 8
            outs = [torch.zeros_like(v) for v in vals]
            got = await asyncio.wait_for(submit(native.submit_batch_get(
                keys, [raw(o) for o in outs])), DEADLINE_S)
            assert got == [True] * 8
            for v, o in zip(vals, outs):
                assert same(v, o)
            assert await asyncio.wait_for(submit(
                native.submit_batch_exists(keys[:2] + lmkeys(1))),
                DEADLINE_S) == [True, True, False]
        finally:
            loop.remove_reader(native.event_fd())
        assert not pending

    asyncio.run(main())


def test_native_threads(native):
    """Submits from two threads while a third drains, as LMCache's MP
    mode does (NativeConnectorL2Adapter's demux thread)."""
    results, lock, stop = {}, threading.Lock(), threading.Event()
    errors = []

    def demux():
        poller = select.poll()
        poller.register(native.event_fd(), select.POLLIN)
        while not stop.is_set():
            if not poller.poll(100):
                continue
            for fid, ok, err, res in native.drain_completions():
                with lock:
                    if fid in results:
                        errors.append("twice: %d" % fid)
                    results[fid] = (ok, err, res)

    def worker(tag, out):
        try:
            keys = lmkeys(6, tag)
            vals = [chunk(k) for k in keys]
            out.append((native.submit_batch_set(
                keys, [raw(v) for v in vals]), keys, vals))
        except Exception as e:  # reported below
            errors.append(repr(e))

    t = threading.Thread(target=demux)
    t.start()
    try:
        subs = [[], []]
        ws = [threading.Thread(target=worker, args=("t%d" % i, subs[i]))
              for i in range(2)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        fids = [s[0][0] for s in subs]
        end = time.monotonic() + DEADLINE_S
        while True:
            with lock:
                if all(f in results for f in fids):
                    break
            assert time.monotonic() < end
            time.sleep(0.01)
        gets = []
        for fid, keys, vals in (s[0] for s in subs):
            assert results[fid] == (True, "", [True] * 6)
            outs = [torch.zeros_like(v) for v in vals]
            gets.append((native.submit_batch_get(
                keys, [raw(o) for o in outs]), vals, outs))
        end = time.monotonic() + DEADLINE_S
        while True:
            with lock:
                if all(g[0] in results for g in gets):
                    break
            assert time.monotonic() < end
            time.sleep(0.01)
        for fid, vals, outs in gets:
            assert results[fid] == (True, "", [True] * 6)
            for v, o in zip(vals, outs):
                assert same(v, o)
    finally:
        stop.set()
        t.join()
    assert not errors


def test_native_errors(target):
    """Bad arguments raise ValueError at submit (nothing is queued); a
    closed connector raises ClosedError and drains nothing."""
    conn = lmc.TidepoolNativeConnector(**target)
    keys = lmkeys(2)
    buf = raw(chunk(keys[0]))
    with pytest.raises(ValueError):
        conn.submit_batch_get([], [])
    with pytest.raises(ValueError):
        conn.submit_batch_exists([])
    with pytest.raises(ValueError):
        conn.submit_batch_delete([])
    with pytest.raises(ValueError):
        conn.submit_batch_set(keys, [buf])
    with pytest.raises(ValueError):
        conn.submit_batch_get(keys[:1], [memoryview(bytes(16))])  # read-only
    with pytest.raises(ValueError):
        conn.submit_batch_set(keys[:1], [memoryview(bytearray())])
    with pytest.raises(TypeError):
        conn.submit_batch_set(keys[:1], [object()])
    with pytest.raises(ValueError):
        lmc.TidepoolNativeConnector(piece_bytes=-1, **target)
    assert conn.drain_completions() == []

    fid = conn.submit_batch_set(keys[:1], [buf])
    assert one(conn, fid)[0]
    conn.close()
    assert conn.closed
    conn.close()  # idempotent
    for call in (lambda: conn.submit_batch_set(keys[:1], [buf]),
                 lambda: conn.submit_batch_get(keys[:1], [buf]),
                 lambda: conn.submit_batch_exists(keys),
                 lambda: conn.submit_batch_delete(keys),
                 conn.event_fd):
        with pytest.raises(tidepool.ClosedError):
            call()
    assert conn.drain_completions() == []


def test_native_close_with_batches_in_flight(target):
    """close() with batches never drained waits for their KV calls and
    drops them."""
    conn = lmc.TidepoolNativeConnector(**target)
    keys = lmkeys(6)
    bufs = [raw(chunk(k)) for k in keys]
    conn.submit_batch_set(keys, bufs)
    conn.submit_batch_exists(keys)
    conn.close()
    assert conn.drain_completions() == []


# ---------------------------------------------------------------------
# LMCache RemoteConnector shape


@pytest.fixture
def remote(pool):
    """A remote connector with small pieces on a shared Pool."""
    conn = lmc.TidepoolRemoteConnector(pool, piece_bytes=SMALL_PIECE)
    yield conn
    conn.close_sync()


def test_remote_put_get_exists(remote):
    """put/get/exists as coroutines, exists_sync, misses."""
    keys = lmkeys(3)
    vals = [chunk(keys[0]), chunk(keys[1], dtype=torch.bfloat16)]

    async def main():
        assert not await remote.exists(keys[0])
        assert await remote.get(keys[0]) is None
        await remote.put(keys[0], vals[0])
        await remote.put(keys[1], vals[1])
        await remote.put(keys[0], vals[0])  # idempotent
        assert await remote.exists(keys[0])
        assert not await remote.exists(keys[2])
        got = await remote.get(keys[0])
        assert same(got, vals[0]) and got.dtype == torch.float16
        got = await remote.get(keys[1])
        assert same(got, vals[1]) and got.dtype == torch.bfloat16
        assert await remote.get(keys[2]) is None

    asyncio.run(main())
    assert remote.exists_sync(keys[0]) and remote.exists_sync(keys[1])
    assert not remote.exists_sync(keys[2])


def test_remote_batched(target):
    """batched_put/batched_get with full and partial chunks (the shape
    comes back), batched_contains as a prefix, the non-blocking get."""
    conn = lmc.TidepoolRemoteConnector(
        addr=target["addr"], tenant=target.get("tenant"),
        secret_file=target.get("secret_file"), piece_bytes=SMALL_PIECE,
        chunk_shape=(2, LAYERS, TOKENS, HIDDEN), dtype=torch.float16)
    try:
        keys = lmkeys(5)
        vals = {keys[0]: chunk(keys[0]), keys[1]: chunk(keys[1]),
                keys[2]: chunk(keys[2], tokens=100),
                keys[4]: chunk(keys[4], tokens=1)}
        present = [keys[0], keys[1], keys[2], keys[4]]

        async def main():
            await conn.batched_put(present, [vals[k] for k in present])
            got = await conn.batched_get(keys)
            for k, g in zip(keys, got):
                if k in vals:
                    assert same(g, vals[k]), k
                else:
                    assert g is None
            assert got[2].shape == (2, LAYERS, 100, HIDDEN)
            assert await conn.batched_async_contains("l1", keys) == 3
            assert await conn.batched_async_contains("l2", keys[3:]) == 0
            prefix = await conn.batched_get_non_blocking("l3", keys)
            assert len(prefix) == 3
            for k, g in zip(keys, prefix):
                assert same(g, vals[k])
            assert await conn.batched_get([]) == []

        asyncio.run(main())
        assert conn.batched_contains(keys) == 3
        assert conn.batched_contains(keys[4:]) == 1
        assert conn.batched_contains([]) == 0
        for name in ("ping", "batched_get", "batched_put",
                     "batched_contains", "batched_async_contains",
                     "batched_get_non_blocking"):
            assert getattr(conn, "support_" + name)()
    finally:
        asyncio.run(conn.close())
    assert conn.closed


def test_remote_remove_ping_list(remote):
    """remove_sync, ping, and list() refusing honestly."""
    keys = lmkeys(2)
    v = chunk(keys[0])

    async def main():
        await remote.put(keys[0], v)
        assert await remote.ping() == 0
        with pytest.raises(NotImplementedError):
            await remote.list()

    asyncio.run(main())
    assert remote.remove_sync(keys[0]) is True
    assert remote.remove_sync(keys[0]) is False
    assert remote.remove_sync(keys[1]) is False
    assert not remote.exists_sync(keys[0])
    assert asyncio.run(remote.get(keys[0])) is None


def test_remote_reads_what_native_stored(target, remote):
    """The two classes share one layout: raw bytes stored by the native
    connector are not a tensor (a miss), a tensor stored by the remote
    connector reads back through the native one."""
    keys = lmkeys(2)
    v = chunk(keys[0])
    native = lmc.TidepoolNativeConnector(piece_bytes=SMALL_PIECE, **target)
    try:
        assert one(native, native.submit_batch_set([keys[1]],
                                                   [raw(v)]))[0]
        assert remote.exists_sync(keys[1])
        assert asyncio.run(remote.get(keys[1])) is None
        asyncio.run(remote.put(keys[0], v))
        out = torch.zeros_like(v)
        assert one(native, native.submit_batch_get(
            [keys[0]], [raw(out)]))[2] == [True]
        assert same(out, v)
    finally:
        native.close()


def test_remote_errors(pool):
    """Wrong shapes, dtypes and layouts raise ValueError before anything
    is stored; a closed connector raises ClosedError."""
    conn = lmc.TidepoolRemoteConnector(
        pool, chunk_shape=(2, LAYERS, TOKENS, HIDDEN), dtype=torch.float16)
    keys = lmkeys(2)
    v = chunk(keys[0])
    bad = [
        chunk(keys[0], dtype=torch.bfloat16),      # dtype
        chunk(keys[0], tokens=TOKENS + 1),          # too many tokens
        torch.zeros(2, LAYERS + 1, 8, HIDDEN, dtype=torch.float16),
        torch.zeros(2, LAYERS, 8, HIDDEN + 1, dtype=torch.float16),
        v.transpose(2, 3),                          # not contiguous
        torch.zeros(0, dtype=torch.float16),        # empty
    ]

    async def main():
        for t in bad:
            with pytest.raises(ValueError):
                await conn.put(keys[0], t)
        with pytest.raises(ValueError):
            await conn.batched_put(keys, [v])
        with pytest.raises(TypeError):
            await conn.put(keys[0], raw(v))
        assert not await conn.exists(keys[0])

    asyncio.run(main())
    free = lmc.TidepoolRemoteConnector(pool)
    with pytest.raises(ValueError):
        asyncio.run(free.put(keys[1], torch.zeros(4, dtype=torch.complex64)))
    free.close_sync()
    with pytest.raises(ValueError):
        lmc.TidepoolRemoteConnector(pool, piece_bytes=tidepool.VALUE_MAX + 1)

    conn.close_sync()
    conn.close_sync()
    with pytest.raises(tidepool.ClosedError):
        conn.exists_sync(keys[0])
    with pytest.raises(tidepool.ClosedError):
        conn.remove_sync(keys[0])
    with pytest.raises(tidepool.ClosedError):
        conn.batched_contains(keys)
    for coro in (lambda: conn.get(keys[0]), lambda: conn.put(keys[0], v),
                 lambda: conn.exists(keys[0]), conn.ping,
                 lambda: conn.batched_get(keys)):
        with pytest.raises(tidepool.ClosedError):
            asyncio.run(coro())
    assert not pool.closed  # the pool was lent, not owned


def test_remote_allocate_hook(pool):
    """get() reads into the tensors allocate() gives (LMCache's
    local_cpu_backend.allocate in the shim)."""
    made = []

    def allocate(shape, dtype):
        t = torch.full(shape, 7, dtype=dtype)
        made.append(t)
        return t

    conn = lmc.TidepoolRemoteConnector(pool, allocate=allocate)
    try:
        k = lmkeys(1)[0]
        v = chunk(k)
        asyncio.run(conn.put(k, v))
        got = asyncio.run(conn.get(k))
        assert got is made[0] and same(got, v)
    finally:
        conn.close_sync()


# ---------------------------------------------------------------------
# vLLM OffloadingManager


def block_hashes(n, tag=""):
    """n fresh vLLM block hashes (bytes, as BlockHash is)."""
    run = uuid.uuid4().bytes
    return [hashlib.sha256(run + tag.encode() + struct.pack("<I", i)).digest()
            for i in range(n)]


def block(h, nbytes=32 << 10):
    """The KV bytes of a block, derived from its hash."""
    out = bytearray()
    i = 0
    while len(out) < nbytes:
        out += hashlib.blake2b(h + struct.pack("<I", i)).digest()
        i += 1
    return bytes(out[:nbytes])


@pytest.fixture
def manager(pool):
    """An offloading manager with events on a shared Pool."""
    m = tv.TidepoolOffloadingManager(pool, namespace="test-model",
                                     block_size=16, enable_events=True)
    yield m
    m.shutdown()


def test_vllm_store_lookup_load(manager, kv):
    """prepare_store -> store -> complete_store -> lookup ->
    prepare_load -> load -> complete_load, with the pins in memd."""
    hs = block_hashes(5)
    assert manager.lookup(hs) == 0
    out = manager.prepare_store(hs[:4])
    assert out.block_hashes_to_store == hs[:4]
    assert out.block_hashes_evicted == [] and out.evicted_keys == []
    assert out.keys_to_store == hs[:4]
    assert out.store_spec.medium() == "TIDEPOOL"
    assert manager.store(out, [block(h) for h in hs[:4]]) == [True] * 4
    manager.complete_store(hs[:4])
    ev = manager.take_events()
    assert len(ev) == 1 and ev[0].block_hashes == hs[:4]
    assert ev[0].removed is False and ev[0].medium == "TIDEPOOL"
    assert ev[0].block_size == 16 and ev[0].keys == hs[:4]
    assert manager.take_events() == []

    assert manager.lookup(hs) == 4
    assert manager.lookup(hs[1:]) == 3
    assert manager.lookup([]) == 0
    manager.touch(hs)

    spec = manager.prepare_load(hs[:4])
    keys = [tv.block_key(h, "test-model") for h in hs[:4]]
    assert spec.keys == keys
    bufs = [bytearray(32 << 10) for _ in range(4)]
    assert manager.load(spec, bufs) == [True] * 4
    for h, b in zip(hs, bufs):
        assert bytes(b) == block(h)
    # pinned now: one pin each, which this handle may take off and put
    # back; after complete_load nothing is pinned
    assert kv.unpin(keys[:1]) == [True]
    assert kv.pin(keys[:1]) == [True]
    manager.complete_load(hs[:4])
    assert kv.unpin(keys) == [False] * 4


def test_vllm_prepare_store_skips_present_prefix(manager):
    """Blocks already offloaded are not stored again; a failed store
    removes what it wrote."""
    hs = block_hashes(4)
    out = manager.prepare_store(hs[:2])
    manager.store(out, [block(h) for h in hs[:2]])
    manager.complete_store(hs[:2], success=True)
    out = manager.prepare_store(hs)
    assert out.block_hashes_to_store == hs[2:]
    assert manager.store(out.store_spec, [block(h) for h in hs[2:]]) == [
        True, True]
    manager.complete_store(hs[2:], False)  # abstract.py: (hashes, success)
    assert manager.lookup(hs) == 2
    assert manager.take_events()[0].block_hashes == hs[:2]
    # completing blocks that were never prepared changes nothing
    manager.complete_store(hs[:2], success=False)
    assert manager.lookup(hs) == 2


def test_vllm_base_py_calls_and_int_hashes(pool):
    """vLLM's later base.py convention (one key per lookup, req_context
    arguments) and int block hashes; namespaces keep models apart."""
    m = tv.TidepoolOffloadingManager(pool, namespace="model-a")
    other = tv.TidepoolOffloadingManager(pool, namespace="model-b")
    try:
        hs = [int.from_bytes(h[:8], "little") - (1 << 63)
              for h in block_hashes(3)]
        ctx = object()
        out = m.prepare_store(hs, ctx)
        assert m.store(out, [block(str(h).encode()) for h in hs]) == [
            True] * 3
        m.complete_store(hs, ctx, True)
        assert m.lookup(hs[0], ctx) is True
        assert m.lookup(hs) == 3
        assert other.lookup(hs) == 0 and other.lookup(hs[0], ctx) is False
        spec = m.prepare_load(hs[1:], ctx)
        bufs = [bytearray(32 << 10) for _ in hs[1:]]
        assert m.load(spec, bufs) == [True, True]
        assert bufs[1] == block(str(hs[2]).encode())
        m.complete_load(hs[1:], ctx)
        assert m.take_events() == []  # events off
    finally:
        m.shutdown()
        other.shutdown()


def test_vllm_shutdown_unpins_and_closes(target, kv):
    """shutdown() takes off the pins still held and closes; later calls
    raise ClosedError; bad worker calls raise ValueError."""
    m = tv.TidepoolOffloadingManager(
        addr=target["addr"], tenant=target.get("tenant"),
        secret_file=target.get("secret_file"), namespace="n")
    hs = block_hashes(2)
    out = m.prepare_store(hs)
    with pytest.raises(ValueError):
        m.store(out, [block(hs[0])])
    assert m.store(out, [block(h) for h in hs]) == [True, True]
    m.complete_store(hs)
    m.prepare_load(hs)
    m.prepare_load(hs[:1])  # pins nest
    spec = m.prepare_load(hs[:1])
    with pytest.raises(ValueError):
        m.load(spec, [])
    m.complete_load(hs[:1])
    m.shutdown()
    m.shutdown()
    keys = [tv.block_key(h, "n") for h in hs]
    assert kv.unpin(keys) == [False, False]
    with pytest.raises(tidepool.ClosedError):
        m.lookup(hs)
    with pytest.raises(tidepool.ClosedError):
        m.prepare_store(hs)
    with pytest.raises(tidepool.ClosedError):
        m.touch(hs)


def test_vllm_missing_block_is_not_pinned(manager, kv):
    """A block gone between lookup and prepare_load is not pinned, its
    load misses, and complete_load leaves other pins alone."""
    hs = block_hashes(2)
    out = manager.prepare_store(hs)
    manager.store(out, [block(h) for h in hs])
    manager.complete_store(hs)
    keys = [tv.block_key(h, "test-model") for h in hs]
    assert kv.delete(keys[1:]) == [True]
    spec = manager.prepare_load(hs)
    bufs = [bytearray(32 << 10) for _ in hs]
    assert manager.load(spec, bufs) == [True, False]
    assert kv.pin(keys[:1]) == [True]  # someone else's pin
    manager.complete_load(hs)
    assert kv.unpin(keys[:1]) == [True]
    assert kv.unpin(keys[:1]) == [False]


def test_native_value_over_the_limit(target):
    """With piece_bytes 0 (one piece per value) a value over VALUE_MAX is
    refused at submit, before anything is queued."""
    conn = lmc.TidepoolNativeConnector(piece_bytes=0, **target)
    try:
        keys = lmkeys(2)
        small = raw(chunk(keys[0]))
        big = memoryview(bytearray(tidepool.VALUE_MAX + 1))
        with pytest.raises(ValueError):
            conn.submit_batch_set(keys, [small, big])
        assert conn.drain_completions() == []
        ok, err, res = one(conn, conn.submit_batch_set(keys[:1], [small]))
        assert (ok, err, res) == (True, "", [True])
    finally:
        conn.close()
