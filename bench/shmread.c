// SPDX-License-Identifier: MIT
/*
 * bench/shmread.c - what a same-host read of a slab's file costs on this
 * machine, by the ways a client could read it (docs/design.md,
 * "Co-located clients over shm"; docs/bench/poolbench.md, "Huge pages
 * for same-host reads"). No memd, no network.
 *
 *   shmread [SIZE [DIR [ITERS]]]
 *
 * One 64 MiB file, written once: a memfd, or with DIR an unnamed file
 * (O_TMPFILE) of that directory (a tmpfs mounted huge=always gives it
 * 2 MiB pages). ITERS (default 400) reads of SIZE bytes (default 1 MiB)
 * at random SIZE-aligned offsets, p50 and p10 in microseconds, by:
 *   memcpy         from an anonymous 256 MiB buffer (the baseline)
 *   pread          what libpool does
 *   map_warm       a persistent read-only mapping, pages left mapped
 *                  (LIBPOOL_SHM=map: RSS grows with every page read)
 *   map+dontneed   the same, MADV_DONTNEED after each copy (RSS bounded)
 *   map+populate   MADV_POPULATE_READ first, then copy and MADV_DONTNEED
 *   mmap+munmap    a transient window per read
 *   mmap_pop       the same with MAP_POPULATE
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/benchutil.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define FILE_BYTES (64ul << 20)
#define ANON_BYTES (256ul << 20)
#define NWAYS 7

int main(int argc, char **argv)
{
	static const char *const names[NWAYS] = {
		"memcpy",	"pread",       "map_warm", "map+dontneed",
		"map+populate", "mmap+munmap", "mmap_pop",
	};
	char *end = NULL;
	size_t len = argc > 1 ? strtoul(argv[1], &end, 0) : 1u << 20;
	const char *dir = argc > 2 && argv[2][0] ? argv[2] : NULL;
	int iters = argc > 3 ? atoi(argv[3]) : 400;
	uint8_t *w, *anon, *dst;
	double *t;
	char path[64];
	int fd, ro;

	if (end && (*end == 'K' || *end == 'k'))
		len <<= 10, end++;
	else if (end && (*end == 'M' || *end == 'm'))
		len <<= 20, end++;
	if ((end && *end) || !len || len % 4096 || len > FILE_BYTES ||
	    FILE_BYTES % len || iters < 1) {
		fprintf(stderr,
			"usage: shmread [SIZE [DIR [ITERS]]] (SIZE: "
			"a multiple of 4K that divides 64M, e.g. 1M)\n");
		return 2;
	}
	fd = dir ? open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)
		 : memfd_create("shmread", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)FILE_BYTES)) {
		perror(dir ? dir : "memfd_create");
		return 1;
	}
	w = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	anon = malloc(ANON_BYTES);
	dst = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	t = malloc((size_t)iters * sizeof(*t));
	if (w == MAP_FAILED || !anon || !dst || !t) {
		perror("shmread: memory");
		return 1;
	}
	memset(w, 7, FILE_BYTES);
	memset(anon, 3, ANON_BYTES);
	memset(dst, 0, len);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0) {
		perror(path);
		return 1;
	}
	printf("# shmread file=%s size=%zu iters=%d\n", dir ? dir : "memfd",
	       len, iters);
	srand(1);
	for (int m = 0; m < NWAYS; m++) {
		uint8_t *map =
			mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, ro, 0);

		if (map == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		for (int i = 0; i < iters; i++) {
			size_t off = (size_t)rand() % (FILE_BYTES / len) * len;
			double a = bench_now_us();
			uint8_t *x;

			switch (m) {
			case 0:
				memcpy(dst,
				       anon + (size_t)rand() %
						       (ANON_BYTES / len) * len,
				       len);
				break;
			case 1:
				if (pread(fd, dst, len, (off_t)off) !=
				    (ssize_t)len) {
					perror("pread");
					return 1;
				}
				break;
			case 2:
				memcpy(dst, map + off, len);
				break;
			case 3:
				memcpy(dst, map + off, len);
				madvise(map + off, len, MADV_DONTNEED);
				break;
			case 4:
				madvise(map + off, len, MADV_POPULATE_READ);
				memcpy(dst, map + off, len);
				madvise(map + off, len, MADV_DONTNEED);
				break;
			default:
				x = mmap(NULL, len, PROT_READ,
					 MAP_SHARED |
						 (m == 6 ? MAP_POPULATE : 0),
					 ro, (off_t)off);
				if (x == MAP_FAILED) {
					perror("mmap");
					return 1;
				}
				memcpy(dst, x, len);
				munmap(x, len);
				break;
			}
			t[i] = bench_now_us() - a;
		}
		munmap(map, FILE_BYTES);
		bench_sort_doubles(t, (size_t)iters);
		printf("shmread way=%s size=%zu p50_us=%.1f p10_us=%.1f "
		       "MBps_p50=%.0f\n",
		       names[m], len, t[iters / 2], t[iters / 10],
		       (double)len / t[iters / 2]);
	}
	return 0;
}
