// SPDX-License-Identifier: MIT
/*
 * libpool/pool_region.c - regions: leases of whole slabs, packing small
 * regions into shared slabs (4 KiB chunks, first fit), alloc and free,
 * and the internal views of a region (libpool/internal.h).
 */
#include "libpool/pool_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric/dlist.h"

/* ------------------------------------------------------------------ */
/* leases and packing                                                   */

void pl_slab_free(struct slab *s)
{
	if (s) {
		if (s->map)
			munmap((void *)s->map, s->l.len_bytes);
		if (s->fd >= 0)
			close(s->fd);
		free(s->bits);
		free(s);
	}
}

/*
 * A lease as memd sent it is usable when its endpoint is one HELLO_OK
 * announced, its length is the pool's slab size and, for a lease asked
 * on a node, it is on that node.
 */
static bool lease_is_usable(const struct plink *lk, const struct wire_lease *l,
			    int node)
{
	return l->endpoint < lk->nendpoints &&
	       l->len_bytes == lk->p->slab_bytes &&
	       (node == WIRE_NODE_ANY || l->node == node);
}

/* Tracks a new slab of lk; appends it to p->slabs. Caller holds lock. */
static struct slab *slab_add_locked(struct pool *p, struct plink *lk,
				    const struct wire_lease *l, bool packed,
				    int node)
{
	struct slab *s = calloc(1, sizeof(*s));

	if (s && packed) {
		s->nchunks = (uint32_t)(l->len_bytes / CHUNK_BYTES);
		s->bits = calloc((s->nchunks + 63) / 64, 8);
	}
	if (!s || (packed && !s->bits)) {
		/* Not tracked means not released by us: memd reclaims it
		 * when the session ends. */
		pl_slab_free(s);
		return NULL;
	}
	s->l = *l;
	s->link = lk;
	s->fd = pl_link_shm_slab_fd(lk, l);
	s->fd_ro =
		s->fd >= 0 && (fcntl(s->fd, F_GETFL) & O_ACCMODE) == O_RDONLY;
	s->map = s->fd >= 0 && p->shm_map ? pl_shm_map_ro(s->fd, l->len_bytes)
					  : NULL;
	s->want_node = node;
	s->packed = packed;
	TP_DLIST_PUSH(p->slabs, s, prev, next);
	p->nslabs++;
	lk->nslabs++;
	return s;
}

/*
 * Checks and tracks the leases of one LEASE_OK / LEASE_GRANT_OK: k slabs
 * asked on node, stored to out[0 .. k-1]. Returns 0, -EPROTO (a lease we
 * cannot use; nothing tracked) or -ENOMEM (out[] has NULL holes).
 */
int pl_leases_take_locked(struct pool *p, struct plink *lk,
			  const struct wire_lease_ok *ok, uint32_t k,
			  bool packed, int node, struct slab **out)
{
	int r = 0;

	if (ok->count != k)
		return -EPROTO;
	for (uint32_t i = 0; i < k; i++) {
		if (!lease_is_usable(lk, &ok->lease[i], node)) {
			pool_log(LOG_ERR,
				 "alloc: memd=%s sent a lease on endpoint %u "
				 "node %d len %" PRIu64 " for node %d (%u "
				 "endpoints)",
				 lk->addr, ok->lease[i].endpoint,
				 ok->lease[i].node, ok->lease[i].len_bytes,
				 node, lk->nendpoints);
			return -EPROTO;
		}
	}
	for (uint32_t i = 0; i < k; i++) {
		out[i] = slab_add_locked(p, lk, &ok->lease[i], packed, node);
		if (!out[i])
			r = -ENOMEM;
	}
	return r;
}

/*
 * Leases n slabs on node (-1: any) from lk with LEASE; appends them to
 * p->slabs and out[] (which the caller zeroed: a slab that could not be
 * tracked leaves a NULL). Caller holds lock.
 */
