// SPDX-License-Identifier: MIT
/*
 * poolctl/tenants.c - tenants and quotas: `tenants`, `quota list|get|set`,
 * `tenant set|add|remove` (add generates or reads the tenant's secret).
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "poolctl/poolctl.h"

void tenants_table(const json_t *tenants, bool with_id)
{
	struct table t;
	size_t i;
	json_t *e;

	if (with_id)
		table_init(&t, "rlrrr", "ID", "NAME", "QUOTA", "USED",
			   "RESERVED");
	else
		table_init(&t, "lrrr", "TENANT", "QUOTA", "USED", "RESERVED");
	json_array_foreach(tenants, i, e)
	{
		char id[24], q[32], u[32], rs[32];

		snprintf(id, sizeof(id), "%" PRIu64, jnum(e, "id"));
		ctl_fmt_size(jnum(e, "quota_bytes"), q, sizeof(q));
		ctl_fmt_size(jnum(e, "used_bytes"), u, sizeof(u));
		ctl_fmt_size(jnum(e, "reserved_bytes"), rs, sizeof(rs));
		if (with_id)
			table_add(&t, id, jstr(e, "name"), q, u, rs);
		else
			table_add(&t, jstr(e, "name"), q, u, rs);
	}
	table_print(&t);
	table_fini(&t);
}

static void show_tenants(const json_t *rep)
{
	tenants_table(json_object_get(rep, "tenants"), true);
}

int cmd_tenants(struct opts *o)
{
	return registry_show(o, cmd_json("tenants"), "tenants", show_tenants);
}

static void quota_row(struct table *t, const json_t *e)
{
	uint64_t q = jnum(e, "quota_bytes"), u = jnum(e, "used_bytes"),
		 rs = jnum(e, "reserved_bytes");
	char qb[32], ub[32], rb[32], ab[32], pct[16];

	ctl_fmt_size(q, qb, sizeof(qb));
	ctl_fmt_size(u, ub, sizeof(ub));
	ctl_fmt_size(rs, rb, sizeof(rb));
	ctl_fmt_size(q > u + rs ? q - u - rs : 0, ab, sizeof(ab));
	if (q)
		snprintf(pct, sizeof(pct), "%.1f%%",
			 100.0 * (double)(u + rs) / (double)q);
	else
		snprintf(pct, sizeof(pct), "-");
	table_add(t, jstr(e, "name"), qb, ub, rb, ab, pct);
}

static void quota_table_init(struct table *t)
{
	table_init(t, "lrrrrr", "TENANT", "QUOTA", "USED", "RESERVED",
		   "AVAILABLE", "USE%");
}

/* The reply's tenants as a quota table. */
static void show_quotas(const json_t *rep)
{
	struct table t;
	size_t i;
	json_t *e;

	quota_table_init(&t);
	json_array_foreach(json_object_get(rep, "tenants"), i, e)
		quota_row(&t, e);
	table_print(&t);
	table_fini(&t);
}

int cmd_quota_list(struct opts *o)
{
	return registry_show(o, cmd_json("tenants"), "quota list", show_quotas);
}

int cmd_quota_get(struct opts *o, const char *name)
{
	json_t *rep, *req = cmd_json("quota-get");
	struct table t;
	int r;

	json_object_set_new(req, "name", json_string(name));
	r = registry_call(o, req, &rep, "quota get");
	if (r)
		return r;
	if (o->json) {
		r = print_json(rep);
		json_decref(rep);
		return r;
	}
	quota_table_init(&t);
	quota_row(&t, rep);
	table_print(&t);
	table_fini(&t);
	json_decref(rep);
	return 0;
}

int cmd_quota_set(struct opts *o, const char *name, uint64_t bytes)
{
	json_t *rep, *req = cmd_json("quota-set");
	struct conn c;
	char b[32];
	int r;

	json_object_set_new(req, "name", json_string(name));
	json_object_set_new(req, "quota_bytes",
			    json_integer((json_int_t)bytes));
	r = registry_open(o, &c, "quota set");
	if (r) {
		json_decref(req);
		return r;
	}
	r = admin(o, &c, req, &rep, "quota set");
	if (!r)
		warn_above_capacity(o, &c, "quota set", bytes);
	conn_close(&c);
	if (r)
		return r;
	if (o->json) {
		r = print_json(rep);
	} else {
		ctl_fmt_size(bytes, b, sizeof(b));
		printf("tenant '%s': quota %s (%" PRIu64 " bytes)\n", name, b,
		       bytes);
	}
	json_decref(rep);
	return r;
}

/* tenant set: the tenant's cost model (docs/capacity.md); 0: memd's. */
int cmd_tenant_set(struct opts *o, const char *name, bool set_tps, uint64_t tps,
		   bool set_bpt, uint64_t bpt)
{
	json_t *rep, *req = cmd_json("tenant-set");
	int r;

	json_object_set_new(req, "name", json_string(name));
	if (set_tps)
		json_object_set_new(req, "prefill_tokens_per_s",
				    json_integer((json_int_t)tps));
	if (set_bpt)
		json_object_set_new(req, "bytes_per_token",
				    json_integer((json_int_t)bpt));
	r = registry_call(o, req, &rep, "tenant set");
	if (r)
		return r;
	if (o->json) {
		r = print_json(rep);
	} else {
		char b[32];

		printf("tenant '%s':", name);
		if (set_tps && tps)
			printf(" prefill %" PRIu64 " tokens/s", tps);
		else if (set_tps)
			printf(" prefill rate: each memd's");
		if (set_tps && set_bpt)
			printf(",");
		ctl_fmt_size(bpt, b, sizeof(b));
		if (set_bpt && bpt)
			printf(" %s per token", b);
		else if (set_bpt)
			printf(" bytes per token: each memd's");
		printf("\n");
	}
	json_decref(rep);
	return r;
}

