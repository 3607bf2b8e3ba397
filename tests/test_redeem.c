// SPDX-License-Identifier: MIT
/*
 * tests/test_redeem.c - a donor's record of redeemed grant tickets
 * (memd/redeem.h), without I/O or clocks: replays refused, bursts far
 * beyond the old 65,536-entry table, the window's edge, epoch slots.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memd/redeem.h"
#include "tests/testutil.h"

#define SKEW 100
#define EP_A 0xa1a1a1a1a1a1a1a1ull
#define EP_B 0xb2b2b2b2b2b2b2b2ull
#define EP_C 0xc3c3c3c3c3c3c3c3ull
#define EP_D 0xd4d4d4d4d4d4d4d4ull

static struct memd_redeem *mk(uint32_t window, uint32_t nepochs)
{
	struct memd_redeem *r;

	ck_assert_int_eq(memd_redeem_create(window, nepochs, SKEW, &r), 0);
	ck_assert_ptr_nonnull(r);
	return r;
}

START_TEST(create_rejects_bad_sizes)
{
	struct memd_redeem *r = (void *)1;

	ck_assert_int_eq(memd_redeem_create(32, 4, SKEW, &r), -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(memd_redeem_create(96, 4, SKEW, &r), -EINVAL);
	ck_assert_int_eq(memd_redeem_create(64, 0, SKEW, &r), -EINVAL);
	memd_redeem_destroy(NULL);
}
END_TEST

START_TEST(once_then_already_per_epoch)
{
	struct memd_redeem *r = mk(1024, 4);
	struct memd_redeem_stats st;

	ck_assert_int_eq(memd_redeem_once(r, EP_A, 5, 1000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 5, 1000, 0, NULL),
			 -EALREADY);
	/* The same id of another registry incarnation is another grant. */
	ck_assert_int_eq(memd_redeem_once(r, EP_B, 5, 1000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_B, 5, 1000, 0, NULL),
			 -EALREADY);
	/* Ids never issued, expired tickets: refused, nothing recorded. */
	ck_assert_int_eq(memd_redeem_once(r, 0, 6, 1000, 0, NULL), -EINVAL);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 0, 1000, 0, NULL), -EINVAL);
	ck_assert_int_eq(
		memd_redeem_once(r, EP_A, 6, 1000, 1000 + SKEW + 1, NULL),
		-ETIME);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 6, 1000, 1000 + SKEW, NULL),
			 0);
	memd_redeem_get_stats(r, &st);
	ck_assert_uint_eq(st.redeemed, 3);
	ck_assert_uint_eq(st.replayed, 2);
	ck_assert_uint_eq(st.epochs, 2);
	memd_redeem_destroy(r);
}
END_TEST

/*
 * 1,000,000 tickets within one TTL (the old table refused past 65,536),
 * redeemed out of order within blocks as concurrent clients would; then
 * every one of them replayed is refused.
 */
START_TEST(burst_beyond_old_table)
{
	const uint64_t n = 1000000, block = 4096;
	struct memd_redeem *r = mk(MEMD_REDEEM_WINDOW_IDS, MEMD_REDEEM_EPOCHS);
	struct memd_redeem_stats st;

	uint64_t bad = 0;

	/* Counted, not asserted per call: Check's asserts are slow. */
	for (uint64_t b = 0; b < n; b += block)
		for (uint64_t i = 0; i < block; i++) {
			/* a permutation of the block: odd stride */
			uint64_t id = b + (i * 2654435761u) % block + 1;

			if (id <= n &&
			    memd_redeem_once(r, EP_A, id, 30000, 5000, NULL))
				bad++;
		}
	ck_assert_uint_eq(bad, 0);
	for (uint64_t id = 1; id <= n; id++)
		if (memd_redeem_once(r, EP_A, id, 30000, 5000, NULL) !=
		    -EALREADY)
			bad++;
	ck_assert_uint_eq(bad, 0);
	memd_redeem_get_stats(r, &st);
	ck_assert_uint_eq(st.redeemed, n);
	ck_assert_uint_eq(st.replayed, n);
	ck_assert_uint_eq(st.too_old, 0);
	memd_redeem_destroy(r);
}
END_TEST

START_TEST(window_edge)
{
	struct memd_redeem *r = mk(64, 1);
	uint64_t oldest = 0;

	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1000, 9000, 0, NULL), 0);
	/* The window is (1000 - 64, 1000]. */
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 937, 9000, 0, &oldest), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 936, 9000, 0, &oldest),
			 -ESTALE);
	ck_assert_uint_eq(oldest, 937);
	/* Sliding by 63 keeps 1000 and drops 937: refused for ever. */
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1063, 9000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1000, 9000, 0, NULL),
			 -EALREADY);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 937, 9000, 0, &oldest),
			 -ESTALE);
	ck_assert_uint_eq(oldest, 1000);
	/* Ids passed by the slide had their old bits (937's) cleared. */
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1001, 9000, 0, NULL), 0);
	/* A jump of many windows: everything older is too old, the ids just
	 * below the new top are new. */
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 100000, 9000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1063, 9000, 0, &oldest),
			 -ESTALE);
	ck_assert_uint_eq(oldest, 100000 - 63);
	for (uint64_t id = 100000 - 63; id < 100000; id++)
		ck_assert_int_eq(memd_redeem_once(r, EP_A, id, 9000, 0, NULL),
				 0);
	for (uint64_t id = 100000 - 63; id <= 100000; id++)
		ck_assert_int_eq(memd_redeem_once(r, EP_A, id, 9000, 0, NULL),
				 -EALREADY);
	memd_redeem_destroy(r);
}
END_TEST

