// SPDX-License-Identifier: MIT
/*
 * tests/chaos/chaos_client.c - one workload client of the chaos run
 * (tests/chaos/README.md): a libpool cluster session that allocates,
 * writes, reads and frees regions (some with a replica), or puts and gets
 * KV blocks (two replicas), for as long as it runs, and appends one line
 * per operation to its history file.
 *
 * Every byte it writes is derived from where it goes: a value is made of
 * 512-byte sectors, each a header {magic, owner, incarnation, region,
 * block, version, sector} and a body drawn from a generator seeded by that
 * header. A read decodes each sector back to the header it carries (or
 * "zero", or "garbage" when the body does not match), so the history says
 * which write every byte of a read came from and the checker
 * (tests/chaos/chaos.py) decides, without any bytes, whether that write
 * could be the latest. KV values are made the same way from the key, so a
 * hit decodes to exactly one key and length.
 *
 * History lines (times: CLOCK_REALTIME ns, start and end):
 *   C t0 t1 inc rc                      connect (incarnation inc)
 *   A t0 t1 inc rid nslabs repl rc ext  alloc; ext: per slab, the donor
 *                                       addresses of its copies (a/b;...)
 *   W t0 t1 inc rid blk ver rc          write of version ver
 *   R t0 t1 inc rid blk rc tokens       read; tokens: runs of sectors,
 *                                       vN*k | Z*k | G*k | Fo.i.r.b.s*k
 *   F t0 t1 inc rid rc                  free
 *   S t0 inc ids                        a KV put is about to start
 *   P t0 t1 inc rc id:st,...            KV put: status per key
 *   G t0 t1 inc rc id:st:dec,...        KV get: status and, for a hit,
 *                                       ok or what the bytes decoded to
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
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"

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
};

static volatile sig_atomic_t quiesce, stop;
static int hist_fd = -1;
static uint32_t owner, inc;
static uint64_t rng_state;
static uint64_t slab_bytes = 2u << 20;
static long corrupt_after = -1; /* self-test: spoil the n-th read */
static long reads_done;

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t n)
{
	return n ? splitmix(&rng_state) % n : 0;
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

	return splitmix(&s);
}

