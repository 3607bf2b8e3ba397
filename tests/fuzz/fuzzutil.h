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

#endif
