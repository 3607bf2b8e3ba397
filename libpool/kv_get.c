// SPDX-License-Identifier: MIT
/*
 * libpool/kv_get.c - the KV tier's client: get. Lookup, read, verify
 * every header and the checksum, done; a key the home missed is read
 * from its replica.
 *
 * Anything wrong is a miss. libpool/kv.c's top comment has the design.
 */
#include "libpool/kv_int.h"

/* ------------------------------------------------------------------ */
/* get                                                                  */

/* After lane l's lookup reply (in r->rep): posts the reads of the keys
 * found; keys that did not fit the reply are carried. */
static int get_batch(struct kv_run *r, struct kv_lane *l, bool replica)
{
	struct kv_batch *b = kv_batch_new(r, l, replica);
	int rc = l->rc;

	if (!b)
		return -ENOMEM;
	for (uint32_t j = 0; j < b->nkeys; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];
		uint32_t k = b->key[j];

		if (kv_batch_carried(r, l, b, j))
			continue;
		b->st[j] = rc ? -ENOENT : it->status;
		if (rc)
			continue;
		if (it->status) {
			b->st[j] = -ENOENT;
			continue;
		}
		b->leased[j] = true;
		b->gen[j] = it->generation;
		b->csum[j] = it->checksum;
		b->vlen[j] = it->value_len;
		r->op->out_lens[k] = it->value_len;
		if (!it->value_len || it->value_len > UINT32_MAX) {
			b->st[j] = -ENOENT;
			count(&r->kv->st_bad, 1);
			continue;
		}
		if (it->value_len > r->op->caps[k]) {
			b->st[j] = -ENOBUFS;
			continue;
		}
		b->nch[j] = kv_chunks_of(r, b->vlen[j]);
		if (!kv_item_locs(r->rep, it, b->nch[j])) {
			b->st[j] = -ENOENT;
			count(&r->kv->st_bad, 1);
		}
	}
	if (rc) {
		if (rc != -ESTALE) /* -ESTALE: the op is run again */
			pool_log(LOG_INFO,
				 "kv: get of %u keys at donor=%s missed: its "
				 "lookup failed (%s)",
				 b->nkeys, b->donor->name, strerror(-rc));
		return 0;
	}
	return kv_batch_post(r, b, false);
}

/* Checks key j of b after its reads: every header, the checksum, the
 * lease. */
static int get_verify(struct kv_run *r, struct kv_batch *b, uint32_t j,
		      uint64_t done_ms)
{
	uint32_t k = b->key[j];

	if (done_ms > b->t0_ms + r->kv->lease_ms)
		return -ETIME; /* read outlived the lease: space may be reused */
	for (uint32_t c = 0; c < b->nch[j]; c++) {
		struct wire_kv_header h;

		wire_kv_header_decode(
			b->hdr + (size_t)(b->hdr_first[j] + c) * KV_HDR, &h);
		if (h.magic != WIRE_KV_MAGIC ||
		    h.tenant_id != pool_link_tenant_id(b->lk) ||
		    memcmp(h.key, r->op->keys[k].b, WIRE_KV_KEY_LEN) ||
		    h.generation != b->gen[j] || h.value_len != b->vlen[j] ||
		    h.chunk != c || h.nchunks != b->nch[j] ||
		    h.checksum != b->csum[j])
			return -EBADMSG;
	}
	if ((b->summed[j]
		     ? b->sum[j]
		     : XXH3_64bits(b->stage[j] ? b->stage[j] : r->op->bufs[k],
				   b->vlen[j])) != b->csum[j])
		return -EBADMSG;
	return 0;
}

/* A sink's value read over the fabric into b->stage[j] and checked:
 * copied to where the sink says now. 0, or -ECANCELED (declined). */
static int get_deliver(struct kv_run *r, struct kv_batch *b, uint32_t j)
{
	struct pool_kv_sink *sink = r->op->sink;
	uint32_t k = b->key[j];
	void *to = sink->begin(sink->arg, k, b->vlen[j]);

	if (!to)
		return -ECANCELED;
	memcpy(to, b->stage[j], b->vlen[j]);
	sink->end(sink->arg, k);
	sink->staged++;
	return 0;
}

/*
 * Test-only fault injection: TP_TEST_KV_DONE_DELAY_MS=N holds each get's
 * KV_DONE back N ms (at most 10 s), as a donor slow to answer it would,
 * so that tests can check that one donor's slow round trip ages no other
 * donor's reads. Unset: nothing. Never set it in production.
 */
static void done_delay(void)
{
	const char *e = getenv("TP_TEST_KV_DONE_DELAY_MS");
	long ms = e && *e ? strtol(e, NULL, 10) : 0;
	struct timespec ts;

	if (ms <= 0 || ms > 10000)
		return;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = ms % 1000 * 1000000L;
	nanosleep(&ts, NULL);
}

