// SPDX-License-Identifier: MIT
/*
 * bench/kvbench.c - the KV tier under model-shaped workloads, against
 * recomputing everything and against a Redis-backed tier (docs/bench/kv.md).
 *
 * The model is Llama-3-8B: 128 KiB of KV per token over 32 layers, so a
 * chunk of 256 tokens is 32 MiB, or 1 MiB per (chunk, layer). Every
 * stored value here is one such 1 MiB block. To fit a shared VM the model
 * is cut to --layers of its 32 layers (default 1): a chunk is then
 * `layers` blocks, and the bytes moved are layers/32 of the real model's.
 * Token counts are the real ones.
 *
 * An engine serving a prompt (keys from pool_kv_prefix_keys, 256-token
 * chunks):
 *   1. local HBM first: the longest prefix of the prompt's chunks held in
 *      a local cache of --hbm-prefixes x 109 chunks (LRU by chunk);
 *   2. then the tier: exists (longest present prefix), get of those
 *      chunks' blocks (one batch);
 *   3. recompute the rest (prefill at --tps tokens/s, modeled);
 *   4. store the recomputed chunks' blocks in the tier asynchronously
 *      (off the critical path: the put of prompt i is waited for before
 *      prompt i+1 starts, as decode would hide it).
 * Modeled time to first token = measured lookup (exists) time + the
 * real model's fetched bytes (32 MiB per chunk) at the bandwidth this run
 * measured for gets + recomputed tokens / tps. The same run also reports
 * recompute-everything (ntokens / tps) and HBM only (no tier).
 *
 * Workloads (--workload):
 *   shared     30K-token prompts whose 28K-token prefixes come from a set
 *              of 20 (uniform), with a unique 2K tail;
 *   oneshot    unique 30K-token prompts, no reuse: the tier's cost is the
 *              exists round trip and starting the put, against prefill;
 *   multiturn  --sessions sessions of --turns turns, round-robin: turn t
 *              of a session is 8K + 2K t tokens and extends the previous
 *              turn; between two turns of a session every other session
 *              runs one turn (and evicts it from HBM).
 *
 * Tiers (--tier): tidepool (a memd at --addr, a standalone session),
 * redis (--redis HOST:PORT; GET/SET of the same blocks over a minimal
 * RESP client with two commands in flight, which measured faster than
 * deeper pipelines and than redis-benchmark's defaults for 1 MiB values;
 * EXISTS pipelined for the prefix; SETs on a second connection by a put
 * thread), memcached (--memcached HOST:PORT; the same over memcached's
 * text protocol: get/set with the same window, a pipelined meta "mg KEY"
 * per key for the prefix, keys as 64 hex digits), none (HBM only).
 *
 * Output: one "KVBENCH key=value ..." line per run (run_kvbench.sh takes
 * medians over runs).
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"

/* KV of one (chunk, layer) is 1 MiB, stored as is: the store's block is
 * the value plus its 64-byte header (63 blocks per 64 MiB slab, see
 * docs/kv.md, "Size classes"). Redis stores the same values. */
#define BLOCK block_bytes
static uint32_t block_bytes = 1u << 20; /* --block: smaller, for tests
					  * of the store's per-request cost */
#define FULL_LAYERS 32			/* Llama-3-8B */
#define CHUNK_TOK 256
#define PROMPT_TOK 30000
#define PREFIX_TOK 28000
#define NPREFIX 20
#define MAX_CHUNKS 256
/* redis commands in flight on one connection (see redis_put_main) */
#define REDIS_DEPTH 2
#define REDIS_PUT_DEPTH 1

struct cfg {
	const char *tier, *workload, *addr, *redis, *memcached;
	unsigned layers, prompts, hbm_prefixes, sessions, turns, seed;
	double tps;
};

/* ---- a tier --------------------------------------------------------- */

struct redis {
	int fd;
	uint8_t *rb; /* read buffer */
	size_t rlen, roff, rcap;
};

