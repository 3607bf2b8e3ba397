// SPDX-License-Identifier: MIT
/*
 * libpool/paging_stream.c - transparent paging: fetching: read-ahead streams, batched faults, install-ahead, zero-fill streams.
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#include "libpool/paging_int.h"

/* ------------------------------------------------------------------ */
/* faults                                                               */

bool pg_page_is_present(struct mapping *m, size_t idx)
{
	unsigned char v[HUGE_SIZE / PAGE] = { 0 }; /* one per 4 KiB */

	return mincore(page_addr(m, idx), m->psize, v) == 0 && (v[0] & 1);
}

/*
 * Whether a fault at idx continues stream s past pages that are all
 * resident: a pass that read through pages kept from the last one
 * (behind_select()) and reached the first one missing. At most
 * pg_res_cap() state bytes are looked at.
 */
static bool resident_between(const struct mapping *m, const struct stream *s,
			     size_t idx)
{
	size_t from, to;

	if (s->dir > 0 && idx > s->up) {
		from = s->up;
		to = idx;
	} else if (s->dir < 0 && s->down != SIZE_MAX && idx < s->down) {
		from = idx + 1;
		to = s->down + 1;
	} else {
		return false;
	}
	if (to - from > pg_res_cap(m))
		return false;
	for (size_t i = from; i < to; i++)
		if (!(m->state[i] & PG_RESIDENT))
			return false;
	return true;
}

/*
 * The stream a fault at idx continues (its read-ahead doubles), or the
 * least recently used one, restarted at idx with one page.
 */
static struct stream *stream_at(struct mapping *m, size_t idx, bool *cont)
{
	struct stream *s, *lru = &m->streams[0];

	for (s = m->streams; s < m->streams + NSTREAM; s++) {
		int dir = 0;

		if (s->dir >= 0 && s->ra && idx == s->up)
			dir = 1;
		else if (s->dir <= 0 && s->ra && idx == s->down)
			dir = -1;
		else if (s->dir && s->ra && resident_between(m, s, idx))
			dir = s->dir;
		if (dir) {
			s->dir = dir;
			s->ra = s->ra * 2 > m->ra_max ? m->ra_max : s->ra * 2;
			s->used = ++m->stream_clock;
			*cont = true;
			return s;
		}
		if (s->used < lru->used)
			lru = s;
	}
	lru->dir = 0;
	lru->ra = 1;
	lru->win = lru->goal = 0; /* a miss: install-ahead starts over */
	lru->rescan = false;
	lru->used = ++m->stream_clock;
	*cont = false;
	return lru;
}

bool pg_page_is_fetchable(const struct mapping *m, size_t idx)
{
	return (m->state[idx] &
		(PG_RESIDENT | PG_REMOTE | PG_CLAIM | PG_FORK)) == PG_REMOTE;
}

/* Fetches before a pattern of writes is trusted; every how many fetches
 * one installs its pages protected anyway, to keep measuring it. */
#define WR_MIN_SEEN (4 * RA_MAX)
#define WR_PROBE_EVERY 4
#define WR_DECAY_AT 2048

/*
 * Whether this fetch installs its pages unprotected and dirty. A program
 * that writes most of the pages it reads back in (a sort, an update
 * pass) would otherwise take one WP fault per page after the fetch: a
 * trip through pool-uffd and a page-table update each, where writing
 * back a page that did not change costs a share of one RMA write. When
 * at least half of the pages recently installed protected took a WP
 * fault, pages are installed dirty, except on every WR_PROBE_EVERY-th
 * fetch, which goes on measuring.
 */
static bool fetch_wants_dirty(struct mapping *m)
{
	/* A huge page's WP fault is one trip per 2 MiB; a needless
	 * write-back of it is 2 MiB on the wire. */
	if (m->huge)
		return false;
	m->nfetch++;
	if (m->wr_seen < WR_MIN_SEEN || m->wr_hits * 2 < m->wr_seen)
		return false;
	return m->nfetch % WR_PROBE_EVERY != 0;
}

/*
 * Reads pages [lo, lo+n) from the region and installs them. idx is the
 * faulting page (installed last: that wakes its thread; unprotected and
 * dirty when write), or SIZE_MAX for a run installed ahead of a stream
 * (pg_install_ahead()). Room for the n pages is made by the caller.
 */
