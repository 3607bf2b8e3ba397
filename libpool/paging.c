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
 *     faults a run of zero pages after it (zero_fill()). No network trip
 *     either way.
 *   - a page the region holds (PG_REMOTE) is fetched with pool_read() into
 *     our staging pages and installed write-protected (UFFDIO_COPY with
 *     MODE_WP). A fault just above or below the last run fetched for
 *     one of NSTREAM streams continues it: its run doubles, up to RA_MAX
 *     pages (quicksort's partition is two streams going opposite ways).
 *   - once a stream is established (full read-ahead), pool-uffd goes on
 *     after waking the program: while no fault waits it fetches and maps
 *     the next runs of AHEAD_RUN pages (install_ahead()), up to a window
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
 * empty uffd_copy() evicts one of ours and retries (huge_short), and with
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
 *              answers); pool_map()/pool_unmap() take reg_lock to find a
 *              mapping; pool_unmap() stops pool-uffd before it touches
 *              handler state. Counters are atomics, and so are the
 *              per-step times (phase_add(), "phases" in the stats).
 *
 * Invariants (handler state):
 *   - PG_RESIDENT pages are exactly the nres entries of the FIFO ring.
 *   - a resident page without PG_DIRTY is write-protected, so a write to
 *     it reaches us before it lands (PG_ZERO pages: see zero_install()).
 *   - a dirty page is write-protected again before it is copied out, and
 *     dropped only after its write-back completed; a failed write-back
 *     fails the mapping and drops nothing.
 *   - once failed, a fault that needs the pool gets SIGBUS (fault_fail()),
 *     never a page with wrong contents.
 *
 * fork(): a child's copy of a mapping has no handler; the pages whose
 * data is only in the region are fetched for it before the fork
 * (fork_fetch()), or past LIBPOOL_FORK_FETCH made PROT_NONE there
 * (fork_child_fence()). pool_unmap() in the child frees the copy.
 */
#include "tidepool/pool_map.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "libpool/log.h"
#include "libpool/internal.h"
#include "libpool/paging.h"
#include "libpool/thread_role.h"

#define PAGE 4096u
#define PAGE_SHIFT 12
#define RA_MAX 32u    /* pages fetched at once on a sequential stream */
#define WB_BATCH 128u /* pages evicted per round, at most */
#define MSG_BATCH 16
/* pool-uffd spins for the next fault up to this long (microseconds) after
 * serving one: see spin_wait() */
#define SPIN_US_DEFAULT 50u
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif
#define MIN_LOCAL_BYTES (64u * PAGE)
#define DEFAULT_LOCAL_BYTES (256ull << 20)
#define NSTREAM 4	  /* read-ahead streams followed at once */
#define NZSTREAM 4	  /* fill streams of fresh pages followed at once */
#define ZERO_RUN_MAX 512u /* pages zero-filled at once on a fill stream */
#define AHEAD_MAX 512u	  /* pages installed ahead of a stream, at most */
#ifndef AHEAD_RUN
#define AHEAD_RUN 128u /* pages per run installed ahead: one pool_read */
#endif
/* Huge pages (2 MiB hugetlb, POOL_MAP_HUGE): one page per read, one
 * run ahead at a time, at most HUGE_AHEAD_MAX ahead, one evicted per
 * round. The staging pages then hold 3 huge pages (6 MiB) of memory. */
#define HUGE_SHIFT 21
#define HUGE_SIZE (1ul << HUGE_SHIFT)
#define HUGE_AHEAD_MAX 8u
#define HUGE_MIN_PAGES 8u	/* smaller regions keep 4 KiB pages */
#ifndef MAP_HUGE_2MB		/* linux/mman.h; not every libc's sys/mman.h */
#define MAP_HUGE_2MB (21 << 26) /* MAP_HUGE_SHIFT 26 */
#endif
#define HUGE_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"

enum {
	PG_RESIDENT = 1u << 0,
	PG_DIRTY = 1u << 1,  /* written since last write-back; unprotected */
	PG_REMOTE = 1u << 2, /* the region holds the page; else it is zero */
	PG_ZERO =
		1u << 3, /* zero when mapped: see zero_install(), zero_fill() */
	PG_REF = 1u << 4,    /* used since the clock hand last passed: see
			   * clock_select() (4 KiB pages) */
	PG_CLAIM = 1u << 5,  /* in a run of fetch_batch() being read */
	PG_VICTIM = 1u << 6, /* chosen by behind_select(), leaving the ring */
	PG_FORK = 1u << 7,   /* out of the ring but still mapped (and
			      * protected) for a fork under way: see
			      * fork_fetch() */
};

/* CLOCK's refault test: a page fetched again within REFAULT_EPOCHS
 * epochs of max_res / 8 evictions each (about one budget's worth) after
 * it was evicted would have stayed under an LRU of twice the budget:
 * it comes back referenced. */
#define REFAULT_EPOCHS 8u

/* A page fetched again within CREDIT_EPOCHS epochs (about a quarter of a
 * budget's evictions) after its eviction would have stayed under an LRU
 * of 1.25 times the budget: the hand passes it CREDIT_PASSES times
 * before it may be a victim again (clock_select()), with no write
 * protection to sample its use meanwhile. */
#define CREDIT_EPOCHS 2u
#define CREDIT_PASSES 4u

/*
 * A fill stream: write faults on fresh pages (never written back) that
 * go up or down. [lo, hi) is what its runs mapped so far.
 */
struct zstream {
	size_t lo, hi;
	unsigned ra;   /* pages zero-filled at once, doubling */
	uint64_t used; /* for replacing the least recently used */
};

/*
 * A sequential fault stream, up or down: the pages just outside the last
 * run fetched for it are where it goes on. Quicksort's partition is two
 * streams in opposite directions; a merge is several up.
 */
struct stream {
	size_t up, down; /* page above / below the last run */
	unsigned ra;	 /* pages fetched at once, doubling up to RA_MAX */
	int dir;	 /* +1 up, -1 down, 0 not known yet */
	uint64_t used;	 /* for replacing the least recently used */
	size_t win;	 /* install-ahead window, pages (0: off) */
	size_t goal;	 /* pages still to install ahead */
	size_t at;	 /* page of the program's last fault on it */
	bool rescan;	 /* it fetches pages evicted before: see
			  * behind_select() */
};

struct mapping {
	struct mapping *next; /* reg_lock */
	struct pool *p;
	struct pool_region *r; /* pool_map(): the region; else unused */
	/* Backing store. pool_map(): one segment, the region (seg_pshift
	 * 63: every page is in it). A growable mapping (pool_map_reserve())
	 * has max_segs segments of 2^seg_pshift pages, appended by
	 * pool_map_grow(); pages of segments not appended yet are never
	 * touched (nsegs: written by pool_map_grow() with release order). */
	struct pool_region **segs;
	size_t max_segs, nsegs;
	unsigned seg_pshift;
	size_t seg_mask;
	bool growable;
	uint8_t *base;
	size_t size; /* region bytes */
	size_t len;  /* mapped bytes: size rounded up to PAGE */
	size_t npages;
	/* The unit of residency: a 4 KiB page, or with huge pages a 2 MiB
	 * hugetlb page ("page" below means this unit). */
	unsigned shift;
	size_t psize;
	bool huge;
	/* Per-mode limits, in pages: read-ahead run, run installed ahead,
	 * most installed ahead, most evicted per round. */
	unsigned ra_max;
	size_t ahead_run, ahead_max, wb_max;
	size_t meta_bytes; /* this mmap(): struct, arrays, staging */
	int uffd;	   /* the engine's (eng.uffd): not this mapping's */
	bool user_only;
	struct mapping *enext; /* eng.maps (eng.lock) */

	/* handler state */
	uint8_t *state;	  /* PG_* per page */
	uint8_t *evicted; /* epoch of the page's last eviction, 0: never */
	uint8_t *credit;  /* 4 KiB pages in the ring: passes of the hand
			   * left before it may take the page (0 when not
			   * in the ring); see clock_select() */
	size_t *ring;	  /* resident pages, oldest at head: FIFO (huge pages),
		       * or the clock with its hand at head (4 KiB pages) */
	size_t max_res, nres, head;
	uint8_t epoch;	   /* current eviction epoch, 1..255 */
	size_t epoch_left; /* evictions until the next epoch */
	size_t batch; /* pages evicted per round: max_res / 8, 8..WB_BATCH */
	uint8_t *stage_in;   /* max(ahead_run, ra_max) pages */
	uint8_t *stage_in2;  /* ahead_run pages: the run read meanwhile */
	size_t stage_pages;  /* stage_in and stage_in2, one block */
	uint8_t *stage_out;  /* wb_max pages */
	const uint8_t *zero; /* ra_max pages of zeros */
	struct stream streams[NSTREAM];
	uint64_t stream_clock;
	/* Whether fetched pages get written (fetch_wants_dirty()): pages
	 * installed protected, how many of them took a WP fault since, and
	 * fetches made. Decayed by halving. */
	uint64_t wr_seen, wr_hits, nfetch;
	/* Huge pages: while room is made for a stream, the program's
	 * position on it and its direction (0: none); see behind_victim(). */
	size_t behind;
	int behind_dir;
	/* Adaptive CLOCK (LIBPOOL_PAGING_CLOCK unset): pages the hand found
	 * marked and unmarked in this window (clock_adapt()), and whether
	 * the mapping evicts oldest first for now. */
	size_t clk_marked, clk_unmarked;
	bool clk_fifo;
	struct zstream zstreams[NZSTREAM]; /* see zero_fill() */
	uint64_t zstream_clock;
	unsigned zero_max; /* longest zero fill run, pages */
	int failed; /* read by others after pool-uffd stopped, or atomic */
	bool fail_logged;
	const char *fail_why; /* mapping_fail()'s step, for fault_fail() */
	bool inherited; /* a fork() child's copy: no thread, see fork_child */
	const char *fenced; /* in the child: why pages are fenced, or NULL */
	bool ahead_on; /* install-ahead (LIBPOOL_PAGING_AHEAD, default on) */
	bool warming;  /* warm_thr runs: see warm_main() */
	/* the session's fabric is not set up yet: ask for it once half
	 * the budget is resident (warm_deferred_check()) */
	bool warm_deferred;
	pthread_t warm_thr;
	uint8_t warm_buf[64]; /* its read's buffer, outside the range */

	struct pool_map_stats st; /* atomics */
};

/* Every live mapping, for pool_unmap() and pool_map_get_stats(). */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *reg_head;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/*
 * The process's paging engine: one userfaultfd and one thread, pool-uffd,
 * serve every mapping. pool-uffd holds eng.lock while it serves a batch of
 * faults or installs a run ahead; pool_map() and pool_unmap() take it to
 * add or remove a mapping, so once a mapping is out of eng.maps the
 * engine never touches it again. The thread starts with the first mapping
 * and stops with the last (eng.life serialises the two).
 *
 * Budgets: each mapping keeps at most max_res pages resident, and all of
 * them together at most eng.budget bytes (LIBPOOL_LOCAL_BYTES, or
 * pool_paging_set_process_budget(); SIZE_MAX: none). make_room() evicts
 * from the mapping that needs room first, then, for the process budget,
 * a batch at a time from each mapping in turn (eng.cursor), each chosen
 * by that mapping's own CLOCK.
 */
static struct {
	pthread_mutex_t lock, life;
	struct mapping *maps, *cursor, *last_hit;
	size_t nmaps;
	int uffd, stopfd, pidfd; /* pidfd: process_madvise(); -1: madvise */
	bool user_only, huge_ok, running;
	bool batch_on;	 /* LIBPOOL_PAGING_BATCH (default on): fetch_batch() */
	bool clock_on;	 /* LIBPOOL_PAGING_CLOCK not 0; off: FIFO */
	bool clock_auto; /* LIBPOOL_PAGING_CLOCK unset: clock_adapt() */
	bool credit_on;	 /* LIBPOOL_PAGING_CREDIT (default on): refaulted
			  * 4 KiB pages kept, see clock_select() */
	bool behind_on;	 /* LIBPOOL_PAGING_BEHIND (default on): 4 KiB pages
			 * evicted behind a stream, see behind_select() */
	/* A fork() is under way (fork_fetch() to fork_release()): 4 KiB
	 * pages leave the ring but stay mapped (PG_FORK). fork_why: why
	 * the last fork left pages to fence (NULL: none). */
	bool fork_hold;
	const char *fork_why;
	bool wake_split; /* LIBPOOL_PAGING_WAKE_SPLIT=1: POOL_PHASE_WAKE */
	pthread_t thr;
	size_t budget;	   /* bytes, all mappings; SIZE_MAX: none */
	size_t budget_set; /* pool_paging_set_process_budget(); 0: env */
	size_t resident;   /* bytes resident, all mappings (eng.lock) */
	/* Spinning for the next fault (spin_wait()): the cap
	 * (LIBPOOL_PAGING_SPIN_US; 0: never), the current window (pool-uffd
	 * only) and counters (atomics, pool_paging_get_engine_stats()). */
	uint64_t spin_cap_ns, spin_win_ns;
	uint64_t spin_hits, spin_misses, spin_ns, waits;
	/* Time per step (phase_add(); atomics, read by
	 * pool_paging_get_engine_stats()). */
	uint64_t ph_ns[POOL_PHASE_N], ph_n[POOL_PHASE_N];
} eng = { .lock = PTHREAD_MUTEX_INITIALIZER,
	  .life = PTHREAD_MUTEX_INITIALIZER,
	  .uffd = -1,
	  .stopfd = -1,
	  .pidfd = -1,
	  .budget = SIZE_MAX };

