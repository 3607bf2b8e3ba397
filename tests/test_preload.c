// SPDX-License-Identifier: MIT
/*
 * tests/test_preload.c - libpool-preload.so (LD_PRELOAD) against a real
 * memd: unmodified programs (this binary run as "prog", "realloc" and
 * "threads": plain malloc family, no tidepool API; sort(1); python3
 * hashing a 200 MiB bytearray) with a local budget far below their
 * working set print byte-identical output with and without the shim;
 * fork() children keep their resident copy and fault on the rest; memd
 * killed under a program is SIGBUS (or SIGABRT), never wrong bytes; an
 * unreachable pool gives one warning and plain libc, or, with
 * LIBPOOL_REQUIRED=1, a failed process. With --huge (test_preload_huge):
 * programs paged in 2 MiB hugetlb pages (LIBPOOL_HUGE_PAGES=required)
 * print the same. Not run in sanitizer builds.
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"

#define MiB (1024u * 1024u)

static struct tu_memd md;
static char tmpdir[64];

/* ------------------------------------------------------------------ */
/* the unmodified program                                               */

static uint64_t sum(const uint8_t *b, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s = s * 31 + b[i];
	return s;
}

/* Every member of the malloc family on large and small blocks; prints
 * what it computed, so any wrong byte changes the output. */
static int prog_main(void)
{
	size_t big = 3 * MiB + 123;
	uint8_t *a, *b, *c, *d, *e;
	void *f = NULL;
	char *small[64];

	a = malloc(big);
	b = calloc(big, 1);
	if (!a || !b)
		return 1;
	for (size_t i = 0; i < big; i++)
		a[i] = (uint8_t)(i * 7 + (i >> 12));
	for (size_t i = 0; i < big; i += 4096)
		if (b[i])
			return 2; /* calloc must read as zero */
	memcpy(b, a, big);
	printf("a=%016llx b=%016llx usable_ok=%d\n",
	       (unsigned long long)sum(a, big), (unsigned long long)sum(b, big),
	       malloc_usable_size(a) >= big);
	for (int i = 0; i < 64; i++) {
		small[i] = malloc((size_t)i * 13 + 1);
		memset(small[i], 'a' + i % 26, (size_t)i * 13 + 1);
	}
	a = realloc(a, 2 * big); /* grows: a new block, old bytes kept */
	memset(a + big, 0x5a, big);
	printf("realloc=%016llx\n", (unsigned long long)sum(a, 2 * big));
	c = malloc(100);
	c = realloc(c, 2 * MiB); /* small to large */
	memset(c, 1, 100);
	memset(c + 100, 2, 2 * MiB - 100);
	printf("c=%016llx\n", (unsigned long long)sum(c, 2 * MiB));
	if (posix_memalign(&f, 4096, 2 * MiB) || ((uintptr_t)f & 4095))
		return 3;
	memset(f, 3, 2 * MiB);
	d = aligned_alloc(64, 2 * MiB);
	e = memalign(1 << 21, 2 * MiB); /* past page alignment: libc */
	if (!d || !e || ((uintptr_t)e & ((1 << 21) - 1)))
		return 4;
	memcpy(d, f, 2 * MiB);
	memcpy(e, d, 2 * MiB);
	printf("e=%016llx\n", (unsigned long long)sum(e, 2 * MiB));
	for (int i = 0; i < 64; i++) {
		if (small[i][i * 13] != 'a' + i % 26)
			return 5;
		free(small[i]);
	}
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
	free(f);
	printf("done\n");
	return 0;
}

/* realloc across the threshold and back, contents checked at each step:
 * small (libc) -> large (pooled) -> larger (another region) -> small
 * (libc again), through realloc and reallocarray. */
static int prog_realloc(void)
{
	static const size_t sizes[] = { 1000,	 3 * MiB + 5, 9 * MiB + 77,
					2 * MiB, 300,	      5 * MiB };
	size_t have = 0;
	uint8_t *a = NULL;

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k], keep = have < n ? have : n;
		ssize_t bad;

		a = k % 2 ? reallocarray(a, n / 4 + 1, 4) : realloc(a, n);
		if (!a)
			return 10;
		/* The bytes kept are the old ones; the new tail is ours. */
		bad = tu_pattern_check(a, keep, 20, 0);
		if (bad >= 0) {
			printf("step %zu: wrong byte at %zd\n", k, bad);
			return 11;
		}
		if (n > have)
			tu_pattern_fill(a + have, n - have, 20, have);
		have = n;
		if (tu_pattern_check(a, have, 20, 0) >= 0)
			return 12;
		printf("step %zu size=%zu sum=%016llx\n", k, n,
		       (unsigned long long)sum(a, n));
	}
	free(a);
	return 0;
}

/* Threads faulting one large buffer at once: each writes its own quarter
 * and a word of its own in every page of a shared eighth, then all read
 * everything. */
#define NTHREADS 4
static uint8_t *mt_buf;
static size_t mt_len;
static pthread_barrier_t mt_bar;
static uint64_t mt_sum[NTHREADS];

static void *mt_main(void *arg)
{
	size_t t = (size_t)(uintptr_t)arg, part = mt_len / NTHREADS;
	uint64_t s = 0;

	tu_pattern_fill(mt_buf + t * part, part, 30 + t, t * part);
	pthread_barrier_wait(&mt_bar);
	/* Shared pages: the first eighth of quarter 0, word t of each. */
	for (size_t pg = 0; pg < part / 8; pg += 4096)
		((uint64_t *)(mt_buf + pg))[t] = pg * NTHREADS + t;
	pthread_barrier_wait(&mt_bar);
	/* Everyone reads everything, from a different start. */
	for (size_t i = 0; i < mt_len; i += 8) {
		size_t off = (i + t * part) % mt_len;

		s += *(const uint64_t *)(mt_buf + off) * (off | 1);
	}
	mt_sum[t] = s;
	return NULL;
}

