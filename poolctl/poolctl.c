// SPDX-License-Identifier: MIT
/*
 * poolctl/poolctl.c - poolctl(8), the capacity planner's CLI: pool status,
 * donors, tenants, quotas, drain, leases (docs/cluster.md, "Admin
 * requests"; the manual is man/poolctl.8).
 *
 * One process, one thread, one request at a time. poolctl connects to the
 * registry (or a standalone memd), says HELLO, authenticates as the
 * principal "@admin" with the cluster admin key (auth_cluster_keys of the
 * cluster secret), sends ADMIN requests carrying JSON and prints the
 * replies as aligned tables, or with --json the reply itself, validated
 * and re-serialized with sorted keys. `leases` also asks every up or
 * draining donor's own memd, as "@admin" there too.
 *
 * A standalone memd answers AUTH with EOPNOTSUPP (or speaks protocol 1
 * only): then `status` uses STATUS and `leases` ADMIN leases without
 * authentication; the other commands have nothing to act on there.
 *
 * Every argument is checked before anything is sent, so a bad one changes
 * nothing. Exit codes follow sysexits(3) (see ctl_exit_for and the man
 * page). Keys and secrets live in this process only as long as needed and
 * are wiped (explicit_bzero) afterwards; none is ever printed except the
 * tenant secret that `tenant add` generated when no --secret-out is given.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/hostport.h"
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
	/* the cluster keys, read once when the first AUTH needs them */
	bool have_keys;
	struct auth_cluster_keys keys;
};

static void usage(FILE *f)
{
	fputs("usage: poolctl [-a HOST:PORT] [-s SECRET_FILE] [--json] "
	      "[--timeout MS] COMMAND ...\n"
	      "commands:\n"
	      "  status                        pool capacity, use, donors "
	      "and tenants\n"
	      "  donors                        every donor, its state and "
	      "use\n"
	      "  tenants                       every tenant and its quota\n"
	      "  tenant add NAME --quota SIZE [--secret-file F | "
	      "--secret-out F]\n"
	      "  tenant remove NAME\n"
	      "  quota get NAME\n"
	      "  quota set NAME SIZE\n"
	      "  quota list\n"
	      "  drain DONOR                   place nothing new on DONOR\n"
	      "  undrain DONOR\n"
	      "  leases [--donor NAME] [--tenant NAME]\n"
	      "options:\n"
	      "  -a, --addr HOST:PORT          registry or memd (default "
	      "$POOLCTL_ADDR, else " DEFAULT_ADDR ");\n"
	      "                                a list HOST:PORT,... of "
	      "registries is tried in turn\n"
	      "  -s, --cluster-secret FILE     cluster secret (default "
	      "$TIDEPOOL_CLUSTER_SECRET_FILE,\n"
	      "                                else " DEFAULT_SECRET_FILE ")\n"
	      "  -j, --json                    print JSON instead of tables\n"
	      "  -t, --timeout MS              per request (default 5000)\n"
	      "  -h, --help                    this text\n"
	      "sizes are binary: 512M, 8G, 1.5T (K, M, G, T, P, E; an "
	      "optional iB or B)\n",
	      f);
}

static int usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("poolctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	usage(stderr);
	return EX_USAGE;
}