/* ---- tenant add / remove ---------------------------------------------- */

/* Creates path (0600, must not exist) holding hex and a newline. */
static int write_secret_file(const char *path, const char *hex)
{
	size_t len = strlen(hex);
	int fd =
		open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		     0600);
	int err = 0;

	if (fd < 0)
		return fail(EX_CANTCREAT, "tenant add", "cannot create %s: %s",
			    path, strerror(errno));
	if (write(fd, hex, len) != (ssize_t)len || write(fd, "\n", 1) != 1 ||
	    fsync(fd))
		err = errno ? errno : EIO;
	if (close(fd) && !err)
		err = errno;
	if (err) {
		unlink(path);
		return fail(EX_CANTCREAT, "tenant add", "cannot write %s: %s",
			    path, strerror(err));
	}
	return 0;
}

int cmd_tenant_add(struct opts *o, const char *name, uint64_t quota)
{
	uint8_t secret[AUTH_SECRET_MAX], key[AUTH_KEY_LEN];
	uint8_t box[AUTH_SEAL_OVERHEAD + AUTH_KEY_LEN];
	char hex[2 * AUTH_SECRET_MAX + 1], boxhex[2 * sizeof(box) + 1];
	char err[256], qb[32];
	bool generated = !o->secret_file, wrote = false;
	json_t *req, *rep = NULL;
	struct conn c;
	int r, n;

	/* The tenant's key, before anything is created or sent. */
	if (o->secret_file) {
		n = auth_read_secret_file(o->secret_file, secret, err,
					  sizeof(err));
		if (n < 0)
			return fail(secret_file_exit(n), "tenant add",
				    "tenant secret: %s", err);
		auth_tenant_key(secret, (size_t)n, key);
	} else {
		/* The secret is the hex text, as the tenant's secret file
		 * will hold it (auth_read_secret_file drops the newline). */
		auth_random(secret, TENANT_SECRET_BYTES);
		auth_hex(secret, TENANT_SECRET_BYTES, hex);
		auth_tenant_key((const uint8_t *)hex, strlen(hex), key);
	}
	explicit_bzero(secret, sizeof(secret));

	r = conn_open(o, o->addr, &c, "tenant add");
	if (r)
		goto out;
	if (c.standalone) {
		r = fail(EXIT_REFUSED, "tenant add",
			 "memd at %s is standalone: it has no tenants "
			 "(EOPNOTSUPP)",
			 o->addr);
		goto out_conn;
	}
	/* A generated secret is on disk before the tenant exists, so a
	 * tenant never exists whose secret nobody has. */
	if (generated && o->secret_out) {
		r = write_secret_file(o->secret_out, hex);
		if (r)
			goto out_conn;
		wrote = true;
	}
	n = auth_seal(c.skey, key, sizeof(key), box, sizeof(box));
	if (n < 0) {
		r = fail(EX_SOFTWARE, "tenant add", "cannot seal the key: %s",
			 strerror(-n));
		goto out_conn;
	}
	auth_hex(box, (size_t)n, boxhex);
	req = json_pack("{ss ss sI ss}", "cmd", "tenant-add", "name", name,
			"quota_bytes", (json_int_t)quota, "key_box", boxhex);
	if (!req) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	r = admin(o, &c, req, &rep, "tenant add");
	if (r) {
		/* Refused: nothing was added, so the new file is useless.
		 * A lost connection leaves the outcome unknown: keep it. */
		if (wrote && r != EX_UNAVAILABLE && r != EX_TEMPFAIL)
			unlink(o->secret_out);
		else if (wrote)
			fprintf(stderr,
				"poolctl: tenant add: the outcome is unknown; "
				"%s is kept (check with: poolctl tenants)\n",
				o->secret_out);
		goto out_conn;
	}
	warn_above_capacity(o, &c, "tenant add", quota);
	if (generated && !o->secret_out) {
		fprintf(stderr,
			"poolctl: warning: the new tenant's secret is printed "
			"once and cannot be recovered; store it in a file of "
			"mode 0600 for the tenant (or use --secret-out)\n");
		if (o->json)
			json_object_set_new(rep, "secret", json_string(hex));
	}
	if (o->json) {
		r = print_json(rep);
	} else {
		ctl_fmt_size(quota, qb, sizeof(qb));
		printf("tenant '%s' added: id %" PRIu64 ", quota %s\n", name,
		       jnum(rep, "id"), qb);
		if (generated && o->secret_out)
			printf("secret written to %s\n", o->secret_out);
		else if (generated)
			printf("secret: %s\n", hex);
	}
out_conn:
	conn_close(&c);
out:
	json_decref(rep);
	explicit_bzero(key, sizeof(key));
	explicit_bzero(hex, sizeof(hex));
	explicit_bzero(boxhex, sizeof(boxhex));
	return r;
}

int cmd_tenant_remove(struct opts *o, const char *name)
{
	json_t *rep, *req = cmd_json("tenant-remove");
	int r;

	json_object_set_new(req, "name", json_string(name));
	r = registry_call(o, req, &rep, "tenant remove");
	if (r)
		return r;
	/* The registry answers {}: say what went, for scripts. */
	json_object_set_new(rep, "removed", json_string(name));
	if (o->json)
		r = print_json(rep);
	else
		printf("tenant '%s' removed\n", name);
	json_decref(rep);
	return r;
}
