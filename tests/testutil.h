/* SPDX-License-Identifier: MIT */
/*
 * tests/testutil.h - shared helpers for the Check tests: patterns derived
 * from offsets (so any wrong byte is caught), spawning real memd processes
 * on loopback with free ports, and skipping with exit 77.
 */
#ifndef TP_TESTS_TESTUTIL_H
#define TP_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Byte at absolute offset off of a stream named by seed. */
static inline uint8_t tu_pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull + seed;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint8_t)(x >> ((off & 7) * 8));
}
void tu_pattern_fill(void *buf, size_t len, uint64_t seed, uint64_t off);
/* Index of the first wrong byte, or -1 when all match. */
ssize_t tu_pattern_check(const void *buf, size_t len, uint64_t seed,
			 uint64_t off);

/* Exit 77 (skipped) after printing why. */
void tu_skip(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));

struct tu_memd {
	pid_t pid;
	char addr[64];	  /* "127.0.0.1:PORT" once ready */
	char metrics[64]; /* "HOST:PORT" of /metrics; "" when not served */
	char dir[128];	  /* scratch dir: config, ready file, log */
};

/*
 * Starts $TP_MEMD listening on 127.0.0.1 with an ephemeral port, with
 * extra "key = value" lines appended to its config (may be NULL) and waits
 * until it is ready. Returns 0 or -errno (log at dir/memd.log).
 */
int tu_memd_start(struct tu_memd *m, const char *extra_conf);
/* The same with extra command-line arguments (NULL-terminated, may be
 * NULL), which override the config file: "--donate", "96M". */
int tu_memd_start_args(struct tu_memd *m, const char *extra_conf,
		       const char *const *extra_args);
/* Sends sig and reaps; returns the exit status as waitpid gives it. */
int tu_memd_stop(struct tu_memd *m, int sig);
struct pool;
/* Like tu_memd_start, but fails the running Check test on error. */
void tu_memd_start_ok(struct tu_memd *m, const char *extra_conf);
/* SIGTERM; fails the running test unless memd exits 0. No-op if gone. */
void tu_memd_stop_ok(struct tu_memd *m);
/* pool_connect to m (5 s timeout); fails the running test on error. */
struct pool *tu_pool_connect(const struct tu_memd *m);

/* Path of the memd binary (from TP_MEMD) or NULL. */
const char *tu_memd_path(void);

#endif
