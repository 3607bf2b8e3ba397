// SPDX-License-Identifier: MIT
/*
 * memd/registry_place.c - placement (registry.h, memd_registry_place;
 * docs/cluster.md): a tenant's request for slabs becomes, in one step
 * under the lock, a quota check, a reservation (one grant per donor
 * used, kept until the donor reports it redeemed or its ticket has
 * certainly expired: registry_donors.c) and one signed ticket per donor.
 * Slabs are striped: each goes to the up, reporting, not draining donor
 * with the most free slabs left (lowest id on a tie), its replica to the
 * best other one.
 *
 * Threads: memd-ctl, under r->lock.
 *
 * Invariants: a place that fails reserves nothing and returns an empty
 * reply; used + reserved never passes a tenant's quota through placement
 * (reports may: what donors hold is counted, never refused). One that
 * fails because the tenant's KV memory fills its quota (and would cover
 * the ask) is EAGAIN and records a KV demand: the allowances
 * (registry_donors.c) leave the ask free, so the stores yield. An etcd
 * leader that just took over places only once every known donor has
 * reported to it (or the warm-up is over).
 */
#include "memd/registry_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/*
 * A grant stays reserved past its ticket's expiry by the skew donors allow
 * when they check expires_ms against their own clocks (60 s) plus one
 * report interval (the redeeming donor's report is on its way): until then
 * the ticket may still be redeemed and show up as usage, and dropping the
 * reservation earlier could let the tenant overshoot its quota.
 */
#define TICKET_SKEW_MS 60000u

/*
 * A PLACE refused because KV memory fills the quota keeps the KV
 * allowances lowered for this long after it (the client places again
 * within a second, with its backoff: libpool/pool_cluster.c), or until a
 * PLACE of the tenant's succeeds: long enough for every donor to report
 * and trim, short enough that a client that gave up does not hold the
 * stores down.
 */
#define KV_DEMAND_HOLD_MS 2000u
#define KV_DEMAND_REPORTS 2u

/* ---- placement --------------------------------------------------------- */

struct cand {
	struct donor *d;
	uint64_t avail; /* free slabs left for this request */
	int grant;	/* index into out->grant, or -1 */
};

static bool donor_serves(const struct donor *d, int32_t node)
{
	if (node == WIRE_NODE_ANY)
		return true;
	for (uint16_t i = 0; i < d->nnodes; i++)
		if (d->node[i] == node)
			return true;
	return false;
}

/* More free first, then lower id. */
static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->avail != y->avail)
		return x->avail > y->avail ? -1 : 1;
	return x->d->id < y->d->id ? -1 : x->d->id > y->d->id;
}

/* The candidate with the most avail, lowest id on a tie, other than
 * skip; -1 when none has any left. */
static int cand_best(const struct cand *c, size_t n, int skip)
{
	int best = -1;

	for (size_t i = 0; i < n; i++) {
		if ((int)i == skip || !c[i].avail)
			continue;
		if (best < 0 || c[i].avail > c[best].avail ||
		    (c[i].avail == c[best].avail && c[i].d->id < c[best].d->id))
			best = (int)i;
	}
	return best;
}

static int cand_use(struct cand *c, int i, struct wire_place_ok *out)
{
	c[i].avail--;
	if (c[i].grant < 0) {
		c[i].grant = out->ngrants++;
		out->grant[c[i].grant].ticket.nslabs = 0;
	}
	out->grant[c[i].grant].ticket.nslabs++;
	return c[i].grant;
}

