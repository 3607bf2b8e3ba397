// SPDX-License-Identifier: MIT
/*
 * libpool/kv_put.c - the KV tier's client: put. Reserve, write,
 * commit, and the replicas of a put.
 *
 * libpool/kv.c's top comment has the design; docs/kv.md, "Replicas",
 * the rule a replica keeps.
 */
#include "libpool/kv_int.h"

/* ------------------------------------------------------------------ */
/* put                                                                  */

/* After lane l's reserve reply (in r->rep): posts the writes of the keys
 * reserved; keys that did not fit the reply are carried. */
static int put_batch(struct kv_run *r, struct kv_lane *l, bool replica)
{
	struct kv_batch *b = kv_batch_new(r, l, replica);
	int rc = l->rc;

	if (!b)
		return -ENOMEM;
	for (uint32_t j = 0; j < b->nkeys; j++) {
		b->vlen[j] = r->op->lens[b->key[j]];
		b->csum[j] = r->csum[b->key[j]];
	}
	for (uint32_t j = 0; j < b->nkeys; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];

		if (kv_batch_carried(r, l, b, j))
			continue;
		b->st[j] = rc ? rc : it->status;
		if (b->st[j] == -ENOBUFS)
			b->st[j] = -EMSGSIZE; /* alone, still too many */
		/* kv_run_op puts the keys answered -EAGAIN again */
		if (!rc && !replica && it->status == -EAGAIN && r->op->again)
			r->op->again[b->key[j]] = true;
		if (b->st[j])
			continue;
		b->gen[j] = it->generation;
		b->nch[j] = kv_chunks_of(r, b->vlen[j]);
		if (!kv_item_locs(r->rep, it, b->nch[j]))
			b->st[j] = -EPROTO;
	}
	if (rc)
		return 0;
	return kv_batch_post(r, b, true);
}

/* Commits the keys of b whose writes all succeeded. */
static void put_commit(struct kv_run *r, struct kv_batch *b)
{
	uint32_t idx[WIRE_KV_BATCH], pos[WIRE_KV_BATCH], m = 0;
	int rc;

	for (uint32_t j = 0; j < b->nkeys; j++)
		if (!b->st[j]) {
			idx[m] = b->key[j];
			pos[m++] = j;
		}
	if (!m)
		return;
	kv_req_keys(r, WIRE_KV_COMMIT, 0, idx, m);
	for (uint32_t i = 0; i < m; i++) {
		r->req->u.kv.item[i].generation = b->gen[pos[i]];
		r->req->u.kv.item[i].checksum = b->csum[pos[i]];
	}
	rc = pool_link_call(b->lk, r->req, r->rep, kv_route(r, b->lk, r->req),
			    NULL, 0);
	if (!rc && r->rep->u.kv.count != m)
		rc = -EPROTO;
	if (rc == -ESTALE)
		r->stale = true;
	if (rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -EPROTO)
		kv_donor_failed(r->kv, b->donor, b->lk);
	for (uint32_t i = 0; i < m; i++) {
		int s = rc ? rc : r->rep->u.kv.item[i].status;

		if (s == -EALREADY)
			s = 0; /* committed already: stored */
		else if (s == -ENOENT)
			s = -ETIMEDOUT; /* the reservation was dropped */
		b->st[pos[i]] = s;
	}
}

/* What a put of key k cannot store whatever the donor says. */
static int put_check(const struct pool_kv_op *op, uint32_t k)
{
	if (!op->values[k] || !op->lens[k])
		return -EINVAL;
	if (op->lens[k] > POOL_KV_VALUE_MAX)
		return -EMSGSIZE;
	return 0;
}

static bool put_take(struct kv_run *r, uint32_t k)
{
	r->status[k] = put_check(r->op, k);
	return !r->status[k];
}