size_t pg_run_bytes(const struct mapping *m, size_t lo, size_t n)
{
	size_t off = lo << m->shift;

	return m->size - off < n * m->psize ? m->size - off : n * m->psize;
}

static int fetch_install(struct mapping *m, size_t lo, size_t n, size_t idx,
			 bool write, const uint8_t *buf);

/*
 * Where the region's bytes of pages [lo, lo+n) can be installed from
 * without a read (LIBPOOL_PAGING_DIRECT, default on): the same-host
 * path's mapping of the slab (LIBPOOL_SHM=map), checked as a read would
 * be (pool_region_mapped()); UFFDIO_COPY then copies straight from it,
 * so a fetch is one copy instead of two. NULL: read into the staging
 * pages (no such mapping, huge pages, or a run that ends inside its
 * last page, whose tail the staging copy zeroes); *err < 0: what the
 * read would have failed with.
 */
static const uint8_t *fetch_direct(struct mapping *m, size_t lo, size_t n,
				   int *err)
{
	uint64_t off;
	struct pool_region *r = seg_at(m, lo, &off);
	size_t bytes = pg_run_bytes(m, lo, n);
	const uint8_t *src;

	*err = 0;
	if (!pg_eng.direct_on || m->huge || bytes != n * m->psize)
		return NULL;
	src = pool_region_mapped(m->p, r, off, bytes, err);
	if (src)
		__atomic_add_fetch(&pg_eng.direct_pages, n, __ATOMIC_RELAXED);
	return src;
}

static int fetch_run(struct mapping *m, size_t lo, size_t n, size_t idx,
		     bool write)
{
	uint64_t off;
	struct pool_region *r = seg_at(m, lo, &off);
	uint64_t t0 = mono_ns();
	int ret;
	const uint8_t *src = fetch_direct(m, lo, n, &ret);

	if (src) {
		phase_add(POOL_PHASE_FETCH, t0);
		return fetch_install(m, lo, n, idx, write, src);
	}
	if (ret == 0)
		ret = pool_read(m->p, r, off, m->stage_in,
				pg_run_bytes(m, lo, n));
	phase_add(POOL_PHASE_FETCH, t0);
	if (ret) {
		pg_mapping_fail(m, ret, "fetch");
		return ret;
	}
	return fetch_install(m, lo, n, idx, write, m->stage_in);
}

/* Installs pages [lo, lo+n) read into buf: see fetch_run(). */
static int fetch_install(struct mapping *m, size_t lo, size_t n, size_t idx,
			 bool write, const uint8_t *buf)
{
	size_t bytes = pg_run_bytes(m, lo, n), at;
	bool dirty;
	int ret;
	uint64_t t0 = mono_ns();

	if (bytes < n * m->psize)
		memset((uint8_t *)buf + bytes, 0, n * m->psize - bytes);
	STAT_ADD(m, fetches, 1);
	STAT_ADD(m, pages_fetched, n);

	/* A write fault gets its page unprotected and dirty at once: it
	 * saves the writer a second trip (the WP fault); so do all pages
	 * when the program writes what it reads (fetch_wants_dirty()). The
	 * faulting page goes last: installing it wakes its thread. */
	dirty = fetch_wants_dirty(m);
	if (!dirty) {
		m->wr_seen += n - (write ? 1 : 0);
		if (m->wr_seen >= WR_DECAY_AT) {
			m->wr_seen /= 2;
			m->wr_hits /= 2;
		}
	}
	if (idx == SIZE_MAX) {
		ret = pg_uffd_copy(m, lo, n, buf, !dirty);
	} else {
		at = idx - lo;
		ret = 0;
		if (at)
			ret = pg_uffd_copy(m, lo, at, buf, !dirty);
		if (ret == 0 && at + 1 < n)
			ret = pg_uffd_copy(m, idx + 1, n - at - 1,
					   buf + (at + 1) * m->psize, !dirty);
		if (ret == 0)
			ret = pg_uffd_copy_mode(
				m, idx, 1, buf + at * m->psize,
				!(dirty || write),
				pg_eng.wake_split ? UFFDIO_COPY_MODE_DONTWAKE
						  : 0);
	}
	phase_add(POOL_PHASE_INSTALL, t0);
	/* A measurement (LIBPOOL_PAGING_WAKE_SPLIT=1): the faulting
	 * thread's wake-up as a step of its own, so that install is the
	 * copy alone (one more ioctl per fault). */
	if (ret == 0 && idx != SIZE_MAX && pg_eng.wake_split) {
		uint64_t tw = mono_ns();

		ret = pg_uffd_wake(m, idx, 1);
		phase_add(POOL_PHASE_WAKE, tw);
	}
	if (ret) {
		pg_mapping_fail(m, ret, "UFFDIO_COPY");
		return ret;
	}
	for (size_t i = lo; i < lo + n; i++) {
		uint8_t ref = 0;

		if (!(m->state[i] & PG_RESIDENT)) {
			pg_ring_push(m, i);
			if (!m->huge && pg_eng.clock_on && pg_eng.credit_on)
				m->credit[i] = pg_page_credit(m, i);
		}
		if (pg_page_refaulted(m, i)) {
			ref = PG_REF;
			STAT_ADD(m, refaults, 1);
		}
		m->state[i] = (uint8_t)(PG_RESIDENT | PG_REMOTE | ref |
					(dirty ? PG_DIRTY : 0));
	}
	/* A demand write: unprotected, so its reuse would not show;
	 * marked, the hand's first pass samples it (clock_select()). */
	if (write)
		m->state[idx] |= PG_DIRTY | PG_REF;
	return 0;
}

