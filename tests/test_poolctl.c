// SPDX-License-Identifier: MIT
/*
 * tests/test_poolctl.c - poolctl(8) run as a program ($TP_POOLCTL) the way
 * an operator runs it: argument and size errors (no memd needed), a
 * standalone memd (status via STATUS, leases without authentication) and
 * a registry memd (registry = yes, donating as "r0"): every subcommand's
 * table and --json output, tenant add / quota set / get / remove round
 * trips, drain and undrain, and the exit codes of the man page. Values
 * are exact: sizes derived from the donation, the slab size and the
 * quotas the test sets.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/wire.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define MIB (1024ull * 1024)
#define GIB (1024 * MIB)
#define TIB (1024 * GIB)
/* testutil's memd.conf: donate = 256M, slab_size = 16M */
#define DONATE (256 * MIB)
#define SLAB (16 * MIB)

struct run {
	int status; /* exit code; -1: killed by a signal */
	char out[65536];
	char err[16384];
};

static char scratch[128];	/* per-test directory */
static const char *g_addr;	/* -a for ctl(); NULL: none */
static const char *g_secret;	/* -s for ctl(); NULL: none */
static char g_secret_path[256]; /* the registry's cluster secret */
static struct tu_memd memd;

static const char *poolctl_path(void)
{
	const char *p = getenv("TP_POOLCTL");

	return p && *p ? p : NULL;
}

static void slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, cap - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
}

/*
 * Runs poolctl with args (NULL-terminated), env entries "NAME=value" (or
 * "NAME" to unset) applied on top of ours with POOLCTL_ADDR and
 * TIDEPOOL_CLUSTER_SECRET_FILE removed, stdout and stderr captured.
 */
static int run_poolctl(struct run *r, const char *const *env,
		       const char *const *args)
{
	char out[256], err[256];
	const char *argv[32];
	pid_t pid;
	int st;

	snprintf(out, sizeof(out), "%s/stdout", scratch);
	snprintf(err, sizeof(err), "%s/stderr", scratch);
	tu_argv(argv, 32, poolctl_path(), args);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		tu_child_stdio(NULL, out, err, 0600);
		unsetenv("POOLCTL_ADDR");
		unsetenv("TIDEPOOL_CLUSTER_SECRET_FILE");
		for (; env && *env; env++) {
			const char *eq = strchr(*env, '=');

			if (eq) {
				char name[64];

				snprintf(name, sizeof(name), "%.*s",
					 (int)(eq - *env), *env);
				setenv(name, eq + 1, 1);
			} else {
				unsetenv(*env);
			}
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	slurp(out, r->out, sizeof(r->out));
	slurp(err, r->err, sizeof(r->err));
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return r->status;
}

/* poolctl [-a g_addr] [-s g_secret] ARGS... */
static int ctl(struct run *r, ...)
{
	const char *args[32];
	const char *a;
	int n = 0;
	va_list ap;

	if (g_addr) {
		args[n++] = "-a";
		args[n++] = g_addr;
	}
	if (g_secret) {
		args[n++] = "-s";
		args[n++] = g_secret;
	}
	va_start(ap, r);
	while ((a = va_arg(ap, const char *)) && n < 31)
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	return run_poolctl(r, NULL, args);
}

#define CK_RUN(r, code)                                                        \
	ck_assert_msg((r)->status == (code),                                   \
		      "exit %d, want %d\nstdout:\n%s\nstderr:\n%s",            \
		      (r)->status, (code), (r)->out, (r)->err)
#define CK_HAS(s, sub)                                                         \
	ck_assert_msg(strstr((s), (sub)), "'%s' not in:\n%s", (sub), (s))
#define CK_HASNT(s, sub)                                                       \
	ck_assert_msg(!strstr((s), (sub)), "'%s' in:\n%s", (sub), (s))
/* The run failed (exit 1) and said sub on stderr. */
#define CK_FAILS(r, sub)                                                       \
	do {                                                                   \
		CK_RUN(r, 1);                                                  \
		CK_HAS((r)->err, sub);                                         \
	} while (0)

/* The --json output parsed; fails the test when it is not an object. */
static json_t *parse(const struct run *r)
{
	json_error_t e;
	json_t *v = json_loads(r->out, 0, &e);

	ck_assert_msg(v && json_is_object(v), "not JSON (%s):\n%s", e.text,
		      r->out);
	return v;
}

static long long jint(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	ck_assert_msg(json_is_integer(v), "no integer '%s'", key);
	return json_integer_value(v);
}

static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	ck_assert_msg(s != NULL, "no string '%s'", key);
	return s;
}

