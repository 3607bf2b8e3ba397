// SPDX-License-Identifier: MIT
/*
 * libpool/kv_batch.c - the KV tier's client: the machinery every op
 * runs on. Keys grouped by donor, wire batches and the RMA transfers
 * they post, lanes and rounds.
 *
 * A round sends the next request to every donor at once (in ascending
 * order of link address), then takes the replies. libpool/kv.c's top
 * comment has the design.
 */
#include "libpool/kv_int.h"

/* ------------------------------------------------------------------ */
/* batches                                                              */

void kv_batch_free(struct kv_batch *b)
{
	if (!b)
		return;
	fab_mr_close(b->hdr_mr);
	for (uint32_t i = 0; i < b->nkeys; i++) {
		fab_mr_close(b->val_mr[i]);
		free(b->stage[i]);
	}
	free(b->ops);
	free(b->stream);
	free(b->hdr);
	pool_link_put(b->lk); /* after its MRs: they are on its domain */
	free(b);
}

void kv_groups_free(struct kv_groups *g)
{
	free(g->order);
	free(g->gstart);
	g->order = g->gstart = NULL;
}

/* Groups the op's keys by dof[k], the index of key k's donor in r->t;
 * keys with NO_DONOR are left out. */
int kv_group_by(const struct kv_run *r, const uint32_t *dof,
		struct kv_groups *g)
{
	size_t n = r->op->n;
	uint32_t nd = r->t ? r->t->n : 0, *at;

	kv_groups_free(g);
	g->order = malloc(n * sizeof(*g->order));
	g->gstart = calloc((size_t)nd + 1, sizeof(*g->gstart));
	at = calloc((size_t)nd + 1, sizeof(*at));
	if (!g->order || !g->gstart || !at) {
		free(at);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++)
		if (dof[k] < nd)
			g->gstart[dof[k] + 1]++;
	for (uint32_t h = 0; h < nd; h++)
		g->gstart[h + 1] += g->gstart[h];
	for (size_t k = 0; k < n; k++)
		if (dof[k] < nd)
			g->order[g->gstart[dof[k]] + at[dof[k]]++] =
				(uint32_t)k;
	free(at);
	return 0;
}

/* Finds each key's home (and second choice, with replicas) and groups
 * the keys by home. */
int kv_run_group(struct kv_run *r)
{
	size_t n = r->op->n;
	uint32_t nd = r->t ? r->t->n : 0;

	r->replicate = r->kv->replicas > 1 && nd > 1;
	r->home = malloc(n * sizeof(*r->home));
	r->second = malloc(n * sizeof(*r->second));
	if (!r->home || !r->second)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++) {
		if (nd)
			kv_rank_of(r->t, r->op->keys[k].b, &r->home[k],
				   &r->second[k]);
		else
			r->home[k] = r->second[k] = NO_DONOR;
	}
	return kv_group_by(r, r->home, &r->hg);
}

/* A per-key array of n donor indices, all NO_DONOR. */
uint32_t *kv_dof_new(const struct kv_run *r)
{
	uint32_t *dof = malloc(r->op->n * sizeof(*dof));

	for (size_t k = 0; dof && k < r->op->n; k++)
		dof[k] = NO_DONOR;
	return dof;
}

/* Fills the request's items with the batch's keys. */
void kv_req_keys(struct kv_run *r, uint8_t type, uint32_t flags,
		 const uint32_t *idx, uint32_t n)
{
	struct wire_msg *q = r->req;

	q->type = type;
	q->flags = 0;
	q->u.kv.membership = 0;
	q->u.kv.flags = flags;
	q->u.kv.count = (uint16_t)n;
	q->u.kv.nlocs = 0;
	for (uint32_t i = 0; i < n; i++) {
		memset(&q->u.kv.item[i], 0, sizeof(q->u.kv.item[i]));
		memcpy(q->u.kv.item[i].key, r->op->keys[idx[i]].b,
		       WIRE_KV_KEY_LEN);
	}
}

/*
 * Protocol 5 (docs/kv.md, "Donors that come and go"): on a link that
 * negotiated it, a request that has an _AT form goes as that form with
 * the membership of the table it was routed by, so that a donor whose
 * list is another refuses it (ESTALE) instead of serving a stale
 * routing. The reply type to expect.
 */
int kv_route(const struct kv_run *r, struct plink *lk, struct wire_msg *q)
{
	uint8_t at = wire_kv_at(q->type);

	if (at && r->t && r->t->membership && pool_link_proto(lk) >= 5) {
		q->type = at;
		q->u.kv.membership = r->t->membership;
	}
	return q->type | 0x80;
}

