#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""python/examples/prefix_cache.py - prefix caching of a transformer's KV
in the tidepool KV tier, checked bit for bit against recomputing.

    /usr/bin/python3 python/examples/prefix_cache.py --addr 127.0.0.1:7470
    (a cluster: --addr REGISTRY --tenant demo --secret-file demo.secret)

A small decoder-only transformer (torch.nn, random weights from a fixed
seed, float32 on the CPU; nothing is downloaded) prefills prompts that
share prefixes: a system prompt, then one of two documents, then a
question. Each prompt is served the way an inference engine with a KV
tier serves it:

  1. keys: tidepool.prefix_keys() of the prompt, one per whole chunk of
     256 tokens (the chained prefix keys of docs/kv.md);
  2. kv.exists() gives the longest cached prefix; kv.get_into() loads
     those chunks' K and V into preallocated tensors;
  3. only the remaining tokens are computed, attending (causally) to the
     loaded K/V and to themselves;
  4. the K/V of the newly computed whole chunks are stored (put_async,
     waited for before the next prompt: off the critical path, as decode
     would hide it).

Every prompt is also prefilled from scratch (no tier), and the hidden
states of the computed positions and the last token's logits of the two
runs must be equal bit for bit (torch.equal). One summary line says how
many chunks came from the tier and how much prefill time that saved.

Layout in the tier: one key-space per layer. The value of (chunk c,
layer l) is one contiguous float32 tensor of shape (2, heads, 256,
head_dim), K then V (512 KiB here), stored under key c of
prefix_keys(tokens, tenant, "<model id>/layer<l>"); the model id names the
weights' seed and shape, so two models never share keys. Per-layer values
rather than one value per chunk because that is what the store sizes
best (docs/kv.md, "Size classes": a whole chunk of a real model is 32
MiB, which takes a 64 MiB slab at 50 %; a layer's 1 MiB takes 98 %), and
it is the granularity at which an engine would overlap loading layer l+1
with computing layer l. The keys of a prompt are asked for chunk-major
(chunk 0 of layers 0..L-1, then chunk 1, ...), so one exists() call
answers for every layer: the cached prefix is floor(n / L) chunks, and a
chunk missing in any layer ends it.

Why the cached run is bit-equal to recomputing. Floating-point results
depend on the order of every reduction, and a BLAS may order a matmul's
sums differently for different shapes (blocking, vector widths,
threads). So prefill is *chunked* in both runs: chunk c (positions
256 c .. 256 c + T) is always computed by the same operations on tensors
of the same shapes, (T, d_model) for the projections and (heads, T,
256 c + T) for the attention scores, whatever came before it. The
recomputing run computes chunks 0..n-1 in turn; the cached run loads
chunks 0..k-1 (bytes the same chunked computation produced for an
earlier prompt with the same prefix) and computes chunks k..n-1 with the
same calls on the same shapes and the same inputs. Causality makes chunk
c's K/V depend only on tokens 0..256(c+1), which the keys cover. Loaded
and computed past K/V are both copied by torch.cat into fresh tensors
before use, so not even their alignment differs. (A monolithic prefill of
the whole prompt in one call is the same attention, but its sums run in
another order: --check-monolithic shows how far it is from the chunked
result, to within float32 rounding.)

A miss after exists() (evicted, or a block that failed its checksum:
the tier returns the committed bytes or a miss, never wrong bytes) ends
the cached prefix at that chunk and the rest is recomputed: the result
is the same, only slower.

Importable: build_model(), make_prompts(), PrefixCache, prefill() and
run() are what python/tests/test_model_e2e.py uses.
"""
from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import sys
import time
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

try:
    import tidepool
except ImportError:  # run from a checkout: python/ and a build tree
    _root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..",
                                         ".."))
    sys.path.insert(0, os.path.join(_root, "python"))
    for _cfg in ("release", "debug"):
        _p = os.path.join(_root, "build", _cfg, "python")
        if os.path.isdir(_p):
            sys.path.insert(0, _p)
            break
    import tidepool

CHUNK = 256  # tokens per chunk: tidepool.CHUNK_TOKENS, vLLM/LMCache's

# One (chunk, layer) of past K/V: (2, heads, tokens, head_dim), K then V.
KVChunk = torch.Tensor


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 4
    d_model: int = 256
    heads: int = 4
    vocab: int = 1000
    max_pos: int = 8192
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def model_id(self) -> str:
        """Names the weights: keys of another model never collide."""
        return (f"tinylm-l{self.layers}-d{self.d_model}-h{self.heads}"
                f"-v{self.vocab}-seed{self.seed}-f32")

    def kv_shape(self, tokens: int = CHUNK) -> Tuple[int, int, int, int]:
        return (2, self.heads, tokens, self.head_dim)

    @property
    def kv_bytes(self) -> int:
        """Bytes of one stored value: one chunk of one layer."""
        return 2 * self.heads * CHUNK * self.head_dim * 4


class Block(nn.Module):
    """Pre-norm decoder block: causal multi-head attention over the past
    K/V plus this chunk's, then a GELU MLP."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d = cfg.d_model
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                 nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, start: int,
                past: Sequence[KVChunk]) -> Tuple[torch.Tensor, KVChunk]:
        """x: (T, d) hidden states of positions start .. start+T; past:
        the K/V chunks of positions 0 .. start, in order. Returns the
        block's output (T, d) and this chunk's K/V (2, H, T, hd),
        contiguous (the tensor that is stored)."""
        cfg = self.cfg
        t = x.shape[0]
        qkv = self.qkv(self.ln1(x))
        qkv = qkv.view(t, 3, cfg.heads, cfg.head_dim).permute(1, 2, 0, 3)
        q = qkv[0].contiguous()
        kv = qkv[1:].contiguous()
        # fresh tensors in both runs: loaded and computed chunks alike
        k = torch.cat([p[0] for p in past] + [kv[0]], dim=1)
        v = torch.cat([p[1] for p in past] + [kv[1]], dim=1)
        n = k.shape[1]
        scores = torch.matmul(q, k.transpose(1, 2)) * (cfg.head_dim ** -0.5)
        future = (torch.arange(n).unsqueeze(0) >
                  torch.arange(start, start + t).unsqueeze(1))
        scores = scores.masked_fill(future, float("-inf"))
        att = torch.matmul(torch.softmax(scores, dim=-1), v)
        att = att.permute(1, 0, 2).reshape(t, cfg.d_model)
        x = x + self.proj(att)
        x = x + self.mlp(self.ln2(x))
        return x, kv


