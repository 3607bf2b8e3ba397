// SPDX-License-Identifier: MIT
/*
 * poolctl/capacity.c - capacity planning from the KV stores' miss-ratio
 * curves: `tenant report`, `quota suggest`, `top` (docs/capacity.md).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "poolctl/poolctl.h"

/* ---- capacity: tenant report, quota suggest, top ------------------- */

/*
 * Every memd reports its own KV store (ADMIN kv_report); a tenant's
 * figures in a pool are the sum over the donors that hold a store of it,
 * and its curve the merge of theirs: with the tenant's KV memory split
 * over those donors in proportion to their capacities now (the registry
 * splits a quota evenly), a total of X bytes gives donor d the size
 * X * cap_d / cap, so the pool's hit ratio at X is the request-weighted
 * mean of each donor's curve there (docs/capacity.md).
 */
#define CAP_MAX_DONORS 256
#define CAP_MIN_SAMPLES 500 /* sampled requests before a suggestion */
#define EXIT_UNREACHABLE 3  /* quota suggest: the curve never gets there */

static const double cap_mult[] = { 0.25, 0.5, 1, 2, 4 };
#define CAP_NMULT (sizeof(cap_mult) / sizeof(cap_mult[0]))

struct cap_curve {
	double w;   /* the donor's estimated requests in its window */
	double cap; /* its capacity in block bytes */
	size_t n;
	double *x, *h;
};

struct cap_tenant {
	uint64_t id;
	const char *name;
	json_t *stats; /* summed counters */
	double cap_bytes, cap_slabs, saved_s, saved_h, oneshot_put_s, period_s;
	double samples, requests_w, memory, rate_min;
	bool have_rate;
	/* the cost model saved_s is in, per field: the tenant's (the
	 * registry's tenant-set, model_of_tenant), else what each memd
	 * used: the client's hint (model_of_client) or memd.conf's */
	uint64_t tps, bpt;
	bool model_of_tenant, model_of_client;
	unsigned ndonors;
	struct cap_curve c[CAP_MAX_DONORS];
	unsigned ncurves;
};

struct cap_pool {
	bool standalone;
	uint64_t slab_bytes, nslabs, kv_share, tps, bpt;
	unsigned ndonors_asked, ndonors_failed;
	struct cap_tenant *t;
	size_t nt;
};

static double jreal(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : 0;
}

static struct cap_tenant *cap_tenant_of(struct cap_pool *p, uint64_t id)
{
	for (size_t i = 0; i < p->nt; i++)
		if (p->t[i].id == id)
			return &p->t[i];
	p->t = realloc(p->t, (p->nt + 1) * sizeof(*p->t));
	if (!p->t) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	memset(&p->t[p->nt], 0, sizeof(p->t[0]));
	p->t[p->nt].id = id;
	p->t[p->nt].stats = json_object();
	return &p->t[p->nt++];
}

/* The tenant id's entry in the registry's tenants list, or NULL. */
static const json_t *cap_tenant_entry(const json_t *tenants, uint64_t id)
{
	const json_t *e;
	size_t i;

	json_array_foreach(tenants, i, e) if (jnum(e, "id") == id) return e;
	return NULL;
}

/*
 * Adds one memd's kv_report to the pool's figures. tenants: the
 * registry's list (NULL: standalone); a tenant's own cost model there
 * (tenant-set) takes precedence, per field, over the model the memd used
 * (the client's hint, else memd.conf's: the tenant entry's "model", or
 * the report's own fields from a memd without hints), whose saved
 * seconds are rescaled to it (saved_s is linear in 1 / (tokens/s x
 * bytes/token)).
 */
