// SPDX-License-Identifier: MIT
/* tests/test_lease.c - the slab and lease table, without I/O or clocks. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "memd/lease.h"
#include "tests/testutil.h"

static struct memd_lease_table *t;

static void setup(void)
{
	/* 4 slabs, ttl 1000, grace 200, quiesce 50 */
	ck_assert_int_eq(memd_lease_table_create(4, 1000, 200, 50, &t), 0);
}

static void teardown(void)
{
	memd_lease_table_destroy(t);
	t = NULL;
}

static void count_revoked(uint32_t slab, void *arg)
{
	(void)slab;
	(*(int *)arg)++;
}

START_TEST(create_rejects_bad_args)
{
	struct memd_lease_table *x = (void *)1;

	ck_assert_int_eq(memd_lease_table_create(0, 1000, 0, 0, &x), -EINVAL);
	ck_assert_ptr_null(x);
	ck_assert_int_eq(memd_lease_table_create(4, 0, 0, 0, &x), -EINVAL);
}
END_TEST

START_TEST(grant_lowest_first_then_enospc)
{
	struct memd_session *s;
	struct memd_lease_counts c;
	uint32_t slab, gen;

	ck_assert_int_eq(memd_session_open(t, 0, &s), 0);
	ck_assert_uint_ne(memd_session_id(s), 0);
	for (uint32_t i = 0; i < 4; i++) {
		ck_assert_int_eq(memd_lease_grant(t, s, 0, &slab, &gen), 0);
		ck_assert_uint_eq(slab, i);
		ck_assert_uint_eq(gen, 1);
		ck_assert_int_eq(memd_lease_slab_state(t, i), MEMD_SLAB_LEASED);
	}
	ck_assert_int_eq(memd_lease_grant(t, s, 0, &slab, &gen), -ENOSPC);
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.free, 0);
	ck_assert_uint_eq(c.leased, 4);
	ck_assert_uint_eq(c.sessions, 1);
	ck_assert_int_eq(memd_session_renew(t, s, 10), 4);
	memd_session_close(t, s, 10, NULL, NULL);
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.leased, 0);
	ck_assert_uint_eq(c.reclaiming, 4);
	ck_assert_uint_eq(c.sessions, 0);
}
END_TEST

/* revoked() of memd_lease_release: which slabs, how often. */
static uint32_t revoked_slab, nrevoked;

static void note_revoked(uint32_t slab, void *arg)
{
	ck_assert_ptr_eq(arg, &nrevoked);
	revoked_slab = slab;
	nrevoked++;
}

START_TEST(release_checks_generation_and_owner)
{
	struct memd_session *a, *b;
	uint32_t slab, gen, slab2, gen2;
	uint32_t got[4];

	ck_assert_int_eq(memd_session_open(t, 0, &a), 0);
	ck_assert_int_eq(memd_session_open(t, 0, &b), 0);
	ck_assert_uint_ne(memd_session_id(a), memd_session_id(b));
	ck_assert_int_eq(memd_lease_grant(t, a, 0, &slab, &gen), 0);
	nrevoked = 0;
	ck_assert_int_eq(
		memd_lease_release(t, b, slab, gen, 0, note_revoked, &nrevoked),
		-EPERM);
	ck_assert_int_eq(memd_lease_release(t, a, slab, gen + 1, 0,
					    note_revoked, &nrevoked),
			 -ESTALE);
	ck_assert_int_eq(
		memd_lease_release(t, a, 99, gen, 0, note_revoked, &nrevoked),
		-ESTALE);
	ck_assert_uint_eq(nrevoked, 0); /* refused: the key stays */
	/* the owner's release closes the key (the callback) as it queues
	 * the slab for zeroing, never after */
	ck_assert_int_eq(
		memd_lease_release(t, a, slab, gen, 0, note_revoked, &nrevoked),
		0);
	ck_assert_uint_eq(nrevoked, 1);
	ck_assert_uint_eq(revoked_slab, slab);
	/* Twice: already reclaiming. */
	ck_assert_int_eq(
		memd_lease_release(t, a, slab, gen, 0, note_revoked, &nrevoked),
		-ESTALE);
	ck_assert_uint_eq(nrevoked, 1);
	ck_assert_int_eq(memd_lease_slab_state(t, slab), MEMD_SLAB_RECLAIMING);
	/* Not zeroed yet: a new grant takes another slab. */
	ck_assert_int_eq(memd_lease_grant(t, b, 0, &slab2, &gen2), 0);
	ck_assert_uint_ne(slab2, slab);
	/* Quiesce not over at 49 ms, over at 50. */
	ck_assert_uint_eq(memd_lease_take_reclaim(t, 49, got, 4), 0);
	ck_assert_int_eq(memd_lease_next_reclaim_ms(t, 49), 1);
	ck_assert_uint_eq(memd_lease_take_reclaim(t, 50, got, 4), 1);
	ck_assert_uint_eq(got[0], slab);
	ck_assert_int_eq(memd_lease_slab_state(t, slab), MEMD_SLAB_ZEROING);
	ck_assert_int_eq(memd_lease_next_reclaim_ms(t, 50), -1);
	memd_lease_reclaimed(t, slab);
	ck_assert_int_eq(memd_lease_slab_state(t, slab), MEMD_SLAB_FREE);
	/* Regranted with a new generation: the old name stays dead. */
	ck_assert_int_eq(memd_lease_grant(t, b, 60, &slab2, &gen2), 0);
	ck_assert_uint_eq(slab2, slab);
	ck_assert_uint_eq(gen2, gen + 1);
	ck_assert_int_eq(memd_lease_release(t, b, slab, gen, 60, NULL, NULL),
			 -ESTALE);
	memd_session_close(t, a, 60, NULL, NULL);
	memd_session_close(t, b, 60, NULL, NULL);
}
END_TEST