#define STAT_ADD(m, f, n) __atomic_add_fetch(&(m)->st.f, (n), __ATOMIC_RELAXED)

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Adds the time since t0 to step ph (a vDSO clock read, ~30 ns here, a
 * few per fault); returns now, the start of the next step. */
static uint64_t phase_add(unsigned ph, uint64_t t0)
{
	uint64_t now = mono_ns();

	__atomic_add_fetch(&eng.ph_ns[ph], now - t0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&eng.ph_n[ph], 1, __ATOMIC_RELAXED);
	return now;
}

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static uint8_t *page_addr(const struct mapping *m, size_t idx)
{
	return m->base + (idx << m->shift);
}

/* The region that backs page idx, and the page's offset in it. */
static struct pool_region *seg_at(const struct mapping *m, size_t idx,
				  uint64_t *off)
{
	*off = (uint64_t)(idx & m->seg_mask) << m->shift;
	return m->segs[idx >> m->seg_pshift];
}

/* Whether pages a and b are backed by the same region: one RMA moves a
 * run of pages only within one region. */
static bool seg_same(const struct mapping *m, size_t a, size_t b)
{
	return (a >> m->seg_pshift) == (b >> m->seg_pshift);
}

/* Pages that may be touched: all of a pool_map(), the appended segments
 * of a growable mapping. */
static size_t live_pages(const struct mapping *m)
{
	size_t n;

	if (!m->growable)
		return m->npages;
	n = __atomic_load_n(&m->nsegs, __ATOMIC_ACQUIRE) << m->seg_pshift;
	return n < m->npages ? n : m->npages;
}

/*
 * Copies and inspects pages of the range from pool-uffd. The range's pages
 * are written by the kernel (UFFDIO_COPY) and by the application under
 * write protection we manage, an ordering ThreadSanitizer cannot see:
 * these two are the only places we read the range, so they are not
 * instrumented (under TSan, volatile keeps the compiler from calling
 * memcpy, which TSan intercepts; elsewhere memcpy is used).
 */
__attribute__((no_sanitize("thread"))) static void
page_copy_out(void *dst, const void *src, size_t bytes)
{
#if defined(__SANITIZE_THREAD__)
	const volatile uint64_t *s = src;
	uint64_t *d = dst;

	for (size_t i = 0; i < bytes / 8; i++)
		d[i] = s[i];
#else
	/* 4-5x faster than the loop on a 2 MiB page (0.4 ms -> 0.1 ms). */
	memcpy(dst, src, bytes);
#endif
}

__attribute__((no_sanitize("thread"))) static bool page_is_zero(const void *src,
								size_t bytes)
{
	const volatile uint64_t *s = src;
	uint64_t acc = 0;

	for (size_t i = 0; i < bytes / 8; i++)
		acc |= s[i];
	return acc == 0;
}

/* ------------------------------------------------------------------ */
/* userfaultfd                                                          */

/*
 * Test-only fault injection: TP_TEST_UFFD_EAGAIN=N (at least 2) makes
 * every Nth of the engine's page-table ioctls (UFFDIO_COPY, _ZEROPAGE,
 * _WRITEPROTECT, _WAKE) fail with EAGAIN before it reaches the kernel,
 * as the kernel answers while the faulting mm is changing
 * (mmap_changing). Read once; unset, it costs one relaxed load per
 * ioctl. Never set it in production.
 */
static unsigned uffd_eagain_every; /* 0: off */
static unsigned uffd_eagain_count;
static pthread_once_t uffd_eagain_once = PTHREAD_ONCE_INIT;

static void uffd_eagain_init(void)
{
	const char *v = getenv("TP_TEST_UFFD_EAGAIN");
	long n = v ? strtol(v, NULL, 10) : 0;

	__atomic_store_n(&uffd_eagain_every,
			 n <= 0	       ? 0u
			 : n < 2       ? 2u
			 : n > 1000000 ? 1000000u
				       : (unsigned)n,
			 __ATOMIC_RELAXED);
}

/* ioctl() on the engine's userfaultfd, through the injection above. */
static int uffd_ioctl(const struct mapping *m, unsigned long req, void *arg)
{
	unsigned every;

	pthread_once(&uffd_eagain_once, uffd_eagain_init);
	every = __atomic_load_n(&uffd_eagain_every, __ATOMIC_RELAXED);
	if (every &&
	    __atomic_add_fetch(&uffd_eagain_count, 1, __ATOMIC_RELAXED) %
			    every ==
		    0) {
		errno = EAGAIN;
		return -1;
	}
	return ioctl(m->uffd, req, arg);
}

/*
 * EAGAIN from a page-table ioctl is transient: the faulting mm was
 * changing (a fork, mremap or unmap under way in the kernel) and nothing
 * or part of the range was done. It is retried, never turned into a
 * failed mapping (SIGBUS). The change ends without us (we ask for no
 * non-cooperative events, so none waits for pool-uffd): yield and go
 * again. Counted (uffd_retries in the stats).
 */
static void uffd_again(struct mapping *m)
{
	STAT_ADD(m, uffd_retries, 1);
	sched_yield();
}

static int uffd_wake(struct mapping *m, size_t idx, size_t n)
{
	struct uffdio_range rg = {
		.start = (uintptr_t)page_addr(m, idx),
		.len = n * m->psize,
	};

	while (uffd_ioctl(m, UFFDIO_WAKE, &rg)) {
		if (errno != EAGAIN)
			return -errno;
		uffd_again(m);
	}
	return 0;
}

/* Sets (wp) or clears write protection; clearing wakes the writers. A
 * retry after EAGAIN does the whole range again (idempotent). */
static int uffd_protect(struct mapping *m, size_t idx, size_t n, bool wp)
{
	struct uffdio_writeprotect w = {
		.range = { .start = (uintptr_t)page_addr(m, idx),
			   .len = n * m->psize },
		.mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};

	while (uffd_ioctl(m, UFFDIO_WRITEPROTECT, &w)) {
		if (errno != EAGAIN)
			return -errno;
		uffd_again(m);
	}
	return 0;
}

static int evict(struct mapping *m, size_t n);

static bool page_is_present(struct mapping *m, size_t idx);

/* Installs n pages from src at page idx (and wakes their waiters).
 * Returns 0 or -errno (-EEXIST: a page was already there). A huge page
 * the kernel cannot allocate (-ENOMEM: its pool of hugetlb pages ran
 * short, another process took them) costs us one of ours: the oldest is
 * evicted, which gives its page back, and the copy is tried again; with
 * none of ours left, -ENOMEM (the mapping fails). */
static int uffd_copy_mode(struct mapping *m, size_t idx, size_t n,
			  const uint8_t *src, bool wp, uint64_t mode);

static int uffd_copy(struct mapping *m, size_t idx, size_t n,
		     const uint8_t *src, bool wp)
{
	return uffd_copy_mode(m, idx, n, src, wp, 0);
}

/* uffd_copy() with more UFFDIO_COPY mode bits (MODE_DONTWAKE). */
static int uffd_copy_mode(struct mapping *m, size_t idx, size_t n,
			  const uint8_t *src, bool wp, uint64_t mode)
{
	size_t done = 0, len = n * m->psize, step = len;

	while (done < len) {
		struct uffdio_copy c = {
			.dst = (uintptr_t)page_addr(m, idx) + done,
			.src = (uintptr_t)src + done,
			.len = step < len - done ? step : len - done,
			.mode = (wp ? UFFDIO_COPY_MODE_WP : 0) | mode,
		};
		int err;

		if (uffd_ioctl(m, UFFDIO_COPY, &c) == 0) {
			done += c.len;
			step = len - done;
			continue;
		}
		err = errno;
		if (c.copy > 0) {
			done += (size_t)c.copy;
			continue;
		}
		/* ENOENT: the range is not inside one VMA. The program split
		 * the mapping (madvise(MADV_HUGEPAGE) on part of an array, as
		 * numpy does, mprotect): the kernel checks the whole range
		 * against one VMA before copying anything. Shorter copies
		 * find the boundary; one page that is still refused is
		 * really gone (unmapped), and that is the error. */
		if (err == ENOENT && c.len > m->psize) {
			step = (c.len / 2 + m->psize - 1) & ~(m->psize - 1);
			continue;
		}
		/* Linux (6.x) says EEXIST, not ENOMEM, when it finds no
		 * free hugetlb page but the page table for the address
		 * exists: "already there" would be taken as a race and the
		 * program would fault on the missing page forever. */
		if (m->huge && err == EEXIST &&
		    !page_is_present(m, idx + done / m->psize))
			err = ENOMEM;
		if (err == ENOMEM && m->huge && m->nres > 0) {
			int ret = evict(m, 1);

			if (ret)
				return ret;
			STAT_ADD(m, huge_short, 1);
		} else if (err == EAGAIN) { /* the mm was changing */
			uffd_again(m);
		} else {
			return -err;
		}
	}
	return 0;
}

/*
 * Maps the zero page at idx for a read fault. The page is write-protected
 * before its waiter is woken, so its first write comes to us. Another
 * thread may write it between the two ioctls without faulting (the
 * kernel copies the zero page on its own): that page keeps PG_ZERO and
 * eviction checks its contents instead of trusting PG_DIRTY.
 */
static int zero_install(struct mapping *m, size_t idx)
{
	struct uffdio_zeropage z = {
		.range = { .start = (uintptr_t)page_addr(m, idx),
			   .len = m->psize },
		.mode = UFFDIO_ZEROPAGE_MODE_DONTWAKE,
	};
	int ret;

	/* hugetlb has no zero page: a page of zeros is copied in,
	 * protected in the same step (no window for a silent write). */
	if (m->huge)
		return uffd_copy(m, idx, 1, m->zero, true);
	while (uffd_ioctl(m, UFFDIO_ZEROPAGE, &z)) {
		if (errno != EAGAIN)
			return -errno;
		uffd_again(m);
	}
	ret = uffd_protect(m, idx, 1, true);
	if (ret)
		return ret;
	return uffd_wake(m, idx, 1);
}

/* Opens a userfaultfd: /dev/userfaultfd, else the syscall (kernel-mode
 * faults need privilege or vm.unprivileged_userfaultfd=1), else the
 * syscall in user-mode-only mode. LIBPOOL_UFFD_USER_ONLY=1 forces the
 * last (tests, and reproducing a host without the privilege). */
static int uffd_open(bool *user_only)
{
	const char *force = getenv("LIBPOOL_UFFD_USER_ONLY");
	int fd, dev;

	*user_only = false;
	if (!(force && !strcmp(force, "1"))) {
		dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
		if (dev >= 0) {
			fd = ioctl(dev, USERFAULTFD_IOC_NEW,
				   O_CLOEXEC | O_NONBLOCK);
			close(dev);
			if (fd >= 0)
				return fd;
		}
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0)
			return fd;
	}
	fd = (int)syscall(SYS_userfaultfd,
			  O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd >= 0) {
		*user_only = true;
		return fd;
	}
	if (errno == ENOSYS || errno == EINVAL)
		return -EOPNOTSUPP;
	return -errno;
}

/* Negotiates the API of the engine's userfaultfd: with the hugetlb
 * features where the kernel has them (eng.huge_ok), else without (a fresh
 * descriptor: the API is set once). Returns 0, -EOPNOTSUPP or -errno. */
