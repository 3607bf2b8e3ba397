/* SPDX-License-Identifier: MIT */
/*
 * memd/lease.h - the slab and lease table: which slab is free, leased to
 * which session, or being reclaimed; session expiry on the monotonic clock.
 *
 * Pure bookkeeping: no I/O, no clock reads (callers pass now_ms), no
 * fabric. One lock inside makes every call safe from any thread (the
 * control thread grants and renews, the reclaim thread zeroes).
 *
 * Slab life:  FREE --grant--> LEASED --release/expiry--> RECLAIMING
 *             --(now >= reclaim_at) take_reclaim--> ZEROING --done--> FREE
 * A slab's generation increments at every grant, so (slab, generation)
 * names one lease for ever within a boot; memd's epoch fences boots.
 *
 * Groups: the slabs may be split into equal runs of consecutive slabs
 * (memd: one group per arena, i.e. per NUMA node). A grant can ask for a
 * group; the table keeps each group's free count, so picking one is O(1).
 *
 * Sessions expire at last_renew + ttl + grace; a renewal (heartbeat or
 * grant) pushes that out for every lease of the session at once. Sessions
 * whose client has disconnected are kept until they expire, so a killed
 * client's slabs come back after the TTL, not before.
 */
#ifndef TP_MEMD_LEASE_H
#define TP_MEMD_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct memd_lease_table;
struct memd_session;

enum memd_slab_state {
	MEMD_SLAB_FREE = 0,
	MEMD_SLAB_LEASED,
	MEMD_SLAB_RECLAIMING,  /* revoked; zeroed once reclaim_at passes */
	MEMD_SLAB_ZEROING,     /* taken by the reclaimer */
	MEMD_SLAB_QUARANTINED, /* never leased again (this boot) */
};

struct memd_lease_counts {
	uint32_t total, free, leased, reclaiming; /* reclaiming incl. zeroing */
	uint32_t quarantined; /* out of use for good: total counts them */
	uint32_t sessions;
	uint64_t expired_sessions, expired_leases; /* since creation */
};

/*
 * Creates a table of nslabs slabs, all FREE. ttl_ms + grace_ms is how long
 * a session lives without renewal; quiesce_ms is the delay between revoke
 * and zeroing. Returns 0 / -EINVAL / -ENOMEM.
 */
int memd_lease_table_create(uint32_t nslabs, uint32_t ttl_ms, uint32_t grace_ms,
			    uint32_t quiesce_ms, struct memd_lease_table **out);
/*
 * The same with the slabs split into ngroups groups of nslabs / ngroups
 * consecutive slabs each: group g is slabs [g * n, (g + 1) * n).
 * -EINVAL also when ngroups is 0 or does not divide nslabs.
 */
int memd_lease_table_create_groups(uint32_t nslabs, uint32_t ngroups,
				   uint32_t ttl_ms, uint32_t grace_ms,
				   uint32_t quiesce_ms,
				   struct memd_lease_table **out);
void memd_lease_table_destroy(struct memd_lease_table *t);

/* Opens a session with a fresh non-zero id. -ENOMEM. */
int memd_session_open(struct memd_lease_table *t, uint64_t now_ms,
		      struct memd_session **out);
uint64_t memd_session_id(const struct memd_session *s);
/*
 * Marks the session's client as gone: the session and its leases then live
 * until they expire, and the pointer must no longer be used by the caller
 * (the table frees it at expiry).
 */
void memd_session_detach(struct memd_lease_table *t, struct memd_session *s);
/*
 * Releases every lease of the session and frees it (client said BYE).
 * revoked(slab, arg) runs for each lease, under the table lock; it must
 * not call back into the table.
 */
void memd_session_close(struct memd_lease_table *t, struct memd_session *s,
			uint64_t now_ms, void (*revoked)(uint32_t, void *),
			void *arg);
/* Renews all of the session's leases. Returns how many it holds, or
 * -ESTALE when the session has already expired. */
int memd_session_renew(struct memd_lease_table *t, struct memd_session *s,
		       uint64_t now_ms);

/*
 * Leases a free slab to s (renewing s): memd_lease_grant_in() with group
 * MEMD_LEASE_ANY_GROUP. With one group, the lowest-numbered free slab.
 */
int memd_lease_grant(struct memd_lease_table *t, struct memd_session *s,
		     uint64_t now_ms, uint32_t *slab, uint32_t *generation);

#define MEMD_LEASE_ANY_GROUP (-1)
/*
 * Leases a free slab of group (0 .. ngroups - 1) to s, renewing s; with
 * MEMD_LEASE_ANY_GROUP from the group with the most free slabs (the
 * lowest-numbered group on a tie). Within the group, lowest-numbered free
 * slab first, so memory stays compact. Returns 0 with *slab and
 * *generation, or -ENOSPC when the group (any group) has no free slab,
 * -EINVAL for a group out of range, -ESTALE when s has expired.
 */
int memd_lease_grant_in(struct memd_lease_table *t, struct memd_session *s,
			uint64_t now_ms, int group, uint32_t *slab,
			uint32_t *generation);
/*
 * Ends the lease (slab, generation) held by s; the slab goes RECLAIMING.
 * revoked(slab, arg) (may be NULL) runs first, under the lock, as for the
 * other revocations: the registration is closed before the reclaimer can
 * see the slab, so no late write through the old key can land after the
 * zeroing (and be leased to the next tenant). Returns 0, or -ESTALE (no
 * such live lease: wrong generation, not leased, slab out of range),
 * -EPERM (leased by another session); revoked does not run then.
 */
