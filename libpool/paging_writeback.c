// SPDX-License-Identifier: MIT
/*
 * libpool/paging_writeback.c - transparent paging: write-back of dirty pages and dropping pages.
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#include "libpool/paging_int.h"

static size_t page_bytes(const struct mapping *m, size_t idx)
{
	size_t off = idx << m->shift;

	return m->size - off < m->psize ? m->size - off : m->psize;
}

/*
 * Whether resident page idx must be written back before it is dropped.
 * PG_ZERO pages were zero when mapped and the region holds nothing for
 * them: if they are still zero, dropping them loses nothing (they read as
 * zero again), whatever PG_DIRTY says.
 */
bool pg_page_needs_writeback(const struct mapping *m, size_t idx)
{
	uint8_t s = m->state[idx];

	if (!(s & (PG_DIRTY | PG_ZERO)))
		return false;
	if ((s & PG_ZERO) && !(s & PG_REMOTE) &&
	    pg_page_is_zero(page_addr(m, idx), m->psize))
		return false;
	return true;
}

/* Length of the run of consecutive pages starting at v[i], within one
 * segment (one RMA each). */
static size_t run_len(const struct mapping *m, const size_t *v, size_t i,
		      size_t n)
{
	size_t k = 1;

	while (i + k < n && v[i + k] == v[i] + k && seg_same(m, v[i], v[i + k]))
		k++;
	return k;
}

/*
 * Writes the listed pages (ascending runs coalesce), already copied to
 * stage_out in that order, back to the region: all started, then all
 * waited for. Returns 0 or the first error.
 */
int pg_write_back(struct mapping *m, const size_t *idx, size_t n)
{
	struct pool_op *ops[WB_BATCH];
	size_t started = 0;
	int ret = 0;

	for (size_t i = 0; i < n;) {
		size_t k = run_len(m, idx, i, n);
		size_t bytes =
			(k - 1) * m->psize + page_bytes(m, idx[i + k - 1]);
		uint64_t off;
		struct pool_region *r = seg_at(m, idx[i], &off);

		ret = pool_write_async(m->p, r, off,
				       m->stage_out + i * m->psize, bytes,
				       &ops[started]);
		if (ret)
			break;
		started++;
		i += k;
	}
	for (size_t i = 0; i < started; i++) {
		int r;

		/* -1: the session timeout; a lost memd fails the session,
		 * which completes the op. */
		while ((r = pool_wait(m->p, ops[i], -1)) == -ETIMEDOUT)
			;
		if (r && !ret)
			ret = r;
	}
	if (!ret)
		STAT_ADD(m, writebacks, n);
	return ret;
}

/* Sorts v[0..n) ascending (shell sort: no malloc, n <= WB_BATCH). */
void pg_sort_pages(size_t *v, size_t n)
{
	for (size_t gap = n / 2; gap > 0; gap /= 2) {
		for (size_t i = gap; i < n; i++) {
			size_t x = v[i], j = i;

			for (; j >= gap && v[j - gap] > x; j -= gap)
				v[j] = v[j - gap];
			v[j] = x;
		}
	}
}

/*
 * Write-protects the dirty pages among the sorted victims v[0..n), in as
 * few ranges as it can: a range goes on across pages that are not
 * resident, or resident and clean (protected already: unchanged), but not
 * across a dirty page that stays. Why few: each call ends in a TLB flush,
 * and a kernel flushes a range of at most 33 pages
 * (tlb_single_page_flush_ceiling) one page at a time, a larger one at
 * once; on a paravirtualised guest a page's flush costs about as much as
 * the whole (docs/bench/paging.md).
 */
int pg_protect_dirty(struct mapping *m, const size_t *v, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t first, last, j;
		int ret;

		if (!(m->state[v[i]] & PG_DIRTY)) {
			i++;
			continue;
		}
		first = last = v[i];
		for (j = i + 1; j < n && v[j] - last <= WP_GAP_MAX; j++) {
			bool ok = true;

			for (size_t g = last + 1; g < v[j] && ok; g++)
				ok = (m->state[g] & (PG_RESIDENT | PG_DIRTY)) !=
				     (PG_RESIDENT | PG_DIRTY);
			if (!ok)
				break;
			if (m->state[v[j]] & PG_DIRTY)
				last = v[j];
		}
		ret = pg_uffd_protect(m, first, last - first + 1, true);
		if (ret) {
			pg_mapping_fail(m, ret, "write-protect");
			return ret;
		}
		i = j;
	}
	return 0;
}

/*
 * Drops the sorted victims v[0..n) (MADV_DONTNEED), each run of
 * consecutive pages one range. One process_madvise() of all the ranges
 * costs one TLB flush for the batch (Linux 6.13+ takes any advice for the
 * calling process, and flushes a batch at once); where the kernel refuses
 * it, one madvise() per range. Failing to drop leaves pages resident:
 * their contents are safe, the budget is what suffers.
 */
void pg_drop_pages(struct mapping *m, const size_t *v, size_t n)
{
	struct iovec iov[WB_BATCH];
	size_t niov = 0, bytes = 0;

	for (size_t i = 0; i < n;) {
		size_t k = run_len(m, v, i, n);

		iov[niov].iov_base = page_addr(m, v[i]);
		iov[niov].iov_len = k * m->psize;
		bytes += k * m->psize;
		niov++;
		i += k;
	}
	if (pg_eng.pidfd >= 0) {
		long r = syscall(SYS_process_madvise, pg_eng.pidfd, iov, niov,
				 MADV_DONTNEED, 0u);

		if (r == (long)bytes)
			return;
		/* Older kernel (EINVAL: advice not taken for a process),
		 * or a partial drop: madvise() does it, now and later.
		 * A second MADV_DONTNEED of a page is harmless. */
		pool_log(LOG_INFO,
			 "paging: process_madvise ret=%ld err=%s; madvise "
			 "per range from now on",
			 r, r < 0 ? strerror(errno) : "short");
		close(pg_eng.pidfd);
		pg_eng.pidfd = -1;
	}
	for (size_t i = 0; i < niov; i++)
		if (madvise(iov[i].iov_base, iov[i].iov_len, MADV_DONTNEED))
			pool_log(LOG_WARNING, "paging: madvise err=%s",
				 strerror(errno));
}

/*
 * A victim batch of a fault's room (pg_fetch()), dropped after the
 * faulting page is installed and its thread woken: the drop (a TLB flush
 * per range, 0.6-0.7 us a page on the development VM) leaves the fault's
 * service. The victims are out of the ring and counted out of the
 * budget already; until the drop they stay mapped as eviction left them:
 * clean ones and dirty ones (protected again, written back) hold the
 * region's bytes, and a write to either waits in its WP fault. pool-uffd
 * drops them (pg_drop_late_flush()) before it serves anything else, so
 * no fault is served while they are mapped: a run being fetched never
 * holds one (its pages were missing when the room was made). One batch
 * is held back at a time: a second one drops the first now.
 */
void pg_drop_late(struct mapping *m, const size_t *v, size_t n)
{
	pg_drop_late_flush();
	memcpy(pg_eng.drop_v, v, n * sizeof(*v));
	pg_eng.drop_m = m;
	pg_eng.drop_n = n;
}

/* Drops the batch pg_drop_late() held back, if any: its time is the
 * step "late". */
void pg_drop_late_flush(void)
{
	uint64_t t;

	if (!pg_eng.drop_n)
		return;
	t = mono_ns();
	pg_drop_pages(pg_eng.drop_m, pg_eng.drop_v, pg_eng.drop_n);
	pg_eng.drop_n = 0;
	phase_add(POOL_PHASE_LATE, t);
}
