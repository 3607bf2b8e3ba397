"""The torch example model (python/examples/prefix_cache.py) served the
way SGLang's HiCache serves it with tidepool as its storage tier: a host
KV pool (page_first, one page per 256-token chunk), the HiCacheController
stand-in's prefetch and backup threads, and TidepoolHiCacheStorage
selected through the factory from the user's configuration
(python/tests/engines/sglang). Prefill with K/V loaded through SGLang's
call sequence must be bit-equal to recomputing; a second engine with an
empty host pool (another server) reuses everything the first stored; a
page that goes missing between the hit query and the load shortens the
prefix and is recomputed. No timing is asserted."""
import os
import sys
import uuid

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                "examples"))
import prefix_cache as pc  # noqa: E402

import tidepool  # noqa: E402

CFG = pc.Config(layers=2, d_model=64, heads=2, vocab=1000, seed=3)
C = pc.CHUNK  # tokens per page
DEADLINE_S = 60.0
# whole chunks of make_prompts()' prompts, and what the tier holds of each
# when its turn comes (test_model_e2e.py's numbers: the same prefixes)
EXPECT_CHUNKS = [5, 6, 5, 6, 5, 6, 5]
EXPECT_CACHED = [0, 5, 3, 5, 2, 6, 5]


class Engine:
    """What SGLang's scheduler and HiRadixCache do around the controller,
    for one model: host pool, prefetch, load, prefill, write-back."""

    def __init__(self, model, extra_config, model_name, v1):
        from sglang.srt.managers.cache_controller import HiCacheController
        from sglang.srt.mem_cache.pool_host import MHATokenToKVPoolHost

        cfg = model.cfg
        self.model = model
        self.hp = MHATokenToKVPoolHost(cfg.layers, cfg.heads, cfg.head_dim,
                                       torch.float32, 48 * C, C,
                                       "page_first")
        self.ctrl = HiCacheController(
            self.hp, C, "dynamic", model_name=model_name,
            storage_backend_extra_config=dict(extra_config,
                                              interface_v1=v1))

    def close(self):
        self.ctrl.detach_storage_backend()

    def _load(self, idx):
        """One page from the host pool as the model's K/V per layer,
        (2, heads, C, head_dim): the host-to-device copy."""
        kv = self.hp.kv_buffer[:, idx:idx + C]  # (2, C, layers, H, hd)
        return [kv[:, :, ly].permute(0, 2, 1, 3).contiguous()
                for ly in range(self.model.cfg.layers)]

    def serve(self, tokens, before_io=None):
        """One prompt: returns (Prefill, pages the hit query found)."""
        ctrl, hp = self.ctrl, self.hp
        toks = tokens.tolist()
        # as SGLang's scheduler, at most all tokens but the last are
        # taken from the cache: the last one is always computed
        op = ctrl.prefetch(f"req-{uuid.uuid4().hex[:8]}", toks[:-1])
        assert ctrl.prefetch_hit_queue.get(timeout=DEADLINE_S) is op
        found = len(op.hash_value)
        past = []
        if found:
            if before_io:
                before_io(op)
            assert ctrl.schedule_prefetch_io(op)
            while True:
                ack = ctrl.ack_prefetch_queue.get(timeout=DEADLINE_S)
                if ack.operation is op and ack.completed_req:
                    break
            loaded = op.completed_tokens // C
            past = [self._load(int(op.host_indices[p * C]))
                    for p in range(loaded)]
            hp.free(op.host_indices)
        got = pc.prefill(self.model, tokens, past)
        new = got.kv[len(past):]
        if new:
            hashes = ctrl.get_hash_str(toks, None, page_size=C)
            idx = hp.alloc(len(new) * C)
            for p, kvs in enumerate(new):  # device-to-host backup
                dst = hp.kv_buffer[:, int(idx[p * C]):int(idx[p * C]) + C]
                for ly, kv in enumerate(kvs):
                    dst[:, :, ly] = kv.permute(0, 2, 1, 3)
            oid = ctrl.write_storage(idx, toks,
                                     hash_value=hashes[len(past):
                                                       len(got.kv)])
            op = ctrl.ack_backup_queue.get(timeout=DEADLINE_S)
            assert op.id == oid and op.completed_tokens == len(new) * C
            hp.free(idx)
        return got, found


def equal_to_recompute(model, tokens, got):
    ref = pc.prefill(model, tokens)
    skip = got.cached_chunks * C
    return (torch.equal(got.hidden, ref.hidden[skip:]) and
            torch.equal(got.logits, ref.logits) and
            all(torch.equal(a, b) for ca, cb in zip(got.kv, ref.kv)
                for a, b in zip(ca, cb)))


@pytest.fixture(scope="module")
def model():
    return pc.build_model(CFG)


@pytest.mark.parametrize("v1", [1, 0], ids=["interface_v1", "generic"])
def test_model_through_hicache(engines, pool_args, model, model_name, v1):
    extra = {"backend_name": "tidepool",
             "module_path": "tidepool.connectors.sglang",
             "class_name": "TidepoolHiCacheStorage", **pool_args}
    prompts = pc.make_prompts(CFG.vocab)
    a = Engine(model, extra, model_name, v1)
    try:
        cached = []
        for name, toks in prompts:
            got, found = a.serve(toks)
            assert len(got.kv) == EXPECT_CHUNKS[len(cached)], name
            assert found == got.cached_chunks, name
            assert equal_to_recompute(model, toks, got), name
            cached.append(got.cached_chunks)
        assert cached == EXPECT_CACHED
        assert a.ctrl.storage_backend.kv.stats()["hits"] >= \
            2 * sum(EXPECT_CACHED)
    finally:
        a.close()
    # another server: an empty host pool, everything from the tier; the
    # first prompt's page 3 vanishes between the hit query and the load
    b = Engine(model, extra, model_name, v1)
    try:
        with tidepool.Pool(**pool_args) as p, p.kv() as other:
            def evict(op):
                gone = b.ctrl.storage_backend.page_keys([op.hash_value[3]])
                assert other.delete(gone[:1]) == [True]

            got, found = b.serve(prompts[0][1], before_io=evict)
        assert (found, got.cached_chunks) == (5, 3)
        assert equal_to_recompute(model, prompts[0][1], got)
        for i, (name, toks) in enumerate(prompts[1:], 1):
            got, found = b.serve(toks)
            assert got.cached_chunks == found == \
                min(EXPECT_CHUNKS[i], (len(toks) - 1) // C), name
            assert equal_to_recompute(model, toks, got), name
    finally:
        b.close()
