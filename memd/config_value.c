// SPDX-License-Identifier: MIT
/*
 * memd/config_value.c - memd.conf's number values as written: sizes
 * ("64G", binary), durations ("500ms", "10s", "2m", "1h"), whole numbers
 * and choices, parsed, checked against a key's bounds, and formatted back
 * in the largest exact unit, so that --print-config loads back equal;
 * and what a key accepts, which every value error ends with.
 *
 * Threads: none. Pure and reentrant.
 */
#include "memd/config_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "memd/log.h"

/*
 * Copies s for an error message: bounded, and without control bytes that
 * could rewrite the operator's terminal or split a log line.
 */
const char *memd_conf_quote(const char *s, char *buf, size_t len)
{
	size_t i, n = strlen(s);
	bool cut = n > len - 1;

	if (cut)
		n = len - 4;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	if (cut) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}

/*
 * Reads the decimal digits at *sp. Returns -EINVAL when there are none,
 * else 0 with *overflow set if they do not fit in 64 bits; *sp moves past
 * them either way, so a caller can tell junk from overflow.
 */
int memd_conf_digits(const char **sp, uint64_t *out, bool *overflow)
{
	const char *s = *sp;
	uint64_t v = 0;

	*overflow = false;
	if (!memd_conf_is_digit(*s))
		return -EINVAL;
	for (; memd_conf_is_digit(*s); s++) {
		unsigned int d = (unsigned int)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			*overflow = true;
		else
			v = v * 10 + d;
	}
	*sp = s;
	*out = v;
	return 0;
}