/*
 * Against a model of the documented rule, with a small window and ids
 * arriving in random order around a rising front: every answer matches,
 * and no id is ever accepted twice.
 */
START_TEST(matches_model)
{
	const uint32_t window = 256, n = 200000;
	struct memd_redeem *r = mk(window, 1);
	uint8_t *accepted = calloc(n + 1, 1);
	uint64_t top = 0;
	unsigned seed = 12345;

	ck_assert_ptr_nonnull(accepted);
	for (uint32_t k = 0; k < 4 * n; k++) {
		uint64_t front = k / 4 + 1, lag, id, oldest = 0;
		int want, got;

		seed = seed * 1103515245u + 12345u;
		lag = (seed >> 8) % (2 * window); /* half of them too old */
		id = front > lag ? front - lag : 1;
		if (top >= window && id <= top - window)
			want = -ESTALE;
		else if (accepted[id])
			want = -EALREADY;
		else
			want = 0;
		got = memd_redeem_once(r, EP_C, id, 1000, 0, &oldest);
		if (got != want ||
		    (got == -ESTALE && oldest != top - window + 1))
			ck_abort_msg("id %llu top %llu: got %d want %d "
				     "oldest %llu",
				     (unsigned long long)id,
				     (unsigned long long)top, got, want,
				     (unsigned long long)oldest);
		if (got == 0) {
			accepted[id] = 1; /* want == 0: it was not before */
			if (id > top)
				top = id;
		}
	}
	free(accepted);
	memd_redeem_destroy(r);
}
END_TEST

/*
 * Epoch slots: a new registry epoch takes a free slot, or one holding
 * only expired tickets, or else the least recently used one, whose epoch
 * is then retired: its tickets are refused until all it redeemed have
 * expired, so nothing is accepted twice (before, the new epoch was
 * refused EBUSY and its grants stayed reserved at the registry).
 */
START_TEST(epoch_slots)
{
	struct memd_redeem *r = mk(64, 2);
	struct memd_redeem_stats st;
	uint64_t oldest = 77;

	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1, 1000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_B, 1, 2000, 0, NULL), 0);
	/* no slot free or dead: A (least recent) is retired for C */
	ck_assert_int_eq(memd_redeem_once(r, EP_C, 1, 3000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 1, 1000, 0, &oldest),
			 -ESTALE);
	ck_assert_uint_eq(oldest, 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_A, 2, 1000, 0, NULL), -ESTALE);
	ck_assert_int_eq(memd_redeem_once(r, EP_B, 1, 2000, 0, NULL),
			 -EALREADY);
	ck_assert_int_eq(memd_redeem_once(r, EP_C, 1, 3000, 0, NULL),
			 -EALREADY);
	/* a burn of another epoch's ticket retires nothing */
	ck_assert_int_eq(memd_redeem_burn(r, EP_D, 1, 4000, 0, false), -EBUSY);
	ck_assert_int_eq(memd_redeem_burn(r, EP_C, 2, 3000, 0, true), 0);
	ck_assert_int_eq(memd_redeem_once(r, EP_C, 2, 3000, 0, NULL),
			 -EALREADY);
	/* A's tickets expired: A is no longer retired; its replay is
	 * refused as expired, a new ticket of A takes B's slot (B retired) */
	ck_assert_int_eq(
		memd_redeem_once(r, EP_A, 1, 1000, 1000 + SKEW + 1, NULL),
		-ETIME);
	ck_assert_int_eq(
		memd_redeem_once(r, EP_A, 2, 9000, 1000 + SKEW + 1, NULL), 0);
	ck_assert_int_eq(
		memd_redeem_once(r, EP_B, 1, 2000, 1000 + SKEW + 1, NULL),
		-ESTALE);
	memd_redeem_get_stats(r, &st);
	ck_assert_uint_eq(st.epochs, 2);
	ck_assert_uint_eq(st.retired, 2);
	ck_assert_uint_eq(st.busy, 1);
	ck_assert_uint_eq(st.burnt, 1);
	memd_redeem_destroy(r);

	/* 64 epochs retired with live tickets at once: then EBUSY */
	r = mk(64, 1);
	for (uint64_t e = 1; e <= 65; e++)
		ck_assert_int_eq(memd_redeem_once(r, e, 1, 100000, 0, NULL), 0);
	ck_assert_int_eq(memd_redeem_once(r, 66, 1, 100000, 0, NULL), -EBUSY);
	for (uint64_t e = 1; e <= 64; e++)
		ck_assert_int_eq(memd_redeem_once(r, e, 1, 100000, 0, NULL),
				 -ESTALE);
	ck_assert_int_eq(memd_redeem_once(r, 65, 1, 100000, 0, NULL),
			 -EALREADY);
	memd_redeem_get_stats(r, &st);
	ck_assert_uint_eq(st.retired, 64);
	memd_redeem_destroy(r);
}
END_TEST

static Suite *redeem_suite(void)
{
	Suite *s = suite_create("redeem");
	TCase *tc = tcase_create("core");

	TU_ADD_TESTS(tc, create_rejects_bad_sizes, once_then_already_per_epoch,
		     burst_beyond_old_table, window_edge, matches_model,
		     epoch_slots);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(redeem_suite());
}