/* Pages [lo, lo+n) next to a stream that can be fetched: the run of
 * fetchable pages from 'from' going dir (+1 up, -1 down), at most limit. */
static size_t fetchable_run(const struct mapping *m, size_t from, int dir,
			    size_t limit, size_t *lo)
{
	size_t n = 0;

	*lo = from;
	if (dir >= 0) {
		while (n < limit && from + n < m->npages &&
		       seg_same(m, from, from + n) &&
		       pg_page_is_fetchable(m, from + n))
			n++;
	} else {
		while (n < limit && from - n < m->npages &&
		       seg_same(m, from, from - n) &&
		       pg_page_is_fetchable(m, from - n))
			n++;
		*lo = from + 1 - n;
	}
	return n;
}

/*
 * After a fault that continues stream st at full read-ahead, how many
 * pages to map ahead of the program (pg_install_ahead()): the window
 * doubles each time the program catches up with it again, up to a
 * quarter of the budget (AHEAD_MAX at most), so pages installed ahead are
 * never the FIFO's oldest.
 */
static void ahead_arm(struct mapping *m, struct stream *st, bool grown)
{
	size_t cap = pg_res_cap(m) / 4 < m->ahead_max ? pg_res_cap(m) / 4
						      : m->ahead_max;

	if (!m->ahead_on || st->dir == 0 || st->ra < m->ra_max ||
	    cap < m->ra_max) {
		st->win = st->goal = 0;
		return;
	}
	if (!st->win)
		st->win = m->ahead_run < cap ? m->ahead_run : cap;
	else if (grown)
		st->win = st->win * 2 > cap ? cap : st->win * 2;
	st->goal = st->win;
}

/* Fetches page idx and a read-ahead run next to it (above it, or below
 * it on a stream going down) from the region. */
int pg_fetch(struct mapping *m, size_t idx, bool write, bool again)
{
	bool cont;
	struct stream *st = stream_at(m, idx, &cont);
	size_t lo = idx, n = 1, limit;
	int ret;

	limit = pg_res_cap(m) / 4 < st->ra ? pg_res_cap(m) / 4 : st->ra;
	if (!again)
		n = fetchable_run(m, idx, st->dir, limit, &lo);
	if (n == 0) { /* cannot happen: idx is fetchable */
		lo = idx;
		n = 1;
	}
	st->up = lo + n;
	st->down = lo ? lo - 1 : SIZE_MAX;
	st->at = idx;
	if (!again) {
		/* a stream's first fault: taken as going up */
		st->rescan = m->evicted[idx] != 0;
		pg_behind_set(m, idx, st->dir,
			      cont && st->ra >= m->ra_max && st->rescan);
		/* the victims are dropped once the faulting thread is
		 * woken: pg_drop_late() */
		pg_eng.drop_defer = pg_eng.late_drop_on;
		ret = pg_make_room(m, n);
		pg_eng.drop_defer = false;
		m->behind_dir = 0;
		if (ret) {
			pg_drop_late_flush();
			return ret;
		}
	}
	ret = fetch_run(m, lo, n, idx, write);
	pg_drop_late_flush();
	if (ret == 0)
		ahead_arm(m, st, cont);
	return ret;
}

