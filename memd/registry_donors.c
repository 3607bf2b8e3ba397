// SPDX-License-Identifier: MIT
/*
 * memd/registry_donors.c - the registry's donors (registry.h,
 * docs/cluster.md): join (a new identity is made durable first), report,
 * loss, liveness (down after MISSED_REPORTS report intervals of silence,
 * with memd-ctl's own stalls not counted: loop_gap), and the soft state
 * their reports feed: each tenant's usage, the live grants (reservations
 * that placement makes and reports or expiry end) and the KV allowances
 * a report's answer carries.
 *
 * Threads: memd-ctl (join, report, loss, tick, loop_gap), under r->lock;
 * expire_locked runs at the start of every entry point of the registry.
 *
 * Invariants (registry_int.h): a donor's usage counts iff it is up; the
 * reserved sums are those of the live grants, which all belong to their
 * donors' current incarnations. A new incarnation (join with another
 * epoch) or a donor marked down loses its usage and grants at once.
 */
#include "memd/registry_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- soft state: usage and grants ------------------------------------- */

/* Adds (sign > 0) or removes d's reported usage from its tenants' sums. */
static void usage_apply_locked(struct memd_registry *r, const struct donor *d,
			       int sign)
{
	for (uint32_t i = 0; i < d->nusage; i++) {
		struct tenant *t = reg_tenant_by_id(r, d->usage[i].tenant_id);

		if (!t)
			continue;
		if (sign > 0) {
			t->used_slabs += d->usage[i].slabs;
			t->kv_slabs += d->usage[i].kv_slabs;
		} else {
			t->used_slabs -= d->usage[i].slabs;
			t->kv_slabs -= d->usage[i].kv_slabs;
		}
	}
}

static void usage_clear_locked(struct memd_registry *r, struct donor *d)
{
	if (d->up)
		usage_apply_locked(r, d, -1);
	free(d->usage);
	d->usage = NULL;
	d->nusage = 0;
}

/* The up donors that are not draining, in order of id: d's rank among
 * them (-1: d is not one) and their number. */
static int kv_rank_locked(const struct memd_registry *r, const struct donor *d,
			  uint32_t *n)
{
	int rank = -1;

	*n = 0;
	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *x = &r->donor[i];

		if (!x->up || x->draining)
			continue;
		if (x == d)
			rank = (int)*n;
		(*n)++;
	}
	return rank;
}

uint64_t reg_kv_draining_locked(const struct memd_registry *r, uint32_t tenant)
{
	uint64_t n = 0;

	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *x = &r->donor[i];

		if (!x->up || !x->draining)
			continue;
		for (uint32_t k = 0; k < x->nusage; k++)
			if (x->usage[k].tenant_id == tenant)
				n += x->usage[k].kv_slabs;
	}
	return n;
}

uint64_t reg_kv_demand_locked(const struct tenant *t, uint64_t now_ms)
{
	return now_ms < t->kv_demand_until_ms ? t->kv_demand_slabs : 0;
}

/*
 * The KV allowances for d's report, into ok->kv[] (cluster.md, "KV memory
 * and quotas"): one for each tenant (the first WIRE_MAX_TENANTS by id),
 * so a donor knows its allowance before a tenant's first KV put. What the
 * tenant's quota leaves for KV memory, after its other usage and its
 * reserved grants, after its KV slabs on draining donors, and after
 * what a PLACE refused for KV memory asked (its demand, registry_place.c),
 *   kv = quota - (used - kv_used) - reserved - kv_on_draining - demand
 * is split evenly over the up donors that are not draining (the first
 * kv % n of them, by id, get one slab more): rendezvous hashing spreads a
 * tenant's keys evenly, so an even split starves no donor. A draining
 * donor keeps what it holds. A donor holding more than its allowance
 * evicts the tenant's entries until it does not (memd_kv_trim).
 */
static void kv_allowances_locked(struct memd_registry *r, const struct donor *d,
				 uint64_t now_ms,
				 struct wire_donor_report_ok *ok)
{
	uint32_t n, nd = 0;
	int rank = kv_rank_locked(r, d, &n);
	bool draining = false;

