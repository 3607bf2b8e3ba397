// SPDX-License-Identifier: MIT
/*
 * libpool/paging_engine.c - transparent paging: the engine thread (pool-uffd) and fault service.
 *
 * The design and the invariants are libpool/paging.c's (its top comment).
 */
#include "libpool/paging_int.h"

struct pg_engine pg_eng = { .lock = PTHREAD_MUTEX_INITIALIZER,
			    .life = PTHREAD_MUTEX_INITIALIZER,
			    .uffd = -1,
			    .stopfd = -1,
			    .pidfd = -1,
			    .budget = SIZE_MAX };

static void *uffd_main(void *arg);

/* The process budget when the engine starts: set by the program
 * (pool_paging_set_process_budget()), else LIBPOOL_LOCAL_BYTES, else
 * none. */
static size_t process_budget(void)
{
	const char *env = getenv("LIBPOOL_LOCAL_BYTES");
	size_t v;

	if (pg_eng.budget_set)
		return pg_eng.budget_set;
	v = env && *env ? pg_parse_size(env) : 0;
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
 * pg_eng.life held. Returns 0 or -errno. */
static int engine_start(void)
{
	sigset_t all, old;
	int ret;

	ret = pg_engine_open_uffd();
	if (ret)
		return ret;
	pg_eng.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pg_eng.stopfd < 0) {
		ret = -errno;
		goto fail;
	}
	/* For process_madvise() on ourselves (pg_drop_pages()); without it,
	 * madvise() per range. */
	pg_eng.pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0u);
	pg_eng.budget = process_budget();
	pg_eng.batch_on = !(getenv("LIBPOOL_PAGING_BATCH") &&
			    !strcmp(getenv("LIBPOOL_PAGING_BATCH"), "0"));
	pg_eng.clock_on = !(getenv("LIBPOOL_PAGING_CLOCK") &&
			    !strcmp(getenv("LIBPOOL_PAGING_CLOCK"), "0"));
	pg_eng.clock_auto = !getenv("LIBPOOL_PAGING_CLOCK");
	pg_eng.credit_on = !(getenv("LIBPOOL_PAGING_CREDIT") &&
			     !strcmp(getenv("LIBPOOL_PAGING_CREDIT"), "0"));
	pg_eng.behind_on = !(getenv("LIBPOOL_PAGING_BEHIND") &&
			     !strcmp(getenv("LIBPOOL_PAGING_BEHIND"), "0"));
	pg_eng.wake_split = getenv("LIBPOOL_PAGING_WAKE_SPLIT") &&
			    !strcmp(getenv("LIBPOOL_PAGING_WAKE_SPLIT"), "1");
	pg_eng.direct_on = !(getenv("LIBPOOL_PAGING_DIRECT") &&
			     !strcmp(getenv("LIBPOOL_PAGING_DIRECT"), "0"));
	pg_eng.late_drop_on =
		!(getenv("LIBPOOL_PAGING_LATE_DROP") &&
		  !strcmp(getenv("LIBPOOL_PAGING_LATE_DROP"), "0"));
	pg_eng.drop_defer = false;
	pg_eng.drop_n = 0;
	pg_eng.resident = 0;
	__atomic_store_n(&pg_eng.spin_cap_ns, spin_cap(), __ATOMIC_RELAXED);
	pg_eng.spin_win_ns = 0;
	/* pool-uffd takes no signals: a SIGBUS or SIGINT meant for the
	 * application must never land on the thread that serves faults. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&pg_eng.thr, NULL, uffd_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		ret = -EAGAIN;
		goto fail;
	}
	/* named here too: the thread names itself only once it runs */
	pthread_setname_np(pg_eng.thr, "pool-uffd");
	pg_eng.running = true;
	pool_log(LOG_INFO, "paging: engine started user_only=%d budget=%zu",
		 (int)pg_eng.user_only, pg_eng.budget);
	return 0;
fail:
	if (pg_eng.pidfd >= 0)
		close(pg_eng.pidfd);
	if (pg_eng.stopfd >= 0)
		close(pg_eng.stopfd);
	close(pg_eng.uffd);
	pg_eng.uffd = pg_eng.stopfd = pg_eng.pidfd = -1;
	return ret;
}

void pg_engine_forget(void)
{
	if (pg_eng.running) {
		close(pg_eng.stopfd);
		close(pg_eng.uffd);
		if (pg_eng.pidfd >= 0)
			close(pg_eng.pidfd);
	}
	pg_eng.uffd = pg_eng.stopfd = pg_eng.pidfd = -1;
	pg_eng.running = false;
	pg_eng.cursor = pg_eng.last_hit = NULL;
}

