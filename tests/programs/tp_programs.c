// SPDX-License-Identifier: MIT
/*
 * tests/programs/tp_programs.c - an unmodified multi-threaded program for
 * tests/programs/run.sh (plain malloc family, no tidepool API), and the
 * generator of its deterministic inputs.
 *
 *   tp_programs threads MIB   8 threads, each keeping about MIB/8 MiB
 *                             live: malloc/calloc of 16 B .. 1 MiB,
 *                             realloc growth, posix_memalign and
 *                             aligned_alloc of odd power-of-two
 *                             alignments, malloc_usable_size, frees; the
 *                             main thread fork+execs /bin/true meanwhile.
 *                             Prints one checksum per thread and a total.
 *   tp_programs lines MIB     MIB MiB of text lines derived from their
 *                             index (sort's input), on stdout.
 *   tp_programs runs MIB      the same with keys in descending blocks of
 *                             64 lines, shuffled inside each block
 *   tp_programs hot MIB       an array of MIB MiB filled, then random
 *                             read-modify-writes, 80 % of them to its
 *                             first 30 % (a hot set; bench/paging_programs.sh)
 *   tp_programs hotpage MIB   the same hot set with work per access: an
 *                             array of MIB MiB filled, then 16 random
 *                             page reads per 4 KiB page, 80 % of them to
 *                             its first 30 %, each summing the whole page
 *                             (bench/paging_programs.sh)
 *   tp_programs scan MIB      an array of MIB MiB filled, then summed in
 *                             4 sequential passes (bench/paging_programs.sh)
 *   tp_programs hash MIB      an open-addressing hash table of MIB MiB
 *                             (16-byte slots) filled to 1/2, then as many
 *                             random lookups, half of them misses
 *   tp_programs hash MIB zipf THETA
 *                             the same table, then as many lookups of
 *                             keys drawn with Zipf popularity THETA (0.99:
 *                             YCSB's; a cache's skew, as memcached's ETC),
 *                             all hits; the keys' ranks are scrambled
 *                             over the keys (and the keys hash over the
 *                             table), so hot keys are not adjacent
 *
 * Every byte written is derived from (thread, block, offset) and checked
 * before it is freed or grown, so a wrong byte changes the exit status
 * (2..9) or the printed checksum.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NTHREADS 8
#define SLOTS 256

static size_t per_thread_bytes;
static uint64_t thread_sum[NTHREADS];
static int thread_err[NTHREADS];

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x9e3779b97f4a7c15ull;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 32);
}

/* Fills [from, to) of b with the pattern of seed. */
static void fill(uint8_t *b, size_t from, size_t to, uint64_t seed)
{
	uint64_t w = mix(seed + (from >> 3));

	for (size_t i = from; i < to; i++) {
		if (!(i & 7))
			w = mix(seed + (i >> 3));
		b[i] = (uint8_t)(w >> ((i & 7) * 8));
	}
}

/* Checks [0, n) of b; adds it to *sum. Returns false on a wrong byte. */
static bool check(const uint8_t *b, size_t n, uint64_t seed, uint64_t *sum)
{
	uint64_t s = 0, w = 0;

	for (size_t i = 0; i < n; i++) {
		if (!(i & 7))
			w = mix(seed + (i >> 3));
		if (b[i] != (uint8_t)(w >> ((i & 7) * 8)))
			return false;
		s = s * 131 + b[i];
	}
	*sum += s ^ n;
	return true;
}

struct slot {
	uint8_t *p;
	size_t n;
	uint64_t seed;
};