class TinyLM(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_pos, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def chunk(self, tokens: torch.Tensor, start: int,
              past: Sequence[Sequence[KVChunk]]
              ) -> Tuple[torch.Tensor, List[KVChunk]]:
        """One chunk of prefill: tokens (T,) at positions start ..
        start+T, past[l] the K/V chunks of layer l before it. Returns the
        final hidden states (T, d) and the chunk's K/V per layer."""
        x = self.embed(tokens) + self.pos(torch.arange(start,
                                                       start + len(tokens)))
        kvs = []
        for blk, p in zip(self.blocks, past):
            x, kv = blk(x, start, p)
            kvs.append(kv)
        return self.ln_f(x), kvs

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h)

    def monolithic(self, tokens: torch.Tensor) -> torch.Tensor:
        """The whole prompt in one call per layer (no chunking): the
        same attention, other reduction orders. Final hidden states."""
        return self.chunk(tokens, 0, [[] for _ in self.blocks])[0]


def build_model(cfg: Optional[Config] = None) -> TinyLM:
    """The model with its random weights (torch.manual_seed(cfg.seed))."""
    cfg = cfg or Config()
    torch.manual_seed(cfg.seed)
    m = TinyLM(cfg)
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


@dataclasses.dataclass
class Prefill:
    """What one prefill produced."""
    hidden: torch.Tensor  # (ntokens - cached_tokens, d): computed positions
    logits: torch.Tensor  # (vocab,): the last token's
    kv: List[List[KVChunk]]  # [chunk][layer], whole chunks only
    cached_chunks: int  # chunks taken from past instead of computed
    seconds: float  # wall time of the computation (no tier calls)