/* After a call of n keys to donor d: a lost donor is noted; a reply with
 * the wrong item count is -EPROTO. */
static int call_checked(struct kv_run *r, struct kv_donor *d,
			const struct wire_msg *rep, uint8_t type, uint32_t n,
			int rc)
{
	if (rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -EPROTO)
		kv_donor_failed(r->kv, d, NULL);
	if (rc == -ESTALE)
		r->stale = true;
	if (!rc && type != WIRE_KV_EXISTS && rep->u.kv.count != n)
		rc = -EPROTO;
	return rc;
}

/* ------------------------------------------------------------------ */
/* rounds: the next request to every donor, all out at once             */

void kv_lanes_close(struct kv_lanes *ls)
{
	for (uint32_t i = 0; ls->l && i < ls->n; i++) {
		free(ls->l[i].rep);
		pool_link_put(ls->l[i].lk);
	}
	free(ls->l);
	free(ls->ord);
	memset(ls, 0, sizeof(*ls));
}

/* A lane for each donor of gr with keys, its link opened. */
int kv_lanes_open(struct kv_run *r, const struct kv_groups *gr,
		  struct kv_lanes *ls)
{
	uint32_t nd = r->t ? r->t->n : 0;

	memset(ls, 0, sizeof(*ls));
	ls->l = calloc(nd ? nd : 1, sizeof(*ls->l));
	ls->ord = calloc(nd ? nd : 1, sizeof(*ls->ord));
	if (!ls->l || !ls->ord)
		return -ENOMEM;
	for (uint32_t h = 0; h < nd; h++) {
		uint32_t gn = gr->gstart[h + 1] - gr->gstart[h];
		struct kv_lane *l;

		if (!gn)
			continue;
		l = &ls->l[ls->n++];
		l->d = &r->t->d[h];
		l->g = gr->order + gr->gstart[h];
		l->gn = gn;
		if (kv_donor_link(r->kv, l->d, &l->lk))
			l->lk = NULL;
		else if (!(l->rep = malloc(sizeof(*l->rep))))
			return -ENOMEM;
	}
	return 0;
}

/* l's next batch: the carried keys, then untaken keys for which take(r,
 * k) is true (NULL: all). The batch's size. */
uint32_t kv_lane_fill(struct kv_run *r, struct kv_lane *l,
		      bool (*take)(struct kv_run *, uint32_t))
{
	memcpy(l->idx, l->carry, l->ncarry * sizeof(*l->carry));
	l->n = l->ncarry;
	l->ncarry = 0;
	while (l->lk && l->n < WIRE_KV_BATCH && l->at < l->gn) {
		uint32_t k = l->g[l->at++];

		if (!take || take(r, k))
			l->idx[l->n++] = k;
	}
	return l->n;
}

static int lane_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)(*(struct kv_lane *const *)a)->lk;
	uintptr_t y = (uintptr_t)(*(struct kv_lane *const *)b)->lk;

	return x < y ? -1 : x > y;
}

/*
 * Sends the request of every lane with a batch, in ascending order of
 * link address (pool_link_send: a thread holds each link's control
 * connection from its send to its receive, and one global order keeps
 * two such threads from waiting on each other). kv_round_recv then takes
 * the replies in the same order: the round trips to all donors overlap.
 */
void kv_round_send(struct kv_run *r, struct kv_lanes *ls, uint8_t type,
		   uint32_t flags)
{
	ls->nord = 0;
	for (uint32_t i = 0; i < ls->n; i++)
		if (ls->l[i].lk && ls->l[i].n)
			ls->ord[ls->nord++] = &ls->l[i];
	qsort(ls->ord, ls->nord, sizeof(*ls->ord), lane_cmp);
	for (uint32_t i = 0; i < ls->nord; i++) {
		struct kv_lane *l = ls->ord[i];

		kv_req_keys(r, type, flags, l->idx, l->n);
		if (type == WIRE_KV_RESERVE)
			for (uint32_t j = 0; j < l->n; j++)
				r->req->u.kv.item[j].value_len =
					r->op->lens[l->idx[j]];
		l->expect = kv_route(r, l->lk, r->req);
		l->t0_ms = now_ms();
		l->rc = pool_link_send(l->lk, r->req);
	}
}

