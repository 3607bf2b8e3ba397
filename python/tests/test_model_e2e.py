"""A transformer's prefix cache in the KV tier, end to end
(python/examples/prefix_cache.py) against a standalone memd and a tenant
of the 2-donor cluster: prefill with K/V loaded from the tier must be
bit-equal to recomputing, the cached chunks must come from the tier, and
a chunk that is gone (deleted, evicted, or failing its checks: a miss)
must shorten the cached prefix and be recomputed, never change the
result. No timing is asserted.

A small model (2 layers, d_model 64) keeps the run short on a machine
whose torch uses the reference BLAS; the example's defaults are the
4-layer, d_model 256 model, run by test_example_cli with --layers etc.
set small for the same reason.
"""
import os
import subprocess
import sys

import pytest
import torch

import tidepool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                "examples"))
import prefix_cache as pc  # noqa: E402

CFG = pc.Config(layers=2, d_model=64, heads=2, vocab=1000, seed=3)
L = CFG.layers

# make_prompts()' whole chunks and what the tier holds of each when its
# turn comes (768-token system prompt + 512-token documents)
EXPECT_CHUNKS = [5, 6, 5, 6, 5, 6, 5]
EXPECT_CACHED = [0, 5, 3, 5, 2, 6, 5]


@pytest.fixture(scope="module")
def model():
    return pc.build_model(CFG)


@pytest.fixture
def tier(pool_args):
    """A KV handle and the tenant name its keys are derived with."""
    with tidepool.Pool(**pool_args) as pool, pool.kv() as kv:
        yield kv, pool.tenant or ""


def test_cached_prefill_is_bit_equal_and_hits(tier, model, model_name):
    kv, tenant = tier
    out = pc.run(kv, cfg=CFG, tenant=tenant, model=model_name,
                 model_obj=model)
    res = out["results"]
    assert [r.chunks for r in res] == EXPECT_CHUNKS
    assert [r.cached_chunks for r in res] == EXPECT_CACHED
    assert [r.exists_chunks for r in res] == EXPECT_CACHED
    assert all(r.equal for r in res), [r.name for r in res if not r.equal]
    assert out["put_errors"] == 0
    st = kv.stats()
    assert st["hits"] > 0
    # every cached chunk came from the tier: one hit per (chunk, layer)
    assert st["hits"] == sum(EXPECT_CACHED) * L
    assert st["bad_reads"] == 0
    # every whole chunk computed was new, and was stored
    assert st["puts"] == (sum(EXPECT_CHUNKS) - sum(EXPECT_CACHED)) * L


def test_deleted_middle_chunk_is_recomputed(tier, model, model_name):
    kv, tenant = tier
    name, toks = pc.make_prompts(CFG.vocab)[0]
    cache = pc.PrefixCache(kv, CFG, tenant, model_name)
    first = pc.serve(model, cache, name, toks)
    assert (first.cached_chunks, first.chunks, first.equal) == (0, 5, True)
    again = pc.serve(model, cache, name, toks)
    assert (again.cached_chunks, again.equal) == (5, True)

    # chunk 2 of layer 1 gone: exists() stops there, chunks 2.. are
    # recomputed (and stored again)
    keys = cache.keys(toks)
    assert kv.delete([keys[2 * L + 1]]) == [True]
    assert kv.exists(keys) == 2 * L + 1
    r = pc.serve(model, cache, name, toks)
    assert (r.exists_chunks, r.cached_chunks, r.equal) == (2, 2, True)
    assert r.put_errors == 0
    assert kv.exists(keys) == len(keys)
    r = pc.serve(model, cache, name, toks)
    assert (r.cached_chunks, r.equal) == (5, True)


def served_once(tier, model, model_name, prompt):
    """Serves the example's prompt number prompt once (bit-equal, its
    chunks stored); returns the KV, the PrefixCache, the prompt's name
    and its tokens."""
    kv, tenant = tier
    name, toks = pc.make_prompts(CFG.vocab)[prompt]
    cache = pc.PrefixCache(kv, CFG, tenant, model_name)
    assert pc.serve(model, cache, name, toks).equal
    return kv, cache, name, toks


class Passthrough:
    """The tier calls the example makes (exists, get_into, put_async),
    each handed to kv; subclasses change one."""

    def __init__(self, kv):
        self.kv = kv

    def exists(self, keys):
        return self.kv.exists(keys)

    def get_into(self, keys, bufs):
        return self.kv.get_into(keys, bufs)

    def put_async(self, keys, values):
        return self.kv.put_async(keys, values)


class MissAfterExists(Passthrough):
    """A KV whose get_into misses keys that exists() reported: the chunk
    is deleted between the two calls, as an eviction (or a block failing
    its checksum) would make it."""

    def __init__(self, kv, victim):
        super().__init__(kv)
        self.victim = victim

    def exists(self, keys):
        n = self.kv.exists(keys)
        self.kv.delete([self.victim])
        return n


def test_miss_after_exists_falls_back(tier, model, model_name):
    kv, cache, name, toks = served_once(tier, model, model_name, 1)
    keys = cache.keys(toks)
    hits0 = kv.stats()["hits"]
    cache.kv = MissAfterExists(kv, keys[3 * L])  # chunk 3, layer 0
    r = pc.serve(model, cache, name, toks)
    assert (r.exists_chunks, r.cached_chunks, r.equal) == (6, 3, True)
    # chunks 0..2 and the other layers of 3.. hit; chunk 3 layer 0 missed
    assert kv.stats()["hits"] - hits0 == 6 * L - 1


class Corrupting(Passthrough):
    """Flips one bit of a loaded K/V value after get_into (a mantissa
    bit worth ~10 %: a flip of the last bit of one element can vanish in
    rounding): shows that the equality check catches one wrong value (the
    tier itself never returns one: its checksum makes it a miss)."""

    def get_into(self, keys, bufs):
        hits = self.kv.get_into(keys, bufs)
        flat = bufs[-1].view(-1).view(torch.int32)
        flat[7] ^= 1 << 20
        return hits


def test_equality_check_sees_one_wrong_bit(tier, model, model_name):
    kv, cache, name, toks = served_once(tier, model, model_name, 2)
    cache.kv = Corrupting(kv)
    r = pc.serve(model, cache, name, toks)
    assert r.cached_chunks == 5
    assert not r.equal


def test_example_cli(memd, model_name):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    script = os.path.join(os.path.dirname(__file__), "..", "examples",
                          "prefix_cache.py")
    r = subprocess.run(
        [sys.executable, script, "--addr", memd.addr, "--model", model_name,
         "--layers", "2", "--d-model", "64", "--heads", "2",
         "--check-monolithic"],
        capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert "allclose=yes" in lines[0]
    summary = dict(w.split("=", 1) for w in lines[-1].split()[1:])
    assert lines[-1].startswith("prefix_cache: ")
    assert summary["bit_equal"] == "yes"
    assert int(summary["cached_chunks"]) == sum(EXPECT_CACHED)
    assert int(summary["kv_hits"]) == sum(EXPECT_CACHED) * 2
    assert summary["put_errors"] == "0"
