// SPDX-License-Identifier: MIT
/*
 * bench/kvrecut.c - what a slab re-cut for a new size class costs the KV
 * store (docs/kv.md, "Eviction") at its worst before 2026-12-07: the
 * tenant's emptiest slab keeps a pinned block, so emptying it fails and
 * the victim's slab is emptied instead. The store found a slab's entries
 * by walking the tenant's FIFOs until the slab held no block, which for
 * the pinned slab was every entry; now it reads the slab's blocks
 * (docs/bench/kv.md, "The slab's entries through its blocks").
 *
 * One store, one tenant whose share is SHARE slabs of SLAB bytes (mapped
 * MAP_NORESERVE, never written): a 1 MiB value, pinned, alone in its
 * slab; every other slab full of 64 KiB values; then ROUNDS puts, each of
 * a class the tenant has no slab of (80 KiB, 96 KiB, ... up to half a
 * slab, 1 MiB skipped), each emptying one slab of 64 KiB values. No
 * network, deterministic.
 *
 * usage: kvrecut [SLAB [SHARE [ROUNDS]]] (defaults 16M, 16, 12; ROUNDS at
 * most SHARE - 4, and the classes there are)
 * Output: one line, "KVRECUT slab_mib=S share_slabs=N entries=E
 *   rounds=R evictions=V": entries before the rounds, evictions during
 *   them (the same in every tree: the store's choices did not change). bench/run_kvrecut.sh counts the instructions of the
 *   rounds' puts under callgrind (a run with ROUNDS=0 subtracted).
 */
#include "bench/benchutil.h"
#include "memd/kvstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static uint64_t now_ms;

static void key_of(uint8_t k[MEMD_KV_KEY_BYTES], uint64_t id)
{
	memset(k, 0, MEMD_KV_KEY_BYTES);
	memcpy(k, &id, sizeof(id));
	k[31] = 0x3c;
}

/* A reserve and commit of key id, len bytes: its status. */
static int put(struct memd_kv *kv, uint64_t id, uint64_t len)
{
	static struct memd_kv_loc locs[64];
	struct memd_kv_item it;

	memset(&it, 0, sizeof(it));
	key_of(it.key, id);
	it.value_len = len;
	now_ms++;
	if (memd_kv_reserve(kv, 1, &it, 1, locs, 64, now_ms) != 1)
		return it.status;
	memd_kv_commit(kv, 1, &it, 1, now_ms);
	return it.status;
}

static void usage(void)
{
	fprintf(stderr, "usage: kvrecut [SLAB [SHARE [ROUNDS]]] (defaults 16M "
			"16 12; SLAB 4M..1G, a power of two; SHARE 5..4096; "
			"ROUNDS at most SHARE - 4 and the classes above "
			"64 KiB of SLAB but 1 MiB)\n");
}

int main(int argc, char **argv)
{
	uint64_t slab = 16 * MIB, per, sizes[64];
	uint32_t share = 16, rounds = 12, nsizes = 0;
	struct bench_slabs own = { 0 };
	struct memd_kv_options o = { 0 };
	struct memd_kv_stats st;
	struct memd_kv_item it;
	struct memd_kv *kv;
	uint64_t entries, evictions;

	if (argc > 4 || (argc > 1 && bench_parse_size(argv[1], &slab)) ||
	    slab < 4 * MIB || slab > (1ull << 30) || (slab & (slab - 1))) {
		usage();
		return 64;
	}
	if (argc > 2)
		share = (uint32_t)strtoul(argv[2], NULL, 10);
	if (argc > 3)
		rounds = (uint32_t)strtoul(argv[3], NULL, 10);
	/* the classes above 64 KiB (kvstore.h), but 1 MiB's: the pinned
	 * value's slab has free blocks of it */
	for (uint64_t base = 64 * KIB; nsizes < 64; base *= 2) {
		uint32_t s;

		for (s = 0; s < 4; s++) {
			uint64_t len = base + base / 4 * s;

			if (2 * (len + MEMD_KV_HEADER_BYTES) > slab)
				break;
			if (len != 64 * KIB && len != MIB && nsizes < 64)
				sizes[nsizes++] = len;
		}
		if (s < 4)
			break;
	}
	if (share < 5 || share > 4096 || rounds > share - 4 ||
	    rounds > nsizes) {
		usage();
		return 64;
	}
	own.n = share;
	own.mem = calloc(own.n, sizeof(*own.mem));
	own.used = calloc(own.n, 1);
	if (!own.mem || !own.used)
		return 71;
	for (uint32_t s = 0; s < own.n; s++) {
		own.mem[s] = mmap(NULL, slab, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				  -1, 0);
		if (own.mem[s] == MAP_FAILED)
			return 71;
	}
	o.slab_bytes = slab;
	o.epoch = 7;
	o.slab_get = bench_slab_get;
	o.slab_put = bench_slab_put;
	o.slab_arg = &own;
	if (memd_kv_create(&o, &kv))
		return 71;
	memset(&it, 0, sizeof(it));
	key_of(it.key, 1ull << 40);
	if (put(kv, 1ull << 40, MIB) || memd_kv_pin(kv, 1, &it, 1, now_ms) != 1)
		return 70;
	per = slab / (64 * KIB + MEMD_KV_HEADER_BYTES);
	for (uint64_t k = 0; k < (share - 1) * per; k++)
		if (put(kv, k, 64 * KIB))
			return 70;
	memd_kv_get_stats(kv, 1, &st);
	entries = st.entries;
	evictions = st.evictions;
	for (uint32_t i = 0; i < rounds; i++)
		if (put(kv, (1ull << 41) + i, sizes[i]))
			return 70;
	memd_kv_get_stats(kv, 1, &st);
	printf("KVRECUT slab_mib=%llu share_slabs=%u entries=%llu rounds=%u "
	       "evictions=%llu\n",
	       (unsigned long long)(slab / MIB), share,
	       (unsigned long long)entries, rounds,
	       (unsigned long long)(st.evictions - evictions));
	memd_kv_destroy(kv);
	return 0;
}
