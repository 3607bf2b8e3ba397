/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzzutil.h - what the libFuzzer harnesses share.
 */
#ifndef TP_TESTS_FUZZ_FUZZUTIL_H
#define TP_TESTS_FUZZ_FUZZUTIL_H

#include <stddef.h>

/*
 * Makes the harness's scratch directory, $TMPDIR/fuzz-TAG-XXXXXX (else in
 * /dev/shm where there is one: every change is written and fsync'ed, else
 * /tmp), into dir, and removes it at exit (a run that ends normally:
 * -max_total_time, -runs; a crash leaves it for a look). Once per process.
 * Returns 0 or -errno.
 */
int fuzz_scratch_dir(const char *tag, char *dir, size_t len);

/*
 * What the registry harnesses (fuzz_admin, fuzz_registry) set up first:
 * memd's log quiet (LOG_CRIT, below every memd line), libsodium, the
 * cluster keys of the harnesses' fixed cluster secret in keys, and the
 * scratch directory of tag in dir (dirlen bytes) with its registry.json's
 * path in file (filelen bytes). Prints what failed and aborts on error.
 */
struct auth_cluster_keys;
void fuzz_registry_init(const char *tag, struct auth_cluster_keys *keys,
			char *dir, size_t dirlen, char *file, size_t filelen);

/* The options those harnesses open a registry with: its state in dir,
 * 1 MiB slabs, a report a second, tickets for 30 s, passes for 60 s. */
struct memd_registry_opts;
void fuzz_registry_opts(struct memd_registry_opts *o, const char *dir,
			const struct auth_cluster_keys *keys);

#endif