def prefill(model: TinyLM, tokens: torch.Tensor,
            past: Optional[List[List[KVChunk]]] = None) -> Prefill:
    """Chunked prefill of tokens (1-D int64). past[c][l]: the K/V of
    whole chunks 0..k-1, taken as computed; chunks k.. are computed."""
    past = past or []
    k = len(past)
    n = len(tokens)
    if k * CHUNK > n:
        raise ValueError(f"{k} cached chunks but {n} tokens")
    by_layer: List[List[KVChunk]] = [[c[ly] for c in past]
                                     for ly in range(model.cfg.layers)]
    out_kv: List[List[KVChunk]] = [list(c) for c in past]
    hs = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(k * CHUNK, n, CHUNK):
            h, kvs = model.chunk(tokens[start:start + CHUNK], start,
                                 by_layer)
            hs.append(h)
            if h.shape[0] == CHUNK:  # a partial tail is never stored
                out_kv.append(kvs)
                for ly, kv in enumerate(kvs):
                    by_layer[ly].append(kv)
        hidden = torch.cat(hs) if hs else torch.empty(0, model.cfg.d_model)
        logits = model.logits(hidden[-1]) if hs else torch.empty(0)
    return Prefill(hidden, logits, out_kv, k, time.perf_counter() - t0)


class PrefixCache:
    """The model's K/V in the KV tier: one key-space per layer (see the
    module comment). kv: a tidepool.KV (or anything with its exists,
    get_into, put_async methods)."""

    def __init__(self, kv, cfg: Config, tenant: str = "",
                 model: Optional[str] = None, max_chunks: int = 64) -> None:
        self.kv = kv
        self.cfg = cfg
        self.tenant = tenant
        # the namespace, then the weights: other models never share keys
        self.model = f"{model}/{cfg.model_id}" if model else cfg.model_id
        # load targets, allocated once: [chunk][layer]
        self.bufs = [[torch.empty(cfg.kv_shape()) for _ in range(cfg.layers)]
                     for _ in range(max_chunks)]
        self.put_fut = None
        self.put_keep: list = []

    def keys(self, tokens: torch.Tensor) -> List[bytes]:
        """The prompt's keys, chunk-major: [c * layers + l]."""
        per_layer = [tidepool.prefix_keys(tokens, self.tenant,
                                          f"{self.model}/layer{ly}")
                     for ly in range(self.cfg.layers)]
        return [k for chunk in zip(*per_layer) for k in chunk]

    def lookup(self, keys: Sequence[bytes]) -> Tuple[List[List[KVChunk]],
                                                     dict]:
        """The longest cached prefix: exists(), then get_into() of those
        chunks. Returns past[c][l] (views of the load buffers, valid
        until the next lookup) and what happened."""
        L = self.cfg.layers
        nkeys = min(len(keys), len(self.bufs) * L)
        info = {"exists_chunks": 0, "loaded_chunks": 0, "exists_s": 0.0,
                "get_s": 0.0}
        if not nkeys:
            return [], info
        t0 = time.perf_counter()
        present = self.kv.exists(keys[:nkeys])
        info["exists_s"] = time.perf_counter() - t0
        k = present // L
        info["exists_chunks"] = k
        if not k:
            return [], info
        bufs = [b for c in self.bufs[:k] for b in c]
        t0 = time.perf_counter()
        hits = self.kv.get_into(keys[:k * L], bufs)
        info["get_s"] = time.perf_counter() - t0
        # usable: the leading chunks whose every layer hit
        good = 0
        while good < k and all(hits[good * L:(good + 1) * L]):
            good += 1
        info["loaded_chunks"] = good
        return [self.bufs[c] for c in range(good)], info

    def store(self, keys: Sequence[bytes], kv: List[List[KVChunk]],
              first: int) -> None:
        """Starts storing chunks first.. of kv (put_async); wait_store()
        waits for it. The tensors must not change until then."""
        self.wait_store()
        L = self.cfg.layers
        vals = [t for c in kv[first:] for t in c]
        if not vals:
            return
        for t in vals:
            assert t.is_contiguous() and t.dtype == torch.float32
        self.put_keep = vals
        self.put_fut = self.kv.put_async(keys[first * L:len(kv) * L], vals)

    def wait_store(self) -> List[int]:
        """Waits for the put in flight; its per-key errno list."""
        if self.put_fut is None:
            return []
        st = self.put_fut.result()
        self.put_fut = None
        self.put_keep = []
        return st


