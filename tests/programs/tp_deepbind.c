// SPDX-License-Identifier: MIT
/*
 * tests/programs/tp_deepbind.c - a library that a program dlopen()s with
 * RTLD_DEEPBIND (test_preload's "deepbind", tests/programs/run.sh's
 * deepbind): it allocates what the program frees and frees what the
 * program allocated. Deep binding would bind its malloc and free to
 * glibc's while the program's are the shim's.
 */
#include <stdlib.h>
#include <string.h>

char *tp_deepbind_dup(const char *s, size_t times);
void tp_deepbind_free(void *p);
void *tp_deepbind_grow(void *p, size_t n);

/* s repeated times times, from this library's malloc */
char *tp_deepbind_dup(const char *s, size_t times)
{
	size_t n = strlen(s);
	char *d = malloc(n * times + 1);

	if (!d)
		return NULL;
	for (size_t i = 0; i < times; i++)
		memcpy(d + i * n, s, n);
	d[n * times] = '\0';
	return d;
}

/* frees p with this library's free */
void tp_deepbind_free(void *p)
{
	free(p);
}

/* realloc of p with this library's realloc */
void *tp_deepbind_grow(void *p, size_t n)
{
	return realloc(p, n);
}