/*
 * A slab whose zeroing could not finish for a passing reason (memd out of
 * descriptors at a renewal) goes back on the queue, due later and behind
 * those already queued; it is neither lost nor granted before it is
 * zeroed.
 */
START_TEST(reclaim_retry_requeues)
{
	struct memd_session *a;
	uint32_t s0, s1, g, got[4];

	ck_assert_int_eq(memd_session_open(t, 0, &a), 0);
	ck_assert_int_eq(memd_lease_grant(t, a, 0, &s0, &g), 0);
	ck_assert_int_eq(memd_lease_grant(t, a, 0, &s1, &g), 0);
	ck_assert_int_eq(memd_lease_release(t, a, s0, 1, 0, NULL, NULL), 0);
	ck_assert_uint_eq(memd_lease_take_reclaim(t, 50, got, 4), 1);
	ck_assert_uint_eq(got[0], s0);
	/* s1 queued (due at 100) while s0 is being zeroed */
	ck_assert_int_eq(memd_lease_release(t, a, s1, 1, 50, NULL, NULL), 0);
	memd_lease_reclaim_retry(t, s0, 60);
	ck_assert_int_eq(memd_lease_slab_state(t, s0), MEMD_SLAB_RECLAIMING);
	/* not granted while it waits */
	ck_assert_int_eq(memd_lease_grant(t, a, 60, &s0, &g), 0);
	ck_assert_uint_ne(s0, got[0]);
	s0 = got[0];
	/* due behind s1, not before it */
	ck_assert_uint_eq(memd_lease_take_reclaim(t, 99, got, 4), 0);
	ck_assert_uint_eq(memd_lease_take_reclaim(t, 100, got, 4), 2);
	ck_assert_uint_eq(got[0], s1);
	ck_assert_uint_eq(got[1], s0);
	memd_lease_reclaimed(t, s0);
	ck_assert_int_eq(memd_lease_slab_state(t, s0), MEMD_SLAB_FREE);
	/* a slab in another state is left alone */
	memd_lease_reclaim_retry(t, s0, 200);
	ck_assert_int_eq(memd_lease_slab_state(t, s0), MEMD_SLAB_FREE);
	memd_lease_reclaimed(t, s1);
	memd_session_close(t, a, 200, NULL, NULL);
}
END_TEST

