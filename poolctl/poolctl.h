// SPDX-License-Identifier: MIT
/*
 * poolctl/poolctl.h - poolctl's internal interface (poolctl(8); not
 * installed): the options, the connection and the table every verb uses,
 * and what each file offers the others.
 *
 * main.c      usage, options, the command line, dispatch
 * out.c       messages and exit codes, sizes, tables, JSON fields
 * conn.c      HELLO, AUTH, ADMIN requests to the registry or one memd
 * status.c    status
 * tenants.c   tenants, quota list|get|set, tenant set|add|remove
 * donors.c    donors, drain, undrain, leases
 * capacity.c  tenant report, quota suggest, top
 */
#ifndef TP_POOLCTL_POOLCTL_H
#define TP_POOLCTL_POOLCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/wire.h"

#define DEFAULT_ADDR "127.0.0.1:7470"
#define DEFAULT_SECRET_FILE "/etc/tidepool/cluster.secret"
#define DEFAULT_TIMEOUT_MS 5000
#define EXIT_REFUSED 1	       /* memd said no, for another reason */
#define TENANT_SECRET_BYTES 32 /* random bytes of a generated secret */
#define MAX_COLS 12

/* ---- options ---------------------------------------------------------- */

struct opts {
	const char *addr;
	const char *cluster_secret; /* file */
	bool json;
	int timeout_ms;
	/* subcommand options; NULL / false when not given */
	const char *quota;
	const char *secret_file; /* tenant add: the tenant's secret */
	const char *secret_out;	 /* tenant add: where a new secret goes */
	const char *donor;	 /* leases --donor */
	const char *tenant;	 /* leases --tenant */
	const char *png;	 /* tenant report --png FILE */
	const char *hit;	 /* quota suggest --hit H */
	const char *tps;	 /* tenant set --prefill-tokens-per-s N */
	const char *bpt;	 /* tenant set --bytes-per-token SIZE */
	/* the cluster keys, read once when the first AUTH needs them */
	bool have_keys;
	struct auth_cluster_keys keys;
};

/* Rows of strings printed with aligned columns; align 'l' or 'r' per
 * column; the last column is not padded (no trailing blanks). */
struct table {
	int ncols;
	const char *head[MAX_COLS];
	char align[MAX_COLS];
	char **cell; /* nrows * ncols, owned */
	size_t nrows, cap;
};

/* A connection to the registry or a memd, authenticated as "@admin". */
struct conn {
	struct rpc *rpc;
	const char *addr;
	bool standalone;
	uint16_t proto;
	uint8_t skey[AUTH_KEY_LEN]; /* session key, after AUTH_OK */
	struct wire_msg *req, *rep;
	char text[WIRE_MSG_MAX];
};

/* ---- out.c: messages, exit codes, sizes, tables, JSON ---- */

int fail(int code, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void *xcalloc(size_t n, size_t size);
int ctl_exit_for(int err);
const char *errname(int err);
int ctl_parse_size(const char *s, uint64_t *out);
void ctl_fmt_size(uint64_t b, char *buf, size_t len);
void table_init(struct table *t, const char *align, ...);
void table_add(struct table *t, ...);
void table_print(struct table *t);
void table_fini(struct table *t);
uint64_t jnum(const json_t *o, const char *key);
int64_t jint(const json_t *o, const char *key);
const char *jstr(const json_t *o, const char *key);
int print_json(const json_t *v);
void fmt_since(uint64_t unix_ms, char *buf, size_t len);
const char *tenant_name(const json_t *tenants, uint64_t id);
void fmt_secs(double s, char *buf, size_t len);
extern bool fail_hold;
extern char fail_held[1024];

/* ---- conn.c: the connection ---- */

int conn_open(struct opts *o, const char *addr, struct conn *c,
	      const char *what);
void conn_close(struct conn *c);
int call_failed(const struct conn *c, const char *what, int r);
int secret_file_exit(int err);
json_t *cmd_json(const char *cmd);
int admin_quiet(struct opts *o, struct conn *c, json_t *req, json_t **out,
		json_error_t *jerr);
int admin(struct opts *o, struct conn *c, json_t *req, json_t **out,
	  const char *what);
void warn_above_capacity(struct opts *o, struct conn *c, const char *what,
			 uint64_t quota);
int registry_open(struct opts *o, struct conn *c, const char *what);
int registry_call(struct opts *o, json_t *req, json_t **out, const char *what);
int registry_show(struct opts *o, json_t *req, const char *what,
		  void (*show)(const json_t *rep));

/* ---- status.c ---- */

int cmd_status(struct opts *o);

/* ---- tenants.c ---- */

void tenants_table(const json_t *tenants, bool with_id);
int cmd_tenants(struct opts *o);
int cmd_quota_list(struct opts *o);
int cmd_quota_get(struct opts *o, const char *name);
int cmd_quota_set(struct opts *o, const char *name, uint64_t bytes);
int cmd_tenant_set(struct opts *o, const char *name, bool set_tps, uint64_t tps,
		   bool set_bpt, uint64_t bpt);
int cmd_tenant_add(struct opts *o, const char *name, uint64_t quota);
int cmd_tenant_remove(struct opts *o, const char *name);

/* ---- donors.c ---- */

int cmd_donors(struct opts *o);
int cmd_drain(struct opts *o, const char *donor, bool drain);
int cmd_leases(struct opts *o);

/* ---- capacity.c ---- */

int cmd_tenant_report(struct opts *o, const char *name);
int cmd_quota_suggest(struct opts *o, const char *name, double hit);
int cmd_top(struct opts *o);

#endif
