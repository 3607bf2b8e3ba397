// SPDX-License-Identifier: MIT
/*
 * memd/config_print.c - memd --print-config: every key of the table with
 * its help, what it takes, its default and whether SIGHUP reloads it, as
 * comments, then its effective value. The output is a memd.conf that
 * loads back to an equal struct (deploy/memd.conf.example is made from
 * it).
 *
 * Threads: none; writes only to the caller's FILE.
 */
#include "memd/config_int.h"

#include <stdio.h>

/* Writes text as "# " comment lines of at most 78 columns. */
static void memd_conf_print_comment(FILE *out, const char *text)
{
	const char *p = text;

	while (*p) {
		const char *end = p, *brk = NULL;

		while (*end && end - p < 76) {
			if (*end == ' ')
				brk = end;
			end++;
		}
		if (*end && *end != ' ' && brk)
			end = brk;
		fprintf(out, "# %.*s\n", (int)(end - p), p);
		p = end;
		while (*p == ' ')
			p++;
	}
}

void memd_config_print(const struct memd_config *c, FILE *out)
{
	char val[MEMD_CONF_STR_MAX], line[512], expect[256];
	const struct memd_conf_key *k;
	size_t i;

	fputs("# memd.conf(5), as written by memd --print-config.\n"
	      "# Sizes are binary (4096, 512M, 64G, 64GiB); durations take\n"
	      "# ms, s, m or h, and a bare number is milliseconds.\n",
	      out);
	for (i = 0; i < memd_conf_nkeys; i++) {
		k = &memd_conf_keys[i];
		memd_conf_expect(k, expect, sizeof(expect));
		snprintf(line, sizeof(line), "%s: %s Takes %s.", k->name,
			 k->help, expect);
		fputc('\n', out);
		memd_conf_print_comment(out, line);
		/* on a line of its own, so it is never wrapped */
		fprintf(out, "# Default: %s. %s\n", *k->def ? k->def : "empty",
			k->flags & MEMD_CONF_RELOAD ? "Reloaded on SIGHUP."
						    : "Restart to change.");
		memd_conf_format(c, k, val, sizeof(val));
		/* no trailing blank after '=' for an empty value */
		fprintf(out, "%s =%s%s\n", k->name, *val ? " " : "", val);
	}
}
