// SPDX-License-Identifier: MIT
/*
 * tests/chaos/chaos_client.c - one workload client of the chaos run
 * (tests/chaos/README.md): a libpool cluster session that allocates,
 * writes, reads and frees regions (some with a replica); or maps regions
 * with pool_map() under a budget far below their size and writes and
 * reads their pages with plain stores and loads (pooled paging); or puts,
 * gets, deletes, pins and unpins KV blocks (two replicas); for as long as
 * it runs, and appends one line per operation to its history file.
 *
 * Every byte it writes is derived from where it goes: a value is made of
 * 512-byte sectors, each a header {magic, owner, incarnation, region,
 * block, version, sector} and a body drawn from a generator seeded by that
 * header. A read decodes each sector back to the header it carries (or
 * "zero", or "garbage" when the body does not match), so the history says
 * which write every byte of a read came from and the checker
 * (tests/chaos/chaos.py) decides, without any bytes, whether that write
 * could be the latest. KV values are made the same way from the key and a
 * version unique to each put, so a hit decodes to exactly one put.
 *
 * History lines (times: CLOCK_REALTIME ns, start and end):
 *   C t0 t1 inc rc                      connect (incarnation inc)
 *   A t0 t1 inc rid nslabs repl rc ext  alloc; ext: per slab, the donor
 *                                       addresses of its copies (a/b;...)
 *   W t0 t1 inc rid blk ver rc          write of version ver
 *   R t0 t1 inc rid blk rc tokens       read; tokens: runs of sectors,
 *                                       vN*k | Z*k | G*k | Fo.i.r.b.s*k
 *   F t0 t1 inc rid rc                  free
 *   M t0 t1 inc rid rc                  pool_map of region rid
 *   U t0 t1 inc rid flush|discard rc    pool_unmap (then F, unless a
 *                                       flush succeeded: then M again)
 *   Y t0 t1 inc rid page ver 0|bus      store of a whole page (version
 *                                       ver) through the mapping; "bus":
 *                                       it raised SIGBUS (not done)
 *   X t0 t1 inc rid page 0|bus f toks   load of a whole page; f: 1 when
 *                                       it was not resident (a fault)
 *   S t0 inc id:ver,...                 a KV put is about to start
 *   P t0 t1 inc rc id:st,...            KV put: status per key
 *   G t0 t1 inc rc id:st:dec,...        KV get: status and, for a hit,
 *                                       vVER or what the bytes decoded to
 *   T t0 inc D|O ids                    a delete or unpin is about to start
 *   D|N|O t0 t1 inc rc id:st,...        KV delete, pin, unpin
 *   H t inc rid:ext;...                 quiesced: regions held from now on
 *
 * With --admin ADDR --cluster-secret FILE --cmd JSON it is instead a
 * one-shot admin client: it sends the ADMIN request as "@admin" to any
 * memd (a donor answers "leases" for itself, which poolctl only asks
 * through the registry) and prints the JSON reply.
 *
 * Single-threaded: one operation at a time, so a region's history is in
 * program order. Lines are written whole with one write(2) (O_APPEND), so
 * a SIGKILL loses at most the operation in flight. SIGUSR1: stop the
 * workload, write the H line and hold the regions; SIGTERM: close and
 * exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"
#include "tidepool/pool_map.h"

#define SECTOR 512u
#define BLOCK (64u << 10) /* a region's unit of write and read */
#define MAX_REGIONS 4
#define MAGIC 0x54504348414f5331ull /* "TPCHAOS1" */
#define KV_OWNER 0xffffffffu
#define KV_KEYS 1024u
#define KV_BATCH 8
#define KV_VALUE_MAX (32u * SECTOR)
#define LINE_MAX_BYTES 16384

struct sector_hdr {
	uint64_t magic;
	uint32_t owner, inc, rid, block;
	uint64_t version;
	uint32_t sector, pad;
};

struct region {
	struct pool_region *r;
	uint32_t rid, nslabs, nblocks;
	bool replica;
	uint64_t *next_ver; /* per block: version of its next write */
	void *map;	    /* paging: the region's pool_map() mapping */
};

static volatile sig_atomic_t quiesce, stop;
static int hist_fd = -1;
static uint32_t owner, inc;
static uint64_t rng_state;
static uint64_t slab_bytes = 2u << 20;
static long corrupt_after = -1; /* self-test: spoil the n-th read */
static long reads_done;

static uint64_t rnd(uint64_t n)
{
	return n ? tu_splitmix(&rng_state) % n : 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void hist(const char *fmt, ...)
{
	char line[LINE_MAX_BYTES];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(hist_fd, line, (size_t)n) != n) {
		perror("chaos_client: history");
		_exit(2);
	}
}

