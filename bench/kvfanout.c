// SPDX-License-Identifier: MIT
/*
 * bench/kvfanout.c - the KV client's calls over several donors: how long
 * one batch call takes when its keys are spread over every donor of a
 * pool (docs/bench/kv.md, "Batches over several donors").
 *
 * Starts, on loopback, a registry memd that donates too ("r0") and
 * --donors - 1 more donors ("d1", ...), as tests/test_kv.c does (TP_MEMD
 * names the memd binary), adds a tenant, puts --keys values of --value
 * bytes (spread over the donors by rendezvous hashing), then times
 * --iters calls of each of
 *   exists  pool_kv_exists of all keys (every one present)
 *   get     pool_kv_get of all keys (every one a hit)
 *   put     pool_kv_put of all keys (every one present: -EEXIST, the
 *           reserve round trip alone)
 * in turn, and prints one line per op: "KVFANOUT op=... donors=...
 * keys=... p50_us=... p90_us=...". Small values keep the transfers short,
 * so the round trips to the donors dominate.
 *
 * usage: TP_MEMD=build/memd/memd kvfanout [--donors N] [--keys K]
 *        [--value BYTES] [--iters I]
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "fabric/auth.h"
#include "tests/testutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"

#define MAX_DONORS 8

static struct tu_memd md[MAX_DONORS];
static int nmd;

static void stop_all(void)
{
	for (int i = nmd - 1; i >= 0; i--)
		if (md[i].pid > 0)
			tu_memd_stop(&md[i], SIGTERM);
}

static int die(const char *what, int r)
{
	fprintf(stderr, "kvfanout: %s: %s\n", what, strerror(r < 0 ? -r : r));
	stop_all();
	return 1;
}

static int start(int i, const char *dir, const char *cluster, const char *reg)
{
	char a1[300], a2[300], a3[64], state[200];
	const char *args[] = { "--set", NULL,		"--set",
			       NULL,	"--set",	NULL,
			       "--set", NULL,		"--donate",
			       "128M",	"--set",	"report_interval=100ms",
			       "--set", "slab_size=2M", NULL };

	snprintf(a1, sizeof(a1), "cluster_secret_file=%s", cluster);
	snprintf(a3, sizeof(a3), i ? "donor_name=d%d" : "donor_name=r%d", i);
	if (i) {
		snprintf(a2, sizeof(a2), "registry=%s", reg);
		args[7] = "kv_share=50";
	} else {
		snprintf(state, sizeof(state), "%s/state", dir);
		mkdir(state, 0700);
		snprintf(a2, sizeof(a2), "state_dir=%s", state);
		args[7] = "registry=yes";
	}
	args[1] = a1;
	args[3] = a2;
	args[5] = a3;
	if (i == 0) {
		/* the registry: kv_share goes in its config */
		return tu_memd_start_args(&md[i], "kv_share = 50\n", args);
	}
	return tu_memd_start_args(&md[i], NULL, args);
}

static int donors_up(const char *reg, const char *cluster, int n)
{
	char out[16384];
	int up = 0;

	if (tu_admin(reg, cluster, "{\"cmd\":\"donors\"}", out, sizeof(out)))
		return 0;
	for (const char *at = out; (at = strstr(at, "\"state\":\"up\"")); at++)
		up++;
	return up >= n;
}

static void report(const char *op, double *t, int iters, int donors, int keys)
{
	bench_sort_doubles(t, (size_t)iters);
	printf("KVFANOUT op=%s donors=%d keys=%d p50_us=%.1f p90_us=%.1f\n", op,
	       donors, keys, t[iters / 2], t[iters * 9 / 10]);
}

/* One batch of every key: the arrays the three calls take. */
struct batch {
	struct pool_kv *kv;
	size_t n;
	struct pool_kv_key *keys;
	const void **vals;
	void **bufs;
	size_t *lens, *caps, *got;
	int *st;
};

enum op { OP_EXISTS, OP_GET, OP_PUT };

/* The call op of b: how many keys it found or stored, or -errno. */
static ssize_t batch_call(const struct batch *b, enum op op)
{
	switch (op) {
	case OP_EXISTS:
		return pool_kv_exists(b->kv, b->n, b->keys);
	case OP_GET:
		return pool_kv_get(b->kv, b->n, b->keys, b->bufs, b->caps,
				   b->got, b->st);
	case OP_PUT:
		return pool_kv_put(b->kv, b->n, b->keys,
				   (const void *const *)b->vals, b->lens,
				   b->st);
	}
	return -EINVAL;
}

/* Times iters calls of op (each must cover every key) and prints its
 * line: 0, or die()'s exit status. */
