// SPDX-License-Identifier: MIT
/*
 * memd/config_int.h - what the files of memd.conf's implementation share:
 * the key table's row type, the table itself, and the functions one file
 * calls in another. Private to memd/config*.c; memd/config.h is the API.
 *
 * memd/config.c           the key table (every key's row), setting a key
 *                         from text (flags, defaults), the accessors, and
 *                         SIGHUP reloads
 * memd/config_value.c     number values as written: sizes, durations,
 *                         whole numbers and choices, parsed, bounded and
 *                         formatted back; what a key accepts
 * memd/config_strings.c   the string keys' syntaxes: addresses (HOST,
 *                         HOST:PORT and lists), paths, names, node lists
 * memd/config_validate.c  a whole config: each key again, then the rules
 *                         that couple keys, each naming where it was set
 * memd/config_print.c     --print-config: the effective config as a
 *                         memd.conf that loads back equal
 * memd/config_file.c      memd.conf files through libinih, with file,
 *                         line and reason for every error
 *
 * Threads: none. Every function is reentrant; the table is const.
 */
#ifndef TP_MEMD_CONFIG_INT_H
#define TP_MEMD_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memd/config.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MEMD_KIB (UINT64_C(1) << 10)
#define MEMD_MIB (UINT64_C(1) << 20)
#define MEMD_GIB (UINT64_C(1) << 30)
#define MEMD_PIB (UINT64_C(1) << 50)

#define MEMD_MS_PER_S 1000u
#define MEMD_MS_PER_M (60u * MEMD_MS_PER_S)
#define MEMD_MS_PER_H (60u * MEMD_MS_PER_M)

/* How much of a bad value an error message quotes. */
#define MEMD_CONF_QUOTE_MAX 64
/* Room for one "problem; expected ..." clause. */
#define MEMD_CONF_WHAT_MAX 384

enum memd_conf_type {
	MEMD_CONF_STRING, /* char[MEMD_CONF_STR_MAX], checked by parse_str */
	MEMD_CONF_BYTES,  /* uint64_t, binary size suffixes */
	MEMD_CONF_MS,	  /* uint32_t milliseconds, ms/s/m/h suffixes */
	MEMD_CONF_UINT,	  /* uint32_t */
	MEMD_CONF_ENUM,	  /* int, one of names[] */
};

#define MEMD_CONF_RELOAD 0x1u /* SIGHUP applies a new value */
#define MEMD_CONF_POW2 0x2u   /* the value must be a power of two */

struct memd_conf_name {
	const char *name;
	int value;
};

/*
 * A string key's syntax: checks in and writes its canonical form to out
 * (outlen >= MEMD_CONF_STR_MAX), or describes the problem in what. 0 or
 * -EINVAL.
 */
typedef int memd_conf_parse_str_fn(const char *in, char *out, size_t outlen,
				   char *what, size_t whatlen);

struct memd_conf_key {
	const char *name;
	enum memd_conf_type type;
	size_t off;	   /* of the field in struct memd_config */
	uint64_t min, max; /* numbers; for strings, length bounds */
	const char *def;   /* default, in memd.conf syntax */
	unsigned int flags;
	const struct memd_conf_name *names; /* MEMD_CONF_ENUM; NULL-ended */
	/* MEMD_CONF_STRING. Never called with "": that is refused
	 * (min > 0) or stored as is. */
	memd_conf_parse_str_fn *parse_str;
	const char *expect; /* MEMD_CONF_STRING: the accepted format */
	const char *help;
};

/* The table (config.c), in the order --print-config writes it. */
extern const struct memd_conf_key memd_conf_keys[];
extern const size_t memd_conf_nkeys;

static inline bool memd_conf_is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static inline bool memd_conf_is_alnum(char ch)
{
	return memd_conf_is_digit(ch) || (ch >= 'a' && ch <= 'z') ||
	       (ch >= 'A' && ch <= 'Z');
}

/* --- config.c: the table ------------------------------------------------ */

/* The row of name, or NULL. */
const struct memd_conf_key *memd_conf_find(const char *name);
/* A number key's field of c, widened / narrowed to its type. */
uint64_t memd_conf_get_num(const struct memd_config *c,
			   const struct memd_conf_key *k);
void memd_conf_set_num(struct memd_config *c, const struct memd_conf_key *k,
		       uint64_t v);
/*
 * Parses value for key k into c, or leaves c alone and writes
 * "problem; expected FORMAT" to what. 0, -EINVAL or -ERANGE.
 */
int memd_conf_assign(struct memd_config *c, const struct memd_conf_key *k,
		     const char *value, char *what, size_t whatlen);

/* --- config_value.c: values as written ---------------------------------- */

/*
 * Copies s for an error message: bounded, and without control bytes that
 * could rewrite the operator's terminal or split a log line.
 */
const char *memd_conf_quote(const char *s, char *buf, size_t len);
/*
 * Reads the decimal digits at *sp. Returns -EINVAL when there are none,
 * else 0 with *overflow set if they do not fit in 64 bits; *sp moves past
 * them either way, so a caller can tell junk from overflow.
 */
int memd_conf_digits(const char **sp, uint64_t *out, bool *overflow);
/* Largest binary unit that divides v exactly: 65536 -> "64K". */
void memd_conf_format_bytes(uint64_t v, char *buf, size_t len);
/* Largest unit that divides v exactly: 120000 -> "2m"; 0 -> "0ms". */
void memd_conf_format_ms(uint64_t v, char *buf, size_t len);
/* v as key k's value would be written in memd.conf. */
void memd_conf_format_num(const struct memd_conf_key *k, uint64_t v, char *buf,
			  size_t len);
/* Key k's value in c, as memd.conf would hold it. */
void memd_conf_format(const struct memd_config *c,
		      const struct memd_conf_key *k, char *buf, size_t len);
/* What a key accepts, for errors and --print-config. */
void memd_conf_expect(const struct memd_conf_key *k, char *buf, size_t len);
/* Every value error ends with what would have been accepted. */
void memd_conf_append_expect(const struct memd_conf_key *k, char *what,
			     size_t whatlen);
/*
 * Bounds of a number key, shared by parsing and validation. shown is the
 * value as the user wrote it (or as we would print it).
 */
int memd_conf_check_num(const struct memd_conf_key *k, uint64_t v,
			const char *shown, char *what, size_t whatlen);
/* value as number key k's type; bounds are memd_conf_check_num()'s. */
int memd_conf_parse_num(const struct memd_conf_key *k, const char *value,
			const char *shown, uint64_t *out, char *what,
			size_t whatlen);

/* --- config_strings.c: the string keys' parse_str ----------------------- */

memd_conf_parse_str_fn memd_conf_parse_listen;
memd_conf_parse_str_fn memd_conf_parse_node;
memd_conf_parse_str_fn memd_conf_parse_provider;
memd_conf_parse_str_fn memd_conf_parse_numa_nodes;
memd_conf_parse_str_fn memd_conf_parse_hostport_list;
memd_conf_parse_str_fn memd_conf_parse_registry;
memd_conf_parse_str_fn memd_conf_parse_etcd_prefix;
memd_conf_parse_str_fn memd_conf_parse_path;
memd_conf_parse_str_fn memd_conf_parse_advertise;
memd_conf_parse_str_fn memd_conf_parse_donor_name;
memd_conf_parse_str_fn memd_conf_parse_metrics_listen;

#endif
