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

#include "fabric/auth.h"
#include "memd/log.h"
#include "memd/registry.h"

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

void fuzz_registry_init(const char *tag, struct auth_cluster_keys *keys,
			char *dir, size_t dirlen, char *file, size_t filelen)
{
	static const uint8_t secret[32] = "tidepool-fuzz-cluster-secret-32b";

	memd_log_level = LOG_CRIT; /* below every memd line */
	if (auth_init()) {
		fprintf(stderr, "fuzz_%s: auth_init: libsodium\n", tag);
		abort();
	}
	auth_cluster_keys(secret, sizeof(secret), keys);
	if (fuzz_scratch_dir(tag, dir, dirlen)) {
		fprintf(stderr, "fuzz_%s: mkdtemp: %s\n", tag, dir);
		abort();
	}
	snprintf(file, filelen, "%s/registry.json", dir);
}

void fuzz_registry_opts(struct memd_registry_opts *o, const char *dir,
			const struct auth_cluster_keys *keys)
{
	*o = (struct memd_registry_opts){
		.state_dir = dir,
		.slab_bytes = 1u << 20,
		.report_ms = 1000,
		.ticket_ttl_ms = 30000,
		.pass_ttl_ms = 60000,
		.keys = keys,
	};
}
