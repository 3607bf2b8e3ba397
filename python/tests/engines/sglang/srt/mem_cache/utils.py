"""Stand-in of the page hashing the HiCache controller uses
(``from sglang.srt.mem_cache.utils import get_hash_str`` in
python/sglang/srt/managers/cache_controller.py at commit
001067fffe33427bee0ed2f007fb7551a1d76b44).

The contract a storage backend sees: a page's key is an opaque string
that names the page's tokens and every token before them (each page's
hash chains the previous one), so equal prefixes give equal keys in every
process. Here, as in upstream's earlier get_hash_str of
hicache_storage.py: SHA-256 over the previous page's hash (its bytes) and
the page's token ids as little-endian u32, in hex.
"""
import hashlib
from typing import List, Optional


def get_hash_str(token_ids, prior_hash: Optional[str] = None,
                 page_size: Optional[int] = None):
    """With page_size: the hashes of the whole pages of token_ids,
    chained from prior_hash (a list). Without: one hash of them all."""
    def one(tokens, prior):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in tokens:
            h.update(int(t).to_bytes(4, "little", signed=False))
        return h.hexdigest()

    tokens = [int(t) for t in token_ids]
    if page_size is None:
        return one(tokens, prior_hash)
    out: List[str] = []
    prior = prior_hash
    for i in range(0, len(tokens) - page_size + 1, page_size):
        prior = one(tokens[i:i + page_size], prior)
        out.append(prior)
    return out
