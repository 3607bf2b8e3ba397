// SPDX-License-Identifier: MIT
/*
 * libpool/paging_int.h - what the files of transparent paging share: the
 * engine (struct pg_engine), a mapping, the page states (PG_*), and the
 * functions one file calls in another. Private to libpool/paging*.c;
 * tidepool/pool_map.h is the API. One concern a file:
 *
 * libpool/paging.c            pool_map(), pool_unmap(), growable mappings,
 *                             discard, huge pages, the public stats calls
 * libpool/paging_engine.c     the engine thread (pool-uffd): start, stop,
 *                             attach; fault service, spinning, warming
 * libpool/paging_uffd.c       the userfaultfd calls: copy, zero, wake,
 *                             write-protect, open, register
 * libpool/paging_evict.c      replacement: the ring, CLOCK/FIFO, refault
 *                             credit, behind-the-stream victims, budgets
 * libpool/paging_writeback.c  write-back of dirty pages, dropping pages
 * libpool/paging_stream.c     fetching: read-ahead streams, batched faults,
 *                             install-ahead, zero-fill streams
 * libpool/paging_fork.c       fork(): the parent's fetch, the child's fence
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#ifndef TP_LIBPOOL_PAGING_INT_H
#define TP_LIBPOOL_PAGING_INT_H

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
		1u
		<< 3, /* zero when mapped: see pg_zero_install(), pg_zero_fill() */
	PG_REF = 1u << 4,    /* used since the clock hand last passed: see
			   * clock_select() (4 KiB pages) */
	PG_CLAIM = 1u << 5,  /* in a run of pg_fetch_batch() being read */
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
	struct mapping *next; /* pg_reg_lock */
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
	int uffd;	   /* the engine's (pg_eng.uffd): not this mapping's */
	bool user_only;
	struct mapping *enext; /* pg_eng.maps (pg_eng.lock) */

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
	struct zstream zstreams[NZSTREAM]; /* see pg_zero_fill() */
	uint64_t zstream_clock;
	unsigned zero_max; /* longest zero fill run, pages */
	int failed; /* read by others after pool-uffd stopped, or atomic */
	bool fail_logged;
	const char
		*fail_why; /* pg_mapping_fail()'s step, for pg_fault_fail() */
	bool inherited; /* a fork() child's copy: no thread, see fork_child */
	const char *fenced; /* in the child: why pages are fenced, or NULL */
	bool ahead_on; /* install-ahead (LIBPOOL_PAGING_AHEAD, default on) */
	bool warming;  /* warm_thr runs: see warm_main() */
	/* the session's fabric is not set up yet: ask for it once half
	 * the budget is resident (pg_warm_deferred_check()) */
	bool warm_deferred;
	pthread_t warm_thr;
	uint8_t warm_buf[64]; /* its read's buffer, outside the range */

	struct pool_map_stats st; /* atomics */
};

/* Every live mapping, for pool_unmap() and pool_map_get_stats(). */
extern pthread_mutex_t pg_reg_lock;
extern struct mapping *pg_reg_head;

/*
 * The process's paging engine: one userfaultfd and one thread, pool-uffd,
 * serve every mapping. pool-uffd holds pg_eng.lock while it serves a batch of
 * faults or installs a run ahead; pool_map() and pool_unmap() take it to
 * add or remove a mapping, so once a mapping is out of pg_eng.maps the
 * engine never touches it again. The thread starts with the first mapping
 * and stops with the last (pg_eng.life serialises the two).
 *
 * Budgets: each mapping keeps at most max_res pages resident, and all of
 * them together at most pg_eng.budget bytes (LIBPOOL_LOCAL_BYTES, or
 * pool_paging_set_process_budget(); SIZE_MAX: none). pg_make_room() evicts
 * from the mapping that needs room first, then, for the process budget,
 * a batch at a time from each mapping in turn (pg_eng.cursor), each chosen
 * by that mapping's own CLOCK.
 */
struct pg_engine {
	pthread_mutex_t lock, life;
	struct mapping *maps, *cursor, *last_hit;
	size_t nmaps;
	int uffd, stopfd, pidfd; /* pidfd: process_madvise(); -1: madvise */
	bool user_only, huge_ok, running;
	bool batch_on; /* LIBPOOL_PAGING_BATCH (default on): pg_fetch_batch() */
	bool clock_on; /* LIBPOOL_PAGING_CLOCK not 0; off: FIFO */
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
	/* LIBPOOL_PAGING_DIRECT (default on): fetched runs the same-host
	 * mapping holds are installed from it (fetch_direct()); counted
	 * in direct_pages (atomic) */
	bool direct_on;
	uint64_t direct_pages;
	/* LIBPOOL_PAGING_LATE_DROP (default on): the victims of the room
	 * a fault's fetch makes (4 KiB pages) are dropped after its
	 * thread is woken, before pool-uffd serves anything else
	 * (pg_drop_late_flush()). drop_defer: set by pg_fetch() around
	 * its pg_make_room(); the batch held back, one at most. */
	bool late_drop_on, drop_defer;
	struct mapping *drop_m;
	size_t drop_n;
	size_t drop_v[WB_BATCH];
	pthread_t thr;
	size_t budget;	   /* bytes, all mappings; SIZE_MAX: none */
	size_t budget_set; /* pool_paging_set_process_budget(); 0: env */
	size_t resident;   /* bytes resident, all mappings (pg_eng.lock) */
	/* Spinning for the next fault (spin_wait()): the cap
	 * (LIBPOOL_PAGING_SPIN_US; 0: never), the current window (pool-uffd
	 * only) and counters (atomics, pool_paging_get_engine_stats()). */
	uint64_t spin_cap_ns, spin_win_ns;
	uint64_t spin_hits, spin_misses, spin_ns, waits;
	/* Time per step (phase_add(); atomics, read by
	 * pool_paging_get_engine_stats()). */
	uint64_t ph_ns[POOL_PHASE_N], ph_n[POOL_PHASE_N];
};