/* Prints "poolctl: <what>: <message>" and returns code. */
static int fail(int code, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* While a list of registries is tried, failures are held here and only
 * the last one is printed (conn_open). */
static bool fail_hold;
static char fail_held[1024];

static int fail(int code, const char *what, const char *fmt, ...)
{
	va_list ap;

	if (fail_hold) {
		va_start(ap, fmt);
		vsnprintf(fail_held, sizeof(fail_held), fmt, ap);
		va_end(ap);
		return code;
	}
	fprintf(stderr, "poolctl: %s: ", what);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	return p;
}

static char *xstrdup(const char *s)
{
	char *p = strdup(s);

	if (!p) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	return p;
}

/*
 * The exit code for an error memd (or the connection to it) gave:
 * 69 unavailable, 75 temporary, 77 permission, 74 I/O, else 1.
 */
static int ctl_exit_for(int err)
{
	switch (err < 0 ? -err : err) {
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENOTCONN:
	case ECONNRESET:
	case EPIPE:
		return EX_UNAVAILABLE;
	case ETIMEDOUT:
	case EBUSY:
	case EAGAIN:
		return EX_TEMPFAIL;
	case EACCES:
	case EPERM:
		return EX_NOPERM;
	case EPROTO:
	case EBADMSG:
	case EIO:
		return EX_IOERR;
	default:
		return EXIT_REFUSED;
	}
}

static const char *errname(int err)
{
	const char *n = strerrorname_np(err < 0 ? -err : err);

	return n ? n : "EIO";
}

/* ---- sizes ------------------------------------------------------------ */

/*
 * Parses a binary size: digits, an optional fraction, an optional unit
 * K M G T P E (case-insensitive, powers of 1024) optionally followed by
 * "iB" or "B", or a plain "B". A fraction (with a unit only) rounds to
 * the nearest byte.
 * Returns 0, -EINVAL (malformed) or -ERANGE (above INT64_MAX, the most
 * JSON carries exactly).
 */
static int ctl_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGTPE";
	unsigned __int128 ip = 0, fp = 0, fscale = 1, unit = 1, v;
	const char *p = s, *u;
	int nfrac = 0;

	if (!(*p >= '0' && *p <= '9'))
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		ip = ip * 10 + (unsigned)(*p - '0');
		if (ip > INT64_MAX)
			return -ERANGE;
	}
	if (*p == '.') {
		p++;
		if (!(*p >= '0' && *p <= '9'))
			return -EINVAL;
		for (; *p >= '0' && *p <= '9'; p++) {
			if (nfrac == 18)
				continue; /* beyond an attobyte: ignored */
			fp = fp * 10 + (unsigned)(*p - '0');
			fscale *= 10;
			nfrac++;
		}
	}
	if (*p && (u = memchr(units, *p & ~0x20, sizeof(units) - 1))) {
		unit = (unsigned __int128)1 << (10 * (u - units + 1));
		p++;
		if (p[0] == 'i' && p[1] == 'B')
			p += 2;
		else if (p[0] == 'B' || p[0] == 'b')
			p++;
	} else if (*p == 'B' || *p == 'b') {
		p++;
	}
	if (*p || (nfrac && unit == 1))
		return -EINVAL; /* no fractions of a byte */
	v = ip * unit + (fp * unit + fscale / 2) / fscale;
	if (v > INT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* "512 B", "1.0 KiB", "1.5 GiB": one decimal, the largest unit that
 * leaves at least 1 (after rounding). */
static void ctl_fmt_size(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB",
					     "TiB", "PiB", "EiB" };
	unsigned __int128 tenths;
	int k = 0;

	if (b < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", b);
		return;
	}
	while (k < 5 && b >> (10 * (k + 2)))
		k++;
	tenths = ((unsigned __int128)b * 10 +
		  ((uint64_t)1 << (10 * (k + 1))) / 2) >>
		 (10 * (k + 1));
	if (tenths >= 10240 && k < 5) {
		k++;
		tenths = ((unsigned __int128)b * 10 +
			  ((uint64_t)1 << (10 * (k + 1))) / 2) >>
			 (10 * (k + 1));
	}
	snprintf(buf, len, "%" PRIu64 ".%u %s", (uint64_t)(tenths / 10),
		 (unsigned)(tenths % 10), units[k]);
}

/* ---- tables ----------------------------------------------------------- */

/* Rows of strings printed with aligned columns; align 'l' or 'r' per
 * column; the last column is not padded (no trailing blanks). */
struct table {
	int ncols;
	const char *head[MAX_COLS];
	char align[MAX_COLS];
	char **cell; /* nrows * ncols, owned */
	size_t nrows, cap;
};

static void table_init(struct table *t, const char *align, ...)
{
	va_list ap;

	memset(t, 0, sizeof(*t));
	t->ncols = (int)strlen(align);
	memcpy(t->align, align, (size_t)t->ncols);
	va_start(ap, align);
	for (int i = 0; i < t->ncols; i++)
		t->head[i] = va_arg(ap, const char *);
	va_end(ap);
}

/* Adds a row of ncols strings (copied). */
static void table_add(struct table *t, ...)
{
	va_list ap;

	if (t->nrows == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		char **c = xcalloc(cap * (size_t)t->ncols, sizeof(*c));

		if (t->cell)
			memcpy(c, t->cell,
			       t->nrows * (size_t)t->ncols * sizeof(*c));
		free(t->cell);
		t->cell = c;
		t->cap = cap;
	}
	va_start(ap, t);
	for (int i = 0; i < t->ncols; i++)
		t->cell[t->nrows * (size_t)t->ncols + (size_t)i] =
			xstrdup(va_arg(ap, const char *));
	va_end(ap);
	t->nrows++;
}

static void print_row(const struct table *t, const size_t *w,
		      const char *const *row)
{
	for (int i = 0; i < t->ncols; i++) {
		bool last = i == t->ncols - 1;
		int pad = (int)w[i];

		if (i)
			fputs("  ", stdout);
		if (t->align[i] == 'r')
			printf("%*s", pad, row[i]);
		else if (last)
			fputs(row[i], stdout);
		else
			printf("%-*s", pad, row[i]);
	}
	fputc('\n', stdout);
}