static int prog_threads(void)
{
	pthread_t th[NTHREADS];

	mt_len = 24 * MiB;
	mt_buf = malloc(mt_len);
	if (!mt_buf)
		return 20;
	pthread_barrier_init(&mt_bar, NULL, NTHREADS);
	for (size_t t = 0; t < NTHREADS; t++)
		if (pthread_create(&th[t], NULL, mt_main, (void *)(uintptr_t)t))
			return 21;
	for (size_t t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	for (size_t t = 0; t < NTHREADS; t++) {
		/* All read the same bytes: the sums differ by order only
		 * if a read was wrong (addition is commutative). */
		if (mt_sum[t] != mt_sum[0])
			return 22;
		printf("thread %zu sum=%016llx\n", t,
		       (unsigned long long)mt_sum[t]);
	}
	printf("buf=%016llx\n", (unsigned long long)sum(mt_buf, mt_len));
	free(mt_buf);
	return 0;
}

static void on_segv(int sig, siginfo_t *si, void *uctx)
{
	uintptr_t a = (uintptr_t)si->si_addr, lo = (uintptr_t)mt_buf;

	(void)sig;
	(void)uctx;
	/* A fenced page of the inherited buffer: the fork semantics. */
	_exit(a >= lo && a < lo + mt_len && si->si_code == SEGV_ACCERR ? 42
								       : 43);
}

/*
 * fork() under the shim: a (2 MiB) fits the budget and is the child's
 * copy entirely: it reads and rewrites it. Of b (16 MiB) most pages
 * were evicted to the pool before the fork: they are fetched for the
 * child, which reads and rewrites all of b. With TP_FORK_FENCE=1 (run
 * with LIBPOOL_FORK_FETCH=0) they are not: the last page reads right,
 * the first is SIGSEGV, never zeros. The parent's data is untouched by
 * the child's writes.
 */
static int prog_fork(void)
{
	const size_t na = 2 * MiB, nb = 16 * MiB;
	uint8_t *a = malloc(na), *b = malloc(nb);
	pid_t pid;
	int st;

	if (!a || !b)
		return 30;
	/* b first: under one budget for both (the heap), a and the end of
	 * b are what is resident at the fork */
	tu_pattern_fill(b, nb, 42, 0);
	tu_pattern_fill(a, na, 41, 0);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 31;
	if (pid == 0) {
		struct sigaction sa = { .sa_sigaction = on_segv,
					.sa_flags = SA_SIGINFO };
		volatile uint8_t v;

		if (tu_pattern_check(a, na, 41, 0) >= 0)
			_exit(32);
		tu_pattern_fill(a, na, 51, 0);
		if (tu_pattern_check(a, na, 51, 0) >= 0)
			_exit(33);
		if (tu_pattern_check(b + nb - 4096, 4096, 42, nb - 4096) >= 0)
			_exit(34);
		tu_pattern_fill(b + nb - 4096, 4096, 52, 0);
		free(a); /* the child's copy only */
		if (!getenv("TP_FORK_FENCE")) {
			if (tu_pattern_check(b, nb - 4096, 42, 0) >= 0)
				_exit(39);
			tu_pattern_fill(b, nb, 53, 0);
			_exit(tu_pattern_check(b, nb, 53, 0) >= 0 ? 40 : 0);
		}
		mt_buf = b;
		mt_len = nb;
		sigaction(SIGSEGV, &sa, NULL);
		v = b[0];
		/* Reaching here: an evicted page read without a fault. */
		_exit(v == tu_pattern_byte(42, 0) ? 35 : 36);
	}
	if (waitpid(pid, &st, 0) != pid)
		return 37;
	printf("child status=%d exit=%d\n", st,
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	if (tu_pattern_check(a, na, 41, 0) >= 0 ||
	    tu_pattern_check(b, nb, 42, 0) >= 0)
		return 38;
	printf("parent a=%016llx b=%016llx\n", (unsigned long long)sum(a, na),
	       (unsigned long long)sum(b, nb));
	free(a);
	free(b);
	return 0;
}

/*
 * Churn: 48 blocks of 256 KiB filled, freed, and allocated and filled
 * again, three rounds; each round's checksum printed. Under the heap with
 * MALLOC_CONF=dirty_decay_ms:0, what jemalloc frees is purged at once:
 * dropped by the engine unwritten (discarded=).
 */
static int prog_churn(void)
{
	enum { NB = 48 };
	const size_t n = 256 * 1024;
	uint8_t *b[NB];

	for (int round = 0; round < 3; round++) {
		uint64_t s = 0;

		for (int i = 0; i < NB; i++) {
			b[i] = malloc(n);
			if (!b[i])
				return 50;
			tu_pattern_fill(b[i], n, 70 + round * NB + i, 0);
		}
		for (int i = 0; i < NB; i++) {
			if (tu_pattern_check(b[i], n, 70 + round * NB + i, 0) >=
			    0)
				return 51;
			s += sum(b[i], n);
			free(b[i]);
		}
		printf("round %d sum=%016llx\n", round, (unsigned long long)s);
	}
	return 0;
}

/*
 * memd is killed (by us: TP_KILL_PID) while our 8 MiB buffer lives
 * mostly in the pool; reading it back must end in SIGBUS (or, when
 * TP_BLOCK_SIGBUS=1 and the thread blocks SIGBUS, SIGABRT). Exit 5:
 * served after memd died (impossible); 6: a wrong byte.
 */
static int prog_memdkill(void)
{
	const size_t n = 8 * MiB;
	const char *pid = getenv("TP_KILL_PID"),
		   *block = getenv("TP_BLOCK_SIGBUS");
	uint8_t *a = malloc(n);

	if (!a || !pid)
		return 40;
	tu_pattern_fill(a, n, 60, 0);
	if (block && !strcmp(block, "1")) {
		sigset_t s;

		sigemptyset(&s);
		sigaddset(&s, SIGBUS);
		pthread_sigmask(SIG_BLOCK, &s, NULL);
	}
	if (kill((pid_t)atoi(pid), SIGKILL))
		return 41;
	usleep(300 * 1000);
	return tu_pattern_check(a, n, 60, 0) < 0 ? 5 : 6;
}

/* 40 MiB, reversed in place (two streams going opposite ways), then
 * grown by realloc to 45 MiB (a second region, the bytes copied over):
 * big enough for 2 MiB pages (LIBPOOL_HUGE_PAGES). */
static int prog_stream(void)
{
	size_t n = 40 * MiB;
	uint64_t *w;
	uint8_t *a = malloc(n);

	if (!a)
		return 50;
	tu_pattern_fill(a, n, 70, 0);
	printf("filled=%016llx\n", (unsigned long long)sum(a, n));
	w = (uint64_t *)a;
	for (size_t i = 0, j = n / 8 - 1; i < j; i++, j--) {
		uint64_t t = w[i];

		w[i] = w[j];
		w[j] = t;
	}
	printf("reversed=%016llx\n", (unsigned long long)sum(a, n));
	a = realloc(a, n + 5 * MiB);
	if (!a)
		return 51;
	memset(a + n, 0x33, 5 * MiB);
	printf("grown=%016llx\n", (unsigned long long)sum(a, n + 5 * MiB));
	free(a);
	return 0;
}

/*
 * "kvmap ADDR": a KV client (a put and a get of one 1 MiB block through
 * its own libpool) that prints how many memfd mappings it holds after
 * the get: KV gets copy from mappings of the slab files by default, but
 * not beside the shim (docs/kv.md, "Gets through a mapping").
 */
static int prog_kvmap(const char *addr)
{
	struct pool_opts o = { .addr = addr, .timeout_ms = 5000 };
	struct pool_kv_key key = { .b = { 'k', 'v', 'm', 'a', 'p' } };
	size_t len = MiB, cap = MiB, got = 0;
	uint8_t *v = malloc(len), *b = malloc(cap);
	struct pool_kv *kv = NULL;
	struct pool *p = NULL;
	const void *vals[1] = { v };
	void *bufs[1] = { b };
	char line[512];
	int st = -1, maps = 0;
	FILE *f;

	if (!v || !b || pool_connect(&o, &p) || pool_kv_open(p, NULL, &kv))
		return 70;
	tu_pattern_fill(v, len, 73, 0);
	/* -EEXIST: an earlier run of the test stored it */
	if (pool_kv_put(kv, 1, &key, vals, &len, &st) != 1 ||
	    (st && st != -EEXIST)) {
		fprintf(stderr, "kvmap: put: %s\n", strerror(-st));
		return 71;
	}
	if (pool_kv_get(kv, 1, &key, bufs, &cap, &got, &st) != 1 || st ||
	    got != len || tu_pattern_check(b, got, 73, 0) != -1)
		return 72;
	f = fopen("/proc/self/maps", "r");
	if (!f)
		return 73;
	while (fgets(line, sizeof(line), f))
		maps += strstr(line, "/memfd:") != NULL;
	fclose(f);
	printf("kvmaps=%d\n", maps);
	pool_kv_close(kv);
	pool_close(p);
	free(v);
	free(b);
	return 0;
}

/*
 * A small program (1 MiB): its checksum on stdout; on stderr its peak
 * RSS (VmHWM) and whether libfabric is mapped into it, for the shim's
 * fixed overhead (docs/paging.md, "Start-up and fixed overhead").
 */
static int prog_small(void)
{
	size_t n = MiB, hwm_kb = 0;
	uint8_t *a = malloc(n);
	char line[512];
	bool fabric = false;
	FILE *f;

	if (!a)
		return 60;
	tu_pattern_fill(a, n, 71, 0);
	printf("small=%016llx\n", (unsigned long long)sum(a, n));
	fflush(stdout);
	f = fopen("/proc/self/status", "r");
	if (!f)
		return 61;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmHWM:", 6))
			hwm_kb = strtoul(line + 6, NULL, 10);
	fclose(f);
	f = fopen("/proc/self/maps", "r");
	if (!f)
		return 62;
	while (fgets(line, sizeof(line), f))
		fabric |= strstr(line, "libfabric") != NULL;
	fclose(f);
	fprintf(stderr, "small: hwm_kb=%zu libfabric=%d\n", hwm_kb, fabric);
	/* a is not freed: with regions, the stats line at exit counts the
	 * allocations alive then */
	return hwm_kb ? 0 : 63;
}

/*
 * Fills 3 MiB, well over half of a 4 MiB budget (when the engine asks
 * for the fabric, evictions being near), then stays 1.5 s, time for a
 * fabric set-up to finish (docs/paging.md, "Start-up").
 */
static int prog_half(void)
{
	size_t n = 3 * MiB;
	uint8_t *a = malloc(n);

	if (!a)
		return 64;
	tu_pattern_fill(a, n, 72, 0);
	printf("half=%016llx\n", (unsigned long long)sum(a, n));
	fflush(stdout);
	usleep(1500 * 1000);
	return 0;
}

/*
 * C++ operator new and delete as a C program reaches them (python3 and
 * its C++ extensions: the executable does not link libstdc++): by name,
 * from the global scope. Under the shim, libjemalloc.so.2 (its
 * dependency, with new and delete of its own) came before libstdc++
 * there: new bypassed the heap and delete aborted in glibc's free
 * (issue 28, torch's import). Every variant; 48 MiB through new, so the
 * heap pages it through a small budget.
 */
static int prog_cxx(void)
{
	void *(*nw)(size_t), *(*na)(size_t), *(*nwa)(size_t, size_t);
	void *(*nwt)(size_t, const void *);
	void (*dl)(void *), (*da)(void *), (*dls)(void *, size_t);
	void (*dla)(void *, size_t);
	size_t big = 48 * MiB;
	uint64_t s = 0;
	uint8_t *a, *b, *c, *d;
	char nothrow = 0;

	if (!dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL))
		return 70;
	nw = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
	na = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znam");
	nwa = (void *(*)(size_t, size_t))dlsym(RTLD_DEFAULT,
					       "_ZnwmSt11align_val_t");
	nwt = (void *(*)(size_t, const void *))dlsym(RTLD_DEFAULT,
						     "_ZnwmRKSt9nothrow_t");
	dl = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
	da = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdaPv");
	dls = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
	dla = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT,
					      "_ZdlPvSt11align_val_t");
	if (!nw || !na || !nwa || !nwt || !dl || !da || !dls || !dla)
		return 71;
	a = nw(big);
	tu_pattern_fill(a, big, 81, 0);
	s = sum(a, big);
	for (int i = 0; i < 1000; i++) {
		b = nw(24 + (size_t)i % 200);
		c = na(100 + (size_t)i);
		memset(b, i, 24);
		memset(c, i + 1, 100);
		s = s * 7 + b[3] + c[99];
		/* a pointer from new freed by free() and from malloc() by
		 * delete (wrong in C++, common in C libraries), both ways */
		if (i % 2) {
			free(b);
			da(c);
		} else {
			dl(b);
			free(c);
		}
	}
	d = nwa(3 * MiB, 2 * MiB);
	if ((uintptr_t)d % (2 * MiB))
		return 72;
	tu_pattern_fill(d, 3 * MiB, 82, 0);
	s = s * 31 + sum(d, 3 * MiB);
	dla(d, 2 * MiB);
	b = nwt(4096, &nothrow);
	if (!b)
		return 73;
	memset(b, 5, 4096);
	s += b[4095];
	dls(b, 4096);
	s = s * 31 + sum(a, big); /* again: fetched back */
	dl(a);
	printf("cxx=%016llx\n", (unsigned long long)s);
	return 0;
}

