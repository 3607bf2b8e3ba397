// SPDX-License-Identifier: MIT
/*
 * poolctl/main.c - poolctl(8), the capacity planner's CLI: pool status,
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
 *
 * This file: usage, options and the command line; poolctl/poolctl.h lists
 * the others (one per verb family, the connection, the output).
 */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "fabric/hostport.h"

#include "poolctl/poolctl.h"

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

/* A verb with no options of its own and want arguments (have given). */
static int plain_verb(const struct opts *o, const char *cmd, int have, int want,
		      const char *what)
{
	int r = only_opts(o, cmd, false, false, false);

	return r ? r : nargs(cmd, have, want, what);
}

/* A subcommand with no options of its own whose one argument, argv[2],
 * is a tenant's name. */
static int tenant_verb(const struct opts *o, const char *cmd, int argc,
		       char **argv)
{
	int r = plain_verb(o, cmd, argc - 2, 1, "which tenant?");

	return r ? r : check_name(cmd, argv[2]);
}

static int run(struct opts *o, int argc, char **argv)
{
	const char *cmd = argv[0];
	uint64_t bytes;
	int r;

	if (!strcmp(cmd, "status") || !strcmp(cmd, "donors") ||
	    !strcmp(cmd, "tenants")) {
		if ((r = plain_verb(o, cmd, argc - 1, 0, "")))
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

			if ((r = tenant_verb(o, "tenant set", argc, argv)))
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
			if ((r = tenant_verb(o, "tenant report", argc, argv)))
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
			if ((r = tenant_verb(o, "tenant remove", argc, argv)))
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

			if ((r = tenant_verb(o, "quota suggest", argc, argv)))
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
		if ((r = plain_verb(o, cmd, argc - 1, 1, "which donor?")) ||
		    (r = check_donor(cmd, argv[1], NULL)))
			return r;
		return cmd_drain(o, argv[1], !strcmp(cmd, "drain"));
	}
	if (!strcmp(cmd, "top")) {
		if ((r = plain_verb(o, cmd, argc - 1, 0, "")))
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