static void table_print(struct table *t)
{
	size_t w[MAX_COLS];

	for (int i = 0; i < t->ncols; i++) {
		w[i] = strlen(t->head[i]);
		for (size_t r = 0; r < t->nrows; r++) {
			size_t n = strlen(
				t->cell[r * (size_t)t->ncols + (size_t)i]);

			if (n > w[i])
				w[i] = n;
		}
	}
	print_row(t, w, t->head);
	for (size_t r = 0; r < t->nrows; r++)
		print_row(t, w,
			  (const char *const *)&t->cell[r * (size_t)t->ncols]);
}

static void table_fini(struct table *t)
{
	for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
		free(t->cell[i]);
	free(t->cell);
}

/* ---- JSON helpers ----------------------------------------------------- */

static uint64_t jnum(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	if (json_is_integer(v))
		return json_integer_value(v) < 0
			       ? 0
			       : (uint64_t)json_integer_value(v);
	if (json_is_real(v) && json_real_value(v) > 0)
		return (uint64_t)json_real_value(v);
	return 0;
}

static int64_t jint(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

/* A string field, or "-" when missing or empty. */
static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s && *s ? s : "-";
}

/* Prints v with sorted keys and indentation. 0 or EX_IOERR. */
static int print_json(const json_t *v)
{
	if (json_dumpf(v, stdout, JSON_SORT_KEYS | JSON_INDENT(2)) ||
	    fputc('\n', stdout) == EOF)
		return fail(EX_IOERR, "output", "%s", strerror(errno));
	return 0;
}

/* ---- the connection ------------------------------------------------- */

struct conn {
	struct rpc *rpc;
	const char *addr;
	bool standalone;
	uint16_t proto;
	uint8_t skey[AUTH_KEY_LEN]; /* session key, after AUTH_OK */
	struct wire_msg *req, *rep;
	char text[WIRE_MSG_MAX];
};

static void conn_close(struct conn *c)
{
	rpc_close(c->rpc);
	free(c->req);
	free(c->rep);
	explicit_bzero(c->skey, sizeof(c->skey));
	memset(c, 0, sizeof(*c));
}

/* Reports a failed call: memd's text when it gave one, else strerror. */
static int call_failed(const struct conn *c, const char *what, int r)
{
	if (c->text[0])
		return fail(ctl_exit_for(r), what, "%s (%s)", c->text,
			    errname(r));
	if (r == -ENOTCONN)
		return fail(EX_UNAVAILABLE, what,
			    "connection to %s lost (ENOTCONN)", c->addr);
	return fail(ctl_exit_for(r), what, "%s: %s (%s)", c->addr, strerror(-r),
		    errname(r));
}

/* The exit code for a secret file auth_read_secret_file refused. */
static int secret_file_exit(int err)
{
	switch (err) {
	case -EINVAL:
		return EX_DATAERR; /* too short or too long */
	case -EACCES:
	case -EPERM:
		return EX_NOPERM; /* unreadable, or mode too open */
	default:
		return EX_NOINPUT; /* missing, a directory, ... */
	}
}

/*
 * Reads the cluster secret once and derives the cluster keys. Returns 0
 * or an exit code, with the reason in err (not printed: a standalone memd
 * needs no secret, which only the AUTH that needs it can tell).
 */
static int load_keys(struct opts *o, char *err, size_t errlen)
{
	uint8_t secret[AUTH_SECRET_MAX];
	int n;

	if (o->have_keys)
		return 0;
	n = auth_read_secret_file(o->cluster_secret, secret, err, errlen);
	if (n < 0)
		return secret_file_exit(n);
	auth_cluster_keys(secret, (size_t)n, &o->keys);
	explicit_bzero(secret, sizeof(secret));
	o->have_keys = true;
	return 0;
}

/*
 * HELLO, then AUTH as "@admin" unless memd is standalone (protocol 1, or
 * AUTH answered EOPNOTSUPP: c->standalone). Returns 0 or an exit code
 * (the reason printed).
 */