/*
 * Reserves and posts the keys of gr at their donors: their homes, or
 * (replica) their second choices; one round of reserves to all donors
 * at once, the checksums of the round's values computed while the
 * requests are out, then the writes. Keys that did not fit a reply go
 * into the next round. The home pass sets the statuses of keys that
 * cannot be stored or whose home is lost; a replica pass sets none.
 */
static int put_pass(struct kv_run *r, const struct kv_groups *gr, bool replica)
{
	struct wire_msg *own = r->rep;
	struct kv_lanes ls;
	int rc = kv_lanes_open(r, gr, &ls);

	for (uint32_t i = 0; !rc && !replica && i < ls.n; i++)
		for (uint32_t j = 0; !ls.l[i].lk && j < ls.l[i].gn; j++) {
			uint32_t k = ls.l[i].g[j];
			int bad = put_check(r->op, k);

			r->status[k] = bad ? bad : -ENOTCONN;
		}
	while (!rc) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++)
			any |= kv_lane_fill(r, &ls.l[i],
					    replica ? NULL : put_take) > 0;
		if (!any)
			break;
		kv_round_send(r, &ls, WIRE_KV_RESERVE, 0);
		for (uint32_t i = 0; !replica && i < ls.nord; i++)
			for (uint32_t j = 0; j < ls.ord[i]->n; j++) {
				uint32_t k = ls.ord[i]->idx[j];

				r->csum[k] = XXH3_64bits(r->op->values[k],
							 r->op->lens[k]);
			}
		kv_round_recv(r, &ls, WIRE_KV_RESERVE);
		for (uint32_t i = 0; i < ls.nord && !rc; i++) {
			r->rep = ls.ord[i]->rep;
			rc = put_batch(r, ls.ord[i], replica);
			r->rep = own;
		}
	}
	r->rep = own;
	kv_lanes_close(&ls);
	return rc;
}

/*
 * The replicas of a put (docs/kv.md, "Replicas"): every key whose home
 * reservation succeeded is reserved and written at its second choice
 * too, while the home's reservation keeps other puts and deletes of the
 * key away from the home. A second choice that already holds the key
 * (bytes of a value that may have been deleted since) has that copy
 * deleted and is reserved again, so a replica never keeps other bytes
 * than those the home is about to commit; unless that copy is pinned
 * (the home lost the key, not its pin): then it stays, and the put of
 * the key fails with -EEXIST (pinned[k]), as it would at a home that
 * held the key.
 */
static int put_replicas(struct kv_run *r, bool *pinned)
{
	struct kv_batch **mark = r->tail;
	struct kv_groups g = { 0 };
	uint32_t *dof = kv_dof_new(r);
	int *st = malloc(r->op->n * sizeof(*st));
	size_t again = 0;
	int rc = -ENOMEM;

	if (!dof || !st)
		goto out;
	for (struct kv_batch *b = r->batches; b; b = b->next)
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (!b->st[j])
				dof[b->key[j]] = r->second[b->key[j]];
	rc = kv_group_by(r, dof, &g);
	if (!rc)
		rc = put_pass(r, &g, true);
	if (rc)
		goto out;
	for (size_t k = 0; k < r->op->n; k++)
		dof[k] = NO_DONOR;
	for (struct kv_batch *b = *mark; b; b = b->next)
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (b->st[j] == -EEXIST) {
				dof[b->key[j]] = r->second[b->key[j]];
				again++;
			}
	if (!again)
		goto out;
	rc = kv_group_by(r, dof, &g);
	if (rc)
		goto out;
	/* KV_PIN with DROP: a delete that leaves a pinned key alone */
	kv_simple_pass(r, &g, WIRE_KV_PIN, WIRE_KV_DROP, st);
	for (size_t k = 0; k < r->op->n; k++)
		if (dof[k] != NO_DONOR && st[k] && st[k] != -ENOENT) {
			pinned[k] = st[k] == -EEXIST;
			dof[k] = NO_DONOR; /* stays as it is: see kv.md */
		}
	rc = kv_group_by(r, dof, &g);
	if (!rc)
		rc = put_pass(r, &g, true);
out:
	kv_groups_free(&g);
	free(dof);
	free(st);
	return rc;
}

