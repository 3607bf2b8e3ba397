// SPDX-License-Identifier: MIT
/*
 * memd/lease.c - slab states, leases and sessions (see lease.h).
 *
 * Threads: the control thread (grant, release, renew, expire, detach) and
 * the reclaim thread (take_reclaim, reclaimed) share the table through its
 * one mutex. Everything is O(1) per lease except picking the lowest free
 * slab, a scan of the group's part of a bitmap (64 slabs per word), and
 * picking the fullest group (a scan of at most a handful of counters).
 *
 * Invariants:
 * - A slab is on exactly one of: the free bitmap (FREE), one session's
 *   lease list (LEASED), the reclaim FIFO (RECLAIMING), nothing (ZEROING).
 * - live sessions are listed in order of expiry: every renewal sets
 *   expires = now + ttl + grace with a non-decreasing now, so moving the
 *   renewed session to the tail keeps the order; expiry pops the head.
 * - The reclaim FIFO is ordered by reclaim_at for the same reason.
 * - gfree[g] is the number of set bits of free_bits in group g; their sum
 *   is nfree.
 */
#include "memd/lease.h"
#include "fabric/locked.h"
#include "fabric/dlist.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define NIL UINT32_MAX

struct slab {
	enum memd_slab_state state;
	uint32_t generation;
	struct memd_session *owner; /* LEASED */
	uint32_t next, prev; /* session lease list, or reclaim FIFO (next) */
	uint64_t reclaim_at_ms;
};

struct memd_session {
	uint64_t id;
	uint32_t tenant; /* 0: none (standalone) */
	uint64_t expires_ms;
	uint32_t nleases;
	uint32_t head; /* first slab of the lease list */
	bool detached, dead;
	struct memd_session *next, *prev; /* live list, by expiry */
};

struct memd_lease_table {
	pthread_mutex_t lock;
	uint32_t nslabs;
	uint64_t life_ms; /* ttl + grace */
	uint64_t quiesce_ms;
	struct slab *slab;
	uint64_t *free_bits; /* bit set = FREE */
	uint32_t nfree, nleased, nreclaiming, nsessions, nquarantined;
	uint32_t ngroups, group_slabs; /* nslabs == ngroups * group_slabs */
	uint32_t *gfree;	       /* free slabs per group */
	uint32_t rq_head, rq_tail;     /* reclaim FIFO */
	struct memd_session *live_head, *live_tail;
	uint64_t next_id;
	uint64_t expired_sessions, expired_leases;
};

static void live_unlink(struct memd_lease_table *t, struct memd_session *s)
{
	TP_DLIST_UNLINK(t->live_head, t->live_tail, s, prev, next);
}

static void live_append(struct memd_lease_table *t, struct memd_session *s)
{
	TP_DLIST_APPEND(t->live_head, t->live_tail, s, prev, next);
}

static void do_renew_locked(struct memd_lease_table *t, struct memd_session *s,
			    uint64_t now_ms)
{
	uint64_t exp = now_ms + t->life_ms;

	/* A caller's clock never runs backwards, but keep the list order
	 * even if it did: expiry never moves earlier. */
	if (exp > s->expires_ms)
		s->expires_ms = exp;
	live_unlink(t, s);
	live_append(t, s);
}

int memd_lease_table_create(uint32_t nslabs, uint32_t ttl_ms, uint32_t grace_ms,
			    uint32_t quiesce_ms, struct memd_lease_table **out)
{
	return memd_lease_table_create_groups(nslabs, 1, ttl_ms, grace_ms,
					      quiesce_ms, out);
}

int memd_lease_table_create_groups(uint32_t nslabs, uint32_t ngroups,
				   uint32_t ttl_ms, uint32_t grace_ms,
				   uint32_t quiesce_ms,
				   struct memd_lease_table **out)
{
	struct memd_lease_table *t;
	size_t words;