static int handshake(struct opts *o, struct conn *c, const char *what)
{
	struct wire_hello_ok hello = { 0 };
	char client[WIRE_NAME_MAX], secret_err[256];
	uint8_t probe[AUTH_KEY_LEN];
	int r, code;

	snprintf(client, sizeof(client), "poolctl pid %ld", (long)getpid());
	/* Without the secret, AUTH with a throwaway key still tells a
	 * standalone memd (EOPNOTSUPP), which needs none, from the rest. */
	code = load_keys(o, secret_err, sizeof(secret_err));
	if (code)
		auth_random(probe, sizeof(probe));
	r = rpc_handshake(c->rpc, client, WIRE_PROTO_MIN, "@admin",
			  code ? probe : o->keys.admin, WIRE_ROLE_ADMIN,
			  o->timeout_ms, &hello, NULL, c->skey, c->text,
			  sizeof(c->text));
	if (r && !hello.proto) /* HELLO itself failed */
		return call_failed(c, what, r);
	c->proto = hello.proto;
	if (!r && c->proto < 2) {
		c->standalone = true;
		return 0;
	}
	if (r == -EOPNOTSUPP) {
		c->standalone = true;
		return 0;
	}
	if (code)
		return fail(code, what, "cluster secret: %s", secret_err);
	if (r == -EACCES)
		return fail(EX_NOPERM, what,
			    "%s refused \"@admin\": wrong cluster secret in "
			    "%s? (EACCES)",
			    c->addr, o->cluster_secret);
	if (r == -EPROTO)
		return fail(EX_IOERR, what,
			    "%s did not make this session \"@admin\" (EPROTO)",
			    c->addr);
	if (r)
		return call_failed(c, what, r);
	return 0;
}

/*
 * rpc_connect reports a host name that does not resolve as EHOSTUNREACH
 * (libpool(3) documents it so) and other resolver failures as EINVAL:
 * resolve the host again to tell "no such name" from "no route". Returns
 * an exit code with the reason printed, or 0 when the name resolves.
 */
static int resolve_failed(const char *addr, const char *what)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	char host[256];
	uint16_t port;
	int r;

	if (wire_split_hostport(addr, host, sizeof(host), &port))
		return 0;
	r = getaddrinfo(host, NULL, &hints, &ai);
	if (!r) {
		freeaddrinfo(ai);
		return 0;
	}
	return fail(EX_UNAVAILABLE, what, "cannot resolve %s: %s", host,
		    r == EAI_SYSTEM ? strerror(errno) : gai_strerror(r));
}

static int conn_open_one(struct opts *o, const char *addr, struct conn *c,
			 const char *what);
static int admin_quiet(struct opts *o, struct conn *c, json_t *req,
		       json_t **out, json_error_t *jerr);
static json_t *cmd_json(const char *cmd);

/*
 * Connects to addr and authenticates. 0 or an exit code. addr may be a
 * list of registries ("a:p,b:p": several on one etcd, one of which
 * leads): each is tried in turn, and the first that accepts us serves;
 * when none does, the last one's failure is printed.
 */
static int conn_open(struct opts *o, const char *addr, struct conn *c,
		     const char *what)
{
	static char one[16][WIRE_HOSTPORT_MAX];
	const char *p = addr;
	int n = 0, r = EX_UNAVAILABLE;

	if (!strchr(addr, ','))
		return conn_open_one(o, addr, c, what);
	while (*p && n < 16) {
		size_t len = strcspn(p, ",");

		snprintf(one[n++], sizeof(one[0]), "%.*s",
			 (int)(len < sizeof(one[0]) ? len : 0), p);
		p += len;
		if (*p)
			p++;
	}
	fail_held[0] = '\0';
	for (int i = 0; i < n; i++) {
		json_error_t jerr;
		json_t *st = NULL;

		fail_hold = true;
		r = conn_open_one(o, one[i], c, what);
		fail_hold = false;
		if (r)
			continue;
		/* A standby lets @admin in (its own donor part answers
		 * "leases") but serves no registry request: ask. */
		if (c->standalone || admin_quiet(o, c, cmd_json("status"), &st,
						 &jerr) != -EAGAIN) {
			json_decref(st);
			return 0;
		}
		snprintf(fail_held, sizeof(fail_held), "%.127s: %.800s", one[i],
			 c->text);
		r = EX_TEMPFAIL;
		conn_close(c);
	}
	return fail(r, what, "no registry of %s serves; the last said: %s",
		    addr, fail_held);
}

static int conn_open_one(struct opts *o, const char *addr, struct conn *c,
			 const char *what)
{
	int r;

	memset(c, 0, sizeof(*c));
	c->addr = addr;
	r = rpc_connect(addr, o->timeout_ms, &c->rpc, NULL, 0);
	if (r == -EHOSTUNREACH || r == -EINVAL) {
		int code = resolve_failed(addr, what);

		if (code)
			return code;
	}
	if (r == -EINVAL)
		return fail(EX_UNAVAILABLE, what,
			    "cannot connect to %s: not a usable HOST:PORT",
			    addr);
	if (r)
		return fail(EX_UNAVAILABLE, what, "cannot connect to %s: %s",
			    addr, strerror(-r));
	c->req = xcalloc(1, sizeof(*c->req));
	c->rep = xcalloc(1, sizeof(*c->rep));
	r = handshake(o, c, what);
	if (r)
		conn_close(c);
	return r;
}

