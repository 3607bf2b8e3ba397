#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/kv_classes.py - efficiency of KV block size classes (docs/kv.md,
"Size classes").

For each scheme and value size: value bytes / slab bytes consumed, where
a block costs its share of its slab (slab_size // (slab_size // block)),
the slab's unusable tail included, over every chunk of the value (chunks
of slab_size - 64 payload bytes, as memd/kvstore.c cuts them). Schemes:
  old    power-of-two blocks that include the 64-byte header
  pow2   power-of-two payloads + header, top class the whole slab
  step4  payloads 64 KiB x {1, 1.25, 1.5, 1.75} x 2^k + header (memd's)
In pow2 and step4 a class exists while two blocks fit a slab.

  python3 bench/kv_classes.py
"""
import math
import random

K = 1024
M = K * K
HDR = 64


def classes(slab, scheme):
    if scheme == "old":
        out, b = [], 64 * K
        while b <= slab:
            out.append(b)
            b *= 2
        return out
    steps = 1 if scheme == "pow2" else 4
    out, k = [], 0
    while True:
        base = 64 * K << k
        for s in range(steps):
            block = base + base // steps * s + HDR
            if 2 * block > slab:
                out.append(slab)
                return out
            out.append(block)
        k += 1


def cost(slab, cls, length):
    payload = slab - HDR
    total = 0.0
    for i in range(max(1, -(-length // payload))):
        part = min(payload, length - i * payload)
        block = next(b for b in cls if b >= part + HDR)
        total += slab / (slab // block)
    return total


def efficiency(slab, scheme, sizes):
    cls = classes(slab, scheme)
    return sum(sizes) / sum(cost(slab, cls, n) for n in sizes)


def main():
    model = [
        ("1 MiB (Llama-3-8B layer)", M),
        ("512 KiB (4 KV heads, or fp8)", M // 2),
        ("2 MiB", 2 * M),
        ("288 KiB (MLA)", 288 * K),
        ("8 MiB", 8 * M),
        ("32 MiB (a whole chunk)", 32 * M),
    ]
    rnd = random.Random(1)
    mixed = [int(math.exp(rnd.uniform(math.log(16 * K), math.log(64 * M))))
             for _ in range(20000)]
    schemes = ("old", "pow2", "step4")
    for slab in (2 * M, 64 * M):
        counts = [len(classes(slab, s)) for s in schemes]
        print("slab %d MiB, classes %s" % (slab // M, dict(zip(schemes, counts))))
        for name, n in model + [("log-uniform 16 KiB .. 64 MiB", None)]:
            sizes = mixed if n is None else [n]
            print("  %-30s" % name,
                  " ".join("%s=%.2f" % (s, efficiency(slab, s, sizes))
                           for s in schemes))


if __name__ == "__main__":
    main()