def make_prompts(vocab: int = 1000, seed: int = 1, system: int = 768,
                 doc: int = 512) -> List[Tuple[str, torch.Tensor]]:
    """Prompts that share prefixes (token counts for the defaults): a
    768-token system prompt, one of two 512-token documents, a question
    of 57..300 tokens; one prompt that shares only 2.5 chunks of the
    system prompt; one prompt seen before, again."""
    g = torch.Generator().manual_seed(seed)

    def r(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)

    sys_p, doc_a, doc_b = r(system), r(doc), r(doc)
    q = [r(n) for n in (200, 300, 57, 256, 130)]
    part = min(system, 640)
    return [
        ("sys+docA+q0", torch.cat([sys_p, doc_a, q[0]])),
        ("sys+docA+q1", torch.cat([sys_p, doc_a, q[1]])),
        ("sys+docB+q2", torch.cat([sys_p, doc_b, q[2]])),
        ("sys+docB+q3", torch.cat([sys_p, doc_b, q[3]])),
        ("sys[:640]+other", torch.cat([sys_p[:part], r(700)])),
        ("sys+docA+q1 again", torch.cat([sys_p, doc_a, q[1]])),
        ("sys+docB+q4", torch.cat([sys_p, doc_b, q[4]])),
    ]


@dataclasses.dataclass
class PromptResult:
    name: str
    tokens: int
    chunks: int  # whole chunks
    cached_chunks: int  # loaded from the tier
    exists_chunks: int  # what exists() said
    equal: bool  # hidden states and logits bit-equal to recomputing
    cached_s: float  # exists + get + computing the rest
    tier_s: float  # exists + get alone
    recompute_s: float  # computing everything
    put_errors: int  # puts that failed (not 0 or EEXIST)


def serve(model: TinyLM, cache: PrefixCache, name: str,
          tokens: torch.Tensor) -> PromptResult:
    """One prompt through the tier, then recomputed from scratch; the
    two compared bit for bit."""
    cache.wait_store()  # the previous prompt's put ("during decode")
    keys = cache.keys(tokens)
    past, info = cache.lookup(keys)
    got = prefill(model, tokens, past)
    cached_s = info["exists_s"] + info["get_s"] + got.seconds
    cache.store(keys, got.kv, len(past))
    ref = prefill(model, tokens)
    skip = len(past) * CHUNK
    equal = (torch.equal(got.hidden, ref.hidden[skip:]) and
             torch.equal(got.logits, ref.logits) and
             all(torch.equal(a, b)
                 for ca, cb in zip(got.kv[len(past):], ref.kv[len(past):])
                 for a, b in zip(ca, cb)))
    st = cache.wait_store()
    return PromptResult(name, len(tokens), len(tokens) // CHUNK, len(past),
                        info["exists_chunks"], equal, cached_s,
                        info["exists_s"] + info["get_s"], ref.seconds,
                        sum(1 for s in st if s not in (0, errno.EEXIST)))