/*
 * A program that splits the heap's mapping under the engine, as numpy
 * does (madvise(MADV_HUGEPAGE) on each large array, which need not be
 * aligned) and as mprotect does: a VMA boundary inside the run the
 * engine zero-fills or fetches at once made UFFDIO_COPY fail with ENOENT
 * and the process die of SIGBUS (issue 28, numpy.ones(10**6).sum()).
 */
static int prog_split(void)
{
	size_t n = 24 * MiB;
	uint8_t *a = malloc(n), *b;
	uint64_t s;

	if (!a)
		return 75;
	/* boundaries at odd pages, not where a run would start */
	b = (uint8_t *)(((uintptr_t)a + 5 * 4096 + 4095) & ~(uintptr_t)4095);
	if (madvise(b, 8 * MiB + 3 * 4096, MADV_HUGEPAGE) ||
	    madvise(b + 10 * MiB + 7 * 4096, 2 * MiB, MADV_NOHUGEPAGE) ||
	    mprotect(b + 14 * MiB + 4096, 9 * 4096,
		     PROT_READ | PROT_WRITE | PROT_EXEC) ||
	    madvise(b + 16 * MiB + 9 * 4096, 5 * 4096, MADV_NOHUGEPAGE))
		return 76;
	tu_pattern_fill(a, n, 91, 0);
	s = sum(a, n);
	for (size_t i = 0; i < n; i += 4099)
		a[i] ^= 0x5a;
	s = s * 31 + sum(a, n);
	printf("split=%016llx\n", (unsigned long long)s);
	free(a);
	return 0;
}

/*
 * A library dlopen()ed with RTLD_DEEPBIND (tests/programs/tp_deepbind.c)
 * frees what this program allocated and allocates what it frees, small
 * and large: deep binding made the library's free glibc's, and a heap
 * pointer there was glibc's abort (issue 28).
 */
