// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzzutil.c - what the libFuzzer harnesses share.
 */
#include "tests/fuzz/fuzzutil.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *scratch;

static int rm_one(const char *p, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

static void rm_scratch(void)
{
	nftw(scratch, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int fuzz_scratch_dir(const char *tag, char *dir, size_t len)
{
	const char *base = getenv("TMPDIR");
	struct stat st;
	int n;

	if (!base)
		base = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
	n = snprintf(dir, len, "%s/fuzz-%s-XXXXXX", base, tag);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	if (!mkdtemp(dir))
		return -errno;
	scratch = dir;
	atexit(rm_scratch);
	return 0;
}