struct tier {
	const struct cfg *c;
	/* tidepool */
	struct pool *p;
	struct pool_kv *kv;
	struct pool_kv_op *put_op;
	int put_st[MAX_CHUNKS * 8];
	/* redis, or memcached (mc) over the same connections and thread */
	struct redis r, rput;
	bool mc;
	pthread_t put_thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool put_go, put_busy, put_stop;
	/* the put in flight: n blocks */
	struct pool_kv_key put_keys[MAX_CHUNKS * 8];
	const void *put_vals[MAX_CHUNKS * 8];
	size_t put_lens[MAX_CHUNKS * 8];
	size_t put_n;
	uint64_t put_t0, put_ns, put_bytes;
};

static int redis_connect(const char *hostport, struct redis *r)
{
	int ret = bench_tcp_connect(hostport, &r->fd);

	if (ret)
		return ret;
	r->rcap = 1 << 20;
	r->rb = malloc(r->rcap);
	return r->rb ? 0 : -ENOMEM;
}

static int write_all(int fd, const void *b, size_t n)
{
	struct iovec v = { .iov_base = (void *)b, .iov_len = n };

	return bench_writev_all(fd, &v, 1);
}

/* Reads n bytes of the reply stream into dst (NULL: skip). */
static int rd_bytes(struct redis *r, uint8_t *dst, size_t n)
{
	while (n) {
		size_t k;

		if (r->roff == r->rlen) {
			ssize_t g;

			if (!dst || n < r->rcap) {
				g = read(r->fd, r->rb, r->rcap);
				if (g <= 0)
					return -EIO;
				r->roff = 0;
				r->rlen = (size_t)g;
			} else {
				/* big payloads straight into dst */
				g = read(r->fd, dst, n);
				if (g <= 0)
					return -EIO;
				dst += g;
				n -= (size_t)g;
				continue;
			}
		}
		k = r->rlen - r->roff < n ? r->rlen - r->roff : n;
		if (dst) {
			memcpy(dst, r->rb + r->roff, k);
			dst += k;
		}
		r->roff += k;
		n -= k;
	}
	return 0;
}

/* One reply line without its CRLF into line. */
static int rd_line(struct redis *r, char *line, size_t cap)
{
	size_t n = 0;

	for (;;) {
		uint8_t c;

		if (rd_bytes(r, &c, 1))
			return -EIO;
		if (c == '\n')
			break;
		if (n + 1 < cap)
			line[n++] = (char)c;
	}
	if (n && line[n - 1] == '\r')
		n--;
	line[n] = '\0';
	return 0;
}

static size_t resp_cmd(char *out, const char *cmd, const struct pool_kv_key *k,
		       size_t vlen)
{
	size_t n = (size_t)sprintf(out, "*%d\r\n$%zu\r\n%s\r\n$32\r\n",
				   vlen ? 3 : 2, strlen(cmd), cmd);

	memcpy(out + n, k->b, 32);
	n += 32;
	memcpy(out + n, "\r\n", 2);
	n += 2;
	if (vlen)
		n += (size_t)sprintf(out + n, "$%zu\r\n", vlen);
	return n;
}

/* A memcached command on key k (hex: text keys may not hold arbitrary
 * bytes); a set says its value length. */
static size_t mc_cmd(char *out, const char *cmd, const struct pool_kv_key *k,
		     bool set, size_t vlen)
{
	size_t n = (size_t)sprintf(out, "%s ", cmd);

	for (int i = 0; i < 32; i++)
		n += (size_t)sprintf(out + n, "%02x", k->b[i]);
	if (set)
		n += (size_t)sprintf(out + n, " 0 0 %zu", vlen);
	memcpy(out + n, "\r\n", 2);
	return n + 2;
}