/* The element of array (an object's key) whose "name" is name, or NULL. */
static json_t *by_name(const json_t *o, const char *key, const char *name)
{
	size_t i;
	json_t *e;

	json_array_foreach(
		json_object_get(o, key), i,
		e) if (!strcmp(json_string_value(json_object_get(e, "name")),
			       name)) return e;
	return NULL;
}

/* A line of the table that contains every one of the NULL-terminated
 * strings, or fails the test. */
static void ck_row(const char *table, ...)
{
	char line[1024];
	const char *p = table;

	while (*p) {
		size_t n = strcspn(p, "\n");
		bool all = true;
		const char *want;
		va_list ap;

		snprintf(line, sizeof(line), "%.*s", (int)n, p);
		va_start(ap, table);
		while ((want = va_arg(ap, const char *)))
			if (!strstr(line, want))
				all = false;
		va_end(ap);
		if (all)
			return;
		p += n + (p[n] == '\n');
	}
	ck_abort_msg("no row with the wanted cells in:\n%s", table);
}

static void setup_scratch(void)
{
	ck_assert_int_eq(tu_scratch_dir(scratch, sizeof(scratch), "poolctl"),
			 0);
	g_addr = NULL;
	g_secret = NULL;
}

static void teardown_scratch(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	ck_assert_int_eq(system(cmd), 0);
}

/* A TCP port on loopback that nothing listens on (bound, then closed). */
static void closed_addr(char *out, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	close(fd);
	snprintf(out, len, "127.0.0.1:%u", ntohs(a.sin_port));
}

/* ---- no memd needed ---------------------------------------------------- */

START_TEST(bad_arguments_get_usage_and_64)
{
	static const char *const cases[][12] = {
		{ NULL },
		{ "frobnicate", NULL },
		{ "status", "extra", NULL },
		{ "--bogus", "status", NULL },
		{ "status", "--addr", NULL },
		{ "--timeout", "0", "status", NULL },
		{ "--timeout", "ten", "status", NULL },
		{ "-a", "no-port", "status", NULL },
		{ "tenant", NULL },
		{ "tenant", "rename", "a", NULL },
		{ "tenant", "add", NULL },
		{ "tenant", "add", "a", NULL }, /* no --quota */
		{ "tenant", "add", "a", "b", "--quota", "1G", NULL },
		{ "tenant", "add", "a", "--quota", "1G", "--secret-file", "x",
		  "--secret-out", "y", NULL },
		{ "tenant", "remove", NULL },
		{ "tenant", "set", "a", NULL }, /* neither field */
		{ "tenant", "set", "--bytes-per-token", "1K", NULL },
		{ "tenant", "set", "a", "b", "--bytes-per-token", "1K", NULL },
		{ "quota", "set", "a", "1G", "--prefill-tokens-per-s", "9",
		  NULL },
		{ "quota", NULL },
		{ "quota", "get", NULL },
		{ "quota", "set", "a", NULL },
		{ "quota", "list", "a", NULL },
		{ "drain", NULL },
		{ "undrain", "a", "b", NULL },
		{ "status", "--quota", "1G", NULL },
		{ "tenants", "--donor", "r0", NULL },
		{ "leases", "--secret-out", "f", NULL },
		{ "leases", "extra", NULL },
	};
	struct run *r = malloc(sizeof(*r));

	setup_scratch();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		run_poolctl(r, NULL, cases[i]);
		ck_assert_msg(r->status == 64, "case %zu (%s): exit %d\n%s", i,
			      cases[i][0] ? cases[i][0] : "(none)", r->status,
			      r->err);
		CK_HAS(r->err, "poolctl: ");
		CK_HAS(r->err, "usage: poolctl");
		ck_assert_str_eq(r->out, "");
	}
	/* --help is not an error: usage on stdout. */
	ck_assert_int_eq(
		run_poolctl(r, NULL, (const char *[]){ "--help", NULL }), 0);
	CK_HAS(r->out, "usage: poolctl");
	CK_HAS(r->out, "leases [--donor NAME] [--tenant NAME]");
	teardown_scratch();
	free(r);
}
END_TEST

/* Malformed sizes and names are bad data (65), found before any
 * connection: the address is one nothing listens on, which would be 69. */