static void sector_fill(uint8_t *p, const struct sector_hdr *h)
{
	uint64_t s = hdr_seed(h);

	memcpy(p, h, sizeof(*h));
	for (size_t i = sizeof(*h); i < SECTOR; i += 8) {
		uint64_t v = splitmix(&s);

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

static int op_write(struct pool *p, uint32_t k, uint8_t *buf)
{
	struct region *g = &regions[k];
	uint32_t b = (uint32_t)rnd(g->nblocks);
	uint64_t ver = g->next_ver[b]++, t0;
	int rc;

	for (uint32_t s = 0; s < BLOCK / SECTOR; s++) {
		struct sector_hdr h = { .magic = MAGIC,
					.owner = owner,
					.inc = inc,
					.rid = g->rid,
					.block = b,
					.version = ver,
					.sector = s };

		sector_fill(buf + s * SECTOR, &h);
	}
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

static int op_read(struct pool *p, uint32_t k, uint8_t *buf)
{
	struct region *g = &regions[k];
	uint32_t b = (uint32_t)rnd(g->nblocks), run = 0;
	char toks[8192], cur[96] = "", tok[96];
	size_t len = 0;
	uint64_t t0 = now_ns(), t1;
	int rc = pool_read(p, g->r, block_off(g, b), buf, BLOCK);

	t1 = now_ns();
	toks[0] = '\0';
	if (!rc && corrupt_after >= 0 && reads_done++ == corrupt_after)
		buf[SECTOR * 3 + 100] ^= 0x40; /* self-test: one wrong byte */
	for (uint32_t s = 0; !rc && s < BLOCK / SECTOR; s++) {
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
			len = put_run(toks, len, sizeof(toks), cur, run);
			run = 0;
		}
		snprintf(cur, sizeof(cur), "%s", tok);
		run++;
	}
	if (run)
		len = put_run(toks, len, sizeof(toks), cur, run);
	hist("R %" PRIu64 " %" PRIu64 " %u %u %u %d %s", t0, t1, inc, g->rid, b,
	     rc, rc ? "-" : toks);
	return rc;
}

/* ---- KV ---- */

static uint32_t kv_space; /* tenant-wide: the same in every client */

static void kv_key(uint32_t id, struct pool_kv_key *k)
{
	uint64_t s = (uint64_t)kv_space << 32 | id;

	for (size_t i = 0; i < sizeof(k->b); i += 8) {
		uint64_t v = splitmix(&s);

		memcpy(k->b + i, &v, 8);
	}
}

/* Length of key id's value (the checker computes the same). */
static size_t kv_len(uint32_t id)
{
	return SECTOR * (1 + (id * 7u) % 32u);
}

static void kv_fill(uint32_t id, uint8_t *v)
{
	for (uint32_t s = 0; s < kv_len(id) / SECTOR; s++) {
		struct sector_hdr h = { .magic = MAGIC,
					.owner = KV_OWNER,
					.rid = kv_space,
					.block = id,
					.sector = s };

		sector_fill(v + s * SECTOR, &h);
	}
}

/* "ok" when v (len bytes) is exactly key id's value, else why not. */
static void kv_decode(uint32_t id, const uint8_t *v, size_t len, char *out,
		      size_t cap)
{
	if (len != kv_len(id)) {
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
	}
	snprintf(out, cap, "ok");
}

static uint8_t *kv_bufs[KV_BATCH];

static void op_kv_put(struct pool_kv *kv)
{
	struct pool_kv_key keys[KV_BATCH];
	const void *vals[KV_BATCH];
	size_t lens[KV_BATCH], n = 1 + rnd(KV_BATCH), len = 0;
	uint32_t ids[KV_BATCH];
	int st[KV_BATCH];
	char line[2048];
	uint64_t t0;
	ssize_t rc;

	line[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		ids[i] = (uint32_t)rnd(KV_KEYS);
		kv_key(ids[i], &keys[i]);
		kv_fill(ids[i], kv_bufs[i]);
		vals[i] = kv_bufs[i];
		lens[i] = kv_len(ids[i]);
		len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%u",
					i ? "," : "", ids[i]);
	}
	t0 = now_ns();
	hist("S %" PRIu64 " %u %s", t0, inc, line);
	rc = pool_kv_put(kv, n, keys, vals, lens, st);
	len = 0;
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%d", i ? "," : "", ids[i],
					rc < 0 ? (int)rc : st[i]);
	hist("P %" PRIu64 " %" PRIu64 " %u %zd %s", t0, now_ns(), inc, rc,
	     line);
}

static void op_kv_get(struct pool_kv *kv)
{
	struct pool_kv_key keys[KV_BATCH];
	void *bufs[KV_BATCH];
	size_t caps[KV_BATCH], lens[KV_BATCH], n = 1 + rnd(KV_BATCH), len = 0;
	uint32_t ids[KV_BATCH];
	int st[KV_BATCH];
	char line[4096];
	uint64_t t0, t1;
	ssize_t rc;

	for (size_t i = 0; i < n; i++) {
		ids[i] = (uint32_t)rnd(KV_KEYS);
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
		int s = rc < 0 ? (int)rc : st[i];

		if (s == 0) {
			if (corrupt_after >= 0 && reads_done++ == corrupt_after)
				kv_bufs[i][lens[i] - 1] ^= 1; /* self-test */
			kv_decode(ids[i], kv_bufs[i], lens[i], dec,
				  sizeof(dec));
		}
		len += (size_t)snprintf(line + len, sizeof(line) - len,
					"%s%u:%d:%s", i ? "," : "", ids[i], s,
					dec);
	}
	hist("G %" PRIu64 " %" PRIu64 " %u %zd %s", t0, t1, inc, rc, line);
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
		"--secret FILE --id N --history FILE --mode regions|kv "
		"[--seed S] [--slab BYTES] [--corrupt-after N]\n");
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
					    { 0, 0, 0, 0 } };
	const char *reg = NULL, *tenant = NULL, *secret = NULL, *path = NULL,
		   *mode = "regions", *admin = NULL, *csecret = NULL,
		   *cmd = NULL;
	uint64_t seed = 1;
	struct sigaction sa = { .sa_handler = on_signal };
	uint8_t *buf;
	bool kvmode;
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
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
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
				if (x < 40)
					op_kv_put(kv);
				else
					op_kv_get(kv);
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
		while (nregions)
			region_drop(nregions - 1);
		pool_close(p); /* frees kv and the regions */
		if (!stop && !quiesce)
			inc++;
	}
	if (quiesce && !stop)
		hold();
	return 0;
}