static int time_op(const struct batch *b, enum op op, double *t, int iters,
		   int donors)
{
	static const char *const name[] = { "exists", "get", "put" };
	static const char *const what[] = { "exists", "get", "put again" };

	for (int i = 0; i < iters; i++) {
		double t0 = bench_now_us();
		ssize_t n = batch_call(b, op);

		t[i] = bench_now_us() - t0;
		if (n != (ssize_t)b->n)
			return die(what[op], n < 0 ? (int)n : EIO);
	}
	report(name[op], t, iters, donors, (int)b->n);
	return 0;
}

int main(int argc, char **argv)
{
	int donors = 3, nkeys = 48, iters = 200, c, r;
	size_t vlen = 4096;
	char dir[64] = "/tmp/tp-kvfanout-XXXXXX", cluster[256], sec[256];
	static const struct option lo[] = { { "donors", 1, NULL, 'd' },
					    { "keys", 1, NULL, 'k' },
					    { "value", 1, NULL, 'v' },
					    { "iters", 1, NULL, 'i' },
					    { NULL, 0, NULL, 0 } };

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			donors = atoi(optarg);
			break;
		case 'k':
			nkeys = atoi(optarg);
			break;
		case 'v':
			vlen = (size_t)atol(optarg);
			break;
		case 'i':
			iters = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: kvfanout [--donors N] "
					"[--keys K] [--value BYTES] "
					"[--iters I]\n");
			return 2;
		}
	}
	if (donors < 1 || donors > MAX_DONORS || nkeys < 1 ||
	    nkeys > (int)POOL_KV_BATCH_MAX || vlen < 1 || iters < 2) {
		fprintf(stderr, "kvfanout: bad arguments\n");
		return 2;
	}
	if (!tu_memd_path()) {
		fprintf(stderr, "kvfanout: set TP_MEMD to the memd binary\n");
		return 2;
	}
	auth_init();
	if (!mkdtemp(dir))
		return die("mkdtemp", errno);
	if ((r = tu_secret_file(dir, "cluster.secret", cluster)) ||
	    (r = tu_secret_file(dir, "t.secret", sec)))
		return die("secret files", r);
	for (int i = 0; i < donors; i++) {
		r = start(i, dir, cluster, md[0].addr);
		if (r)
			return die("memd", r);
		nmd++;
	}
	for (int i = 0; i < 1500 && !donors_up(md[0].addr, cluster, donors);
	     i++)
		usleep(20000);
	if (!donors_up(md[0].addr, cluster, donors))
		return die("donors up", ETIMEDOUT);
	if ((r = tu_tenant_add(md[0].addr, cluster, "t", sec, 1024ull << 20)))
		return die("tenant add", r);

	struct pool_opts po = { .addr = md[0].addr,
				.tenant = "t",
				.secret_file = sec };
	struct pool_kv_key *keys = calloc((size_t)nkeys, sizeof(*keys));
	const void **vals = calloc((size_t)nkeys, sizeof(*vals));
	void **bufs = calloc((size_t)nkeys, sizeof(*bufs));
	size_t *lens = calloc((size_t)nkeys, sizeof(*lens));
	size_t *caps = calloc((size_t)nkeys, sizeof(*caps));
	size_t *got = calloc((size_t)nkeys, sizeof(*got));
	int *st = calloc((size_t)nkeys, sizeof(*st));
	double *t = calloc((size_t)iters, sizeof(*t));
	uint8_t *val = malloc(vlen), *buf = malloc(vlen * (size_t)nkeys);
	struct pool_kv *kv;
	struct batch bt;
	struct pool *p;
	ssize_t n;

	if (!keys || !vals || !bufs || !lens || !caps || !got || !st || !t ||
	    !val || !buf)
		return die("memory", ENOMEM);
	if ((r = pool_connect(&po, &p)))
		return die("pool_connect", r);
	if ((r = pool_kv_open(p, NULL, &kv)))
		return die("pool_kv_open", r);
	tu_pattern_fill(val, vlen, 1, 0);
	for (int i = 0; i < nkeys; i++) {
		tu_pattern_fill(keys[i].b, sizeof(keys[i].b), 77 + (uint64_t)i,
				0);
		vals[i] = val;
		lens[i] = caps[i] = vlen;
		bufs[i] = buf + (size_t)i * vlen;
	}
	bt = (struct batch){ .kv = kv,
			     .n = (size_t)nkeys,
			     .keys = keys,
			     .vals = vals,
			     .bufs = bufs,
			     .lens = lens,
			     .caps = caps,
			     .got = got,
			     .st = st };
	n = batch_call(&bt, OP_PUT);
	if (n != nkeys)
		return die("put", n < 0 ? (int)n : EIO);
	for (enum op op = OP_EXISTS; op <= OP_PUT; op++)
		if ((r = time_op(&bt, op, t, iters, donors)))
			return r;
	pool_close(p);
	stop_all();
	tu_sh("rm -rf %s", dir);
	return 0;
}