static int prog_deepbind(void)
{
	char lib[4096], *sl;
	ssize_t n = readlink("/proc/self/exe", lib, sizeof(lib) - 32);
	char *(*dup)(const char *, size_t);
	void (*fr)(void *);
	void *(*grow)(void *, size_t);
	uint64_t s = 0;
	void *h;

	if (n <= 0)
		return 80;
	lib[n] = '\0';
	sl = strrchr(lib, '/');
	strcpy(sl ? sl + 1 : lib, "libtp_deepbind.so");
	h = dlopen(lib, RTLD_NOW | RTLD_DEEPBIND);
	if (!h) {
		fprintf(stderr, "deepbind: %s\n", dlerror());
		return 81;
	}
	dup = (char *(*)(const char *, size_t))dlsym(h, "tp_deepbind_dup");
	fr = (void (*)(void *))dlsym(h, "tp_deepbind_free");
	grow = (void *(*)(void *, size_t))dlsym(h, "tp_deepbind_grow");
	if (!dup || !fr || !grow)
		return 82;
	for (size_t i = 1; i < 2000; i += 37) {
		char *a = malloc(i * 64), *b = dup("pooled", i * 512);

		if (!a || !b)
			return 83;
		memset(a, (int)i, i * 64);
		s = s * 31 + sum((uint8_t *)a, i * 64) + strlen(b) + b[i];
		a = grow(a, i * 128); /* the library's realloc of ours */
		if (!a)
			return 84;
		s = s * 31 + sum((uint8_t *)a, i * 64);
		fr(a);	 /* the library frees ours */
		free(b); /* we free the library's */
	}
	printf("deepbind=%016llx\n", (unsigned long long)s);
	return dlclose(h) ? 85 : 0;
}

/* free() of a pointer into a block, not its start: a program's bug the
 * shim must report, not hand to jemalloc (bad_free_named). */
static int prog_badfree(void)
{
	char *p = malloc(100);

	if (!p)
		return 90;
	memset(p, 1, 100);
	printf("badfree\n");
	fflush(stdout);
	/* through a volatile pointer: the compiler sees the bug too */
	{
		char *volatile q = p + 4;

		free(q);
	}
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/*
 * Blocks glibc's own functions allocate (strdup, asprintf, getline,
 * open_memstream, realpath, scandir) freed, grown and measured by the
 * program; aligned allocations at alignments from 8 bytes to 64 MiB;
 * reallocarray. Every owner must agree (issue 28's list); prints what it
 * computed.
 */
static int prog_glibc(void)
{
	uint64_t s = 0;
	char *a, *b = NULL, *c = NULL, *d, *e;
	size_t bl = 0, cl = 0;
	struct dirent **ents;
	FILE *f;
	int n;

	a = strdup("interposition");
	if (!a || asprintf(&d, "%s-%d", a, 28) < 0)
		return 100;
	a = realloc(a, 4096);
	if (!a)
		return 101;
	s = s * 31 + malloc_usable_size(a) / 4096 + strlen(d);
	free(a);
	free(d);
	f = fopen("/proc/self/cmdline", "r");
	if (!f || getline(&b, &bl, f) < 0)
		return 102;
	fclose(f);
	s = s * 31 + (malloc_usable_size(b) >= bl);
	free(b);
	f = open_memstream(&c, &cl);
	if (!f)
		return 103;
	for (int i = 0; i < 10000; i++)
		fprintf(f, "%d,", i);
	fclose(f);
	s = s * 31 + cl + (uint8_t)c[cl / 2];
	c = reallocarray(c, cl + 1, 2);
	if (!c)
		return 104;
	free(c);
	e = realpath("/proc/self/../self/", NULL);
	if (!e)
		return 105;
	free(e);
	n = scandir("/", &ents, NULL, by_name);
	if (n < 0)
		return 106;
	for (int i = 0; i < n; i++) {
		s = s * 31 + strlen(ents[i]->d_name);
		free(ents[i]);
	}
	free(ents);
	for (size_t al = 8; al <= 64 * MiB; al *= 4) {
		void *p = NULL, *q = aligned_alloc(al, al * 2),
		     *r = memalign(al, 3);

		if (posix_memalign(&p, al, al + 1) || !q || !r)
			return 107;
		if ((uintptr_t)p % al || (uintptr_t)q % al || (uintptr_t)r % al)
			return 108;
		memset(p, 1, al + 1);
		memset(q, 2, al * 2);
		s = s * 31 + (malloc_usable_size(p) >= al + 1) +
		    (malloc_usable_size(q) >= al * 2);
		free(p);
		free(q);
		free(r);
	}
	printf("glibc=%016llx\n", (unsigned long long)s);
	return 0;
}

/* ------------------------------------------------------------------ */
/* running programs                                                     */

/*
 * Runs argv with stdout to out, stderr to err, and, when preload, the
 * shim and env (NULL-terminated "K=V" list) in the environment. Returns
 * the wait status.
 */
/* LIBPOOL_ALLOCATOR=regions (test_preload --regions: the per-allocation
 * engine), else jemalloc (the whole program in one pooled heap). */
static bool regions;

static int run(char *const argv[], const char *in, const char *out,
	       const char *err, bool preload, const char *const *env)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		tu_child_stdio(in, out, err, 0644);
		unsetenv("LD_PRELOAD");
		if (preload) {
			setenv("LD_PRELOAD", getenv("TP_PRELOAD"), 1);
			setenv("LIBPOOL_ADDR", md.addr, 1);
			/* the allocator under test; the heap's counters
			 * at exit, in the log (total() reads them) */
			setenv("LIBPOOL_ALLOCATOR",
			       regions ? "regions" : "jemalloc", 1);
			setenv("LIBPOOL_PRELOAD_STATS", "1", 1);
			for (; env && *env; env++)
				putenv((char *)*env);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* The file at path, whole (tu_read_file()); fails the test when it
 * cannot be read. */
static char *slurp(const char *path, size_t *len)
{
	char *b = tu_read_file(path, len);

	ck_assert_msg(b, "cannot read %s", path);
	return b;
}

static void assert_same(const char *x, const char *y)
{
	size_t nx, ny;
	char *bx = slurp(x, &nx), *by = slurp(y, &ny);

	ck_assert_msg(nx == ny && !memcmp(bx, by, nx),
		      "%s (%zu bytes) and %s (%zu bytes) differ", x, nx, y, ny);
	ck_assert_uint_gt(nx, 0);
	free(bx);
	free(by);
}

static int count(const char *path, const char *needle)
{
	size_t n;
	char *b = slurp(path, &n), *at = b;
	int k = 0;

	while ((at = strstr(at, needle))) {
		k++;
		at++;
	}
	free(b);
	return k;
}

/* Sum of every "key=N" in path (the shim's LIBPOOL_LOG=info lines). */
static unsigned long long total(const char *path, const char *key)
{
	size_t n, klen = strlen(key);
	char *b = slurp(path, &n), *at = b;
	unsigned long long t = 0;

	while ((at = strstr(at, key))) {
		at += klen;
		t += strtoull(at, NULL, 10);
	}
	free(b);
	return t;
}

/* Largest "paging: map ... bytes=N" in path. */
static unsigned long long largest_map(const char *path)
{
	static const char key[] = "paging: map addr=";
	size_t n;
	char *b = slurp(path, &n), *at = b;
	unsigned long long best = 0;

	while ((at = strstr(at, key))) {
		char *v = strstr(at, " bytes=");
		unsigned long long x;

		at += sizeof(key) - 1;
		if (!v)
			break;
		x = strtoull(v + 7, NULL, 10);
		if (x > best)
			best = x;
	}
	free(b);
	return best;
}

static void path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
}

static void start(void)
{
	int r;

	ck_assert_int_eq(tu_scratch_dir(tmpdir, sizeof(tmpdir), "preload"), 0);
	r = tu_memd_start(&md, NULL);
	ck_assert_msg(r == 0, "memd did not start: %s", strerror(-r));
}

static void stop(void)
{
	char cmd[128];

	tu_memd_stop(&md, SIGTERM);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

/* This binary's path in exe (len bytes), or, with sibling, that of the
 * program sibling in the same directory (tests/programs/). */
static void self_exe(char *exe, size_t len, const char *sibling)
{
	ssize_t n = readlink("/proc/self/exe", exe, len - 1);
	char *sl;

	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	if (!sibling)
		return;
	sl = strrchr(exe, '/');
	ck_assert_ptr_nonnull(sl);
	ck_assert_uint_lt((size_t)(sl + 1 - exe) + strlen(sibling), len);
	strcpy(sl + 1, sibling);
}

/* run() with stdout and stderr in tmpdir's NAME.out and NAME.err, whose
 * paths go to out and err (128 bytes each). */
static int run_named(char *const argv[], const char *name, bool preload,
		     const char *const *env, char *out, char *err)
{
	snprintf(out, 128, "%s/%s.out", tmpdir, name);
	snprintf(err, 128, "%s/%s.err", tmpdir, name);
	return run(argv, NULL, out, err, preload, env);
}

/*
 * Runs argv plain and under the shim with env; both must exit 0 with
 * identical output. The plain run's output is in tmpdir's plain.out, the
 * shim's log in err_out (128 bytes). memd must be started.
 */
static void same_output(char *const argv[], const char *const *env,
			char *err_out)
{
	char o1[128], o2[128], e1[128];
	const char *arg = argv[1] ? argv[1] : "";
	int st;

	st = run_named(argv, "plain", false, NULL, o1, e1);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "plain %s %s: %d",
		      argv[0], arg, st);
	st = run_named(argv, "shim", true, env, o2, err_out);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "shim %s %s: %d",
		      argv[0], arg, st);
	assert_same(o1, o2);
}