void kv_round_recv(struct kv_run *r, struct kv_lanes *ls, uint8_t type)
{
	for (uint32_t i = 0; i < ls->nord; i++) {
		struct kv_lane *l = ls->ord[i];

		if (!l->rc)
			l->rc = pool_link_recv(l->lk, l->rep, l->expect, NULL,
					       0);
		l->rc = call_checked(r, l->d, l->rep, type, l->n, l->rc);
	}
}

/* Location range of reply item it, checked. */
const struct wire_kv_loc *kv_item_locs(const struct wire_msg *rep,
				       const struct wire_kv_item *it,
				       uint32_t want)
{
	if (it->nchunks != want || it->first_loc > rep->u.kv.nlocs ||
	    it->nchunks > rep->u.kv.nlocs - it->first_loc)
		return NULL;
	return &rep->u.kv.loc[it->first_loc];
}

uint32_t kv_chunks_of(const struct kv_run *r, uint64_t len)
{
	return len <= r->payload
		       ? 1
		       : (uint32_t)((len + r->payload - 1) / r->payload);
}

/*
 * A get's payload pieces on a same-host link: kv_post_key hashes each piece
 * right after its copy, and a piece of 64 KiB is still in L1/L2 then
 * (copy and hash together ran about 20% faster than in 1 MiB pieces:
 * docs/bench/kv.md, change 3). Pieces over the fabric and puts' pieces
 * are the session's xfer size.
 */
#define KV_HOT_PIECE ((size_t)64 << 10)

static size_t piece_bytes(const struct kv_run *r, const struct kv_batch *b)
{
	return r->op->kind == KV_GET && r->xfer > KV_HOT_PIECE &&
			       pool_link_is_same_host(b->lk)
		       ? KV_HOT_PIECE
		       : r->xfer;
}

/* The transfers of a chunk of part payload bytes: its header and its
 * payload's pieces. */
static uint32_t pieces_of(const struct kv_run *r, const struct kv_batch *b,
			  uint64_t part)
{
	size_t x = piece_bytes(r, b);

	return 1 + (uint32_t)((part + x - 1) / x);
}

static uint64_t part_of(const struct kv_run *r, uint64_t len, uint32_t c)
{
	uint64_t off = (uint64_t)c * r->payload;

	return len - off < r->payload ? len - off : r->payload;
}

/* Whether transfer f has already completed without an error. */
static bool piece_is_done(struct fab_op *f)
{
	return __atomic_load_n(&f->complete, __ATOMIC_ACQUIRE) && !f->status;
}

/*
 * Posts transfer i of b (b->ops[i]) on the stream whose turn it is (a
 * chunk's header goes with its first payload piece: next false), or on
 * stream 0 where that stream was closed (-ENOLINK: its connection
 * failed, the link goes on); records the stream it went on.
 */
static int post_piece(struct kv_batch *b, uint32_t i, bool next, bool write,
		      void *buf, size_t len, void *desc,
		      const struct wire_kv_loc *loc, uint64_t roff)
{
	unsigned s = 0;
	int rc;

	if (b->stream) {
		s = b->rr % b->nstreams;
		if (next)
			b->rr++;
	}
	rc = pool_link_post_on(b->lk, s, write, buf, len, desc, loc->endpoint,
			       loc->raddr + roff, loc->rkey, &b->ops[i]);
	if (rc == -ENOLINK) {
		s = 0;
		rc = pool_link_post(b->lk, write, buf, len, desc, loc->endpoint,
				    loc->raddr + roff, loc->rkey, &b->ops[i]);
	}
	if (b->stream)
		b->stream[i] = (uint8_t)s;
	return rc;
}

/* Whether every chunk of a value at loc (nch) can be read through
 * memd's files (a same-host link that has them). */
static bool key_is_local(struct kv_batch *b, const struct wire_kv_loc *loc,
			 uint32_t nch)
{
	for (uint32_t c = 0; c < nch; c++)
		if (loc[c].endpoint >= pool_link_nendpoints(b->lk) ||
		    !pool_link_kv_local(b->lk, loc[c].endpoint, loc[c].rkey))
			return false;
	return true;
}

/* A payload read of a sink's value into buf, through memd's file only
 * (never the fabric, which could write buf after the sink's end):
 * -EREMOTE when that path no longer takes it (its file dropped since
 * key_is_local), else pool_link_post_local's. */
static int post_local(struct kv_batch *b, uint32_t i, void *buf, size_t len,
		      const struct wire_kv_loc *loc, uint64_t roff)
{
	int rc = pool_link_post_local(b->lk, false, buf, len, loc->endpoint,
				      loc->raddr + roff, loc->rkey, &b->ops[i]);

	return rc == 1 ? -EREMOTE : rc;
}