static uint64_t hdr_seed(const struct sector_hdr *h)
{
	uint64_t s = h->magic ^ ((uint64_t)h->owner << 32 | h->inc) ^
		     ((uint64_t)h->rid << 40 | h->block) * 31 ^
		     h->version * 0x100000001b3ull ^ (uint64_t)h->sector << 17;

	return tu_splitmix(&s);
}

static void sector_fill(uint8_t *p, const struct sector_hdr *h)
{
	uint64_t s = hdr_seed(h);

	memcpy(p, h, sizeof(*h));
	for (size_t i = sizeof(*h); i < SECTOR; i += 8) {
		uint64_t v = tu_splitmix(&s);

		memcpy(p + i, &v, 8);
	}
}

enum sector_kind { SEC_OK, SEC_ZERO, SEC_GARBAGE };

/* What the sector at p says it is; *h its header when SEC_OK. */
static enum sector_kind sector_decode(const uint8_t *p, struct sector_hdr *h)
{
	uint8_t want[SECTOR];
	size_t i;

	for (i = 0; i < SECTOR && !p[i]; i++)
		;
	if (i == SECTOR)
		return SEC_ZERO;
	memcpy(h, p, sizeof(*h));
	if (h->magic != MAGIC)
		return SEC_GARBAGE;
	sector_fill(want, h);
	return memcmp(want, p, SECTOR) ? SEC_GARBAGE : SEC_OK;
}

/* ---- regions ---- */

static struct region regions[MAX_REGIONS];
static uint32_t nregions, next_rid = 1;

static void ext_string(struct pool_region *r, char *out, size_t cap)
{
	size_t len = 0;

	out[0] = '\0';
	for (uint32_t i = 0; i < pool_region_nextents(r) && len + 96 < cap;
	     i++) {
		for (unsigned c = 0; c < 2; c++) {
			const char *a;
			uint32_t id;

			if (pool_region_copy(r, i, c, &id, &a))
				break;
			len += (size_t)snprintf(out + len, cap - len, "%s%s",
						c ? "/" : (i ? ";" : ""), a);
		}
	}
	if (!out[0])
		snprintf(out, cap, "-");
}

static void region_drop(uint32_t k)
{
	free(regions[k].next_ver);
	regions[k] = regions[--nregions];
}

static void op_alloc(struct pool *p)
{
	struct region *g = &regions[nregions];
	char ext[4096] = "-";
	uint64_t t0 = now_ns(), t1;
	int rc;

	g->nslabs = 1 + (uint32_t)rnd(2);
	g->replica = rnd(2);
	g->rid = next_rid++;
	rc = pool_alloc_ex(p, g->nslabs * slab_bytes, -1,
			   g->replica ? POOL_ALLOC_REPLICA : 0, &g->r);
	t1 = now_ns();
	if (!rc)
		ext_string(g->r, ext, sizeof(ext));
	hist("A %" PRIu64 " %" PRIu64 " %u %u %u %d %d %s", t0, t1, inc, g->rid,
	     g->nslabs, g->replica, rc, ext);
	if (rc)
		return;
	/* Only the first 8 blocks of each slab are used: enough to cover
	 * every slab, copy and donor while moving little data. */
	g->nblocks = g->nslabs * 8;
	g->next_ver = calloc(g->nblocks, sizeof(*g->next_ver));
	if (!g->next_ver)
		abort();
	for (uint32_t b = 0; b < g->nblocks; b++)
		g->next_ver[b] = 1;
	nregions++;
}

static uint64_t block_off(const struct region *g, uint32_t b)
{
	return (uint64_t)(b / 8) * slab_bytes + (uint64_t)(b % 8) * BLOCK;
}

static void op_free(struct pool *p, uint32_t k)
{
	uint64_t t0 = now_ns();
	int rc = pool_free(p, regions[k].r);

	hist("F %" PRIu64 " %" PRIu64 " %u %u %d", t0, now_ns(), inc,
	     regions[k].rid, rc);
	region_drop(k);
}

/* nsectors sectors of version ver of block b of region g into buf. */
static void block_fill(uint8_t *buf, const struct region *g, uint32_t b,
		       uint64_t ver, uint32_t nsectors)
{
	for (uint32_t s = 0; s < nsectors; s++) {
		struct sector_hdr h = { .magic = MAGIC,
					.owner = owner,
					.inc = inc,
					.rid = g->rid,
					.block = b,
					.version = ver,
					.sector = s };

		sector_fill(buf + s * SECTOR, &h);
	}
}