/* same_output() for this binary run as "mode" (main() below). */
static void same_as_plain(const char *mode, const char *const *env,
			  char *err_out)
{
	char exe[4096];
	char *argv[] = { exe, (char *)mode, NULL };

	self_exe(exe, sizeof(exe), NULL);
	same_output(argv, env, err_out);
}

/*
 * What a run's log (the shim's LIBPOOL_LOG=info lines and stats) must
 * show: how many times key occurs (COUNT), or the sum of every "keyN"
 * (TOTAL), compared with v. A list ends at a NULL key.
 */
enum cmp { EQ, GT, GE, LT };
struct expect {
	bool total;
	const char *key;
	enum cmp cmp;
	unsigned long long v;
};
#define COUNT(key, cmp, v)                                                     \
	{                                                                      \
		false, key, cmp, v                                             \
	}
#define TOTAL(key, cmp, v)                                                     \
	{                                                                      \
		true, key, cmp, v                                              \
	}

static void expect_log(const char *what, const char *err,
		       const struct expect *x)
{
	static const char *const op[] = { "==", ">", ">=", "<" };

	for (; x->key; x++) {
		unsigned long long got =
			x->total ? total(err, x->key)
				 : (unsigned long long)count(err, x->key);
		bool ok = x->cmp == EQ	 ? got == x->v
			  : x->cmp == GT ? got > x->v
			  : x->cmp == GE ? got >= x->v
					 : got < x->v;

		ck_assert_msg(ok, "%s: %s of \"%s\" is %llu, want %s %llu",
			      what, x->total ? "total" : "count", x->key, got,
			      op[x->cmp], x->v);
	}
}

#define MAP "paging: map addr="
#define EVICTED " evictions="
#define FETCHED " pages_fetched="
#define POOLED " pooled_bytes="

/*
 * Programs (this binary run as mode) that must print the same plain and
 * under the shim with env, and what the shim's log must show then: both,
 * in either allocator; heap, with jemalloc (LIBPOOL_ALLOCATOR=jemalloc,
 * the default); regions, with the per-allocation engine (test_preload
 * --regions). A heap_only case has no meaning with regions.
 */
struct plain_case {
	const char *name, *mode;
	const char *env[4];
	bool heap_only;
	struct expect both[4], heap[4], regions[3];
};

