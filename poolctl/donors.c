// SPDX-License-Identifier: MIT
/*
 * poolctl/donors.c - donors: `donors`, `drain`/`undrain`, and `leases`
 * (the registry's view and each donor memd's own).
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "poolctl/poolctl.h"

/* "a=1.0 GiB (2) b=4.0 MiB (1)": used bytes and live sessions per
 * tenant. */
static void fmt_usage(const json_t *tenants, char *buf, size_t len)
{
	size_t i, off = 0;
	json_t *e;

	buf[0] = '\0';
	json_array_foreach(tenants, i, e)
	{
		char b[32];
		int n;

		ctl_fmt_size(jnum(e, "used_bytes"), b, sizeof(b));
		n = snprintf(buf + off, len - off, "%s%s=%s (%" PRIu64 ")",
			     off ? " " : "", jstr(e, "name"), b,
			     jnum(e, "sessions"));
		if (n < 0 || (size_t)n >= len - off) {
			buf[off] = '\0';
			snprintf(buf + off, len - off, off ? " ..." : "...");
			return;
		}
		off += (size_t)n;
	}
	if (!off)
		snprintf(buf, len, "-");
}

static void print_donors(const json_t *rep)
{
	struct table t;
	size_t i;
	json_t *e;

	table_init(&t, "rlllllrrrl", "ID", "NAME", "ADDR", "STATE", "SINCE",
		   "REASON", "CAPACITY", "FREE", "LEASED", "TENANTS");
	json_array_foreach(json_object_get(rep, "donors"), i, e)
	{
		uint64_t total = jnum(e, "slabs_total");
		uint64_t cap = jnum(e, "capacity_bytes");
		uint64_t slab = total ? cap / total : 0;
		char id[24], since[32], cb[32], fb[32], lb[32], use[512];

		snprintf(id, sizeof(id), "%" PRIu64, jnum(e, "id"));
		fmt_since(jnum(e, "since_unix_ms"), since, sizeof(since));
		ctl_fmt_size(cap, cb, sizeof(cb));
		ctl_fmt_size(jnum(e, "free_bytes"), fb, sizeof(fb));
		ctl_fmt_size(jnum(e, "slabs_leased") * slab, lb, sizeof(lb));
		fmt_usage(json_object_get(e, "tenants"), use, sizeof(use));
		table_add(&t, id, jstr(e, "name"), jstr(e, "addr"),
			  jstr(e, "state"), since, jstr(e, "reason"), cb, fb,
			  lb, use);
	}
	table_print(&t);
	table_fini(&t);
}

int cmd_donors(struct opts *o)
{
	return registry_show(o, cmd_json("donors"), "donors", print_donors);
}

int cmd_drain(struct opts *o, const char *donor, bool drain)
{
	const char *what = drain ? "drain" : "undrain";
	json_t *rep, *req = cmd_json("drain");
	int r;

	json_object_set_new(req, "donor", json_string(donor));
	json_object_set_new(req, "drain", json_boolean(drain));
	r = registry_call(o, req, &rep, what);
	if (r)
		return r;
	if (o->json)
		r = print_json(rep);
	else if (drain)
		printf("donor '%s': draining (no new leases; existing ones "
		       "live on)\n",
		       donor);
	else
		printf("donor '%s': undrained (takes new leases again)\n",
		       donor);
	json_decref(rep);
	return r;
}

/* ---- leases ----------------------------------------------------------- */

struct leases_out {
	struct table t;
	json_t *all; /* --json: one flat array */
	bool truncated;
};

/* Asks one memd for its leases and adds the matching ones to lo. */
static int donor_leases(struct opts *o, struct conn *c, const char *donor,
			const json_t *tenants, int64_t tenant_id,
			struct leases_out *lo)
{
	json_t *rep, *e;
	size_t i;
	int r = admin(o, c, cmd_json("leases"), &rep, "leases");

	if (r)
		return r;
	if (json_is_true(json_object_get(rep, "truncated")))
		lo->truncated = true;
	json_array_foreach(json_object_get(rep, "leases"), i, e)
	{
		uint64_t tid = jnum(e, "tenant_id");
		int64_t ms = jint(e, "expires_in_ms"), node = jint(e, "node");
		const char *tn = tenant_name(tenants, tid);
		char slab[24], gen[24], nd[24], tb[80], exp[32];

		if (tenant_id >= 0 && (uint64_t)tenant_id != tid)
			continue;
		if (o->json) {
			json_t *l = json_deep_copy(e);

			json_object_set_new(l, "donor", json_string(donor));
			json_object_set_new(l, "tenant",
					    tn ? json_string(tn) : json_null());
			json_array_append_new(lo->all, l);
			continue;
		}
		snprintf(slab, sizeof(slab), "%" PRIu64, jnum(e, "slab"));
		snprintf(gen, sizeof(gen), "%" PRIu64, jnum(e, "generation"));
		if (node < 0)
			snprintf(nd, sizeof(nd), "-");
		else
			snprintf(nd, sizeof(nd), "%" PRId64, node);
		if (tn)
			snprintf(tb, sizeof(tb), "%s", tn);
		else
			snprintf(tb, sizeof(tb), "#%" PRIu64, tid);
		if (ms < 0)
			snprintf(exp, sizeof(exp), "expired");
		else
			snprintf(exp, sizeof(exp),
				 "%" PRId64 ".%01" PRId64 " s", ms / 1000,
				 (ms % 1000) / 100);
		table_add(&lo->t, donor, slab, gen, nd, tb, jstr(e, "session"),
			  exp,
			  json_is_string(json_object_get(e, "path"))
				  ? jstr(e, "path")
				  : "-");
	}
	json_decref(rep);
	return 0;
}

