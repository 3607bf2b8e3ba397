// SPDX-License-Identifier: MIT
/*
 * poolctl/out.c - poolctl's output and errors: messages and exit codes
 * (sysexits(3)), sizes, aligned tables, JSON replies and their fields.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "poolctl/poolctl.h"

/* While a list of registries is tried, failures are held here and only
 * the last one is printed (conn_open). */
bool fail_hold;
char fail_held[1024];

/* Prints "poolctl: <what>: <message>" and returns code. */
int fail(int code, const char *what, const char *fmt, ...)
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

void *xcalloc(size_t n, size_t size)
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
int ctl_exit_for(int err)
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

const char *errname(int err)
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
int ctl_parse_size(const char *s, uint64_t *out)
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
void ctl_fmt_size(uint64_t b, char *buf, size_t len)
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

void table_init(struct table *t, const char *align, ...)
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
void table_add(struct table *t, ...)
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

void table_print(struct table *t)
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

void table_fini(struct table *t)
{
	for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
		free(t->cell[i]);
	free(t->cell);
}

/* ---- JSON helpers ----------------------------------------------------- */

uint64_t jnum(const json_t *o, const char *key)
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

int64_t jint(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

/* A string field, or "-" when missing or empty. */
const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s && *s ? s : "-";
}

/* Prints v with sorted keys and indentation. 0 or EX_IOERR. */
int print_json(const json_t *v)
{
	if (json_dumpf(v, stdout, JSON_SORT_KEYS | JSON_INDENT(2)) ||
	    fputc('\n', stdout) == EOF)
		return fail(EX_IOERR, "output", "%s", strerror(errno));
	return 0;
}

void fmt_since(uint64_t unix_ms, char *buf, size_t len)
{
	time_t t = (time_t)(unix_ms / 1000);
	struct tm tm;

	if (!unix_ms || !localtime_r(&t, &tm) ||
	    !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "-");
}

/* Tenant id -> name from the registry's tenants list ("default" is the
 * tenant of a standalone memd and of sessions without one). */
const char *tenant_name(const json_t *tenants, uint64_t id)
{
	size_t i;
	json_t *e;

	json_array_foreach(tenants, i,
			   e) if (jnum(e, "id") == id) return jstr(e, "name");
	return id == 0 ? "default" : NULL;
}

void fmt_secs(double s, char *buf, size_t len)
{
	if (s < 120)
		snprintf(buf, len, "%.1f s", s);
	else if (s < 7200)
		snprintf(buf, len, "%.1f min", s / 60);
	else
		snprintf(buf, len, "%.1f h", s / 3600);
}