static int op_write(struct pool *p, uint32_t k, uint8_t *buf)
{
	struct region *g = &regions[k];
	uint32_t b = (uint32_t)rnd(g->nblocks);
	uint64_t ver = g->next_ver[b]++, t0;
	int rc;

	block_fill(buf, g, b, ver, BLOCK / SECTOR);
	t0 = now_ns();
	rc = pool_write(p, g->r, block_off(g, b), buf, BLOCK);
	hist("W %" PRIu64 " %" PRIu64 " %u %u %u %" PRIu64 " %d", t0, now_ns(),
	     inc, g->rid, b, ver, rc);
	return rc;
}

/* Appends a run token for n sectors of one kind to out. */
static size_t put_run(char *out, size_t len, size_t cap, const char *tok,
		      uint32_t n)
{
	if (len + 80 >= cap)
		return len;
	return len + (size_t)snprintf(out + len, cap - len, "%s%s*%u",
				      len ? "," : "", tok, n);
}

/* Decodes nsec sectors of block b of region g at buf into run tokens. */
static void decode_block(const uint8_t *buf, uint32_t nsec,
			 const struct region *g, uint32_t b, char *toks,
			 size_t cap)
{
	char cur[96] = "", tok[96];
	uint32_t run = 0;
	size_t len = 0;

	toks[0] = '\0';
	for (uint32_t s = 0; s < nsec; s++) {
		struct sector_hdr h;

		switch (sector_decode(buf + s * SECTOR, &h)) {
		case SEC_ZERO:
			snprintf(tok, sizeof(tok), "Z");
			break;
		case SEC_GARBAGE:
			snprintf(tok, sizeof(tok), "G");
			break;
		default:
			if (h.owner == owner && h.inc == inc &&
			    h.rid == g->rid && h.block == b && h.sector == s)
				snprintf(tok, sizeof(tok), "v%" PRIu64,
					 h.version);
			else
				snprintf(tok, sizeof(tok),
					 "F%u.%u.%u.%u.%u.%" PRIu64, h.owner,
					 h.inc, h.rid, h.block, h.sector,
					 h.version);
		}
		if (run && strcmp(tok, cur)) {
			len = put_run(toks, len, cap, cur, run);
			run = 0;
		}
		snprintf(cur, sizeof(cur), "%s", tok);
		run++;
	}
	if (run)
		put_run(toks, len, cap, cur, run);
}

static int op_read(struct pool *p, uint32_t k, uint8_t *buf)
{
	struct region *g = &regions[k];
	uint32_t b = (uint32_t)rnd(g->nblocks);
	char toks[8192];
	uint64_t t0 = now_ns(), t1;
	int rc = pool_read(p, g->r, block_off(g, b), buf, BLOCK);

	t1 = now_ns();
	if (!rc && corrupt_after >= 0 && reads_done++ == corrupt_after)
		buf[SECTOR * 3 + 100] ^= 0x40; /* self-test: one wrong byte */
	if (!rc)
		decode_block(buf, BLOCK / SECTOR, g, b, toks, sizeof(toks));
	hist("R %" PRIu64 " %" PRIu64 " %u %u %u %d %s", t0, t1, inc, g->rid, b,
	     rc, rc ? "-" : toks);
	return rc;
}

/* ---- pooled paging ----
 *
 * A paging client maps each region (1 or 2 slabs, some with a replica)
 * with pool_map() and a budget of PAGE_BUDGET, far below the region, and
 * writes and reads whole 4 KiB pages of it with plain loads and stores:
 * most reads fetch their page through a fault, most writes evict a dirty
 * page. A fault the pool cannot serve raises SIGBUS in this thread
 * (pool_map(3)); the handler jumps back out of the access, which is then
 * recorded with rc "bus", and the mapping (failed for good) is discarded
 * and its region freed. */

#define PAGE 4096u
#define PAGE_BUDGET (256u << 10) /* pool_map's minimum */
#define PAGE_SECTORS (PAGE / SECTOR)
#define MAX_MAPPED 2

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;
static long faulted_reads;

static void on_sigbus(int sig)
{
	(void)sig;
	if (!bus_armed) {
		/* a SIGBUS outside an access: die of it, as a client
		 * without a handler would (the runner records the signal) */
		signal(SIGBUS, SIG_DFL);
		raise(SIGBUS);
		return;
	}
	bus_armed = 0;
	siglongjmp(bus_jmp, 1);
}

/* Copies n bytes between the mapping and a buffer of ours; false when
 * the access raised SIGBUS. */
static bool guarded_copy(void *dst, const void *src, size_t n)
{
	if (sigsetjmp(bus_jmp, 1))
		return false;
	bus_armed = 1;
	memcpy(dst, src, n);
	bus_armed = 0;
	return true;
}

static bool page_resident(const struct region *g, uint32_t b)
{
	unsigned char v = 0;

	if (mincore((uint8_t *)g->map + (size_t)b * PAGE, PAGE, &v))
		return true;
	return v & 1;
}