static void *thread_main(void *arg)
{
	static const size_t aligns[] = { 32,   64,    256,     2048,
					 8192, 65536, 1 << 20, 1 << 21 };
	size_t t = (size_t)(uintptr_t)arg, live = 0;
	struct slot s[SLOTS] = { 0 };
	uint64_t x = mix(t + 1), sum = 0;
	char name[16];

	snprintf(name, sizeof(name), "prog-%zu", t);
	pthread_setname_np(pthread_self(), name);
	for (uint64_t op = 0; op < 6000; op++) {
		struct slot *e = &s[(x = mix(x)) % SLOTS];
		unsigned kind = (unsigned)(x >> 40) % 8;
		size_t n = (size_t)16 << ((x >> 20) % 17); /* 16 B .. 1 MiB */

		n += (x >> 50) % n;
		if (e->p) {
			if (!check(e->p, e->n, e->seed, &sum)) {
				thread_err[t] = 2;
				return NULL;
			}
			if (kind == 0 && live + e->n < per_thread_bytes) {
				/* realloc growth: old bytes kept, tail new */
				size_t m = e->n * 2 + 100;
				uint8_t *q = realloc(e->p, m);

				if (!q) {
					thread_err[t] = 3;
					return NULL;
				}
				fill(q, e->n, m, e->seed);
				live += m - e->n;
				e->p = q;
				e->n = m;
				continue;
			}
			live -= e->n;
			free(e->p);
			e->p = NULL;
		}
		if (live + n > per_thread_bytes)
			continue;
		e->seed = mix(op * NTHREADS + t);
		if (kind == 1) {
			size_t a = aligns[(x >> 8) % 8];
			void *q = NULL;

			if (posix_memalign(&q, a, n) || (uintptr_t)q % a) {
				thread_err[t] = 4;
				return NULL;
			}
			e->p = q;
		} else if (kind == 2) {
			size_t a = aligns[(x >> 8) % 8];

			n = (n + a - 1) / a * a; /* C11: a multiple */
			e->p = aligned_alloc(a, n);
			if (!e->p || (uintptr_t)e->p % a) {
				thread_err[t] = 5;
				return NULL;
			}
		} else if (kind == 3) {
			e->p = calloc(1, n);
			if (!e->p) {
				thread_err[t] = 6;
				return NULL;
			}
			for (size_t i = 0; i < n; i += 4096 - 1)
				if (e->p[i]) {
					thread_err[t] = 7;
					return NULL;
				}
		} else {
			e->p = malloc(n);
		}
		if (!e->p) {
			thread_err[t] = 8;
			return NULL;
		}
		if (malloc_usable_size(e->p) < n) {
			thread_err[t] = 9;
			return NULL;
		}
		e->n = n;
		live += n;
		fill(e->p, 0, n, e->seed);
	}
	for (int i = 0; i < SLOTS; i++)
		if (s[i].p) {
			if (!check(s[i].p, s[i].n, s[i].seed, &sum)) {
				thread_err[t] = 2;
				return NULL;
			}
			free(s[i].p);
		}
	thread_sum[t] = sum;
	return NULL;
}

static int run_threads(size_t mib)
{
	pthread_t th[NTHREADS];
	uint64_t total = 0;
	int forks = 0;

	per_thread_bytes = (mib << 20) / NTHREADS;
	for (size_t t = 0; t < NTHREADS; t++)
		if (pthread_create(&th[t], NULL, thread_main,
				   (void *)(uintptr_t)t))
			return 10;
	/* fork+exec while the threads allocate: the child starts afresh. */
	for (int i = 0; i < 4; i++) {
		pid_t pid = fork();
		int st;

		if (pid < 0)
			return 11;
		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
		    WEXITSTATUS(st))
			return 12;
		forks++;
		usleep(100 * 1000);
	}
	for (size_t t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	for (size_t t = 0; t < NTHREADS; t++) {
		if (thread_err[t]) {
			fprintf(stderr, "thread %zu: error %d\n", t,
				thread_err[t]);
			return thread_err[t];
		}
		printf("thread %zu sum=%016llx\n", t,
		       (unsigned long long)thread_sum[t]);
		total ^= mix(thread_sum[t] + t);
	}
	printf("forks=%d total=%016llx\n", forks, (unsigned long long)total);
	return 0;
}

/* Lines "KEY WORDS": KEY pseudo-random (duplicates happen), WORDS of
 * varying length, so sort compares beyond the first field sometimes. */
/* runs != 0: keys in descending blocks of 64, shuffled inside each
 * block (a sort merges long runs: its reads are a few streams) */