/*
 * Posts the header and payload transfers of key j of b (reserve or
 * lookup reply item it with locations loc). write: put, from the value;
 * else get, into the caller's buffer. Sets b->st[j] on failure. A get
 * over the fabric with streams (b->stream) deals the pieces out over
 * them in turn, each chunk's header with its first piece.
 */
void kv_post_key(struct kv_run *r, struct kv_batch *b, uint32_t j,
		 const struct wire_kv_loc *loc, bool write)
{
	uint32_t k = b->key[j], nch = b->nch[j];
	struct fab_op *ops = b->ops + b->op_first[j];
	struct pool_kv_sink *sink = write ? NULL : r->op->sink;
	bool local = sink && key_is_local(b, loc, nch);
	uint8_t *val = write ? (uint8_t *)r->op->values[k] : NULL;
	uint64_t len = b->vlen[j];
	size_t xfer = piece_bytes(r, b);
	void *hdesc = b->hdr_mr ? fab_mr_desc(b->hdr_mr) : NULL, *vdesc = NULL;
	/* get: hash each piece that completed as it was posted, in order */
	bool sum = !write && r->xs && !XXH3_64bits_reset(r->xs);
	int rc = 0;

	if (!write && !sink) {
		val = r->op->bufs[k];
	} else if (local) {
		/* straight from memd's file, between begin and end */
		val = sink->begin(sink->arg, k, len);
		if (!val) {
			b->st[j] = -ECANCELED;
			return;
		}
	} else if (sink) {
		/* over the fabric: into our memory, delivered once checked
		 * (get_pass), so that nothing writes the caller's later */
		val = b->stage[j] =
			aligned_alloc(64, (len + 63) & ~(uint64_t)63);
		if (!val) {
			b->st[j] = -ENOMEM;
			return;
		}
	}
	if (!local)
		rc = pool_link_mr(b->lk, val, len, &b->val_mr[j]);
	if (rc)
		goto fail;
	vdesc = b->val_mr[j] ? fab_mr_desc(b->val_mr[j]) : NULL;
	for (uint32_t c = 0; c < nch; c++) {
		uint64_t part = part_of(r, len, c), off = c * r->payload;
		uint8_t *h = b->hdr + (size_t)(b->hdr_first[j] + c) * KV_HDR;

		if (loc[c].block_bytes < KV_HDR + part ||
		    loc[c].endpoint >= pool_link_nendpoints(b->lk)) {
			rc = -EPROTO;
			goto fail;
		}
		if (write) {
			struct wire_kv_header hd = {
				.magic = WIRE_KV_MAGIC,
				.tenant_id = pool_link_tenant_id(b->lk),
				.generation = b->gen[j],
				.value_len = (uint32_t)len,
				.chunk = (uint16_t)c,
				.nchunks = (uint16_t)nch,
				.checksum = b->csum[j],
			};

			memcpy(hd.key, r->op->keys[k].b, WIRE_KV_KEY_LEN);
			wire_kv_header_encode(&hd, h);
		}
		rc = post_piece(b, b->op_first[j] + b->nposted[j], false, write,
				h, KV_HDR, hdesc, &loc[c], 0);
		if (rc)
			goto fail;
		b->nposted[j]++;
		for (uint64_t done = 0; done < part;) {
			uint64_t n = part - done < xfer ? part - done : xfer;

			if (local)
				rc = post_local(b,
						b->op_first[j] + b->nposted[j],
						val + off + done, n, &loc[c],
						KV_HDR + done);
			else
				rc = post_piece(
					b, b->op_first[j] + b->nposted[j], true,
					write, val + off + done, n, vdesc,
					&loc[c], KV_HDR + done);
			if (rc)
				goto fail;
			sum = sum && piece_is_done(&ops[b->nposted[j]]) &&
			      !XXH3_64bits_update(r->xs, val + off + done, n);
			b->nposted[j]++;
			done += n;
		}
	}
	if (sum) {
		b->sum[j] = XXH3_64bits_digest(r->xs);
		b->summed[j] = true;
	} else if (local) {
		/* no running state (or a piece failed: then a miss anyway) */
		b->sum[j] = XXH3_64bits(val, len);
		b->summed[j] = true;
	}
	if (local)
		sink->end(sink->arg, k);
	return;
fail:
	if (local)
		sink->end(sink->arg, k);
	b->st[j] = rc == -EPROTO    ? -EPROTO
		   : rc == -EREMOTE ? -ENOENT
				    : -ENOTCONN;
	if (rc == -ENOTCONN)
		kv_donor_failed(r->kv, b->donor, b->lk);
}