	for (size_t i = 0; i < r->ndonors && !draining; i++)
		draining = r->donor[i].up && r->donor[i].draining;
	ok->nkv = 0;
	for (size_t i = 0; i < r->ntenants && nd < WIRE_MAX_TENANTS; i++) {
		const struct tenant *t = &r->tenant[i];
		uint64_t quota = t->quota_bytes / r->slab_bytes, other, kv,
			 cap = 0;

		other = t->used_slabs - t->kv_slabs + t->reserved_slabs +
			(draining ? reg_kv_draining_locked(r, t->id) : 0) +
			reg_kv_demand_locked(t, now_ms);
		kv = quota > other ? quota - other : 0;
		if (rank < 0) { /* draining: what it holds, no more */
			for (uint32_t k = 0; k < d->nusage; k++)
				if (d->usage[k].tenant_id == t->id)
					cap = d->usage[k].kv_slabs;
		} else {
			cap = kv / n + ((uint64_t)rank < kv % n ? 1 : 0);
		}
		ok->kv[nd].tenant_id = t->id;
		ok->kv[nd].kv_slabs_max =
			cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
		nd++;
	}
	ok->nkv = (uint16_t)nd;
}

static void grant_drop_locked(struct memd_registry *r, size_t i)
{
	struct grant *g = &r->grant[i];
	struct tenant *t = reg_tenant_by_id(r, g->tenant_id);
	struct donor *d = reg_donor_by_id(r, g->donor_id);

	if (t)
		t->reserved_slabs -= g->nslabs;
	if (d)
		d->reserved_slabs -= g->nslabs;
	r->grant[i] = r->grant[--r->ngrants];
}

static void donor_grants_drop_locked(struct memd_registry *r, uint32_t id)
{
	for (size_t i = 0; i < r->ngrants;)
		if (r->grant[i].donor_id == id)
			grant_drop_locked(r, i);
		else
			i++;
}

static void donor_down_locked(struct memd_registry *r, struct donor *d,
			      const char *why)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	usage_clear_locked(r, d);
	d->up = false;
	d->reported = false;
	reg_donor_set_reason(d, "%s", why);
	memd_log(LOG_WARNING,
		 "registry: donor down name=%s id=%u epoch=%016" PRIx64
		 " reason=\"%s\"",
		 memd_log_quote(d->name, logq, sizeof(logq)), d->id, d->epoch,
		 d->reason);
}

/* Liveness and grant expiry as of now_ms; every entry point runs it, so
 * what now_ms says decides, whether or not tick ran. */
void reg_expire_locked(struct memd_registry *r, uint64_t now_ms)
{
	uint64_t limit = (uint64_t)MISSED_REPORTS * r->report_ms;

	for (size_t i = 0; i < r->ndonors; i++) {
		struct donor *d = &r->donor[i];
		char why[64];

		if (!d->up || now_ms <= d->last_report_ms ||
		    now_ms - d->last_report_ms <= limit)
			continue;
		snprintf(why, sizeof(why), "no report for %" PRIu64 " ms",
			 now_ms - d->last_report_ms);
		donor_down_locked(r, d, why);
	}
	/* Every call comes here: scan the grants only when the earliest
	 * deadline has passed (a full scan per call cost half of memd's CPU
	 * with 49k grants outstanding: docs/bench/registry.md). */
	if (now_ms < r->grant_next_deadline_ms)
		return;
	r->grant_next_deadline_ms = UINT64_MAX;
	for (size_t i = 0; i < r->ngrants;)
		if (r->grant[i].deadline_ms <= now_ms) {
			grant_drop_locked(r, i);
		} else {
			if (r->grant[i].deadline_ms < r->grant_next_deadline_ms)
				r->grant_next_deadline_ms =
					r->grant[i].deadline_ms;
			i++;
		}
}

/* ---- membership --------------------------------------------------------- */

/* How long past MISSED_REPORTS + 1 report intervals a loaded list waits
 * for its donors: memd-donor reconnects with a backoff of up to 2 s. */
#define REJOIN_MARGIN_MS 3000

static int id_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static bool is_member_locked(const struct memd_registry *r, uint32_t id)
{
	return r->pub_valid &&
	       bsearch(&id, r->pub, r->npub, sizeof(id), id_cmp) != NULL;
}