static void *redis_put_main(void *arg)
{
	struct tier *t = arg;

	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (!t->put_go && !t->put_stop)
			pthread_cond_wait(&t->cv, &t->mu);
		if (t->put_stop)
			break;
		t->put_go = false;
		pthread_mutex_unlock(&t->mu);
		/* a window of REDIS_DEPTH commands in flight: deeper
		 * pipelines of 1 MiB values make redis buffer and copy */
		for (size_t i = 0, got = 0; got < t->put_n;) {
			char h[128], line[256];

			if (i < t->put_n && i - got < REDIS_PUT_DEPTH) {
				size_t n = t->mc ? mc_cmd(h, "set",
							  &t->put_keys[i], true,
							  t->put_lens[i])
						 : resp_cmd(h, "SET",
							    &t->put_keys[i],
							    t->put_lens[i]);

				struct iovec iov[3] = {
					{ h, n },
					{ (void *)t->put_vals[i],
					  t->put_lens[i] },
					{ (void *)"\r\n", 2 },
				};

				bench_writev_all(t->rput.fd, iov, 3);
				i++;
				continue;
			}
			rd_line(&t->rput, line, sizeof(line));
			got++;
		}
		pthread_mutex_lock(&t->mu);
		t->put_busy = false;
		pthread_cond_broadcast(&t->cv);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

static int tier_open(struct tier *t, const struct cfg *c)
{
	memset(t, 0, sizeof(*t));
	t->c = c;
	if (!strcmp(c->tier, "tidepool")) {
		struct pool_opts o = { .addr = c->addr };
		int r = pool_connect(&o, &t->p);

		if (!r)
			r = pool_kv_open(t->p, NULL, &t->kv);
		return r;
	}
	if (!strcmp(c->tier, "redis") || !strcmp(c->tier, "memcached")) {
		const char *at = c->tier[0] == 'r' ? c->redis : c->memcached;
		int r;

		t->mc = c->tier[0] == 'm';
		r = redis_connect(at, &t->r);
		if (!r)
			r = redis_connect(at, &t->rput);
		if (r)
			return r;
		pthread_mutex_init(&t->mu, NULL);
		pthread_cond_init(&t->cv, NULL);
		return -pthread_create(&t->put_thr, NULL, redis_put_main, t);
	}
	return strcmp(c->tier, "none") ? -EINVAL : 0;
}

static void tier_put_wait(struct tier *t)
{
	if (t->kv && t->put_op) {
		pool_kv_op_wait(t->kv, t->put_op, -1);
		t->put_op = NULL;
	} else if (t->r.fd) {
		pthread_mutex_lock(&t->mu);
		while (t->put_busy)
			pthread_cond_wait(&t->cv, &t->mu);
		pthread_mutex_unlock(&t->mu);
	} else {
		return;
	}
	if (t->put_t0) {
		t->put_ns += bench_now_ns() - t->put_t0;
		t->put_t0 = 0;
	}
}

static void tier_close(struct tier *t)
{
	tier_put_wait(t);
	if (t->p)
		pool_close(t->p);
	if (t->r.fd) {
		pthread_mutex_lock(&t->mu);
		t->put_stop = true;
		pthread_cond_broadcast(&t->cv);
		pthread_mutex_unlock(&t->mu);
		pthread_join(t->put_thr, NULL);
		close(t->r.fd);
		close(t->rput.fd);
		free(t->r.rb);
		free(t->rput.rb);
	}
}

/* The longest present prefix of keys. */
static ssize_t tier_exists(struct tier *t, const struct pool_kv_key *k,
			   size_t n)
{
	if (t->kv)
		return pool_kv_exists(t->kv, n, k);
	if (t->r.fd) {
		char *cmds = malloc(n * 128), line[64];
		size_t len = 0, pre = 0;
		bool gap = false;
		const char *yes = t->mc ? "HD" : ":1";

		for (size_t i = 0; i < n; i++)
			len += t->mc ? mc_cmd(cmds + len, "mg", &k[i], false, 0)
				     : resp_cmd(cmds + len, "EXISTS", &k[i], 0);
		write_all(t->r.fd, cmds, len);
		free(cmds);
		for (size_t i = 0; i < n; i++) {
			if (rd_line(&t->r, line, sizeof(line)))
				return -EIO;
			if (!gap && !strcmp(line, yes))
				pre++;
			else
				gap = true;
		}
		return (ssize_t)pre;
	}
	return 0;
}

/* One memcached get reply, its value into buf when it is a block's size.
 * Returns the value's length, -1 for a miss, or -EIO. */
static ssize_t mc_get_reply(struct redis *r, void *buf)
{
	char line[256];
	unsigned long long len;
	unsigned flags;

	if (rd_line(r, line, sizeof(line)))
		return -EIO;
	if (!strcmp(line, "END"))
		return -1;
	if (sscanf(line, "VALUE %*s %u %llu", &flags, &len) != 2)
		return -EIO;
	if (rd_bytes(r, len == BLOCK ? buf : NULL, (size_t)len) ||
	    rd_line(r, line, sizeof(line)) || line[0] ||
	    rd_line(r, line, sizeof(line)) || strcmp(line, "END"))
		return -EIO;
	return (ssize_t)len;
}

/* Gets n blocks into bufs; hit[i]. Returns the number of hits. */
static ssize_t tier_get(struct tier *t, const struct pool_kv_key *k, size_t n,
			void **bufs, bool *hit)
{
	if (t->kv) {
		static size_t caps[MAX_CHUNKS * 8], lens[MAX_CHUNKS * 8];
		static int st[MAX_CHUNKS * 8];
		ssize_t h;

		for (size_t i = 0; i < n; i++)
			caps[i] = BLOCK;
		h = pool_kv_get(t->kv, n, k, bufs, caps, lens, st);
		for (size_t i = 0; i < n; i++)
			hit[i] = st[i] == 0 && lens[i] == BLOCK;
		return h;
	}
	if (t->r.fd) {
		char cmd[128], line[64];
		size_t sent = 0;
		ssize_t hits = 0;

		for (size_t i = 0; i < n; i++) {
			long vlen;

			while (sent < n && sent - i < REDIS_DEPTH) {
				size_t len = t->mc ? mc_cmd(cmd, "get",
							    &k[sent], false, 0)
						   : resp_cmd(cmd, "GET",
							      &k[sent], 0);

				write_all(t->r.fd, cmd, len);
				sent++;
			}
			if (t->mc) {
				ssize_t g = mc_get_reply(&t->r, bufs[i]);

				if (g < -1)
					return g;
				hit[i] = g == BLOCK;
				hits += hit[i];
				continue;
			}
			if (rd_line(&t->r, line, sizeof(line)) ||
			    line[0] != '$')
				return -EIO;
			vlen = strtol(line + 1, NULL, 10);
			hit[i] = vlen == BLOCK;
			if (vlen < 0)
				continue;
			if (rd_bytes(&t->r, vlen == BLOCK ? bufs[i] : NULL,
				     (size_t)vlen) ||
			    rd_bytes(&t->r, NULL, 2))
				return -EIO;
			hits += hit[i];
		}
		return hits;
	}
	return 0;
}

static void tier_put_start(struct tier *t, const struct pool_kv_key *k,
			   size_t n, uint8_t *const *vals)
{
	if (!n || (!t->kv && !t->r.fd))
		return;
	t->put_n = n;
	for (size_t i = 0; i < n; i++) {
		t->put_keys[i] = k[i];
		t->put_vals[i] = vals[i];
		t->put_lens[i] = BLOCK;
	}
	t->put_bytes += (uint64_t)n * BLOCK;
	t->put_t0 = bench_now_ns();
	if (t->kv) {
		if (pool_kv_put_async(t->kv, n, t->put_keys, t->put_vals,
				      t->put_lens, t->put_st, &t->put_op))
			t->put_op = NULL;
		return;
	}
	pthread_mutex_lock(&t->mu);
	t->put_busy = true;
	t->put_go = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

/* ---- local HBM: an LRU of chunk keys ---------------------------------- */

struct hbm {
	size_t cap, n;
	struct pool_kv_key *k;
	uint64_t *stamp, clock;
};

static ssize_t hbm_find(const struct hbm *h, const struct pool_kv_key *k)
{
	for (size_t i = 0; i < h->n; i++)
		if (!memcmp(h->k[i].b, k->b, 32))
			return (ssize_t)i;
	return -1;
}

static void hbm_touch(struct hbm *h, const struct pool_kv_key *k)
{
	ssize_t i = hbm_find(h, k);

	if (i < 0) {
		if (h->n < h->cap) {
			i = (ssize_t)h->n++;
		} else {
			i = 0;
			for (size_t j = 1; j < h->n; j++)
				if (h->stamp[j] < h->stamp[i])
					i = (ssize_t)j;
		}
		h->k[i] = *k;
	}
	h->stamp[i] = ++h->clock;
}

/* ---- workloads -------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill_tokens(uint32_t *tok, size_t n, uint64_t stream)
{
	uint64_t s = stream * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++)
		tok[i] = (uint32_t)(rng_next(&s) % 128256); /* Llama-3 vocab */
}

/* Prompt i of the workload into tok; its token count. */
static size_t make_prompt(const struct cfg *c, unsigned i, uint32_t *tok)
{
	if (!strcmp(c->workload, "shared")) {
		/* splitmix64 of (seed, i): uniform over the 20 prefixes */
		uint64_t z =
			((uint64_t)c->seed << 32) + i + 0x9e3779b97f4a7c15ull;
		unsigned pre;

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		pre = (unsigned)((z ^ (z >> 31)) % NPREFIX);

		fill_tokens(tok, PREFIX_TOK, 1000 + pre);
		fill_tokens(tok + PREFIX_TOK, PROMPT_TOK - PREFIX_TOK,
			    ((uint64_t)c->seed << 32) + 100000 + i);
		return PROMPT_TOK;
	}
	if (!strcmp(c->workload, "oneshot")) {
		fill_tokens(tok, PROMPT_TOK,
			    ((uint64_t)c->seed << 32) + 200000 + i);
		return PROMPT_TOK;
	}
	/* multiturn: round-robin; turn t of session s extends turn t-1 */
	{
		unsigned s = i % c->sessions, turn = i / c->sessions;
		size_t n = 8192 + 2048 * (size_t)turn;

		fill_tokens(tok, n, ((uint64_t)c->seed << 32) + 300000 + s);
		return n;
	}
}

static void block_key(struct pool_kv_key *out, const struct pool_kv_key *chunk,
		      unsigned layer)
{
	*out = *chunk;
	out->b[31] ^= (uint8_t)layer;
}

static int run(const struct cfg *c)
{
	unsigned nprompts = strcmp(c->workload, "multiturn")
				    ? c->prompts
				    : c->sessions * c->turns;
	size_t maxblk = MAX_CHUNKS * (size_t)c->layers;
	uint32_t *tok = malloc(64000 * sizeof(*tok));
	struct pool_kv_key ck[MAX_CHUNKS], *bk = calloc(maxblk, sizeof(*bk));
	uint8_t **bufs = calloc(maxblk, sizeof(*bufs));
	uint8_t **pvals = calloc(maxblk, sizeof(*pvals));
	bool *hit = calloc(maxblk, sizeof(*hit));
	struct hbm h = { .cap = (size_t)c->hbm_prefixes *
				(PREFIX_TOK / CHUNK_TOK) };
	struct tier t;
	uint64_t chunks_total = 0, chunks_local = 0, chunks_tier = 0;
	uint64_t tok_total = 0, tok_recomputed = 0, exists_ns = 0, get_ns = 0;
	uint64_t submit_ns = 0, got_bytes = 0, bad = 0;
	double ttft_recompute = 0, ttft_hbm = 0, prefill_s = 0;
	double *lookup_s = calloc(nprompts, sizeof(double));
	uint64_t *fetched = calloc(nprompts, sizeof(uint64_t));
	uint64_t *recomp = calloc(nprompts, sizeof(uint64_t));
	int r;

	h.k = calloc(h.cap + 1, sizeof(*h.k));
	h.stamp = calloc(h.cap + 1, sizeof(*h.stamp));
	if (!tok || !bk || !bufs || !pvals || !hit || !h.k || !h.stamp ||
	    !lookup_s || !fetched || !recomp)
		return -ENOMEM;
	for (size_t i = 0; i < maxblk; i++) {
		bufs[i] = bench_buf_alloc(BLOCK);
		pvals[i] = bench_buf_alloc(BLOCK);
		if (!bufs[i] || !pvals[i])
			return -ENOMEM;
	}
	r = tier_open(&t, c);
	if (r) {
		fprintf(stderr, "kvbench: tier %s: %s\n", c->tier,
			strerror(-r));
		return r;
	}
	for (unsigned i = 0; i < nprompts; i++) {
		size_t ntok = make_prompt(c, i, tok), nk, loc = 0, rem = 0;
		size_t nb = 0, nput = 0;
		uint64_t t0;
		ssize_t pre = 0;

		nk = (size_t)pool_kv_prefix_keys("bench", "llama-3-8b", tok,
						 ntok, CHUNK_TOK, ck,
						 MAX_CHUNKS);
		/* the previous prompt's put finished during "decode" */
		tier_put_wait(&t);
		while (loc < nk && hbm_find(&h, &ck[loc]) >= 0)
			loc++;
		/* the tier: exists, then one batch of gets */
		t0 = bench_now_ns();
		if (loc < nk)
			pre = tier_exists(&t, ck + loc, nk - loc);
		exists_ns += bench_now_ns() - t0;
		lookup_s[i] = (double)(bench_now_ns() - t0) / 1e9;
		if (pre > 0) {
			for (ssize_t j = 0; j < pre; j++)
				for (unsigned l = 0; l < c->layers; l++)
					block_key(&bk[nb++],
						  &ck[loc + (size_t)j], l);
			t0 = bench_now_ns();
			tier_get(&t, bk, nb, (void **)bufs, hit);
			get_ns += bench_now_ns() - t0;
			/* usable: leading chunks whose every layer hit and
			 * carries its key */
			for (rem = 0; rem < (size_t)pre; rem++) {
				bool ok = true;

				for (unsigned l = 0; l < c->layers; l++) {
					size_t b = rem * c->layers + l;

					ok = ok && hit[b];
					if (hit[b]) {
						got_bytes += BLOCK;
						if (memcmp(bufs[b], bk[b].b,
							   32))
							bad++;
					}
				}
				if (!ok)
					break;
			}
		}
		fetched[i] = rem;
		chunks_total += nk;
		chunks_local += loc;
		chunks_tier += rem;
		tok_total += ntok;
		recomp[i] = ntok - (loc + rem) * CHUNK_TOK;
		tok_recomputed += recomp[i];
		ttft_recompute += (double)ntok / c->tps;
		ttft_hbm += (double)(ntok - loc * CHUNK_TOK) / c->tps;
		prefill_s += (double)recomp[i] / c->tps;
		/* store what was computed: blocks of chunks loc+rem .. nk */
		for (size_t j = loc + rem; j < nk; j++)
			for (unsigned l = 0; l < c->layers; l++) {
				block_key(&bk[nput], &ck[j], l);
				memcpy(pvals[nput], bk[nput].b, 32);
				nput++;
			}
		t0 = bench_now_ns();
		tier_put_start(&t, bk, nput, pvals);
		submit_ns += bench_now_ns() - t0;
		for (size_t j = 0; j < nk; j++)
			hbm_touch(&h, &ck[j]);
	}
	tier_put_wait(&t);
	{
		double bw = get_ns ? (double)got_bytes / ((double)get_ns / 1e9)
				   : 0; /* bytes/s */
		double ttft = 0;
		double full = (double)FULL_LAYERS / c->layers;

		for (unsigned i = 0; i < nprompts; i++)
			ttft += lookup_s[i] +
				(bw > 0 ? (double)fetched[i] * c->layers *
						  (1u << 20) * full / bw
					: 0) +
				(double)recomp[i] / c->tps;
		printf("KVBENCH tier=%s workload=%s layers=%u prompts=%u "
		       "hbm_prefixes=%u tps=%.0f chunks=%llu local_hit=%.4f "
		       "tier_hit=%.4f hit=%.4f tokens=%llu recomputed=%llu "
		       "get_bytes=%llu put_bytes=%llu get_MBps=%.1f "
		       "put_MBps=%.1f exists_ms=%.3f get_ms=%.2f "
		       "submit_ms=%.3f ttft_s=%.4f ttft_hbm_s=%.4f "
		       "ttft_recompute_s=%.4f prefill_s=%.4f "
		       "crit_overhead_pct=%.3f bad=%llu block=%u\n",
		       c->tier, c->workload, c->layers, nprompts,
		       c->hbm_prefixes, c->tps,
		       (unsigned long long)chunks_total,
		       (double)chunks_local / (double)chunks_total,
		       (double)chunks_tier / (double)chunks_total,
		       (double)(chunks_local + chunks_tier) /
			       (double)chunks_total,
		       (unsigned long long)tok_total,
		       (unsigned long long)tok_recomputed,
		       (unsigned long long)got_bytes,
		       (unsigned long long)t.put_bytes, bw / 1e6,
		       t.put_ns ? (double)t.put_bytes /
					  ((double)t.put_ns / 1e9) / 1e6
				: 0,
		       (double)exists_ns / 1e6 / nprompts,
		       (double)get_ns / 1e6 / nprompts,
		       (double)submit_ns / 1e6 / nprompts, ttft / nprompts,
		       ttft_hbm / nprompts, ttft_recompute / nprompts,
		       prefill_s / nprompts,
		       prefill_s > 0
			       ? 100.0 *
					 ((double)(exists_ns + submit_ns) /
					  1e9) /
					 prefill_s
			       : 0,
		       (unsigned long long)bad, block_bytes);
	}
	tier_close(&t);
	for (size_t i = 0; i < maxblk; i++) {
		free(bufs[i]);
		free(pvals[i]);
	}
	free(tok);
	free(bk);
	free(bufs);
	free(pvals);
	free(hit);
	free(h.k);
	free(h.stamp);
	free(lookup_s);
	free(fetched);
	free(recomp);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kvbench --tier tidepool|redis|memcached|none "
		"--workload shared|oneshot|multiturn\n"
		"               [--addr HOST:PORT] [--redis HOST:PORT] "
		"[--memcached HOST:PORT]\n"
		"               "
		"[--layers 1] [--prompts 40]\n"
		"               [--hbm-prefixes 5] [--sessions 10] [--turns 4] "
		"[--tps 10000] [--seed 1]\n"
		"               [--block 1048576 (bytes a block, "
		"4096..1048576)]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "tier", required_argument, NULL, 't' },
		{ "workload", required_argument, NULL, 'w' },
		{ "addr", required_argument, NULL, 'a' },
		{ "redis", required_argument, NULL, 'R' },
		{ "memcached", required_argument, NULL, 'M' },
		{ "layers", required_argument, NULL, 'l' },
		{ "prompts", required_argument, NULL, 'n' },
		{ "hbm-prefixes", required_argument, NULL, 'H' },
		{ "sessions", required_argument, NULL, 's' },
		{ "turns", required_argument, NULL, 'T' },
		{ "tps", required_argument, NULL, 'p' },
		{ "seed", required_argument, NULL, 'S' },
		{ "block", required_argument, NULL, 'B' },
		{ 0 }
	};
	struct cfg c = { .tier = "tidepool",
			 .workload = "shared",
			 .layers = 1,
			 .prompts = 40,
			 .hbm_prefixes = 5,
			 .sessions = 10,
			 .turns = 4,
			 .tps = 10000,
			 .seed = 1 };
	int o;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 't':
			c.tier = optarg;
			break;
		case 'w':
			c.workload = optarg;
			break;
		case 'a':
			c.addr = optarg;
			break;
		case 'R':
			c.redis = optarg;
			break;
		case 'M':
			c.memcached = optarg;
			break;
		case 'l':
			c.layers = (unsigned)atoi(optarg);
			break;
		case 'n':
			c.prompts = (unsigned)atoi(optarg);
			break;
		case 'H':
			c.hbm_prefixes = (unsigned)atoi(optarg);
			break;
		case 's':
			c.sessions = (unsigned)atoi(optarg);
			break;
		case 'T':
			c.turns = (unsigned)atoi(optarg);
			break;
		case 'p':
			c.tps = atof(optarg);
			break;
		case 'S':
			c.seed = (unsigned)atoi(optarg);
			break;
		case 'B': {
			long b = atol(optarg);

			if (b < 4096 || b > (1l << 20)) {
				fprintf(stderr,
					"kvbench: --block %s: not in "
					"4096..1048576\n",
					optarg);
				return 2;
			}
			block_bytes = (uint32_t)b;
			break;
		}
		default:
			usage();
		}
	}
	if (c.layers < 1 || c.layers > 8 || !c.prompts || !c.sessions ||
	    !c.turns || c.tps <= 0 ||
	    (strcmp(c.workload, "shared") && strcmp(c.workload, "oneshot") &&
	     strcmp(c.workload, "multiturn")) ||
	    (!strcmp(c.tier, "redis") && !c.redis) ||
	    (!strcmp(c.tier, "memcached") && !c.memcached) ||
	    8192 + 2048 * (c.turns - 1) > 64000)
		usage();
	return run(&c) ? 1 : 0;
}