static void op_map_alloc(struct pool *p)
{
	struct region *g = &regions[nregions];
	uint32_t n0 = nregions;
	uint64_t t0;
	int rc;

	op_alloc(p);
	if (nregions == n0)
		return; /* refused */
	g->nblocks = g->nslabs * (uint32_t)(slab_bytes / PAGE);
	free(g->next_ver);
	g->next_ver = calloc(g->nblocks, sizeof(*g->next_ver));
	if (!g->next_ver)
		abort();
	for (uint32_t b = 0; b < g->nblocks; b++)
		g->next_ver[b] = 1;
	t0 = now_ns();
	rc = pool_map(p, g->r, PAGE_BUDGET, 0, &g->map);
	hist("M %" PRIu64 " %" PRIu64 " %u %u %d", t0, now_ns(), inc, g->rid,
	     rc);
	if (rc) {
		g->map = NULL;
		op_free(p, nregions - 1);
	}
}

/* Ends region k's mapping (DISCARD after a failure) and frees it. */
static void op_map_free(struct pool *p, uint32_t k, bool failed)
{
	struct region *g = &regions[k];
	uint64_t t0 = now_ns();
	int rc = pool_unmap(p, g->map,
			    failed ? POOL_UNMAP_DISCARD : POOL_UNMAP_FLUSH);

	hist("U %" PRIu64 " %" PRIu64 " %u %u %s %d", t0, now_ns(), inc, g->rid,
	     failed ? "discard" : "flush", rc);
	g->map = NULL;
	op_free(p, k);
}

/* Flushes region k's mapping and maps the region again (EXISTING): every
 * page then comes from the pool. A failed flush frees the region (it may
 * lack some of what was written). */
static int op_remap(struct pool *p, uint32_t k)
{
	struct region *g = &regions[k];
	uint64_t t0 = now_ns();
	int rc = pool_unmap(p, g->map, POOL_UNMAP_FLUSH);

	hist("U %" PRIu64 " %" PRIu64 " %u %u %s %d", t0, now_ns(), inc, g->rid,
	     "flush", rc);
	g->map = NULL;
	if (rc) {
		op_free(p, k);
		return rc;
	}
	t0 = now_ns();
	rc = pool_map(p, g->r, PAGE_BUDGET, POOL_MAP_EXISTING, &g->map);
	hist("M %" PRIu64 " %" PRIu64 " %u %u %d", t0, now_ns(), inc, g->rid,
	     rc);
	if (rc) {
		g->map = NULL;
		op_free(p, k);
	}
	return rc;
}

static int op_page_write(struct pool *p, uint32_t k, uint8_t *buf)
{
	struct region *g = &regions[k];
	uint32_t b = (uint32_t)rnd(g->nblocks);
	uint64_t ver = g->next_ver[b]++, t0;
	bool ok;

	block_fill(buf, g, b, ver, PAGE_SECTORS);
	t0 = now_ns();
	ok = guarded_copy((uint8_t *)g->map + (size_t)b * PAGE, buf, PAGE);
	hist("Y %" PRIu64 " %" PRIu64 " %u %u %u %" PRIu64 " %s", t0, now_ns(),
	     inc, g->rid, b, ver, ok ? "0" : "bus");
	if (!ok)
		op_map_free(p, k, true);
	return ok ? 0 : -EFAULT;
}

static int op_page_read(struct pool *p, uint32_t k, uint8_t *buf)
{
	struct region *g = &regions[k];
	uint32_t b = (uint32_t)rnd(g->nblocks);
	bool fault = !page_resident(g, b), ok;
	char toks[2048];
	uint64_t t0 = now_ns(), t1;

	ok = guarded_copy(buf, (uint8_t *)g->map + (size_t)b * PAGE, PAGE);
	t1 = now_ns();
	if (ok && fault && corrupt_after >= 0 &&
	    faulted_reads++ == corrupt_after)
		buf[SECTOR * 5 + 7] ^= 0x10; /* self-test: one wrong byte */
	if (ok)
		decode_block(buf, PAGE_SECTORS, g, b, toks, sizeof(toks));
	hist("X %" PRIu64 " %" PRIu64 " %u %u %u %s %d %s", t0, t1, inc, g->rid,
	     b, ok ? "0" : "bus", fault, ok ? toks : "-");
	if (!ok)
		op_map_free(p, k, true);
	return ok ? 0 : -EFAULT;
}

/* ---- KV ---- */

static uint32_t kv_space; /* tenant-wide: the same in every client */

static void kv_key(uint32_t id, struct pool_kv_key *k)
{
	uint64_t s = (uint64_t)kv_space << 32 | id;

	for (size_t i = 0; i < sizeof(k->b); i += 8) {
		uint64_t v = tu_splitmix(&s);

		memcpy(k->b + i, &v, 8);
	}
}