/* Ends b's read leases. */
static void get_done(struct kv_run *r, struct kv_batch *b)
{
	uint32_t idx[WIRE_KV_BATCH], pos[WIRE_KV_BATCH], m = 0;

	for (uint32_t j = 0; j < b->nkeys; j++)
		if (b->leased[j]) {
			idx[m] = b->key[j];
			pos[m++] = j;
		}
	if (!m || pool_link_is_lost(b->lk))
		return;
	done_delay();
	kv_req_keys(r, WIRE_KV_DONE, 0, idx, m);
	for (uint32_t i = 0; i < m; i++)
		r->req->u.kv.item[i].generation = b->gen[pos[i]];
	/* The leases lapse anyway: the statuses do not matter. */
	if (pool_link_call(b->lk, r->req, r->rep, WIRE_KV_DONE_OK, NULL, 0) ==
	    -ENOTCONN)
		kv_donor_failed(r->kv, b->donor, b->lk);
}

/* Looks up, reads and checks the keys of gr at their donors (homes, or
 * replica: second choices); sets their statuses. The hits, or -ENOMEM. */
static ssize_t get_pass(struct kv_run *r, const struct kv_groups *gr,
			bool replica)
{
	struct kv_batch **mark = r->tail;
	struct wire_msg *own = r->rep;
	struct kv_lanes ls;
	ssize_t hits = 0;
	int rc = kv_lanes_open(r, gr, &ls);

	for (uint32_t i = 0; !rc && i < ls.n; i++) {
		for (uint32_t j = 0; !ls.l[i].lk && j < ls.l[i].gn; j++)
			r->status[ls.l[i].g[j]] = -ENOENT; /* loss: a miss */
		if (!ls.l[i].lk)
			pool_log(LOG_INFO,
				 "kv: get of %u keys at donor=%s missed: no "
				 "link to it (it failed; asked again later)",
				 ls.l[i].gn, ls.l[i].d->name);
	}
	while (!rc) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++)
			any |= kv_lane_fill(r, &ls.l[i], NULL) > 0;
		if (!any)
			break;
		kv_round_send(r, &ls, WIRE_KV_LOOKUP, 0);
		kv_round_recv(r, &ls, WIRE_KV_LOOKUP);
		for (uint32_t i = 0; i < ls.nord && !rc; i++) {
			r->rep = ls.ord[i]->rep;
			rc = get_batch(r, ls.ord[i], replica);
			r->rep = own;
		}
	}
	r->rep = own;
	kv_lanes_close(&ls);
	/* Every batch's reads are waited for and timed before any KV_DONE
	 * goes out: a donor slow to take one must not age the reads of the
	 * batches after it, which ended long before. */
	for (struct kv_batch *b = *mark; b; b = b->next) {
		kv_batch_wait(r, b);
		b->done_ms = now_ms();
	}
	for (struct kv_batch *b = *mark; b; b = b->next) {
		uint32_t late = 0;

		for (uint32_t j = 0; j < b->nkeys; j++) {
			uint32_t k = b->key[j];
			int s = b->st[j];

			if (s == 1)
				continue;
			if (!s) {
				s = get_verify(r, b, j, b->done_ms);
				late += s == -ETIME;
				if (s == -EBADMSG) {
					count(&r->kv->st_bad, 1);
					pool_link_kv_shm_forget(b->lk);
					pool_log(LOG_WARNING,
						 "kv: a block failed its "
						 "checks (a miss) donor=%s",
						 b->donor->name);
				}
			}
			if (!s && b->stage[j])
				s = get_deliver(r, b, j);
			free(b->stage[j]);
			b->stage[j] = NULL;
			if (s && s != -ENOBUFS && s != -ECANCELED)
				s = -ENOENT; /* anything wrong: a miss */
			r->status[k] = s;
			if (!s) {
				hits++;
				count(&r->kv->st_get_bytes, b->vlen[j]);
			}
		}
		if (late)
			pool_log(LOG_INFO,
				 "kv: get of %u keys at donor=%s missed: their "
				 "reads ended %" PRIu64 " ms after the lookup "
				 "went out, past the %u ms read lease",
				 late, b->donor->name, b->done_ms - b->t0_ms,
				 r->kv->lease_ms);
		get_done(r, b);
	}
	return rc ? rc : hits;
}

/* Gets from the homes; with replicas, a key the home missed (absent,
 * failed a check, or the home is lost) is read from its replica. */
ssize_t kv_run_get(struct kv_run *r)
{
	ssize_t hits = get_pass(r, &r->hg, false);

	if (hits >= 0 && r->replicate) {
		struct kv_groups g = { 0 };
		uint32_t *dof = kv_dof_new(r);
		bool any = false;
		ssize_t more;

		for (size_t k = 0; dof && k < r->op->n; k++)
			if (r->status[k] == -ENOENT) {
				dof[k] = r->second[k];
				any = true;
			}
		if (!dof) {
			hits = -ENOMEM;
		} else if (any) {
			more = kv_group_by(r, dof, &g);
			if (!more)
				more = get_pass(r, &g, true);
			if (more < 0) {
				hits = more;
			} else {
				hits += more;
				count(&r->kv->st_replica_hits, (uint64_t)more);
			}
		}
		kv_groups_free(&g);
		free(dof);
	}
	count(&r->kv->st_gets, r->op->n);
	if (hits > 0)
		count(&r->kv->st_hits, (uint64_t)hits);
	return hits;
}
