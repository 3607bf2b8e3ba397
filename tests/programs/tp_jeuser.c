// SPDX-License-Identifier: MIT
/*
 * tests/programs/tp_jeuser.c - a program linked with libjemalloc.so.2, as
 * Debian's redis-server and redis-cli are (test_preload's
 * jemalloc_linked_program): jemalloc comes before glibc in its global
 * scope. It asks malloc_usable_size() of every block, small and large,
 * as redis's zmalloc does, and prints what it computed. Under the shim
 * with LIBPOOL_MIN_BYTES set, the small blocks are glibc's: the shim
 * found "the next" malloc_usable_size with dlsym(RTLD_NEXT), jemalloc's,
 * and jemalloc read a glibc pointer (redis-cli's segfault, issue 28).
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	static void *p[4096];
	uint64_t s = 0;

	for (size_t i = 0; i < 4096; i++) {
		size_t n = i % 7 == 0 ? (2u << 20) + i : 16 + i * 3;

		p[i] = malloc(n);
		if (!p[i])
			return 2;
		memset(p[i], (int)i, n);
		if (malloc_usable_size(p[i]) < n)
			return 3;
		s = s * 31 + ((uint8_t *)p[i])[n - 1];
	}
	for (size_t i = 0; i < 4096; i += 2) {
		p[i] = realloc(p[i], 100 + i);
		if (!p[i] || malloc_usable_size(p[i]) < 100 + i)
			return 4;
	}
	for (size_t i = 0; i < 4096; i++)
		free(p[i]);
	printf("jeuser=%016llx\n", (unsigned long long)s);
	return 0;
}