/*
 * Missing faults of one 4 KiB mapping on pages the region holds, read
 * in one batch from the userfaultfd (several threads faulting at once),
 * served together: a run for each (the read-ahead of its stream, within
 * the staging pages, never a page of another run: PG_CLAIM), room made
 * for all, every read started with pool_read_async() so that they travel
 * at once, then each run installed as a single fetch's would be (its
 * faulting page last). A fault whose page an earlier run holds is woken
 * by that run's install.
 */
void pg_fetch_batch(struct mapping *m, const struct bfault *f, size_t k)
{
	struct pool_op *ops[MSG_BATCH];
	struct stream *sts[MSG_BATCH];
	size_t lo[MSG_BATCH], n[MSG_BATCH], at[MSG_BATCH];
	bool cont[MSG_BATCH];
	size_t used = 0, started = 0;
	int ret = 0;

	for (size_t i = 0; i < k; i++) {
		struct stream *st = stream_at(m, f[i].idx, &cont[i]);
		size_t limit =
			pg_res_cap(m) / 4 < st->ra ? pg_res_cap(m) / 4 : st->ra;
		size_t room = m->stage_pages - used - (k - i - 1);

		if (limit > room)
			limit = room;
		if (!limit)
			limit = 1;
		n[i] = pg_page_is_fetchable(m, f[i].idx)
			       ? fetchable_run(m, f[i].idx, st->dir, limit,
					       &lo[i])
			       : 0;
		sts[i] = st;
		at[i] = used;
		if (!n[i])
			continue;
		for (size_t j = lo[i]; j < lo[i] + n[i]; j++)
			m->state[j] |= PG_CLAIM;
		st->up = lo[i] + n[i];
		st->down = lo[i] ? lo[i] - 1 : SIZE_MAX;
		st->at = f[i].idx;
		used += n[i];
	}
	ret = pg_make_room(m, used);
	for (size_t i = 0; i < k && ret == 0; i++) {
		uint64_t off;
		struct pool_region *r;

		if (!n[i])
			continue;
		r = seg_at(m, lo[i], &off);
		ret = pool_read_async(m->p, r, off,
				      m->stage_in + at[i] * m->psize,
				      pg_run_bytes(m, lo[i], n[i]), &ops[i]);
		if (ret == 0)
			started = i + 1;
	}
	for (size_t i = 0; i < started; i++) {
		int r;

		if (!n[i])
			continue;
		while ((r = pool_wait(m->p, ops[i], -1)) == -ETIMEDOUT)
			;
		if (r && !ret)
			ret = r;
	}
	if (ret)
		pg_mapping_fail(m, ret, "fetch");
	for (size_t i = 0; i < k; i++) {
		STAT_ADD(m, faults, 1);
		if (n[i] && ret == 0) {
			ret = fetch_install(m, lo[i], n[i], f[i].idx,
					    f[i].write,
					    m->stage_in + at[i] * m->psize);
			if (ret == 0)
				ahead_arm(m, sts[i], cont[i]);
		}
		if (ret) {
			for (size_t j = lo[i]; n[i] && j < lo[i] + n[i]; j++)
				m->state[j] &= (uint8_t)~PG_CLAIM;
			pg_fault_fail(m, f[i].tid, f[i].idx);
		}
	}
	STAT_ADD(m, batches, 1);
}

/*
 * One run installed ahead of a stream the program follows, from
 * pool-uffd when no fault is waiting: the program then finds the pages
 * mapped instead of faulting on them. Room is made first, like for a
 * fault, so the budget holds. Returns whether more is to do.
 */