static int engine_open_uffd(void)
{
	const uint64_t base =
		UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP;
	const uint64_t huge = UFFD_FEATURE_MISSING_HUGETLBFS |
			      UFFD_FEATURE_WP_HUGETLBFS_SHMEM;

	for (int pass = 0; pass < 2; pass++) {
		struct uffdio_api api = {
			.api = UFFD_API,
			.features = base | (pass == 0 ? huge : 0),
		};
		int fd = uffd_open(&eng.user_only);

		if (fd < 0)
			return fd;
		if (ioctl(fd, UFFDIO_API, &api) == 0) {
			eng.uffd = fd;
			eng.huge_ok = pass == 0;
			return 0;
		}
		close(fd);
		if (errno != EINVAL)
			return -errno;
	}
	return -EOPNOTSUPP;
}

/* Registers m's range with the engine's userfaultfd. -EOPNOTSUPP when the
 * kernel lacks a feature the mapping needs. */
static int uffd_register(struct mapping *m)
{
	const uint64_t need = (1ull << _UFFDIO_COPY) |
			      (m->huge ? 0 : (1ull << _UFFDIO_ZEROPAGE)) |
			      (1ull << _UFFDIO_WAKE) |
			      (1ull << _UFFDIO_WRITEPROTECT);
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)m->base, .len = m->len },
		.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
	};

	if (m->huge && !eng.huge_ok)
		return -EOPNOTSUPP;
	if (ioctl(m->uffd, UFFDIO_REGISTER, &reg))
		return errno == EINVAL ? -EOPNOTSUPP : -errno;
	if ((reg.ioctls & need) != need) {
		struct uffdio_range rg = { .start = (uintptr_t)m->base,
					   .len = m->len };

		ioctl(m->uffd, UFFDIO_UNREGISTER, &rg);
		return -EOPNOTSUPP;
	}
	return 0;
}

static void *uffd_main(void *arg);

/* The process budget when the engine starts: set by the program
 * (pool_paging_set_process_budget()), else LIBPOOL_LOCAL_BYTES, else
 * none. */
static size_t parse_size(const char *s);

static size_t process_budget(void)
{
	const char *env = getenv("LIBPOOL_LOCAL_BYTES");
	size_t v;

	if (eng.budget_set)
		return eng.budget_set;
	v = env && *env ? parse_size(env) : 0;
	return v ? v : SIZE_MAX;
}

/*
 * The spin cap (LIBPOOL_PAGING_SPIN_US, microseconds, at most 10 000;
 * default SPIN_US_DEFAULT), in ns. 0 where this thread may run on one CPU
 * only: there a spinning pool-uffd would only keep the faulting thread
 * from the CPU. A value that is not a number up to 10 000 is logged and
 * the default kept.
 */
static uint64_t spin_cap(void)
{
	const char *env = getenv("LIBPOOL_PAGING_SPIN_US");
	unsigned long us = SPIN_US_DEFAULT;
	cpu_set_t cpus;

	if (env && *env) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(env, &end, 10);
		if (errno || *end || end == env || v > 10000 || *env == '-')
			pool_log(LOG_ERR,
				 "paging: LIBPOOL_PAGING_SPIN_US=%s is not a "
				 "number of microseconds from 0 to 10000; "
				 "using %u",
				 env, SPIN_US_DEFAULT);
		else
			us = v;
	}
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 &&
	    CPU_COUNT(&cpus) < 2)
		us = 0;
	return (uint64_t)us * 1000u;
}

/* Starts the engine: its userfaultfd, stop eventfd, pidfd and thread.
 * eng.life held. Returns 0 or -errno. */
static int engine_start(void)
{
	sigset_t all, old;
	int ret;

	ret = engine_open_uffd();
	if (ret)
		return ret;
	eng.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (eng.stopfd < 0) {
		ret = -errno;
		goto fail;
	}
	/* For process_madvise() on ourselves (drop_pages()); without it,
	 * madvise() per range. */
	eng.pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0u);
	eng.budget = process_budget();
	eng.batch_on = !(getenv("LIBPOOL_PAGING_BATCH") &&
			 !strcmp(getenv("LIBPOOL_PAGING_BATCH"), "0"));
	eng.clock_on = !(getenv("LIBPOOL_PAGING_CLOCK") &&
			 !strcmp(getenv("LIBPOOL_PAGING_CLOCK"), "0"));
	eng.clock_auto = !getenv("LIBPOOL_PAGING_CLOCK");
	eng.credit_on = !(getenv("LIBPOOL_PAGING_CREDIT") &&
			  !strcmp(getenv("LIBPOOL_PAGING_CREDIT"), "0"));
	eng.behind_on = !(getenv("LIBPOOL_PAGING_BEHIND") &&
			  !strcmp(getenv("LIBPOOL_PAGING_BEHIND"), "0"));
	eng.wake_split = getenv("LIBPOOL_PAGING_WAKE_SPLIT") &&
			 !strcmp(getenv("LIBPOOL_PAGING_WAKE_SPLIT"), "1");
	eng.resident = 0;
	__atomic_store_n(&eng.spin_cap_ns, spin_cap(), __ATOMIC_RELAXED);
	eng.spin_win_ns = 0;
	/* pool-uffd takes no signals: a SIGBUS or SIGINT meant for the
	 * application must never land on the thread that serves faults. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&eng.thr, NULL, uffd_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		ret = -EAGAIN;
		goto fail;
	}
	/* named here too: the thread names itself only once it runs */
	pthread_setname_np(eng.thr, "pool-uffd");
	eng.running = true;
	pool_log(LOG_INFO, "paging: engine started user_only=%d budget=%zu",
		 (int)eng.user_only, eng.budget);
	return 0;
fail:
	if (eng.pidfd >= 0)
		close(eng.pidfd);
	if (eng.stopfd >= 0)
		close(eng.stopfd);
	close(eng.uffd);
	eng.uffd = eng.stopfd = eng.pidfd = -1;
	return ret;
}

/* Stops the engine (no mapping left). eng.life held, eng.lock not. */
static void engine_stop(void)
{
	uint64_t one = 1;

	if (write(eng.stopfd, &one, sizeof(one)) != sizeof(one))
		pool_log(LOG_ERR, "paging: stop err=%s", strerror(errno));
	pthread_join(eng.thr, NULL);
	close(eng.stopfd);
	close(eng.uffd);
	if (eng.pidfd >= 0)
		close(eng.pidfd);
	eng.uffd = eng.stopfd = eng.pidfd = -1;
	eng.running = false;
	eng.cursor = eng.last_hit = NULL;
}

/* Puts m under the engine (started if need be): its range registered,
 * in eng.maps. Returns 0 or -errno. */
static int engine_attach(struct mapping *m)
{
	int ret = 0;

	pthread_mutex_lock(&eng.life);
	if (!eng.running)
		ret = engine_start();
	if (ret)
		goto out;
	m->uffd = eng.uffd;
	m->user_only = eng.user_only;
	m->st.user_mode_only = eng.user_only;
	ret = uffd_register(m);
	if (ret) {
		if (!eng.nmaps)
			engine_stop();
		goto out;
	}
	pthread_mutex_lock(&eng.lock);
	m->enext = eng.maps;
	eng.maps = m;
	eng.nmaps++;
	pthread_mutex_unlock(&eng.lock);
out:
	pthread_mutex_unlock(&eng.life);
	return ret;
}

/* Takes m from the engine: once this returns pool-uffd never touches m
 * again; its range is unregistered (waiting faults wake and find no
 * handler: the caller must not touch the range). The last mapping stops
 * the engine. */
static void engine_detach(struct mapping *m)
{
	struct uffdio_range rg = { .start = (uintptr_t)m->base, .len = m->len };
	struct mapping **pp;

	pthread_mutex_lock(&eng.life);
	pthread_mutex_lock(&eng.lock);
	for (pp = &eng.maps; *pp && *pp != m; pp = &(*pp)->enext)
		;
	if (*pp) {
		*pp = m->enext;
		eng.nmaps--;
		eng.resident -= m->nres * m->psize;
	}
	if (eng.cursor == m)
		eng.cursor = NULL;
	if (eng.last_hit == m)
		eng.last_hit = NULL;
	pthread_mutex_unlock(&eng.lock);
	/* Without the registration a page we never filled reads as zero
	 * instead of waiting for a handler that is gone. */
	if (ioctl(m->uffd, UFFDIO_UNREGISTER, &rg))
		pool_log(LOG_WARNING, "paging: unregister err=%s",
			 strerror(errno));
	if (!eng.nmaps && eng.running)
		engine_stop();
	pthread_mutex_unlock(&eng.life);
}

/* ------------------------------------------------------------------ */
/* failure                                                              */

/* Whether thread tid blocks or ignores SIGBUS (then it would never leave
 * its fault). Reads /proc without stdio. */