static int lease_locked(struct pool *p, struct plink *lk, uint32_t n,
			bool packed, int node, struct slab **out)
{
	static const uint32_t max = WIRE_MAX_LEASES;
	struct wire_msg *req, *rep;
	uint32_t got = 0;
	int r = 0;

	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep) {
		free(req);
		free(rep);
		return -ENOMEM;
	}
	while (got < n) {
		uint32_t k = n - got < max ? n - got : max;
		uint64_t sent = mono_ms();
		char text[WIRE_MSG_MAX];

		memset(req, 0, sizeof(*req));
		req->type = WIRE_LEASE;
		req->u.lease.nslabs = k;
		req->u.lease.node = node;
		text[0] = '\0';
		r = rpc_call(lk->ctl, req, rep, WIRE_LEASE_OK, p->timeout_ms,
			     text, sizeof(text));
		if (r) {
			if (r == -ENOSPC)
				pool_log(LOG_INFO, "alloc: %s", text);
			else if (text[0])
				pool_log(LOG_WARNING,
					 "alloc: node=%d refused by memd: %s",
					 node, text);
			break;
		}
		r = pl_leases_take_locked(p, lk, &rep->u.lease_ok, k, packed,
					  node, out + got);
		if (r == -EPROTO)
			break;
		extend_validity(lk, sent);
		got += k;
		if (r)
			break;
	}
	free(req);
	free(rep);
	return r;
}

/* One RELEASE of k refs to lk; a lost link's leases are memd's to
 * reclaim, which is not our error. */
static int release_send(struct pool *p, struct plink *lk, struct wire_msg *req,
			struct wire_msg *rep, uint32_t k)
{
	int r;

	if (link_is_lost(lk))
		return 0;
	req->type = WIRE_RELEASE;
	req->u.release.count = k;
	r = rpc_call(lk->ctl, req, rep, WIRE_RELEASE_OK, p->timeout_ms, NULL,
		     0);
	return r == -ENOTCONN ? 0 : r;
}

/*
 * Releases slabs (already unlinked by the caller), in RELEASE batches per
 * link, and frees them. Caller holds lock.
 */
int pl_release_locked(struct pool *p, struct slab **v, uint32_t n)
{
	struct wire_msg *req, *rep;
	int first = 0, r;

	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep)
		first = -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct plink *lk;
		uint32_t k = 0;

		if (!v[i])
			continue;
		lk = v[i]->link;
		for (uint32_t j = i; j < n; j++) {
			if (!v[j] || v[j]->link != lk)
				continue;
			if (req && rep) {
				if (!k)
					memset(req, 0, sizeof(*req));
				req->u.release.ref[k].epoch = v[j]->l.epoch;
				req->u.release.ref[k].slab = v[j]->l.slab;
				req->u.release.ref[k].generation =
					v[j]->l.generation;
				k++;
			}
			lk->nslabs--;
			pl_slab_free(v[j]);
			v[j] = NULL;
			if (k == WIRE_MAX_LEASES) {
				r = release_send(p, lk, req, rep, k);
				first = first ? first : r;
				k = 0;
			}
		}
		if (k) {
			r = release_send(p, lk, req, rep, k);
			first = first ? first : r;
		}
	}
	free(req);
	free(rep);
	return first;
}

void pl_unlink_slab_locked(struct pool *p, struct slab *s)
{
	TP_DLIST_REMOVE(p->slabs, s, prev, next);
	p->nslabs--;
}

/*
 * Leases n slabs for a region of the session (and with replica a second
 * copy of each, on another donor, in rep[]). out[] and rep[] are zeroed
 * by the caller; on failure what is non-NULL there is tracked and the
 * caller drops it. Caller holds lock.
 */
static int lease_any_locked(struct pool *p, uint32_t n, bool packed, int node,
			    bool replica, struct slab **out, struct slab **rep)
{
	if (p->cluster)
		return pl_place_locked(p, n, packed, node, replica, out, rep);
	if (replica)
		return -EOPNOTSUPP;
	return lease_locked(p, p->links, n, packed, node, out);
}