bool pg_install_ahead(struct mapping *m)
{
	struct stream *st = NULL;
	size_t lo, n, from, lo2 = 0, n2 = 0;
	struct pool_op *op = NULL, *op1 = NULL;
	const uint8_t *src1, *src2 = NULL;
	struct pool_region *r1, *r2r;
	uint64_t off1, off2;
	int ret, r2 = 0;

	for (struct stream *s = m->streams; s < m->streams + NSTREAM; s++)
		if (s->goal && (!st || s->used > st->used))
			st = s;
	if (!st)
		return false;
	if (__atomic_load_n(&m->failed, __ATOMIC_ACQUIRE)) {
		st->goal = 0;
		return true;
	}
	from = st->dir > 0 ? st->up : st->down;
	n = fetchable_run(m, from, st->dir,
			  st->goal < m->ahead_run ? st->goal : m->ahead_run,
			  &lo);
	/* The run after it, read while this one is installed. Safe
	 * because no fault is served in between: its pages stay missing
	 * and the region's copy of them stays what was read. */
	if (n && st->goal > n) {
		from = st->dir > 0 ? lo + n : (lo ? lo - 1 : SIZE_MAX);
		n2 = fetchable_run(m, from, st->dir,
				   st->goal - n < m->ahead_run ? st->goal - n
							       : m->ahead_run,
				   &lo2);
	}
	pg_behind_set(m, st->at, st->dir, st->rescan);
	ret = n ? pg_make_room(m, n + n2) : 0;
	m->behind_dir = 0;
	if (n == 0 || ret) {
		st->goal = 0; /* the end of the stream, or a failure */
		return true;
	}
	/* Both reads go out at once; the second goes on while the first
	 * run is installed. A run the same-host mapping holds is not read:
	 * it is installed from there (fetch_direct()). */
	src1 = fetch_direct(m, lo, n, &ret);
	if (!src1 && ret == 0) {
		r1 = seg_at(m, lo, &off1);
		ret = pool_read_async(m->p, r1, off1, m->stage_in,
				      pg_run_bytes(m, lo, n), &op1);
	}
	if (ret == 0 && n2) {
		src2 = fetch_direct(m, lo2, n2, &r2);
		r2r = seg_at(m, lo2, &off2);
		if (!src2 &&
		    (r2 || pool_read_async(m->p, r2r, off2, m->stage_in2,
					   pg_run_bytes(m, lo2, n2), &op)))
			n2 = 0; /* not started: the next call reads it */
		r2 = 0;
	}
	if (ret == 0 && op1)
		while ((ret = pool_wait(m->p, op1, -1)) == -ETIMEDOUT)
			;
	if (ret) {
		pg_mapping_fail(m, ret, "fetch");
		if (n2 && op)
			while (pool_wait(m->p, op, -1) == -ETIMEDOUT)
				;
		st->goal = 0;
		return true;
	}
	ret = fetch_install(m, lo, n, SIZE_MAX, false,
			    src1 ? src1 : m->stage_in);
	if (n2) {
		if (op)
			while ((r2 = pool_wait(m->p, op, -1)) == -ETIMEDOUT)
				;
		if (r2)
			pg_mapping_fail(m, r2, "fetch");
		if (ret == 0 && r2 == 0)
			ret = fetch_install(m, lo2, n2, SIZE_MAX, false,
					    src2 ? src2 : m->stage_in2);
		else
			n2 = 0;
	}
	if (ret || r2) {
		st->goal = 0;
		return true;
	}
	STAT_ADD(m, ahead_pages, n + n2);
	st->goal -= n + n2;
	if (n2) { /* the stream now ends at the second run */
		lo = lo2;
		n = n2;
	}
	if (st->dir > 0)
		st->up = lo + n;
	else
		st->down = lo ? lo - 1 : SIZE_MAX;
	return true;
}

bool pg_ahead_pending(const struct mapping *m)
{
	for (const struct stream *s = m->streams; s < m->streams + NSTREAM; s++)
		if (s->goal)
			return true;
	return false;
}

/*
 * A write fault on a page the region never held: the page, and on a
 * sequential stream of such faults (up or down: GNU sort fills its
 * buffer with lines going up and their descriptors going down) the run
 * of untouched pages beyond it, are mapped as zeros, unprotected, so a
 * program filling fresh memory takes one fault per run instead of one
 * per page. Runs double from 1 up to zero_max pages (2 MiB), at most a
 * quarter of the budget. The run's pages are PG_DIRTY | PG_ZERO:
 * protected before eviction like any dirty page, and written back only
 * if they are no longer zero.
 */
static struct zstream *zstream_at(struct mapping *m, size_t idx, int *dir)
{
	struct zstream *lru = m->zstreams;