/* KV values have versions: version ver of key id is kv_len(id, ver) bytes
 * of sectors {KV_OWNER, kv_space, id, ver, sector}. Each put attempt
 * takes a new version, unique in the tenant (the client's id and
 * incarnation are in it), so a hit says which put it came from. A put of
 * a key that is present gets -EEXIST: a new version lands only after a
 * delete, which is what the checker's "deleted or superseded" rule
 * exercises. */
static uint64_t kv_puts_made;

static uint64_t kv_new_version(void)
{
	return (uint64_t)owner << 48 | (uint64_t)inc << 32 | ++kv_puts_made;
}

/* Length of version ver of key id (the checker computes the same). */
static size_t kv_len(uint32_t id, uint64_t ver)
{
	return SECTOR * (1 + (id * 7u + (uint32_t)(ver % 32) * 13u) % 32u);
}

static void kv_fill(uint32_t id, uint64_t ver, uint8_t *v)
{
	for (uint32_t s = 0; s < kv_len(id, ver) / SECTOR; s++) {
		struct sector_hdr h = { .magic = MAGIC,
					.owner = KV_OWNER,
					.rid = kv_space,
					.block = id,
					.version = ver,
					.sector = s };

		sector_fill(v + s * SECTOR, &h);
	}
}

/* "v<version>" when v (len bytes) is exactly one version of key id,
 * else why not. */
static void kv_decode(uint32_t id, const uint8_t *v, size_t len, char *out,
		      size_t cap)
{
	uint64_t ver = 0;

	if (len < SECTOR || len % SECTOR) {
		snprintf(out, cap, "len%zu", len);
		return;
	}
	for (uint32_t s = 0; s < len / SECTOR; s++) {
		struct sector_hdr h;
		enum sector_kind kd = sector_decode(v + s * SECTOR, &h);

		if (kd == SEC_ZERO) {
			snprintf(out, cap, "Z@%u", s);
			return;
		}
		if (kd == SEC_GARBAGE) {
			snprintf(out, cap, "G@%u", s);
			return;
		}
		if (h.owner != KV_OWNER || h.rid != kv_space || h.block != id ||
		    h.sector != s) {
			snprintf(out, cap, "F%u.%u.%u@%u", h.owner, h.block,
				 h.sector, s);
			return;
		}
		if (s == 0) {
			ver = h.version;
			if (len != kv_len(id, ver)) {
				snprintf(out, cap, "len%zu", len);
				return;
			}
		} else if (h.version != ver) {
			snprintf(out, cap, "M@%u", s); /* versions mixed */
			return;
		}
	}
	snprintf(out, cap, "v%" PRIu64, ver);
}

static uint8_t *kv_bufs[KV_BATCH];

/* Puts ids[i] with versions vers[i]; logs S and P lines unless silent
 * (the resurrection self-test). Statuses in st. */
static ssize_t kv_put_vers(struct pool_kv *kv, size_t n, const uint32_t *ids,
			   const uint64_t *vers, int *st, bool silent)
{
	struct pool_kv_key keys[KV_BATCH];
	const void *vals[KV_BATCH];
	size_t lens[KV_BATCH], len = 0;
	char line[2048];
	uint64_t t0;
	ssize_t rc;

	line[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		kv_key(ids[i], &keys[i]);
		kv_fill(ids[i], vers[i], kv_bufs[i]);
		vals[i] = kv_bufs[i];
		lens[i] = kv_len(ids[i], vers[i]);
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%" PRIu64, i ? "," : "", ids[i],
					vers[i]);
	}
	t0 = now_ns();
	if (!silent)
		hist("S %" PRIu64 " %u %s", t0, inc, line);
	rc = pool_kv_put(kv, n, keys, vals, lens, st);
	if (rc < 0)
		for (size_t i = 0; i < n; i++)
			st[i] = (int)rc;
	len = 0;
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%d", i ? "," : "", ids[i], st[i]);
	if (!silent)
		hist("P %" PRIu64 " %" PRIu64 " %u %zd %s", t0, now_ns(), inc,
		     rc, line);
	return rc;
}

static ssize_t kv_put_ids(struct pool_kv *kv, size_t n, const uint32_t *ids,
			  uint64_t *vers, int *st)
{
	for (size_t i = 0; i < n; i++)
		vers[i] = kv_new_version();
	return kv_put_vers(kv, n, ids, vers, st, false);
}

