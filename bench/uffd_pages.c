// SPDX-License-Identifier: MIT
/*
 * bench/uffd_pages.c - what the paging engine's page-table steps cost on
 * this machine, 4 KiB pages against 2 MiB hugetlb pages (the two page
 * sizes of pool_map, libpool/paging.c). No memd, no network.
 *
 *   uffd_pages [MiB] [runs]
 *
 * For each page size, over MiB (default 32) of a userfaultfd-registered
 * range, runs times (default 5), medians reported per 4 KiB of memory:
 *   install  UFFDIO_COPY of 2 MiB at a time (protected, MODE_WP), as
 *            pool-uffd installs a fetched run
 *   touch    the program's first read of each 4 KiB after the install
 *            (on a guest with shadow or paravirtual paging this is where
 *            a new page-table entry is paid for)
 *   retouch  the same reads again (the floor: a mapped page)
 *   drop     MADV_DONTNEED of the range, as eviction drops pages
 * The baseline, in the same run: memcpy of 2 MiB from and to memory
 * already mapped (what the install has to copy anyway).
 *
 * The hugetlb half needs MiB/2 free 2 MiB huge pages (vm.nr_hugepages);
 * without them it says so and measures the 4 KiB half only.
 * Results: docs/bench/paging.md ("Why huge pages").
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)
#endif
#define HP (2ul << 20)
#define PG 4096ul
#define MAX_RUNS 15

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

/* Loads land here, so that the compiler keeps them. */
static volatile uint64_t sink;

/* One page size: returns 0, or -1 when the range cannot be had. */
static int measure(bool huge, size_t len, int runs, const uint8_t *src)
{
	double ins[MAX_RUNS], tch[MAX_RUNS], re[MAX_RUNS], drp[MAX_RUNS];
	size_t n4k = len / PG;
	struct uffdio_api api = {
		.api = UFFD_API,
		.features = huge ? UFFD_FEATURE_MISSING_HUGETLBFS |
					    UFFD_FEATURE_WP_HUGETLBFS_SHMEM
				 : 0,
	};
	struct uffdio_register reg = {
		.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
	};
	uint8_t *r;
	int fd;

	fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
	if (fd < 0 || ioctl(fd, UFFDIO_API, &api)) {
		fprintf(stderr, "uffd_pages: userfaultfd: %s\n",
			strerror(errno));
		return -1;
	}
	r = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS |
			 (huge ? MAP_HUGETLB | MAP_HUGE_2MB : 0),
		 -1, 0);
	if (r == MAP_FAILED) {
		fprintf(stderr, "uffd_pages: %s range: %s\n",
			huge ? "hugetlb" : "anonymous", strerror(errno));
		close(fd);
		return -1;
	}
	if (!huge)
		madvise(r, len, MADV_NOHUGEPAGE); /* as pool_map */
	reg.range.start = (uintptr_t)r;
	reg.range.len = len;
	if (ioctl(fd, UFFDIO_REGISTER, &reg)) {
		fprintf(stderr, "uffd_pages: register: %s\n", strerror(errno));
		munmap(r, len);
		close(fd);
		return -1;
	}
	/* Run 0 is a warm-up: a fresh hugetlb page's first use makes the
	 * host back it (milliseconds); pool_map reuses pages after that. */
	for (int k = -1; k < runs; k++) {
		double t = now_s(), t1, t2, t3, t4;

		for (size_t o = 0; o < len; o += HP) {
			struct uffdio_copy c = {
				.dst = (uintptr_t)r + o,
				.src = (uintptr_t)src,
				.len = HP,
				.mode = UFFDIO_COPY_MODE_WP,
			};

			if (ioctl(fd, UFFDIO_COPY, &c)) {
				fprintf(stderr, "uffd_pages: UFFDIO_COPY: %s\n",
					strerror(errno));
				return -1;
			}
		}
		t1 = now_s();
		for (size_t o = 0; o < len; o += PG)
			sink += r[o];
		t2 = now_s();
		for (size_t o = 0; o < len; o += PG)
			sink += r[o];
		t3 = now_s();
		madvise(r, len, MADV_DONTNEED);
		t4 = now_s();
		if (k < 0)
			continue;
		ins[k] = (t1 - t) * 1e6 / (double)n4k;
		tch[k] = (t2 - t1) * 1e6 / (double)n4k;
		re[k] = (t3 - t2) * 1e6 / (double)n4k;
		drp[k] = (t4 - t3) * 1e6 / (double)n4k;
	}
	printf("uffd_pages page=%s install_us=%.3f touch_us=%.3f "
	       "retouch_us=%.3f drop_us=%.3f (per 4 KiB, medians of %d)\n",
	       huge ? "2M" : "4K", median(ins, runs), median(tch, runs),
	       median(re, runs), median(drp, runs), runs);
	munmap(r, len);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 32;
	int runs = argc > 2 ? atoi(argv[2]) : 5;
	double cp[MAX_RUNS];
	uint8_t *src, *dst;
	int ret = 0;

	if (mib < 2 || mib % 2 || runs < 1 || runs > MAX_RUNS) {
		fprintf(stderr, "usage: %s [MiB, even, >= 2] [runs, 1..%d]\n",
			argv[0], MAX_RUNS);
		return 2;
	}
	src = aligned_alloc(HP, HP);
	dst = aligned_alloc(HP, HP);
	if (!src || !dst)
		return 1;
	memset(src, 0x5a, HP);
	memset(dst, 0, HP);
	for (int k = 0; k < runs; k++) {
		double t = now_s();

		memcpy(dst, src, HP);
		__asm__ volatile("" : : "r"(dst) : "memory");
		cp[k] = (now_s() - t) * 1e6 / (double)(HP / PG);
	}
	printf("# uffd_pages bytes=%zu runs=%d\n", mib << 20, runs);
	printf("uffd_pages baseline=memcpy_2M us=%.3f (per 4 KiB)\n",
	       median(cp, runs));
	if (measure(false, mib << 20, runs, src))
		ret = 1;
	if (measure(true, mib << 20, runs, src))
		printf("uffd_pages page=2M skipped: needs %zu free 2 MiB huge "
		       "pages (vm.nr_hugepages)\n",
		       mib / 2);
	free(src);
	free(dst);
	return ret;
}
