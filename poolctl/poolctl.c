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
	const char *png;	 /* tenant report --png FILE */
	const char *hit;	 /* quota suggest --hit H */
	const char *tps;	 /* tenant set --prefill-tokens-per-s N */
	const char *bpt;	 /* tenant set --bytes-per-token SIZE */
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
	      "  tenant set NAME [--prefill-tokens-per-s N] "
	      "[--bytes-per-token SIZE]\n"
	      "                                the tenant's cost model for "
	      "reports (0: memd's)\n"
	      "  quota get NAME\n"
	      "  quota set NAME SIZE\n"
	      "  quota list\n"
	      "  drain DONOR                   place nothing new on DONOR\n"
	      "  undrain DONOR\n"
	      "  leases [--donor NAME] [--tenant NAME]\n"
	      "  tenant report NAME [--png FILE]  hit ratio, time saved, "
	      "wasted puts, curve\n"
	      "  quota suggest NAME --hit RATIO  smallest quota reaching "
	      "RATIO on the curve\n"
	      "  top                           tenants by time saved, with "
	      "waste\n"
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

/* tenant set: the tenant's cost model (docs/capacity.md); 0: memd's. */
static int cmd_tenant_set(struct opts *o, const char *name, bool set_tps,
			  uint64_t tps, bool set_bpt, uint64_t bpt)
{
	json_t *rep, *req = cmd_json("tenant-set");
	struct conn c;
	int r;

	json_object_set_new(req, "name", json_string(name));
	if (set_tps)
		json_object_set_new(req, "prefill_tokens_per_s",
				    json_integer((json_int_t)tps));
	if (set_bpt)
		json_object_set_new(req, "bytes_per_token",
				    json_integer((json_int_t)bpt));
	r = registry_open(o, &c, "tenant set");
	if (r) {
		json_decref(req);
		return r;
	}
	r = admin(o, &c, req, &rep, "tenant set");
	conn_close(&c);
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
			  exp,
			  json_is_string(json_object_get(e, "path"))
				  ? jstr(e, "path")
				  : "-");
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

static void fmt_secs(double s, char *buf, size_t len)
{
	if (s < 120)
		snprintf(buf, len, "%.1f s", s);
	else if (s < 7200)
		snprintf(buf, len, "%.1f min", s / 60);
	else
		snprintf(buf, len, "%.1f h", s / 3600);
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

static int cmd_tenant_report(struct opts *o, const char *name)
{
	struct cap_pool p;
	struct cap_tenant *t;
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

static int cmd_quota_suggest(struct opts *o, const char *name, double hit)
{
	struct cap_pool p;
	struct cap_tenant *t;
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

static int cmd_top(struct opts *o)
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

/* ---- main ------------------------------------------------------------- */

enum {
	OPT_QUOTA = 256,
	OPT_SECRET_FILE,
	OPT_SECRET_OUT,
	OPT_DONOR,
	OPT_TENANT,
	OPT_PNG,
	OPT_HIT,
	OPT_TPS,
	OPT_BPT,
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
	if (o->png && strcmp(cmd, "tenant report"))
		return usage_error("%s: --png is for tenant report", cmd);
	if (o->hit && strcmp(cmd, "quota suggest"))
		return usage_error("%s: --hit is for quota suggest", cmd);
	if ((o->tps || o->bpt) && strcmp(cmd, "tenant set"))
		return usage_error("%s: --prefill-tokens-per-s and "
				   "--bytes-per-token are for tenant set",
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
			return usage_error(
				"tenant: add, remove, set or report?");
		if (!strcmp(sub, "set")) {
			uint64_t tps = 0;
			char *end;

			if ((r = only_opts(o, "tenant set", false, false,
					   false)) ||
			    (r = nargs("tenant set", argc - 2, 1,
				       "which tenant?")) ||
			    (r = check_name("tenant set", argv[2])))
				return r;
			if (!o->tps && !o->bpt)
				return usage_error(
					"tenant set: --prefill-tokens-per-s N "
					"or --bytes-per-token SIZE is "
					"required");
			if (o->tps) {
				errno = 0;
				tps = strtoull(o->tps, &end, 10);
				if (errno || end == o->tps || *end ||
				    *o->tps == '-' || tps > 1000000000)
					return fail(EX_DATAERR, "tenant set",
						    "--prefill-tokens-per-s "
						    "'%s' is not a number of "
						    "tokens a second (0 to "
						    "1000000000; 0: memd's "
						    "kv_prefill_tokens_per_s)",
						    o->tps);
			}
			bytes = 0;
			if (o->bpt &&
			    (r = check_size("tenant set", o->bpt, &bytes)))
				return r;
			if (o->bpt && bytes > (1ull << 30))
				return fail(EX_DATAERR, "tenant set",
					    "--bytes-per-token '%s' is more "
					    "than 1G",
					    o->bpt);
			return cmd_tenant_set(o, argv[2], o->tps != NULL, tps,
					      o->bpt != NULL, bytes);
		}
		if (!strcmp(sub, "report")) {
			if ((r = only_opts(o, "tenant report", false, false,
					   false)) ||
			    (r = nargs("tenant report", argc - 2, 1,
				       "which tenant?")) ||
			    (r = check_name("tenant report", argv[2])))
				return r;
			return cmd_tenant_report(o, argv[2]);
		}
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

		if (sub && !strcmp(sub, "suggest")) {
			char *end;
			double h;

			if ((r = only_opts(o, "quota suggest", false, false,
					   false)) ||
			    (r = nargs("quota suggest", argc - 2, 1,
				       "which tenant?")) ||
			    (r = check_name("quota suggest", argv[2])))
				return r;
			if (!o->hit)
				return usage_error("quota suggest: --hit RATIO "
						   "is required");
			errno = 0;
			h = strtod(o->hit, &end);
			if (errno || end == o->hit || *end || !(h > 0) ||
			    h >= 1)
				return fail(EX_DATAERR, "quota suggest",
					    "--hit '%s' is not a hit ratio "
					    "between 0 and 1 (exclusive), "
					    "e.g. 0.9",
					    o->hit);
			return cmd_quota_suggest(o, argv[2], h);
		}
		if ((r = only_opts(o, "quota", false, false, false)))
			return r;
		if (!sub)
			return usage_error("quota: get, set, list or suggest?");
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
	if (!strcmp(cmd, "top")) {
		if ((r = only_opts(o, cmd, false, false, false)) ||
		    (r = nargs(cmd, argc - 1, 0, "")))
			return r;
		return cmd_top(o);
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
		{ "png", required_argument, NULL, OPT_PNG },
		{ "hit", required_argument, NULL, OPT_HIT },
		{ "prefill-tokens-per-s", required_argument, NULL, OPT_TPS },
		{ "bytes-per-token", required_argument, NULL, OPT_BPT },
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
		case OPT_PNG:
			o.png = optarg;
			break;
		case OPT_HIT:
			o.hit = optarg;
			break;
		case OPT_TPS:
			o.tps = optarg;
			break;
		case OPT_BPT:
			o.bpt = optarg;
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