/* Stops the engine (no mapping left). pg_eng.life held, pg_eng.lock not. */
static void engine_stop(void)
{
	uint64_t one = 1;

	if (write(pg_eng.stopfd, &one, sizeof(one)) != sizeof(one))
		pool_log(LOG_ERR, "paging: stop err=%s", strerror(errno));
	pthread_join(pg_eng.thr, NULL);
	pg_engine_forget();
}

/* Puts m under the engine (started if need be): its range registered,
 * in pg_eng.maps. Returns 0 or -errno. */
int pg_engine_attach(struct mapping *m)
{
	int ret = 0;

	pthread_mutex_lock(&pg_eng.life);
	if (!pg_eng.running)
		ret = engine_start();
	if (ret)
		goto out;
	m->uffd = pg_eng.uffd;
	m->user_only = pg_eng.user_only;
	m->st.user_mode_only = pg_eng.user_only;
	ret = pg_uffd_register(m);
	if (ret) {
		if (!pg_eng.nmaps)
			engine_stop();
		goto out;
	}
	pthread_mutex_lock(&pg_eng.lock);
	m->enext = pg_eng.maps;
	pg_eng.maps = m;
	pg_eng.nmaps++;
	pthread_mutex_unlock(&pg_eng.lock);
out:
	pthread_mutex_unlock(&pg_eng.life);
	return ret;
}

/* Takes m from the engine: once this returns pool-uffd never touches m
 * again; its range is unregistered (waiting faults wake and find no
 * handler: the caller must not touch the range). The last mapping stops
 * the engine. */
void pg_engine_detach(struct mapping *m)
{
	struct uffdio_range rg = { .start = (uintptr_t)m->base, .len = m->len };
	struct mapping **pp;

	pthread_mutex_lock(&pg_eng.life);
	pthread_mutex_lock(&pg_eng.lock);
	for (pp = &pg_eng.maps; *pp && *pp != m; pp = &(*pp)->enext)
		;
	if (*pp) {
		*pp = m->enext;
		pg_eng.nmaps--;
		pg_eng.resident -= m->nres * m->psize;
	}
	if (pg_eng.cursor == m)
		pg_eng.cursor = NULL;
	if (pg_eng.last_hit == m)
		pg_eng.last_hit = NULL;
	pthread_mutex_unlock(&pg_eng.lock);
	/* Without the registration a page we never filled reads as zero
	 * instead of waiting for a handler that is gone. */
	if (ioctl(m->uffd, UFFDIO_UNREGISTER, &rg))
		pool_log(LOG_WARNING, "paging: unregister err=%s",
			 strerror(errno));
	if (!pg_eng.nmaps && pg_eng.running)
		engine_stop();
	pthread_mutex_unlock(&pg_eng.life);
}

/* ------------------------------------------------------------------ */
/* failure                                                              */