/* Donors of a loaded list that have not joined this registry yet. */
static size_t members_pending_locked(const struct memd_registry *r)
{
	size_t n = 0;

	for (size_t i = 0; i < r->ndonors; i++)
		n += !r->donor[i].joined && is_member_locked(r, r->donor[i].id);
	return n;
}

/*
 * The membership (docs/kv.md, "Donors that come and go"): clients hash
 * KV keys over the published list, and a donor serves a KV request only
 * under the sequence it was routed by. A sequence names one list for
 * good: it is written (registry.json or etcd) before anything carries
 * it, so a restarted registry, or the next leader, never hands out the
 * same number for another list. Until a write succeeds the old list and
 * sequence stay published: a donor that went down stays listed (its keys
 * fail as unreachable), one that came up is not (no keys go to it).
 */
/*
 * A sequence is given to clients (MEMBERS, DONORS) only once every up
 * donor whose link hears (protocol 6) has confirmed it (docs/kv.md,
 * "Donors that come and go"): from then on each of those donors refuses
 * a request routed by an older list (ESTALE), and has forgotten the keys
 * the new list no longer ranks it first or second for, so no client can
 * delete or replace a key through the new list at homes that an older
 * list's client would miss. Until then clients keep the list they have
 * (the last one given out). memd-ctl tells every hearing link of a new
 * sequence at once (DONOR_NEWS), so this takes a few round trips.
 */
static void members_publish_locked(struct memd_registry *r)
{
	uint32_t *ids;

	if (!r->pub_valid || r->pub_restored || r->shown == r->membership)
		return;
	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *d = &r->donor[i];

		if (d->up && d->hears && d->heard < r->membership)
			return;
	}
	ids = realloc(r->shown_ids, (r->npub ? r->npub : 1) * sizeof(*ids));
	if (!ids)
		return; /* tried again at the next call */
	if (r->npub)
		memcpy(ids, r->pub, r->npub * sizeof(*ids));
	r->shown_ids = ids;
	r->nshown = r->npub;
	r->shown = r->membership;
	memd_log(LOG_NOTICE,
		 "registry: membership=%" PRIu64
		 " given to clients (every donor up confirmed it)",
		 r->shown);
}

/* How long past MISSED_REPORTS report intervals a donor that reports has
 * to confirm a new membership: its memd-ctl acts on the list at its next
 * tick, and a donor marked down for being slow loses its KV entries. */
#define CONFIRM_MARGIN_MS 5000

/* A donor up that has not confirmed the newest sequence MISSED_REPORTS
 * report intervals and CONFIRM_MARGIN_MS after it was written is marked
 * down: out of the membership, so that the sequence can be given out
 * (its next report is answered ESTALE, and it joins again, a new
 * membership). A donor that stopped reporting is marked down sooner, by
 * liveness (reg_expire_locked). */
static void members_unheard_locked(struct memd_registry *r, uint64_t now_ms)
{
	uint64_t limit =
		(uint64_t)MISSED_REPORTS * r->report_ms + CONFIRM_MARGIN_MS;

	if (!r->pub_valid || r->pub_restored || r->shown == r->membership ||
	    now_ms <= r->members_since_ms + limit)
		return;
	for (size_t i = 0; i < r->ndonors; i++) {
		struct donor *d = &r->donor[i];
		char why[96];

		if (!d->up || !d->hears || d->heard >= r->membership)
			continue;
		snprintf(why, sizeof(why),
			 "did not confirm membership %" PRIu64 " for %" PRIu64
			 " ms",
			 r->membership, now_ms - r->members_since_ms);
		donor_down_locked(r, d, why);
	}
}

/*
 * The membership (docs/kv.md, "Donors that come and go"): clients hash
 * KV keys over the published list, and a donor serves a KV request only
 * under the sequence it was routed by. A sequence names one list for
 * good: it is written (registry.json or etcd) before anything carries
 * it, so a restarted registry, or the next leader, never hands out the
 * same number for another list. Until a write succeeds the old list and
 * sequence stay published: a donor that went down stays listed (its keys
 * fail as unreachable), one that came up is not (no keys go to it). A
 * member that restarted (members_dirty) gets a new sequence for the same
 * list: the spill files it brought are not kept under it.
 */
