// SPDX-License-Identifier: MIT
/*
 * libpool/pool_io.c - region I/O (pool_read, pool_write and their
 * async forms, pool_wait, pool_test): a range cut into pieces, posted over
 * the fabric or through slab memfds, waited for and settled; a
 * replicated region's writes go to both copies, and an op that lost a
 * copy starts again on the live ones.
 */
#include "libpool/pool_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* public: I/O                                                          */

/* Number of RMA pieces [off, off+len) of r splits into. */
static size_t count_pieces(const struct pool_region *r, uint64_t off,
			   uint64_t len, size_t xfer)
{
	size_t n = 0;

	for (uint32_t i = 0; i < r->nextents && len; i++) {
		const struct extent *e = &r->ext[i];
		uint64_t take;

		if (off >= e->len) {
			off -= e->len;
			continue;
		}
		take = e->len - off < len ? e->len - off : len;
		n += (take + xfer - 1) / xfer;
		len -= take;
		off = 0;
	}
	return n;
}

static int map_status(int s)
{
	/* -ETIMEDOUT from pool_wait means "still running, wait again"; a
	 * transfer the provider timed out is -ETIME. */
	return s == -ECANCELED ? -ENOTCONN : s == -ETIMEDOUT ? -ETIME : s;
}

static __attribute__((noinline)) void op_release_mrs(struct pool_op *op)
{
	if (op->lmr.mr)
		fab_mr_close(op->lmr.mr);
	for (unsigned i = 0; i < op->nxmr; i++)
		fab_mr_close(op->xmr[i].mr);
	if (op->nxmr)
		free(op->xmr);
}

static void op_release(struct pool_op *op)
{
	if (__builtin_expect(op->lmr.mr || op->nxmr, 0))
		op_release_mrs(op);
	if (op->ops != op->inline_ops)
		free(op->ops);
	if (op->heap)
		free(op);
}

/*
 * The local descriptor of op's buffer for RMA on lk: NULL unless lk's
 * provider wants local registrations (FAB_MR_LOCAL), then a registration
 * in lk's domain made on first use. Caller holds lk->ep_rw with lk->ep
 * open.
 */
static int op_desc(struct pool_op *op, struct plink *lk, void **desc)
{
	struct op_mr *m;
	int r;

	*desc = NULL;
	if (!(lk->mr_mode & FAB_MR_LOCAL))
		return 0;
	if (op->lmr.mr && op->lmr.link == lk) {
		*desc = fab_mr_desc(op->lmr.mr);
		return 0;
	}
	for (unsigned i = 0; i < op->nxmr; i++)
		if (op->xmr[i].link == lk) {
			*desc = fab_mr_desc(op->xmr[i].mr);
			return 0;
		}
	if (op->lmr.mr) {
		m = realloc(op->nxmr ? op->xmr : NULL,
			    (op->nxmr + 1) * sizeof(*m));
		if (!m)
			return -ENOMEM;
		op->xmr = m;
		m = &op->xmr[op->nxmr];
	} else {
		m = &op->lmr;
	}
	r = fab_mr_reg(lk->fd, lk->ep, op->buf, op->bytes, FAB_ACCESS_LOCAL, 0,
		       &m->mr);
	if (r)
		return r;
	m->link = lk;
	if (m != &op->lmr)
		op->nxmr++;
	*desc = fab_mr_desc(m->mr);
	return 0;
}

/*
 * Waits for every piece of op. Returns 0 when all completed (results in
 * the pieces), -ETIMEDOUT when one is still running at the deadline.
 */
static int op_wait_all(struct pool_op *op, int timeout_ms)
{
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
	struct plink *cur = NULL;
	int ret = 0;

	for (size_t i = 0; i < op->n; i++) {
		struct fab_op *f = &op->ops[i];
		struct plink *lk = f->arg;
		uint64_t now;
		int r;

		if (__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
			continue;
		if (lk != cur) {
			if (cur)
				pthread_rwlock_unlock(&cur->ep_rw);
			pthread_rwlock_rdlock(&lk->ep_rw);
			cur = lk;
		}
		if (!lk->ep)
			continue; /* closed: fab_ep_close completed it */
		now = mono_ms();
		r = fab_op_wait(lk->ep, f,
				now >= deadline ? 0 : (int)(deadline - now));
		if (r == -ETIMEDOUT &&
		    !__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE)) {
			ret = -ETIMEDOUT;
			break;
		}
	}
	if (cur)
		pthread_rwlock_unlock(&cur->ep_rw);
	return ret;
}