START_TEST(expiry_follows_renewal)
{
	struct memd_session *a, *b;
	uint32_t slab, gen;
	int revoked = 0;
	struct memd_lease_counts c;

	ck_assert_int_eq(memd_session_open(t, 0, &a), 0);
	ck_assert_int_eq(memd_session_open(t, 0, &b), 0);
	ck_assert_int_eq(memd_lease_grant(t, a, 0, &slab, &gen), 0);
	ck_assert_int_eq(memd_lease_grant(t, a, 0, &slab, &gen), 0);
	ck_assert_int_eq(memd_lease_grant(t, b, 0, &slab, &gen), 0);
	ck_assert_uint_eq(memd_session_expires_ms(t, a), 1200);
	/* b renews at 1000; a does not. */
	ck_assert_int_eq(memd_session_renew(t, b, 1000), 1);
	ck_assert_uint_eq(memd_lease_expire(t, 1199, count_revoked, &revoked),
			  0);
	ck_assert_uint_eq(memd_lease_expire(t, 1200, count_revoked, &revoked),
			  1);
	ck_assert_int_eq(revoked, 2);
	ck_assert(memd_session_is_dead(t, a));
	ck_assert(!memd_session_is_dead(t, b));
	ck_assert_int_eq(memd_session_renew(t, a, 1200), -ESTALE);
	ck_assert_int_eq(memd_lease_grant(t, a, 1200, &slab, &gen), -ESTALE);
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.expired_sessions, 1);
	ck_assert_uint_eq(c.expired_leases, 2);
	ck_assert_uint_eq(c.sessions, 2); /* a is dead but still attached */
	memd_session_detach(t, a);	  /* frees the dead session */
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.sessions, 1);
	ck_assert_uint_eq(memd_lease_expire(t, 2200, count_revoked, &revoked),
			  1);
	ck_assert_int_eq(revoked, 3);
	memd_session_detach(t, b);
}
END_TEST

START_TEST(detached_session_lives_until_ttl)
{
	struct memd_session *a;
	uint32_t slab, gen;
	struct memd_lease_counts c;
	int revoked = 0;

	ck_assert_int_eq(memd_session_open(t, 100, &a), 0);
	ck_assert_int_eq(memd_lease_grant(t, a, 100, &slab, &gen), 0);
	memd_session_detach(t, a); /* client killed */
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.leased, 1);
	ck_assert_uint_eq(memd_lease_expire(t, 1299, count_revoked, &revoked),
			  0);
	ck_assert_uint_eq(memd_lease_expire(t, 1300, count_revoked, &revoked),
			  1);
	ck_assert_int_eq(revoked, 1);
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.sessions, 0);
	ck_assert_uint_eq(c.leased, 0);
	ck_assert_uint_eq(c.reclaiming, 1);
}
END_TEST

/*
 * A connected session without leases is renewed while its client is
 * connected (an idle tool, a slow start-up: nothing to take back), but
 * never for longer: memd closes an idle connection (idle_timeout,
 * tests/test_memd_hostile.c) and detaches the session, which then
 * expires like any other and is freed. A session that holds a lease is
 * expired by silence alone.
 */
START_TEST(leaseless_session_lives_while_connected_only)
{
	struct memd_session *a, *b;
	struct memd_lease_counts c;
	uint32_t slab, gen;
	int revoked = 0;

	ck_assert_int_eq(memd_session_open(t, 0, &a), 0);
	ck_assert_uint_eq(memd_lease_expire(t, 5000, count_revoked, &revoked),
			  0);
	ck_assert(!memd_session_is_dead(t, a));
	ck_assert_uint_eq(memd_session_expires_ms(t, a), 6200);
	/* its connection closes (idle_timeout): from then on it expires */
	memd_session_detach(t, a);
	ck_assert_uint_eq(memd_lease_expire(t, 6199, count_revoked, &revoked),
			  0);
	ck_assert_uint_eq(memd_lease_expire(t, 6200, count_revoked, &revoked),
			  1);
	memd_lease_get_counts(t, &c);
	ck_assert_uint_eq(c.sessions, 0);
	ck_assert_int_eq(revoked, 0);

	/* Once it holds a lease, silence costs it, connected or not. */
	ck_assert_int_eq(memd_session_open(t, 5000, &b), 0);
	ck_assert_int_eq(memd_lease_grant(t, b, 5000, &slab, &gen), 0);
	ck_assert_uint_eq(memd_lease_expire(t, 6200, count_revoked, &revoked),
			  1);
	ck_assert(memd_session_is_dead(t, b));
	ck_assert_int_eq(revoked, 1);
	memd_session_detach(t, b);
}
END_TEST

START_TEST(many_sessions_expire_in_order)
{
	struct memd_session *s[100];
	int revoked = 0;

	for (int i = 0; i < 100; i++) {
		ck_assert_int_eq(memd_session_open(t, (uint64_t)i, &s[i]), 0);
		memd_session_detach(t, s[i]);
	}
	ck_assert_uint_eq(
		memd_lease_expire(t, 1200 + 49, count_revoked, &revoked), 50);
	ck_assert_uint_eq(memd_lease_expire(t, 5000, count_revoked, &revoked),
			  50);
}
END_TEST

/* Groups (memd: one per NUMA node's arena) over slabs that straddle
 * bitmap words: 3 groups of 50 slabs. */