void reg_members_sync_locked(struct memd_registry *r, uint64_t now_ms)
{
	uint32_t *cur;
	size_t n = 0;
	struct state_edit e;
	char err[256];

	members_unheard_locked(r, now_ms);
	cur = malloc((r->ndonors ? r->ndonors : 1) * sizeof(*cur));
	if (!cur)
		return;
	if (r->pub_restored && !r->restored_until_ms)
		r->restored_until_ms =
			now_ms + (uint64_t)(MISSED_REPORTS + 1) * r->report_ms +
			REJOIN_MARGIN_MS;
	if (r->pub_restored &&
	    (now_ms >= r->restored_until_ms || !members_pending_locked(r)))
		r->pub_restored = false;
	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *d = &r->donor[i];

		/* a loaded list's donors that have not joined this registry
		 * yet still count, until restored_until_ms */
		if (reg_donor_state(d) == MEMD_DONOR_UP ||
		    (r->pub_restored && !d->joined &&
		     is_member_locked(r, d->id)))
			cur[n++] = d->id;
	}
	qsort(cur, n, sizeof(*cur), id_cmp);
	if ((r->pub_valid && !r->members_dirty && n == r->npub &&
	     (!n || !memcmp(cur, r->pub, n * sizeof(*cur)))) ||
	    now_ms < r->pub_retry_ms) {
		free(cur);
		goto publish;
	}
	e = reg_state_now(r);
	e.membership = r->membership + 1;
	e.members = cur;
	e.nmembers = n;
	if (reg_state_write_logged(r, &e, err, sizeof(err))) {
		r->pub_retry_ms = now_ms + 1000; /* the log at most 1/s */
		free(cur);
		goto publish;
	}
	r->pub_retry_ms = 0;
	r->members_dirty = false;
	free(r->pub);
	r->pub = cur;
	r->npub = n;
	r->pub_valid = true;
	r->membership = e.membership;
	r->members_since_ms = now_ms;
	memd_log(LOG_NOTICE, "registry: membership=%" PRIu64 " donors=%zu",
		 r->membership, n);
publish:
	members_publish_locked(r);
}

uint64_t memd_registry_membership(struct memd_registry *r)
{
	uint64_t m;

	pthread_mutex_lock(&r->lock);
	m = r->pub_valid ? r->membership : 0;
	pthread_mutex_unlock(&r->lock);
	return m;
}