static int run_lines(size_t mib, bool runs)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyz";
	size_t want = mib << 20, have = 0;
	char line[160];

	for (uint64_t i = 0; have < want; i++) {
		uint64_t x = mix(i),
			 key = runs ? (~i >> 6) % 4000000000ull * 64 +
					       mix(i >> 6 ^ (i & 63)) % 64
				    : x % 4000000000ull;
		int len = snprintf(line, sizeof(line), "%012llu ",
				   (unsigned long long)key);
		int w = 8 + (int)(x >> 58);

		for (int k = 0; k < w; k++)
			line[len++] = alpha[mix(x + (uint64_t)k) % 26];
		line[len++] = '\n';
		if (fwrite(line, 1, (size_t)len, stdout) != (size_t)len)
			return 1;
		have += (size_t)len;
	}
	return fflush(stdout) ? 1 : 0;
}

static int run_scan(size_t mib)
{
	size_t n = (mib << 20) / 8;
	uint64_t *a = malloc(n * 8), s = 0;

	if (!a)
		return 1;
	for (size_t i = 0; i < n; i++)
		a[i] = mix(i);
	for (int pass = 0; pass < 4; pass++)
		for (size_t i = 0; i < n; i++)
			s += a[i] ^ (uint64_t)pass;
	printf("scan n=%zu sum=%016llx\n", n, (unsigned long long)s);
	free(a);
	return 0;
}

/*
 * A hot set: an array of MIB MiB filled, then 2 * (its words) random
 * read-modify-writes of which 80 % fall in its first 30 % (the hot set,
 * contiguous) and 20 % anywhere else. With a budget above 30 % of the
 * array the hot set stays resident and only the cold 20 % fault
 * (issue 28's "hot set fits the budget" workload).
 */
static int run_hot(size_t mib)
{
	size_t n = (mib << 20) / 8, hot = n * 3 / 10;
	uint64_t *a = malloc(n * 8), s = 0, x = 88172645463325252ull;

	if (!a || hot == 0 || hot == n)
		return 1;
	for (size_t i = 0; i < n; i++)
		a[i] = mix(i);
	for (size_t k = 0; k < 2 * n; k++) {
		size_t i;

		x ^= x << 13; /* xorshift64: deterministic */
		x ^= x >> 7;
		x ^= x << 17;
		i = (x >> 32) % 10 < 8 ? (size_t)(x % hot)
				       : hot + (size_t)(x % (n - hot));
		a[i] = a[i] * 31 + k;
		s += a[i];
	}
	printf("hot n=%zu sum=%016llx\n", n, (unsigned long long)s);
	free(a);
	return 0;
}

/*
 * The hot set with work per access: an array of MIB MiB filled, then
 * 16 * (its 4 KiB pages) random page accesses, 80 % of them to its first
 * 30 % of pages (contiguous) and 20 % to the rest, each reading and
 * summing the whole page (512 words), nothing written after the fill.
 * run_hot()'s 8-byte read-modify-writes make each access ~25 ns of work,
 * so every miss (a fault of 10-30 us) weighs ~1000 accesses; here an
 * access is the unit the pager moves, a page used whole (a row of a
 * table, a block of a cache), so the figure says what a hot set costs a
 * program that works on what it touches.
 */
static int run_hotpage(size_t mib)
{
	size_t n = (mib << 20) / 8, pw = 4096 / 8, np = n / pw;
	size_t hot = np * 3 / 10;
	uint64_t *a = malloc(n * 8), s = 0, x = 88172645463325252ull;

	if (!a || hot == 0 || hot == np)
		return 1;
	for (size_t i = 0; i < n; i++)
		a[i] = mix(i);
	for (size_t k = 0; k < 16 * np; k++) {
		const uint64_t *pg;
		uint64_t t = 0;

		x ^= x << 13; /* xorshift64: deterministic */
		x ^= x >> 7;
		x ^= x << 17;
		pg = a + pw * ((x >> 32) % 10 < 8
				       ? (size_t)(x % hot)
				       : hot + (size_t)(x % (np - hot)));
		for (size_t w = 0; w < pw; w++)
			t += pg[w] ^ w;
		s = s * 31 + t;
	}
	printf("hotpage pages=%zu sum=%016llx\n", np, (unsigned long long)s);
	free(a);
	return 0;
}

/*
 * Zipf-distributed ranks 0..n-1 (rank 0 the most popular), the
 * generator of YCSB (Gray et al., "Quickly generating billion-record
 * synthetic databases", SIGMOD 1994), from a deterministic sequence.
 */