int pool_proc_status_fields(const char *path, const char *const *keys,
			    size_t nkeys, int base, unsigned long long *vals)
{
	char buf[4096];
	size_t got = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (got < sizeof(buf) - 1 &&
	       (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	for (size_t i = 0; i < nkeys; i++) {
		const char *v = strstr(buf, keys[i]);

		vals[i] = v ? strtoull(v + strlen(keys[i]), NULL, base) : 0;
	}
	return 0;
}

/* Whether thread tid blocks or ignores SIGBUS (then it would never leave
 * its fault). Reads /proc without stdio. */
static bool sigbus_is_masked(pid_t tid)
{
	static const char *const keys[] = { "SigBlk:", "SigIgn:" };
	const uint64_t bit = 1ull << (SIGBUS - 1);
	char path[64] = "/proc/self/task/", d[16];
	unsigned long long v[2];
	size_t k = strlen(path);
	int nd = 0;

	do {
		d[nd++] = (char)('0' + tid % 10);
		tid /= 10;
	} while (tid > 0 && nd < (int)sizeof(d));
	while (nd)
		path[k++] = d[--nd];
	memcpy(path + k, "/status", sizeof("/status"));
	if (pool_proc_status_fields(path, keys, 2, 16, v))
		return false;
	return ((v[0] | v[1]) & bit) != 0;
}

/* What pg_fault_fail() says a failed mapping's cause was: the pool (its
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
void pg_fault_fail(struct mapping *m, pid_t tid, size_t idx)
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

void pg_mapping_fail(struct mapping *m, int err, const char *why)
{
	if (m->failed)
		return;
	m->fail_why = why;
	__atomic_store_n(&m->failed, err, __ATOMIC_RELEASE);
	__atomic_store_n(&m->st.failed, err, __ATOMIC_RELAXED);
	pool_log(LOG_ERR, "paging: mapping failed map=%p err=%s why=%s",
		 (void *)m->base, strerror(-err), why);
}

static void missing_fault(struct mapping *m, size_t idx, bool write, pid_t tid)
{
	bool again = false;
	uint8_t s = m->state[idx];
	int ret;

	if (s & PG_FORK) {
		/* Mapped for a fork under way (fork_fetch()) after this
		 * fault was sent: the install woke it already. */
		if (pg_page_is_present(m, idx)) {
			pg_uffd_wake(m, idx, 1);
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
		if (pg_page_is_present(m, idx)) {
			pg_uffd_wake(m, idx, 1);
			return;
		}
		again = true;
	}
	if (__atomic_load_n(&m->failed, __ATOMIC_ACQUIRE)) {
		pg_fault_fail(m, tid, idx);
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
		ret = pg_fetch(m, idx, write, again);
		if (ret)
			pg_fault_fail(m, tid, idx);
		return;
	}
	if (write && !again) {
		uint64_t t0 = mono_ns();

		ret = pg_zero_fill(m, idx);
		phase_add(POOL_PHASE_ZERO, t0);
		if (ret) {
			pg_mapping_fail(m, ret, "zero fill");
			pg_fault_fail(m, tid, idx);
		}
		return;
	}
	if (!again) {
		ret = pg_make_room(m, 1);
		if (ret) {
			pg_fault_fail(m, tid, idx);
			return;
		}
	}
	uint64_t t0 = mono_ns();

	if (write)
		ret = pg_uffd_copy(m, idx, 1, m->zero, false);
	else
		ret = pg_zero_install(m, idx);
	phase_add(POOL_PHASE_ZERO, t0);
	if (ret == -EEXIST) { /* raced with nothing we know of: keep it */
		pg_uffd_wake(m, idx, 1);
		ret = 0;
		write = true; /* unknown contents: treat as dirty */
	}
	if (ret) {
		pg_mapping_fail(m, ret, "zero fill");
		pg_fault_fail(m, tid, idx);
		return;
	}
	STAT_ADD(m, zero_fills, 1);
	if (!again)
		pg_ring_push(m, idx);
	m->state[idx] = PG_RESIDENT | (write ? PG_DIRTY | PG_REF : PG_ZERO);
}

static void wp_fault(struct mapping *m, size_t idx, pid_t tid)
{
	int ret;

	if (m->state[idx] & PG_FORK) {
		/* A write to a page kept mapped for a fork under way: it
		 * comes back into the ring (room made as for a fault, which
		 * keeps other pages mapped meanwhile) and goes on below. */
		ret = pg_make_room(m, 1);
		if (ret) {
			pg_fault_fail(m, tid, idx);
			return;
		}
		m->state[idx] =
			(uint8_t)((m->state[idx] & ~PG_FORK) | PG_RESIDENT);
		pg_ring_push(m, idx);
	}
	if (!(m->state[idx] & PG_RESIDENT)) {
		/* Evicted while the writer waited: it faults again as a
		 * missing page. */
		pg_uffd_wake(m, idx, 1);
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
	ret = pg_uffd_protect(m, idx, 1, false);
	if (ret) {
		pool_log(LOG_ERR, "paging: unprotect page=%zu err=%s", idx,
			 strerror(-ret));
		pg_uffd_wake(m, idx, 1);
	}
	phase_add(POOL_PHASE_WP, t0);
}

/* Whether some mapping has runs to install ahead (pg_eng.lock held). */
static bool ahead_pending_any(void)
{
	for (struct mapping *m = pg_eng.maps; m; m = m->enext)
		if (pg_ahead_pending(m))
			return true;
	return false;
}

/* One run ahead for the mapping whose turn it is (pg_eng.lock held). */
static void install_ahead_any(void)
{
	static size_t turn;
	size_t i = 0, k = turn++ % (pg_eng.nmaps ? pg_eng.nmaps : 1);

	for (struct mapping *m = pg_eng.maps; m; m = m->enext, i++)
		if (i >= k && pg_ahead_pending(m) && pg_install_ahead(m))
			return;
	for (struct mapping *m = pg_eng.maps; m; m = m->enext)
		if (pg_ahead_pending(m) && pg_install_ahead(m))
			return;
}

/* The mapping that holds address a (pg_eng.lock held), or NULL: a fault
 * left over from a mapping removed meanwhile (its unregistration woke
 * the thread). The last hit first: faults come in runs. */
static struct mapping *engine_find(uintptr_t a)
{
	struct mapping *m = pg_eng.last_hit;

	if (m && a - (uintptr_t)m->base < m->len)
		return m;
	for (m = pg_eng.maps; m; m = m->enext)
		if (a - (uintptr_t)m->base < m->len)
			return pg_eng.last_hit = m;
	return NULL;
}

/*
 * Of a batch of messages, the missing faults of the first 4 KiB mapping
 * that has two or more on pages the region holds (not resident) are
 * served together (pg_fetch_batch()); their messages are then marked done
 * (event 0). The rest is served one by one. pg_eng.lock held.
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
		if (idx >= live_pages(m) || !pg_page_is_fetchable(m, idx))
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
	if (k < 2 || !pg_eng.batch_on)
		return;
	pg_fetch_batch(bm, f, k);
	for (size_t j = 0; j < k; j++)
		msgs[which[j]].event = 0;
}

/*
 * Waits for a fault (or the stop event) as poll(pf, 2, -1) would, but
 * first spins for up to pg_eng.spin_win_ns, polling without sleeping (with
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
	uint64_t t0, b, win = pg_eng.spin_win_ns;
	int ready = 0;

	if (!pg_eng.spin_cap_ns)
		return poll(pf, 2, -1);
	t0 = mono_ns();
	__atomic_add_fetch(&pg_eng.waits, 1, __ATOMIC_RELAXED);
	if (win) {
		uint64_t now = t0;

		do {
			ready = poll(pf, 2, 0);
			if (ready)
				break;
			sched_yield();
			now = mono_ns();
		} while (now - t0 < win);
		__atomic_add_fetch(&pg_eng.spin_ns,
				   (ready ? mono_ns() : now) - t0,
				   __ATOMIC_RELAXED);
		if (ready > 0) {
			__atomic_add_fetch(&pg_eng.spin_hits, 1,
					   __ATOMIC_RELAXED);
			return ready;
		}
		if (ready < 0)
			return ready;
		__atomic_add_fetch(&pg_eng.spin_misses, 1, __ATOMIC_RELAXED);
	}
	ready = poll(pf, 2, -1);
	if (ready <= 0 || pf[1].revents)
		return ready;
	b = mono_ns() - t0;
	if (b <= pg_eng.spin_cap_ns)
		pg_eng.spin_win_ns =
			2 * b < pg_eng.spin_cap_ns ? 2 * b : pg_eng.spin_cap_ns;
	else
		pg_eng.spin_win_ns = win / 2 < 1000 ? 0 : win / 2;
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
		struct pollfd pf[2] = { { .fd = pg_eng.uffd, .events = POLLIN },
					{ .fd = pg_eng.stopfd,
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
		pthread_mutex_lock(&pg_eng.lock);
		t = phase_add(POOL_PHASE_LOCK, t);
		if (ready == 0) {
			install_ahead_any();
			phase_add(POOL_PHASE_AHEAD, t);
			pending = ahead_pending_any();
			pthread_mutex_unlock(&pg_eng.lock);
			continue;
		}
		n = read(pg_eng.uffd, msgs, sizeof(msgs));
		if (n < 0) {
			pending = ahead_pending_any();
			pthread_mutex_unlock(&pg_eng.lock);
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
		pthread_mutex_unlock(&pg_eng.lock);
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
 * background from then on. pool-uffd, pg_eng.lock held; the session's lock
 * is only tried, so this never waits (the next install tries again).
 */
void pg_warm_deferred_check(struct mapping *m)
{
	/* a mapping its own budget holds whole never evicts: no fabric */
	size_t npages = (m->size + m->psize - 1) >> m->shift;
	bool half = pg_eng.budget != SIZE_MAX
			    ? pg_eng.resident >= pg_eng.budget / 2
			    : npages > m->max_res && m->nres >= m->max_res / 2;

	if (half && pool_fabric_prepare(m->p)) {
		m->warm_deferred = false;
		STAT_ADD(m, warmups, 1);
	}
}

/* Starts warm_main() when the session has not moved a byte yet and
 * LIBPOOL_PAGING_WARMUP is not 0; on a session whose fabric is not set
 * up yet, defers it (pg_warm_deferred_check()). Called with all signals
 * blocked. */
void pg_warm_start(struct mapping *m)
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