static void cap_add(struct cap_pool *p, const json_t *rep,
		    const json_t *tenants)
{
	const json_t *e;
	size_t i;

	p->slab_bytes = jnum(rep, "slab_bytes");
	p->nslabs += jnum(rep, "nslabs");
	p->kv_share = jnum(rep, "kv_share");
	p->tps = jnum(rep, "prefill_tokens_per_s");
	p->bpt = jnum(rep, "bytes_per_token");
	json_array_foreach(json_object_get(rep, "tenants"), i, e)
	{
		struct cap_tenant *t = cap_tenant_of(p, jnum(e, "tenant_id"));
		const json_t *st = json_object_get(e, "stats");
		const json_t *cv = json_object_get(e, "curve");
		const char *k;
		json_t *v;

		const json_t *te = cap_tenant_entry(tenants, t->id);
		const json_t *dm = json_object_get(e, "model");
		uint64_t tps = te ? jnum(te, "prefill_tokens_per_s") : 0;
		uint64_t bpt = te ? jnum(te, "bytes_per_token") : 0;
		uint64_t d_tps = p->tps, d_bpt = p->bpt;
		double scale = 1;

		if (json_is_object(dm) && jnum(dm, "prefill_tokens_per_s") &&
		    jnum(dm, "bytes_per_token")) {
			d_tps = jnum(dm, "prefill_tokens_per_s");
			d_bpt = jnum(dm, "bytes_per_token");
			if (json_is_string(json_object_get(dm, "from")) &&
			    !strcmp(json_string_value(
					    json_object_get(dm, "from")),
				    "client"))
				t->model_of_client = true;
		}
		t->model_of_tenant = tps || bpt;
		t->tps = tps ? tps : d_tps;
		t->bpt = bpt ? bpt : d_bpt;
		if (t->tps && t->bpt)
			scale = (double)d_tps * (double)d_bpt /
				((double)t->tps * (double)t->bpt);
		t->ndonors++;
		json_object_foreach((json_t *)st, k, v)
		{
			uint64_t sum = jnum(t->stats, k) + jnum(st, k);

			json_object_set_new(t->stats, k,
					    json_integer((json_int_t)sum));
		}
		t->cap_bytes += jreal(e, "cap_bytes");
		t->cap_slabs += jreal(e, "cap_slabs");
		t->saved_s += jreal(e, "saved_s") * scale;
		t->saved_h += jreal(e, "saved_s_per_hour") * scale;
		t->oneshot_put_s += jreal(e, "oneshot_put_s");
		if (jreal(e, "period_s") > t->period_s)
			t->period_s = jreal(e, "period_s");
		if (!json_is_object(cv) || t->ncurves == CAP_MAX_DONORS)
			continue;
		t->samples += jreal(cv, "window_samples");
		t->requests_w += jreal(cv, "window_requests");
		t->memory += jreal(cv, "memory_bytes");
		if (!t->have_rate || jreal(cv, "rate") < t->rate_min)
			t->rate_min = jreal(cv, "rate");
		t->have_rate = true;
		const json_t *pts = json_object_get(cv, "points");
		struct cap_curve *c = &t->c[t->ncurves++];
		const json_t *pt;
		size_t j;

		c->w = jreal(cv, "window_requests");
		c->cap = jreal(e, "cap_bytes");
		c->n = json_array_size(pts);
		c->x = calloc(c->n + 1, sizeof(double));
		c->h = calloc(c->n + 1, sizeof(double));
		if (!c->x || !c->h) {
			fputs("poolctl: out of memory\n", stderr);
			exit(EX_OSERR);
		}
		json_array_foreach(pts, j, pt)
		{
			c->x[j] = json_number_value(json_array_get(pt, 0));
			c->h[j] = json_number_value(json_array_get(pt, 1));
		}
	}
}

static void cap_free(struct cap_pool *p)
{
	for (size_t i = 0; i < p->nt; i++) {
		json_decref(p->t[i].stats);
		for (unsigned k = 0; k < p->t[i].ncurves; k++) {
			free(p->t[i].c[k].x);
			free(p->t[i].c[k].h);
		}
	}
	free(p->t);
}

/* One donor's curve at x bytes: linear between its points, from (0, 0)
 * to the first, flat after the last. */
