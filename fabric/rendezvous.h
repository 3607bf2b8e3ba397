// SPDX-License-Identifier: MIT
/*
 * fabric/rendezvous.h - the KV tier's rendezvous hashing, shared by the
 * client (libpool/kv_donors.c: a key's home and second choice) and the donor
 * (memd/server_kv.c: the entries of keys it no longer ranks first or
 * second for). Header-only; callers link libxxhash.
 *
 * A donor's score for a key is XXH3-64(key, seed = XXH3-64(name)); the
 * higher score ranks above, ties to the greater name (names are
 * distinct). docs/kv.md, "Homes".
 */
#ifndef TP_FABRIC_RENDEZVOUS_H
#define TP_FABRIC_RENDEZVOUS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#define TP_RENDEZVOUS_KEY_BYTES 32

static inline uint64_t tp_rendezvous_seed(const char *name)
{
	return XXH3_64bits(name, strlen(name));
}

static inline uint64_t tp_rendezvous_score(uint64_t seed, const uint8_t *key)
{
	return XXH3_64bits_withSeed(key, TP_RENDEZVOUS_KEY_BYTES, seed);
}

/* The donor named a with score sa ranks above the one named b with sb. */
static inline bool tp_rendezvous_above(uint64_t sa, const char *a, uint64_t sb,
				       const char *b)
{
	return sa > sb || (sa == sb && strcmp(a, b) > 0);
}

#endif