static const struct plain_case plain_cases[] = {
	/* Every member of the malloc family. The large blocks really were
	 * pooled (a, b, realloc'd a and c, posix_memalign, aligned_alloc:
	 * the 2 MiB-aligned one is libc's); with jemalloc, everything, in
	 * one heap paged through 256 KiB. */
	{ .name = "unmodified_program",
	  .mode = "prog",
	  .env = { "LIBPOOL_LOCAL_BYTES=256K", "LIBPOOL_LOG=info" },
	  .heap = { COUNT(MAP, EQ, 1), TOTAL(POOLED, GE, 64u << 20),
		    TOTAL(EVICTED, GT, 0) },
	  .regions = { COUNT(MAP, GE, 6) } },
	/*
	 * The shim's fixed cost: a 1 MiB program under a 64 MiB budget
	 * never needs the fabric, so the session never sets it up
	 * (fabric=0 in the shim's stats; libfabric's start-up, 0.3-0.6 s,
	 * is not paid) and its peak RSS stays far under the ~95 MiB it had
	 * when libfabric's tcp;ofi_rxm buffer pools (16 KiB buffers) came
	 * with every session. (This binary links libfabric itself, so
	 * prog_small's libfabric= says nothing here; tp_programs does not,
	 * see docs/bench/paging.md.) With LIBPOOL_FABRIC_BACKGROUND=0 the
	 * fabric is set up at connect (fabric=1) and the smaller pools
	 * (FI_OFI_RXM_BUFFER_SIZE=1024, fabric/fab.c) keep it well under
	 * that too.
	 */
	{ .name = "small_program_fixed_overhead",
	  .mode = "small",
	  .env = { "LIBPOOL_LOCAL_BYTES=64M" },
	  .both = { TOTAL(POOLED, GT, 0), COUNT(" fabric=0", EQ, 1),
		    TOTAL("hwm_kb=", LT, 32u << 10) } },
	{ .name = "small_program_fixed_overhead, fabric at connect",
	  .mode = "small",
	  .env = { "LIBPOOL_LOCAL_BYTES=64M", "LIBPOOL_FABRIC_BACKGROUND=0" },
	  .both = { TOTAL(POOLED, GT, 0), COUNT(" fabric=1", EQ, 1),
		    TOTAL("hwm_kb=", LT, 48u << 10) } },
	/*
	 * The engine asks for the fabric once half the budget is resident,
	 * so that evictions do not wait for its set-up (libfabric's load,
	 * 0.2 s, and its first fi_getinfo). A session with a same-host memd
	 * moves bytes through slab memfds and needs none: a program past
	 * half its budget (and one past it, evicting) never sets it up. It
	 * did before, and at 100 % local a short program waited at exit for
	 * a set-up nobody used. (Regions: per-allocation budgets, no
	 * process budget.)
	 */
	{ .name = "same_host_needs_no_fabric",
	  .mode = "half",
	  .env = { "LIBPOOL_LOCAL_BYTES=4M", "LIBPOOL_SHM=auto" },
	  .heap_only = true,
	  .heap = { TOTAL(" resident_peak_bytes=", GT, 2u << 20),
		    TOTAL(EVICTED, EQ, 0), COUNT(" fabric=0", EQ, 1) } },
	{ .name = "same_host_needs_no_fabric, evicting",
	  .mode = "half",
	  .env = { "LIBPOOL_LOCAL_BYTES=1M", "LIBPOOL_SHM=auto" },
	  .heap_only = true,
	  .heap = { TOTAL(EVICTED, GT, 0), COUNT(" fabric=0", EQ, 1) } },
	/* 3M (realloc), 9M (reallocarray), 5M: three regions; the 2M
	 * shrink keeps the 9M one and 300 bytes goes back to libc. The
	 * heap: one mapping for all of them. */
	{ .name = "realloc_across_threshold",
	  .mode = "realloc",
	  .env = { "LIBPOOL_LOCAL_BYTES=256K", "LIBPOOL_LOG=info" },
	  .both = { TOTAL(EVICTED, GT, 0), TOTAL(FETCHED, GT, 0) },
	  .heap = { COUNT(MAP, EQ, 1) },
	  .regions = { COUNT(MAP, EQ, 3),
		       COUNT("paging: unmap addr=", EQ, 3) } },
	/* 24 MiB through a 1 MiB budget: evicted and fetched again. */
	{ .name = "threads_fault_at_once",
	  .mode = "threads",
	  .env = { "LIBPOOL_LOCAL_BYTES=1M", "LIBPOOL_LOG=info" },
	  .both = { COUNT(MAP, EQ, 1), TOTAL(EVICTED, GE, 5000),
		    TOTAL(FETCHED, GE, 5000) } },
	/* prog_cxx(): C++ new and delete from a C program are the shim's:
	 * the 48 MiB from new went through the heap and its 4 MiB budget
	 * (the heap's test: regions leave small blocks to libc). */
	{ .name = "cxx_new_delete_from_c",
	  .mode = "cxx",
	  .env = { "LIBPOOL_LOCAL_BYTES=4M", "LIBPOOL_LOG=info" },
	  .heap_only = true,
	  .heap = { TOTAL(POOLED, GE, 48u << 20), TOTAL(EVICTED, GT, 0),
		    TOTAL(FETCHED, GT, 0) } },
	/* prog_split(): VMA boundaries inside the heap, under a budget
	 * small enough that runs are zero-filled, evicted and fetched
	 * across them. */
	{ .name = "mapping_split_by_program",
	  .mode = "split",
	  .env = { "LIBPOOL_LOCAL_BYTES=4M", "LIBPOOL_LOG=info" },
	  .both = { COUNT("raising SIGBUS", EQ, 0), TOTAL(EVICTED, GT, 0),
		    TOTAL(FETCHED, GT, 0) } },
	/* prog_deepbind(): pointers cross between the program and a
	 * library opened with RTLD_DEEPBIND, both ways, through a 4 MiB
	 * budget. */
	{ .name = "deepbind_library",
	  .mode = "deepbind",
	  .env = { "LIBPOOL_LOCAL_BYTES=4M", "LIBPOOL_LOG=info" },
	  .both = { COUNT("dlopen(RTLD_DEEPBIND) opens without", EQ, 1) } },
	/* prog_glibc(): glibc's own allocations and every alignment,
	 * through a small budget. */
	{ .name = "glibc_blocks_and_alignments",
	  .mode = "glibc",
	  .env = { "LIBPOOL_LOCAL_BYTES=4M" } },
	/* regions: each block is a region of its own, unmapped at free */
	{ .name = "freed_memory_purged",
	  .mode = "churn",
	  .env = { "LIBPOOL_LOCAL_BYTES=2M", "MALLOC_CONF=dirty_decay_ms:0" },
	  .heap = { TOTAL(" discarded=", GT, 0) } },
};

START_TEST(programs_same_as_plain)
{
	const struct plain_case *c = &plain_cases[_i];
	char err[128];

	if (regions && c->heap_only)
		return;
	start();
	same_as_plain(c->mode, c->env, err);
	expect_log(c->name, err, c->both);
	expect_log(c->name, err, regions ? c->regions : c->heap);
	stop();
}
END_TEST

START_TEST(sort_bigger_than_budget)
{
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=512K",
					   "LIBPOOL_LOG=info", NULL };
	char in[128], err[128];
	char *argv[] = { "sort", in, NULL };
	FILE *f;

	start();
	path(in, sizeof(in), "input.txt");
	/*
	 * 1.2 MiB of lines (the budget is 512 KiB): blocks of 64 in
	 * descending order, each block shuffled by a pattern. Merging such
	 * runs reads the text as a few sequential streams; a fully random
	 * input would thrash a budget this small on this 2-vCPU VM for
	 * minutes without testing anything more.
	 */
	f = fopen(in, "w");
	ck_assert_ptr_nonnull(f);
	for (int b = 60000 / 64; b >= 0; b--) {
		unsigned idx[64];

		for (unsigned i = 0; i < 64; i++)
			idx[i] = i;
		for (unsigned i = 63; i > 0; i--) {
			unsigned j = tu_pattern_byte(9, (uint64_t)b * 64 + i) %
				     (i + 1),
				 t = idx[i];

			idx[i] = idx[j];
			idx[j] = t;
		}
		for (unsigned i = 0; i < 64; i++) {
			unsigned k = (unsigned)b * 64 + idx[i];

			if (k < 60000)
				fprintf(f, "%08u %.*s\n", k, (int)(k % 23),
					"xxxxxxxxxxxxxxxxxxxxxxx");
		}
	}
	ck_assert_int_gt(ftell(f), 1 * MiB);
	fclose(f);
	same_output(argv, env, err);
	ck_assert_int_ge(count(err, MAP), 1);
	stop();
}
END_TEST

START_TEST(unreachable_pool)
{
	static const char *const off[] = { "LIBPOOL_ADDR=127.0.0.1:1", NULL };
	static const char *const req[] = { "LIBPOOL_ADDR=127.0.0.1:1",
					   "LIBPOOL_REQUIRED=1", NULL };
	char exe[4096], out[128], err[128];
	char *argv[] = { exe, "prog", NULL };
	int st;

	self_exe(exe, sizeof(exe), NULL);
	start();
	same_output(argv, off, err);
	ck_assert_int_eq(count(err, "libpool-preload: pool unreachable"), 1);
	st = run_named(argv, "shim", true, req, out, err);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
		      "LIBPOOL_REQUIRED=1: status %d", st);
	ck_assert_int_eq(count(err, "LIBPOOL_REQUIRED=1"), 1);
	stop();
}
END_TEST

