// SPDX-License-Identifier: MIT
/*
 * tests/install/prog.c - the README's C snippet as a whole program, built
 * by tests/install_check.sh against an installed tidepool (pkg-config and
 * find_package): connects to the memd at argv[1], allocates a region of
 * two slabs, writes a pattern derived from each byte's offset, reads it
 * back and checks every byte. Prints "ok" and exits 0, or says why not
 * and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tidepool/pool.h>

#define REGION_BYTES (32u << 20) /* two 16 MiB slabs */
#define OFF 4096
#define LEN (1u << 20)

static unsigned char pattern(size_t off)
{
	return (unsigned char)((off * 131) ^ (off >> 8) ^ (off >> 16));
}

int main(int argc, char **argv)
{
	struct pool_opts o = { .addr = argc > 1 ? argv[1] : NULL };
	unsigned char *buf = malloc(LEN), *back = calloc(1, LEN);
	struct pool *p = NULL;
	struct pool_region *r = NULL;
	int err;

	if (!buf || !back)
		return 1;
	for (size_t i = 0; i < LEN; i++)
		buf[i] = pattern(OFF + i);
	err = pool_connect(&o, &p); /* negative errno on failure */
	if (!err)
		err = pool_alloc(p, REGION_BYTES, &r);
	if (!err)
		err = pool_write(p, r, OFF, buf, LEN); /* one-sided RMA */
	if (!err)
		err = pool_read(p, r, OFF, back, LEN);
	if (err) {
		fprintf(stderr, "pool: %s\n", pool_strerror(err));
		return 1;
	}
	for (size_t i = 0; i < LEN; i++) {
		if (back[i] != pattern(OFF + i)) {
			fprintf(stderr, "byte %zu: read %u, wrote %u\n",
				OFF + i, back[i], pattern(OFF + i));
			return 1;
		}
	}
	err = pool_free(p, r);
	pool_close(p);
	if (err) {
		fprintf(stderr, "pool_free: %s\n", pool_strerror(err));
		return 1;
	}
	free(buf);
	free(back);
	puts("ok");
	return 0;
}
