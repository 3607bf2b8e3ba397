// SPDX-License-Identifier: MIT
/*
 * libpool/paging.c - transparent paging: pool_map() (tidepool/pool_map.h).
 *
 * DESIGN
 * A mapping is an anonymous, private range the size of a region,
 * registered with a userfaultfd in MISSING and WP (write-protect) modes.
 * The kernel turns each first touch of a page into a message; our thread
 * answers it:
 *   - a page that was never written back (no PG_REMOTE) reads as zero: a
 *     read fault maps the shared zero page (UFFDIO_ZEROPAGE), write-protects
 *     it and wakes the thread; a write fault copies a zero page in
 *     unprotected and marks it dirty, and on a sequential stream of such
 *     faults a run of zero pages after it (pg_zero_fill()). No network trip
 *     either way.
 *   - a page the region holds (PG_REMOTE) is fetched with pool_read() into
 *     our staging pages and installed write-protected (UFFDIO_COPY with
 *     MODE_WP); where the same-host path maps the slab (LIBPOOL_SHM=map),
 *     UFFDIO_COPY copies from that mapping instead (fetch_direct()). A fault just above or below the last run fetched for
 *     one of NSTREAM streams continues it: its run doubles, up to RA_MAX
 *     pages (quicksort's partition is two streams going opposite ways).
 *   - once a stream is established (full read-ahead), pool-uffd goes on
 *     after waking the program: while no fault waits it fetches and maps
 *     the next runs of AHEAD_RUN pages (pg_install_ahead()), up to a window
 *     that doubles each time the program catches up with it and starts
 *     over when the stream is lost. The program then finds the pages
 *     mapped. Room is made for each run first, as for a fault.
 *   - the first write to a write-protected page arrives as a WP fault: the
 *     page is marked dirty and unprotected (which wakes the writer).
 *   - when most pages fetched protected take a WP fault soon after (a
 *     sort, an update pass), fetches install their pages unprotected and
 *     dirty instead (fetch_wants_dirty()): a needless write-back costs
 *     less than a WP fault per page.
 * At most max_res pages are resident. Before a fault needs room, the oldest
 * resident pages (FIFO: userfaultfd shows no accesses after the first) are
 * evicted in batches of max_res / 8 (up to WB_BATCH), sorted by address:
 * dirty ones are write-protected again in as few ranges as possible,
 * copied to the staging pages and written back with pool_write_async();
 * then every victim is dropped (one process_madvise(MADV_DONTNEED) for the
 * batch), so the next touch faults again. Few, large page-table changes
 * matter: each ends in a TLB flush, per page for a range of up to 33
 * pages, and a flush is costly on a virtual machine (docs/bench/paging.md).
 *
 * Huge pages (POOL_MAP_HUGE, LIBPOOL_HUGE_PAGES; huge_choose()): the range
 * is MAP_HUGETLB and the unit of everything above ("page") is 2 MiB. Only
 * hugetlb: UFFDIO_COPY with MODE_WP installs a hugetlb page protected in
 * one step, so dirty tracking stays exact; a transparent huge page could
 * only be moved in writable (UFFDIO_MOVE) and a write before it is
 * protected would be lost at eviction. Per mapping: read-ahead runs of 1
 * page, install-ahead of 1 page per run up to HUGE_AHEAD_MAX (at most a
 * quarter of the budget), 1 page evicted per round, fetches always
 * installed protected (fetch_wants_dirty() is off), zeros copied in
 * protected (no zero page, so no zero-page race). The range is
 * MAP_NORESERVE: pages come from the kernel's pool as installed; when it is
 * empty pg_uffd_copy() evicts one of ours and retries (huge_short), and with
 * none left the mapping fails (SIGBUS, never wrong bytes). Staging: 3 huge
 * pages touched, outside the budget. MAP_HUGETLB gets the default huge
 * page size, which must be 2 MiB (1 GiB: the kernel rejects our 2 MiB
 * ranges). Design and trade-off: docs/paging.md, "Huge pages".
 *
 * Memory: a mapping's bookkeeping (this struct, the page states, the FIFO,
 * the staging pages) is one mmap(); this file calls neither malloc nor
 * stdio, because the preload shim routes malloc here. The RMA buffers are
 * the staging pages only, never the userfaultfd range: libfabric's MR
 * cache monitors (memhooks, uffd; FI_MR_CACHE_MONITOR) never see a buffer
 * of ours inside a range another userfaultfd owns, and our MADV_DONTNEED of
 * the range matches no registration of theirs. So we leave
 * FI_MR_CACHE_MONITOR alone.
 *
 * Threads:
 *   pool-uffd  one per mapping; owns every field below "handler state"
 *              and is the only thread that maps, protects or drops pages
 *              while the mapping is live. All signals blocked.
 *   callers    touch the range (faults block them until pool-uffd
 *              answers); pool_map()/pool_unmap() take pg_reg_lock to find a
 *              mapping; pool_unmap() stops pool-uffd before it touches
 *              handler state. Counters are atomics, and so are the
 *              per-step times (phase_add(), "phases" in the stats).
 *
 * Invariants (handler state):
 *   - PG_RESIDENT pages are exactly the nres entries of the FIFO ring.
 *   - a resident page without PG_DIRTY is write-protected, so a write to
 *     it reaches us before it lands (PG_ZERO pages: see pg_zero_install()).
 *   - a dirty page is write-protected again before it is copied out, and
 *     dropped only after its write-back completed; a failed write-back
 *     fails the mapping and drops nothing.
 *   - once failed, a fault that needs the pool gets SIGBUS (pg_fault_fail()),
 *     never a page with wrong contents.
 *   - victims out of the ring but not dropped yet (pg_drop_late(): a
 *     fetch's, until its thread is woken) are clean or protected again
 *     and written back, and are dropped before pool-uffd serves another
 *     message: no fault or install meets one.
 *
 * fork(): a child's copy of a mapping has no handler; the pages whose
 * data is only in the region are fetched for it before the fork
 * (fork_fetch()), or past LIBPOOL_FORK_FETCH made PROT_NONE there
 * (fork_child_fence()). pool_unmap() in the child frees the copy.
 */