/* Fails every link that still has a piece of op in flight: closing the
 * endpoint is what guarantees the provider will not touch the buffer
 * after we return. */
static void op_fail_pending(struct pool_op *op, const char *why)
{
	for (size_t i = 0; i < op->n; i++)
		if (!__atomic_load_n(&op->ops[i].complete, __ATOMIC_ACQUIRE))
			pl_link_fail(op->ops[i].arg, -ETIMEDOUT, why);
}

/*
 * One piece through the slab's memfd (same-host link): copied before
 * this returns, so the piece is complete at once. A revoked slab's old
 * file reads zeros and refuses writes (EPERM): -ESTALE; but the lease's
 * validity is checked first, as for RMA, so a revoked lease is not read.
 */
static int shm_piece(struct pool *p, struct fab_op *f, const struct slab *s,
		     uint64_t at, uint8_t *b, uint64_t len, bool write,
		     uint64_t *now)
{
	struct pollfd pfd = { .fd = s->link->shm_sock, .events = POLLRDHUP };
	int r = link_leases_usable(s->link, now);

	if (r)
		return r;
	/* Over the fabric a dead memd fails the next transfer; here
	 * nothing would: its socket's hang-up is what says so. */
	if (poll(&pfd, 1, 0) > 0) {
		pl_link_fail(s->link, -ENOTCONN,
			     "memd closed its same-host socket");
		return -ENOTCONN;
	}
	r = pl_shm_copy(s->fd, s->map, b, len, at, write);
	if (!r)
		__atomic_add_fetch(&p->st_shm_bytes, len, __ATOMIC_RELAXED);
	f->arg = s->link;
	f->status = r;
	__atomic_store_n(&f->complete, 1, __ATOMIC_RELEASE);
	return 0;
}

/*
 * The bytes [off, off + len) of r where this process maps them, for a
 * caller that copies them itself (the paging engine's UFFDIO_COPY takes
 * them as its source: no read into a buffer first). Only the same-host
 * path with LIBPOOL_SHM=map has such a mapping (pl_shm_map_ro: a
 * read-only shared mapping of the slab's memfd, sealed against
 * shrinking). The checks are shm_piece's for a read through that mapping
 * (the lease valid, memd's socket not hung up), made here; the caller's
 * copy comes after them, as shm_piece's memcpy does, so a lease revoked in
 * between reads the punched file's zeros, never another tenant's bytes.
 * Counted as one read of len bytes. NULL and *err 0: no mapping serves
 * all of it (fabric, pread, a replicated region, bytes across two
 * extents): read them instead. NULL and *err < 0: what a read would have
 * failed with.
 */
const uint8_t *pool_region_mapped(struct pool *p, struct pool_region *r,
				  uint64_t off, size_t len, int *err)
{
	const struct slab *s;
	struct pollfd pfd;
	uint64_t now = 0;

	*err = 0;
	if (!p || !r || !len || off > r->size || len > r->size - off ||
	    r->replicated)
		return NULL;
	for (uint32_t i = 0; i < r->nextents; i++) {
		const struct extent *e = &r->ext[i];

		if (off >= e->len) {
			off -= e->len;
			continue;
		}
		s = e->slab;
		if (len > e->len - off || e->replica || s->fd < 0 || !s->map)
			return NULL;
		*err = link_leases_usable(s->link, &now);
		if (*err)
			return NULL;
		pfd = (struct pollfd){ .fd = s->link->shm_sock,
				       .events = POLLRDHUP };
		if (poll(&pfd, 1, 0) > 0) {
			pl_link_fail(s->link, -ENOTCONN,
				     "memd closed its same-host socket");
			*err = -ENOTCONN;
			return NULL;
		}
		__atomic_add_fetch(&p->st_shm_bytes, len, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->st_ops, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->st_read, len, __ATOMIC_RELAXED);
		return s->map + e->off + off;
	}
	return NULL;
}

/*
 * Posts one piece of a paired op to slab s (at its offset at) as op's
 * next piece. The caller holds *cur's ep_rw (or *cur is NULL); a piece on
 * another link switches to that link's, checking the link first. (The
 * one-copy path in io_start does the same inline.)
 */
