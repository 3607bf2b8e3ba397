#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/pybench.py - the KV tier through the Python package (tidepool)
against the same work in C, in one run on one memd (docs/bench/python.md).

usage: /usr/bin/python3 bench/pybench.py [BUILD_DIR]   (default
           build/release, else build-bench, at the repository root)
       /usr/bin/python3 bench/pybench.py --summarize RAW.txt...
Knobs (options, or the environment): --reps REPS=5, --cap CAP=2560M,
  --slab SLAB=64M, --prompts PROMPTS=60, --layers LAYERS=1, --hbm HBM=5,
  --tps TPS=10000, --calls-scale CALLS_SCALE=1.0, --parts PARTS="shared
  calls", --pipeline PIPELINE=<the extension's>, --pipelines
  PIPELINES="", --out-dir OUT_DIR=<BUILD>/pybench-results/<time>.

--pipeline CHUNK,DEPTH sets the pipelined get's settings for the whole
run (_tidepool._get_pipeline: every part's gets into torch tensors that
bounce; CHUNK 0: the one-block bounce), e.g. to run a workload with the
settings of before; the "# pipeline=" line says which ran.

It starts one standalone memd on 127.0.0.1 (port 0, --ready-file, CAP
donated in SLAB slabs, kv_share 100: run_kvbench.sh's settings), and per
repetition measures two parts against it:

shared  kvbench's shared-prefix workload (bench/kvbench.c, docs/bench/
        kv.md): 60 prompts of 30,000 tokens whose first 28,000 come from
        one of 20 prefixes, Llama-3-8B blocks of 1 MiB per (chunk,
        layer), an HBM LRU of 5 prefixes' chunks, then exists + one
        batched get of the tier, the recomputed chunks put asynchronously
        and waited for before the next prompt. Run three times, in an
        order that rotates with the repetition: the C program kvbench
        (--tier tidepool, --seed REP), and this file's copy of it through
        the Python API with the values in numpy arrays, then in torch
        tensors (the same prompts, keys, values and HBM model, so the
        same hits: the lines say so). The tier is emptied between runs
        (every key the workload can have stored is deleted and checked
        gone). Every block fetched is checked (its first 32 bytes are its
        key): bad= counts wrong ones.
calls   what one call costs at batches of 1, 64 and 1024 keys: exists
        (every key present), get_into (every key a hit) and put (fresh
        keys; deleted again untimed) of 4 KiB values, in numpy arrays and
        in torch tensors, keys as a list of 32-byte bytes (prefix_keys()'
        form); per call the median over ITERS calls (1000, 200 and 30,
        times --calls-scale, after a tenth as many unmeasured). The
        baseline is the same calls on libpool itself through ctypes with
        every argument array built beforehand: C's cost plus ctypes' own
        (about a microsecond). us_call - the baseline's is what the
        Python layer adds. First, bulk: one get of a prefix's 109 blocks
        of 1 MiB, ctypes, numpy, torch and torch_fixed (tensors whose
        storage torch cannot resize, share_memory_(): read in place, no
        bounce) in turn, call by call (in an order shuffled each
        round), and, where the extension
        pipelines gets into tensors that bounce, torch_whole: the same
        tensors with the pipeline (and the sink) turned off for each of
        its calls (the one-block bounce; a reference, not a target);
        where it copies gets straight into tensors (_get_sink),
        torch_pipe: the sink off (the pipelined get; a reference); and one
        torch_pCHUNKxDEPTH per --pipelines setting (e.g. "1M,3 8M,2":
        the same keys into resizable tensors of its own, with
        _get_pipeline(CHUNK, DEPTH) for each of its calls; references
        too).
bulk    the bulk get alone (calls without its per-call part).

Output in OUT_DIR: raw.txt (every line of every repetition, "# ..." lines
for the host and settings), summary.txt (printed too): medians over the
repetitions, ratio lines with their targets, and last one line

  pybench result get_ratio_numpy=R get_ratio_torch=R target=0.9 pass=yes|no
      c_get_MBps=.. py_numpy_get_MBps=.. ... <op>_<buf>_<n>_us=.. ...

(one line; <op>_<buf>_<n>_us is the Python µs per call, and
 <op>_<buf>_<n>_over_us what it adds to the baseline).

Raw lines (bench/README.md's convention: the bench's name, then key=value):
  pybench part=shared impl=c|numpy|torch get_MBps=.. put_MBps=.. exists_ms=..
          get_ms=.. submit_ms=.. hit=.. tier_hit=.. local_hit=.. get_bytes=..
          put_bytes=.. bad=.. rep=N
  pybench part=calls impl=py|ctypes op=exists|get|put buf=numpy|torch|c
          batch=N iters=I us_call=.. us_key=.. p90_us=.. rep=N