#include "libpool/paging_int.h"

pthread_mutex_t pg_reg_lock = PTHREAD_MUTEX_INITIALIZER;
struct mapping *pg_reg_head;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ */
/* public                                                               */

/* "64M", "1G", "65536": bytes, or 0 when malformed. */
size_t pg_parse_size(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return 0;
	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	case 't':
	case 'T':
		v <<= 40;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	return *end ? 0 : (size_t)v;
}

/* The number in file path, or -1 when unknown. No stdio. */
static long huge_read(const char *path)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/*
 * The 2 MiB hugetlb pages a mapping of ours can take, or 0 when unknown:
 * the free ones less those reserved (another mapping made without
 * MAP_NORESERVE holds them though it has not touched them yet: ours,
 * MAP_NORESERVE, cannot have them).
 */
static size_t huge_free(void)
{
	long f = huge_read(HUGE_DIR "free_hugepages");
	long r = huge_read(HUGE_DIR "resv_hugepages");

	return f < 0 || r < 0 || r >= f ? 0 : (size_t)(f - r);
}

/*
 * 4 KiB or 2 MiB pages for a mapping of a size-byte region under a
 * budget of local bytes: POOL_MAP_HUGE or POOL_MAP_SMALL decide, else
 * LIBPOOL_HUGE_PAGES (0: never, the default; 1: when they can be had,
 * else 4 KiB with a log line; "required": like POOL_MAP_HUGE; anything
 * else: -EINVAL). Huge pages
 * need the region to span HUGE_MIN_PAGES of them, a budget of at least 2,
 * and as many free hugetlb pages as the budget (vm.nr_hugepages).
 * Returns 0, or for huge pages that were demanded: -EINVAL (region or
 * budget too small), -ENOMEM (too few free huge pages).
 */