START_TEST(bad_data_gets_65_before_connecting)
{
	static const char *const sizes[] = {
		"8X",  "1.5", "G",
		"1.",  "8 G", "0x10",
		"1e9", "8E",  "9223372036854775808"
	};
	static const char *const names[] = { "a/b", "a b", "",
					     "0123456789012345678901234567890"
					     "12345678901234567890123456789012"
					     "3" };
	struct run *r = malloc(sizeof(*r));
	char addr[64];

	setup_scratch();
	closed_addr(addr, sizeof(addr));
	g_addr = addr;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		ctl(r, "quota", "set", "a", sizes[i], NULL);
		CK_RUN(r, 65);
		CK_HAS(r->err, sizes[i]);
		ctl(r, "tenant", "add", "a", "--quota", sizes[i], NULL);
		CK_RUN(r, 65);
		CK_HAS(r->err, "poolctl: tenant add: ");
	}
	ctl(r, "quota", "set", "a", "8E", NULL);
	CK_HAS(r->err, "too large");
	ctl(r, "quota", "set", "a", "8X", NULL);
	CK_HAS(r->err, "malformed size '8X'");
	ctl(r, "quota", "set", "--", "a", "-1", NULL); /* -- : not an option */
	CK_RUN(r, 65);
	CK_HAS(r->err, "malformed size '-1'");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		ctl(r, "quota", "get", names[i], NULL);
		CK_RUN(r, 65);
		CK_HAS(r->err, "not a valid tenant name");
		ctl(r, "tenant", "add", names[i], "--quota", "1G", NULL);
		CK_RUN(r, 65);
		/* donor names follow the same rule (the registry's) */
		ctl(r, "drain", names[i], NULL);
		CK_RUN(r, 65);
		CK_HAS(r->err, "not a valid donor name");
		ctl(r, "undrain", names[i], NULL);
		CK_RUN(r, 65);
		ctl(r, "leases", "--donor", names[i], NULL);
		CK_RUN(r, 65);
		CK_HAS(r->err, "poolctl: leases: ");
	}
	ctl(r, "drain", "host:7470", NULL);
	CK_RUN(r, 65);
	/* tenant set: a rate and a size in bounds, else 65 */
	static const char *const bad_tps[] = { "fast", "-1", "1.5", "",
					       "1000000001" };
	for (size_t i = 0; i < sizeof(bad_tps) / sizeof(bad_tps[0]); i++) {
		ctl(r, "tenant", "set", "a", "--prefill-tokens-per-s",
		    bad_tps[i], NULL);
		CK_RUN(r, 65);
		CK_HAS(r->err, "is not a number of tokens a second");
	}
	ctl(r, "tenant", "set", "a", "--bytes-per-token", "2G", NULL);
	CK_RUN(r, 65);
	CK_HAS(r->err, "more than 1G");
	ctl(r, "tenant", "set", "a", "--bytes-per-token", "4X", NULL);
	CK_RUN(r, 65);
	CK_HAS(r->err, "malformed size '4X'");
	ctl(r, "tenant", "set", "a", "--prefill-tokens-per-s", "0",
	    "--bytes-per-token", "128K", NULL);
	CK_RUN(r, 69);
	/* ... but leases --donor also takes the address given with -a (a
	 * standalone memd's one donor): that gets as far as connecting */
	ctl(r, "leases", "--donor", addr, NULL);
	CK_RUN(r, 69);
	ctl(r, "drain", "host-7.rack_2", NULL);
	CK_RUN(r, 69);
	/* Well-formed sizes in every spelling get as far as connecting. */
	static const char *const good[] = { "0",    "4096", "512M", "8G",
					    "1.5T", "8GiB", "8gb",  "7.99E" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		ctl(r, "quota", "set", "a", good[i], NULL);
		CK_RUN(r, 69);
	}
	teardown_scratch();
	free(r);
}
END_TEST

START_TEST(unreachable_gets_69)
{
	struct run *r = malloc(sizeof(*r));
	char addr[64], env[96];

	setup_scratch();
	closed_addr(addr, sizeof(addr));
	g_addr = addr;
	ctl(r, "status", NULL);
	CK_RUN(r, 69);
	CK_HAS(r->err, "poolctl: status: cannot connect to ");
	CK_HAS(r->err, addr);
	ctl(r, "--json", "tenants", NULL);
	CK_RUN(r, 69);
	ck_assert_str_eq(r->out, "");
	/* $POOLCTL_ADDR is the default address. */
	snprintf(env, sizeof(env), "POOLCTL_ADDR=%s", addr);
	run_poolctl(r, (const char *[]){ env, NULL },
		    (const char *[]){ "donors", NULL });
	CK_RUN(r, 69);
	CK_HAS(r->err, addr);
	/* A name that does not resolve says so, not "No route to host"
	 * (.invalid never resolves: RFC 2606). */
	g_addr = "nosuchhost.invalid:7470";
	ctl(r, "status", NULL);
	CK_RUN(r, 69);
	CK_HAS(r->err, "poolctl: status: cannot resolve nosuchhost.invalid");
	CK_HASNT(r->err, "No route to host");
	teardown_scratch();
	free(r);
}
END_TEST