int memd_parse_bytes(const char *s, uint64_t *out)
{
	static const char units[] = "KMGTPE";
	const char *u;
	unsigned int shift = 0;
	bool overflow;
	uint64_t v;

	if (!s || memd_conf_digits(&s, &v, &overflow))
		return -EINVAL;
	if (*s) {
		char up = *s >= 'a' && *s <= 'z' ? (char)(*s - 'a' + 'A') : *s;

		u = strchr(units, up);
		if (!u)
			return -EINVAL;
		shift = 10 * (unsigned int)(u - units + 1);
		s++;
		/* "64GiB" is "64G"; "64GB" is refused, it reads as decimal */
		if (s[0] == 'i' && s[1] == 'B')
			s += 2;
		if (*s)
			return -EINVAL;
	}
	if (overflow || (shift && v > UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int memd_parse_ms(const char *s, uint32_t *out)
{
	uint32_t mult;
	bool overflow;
	uint64_t v;

	if (!s || memd_conf_digits(&s, &v, &overflow))
		return -EINVAL;
	/* A bare number is milliseconds, the unit memd keeps. */
	if (!*s || !strcmp(s, "ms"))
		mult = 1;
	else if (!strcmp(s, "s"))
		mult = MEMD_MS_PER_S;
	else if (!strcmp(s, "m"))
		mult = MEMD_MS_PER_M;
	else if (!strcmp(s, "h"))
		mult = MEMD_MS_PER_H;
	else
		return -EINVAL;
	if (overflow || v > UINT32_MAX / mult)
		return -ERANGE;
	*out = (uint32_t)v * mult;
	return 0;
}

/* Largest binary unit that divides v exactly: 65536 -> "64K". */
void memd_conf_format_bytes(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "EPTGMK";
	unsigned int i;

	for (i = 0; v && i < sizeof(units) - 1; i++) {
		unsigned int shift = 10 * (6 - i);

		if (!(v & ((UINT64_C(1) << shift) - 1))) {
			snprintf(buf, len, "%" PRIu64 "%c", v >> shift,
				 units[i]);
			return;
		}
	}
	snprintf(buf, len, "%" PRIu64, v);
}

/* Largest unit that divides v exactly: 120000 -> "2m"; 0 -> "0ms". */
void memd_conf_format_ms(uint64_t v, char *buf, size_t len)
{
	if (v && !(v % MEMD_MS_PER_H))
		snprintf(buf, len, "%" PRIu64 "h", v / MEMD_MS_PER_H);
	else if (v && !(v % MEMD_MS_PER_M))
		snprintf(buf, len, "%" PRIu64 "m", v / MEMD_MS_PER_M);
	else if (v && !(v % MEMD_MS_PER_S))
		snprintf(buf, len, "%" PRIu64 "s", v / MEMD_MS_PER_S);
	else
		snprintf(buf, len, "%" PRIu64 "ms", v);
}

void memd_conf_format_num(const struct memd_conf_key *k, uint64_t v, char *buf,
			  size_t len)
{
	const struct memd_conf_name *n;

	switch (k->type) {
	case MEMD_CONF_BYTES:
		memd_conf_format_bytes(v, buf, len);
		return;
	case MEMD_CONF_MS:
		memd_conf_format_ms(v, buf, len);
		return;
	case MEMD_CONF_ENUM:
		for (n = k->names; n->name; n++) {
			if ((uint64_t)(int64_t)n->value == v) {
				snprintf(buf, len, "%s", n->name);
				return;
			}
		}
		snprintf(buf, len, "%" PRId64, (int64_t)v);
		return;
	case MEMD_CONF_UINT:
	case MEMD_CONF_STRING:
		break;
	}
	snprintf(buf, len, "%" PRIu64, v);
}

/* What a key accepts, for errors and --print-config. */
void memd_conf_expect(const struct memd_conf_key *k, char *buf, size_t len)
{
	char lo[32], hi[32];
	const struct memd_conf_name *n;
	size_t used;

	/* the bounds as a value of k is written (unused for strings) */
	memd_conf_format_num(k, k->min, lo, sizeof(lo));
	memd_conf_format_num(k, k->max, hi, sizeof(hi));
	switch (k->type) {
	case MEMD_CONF_STRING:
		snprintf(buf, len, "%s", k->expect);
		return;
	case MEMD_CONF_BYTES:
		snprintf(buf, len,
			 "a size from %s to %s%s (bytes, or a K, M, G, T, P "
			 "or E suffix such as %s)",
			 lo, hi,
			 k->flags & MEMD_CONF_POW2 ? ", a power of two" : "",
			 k->def);
		return;
	case MEMD_CONF_MS:
		snprintf(buf, len,
			 "a duration from %s to %s (500ms, 10s, 2m, 1h; "
			 "a bare number is milliseconds)",
			 lo, hi);
		return;
	case MEMD_CONF_UINT:
		snprintf(buf, len, "a whole number from %s to %s", lo, hi);
		return;
	case MEMD_CONF_ENUM:
		used = (size_t)snprintf(buf, len, "one of");
		for (n = k->names; n->name && used < len; n++)
			used += (size_t)snprintf(
				buf + used, len - used, "%s %s",
				n == k->names ? "" : ",", n->name);
		return;
	}
}

/* Every value error ends with what would have been accepted. */
void memd_conf_append_expect(const struct memd_conf_key *k, char *what,
			     size_t whatlen)
{
	char expect[256];
	size_t used;

	if (!what || !whatlen)
		return;
	memd_conf_expect(k, expect, sizeof(expect));
	used = strlen(what);
	snprintf(what + used, whatlen - used, "; expected %s", expect);
}

void memd_conf_format(const struct memd_config *c,
		      const struct memd_conf_key *k, char *buf, size_t len)
{
	if (k->type == MEMD_CONF_STRING)
		snprintf(buf, len, "%.*s", MEMD_CONF_STR_MAX - 1,
			 (const char *)c + k->off);
	else
		memd_conf_format_num(k, memd_conf_get_num(c, k), buf, len);
}

/*
 * Bounds of a number key, shared by parsing and validation. shown is the
 * value as the user wrote it (or as we would print it).
 */
int memd_conf_check_num(const struct memd_conf_key *k, uint64_t v,
			const char *shown, char *what, size_t whatlen)
{
	const struct memd_conf_name *n;

	if (k->type == MEMD_CONF_ENUM) {
		for (n = k->names; n->name; n++)
			if ((uint64_t)(int64_t)n->value == v)
				return 0;
		memd_errf(what, whatlen, "'%s' is not a choice", shown);
		return -EINVAL;
	}
	if (v < k->min || v > k->max) {
		memd_errf(what, whatlen, "'%s' is out of range", shown);
		return -ERANGE;
	}
	if ((k->flags & MEMD_CONF_POW2) && (v & (v - 1))) {
		memd_errf(what, whatlen, "'%s' is not a power of two", shown);
		return -EINVAL;
	}
	return 0;
}

int memd_conf_parse_num(const struct memd_conf_key *k, const char *value,
			const char *shown, uint64_t *out, char *what,
			size_t whatlen)
{
	const struct memd_conf_name *n;
	bool overflow;
	uint32_t v32;
	int rc;

	switch (k->type) {
	case MEMD_CONF_BYTES:
		rc = memd_parse_bytes(value, out);
		if (rc == -ERANGE)
			memd_errf(what, whatlen, "'%s' does not fit in 64 bits",
				  shown);
		else if (rc)
			memd_errf(what, whatlen, "'%s' is not a size", shown);
		return rc;
	case MEMD_CONF_MS:
		rc = memd_parse_ms(value, &v32);
		if (rc == -ERANGE)
			memd_errf(what, whatlen, "'%s' is too long", shown);
		else if (rc)
			memd_errf(what, whatlen, "'%s' is not a duration",
				  shown);
		*out = v32;
		return rc;
	case MEMD_CONF_UINT:
		if (memd_conf_digits(&value, out, &overflow) || *value) {
			memd_errf(what, whatlen, "'%s' is not a whole number",
				  shown);
			return -EINVAL;
		}
		if (overflow) {
			memd_errf(what, whatlen, "'%s' is out of range", shown);
			return -ERANGE;
		}
		return 0;
	case MEMD_CONF_ENUM:
		for (n = k->names; n->name; n++) {
			if (!strcmp(value, n->name)) {
				*out = (uint64_t)(int64_t)n->value;
				return 0;
			}
		}
		memd_errf(what, whatlen, "'%s' is not a choice", shown);
		return -EINVAL;
	case MEMD_CONF_STRING:
		break;
	}
	return -EINVAL;
}