int memd_registry_members(struct memd_registry *r, uint64_t now_ms, bool newest,
			  struct wire_donors_ok *out, uint32_t *nlisted,
			  char *err, size_t errlen)
{
	const uint32_t *ids;
	size_t nids;
	int rc = 0;

	out->count = 0;
	out->membership = 0;
	*nlisted = 0;
	pthread_mutex_lock(&r->lock);
	if (!reg_is_serving_locked(r, now_ms, err, errlen)) {
		rc = -EAGAIN;
		goto out;
	}
	reg_expire_locked(r, now_ms);
	reg_members_sync_locked(r, now_ms);
	if (!r->pub_valid) { /* its first write failed */
		set_err(err, errlen,
			"registry: its donor list is not saved yet (state "
			"not written); ask again");
		rc = -EAGAIN;
		goto out;
	}
	if (r->pub_restored) {
		set_err(err, errlen,
			"registry: waiting %" PRIu64
			" ms more for %zu donors of membership %" PRIu64
			" to join again; ask again",
			r->restored_until_ms - now_ms,
			members_pending_locked(r), r->membership);
		rc = -EAGAIN;
		goto out;
	}
	if (!newest && !r->shown) {
		set_err(err, errlen,
			"registry: waiting for its donors to confirm "
			"membership %" PRIu64 "; ask again",
			r->membership);
		rc = -EAGAIN;
		goto out;
	}
	out->membership = newest ? r->membership : r->shown;
	ids = newest ? r->pub : r->shown_ids;
	nids = newest ? r->npub : r->nshown;
	for (size_t i = 0; i < r->ndonors; i++) {
		const struct donor *d = &r->donor[i];
		struct wire_donor_entry *e;

		if (!bsearch(&d->id, ids, nids, sizeof(d->id), id_cmp))
			continue;
		if ((*nlisted)++ >= WIRE_MAX_DONORS)
			continue;
		e = &out->donor[out->count++];
		e->donor_id = d->id;
		e->epoch = d->epoch;
		snprintf(e->name, sizeof(e->name), "%s", d->name);
		snprintf(e->addr, sizeof(e->addr), "%s", d->addr);
	}
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* ---- donors ------------------------------------------------------------ */

int memd_registry_donor_join(struct memd_registry *r,
			     const struct wire_donor_join *j, uint64_t now_ms,
			     struct wire_donor_join_ok *ok, char *err,
			     size_t errlen)
{
	char logq[MEMD_LOG_QUOTE_MAX(WIRE_NAME_MAX)];
	char have[32], want[32];
	struct donor *d;
	uint32_t nfree = 0;
	int rc;

	if (!j || !ok)
		return -EINVAL;
	if (strnlen(j->name, WIRE_NAME_MAX) >= WIRE_NAME_MAX ||
	    !wire_name_is_valid(j->name)) {
		set_err(err, errlen,
			"donor name '%.63s' is not [A-Za-z0-9_.-], 1 to %d "
			"characters",
			j->name, WIRE_NAME_MAX - 1);
		return -EINVAL;
	}
	if (strnlen(j->addr, WIRE_HOSTPORT_MAX) >= WIRE_HOSTPORT_MAX ||
	    !j->addr[0]) {
		set_err(err, errlen, "donor '%s': no address", j->name);
		return -EINVAL;
	}
	if (j->slab_bytes != r->slab_bytes) {
		memd_log_bytes(j->slab_bytes, have, sizeof(have));
		memd_log_bytes(r->slab_bytes, want, sizeof(want));
		set_err(err, errlen,
			"donor '%s': slab size %s (%" PRIu64
			" bytes), the registry's is %s (%" PRIu64 " bytes)",
			j->name, have, j->slab_bytes, want, r->slab_bytes);
		return -EINVAL;
	}
	if (j->nnodes > WIRE_MAX_NODES) {
		set_err(err, errlen, "donor '%s': %u nodes, at most %d",
			j->name, j->nnodes, WIRE_MAX_NODES);
		return -EINVAL;
	}
	for (uint16_t i = 0; i < j->nnodes; i++)
		nfree += j->node[i].slabs_free;
	pthread_mutex_lock(&r->lock);
	if (!reg_is_serving_locked(r, now_ms, err, errlen)) {
		rc = -EAGAIN;
		goto out;
	}
	reg_expire_locked(r, now_ms);
	d = reg_donor_by_name(r, j->name);
	if (!d) {
		struct state_edit e = reg_state_now(r);
		struct donor nd = { 0 };

		if (r->ndonors >= MAX_DONORS) {
			set_err(err, errlen,
				"donor '%s': the registry has %d donors "
				"already, its most",
				j->name, MAX_DONORS);
			rc = -ENOSPC;
			goto out;
		}
		if (r->next_donor_id == UINT32_MAX ||
		    reg_grow((void **)&r->donor, &r->donor_cap, r->ndonors + 1,
			     sizeof(*d))) {
			set_err(err, errlen, "registry: out of memory or ids");
			rc = -ENOMEM;
			goto out;
		}
		nd.id = r->next_donor_id;
		strcpy(nd.name, j->name);
		e.donor_put = &nd;
		e.next_donor_id = r->next_donor_id + 1;
		rc = reg_state_write_logged(r, &e, err, errlen);
		if (rc)
			goto out;
		r->next_donor_id++;
		r->donor[r->ndonors++] = nd;
		d = &r->donor[r->ndonors - 1];
	} else if (!d->joined || d->epoch != j->epoch) {
		/* A new incarnation: the old one's leases and tickets are
		 * gone with it. One of the list (a restart quicker than its
		 * loss was noticed) begins a new membership: deletes and puts
		 * of its keys may have reached their other copy only while it
		 * was away, so what it brought (spill files) must not count
		 * under the sequence it left (docs/kv.md). A registry that
		 * restarted too (not joined here yet) keeps the sequence: the
		 * whole pool restarted together. */
		if (d->joined && d->up && is_member_locked(r, d->id))
			r->members_dirty = true;
		d->hears = false; /* until memd_registry_donor_hears */
		usage_clear_locked(r, d);
		donor_grants_drop_locked(r, d->id);
		d->up = false;
		d->reported = false;
	}
	d->joined = true;
	d->epoch = j->epoch;
	memcpy(d->addr, j->addr, sizeof(d->addr));
	d->nnodes = j->nnodes;
	for (uint16_t i = 0; i < j->nnodes; i++)
		d->node[i] = j->node[i].node;
	d->slabs_total = j->slabs_total;
	if (!d->reported) {
		/* until its first report, what the join says (for display:
		 * placement waits for a report) */
		d->slabs_free = j->nnodes ? nfree : j->slabs_total;
		d->slabs_leased = 0;
	}
	d->last_report_ms = now_ms;
	if (!d->up) {
		d->up = true;
		reg_donor_set_reason(d, "joined");
	}
	memd_log(
		LOG_NOTICE,
		"registry: donor joined name=%s id=%u addr=%s epoch=%016" PRIx64
		" slabs=%u draining=%d",
		memd_log_quote(d->name, logq, sizeof(logq)), d->id, d->addr,
		d->epoch, d->slabs_total, (int)d->draining);
	ok->donor_id = d->id;
	ok->registry_epoch = r->epoch;
	ok->report_ms = r->report_ms;
	ok->flags = d->draining ? WIRE_DONOR_DRAIN : 0;
	reg_members_sync_locked(r, now_ms);
	if (r->pub_valid) {
		ok->flags |= WIRE_DONOR_MEMBERSHIP;
		ok->membership = r->membership;
		/* it serves no KV before it reads this JOIN_OK */
		d->heard = r->membership;
		members_publish_locked(r);
	}
	rc = 0;
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int memd_registry_donor_report(struct memd_registry *r,
			       const struct wire_donor_report *rep,
			       uint64_t now_ms, struct wire_donor_report_ok *ok,
			       char *err, size_t errlen)
{
	struct wire_tenant_usage *u = NULL;
	struct donor *d;
	int rc = 0;

	if (!rep || !ok)
		return -EINVAL;
	if (rep->ntenants > WIRE_MAX_TENANTS ||
	    rep->nredeemed > WIRE_MAX_REDEEMED) {
		set_err(err, errlen,
			"donor %u: report of %u tenants and %u grants, at "
			"most %d and %d",
			rep->donor_id, rep->ntenants, rep->nredeemed,
			WIRE_MAX_TENANTS, WIRE_MAX_REDEEMED);
		return -EINVAL;
	}
	for (uint16_t i = 0; i < rep->ntenants; i++) {
		if (rep->tenant[i].kv_slabs > rep->tenant[i].slabs) {
			set_err(err, errlen,
				"donor %u: tenant %u has %u KV slabs of %u",
				rep->donor_id, rep->tenant[i].tenant_id,
				rep->tenant[i].kv_slabs, rep->tenant[i].slabs);
			return -EINVAL;
		}
	}
	if (rep->ntenants) {
		u = malloc(rep->ntenants * sizeof(*u));
		if (!u) {
			set_err(err, errlen, "registry: out of memory");
			return -ENOMEM;
		}
		memcpy(u, rep->tenant, rep->ntenants * sizeof(*u));
	}
	pthread_mutex_lock(&r->lock);
	if (!reg_is_serving_locked(r, now_ms, err, errlen)) {
		free(u);
		rc = -EAGAIN;
		goto out;
	}
	reg_expire_locked(r, now_ms);
	d = reg_donor_by_id(r, rep->donor_id);
	if (!d || !d->up || d->epoch != rep->epoch) {
		if (!d)
			set_err(err, errlen, "donor %u: unknown: join first",
				rep->donor_id);
		else if (!d->up)
			set_err(err, errlen,
				"donor %u ('%s'): marked down (%s): join again",
				d->id, d->name, d->reason);
		else
			set_err(err, errlen,
				"donor %u ('%s'): epoch %016" PRIx64
				" is not the one it joined with (%016" PRIx64
				"): join again",
				d->id, d->name, rep->epoch, d->epoch);
		free(u);
		rc = -ESTALE;
		goto out;
	}
	if (rep->flags & WIRE_REPORT_HEARD) {
		d->hears = true;
		if (rep->membership > d->heard &&
		    rep->membership <= r->membership)
			d->heard = rep->membership;
	}
	usage_clear_locked(r, d);
	d->usage = u;
	d->nusage = rep->ntenants;
	usage_apply_locked(r, d, +1);
	d->slabs_free = rep->slabs_free;
	d->slabs_leased = rep->slabs_leased;
	d->bytes_read = rep->bytes_read;
	d->bytes_written = rep->bytes_written;
	d->last_report_ms = now_ms;
	d->reports++;
	d->reported = true;
	/* The redeemed grants are in this report's usage: counted once. */
	for (uint16_t k = 0; k < rep->nredeemed; k++)
		for (size_t i = 0; i < r->ngrants; i++)
			if (r->grant[i].id == rep->redeemed[k] &&
			    r->grant[i].donor_id == d->id) {
				grant_drop_locked(r, i);
				break;
			}
	ok->registry_epoch = r->epoch;
	ok->flags = d->draining ? WIRE_DONOR_DRAIN : 0;
	kv_allowances_locked(r, d, now_ms, ok);
	/* Every tenant listed: the donor may tell a removed one. */
	if (r->ntenants <= WIRE_MAX_TENANTS) {
		ok->flags |= WIRE_DONOR_TENANTS;
		ok->next_tenant_id = r->next_tenant_id;
	}
	/* Fencing (docs/cluster.md): on etcd, no other registry can lead
	 * before serve_until_ms + a quarter lease; the donor redeems this
	 * epoch's tickets only until serve_until_ms - now_ms after it sent
	 * the report (which is before now_ms), so never once another
	 * registry may place. The quarter lease is the margin for clock
	 * rates, as for the leader's own serving. */
	if (r->etcd) {
		ok->flags |= WIRE_DONOR_FENCE;
		ok->fence_ms = (uint32_t)(r->serve_until_ms - now_ms);
	}
	reg_members_sync_locked(r, now_ms);
	if (r->pub_valid) {
		ok->flags |= WIRE_DONOR_MEMBERSHIP;
		ok->membership = r->membership;
	}
out:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

void memd_registry_donor_hears(struct memd_registry *r, uint32_t donor_id,
			       uint64_t epoch)
{
	struct donor *d;

	pthread_mutex_lock(&r->lock);
	d = reg_donor_by_id(r, donor_id);
	if (d && d->up && d->epoch == epoch)
		d->hears = true;
	pthread_mutex_unlock(&r->lock);
}

void memd_registry_donor_lost(struct memd_registry *r, uint32_t donor_id,
			      uint64_t epoch, uint64_t now_ms, const char *why)
{
	struct donor *d;

	pthread_mutex_lock(&r->lock);
	reg_expire_locked(r, now_ms);
	d = reg_donor_by_id(r, donor_id);
	if (d && d->up && d->epoch == epoch)
		donor_down_locked(r, d, why && why[0] ? why : "link closed");
	if (reg_is_serving_locked(r, now_ms, NULL, 0))
		reg_members_sync_locked(r, now_ms);
	pthread_mutex_unlock(&r->lock);
}

void memd_registry_tick(struct memd_registry *r, uint64_t now_ms)
{
	pthread_mutex_lock(&r->lock);
	reg_expire_locked(r, now_ms);
	if (reg_is_serving_locked(r, now_ms, NULL, 0))
		reg_members_sync_locked(r, now_ms);
	pthread_mutex_unlock(&r->lock);
}

void memd_registry_loop_gap(struct memd_registry *r, uint64_t gap_ms)
{
	uint64_t half = (uint64_t)MISSED_REPORTS * r->report_ms / 2;

	if (gap_ms <= half)
		return;
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < r->ndonors; i++)
		if (r->donor[i].up)
			r->donor[i].last_report_ms += gap_ms - half;
	/* and their confirmations of the newest membership, which wait in
	 * the same sockets */
	r->members_since_ms += gap_ms - half;
	pthread_mutex_unlock(&r->lock);
	memd_log(LOG_NOTICE,
		 "registry: did not run for %" PRIu64
		 " ms; donors' reports are read before their liveness",
		 gap_ms);
}