static json_t *cmd_json(const char *cmd)
{
	json_t *o = json_pack("{ss}", "cmd", cmd);

	if (!o) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	return o;
}

/*
 * One ADMIN request, printing nothing: req (consumed) as compact JSON;
 * *out the reply, which must be a JSON object. Returns 0, rpc_call's
 * -errno, or 1: the reply is not a JSON object (jerr says why).
 */
static int admin_quiet(struct opts *o, struct conn *c, json_t *req,
		       json_t **out, json_error_t *jerr)
{
	char *text = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);
	int r;

	json_decref(req);
	*out = NULL;
	if (!text) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	memset(c->req, 0, sizeof(*c->req));
	c->req->type = WIRE_ADMIN;
	c->req->u.admin.json = text;
	c->req->u.admin.json_len = (uint32_t)strlen(text);
	r = rpc_call(c->rpc, c->req, c->rep, WIRE_ADMIN_OK, o->timeout_ms,
		     c->text, sizeof(c->text));
	explicit_bzero(text, strlen(text)); /* may hold a sealed key */
	free(text);
	if (r)
		return r;
	*out = json_loadb(c->rep->u.admin.json, c->rep->u.admin.json_len, 0,
			  jerr);
	if (!*out || !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return 1;
	}
	return 0;
}

/* admin_quiet, with the reason printed: 0 or an exit code. */
static int admin(struct opts *o, struct conn *c, json_t *req, json_t **out,
		 const char *what)
{
	json_error_t jerr = { 0 };
	int r = admin_quiet(o, c, req, out, &jerr);

	if (r == 1)
		return fail(EX_IOERR, what,
			    "%s answered with malformed JSON: %s", c->addr,
			    jerr.text[0] ? jerr.text : "not an object");
	if (r)
		return call_failed(c, what, r);
	return 0;
}

/*
 * Warns when a quota is more than the pool's whole capacity: accepted
 * (donors may join later) but most likely a slip of the unit. Asks the
 * registry for its status on c; when that fails, says nothing.
 */
static void warn_above_capacity(struct opts *o, struct conn *c,
				const char *what, uint64_t quota)
{
	json_error_t jerr;
	json_t *st = NULL;
	const json_t *cap;
	char qb[32], cb[32];

	if (admin_quiet(o, c, cmd_json("status"), &st, &jerr))
		return;
	cap = json_object_get(st, "capacity_bytes");
	if (json_is_integer(cap) && json_integer_value(cap) >= 0 &&
	    quota > (uint64_t)json_integer_value(cap)) {
		ctl_fmt_size(quota, qb, sizeof(qb));
		ctl_fmt_size((uint64_t)json_integer_value(cap), cb, sizeof(cb));
		fprintf(stderr,
			"poolctl: %s: warning: quota %s is more than the "
			"pool's capacity %s; accepted\n",
			what, qb, cb);
	}
	json_decref(st);
}

/*
 * Connects to the registry (not a standalone memd). 0 or an exit code
 * (reason printed; nothing to close).
 */
static int registry_open(struct opts *o, struct conn *c, const char *what)
{
	int r = conn_open(o, o->addr, c, what);

	if (r)
		return r;
	if (c->standalone) {
		conn_close(c);
		return fail(EXIT_REFUSED, what,
			    "memd at %s is standalone: it has no registry, "
			    "tenants or quotas (EOPNOTSUPP)",
			    o->addr);
	}
	return 0;
}

/* Connects to the registry and runs one command there (not standalone). */
static int registry_call(struct opts *o, json_t *req, json_t **out,
			 const char *what)
{
	struct conn c;
	int r = registry_open(o, &c, what);

	if (r) {
		json_decref(req);
		return r;
	}
	r = admin(o, &c, req, out, what);
	conn_close(&c);
	return r;
}

/* ---- status ----------------------------------------------------------- */

static void tenants_table(const json_t *tenants, bool with_id)
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

static void print_status(const json_t *st, bool standalone)
{
	static const char *const keys[] = { "capacity_bytes", "used_bytes",
					    "reserved_bytes", "free_bytes",
					    "slab_bytes" };
	static const char *const labels[] = { "capacity", "used", "reserved",
					      "free", "slab size" };
	const json_t *d = json_object_get(st, "donors");
	const json_t *tenants = json_object_get(st, "tenants");
	char b[32];

	if (standalone)
		printf("%-10s standalone memd (no registry, no tenants)\n",
		       "mode");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		ctl_fmt_size(jnum(st, keys[i]), b, sizeof(b));
		printf("%-10s %s\n", labels[i], b);
	}
	printf("%-10s %" PRIu64 " up, %" PRIu64 " draining, %" PRIu64 " down\n",
	       "donors", jnum(d, "up"), jnum(d, "draining"), jnum(d, "down"));
	if (json_array_size(tenants)) {
		fputc('\n', stdout);
		tenants_table(tenants, false);
	}
}