def run(kv, prompts: Optional[List[Tuple[str, torch.Tensor]]] = None,
        cfg: Optional[Config] = None, tenant: str = "",
        model: Optional[str] = None, model_obj: Optional[TinyLM] = None,
        verbose: bool = False) -> dict:
    """Serves prompts (default make_prompts()) through kv; returns the
    per-prompt results and totals. model: the key-space name (default
    the config's model id)."""
    cfg = cfg or (model_obj.cfg if model_obj else Config())
    m = model_obj or build_model(cfg)
    prompts = prompts if prompts is not None else make_prompts(cfg.vocab)
    cache = PrefixCache(kv, cfg, tenant, model,
                        max_chunks=max(len(t) for _, t in prompts) // CHUNK)
    prefill(m, prompts[0][1][:CHUNK])  # warm-up, untimed
    results = []
    for name, toks in prompts:
        r = serve(m, cache, name, toks)
        results.append(r)
        if verbose:
            print(f"  {r.name:<18} tokens={r.tokens:<5} "
                  f"cached={r.cached_chunks}/{r.chunks} chunks "
                  f"with_tier={r.cached_s * 1e3:7.1f} ms "
                  f"(exists+get {r.tier_s * 1e3:5.1f} ms) "
                  f"recompute={r.recompute_s * 1e3:7.1f} ms "
                  f"bit_equal={'yes' if r.equal else 'NO'}")
    cached = sum(r.cached_s for r in results)
    full = sum(r.recompute_s for r in results)
    return {
        "results": results,
        "all_equal": all(r.equal for r in results),
        "prompts": len(results),
        "tokens": sum(r.tokens for r in results),
        "chunks": sum(r.chunks for r in results),
        "cached_chunks": sum(r.cached_chunks for r in results),
        "cached_s": cached,
        "tier_s": sum(r.tier_s for r in results),
        "recompute_s": full,
        "saved_pct": 100.0 * (1 - cached / full) if full else 0.0,
        "put_errors": sum(r.put_errors for r in results),
    }


def check_monolithic(model: TinyLM, tokens: torch.Tensor) -> str:
    """Chunked against monolithic prefill of one prompt: the chunked
    computation is the same attention (to float32 rounding)."""
    with torch.no_grad():
        mono = model.monolithic(tokens)
    chunked = prefill(model, tokens).hidden
    diff = (mono - chunked).abs().max().item()
    ok = torch.allclose(mono, chunked, rtol=1e-4, atol=1e-4)
    return (f"monolithic vs chunked prefill: max_abs_diff={diff:.3g} "
            f"bit_equal={'yes' if torch.equal(mono, chunked) else 'no'} "
            f"allclose={'yes' if ok else 'NO'}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", help="memd (standalone) or the registry "
                    "(default $LIBPOOL_ADDR)")
    ap.add_argument("--tenant", help="cluster tenant (default "
                    "$LIBPOOL_TENANT)")
    ap.add_argument("--secret-file", help="the tenant's secret")
    ap.add_argument("--model", help="a namespace put before the model id "
                    "in the keys (a fresh one: a cold tier)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="weights' seed")
    ap.add_argument("--check-monolithic", action="store_true",
                    help="also compare chunked with one-call prefill")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="one line per prompt")
    a = ap.parse_args(argv)
    cfg = Config(layers=a.layers, d_model=a.d_model, heads=a.heads,
                 seed=a.seed)
    model = build_model(cfg)
    if a.check_monolithic:
        print(check_monolithic(model, make_prompts(cfg.vocab)[0][1]))
    with tidepool.Pool(a.addr, a.tenant, a.secret_file) as pool, \
            pool.kv() as kv:
        out = run(kv, cfg=cfg, tenant=pool.tenant or "", model=a.model,
                  model_obj=model, verbose=a.verbose)
        hits = kv.stats().get("hits", 0)
    print(f"prefix_cache: prompts={out['prompts']} tokens={out['tokens']} "
          f"chunks={out['chunks']} cached_chunks={out['cached_chunks']} "
          f"kv_hits={hits} bit_equal={'yes' if out['all_equal'] else 'NO'} "
          f"prefill_with_tier_s={out['cached_s']:.3f} "
          f"tier_s={out['tier_s']:.4f} "
          f"prefill_recompute_s={out['recompute_s']:.3f} "
          f"saved_pct={out['saved_pct']:.1f} "
          f"put_errors={out['put_errors']}")
    return 0 if out["all_equal"] and not out["put_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