/* ---- a standalone memd -------------------------------------------------- */

static void standalone_setup(void)
{
	setup_scratch();
	tu_memd_start_ok(&memd, NULL);
	g_addr = memd.addr;
	/* A standalone memd needs no secret: a missing file is no error. */
	g_secret = "/nonexistent/cluster.secret";
}

static void standalone_teardown(void)
{
	tu_memd_stop_ok(&memd);
	teardown_scratch();
}

START_TEST(standalone_status_and_leases)
{
	struct run *r = malloc(sizeof(*r));
	struct pool_region *reg;
	struct pool *p;
	json_t *v, *l;
	size_t i;

	ctl(r, "status", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "standalone");
	ck_row(r->out, "capacity", "256.0 MiB", NULL);
	ck_row(r->out, "used", "0 B", NULL);
	ck_row(r->out, "free", "256.0 MiB", NULL);
	ck_row(r->out, "slab size", "16.0 MiB", NULL);
	ck_row(r->out, "donors", "1 up, 0 draining, 0 down", NULL);

	p = tu_pool_connect(&memd);
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB, &reg), 0);

	ctl(r, "--json", "status", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_eq(jint(v, "capacity_bytes"), DONATE);
	ck_assert_int_eq(jint(v, "slab_bytes"), SLAB);
	ck_assert_int_eq(jint(v, "used_bytes"), 2 * SLAB);
	ck_assert_int_eq(jint(v, "free_bytes"), DONATE - 2 * SLAB);
	ck_assert_int_eq(jint(v, "reserved_bytes"), 0);
	ck_assert_int_eq(jint(json_object_get(v, "donors"), "up"), 1);
	ck_assert(json_is_true(json_object_get(v, "standalone")));
	ck_assert_int_eq(json_array_size(json_object_get(v, "tenants")), 0);
	json_decref(v);

	ctl(r, "leases", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "DONOR");
	CK_HAS(r->out, "EXPIRES-IN");
	ck_row(r->out, memd.addr, "default", " s", NULL);

	ctl(r, "--json", "leases", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_eq(json_array_size(json_object_get(v, "leases")), 2);
	json_array_foreach(json_object_get(v, "leases"), i, l)
	{
		ck_assert_str_eq(jstr(l, "donor"), memd.addr);
		ck_assert_str_eq(jstr(l, "tenant"), "default");
		ck_assert_int_eq(jint(l, "tenant_id"), 0);
		ck_assert_int_gt(jint(l, "expires_in_ms"), 0);
		ck_assert_int_lt(jint(l, "slab"), DONATE / SLAB);
	}
	json_decref(v);

	ctl(r, "leases", "--tenant", "someone", NULL);
	CK_FAILS(r, "(ENOENT)");

	/* Nothing else exists on a standalone memd: refused, said why. */
	ctl(r, "tenants", NULL);
	CK_FAILS(r, "poolctl: tenants: ");
	CK_HAS(r->err, "standalone");
	CK_HAS(r->err, "(EOPNOTSUPP)");

	pool_free(p, reg);
	pool_close(p);
	free(r);
}
END_TEST

/* ---- a registry memd ------------------------------------------------------ */

static void registry_setup(void)
{
	char state[256];
	struct run *r = malloc(sizeof(*r));
	int i;

	setup_scratch();
	ck_assert_int_eq(
		tu_secret_file(scratch, "cluster.secret", g_secret_path), 0);
	snprintf(state, sizeof(state), "%s/state", scratch);
	ck_assert_int_eq(mkdir(state, 0700), 0);
	ck_assert_int_eq(
		tu_registry_start(&memd, g_secret_path, state, NULL, NULL), 0);
	g_addr = memd.addr;
	g_secret = g_secret_path;
	/* The registry's own donor part joins over loopback: wait for it
	 * (no timing assertion: up to 30 s on a loaded machine). */
	for (i = 0; i < 300; i++) {
		json_t *v, *d;
		bool up;

		ctl(r, "--json", "donors", NULL);
		CK_RUN(r, 0);
		v = parse(r);
		d = by_name(v, "donors", "r0");
		up = d && !strcmp(jstr(d, "state"), "up") &&
		     jint(d, "slabs_total") > 0;
		json_decref(v);
		if (up)
			break;
		usleep(100 * 1000);
	}
	ck_assert_msg(i < 300, "donor r0 never came up:\n%s", r->out);
	free(r);
}

static void registry_teardown(void)
{
	tu_memd_stop_ok(&memd);
	teardown_scratch();
}

/* A session of tenant at the registry, from the secret in path. */
static struct rpc *tenant_session(const char *tenant, const char *path,
				  int *err)
{
	uint8_t secret[AUTH_SECRET_MAX], key[AUTH_KEY_LEN], skey[AUTH_KEY_LEN];
	struct wire_hello_ok hello = { 0 };
	char text[256];
	struct rpc *c;
	int n;

	ck_assert_int_eq(auth_init(), 0);
	n = auth_read_secret_file(path, secret, text, sizeof(text));
	ck_assert_msg(n > 0, "%s", text);
	auth_tenant_key(secret, (size_t)n, key);
	ck_assert_int_eq(rpc_connect(memd.addr, 5000, &c, NULL, 0), 0);
	*err = rpc_handshake(c, "test_poolctl", 2, tenant, key, 0, 5000, &hello,
			     NULL, skey, text, sizeof(text));
	ck_assert_msg(hello.proto >= 2, "hello: %s", text);
	if (*err) {
		rpc_close(c);
		return NULL;
	}
	return c;
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

START_TEST(registry_tenant_and_quota_round_trip)
{
	struct run *r = malloc(sizeof(*r));
	char out_a[256], out_x[256], sec_b[256], sec_c[256];
	char secret[80];
	struct stat st;
	struct rpc *c;
	json_t *v, *t;
	int err;

	/* add with --secret-out: a new 0600 file holding 64 hex digits */
	snprintf(out_a, sizeof(out_a), "%s/a.secret", scratch);
	ctl(r, "tenant", "add", "a", "--quota", "8G", "--secret-out", out_a,
	    NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "tenant 'a' added");
	CK_HAS(r->out, "8.0 GiB");
	CK_HASNT(r->out, "secret:");
	ck_assert_int_eq(stat(out_a, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(st.st_size, 65);
	/* 8G in a pool of 256M: accepted, with a warning */
	CK_HAS(r->err, "poolctl: tenant add: warning: quota 8.0 GiB is more "
		       "than the pool's capacity 256.0 MiB");
	c = tenant_session("a", out_a, &err);
	ck_assert_msg(c, "tenant a cannot authenticate: %s", strerror(-err));
	rpc_close(c);

	/* add with --secret-file: the tenant's own secret */
	ck_assert_int_eq(tu_secret_file(scratch, "b.secret", sec_b), 0);
	ctl(r, "--json", "tenant", "add", "b", "--quota", "1.5T",
	    "--secret-file", sec_b, NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_gt(jint(v, "id"), 0);
	ck_assert_ptr_null(json_object_get(v, "secret"));
	json_decref(v);
	c = tenant_session("b", sec_b, &err);
	ck_assert_msg(c, "tenant b cannot authenticate: %s", strerror(-err));
	rpc_close(c);
	/* ... and not with a's secret */
	c = tenant_session("b", out_a, &err);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(err, -EACCES);

	/* add with neither: the secret printed once, a warning */
	ctl(r, "tenant", "add", "c", "--quota", "512M", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->err, "warning");
	ck_assert_int_eq(
		sscanf(strstr(r->out, "secret: "), "secret: %79s", secret), 1);
	ck_assert_int_eq(strlen(secret), 64);
	snprintf(sec_c, sizeof(sec_c), "%s/c.secret", scratch);
	write_file(sec_c, secret);
	c = tenant_session("c", sec_c, &err);
	ck_assert_msg(c, "tenant c cannot authenticate: %s", strerror(-err));
	rpc_close(c);

	/* tenants: table and exact JSON */
	ctl(r, "tenants", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "ID", "NAME", "QUOTA", "USED", "RESERVED", NULL);
	ck_row(r->out, " a ", "8.0 GiB", "0 B", NULL);
	ck_row(r->out, " b ", "1.5 TiB", NULL);
	ck_row(r->out, " c ", "512.0 MiB", NULL);
	ctl(r, "--json", "tenants", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_eq(json_array_size(json_object_get(v, "tenants")), 3);
	t = by_name(v, "tenants", "a");
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(jint(t, "quota_bytes"), 8 * GIB);
	ck_assert_int_eq(jint(t, "used_bytes"), 0);
	ck_assert_int_eq(jint(by_name(v, "tenants", "b"), "quota_bytes"),
			 3 * TIB / 2);
	ck_assert_int_eq(jint(by_name(v, "tenants", "c"), "quota_bytes"),
			 512 * MIB);
	json_decref(v);

	/* quota set / get / list */
	ctl(r, "quota", "set", "a", "128M", NULL);
	CK_RUN(r, 0);
	CK_HASNT(r->err, "warning"); /* within the pool's capacity */
	ctl(r, "quota", "set", "a", "256M", NULL);
	CK_RUN(r, 0);
	CK_HASNT(r->err, "warning"); /* all of it */
	ctl(r, "quota", "set", "a", "2.5G", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "2.5 GiB");
	CK_HAS(r->err, "poolctl: quota set: warning: quota 2.5 GiB is more "
		       "than the pool's capacity 256.0 MiB; accepted");
	ctl(r, "--json", "quota", "get", "a", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_str_eq(jstr(v, "name"), "a");
	ck_assert_int_eq(jint(v, "quota_bytes"), 5 * GIB / 2);
	ck_assert_int_eq(jint(v, "used_bytes"), 0);
	ck_assert_int_eq(jint(v, "reserved_bytes"), 0);
	json_decref(v);
	ctl(r, "quota", "get", "a", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "TENANT", "QUOTA", "AVAILABLE", "USE%", NULL);
	ck_row(r->out, "a ", "2.5 GiB", "0 B", "0.0%", NULL);
	ctl(r, "quota", "list", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "a ", "2.5 GiB", NULL);
	ck_row(r->out, "b ", "1.5 TiB", NULL);
	ck_row(r->out, "c ", "512.0 MiB", NULL);

	/* refusals: exit 1 with memd's reason and the errno's name */
	snprintf(out_x, sizeof(out_x), "%s/x.secret", scratch);
	ctl(r, "tenant", "add", "a", "--quota", "1G", "--secret-out", out_x,
	    NULL);
	CK_FAILS(r, "poolctl: tenant add: ");
	CK_HAS(r->err, "(EEXIST)");
	ck_assert_int_eq(access(out_x, F_OK), -1); /* nothing left behind */
	ctl(r, "tenant", "add", "d", "--quota", "1G", "--secret-out", out_a,
	    NULL);
	CK_RUN(r, 73); /* exists: never overwritten */
	ctl(r, "quota", "get", "nosuch", NULL);
	CK_FAILS(r, "poolctl: quota get: ");
	CK_HAS(r->err, "(ENOENT)");
	ctl(r, "quota", "set", "nosuch", "1G", NULL);
	CK_FAILS(r, "(ENOENT)");
	ctl(r, "tenant", "remove", "nosuch", NULL);
	CK_FAILS(r, "(ENOENT)");

	/* remove */
	ctl(r, "tenant", "remove", "a", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "tenant 'a' removed");
	ctl(r, "--json", "tenant", "remove", "c", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_str_eq(jstr(v, "removed"), "c");
	json_decref(v);
	ctl(r, "--json", "tenants", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_ptr_null(by_name(v, "tenants", "a"));
	ck_assert_ptr_nonnull(by_name(v, "tenants", "b"));
	json_decref(v);
	ctl(r, "quota", "get", "a", NULL);
	CK_RUN(r, 1);
	c = tenant_session("a", out_a, &err);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(err, -EACCES);
	free(r);
}
END_TEST

START_TEST(registry_status_donors_drain)
{
	struct run *r = malloc(sizeof(*r));
	json_t *v, *d;

	ctl(r, "tenant", "add", "t1", "--quota", "1G", "--secret-out",
	    "/dev/null/x", NULL);
	CK_RUN(r, 73);
	ctl(r, "tenant", "add", "t1", "--quota", "1G", "--secret-file",
	    g_secret_path, NULL);
	CK_RUN(r, 0);

	ctl(r, "status", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "capacity", "256.0 MiB", NULL);
	ck_row(r->out, "free", "256.0 MiB", NULL);
	ck_row(r->out, "donors", "1 up, 0 draining, 0 down", NULL);
	ck_row(r->out, "t1", "1.0 GiB", "0 B", NULL);
	ctl(r, "--json", "status", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_eq(jint(v, "capacity_bytes"), DONATE);
	ck_assert_int_eq(jint(v, "free_bytes"), DONATE);
	ck_assert_int_eq(jint(v, "used_bytes"), 0);
	ck_assert_int_eq(jint(v, "slab_bytes"), SLAB);
	ck_assert_int_eq(jint(json_object_get(v, "donors"), "up"), 1);
	ck_assert_int_eq(jint(json_object_get(v, "donors"), "draining"), 0);
	ck_assert_int_eq(jint(by_name(v, "tenants", "t1"), "quota_bytes"), GIB);
	json_decref(v);
	/* --json is sorted and indented, whatever memd sent */
	ck_assert(strstr(r->out, "\"capacity_bytes\"") <
		  strstr(r->out, "\"used_bytes\""));
	CK_HAS(r->out, "\n  \"");

	ctl(r, "donors", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "ID", "NAME", "ADDR", "STATE", "SINCE", "REASON",
	       "CAPACITY", "FREE", "LEASED", "TENANTS", NULL);
	ck_row(r->out, "r0", " up ", "256.0 MiB", NULL);

	ctl(r, "drain", "r0", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "donor 'r0': draining");
	ctl(r, "donors", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "r0", "draining", "256.0 MiB", NULL);
	ctl(r, "--json", "donors", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	d = by_name(v, "donors", "r0");
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(jstr(d, "state"), "draining");
	ck_assert_int_eq(jint(d, "capacity_bytes"), DONATE);
	ck_assert_int_eq(jint(d, "slabs_total"), DONATE / SLAB);
	json_decref(v);
	ctl(r, "--json", "status", NULL);
	v = parse(r);
	ck_assert_int_eq(jint(json_object_get(v, "donors"), "draining"), 1);
	ck_assert_int_eq(jint(json_object_get(v, "donors"), "up"), 0);
	json_decref(v);

	ctl(r, "undrain", "r0", NULL);
	CK_RUN(r, 0);
	CK_HAS(r->out, "donor 'r0': undrained");
	ctl(r, "--json", "donors", NULL);
	v = parse(r);
	ck_assert_str_eq(jstr(by_name(v, "donors", "r0"), "state"), "up");
	json_decref(v);

	ctl(r, "drain", "nosuch", NULL);
	CK_FAILS(r, "poolctl: drain: ");
	CK_HAS(r->err, "(ENOENT)");
	free(r);
}
END_TEST

/* A tenant places and leases two slabs; leases shows them, by name. */
START_TEST(registry_leases)
{
	struct run *r = malloc(sizeof(*r));
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *rep = calloc(1, sizeof(*rep));
	struct wire_ticket ticket;
	char sec[256], text[256];
	struct rpc *c;
	json_t *v, *l;
	size_t i;
	int err;

	ck_assert_int_eq(tu_secret_file(scratch, "t.secret", sec), 0);
	ck_assert_int_eq(
		tu_tenant_add(memd.addr, g_secret_path, "llm", sec, GIB), 0);
	ck_assert_int_eq(
		tu_tenant_add(memd.addr, g_secret_path, "other", sec, GIB), 0);
	c = tenant_session("llm", sec, &err);
	ck_assert_msg(c, "tenant session: %s", strerror(-err));
	req->type = WIRE_PLACE;
	req->u.place.nslabs = 2;
	req->u.place.node = WIRE_NODE_ANY;
	ck_assert_msg(rpc_call(c, req, rep, WIRE_PLACE_OK, 5000, text,
			       sizeof(text)) == 0,
		      "PLACE: %s", text);
	ck_assert_int_eq(rep->u.place_ok.ngrants, 1);
	ticket = rep->u.place_ok.grant[0].ticket;
	memset(req, 0, sizeof(*req));
	req->type = WIRE_LEASE_GRANT;
	req->u.lease_grant.ticket = ticket;
	ck_assert_msg(rpc_call(c, req, rep, WIRE_LEASE_GRANT_OK, 5000, text,
			       sizeof(text)) == 0,
		      "LEASE_GRANT: %s", text);
	ck_assert_int_eq(rep->u.lease_ok.count, 2);

	ctl(r, "leases", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "DONOR", "SLAB", "GEN", "NODE", "TENANT", "SESSION",
	       "EXPIRES-IN", "PATH", NULL);
	/* a raw session that never asked for the slabs' memfds */
	ck_row(r->out, "r0", "llm", " s", "fabric", NULL);

	ctl(r, "--json", "leases", "--donor", "r0", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_eq(json_array_size(json_object_get(v, "leases")), 2);
	json_array_foreach(json_object_get(v, "leases"), i, l)
	{
		bool found = false;

		ck_assert_str_eq(jstr(l, "donor"), "r0");
		ck_assert_str_eq(jstr(l, "tenant"), "llm");
		ck_assert_int_gt(jint(l, "expires_in_ms"), 0);
		for (uint32_t k = 0; k < rep->u.lease_ok.count; k++)
			if (rep->u.lease_ok.lease[k].slab ==
				    (uint32_t)jint(l, "slab") &&
			    rep->u.lease_ok.lease[k].generation ==
				    (uint32_t)jint(l, "generation"))
				found = true;
		ck_assert_msg(found, "slab %lld is not one leased",
			      jint(l, "slab"));
	}
	json_decref(v);

	/* filters */
	ctl(r, "--json", "leases", "--tenant", "other", NULL);
	CK_RUN(r, 0);
	v = parse(r);
	ck_assert_int_eq(json_array_size(json_object_get(v, "leases")), 0);
	json_decref(v);
	ctl(r, "leases", "--tenant", "nosuch", NULL);
	CK_FAILS(r, "no tenant 'nosuch' (ENOENT)");
	ctl(r, "leases", "--donor", "nosuch", NULL);
	CK_FAILS(r, "no donor 'nosuch' (ENOENT)");

	/* used by the tenant: status and donors show it once reported */
	for (i = 0; i < 300; i++) {
		long long used;

		ctl(r, "--json", "quota", "get", "llm", NULL);
		CK_RUN(r, 0);
		v = parse(r);
		used = jint(v, "used_bytes");
		json_decref(v);
		if (used == (long long)(2 * SLAB))
			break;
		usleep(100 * 1000);
	}
	ck_assert_msg(i < 300, "usage never reached 2 slabs:\n%s", r->out);
	ctl(r, "donors", NULL);
	CK_RUN(r, 0);
	ck_row(r->out, "r0", "32.0 MiB", "llm=32.0 MiB (1)", NULL);

	/* a tenant holding memory cannot be removed: EBUSY is temporary */
	ctl(r, "tenant", "remove", "llm", NULL);
	CK_RUN(r, 75);
	CK_HAS(r->err, "(EBUSY)");

	rpc_close(c);
	free(req);
	free(rep);
	free(r);
}
END_TEST

START_TEST(registry_wrong_secret_gets_77)
{
	struct run *r = malloc(sizeof(*r));
	char wrong[256], env[300];

	ck_assert_int_eq(tu_secret_file(scratch, "wrong.secret", wrong), 0);
	g_secret = wrong;
	ctl(r, "status", NULL);
	CK_RUN(r, 77);
	CK_HAS(r->err, "(EACCES)");
	ck_assert_str_eq(r->out, "");
	ctl(r, "tenant", "add", "z", "--quota", "1G", NULL);
	CK_RUN(r, 77);
	CK_HASNT(r->out, "secret:"); /* nothing was added */

	/* the secret file from $TIDEPOOL_CLUSTER_SECRET_FILE */
	snprintf(env, sizeof(env), "TIDEPOOL_CLUSTER_SECRET_FILE=%s",
		 g_secret_path);
	run_poolctl(r, (const char *[]){ env, NULL },
		    (const char *[]){ "-a", memd.addr, "tenants", NULL });
	CK_RUN(r, 0);
	snprintf(env, sizeof(env), "TIDEPOOL_CLUSTER_SECRET_FILE=%s", wrong);
	run_poolctl(r, (const char *[]){ env, NULL },
		    (const char *[]){ "-a", memd.addr, "tenants", NULL });
	CK_RUN(r, 77);

	/* a secret file others may read is refused before it is used */
	ck_assert_int_eq(chmod(g_secret_path, 0644), 0);
	g_secret = g_secret_path;
	ctl(r, "status", NULL);
	CK_RUN(r, 77);
	CK_HAS(r->err, "cluster secret");
	ck_assert_int_eq(chmod(g_secret_path, 0600), 0);
	/* a missing one: 66 */
	g_secret = "/nonexistent/cluster.secret";
	ctl(r, "status", NULL);
	CK_RUN(r, 66);
	CK_HAS(r->err, "/nonexistent/cluster.secret");
	free(r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("poolctl");
	TCase *cli = tu_tcase(s, "cli", 120);
	TCase *alone = tu_tcase(s, "standalone", 120);
	TCase *reg = tu_tcase(s, "registry", 180);

	if (!poolctl_path())
		tu_skip("TP_POOLCTL is not set (run through ctest)");
	tu_need_memd();
	signal(SIGPIPE, SIG_IGN);
	TU_ADD_TESTS(cli, bad_arguments_get_usage_and_64,
		     bad_data_gets_65_before_connecting, unreachable_gets_69);
	tcase_add_checked_fixture(alone, standalone_setup, standalone_teardown);
	tcase_add_test(alone, standalone_status_and_leases);
	tcase_add_checked_fixture(reg, registry_setup, registry_teardown);
	TU_ADD_TESTS(reg, registry_tenant_and_quota_round_trip,
		     registry_status_donors_drain, registry_leases,
		     registry_wrong_secret_gets_77);
	return tu_run_suite(s);
}