/* The engine: one a process (paging_engine.c). */
extern struct pg_engine pg_eng;

#define STAT_ADD(m, f, n) __atomic_add_fetch(&(m)->st.f, (n), __ATOMIC_RELAXED)

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Adds the time since t0 to step ph (a vDSO clock read, ~30 ns here, a
 * few per fault); returns now, the start of the next step. */
static inline uint64_t phase_add(unsigned ph, uint64_t t0)
{
	uint64_t now = mono_ns();

	__atomic_add_fetch(&pg_eng.ph_ns[ph], now - t0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&pg_eng.ph_n[ph], 1, __ATOMIC_RELAXED);
	return now;
}

static inline size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

static inline uint8_t *page_addr(const struct mapping *m, size_t idx)
{
	return m->base + (idx << m->shift);
}

/* The region that backs page idx, and the page's offset in it. */
static inline struct pool_region *seg_at(const struct mapping *m, size_t idx,
					 uint64_t *off)
{
	*off = (uint64_t)(idx & m->seg_mask) << m->shift;
	return m->segs[idx >> m->seg_pshift];
}

/* Whether pages a and b are backed by the same region: one RMA moves a
 * run of pages only within one region. */
static inline bool seg_same(const struct mapping *m, size_t a, size_t b)
{
	return (a >> m->seg_pshift) == (b >> m->seg_pshift);
}

/* Pages that may be touched: all of a pool_map(), the appended segments
 * of a growable mapping. */
static inline size_t live_pages(const struct mapping *m)
{
	size_t n;

	if (!m->growable)
		return m->npages;
	n = __atomic_load_n(&m->nsegs, __ATOMIC_ACQUIRE) << m->seg_pshift;
	return n < m->npages ? n : m->npages;
}

/* A missing fault read from the userfaultfd, for pg_fetch_batch(). */
struct bfault {
	size_t idx;
	bool write;
	pid_t tid;
};

/* Longest gap between two dirty victims that one write-protect may span. */
#define WP_GAP_MAX 64u

/* paging_uffd.c */
__attribute__((no_sanitize("thread"))) void
pg_page_copy_out(void *dst, const void *src, size_t bytes);
__attribute__((no_sanitize("thread"))) bool pg_page_is_zero(const void *src,
							    size_t bytes);
int pg_uffd_wake(struct mapping *m, size_t idx, size_t n);
int pg_uffd_protect(struct mapping *m, size_t idx, size_t n, bool wp);
int pg_uffd_copy(struct mapping *m, size_t idx, size_t n, const uint8_t *src,
		 bool wp);
int pg_uffd_copy_mode(struct mapping *m, size_t idx, size_t n,
		      const uint8_t *src, bool wp, uint64_t mode);
int pg_zero_install(struct mapping *m, size_t idx);
int pg_engine_open_uffd(void);
int pg_uffd_register(struct mapping *m);

/* paging_engine.c */
int pg_engine_attach(struct mapping *m);
void pg_engine_detach(struct mapping *m);
/* Closes the running engine's descriptors (its thread joined, or the
 * parent's after a fork) and marks it stopped. */
void pg_engine_forget(void);
void pg_fault_fail(struct mapping *m, pid_t tid, size_t idx);
void pg_mapping_fail(struct mapping *m, int err, const char *why);
void pg_warm_deferred_check(struct mapping *m);
void pg_warm_start(struct mapping *m);

/* paging_evict.c */
void pg_ring_push(struct mapping *m, size_t idx);
bool pg_page_refaulted(const struct mapping *m, size_t idx);
uint8_t pg_page_credit(const struct mapping *m, size_t idx);
int pg_evict(struct mapping *m, size_t n);
void pg_behind_set(struct mapping *m, size_t at, int dir, bool established);
size_t pg_res_cap(const struct mapping *m);
int pg_make_room(struct mapping *m, size_t need);

/* paging_writeback.c */
bool pg_page_needs_writeback(const struct mapping *m, size_t idx);
int pg_write_back(struct mapping *m, const size_t *idx, size_t n);
void pg_sort_pages(size_t *v, size_t n);
int pg_protect_dirty(struct mapping *m, const size_t *v, size_t n);
void pg_drop_pages(struct mapping *m, const size_t *v, size_t n);
void pg_drop_late(struct mapping *m, const size_t *v, size_t n);
void pg_drop_late_flush(void);

/* paging_stream.c */
bool pg_page_is_present(struct mapping *m, size_t idx);
bool pg_page_is_fetchable(const struct mapping *m, size_t idx);
size_t pg_run_bytes(const struct mapping *m, size_t lo, size_t n);
int pg_fetch(struct mapping *m, size_t idx, bool write, bool again);
void pg_fetch_batch(struct mapping *m, const struct bfault *f, size_t k);
bool pg_install_ahead(struct mapping *m);
bool pg_ahead_pending(const struct mapping *m);
int pg_zero_fill(struct mapping *m, size_t idx);

/* paging_fork.c */
void pg_atfork_register(void);

/* paging.c */
size_t pg_parse_size(const char *s);

#endif
