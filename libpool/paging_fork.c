// SPDX-License-Identifier: MIT
/*
 * libpool/paging_fork.c - transparent paging: fork(): the parent's fetch, the child's fence.
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#include "libpool/paging_int.h"

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
 * returns evictions leave their victims mapped too (pg_eng.fork_hold): the
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
		if (pg_parse_size(env))
			return pg_parse_size(env);
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
 * pthread_atfork prepare, pg_reg_lock held: maps every page whose data only
 * the region holds, if they fit fork_cap(), and holds evictions until
 * fork_release(). The forking thread reads as pool-uffd would (an engine
 * thread meanwhile: what libfabric allocates stays in libc), one run at a
 * time under pg_eng.lock; between runs pool-uffd serves faults. No page
 * leaves once held, so none is missing at the fork. A read that fails
 * fails the mapping, as a fault's would: the child finds the rest fenced.
 * pg_eng.life is held throughout: a pool_unmap() that took its mapping off
 * pg_reg_lock's list before the fork waits in pg_engine_detach() until the
 * walk of pg_eng.maps is done (it frees the mapping after).
 */
static void fork_fetch(void)
{
	size_t need = 0, cap;
	bool was;
	const char *why = NULL;
	uint64_t t0 = mono_ns(), nfetched = 0;

	pthread_mutex_lock(&pg_eng.life);
	pthread_mutex_lock(&pg_eng.lock);
	pg_eng.fork_why = NULL;
	for (struct mapping *m = pg_eng.maps; m; m = m->enext) {
		size_t live = live_pages(m);

		if (!fork_fetches(m))
			continue;
		for (size_t i = 0; i < live; i++)
			if (pg_page_is_fetchable(m, i))
				need++;
	}
	if (!need) {
		pthread_mutex_unlock(&pg_eng.lock);
		pthread_mutex_unlock(&pg_eng.life);
		return;
	}
	cap = fork_cap(&why);
	if (need > cap / PAGE) {
		pg_eng.fork_why = why;
		pthread_mutex_unlock(&pg_eng.lock);
		pthread_mutex_unlock(&pg_eng.life);
		pool_log(LOG_INFO,
			 "paging: fork: %zu evicted pages not fetched, %s",
			 need, why);
		return;
	}
	pg_eng.fork_hold = true;
	was = pool_thread_set_internal(true);
	for (struct mapping *m = pg_eng.maps; m; m = m->enext) {
		size_t live = live_pages(m), i = 0;
		size_t most =
			m->ahead_run > m->ra_max ? m->ahead_run : m->ra_max;

		while (fork_fetches(m) && i < live) {
			size_t n = 0, lo;
			uint64_t off;
			struct pool_region *r;
			int ret;

			while (i < live && !pg_page_is_fetchable(m, i))
				i++;
			lo = i;
			while (n < most && i < live && seg_same(m, lo, i) &&
			       pg_page_is_fetchable(m, i)) {
				n++;
				i++;
			}
			if (!n)
				break;
			r = seg_at(m, lo, &off);
			ret = pool_read(m->p, r, off, m->stage_in,
					pg_run_bytes(m, lo, n));
			if (ret) {
				pg_mapping_fail(m, ret, "fetch");
				break;
			}
			if (pg_run_bytes(m, lo, n) < n * m->psize)
				memset(m->stage_in + pg_run_bytes(m, lo, n), 0,
				       n * m->psize - pg_run_bytes(m, lo, n));
			ret = pg_uffd_copy(m, lo, n, m->stage_in, true);
			if (ret) {
				pg_mapping_fail(m, ret, "UFFDIO_COPY");
				break;
			}
			for (size_t j = lo; j < lo + n; j++)
				m->state[j] |= PG_FORK;
			STAT_ADD(m, fork_fetched, n);
			nfetched += n;
			/* let pool-uffd serve what waits meanwhile */
			pthread_mutex_unlock(&pg_eng.lock);
			pthread_mutex_lock(&pg_eng.lock);
		}
	}
	pool_thread_set_internal(was);
	pthread_mutex_unlock(&pg_eng.lock);
	pthread_mutex_unlock(&pg_eng.life);
	pool_log(LOG_INFO, "paging: fork: fetched %llu pages in %llu us",
		 (unsigned long long)nfetched,
		 (unsigned long long)((mono_ns() - t0) / 1000));
}

/* pthread_atfork parent: ends the hold, drops the pages kept mapped for
 * the child (all clean: the region or zero holds each). */
static void fork_release(void)
{
	pthread_mutex_lock(&pg_eng.lock);
	if (!pg_eng.fork_hold) {
		pthread_mutex_unlock(&pg_eng.lock);
		return;
	}
	pg_eng.fork_hold = false;
	for (struct mapping *m = pg_eng.maps; m; m = m->enext) {
		size_t live = live_pages(m), v[WB_BATCH], k = 0;

		for (size_t i = 0; i <= live; i++) {
			if (i < live && (m->state[i] & PG_FORK)) {
				m->state[i] &= (uint8_t)~PG_FORK;
				v[k++] = i;
			}
			if (k && (k == WB_BATCH || i == live)) {
				pg_drop_pages(m, v, k);
				k = 0;
			}
		}
	}
	pthread_mutex_unlock(&pg_eng.lock);
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
	for (struct mapping *m = pg_reg_head; m; m = m->next) {
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
	pthread_mutex_lock(&pg_reg_lock);
	fork_fetch();
}

static void atfork_parent(void)
{
	fork_release();
	pthread_mutex_unlock(&pg_reg_lock);
}

static void atfork_child(void)
{
	const char *why = pg_eng.fork_why;
	bool any = false;

	/* The engine is the parent's: its descriptors go (writing stopfd
	 * would stop the parent's thread), its locks start afresh (pool-uffd
	 * may have held pg_eng.lock at the fork), and a pool_map() of the
	 * child's starts an engine of its own. */
	pg_engine_forget();
	pg_eng.maps = NULL;
	pg_eng.nmaps = 0;
	pg_eng.resident = 0;
	pg_eng.fork_hold = false;
	pg_eng.fork_why = NULL;
	pthread_mutex_init(&pg_eng.lock, NULL);
	pthread_mutex_init(&pg_eng.life, NULL);
	for (struct mapping *m = pg_reg_head; m; m = m->next) {
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
	pthread_mutex_unlock(&pg_reg_lock);
}

void pg_atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}