static bool sigbus_is_masked(pid_t tid)
{
	static const char *const keys[] = { "SigBlk:", "SigIgn:" };
	const uint64_t bit = 1ull << (SIGBUS - 1);
	char path[64] = "/proc/self/task/", buf[4096], d[16];
	size_t got = 0, k = strlen(path);
	int fd, nd = 0;
	ssize_t n;

	do {
		d[nd++] = (char)('0' + tid % 10);
		tid /= 10;
	} while (tid > 0 && nd < (int)sizeof(d));
	while (nd)
		path[k++] = d[--nd];
	memcpy(path + k, "/status", sizeof("/status"));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	while (got < sizeof(buf) - 1 &&
	       (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *v = strstr(buf, keys[i]);

		if (v && (strtoull(v + strlen(keys[i]), NULL, 16) & bit))
			return true;
	}
	return false;
}

/* What fault_fail() says a failed mapping's cause was: the pool (its
 * reads and writes), the kernel's hugetlb pool, or the kernel refusing
 * a page table change (userfaultfd ioctls) for the step that failed. */
static const char *fail_cause(const struct mapping *m, int err)
{
	const char *why = m->fail_why;

	if (err == -ENOMEM && m->huge)
		return "no huge page left (vm.nr_hugepages)";
	if (why && (!strcmp(why, "fetch") || !strcmp(why, "write-back")))
		return "pool unreachable";
	return "the kernel refused to map the page";
}

/*
 * A fault we cannot serve: the thread must not run on with a page of
 * wrong (or zero) contents. It gets SIGBUS, like a file mapping past the
 * end of its file. A thread that blocks or ignores SIGBUS would wait in
 * its fault forever, so then the process is aborted instead.
 */
static void fault_fail(struct mapping *m, pid_t tid, size_t idx)
{
	int err = m->failed;

	STAT_ADD(m, sigbus, 1);
	if (!m->fail_logged) {
		m->fail_logged = true;
		/* Unconditional: the process is about to see SIGBUS, and
		 * this line is what explains it. */
		pool_log_emit(LOG_ERR,
			      "paging: cannot serve a fault, %s map=%p "
			      "page=%zu tid=%d step=%s err=%s; raising SIGBUS",
			      fail_cause(m, err), (void *)m->base, idx,
			      (int)tid, m->fail_why ? m->fail_why : "?",
			      strerror(-err));
	}
	if (sigbus_is_masked(tid)) {
		pool_log_emit(LOG_ERR,
			      "paging: thread %d blocks or ignores SIGBUS; "
			      "aborting rather than hand it a wrong page",
			      (int)tid);
		abort();
	}
	if (syscall(SYS_tgkill, getpid(), tid, SIGBUS))
		pool_log_emit(LOG_ERR, "paging: tgkill tid=%d err=%s", (int)tid,
			      strerror(errno));
}

static void mapping_fail(struct mapping *m, int err, const char *why)
{
	if (m->failed)
		return;
	m->fail_why = why;
	__atomic_store_n(&m->failed, err, __ATOMIC_RELEASE);
	__atomic_store_n(&m->st.failed, err, __ATOMIC_RELAXED);
	pool_log(LOG_ERR, "paging: mapping failed map=%p err=%s why=%s",
		 (void *)m->base, strerror(-err), why);
}

/* ------------------------------------------------------------------ */
/* eviction                                                             */

static void warm_deferred_check(struct mapping *m);

static void ring_push(struct mapping *m, size_t idx)
{
	m->ring[(m->head + m->nres) % m->max_res] = idx;
	m->nres++;
	eng.resident += m->psize;
	if (m->warm_deferred)
		warm_deferred_check(m);
	__atomic_store_n(&m->st.resident, m->nres, __ATOMIC_RELAXED);
	if (m->nres > m->st.resident_peak)
		__atomic_store_n(&m->st.resident_peak, m->nres,
				 __ATOMIC_RELAXED);
}

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
static bool page_needs_writeback(const struct mapping *m, size_t idx)
{
	uint8_t s = m->state[idx];

	if (!(s & (PG_DIRTY | PG_ZERO)))
		return false;
	if ((s & PG_ZERO) && !(s & PG_REMOTE) &&
	    page_is_zero(page_addr(m, idx), m->psize))
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
static int write_back(struct mapping *m, const size_t *idx, size_t n)
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
static void sort_pages(size_t *v, size_t n)
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

/* Longest gap between two dirty victims that one write-protect may span. */
#define WP_GAP_MAX 64u

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
static int protect_dirty(struct mapping *m, const size_t *v, size_t n)
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
		ret = uffd_protect(m, first, last - first + 1, true);
		if (ret) {
			mapping_fail(m, ret, "write-protect");
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
static void drop_pages(struct mapping *m, const size_t *v, size_t n)
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
	if (eng.pidfd >= 0) {
		long r = syscall(SYS_process_madvise, eng.pidfd, iov, niov,
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
		close(eng.pidfd);
		eng.pidfd = -1;
	}
	for (size_t i = 0; i < niov; i++)
		if (madvise(iov[i].iov_base, iov[i].iov_len, MADV_DONTNEED))
			pool_log(LOG_WARNING, "paging: madvise err=%s",
				 strerror(errno));
}

/* Evictions per epoch of the refault test: an eighth of the budget. */
static size_t epoch_len(const struct mapping *m)
{
	return m->max_res / 8 ? m->max_res / 8 : 1;
}

/*
 * Whether page idx, about to be fetched, was evicted recently: within
 * REFAULT_EPOCHS epochs, about one budget's worth of evictions. Epochs
 * are 1..255 and wrap: a page evicted 255 epochs ago or more may pass
 * for a recent one (a spare second chance, never a wrong byte).
 */
static bool page_refaulted(const struct mapping *m, size_t idx)
{
	uint8_t e = m->evicted[idx];

	return e && (uint8_t)(m->epoch - e) < REFAULT_EPOCHS;
}

/* Passes of the hand page idx, about to be fetched, is kept through:
 * CREDIT_PASSES when it was evicted within CREDIT_EPOCHS epochs. */
static uint8_t page_credit(const struct mapping *m, size_t idx)
{
	uint8_t e = m->evicted[idx];

	return e && (uint8_t)(m->epoch - e) < CREDIT_EPOCHS ? CREDIT_PASSES : 0;
}

/* Write-protects the sorted pages v[0..n), close ones in one range
 * (pages between them, dirty or not, lose nothing by a protection: a
 * write to one comes to wp_fault()). */
static void protect_sample(struct mapping *m, const size_t *v, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;

		while (j < n && v[j] - v[j - 1] <= WP_GAP_MAX)
			j++;
		int ret = uffd_protect(m, v[i], v[j - 1] - v[i] + 1, true);

		/* Unprotected, the page only looks unused: it goes on the
		 * hand's next pass, protected first like any dirty page. */
		if (ret)
			pool_log(LOG_DEBUG, "paging: sample protect err=%s",
				 strerror(-ret));
		i = j;
	}
}

/*
 * 4 KiB pages: up to n victims chosen by CLOCK (second chance), taken
 * out of the ring; returns how many. The hand is the ring's head. A page
 * marked PG_REF (written since the hand last passed it, a demand write,
 * or fetched again soon after its eviction: page_refaulted()) loses the
 * mark and goes to the tail instead. A dirty one is write-protected on
 * the way, so that its next write shows (wp_fault() marks it again): an
 * unprotected dirty page would otherwise look unused forever. Reads are
 * invisible to userfaultfd, so a page that is only read is kept only by
 * refaulting: pages a scan brings in once carry no mark and go first,
 * and a scan larger than the budget passes without flushing pages that
 * are reused (scan resistance).
 *
 * A page fetched again very soon after its eviction (page_credit()) has
 * credit: the hand passes it that many times, in CLOCK and in FIFO
 * windows alike, before it is judged by its mark again. Re-protection
 * is what CLOCK's marks cost (a WP fault as costly as a fetch), and the
 * FIFO windows that avoid it evict the pages of a hot set as readily as
 * cold ones (80 % of the accesses to 60 % of the budget, the other 20 %
 * uniform over the rest: every resident page is marked, every window
 * FIFO); a refault is free, and it tells the hot pages apart: each one
 * costs a fetch per CREDIT_PASSES + 1 revolutions instead of one per
 * revolution. Credited pages count neither as marked nor unmarked in
 * clock_adapt(). LIBPOOL_PAGING_CREDIT=0 turns it off.
 */
/*
 * Adaptive CLOCK, once per budget's worth of pages the hand passed. When
 * the hand finds more than half of the pages marked, CLOCK tells little
 * apart (nearly everything resident was used since its last pass) and
 * costs a WP fault for every dirty page it spares (protect_sample(): a
 * program that writes what it touches, CPython's reference counts, takes
 * one at once): the mapping evicts oldest first for the next window,
 * still counting the marked pages among its victims (marks from WP
 * faults of clean pages, demand writes and refaults), and goes back to
 * CLOCK when they fall to half or less. A hot set among cold pages
 * (few marked) keeps CLOCK.
 */
static void clock_adapt(struct mapping *m)
{
	size_t seen = m->clk_marked + m->clk_unmarked;

	if (!eng.clock_auto || seen < m->max_res)
		return;
	m->clk_fifo = m->clk_marked * 2 > seen;
	if (m->clk_fifo)
		STAT_ADD(m, clock_fifo_windows, 1);
	m->clk_marked = m->clk_unmarked = 0;
}

static size_t clock_select(struct mapping *m, size_t n, size_t *victims,
			   bool force)
{
	/* force: n victims even if every page is marked or credited (the
	 * last revolution finds them unmarked, without credit); else one
	 * revolution at most */
	size_t got = 0, nre = 0, steps = 0;
	size_t bound = force ? (CREDIT_PASSES + 2) * m->nres + n : m->nres;
	size_t reprot[WB_BATCH];

	while (got < n && m->nres && steps++ < bound) {
		size_t idx = m->ring[m->head];
		uint8_t s = m->state[idx];

		m->head = (m->head + 1) % m->max_res;
		if (m->credit[idx] && eng.clock_on) {
			m->credit[idx]--;
			m->ring[(m->head + m->nres - 1) % m->max_res] = idx;
			continue;
		}
		if (s & PG_REF)
			m->clk_marked++;
		else
			m->clk_unmarked++;
		if ((s & PG_REF) && eng.clock_on && !m->clk_fifo) {
			m->state[idx] = (uint8_t)(s & ~PG_REF);
			if ((s & PG_DIRTY) && nre < WB_BATCH)
				reprot[nre++] = idx;
			/* to the tail: the slot the hand just left when
			 * the ring is full, a free one otherwise */
			m->ring[(m->head + m->nres - 1) % m->max_res] = idx;
			STAT_ADD(m, second_chances, 1);
			continue;
		}
		m->nres--;
		victims[got++] = idx;
	}
	clock_adapt(m);
	if (nre) {
		sort_pages(reprot, nre);
		protect_sample(m, reprot, nre);
	}
	return got;
}

/* Victims of a failed eviction go back into the ring: they are still
 * resident (nothing was dropped). */
static void ring_restore(struct mapping *m, const size_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ring_push(m, v[i]);
}

/*
 * Evicts up to n (<= WB_BATCH) resident pages, in address order (fewer,
 * larger ranges to protect, write and drop): the oldest (huge pages:
 * FIFO, with behind_victim() choosing the head), or CLOCK's choice
 * (clock_select(); with !force only unmarked pages found in one
 * revolution, maybe none). *done: how many. Returns 0 or -errno (the
 * mapping is then failed and nothing was dropped).
 */
static int evict_list(struct mapping *m, size_t *victims, size_t n,
		      size_t *done);

static int evict_some(struct mapping *m, size_t n, bool force, size_t *done)
{
	size_t victims[WB_BATCH];

	*done = 0;
	if (n > m->nres)
		n = m->nres;
	if (m->huge) {
		for (size_t i = 0; i < n; i++)
			victims[i] = m->ring[(m->head + i) % m->max_res];
		m->head = (m->head + n) % m->max_res;
		m->nres -= n;
	} else {
		n = clock_select(m, n, victims, force);
	}
	return evict_list(m, victims, n, done);
}

/*
 * Evicts victims[0..n) (n <= WB_BATCH), already taken out of the ring:
 * protects the dirty ones, writes back what changed, drops them all.
 * *done: n, or 0 on failure (the victims are then back in the ring,
 * resident, and the mapping is failed). Sorts victims.
 */
static int evict_list(struct mapping *m, size_t *victims, size_t n,
		      size_t *done)
{
	size_t wb[WB_BATCH];
	size_t nw = 0;
	int ret;
	uint64_t t = mono_ns();

	*done = 0;
	eng.resident -= n * m->psize;
	sort_pages(victims, n);
	/* Dirty pages are protected first: from then on a write waits
	 * for us, so the copy we send is the page's last contents. */
	ret = protect_dirty(m, victims, n);
	t = phase_add(POOL_PHASE_PROTECT, t);
	if (ret) {
		ring_restore(m, victims, n);
		return ret;
	}
	for (size_t i = 0; i < n; i++) {
		size_t idx = victims[i];

		m->credit[idx] = 0; /* leaving the ring */
		if (!page_needs_writeback(m, idx))
			continue;
		page_copy_out(m->stage_out + nw * m->psize, page_addr(m, idx),
			      m->psize);
		wb[nw++] = idx;
	}
	t = phase_add(POOL_PHASE_COPYOUT, t);
	if (nw) {
		ret = write_back(m, wb, nw);
		t = phase_add(POOL_PHASE_WRITEBACK, t);
		if (ret) {
			mapping_fail(m, ret, "write-back");
			ring_restore(m, victims, n);
			return ret;
		}
		for (size_t i = 0; i < nw; i++)
			m->state[wb[i]] |= PG_REMOTE;
	}
	/* While a fork is under way the child must find every page
	 * mapped: the victims leave the ring (the budget counts them out)
	 * but stay, protected, until fork_release() drops them. */
	if (!eng.fork_hold || m->huge)
		drop_pages(m, victims, n);
	phase_add(POOL_PHASE_DROP, t);
	for (size_t i = 0; i < n; i++) {
		m->state[victims[i]] &= (uint8_t)PG_REMOTE;
		if (eng.fork_hold && !m->huge)
			m->state[victims[i]] |= PG_FORK;
		m->evicted[victims[i]] = m->epoch;
	}
	if (m->epoch_left <= n) {
		m->epoch = m->epoch == 255 ? 1 : (uint8_t)(m->epoch + 1);
		m->epoch_left = epoch_len(m);
	} else {
		m->epoch_left -= n;
	}
	__atomic_store_n(&m->st.resident, m->nres, __ATOMIC_RELAXED);
	STAT_ADD(m, evictions, n);
	*done = n;
	return 0;
}

/* Evicts up to n pages of m's, n of them unless m has fewer. */
static int evict(struct mapping *m, size_t n)
{
	size_t done;

	return evict_some(m, n, true, &done);
}

/*
 * Huge pages, scan resistance. When room is made for a stream, the FIFO's
 * oldest page is the worst victim of a scan that comes round again (a
 * model's weights read every step, a loop over an array larger than the
 * budget): it is the next one the scan needs, so every page misses on
 * every pass. The page the program left most recently, at least one page
 * behind it (a stencil may still read the one just behind), is evicted
 * instead; with none behind (the start of a pass), the page farthest
 * ahead beyond what install-ahead maps. Then the pages at the start of
 * the scan stay resident and a pass misses only on the rest (the page
 * used farthest in the future goes first: optimal for a cyclic scan). A
 * stream's first fault is taken as going up. The chosen page is swapped
 * into the FIFO's head slot; the old head takes its place. A linear
 * search of the resident huge pages (at most local_bytes / 2 MiB), once
 * per 2 MiB evicted. Returns whether a page was chosen.
 */
static bool behind_victim(struct mapping *m)
{
	size_t best = SIZE_MAX, far = SIZE_MAX, bi = 0, fi = 0;
	size_t b = m->behind, reach = m->ahead_max + 1;
	bool up = m->behind_dir > 0;

	if (!m->huge || !m->behind_dir || !m->nres)
		return false;
	for (size_t i = 0; i < m->nres; i++) {
		size_t v = m->ring[(m->head + i) % m->max_res];

		/* behind: the most recently left, one page of margin */
		if ((up ? v + 1 < b : v > b + 1) &&
		    (best == SIZE_MAX || (up ? v > best : v < best))) {
			best = v;
			bi = i;
		}
		/* else, ahead beyond what install-ahead maps: the farthest
		 * (at the start of a pass nothing is behind) */
		if ((up ? v > b + reach : v + reach < b) &&
		    (far == SIZE_MAX || (up ? v > far : v < far))) {
			far = v;
			fi = i;
		}
	}
	if (best == SIZE_MAX) {
		best = far;
		bi = fi;
	}
	if (best == SIZE_MAX)
		return false;
	m->ring[(m->head + bi) % m->max_res] = m->ring[m->head];
	m->ring[m->head] = best;
	return true;
}

/* Pages of margin behind a stream's last fault that behind_select()
 * leaves alone (a stencil, or a loop body, may still read them). */
#define BEHIND_MARGIN RA_MAX

/*
 * 4 KiB pages, eviction behind a stream (MRU for scans). While room is
 * made for an established stream that fetches pages evicted before (a
 * fault continuing it at full read-ahead on such a page, or a run
 * installed ahead of it: a pass over data that did not fit), the
 * victims are the resident pages the stream left most recently: those
 * just below m->behind less BEHIND_MARGIN going up, just above it going
 * down. A scan read once loses nothing by it (the pages behind it are
 * done), and a loop over more pages than the budget keeps the pages at
 * the start of its range for the next pass: each pass then misses on
 * about N - budget pages instead of all N, which CLOCK, FIFO and LRU do
 * (the page they evict is always the one needed next). CLOCK still
 * chooses for faults that continue no stream (random access), for a
 * stream's first pass and for fills: a program that writes one buffer,
 * then another, then uses the second wants LRU's choice there. Looks at
 * most res_cap() state bytes; takes the victims out of the ring (a pass
 * over its tail, back to the oldest victim: O(resident) at worst).
 * Returns how many, at most n.
 */
static size_t res_cap(const struct mapping *m);

static size_t behind_select(struct mapping *m, size_t n, size_t *victims)
{
	size_t got = 0, b = m->behind, look = res_cap(m);
	bool up = m->behind_dir > 0;

	if (up ? b < BEHIND_MARGIN + 1 : b + BEHIND_MARGIN + 1 >= m->npages)
		return 0;
	for (size_t i = up ? b - BEHIND_MARGIN - 1 : b + BEHIND_MARGIN + 1;
	     got < n && look--; i = up ? i - 1 : i + 1) {
		if ((m->state[i] & (PG_RESIDENT | PG_CLAIM)) == PG_RESIDENT) {
			m->state[i] |= PG_VICTIM;
			victims[got++] = i;
		}
		if (up ? i == 0 : i + 1 >= m->npages)
			break;
	}
	if (!got)
		return 0;
	/* Out of the ring. The victims were mostly installed last (the
	 * stream's own pages): look for them from the tail, and close
	 * the gaps only from the lowest position one was found at. */
	{
		size_t found = 0, lo = m->nres, kept;

		for (size_t i = m->nres; i-- > 0 && found < got;) {
			if (m->state[m->ring[(m->head + i) % m->max_res]] &
			    PG_VICTIM) {
				found++;
				lo = i;
			}
		}
		kept = lo;
		for (size_t i = lo; i < m->nres; i++) {
			size_t idx = m->ring[(m->head + i) % m->max_res];

			if (m->state[idx] & PG_VICTIM)
				m->state[idx] &= (uint8_t)~PG_VICTIM;
			else
				m->ring[(m->head + kept++) % m->max_res] = idx;
		}
		m->nres = kept;
	}
	STAT_ADD(m, behind_evictions, got);
	return got;
}

/* Evicts up to n (<= WB_BATCH) pages behind m's stream (behind_select());
 * *done: how many (0: none behind it). */
static int evict_behind(struct mapping *m, size_t n, size_t *done)
{
	size_t victims[WB_BATCH];

	*done = 0;
	n = behind_select(m, n > m->nres ? m->nres : n, victims);
	return n ? evict_list(m, victims, n, done) : 0;
}

/* Sets where the stream room is made for stands (behind_victim(),
 * behind_select()): page at, going dir. 4 KiB pages only for an
 * established stream (established) and with LIBPOOL_PAGING_BEHIND on. */
static void behind_set(struct mapping *m, size_t at, int dir, bool established)
{
	m->behind = at;
	m->behind_dir = m->huge || (established && eng.behind_on)
				? (dir < 0 ? -1 : 1)
				: 0;
}

/* The mapping that gives up pages for the process budget next: each
 * in turn (eng.cursor), skipping those with nothing resident. */
static struct mapping *budget_victim(void)
{
	struct mapping *v = eng.cursor ? eng.cursor : eng.maps;

	for (size_t i = 0; i < eng.nmaps && v; i++) {
		struct mapping *next = v->enext ? v->enext : eng.maps;

		/* a failed mapping cannot write back: its pages stay */
		if (v->nres && !v->failed) {
			eng.cursor = next;
			return v;
		}
		v = next;
	}
	return NULL;
}

/*
 * Evicts until the process budget takes need more pages of m's. Each
 * mapping in turn gives up a batch of pages its CLOCK finds unmarked in
 * one revolution; when a round of every mapping finds none (all marked,
 * now unmarked), the next one gives up a batch regardless. So a mapping
 * whose pages are all in use keeps them while another has cold ones.
 */
static int make_room_process(struct mapping *m, size_t need)
{
	while (eng.budget != SIZE_MAX &&
	       eng.resident + need * m->psize > eng.budget) {
		struct mapping *v = NULL;
		size_t done = 0;
		int ret;

		for (size_t i = 0; i < eng.nmaps && !done; i++) {
			v = budget_victim();
			if (!v)
				break;
			ret = evict_some(v, v->huge ? 1 : v->batch, false,
					 &done);
			if (ret)
				return ret;
		}
		if (done)
			continue;
		v = budget_victim();
		if (!v)
			break; /* nothing left to evict: need > budget */
		ret = evict_some(v, v->huge ? 1 : v->batch, true, &done);
		if (ret)
			return ret;
		if (!done)
			break;
	}
	return 0;
}

/* The most pages m may hold: its own budget, or the process's when less. */
static size_t res_cap(const struct mapping *m)
{
	size_t p = eng.budget == SIZE_MAX ? SIZE_MAX : eng.budget >> m->shift;

	return p < m->max_res ? (p ? p : 1) : m->max_res;
}

static int do_make_room(struct mapping *m, size_t need);

/* Evicts in rounds of m->batch pages (more when more are needed at
 * once) until need more pages fit, in m's budget and then in the
 * process's (do_make_room()); its time is the step "room". */
static int make_room(struct mapping *m, size_t need)
{
	uint64_t t0 = mono_ns();
	int ret = do_make_room(m, need);

	phase_add(POOL_PHASE_ROOM, t0);
	return ret;
}

static int do_make_room(struct mapping *m, size_t need)
{
	while (m->nres + need > m->max_res) {
		size_t over = m->nres + need - m->max_res;
		int ret;

		size_t want = over > m->wb_max	? m->wb_max
			      : over < m->batch ? m->batch
						: over;

		if (behind_victim(m)) {
			ret = evict(m, 1);
			if (ret)
				return ret;
			continue;
		}
		if (!m->huge && m->behind_dir) {
			size_t done;

			ret = evict_behind(m, want, &done);
			if (ret)
				return ret;
			if (done)
				continue;
		}
		ret = evict(m, want);

		if (ret)
			return ret;
	}
	return make_room_process(m, need);
}

/* ------------------------------------------------------------------ */
/* faults                                                               */

static bool page_is_present(struct mapping *m, size_t idx)
{
	unsigned char v[HUGE_SIZE / PAGE] = { 0 }; /* one per 4 KiB */

	return mincore(page_addr(m, idx), m->psize, v) == 0 && (v[0] & 1);
}

/*
 * Whether a fault at idx continues stream s past pages that are all
 * resident: a pass that read through pages kept from the last one
 * (behind_select()) and reached the first one missing. At most
 * res_cap() state bytes are looked at.
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
	if (to - from > res_cap(m))
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

static bool page_is_fetchable(const struct mapping *m, size_t idx)
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
 * (install_ahead()). Room for the n pages is made by the caller.
 */
static size_t run_bytes(const struct mapping *m, size_t lo, size_t n)
{
	size_t off = lo << m->shift;

	return m->size - off < n * m->psize ? m->size - off : n * m->psize;
}

static int fetch_install(struct mapping *m, size_t lo, size_t n, size_t idx,
			 bool write, const uint8_t *buf);

static int fetch_run(struct mapping *m, size_t lo, size_t n, size_t idx,
		     bool write)
{
	uint64_t off;
	struct pool_region *r = seg_at(m, lo, &off);
	uint64_t t0 = mono_ns();
	int ret = pool_read(m->p, r, off, m->stage_in, run_bytes(m, lo, n));

	phase_add(POOL_PHASE_FETCH, t0);
	if (ret) {
		mapping_fail(m, ret, "fetch");
		return ret;
	}
	return fetch_install(m, lo, n, idx, write, m->stage_in);
}

/* Installs pages [lo, lo+n) read into buf: see fetch_run(). */
static int fetch_install(struct mapping *m, size_t lo, size_t n, size_t idx,
			 bool write, const uint8_t *buf)
{
	size_t bytes = run_bytes(m, lo, n), at;
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
		ret = uffd_copy(m, lo, n, buf, !dirty);
	} else {
		at = idx - lo;
		ret = 0;
		if (at)
			ret = uffd_copy(m, lo, at, buf, !dirty);
		if (ret == 0 && at + 1 < n)
			ret = uffd_copy(m, idx + 1, n - at - 1,
					buf + (at + 1) * m->psize, !dirty);
		if (ret == 0)
			ret = uffd_copy_mode(
				m, idx, 1, buf + at * m->psize,
				!(dirty || write),
				eng.wake_split ? UFFDIO_COPY_MODE_DONTWAKE : 0);
	}
	phase_add(POOL_PHASE_INSTALL, t0);
	/* A measurement (LIBPOOL_PAGING_WAKE_SPLIT=1): the faulting
	 * thread's wake-up as a step of its own, so that install is the
	 * copy alone (one more ioctl per fault). */
	if (ret == 0 && idx != SIZE_MAX && eng.wake_split) {
		uint64_t tw = mono_ns();

		ret = uffd_wake(m, idx, 1);
		phase_add(POOL_PHASE_WAKE, tw);
	}
	if (ret) {
		mapping_fail(m, ret, "UFFDIO_COPY");
		return ret;
	}
	for (size_t i = lo; i < lo + n; i++) {
		uint8_t ref = 0;

		if (!(m->state[i] & PG_RESIDENT)) {
			ring_push(m, i);
			if (!m->huge && eng.clock_on && eng.credit_on)
				m->credit[i] = page_credit(m, i);
		}
		if (page_refaulted(m, i)) {
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
		       page_is_fetchable(m, from + n))
			n++;
	} else {
		while (n < limit && from - n < m->npages &&
		       seg_same(m, from, from - n) &&
		       page_is_fetchable(m, from - n))
			n++;
		*lo = from + 1 - n;
	}
	return n;
}

/*
 * After a fault that continues stream st at full read-ahead, how many
 * pages to map ahead of the program (install_ahead()): the window
 * doubles each time the program catches up with it again, up to a
 * quarter of the budget (AHEAD_MAX at most), so pages installed ahead are
 * never the FIFO's oldest.
 */
static void ahead_arm(struct mapping *m, struct stream *st, bool grown)
{
	size_t cap =
		res_cap(m) / 4 < m->ahead_max ? res_cap(m) / 4 : m->ahead_max;

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
static int fetch(struct mapping *m, size_t idx, bool write, bool again)
{
	bool cont;
	struct stream *st = stream_at(m, idx, &cont);
	size_t lo = idx, n = 1, limit;
	int ret;

	limit = res_cap(m) / 4 < st->ra ? res_cap(m) / 4 : st->ra;
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
		behind_set(m, idx, st->dir,
			   cont && st->ra >= m->ra_max && st->rescan);
		ret = make_room(m, n);
		m->behind_dir = 0;
		if (ret)
			return ret;
	}
	ret = fetch_run(m, lo, n, idx, write);
	if (ret == 0)
		ahead_arm(m, st, cont);
	return ret;
}

/* A missing fault read from the userfaultfd, for fetch_batch(). */
struct bfault {
	size_t idx;
	bool write;
	pid_t tid;
};

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
static void fetch_batch(struct mapping *m, const struct bfault *f, size_t k)
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
			res_cap(m) / 4 < st->ra ? res_cap(m) / 4 : st->ra;
		size_t room = m->stage_pages - used - (k - i - 1);

		if (limit > room)
			limit = room;
		if (!limit)
			limit = 1;
		n[i] = page_is_fetchable(m, f[i].idx)
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
	ret = make_room(m, used);
	for (size_t i = 0; i < k && ret == 0; i++) {
		uint64_t off;
		struct pool_region *r;

		if (!n[i])
			continue;
		r = seg_at(m, lo[i], &off);
		ret = pool_read_async(m->p, r, off,
				      m->stage_in + at[i] * m->psize,
				      run_bytes(m, lo[i], n[i]), &ops[i]);
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
		mapping_fail(m, ret, "fetch");
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
			fault_fail(m, f[i].tid, f[i].idx);
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
static bool install_ahead(struct mapping *m)
{
	struct stream *st = NULL;
	size_t lo, n, from, lo2 = 0, n2 = 0;
	struct pool_op *op = NULL, *op1 = NULL;
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
	behind_set(m, st->at, st->dir, st->rescan);
	ret = n ? make_room(m, n + n2) : 0;
	m->behind_dir = 0;
	if (n == 0 || ret) {
		st->goal = 0; /* the end of the stream, or a failure */
		return true;
	}
	/* Both reads go out at once; the second goes on while the first
	 * run is installed. */
	r1 = seg_at(m, lo, &off1);
	ret = pool_read_async(m->p, r1, off1, m->stage_in, run_bytes(m, lo, n),
			      &op1);
	if (ret == 0 && n2) {
		r2r = seg_at(m, lo2, &off2);
		if (pool_read_async(m->p, r2r, off2, m->stage_in2,
				    run_bytes(m, lo2, n2), &op))
			n2 = 0; /* not started: the next call reads it */
	}
	if (ret == 0)
		while ((ret = pool_wait(m->p, op1, -1)) == -ETIMEDOUT)
			;
	if (ret) {
		mapping_fail(m, ret, "fetch");
		if (n2)
			while (pool_wait(m->p, op, -1) == -ETIMEDOUT)
				;
		st->goal = 0;
		return true;
	}
	ret = fetch_install(m, lo, n, SIZE_MAX, false, m->stage_in);
	if (n2) {
		while ((r2 = pool_wait(m->p, op, -1)) == -ETIMEDOUT)
			;
		if (r2)
			mapping_fail(m, r2, "fetch");
		if (ret == 0 && r2 == 0)
			ret = fetch_install(m, lo2, n2, SIZE_MAX, false,
					    m->stage_in2);
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

static bool ahead_pending(const struct mapping *m)
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
		int ret = uffd_copy(m, idx, k, m->zero, false);

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

	if (eng.budget != SIZE_MAX) {
		size_t p = eng.resident < eng.budget
				   ? (eng.budget - eng.resident) >> m->shift
				   : 0;

		r = p < r ? p : r;
	}
	return r;
}

static int zero_fill(struct mapping *m, size_t idx)
{
	size_t n = 1, limit, lo, room, live = live_pages(m);
	struct zstream *z;
	int dir, ret;

	z = zstream_at(m, idx, &dir);
	if (dir)
		z->ra = z->ra * 2 > m->zero_max ? m->zero_max : z->ra * 2;
	/* A fill: see behind_victim(). Fresh pages are no rescan: 4 KiB
	 * pages are not evicted behind a fill. */
	behind_set(m, idx, dir, false);
	limit = res_cap(m) / 4 < z->ra ? res_cap(m) / 4 : z->ra;
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
	ret = make_room(m, n);
	m->behind_dir = 0;
	if (ret)
		return ret;
	/* the faulting page first: its thread goes on meanwhile */
	ret = uffd_copy(m, idx, 1, m->zero, false);
	if (ret == -EEXIST) {
		/* Raced with nothing we know of: keep it, as dirty. */
		uffd_wake(m, idx, 1);
		n = 1;
		lo = idx;
		ret = 0;
	}
	if (ret)
		return ret;
	ring_push(m, idx);
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
			ring_push(m, i);
			m->state[i] = PG_RESIDENT | PG_DIRTY | PG_ZERO;
		}
	}
	STAT_ADD(m, zero_fills, n);
	return 0;
}

static void missing_fault(struct mapping *m, size_t idx, bool write, pid_t tid)
{
	bool again = false;
	uint8_t s = m->state[idx];
	int ret;

	if (s & PG_FORK) {
		/* Mapped for a fork under way (fork_fetch()) after this
		 * fault was sent: the install woke it already. */
		if (page_is_present(m, idx)) {
			uffd_wake(m, idx, 1);
			return;
		}
		/* dropped behind our back: as any page out of the ring */
		s &= (uint8_t)~PG_FORK;
		m->state[idx] = s;
	}
	if (s & PG_RESIDENT) {
		/* Another thread's fault on the same page, answered
		 * already; or the page was dropped behind our back
		 * (madvise by the application): then serve it again. */
		if (page_is_present(m, idx)) {
			uffd_wake(m, idx, 1);
			return;
		}
		again = true;
	}
	if (__atomic_load_n(&m->failed, __ATOMIC_ACQUIRE)) {
		fault_fail(m, tid, idx);
		return;
	}
	if (idx >= live_pages(m)) {
		/* A growable mapping's page no segment backs yet: nothing
		 * could be written back from it. A bug of the caller's. */
		pool_log_emit(LOG_ERR,
			      "paging: fault beyond the grown part map=%p "
			      "page=%zu tid=%d; raising SIGBUS",
			      (void *)m->base, idx, (int)tid);
		STAT_ADD(m, sigbus, 1);
		syscall(SYS_tgkill, getpid(), tid, SIGBUS);
		return;
	}
	STAT_ADD(m, faults, 1);
	if (s & PG_REMOTE) {
		ret = fetch(m, idx, write, again);
		if (ret)
			fault_fail(m, tid, idx);
		return;
	}
	if (write && !again) {
		uint64_t t0 = mono_ns();

		ret = zero_fill(m, idx);
		phase_add(POOL_PHASE_ZERO, t0);
		if (ret) {
			mapping_fail(m, ret, "zero fill");
			fault_fail(m, tid, idx);
		}
		return;
	}
	if (!again) {
		ret = make_room(m, 1);
		if (ret) {
			fault_fail(m, tid, idx);
			return;
		}
	}
	uint64_t t0 = mono_ns();

	if (write)
		ret = uffd_copy(m, idx, 1, m->zero, false);
	else
		ret = zero_install(m, idx);
	phase_add(POOL_PHASE_ZERO, t0);
	if (ret == -EEXIST) { /* raced with nothing we know of: keep it */
		uffd_wake(m, idx, 1);
		ret = 0;
		write = true; /* unknown contents: treat as dirty */
	}
	if (ret) {
		mapping_fail(m, ret, "zero fill");
		fault_fail(m, tid, idx);
		return;
	}
	STAT_ADD(m, zero_fills, 1);
	if (!again)
		ring_push(m, idx);
	m->state[idx] = PG_RESIDENT | (write ? PG_DIRTY | PG_REF : PG_ZERO);
}

static void wp_fault(struct mapping *m, size_t idx, pid_t tid)
{
	int ret;

	if (m->state[idx] & PG_FORK) {
		/* A write to a page kept mapped for a fork under way: it
		 * comes back into the ring (room made as for a fault, which
		 * keeps other pages mapped meanwhile) and goes on below. */
		ret = make_room(m, 1);
		if (ret) {
			fault_fail(m, tid, idx);
			return;
		}
		m->state[idx] =
			(uint8_t)((m->state[idx] & ~PG_FORK) | PG_RESIDENT);
		ring_push(m, idx);
	}
	if (!(m->state[idx] & PG_RESIDENT)) {
		/* Evicted while the writer waited: it faults again as a
		 * missing page. */
		uffd_wake(m, idx, 1);
		return;
	}
	uint64_t t0 = mono_ns();

	STAT_ADD(m, wp_faults, 1);
	if ((m->state[idx] & (PG_REMOTE | PG_DIRTY | PG_ZERO)) == PG_REMOTE)
		m->wr_hits++; /* a fetched page, installed protected */
	/* PG_ZERO goes: the write replaces the zero page with a page of
	 * its own, tracked as dirty from now on. */
	m->state[idx] =
		(uint8_t)((m->state[idx] & ~PG_ZERO) | PG_DIRTY | PG_REF);
	ret = uffd_protect(m, idx, 1, false);
	if (ret) {
		pool_log(LOG_ERR, "paging: unprotect page=%zu err=%s", idx,
			 strerror(-ret));
		uffd_wake(m, idx, 1);
	}
	phase_add(POOL_PHASE_WP, t0);
}

/* Whether some mapping has runs to install ahead (eng.lock held). */
static bool ahead_pending_any(void)
{
	for (struct mapping *m = eng.maps; m; m = m->enext)
		if (ahead_pending(m))
			return true;
	return false;
}

/* One run ahead for the mapping whose turn it is (eng.lock held). */
static void install_ahead_any(void)
{
	static size_t turn;
	size_t i = 0, k = turn++ % (eng.nmaps ? eng.nmaps : 1);

	for (struct mapping *m = eng.maps; m; m = m->enext, i++)
		if (i >= k && ahead_pending(m) && install_ahead(m))
			return;
	for (struct mapping *m = eng.maps; m; m = m->enext)
		if (ahead_pending(m) && install_ahead(m))
			return;
}

/* The mapping that holds address a (eng.lock held), or NULL: a fault
 * left over from a mapping removed meanwhile (its unregistration woke
 * the thread). The last hit first: faults come in runs. */
static struct mapping *engine_find(uintptr_t a)
{
	struct mapping *m = eng.last_hit;

	if (m && a - (uintptr_t)m->base < m->len)
		return m;
	for (m = eng.maps; m; m = m->enext)
		if (a - (uintptr_t)m->base < m->len)
			return eng.last_hit = m;
	return NULL;
}

/*
 * Of a batch of messages, the missing faults of the first 4 KiB mapping
 * that has two or more on pages the region holds (not resident) are
 * served together (fetch_batch()); their messages are then marked done
 * (event 0). The rest is served one by one. eng.lock held.
 */
static void batch_faults(struct uffd_msg *msgs, size_t n)
{
	struct bfault f[MSG_BATCH];
	size_t k = 0, which[MSG_BATCH];
	struct mapping *bm = NULL;

	for (size_t i = 0; i < n; i++) {
		uintptr_t a = (uintptr_t)msgs[i].arg.pagefault.address;
		struct mapping *m;
		size_t idx;
		bool dup = false;

		if (msgs[i].event != UFFD_EVENT_PAGEFAULT ||
		    (msgs[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) ||
		    !(m = engine_find(a)) || m->huge ||
		    __atomic_load_n(&m->failed, __ATOMIC_ACQUIRE) ||
		    (bm && m != bm))
			continue;
		idx = (a - (uintptr_t)m->base) >> m->shift;
		if (idx >= live_pages(m) || !page_is_fetchable(m, idx))
			continue;
		for (size_t j = 0; j < k && !dup; j++)
			dup = f[j].idx == idx;
		if (dup)
			continue; /* the first one's install wakes it */
		bm = m;
		f[k] = (struct bfault){
			.idx = idx,
			.write = msgs[i].arg.pagefault.flags &
				 UFFD_PAGEFAULT_FLAG_WRITE,
			.tid = (pid_t)msgs[i].arg.pagefault.feat.ptid,
		};
		which[k++] = i;
	}
	if (k < 2 || !eng.batch_on)
		return;
	fetch_batch(bm, f, k);
	for (size_t j = 0; j < k; j++)
		msgs[which[j]].event = 0;
}

/*
 * Waits for a fault (or the stop event) as poll(pf, 2, -1) would, but
 * first spins for up to eng.spin_win_ns, polling without sleeping (with
 * sched_yield() between polls: a thread that waits for this CPU, the
 * program's on a busy machine, gets it at once). Why:
 * a fault is two thread wake-ups (the faulting thread wakes pool-uffd,
 * pool-uffd's UFFDIO_COPY wakes it back), and waking a thread that sleeps
 * on another CPU costs an inter-processor interrupt and, on a virtual
 * machine whose idle vCPUs halt, a trip through the hypervisor: about
 * 30 us each on the development VM, where a bare userfaultfd round trip
 * takes ~62 us across CPUs, ~17 us with the handler spinning and ~4 us
 * on one CPU (docs/paging.md, "Waiting for faults"). A spinning pool-uffd
 * saves the first wake-up.
 *
 * The window adapts as cpuidle's haltpoll governor does: a wait that
 * ends with a fault after b ns, b over the window but within the cap,
 * grows the window to 2b (capped): spinning would have caught it; one
 * that slept past the cap halves it (to 0 under 1 us): faults are
 * sparse and spinning only burns the CPU. So a program that faults in
 * bursts gets pool-uffd spinning through each burst, and one that faults
 * now and then costs at most a few windows of CPU. Returns what poll()
 * returns.
 */
static int spin_wait(struct pollfd *pf)
{
	uint64_t t0, b, win = eng.spin_win_ns;
	int ready = 0;

	if (!eng.spin_cap_ns)
		return poll(pf, 2, -1);
	t0 = mono_ns();
	__atomic_add_fetch(&eng.waits, 1, __ATOMIC_RELAXED);
	if (win) {
		uint64_t now = t0;

		do {
			ready = poll(pf, 2, 0);
			if (ready)
				break;
			sched_yield();
			now = mono_ns();
		} while (now - t0 < win);
		__atomic_add_fetch(&eng.spin_ns, (ready ? mono_ns() : now) - t0,
				   __ATOMIC_RELAXED);
		if (ready > 0) {
			__atomic_add_fetch(&eng.spin_hits, 1, __ATOMIC_RELAXED);
			return ready;
		}
		if (ready < 0)
			return ready;
		__atomic_add_fetch(&eng.spin_misses, 1, __ATOMIC_RELAXED);
	}
	ready = poll(pf, 2, -1);
	if (ready <= 0 || pf[1].revents)
		return ready;
	b = mono_ns() - t0;
	if (b <= eng.spin_cap_ns)
		eng.spin_win_ns =
			2 * b < eng.spin_cap_ns ? 2 * b : eng.spin_cap_ns;
	else
		eng.spin_win_ns = win / 2 < 1000 ? 0 : win / 2;
	return ready;
}

static void *uffd_main(void *arg)
{
	struct uffd_msg msgs[MSG_BATCH];
	bool pending = false;

	(void)arg;
	pool_thread_mark_internal();
	pthread_setname_np(pthread_self(), "pool-uffd");
	for (;;) {
		struct pollfd pf[2] = { { .fd = eng.uffd, .events = POLLIN },
					{ .fd = eng.stopfd,
					  .events = POLLIN } };
		ssize_t n;
		int ready;
		uint64_t t = mono_ns();

		/* With runs to install ahead, only look for faults: they
		 * come first, and the runs fill the time between them. */
		ready = pending ? poll(pf, 2, 0) : spin_wait(pf);
		t = phase_add(POOL_PHASE_WAIT, t);
		if (ready < 0) {
			if (errno == EINTR)
				continue;
			pool_log(LOG_ERR, "paging: poll err=%s",
				 strerror(errno));
			break;
		}
		if (pf[1].revents)
			break;
		pthread_mutex_lock(&eng.lock);
		t = phase_add(POOL_PHASE_LOCK, t);
		if (ready == 0) {
			install_ahead_any();
			phase_add(POOL_PHASE_AHEAD, t);
			pending = ahead_pending_any();
			pthread_mutex_unlock(&eng.lock);
			continue;
		}
		n = read(eng.uffd, msgs, sizeof(msgs));
		if (n < 0) {
			pending = ahead_pending_any();
			pthread_mutex_unlock(&eng.lock);
			if (errno == EAGAIN || errno == EINTR)
				continue;
			pool_log(LOG_ERR, "paging: read uffd err=%s",
				 strerror(errno));
			break;
		}
		t = phase_add(POOL_PHASE_READ, t);
		n /= (ssize_t)sizeof(msgs[0]);
		batch_faults(msgs, (size_t)n);
		for (size_t i = 0; i < (size_t)n; i++) {
			const struct uffd_msg *msg = &msgs[i];
			uintptr_t a = (uintptr_t)msg->arg.pagefault.address;
			struct mapping *m;
			size_t idx;

			if (msg->event != UFFD_EVENT_PAGEFAULT ||
			    !(m = engine_find(a)))
				continue;
			idx = (a - (uintptr_t)m->base) >> m->shift;
			if (msg->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP)
				wp_fault(m, idx,
					 (pid_t)msg->arg.pagefault.feat.ptid);
			else
				missing_fault(
					m, idx,
					msg->arg.pagefault.flags &
						UFFD_PAGEFAULT_FLAG_WRITE,
					(pid_t)msg->arg.pagefault.feat.ptid);
		}
		phase_add(POOL_PHASE_SERVE, t);
		pending = ahead_pending_any();
		pthread_mutex_unlock(&eng.lock);
	}
	return NULL;
}

/*
 * The first transfer of a session is slow: libfabric's tcp;ofi_rxm
 * connects to memd then and grows a 17 MB buffer pool (allocated and
 * cleared), 0.2-0.6 s on the development VM. Without this it lands on the
 * first fault that needs the pool, usually the first eviction's
 * write-back, with the program stopped. pool_map() of a session that has
 * made no transfer yet starts this thread, which reads one byte of the
 * region (harmless: nothing is written) while the program starts on
 * pages that need no network (zero fills). Like pool-uffd it is an engine
 * thread: what libfabric allocates in it must not be pooled memory.
 */
static void *warm_main(void *arg)
{
	struct mapping *m = arg;
	int ret;

	pool_thread_mark_internal();
	pthread_setname_np(pthread_self(), "pool-warm");
	ret = pool_read(m->p, m->segs[0], 0, m->warm_buf, 1);
	pool_log(LOG_DEBUG, "paging: warm-up map=%p err=%d", (void *)m->base,
		 ret);
	return NULL;
}

/*
 * A session whose fabric is set up on demand (the preload shim:
 * pool_set_fabric_background()) has none yet: a program that stays
 * within its budget never needs one, and never pays for it. Once half
 * the budget (the process's, else the mapping's) is resident, evictions
 * are near: pool_fabric_prepare() has the fabric set up in the
 * background from then on. pool-uffd, eng.lock held; the session's lock
 * is only tried, so this never waits (the next install tries again).
 */
static void warm_deferred_check(struct mapping *m)
{
	/* a mapping its own budget holds whole never evicts: no fabric */
	size_t npages = (m->size + m->psize - 1) >> m->shift;
	bool half = eng.budget != SIZE_MAX
			    ? eng.resident >= eng.budget / 2
			    : npages > m->max_res && m->nres >= m->max_res / 2;

	if (half && pool_fabric_prepare(m->p)) {
		m->warm_deferred = false;
		STAT_ADD(m, warmups, 1);
	}
}

/* Starts warm_main() when the session has not moved a byte yet and
 * LIBPOOL_PAGING_WARMUP is not 0; on a session whose fabric is not set
 * up yet, defers it (warm_deferred_check()). Called with all signals
 * blocked. */
static void warm_start(struct mapping *m)
{
	const char *env = getenv("LIBPOOL_PAGING_WARMUP");
	struct pool_stats ps;

	if ((env && !strcmp(env, "0")) || m->size == 0)
		return;
	if (pool_fabric_is_pending(m->p)) {
		m->warm_deferred = true;
		return;
	}
	if (pool_get_stats(m->p, &ps) || ps.ops || ps.bytes_read ||
	    ps.bytes_written)
		return;
	m->warming = pthread_create(&m->warm_thr, NULL, warm_main, m) == 0;
	if (m->warming)
		STAT_ADD(m, warmups, 1);
}

/* ------------------------------------------------------------------ */
/* fork                                                                 */

/*
 * A fork() child gets a copy of the range without our userfaultfd (we do
 * not ask for UFFD_FEATURE_EVENT_FORK: serving the child would need a
 * snapshot of the region, which the parent goes on writing). Pages
 * mapped at the fork are the child's private copy, right as they were; a
 * missing page the region never held reads as zero, which is its value.
 * A missing page whose data only the region holds would read as zero
 * too, silently wrong, and the child cannot fetch it. So before the fork
 * the forking thread fetches every such page (fork_fetch()) and maps it,
 * protected, outside the ring (PG_FORK), and from then until the fork
 * returns evictions leave their victims mapped too (eng.fork_hold): the
 * child finds every page. In the parent the pages come out again after
 * the fork (fork_release()); the child keeps them, as any child keeps
 * the pages it shares with its parent. That costs a read of every
 * evicted page per fork() and, while the child lives, the memory
 * (docs/paging.md, "fork()").
 *
 * Not fetched: more than the cap (LIBPOOL_FORK_FETCH, default half of
 * MemAvailable), LIBPOOL_FORK_FETCH=0, a failed mapping, huge pages.
 * There the child's missing pages that the region holds are made
 * PROT_NONE (fork_child_fence()), and the first touch of one prints a
 * line naming the page and why before the program's SIGSEGV
 * (fence_segv()), never wrong bytes.
 */

/* The most bytes fork_fetch() brings in: LIBPOOL_FORK_FETCH ("0": none),
 * else half of MemAvailable; *why says where the cap came from. */
static size_t fork_cap(const char **why)
{
	const char *env = getenv("LIBPOOL_FORK_FETCH");
	char buf[4096];
	const char *v;
	ssize_t n = -1;
	int fd;

	if (env && *env) {
		*why = "over LIBPOOL_FORK_FETCH";
		if (!strcmp(env, "0"))
			return 0;
		if (parse_size(env))
			return parse_size(env);
		pool_log(LOG_ERR,
			 "paging: LIBPOOL_FORK_FETCH=%s is not a size; using "
			 "half of MemAvailable",
			 env);
	}
	*why = "over half of MemAvailable (LIBPOOL_FORK_FETCH)";
	fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
	}
	if (n <= 0)
		return SIZE_MAX; /* unknown: fetch */
	buf[n] = '\0';
	v = strstr(buf, "MemAvailable:");
	if (!v)
		return SIZE_MAX;
	return (size_t)strtoull(v + strlen("MemAvailable:"), NULL, 10) * 1024 /
	       2;
}

/* Whether m's pages are fetched before a fork. */
static bool fork_fetches(const struct mapping *m)
{
	return !m->huge && !__atomic_load_n(&m->failed, __ATOMIC_ACQUIRE);
}

/*
 * pthread_atfork prepare, reg_lock held: maps every page whose data only
 * the region holds, if they fit fork_cap(), and holds evictions until
 * fork_release(). The forking thread reads as pool-uffd would (an engine
 * thread meanwhile: what libfabric allocates stays in libc), one run at a
 * time under eng.lock; between runs pool-uffd serves faults. No page
 * leaves once held, so none is missing at the fork. A read that fails
 * fails the mapping, as a fault's would: the child finds the rest fenced.
 * eng.life is held throughout: a pool_unmap() that took its mapping off
 * reg_lock's list before the fork waits in engine_detach() until the
 * walk of eng.maps is done (it frees the mapping after).
 */
static void fork_fetch(void)
{
	size_t need = 0, cap;
	bool was;
	const char *why = NULL;
	uint64_t t0 = mono_ns(), nfetched = 0;

	pthread_mutex_lock(&eng.life);
	pthread_mutex_lock(&eng.lock);
	eng.fork_why = NULL;
	for (struct mapping *m = eng.maps; m; m = m->enext) {
		size_t live = live_pages(m);

		if (!fork_fetches(m))
			continue;
		for (size_t i = 0; i < live; i++)
			if (page_is_fetchable(m, i))
				need++;
	}
	if (!need) {
		pthread_mutex_unlock(&eng.lock);
		pthread_mutex_unlock(&eng.life);
		return;
	}
	cap = fork_cap(&why);
	if (need > cap / PAGE) {
		eng.fork_why = why;
		pthread_mutex_unlock(&eng.lock);
		pthread_mutex_unlock(&eng.life);
		pool_log(LOG_INFO,
			 "paging: fork: %zu evicted pages not fetched, %s",
			 need, why);
		return;
	}
	eng.fork_hold = true;
	was = pool_thread_set_internal(true);
	for (struct mapping *m = eng.maps; m; m = m->enext) {
		size_t live = live_pages(m), i = 0;
		size_t most =
			m->ahead_run > m->ra_max ? m->ahead_run : m->ra_max;

		while (fork_fetches(m) && i < live) {
			size_t n = 0, lo;
			uint64_t off;
			struct pool_region *r;
			int ret;

			while (i < live && !page_is_fetchable(m, i))
				i++;
			lo = i;
			while (n < most && i < live && seg_same(m, lo, i) &&
			       page_is_fetchable(m, i)) {
				n++;
				i++;
			}
			if (!n)
				break;
			r = seg_at(m, lo, &off);
			ret = pool_read(m->p, r, off, m->stage_in,
					run_bytes(m, lo, n));
			if (ret) {
				mapping_fail(m, ret, "fetch");
				break;
			}
			if (run_bytes(m, lo, n) < n * m->psize)
				memset(m->stage_in + run_bytes(m, lo, n), 0,
				       n * m->psize - run_bytes(m, lo, n));
			ret = uffd_copy(m, lo, n, m->stage_in, true);
			if (ret) {
				mapping_fail(m, ret, "UFFDIO_COPY");
				break;
			}
			for (size_t j = lo; j < lo + n; j++)
				m->state[j] |= PG_FORK;
			STAT_ADD(m, fork_fetched, n);
			nfetched += n;
			/* let pool-uffd serve what waits meanwhile */
			pthread_mutex_unlock(&eng.lock);
			pthread_mutex_lock(&eng.lock);
		}
	}
	pool_thread_set_internal(was);
	pthread_mutex_unlock(&eng.lock);
	pthread_mutex_unlock(&eng.life);
	pool_log(LOG_INFO, "paging: fork: fetched %llu pages in %llu us",
		 (unsigned long long)nfetched,
		 (unsigned long long)((mono_ns() - t0) / 1000));
}

/* pthread_atfork parent: ends the hold, drops the pages kept mapped for
 * the child (all clean: the region or zero holds each). */
static void fork_release(void)
{
	pthread_mutex_lock(&eng.lock);
	if (!eng.fork_hold) {
		pthread_mutex_unlock(&eng.lock);
		return;
	}
	eng.fork_hold = false;
	for (struct mapping *m = eng.maps; m; m = m->enext) {
		size_t live = live_pages(m), v[WB_BATCH], k = 0;

		for (size_t i = 0; i <= live; i++) {
			if (i < live && (m->state[i] & PG_FORK)) {
				m->state[i] &= (uint8_t)~PG_FORK;
				v[k++] = i;
			}
			if (k && (k == WB_BATCH || i == live)) {
				drop_pages(m, v, k);
				k = 0;
			}
		}
	}
	pthread_mutex_unlock(&eng.lock);
}

static void fence_range(struct mapping *m, size_t idx, size_t n)
{
	if (mprotect(page_addr(m, idx), n * m->psize, PROT_NONE) == 0)
		return;
	/* Out of VMAs (vm.max_map_count): fence everything instead. */
	if (mprotect(m->base, m->len, PROT_NONE))
		pool_log_emit(LOG_ERR,
			      "paging: fork child cannot fence map=%p err=%s",
			      (void *)m->base, strerror(errno));
}

/* Fences the child's missing pages that only the region holds; returns
 * how many. A page mapped at the fork is the parent's as it was then,
 * whatever the state byte says (a run in flight). */
static size_t fork_child_fence(struct mapping *m)
{
	unsigned char vec[1024]; /* one per 4 KiB */
	size_t per = m->psize / PAGE, chunk = sizeof(vec) / per;
	size_t run = 0, start = 0, fenced = 0;

	m->inherited = true;
	m->uffd = -1;
	size_t live = live_pages(m);

	for (size_t c = 0; c < live; c += chunk) {
		size_t n = live - c < chunk ? live - c : chunk;

		if (mincore(page_addr(m, c), n * m->psize, vec))
			memset(vec, 0, n * per); /* unknown: fence remote */
		for (size_t i = 0; i < n; i++) {
			bool fence = (m->state[c + i] & PG_REMOTE) &&
				     !(vec[i * per] & 1);

			if (fence) {
				if (!run)
					start = c + i;
				run++;
				fenced++;
			} else if (run) {
				fence_range(m, start, run);
				run = 0;
			}
		}
	}
	if (run)
		fence_range(m, start, run);
	return fenced;
}

static struct sigaction fence_old;

/*
 * A fork child's SIGSEGV while it has fenced pages: on a fenced page,
 * one line that says which and why; then the handler that was there
 * before (the program's, or the default: death by SIGSEGV) takes the
 * signal, as the faulting access runs again.
 */
static void fence_segv(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	int saved = errno;

	(void)sig;
	(void)uc;
	for (struct mapping *m = reg_head; m; m = m->next) {
		if (!m->fenced || si->si_code != SEGV_ACCERR ||
		    a < (uintptr_t)m->base || a >= (uintptr_t)m->base + m->len)
			continue;
		pool_log_emit(LOG_ERR,
			      "paging: fork child touched page %zu of map=%p, "
			      "evicted to the pool before the fork and not "
			      "fetched for the child (%s); SIGSEGV",
			      (size_t)((a - (uintptr_t)m->base) >> m->shift),
			      (void *)m->base, m->fenced);
		break;
	}
	sigaction(SIGSEGV, &fence_old, NULL);
	errno = saved;
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&reg_lock);
	fork_fetch();
}