/* Before the homes commit: commits the replicas of the keys whose home
 * writes all succeeded (hs[k] 0); notes in ok[k] which did. */
static void put_commit_replicas(struct kv_run *r, const int *hs, bool *ok)
{
	for (struct kv_batch *b = r->batches; b; b = b->next) {
		if (!b->replica)
			continue;
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (!b->st[j] && hs[b->key[j]])
				b->st[j] = -ECANCELED; /* lapses unused */
		put_commit(r, b);
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (!b->st[j])
				ok[b->key[j]] = true;
	}
}

/* After the homes commit: a replica whose home did not commit is deleted
 * (best effort), so that no copy holds a value its home never held. */
static void put_undo_replicas(struct kv_run *r, const bool *ok)
{
	struct kv_groups g = { 0 };
	uint32_t *dof = kv_dof_new(r);
	int *st = malloc(r->op->n * sizeof(*st));
	bool any = false;

	for (size_t k = 0; dof && k < r->op->n; k++)
		if (ok[k] && r->status[k]) {
			dof[k] = r->second[k];
			any = true;
		}
	if (any && st && !kv_group_by(r, dof, &g))
		kv_simple_pass(r, &g, WIRE_KV_DELETE, 0, st);
	kv_groups_free(&g);
	free(dof);
	free(st);
}

ssize_t kv_run_put(struct kv_run *r)
{
	ssize_t stored = 0;
	int *hs = NULL, rc;
	bool *rok = NULL, *pinned = NULL;

	r->csum = malloc(r->op->n * sizeof(*r->csum));
	if (!r->csum)
		return -ENOMEM;
	if (r->replicate) {
		hs = malloc(r->op->n * sizeof(*hs));
		rok = calloc(r->op->n, sizeof(*rok));
		pinned = calloc(r->op->n, sizeof(*pinned));
		if (!hs || !rok || !pinned) {
			free(hs);
			free(rok);
			free(pinned);
			return -ENOMEM;
		}
	}
	rc = put_pass(r, &r->hg, false);
	if (!rc && r->replicate)
		rc = put_replicas(r, pinned);
	for (struct kv_batch *b = r->batches; b; b = b->next)
		kv_batch_wait(r, b);
	if (r->replicate) {
		/* a key pinned at its second choice: the home's reservation
		 * lapses unused */
		for (struct kv_batch *b = r->batches; b; b = b->next)
			for (uint32_t j = 0; j < b->nkeys && !b->replica; j++)
				if (pinned[b->key[j]] && !b->st[j])
					b->st[j] = -EEXIST;
		for (size_t k = 0; k < r->op->n; k++)
			hs[k] = 1;
		for (struct kv_batch *b = r->batches; b; b = b->next)
			for (uint32_t j = 0; j < b->nkeys && !b->replica; j++)
				if (b->st[j] != 1)
					hs[b->key[j]] = b->st[j];
		put_commit_replicas(r, hs, rok);
	}
	for (struct kv_batch *b = r->batches; b; b = b->next) {
		if (b->replica)
			continue;
		put_commit(r, b);
		for (uint32_t j = 0; j < b->nkeys; j++) {
			uint32_t k = b->key[j];

			if (b->st[j] == 1)
				continue; /* retried in a later batch */
			r->status[k] = b->st[j];
			if (!b->st[j] || b->st[j] == -EEXIST) {
				stored++;
				if (!b->st[j]) {
					count(&r->kv->st_puts, 1);
					count(&r->kv->st_put_bytes,
					      r->op->lens[k]);
				}
			}
		}
	}
	if (r->replicate)
		put_undo_replicas(r, rok);
	free(hs);
	free(rok);
	free(pinned);
	return rc ? rc : stored;
}