START_TEST(groups_grant_within_and_fullest)
{
	struct memd_lease_table *g;
	struct memd_lease_group_counts gc;
	struct memd_session *s;
	uint32_t slab, gen;

	ck_assert_int_eq(memd_lease_table_create_groups(150, 4, 1000, 0, 0, &g),
			 -EINVAL);
	ck_assert_ptr_null(g);
	ck_assert_int_eq(memd_lease_table_create_groups(150, 0, 1000, 0, 0, &g),
			 -EINVAL);
	ck_assert_int_eq(memd_lease_table_create_groups(150, 3, 1000, 0, 0, &g),
			 0);
	ck_assert_uint_eq(memd_lease_ngroups(g), 3);
	ck_assert_uint_eq(memd_lease_ngroups(t), 1);
	ck_assert_int_eq(memd_session_open(g, 0, &s), 0);

	/* In a group: its lowest free slab, never another group's. */
	ck_assert_int_eq(memd_lease_grant_in(g, s, 0, 1, &slab, &gen), 0);
	ck_assert_uint_eq(slab, 50);
	ck_assert_int_eq(memd_lease_grant_in(g, s, 0, 2, &slab, &gen), 0);
	ck_assert_uint_eq(slab, 100);
	ck_assert_int_eq(memd_lease_grant_in(g, s, 0, 3, &slab, &gen), -EINVAL);
	ck_assert_int_eq(memd_lease_grant_in(g, s, 0, -2, &slab, &gen),
			 -EINVAL);
	ck_assert_int_eq(memd_lease_get_group_counts(g, 1, &gc), 0);
	ck_assert_uint_eq(gc.total, 50);
	ck_assert_uint_eq(gc.free, 49);
	ck_assert_int_eq(memd_lease_get_group_counts(g, 3, &gc), -EINVAL);

	/* Any group: the fullest, lowest on a tie: group 0 now. */
	ck_assert_int_eq(memd_lease_fullest_group(g), 0);
	ck_assert_int_eq(memd_lease_grant(g, s, 0, &slab, &gen), 0);
	ck_assert_uint_eq(slab, 0);
	/* 49 free each: group 0 again (tie), then ... */
	ck_assert_int_eq(
		memd_lease_grant_in(g, s, 0, MEMD_LEASE_ANY_GROUP, &slab, &gen),
		0);
	ck_assert_uint_eq(slab, 1);
	/* ... group 1 and 2 have 49, group 0 has 48. */
	ck_assert_int_eq(memd_lease_fullest_group(g), 1);

	/* Empty group 1 (slabs 51..99, crossing the word at 64). */
	for (uint32_t i = 51; i < 100; i++) {
		ck_assert_int_eq(memd_lease_grant_in(g, s, 0, 1, &slab, &gen),
				 0);
		ck_assert_uint_eq(slab, i);
	}
	ck_assert_int_eq(memd_lease_grant_in(g, s, 0, 1, &slab, &gen), -ENOSPC);
	ck_assert_int_eq(memd_lease_fullest_group(g), 2);

	/* Freed slabs count for their group once zeroed. */
	ck_assert_int_eq(memd_lease_release(g, s, 77, 1, 10, NULL, NULL), 0);
	ck_assert_int_eq(memd_lease_get_group_counts(g, 1, &gc), 0);
	ck_assert_uint_eq(gc.free, 0);
	ck_assert_uint_eq(memd_lease_take_reclaim(g, 10, &slab, 1), 1);
	ck_assert_uint_eq(slab, 77);
	memd_lease_reclaimed(g, 77);
	ck_assert_int_eq(memd_lease_get_group_counts(g, 1, &gc), 0);
	ck_assert_uint_eq(gc.free, 1);
	ck_assert_int_eq(memd_lease_grant_in(g, s, 20, 1, &slab, &gen), 0);
	ck_assert_uint_eq(slab, 77);
	ck_assert_uint_eq(gen, 2);

	memd_session_close(g, s, 30, NULL, NULL);
	memd_lease_table_destroy(g);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lease");
	TCase *tc = tu_tcase(s, "table", 0);

	tcase_add_checked_fixture(tc, setup, teardown);
	TU_ADD_TESTS(
		tc, create_rejects_bad_args, grant_lowest_first_then_enospc,
		release_checks_generation_and_owner, reclaim_retry_requeues,
		expiry_follows_renewal, detached_session_lives_until_ttl,
		leaseless_session_lives_while_connected_only,
		many_sessions_expire_in_order, groups_grant_within_and_fullest);
	return tu_run_suite(s);
}