static void atfork_parent(void)
{
	fork_release();
	pthread_mutex_unlock(&reg_lock);
}

static void atfork_child(void)
{
	const char *why = eng.fork_why;
	bool any = false;

	/* The engine is the parent's: its descriptors go (writing stopfd
	 * would stop the parent's thread), its locks start afresh (pool-uffd
	 * may have held eng.lock at the fork), and a pool_map() of the
	 * child's starts an engine of its own. */
	if (eng.running) {
		close(eng.stopfd);
		close(eng.uffd);
		if (eng.pidfd >= 0)
			close(eng.pidfd);
	}
	eng.uffd = eng.stopfd = eng.pidfd = -1;
	eng.running = false;
	eng.maps = eng.cursor = eng.last_hit = NULL;
	eng.nmaps = 0;
	eng.resident = 0;
	eng.fork_hold = false;
	eng.fork_why = NULL;
	pthread_mutex_init(&eng.lock, NULL);
	pthread_mutex_init(&eng.life, NULL);
	for (struct mapping *m = reg_head; m; m = m->next) {
		const char *mwhy = m->huge ? "2 MiB pages are not fetched"
				   : m->failed
					   ? "the pool failed before the fork"
				   : why ? why
					 : "a page in flight at the fork";

		if (m->inherited || !fork_child_fence(m))
			continue;
		m->fenced = mwhy;
		any = true;
	}
	if (any) {
		struct sigaction sa = { .sa_sigaction = fence_segv,
					.sa_flags = SA_SIGINFO };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGSEGV, &sa, &fence_old);
	}
	pthread_mutex_unlock(&reg_lock);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ------------------------------------------------------------------ */