/* A standalone memd's STATUS in the shape of the registry's status. */
static int standalone_status(struct opts *o, struct conn *c, json_t **out)
{
	const struct wire_status_ok *s;
	bool draining;
	int r;

	memset(c->req, 0, sizeof(*c->req));
	c->req->type = WIRE_STATUS;
	r = rpc_call(c->rpc, c->req, c->rep, WIRE_STATUS_OK, o->timeout_ms,
		     c->text, sizeof(c->text));
	if (r)
		return call_failed(c, "status", r);
	s = &c->rep->u.status_ok;
	draining = s->flags & WIRE_STATUS_DRAINING;
	*out = json_pack(
		"{sI sI sI sI sI s{sI sI sI} s[] sb}", "slab_bytes",
		(json_int_t)s->slab_bytes, "capacity_bytes",
		(json_int_t)((uint64_t)s->slabs_total * s->slab_bytes),
		"used_bytes",
		(json_int_t)((uint64_t)s->slabs_leased * s->slab_bytes),
		"reserved_bytes", (json_int_t)0, "free_bytes",
		(json_int_t)((uint64_t)s->slabs_free * s->slab_bytes), "donors",
		"up", (json_int_t)!draining, "draining", (json_int_t)draining,
		"down", (json_int_t)0, "tenants", "standalone", 1);
	if (!*out) {
		fputs("poolctl: out of memory\n", stderr);
		exit(EX_OSERR);
	}
	return 0;
}

static int cmd_status(struct opts *o)
{
	struct conn c;
	json_t *st = NULL;
	int r = conn_open(o, o->addr, &c, "status");

	if (r)
		return r;
	if (c.standalone)
		r = standalone_status(o, &c, &st);
	else
		r = admin(o, &c, cmd_json("status"), &st, "status");
	if (!r) {
		if (o->json)
			r = print_json(st);
		else
			print_status(st, c.standalone);
	}
	json_decref(st);
	conn_close(&c);
	return r;
}

/* ---- donors, tenants, quotas ------------------------------------------ */

static void fmt_since(uint64_t unix_ms, char *buf, size_t len)
{
	time_t t = (time_t)(unix_ms / 1000);
	struct tm tm;

	if (!unix_ms || !localtime_r(&t, &tm) ||
	    !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "-");
}

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

static int cmd_donors(struct opts *o)
{
	json_t *rep;
	int r = registry_call(o, cmd_json("donors"), &rep, "donors");

	if (r)
		return r;
	if (o->json)
		r = print_json(rep);
	else
		print_donors(rep);
	json_decref(rep);
	return r;
}

static int cmd_tenants(struct opts *o)
{
	json_t *rep;
	int r = registry_call(o, cmd_json("tenants"), &rep, "tenants");

	if (r)
		return r;
	if (o->json)
		r = print_json(rep);
	else
		tenants_table(json_object_get(rep, "tenants"), true);
	json_decref(rep);
	return r;
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

static void print_quotas(const json_t *tenants)
{
	struct table t;
	size_t i;
	json_t *e;

	quota_table_init(&t);
	json_array_foreach(tenants, i, e) quota_row(&t, e);
	table_print(&t);
	table_fini(&t);
}

static int cmd_quota_list(struct opts *o)
{
	json_t *rep;
	int r = registry_call(o, cmd_json("tenants"), &rep, "quota list");

	if (r)
		return r;
	if (o->json)
		r = print_json(rep);
	else
		print_quotas(json_object_get(rep, "tenants"));
	json_decref(rep);
	return r;
}

static int cmd_quota_get(struct opts *o, const char *name)
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

static int cmd_quota_set(struct opts *o, const char *name, uint64_t bytes)
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

static int cmd_drain(struct opts *o, const char *donor, bool drain)
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

static int cmd_tenant_add(struct opts *o, const char *name, uint64_t quota)
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

static int cmd_tenant_remove(struct opts *o, const char *name)
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

/* ---- leases ----------------------------------------------------------- */

/* Tenant id -> name from the registry's tenants list ("default" is the
 * tenant of a standalone memd and of sessions without one). */
static const char *tenant_name(const json_t *tenants, uint64_t id)
{
	size_t i;
	json_t *e;

	json_array_foreach(tenants, i,
			   e) if (jnum(e, "id") == id) return jstr(e, "name");
	return id == 0 ? "default" : NULL;
}

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
			  exp);
	}
	json_decref(rep);
	return 0;
}