static ssize_t kv_get_ids(struct pool_kv *kv, size_t n, const uint32_t *ids,
			  int *st)
{
	struct pool_kv_key keys[KV_BATCH];
	void *bufs[KV_BATCH];
	size_t caps[KV_BATCH], lens[KV_BATCH], len = 0;
	char line[4096];
	uint64_t t0, t1;
	ssize_t rc;

	for (size_t i = 0; i < n; i++) {
		kv_key(ids[i], &keys[i]);
		bufs[i] = kv_bufs[i];
		caps[i] = KV_VALUE_MAX;
		memset(kv_bufs[i], 0, KV_VALUE_MAX);
	}
	t0 = now_ns();
	rc = pool_kv_get(kv, n, keys, bufs, caps, lens, st);
	t1 = now_ns();
	line[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char dec[64] = "-";

		if (rc < 0)
			st[i] = (int)rc;
		if (st[i] == 0) {
			if (corrupt_after >= 0 && reads_done++ == corrupt_after)
				kv_bufs[i][lens[i] - 1] ^= 1; /* self-test */
			kv_decode(ids[i], kv_bufs[i], lens[i], dec,
				  sizeof(dec));
		}
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%d:%s", i ? "," : "", ids[i],
					st[i], dec);
	}
	hist("G %" PRIu64 " %" PRIu64 " %u %zd %s", t0, t1, inc, rc, line);
	return rc;
}

enum kv_keyop { KV_DEL, KV_PIN, KV_UNPIN };

/* Deletes, pins or unpins ids: a D, N or O line. */
static ssize_t kv_keyop(struct pool_kv *kv, enum kv_keyop op, size_t n,
			const uint32_t *ids, int *st)
{
	static const char tag[] = { 'D', 'N', 'O' };
	struct pool_kv_key keys[KV_BATCH];
	char line[2048] = "";
	size_t len = 0;
	uint64_t t0;
	ssize_t rc;

	for (size_t i = 0; i < n; i++) {
		kv_key(ids[i], &keys[i]);
		len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%u",
					i ? "," : "", ids[i]);
	}
	/* A client killed mid-delete or mid-unpin may still have deleted or
	 * unpinned: the start line says the key may be gone from then on. */
	t0 = now_ns();
	if (op != KV_PIN)
		hist("T %" PRIu64 " %u %c %s", t0, inc, tag[op], line);
	len = 0;
	rc = op == KV_DEL   ? pool_kv_delete(kv, n, keys, st)
	     : op == KV_PIN ? pool_kv_pin(kv, n, keys, st)
			    : pool_kv_unpin(kv, n, keys, st);
	line[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (rc < 0)
			st[i] = (int)rc;
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%d", i ? "," : "", ids[i], st[i]);
	}
	hist("%c %" PRIu64 " %" PRIu64 " %u %zd %s", tag[op], t0, now_ns(), inc,
	     rc, line);
	return rc;
}

static void random_ids(uint32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ids[i] = (uint32_t)rnd(KV_KEYS);
}

static int op_kv_put(struct pool_kv *kv)
{
	uint32_t ids[KV_BATCH];
	uint64_t vers[KV_BATCH];
	int st[KV_BATCH];
	size_t n = 1 + rnd(KV_BATCH);

	random_ids(ids, n);
	return kv_put_ids(kv, n, ids, vers, st) < 0 ? -1 : 0;
}

static int op_kv_get(struct pool_kv *kv)
{
	uint32_t ids[KV_BATCH];
	int st[KV_BATCH];
	size_t n = 1 + rnd(KV_BATCH);

	random_ids(ids, n);
	return kv_get_ids(kv, n, ids, st) < 0 ? -1 : 0;
}

static int op_kv_delete(struct pool_kv *kv)
{
	uint32_t ids[KV_BATCH];
	int st[KV_BATCH];
	size_t n = 1 + rnd(4);

	random_ids(ids, n);
	return kv_keyop(kv, KV_DEL, n, ids, st) < 0 ? -1 : 0;
}

static long resurrect_after = -1; /* self-test: re-put a deleted version */
static long churns;

/* One key through delete, put, get, delete, get: the last get must miss
 * (or hit a version another client put since). */
static int op_kv_churn(struct pool_kv *kv)
{
	uint32_t id = (uint32_t)rnd(KV_KEYS);
	uint64_t ver;
	int st, pst, dst;

	if (kv_keyop(kv, KV_DEL, 1, &id, &st) < 0)
		return -1;
	if (kv_put_ids(kv, 1, &id, &ver, &pst) < 0)
		return -1;
	kv_get_ids(kv, 1, &id, &st);
	if (kv_keyop(kv, KV_DEL, 1, &id, &dst) < 0)
		return -1;
	if (!pst && !dst && resurrect_after >= 0 && churns++ == resurrect_after)
		/* self-test: the deleted version comes back unannounced, as
		 * a donor that kept it would serve it */
		kv_put_vers(kv, 1, &id, &ver, &st, true);
	return kv_get_ids(kv, 1, &id, &st) < 0 ? -1 : 0;
}

