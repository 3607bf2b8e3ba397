"""The torch example model (python/examples/prefix_cache.py) served
through vLLM's OffloadingConnector call sequence (the stand-ins of
python/tests/engines/vllm) with tidepool selected by configuration,
against a standalone memd and a tenant of the 2-donor cluster.

The model's K/V live in "GPU" KV caches as vLLM keeps them (CPU tensors
of shape (num_blocks, page bytes), one block = 256 tokens = one chunk of
the example); the scheduler looks the prompt's blocks up, the worker
loads the hits into freshly allocated blocks, the model computes the
rest attending to the loaded K/V, writes the new K/V into its blocks,
and the connector stores them. Every prompt is also prefilled from
scratch: hidden states, logits and K/V must be bit-equal, and the cached
prefix must be what the shared prefixes allow. No timing is asserted.
"""
import hashlib
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                "examples"))
import prefix_cache as pc  # noqa: E402
from test_vllm_offload import (Engine, extra_config,  # noqa: E402
                               vllm_engine)  # noqa: F401 (a fixture)

CFG = pc.Config(layers=2, d_model=64, heads=2, vocab=1000, seed=3)
L = CFG.layers
BLOCK = pc.CHUNK
NUM_BLOCKS = 64
# test_model_e2e.py's prompts, so the same expectations
EXPECT_CHUNKS = [5, 6, 5, 6, 5, 6, 5]
EXPECT_CACHED = [0, 5, 3, 5, 2, 6, 5]


@pytest.fixture(scope="module")
def model():
    return pc.build_model(CFG)


def block_hashes(tokens, salt):
    """vLLM's chained block hashes: block i's hash covers its parent's
    hash and its tokens (whole blocks only)."""
    from vllm.v1.kv_offload.base import make_offload_key

    out, parent = [], hashlib.sha256(salt.encode()).digest()
    for i in range(len(tokens) // BLOCK):
        chunk = tokens[i * BLOCK:(i + 1) * BLOCK].numpy().tobytes()
        parent = hashlib.sha256(parent + chunk).digest()
        out.append(make_offload_key(parent, 0))
    return out


class Served:
    """One engine: the connector halves and the model's KV caches, in
    one of two layouts: a tensor per layer ("per-layer", staged
    transfers) or one tensor holding every layer of a block ("packed",
    the rows themselves are the transfer buffers)."""

    def __init__(self, extra, layout, name):
        from vllm.v1.kv_offload import base as b

        if layout == "per-layer":
            self.tensors = [torch.zeros((NUM_BLOCKS, CFG.kv_bytes),
                                        dtype=torch.int8) for _ in range(L)]
            self.where = [(ly, 0) for ly in range(L)]
        else:
            self.tensors = [torch.zeros((NUM_BLOCKS, L * CFG.kv_bytes),
                                        dtype=torch.int8)]
            self.where = [(0, ly * CFG.kv_bytes) for ly in range(L)]
        caches = b.CanonicalKVCaches(
            [b.CanonicalKVCacheTensor(t, t.shape[1]) for t in self.tensors],
            [[b.CanonicalKVCacheRef(i, t.shape[1])
              for i, t in enumerate(self.tensors)]])
        self.engine = Engine(extra, caches, tokens=BLOCK, model=name)
        self.free = list(range(NUM_BLOCKS))
        self.nreq = 0

    def kv(self, block, layer):
        """The K/V of one layer in one block, as the model reads it."""
        t, off = self.where[layer]
        raw = self.tensors[t][block, off:off + CFG.kv_bytes]
        return raw.view(torch.float32).view(CFG.kv_shape())

    def serve(self, model, tokens, salt):
        e = self.engine
        self.nreq += 1
        rid = "r%d" % self.nreq
        req = e.Request(rid, len(tokens), block_hashes(tokens, salt))
        hit, _ = e.matched(req, 0)
        ids = [self.free.pop() for _ in range(-(-len(tokens) // BLOCK))]
        e.sched.update_state_after_alloc(req, ids, 0, hit)
        e.step()  # the loads
        assert not e.worker.failed
        k = hit // BLOCK
        past = [[self.kv(ids[c], ly) for ly in range(L)] for c in range(k)]
        got = pc.prefill(model, tokens, past)
        for c in range(k, len(got.kv)):  # the model writes its blocks
            for ly in range(L):
                self.kv(ids[c], ly).copy_(got.kv[c][ly])
        e.step({rid: len(tokens)})  # the stores
        assert not e.worker.failed
        e.sched.request_finished(req)
        ref = pc.prefill(model, tokens)
        skip = k * BLOCK
        equal = (torch.equal(got.hidden, ref.hidden[skip:]) and
                 torch.equal(got.logits, ref.logits) and
                 all(torch.equal(self.kv(ids[c], ly), ref.kv[c][ly])
                     for c in range(len(ref.kv)) for ly in range(L)))
        self.free.extend(ids)
        return len(tokens) // BLOCK, k, equal

    def close(self):
        self.engine.close()


@pytest.mark.parametrize("layout", ["per-layer", "packed"])
def test_vllm_reuses_kv_bit_exactly(vllm_engine, pool_args, model,  # noqa: F811
                                    model_name, layout):
    extra = extra_config(pool_args)
    a = Served(extra, layout, model_name)
    b = Served(extra, layout, model_name)  # a second vLLM instance
    try:
        prompts = pc.make_prompts(CFG.vocab)
        res = [a.serve(model, toks, model_name) for _, toks in prompts]
        assert [r[0] for r in res] == EXPECT_CHUNKS
        assert [r[1] for r in res] == EXPECT_CACHED
        assert all(r[2] for r in res)
        # the other instance finds all of the first prompt in the tier
        chunks, cached, equal = b.serve(model, prompts[0][1], model_name)
        assert (chunks, cached, equal) == (5, 5, True)
    finally:
        a.close()
        b.close()