/*
 * The shim must not bring libfabric with it: libfabric.so.1 loads
 * libinfinipath, whose constructor calibrates a clock by sleeping for
 * 0.2 s, in every process under the shim, before main(). fabric/fab_dl.c
 * defines the libfabric functions fab.c calls; one called directly
 * (fi_version(), once) put libfabric back into the shim's DT_NEEDED and
 * cost every pooled program 0.2 s. cat(1), which links nothing of ours,
 * prints its own mappings under the shim with a session (its stats line)
 * whose fabric was never needed.
 */
START_TEST(shim_does_not_load_libfabric)
{
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=64M", NULL };
	char *argv[] = { "cat", "/proc/self/maps", NULL };
	char out[128], err[128];
	int st;

	start();
	st = run_named(argv, "maps", true, env, out, err);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "cat: %d", st);
	ck_assert_int_ge(count(out, "libpool-preload"), 1);
	ck_assert_int_eq(count(err, " fabric=0"), 1);
	ck_assert_msg(count(out, "libfabric") == 0,
		      "libfabric is mapped in a process under the shim");
	ck_assert_int_eq(count(out, "libinfinipath"), 0);
	stop();
}
END_TEST

/* prog_kvmap's count of memfd mappings, run with or without the shim
 * and with env. */
static int kvmaps(bool preload, const char *const *env)
{
	char exe[4096], out[128], err[128];
	char *argv[] = { exe, "kvmap", md.addr, NULL };
	size_t len;
	char *text;
	int st, maps = -1;

	self_exe(exe, sizeof(exe), NULL);
	st = run_named(argv, "kvmap", preload, env, out, err);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "kvmap: %d (%s)", st,
		      err);
	text = slurp(out, &len);
	ck_assert_int_eq(sscanf(text, "kvmaps=%d", &maps), 1);
	free(text);
	return maps;
}

/*
 * A KV client's gets copy from read-only mappings of memd's slab files
 * (LIBPOOL_KV_MAP, on by default), but beside the shim they default to
 * pread: mapped pages would count in the resident set the shim bounds.
 * The shim's process is another copy of libpool than the client's (the
 * test binary's own): the client finds the shim's exported mark. An
 * explicit LIBPOOL_KV_MAP=on is honoured.
 */
START_TEST(kv_gets_unmapped_beside_the_shim)
{
	static const char *const on[] = { "LIBPOOL_KV_MAP=on", NULL };

	start();
	ck_assert_int_gt(kvmaps(false, NULL), 0);
	ck_assert_int_eq(kvmaps(true, NULL), 0);
	ck_assert_int_gt(kvmaps(true, on), 0);
	stop();
}
END_TEST

/* tests/programs/tp_jeuser.c: a program linked with libjemalloc.so.2 asks
 * malloc_usable_size() of glibc's blocks (those under LIBPOOL_MIN_BYTES)
 * and of pooled ones. */
START_TEST(jemalloc_linked_program)
{
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=4M",
					   "LIBPOOL_MIN_BYTES=1M", NULL };
	char exe[4096], err[128];
	char *argv[] = { exe, NULL };

	self_exe(exe, sizeof(exe), "tp_jeuser");
	start();
	same_output(argv, env, err);
	stop();
}
END_TEST

/* prog_badfree(): a pointer the shim cannot place is one line naming it
 * and SIGABRT, never jemalloc freeing the middle of a block. */
START_TEST(bad_free_named)
{
	char exe[4096], o[128], e[128];
	char *argv[] = { exe, "badfree", NULL };
	int st;

	if (regions)
		return; /* small blocks are glibc's there: glibc's check */
	self_exe(exe, sizeof(exe), NULL);
	start();
	st = run_named(argv, "shim", true, NULL, o, e);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "shim: %d",
		      st);
	ck_assert_int_eq(count(e, "libpool-preload: free(0x"), 1);
	ck_assert_int_eq(count(e, "not a pointer this process's allocators"),
			 1);
	stop();
}
END_TEST

/* The shim's fork test (prog_fork()): "fetch" with the evicted pages
 * fetched for the child (the default), else LIBPOOL_FORK_FETCH=0. */
static void fork_run(bool fetch)
{
	/* regions: a (2 MiB) fits its own budget; the heap: a is filled
	 * last and b's last page just before, within 8 MiB for both */
	const char *const env[] = { regions ? "LIBPOOL_LOCAL_BYTES=4M"
					    : "LIBPOOL_LOCAL_BYTES=8M",
				    "LIBPOOL_LOG=info",
				    /* fetch: the list ends here */
				    fetch ? NULL : "LIBPOOL_FORK_FETCH=0",
				    "TP_FORK_FENCE=1", NULL };
	char exe[4096], o[128], e[128];
	char *argv[] = { exe, "fork", NULL };
	size_t len;
	char *out;
	int st;

	self_exe(exe, sizeof(exe), NULL);
	start();
	st = run_named(argv, "shim", true, env, o, e);
	ck_assert_msg(WIFEXITED(st) && !WEXITSTATUS(st), "shim fork: %d", st);
	out = slurp(o, &len);
	/* fetch: 0, every byte of b read and rewritten in the child;
	 * else 42: the evicted page faulted (SIGSEGV on a fenced page). */
	ck_assert_msg(strstr(out, fetch ? "child status=0 exit=0\n"
					: "child status=10752 exit=42\n"),
		      "child: %s (35/36: an evicted page read without a "
		      "fault; 32-34: a resident page read wrong; 39: an "
		      "evicted page read wrong, 40: rewritten wrong; "
		      "status 139: SIGSEGV on a fenced page)",
		      out);
	ck_assert_ptr_nonnull(strstr(out, "parent a="));
	free(out);
	ck_assert_int_eq(count(e, MAP), regions ? 2 : 1);
	if (fetch)
		ck_assert_uint_gt(total(e, "paging: fork: fetched "), 0);
	stop();
}

START_TEST(fork_child_copy)
{
	fork_run(true);
}
END_TEST

START_TEST(fork_fetch_off)
{
	fork_run(false);
}
END_TEST

static void memd_killed(bool block, int want_sig, const char *want_msg)
{
	char exe[4096], o[128], e[128], pid[64];
	const char *env[] = { "LIBPOOL_LOCAL_BYTES=256K", pid,
			      block ? "TP_BLOCK_SIGBUS=1" : NULL, NULL };
	char *argv[] = { exe, "memdkill", NULL };
	int st;

	self_exe(exe, sizeof(exe), NULL);
	start();
	snprintf(pid, sizeof(pid), "TP_KILL_PID=%d", (int)md.pid);
	st = run_named(argv, "shim", true, env, o, e);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == want_sig,
		      "status %d: want signal %d (exit 5: served after memd "
		      "died; 6: a wrong byte)",
		      st, want_sig);
	ck_assert_int_eq(count(e, "cannot serve a fault, pool unreachable"), 1);
	ck_assert_int_eq(count(e, want_msg), 1);
	tu_memd_stop(&md, SIGKILL); /* reaps the memd the program killed */
	stop();
}

START_TEST(memd_killed_sigbus)
{
	memd_killed(false, SIGBUS, "raising SIGBUS");
}
END_TEST

