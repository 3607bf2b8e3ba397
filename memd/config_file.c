// SPDX-License-Identifier: MIT
/*
 * memd/config_file.c - memd.conf files: memd_config_load(), through
 * libinih, setting keys with the table's parsers (config.c).
 *
 * libinih and line numbers: Debian's libinih is built without
 * INI_HANDLER_LINENO, so the handler is not told which line it is called
 * for. We therefore feed libinih through ini_parse_stream() with our own
 * reader that hands it exactly one physical line per call and counts
 * them; libinih processes a line completely (calling the handler at most
 * once) before it asks for the next, so the reader's count is the
 * handler's line. The reader also:
 *   - strips leading blanks, so an indented "key = value" is a key and
 *     never a libinih multi-line continuation of the previous key (which
 *     would silently turn two keys into one odd value);
 *   - checks what libinih would only flag as "error on line N" without
 *     saying why (a section other than [memd], a line that is not
 *     "key = value", a line too long for libinih's fixed buffer, which
 *     libinih would otherwise split into two "lines", a NUL byte), so
 *     every error names file, line and what is wrong;
 *   - returns end-of-file after the first error, so parsing stops there
 *     without touching libinih's process-wide settings.
 * Nothing is read beyond one bounded line buffer, so a wrong path such as
 * /dev/zero cannot make us allocate without bound. The config given is
 * changed only when the whole file loads.
 *
 * Threads: none. Reentrant: no libinih setting is changed.
 */
#include "memd/config_int.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <ini.h>

#include "memd/log.h"

/* Longest physical line we read before giving up on it; libinih's own
 * buffer (200 bytes on common builds) is the tighter limit. */
#define MEMD_CONF_LINE_MAX 1024

static bool memd_conf_is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' ||
	       ch == '\v';
}

struct memd_conf_parse {
	FILE *fp;
	const char *path;
	struct memd_config *cfg;      /* the copy being filled */
	int lineno;		      /* of the line last handed to libinih */
	int seen[MEMD_CONF_KEYS_MAX]; /* line that set each key, 0: none */
	int rc; /* first error; then the reader reports end of file */
	char *err;
	size_t errlen;
	char line[MEMD_CONF_LINE_MAX];
};

