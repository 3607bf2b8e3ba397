// SPDX-License-Identifier: MIT
/*
 * libpool/kv_keyops.c - the KV tier's client: the ops on keys alone,
 * exists, delete, pin and unpin.
 *
 * libpool/kv.c's top comment has the design.
 */
#include "libpool/kv_int.h"

/* ------------------------------------------------------------------ */
/* exists, delete, pin                                                  */

/* The smallest index >= lo of a key that the donors of gr (homes, or
 * second choices) do not hold, or n: KV_EXISTS per batch, in key order
 * within a donor. A lost donor holds nothing. */
static ssize_t exists_from(struct kv_run *r, const struct kv_groups *gr,
			   size_t lo)
{
	size_t first_missing = r->op->n;
	struct kv_lanes ls;

	if (kv_lanes_open(r, gr, &ls)) {
		kv_lanes_close(&ls);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ls.n; i++) {
		struct kv_lane *l = &ls.l[i];

		while (l->at < l->gn && l->g[l->at] < lo)
			l->at++;
		if (!l->lk && l->at < l->gn && l->g[l->at] < first_missing)
			first_missing = l->g[l->at];
	}
	for (;;) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++) {
			struct kv_lane *l = &ls.l[i];

			l->n = 0;
			if (!l->lk || l->at == l->gn ||
			    l->g[l->at] >= first_missing)
				continue;
			l->n = l->gn - l->at < WIRE_KV_BATCH ? l->gn - l->at
							     : WIRE_KV_BATCH;
			memcpy(l->idx, l->g + l->at, l->n * sizeof(*l->idx));
			any = true;
		}
		if (!any)
			break;
		kv_round_send(r, &ls, WIRE_KV_EXISTS, 0);
		kv_round_recv(r, &ls, WIRE_KV_EXISTS);
		for (uint32_t i = 0; i < ls.nord; i++) {
			struct kv_lane *l = ls.ord[i];
			uint32_t c = l->rc ? 0 : l->rep->u.kv.count;

			if (c < l->n) {
				if (l->idx[c] < first_missing)
					first_missing = l->idx[c];
				l->at = l->gn; /* this donor is done */
			} else {
				l->at += l->n;
			}
		}
	}
	kv_lanes_close(&ls);
	return (ssize_t)first_missing;
}

/* With replicas a key is present when either copy is: the homes answer
 * up to their first missing key m, the replicas from m on up to theirs,
 * the homes again from there, until both miss the same key. */
ssize_t kv_run_exists(struct kv_run *r)
{
	struct kv_groups g = { 0 };
	ssize_t lo = 0, m;

	if (!r->t || !r->t->n)
		return 0; /* no donor up: nothing is present */
	for (;;) {
		m = exists_from(r, &r->hg, (size_t)lo);
		if (m < 0 || m == (ssize_t)r->op->n || !r->replicate)
			break;
		if (!g.order && kv_group_by(r, r->second, &g)) {
			m = -ENOMEM;
			break;
		}
		lo = exists_from(r, &g, (size_t)m);
		if (lo < 0)
			m = lo;
		if (lo <= m)
			break;
	}
	kv_groups_free(&g);
	return m;
}

/* One request per batch of the keys of gr at their donors, a round to
 * all donors at once; st[k] gets each key's status (-ENOTCONN for a
 * lost donor). The count of 0s. */
ssize_t kv_simple_pass(struct kv_run *r, const struct kv_groups *gr,
		       uint8_t type, uint32_t flags, int *st)
{
	struct kv_lanes ls;
	ssize_t ok = 0;

	if (kv_lanes_open(r, gr, &ls)) {
		kv_lanes_close(&ls);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ls.n; i++)
		for (uint32_t j = 0; !ls.l[i].lk && j < ls.l[i].gn; j++)
			st[ls.l[i].g[j]] = -ENOTCONN;
	for (;;) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++)
			any |= kv_lane_fill(r, &ls.l[i], NULL) > 0;
		if (!any)
			break;
		kv_round_send(r, &ls, type, flags);
		kv_round_recv(r, &ls, type);
		for (uint32_t i = 0; i < ls.nord; i++) {
			struct kv_lane *l = ls.ord[i];

			for (uint32_t j = 0; j < l->n; j++) {
				int s = l->rc ? l->rc
					      : l->rep->u.kv.item[j].status;

				st[l->idx[j]] = s;
				ok += !s;
			}
		}
	}
	kv_lanes_close(&ls);
	return ok;
}

/*
 * delete, pin, unpin. Without a second donor: at the homes. Otherwise a
 * delete goes to the second choice first (whatever the handle's
 * replicas: a replica left by another handle goes too), then to the
 * home; with replicas 2 a key whose replica could not be deleted (its
 * donor lost, a put under way) keeps its home copy and that status, so
 * a value's replica never outlives its home. Pins go to both copies
 * with replicas 2. A key's status is its home's, or 0 when the home
 * missed it but the replica did it.
 */
ssize_t kv_run_simple(struct kv_run *r)
{
	uint8_t type = r->op->kind == KV_DELETE ? WIRE_KV_DELETE : WIRE_KV_PIN;
	uint32_t flags = r->op->kind == KV_UNPIN ? WIRE_KV_UNPIN : 0;
	bool second = r->t && r->t->n > 1 &&
		      (r->replicate || r->op->kind == KV_DELETE);
	struct kv_groups g = { 0 };
	uint32_t *dof = NULL;
	int *rs = NULL;
	ssize_t ok = 0;

	if (r->op->copy == COPY_SECOND) {
		if (!r->t || r->t->n < 2)
			return 0;
		ok = kv_group_by(r, r->second, &g);
		if (!ok)
			ok = kv_simple_pass(r, &g, type, flags, r->status);
		kv_groups_free(&g);
		return ok;
	}
	if (!second || r->op->copy == COPY_HOME)
		return kv_simple_pass(r, &r->hg, type, flags, r->status);
	rs = malloc(r->op->n * sizeof(*rs));
	dof = malloc(r->op->n * sizeof(*dof));
	if (!rs || !dof || kv_group_by(r, r->second, &g)) {
		ok = -ENOMEM;
		goto out;
	}
	kv_simple_pass(r, &g, type, flags, rs);
	memcpy(dof, r->home, r->op->n * sizeof(*dof));
	for (size_t k = 0; k < r->op->n; k++)
		if (type == WIRE_KV_DELETE && r->replicate && rs[k] &&
		    rs[k] != -ENOENT) {
			dof[k] = NO_DONOR;
			r->status[k] = rs[k];
		}
	if (kv_group_by(r, dof, &g)) {
		ok = -ENOMEM;
		goto out;
	}
	kv_simple_pass(r, &g, type, flags, r->status);
	for (size_t k = 0; k < r->op->n; k++) {
		if (dof[k] != NO_DONOR && r->replicate && r->status[k] &&
		    !rs[k] &&
		    (type != WIRE_KV_DELETE || r->status[k] == -ENOENT))
			r->status[k] = 0;
		ok += !r->status[k];
	}
out:
	kv_groups_free(&g);
	free(dof);
	free(rs);
	return ok;
}