START_TEST(memd_killed_sigbus_blocked)
{
	memd_killed(true, SIGABRT, "aborting rather than hand it a wrong");
}
END_TEST

/* The python3 to run: /usr/bin/python3 (Debian's), else one on PATH. */
static const char *python3(void)
{
	return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3"
						     : "python3";
}

START_TEST(python_hashes_a_large_bytearray)
{
	/* 200 MiB filled from a seeded generator in 64 KiB pieces (those
	 * stay in libc), scattered edits, then hashed: with an 8 MiB
	 * budget every page is evicted and fetched back. */
	static const char script[] =
		"import hashlib, random\n"
		"n = 200 << 20\n"
		"b = bytearray(n)\n"
		"r = random.Random(6)\n"
		"for i in range(0, n, 1 << 16):\n"
		"    b[i:i + (1 << 16)] = r.randbytes(1 << 16)\n"
		"for i in range(0, n, 4099 * 61):\n"
		"    b[i] ^= 0x5a\n"
		"print(len(b), hashlib.sha256(b).hexdigest(), b[12345], "
		"b[n - 1])\n"
		"del b\n";
	/* The bytearray itself was pooled, and went through the pool. */
	static const struct expect want[] = { TOTAL(EVICTED, GE, 40000),
					      TOTAL(FETCHED, GE, 40000),
					      { 0 } };
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=8M",
					   "LIBPOOL_LOG=info", NULL };
	char plain[128], err[128];
	char *argv[] = { (char *)python3(), "-c", (char *)script, NULL };
	size_t len;
	char *out;

	start();
	same_output(argv, env, err);
	path(plain, sizeof(plain), "plain.out");
	out = slurp(plain, &len);
	ck_assert_msg(!strncmp(out, "209715200 ", 10), "python3 said: %s", out);
	free(out);
	ck_assert_uint_ge(largest_map(err), 200ull << 20);
	expect_log("python3", err, want);
	stop();
}
END_TEST

static struct tu_huge hugetlb;

/*
 * LIBPOOL_HUGE_PAGES=required: allocations of 16 MiB and more are paged
 * in 2 MiB hugetlb pages through an 8 MiB budget each (smaller ones go
 * to libc: too small for huge pages), and the programs' output is
 * byte-identical to a plain run. memd runs with hugepages = no: its
 * default (auto) would take the hugetlb pages reserved here for the
 * program.
 */
START_TEST(huge_pages_required)
{
	static const char *const env[] = { "LIBPOOL_LOCAL_BYTES=8M",
					   "LIBPOOL_HUGE_PAGES=required",
					   "LIBPOOL_LOG=info", NULL };
	/* 24 MiB through 8 MiB: huge pages evicted and fetched again. */
	static const struct expect threads[] = { COUNT(MAP, EQ, 1),
						 COUNT(" page=2097152 ", EQ, 1),
						 TOTAL(EVICTED, GE, 8),
						 TOTAL(FETCHED, GE, 8),
						 { 0 } };
	static const struct expect stream[] = { COUNT(MAP, EQ, 2),
						COUNT(" page=2097152 ", EQ, 2),
						TOTAL(EVICTED, GE, 20),
						TOTAL(" writebacks=", GE, 20),
						{ 0 } };
	char err[128], why[256];
	int r;

	/* Huge pages are the per-allocation engine's (the heap pages in
	 * 4 KiB). realloc holds two 8 MiB budgets at once; one spare. */
	regions = true;
	r = tu_huge_reserve(&hugetlb, 9, why, sizeof(why));
	ck_assert_msg(r == 0, "hugetlb pages: %s", why);
	ck_assert_int_eq(tu_scratch_dir(tmpdir, sizeof(tmpdir), "preload"), 0);
	r = tu_memd_start(&md, "hugepages = no");
	ck_assert_msg(r == 0, "memd did not start: %s", strerror(-r));

	same_as_plain("threads", env, err);
	expect_log("threads", err, threads);
	same_as_plain("stream", env, err);
	expect_log("stream", err, stream);
	stop();
	tu_huge_release(&hugetlb);
}
END_TEST

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc;

	if (argc > 1 && !strcmp(argv[1], "prog"))
		return prog_main();
	if (argc > 1 && !strcmp(argv[1], "realloc"))
		return prog_realloc();
	if (argc > 1 && !strcmp(argv[1], "threads"))
		return prog_threads();
	if (argc > 1 && !strcmp(argv[1], "fork"))
		return prog_fork();
	if (argc > 1 && !strcmp(argv[1], "churn"))
		return prog_churn();
	if (argc > 1 && !strcmp(argv[1], "memdkill"))
		return prog_memdkill();
	if (argc > 1 && !strcmp(argv[1], "stream"))
		return prog_stream();
	if (argc > 1 && !strcmp(argv[1], "small"))
		return prog_small();
	if (argc > 1 && !strcmp(argv[1], "half"))
		return prog_half();
	if (argc > 1 && !strcmp(argv[1], "cxx"))
		return prog_cxx();
	if (argc > 1 && !strcmp(argv[1], "split"))
		return prog_split();
	if (argc > 1 && !strcmp(argv[1], "deepbind"))
		return prog_deepbind();
	if (argc > 1 && !strcmp(argv[1], "badfree"))
		return prog_badfree();
	if (argc > 1 && !strcmp(argv[1], "glibc"))
		return prog_glibc();
	if (argc > 2 && !strcmp(argv[1], "kvmap"))
		return prog_kvmap(argv[2]);
	tu_need_memd();
	if (!getenv("TP_PRELOAD") || access(getenv("TP_PRELOAD"), R_OK))
		tu_skip("TP_PRELOAD is not set: libpool-preload.so is not "
			"built here (sanitizer build?)");
	if (access("/dev/userfaultfd", R_OK | W_OK))
		tu_skip("/dev/userfaultfd is not accessible: the shim would "
			"run user-mode-only, where read(2) into pooled "
			"buffers fails (see libpool-preload(8))");
	s = suite_create("preload");
	tc = tcase_create("preload");
	tcase_set_timeout(tc, 120);
	if (argc > 1 && !strcmp(argv[1], "--regions"))
		regions = true; /* ctest: test_preload_regions */
	if (argc > 1 && !strcmp(argv[1], "--huge")) {
		/* ctest: test_preload_huge, skipped where no hugetlb pages
		 * can be had (a test of its own: the skip hides no other). */
		char why[256];

		if (tu_huge_reserve(&hugetlb, 9, why, sizeof(why)))
			tu_skip("%s", why);
		tu_huge_release(&hugetlb);
		tcase_add_test(tc, huge_pages_required);
		goto run;
	}
	tcase_add_loop_test(tc, programs_same_as_plain, 0,
			    sizeof(plain_cases) / sizeof(plain_cases[0]));
	TU_ADD_TESTS(tc, sort_bigger_than_budget, unreachable_pool,
		     shim_does_not_load_libfabric,
		     kv_gets_unmapped_beside_the_shim, jemalloc_linked_program,
		     bad_free_named, fork_child_copy, fork_fetch_off,
		     memd_killed_sigbus, memd_killed_sigbus_blocked,
		     python_hashes_a_large_bytearray);
run:
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