struct zipf {
	double theta, alpha, zetan, eta, half;
	size_t n;
	uint64_t seq;
};

static void zipf_init(struct zipf *z, size_t n, double theta)
{
	double zeta2 = 1.0 + pow(0.5, theta);

	z->n = n;
	z->theta = theta;
	z->zetan = 0;
	for (size_t i = 1; i <= n; i++)
		z->zetan += 1.0 / pow((double)i, theta);
	z->alpha = 1.0 / (1.0 - theta);
	z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) /
		 (1.0 - zeta2 / z->zetan);
	z->half = pow(0.5, theta);
	z->seq = 0;
}

static size_t zipf_next(struct zipf *z)
{
	double u = (double)(mix(++z->seq ^ 0x5851f42d4c957f2dull) >> 11) *
		   (1.0 / 9007199254740992.0);
	double uz = u * z->zetan;
	size_t r;

	if (uz < 1.0)
		return 0;
	if (uz < 1.0 + z->half)
		return 1;
	r = (size_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
	return r < z->n ? r : z->n - 1;
}

/* theta > 0: the lookups are Zipf(theta) hits (hashz); else uniform,
 * half misses (hash). */
static int run_hash(size_t mib, double theta)
{
	size_t nslots = (mib << 20) / 16, mask, n;
	uint64_t(*t)[2], hits = 0, s = 0;
	struct zipf z = { 0 };

	while (nslots & (nslots - 1))
		nslots &= nslots - 1;
	mask = nslots - 1;
	n = nslots / 2;
	t = calloc(nslots, sizeof(*t));
	if (!t)
		return 1;
	for (uint64_t i = 1; i <= n; i++) {
		uint64_t k = mix(i) | 1;
		size_t h = (size_t)mix(k) & mask;

		while (t[h][0] && t[h][0] != k)
			h = (h + 1) & mask;
		t[h][0] = k;
		t[h][1] = i;
	}
	if (theta > 0)
		zipf_init(&z, n, theta);
	for (uint64_t i = 1; i <= n; i++) {
		/* odd i: a key inserted; even i: most likely a miss */
		uint64_t k = i & 1 ? mix(mix(i) % n + 1) | 1 : mix(i) & ~1ull;
		size_t h;

		if (theta > 0) /* rank r is key number mix(r) % n + 1 */
			k = mix(mix((uint64_t)zipf_next(&z)) % n + 1) | 1;
		h = (size_t)mix(k) & mask;

		while (t[h][0] && t[h][0] != k)
			h = (h + 1) & mask;
		if (t[h][0] == k) {
			hits++;
			s += t[h][1];
		}
	}
	printf("hash slots=%zu hits=%llu sum=%016llx\n", nslots,
	       (unsigned long long)hits, (unsigned long long)s);
	free(t);
	return 0;
}

int main(int argc, char **argv)
{
	size_t mib;
	double theta = 0;

	if (argc == 5 && !strcmp(argv[1], "hash") && !strcmp(argv[3], "zipf")) {
		theta = strtod(argv[4], NULL);
		if (!(theta > 0 && theta < 1)) {
			fprintf(stderr, "tp_programs: zipf THETA in (0, 1)\n");
			return 64;
		}
		argc = 3;
	}
	if (argc != 3 || !(mib = strtoul(argv[2], NULL, 0))) {
		fprintf(stderr, "usage: tp_programs "
				"threads|lines|runs|scan|hash|hot|hotpage "
				"MIB, "
				"tp_programs hash MIB zipf THETA\n");
		return 64;
	}
	if (!strcmp(argv[1], "threads"))
		return run_threads(mib);
	if (!strcmp(argv[1], "lines"))
		return run_lines(mib, false);
	if (!strcmp(argv[1], "runs"))
		return run_lines(mib, true);
	if (!strcmp(argv[1], "scan"))
		return run_scan(mib);
	if (!strcmp(argv[1], "hash"))
		return run_hash(mib, theta);
	if (!strcmp(argv[1], "hot"))
		return run_hot(mib);
	if (!strcmp(argv[1], "hotpage"))
		return run_hotpage(mib);
	fprintf(stderr, "tp_programs: threads, lines, runs, scan, hash, hot "
			"or hotpage\n");
	return 64;
}