static __attribute__((noinline)) int
post_piece(struct pool *p, struct pool_op *op, struct plink **cur, void **desc,
	   uint64_t *now, const struct slab *s, uint64_t at, uint8_t *b,
	   uint64_t len)
{
	struct plink *lk = s->link;
	struct fab_op *f = &op->ops[op->n];
	uint64_t peer, raddr = s->l.base + at;
	int r;

	if (s->fd >= 0 && !(op->write && s->fd_ro)) {
		r = shm_piece(p, f, s, at, b, len, op->write, now);
		if (!r)
			op->n++;
		return r;
	}
	if (lk != *cur) {
		if (*cur)
			pthread_rwlock_unlock(&(*cur)->ep_rw);
		*cur = NULL;
		r = link_usable(lk, now);
		if (r)
			return r;
		pthread_rwlock_rdlock(&lk->ep_rw);
		*cur = lk;
		if (!lk->ep)
			return pl_link_no_ep_err(lk);
		r = op_desc(op, lk, desc);
		if (r)
			return r;
	}
	peer = lk->peer[s->l.endpoint];
	f->arg = lk;
	r = op->write ? fab_ep_write(lk->ep, b, len, *desc, peer, raddr,
				     s->l.key, f, p->timeout_ms)
		      : fab_ep_read(lk->ep, b, len, *desc, peer, raddr,
				    s->l.key, f, p->timeout_ms);
	if (r)
		return r;
	op->n++;
	return 0;
}

/* A piece for a copy that is dead for good: complete, -ENOTCONN. It
 * names no link for pl_piece_status() to fail: the link is lost already,
 * or its fabric was refused, which must not end it (its leases and the
 * same-host path live on, and its other transfers say EPROTO). */
static void dead_piece(struct pool_op *op)
{
	struct fab_op *f = &op->ops[op->n++];

	f->arg = NULL;
	f->status = -ENOTCONN;
	f->complete = 1;
}

/*
 * Whether s can never be reached by this process: its link's fabric was
 * refused (fab_err: FI_OFI_RXM_BUFFER_SIZE differs) and the same-host
 * path does not serve this transfer. For a replicated region that copy
 * is as good as dead: the other one serves (one err line per link).
 */
static bool copy_refused(const struct slab *s, bool write)
{
	struct plink *lk = s->link;

	if (s->fd >= 0 && !(write && s->fd_ro))
		return false;
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pl_link_fabric_wait(lk);
	return lk->fab_err && pl_link_no_ep_err(lk);
}

/* The copy of e to read: the first whose link is usable and whose
 * fabric was not refused. */
static const struct slab *read_copy(const struct extent *e, uint64_t *now)
{
	if (e->replica &&
	    (link_usable(e->slab->link, now) || copy_refused(e->slab, false)) &&
	    !link_usable(e->replica->link, now) &&
	    !copy_refused(e->replica, false))
		return e->replica;
	return e->slab;
}

static int io_start(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op *op)
{
	struct plink *cur = NULL;
	uint8_t *b = buf;
	void *desc = NULL;
	uint64_t now = 0;
	size_t n, xfer;
	int ret;

	op->p = p;
	op->r = r;
	op->off = off;
	op->heap = false;
	op->write = write;
	op->paired = false;
	op->buf = buf;
	op->bytes = len;
	op->ops = op->inline_ops;
	op->n = 0;
	op->lmr.mr = NULL; /* lmr.link is valid only with lmr.mr */
	op->nxmr = 0;	   /* xmr is valid only with nxmr */
	if (!p || !r || (!buf && len))
		return -EINVAL;
	if (off > r->size || len > r->size - off)
		return -ERANGE;
	if (len == 0)
		return link_usable(read_copy(&r->ext[0], &now)->link, &now);
	op->paired = write && r->replicated;
	xfer = __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
	n = count_pieces(r, off, len, xfer) << op->paired;
	if (n > INLINE_OPS) {
		op->ops = calloc(n, sizeof(*op->ops));
		if (!op->ops) {
			op->ops = op->inline_ops;
			return -ENOMEM;
		}
	} else {
		memset(op->inline_ops, 0, sizeof(op->inline_ops));
	}

	for (uint32_t i = 0; i < r->nextents && len; i++) {
		const struct extent *e = &r->ext[i];
		const struct slab *s = e->slab;
		uint64_t take, at;

		if (off >= e->len) {
			off -= e->len;
			continue;
		}
		if (!write && e->replica)
			s = read_copy(e, &now);
		take = e->len - off < len ? e->len - off : len;
		at = e->off + off;
		for (uint64_t done = 0; done < take;) {
			uint64_t piece =
				take - done < xfer ? take - done : xfer;

			if (!op->paired) {
				/* The common case, kept lean: one copy. */
				struct fab_op *f = &op->ops[op->n];
				uint64_t raddr = s->l.base + at + done;

				if (s->fd >= 0 && !(write && s->fd_ro)) {
					ret = shm_piece(p, f, s, at + done, b,
							piece, write, &now);
					if (ret)
						goto unlock;
					op->n++;
					b += piece;
					done += piece;
					continue;
				}
				if (s->link != cur) {
					if (cur)
						pthread_rwlock_unlock(
							&cur->ep_rw);
					cur = NULL;
					ret = link_usable(s->link, &now);
					if (ret)
						goto unlock;
					cur = s->link;
					pthread_rwlock_rdlock(&cur->ep_rw);
					if (!cur->ep) {
						ret = pl_link_no_ep_err(cur);
						goto unlock;
					}
					ret = op_desc(op, cur, &desc);
					if (ret)
						goto unlock;
				}
				f->arg = cur;
				ret = write ? fab_ep_write(
						      cur->ep, b, piece, desc,
						      cur->peer[s->l.endpoint],
						      raddr, s->l.key, f,
						      p->timeout_ms)
					    : fab_ep_read(
						      cur->ep, b, piece, desc,
						      cur->peer[s->l.endpoint],
						      raddr, s->l.key, f,
						      p->timeout_ms);
				if (ret)
					goto unlock;
				op->n++;
			} else {
				for (int c = 0; c < 2; c++) {
					const struct slab *cs =
						c ? e->replica : e->slab;

					if (link_is_lost(cs->link) ||
					    copy_refused(cs, true)) {
						dead_piece(op);
						continue;
					}
					ret = post_piece(p, op, &cur, &desc,
							 &now, cs, at + done, b,
							 piece);
					if (ret)
						goto unlock;
				}
			}
			b += piece;
			done += piece;
		}
		len -= take;
		off = 0;
	}
	ret = 0;
unlock:
	if (cur)
		pthread_rwlock_unlock(&cur->ep_rw);
	if (ret && op->n) {
		/* Pieces already posted still own buf: settle them first. */
		if (op_wait_all(op, p->timeout_ms) == -ETIMEDOUT)
			op_fail_pending(op, "transfer timed out");
	}
	if (ret)
		op_release(op);
	if (is_transport_error(ret)) {
		if (cur)
			pl_link_fail(cur, -ENOTCONN,
				     "posting a transfer failed");
		ret = -ENOTCONN;
	}
	return ret;
}