static int cmd_leases(struct opts *o)
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
	table_init(&lo.t, "lrrrlll", "DONOR", "SLAB", "GEN", "NODE", "TENANT",
		   "SESSION", "EXPIRES-IN");
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

/* ---- main ------------------------------------------------------------- */

enum {
	OPT_QUOTA = 256,
	OPT_SECRET_FILE,
	OPT_SECRET_OUT,
	OPT_DONOR,
	OPT_TENANT,
};

static int parse_timeout(const char *s, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 3600000)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

/* Checks that only the subcommand options allowed are given. */
static int only_opts(const struct opts *o, const char *cmd, bool quota,
		     bool secrets, bool filters)
{
	if (!quota && o->quota)
		return usage_error("%s: --quota is for tenant add", cmd);
	if (!secrets && (o->secret_file || o->secret_out))
		return usage_error("%s: --secret-file and --secret-out are for "
				   "tenant add",
				   cmd);
	if (!filters && (o->donor || o->tenant))
		return usage_error("%s: --donor and --tenant are for leases",
				   cmd);
	return 0;
}

static int nargs(const char *cmd, int have, int want, const char *what)
{
	if (have == want)
		return 0;
	return usage_error("%s: %s", cmd,
			   have < want ? what : "too many arguments");
}

/* Tenant and donor names: the registry's rule (wire_name_is_valid),
 * checked here so that a bad name is bad data (65), not a refusal. */
static int check_name(const char *cmd, const char *name)
{
	if (wire_name_is_valid(name))
		return 0;
	return fail(EX_DATAERR, cmd,
		    "'%s' is not a valid tenant name ([A-Za-z0-9_.-], 1 to "
		    "63 characters)",
		    name);
}

/* A donor's name; leases --donor also takes a standalone memd's address,
 * its one donor's name there (addr; NULL: names only). */
static int check_donor(const char *cmd, const char *name, const char *addr)
{
	if (wire_name_is_valid(name) || (addr && !strcmp(name, addr)))
		return 0;
	return fail(EX_DATAERR, cmd,
		    "'%s' is not a valid donor name ([A-Za-z0-9_.-], 1 to "
		    "63 characters)",
		    name);
}

static int check_size(const char *cmd, const char *s, uint64_t *out)
{
	int r = ctl_parse_size(s, out);

	if (r == -ERANGE)
		return fail(EX_DATAERR, cmd, "size '%s' is too large", s);
	if (r)
		return fail(EX_DATAERR, cmd,
			    "malformed size '%s' (examples: 512M, 8G, 1.5T)",
			    s);
	return 0;
}