static bool bit_get(const uint64_t *b, uint32_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static void bits_set(uint64_t *b, uint32_t from, uint32_t n, bool v)
{
	for (uint32_t i = from; i < from + n; i++) {
		if (v)
			b[i / 64] |= 1ull << (i % 64);
		else
			b[i / 64] &= ~(1ull << (i % 64));
	}
}

/* First fit of n free chunks; returns the first chunk or UINT32_MAX. */
static uint32_t first_fit(const struct slab *s, uint32_t n)
{
	uint32_t run = 0;

	for (uint32_t i = 0; i < s->nchunks; i++) {
		if (!(i % 64) && s->bits[i / 64] == ~0ull) {
			run = 0;
			i += 63;
			continue;
		}
		run = bit_get(s->bits, i) ? 0 : run + 1;
		if (run == n)
			return i + 1 - n;
	}
	return UINT32_MAX;
}

void pl_drop_slabs_locked(struct pool *p, struct slab **got, uint64_t n)
{
	uint32_t k = 0;

	for (uint64_t i = 0; i < n; i++)
		if (got[i]) {
			pl_unlink_slab_locked(p, got[i]);
			got[k++] = got[i];
		}
	pl_release_locked(p, got, k);
}

/* s can take n more chunks for a region on node (replica: with a mirror). */
static bool slab_can_pack(struct slab *s, uint32_t n, int node, bool replica)
{
	return s->packed && !s->is_mirror && s->want_node == node &&
	       (s->mirror != NULL) == replica && s->nchunks - s->used >= n &&
	       !link_is_lost(s->link) &&
	       !(s->mirror && link_is_lost(s->mirror->link));
}

/*
 * Packs len bytes into a packed slab of a live link leased for the same
 * node (replica: a slab pair whose both links are live).
 */
static int pack_locked(struct pool *p, uint64_t len, int node, bool replica,
		       struct extent *e)
{
	uint32_t n = (uint32_t)((len + CHUNK_BYTES - 1) / CHUNK_BYTES);
	struct slab *s, *fresh = NULL, *mirror = NULL;
	uint32_t at = UINT32_MAX;
	int r;

	for (s = p->slabs; s; s = s->next) {
		if (!slab_can_pack(s, n, node, replica))
			continue;
		at = first_fit(s, n);
		if (at != UINT32_MAX)
			break;
	}
	if (!s) {
		r = lease_any_locked(p, 1, true, node, replica, &fresh,
				     replica ? &mirror : NULL);
		if (r) {
			struct slab *v[2] = { fresh, mirror };

			pl_drop_slabs_locked(p, v, 2);
			return r;
		}
		s = fresh;
		s->mirror = mirror;
		if (mirror)
			mirror->is_mirror = true;
		at = 0;
	}
	bits_set(s->bits, at, n, true);
	s->used += n;
	e->slab = s;
	e->replica = s->mirror;
	e->off = (uint64_t)at * CHUNK_BYTES;
	e->len = len;
	return 0;
}

/* Frees one extent's space; slabs left empty go into *dead. */
static void unpack_locked(struct pool *p, struct extent *e, struct slab **dead,
			  uint32_t *ndead)
{
	struct slab *s = e->slab;

	if (s->packed) {
		uint32_t n =
			(uint32_t)((e->len + CHUNK_BYTES - 1) / CHUNK_BYTES);

		bits_set(s->bits, (uint32_t)(e->off / CHUNK_BYTES), n, false);
		s->used -= n;
		if (s->used)
			return;
	}
	pl_unlink_slab_locked(p, s);
	dead[(*ndead)++] = s;
	if (e->replica) {
		pl_unlink_slab_locked(p, e->replica);
		dead[(*ndead)++] = e->replica;
	}
}

/* ------------------------------------------------------------------ */
/* public: regions                                                      */

int pool_alloc(struct pool *p, size_t len, struct pool_region **out)
{
	return pool_alloc_node(p, len, WIRE_NODE_ANY, out);
}

/* The node all of reg's slabs are on, or -1 (none known, or several). */
static int region_node(const struct pool_region *reg)
{
	int node = reg->nextents ? reg->ext[0].slab->l.node : WIRE_NODE_ANY;

	for (uint32_t i = 1; i < reg->nextents; i++)
		if (reg->ext[i].slab->l.node != node)
			return WIRE_NODE_ANY;
	return node;
}

int pool_alloc_node(struct pool *p, size_t len, int node,
		    struct pool_region **out)
{
	return pool_alloc_ex(p, len, node, 0, out);
}

int pool_alloc_ex(struct pool *p, size_t len, int node, unsigned flags,
		  struct pool_region **out)
{
	bool replica = flags & POOL_ALLOC_REPLICA;
	struct slab **got = NULL, **rgot = NULL;
	struct pool_region *reg;
	uint64_t full, rem;
	uint32_t n;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	*out = NULL;
	if (len == 0 || node < WIRE_NODE_ANY || node >= WIRE_NODE_MAX ||
	    (flags & ~POOL_ALLOC_REPLICA))
		return -EINVAL;
	if (replica && !p->cluster)
		return -EOPNOTSUPP; /* one memd: no second donor */
	/* Only a lost session stops an allocation: the grant itself renews
	 * the session's leases. A cluster session places on donors that
	 * are up, whatever happened to others. */
	if (!p->cluster && link_is_lost(p->links))
		return -ENOTCONN;
	full = len / p->slab_bytes;
	rem = len % p->slab_bytes;
	if (rem >= p->slab_bytes / 2) {
		full++;
		rem = 0;
	}
	if (full > UINT32_MAX - 1)
		return -ENOSPC;
	n = (uint32_t)full + (rem ? 1 : 0);
	reg = calloc(1, sizeof(*reg) + n * sizeof(reg->ext[0]));
	if (full) {
		got = calloc(full, sizeof(*got));
		if (replica)
			rgot = calloc(full, sizeof(*rgot));
	}
	if (!reg || (full && !got) || (full && replica && !rgot)) {
		free(reg);
		free(got);
		free(rgot);
		return -ENOMEM;
	}
	reg->size = len;
	reg->nextents = n;
	reg->replicated = replica;
	pthread_mutex_lock(&p->lock);
	if (full) {
		r = lease_any_locked(p, (uint32_t)full, false, node, replica,
				     got, rgot);
		if (r) {
			/* What was tracked before the failure goes back. */
			pl_drop_slabs_locked(p, got, full);
			if (rgot)
				pl_drop_slabs_locked(p, rgot, full);
			goto unlock;
		}
		for (uint64_t i = 0; i < full; i++) {
			reg->ext[i].slab = got[i];
			reg->ext[i].replica = rgot ? rgot[i] : NULL;
			reg->ext[i].off = 0;
			reg->ext[i].len = p->slab_bytes;
		}
		/* Without a packed tail the last whole slab may be only
		 * partly used (a region of 1.6 slabs takes 2). */
		if (!rem)
			reg->ext[full - 1].len =
				len - (full - 1) * p->slab_bytes;
	}
	if (rem) {
		r = pack_locked(p, rem, node, replica, &reg->ext[full]);
		if (r && full) {
			pl_drop_slabs_locked(p, got, full);
			if (rgot)
				pl_drop_slabs_locked(p, rgot, full);
		}
	}
unlock:
	if (!r) {
		reg->node = region_node(reg);
		TP_DLIST_PUSH(p->regions, reg, prev, next);
		p->nregions++;
	}
	pthread_mutex_unlock(&p->lock);
	free(got);
	free(rgot);
	if (r) {
		free(reg);
		pool_log(LOG_INFO, "alloc: len=%zu node=%d flags=%#x err=%s",
			 len, node, flags, strerror(-r));
		return r;
	}
	*out = reg;
	return 0;
}

int pool_free(struct pool *p, struct pool_region *reg)
{
	struct slab *dead_inline[16], **dead = dead_inline;
	uint32_t ndead = 0;
	int r = 0;

	if (!reg)
		return 0;
	if (!p)
		return -EINVAL;
	if (reg->nextents > 8) {
		dead = calloc(2 * (size_t)reg->nextents, sizeof(*dead));
		if (!dead)
			return -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < reg->nextents; i++)
		unpack_locked(p, &reg->ext[i], dead, &ndead);
	if (ndead) {
		r = pl_release_locked(p, dead, ndead);
		pl_links_reap_locked(p);
	}
	TP_DLIST_REMOVE(p->regions, reg, prev, next);
	p->nregions--;
	pthread_mutex_unlock(&p->lock);
	if (dead != dead_inline)
		free(dead);
	free(reg);
	return r;
}

size_t pool_region_size(const struct pool_region *r)
{
	return r ? r->size : 0;
}

int pool_region_node(const struct pool_region *r)
{
	return r ? r->node : WIRE_NODE_ANY;
}

/* ------------------------------------------------------------------ */
/* internal views                                                       */

uint32_t pool_region_nextents(const struct pool_region *r)
{
	return r->nextents;
}

int pool_region_extent(const struct pool_region *r, uint32_t i,
		       struct wire_lease *lease, uint64_t *slab_off,
		       uint64_t *len)
{
	if (i >= r->nextents)
		return -ERANGE;
	*lease = r->ext[i].slab->l;
	*slab_off = r->ext[i].off;
	*len = r->ext[i].len;
	return 0;
}

int pool_region_copy(const struct pool_region *r, uint32_t i, unsigned copy,
		     uint32_t *donor_id, const char **addr)
{
	const struct slab *s;

	if (i >= r->nextents || copy > 1)
		return -ERANGE;
	s = copy ? r->ext[i].replica : r->ext[i].slab;
	if (!s)
		return -ENOENT;
	*donor_id = s->link->donor_id;
	*addr = s->link->addr;
	return 0;
}