/* The status of one piece; a transport error fails its link. */
int pl_piece_status(struct fab_op *f)
{
	int s = f->status;

	if (!s)
		return 0;
	s = map_status(s);
	if (is_transport_error(s)) {
		struct plink *lk = f->arg;

		/* Every later call on that link must fail fast too, not
		 * only the ones that reach the dead connection. */
		if (lk && !link_is_lost(lk))
			pl_link_fail(lk, -ENOTCONN, "transfer failed");
		s = -ENOTCONN;
	}
	return s;
}

/*
 * The result of a completed op. A paired range is written when one copy
 * was and the other is dead for good (its link failed, or its fabric was
 * refused: copy_refused(); both -ENOTCONN); any other failure of a copy
 * is the op's error, as the copies may differ.
 */
static int op_settle(struct pool_op *op)
{
	int r = 0;

	if (!op->paired) {
		for (size_t i = 0; i < op->n; i++) {
			int s = pl_piece_status(&op->ops[i]);

			if (s && !r)
				r = s;
		}
		return r;
	}
	for (size_t i = 0; i + 1 < op->n; i += 2) {
		int a = pl_piece_status(&op->ops[i]);
		int b = pl_piece_status(&op->ops[i + 1]);
		int e;

		if (!a && !b)
			continue;
		if ((!a && b == -ENOTCONN) || (!b && a == -ENOTCONN))
			continue;
		e = a && a != -ENOTCONN	  ? a
		    : b && b != -ENOTCONN ? b
					  : -ENOTCONN;
		if (!r)
			r = e;
	}
	return r;
}

/*
 * Starts op again after a copy of a replicated region was lost: the
 * start picks the live copies. Returns 0 (op in flight again) or the
 * error; op->heap is kept. At most IO_TRIES starts in all.
 */
static int io_restart(struct pool *p, struct pool_op *op)
{
	bool heap = op->heap;
	int r = -ENOTCONN;

	while (r == -ENOTCONN && op->tries < IO_TRIES) {
		unsigned tries = op->tries + 1;

		r = io_start(p, op->r, op->off, op->buf, op->bytes, op->write,
			     op);
		op->tries = tries;
	}
	op->heap = heap;
	return r;
}