	*out = NULL;
	if (nslabs == 0 || nslabs == NIL || ttl_ms == 0 || ngroups == 0 ||
	    nslabs % ngroups)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	words = (nslabs + 63) / 64;
	t->slab = calloc(nslabs, sizeof(*t->slab));
	t->free_bits = calloc(words, sizeof(uint64_t));
	t->gfree = calloc(ngroups, sizeof(*t->gfree));
	if (!t->slab || !t->free_bits || !t->gfree) {
		free(t->slab);
		free(t->free_bits);
		free(t->gfree);
		free(t);
		return -ENOMEM;
	}
	t->ngroups = ngroups;
	t->group_slabs = nslabs / ngroups;
	for (uint32_t g = 0; g < ngroups; g++)
		t->gfree[g] = t->group_slabs;
	pthread_mutex_init(&t->lock, NULL);
	t->nslabs = nslabs;
	t->life_ms = (uint64_t)ttl_ms + grace_ms;
	t->quiesce_ms = quiesce_ms;
	for (uint32_t i = 0; i < nslabs; i++) {
		t->slab[i].next = t->slab[i].prev = NIL;
		t->free_bits[i / 64] |= 1ull << (i % 64);
	}
	t->nfree = nslabs;
	t->rq_head = t->rq_tail = NIL;
	/* Session ids start at a random point so ids of two boots differ. */
	if (getrandom(&t->next_id, sizeof(t->next_id), 0) != sizeof(t->next_id))
		t->next_id = 1;
	t->next_id = (t->next_id >> 16) | 1;
	*out = t;
	return 0;
}

void memd_lease_table_destroy(struct memd_lease_table *t)
{
	struct memd_session *s, *n;

	if (!t)
		return;
	for (s = t->live_head; s; s = n) {
		n = s->next;
		free(s);
	}
	/* Dead attached sessions are owned by their connections, which are
	 * gone by now (the caller detached them first). */
	pthread_mutex_destroy(&t->lock);
	free(t->slab);
	free(t->free_bits);
	free(t->gfree);
	free(t);
}

int memd_session_open(struct memd_lease_table *t, uint64_t now_ms,
		      struct memd_session **out)
{
	struct memd_session *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->head = NIL;
	pthread_mutex_lock(&t->lock);
	s->id = t->next_id++;
	if (s->id == 0)
		s->id = t->next_id++;
	live_append(t, s);
	s->expires_ms = 0;
	do_renew_locked(t, s, now_ms);
	t->nsessions++;
	pthread_mutex_unlock(&t->lock);
	*out = s;
	return 0;
}

uint64_t memd_session_id(const struct memd_session *s)
{
	return s->id;
}

static void session_free_locked(struct memd_lease_table *t,
				struct memd_session *s)
{
	if (!s->dead)
		live_unlink(t, s);
	t->nsessions--;
	free(s);
}

/* LEASED -> RECLAIMING: off the session's list, onto the reclaim FIFO. */
static void do_revoke_locked(struct memd_lease_table *t, uint32_t i,
			     uint64_t now_ms)
{
	struct slab *sl = &t->slab[i];
	struct memd_session *s = sl->owner;

	if (sl->prev != NIL)
		t->slab[sl->prev].next = sl->next;
	else
		s->head = sl->next;
	if (sl->next != NIL)
		t->slab[sl->next].prev = sl->prev;
	s->nleases--;
	sl->owner = NULL;
	sl->state = MEMD_SLAB_RECLAIMING;
	sl->reclaim_at_ms = now_ms + t->quiesce_ms;
	sl->next = sl->prev = NIL;
	if (t->rq_tail != NIL)
		t->slab[t->rq_tail].next = i;
	else
		t->rq_head = i;
	t->rq_tail = i;
	t->nleased--;
	t->nreclaiming++;
}

static void revoke_all_locked(struct memd_lease_table *t,
			      struct memd_session *s, uint64_t now_ms,
			      void (*revoked)(uint32_t, void *), void *arg)
{
	while (s->head != NIL) {
		uint32_t i = s->head;

		if (revoked)
			revoked(i, arg);
		do_revoke_locked(t, i, now_ms);
	}
}

void memd_session_detach(struct memd_lease_table *t, struct memd_session *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->lock);
	if (s->dead)
		session_free_locked(t, s);
	else
		s->detached = true;
	pthread_mutex_unlock(&t->lock);
}

