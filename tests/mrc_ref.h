// SPDX-License-Identifier: MIT
/*
 * tests/mrc_ref.h - exact references for test_mrc (tests/mrc_ref.c),
 * written from memd/mrc.h's and memd/kvstore_evict.c's definitions, not from
 * memd/mrc.c: a byte-capacity S3-FIFO cache and a byte-weighted LRU
 * stack, each over every key of the whole trace (no sampling, no window).
 *
 * Both take the calls memd_mrc takes: a reference to a key (its bytes,
 * 0 for unknown: the size last seen stays; counted: a request, else a
 * put) and a forget.
 */
#ifndef TP_TESTS_MRC_REF_H
#define TP_TESTS_MRC_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One call, as recorded to be replayed into a reference. */
struct ref_call {
	uint64_t key, bytes;
	enum { REF_REQUEST, REF_PUT, REF_FORGET } op;
};

/* A recorded call sequence. */
struct ref_trace {
	struct ref_call *c;
	size_t n, cap;
};

void ref_trace_add(struct ref_trace *t, int op, uint64_t key, uint64_t bytes);
void ref_trace_free(struct ref_trace *t);

/*
 * The hit ratio of the requests of t with memd's S3-FIFO store of
 * cap_bytes (hits / requests; 0 without requests).
 */
double ref_s3fifo_hit_ratio(const struct ref_trace *t, uint64_t cap_bytes);

/*
 * Every request's exact LRU reuse distance in bytes (UINT64_MAX for a
 * first reference), in t's order, into *out (malloc'd; the count is
 * returned). ref_lru_hit_ratio: the share of those <= cap_bytes.
 */
size_t ref_lru_distances(const struct ref_trace *t, uint64_t **out);
double ref_lru_hit_ratio(const uint64_t *d, size_t n, uint64_t cap_bytes);

#endif