int memd_registry_place(struct memd_registry *r, uint32_t tenant_id,
			const struct wire_place *req, uint64_t now_ms,
			uint64_t now_unix_ms, struct wire_place_ok *out,
			char *err, size_t errlen)
{
	struct cand c[MAX_DONORS];
	size_t by_grant[WIRE_MAX_GRANTS];
	char q[32], u[32], s[32], a[32];
	bool replica, served = false;
	uint64_t copies, total, quota, freesum = 0;
	struct tenant *t;
	size_t n = 0, nall;
	int rc = 0;

	if (!req || !out)
		return -EINVAL;
	if (req->flags & ~WIRE_PLACE_KNOWN) {
		set_err(err, errlen, "PLACE: unknown flags 0x%x",
			req->flags & ~WIRE_PLACE_KNOWN);
		return -EINVAL;
	}
	if (req->nslabs < 1 || req->nslabs > WIRE_MAX_LEASES) {
		set_err(err, errlen, "PLACE: %u slabs, not 1..%d", req->nslabs,
			WIRE_MAX_LEASES);
		return -EINVAL;
	}
	if (req->node != WIRE_NODE_ANY &&
	    (req->node < 0 || req->node >= WIRE_NODE_MAX)) {
		set_err(err, errlen, "PLACE: node %d is not -1 or 0..%d",
			req->node, WIRE_NODE_MAX - 1);
		return -EINVAL;
	}
	replica = req->flags & WIRE_PLACE_REPLICA;
	copies = (uint64_t)req->nslabs * (replica ? 2 : 1);
	memset(out, 0, sizeof(*out));

	pthread_mutex_lock(&r->lock);
	if (!reg_is_serving_locked(r, now_ms, err, errlen)) {
		rc = -EAGAIN;
		goto out;
	}
	reg_expire_locked(r, now_ms);
	if (r->etcd && now_ms < r->warm_until_ms) {
		/* Just took over: the tenants' usage is the sum of the
		 * donors' reports, so place only once every donor known
		 * (draining ones hold memory too) has reported to us, or
		 * the wait is over (one that has not is down, as for any
		 * registry). Placing on part of the reports could pass a
		 * quota by what the silent donors hold. */
		for (size_t i = 0; i < r->ndonors; i++) {
			const struct donor *d = &r->donor[i];

			/* The leader we replace: if nothing listens at its
			 * address any more, it died with its own donor part
			 * (one that lives on rejoins with a new epoch and
			 * holds nothing): not waited for. If it lives (cut
			 * off etcd only), its donor part holds leases and
			 * rejoins us like any donor: waited for. */
			if ((d->up && d->reported) ||
			    (r->old_leader_gone && r->leader_donor[0] &&
			     !strcmp(d->name, r->leader_donor)))
				continue;
			set_err(err, errlen,
				"registry: took over as leader; waiting up to "
				"%" PRIu64 " ms for donor '%s' to report: "
				"place again",
				r->warm_until_ms - now_ms, d->name);
			rc = -EAGAIN;
			goto out;
		}
	}
	t = reg_tenant_by_id(r, tenant_id);
	if (!t) {
		set_err(err, errlen, "no tenant with id %u (removed?)",
			tenant_id);
		rc = -ENOENT;
		goto out;
	}
	total = t->used_slabs + t->reserved_slabs + copies;
	quota = t->quota_bytes / r->slab_bytes;
	if (total > quota &&
	    total - quota <= t->kv_slabs - reg_kv_draining_locked(r, t->id)) {
		/* The tenant's KV stores hold what the quota lacks: they
		 * are a cache, and yield. The allowances leave what this
		 * asks free from now on (the next REPORT_OK of each donor
		 * lowers them, and the donor trims down to them on its next
		 * tick, reporting at once); the client places again. */
		if (reg_kv_demand_locked(t, now_ms) < copies)
			t->kv_demand_slabs = copies;
		t->kv_demand_until_ms =
			now_ms + KV_DEMAND_HOLD_MS +
			(uint64_t)KV_DEMAND_REPORTS * r->report_ms;
		memd_log_bytes(t->quota_bytes, q, sizeof(q));
		memd_log_bytes(reg_mul_sat(total - quota, r->slab_bytes), a,
			       sizeof(a));
		set_err(err, errlen,
			"tenant '%s': quota %s full of KV cache; KV stores "
			"are yielding %s: place again",
			t->name, q, a);
		rc = -EAGAIN;
		goto out;
	}
	if (total > quota) {
		memd_log_bytes(t->quota_bytes, q, sizeof(q));
		memd_log_bytes(reg_mul_sat(t->used_slabs, r->slab_bytes), u,
			       sizeof(u));
		memd_log_bytes(reg_mul_sat(t->reserved_slabs, r->slab_bytes), s,
			       sizeof(s));
		memd_log_bytes(reg_mul_sat(copies, r->slab_bytes), a,
			       sizeof(a));
		set_err(err, errlen,
			"tenant '%s': quota %s, used %s, reserved %s, asked %s",
			t->name, q, u, s, a);
		rc = -EDQUOT;
		goto out;
	}
	if (reg_grow((void **)&r->grant, &r->grant_cap,
		     r->ngrants + WIRE_MAX_GRANTS, sizeof(*r->grant))) {
		set_err(err, errlen, "registry: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < r->ndonors; i++) {
		struct donor *d = &r->donor[i];

		if (!d->up || d->draining || !d->reported ||
		    !donor_serves(d, req->node))
			continue;
		served = true;
		if (d->slabs_free <= d->reserved_slabs)
			continue;
		c[n].d = d;
		c[n].avail = d->slabs_free - d->reserved_slabs;
		c[n].grant = -1;
		n++;
	}
	if (!served && req->node != WIRE_NODE_ANY) {
		set_err(err, errlen, "tenant '%s': no up donor serves node %d",
			t->name, req->node);
		rc = -EINVAL;
		goto out;
	}
	nall = n;
	if (n > WIRE_MAX_GRANTS) {
		qsort(c, n, sizeof(c[0]), cand_cmp);
		n = WIRE_MAX_GRANTS;
	}
	for (size_t i = 0; i < nall; i++)
		freesum += c[i].avail;
	for (uint32_t k = 0; k < req->nslabs; k++) {
		int p = cand_best(c, n, -1), x = -1;

		if (p >= 0 && replica)
			x = cand_best(c, n, p);
		if (p < 0 || (replica && x < 0)) {
			if (replica && n < 2)
				set_err(err, errlen,
					"tenant '%s': a replica needs a second "
					"donor with free slabs, and %zu up "
					"donor(s) have any",
					t->name, n);
			else
				set_err(err, errlen,
					"tenant '%s': %" PRIu64
					" slabs free on %zu up donors (a "
					"place uses at most %d), asked %" PRIu64
					"%s",
					t->name, freesum, nall, WIRE_MAX_GRANTS,
					copies,
					replica ? " with each replica on "
						  "another donor"
						: "");
			rc = -ENOSPC;
			goto out;
		}
		out->layout[k].primary = (uint8_t)cand_use(c, p, out);
		out->layout[k].replica =
			replica ? (uint8_t)cand_use(c, x, out) : WIRE_NO_GRANT;
	}
	out->registry_epoch = r->epoch;
	out->nslabs = (uint16_t)req->nslabs;
	for (size_t i = 0; i < n; i++)
		if (c[i].grant >= 0)
			by_grant[c[i].grant] = i;
	/* Grant ids in grant order: the first slab's donor has the lowest. */
	for (uint16_t gi = 0; gi < out->ngrants; gi++) {
		size_t i = by_grant[gi];
		struct wire_grant *g = &out->grant[gi];
		struct grant *rg;

		g->donor_id = c[i].d->id;
		g->donor_epoch = c[i].d->epoch;
		memcpy(g->addr, c[i].d->addr, sizeof(g->addr));
		g->ticket.grant_id = r->next_grant_id++;
		g->ticket.registry_epoch = r->epoch;
		g->ticket.tenant_id = t->id;
		g->ticket.donor_id = c[i].d->id;
		g->ticket.donor_epoch = c[i].d->epoch;
		g->ticket.node = req->node;
		g->ticket.expires_ms = now_unix_ms + r->ticket_ttl_ms;
		auth_ticket_sign(r->keys.ticket, &g->ticket);
		rg = &r->grant[r->ngrants++];
		rg->id = g->ticket.grant_id;
		rg->tenant_id = t->id;
		rg->donor_id = c[i].d->id;
		rg->nslabs = g->ticket.nslabs;
		rg->deadline_ms = now_ms + r->ticket_ttl_ms + TICKET_SKEW_MS +
				  r->report_ms;
		if (rg->deadline_ms < r->grant_next_deadline_ms)
			r->grant_next_deadline_ms = rg->deadline_ms;
		c[i].d->reserved_slabs += rg->nslabs;
		t->reserved_slabs += rg->nslabs;
	}
	/* What the KV stores yielded for is reserved now. */
	t->kv_demand_slabs = 0;
	t->kv_demand_until_ms = 0;
out:
	if (rc == -ENOSPC && r->etcd && now_ms < r->warm_until_ms) {
		/* Just took over: donors are still joining us. */
		set_err(err, errlen,
			"registry: took over as leader; donors are rejoining "
			"for %" PRIu64 " ms more: place again",
			r->warm_until_ms - now_ms);
		rc = -EAGAIN;
	}
	pthread_mutex_unlock(&r->lock);
	if (rc)
		memset(out, 0, sizeof(*out));
	return rc;
}