	for (struct zstream *z = m->zstreams; z < m->zstreams + NZSTREAM; z++) {
		/* A stream may skip pages it does not write (a sparse
		 * fill): up to ra_max of them. */
		if (z->hi != SIZE_MAX && idx >= z->hi &&
		    idx - z->hi < m->ra_max) {
			*dir = 1;
			z->used = ++m->zstream_clock;
			return z;
		}
		if (z->lo != SIZE_MAX && idx < z->lo &&
		    z->lo - idx <= m->ra_max) {
			*dir = -1;
			z->used = ++m->zstream_clock;
			return z;
		}
		if (z->used < lru->used)
			lru = z;
	}
	*dir = 0;
	*lru = (struct zstream){ .lo = idx, .hi = idx + 1, .ra = 1 };
	lru->used = ++m->zstream_clock;
	return lru;
}

/* UFFDIO_COPY of zeros into n pages from idx (m->zero is ra_max pages). */
static int zero_copy(struct mapping *m, size_t idx, size_t n)
{
	while (n) {
		size_t k = n < m->ra_max ? n : m->ra_max;
		int ret = pg_uffd_copy(m, idx, k, m->zero, false);

		if (ret)
			return ret;
		idx += k;
		n -= k;
	}
	return 0;
}

/* Pages m can still map without an eviction, in its budget and the
 * process's. */
static size_t room_free(const struct mapping *m)
{
	size_t r = m->nres < m->max_res ? m->max_res - m->nres : 0;

	if (pg_eng.budget != SIZE_MAX) {
		size_t p =
			pg_eng.resident < pg_eng.budget
				? (pg_eng.budget - pg_eng.resident) >> m->shift
				: 0;

		r = p < r ? p : r;
	}
	return r;
}

int pg_zero_fill(struct mapping *m, size_t idx)
{
	size_t n = 1, limit, lo, room, live = live_pages(m);
	struct zstream *z;
	int dir, ret;

	z = zstream_at(m, idx, &dir);
	if (dir)
		z->ra = z->ra * 2 > m->zero_max ? m->zero_max : z->ra * 2;
	/* A fill: see behind_victim(). Fresh pages are no rescan: 4 KiB
	 * pages are not evicted behind a fill. */
	pg_behind_set(m, idx, dir, false);
	limit = pg_res_cap(m) / 4 < z->ra ? pg_res_cap(m) / 4 : z->ra;
	/* Beyond ra_max pages a run takes at most an eighth of the free
	 * room: pages the program has not asked for yet never push out
	 * pages it uses, and what a run maps past the end of a fill stays
	 * a small part of the room left (a program that fits its budget
	 * keeps fitting: docs/paging.md). */
	room = room_free(m) / 8;
	if (limit > m->ra_max && limit > room)
		limit = room > m->ra_max ? room : m->ra_max;
	if (dir < 0) {
		while (n < limit && idx >= n &&
		       !(m->state[idx - n] &
			 (PG_RESIDENT | PG_REMOTE | PG_FORK)))
			n++;
		lo = idx + 1 - n;
	} else {
		while (n < limit && idx + n < live &&
		       !(m->state[idx + n] &
			 (PG_RESIDENT | PG_REMOTE | PG_FORK)))
			n++;
		lo = idx;
	}
	ret = pg_make_room(m, n);
	m->behind_dir = 0;
	if (ret)
		return ret;
	/* the faulting page first: its thread goes on meanwhile */
	ret = pg_uffd_copy(m, idx, 1, m->zero, false);
	if (ret == -EEXIST) {
		/* Raced with nothing we know of: keep it, as dirty. */
		pg_uffd_wake(m, idx, 1);
		n = 1;
		lo = idx;
		ret = 0;
	}
	if (ret)
		return ret;
	pg_ring_push(m, idx);
	m->state[idx] = PG_RESIDENT | PG_DIRTY | PG_REF; /* see fetch_install */
	if (dir < 0)
		z->lo = lo;
	else
		z->hi = lo + n; /* a new stream: zstream_at() set lo */
	/* The run: missing pages only pool-uffd fills, so any error here
	 * is the kernel's, and pages it did map would be untracked. */
	if (n > 1) {
		size_t from = dir < 0 ? lo : idx + 1;

		ret = zero_copy(m, from, n - 1);
		if (ret)
			return ret;
		for (size_t i = from; i < from + n - 1; i++) {
			pg_ring_push(m, i);
			m->state[i] = PG_RESIDENT | PG_DIRTY | PG_ZERO;
		}
	}
	STAT_ADD(m, zero_fills, n);
	return 0;
}