static double curve_at(const struct cap_curve *c, double x)
{
	size_t lo = 0, hi;

	if (!c->n)
		return 0;
	if (x <= c->x[0])
		return c->x[0] > 0 ? c->h[0] * x / c->x[0] : c->h[0];
	if (x >= c->x[c->n - 1])
		return c->h[c->n - 1];
	hi = c->n - 1;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (c->x[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	return c->h[lo] +
	       (c->h[hi] - c->h[lo]) * (x - c->x[lo]) / (c->x[hi] - c->x[lo]);
}

/* The tenant's hit ratio with x bytes of KV blocks in all. */
static double cap_hit_at(const struct cap_tenant *t, double x)
{
	double w = 0, h = 0;

	for (unsigned k = 0; k < t->ncurves; k++) {
		const struct cap_curve *c = &t->c[k];
		double share = t->cap_bytes > 0 ? c->cap / t->cap_bytes
						: 1.0 / t->ncurves;

		w += c->w;
		h += c->w * curve_at(c, x * share);
	}
	return w > 0 ? h / w : 0;
}

/* The range of sizes the curve covers: its first and last points. */
static void cap_range(const struct cap_tenant *t, double *lo, double *hi)
{
	*lo = 0;
	*hi = 0;
	for (unsigned k = 0; k < t->ncurves; k++) {
		const struct cap_curve *c = &t->c[k];
		double share = t->cap_bytes > 0 ? c->cap / t->cap_bytes
						: 1.0 / t->ncurves;

		if (!c->n || share <= 0)
			continue;
		if (*lo == 0 || c->x[0] / share < *lo)
			*lo = c->x[0] / share;
		if (c->x[c->n - 1] / share > *hi)
			*hi = c->x[c->n - 1] / share;
	}
}

/*
 * Asks the memd at o->addr (standalone) or every up or draining donor of
 * the registry for their KV reports. tenant: a name (NULL: all); *tid
 * its id. Returns 0 or an exit code (reason printed).
 */
static int cap_gather(struct opts *o, const char *what, const char *tenant,
		      bool points, struct cap_pool *p, json_t **tenants,
		      uint64_t *tid)
{
	json_t *donors = NULL, *req, *rep, *d;
	struct conn c;
	size_t i;
	int r;

	memset(p, 0, sizeof(*p));
	*tenants = NULL;
	r = conn_open(o, o->addr, &c, what);
	if (r)
		return r;
	if (c.standalone) {
		p->standalone = true;
		*tenants = json_pack("[{sisss?}]", "id", 0, "name", "default",
				     "x", NULL);
		if (tenant && strcmp(tenant, "default")) {
			conn_close(&c);
			return fail(EXIT_REFUSED, what,
				    "memd at %s is standalone: its only tenant "
				    "is \"default\" (ENOENT)",
				    o->addr);
		}
		*tid = 0;
		req = cmd_json("kv_report");
		if (tenant)
			json_object_set_new(req, "tenant_id", json_integer(0));
		json_object_set_new(req, "points", json_boolean(points));
		p->ndonors_asked = 1;
		r = admin(o, &c, req, &rep, what);
		conn_close(&c);
		if (r)
			return r;
		cap_add(p, rep, NULL);
		json_decref(rep);
		return 0;
	}
	r = admin(o, &c, cmd_json("tenants"), &rep, what);
	if (!r)
		r = admin(o, &c, cmd_json("donors"), &donors, what);
	conn_close(&c);
	if (r) {
		json_decref(donors);
		return r;
	}
	*tenants = json_incref(json_object_get(rep, "tenants"));
	json_decref(rep);
	if (tenant) {
		bool found = false;

		json_array_foreach(*tenants, i,
				   d) if (!strcmp(jstr(d, "name"), tenant))
		{
			*tid = jnum(d, "id");
			found = true;
		}
		if (!found) {
			json_decref(donors);
			return fail(EXIT_REFUSED, what,
				    "no tenant '%s' (ENOENT)", tenant);
		}
	}
	json_array_foreach(json_object_get(donors, "donors"), i, d)
	{
		const char *state = jstr(d, "state");
		struct conn dc;
		json_error_t jerr;

		if (strcmp(state, "up") && strcmp(state, "draining"))
			continue;
		p->ndonors_asked++;
		if (conn_open(o, jstr(d, "addr"), &dc, what)) {
			p->ndonors_failed++;
			continue;
		}
		req = cmd_json("kv_report");
		if (tenant)
			json_object_set_new(req, "tenant_id",
					    json_integer((json_int_t)*tid));
		json_object_set_new(req, "points", json_boolean(points));
		r = admin_quiet(o, &dc, req, &rep, &jerr);
		if (!r) {
			p->slab_bytes = 0; /* cap_add sets it */
			cap_add(p, rep, *tenants);
			json_decref(rep);
		} else if (r != -ENOENT && r != -EOPNOTSUPP) {
			/* a store without the tenant says ENOENT; one with
			 * the KV tier off EOPNOTSUPP: nothing to add */
			p->ndonors_failed++;
			fprintf(stderr, "poolctl: %s: donor %s: %s\n", what,
				jstr(d, "name"),
				r == 1 ? "malformed reply"
				       : (dc.text[0] ? dc.text : strerror(-r)));
		}
		conn_close(&dc);
	}
	json_decref(donors);
	return 0;
}

/* The tenant's entry, or an exit code (reason printed) when no memd has
 * a KV store of it. */
static int cap_find(struct cap_pool *p, const char *what, const char *name,
		    uint64_t id, struct cap_tenant **out)
{
	for (size_t i = 0; i < p->nt; i++)
		if (p->t[i].id == id) {
			p->t[i].name = name;
			*out = &p->t[i];
			return 0;
		}
	return fail(EXIT_REFUSED, what,
		    "tenant '%s' has no KV store on %s yet (no KV request "
		    "since memd started) (ENOENT)",
		    name, p->standalone ? "this memd" : "any donor");
}

/* Requests the curve still needs before it says anything: 0 when it has
 * CAP_MIN_SAMPLES sampled requests. */
static double cap_more_needed(const struct cap_tenant *t)
{
	double rate = t->have_rate && t->rate_min > 0 ? t->rate_min : 1;

	if (t->samples >= CAP_MIN_SAMPLES)
		return 0;
	return (CAP_MIN_SAMPLES - t->samples) / rate;
}

/* The curve as text: rows of hit ratio from 1 down, x log-scaled from lo
 * to hi; '*' the curve, '|' the capacity now. */
static void ascii_plot(const struct cap_tenant *t, double lo, double hi)
{
	enum { W = 60, H = 12 };
	char grid[H][W + 1], a[32], b[32];
	int capcol = -1;

	if (!(lo > 0) || !(hi > lo))
		return;
	memset(grid, ' ', sizeof(grid));
	for (int col = 0; col < W; col++) {
		double x = lo * __builtin_pow(hi / lo, (double)col / (W - 1));
		double h = cap_hit_at(t, x);
		int row = (int)((1 - h) * (H - 1) + 0.5);

		if (t->cap_bytes >= x && capcol < 0 && col + 1 < W &&
		    t->cap_bytes <
			    lo * __builtin_pow(hi / lo,
					       (double)(col + 1) / (W - 1)))
			capcol = col;
		grid[row < 0 ? 0 : row >= H ? H - 1 : row][col] = '*';
	}
	for (int r = 0; r < H; r++) {
		if (capcol >= 0 && grid[r][capcol] == ' ')
			grid[r][capcol] = '|';
		grid[r][W] = '\0';
		printf("%4.2f %s\n", 1 - (double)r / (H - 1), grid[r]);
	}
	ctl_fmt_size((uint64_t)lo, a, sizeof(a));
	ctl_fmt_size((uint64_t)hi, b, sizeof(b));
	printf("     %-*s%s\n", W - (int)strlen(b), a, b);
	printf("     (hit ratio by KV size, log scale; | = capacity now)\n");
}

/* The curve through gnuplot into a PNG file. 0 or an exit code. */
static int png_plot(const struct cap_tenant *t, double lo, double hi,
		    const char *file)
{
	char data[] = "/tmp/poolctl-curve-XXXXXX";
	int fd = mkstemp(data), r;
	FILE *f, *g;

	if (system("command -v gnuplot >/dev/null 2>&1"))
		return fail(EX_UNAVAILABLE, "tenant report",
			    "--png needs gnuplot, which is not installed "
			    "(apt-get install gnuplot-nox)");
	if (fd < 0 || !(f = fdopen(fd, "w")))
		return fail(EX_CANTCREAT, "tenant report", "%s: %s", data,
			    strerror(errno));
	for (int i = 0; i <= 200; i++) {
		double x = lo * __builtin_pow(hi / lo, i / 200.0);

		fprintf(f, "%.0f %.6f\n", x / (1 << 20), cap_hit_at(t, x));
	}
	fclose(f);
	g = popen("gnuplot", "w");
	if (!g) {
		unlink(data);
		return fail(EX_OSERR, "tenant report", "gnuplot: %s",
			    strerror(errno));
	}
	fprintf(g,
		"set terminal png size 800,500\nset output '%s'\n"
		"set logscale x 2\nset xlabel 'KV size (MiB)'\n"
		"set ylabel 'hit ratio'\nset yrange [0:1]\nset grid\n"
		"set arrow from %.3f, graph 0 to %.3f, graph 1 nohead\n"
		"plot '%s' using 1:2 with lines title 'tenant %s (S3-FIFO)'\n",
		file, t->cap_bytes / (1 << 20), t->cap_bytes / (1 << 20), data,
		t->name);
	r = pclose(g);
	unlink(data);
	if (r)
		return fail(EX_CANTCREAT, "tenant report",
			    "gnuplot could not write %s (status %d)", file, r);
	return 0;
}

static json_t *cap_tenant_json(const struct cap_pool *p,
			       const struct cap_tenant *t, bool curve)
{
	uint64_t req = jnum(t->stats, "requests");
	json_t *o = json_pack(
		"{sIsssOsfsfsfsfsfsIsfsisI}", "tenant_id", (json_int_t)t->id,
		"tenant", t->name ? t->name : "-", "stats", t->stats,
		"cap_bytes", t->cap_bytes, "saved_s", t->saved_s,
		"saved_s_per_hour", t->saved_h, "oneshot_put_s",
		t->oneshot_put_s, "period_s", t->period_s, "oneshot_bytes",
		(json_int_t)jnum(t->stats, "oneshot_bytes"),
		"gpu_s_saved_per_hour", t->saved_h, "donors", t->ndonors,
		"requests", (json_int_t)req);

	if (!o)
		return NULL;
	json_object_set_new(
		o, "hit_ratio",
		req ? json_real((double)jnum(t->stats, "request_hits") /
				(double)req)
		    : json_null());
	json_object_set_new(o, "model",
			    json_pack("{sIsIss}", "prefill_tokens_per_s",
				      (json_int_t)t->tps, "bytes_per_token",
				      (json_int_t)t->bpt, "from",
				      t->model_of_tenant   ? "tenant"
				      : t->model_of_client ? "client"
							   : "memd"));
	if (curve && t->ncurves) {
		json_t *at = json_array(), *pts = json_array();
		double lo, hi;

		for (size_t k = 0; k < CAP_NMULT; k++)
			json_array_append_new(
				at,
				json_pack("{sfsfsf}", "mult", cap_mult[k],
					  "bytes", cap_mult[k] * t->cap_bytes,
					  "hit",
					  cap_hit_at(t, cap_mult[k] *
								t->cap_bytes)));
		cap_range(t, &lo, &hi);
		for (int i = 0; lo > 0 && hi > lo && i <= 64; i++) {
			double x = lo * __builtin_pow(hi / lo, i / 64.0);

			json_array_append_new(
				pts, json_pack("[ff]", x, cap_hit_at(t, x)));
		}
		json_object_set_new(o, "curve",
				    json_pack("{sssfsfsfsfsoso}", "policy",
					      "S3-FIFO (mini-sim)", "rate",
					      t->rate_min, "window_samples",
					      t->samples, "window_requests",
					      t->requests_w, "memory_bytes",
					      t->memory, "at", at, "points",
					      pts));
	} else if (curve) {
		json_object_set_new(o, "curve", json_null());
	}
	return o;
}

int cmd_tenant_report(struct opts *o, const char *name)
{
	struct cap_pool p;
	struct cap_tenant *t = NULL;
	json_t *tenants = NULL;
	uint64_t tid = 0;
	char a[32], b[32], c[32];
	double lo, hi, more;
	int r = cap_gather(o, "tenant report", name, true, &p, &tenants, &tid);

	if (!r)
		r = cap_find(&p, "tenant report", name, tid, &t);
	if (r)
		goto out;
	if (o->json) {
		json_t *j = cap_tenant_json(&p, t, true);

		r = j ? print_json(j) : EX_OSERR;
		json_decref(j);
		goto png;
	}
	ctl_fmt_size((uint64_t)t->cap_bytes, a, sizeof(a));
	printf("tenant %s (id %" PRIu64 "): KV capacity %s of blocks on %u "
	       "memd%s\n",
	       name, t->id, a, t->ndonors, t->ndonors == 1 ? "" : "s");
	if (jnum(t->stats, "requests"))
		printf("hit ratio now   %.3f (%" PRIu64 " of %" PRIu64
		       " keys asked for were present)\n",
		       (double)jnum(t->stats, "request_hits") /
			       (double)jnum(t->stats, "requests"),
		       jnum(t->stats, "request_hits"),
		       jnum(t->stats, "requests"));
	else
		printf("hit ratio now   - (no request yet)\n");
	ctl_fmt_size(jnum(t->stats, "hit_bytes"), a, sizeof(a));
	fmt_secs(t->saved_s, b, sizeof(b));
	fmt_secs(t->saved_h, c, sizeof(c));
	printf("saved           %s served: %s of prefill recomputed, %s of "
	       "GPU time per hour\n",
	       a, b, c);
	ctl_fmt_size(t->bpt, a, sizeof(a));
	printf("                (model: %" PRIu64 " tokens/s prefill, %s per "
	       "token, %s)\n",
	       t->tps, a,
	       t->model_of_tenant   ? "the tenant's: poolctl tenant set"
	       : t->model_of_client ? "the client's hint: pool_kv(3)"
				    : "memd.conf's");
	ctl_fmt_size(jnum(t->stats, "oneshot_bytes"), a, sizeof(a));
	printf("wasted puts     %" PRIu64 " entries evicted unread, %s, "
	       "%.1f s of put time\n",
	       jnum(t->stats, "oneshot"), a, t->oneshot_put_s);
	if (!t->ncurves) {
		printf("curve           none (kv_mrc_samples = 0, or no "
		       "request yet)\n");
		goto png;
	}
	ctl_fmt_size((uint64_t)t->memory, a, sizeof(a));
	printf("curve           S3-FIFO, miniature simulations over SHARDS: "
	       "%.0f sampled requests "
	       "(rate %.4f) of about %.0f in the window, %s\n",
	       t->samples, t->rate_min, t->requests_w, a);
	more = cap_more_needed(t);
	if (more > 0)
		printf("                too few samples for a quota "
		       "suggestion: about %.0f more requests needed\n",
		       more);
	{
		struct table tb;

		table_init(&tb, "rrr", "SIZE", "X CAPACITY", "HIT RATIO");
		for (size_t k = 0; k < CAP_NMULT; k++) {
			char s1[32], s2[16], s3[16];

			ctl_fmt_size((uint64_t)(cap_mult[k] * t->cap_bytes), s1,
				     sizeof(s1));
			snprintf(s2, sizeof(s2), "%.2f", cap_mult[k]);
			snprintf(s3, sizeof(s3), "%.3f",
				 cap_hit_at(t, cap_mult[k] * t->cap_bytes));
			table_add(&tb, s1, s2, s3);
		}
		table_print(&tb);
		table_fini(&tb);
	}
	cap_range(t, &lo, &hi);
	if (t->cap_bytes * 4 > hi)
		hi = t->cap_bytes * 4;
	if (t->cap_bytes / 4 < lo && t->cap_bytes > 0)
		lo = t->cap_bytes / 4;
	ascii_plot(t, lo, hi);
png:
	if (!r && o->png) {
		cap_range(t, &lo, &hi);
		if (t->cap_bytes * 4 > hi)
			hi = t->cap_bytes * 4;
		if (t->cap_bytes > 0 && t->cap_bytes / 4 < lo)
			lo = t->cap_bytes / 4;
		if (!t->ncurves || !(lo > 0 && hi > lo))
			r = fail(EXIT_REFUSED, "tenant report",
				 "no curve to plot yet");
		else
			r = png_plot(t, lo, hi, o->png);
	}
out:
	json_decref(tenants);
	cap_free(&p);
	return r;
}

/*
 * The smallest total KV size whose merged hit ratio reaches h: a scan of
 * the covered range at 64 steps per doubling, then bisection. 0 when the
 * curve never gets there.
 */
static double cap_size_for(const struct cap_tenant *t, double h)
{
	double lo, hi, x, prev = 0;

	cap_range(t, &lo, &hi);
	if (!(lo > 0))
		return 0;
	for (x = lo / 2; x <= hi * 1.01; x *= 1.0108892860517) {
		if (cap_hit_at(t, x) >= h) {
			double a = prev, b = x;

			for (int i = 0; i < 50; i++) {
				double m = (a + b) / 2;

				if (cap_hit_at(t, m) >= h)
					b = m;
				else
					a = m;
			}
			return b;
		}
		prev = x;
	}
	return 0;
}

int cmd_quota_suggest(struct opts *o, const char *name, double hit)
{
	struct cap_pool p;
	struct cap_tenant *t = NULL;
	json_t *tenants = NULL, *j;
	uint64_t tid = 0, slabs, quota;
	double size, eff, best, more, se, lo_size, hi_size, lo, hi;
	char a[32], b[32], c[32];
	int r = cap_gather(o, "quota suggest", name, true, &p, &tenants, &tid);

	if (!r)
		r = cap_find(&p, "quota suggest", name, tid, &t);
	if (r)
		goto out;
	if (!t->ncurves) {
		r = fail(EXIT_REFUSED, "quota suggest",
			 "tenant '%s' has no miss-ratio curve (kv_mrc_samples "
			 "= 0 on its memd?) (ENODATA)",
			 name);
		goto out;
	}
	more = cap_more_needed(t);
	if (more > 0) {
		r = fail(EX_TEMPFAIL, "quota suggest",
			 "too few samples yet: %.0f of %d sampled requests; "
			 "about %.0f more requests of tenant '%s' are needed",
			 t->samples, CAP_MIN_SAMPLES, more, name);
		goto out;
	}
	cap_range(t, &lo, &hi);
	best = cap_hit_at(t, hi);
	size = cap_size_for(t, hit);
	if (!(size > 0)) {
		ctl_fmt_size((uint64_t)hi, a, sizeof(a));
		r = fail(EXIT_UNREACHABLE, "quota suggest",
			 "tenant '%s' never reaches a hit ratio of %.3f on its "
			 "curve: the best is %.3f, from %s up (the rest are "
			 "first requests or reuse beyond the window)",
			 name, hit, best, a);
		goto out;
	}
	/* 95 % interval of the estimate: the sampled requests behave as a
	 * binomial sample of the window's */
	se = 1.96 * __builtin_sqrt(hit * (1 - hit) / t->samples);
	lo_size = hit - se > 0 ? cap_size_for(t, hit - se) : 0;
	hi_size = hit + se <= best ? cap_size_for(t, hit + se) : 0;
	eff = t->cap_slabs > 0 && p.slab_bytes
		      ? t->cap_bytes / (t->cap_slabs * (double)p.slab_bytes)
		      : 1;
	if (!(eff > 0))
		eff = 1;
	slabs = (uint64_t)(size / (eff * (double)p.slab_bytes)) + 1;
	quota = slabs * p.slab_bytes;
	j = json_pack("{sssfsfsfsIsIsfsf}", "tenant", name, "target", hit,
		      "kv_bytes", size, "hit_at_quota",
		      cap_hit_at(t, (double)slabs * eff * (double)p.slab_bytes),
		      "quota_bytes", (json_int_t)quota, "slabs",
		      (json_int_t)slabs, "best", best, "confidence", se);
	json_object_set_new(j, "kv_bytes_low",
			    lo_size > 0 ? json_real(lo_size) : json_null());
	json_object_set_new(j, "kv_bytes_high",
			    hi_size > 0 ? json_real(hi_size) : json_null());
	json_object_set_new(j, "window_samples", json_real(t->samples));
	if (p.standalone && p.nslabs) {
		uint64_t pct = (slabs * 100 + p.nslabs - 1) / p.nslabs;

		/* more than the donation: kv_share cannot say it */
		json_object_set_new(j, "kv_share",
				    pct <= 100 ? json_integer((json_int_t)pct)
					       : json_null());
		json_object_set_new(j, "donated_slabs",
				    json_integer((json_int_t)p.nslabs));
	}
	if (o->json) {
		r = print_json(j);
		json_decref(j);
		goto out;
	}
	ctl_fmt_size(quota, a, sizeof(a));
	ctl_fmt_size((uint64_t)size, b, sizeof(b));
	printf("tenant %s: a hit ratio of %.3f needs %s of KV blocks: "
	       "quota %s (%" PRIu64 " slabs)\n",
	       name, hit, b, a, slabs);
	ctl_fmt_size((uint64_t)lo_size, b, sizeof(b));
	ctl_fmt_size((uint64_t)hi_size, c, sizeof(c));
	printf("confidence: +-%.3f (95%%, %.0f sampled requests): between "
	       "%s and %s\n",
	       se, t->samples, lo_size > 0 ? b : "0",
	       hi_size > 0 ? c : "more than the curve covers");
	if (json_is_integer(json_object_get(j, "kv_share")))
		printf("standalone memd: kv_share = %" PRIu64
		       " in memd.conf (of %" PRIu64 " slabs)\n",
		       jnum(j, "kv_share"), p.nslabs);
	else if (json_object_get(j, "kv_share"))
		printf("standalone memd: more than its whole donation (%" PRIu64
		       " slabs): donate at least %" PRIu64
		       " slabs, with kv_share = 100\n",
		       p.nslabs, slabs);
	else
		printf("set it: poolctl quota set %s %s (plus the tenant's "
		       "other use)\n",
		       name, a);
	json_decref(j);
out:
	json_decref(tenants);
	cap_free(&p);
	return r;
}

static int cap_cmp_saved(const void *a, const void *b)
{
	const struct cap_tenant *x = a, *y = b;

	return x->saved_s < y->saved_s ? 1 : x->saved_s > y->saved_s ? -1 : 0;
}

int cmd_top(struct opts *o)
{
	struct cap_pool p;
	json_t *tenants = NULL, *arr;
	uint64_t tid;
	struct table tb;
	int r = cap_gather(o, "top", NULL, false, &p, &tenants, &tid);

	if (r)
		goto out;
	for (size_t i = 0; i < p.nt; i++)
		p.t[i].name = tenant_name(tenants, p.t[i].id);
	qsort(p.t, p.nt, sizeof(p.t[0]), cap_cmp_saved);
	if (o->json) {
		arr = json_array();
		for (size_t i = 0; i < p.nt; i++)
			json_array_append_new(
				arr, cap_tenant_json(&p, &p.t[i], false));
		r = print_json(arr);
		json_decref(arr);
		goto out;
	}
	table_init(&tb, "lrrrrrr", "TENANT", "REQUESTS", "HIT", "SERVED",
		   "SAVED", "SAVED/H", "WASTED PUTS");
	for (size_t i = 0; i < p.nt; i++) {
		const struct cap_tenant *t = &p.t[i];
		uint64_t req = jnum(t->stats, "requests");
		char rq[24], h[16], sv[32], s1[32], s2[32], w[64], wb[32],
			nm[32];

		snprintf(nm, sizeof(nm), "%s", t->name ? t->name : "?");
		if (!t->name)
			snprintf(nm, sizeof(nm), "#%" PRIu64, t->id);
		snprintf(rq, sizeof(rq), "%" PRIu64, req);
		if (req)
			snprintf(h, sizeof(h), "%.3f",
				 (double)jnum(t->stats, "request_hits") /
					 (double)req);
		else
			snprintf(h, sizeof(h), "-");
		ctl_fmt_size(jnum(t->stats, "hit_bytes"), sv, sizeof(sv));
		fmt_secs(t->saved_s, s1, sizeof(s1));
		fmt_secs(t->saved_h, s2, sizeof(s2));
		ctl_fmt_size(jnum(t->stats, "oneshot_bytes"), wb, sizeof(wb));
		snprintf(w, sizeof(w), "%s, %.1f s", wb, t->oneshot_put_s);
		table_add(&tb, nm, rq, h, sv, s1, s2, w);
	}
	table_print(&tb);
	table_fini(&tb);
	if (p.ndonors_failed)
		fprintf(stderr,
			"poolctl: top: %u of %u donors did not answer; "
			"their figures are missing\n",
			p.ndonors_failed, p.ndonors_asked);
out:
	json_decref(tenants);
	cap_free(&p);
	return r;
}