Builds nothing: cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release &&
cmake --build build/release -j2 --target memd kvbench _tidepool
"""
import argparse
import contextlib
import ctypes
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import benchutil  # noqa: E402

BLOCK = 1 << 20  # one (chunk, layer) of Llama-3-8B
CHUNK_TOK = 256
PROMPT_TOK = 30000
PREFIX_TOK = 28000
NPREFIX = 20
TENANT, MODEL = "bench", "llama-3-8b"  # kvbench's, so the keys are its
M64 = (1 << 64) - 1
CALL_BATCHES = (1, 64, 1024)
CALL_ITERS = {1: 1000, 64: 200, 1024: 30}
CALL_VALUE = 4096
BULK_BATCH = PREFIX_TOK // CHUNK_TOK  # 109: one prefix's blocks
BULK_ITERS = 30
TARGET = 0.9


# ---- kvbench's workload, the same prompts and keys ----------------------

def fill_tokens(n, stream):
    """kvbench's fill_tokens: xorshift64 from stream, mod the Llama-3
    vocabulary."""
    import numpy as np
    s = (stream * 0x9E3779B97F4A7C15 + 1) & M64
    out = np.empty(n, dtype=np.uint32)
    for i in range(n):
        s ^= (s << 13) & M64
        s ^= s >> 7
        s ^= (s << 17) & M64
        out[i] = s % 128256
    return out


def prefix_of(seed, i):
    """kvbench's choice of prefix for prompt i: splitmix64 of (seed, i)."""
    z = ((seed << 32) + i + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return (z ^ (z >> 31)) % NPREFIX


_prefix_tokens = {}


def prompt_keys(seed, nprompts):
    """The chunk keys of every prompt of the shared workload."""
    import numpy as np
    import tidepool
    out = []
    for i in range(nprompts):
        pre = prefix_of(seed, i)
        if pre not in _prefix_tokens:
            _prefix_tokens[pre] = fill_tokens(PREFIX_TOK, 1000 + pre)
        tail = fill_tokens(PROMPT_TOK - PREFIX_TOK,
                           ((seed << 32) + 100000 + i) & M64)
        tok = np.concatenate([_prefix_tokens[pre], tail])
        out.append(tidepool.prefix_keys(tok, TENANT, MODEL, CHUNK_TOK))
    return out


def block_key(chunk_key, layer):
    return chunk_key[:31] + bytes([chunk_key[31] ^ layer])


class HBM:
    """kvbench's local cache: an LRU of chunk keys."""

    def __init__(self, cap):
        self.cap = cap
        self.d = OrderedDict()

    def has(self, k):
        return k in self.d

    def touch(self, k):
        if k in self.d:
            self.d.move_to_end(k)
            return
        if len(self.d) >= self.cap:
            self.d.popitem(last=False)
        self.d[k] = None


class DirectIO:
    """The shared workload's tier calls on tidepool.KV itself, values in
    numpy arrays or torch tensors (buf): the baseline. shared_run drives
    an object with these methods; bench/connbench.py gives it the
    engines' call sequences instead."""

    def __init__(self, kv, buf, maxblk, layers):
        import numpy as np
        import torch

        def alloc():
            if buf == "numpy":
                b = np.empty(BLOCK, dtype=np.uint8)
                b.fill(0)  # faulted in now, not inside a measurement
                return b, b
            t = torch.empty(BLOCK, dtype=torch.uint8)
            t.fill_(0)
            return t, t.numpy()  # the tensor, and a view for the checks

        self.kv, self.layers, self.np = kv, layers, np
        self.bufs = [alloc() for _ in range(maxblk)]
        self.pvals = [alloc() for _ in range(maxblk)]
        self.block_bytes = BLOCK

    def expected(self, chunk_key, layer):
        """The first 32 bytes of the chunk's layer block as stored."""
        return block_key(chunk_key, layer)

    def exists(self, chunks):
        return self.kv.exists(chunks)

    def prepare_get(self, chunks):
        """Untimed: the arguments of get()."""
        bk = [block_key(c, ly) for c in chunks for ly in range(self.layers)]
        self._get = (bk, [b[0] for b in self.bufs[:len(bk)]])

    def get(self, chunks):
        """Per block (chunk by chunk, layer by layer): hit or not."""
        return self.kv.get_into(*self._get)

    def head(self, b):
        """The first 32 bytes of block b of the last get."""
        return self.bufs[b][1][:32].tobytes()

    def release(self):
        """After the checks of a get."""

    def prepare_put(self, chunks):
        keys = []
        for c in chunks:
            for ly in range(self.layers):
                k = block_key(c, ly)
                self.pvals[len(keys)][1][:32] = self.np.frombuffer(
                    k, self.np.uint8)
                keys.append(k)
        self._put = (keys, [p[0] for p in self.pvals[:len(keys)]])

    def submit_put(self, chunks):
        """Starts the put of prepare_put's blocks; returns a handle."""
        return self.kv.put_async(*self._put)

    def wait_put(self, handle):
        handle.result()

    def tier_keys(self, chunk_key):
        """The tidepool keys this path stores for a chunk."""
        return [block_key(chunk_key, ly) for ly in range(self.layers)]

    def close(self):
        pass


def shared_run(io, keys_per_prompt, a):
    """kvbench --workload shared through io (DirectIO or a connector's
    call sequence). Returns the fields of a KVBENCH line that compare."""
    hbm = HBM(a.hbm * (PREFIX_TOK // CHUNK_TOK))
    put_fut = None
    put_t0 = 0
    n = dict(total=0, local=0, tier=0, got=0, bad=0, put_bytes=0, exists=0,
             get=0, submit=0, put=0)
    now = time.perf_counter_ns
    layers = a.layers
    for ck in keys_per_prompt:
        nk = len(ck)
        if put_fut is not None:  # the previous put, "during decode"
            io.wait_put(put_fut)
            n["put"] += now() - put_t0
            put_fut = None
        loc = 0
        while loc < nk and hbm.has(ck[loc]):
            loc += 1
        pre = rem = 0
        t0 = now()
        if loc < nk:
            pre = io.exists(ck[loc:])
        n["exists"] += now() - t0
        if pre > 0:
            want = ck[loc:loc + pre]
            io.prepare_get(want)
            t0 = now()
            hit = io.get(want)
            n["get"] += now() - t0
            while rem < pre:
                ok = True
                for ly in range(layers):
                    b = rem * layers + ly
                    ok = ok and hit[b]
                    if hit[b]:
                        n["got"] += io.block_bytes
                        if io.head(b) != io.expected(want[rem], ly):
                            n["bad"] += 1
                if not ok:
                    break
                rem += 1
            io.release()
        n["total"] += nk
        n["local"] += loc
        n["tier"] += rem
        todo = ck[loc + rem:]
        if todo:
            io.prepare_put(todo)
            n["put_bytes"] += len(todo) * layers * io.block_bytes
            t0 = put_t0 = now()
            put_fut = io.submit_put(todo)
            n["submit"] += now() - t0
        for k in ck:
            hbm.touch(k)
    if put_fut is not None:
        io.wait_put(put_fut)
        n["put"] += now() - put_t0
    np_ = len(keys_per_prompt)
    return {
        "chunks": n["total"],
        "local_hit": n["local"] / n["total"],
        "tier_hit": n["tier"] / n["total"],
        "hit": (n["local"] + n["tier"]) / n["total"],
        "get_bytes": n["got"], "put_bytes": n["put_bytes"],
        "get_MBps": n["got"] / (n["get"] / 1e9) / 1e6 if n["get"] else 0,
        "put_MBps": (n["put_bytes"] / (n["put"] / 1e9) / 1e6
                     if n["put"] else 0),
        "exists_ms": n["exists"] / 1e6 / np_,
        "get_ms": n["get"] / 1e6 / np_,
        "submit_ms": n["submit"] / 1e6 / np_,
        "bad": n["bad"],
    }


def max_blocks(keys_per_prompt, layers):
    return max(len(k) for k in keys_per_prompt) * layers


def shared_py(kv, keys_per_prompt, a, buf):
    """kvbench --workload shared through tidepool.KV; buf: numpy|torch.
    Returns the fields of a KVBENCH line that compare."""
    io = DirectIO(kv, buf, max_blocks(keys_per_prompt, a.layers), a.layers)
    return shared_run(io, keys_per_prompt, a)


def clear_tier(kv, keys_per_prompt, layers):
    """Deletes every block the workload can have stored; checks they are
    gone."""
    every = sorted({block_key(k, ly) for ck in keys_per_prompt for k in ck
                    for ly in range(layers)})
    for i in range(0, len(every), 1024):
        kv.delete(every[i:i + 1024])
    left = sum(kv.exists([k]) for k in every[::97])
    if left:
        raise RuntimeError(f"pybench: {left} keys still present after "
                           "clearing the tier")


def wait_reclaimed(pool, timeout_s=300):
    """Waits until memd has zeroed every slab the tier gave back (none
    "reclaiming" in its STATUS): a run that starts earlier finds fewer
    free slabs, evicts, and its hits are not the others' (under load
    zeroing a few GiB takes seconds). Returns the seconds waited."""
    t0 = time.monotonic()
    time.sleep(0.5)  # the quiesce delay before memd reclaims a slab
    while time.monotonic() - t0 < timeout_s:
        if all(not m["err"] and m["slabs_reclaiming"] == 0
               for m in pool.memds()):
            break
        time.sleep(0.2)
    return time.monotonic() - t0


# ---- per-call costs ----------------------------------------------------

class CPool:
    """libpool's KV calls through ctypes: the baseline for the calls."""

    class Opts(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_char_p),
                    ("client_name", ctypes.c_char_p),
                    ("timeout_ms", ctypes.c_int),
                    ("max_inflight", ctypes.c_uint),
                    ("tenant", ctypes.c_char_p),
                    ("secret_file", ctypes.c_char_p)]

    def __init__(self, build, addr):
        lib = ctypes.CDLL(os.path.join(build, "libpool", "libpool.so"))
        vp, sz, ssz = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ssize_t
        lib.pool_connect.argtypes = [ctypes.POINTER(self.Opts),
                                     ctypes.POINTER(vp)]
        lib.pool_kv_open.argtypes = [vp, vp, ctypes.POINTER(vp)]
        lib.pool_kv_exists.argtypes = [vp, sz, vp]
        lib.pool_kv_exists.restype = ssz
        lib.pool_kv_put.argtypes = [vp, sz, vp, vp, vp, vp]
        lib.pool_kv_put.restype = ssz
        lib.pool_kv_get.argtypes = [vp, sz, vp, vp, vp, vp, vp]
        lib.pool_kv_get.restype = ssz
        lib.pool_kv_delete.argtypes = [vp, sz, vp, vp]
        lib.pool_kv_delete.restype = ssz
        lib.pool_kv_close.argtypes = [vp]
        lib.pool_close.argtypes = [vp]
        self.lib = lib
        self.p, self.kv = vp(), vp()
        o = self.Opts(addr=addr.encode(), client_name=b"pybench-ctypes")
        r = lib.pool_connect(ctypes.byref(o), ctypes.byref(self.p))
        if r == 0:
            r = lib.pool_kv_open(self.p, None, ctypes.byref(self.kv))
        if r:
            raise OSError(-r, "pybench: libpool via ctypes: "
                          + os.strerror(-r))

    def close(self):
        self.lib.pool_kv_close(self.kv)
        self.lib.pool_close(self.p)


def _stats(ns, batch):
    ns = sorted(ns)
    med = statistics.median(ns) / 1e3
    return {"iters": len(ns), "us_call": med, "us_key": med / batch,
            "p90_us": ns[int(0.9 * (len(ns) - 1))] / 1e3}


class PipedCalls:
    """The gets of base's keys (a PyCalls get into torch tensors that
    bounce) into tensors of its own like base's, with the pipelined
    get's settings (chunk, depth) for each call (--pipelines)."""

    def __init__(self, base, chunk, depth):
        self.base, self.chunk, self.depth = base, chunk, depth
        self.dst = [t.clone() for t in base.dst]  # resizable, as base's

    def step(self):
        from tidepool import _c
        saved = _c._get_pipeline()
        _c._get_pipeline(self.chunk, self.depth)
        try:
            t0 = time.perf_counter_ns()
            r = self.base.kv.get_into(self.base.keys, self.dst)
            dt = time.perf_counter_ns() - t0
        finally:
            _c._get_pipeline(*saved)
        if not all(r):
            raise RuntimeError("pybench: py get of "
                               f"{self.base.batch} keys failed")
        return dt

    def close(self):
        pass  # base's keys: base closes them


def pipeline_settings(spec):
    """--pipelines' "CHUNK,DEPTH ..." (CHUNK as size_bytes reads it) as
    [(label, chunk_bytes, depth)]; ValueError when malformed."""
    out = []
    for w in spec.split():
        chunk, depth = w.split(",")
        out.append((f"torch_p{chunk}x{int(depth)}", size_bytes(chunk),
                    int(depth)))
    return out


class PyCalls:
    """One (op, batch) through tidepool.KV with values in numpy arrays or
    torch tensors; step() makes one call and returns its ns."""

    def __init__(self, kv, op, batch, buf, size=CALL_VALUE):
        import numpy as np
        import torch
        self.kv, self.op, self.batch = kv, op, batch
        self.whole = buf == "torch_whole"
        self.pipe = buf == "torch_pipe"

        def vals():
            if buf == "numpy":
                return [np.full(size, i & 0xFF, np.uint8)
                        for i in range(batch)]
            if buf == "torch_fixed":  # storages torch cannot resize
                return [torch.full((size,), i & 0xFF,
                                   dtype=torch.uint8).share_memory_()
                        for i in range(batch)]
            # torch_whole: resizable, as torch, with the pipelined get
            # and the sink turned off for its calls (the one-block
            # bounce); torch_pipe: the sink off (the pipelined get)
            return [torch.full((size,), i & 0xFF, dtype=torch.uint8)
                    for i in range(batch)]

        self.vals = vals()
        self.keys = [os.urandom(32) for _ in range(batch)]
        if op != "put":
            st = kv.put(self.keys, self.vals)
            if any(st):
                raise RuntimeError(f"pybench: put of the call keys: {st}")
            self.dst = vals()

    def step(self):
        now = time.perf_counter_ns
        kv, n = self.kv, self.batch
        if self.op == "put":
            keys = [os.urandom(32) for _ in range(n)]
            t0 = now()
            st = kv.put(keys, self.vals)
            dt = now() - t0
            kv.delete(keys)
            ok = not any(st)
        elif self.op == "exists":
            t0 = now()
            ok = kv.exists(self.keys) == n
            dt = now() - t0
        elif self.whole or self.pipe:
            from tidepool import _c
            saved = _c._get_pipeline()
            sink = _c._get_sink() if hasattr(_c, "_get_sink") else None
            if self.whole:
                _c._get_pipeline(0)
            if sink is not None:
                _c._get_sink(False)
            t0 = now()
            r = kv.get_into(self.keys, self.dst)
            dt = now() - t0
            _c._get_pipeline(*saved)
            if sink is not None:
                _c._get_sink(sink)
            ok = all(r)
        else:
            t0 = now()
            r = kv.get_into(self.keys, self.dst)
            dt = now() - t0
            ok = all(r)
        if not ok:
            raise RuntimeError(f"pybench: py {self.op} of {n} keys failed")
        return dt

    def close(self):
        if self.op != "put":
            self.kv.delete(self.keys)


class CCalls:
    """The same calls on libpool through ctypes, every argument array
    built beforehand: the baseline."""

    def __init__(self, cp, op, batch, size=CALL_VALUE):
        self.cp, self.op, self.batch = cp, op, batch
        lib, kv = cp.lib, cp.kv
        self.vals = [ctypes.create_string_buffer(bytes([i & 0xFF]) * size,
                                                 size)
                     for i in range(batch)]
        self.ptrs = (ctypes.c_void_p * batch)(
            *[ctypes.addressof(v) for v in self.vals])
        self.lens = (ctypes.c_size_t * batch)(*([size] * batch))
        self.st = (ctypes.c_int * batch)()
        self.dst_st = (ctypes.c_int * batch)()
        self.keys = ctypes.create_string_buffer(os.urandom(32 * batch),
                                                32 * batch)
        if op != "put":
            r = lib.pool_kv_put(kv, batch, self.keys, self.ptrs, self.lens,
                                self.st)
            if r != batch:
                raise RuntimeError(f"pybench: ctypes put of the call keys: "
                                   f"{r}, status {sorted(set(self.st))}")
            self.dsts = [ctypes.create_string_buffer(size)
                         for _ in range(batch)]
            self.dptr = (ctypes.c_void_p * batch)(
                *[ctypes.addressof(d) for d in self.dsts])
            self.caps = (ctypes.c_size_t * batch)(*([size] * batch))
            self.glens = (ctypes.c_size_t * batch)()

    def step(self):
        now = time.perf_counter_ns
        lib, kv, n = self.cp.lib, self.cp.kv, self.batch
        if self.op == "put":
            keys = ctypes.create_string_buffer(os.urandom(32 * n), 32 * n)
            t0 = now()
            r = lib.pool_kv_put(kv, n, keys, self.ptrs, self.lens, self.st)
            dt = now() - t0
            lib.pool_kv_delete(kv, n, keys, self.dst_st)
        elif self.op == "exists":
            t0 = now()
            r = lib.pool_kv_exists(kv, n, self.keys)
            dt = now() - t0
        else:
            t0 = now()
            r = lib.pool_kv_get(kv, n, self.keys, self.dptr, self.caps,
                                self.glens, self.st)
            dt = now() - t0
        if r != n:
            raise RuntimeError(f"pybench: ctypes {self.op} of {n} keys: "
                               f"{r}, status {sorted(set(self.st))}")
        return dt

    def close(self):
        if self.op != "put":
            self.cp.lib.pool_kv_delete(self.cp.kv, self.batch, self.keys,
                                       self.dst_st)


def interleave(runs, warm, iters, seed=0):
    """Steps every run once per round, in an order shuffled each round
    (from seed), so that no run always follows the same one (a run that
    follows one writing the same tensors finds them warm); returns the
    measured ns of each run (the first warm rounds not kept)."""
    rng = random.Random(seed)
    order = list(range(len(runs)))
    ns = [[] for _ in runs]
    for it in range(warm + iters):
        rng.shuffle(order)
        for i in order:
            dt = runs[i][2].step()
            if it >= warm:
                ns[i].append(dt)
    return ns


def hold_slabs(kv, slab_bytes):
    """Keys of the calls' block class that stay for the whole part, one
    in four of four slabs' worth: the slabs they sit in are never empty,
    so a put/delete cycle reuses their free blocks instead of taking a
    fresh slab each time (a store gives an emptied slab back at once, and
    memd reclaims it only after its quiesce delay). Returns them."""
    import numpy as np
    per = slab_bytes // (64 * 1024 + 64)  # blocks of the smallest class
    keys = [os.urandom(32) for _ in range(4 * per)]
    v = np.zeros(CALL_VALUE, np.uint8)
    for i in range(0, len(keys), 1024):
        part = keys[i:i + 1024]
        st = kv.put(part, [v] * len(part))
        if any(st):
            raise RuntimeError(f"pybench: anchor keys: {sorted(set(st))}")
    drop = [k for i, k in enumerate(keys) if i % 4]
    for i in range(0, len(drop), 1024):
        kv.delete(drop[i:i + 1024])
    return keys[::4]


# ---- the run -------------------------------------------------------------

def size_bytes(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


class Run:
    def __init__(self, a):
        self.a = a
        self.build = a.build
        self.memd_bin = os.path.join(a.build, "memd", "memd")
        self.kvbench = os.path.join(a.build, "bench", "kvbench")
        for b in (self.memd_bin, self.kvbench):
            if not os.access(b, os.X_OK):
                sys.exit(f"pybench: {b} not found: build first, e.g.\n  "
                         f"cmake -S {ROOT} -B {a.build} -DCMAKE_BUILD_TYPE="
                         f"Release && cmake --build {a.build} -j2 --target "
                         "memd kvbench _tidepool")
        sys.path.insert(0, os.path.join(ROOT, "python"))
        sys.path.insert(0, os.path.join(a.build, "python"))
        os.makedirs(a.out_dir, exist_ok=True)
        self.raw = open(os.path.join(a.out_dir, "raw.txt"), "w")
        self.tmp = tempfile.mkdtemp(prefix="pybench.")
        self.memd = None

    def line(self, s):
        print(s, flush=True)
        self.raw.write(s + "\n")
        self.raw.flush()

    def log(self, s):
        print(time.strftime("%T"), s, file=sys.stderr, flush=True)

    def fields_line(self, head, f, rep):
        """A result line: head, then f's key=value words (floats to four
        places), then rep=REP."""
        f = {k: (f"{v:.4f}" if isinstance(v, float) else v)
             for k, v in f.items()}
        self.line(head + " " + " ".join(f"{k}={v}" for k, v in f.items())
                  + f" rep={rep}")

    @contextlib.contextmanager
    def recording(self, summarize):
        """Around the runs: after them, the load average line; whatever
        happens, memd stopped and raw.txt closed; then, when they went
        through, summarize(raw.txt) to summary.txt and stdout."""
        try:
            yield
            self.line("# loadavg_end=" + ",".join(
                open("/proc/loadavg").read().split()[:3]))
        finally:
            self.stop_memd()
            self.raw.close()
        text = summarize([os.path.join(self.a.out_dir, "raw.txt")])
        with open(os.path.join(self.a.out_dir, "summary.txt"), "w") as f:
            f.write(text)
        print(text, end="")
        print(f"(raw lines and summary in {self.a.out_dir})", file=sys.stderr)

    def start_memd(self):
        ready = os.path.join(self.tmp, "memd.ready")
        log = open(os.path.join(self.a.out_dir, "memd.log"), "ab")
        self.memd = subprocess.Popen(
            [self.memd_bin, "--listen", "127.0.0.1:0", "--donate",
             self.a.cap, "--slab-size", self.a.slab, "--log-level",
             "warning", "--ready-file", ready, "--set", "kv_share=100"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        for _ in range(600):
            if os.path.exists(ready) and os.path.getsize(ready) > 0:
                with open(ready) as f:
                    self.addr = f.readline().strip()
                return
            if self.memd.poll() is not None:
                sys.exit(f"pybench: memd exited (log: {self.a.out_dir}/"
                         "memd.log)")
            time.sleep(0.1)
        sys.exit("pybench: memd not ready after 60 s")

    def stop_memd(self):
        if self.memd and self.memd.poll() is None:
            self.memd.terminate()
            try:
                self.memd.wait(30)
            except subprocess.TimeoutExpired:
                self.memd.kill()
                self.memd.wait()

    def header(self):
        import numpy
        import torch
        import tidepool
        git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short",
                              "HEAD"], capture_output=True, text=True)
        a = self.a
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.line(f"# pybench {when} git={git.stdout.strip() or 'unknown'} "
                  f"build={a.build}")
        self.line(f"# host cpus={os.cpu_count()} "
                  f"kernel={platform.release()} "
                  f"python={platform.python_version()} "
                  f"numpy={numpy.__version__} torch={torch.__version__} "
                  f"tidepool={tidepool.__version__}")
        self.line("# loadavg_start=" + ",".join(
            open("/proc/loadavg").read().split()[:3]))
        self.line(f"# reps={a.reps} cap={a.cap} slab={a.slab} "
                  f"prompts={a.prompts} layers={a.layers} hbm={a.hbm} "
                  f"tps={a.tps} calls_scale={a.calls_scale} "
                  f"parts={','.join(a.parts)} memd={self.addr}"
                  + (" pipelines=" + ",".join(p[0] for p in a.pipelines)
                     if a.pipelines else ""))
        from tidepool import _c
        if hasattr(_c, "_get_pipeline"):
            chunk, depth = _c._get_pipeline()
            self.line(f"# pipeline={chunk},{depth}"
                      + (" (--pipeline)" if a.pipeline else ""))

    def shared(self, rep, pool, kv):
        a = self.a
        keys = prompt_keys(rep, a.prompts)
        order = ["c", "numpy", "torch"]
        order = order[(rep - 1) % 3:] + order[:(rep - 1) % 3]
        for impl in order:
            self.log(f"rep {rep}/{a.reps} shared: {impl}")
            if impl == "c":
                r = subprocess.run(
                    [self.kvbench, "--tier", "tidepool", "--addr", self.addr,
                     "--workload", "shared", "--layers", str(a.layers),
                     "--prompts", str(a.prompts), "--hbm-prefixes",
                     str(a.hbm), "--tps", str(a.tps), "--seed", str(rep)],
                    capture_output=True, text=True)
                lines = [x for x in r.stdout.splitlines()
                         if x.startswith("KVBENCH ")]
                if r.returncode or not lines:
                    sys.exit(f"pybench: kvbench failed ({r.returncode}): "
                             f"{r.stderr.strip()}")
                f = dict(w.split("=", 1) for w in lines[0].split()[1:])
                f = {k: f[k] for k in (
                    "get_MBps", "put_MBps", "exists_ms", "get_ms",
                    "submit_ms", "hit", "tier_hit", "local_hit", "chunks",
                    "get_bytes", "put_bytes", "bad")}
            else:
                # a session of its own, as the C program's: the fabric
                # connection is set up inside the run in both
                import tidepool
                with tidepool.Pool(self.addr, client_name="pybench-" +
                                   impl) as run_pool, run_pool.kv() as run_kv:
                    f = shared_py(run_kv, keys, a, impl)
            self.fields_line(f"pybench part=shared impl={impl} "
                             f"layers={a.layers} prompts={a.prompts}", f, rep)
            clear_tier(kv, keys, a.layers)
            wait_reclaimed(pool)  # the next run starts with every slab

    def calls(self, rep, kv, cp):
        """Every (op, batch): the ctypes baseline and the Python calls in
        turn, call by call, so that drift of the machine hits them
        alike."""
        a = self.a
        for batch in CALL_BATCHES:
            iters = max(3, int(CALL_ITERS[batch] * a.calls_scale))
            warm = max(1, iters // 10)
            for op in ("exists", "get", "put"):
                runs = [("ctypes", "c", CCalls(cp, op, batch))]
                for buf in (("numpy",) if op == "exists"
                            else ("numpy", "torch")):
                    runs.append(("py", buf, PyCalls(kv, op, batch, buf)))
                ns = interleave(runs, warm, iters, seed=rep)
                for (impl, buf, c), t in zip(runs, ns):
                    c.close()
                    s = _stats(t, batch)
                    self.line(f"pybench part=calls impl={impl} op={op} "
                              f"buf={buf} batch={batch} iters={s['iters']} "
                              f"us_call={s['us_call']:.2f} "
                              f"us_key={s['us_key']:.3f} "
                              f"p90_us={s['p90_us']:.2f} rep={rep}")

    def bulk(self, rep, kv, cp):
        """Gets of a prefix's 109 blocks of 1 MiB in one call, C (ctypes)
        and Python in turn call by call: the workload's get without its
        noise."""
        iters = max(3, int(BULK_ITERS * self.a.calls_scale))
        torch_calls = PyCalls(kv, "get", BULK_BATCH, "torch", BLOCK)
        runs = [("ctypes", "c", CCalls(cp, "get", BULK_BATCH, BLOCK)),
                ("py", "numpy", PyCalls(kv, "get", BULK_BATCH, "numpy",
                                        BLOCK)),
                ("py", "torch", torch_calls),
                ("py", "torch_fixed", PyCalls(kv, "get", BULK_BATCH,
                                              "torch_fixed", BLOCK))]
        from tidepool import _c
        if hasattr(_c, "_get_pipeline"):  # an extension that pipelines
            runs.append(("py", "torch_whole", PyCalls(
                kv, "get", BULK_BATCH, "torch_whole", BLOCK)))
            if hasattr(_c, "_get_sink"):  # gets straight into tensors
                runs.append(("py", "torch_pipe", PyCalls(
                    kv, "get", BULK_BATCH, "torch_pipe", BLOCK)))
            for label, chunk, depth in self.a.pipelines:
                runs.append(("py", label, PipedCalls(torch_calls, chunk,
                                                     depth)))
        elif self.a.pipelines:
            sys.exit("pybench: --pipelines: this extension does not "
                     "pipeline gets")
        ns = interleave(runs, max(1, iters // 10), iters, seed=rep)
        for (impl, buf, c), t in zip(runs, ns):
            c.close()
            s = _stats(t, BULK_BATCH)
            mbps = BULK_BATCH * BLOCK / (s["us_call"] / 1e6) / 1e6
            self.line(f"pybench part=bulk impl={impl} op=get buf={buf} "
                      f"batch={BULK_BATCH} size={BLOCK} iters={s['iters']} "
                      f"us_call={s['us_call']:.1f} MBps={mbps:.1f} "
                      f"p90_us={s['p90_us']:.1f} rep={rep}")

    def run(self):
        import tidepool
        from tidepool import _c
        if self.a.pipeline and not hasattr(_c, "_get_pipeline"):
            sys.exit("pybench: --pipeline: this extension does not "
                     "pipeline gets")
        if self.a.pipeline:
            _c._get_pipeline(*self.a.pipeline)
        self.start_memd()
        with self.recording(summarize):
            self.header()
            with tidepool.Pool(self.addr, client_name="pybench") as pool, \
                    pool.kv() as kv:
                cp = None
                if "calls" in self.a.parts or "bulk" in self.a.parts:
                    cp = CPool(self.build, self.addr)
                for rep in range(1, self.a.reps + 1):
                    if "shared" in self.a.parts:
                        self.shared(rep, pool, kv)
                    if "calls" in self.a.parts or "bulk" in self.a.parts:
                        self.log(f"rep {rep}/{self.a.reps} bulk")
                        self.bulk(rep, kv, cp)
                    if "calls" in self.a.parts:
                        self.log(f"rep {rep}/{self.a.reps} calls")
                        anchors = hold_slabs(kv, size_bytes(self.a.slab))
                        self.calls(rep, kv, cp)
                        for i in range(0, len(anchors), 1024):
                            kv.delete(anchors[i:i + 1024])
                        time.sleep(0.5)  # the slabs back (quiesce)
                if cp:
                    cp.close()


# ---- summary ---------------------------------------------------------------

def summarize(paths):
    def key(bench, kv):
        if bench != "pybench":
            return None
        if kv.get("part") == "shared":
            return ("shared", kv["impl"])
        if kv.get("part") == "bulk":
            return ("bulk", kv["buf"])
        return ("calls", kv["impl"], kv["op"], kv["buf"], int(kv["batch"]))

    rows, comments = benchutil.load(paths, key)
    med = benchutil.median
    # a run without a tier hit has no get rate (a short --prompts run)
    for k in [k for k in rows if k and k[0] == "shared"]:
        for r in rows[k]:
            if float(r.get("get_bytes", 0)) == 0:
                r.pop("get_MBps", None)
                r.pop("get_ms", None)
    out = [c for c in comments]
    res = {}
    if any(k and k[0] == "shared" for k in rows):
        out.append("")
        out.append("shared-prefix workload (kvbench's), medians over "
                   "repetitions:")
        out.append(f"{'impl':<8} {'runs':>4} {'get MB/s':>9} {'range':>13} "
                   f"{'put MB/s':>9} {'exists ms':>9} {'get ms':>8} "
                   f"{'submit ms':>9} {'hit':>6} {'tier':>6} {'bad':>4}")
        for impl in ("c", "numpy", "torch"):
            k = ("shared", impl)
            if k not in rows:
                continue
            g = benchutil.values(rows, k, "get_MBps") or [float("nan")]
            out.append(
                f"{impl:<8} {len(rows[k]):>4} "
                f"{benchutil.fmt(med(rows, k, 'get_MBps')):>9} "
                f"{min(g):>6.0f}..{max(g):<6.0f} "
                f"{benchutil.fmt(med(rows, k, 'put_MBps')):>9} "
                f"{med(rows, k, 'exists_ms'):>9.3f} "
                f"{benchutil.fmt(med(rows, k, 'get_ms'), 1):>8} "
                f"{med(rows, k, 'submit_ms'):>9.3f} "
                f"{med(rows, k, 'hit'):>6.3f} "
                f"{med(rows, k, 'tier_hit'):>6.3f} "
                f"{int(max(benchutil.values(rows, k, 'bad'))):>4}")
            res[f"{'c' if impl == 'c' else 'py_' + impl}_get_MBps"] = \
                med(rows, k, "get_MBps")
        c = med(rows, ("shared", "c"), "get_MBps")
        for buf in ("numpy", "torch"):
            p = med(rows, ("shared", buf), "get_MBps")
            if c and p:
                # the ratio within each repetition (its runs share the
                # machine's state), then the median of those
                per = [float(rp["get_MBps"]) / float(rc["get_MBps"])
                       for rc, rp in zip(rows[("shared", "c")],
                                         rows[("shared", buf)])
                       if "get_MBps" in rc and "get_MBps" in rp]
                r = statistics.median(per)
                res[f"get_ratio_{buf}"] = r
                out.append(
                    f"ratio name=get_MBps_{buf}_vs_c value={r:.3f} "
                    f"target={TARGET} pass={'yes' if r >= TARGET else 'no'} "
                    f"of_medians={p / c:.3f} num={p:.1f} den={c:.1f} "
                    "per_rep=" + ",".join(f"{x:.3f}" for x in per))
        for buf in ("numpy", "torch"):
            for f in ("hit", "tier_hit", "get_bytes"):
                a = benchutil.values(rows, ("shared", "c"), f)
                b = benchutil.values(rows, ("shared", buf), f)
                if a and b and a != b:
                    out.append(f"# WARNING {buf} {f} differs from C's: "
                               f"{b} vs {a} (not the same workload?)")
    if ("bulk", "c") in rows:
        out.append("")
        out.append(f"get of {BULK_BATCH} blocks of 1 MiB in one call, C "
                   "(ctypes) and Python in turn; medians over repetitions:")
        out.append(f"{'buf':<13} {'runs':>4} {'MB/s':>7} {'range':>13} "
                   f"{'ms/call':>8}")
        ratios = []
        fixed = ("c", "numpy", "torch", "torch_fixed", "torch_whole",
                 "torch_pipe")
        piped = [k[1] for k in rows if k and k[0] == "bulk"
                 and k[1] not in fixed]  # --pipelines, in run order
        for buf in fixed + tuple(piped):
            k = ("bulk", buf)
            if k not in rows:
                continue
            g = benchutil.values(rows, k, "MBps")
            out.append(f"{buf:<13} {len(rows[k]):>4} "
                       f"{med(rows, k, 'MBps'):>7.0f} "
                       f"{min(g):>6.0f}..{max(g):<6.0f} "
                       f"{med(rows, k, 'us_call') / 1e3:>8.1f}")
            if buf != "c":
                per = [float(rp["MBps"]) / float(rc["MBps"])
                       for rc, rp in zip(rows[("bulk", "c")], rows[k])]
                r = statistics.median(per)
                res[f"bulk_ratio_{buf}"] = r
                # torch_whole is the reference the pipeline is judged
                # against, --pipelines' settings candidates: not targets
                tgt = ("reference" if buf in ("torch_whole", "torch_pipe")
                       or buf in piped
                       else
                       f"{TARGET} pass={'yes' if r >= TARGET else 'no'}")
                ratios.append(
                    f"ratio name=bulk_get_MBps_{buf}_vs_c value={r:.3f} "
                    f"target={tgt} "
                    "per_rep=" + ",".join(f"{x:.3f}" for x in per))
        out.extend(ratios)
        res["bulk_c_MBps"] = med(rows, ("bulk", "c"), "MBps")
    if any(k and k[0] == "calls" for k in rows):
        out.append("")
        out.append("per call (µs, median over calls, then over "
                   "repetitions); baseline: libpool through ctypes")
        out.append(f"{'op':<7} {'batch':>5} {'buf':<6} {'py us/call':>10} "
                   f"{'us/key':>8} {'C us/call':>10} {'py-C us':>8} "
                   f"{'py/C':>6}")
        for batch in CALL_BATCHES:
            for op in ("exists", "get", "put"):
                base = med(rows, ("calls", "ctypes", op, "c", batch),
                           "us_call")
                for buf in ("numpy", "torch"):
                    k = ("calls", "py", op, buf, batch)
                    if k not in rows:
                        continue
                    p = med(rows, k, "us_call")
                    over = p - base if base is not None else None
                    out.append(
                        f"{op:<7} {batch:>5} {buf:<6} {p:>10.1f} "
                        f"{p / batch:>8.2f} "
                        f"{benchutil.fmt(base, 1):>10} "
                        f"{benchutil.fmt(over, 1):>8} "
                        f"{(p / base if base else float('nan')):>6.2f}")
                    out.append(
                        f"median part=calls op={op} buf={buf} batch={batch} "
                        f"us_call={p:.2f} us_key={p / batch:.3f} "
                        f"base_us_call={benchutil.fmt(base, 2)} "
                        f"over_us={benchutil.fmt(over, 2)}")
                    res[f"{op}_{buf}_{batch}_us"] = p
                    if over is not None:
                        res[f"{op}_{buf}_{batch}_over_us"] = over
    ok = [v >= TARGET for k, v in res.items()
          if "ratio" in k and "whole" not in k and "torch_p" not in k]
    words = [f"{k}={v:.3f}" if "ratio" in k else f"{k}={v:.1f}"
             for k, v in res.items()]
    out.append("")
    out.append("pybench result " + " ".join(
        [w for w in words if "ratio" in w]
        + [f"target={TARGET}",
           f"pass={'yes' if ok and all(ok) else ('no' if ok else 'n/a')}"]
        + [w for w in words if "ratio" not in w]))
    return "\n".join(out) + "\n"


def bench_args(description, cap):
    """The argument parser the Python benches share (pybench, connbench),
    with their first arguments: the build tree, --summarize, --reps,
    --cap (default cap), --slab and --prompts; defaults from the
    environment."""
    env = os.environ.get
    ap = argparse.ArgumentParser(
        description=description,
        epilog="See the top of this file and docs/bench/python.md.")
    ap.add_argument("build", nargs="?", help="build tree (default "
                    "$BUILD, build/release, build-bench)")
    ap.add_argument("--summarize", nargs="+", metavar="RAW",
                    help="medians and ratios of raw.txt files, then exit")
    ap.add_argument("--reps", type=int, default=int(env("REPS", 5)))
    ap.add_argument("--cap", default=env("CAP", cap))
    ap.add_argument("--slab", default=env("SLAB", "64M"))
    ap.add_argument("--prompts", type=int, default=int(env("PROMPTS", 60)))
    return ap


def bench_parse(ap, summarize):
    """Adds --out-dir (the last argument) to ap and parses; with
    --summarize, prints summarize()'s tables and exits."""
    ap.add_argument("--out-dir", default=os.environ.get("OUT_DIR"))
    a = ap.parse_args()
    if a.summarize:
        print(summarize(a.summarize), end="")
        sys.exit(0)
    return a


def bench_dirs(a, probe, results):
    """a.build: the build tree named, else $BUILD, else the first of
    build/release and build-bench that holds probe (a path in it), else
    build/release; absolute. a.out_dir: as given, else
    BUILD/results/YYYYmmdd-HHMMSS."""
    if not a.build:
        a.build = os.environ.get("BUILD")
    if not a.build:
        for d in ("build/release", "build-bench"):
            if os.path.exists(os.path.join(ROOT, d, probe)):
                a.build = os.path.join(ROOT, d)
                break
        else:
            a.build = os.path.join(ROOT, "build", "release")
    a.build = os.path.abspath(a.build)
    if not a.out_dir:
        a.out_dir = os.path.join(a.build, results,
                                 time.strftime("%Y%m%d-%H%M%S"))


def main():
    env = os.environ.get
    ap = bench_args("The KV tier through Python against C, one memd.",
                    "2560M")
    ap.add_argument("--layers", type=int, default=int(env("LAYERS", 1)))
    ap.add_argument("--hbm", type=int, default=int(env("HBM", 5)))
    ap.add_argument("--tps", default=env("TPS", "10000"))
    ap.add_argument("--calls-scale", type=float,
                    default=float(env("CALLS_SCALE", 1.0)))
    ap.add_argument("--parts", default=env("PARTS", "shared calls"),
                    help='"shared calls" (default), or one of them, or '
                    '"bulk" (the bulk get of calls alone)')
    ap.add_argument("--pipeline", default=env("PIPELINE", ""),
                    metavar="CHUNK,DEPTH",
                    help="the pipelined get's settings for the whole run, "
                    "e.g. 4M,2 (default: the extension's)")
    ap.add_argument("--pipelines", default=env("PIPELINES", ""),
                    metavar='"CHUNK,DEPTH ..."',
                    help="pipelined-get settings to interleave in the bulk "
                    'get, e.g. "1M,3 4M,2" (_tidepool._get_pipeline)')
    a = bench_parse(ap, summarize)
    a.parts = a.parts.replace(",", " ").split()
    if not set(a.parts) <= {"shared", "calls", "bulk"} or a.reps < 1 or \
            not 1 <= a.layers <= 8:
        ap.error("bad --parts, --reps or --layers")
    try:
        a.pipelines = pipeline_settings(a.pipelines)
    except (ValueError, KeyError, IndexError):
        ap.error(f"bad --pipelines {a.pipelines!r}: want CHUNK,DEPTH ... "
                 "(e.g. 1M,3)")
    if any(d < 1 or d > 8 or c < 0 for _, c, d in a.pipelines):
        ap.error("bad --pipelines: depth 1..8, chunk >= 0")
    try:
        one = pipeline_settings(a.pipeline)
    except (ValueError, KeyError, IndexError):
        one = None
    if one is None or len(one) > 1 or \
            any(d < 1 or d > 8 or c < 0 for _, c, d in one):
        ap.error(f"bad --pipeline {a.pipeline!r}: want CHUNK,DEPTH (e.g. "
                 "4M,2; depth 1..8)")
    a.pipeline = one[0][1:] if one else None
    bench_dirs(a, os.path.join("bench", "kvbench"), "pybench-results")
    size_bytes(a.cap)
    Run(a).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