/* Keys this client pinned and has not unpinned yet (pins belong to the
 * tenant: they outlive a session, so the list does too). */
#define KV_PINS 8
static uint32_t pinned[KV_PINS];
static size_t npinned;

static int op_kv_unpin(struct pool_kv *kv)
{
	int st;

	if (!npinned)
		return 0;
	if (kv_keyop(kv, KV_UNPIN, 1, &pinned[0], &st) < 0 || st == -ENOTCONN)
		return -1; /* keep it listed: unpin it later */
	memmove(pinned, pinned + 1, --npinned * sizeof(*pinned));
	return 0;
}

/* Pins a key (putting it first when absent) and reads it back. */
static int op_kv_pin(struct pool_kv *kv)
{
	uint32_t id = (uint32_t)rnd(KV_KEYS);
	uint64_t ver;
	int st;

	if (npinned == KV_PINS && op_kv_unpin(kv))
		return -1;
	if (kv_keyop(kv, KV_PIN, 1, &id, &st) < 0)
		return -1;
	if (st == -ENOENT) {
		if (kv_put_ids(kv, 1, &id, &ver, &st) < 0)
			return -1;
		if (kv_keyop(kv, KV_PIN, 1, &id, &st) < 0)
			return -1;
	}
	if (st == 0)
		pinned[npinned++] = id;
	return kv_get_ids(kv, 1, &id, &st) < 0 ? -1 : 0;
}

/* A get of every key this client holds pinned: each must hit (unless
 * deleted meanwhile, or its donors came and went). */
static int op_kv_get_pinned(struct pool_kv *kv)
{
	int st[KV_PINS];

	if (!npinned)
		return 0;
	return kv_get_ids(kv, npinned, pinned, st) < 0 ? -1 : 0;
}

static int kv_step(struct pool_kv *kv)
{
	uint64_t x = rnd(100);

	if (x < 30)
		return op_kv_put(kv);
	if (x < 60)
		return op_kv_get(kv);
	if (x < 66)
		return op_kv_delete(kv);
	if (x < 80)
		return op_kv_churn(kv);
	if (x < 88)
		return op_kv_pin(kv);
	if (x < 92)
		return op_kv_unpin(kv);
	return op_kv_get_pinned(kv);
}

/* ---- the loop ---- */

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		quiesce = 1;
	else
		stop = 1;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void hold(void)
{
	char line[LINE_MAX_BYTES], ext[4096];
	size_t len = 0;

	line[0] = '\0';
	for (uint32_t k = 0; k < nregions; k++) {
		ext_string(regions[k].r, ext, sizeof(ext));
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%s", k ? " " : "", regions[k].rid,
					ext);
	}
	hist("H %" PRIu64 " %u %s", now_ns(), inc, nregions ? line : "-");
	while (!stop)
		pause();
}