void memd_session_close(struct memd_lease_table *t, struct memd_session *s,
			uint64_t now_ms, void (*revoked)(uint32_t, void *),
			void *arg)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->lock);
	revoke_all_locked(t, s, now_ms, revoked, arg);
	session_free_locked(t, s);
	pthread_mutex_unlock(&t->lock);
}

int memd_session_renew(struct memd_lease_table *t, struct memd_session *s,
		       uint64_t now_ms)
{
	int n;

	pthread_mutex_lock(&t->lock);
	if (s->dead) {
		n = -ESTALE;
	} else {
		do_renew_locked(t, s, now_ms);
		n = (int)s->nleases;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

/* The group with the most free slabs, lowest first; -1 if none is free. */
static int do_fullest_group_locked(const struct memd_lease_table *t)
{
	int best = -1;

	for (uint32_t g = 0; g < t->ngroups; g++)
		if (t->gfree[g] && (best < 0 || t->gfree[g] > t->gfree[best]))
			best = (int)g;
	return best;
}

/* Lowest free slab in [lo, hi), or NIL. */
static uint32_t do_lowest_free_locked(const struct memd_lease_table *t,
				      uint32_t lo, uint32_t hi)
{
	for (uint32_t w = lo / 64; w <= (hi - 1) / 64; w++) {
		uint64_t bits = t->free_bits[w];

		if (w == lo / 64)
			bits &= ~0ull << (lo % 64);
		if (w == (hi - 1) / 64 && hi % 64)
			bits &= ~(~0ull << (hi % 64));
		if (bits)
			return w * 64 + (uint32_t)__builtin_ctzll(bits);
	}
	return NIL;
}

int memd_lease_grant(struct memd_lease_table *t, struct memd_session *s,
		     uint64_t now_ms, uint32_t *slab, uint32_t *generation)
{
	return memd_lease_grant_in(t, s, now_ms, MEMD_LEASE_ANY_GROUP, slab,
				   generation);
}

int memd_lease_grant_in(struct memd_lease_table *t, struct memd_session *s,
			uint64_t now_ms, int group, uint32_t *slab,
			uint32_t *generation)
{
	uint32_t i = NIL;
	struct slab *sl;

	if (group < MEMD_LEASE_ANY_GROUP ||
	    (group >= 0 && (uint32_t)group >= t->ngroups))
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (s->dead) {
		pthread_mutex_unlock(&t->lock);
		return -ESTALE;
	}
	if (group == MEMD_LEASE_ANY_GROUP)
		group = do_fullest_group_locked(t);
	if (group >= 0 && t->gfree[group])
		i = do_lowest_free_locked(t, (uint32_t)group * t->group_slabs,
					  ((uint32_t)group + 1) *
						  t->group_slabs);
	if (i == NIL) {
		pthread_mutex_unlock(&t->lock);
		return -ENOSPC;
	}
	t->free_bits[i / 64] &= ~(1ull << (i % 64));
	t->gfree[group]--;
	sl = &t->slab[i];
	sl->state = MEMD_SLAB_LEASED;
	sl->generation++;
	sl->owner = s;
	sl->prev = NIL;
	sl->next = s->head;
	if (s->head != NIL)
		t->slab[s->head].prev = i;
	s->head = i;
	s->nleases++;
	t->nfree--;
	t->nleased++;
	do_renew_locked(t, s, now_ms);
	*slab = i;
	*generation = sl->generation;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

int memd_lease_release(struct memd_lease_table *t, struct memd_session *s,
		       uint32_t slab, uint32_t generation, uint64_t now_ms,
		       void (*revoked)(uint32_t, void *), void *arg)
{
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (slab >= t->nslabs || t->slab[slab].state != MEMD_SLAB_LEASED ||
	    t->slab[slab].generation != generation) {
		ret = -ESTALE;
	} else if (t->slab[slab].owner != s) {
		ret = -EPERM;
	} else {
		if (revoked)
			revoked(slab, arg);
		do_revoke_locked(t, slab, now_ms);
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

int memd_lease_check(struct memd_lease_table *t, const struct memd_session *s,
		     uint32_t slab, uint32_t generation)
{
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	if (slab >= t->nslabs || t->slab[slab].state != MEMD_SLAB_LEASED ||
	    t->slab[slab].generation != generation)
		ret = -ESTALE;
	else if (t->slab[slab].owner != s)
		ret = -EPERM;
	pthread_mutex_unlock(&t->lock);
	return ret;
}

uint32_t memd_lease_expire(struct memd_lease_table *t, uint64_t now_ms,
			   void (*revoked)(uint32_t, void *), void *arg)
{
	uint32_t n = 0;

	pthread_mutex_lock(&t->lock);
	while (t->live_head && t->live_head->expires_ms <= now_ms) {
		struct memd_session *s = t->live_head;

		if (!s->nleases && !s->detached) {
			/* Nothing to protect: a connected client that holds
			 * no lease cannot lose one (a slow start-up, an idle
			 * tool). Its next grant renews it anyway. */
			do_renew_locked(t, s, now_ms);
			continue;
		}
		t->expired_leases += s->nleases;
		revoke_all_locked(t, s, now_ms, revoked, arg);
		live_unlink(t, s);
		s->dead = true;
		t->expired_sessions++;
		n++;
		if (s->detached) {
			t->nsessions--;
			free(s);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

bool memd_session_is_dead(struct memd_lease_table *t,
			  const struct memd_session *s)
{
	return TP_LOCKED_READ(&t->lock, s->dead);
}

uint64_t memd_session_expires_ms(struct memd_lease_table *t,
				 const struct memd_session *s)
{
	return TP_LOCKED_READ(&t->lock, s->expires_ms);
}

size_t memd_lease_take_reclaim(struct memd_lease_table *t, uint64_t now_ms,
			       uint32_t *slabs, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&t->lock);
	while (n < max && t->rq_head != NIL &&
	       t->slab[t->rq_head].reclaim_at_ms <= now_ms) {
		uint32_t i = t->rq_head;

		t->rq_head = t->slab[i].next;
		if (t->rq_head == NIL)
			t->rq_tail = NIL;
		t->slab[i].next = NIL;
		t->slab[i].state = MEMD_SLAB_ZEROING;
		slabs[n++] = i;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

void memd_lease_reclaimed(struct memd_lease_table *t, uint32_t slab)
{
	pthread_mutex_lock(&t->lock);
	if (slab < t->nslabs && t->slab[slab].state == MEMD_SLAB_ZEROING) {
		t->slab[slab].state = MEMD_SLAB_FREE;
		t->free_bits[slab / 64] |= 1ull << (slab % 64);
		t->gfree[slab / t->group_slabs]++;
		t->nreclaiming--;
		t->nfree++;
	}
	pthread_mutex_unlock(&t->lock);
}

void memd_lease_reclaim_retry(struct memd_lease_table *t, uint32_t slab,
			      uint64_t at_ms)
{
	pthread_mutex_lock(&t->lock);
	if (slab < t->nslabs && t->slab[slab].state == MEMD_SLAB_ZEROING) {
		struct slab *sl = &t->slab[slab];

		/* the queue stays in reclaim_at order */
		if (t->rq_tail != NIL &&
		    t->slab[t->rq_tail].reclaim_at_ms > at_ms)
			at_ms = t->slab[t->rq_tail].reclaim_at_ms;
		sl->state = MEMD_SLAB_RECLAIMING;
		sl->reclaim_at_ms = at_ms;
		sl->next = NIL;
		if (t->rq_tail != NIL)
			t->slab[t->rq_tail].next = slab;
		else
			t->rq_head = slab;
		t->rq_tail = slab;
	}
	pthread_mutex_unlock(&t->lock);
}

void memd_lease_quarantine(struct memd_lease_table *t, uint32_t slab)
{
	pthread_mutex_lock(&t->lock);
	if (slab < t->nslabs && t->slab[slab].state == MEMD_SLAB_ZEROING) {
		t->slab[slab].state = MEMD_SLAB_QUARANTINED;
		t->nreclaiming--;
		t->nquarantined++;
	}
	pthread_mutex_unlock(&t->lock);
}

int64_t memd_lease_next_reclaim_ms(struct memd_lease_table *t, uint64_t now_ms)
{
	int64_t d = -1;

	pthread_mutex_lock(&t->lock);
	if (t->rq_head != NIL) {
		uint64_t at = t->slab[t->rq_head].reclaim_at_ms;

		d = at > now_ms ? (int64_t)(at - now_ms) : 0;
	}
	pthread_mutex_unlock(&t->lock);
	return d;
}

void memd_lease_set_quiesce(struct memd_lease_table *t, uint32_t quiesce_ms)
{
	pthread_mutex_lock(&t->lock);
	t->quiesce_ms = quiesce_ms;
	pthread_mutex_unlock(&t->lock);
}

enum memd_slab_state memd_lease_slab_state(struct memd_lease_table *t,
					   uint32_t slab)
{
	enum memd_slab_state st = MEMD_SLAB_FREE;

	pthread_mutex_lock(&t->lock);
	if (slab < t->nslabs)
		st = t->slab[slab].state;
	pthread_mutex_unlock(&t->lock);
	return st;
}

void memd_lease_get_counts(struct memd_lease_table *t,
			   struct memd_lease_counts *c)
{
	pthread_mutex_lock(&t->lock);
	c->total = t->nslabs;
	c->free = t->nfree;
	c->leased = t->nleased;
	c->reclaiming = t->nreclaiming;
	c->quarantined = t->nquarantined;
	c->sessions = t->nsessions;
	c->expired_sessions = t->expired_sessions;
	c->expired_leases = t->expired_leases;
	pthread_mutex_unlock(&t->lock);
}

uint32_t memd_lease_ngroups(const struct memd_lease_table *t)
{
	return t->ngroups; /* constant after creation */
}

int memd_lease_get_group_counts(struct memd_lease_table *t, uint32_t group,
				struct memd_lease_group_counts *c)
{
	if (group >= t->ngroups)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	c->total = t->group_slabs;
	c->free = t->gfree[group];
	pthread_mutex_unlock(&t->lock);
	return 0;
}

int memd_lease_fullest_group(struct memd_lease_table *t)
{
	return TP_LOCKED_READ(&t->lock, do_fullest_group_locked(t));
}

void memd_session_set_tenant(struct memd_lease_table *t, struct memd_session *s,
			     uint32_t tenant_id)
{
	pthread_mutex_lock(&t->lock);
	s->tenant = tenant_id;
	pthread_mutex_unlock(&t->lock);
}

uint32_t memd_session_nleases(struct memd_lease_table *t,
			      const struct memd_session *s)
{
	return TP_LOCKED_READ(&t->lock, s->dead ? 0 : s->nleases);
}

uint32_t memd_lease_tenant_sessions(struct memd_lease_table *t,
				    uint32_t tenant_id)
{
	uint32_t n = 0;

	pthread_mutex_lock(&t->lock);
	for (const struct memd_session *s = t->live_head; s; s = s->next)
		n += !s->dead && s->tenant == tenant_id;
	pthread_mutex_unlock(&t->lock);
	return n;
}

size_t memd_lease_tenant_usage(struct memd_lease_table *t,
			       struct memd_tenant_usage *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&t->lock);
	for (struct memd_session *s = t->live_head; s; s = s->next) {
		size_t i;

		if (s->dead)
			continue;
		for (i = 0; i < n && out[i].tenant_id != s->tenant; i++)
			;
		if (i == n) {
			if (n == max)
				continue; /* the caller's bound: counted as
					   * truncated by it */
			out[n].tenant_id = s->tenant;
			out[n].slabs = out[n].sessions = 0;
			n++;
		}
		out[i].slabs += s->nleases;
		out[i].sessions++;
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

void memd_lease_foreach(struct memd_lease_table *t,
			void (*fn)(void *arg, const struct memd_lease_info *l),
			void *arg)
{
	pthread_mutex_lock(&t->lock);
	for (struct memd_session *s = t->live_head; s; s = s->next) {
		if (s->dead)
			continue;
		for (uint32_t i = s->head; i != NIL; i = t->slab[i].next) {
			struct memd_lease_info li = {
				.slab = i,
				.generation = t->slab[i].generation,
				.session_id = s->id,
				.tenant_id = s->tenant,
				.expires_ms = s->expires_ms,
			};

			fn(arg, &li);
		}
	}
	pthread_mutex_unlock(&t->lock);
}