int cmd_leases(struct opts *o)
{
	struct leases_out lo = { .all = json_array() };
	json_t *donors = NULL, *tenants = NULL, *d;
	int64_t tenant_id = -1;
	bool found_donor = false;
	struct conn c;
	int r, worst = 0;
	size_t i;

	if (!lo.all) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	table_init(&lo.t, "lrrrllll", "DONOR", "SLAB", "GEN", "NODE", "TENANT",
		   "SESSION", "EXPIRES-IN", "PATH");
	r = conn_open(o, o->addr, &c, "leases");
	if (r)
		goto out;
	if (c.standalone) {
		/* One memd, no registry: its own leases, all "default". */
		if (o->donor && strcmp(o->donor, o->addr)) {
			r = fail(EXIT_REFUSED, "leases",
				 "memd at %s is standalone: its only donor is "
				 "\"%s\" (ENOENT)",
				 o->addr, o->addr);
		} else if (o->tenant && strcmp(o->tenant, "default")) {
			r = fail(EXIT_REFUSED, "leases",
				 "memd at %s is standalone: its only tenant is "
				 "\"default\" (ENOENT)",
				 o->addr);
		} else if (c.proto < 2) {
			r = fail(EXIT_REFUSED, "leases",
				 "memd at %s speaks protocol 1 only; leases "
				 "needs protocol 2 (EOPNOTSUPP)",
				 o->addr);
		} else {
			r = donor_leases(o, &c, o->addr, NULL,
					 o->tenant ? 0 : -1, &lo);
		}
		conn_close(&c);
		if (r)
			goto out;
		goto print;
	}
	r = admin(o, &c, cmd_json("tenants"), &tenants, "leases");
	if (!r)
		r = admin(o, &c, cmd_json("donors"), &donors, "leases");
	conn_close(&c);
	if (r)
		goto out;
	if (o->tenant) {
		json_t *e;

		json_array_foreach(json_object_get(tenants, "tenants"), i,
				   e) if (!strcmp(jstr(e, "name"), o->tenant))
			tenant_id = (int64_t)jnum(e, "id");
		if (tenant_id < 0) {
			r = fail(EXIT_REFUSED, "leases",
				 "no tenant '%s' (ENOENT)", o->tenant);
			goto out;
		}
	}
	json_array_foreach(json_object_get(donors, "donors"), i, d)
	{
		const char *name = jstr(d, "name"), *state = jstr(d, "state");
		struct conn dc;

		if (o->donor && strcmp(o->donor, name))
			continue;
		found_donor = true;
		if (strcmp(state, "up") && strcmp(state, "draining")) {
			if (o->donor)
				fprintf(stderr,
					"poolctl: leases: donor '%s' is %s: "
					"it cannot be asked\n",
					name, state);
			continue;
		}
		r = conn_open(o, jstr(d, "addr"), &dc, "leases");
		if (!r) {
			r = donor_leases(o, &dc, name,
					 json_object_get(tenants, "tenants"),
					 tenant_id, &lo);
			conn_close(&dc);
		}
		/* One donor failing leaves the others worth showing. */
		if (r && (!worst || r != EXIT_REFUSED))
			worst = r;
	}
	r = 0;
	if (o->donor && !found_donor) {
		r = fail(EXIT_REFUSED, "leases", "no donor '%s' (ENOENT)",
			 o->donor);
		goto out;
	}
print:
	if (o->json) {
		json_t *out = json_pack("{sOsb}", "leases", lo.all, "truncated",
					lo.truncated);

		if (!out) {
			fputs("poolctl: out of memory\n", stderr);
			exit(EX_OSERR);
		}
		r = print_json(out);
		json_decref(out);
	} else {
		table_print(&lo.t);
	}
	if (lo.truncated)
		fprintf(stderr, "poolctl: leases: a memd had more leases than "
				"one reply holds; the list is incomplete\n");
	if (!r)
		r = worst;
out:
	table_fini(&lo.t);
	json_decref(lo.all);
	json_decref(donors);
	json_decref(tenants);
	return r;
}