static void io_count(struct pool *p, const struct pool_op *op, int r)
{
	__atomic_add_fetch(&p->st_ops, 1, __ATOMIC_RELAXED);
	if (r)
		__atomic_add_fetch(&p->st_errors, 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(op->write ? &p->st_written : &p->st_read,
				   op->bytes, __ATOMIC_RELAXED);
}

/*
 * Completes op (waited or failed): result, stats, resources. With again
 * (a caller that can wait once more), a replicated region's op that lost
 * a copy starts again on the live ones: then *again is true and op is in
 * flight.
 */
static __attribute__((noinline)) int
io_finish_restart(struct pool *p, struct pool_op *op, bool *again)
{
	bool heap = op->heap;
	int r;

	op->heap = false;
	op_release(op);
	op->heap = heap;
	r = io_restart(p, op);
	if (!r) {
		*again = true;
		return 0;
	}
	/* Nothing in flight, nothing held: io_start released it. */
	io_count(p, op, r);
	if (heap)
		free(op);
	return r;
}

static int io_finish(struct pool *p, struct pool_op *op, bool *again)
{
	int r = op_settle(op);

	if (__builtin_expect(r == -ENOTCONN, 0)) {
		pool_log(LOG_WARNING, "io: transfer err=%s", strerror(-r));
		if (again && op->r->replicated && op->tries < IO_TRIES)
			return io_finish_restart(p, op, again);
	}
	io_count(p, op, r);
	op_release(op);
	return r;
}

/* Starts an op; a replicated region retries on its live copies. */
static int io_begin(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op *op)
{
	int ret;

	op->tries = 1;
	ret = io_start(p, r, off, buf, len, write, op);
	if (ret == -ENOTCONN && r && r->replicated)
		ret = io_restart(p, op);
	return ret;
}

/* Waits for op and finishes it, restarting as io_finish says. */
static int io_wait(struct pool *p, struct pool_op *op, int timeout_ms)
{
	for (;;) {
		bool again = false;
		int r;

		if (op_wait_all(op, timeout_ms) == -ETIMEDOUT)
			return -ETIMEDOUT;
		r = io_finish(p, op, &again);
		if (!again)
			return r;
	}
}

static int io_sync(struct pool *p, struct pool_region *r, uint64_t off,
		   void *buf, size_t len, bool write)
{
	struct pool_op op;
	int ret = io_begin(p, r, off, buf, len, write, &op);

	if (ret)
		return ret;
	for (;;) {
		bool again = false;

		ret = io_wait(p, &op, p->timeout_ms);
		if (ret != -ETIMEDOUT)
			return ret;
		/* Closing the stuck links' endpoints completes the op; a
		 * replicated region then goes on from its live copies. */
		op_fail_pending(&op, "transfer timed out");
		ret = io_finish(p, &op, &again);
		if (!again)
			return ret == -ENOTCONN ? -ETIMEDOUT : ret;
	}
}

int pool_read(struct pool *p, struct pool_region *r, uint64_t off, void *buf,
	      size_t len)
{
	return io_sync(p, r, off, buf, len, false);
}

int pool_write(struct pool *p, struct pool_region *r, uint64_t off,
	       const void *buf, size_t len)
{
	return io_sync(p, r, off, (void *)buf, len, true);
}

static int io_async(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op **out)
{
	struct pool_op *op;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	ret = io_begin(p, r, off, buf, len, write, op);
	if (ret) {
		free(op);
		return ret;
	}
	op->heap = true;
	*out = op;
	return 0;
}

int pool_read_async(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, struct pool_op **op)
{
	return io_async(p, r, off, buf, len, false, op);
}

int pool_write_async(struct pool *p, struct pool_region *r, uint64_t off,
		     const void *buf, size_t len, struct pool_op **op)
{
	return io_async(p, r, off, (void *)buf, len, true, op);
}

int pool_wait(struct pool *p, struct pool_op *op, int timeout_ms)
{
	if (!p || !op || op->p != p)
		return -EINVAL;
	if (timeout_ms < 0)
		timeout_ms = p->timeout_ms;
	return io_wait(p, op, timeout_ms);
}

int pool_test(struct pool *p, struct pool_op *op)
{
	bool progressed = false;

	if (!p || !op || op->p != p)
		return -EINVAL;
	for (size_t i = 0; i < op->n; i++) {
		struct plink *lk = op->ops[i].arg;

		if (__atomic_load_n(&op->ops[i].complete, __ATOMIC_ACQUIRE))
			continue;
		if (progressed)
			return 0;
		/* Nobody else may be progressing: do it once here. */
		pthread_rwlock_rdlock(&lk->ep_rw);
		if (lk->ep)
			fab_ep_progress(lk->ep, 0);
		pthread_rwlock_unlock(&lk->ep_rw);
		progressed = true;
		i--; /* look at this piece again */
	}
	return 1;
}