static int run(struct opts *o, int argc, char **argv)
{
	const char *cmd = argv[0];
	uint64_t bytes;
	int r;

	if (!strcmp(cmd, "status") || !strcmp(cmd, "donors") ||
	    !strcmp(cmd, "tenants")) {
		if ((r = only_opts(o, cmd, false, false, false)) ||
		    (r = nargs(cmd, argc - 1, 0, "")))
			return r;
		return !strcmp(cmd, "status")	? cmd_status(o)
		       : !strcmp(cmd, "donors") ? cmd_donors(o)
						: cmd_tenants(o);
	}
	if (!strcmp(cmd, "tenant")) {
		const char *sub = argc > 1 ? argv[1] : NULL;

		if (!sub)
			return usage_error("tenant: add or remove?");
		if (!strcmp(sub, "add")) {
			if ((r = only_opts(o, "tenant add", true, true,
					   false)) ||
			    (r = nargs("tenant add", argc - 2, 1,
				       "which tenant?")))
				return r;
			if (!o->quota)
				return usage_error("tenant add: --quota SIZE "
						   "is required");
			if (o->secret_file && o->secret_out)
				return usage_error(
					"tenant add: --secret-file (an "
					"existing "
					"secret) and --secret-out (a new one) "
					"exclude each other");
			if ((r = check_name("tenant add", argv[2])) ||
			    (r = check_size("tenant add", o->quota, &bytes)))
				return r;
			return cmd_tenant_add(o, argv[2], bytes);
		}
		if (!strcmp(sub, "remove")) {
			if ((r = only_opts(o, "tenant remove", false, false,
					   false)) ||
			    (r = nargs("tenant remove", argc - 2, 1,
				       "which tenant?")) ||
			    (r = check_name("tenant remove", argv[2])))
				return r;
			return cmd_tenant_remove(o, argv[2]);
		}
		return usage_error("tenant: unknown subcommand '%s'", sub);
	}
	if (!strcmp(cmd, "quota")) {
		const char *sub = argc > 1 ? argv[1] : NULL;

		if ((r = only_opts(o, "quota", false, false, false)))
			return r;
		if (!sub)
			return usage_error("quota: get, set or list?");
		if (!strcmp(sub, "list")) {
			if ((r = nargs("quota list", argc - 2, 0, "")))
				return r;
			return cmd_quota_list(o);
		}
		if (!strcmp(sub, "get")) {
			if ((r = nargs("quota get", argc - 2, 1,
				       "which tenant?")) ||
			    (r = check_name("quota get", argv[2])))
				return r;
			return cmd_quota_get(o, argv[2]);
		}
		if (!strcmp(sub, "set")) {
			if ((r = nargs("quota set", argc - 2, 2,
				       "which tenant, and what size?")) ||
			    (r = check_name("quota set", argv[2])) ||
			    (r = check_size("quota set", argv[3], &bytes)))
				return r;
			return cmd_quota_set(o, argv[2], bytes);
		}
		return usage_error("quota: unknown subcommand '%s'", sub);
	}
	if (!strcmp(cmd, "drain") || !strcmp(cmd, "undrain")) {
		if ((r = only_opts(o, cmd, false, false, false)) ||
		    (r = nargs(cmd, argc - 1, 1, "which donor?")))
			return r;
		if ((r = check_donor(cmd, argv[1], NULL)))
			return r;
		return cmd_drain(o, argv[1], !strcmp(cmd, "drain"));
	}
	if (!strcmp(cmd, "leases")) {
		if ((r = only_opts(o, cmd, false, false, true)) ||
		    (r = nargs(cmd, argc - 1, 0, "")))
			return r;
		if (o->tenant && (r = check_name(cmd, o->tenant)))
			return r;
		if (o->donor && (r = check_donor(cmd, o->donor, o->addr)))
			return r;
		return cmd_leases(o);
	}
	return usage_error("unknown command '%s'", cmd);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "cluster-secret", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "quota", required_argument, NULL, OPT_QUOTA },
		{ "secret-file", required_argument, NULL, OPT_SECRET_FILE },
		{ "secret-out", required_argument, NULL, OPT_SECRET_OUT },
		{ "donor", required_argument, NULL, OPT_DONOR },
		{ "tenant", required_argument, NULL, OPT_TENANT },
		{ 0 },
	};
	struct opts o = { .timeout_ms = DEFAULT_TIMEOUT_MS };
	char host[256];
	uint16_t port;
	int c, r;

	o.addr = getenv("POOLCTL_ADDR");
	if (!o.addr || !*o.addr)
		o.addr = DEFAULT_ADDR;
	o.cluster_secret = getenv("TIDEPOOL_CLUSTER_SECRET_FILE");
	if (!o.cluster_secret || !*o.cluster_secret)
		o.cluster_secret = DEFAULT_SECRET_FILE;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":a:s:jt:h", longopts, NULL)) !=
	       -1) {
		switch (c) {
		case 'a':
			o.addr = optarg;
			break;
		case 's':
			o.cluster_secret = optarg;
			break;
		case 'j':
			o.json = true;
			break;
		case 't':
			if (parse_timeout(optarg, &o.timeout_ms))
				return usage_error("--timeout: '%s' is not a "
						   "number of milliseconds "
						   "(1 to 3600000)",
						   optarg);
			break;
		case 'h':
			usage(stdout);
			return fflush(stdout) ? EX_IOERR : 0;
		case OPT_QUOTA:
			o.quota = optarg;
			break;
		case OPT_SECRET_FILE:
			o.secret_file = optarg;
			break;
		case OPT_SECRET_OUT:
			o.secret_out = optarg;
			break;
		case OPT_DONOR:
			o.donor = optarg;
			break;
		case OPT_TENANT:
			o.tenant = optarg;
			break;
		case ':':
			return usage_error("%s needs a value",
					   argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'",
					   argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("which command?");
	for (const char *a = o.addr;;) {
		size_t n = strcspn(a, ",");
		char one[WIRE_HOSTPORT_MAX];

		snprintf(one, sizeof(one), "%.*s",
			 (int)(n < sizeof(one) ? n : 0), a);
		if (wire_split_hostport(one, host, sizeof(host), &port) ||
		    port == 0)
			return usage_error(
				"'%s' is not HOST:PORT[,HOST:PORT...]", o.addr);
		a += n;
		if (!*a++)
			break;
	}
	if (auth_init())
		return fail(EX_SOFTWARE, "init", "libsodium failed to start");

	r = run(&o, argc - optind, argv + optind);
	explicit_bzero(&o.keys, sizeof(o.keys));
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "poolctl: output: %s\n", strerror(errno));
		return r ? r : EX_IOERR;
	}
	return r;
}