/*
 * After a reserve or lookup reply: sizes b's transfer arrays for the
 * keys whose item status is 0 and that pass the checks (set by the
 * caller in b->nch / b->vlen; b->st[j] != 0 skips a key).
 */
int kv_batch_alloc(struct kv_run *r, struct kv_batch *b)
{
	uint32_t nops = 0, nhdr = 0;

	for (uint32_t j = 0; j < b->nkeys; j++) {
		b->op_first[j] = nops;
		b->hdr_first[j] = nhdr;
		if (b->st[j])
			continue;
		for (uint32_t c = 0; c < b->nch[j]; c++)
			nops += pieces_of(r, b, part_of(r, b->vlen[j], c));
		nhdr += b->nch[j];
	}
	b->op_first[b->nkeys] = nops;
	if (!nops)
		return 0;
	b->ops = calloc(nops, sizeof(*b->ops));
	b->hdr = aligned_alloc(64, (size_t)nhdr * KV_HDR);
	if (!b->ops || !b->hdr)
		return -ENOMEM;
	/* a get over the fabric stripes its pieces over the link's
	 * streams (LIBPOOL_KV_STREAMS); puts and the same-host path
	 * keep to stream 0 */
	b->nstreams = r->op->kind == KV_GET ? pool_link_streams(b->lk) : 1;
	if (b->nstreams > 1 && !(b->stream = calloc(nops, 1)))
		return -ENOMEM;
	return pool_link_mr(b->lk, b->hdr, (size_t)nhdr * KV_HDR, &b->hdr_mr);
}

/*
 * After a reserve or lookup reply (in r->rep): sizes b's transfer arrays
 * (kv_batch_alloc), then posts the writes (write) or reads of each key
 * that passed its checks (b->st[j] == 0) at the locations the reply gave.
 */
int kv_batch_post(struct kv_run *r, struct kv_batch *b, bool write)
{
	int rc = kv_batch_alloc(r, b);

	if (rc)
		return rc;
	for (uint32_t j = 0; j < b->nkeys; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];

		if (!b->st[j])
			kv_post_key(r, b, j, &r->rep->u.kv.loc[it->first_loc],
				    write);
	}
	return 0;
}

/* Waits for every transfer b posted; a failed transfer fails its key. */
void kv_batch_wait(struct kv_run *r, struct kv_batch *b)
{
	uint64_t deadline = now_ms() + (uint64_t)r->timeout_ms;

	for (uint32_t j = 0; j < b->nkeys; j++) {
		for (uint32_t i = b->op_first[j];
		     i < b->op_first[j] + b->nposted[j]; i++) {
			uint64_t now = now_ms();
			unsigned on = b->stream ? b->stream[i] : 0;
			int s;

			/* the other streams' arrivals, read while this
			 * one's are awaited (manual progress) */
			for (unsigned t = 0; b->stream && t < b->nstreams; t++)
				if (t != on &&
				    !__atomic_load_n(&b->ops[i].complete,
						     __ATOMIC_ACQUIRE))
					pool_link_poke(b->lk, t);
			s = pool_link_wait_on(
				b->lk, on, &b->ops[i],
				now >= deadline ? 0 : (int)(deadline - now));

			if (s && !b->st[j])
				b->st[j] = s == -EIO ? -EIO : -ENOTCONN;
		}
		/* posts that never happened (a post failed midway) */
		if (!b->st[j] &&
		    b->op_first[j + 1] - b->op_first[j] > b->nposted[j])
			b->st[j] = -ENOTCONN;
	}
	if (pool_link_is_lost(b->lk))
		kv_donor_failed(r->kv, b->donor, b->lk);
}

struct kv_batch *kv_batch_new(struct kv_run *r, const struct kv_lane *l,
			      bool replica)
{
	struct kv_batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->lk = l->lk; /* the batch's reference: kv_batch_free drops it */
	pool_link_hold(l->lk);
	b->donor = l->d;
	b->replica = replica;
	b->nkeys = l->n;
	memcpy(b->key, l->idx, l->n * sizeof(*l->idx));
	b->t0_ms = l->t0_ms;
	*r->tail = b;
	r->tail = &b->next;
	return b;
}