static int huge_choose(size_t size, size_t local, unsigned flags, bool *huge,
		       bool *demanded)
{
	const char *env = getenv("LIBPOOL_HUGE_PAGES");
	bool want = false, must = false;
	size_t pages = round_up(size, HUGE_SIZE) >> HUGE_SHIFT;
	size_t budget = local >> HUGE_SHIFT;

	*huge = *demanded = false;
	if (flags & POOL_MAP_SMALL)
		return 0;
	if (flags & POOL_MAP_HUGE) {
		want = must = true;
	} else if (env && *env) {
		must = strcmp(env, "required") == 0;
		want = must || strcmp(env, "1") == 0;
		if (!want && strcmp(env, "0") != 0) {
			pool_log(LOG_WARNING,
				 "paging: LIBPOOL_HUGE_PAGES=%s: expected 0, 1 "
				 "or required",
				 env);
			return -EINVAL;
		}
	}
	if (!want)
		return 0;
	if (budget > pages)
		budget = pages;
	if (pages < HUGE_MIN_PAGES || budget < 2) {
		pool_log(must ? LOG_WARNING : LOG_INFO,
			 "paging: huge pages need a region of %u MiB and a "
			 "budget of 4 MiB (region %zu bytes, budget %zu)%s",
			 HUGE_MIN_PAGES * 2, size, local,
			 must ? "" : "; 4 KiB pages");
		return must ? -EINVAL : 0;
	}
	if (huge_free() < budget) {
		pool_log(must ? LOG_WARNING : LOG_INFO,
			 "paging: %zu free 2 MiB huge pages, the budget needs "
			 "%zu (vm.nr_hugepages)%s",
			 huge_free(), budget, must ? "" : "; 4 KiB pages");
		return must ? -ENOMEM : 0;
	}
	*huge = true;
	*demanded = must;
	return 0;
}

static void mapping_free(struct mapping *m)
{
	if (m->base)
		munmap(m->base, m->len);
	munmap(m, m->meta_bytes);
}

static int map_build(struct pool *p, struct pool_region *r, size_t size,
		     size_t local_bytes, unsigned flags, bool huge,
		     size_t seg_bytes, void **addr);

/* A mapping's local tier: local_bytes, else LIBPOOL_LOCAL_BYTES, else
 * DEFAULT_LOCAL_BYTES (the caller refuses less than MIN_LOCAL_BYTES). */
static size_t local_bytes_of(size_t local_bytes)
{
	const char *env = getenv("LIBPOOL_LOCAL_BYTES");

	if (local_bytes)
		return local_bytes;
	return env && *env ? pg_parse_size(env) : DEFAULT_LOCAL_BYTES;
}

int pool_map(struct pool *p, struct pool_region *r, size_t local_bytes,
	     unsigned flags, void **addr)
{
	bool huge, demanded;
	size_t size;
	int ret;

	if (!addr)
		return -EINVAL;
	*addr = NULL;
	if (!p || !r ||
	    (flags & ~(POOL_MAP_EXISTING | POOL_MAP_HUGE | POOL_MAP_SMALL)) ||
	    (flags & POOL_MAP_HUGE && flags & POOL_MAP_SMALL))
		return -EINVAL;
	local_bytes = local_bytes_of(local_bytes);
	if (local_bytes < MIN_LOCAL_BYTES)
		return -EINVAL;
	pthread_once(&atfork_once, pg_atfork_register);
	size = pool_region_size(r);
	ret = huge_choose(size, local_bytes, flags, &huge, &demanded);
	if (ret)
		return ret;
	ret = map_build(p, r, size, local_bytes, flags, huge, 0, addr);
	if (ret && huge && !demanded && ret != -EPERM) {
		/* LIBPOOL_HUGE_PAGES=1: huge pages when they can be had.
		 * The kernel may lack userfaultfd on hugetlb (-EOPNOTSUPP)
		 * or the pages went meanwhile (-ENOMEM). */
		pool_log(LOG_INFO,
			 "paging: huge pages failed err=%s; 4 KiB pages",
			 strerror(-ret));
		ret = map_build(p, r, size, local_bytes, flags, false, 0, addr);
	}
	return ret;
}

/*
 * The engine's limits per page size, in pages: read-ahead run, run
 * installed ahead, most installed ahead, most evicted per round. The
 * staging pages follow from them (stage_in, stage_in2, stage_out, zero).
 */
struct page_mode {
	unsigned shift, ra_max;
	size_t ahead_run, ahead_max, wb_max;
};