/* public                                                               */

/* "64M", "1G", "65536": bytes, or 0 when malformed. */
static size_t parse_size(const char *s)
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

int pool_map(struct pool *p, struct pool_region *r, size_t local_bytes,
	     unsigned flags, void **addr)
{
	const char *env;
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
	if (!local_bytes) {
		env = getenv("LIBPOOL_LOCAL_BYTES");
		local_bytes =
			env && *env ? parse_size(env) : DEFAULT_LOCAL_BYTES;
	}
	if (local_bytes < MIN_LOCAL_BYTES)
		return -EINVAL;
	pthread_once(&atfork_once, atfork_register);
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
	 * (uffd_copy() handles a pool that runs short). */
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
	ret = engine_attach(m);
	if (ret)
		goto fail;
	if (!m->growable) { /* growable: at the first segment */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		warm_start(m);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	pthread_mutex_lock(&reg_lock);
	m->next = reg_head;
	reg_head = m;
	pthread_mutex_unlock(&reg_lock);
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

		if (!page_needs_writeback(m, idx))
			continue;
		page_copy_out(m->stage_out + nw * m->psize, page_addr(m, idx),
			      m->psize);
		wb[nw++] = idx;
		if (nw == m->wb_max) {
			r = write_back(m, wb, nw);
			if (r && !ret)
				ret = r;
			nw = 0;
		}
	}
	if (nw) {
		r = write_back(m, wb, nw);
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
	pthread_mutex_lock(&reg_lock);
	for (pp = &reg_head; *pp; pp = &(*pp)->next)
		if ((*pp)->base == addr && (*pp)->p == p)
			break;
	m = *pp;
	if (m)
		*pp = m->next;
	pthread_mutex_unlock(&reg_lock);
	if (!m || !p)
		return -EINVAL;
	if (m->inherited) {
		/* A fork child's copy: no engine serves it, and the session
		 * (the parent's) is not ours to write to. */
		mapping_free(m);
		return flags == POOL_UNMAP_FLUSH ? -ENOTCONN : 0;
	}

	engine_detach(m);
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

/* The live mapping whose range starts at addr, or NULL. reg_lock held. */
static struct mapping *mapping_at_locked(const void *addr)
{
	struct mapping *m;

	for (m = reg_head; m && m->base != addr; m = m->next)
		;
	return m;
}

int pool_map_reserve(struct pool *p, size_t max_bytes, size_t seg_bytes,
		     size_t local_bytes, void **addr)
{
	const char *env;

	if (!addr)
		return -EINVAL;
	*addr = NULL;
	if (!p || seg_bytes < PAGE || (seg_bytes & (seg_bytes - 1)) ||
	    max_bytes < seg_bytes)
		return -EINVAL;
	if (!local_bytes) {
		env = getenv("LIBPOOL_LOCAL_BYTES");
		local_bytes =
			env && *env ? parse_size(env) : DEFAULT_LOCAL_BYTES;
	}
	if (local_bytes < MIN_LOCAL_BYTES)
		return -EINVAL;
	pthread_once(&atfork_once, atfork_register);
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
	pthread_mutex_lock(&reg_lock);
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
		warm_start(m);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
out:
	pthread_mutex_unlock(&reg_lock);
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

	pthread_mutex_lock(&reg_lock);
	m = mapping_at_locked(addr);
	pthread_mutex_unlock(&reg_lock);
	if (!m || m->inherited || !len || s < (uintptr_t)m->base ||
	    ((s - (uintptr_t)m->base) & (m->psize - 1)) ||
	    (len & (m->psize - 1)) || len > m->len - (s - (uintptr_t)m->base))
		return -EINVAL;
	lo = (s - (uintptr_t)m->base) >> m->shift;
	hi = lo + (len >> m->shift);
	/* pool-uffd is between batches while we hold eng.lock: nothing of
	 * the range is being fetched, installed, protected or dropped. */
	pthread_mutex_lock(&eng.lock);
	gone = ring_remove_range(m, lo, hi);
	if (madvise(start, len, MADV_DONTNEED))
		ret = -errno;
	for (size_t i = lo; i < hi; i++) {
		m->state[i] = 0; /* reads as zero; the region's copy is moot */
		m->evicted[i] = 0;
		m->credit[i] = 0;
	}
	eng.resident -= gone * m->psize;
	__atomic_store_n(&m->st.resident, m->nres, __ATOMIC_RELAXED);
	STAT_ADD(m, discarded, hi - lo);
	pthread_mutex_unlock(&eng.lock);
	return ret;
}

size_t pool_map_grown_bytes(const void *addr)
{
	struct mapping *m;
	size_t n = 0;

	pthread_mutex_lock(&reg_lock);
	m = mapping_at_locked(addr);
	if (m)
		n = live_pages(m) << m->shift;
	pthread_mutex_unlock(&reg_lock);
	return n;
}

void pool_paging_get_engine_stats(struct pool_paging_engine_stats *st)
{
	st->spin_cap_ns = __atomic_load_n(&eng.spin_cap_ns, __ATOMIC_RELAXED);
	st->waits = __atomic_load_n(&eng.waits, __ATOMIC_RELAXED);
	st->spin_hits = __atomic_load_n(&eng.spin_hits, __ATOMIC_RELAXED);
	st->spin_misses = __atomic_load_n(&eng.spin_misses, __ATOMIC_RELAXED);
	st->spin_ns = __atomic_load_n(&eng.spin_ns, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < POOL_PHASE_N; i++) {
		st->phase_ns[i] =
			__atomic_load_n(&eng.ph_ns[i], __ATOMIC_RELAXED);
		st->phase_n[i] =
			__atomic_load_n(&eng.ph_n[i], __ATOMIC_RELAXED);
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
	};

	return phase < POOL_PHASE_N ? names[phase] : "?";
}

int pool_paging_set_process_budget(size_t bytes)
{
	if (bytes < MIN_LOCAL_BYTES)
		return -EINVAL;
	pthread_mutex_lock(&eng.life);
	pthread_mutex_lock(&eng.lock);
	eng.budget_set = bytes;
	if (eng.running)
		eng.budget = bytes; /* evictions catch up at the next room */
	pthread_mutex_unlock(&eng.lock);
	pthread_mutex_unlock(&eng.life);
	return 0;
}

int pool_map_get_stats(const void *addr, struct pool_map_stats *st)
{
	const uint8_t *a = addr;
	struct mapping *m;

	if (!st)
		return -EINVAL;
	pthread_mutex_lock(&reg_lock);
	for (m = reg_head; m; m = m->next)
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
	pthread_mutex_unlock(&reg_lock);
	return m ? 0 : -EINVAL;
}