static int usage(void)
{
	fprintf(stderr,
		"usage: chaos_client --registry HOST:PORT --tenant NAME "
		"--secret FILE --id N --history FILE --mode regions|kv|paging "
		"[--seed S] [--slab BYTES] [--corrupt-after N] "
		"[--resurrect-after N]\n");
	return 64;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "registry", 1, 0, 'r' },
					    { "tenant", 1, 0, 't' },
					    { "secret", 1, 0, 's' },
					    { "id", 1, 0, 'i' },
					    { "history", 1, 0, 'h' },
					    { "mode", 1, 0, 'm' },
					    { "seed", 1, 0, 'S' },
					    { "slab", 1, 0, 'b' },
					    { "corrupt-after", 1, 0, 'c' },
					    { "admin", 1, 0, 'a' },
					    { "cluster-secret", 1, 0, 'k' },
					    { "cmd", 1, 0, 'j' },
					    { "resurrect-after", 1, 0, 'e' },
					    { 0, 0, 0, 0 } };
	const char *reg = NULL, *tenant = NULL, *secret = NULL, *path = NULL,
		   *mode = "regions", *admin = NULL, *csecret = NULL,
		   *cmd = NULL;
	uint64_t seed = 1;
	struct sigaction sa = { .sa_handler = on_signal };
	uint8_t *buf;
	bool kvmode, pagemode;
	int o, fails = 0;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'r':
			reg = optarg;
			break;
		case 't':
			tenant = optarg;
			break;
		case 's':
			secret = optarg;
			break;
		case 'i':
			owner = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'h':
			path = optarg;
			break;
		case 'm':
			mode = optarg;
			break;
		case 'S':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			slab_bytes = strtoull(optarg, NULL, 0);
			break;
		case 'c':
			corrupt_after = strtol(optarg, NULL, 0);
			break;
		case 'a':
			admin = optarg;
			break;
		case 'k':
			csecret = optarg;
			break;
		case 'j':
			cmd = optarg;
			break;
		case 'e':
			resurrect_after = strtol(optarg, NULL, 0);
			break;
		default:
			return usage();
		}
	}
	if (admin) {
		static char out[1 << 20];
		int r;

		if (!csecret || !cmd)
			return usage();
		r = tu_admin(admin, csecret, cmd, out, sizeof(out));
		printf("%s\n", out);
		return r ? 1 : 0;
	}
	if (!reg || !tenant || !secret || !path)
		return usage();
	kvmode = !strcmp(mode, "kv");
	pagemode = !strcmp(mode, "paging");
	if (!kvmode && !pagemode && strcmp(mode, "regions"))
		return usage();
	hist_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (hist_fd < 0) {
		perror(path);
		return 2;
	}
	/* A restarted client goes on with the next incarnation: count the
	 * connects already in its history. */
	{
		FILE *f = fopen(path, "r");
		char l[LINE_MAX_BYTES];

		while (f && fgets(l, sizeof(l), f))
			if (l[0] == 'C')
				inc++;
		if (f)
			fclose(f);
	}
	rng_state = seed * 0x9e3779b97f4a7c15ull ^ owner ^ (uint64_t)inc << 48;
	for (const char *c = tenant; *c; c++)
		kv_space = kv_space * 131 + (uint8_t)*c;
	/* libfabric's psm libraries, loaded with it, catch these to print a
	 * backtrace and exit(1): a crash must read as the signal it is (and
	 * leave a core) for the checker and whoever reads its report. */
	{
		static const int crash[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE,
					     SIGABRT };
		struct sigaction dfl = { .sa_handler = SIG_DFL };

		for (size_t i = 0; i < sizeof(crash) / sizeof(crash[0]); i++)
			sigaction(crash[i], &dfl, NULL);
	}
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (pagemode) {
		struct sigaction sb = { .sa_handler = on_sigbus };

		sigaction(SIGBUS, &sb, NULL);
	}
	buf = malloc(BLOCK);
	for (int i = 0; i < KV_BATCH; i++)
		kv_bufs[i] = malloc(KV_VALUE_MAX);
	if (!buf)
		return 2;

	while (!stop && !quiesce) {
		struct pool_opts po = { .addr = reg,
					.timeout_ms = 3000,
					.tenant = tenant,
					.secret_file = secret };
		struct pool_kv_opts ko = { .replicas = 2, .refresh_ms = 1000 };
		struct pool_kv *kv = NULL;
		struct pool *p = NULL;
		uint64_t t0 = now_ns();
		int rc = pool_connect(&po, &p);

		if (!rc && kvmode)
			rc = pool_kv_open(p, &ko, &kv);
		hist("C %" PRIu64 " %" PRIu64 " %u %d", t0, now_ns(), inc, rc);
		if (rc) {
			pool_close(p);
			inc++;
			sleep_ms(300);
			continue;
		}
		fails = 0;
		while (!stop && !quiesce && fails < 8) {
			uint64_t x = rnd(100);
			int r = 0;

			if (kvmode) {
				r = kv_step(kv);
			} else if (pagemode) {
				uint32_t k = (uint32_t)rnd(nregions);

				if (nregions < MAX_MAPPED &&
				    (x < 4 || !nregions)) {
					op_map_alloc(p);
					if (nregions == 0)
						r = -1;
				} else if (x < 6) {
					op_map_free(p, k, false);
				} else if (x < 9) {
					r = op_remap(p, k);
				} else {
					r = x < 50 ? op_page_write(p, k, buf)
						   : op_page_read(p, k, buf);
				}
			} else if (nregions < MAX_REGIONS &&
				   (x < 10 || !nregions)) {
				op_alloc(p);
				if (nregions == 0)
					r = -1;
			} else if (x < 14) {
				op_free(p, (uint32_t)rnd(nregions));
			} else {
				uint32_t k = (uint32_t)rnd(nregions);

				r = x < 55 ? op_write(p, k, buf)
					   : op_read(p, k, buf);
				/* A region that lost its donors (both
				 * copies) stays lost: give it back. */
				if (r == -ENOTCONN)
					op_free(p, k);
			}
			fails = r ? fails + 1 : 0;
			if (!r)
				sleep_ms(2);
			else
				sleep_ms(50);
		}
		if (quiesce)
			hold();
		while (nregions) {
			if (regions[nregions - 1].map)
				pool_unmap(p, regions[nregions - 1].map,
					   POOL_UNMAP_DISCARD);
			region_drop(nregions - 1);
		}
		pool_close(p); /* frees kv and the regions */
		if (!stop && !quiesce)
			inc++;
	}
	if (quiesce && !stop)
		hold();
	return 0;
}