static const struct page_mode small_mode = {
	PAGE_SHIFT, RA_MAX, AHEAD_RUN, AHEAD_MAX, WB_BATCH,
};
static const struct page_mode huge_mode = {
	HUGE_SHIFT, 1, 1, HUGE_AHEAD_MAX, 1,
};

/* pool_map() once the page size is chosen; with seg_bytes (a power of
 * two, at least a page) a growable mapping of size bytes whose segments
 * pool_map_grow() appends (r is NULL). */
static int map_build(struct pool *p, struct pool_region *r, size_t size,
		     size_t local_bytes, unsigned flags, bool huge,
		     size_t seg_bytes, void **addr)
{
	const struct page_mode *pm = huge ? &huge_mode : &small_mode;
	size_t psize = (size_t)1 << pm->shift;
	size_t len, npages, max_res, off_state, off_ring, off_stage, meta;
	size_t nstage_in, nstage, off_evicted, off_credit, off_segs, max_segs;
	struct mapping *m;
	sigset_t all, old;
	const char *env;
	int ret;

	len = round_up(size, psize);
	npages = len >> pm->shift;
	max_res = local_bytes >> pm->shift;
	if (max_res > npages)
		max_res = npages;

	/* staging: fetch, the run after it, write-back, zeros */
	nstage_in = pm->ahead_run > pm->ra_max ? pm->ahead_run : pm->ra_max;
	nstage = nstage_in + pm->ahead_run + pm->wb_max + pm->ra_max;
	max_segs = seg_bytes ? len / seg_bytes : 1;
	off_segs = round_up(sizeof(*m), 64);
	off_state = off_segs + max_segs * sizeof(struct pool_region *);
	off_evicted = off_state + npages;
	off_credit = off_evicted + npages;
	off_ring = round_up(off_credit + npages, sizeof(size_t));
	off_stage = round_up(off_ring + max_res * sizeof(size_t), PAGE);
	meta = off_stage + nstage * psize;
	m = mmap(NULL, meta, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	/* mmap() gave zeros: every field not set here starts at 0. */
	m->meta_bytes = meta;
	m->uffd = -1;
	m->p = p;
	m->r = r;
	m->segs = (struct pool_region **)((uint8_t *)m + off_segs);
	m->max_segs = max_segs;
	if (seg_bytes) {
		m->growable = true;
		m->seg_pshift = (unsigned)__builtin_ctzl(seg_bytes) - pm->shift;
		m->seg_mask = ((size_t)1 << m->seg_pshift) - 1;
	} else {
		m->segs[0] = r;
		m->nsegs = 1;
		m->seg_pshift = 63;
		m->seg_mask = SIZE_MAX;
	}
	m->size = size;
	m->len = len;
	m->npages = npages;
	m->max_res = max_res;
	m->huge = huge;
	m->shift = pm->shift;
	m->psize = psize;
	m->ra_max = pm->ra_max;
	m->ahead_run = pm->ahead_run;
	m->ahead_max = pm->ahead_max;
	m->wb_max = pm->wb_max;
	/* max_res / 8, within [min(8, wb_max), wb_max] */
	m->batch = max_res / 8 < 8 ? 8 : max_res / 8;
	if (m->batch > m->wb_max)
		m->batch = m->wb_max;
	m->state = (uint8_t *)m + off_state;
	m->evicted = (uint8_t *)m + off_evicted;
	m->credit = (uint8_t *)m + off_credit;
	m->epoch = 1;
	m->epoch_left = m->max_res / 8 ? m->max_res / 8 : 1;
	m->ring = (size_t *)((uint8_t *)m + off_ring);
	m->stage_in = (uint8_t *)m + off_stage;
	m->stage_in2 = m->stage_in + nstage_in * m->psize;
	m->stage_pages = nstage_in + m->ahead_run;
	m->stage_out = m->stage_in2 + m->ahead_run * m->psize;
	m->zero = m->stage_out + m->wb_max * m->psize; /* mmap: zeros */
	m->st.page_bytes = m->psize;
	m->zero_max = huge ? pm->ra_max : ZERO_RUN_MAX;
	for (size_t i = 0; i < NZSTREAM; i++)
		m->zstreams[i].lo = m->zstreams[i].hi = SIZE_MAX;
	m->st.max_resident = max_res;
	env = getenv("LIBPOOL_PAGING_AHEAD");
	m->ahead_on = !(env && !strcmp(env, "0"));
	if (flags & POOL_MAP_EXISTING)
		memset(m->state, PG_REMOTE, npages);

	/* Huge pages are hugetlb pages, not transparent ones: the kernel
	 * installs a hugetlb page with UFFDIO_COPY in one step, protected
	 * (MODE_WP) when asked, where a transparent huge page would be
	 * split into 512 small ones or filled by the kernel behind our
	 * back. MAP_NORESERVE: the budget, not the range, is what we hold
	 * (pg_uffd_copy() handles a pool that runs short). */
	m->base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
			       (huge ? MAP_HUGETLB | MAP_HUGE_2MB : 0),
		       -1, 0);
	if (m->base == MAP_FAILED) {
		m->base = NULL;
		ret = -ENOMEM;
		goto fail;
	}
	if (!huge) /* 4 KiB pages: see above */
		madvise(m->base, len, MADV_NOHUGEPAGE);
	ret = pg_engine_attach(m);
	if (ret)
		goto fail;
	if (!m->growable) { /* growable: at the first segment */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pg_warm_start(m);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	pthread_mutex_lock(&pg_reg_lock);
	m->next = pg_reg_head;
	pg_reg_head = m;
	pthread_mutex_unlock(&pg_reg_lock);
	pool_log(LOG_INFO,
		 "paging: map addr=%p bytes=%zu page=%zu local_pages=%zu "
		 "user_only=%d segment=%zu",
		 (void *)m->base, len, m->psize, max_res, (int)m->user_only,
		 seg_bytes);
	*addr = m->base;
	return 0;
fail:
	pool_log(LOG_WARNING, "paging: map failed err=%s", strerror(-ret));
	mapping_free(m);
	return ret;
}

/* Writes back every resident dirty page; pool-uffd is stopped. */
static int flush_locked_out(struct mapping *m)
{
	size_t wb[WB_BATCH], nw = 0;
	int ret = 0, r;

	for (size_t i = 0; i < m->nres; i++) {
		size_t idx = m->ring[(m->head + i) % m->max_res];

		if (!pg_page_needs_writeback(m, idx))
			continue;
		pg_page_copy_out(m->stage_out + nw * m->psize,
				 page_addr(m, idx), m->psize);
		wb[nw++] = idx;
		if (nw == m->wb_max) {
			r = pg_write_back(m, wb, nw);
			if (r && !ret)
				ret = r;
			nw = 0;
		}
	}
	if (nw) {
		r = pg_write_back(m, wb, nw);
		if (r && !ret)
			ret = r;
	}
	return ret;
}

int pool_unmap(struct pool *p, void *addr, unsigned flags)
{
	struct mapping *m, **pp;
	int ret = 0;

	if (flags != POOL_UNMAP_FLUSH && flags != POOL_UNMAP_DISCARD)
		return -EINVAL;
	pthread_mutex_lock(&pg_reg_lock);
	for (pp = &pg_reg_head; *pp; pp = &(*pp)->next)
		if ((*pp)->base == addr && (*pp)->p == p)
			break;
	m = *pp;
	if (m)
		*pp = m->next;
	pthread_mutex_unlock(&pg_reg_lock);
	if (!m || !p)
		return -EINVAL;
	if (m->inherited) {
		/* A fork child's copy: no engine serves it, and the session
		 * (the parent's) is not ours to write to. */
		mapping_free(m);
		return flags == POOL_UNMAP_FLUSH ? -ENOTCONN : 0;
	}

	pg_engine_detach(m);
	if (m->warming)
		pthread_join(m->warm_thr, NULL);
	if (flags == POOL_UNMAP_FLUSH) {
		/* A failed mapping may hold writes it could not save. */
		ret = m->failed ? m->failed : flush_locked_out(m);
	}
	pool_log(LOG_INFO,
		 "paging: unmap addr=%p flush=%d err=%d faults=%llu "
		 "zero_fills=%llu fetches=%llu pages_fetched=%llu "
		 "evictions=%llu writebacks=%llu",
		 (void *)m->base, flags == POOL_UNMAP_FLUSH, ret,
		 (unsigned long long)m->st.faults,
		 (unsigned long long)m->st.zero_fills,
		 (unsigned long long)m->st.fetches,
		 (unsigned long long)m->st.pages_fetched,
		 (unsigned long long)m->st.evictions,
		 (unsigned long long)m->st.writebacks);
	mapping_free(m);
	return ret;
}

/* The live mapping whose range starts at addr, or NULL. pg_reg_lock held. */
static struct mapping *mapping_at_locked(const void *addr)
{
	struct mapping *m;

	for (m = pg_reg_head; m && m->base != addr; m = m->next)
		;
	return m;
}

int pool_map_reserve(struct pool *p, size_t max_bytes, size_t seg_bytes,
		     size_t local_bytes, void **addr)
{
	if (!addr)
		return -EINVAL;
	*addr = NULL;
	if (!p || seg_bytes < PAGE || (seg_bytes & (seg_bytes - 1)) ||
	    max_bytes < seg_bytes)
		return -EINVAL;
	local_bytes = local_bytes_of(local_bytes);
	if (local_bytes < MIN_LOCAL_BYTES)
		return -EINVAL;
	pthread_once(&atfork_once, pg_atfork_register);
	return map_build(p, NULL, max_bytes / seg_bytes * seg_bytes,
			 local_bytes, 0, false, seg_bytes, addr);
}

int pool_map_grow(void *addr, struct pool_region *r)
{
	struct mapping *m;
	sigset_t all, old;
	size_t n;
	int ret = 0;

	if (!r)
		return -EINVAL;
	pthread_mutex_lock(&pg_reg_lock);
	m = mapping_at_locked(addr);
	if (!m || !m->growable || m->inherited ||
	    pool_region_size(r) < ((size_t)1 << (m->seg_pshift + m->shift))) {
		ret = -EINVAL;
		goto out;
	}
	n = m->nsegs;
	if (n == m->max_segs) {
		ret = -ENOSPC;
		goto out;
	}
	m->segs[n] = r;
	__atomic_store_n(&m->nsegs, n + 1, __ATOMIC_RELEASE);
	if (n == 0) {
		/* the warm-up reads the first segment */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pg_warm_start(m);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
out:
	pthread_mutex_unlock(&pg_reg_lock);
	return ret;
}

/* Takes the resident pages of [lo, hi) out of m's ring; how many. */
static size_t ring_remove_range(struct mapping *m, size_t lo, size_t hi)
{
	size_t kept = 0, gone = 0;

	for (size_t i = 0; i < m->nres; i++) {
		size_t idx = m->ring[(m->head + i) % m->max_res];

		if (idx >= lo && idx < hi)
			gone++;
		else
			m->ring[(m->head + kept++) % m->max_res] = idx;
	}
	m->nres = kept;
	return gone;
}

int pool_map_discard(void *addr, void *start, size_t len)
{
	uintptr_t s = (uintptr_t)start;
	struct mapping *m;
	size_t lo, hi, gone;
	int ret = 0;

	pthread_mutex_lock(&pg_reg_lock);
	m = mapping_at_locked(addr);
	pthread_mutex_unlock(&pg_reg_lock);
	if (!m || m->inherited || !len || s < (uintptr_t)m->base ||
	    ((s - (uintptr_t)m->base) & (m->psize - 1)) ||
	    (len & (m->psize - 1)) || len > m->len - (s - (uintptr_t)m->base))
		return -EINVAL;
	lo = (s - (uintptr_t)m->base) >> m->shift;
	hi = lo + (len >> m->shift);
	/* pool-uffd is between batches while we hold pg_eng.lock: nothing of
	 * the range is being fetched, installed, protected or dropped. */
	pthread_mutex_lock(&pg_eng.lock);
	gone = ring_remove_range(m, lo, hi);
	if (madvise(start, len, MADV_DONTNEED))
		ret = -errno;
	for (size_t i = lo; i < hi; i++) {
		m->state[i] = 0; /* reads as zero; the region's copy is moot */
		m->evicted[i] = 0;
		m->credit[i] = 0;
	}
	pg_eng.resident -= gone * m->psize;
	__atomic_store_n(&m->st.resident, m->nres, __ATOMIC_RELAXED);
	STAT_ADD(m, discarded, hi - lo);
	pthread_mutex_unlock(&pg_eng.lock);
	return ret;
}

size_t pool_map_grown_bytes(const void *addr)
{
	struct mapping *m;
	size_t n = 0;

	pthread_mutex_lock(&pg_reg_lock);
	m = mapping_at_locked(addr);
	if (m)
		n = live_pages(m) << m->shift;
	pthread_mutex_unlock(&pg_reg_lock);
	return n;
}

void pool_paging_get_engine_stats(struct pool_paging_engine_stats *st)
{
	st->spin_cap_ns =
		__atomic_load_n(&pg_eng.spin_cap_ns, __ATOMIC_RELAXED);
	st->waits = __atomic_load_n(&pg_eng.waits, __ATOMIC_RELAXED);
	st->spin_hits = __atomic_load_n(&pg_eng.spin_hits, __ATOMIC_RELAXED);
	st->spin_misses =
		__atomic_load_n(&pg_eng.spin_misses, __ATOMIC_RELAXED);
	st->spin_ns = __atomic_load_n(&pg_eng.spin_ns, __ATOMIC_RELAXED);
	st->direct_pages =
		__atomic_load_n(&pg_eng.direct_pages, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < POOL_PHASE_N; i++) {
		st->phase_ns[i] =
			__atomic_load_n(&pg_eng.ph_ns[i], __ATOMIC_RELAXED);
		st->phase_n[i] =
			__atomic_load_n(&pg_eng.ph_n[i], __ATOMIC_RELAXED);
	}
}

const char *pool_paging_phase_name(unsigned phase)
{
	static const char *const names[POOL_PHASE_N] = {
		[POOL_PHASE_WAIT] = "wait",
		[POOL_PHASE_LOCK] = "lock",
		[POOL_PHASE_READ] = "read",
		[POOL_PHASE_SERVE] = "serve",
		[POOL_PHASE_FETCH] = "fetch",
		[POOL_PHASE_INSTALL] = "install",
		[POOL_PHASE_ZERO] = "zero",
		[POOL_PHASE_ROOM] = "room",
		[POOL_PHASE_PROTECT] = "protect",
		[POOL_PHASE_COPYOUT] = "copyout",
		[POOL_PHASE_WRITEBACK] = "writeback",
		[POOL_PHASE_DROP] = "drop",
		[POOL_PHASE_WP] = "wp",
		[POOL_PHASE_AHEAD] = "ahead",
		[POOL_PHASE_WAKE] = "wake",
		[POOL_PHASE_LATE] = "late",
	};

	return phase < POOL_PHASE_N ? names[phase] : "?";
}

int pool_paging_set_process_budget(size_t bytes)
{
	if (bytes < MIN_LOCAL_BYTES)
		return -EINVAL;
	pthread_mutex_lock(&pg_eng.life);
	pthread_mutex_lock(&pg_eng.lock);
	pg_eng.budget_set = bytes;
	if (pg_eng.running)
		pg_eng.budget = bytes; /* evictions catch up at the next room */
	pthread_mutex_unlock(&pg_eng.lock);
	pthread_mutex_unlock(&pg_eng.life);
	return 0;
}

int pool_map_get_stats(const void *addr, struct pool_map_stats *st)
{
	const uint8_t *a = addr;
	struct mapping *m;

	if (!st)
		return -EINVAL;
	pthread_mutex_lock(&pg_reg_lock);
	for (m = pg_reg_head; m; m = m->next)
		if (a >= m->base && a < m->base + m->len)
			break;
	if (m) {
		uint64_t *dst = (uint64_t *)st;
		const uint64_t *src = (const uint64_t *)&m->st;

		/* The leading uint64_t counters, one atomic load each. */
		for (size_t i = 0;
		     i < offsetof(struct pool_map_stats, user_mode_only) / 8;
		     i++)
			dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
		st->user_mode_only = m->user_only;
		st->failed = __atomic_load_n(&m->st.failed, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&pg_reg_lock);
	return m ? 0 : -EINVAL;
}