int memd_lease_release(struct memd_lease_table *t, struct memd_session *s,
		       uint32_t slab, uint32_t generation, uint64_t now_ms,
		       void (*revoked)(uint32_t, void *), void *arg);
/*
 * Whether s holds the live lease (slab, generation) now: 0, or -ESTALE (no
 * such live lease), -EPERM (another session's). Changes nothing.
 */
int memd_lease_check(struct memd_lease_table *t, const struct memd_session *s,
		     uint32_t slab, uint32_t generation);
/*
 * Expires every session whose time is up (client gone or silent): its
 * leases go RECLAIMING and revoked() runs for each (under the lock; it
 * must not re-enter the table). A detached session is freed; an attached
 * one is marked dead (memd_session_is_dead) and freed when its owner
 * detaches it. A connected session that holds no lease does not expire
 * (there is nothing to take back): it is renewed instead.
 * Returns the number of sessions expired.
 */
uint32_t memd_lease_expire(struct memd_lease_table *t, uint64_t now_ms,
			   void (*revoked)(uint32_t, void *), void *arg);
/* True once the session has expired: it holds nothing and renews nothing. */
bool memd_session_is_dead(struct memd_lease_table *t,
			  const struct memd_session *s);
/* Monotonic ms at which the session expires unless renewed. */
uint64_t memd_session_expires_ms(struct memd_lease_table *t,
				 const struct memd_session *s);

/*
 * Takes up to max slabs whose quiesce delay is over (RECLAIMING ->
 * ZEROING) into slabs[]. Returns the count.
 */
size_t memd_lease_take_reclaim(struct memd_lease_table *t, uint64_t now_ms,
			       uint32_t *slabs, size_t max);
/* ZEROING -> FREE: the slab is zeroed and may be granted again. */
void memd_lease_reclaimed(struct memd_lease_table *t, uint32_t slab);
/*
 * ZEROING -> RECLAIMING again, due at at_ms (or after the last queued
 * slab, whichever is later): the reclaimer could not finish the slab for
 * a reason that passes (memd out of descriptors), so it tries again
 * rather than lose the slab. A slab in another state is left alone.
 */
void memd_lease_reclaim_retry(struct memd_lease_table *t, uint32_t slab,
			      uint64_t at_ms);
/*
 * ZEROING -> QUARANTINED: the slab is never granted again in this table's
 * life (memd: its registration could not be closed, so a key to it may
 * still work). A slab in another state is left alone.
 */
void memd_lease_quarantine(struct memd_lease_table *t, uint32_t slab);
/* Milliseconds until the next RECLAIMING slab is due (-1: none). */
int64_t memd_lease_next_reclaim_ms(struct memd_lease_table *t, uint64_t now_ms);

/* Changes the quiesce delay for slabs revoked from now on (SIGHUP). */
void memd_lease_set_quiesce(struct memd_lease_table *t, uint32_t quiesce_ms);

enum memd_slab_state memd_lease_slab_state(struct memd_lease_table *t,
					   uint32_t slab);
void memd_lease_get_counts(struct memd_lease_table *t,
			   struct memd_lease_counts *c);

struct memd_lease_group_counts {
	uint32_t total, free;
};
uint32_t memd_lease_ngroups(const struct memd_lease_table *t);
/* Slabs of group, and how many are free. -EINVAL for no such group. */
int memd_lease_get_group_counts(struct memd_lease_table *t, uint32_t group,
				struct memd_lease_group_counts *c);
/* The group with the most free slabs (lowest on a tie), -1 when no slab
 * is free at all. */
int memd_lease_fullest_group(struct memd_lease_table *t);

/*
 * Tenants (docs/cluster.md): a session belongs to the tenant it
 * authenticated as (0: none, a standalone memd). Set once, after AUTH.
 */
void memd_session_set_tenant(struct memd_lease_table *t, struct memd_session *s,
			     uint32_t tenant_id);

/* Leases the session holds now (0 once it has expired). */
uint32_t memd_session_nleases(struct memd_lease_table *t,
			      const struct memd_session *s);
/* Live sessions of tenant_id, detached ones that have not expired
 * included (they still hold what they leased). */
uint32_t memd_lease_tenant_sessions(struct memd_lease_table *t,
				    uint32_t tenant_id);

struct memd_tenant_usage {
	uint32_t tenant_id;
	uint32_t slabs;	   /* leased by its live sessions */
	uint32_t sessions; /* live (not expired) sessions */
};
/*
 * Usage per tenant over live sessions, at most max entries (tenants
 * beyond max are left out). Returns the count. One consistent snapshot.
 */
size_t memd_lease_tenant_usage(struct memd_lease_table *t,
			       struct memd_tenant_usage *out, size_t max);

struct memd_lease_info {
	uint32_t slab, generation;
	uint64_t session_id;
	uint32_t tenant_id;
	uint64_t expires_ms; /* the session's, monotonic */
};
/* Calls fn for every live lease, under the table lock (fn must not call
 * back into the table). */
void memd_lease_foreach(struct memd_lease_table *t,
			void (*fn)(void *arg, const struct memd_lease_info *l),
			void *arg);

#endif