static void memd_conf_parse_fail(struct memd_conf_parse *p, int rc,
				 const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void memd_conf_parse_fail(struct memd_conf_parse *p, int rc,
				 const char *fmt, ...)
{
	char what[MEMD_CONF_WHAT_MAX + 128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	memd_errf(p->err, p->errlen, "%s:%d: %s", p->path, p->lineno, what);
	p->rc = rc;
}

/*
 * Reads one physical line into p->line without its end of line. Returns
 * its length, 0 at end of file with nothing read, -E2BIG when it does not
 * fit (reading stops there, so no input makes us read without bound) or
 * -errno on a read error. Sets *nul when the line holds a NUL byte.
 */
static ssize_t memd_conf_getline(struct memd_conf_parse *p, bool *nul,
				 bool *eof)
{
	size_t n = 0;
	int ch;

	*nul = false;
	*eof = false;
	for (;;) {
		ch = getc(p->fp);
		if (ch == EOF) {
			if (ferror(p->fp))
				return errno ? -errno : -EIO;
			*eof = n == 0;
			break;
		}
		if (ch == '\n')
			break;
		if (n == sizeof(p->line) - 1)
			return -E2BIG;
		if (!ch)
			*nul = true;
		p->line[n++] = (char)ch;
	}
	p->line[n] = '\0';
	return (ssize_t)n;
}

static bool memd_conf_is_memd_section(const char *s, size_t len)
{
	while (len && memd_conf_is_blank(*s)) {
		s++;
		len--;
	}
	while (len && memd_conf_is_blank(s[len - 1]))
		len--;
	return len == 4 && !memcmp(s, "memd", 4);
}

/*
 * Checks a line (blanks already stripped on the left) the way libinih
 * will read it, so that what libinih would call "error on line N" gets
 * a reason. libinih: '#' or ';' first starts a comment; a ';' after a
 * blank starts one inside a line; a key ends at the first '=' or ':'.
 */
static int memd_conf_check_line(struct memd_conf_parse *p, const char *s)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	const char *e;

	if (!*s || *s == '#' || *s == ';')
		return 0;
	if (*s == '[') {
		for (e = s + 1; *e && *e != ']'; e++)
			if (*e == ';' && memd_conf_is_blank(e[-1]))
				break;
		if (*e != ']') {
			memd_conf_parse_fail(p, -EINVAL,
					     "section header without ']'");
			return -EINVAL;
		}
		if (!memd_conf_is_memd_section(s + 1, (size_t)(e - s - 1))) {
			memd_conf_parse_fail(
				p, -EINVAL,
				"section '%.*s' is not allowed; "
				"keys go at the top or under "
				"[memd]",
				(int)(e - s + 1),
				memd_conf_quote(s, shown, sizeof(shown)));
			return -EINVAL;
		}
		for (e++; memd_conf_is_blank(*e); e++)
			;
		if (*e && *e != ';' && *e != '#') {
			memd_conf_parse_fail(p, -EINVAL,
					     "text after the section header");
			return -EINVAL;
		}
		return 0;
	}
	for (e = s; *e && *e != '=' && *e != ':'; e++)
		if (*e == ';' && e > s && memd_conf_is_blank(e[-1]))
			break;
	if (*e != '=' && *e != ':') {
		memd_conf_parse_fail(p, -EINVAL,
				     "expected 'key = value', "
				     "got '%s'",
				     memd_conf_quote(s, shown, sizeof(shown)));
		return -EINVAL;
	}
	if (e == s) {
		memd_conf_parse_fail(p, -EINVAL, "a value without a key");
		return -EINVAL;
	}
	return 0;
}

/* libinih's reader, fgets-like: one physical line per call. */
static char *memd_conf_read(char *str, int num, void *stream)
{
	struct memd_conf_parse *p = stream;
	bool nul, eof;
	ssize_t n;
	size_t len;
	char *s;

	if (p->rc)
		return NULL;
	if (p->lineno == INT_MAX) {
		memd_conf_parse_fail(p, -EFBIG, "too many lines");
		return NULL;
	}
	n = memd_conf_getline(p, &nul, &eof);
	if (eof)
		return NULL;
	p->lineno++;
	if (n == -E2BIG) {
		memd_conf_parse_fail(p, -EINVAL,
				     "line too long (at most %d characters)",
				     num - 2);
		return NULL;
	}
	if (n < 0) {
		p->rc = (int)n;
		memd_errf(p->err, p->errlen, "%s: cannot read: %s", p->path,
			  strerror((int)-n));
		return NULL;
	}
	if (nul) {
		memd_conf_parse_fail(p, -EINVAL, "NUL byte in line");
		return NULL;
	}
	s = p->line;
	/* libinih skips a UTF-8 byte order mark; we must see past it too */
	if (p->lineno == 1 && !strncmp(s, "\xef\xbb\xbf", 3))
		s += 3;
	while (memd_conf_is_blank(*s))
		s++;
	len = strlen(s);
	/* room for the '\n' and the NUL libinih expects */
	if (len > (size_t)num - 2) {
		memd_conf_parse_fail(p, -EINVAL,
				     "line too long (at most %d characters)",
				     num - 2);
		return NULL;
	}
	if (memd_conf_check_line(p, s))
		return NULL;
	memcpy(str, s, len);
	str[len] = '\n';
	str[len + 1] = '\0';
	return str;
}

static int memd_conf_handle(struct memd_conf_parse *p, const char *section,
			    const char *name, const char *value)
{
	char what[MEMD_CONF_WHAT_MAX], shown[MEMD_CONF_QUOTE_MAX];
	const struct memd_conf_key *k;
	const char *hint = "";
	char alt[64];
	size_t i;

	if (p->rc)
		return 0;
	/* only with libinih's allow-no-value, which the reader preempts */
	if (!value)
		value = "";
	/* the reader let only [memd] through; this is belt and braces */
	if (*section && !memd_conf_is_memd_section(section, strlen(section))) {
		memd_conf_parse_fail(
			p, -EINVAL, "section '[%s]' is not allowed",
			memd_conf_quote(section, shown, sizeof(shown)));
		return 0;
	}
	k = memd_conf_find(name);
	if (!k) {
		for (i = 0; name[i] && i < sizeof(alt) - 1; i++)
			alt[i] = name[i] == '-' ? '_' : name[i];
		alt[i] = '\0';
		k = name[i] ? NULL : memd_conf_find(alt);
		memd_conf_quote(name, shown, sizeof(shown));
		if (k)
			memd_conf_parse_fail(p, -EINVAL,
					     "key '%s': unknown key (did you "
					     "mean '%s'?)",
					     shown, k->name);
		else
			memd_conf_parse_fail(p, -EINVAL,
					     "key '%s': unknown key (see "
					     "memd.conf(5))",
					     shown);
		return 0;
	}
	i = (size_t)(k - memd_conf_keys);
	if (p->seen[i]) {
		memd_conf_parse_fail(p, -EINVAL,
				     "key '%s': set twice (first on line %d)",
				     k->name, p->seen[i]);
		return 0;
	}
	if (memd_conf_assign(p->cfg, k, value, what, sizeof(what))) {
		/* '#' after a value is not a comment to libinih */
		if (strstr(value, " #") || strstr(value, "\t#"))
			hint = " (a comment after a value starts with ';')";
		memd_conf_parse_fail(p, -EINVAL, "key '%s': %s%s", k->name,
				     what, hint);
		return 0;
	}
	p->seen[i] = p->lineno;
	return 1;
}

#if INI_HANDLER_LINENO
static int memd_conf_ini_handler(void *user, const char *section,
				 const char *name, const char *value,
				 int lineno)
{
	/* our reader's count is the same; keep one source of truth */
	(void)lineno;
	return memd_conf_handle(user, section, name, value);
}
#else
static int memd_conf_ini_handler(void *user, const char *section,
				 const char *name, const char *value)
{
	return memd_conf_handle(user, section, name, value);
}
#endif

int memd_config_load(struct memd_config *c, const char *path, char *err,
		     size_t errlen)
{
	return memd_config_load_src(c, NULL, path, err, errlen);
}

int memd_config_load_src(struct memd_config *c, struct memd_conf_src *src,
			 const char *path, char *err, size_t errlen)
{
	struct memd_config copy = *c; /* c changes only on success */
	struct memd_conf_parse parse = {
		.path = path,
		.cfg = &copy,
		.err = err,
		.errlen = errlen,
	};
	struct memd_conf_parse *p = &parse;
	int rc;

	p->fp = fopen(path, "re");
	if (!p->fp) {
		rc = -errno;
		memd_errf(err, errlen, "%s: cannot open: %s", path,
			  strerror(-rc));
		return rc;
	}
	rc = ini_parse_stream(memd_conf_read, p, memd_conf_ini_handler, p);
	if (p->rc) {
		rc = p->rc;
	} else if (rc == -2) {
		memd_errf(err, errlen, "%s: out of memory", path);
		rc = -ENOMEM;
	} else if (rc) {
		/* the reader checks every line libinih could refuse */
		memd_errf(err, errlen, "%s:%d: syntax error", path, rc);
		rc = -EINVAL;
	}
	fclose(p->fp);
	if (rc)
		return rc;
	*c = copy;
	if (src) {
		src->path = path;
		for (size_t i = 0; i < memd_conf_nkeys; i++)
			if (p->seen[i])
				src->line[i] = p->seen[i];
	}
	return 0;
}
