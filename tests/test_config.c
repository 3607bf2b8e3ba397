// SPDX-License-Identifier: MIT
/*
 * tests/test_config.c - memd.conf parsing, flags, validation, printing and
 * reloads (memd/config.c), and that memd.conf(5) documents every key.
 *
 * Single-threaded. The tests that touch files share one mkdtemp()
 * directory, made and removed by the runner around them (so it goes even
 * when a test fails in its forked child). Expected values are
 * written out exactly (1G is 1073741824, not memd_parse_bytes("1G")), so
 * a parser that is consistently wrong still fails.
 */
#include "memd/config.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)
#define PIB (UINT64_C(1) << 50)
#define EIB (UINT64_C(1) << 60)

static char tdir[1024]; /* short enough that tdir/name fits PATH_MAX */

static void tmpdir_setup(void)
{
	tu_tmpdir_make(tdir, sizeof(tdir), "test_config");
}

static void tmpdir_teardown(void)
{
	tu_tmpdir_remove(tdir);
}

/* Writes len bytes to tdir/name; path receives the file's path. */
static void write_file_n(const char *name, const char *data, size_t len,
			 char *path, size_t pathlen)
{
	snprintf(path, pathlen, "%s/%s", tdir, name);
	tu_write_file(path, data, len);
}

static void write_file(const char *name, const char *text, char *path,
		       size_t pathlen)
{
	write_file_n(name, text, strlen(text), path, pathlen);
}

static void assert_config_eq(const struct memd_config *a,
			     const struct memd_config *b)
{
	ck_assert_str_eq(a->listen, b->listen);
	ck_assert_str_eq(a->fabric_node, b->fabric_node);
	ck_assert_str_eq(a->provider, b->provider);
	ck_assert_uint_eq(a->donate_bytes, b->donate_bytes);
	ck_assert_uint_eq(a->slab_bytes, b->slab_bytes);
	ck_assert_int_eq(a->hugepages, b->hugepages);
	ck_assert_str_eq(a->numa_nodes, b->numa_nodes);
	ck_assert_uint_eq(a->lease_ttl_ms, b->lease_ttl_ms);
	ck_assert_uint_eq(a->lease_grace_ms, b->lease_grace_ms);
	ck_assert_uint_eq(a->quiesce_ms, b->quiesce_ms);
	ck_assert_uint_eq(a->max_clients, b->max_clients);
	ck_assert_uint_eq(a->max_clients_per_host, b->max_clients_per_host);
	ck_assert_uint_eq(a->reserved_clients, b->reserved_clients);
	ck_assert_uint_eq(a->handshake_timeout_ms, b->handshake_timeout_ms);
	ck_assert_uint_eq(a->idle_timeout_ms, b->idle_timeout_ms);
	ck_assert_uint_eq(a->max_sessions_per_tenant,
			  b->max_sessions_per_tenant);
	ck_assert_uint_eq(a->max_leases_per_session, b->max_leases_per_session);
	ck_assert_int_eq(a->log_level, b->log_level);
	ck_assert_uint_eq(a->kv_share, b->kv_share);
	ck_assert_uint_eq(a->kv_lease_ms, b->kv_lease_ms);
	ck_assert_uint_eq(a->kv_reserve_ms, b->kv_reserve_ms);
	ck_assert_uint_eq(a->kv_max_reserved, b->kv_max_reserved);
	ck_assert_str_eq(a->kv_spill_dir, b->kv_spill_dir);
	ck_assert_uint_eq(a->kv_spill_bytes, b->kv_spill_bytes);
	ck_assert_str_eq(a->registry, b->registry);
	ck_assert_str_eq(a->cluster_secret_file, b->cluster_secret_file);
	ck_assert_str_eq(a->state_dir, b->state_dir);
	ck_assert_str_eq(a->advertise, b->advertise);
	ck_assert_str_eq(a->donor_name, b->donor_name);
	ck_assert_uint_eq(a->report_interval_ms, b->report_interval_ms);
	ck_assert_uint_eq(a->pass_ttl_ms, b->pass_ttl_ms);
	ck_assert_str_eq(a->metrics_listen, b->metrics_listen);
}

/* A valid config where every key differs from its default. */
static void config_nondefault(struct memd_config *c)
{
	memd_config_defaults(c);
	snprintf(c->listen, sizeof(c->listen), "[::1]:0");
	snprintf(c->fabric_node, sizeof(c->fabric_node), "10.1.2.3");
	snprintf(c->provider, sizeof(c->provider), "verbs;ofi_rxm");
	c->donate_bytes = 48 * GIB;
	c->slab_bytes = 256 * MIB;
	c->hugepages = MEMD_HUGEPAGES_NO;
	snprintf(c->numa_nodes, sizeof(c->numa_nodes), "0,2");
	c->lease_ttl_ms = 1500;
	c->lease_grace_ms = 250;
	c->quiesce_ms = 0;
	c->max_clients = 77;
	c->max_clients_per_host = 9;
	c->reserved_clients = 3;
	c->handshake_timeout_ms = 1500;
	c->idle_timeout_ms = 0;
	c->log_level = LOG_DEBUG;
	c->kv_share = 25;
	c->kv_lease_ms = 500;
	c->kv_reserve_ms = 30000;
	snprintf(c->kv_spill_dir, sizeof(c->kv_spill_dir), "/srv/tp-spill");
	c->kv_spill_bytes = 100 * GIB;
	snprintf(c->registry, sizeof(c->registry), "[fd00::1]:7471");
	snprintf(c->cluster_secret_file, sizeof(c->cluster_secret_file),
		 "/etc/tidepool/cluster.secret");
	snprintf(c->state_dir, sizeof(c->state_dir), "/srv/tp-state");
	snprintf(c->advertise, sizeof(c->advertise), "donor-7.example:7470");
	snprintf(c->donor_name, sizeof(c->donor_name), "rack2.donor-7_a");
	c->report_interval_ms = 250;
	c->pass_ttl_ms = 90000;
	snprintf(c->metrics_listen, sizeof(c->metrics_listen), "[::1]:9470");
}

static void assert_contains(const char *haystack, const char *needle)
{
	ck_assert_msg(strstr(haystack, needle), "'%s' does not contain '%s'",
		      haystack, needle);
}

/* --- defaults ---------------------------------------------------------- */

START_TEST(defaults_exact_and_valid)
{
	struct memd_config c;
	char err[512] = "";

	memset(&c, 0xa5, sizeof(c));
	memd_config_defaults(&c);
	ck_assert_str_eq(c.listen, "127.0.0.1:7470");
	ck_assert_str_eq(c.fabric_node, "");
	ck_assert_str_eq(c.provider, "tcp");
	ck_assert_uint_eq(c.donate_bytes, 1073741824u);
	ck_assert_uint_eq(c.slab_bytes, 67108864u);
	ck_assert_int_eq(c.hugepages, MEMD_HUGEPAGES_AUTO);
	ck_assert_str_eq(c.numa_nodes, "");
	ck_assert_uint_eq(c.lease_ttl_ms, 10000);
	ck_assert_uint_eq(c.lease_grace_ms, 2000);
	ck_assert_uint_eq(c.quiesce_ms, 100);
	ck_assert_uint_eq(c.max_clients, 1024);
	ck_assert_uint_eq(c.max_clients_per_host, 256);
	ck_assert_uint_eq(c.reserved_clients, 32);
	ck_assert_uint_eq(c.handshake_timeout_ms, 5000);
	ck_assert_uint_eq(c.idle_timeout_ms, 300000);
	ck_assert_uint_eq(c.max_sessions_per_tenant, 1024);
	ck_assert_uint_eq(c.max_leases_per_session, 65536);
	ck_assert_uint_eq(c.kv_max_reserved, 65536);
	ck_assert_int_eq(c.log_level, LOG_INFO);
	ck_assert_uint_eq(c.kv_share, 50);
	ck_assert_uint_eq(c.kv_lease_ms, 2000);
	ck_assert_uint_eq(c.kv_reserve_ms, 10000);
	ck_assert_str_eq(c.kv_spill_dir, "");
	ck_assert_uint_eq(c.kv_spill_bytes, 0);
	ck_assert_str_eq(c.registry, "");
	ck_assert_str_eq(c.cluster_secret_file, "");
	ck_assert_str_eq(c.state_dir, "/var/lib/tidepool");
	ck_assert_str_eq(c.advertise, "");
	ck_assert_str_eq(c.donor_name, "");
	ck_assert_uint_eq(c.report_interval_ms, 1000);
	ck_assert_uint_eq(c.pass_ttl_ms, 600000);
	ck_assert_str_eq(c.metrics_listen, "");
	ck_assert_int_eq(memd_config_mode(&c), MEMD_MODE_STANDALONE);
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
}
END_TEST

/* --- value parsers ------------------------------------------------------ */

struct bytes_case {
	const char *s;
	int rc;
	uint64_t v;
};

static const struct bytes_case bytes_cases[] = {
	{ "0", 0, 0 },
	{ "1", 0, 1 },
	{ "4096", 0, 4096 },
	{ "0004096", 0, 4096 },
	{ "1K", 0, 1024 },
	{ "1k", 0, 1024 },
	{ "4K", 0, 4096 },
	{ "64KiB", 0, 65536 },
	{ "512M", 0, 536870912 },
	{ "1MiB", 0, 1048576 },
	{ "64G", 0, 68719476736u },
	{ "1GiB", 0, 1073741824 },
	{ "1T", 0, 1099511627776u },
	{ "2TiB", 0, 2199023255552u },
	{ "1P", 0, 1125899906842624u },
	{ "1E", 0, 1152921504606846976u },
	{ "15E", 0, 17293822569102704640u },
	{ "18446744073709551615", 0, UINT64_MAX },
	{ "17179869183G", 0, 18446744072635809792u },
	{ "16E", -ERANGE, 0 },
	{ "17179869184G", -ERANGE, 0 },
	{ "18446744073709551616", -ERANGE, 0 },
	{ "99999999999999999999999", -ERANGE, 0 },
	{ "99999999999999999999999K", -ERANGE, 0 },
	{ "99999999999999999999999Q", -EINVAL, 0 },
	{ "12Q", -EINVAL, 0 },
	{ "", -EINVAL, 0 },
	{ " ", -EINVAL, 0 },
	{ " 1G", -EINVAL, 0 },
	{ "1G ", -EINVAL, 0 },
	{ "1 G", -EINVAL, 0 },
	{ "-1", -EINVAL, 0 },
	{ "-1G", -EINVAL, 0 },
	{ "+1", -EINVAL, 0 },
	{ "1.5G", -EINVAL, 0 },
	{ "0x10", -EINVAL, 0 },
	{ "G", -EINVAL, 0 },
	{ "1GG", -EINVAL, 0 },
	{ "1GB", -EINVAL, 0 },
	{ "1Gi", -EINVAL, 0 },
	{ "1GIB", -EINVAL, 0 },
	{ "1iB", -EINVAL, 0 },
	{ "1B", -EINVAL, 0 },
};

START_TEST(parse_bytes_cases)
{
	const struct bytes_case *t = &bytes_cases[_i];
	uint64_t v = 0x5a5a5a5a5a5a5a5au;
	int rc = memd_parse_bytes(t->s, &v);

	ck_assert_msg(rc == t->rc, "'%s': rc %d, want %d", t->s, rc, t->rc);
	if (!t->rc)
		ck_assert_msg(v == t->v, "'%s': %llu, want %llu", t->s,
			      (unsigned long long)v, (unsigned long long)t->v);
	else
		ck_assert_uint_eq(v, 0x5a5a5a5a5a5a5a5au);
}
END_TEST

struct ms_case {
	const char *s;
	int rc;
	uint32_t v;
};

static const struct ms_case ms_cases[] = {
	{ "0", 0, 0 },
	{ "0ms", 0, 0 },
	{ "750", 0, 750 },
	{ "500ms", 0, 500 },
	{ "10s", 0, 10000 },
	{ "2m", 0, 120000 },
	{ "1h", 0, 3600000 },
	{ "4294967295", 0, UINT32_MAX },
	{ "4294967295ms", 0, UINT32_MAX },
	{ "4294967s", 0, 4294967000u },
	{ "71582m", 0, 4294920000u },
	{ "1193h", 0, 4294800000u },
	{ "4294967296", -ERANGE, 0 },
	{ "4294968s", -ERANGE, 0 },
	{ "71583m", -ERANGE, 0 },
	{ "1194h", -ERANGE, 0 },
	{ "99999999999999999999999h", -ERANGE, 0 },
	{ "", -EINVAL, 0 },
	{ " ", -EINVAL, 0 },
	{ "s", -EINVAL, 0 },
	{ "ms", -EINVAL, 0 },
	{ "10S", -EINVAL, 0 },
	{ "10sec", -EINVAL, 0 },
	{ "10 s", -EINVAL, 0 },
	{ "1.5s", -EINVAL, 0 },
	{ "-1", -EINVAL, 0 },
	{ "+1s", -EINVAL, 0 },
	{ "1d", -EINVAL, 0 },
	{ "10mss", -EINVAL, 0 },
	{ "10sm", -EINVAL, 0 },
	{ "1h30m", -EINVAL, 0 },
};

START_TEST(parse_ms_cases)
{
	const struct ms_case *t = &ms_cases[_i];
	uint32_t v = 0x5a5a5a5a;
	int rc = memd_parse_ms(t->s, &v);

	ck_assert_msg(rc == t->rc, "'%s': rc %d, want %d", t->s, rc, t->rc);
	if (!t->rc)
		ck_assert_msg(v == t->v, "'%s': %u, want %u", t->s, v, t->v);
	else
		ck_assert_uint_eq(v, 0x5a5a5a5a);
}
END_TEST

START_TEST(parse_null)
{
	uint64_t b;
	uint32_t ms;
	int lvl;

	ck_assert_int_eq(memd_parse_bytes(NULL, &b), -EINVAL);
	ck_assert_int_eq(memd_parse_ms(NULL, &ms), -EINVAL);
	ck_assert_int_eq(memd_parse_log_level(NULL, &lvl), -EINVAL);
}
END_TEST

START_TEST(log_levels)
{
	static const struct {
		const char *name;
		int level;
	} ok[] = {
		{ "err", LOG_ERR },	  { "warning", LOG_WARNING },
		{ "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG },
	};
	static const char *const bad[] = { "ERR",   "Info",  "warn",
					   "error", "crit",  "7",
					   "",	    " info", "info " };
	size_t i;
	int lvl;

	for (i = 0; i < ARRAY_SIZE(ok); i++) {
		lvl = -1;
		ck_assert_int_eq(memd_parse_log_level(ok[i].name, &lvl), 0);
		ck_assert_int_eq(lvl, ok[i].level);
		ck_assert_str_eq(memd_log_level_name(ok[i].level), ok[i].name);
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		lvl = -1;
		ck_assert_msg(memd_parse_log_level(bad[i], &lvl) == -EINVAL,
			      "'%s' accepted", bad[i]);
		ck_assert_int_eq(lvl, -1);
	}
	ck_assert_str_eq(memd_log_level_name(LOG_CRIT), "crit");
	ck_assert_str_eq(memd_log_level_name(LOG_EMERG), "emerg");
	ck_assert_str_eq(memd_log_level_name(8), "unknown");
	ck_assert_str_eq(memd_log_level_name(-1), "unknown");
}
END_TEST

/* --- memd_config_set: every key's good and bad values -------------------- */

enum field_kind { F_STR, F_U64, F_U32, F_INT };

struct good_case {
	const char *key, *value;
	enum field_kind kind;
	size_t off;
	const char *s; /* F_STR */
	uint64_t v;    /* the others */
};

#define GS(k, val, f, want)                                                    \
	{                                                                      \
		k, val, F_STR, offsetof(struct memd_config, f), want, 0        \
	}
#define GN(k, val, kind, f, want)                                              \
	{                                                                      \
		k, val, kind, offsetof(struct memd_config, f), NULL, want      \
	}

static const struct good_case good_cases[] = {
	GS("listen", "127.0.0.1:7470", listen, "127.0.0.1:7470"),
	GS("listen", "127.0.0.1:0", listen, "127.0.0.1:0"),
	GS("listen", "0.0.0.0:65535", listen, "0.0.0.0:65535"),
	GS("listen", "[::1]:7470", listen, "[::1]:7470"),
	GS("listen", "[::]:1", listen, "[::]:1"),
	GS("listen", "[fe80::1%eth0]:9", listen, "[fe80::1%eth0]:9"),
	GS("listen", "localhost:7470", listen, "localhost:7470"),
	GS("listen", "memd-1.pool_a.example:00080", listen,
	   "memd-1.pool_a.example:00080"),
	GS("fabric_node", "", fabric_node, ""),
	GS("fabric_node", "10.0.0.2", fabric_node, "10.0.0.2"),
	GS("fabric_node", "::1", fabric_node, "::1"),
	GS("fabric_node", "[fd00::7]", fabric_node, "fd00::7"),
	GS("fabric_node", "ib0-host.local", fabric_node, "ib0-host.local"),
	GS("provider", "tcp", provider, "tcp"),
	GS("provider", "shm", provider, "shm"),
	GS("provider", "verbs;ofi_rxm", provider, "verbs;ofi_rxm"),
	GS("provider", "efa", provider, "efa"),
	GS("provider", "udp;ofi_rxd", provider, "udp;ofi_rxd"),
	GN("donate", "1M", F_U64, donate_bytes, 1048576),
	GN("donate", "2G", F_U64, donate_bytes, 2147483648u),
	GN("donate", "3GiB", F_U64, donate_bytes, 3221225472u),
	GN("donate", "3221225472", F_U64, donate_bytes, 3221225472u),
	GN("donate", "1P", F_U64, donate_bytes, 1125899906842624u),
	GN("slab_size", "1M", F_U64, slab_bytes, 1048576),
	GN("slab_size", "2MiB", F_U64, slab_bytes, 2097152),
	GN("slab_size", "1048576", F_U64, slab_bytes, 1048576),
	GN("slab_size", "512M", F_U64, slab_bytes, 536870912),
	GN("slab_size", "1G", F_U64, slab_bytes, 1073741824),
	GN("hugepages", "auto", F_INT, hugepages, MEMD_HUGEPAGES_AUTO),
	GN("hugepages", "yes", F_INT, hugepages, MEMD_HUGEPAGES_YES),
	GN("hugepages", "no", F_INT, hugepages, MEMD_HUGEPAGES_NO),
	GS("numa_nodes", "", numa_nodes, ""),
	GS("numa_nodes", "0", numa_nodes, "0"),
	GS("numa_nodes", "all", numa_nodes, "all"),
	GS("numa_nodes", " all ", numa_nodes, "all"),
	GS("numa_nodes", "1023", numa_nodes, "1023"),
	GS("numa_nodes", "0,1", numa_nodes, "0,1"),
	GS("numa_nodes", "0, 1", numa_nodes, "0,1"),
	GS("numa_nodes", "0,2-3", numa_nodes, "0,2,3"),
	GS("numa_nodes", "3,1,2", numa_nodes, "1-3"),
	GS("numa_nodes", "0-7", numa_nodes, "0-7"),
	GS("numa_nodes", "7,0-2,4,5", numa_nodes, "0-2,4,5,7"),
	GS("numa_nodes", "0,0,1-1", numa_nodes, "0,1"),
	GS("numa-nodes", "8-10", numa_nodes, "8-10"),
	GN("lease_ttl", "200ms", F_U32, lease_ttl_ms, 200),
	GN("lease_ttl", "200", F_U32, lease_ttl_ms, 200),
	GN("lease_ttl", "15s", F_U32, lease_ttl_ms, 15000),
	GN("lease_ttl", "60m", F_U32, lease_ttl_ms, 3600000),
	GN("lease_ttl", "1h", F_U32, lease_ttl_ms, 3600000),
	GN("lease-ttl", "3s", F_U32, lease_ttl_ms, 3000),
	GN("lease_grace", "0", F_U32, lease_grace_ms, 0),
	GN("lease_grace", "2500", F_U32, lease_grace_ms, 2500),
	GN("lease_grace", "3600s", F_U32, lease_grace_ms, 3600000),
	GN("quiesce", "0ms", F_U32, quiesce_ms, 0),
	GN("quiesce", "250ms", F_U32, quiesce_ms, 250),
	GN("quiesce", "10s", F_U32, quiesce_ms, 10000),
	GN("quiesce", "10000", F_U32, quiesce_ms, 10000),
	GN("max_clients", "1", F_U32, max_clients, 1),
	GN("max_clients", "0001024", F_U32, max_clients, 1024),
	GN("max_clients", "65536", F_U32, max_clients, 65536),
	GN("max_clients_per_host", "1", F_U32, max_clients_per_host, 1),
	GN("max-clients-per-host", "65536", F_U32, max_clients_per_host, 65536),
	GN("reserved_clients", "0", F_U32, reserved_clients, 0),
	GN("reserved_clients", "64", F_U32, reserved_clients, 64),
	GN("handshake_timeout", "100ms", F_U32, handshake_timeout_ms, 100),
	GN("handshake_timeout", "10m", F_U32, handshake_timeout_ms, 600000),
	GN("idle_timeout", "0", F_U32, idle_timeout_ms, 0),
	GN("idle_timeout", "1h", F_U32, idle_timeout_ms, 3600000),
	GN("max_sessions_per_tenant", "1", F_U32, max_sessions_per_tenant, 1),
	GN("max_leases_per_session", "16777216", F_U32, max_leases_per_session,
	   16777216),
	GN("kv_max_reserved", "8", F_U32, kv_max_reserved, 8),
	GN("log_level", "err", F_INT, log_level, LOG_ERR),
	GN("log_level", "warning", F_INT, log_level, LOG_WARNING),
	GN("log_level", "notice", F_INT, log_level, LOG_NOTICE),
	GN("log_level", "info", F_INT, log_level, LOG_INFO),
	GN("log-level", "debug", F_INT, log_level, LOG_DEBUG),
	GS("registry", "", registry, ""),
	GS("registry", "yes", registry, "yes"),
	GS("registry", "10.0.0.1:7470", registry, "10.0.0.1:7470"),
	GS("registry", "[fd00::1]:1", registry, "[fd00::1]:1"),
	GS("registry", "reg.pool-a.example:65535", registry,
	   "reg.pool-a.example:65535"),
	GS("registry", "etcd", registry, "etcd"),
	GS("registry", "10.0.0.1:7470,10.0.0.2:7470", registry,
	   "10.0.0.1:7470,10.0.0.2:7470"),
	GS("etcd_endpoints", "", etcd_endpoints, ""),
	GS("etcd_endpoints", "10.0.0.9:2379,[fd00::9]:2379", etcd_endpoints,
	   "10.0.0.9:2379,[fd00::9]:2379"),
	GS("etcd_prefix", "/pools/a", etcd_prefix, "/pools/a"),
	GN("etcd_lease", "10s", F_U32, etcd_lease_ms, 10000),
	GS("etcd_cacert", "/etc/etcd/ca.pem", etcd_cacert, "/etc/etcd/ca.pem"),
	GS("registry_peers", "r1:7470,r2:7470", registry_peers,
	   "r1:7470,r2:7470"),
	GS("cluster_secret_file", "", cluster_secret_file, ""),
	GS("cluster-secret-file", "/etc/tidepool/cluster.secret",
	   cluster_secret_file, "/etc/tidepool/cluster.secret"),
	GS("state_dir", "/var/lib/tidepool", state_dir, "/var/lib/tidepool"),
	GS("state_dir", "/", state_dir, "/"),
	GS("advertise", "", advertise, ""),
	GS("advertise", "10.1.2.3:7470", advertise, "10.1.2.3:7470"),
	GS("advertise", "[fe80::1%ib0]:7470", advertise, "[fe80::1%ib0]:7470"),
	GS("donor_name", "", donor_name, ""),
	GS("donor_name", "a", donor_name, "a"),
	GS("donor_name", "Rack_2.node-07", donor_name, "Rack_2.node-07"),
	GS("donor_name",
	   "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk",
	   donor_name,
	   "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"),
	GN("report_interval", "100ms", F_U32, report_interval_ms, 100),
	GN("report_interval", "1s", F_U32, report_interval_ms, 1000),
	GN("report-interval", "1m", F_U32, report_interval_ms, 60000),
	GN("pass_ttl", "10s", F_U32, pass_ttl_ms, 10000),
	GN("pass_ttl", "10m", F_U32, pass_ttl_ms, 600000),
	GN("pass_ttl", "24h", F_U32, pass_ttl_ms, 86400000),
	GS("metrics_listen", "", metrics_listen, ""),
	GS("metrics_listen", "127.0.0.1:0", metrics_listen, "127.0.0.1:0"),
	GS("metrics_listen", "0.0.0.0:9470", metrics_listen, "0.0.0.0:9470"),
	GS("metrics-listen", "[::]:9470", metrics_listen, "[::]:9470"),
	GN("kv_share", "0", F_U32, kv_share, 0),
	GN("kv-share", "100", F_U32, kv_share, 100),
	GN("kv_read_lease", "100ms", F_U32, kv_lease_ms, 100),
	GN("kv_read_lease", "1m", F_U32, kv_lease_ms, 60000),
	GN("kv_reserve_ttl", "100", F_U32, kv_reserve_ms, 100),
	GN("kv_reserve_ttl", "10m", F_U32, kv_reserve_ms, 600000),
	GN("kv_mrc_samples", "0", F_U32, kv_mrc_samples, 0),
	GN("kv_prefill_tokens_per_s", "25000", F_U32, kv_prefill_tokens_per_s,
	   25000),
	GN("kv_bytes_per_token", "4K", F_U64, kv_bytes_per_token, 4096),
	GS("kv_spill_dir", "", kv_spill_dir, ""),
	GS("kv_spill_dir", "/nvme/tp-spill", kv_spill_dir, "/nvme/tp-spill"),
	GN("kv_spill_size", "0", F_U64, kv_spill_bytes, 0),
	GN("kv_spill_size", "2T", F_U64, kv_spill_bytes, 2199023255552u),
};

START_TEST(set_good_values)
{
	const struct good_case *t = &good_cases[_i];
	struct memd_config c;
	char err[512] = "";
	const char *f;
	int rc;

	memd_config_defaults(&c);
	rc = memd_config_set(&c, t->key, t->value, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s = '%s': %d %s", t->key, t->value, rc, err);
	f = (const char *)&c + t->off;
	switch (t->kind) {
	case F_STR:
		ck_assert_str_eq(f, t->s);
		break;
	case F_U64:
		ck_assert_uint_eq(*(const uint64_t *)(const void *)f, t->v);
		break;
	case F_U32:
		ck_assert_uint_eq(*(const uint32_t *)(const void *)f, t->v);
		break;
	case F_INT:
		ck_assert_int_eq(*(const int *)(const void *)f, (int)t->v);
		break;
	}
}
END_TEST

struct bad_case {
	const char *key, *value;
	const char *want; /* in the message, after "key 'K': " */
};

static const struct bad_case bad_cases[] = {
	{ "listen", "", "must not be empty" },
	{ "listen", "127.0.0.1", "has no port" },
	{ "listen", "127.0.0.1:", "bad port" },
	{ "listen", "127.0.0.1:65536", "bad port" },
	{ "listen", "127.0.0.1:-1", "bad port" },
	{ "listen", "127.0.0.1:+80", "bad port" },
	{ "listen", "127.0.0.1:000080", "bad port" },
	{ "listen", "127.0.0.1:80x", "bad port" },
	{ "listen", "::1:7470", "in brackets" },
	{ "listen", "[::1]7470", "no ']'" },
	{ "listen", "[::1:7470", "no ']'" },
	{ "listen", "[]:7470", "host is missing" },
	{ "listen", ":7470", "host is missing" },
	{ "listen", "[zz::1]:7470", "not an IPv6 address" },
	{ "listen", "[10.0.0.1]:7470", "not an IPv6 address" },
	{ "listen", "256.1.1.1:80", "not a host name" },
	{ "listen", "host name:80", "not a host name" },
	{ "listen", "a..b:80", "not a host name" },
	{ "listen", "x/y:80", "not a host name" },
	{ "fabric_node", "10.0.0.300", "not a host name" },
	{ "fabric_node", "host:7470", "has a port; give the host only" },
	{ "fabric_node", "10.0.0.1:7470", "has a port; give the host only" },
	{ "fabric_node", "fe80::1:zz", "not an IPv6 address" },
	{ "fabric_node", "a b", "not a host name" },
	{ "fabric_node", "[::1", "not an IPv6 address" },
	{ "provider", "", "must not be empty" },
	{ "provider", "tcp udp", "not a provider name" },
	{ "provider", "tcp,shm", "not a provider name" },
	{ "provider", "^tcp", "not a provider name" },
	{ "provider",
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	  "longer than 63 characters" },
	{ "donate", "0", "out of range" },
	{ "donate", "1023K", "out of range" },
	{ "donate", "2P", "out of range" },
	{ "donate", "16E", "does not fit in 64 bits" },
	{ "donate", "18446744073709551616", "does not fit in 64 bits" },
	{ "donate", "12Q", "'12Q' is not a size" },
	{ "donate", "", "is not a size" },
	{ "donate", " ", "is not a size" },
	{ "donate", "-1G", "is not a size" },
	{ "donate", "1.5G", "is not a size" },
	{ "donate", "2GB", "is not a size" },
	{ "slab_size", "3M", "not a power of two" },
	{ "slab_size", "96M", "not a power of two" },
	{ "slab_size", "512K", "out of range" },
	{ "slab_size", "1000000", "out of range" },
	{ "slab_size", "2G", "out of range" },
	{ "slab_size", "big", "is not a size" },
	{ "hugepages", "true", "not a choice" },
	{ "hugepages", "AUTO", "not a choice" },
	{ "hugepages", "", "not a choice" },
	{ "hugepages", "1", "not a choice" },
	{ "numa_nodes", "0-8", "'0-8' names 9 nodes; memd serves at most 8" },
	{ "numa_nodes", "0,2,4,6,8,10,12,14,16", "names 9 nodes" },
	{ "numa_nodes", "1024", "'1024' names a node above 1023" },
	{ "numa_nodes", "0-4096", "names a node above 1023" },
	{ "numa_nodes", "x", "'x' is not a node list" },
	{ "numa_nodes", "ALL", "is not a node list" },
	{ "numa_nodes", "all,0", "is not a node list" },
	{ "numa_nodes", "-1", "is not a node list" },
	{ "numa_nodes", "1-", "is not a node list" },
	{ "numa_nodes", "3-1", "is not a node list" },
	{ "numa_nodes", "0,,1", "is not a node list" },
	{ "numa_nodes", ",", "is not a node list" },
	{ "numa_nodes", " ", "is not a node list" },
	{ "numa_nodes", "0;1", "is not a node list" },
	{ "lease_ttl", "199", "out of range" },
	{ "lease_ttl", "199ms", "out of range" },
	{ "lease_ttl", "0", "out of range" },
	{ "lease_ttl", "61m", "out of range" },
	{ "lease_ttl", "2h", "out of range" },
	{ "lease_ttl", "4294967296", "is too long" },
	{ "lease_ttl", "10sec", "not a duration" },
	{ "lease_ttl", "-5s", "not a duration" },
	{ "lease_ttl", "1.5s", "not a duration" },
	{ "lease_grace", "3600001", "out of range" },
	{ "lease_grace", "x", "not a duration" },
	{ "quiesce", "10001", "out of range" },
	{ "quiesce", "11s", "out of range" },
	{ "quiesce", "1m", "out of range" },
	{ "quiesce", "-1", "not a duration" },
	{ "max_clients", "0", "out of range" },
	{ "max_clients", "65537", "out of range" },
	{ "max_clients", "18446744073709551616", "out of range" },
	{ "max_clients", "1k", "not a whole number" },
	{ "max_clients", "", "not a whole number" },
	{ "max_clients", "-1", "not a whole number" },
	{ "max_clients", "1.0", "not a whole number" },
	{ "max_clients_per_host", "0", "out of range" },
	{ "reserved_clients", "65537", "out of range" },
	{ "handshake_timeout", "99ms", "out of range" },
	{ "handshake_timeout", "11m", "out of range" },
	{ "idle_timeout", "25h", "out of range" },
	{ "max_sessions_per_tenant", "0", "out of range" },
	{ "max_sessions_per_tenant", "1048577", "out of range" },
	{ "max_leases_per_session", "0", "out of range" },
	{ "kv_max_reserved", "0", "out of range" },
	{ "log_level", "crit", "not a choice" },
	{ "log_level", "INFO", "not a choice" },
	{ "log_level", "warn", "not a choice" },
	{ "log_level", "7", "not a choice" },
	{ "registry", "no", "is not HOST:PORT" },
	{ "registry", "YES", "is not HOST:PORT" },
	{ "registry", "10.0.0.1", "is not HOST:PORT" },
	{ "registry", "10.0.0.1:0", "port 0 names no port" },
	{ "registry", "10.0.0.1:65536", "is not HOST:PORT" },
	{ "registry", "10.0.0.1: 80", "is not HOST:PORT" },
	{ "registry", "fd00::1:7470", "is not HOST:PORT" },
	{ "registry", "0.0.0.0:7470", "wildcard address" },
	{ "registry", "[::]:7470", "wildcard address" },
	{ "registry", "bad host:7470", "not a host name or address" },
	{ "registry", "ETCD", "is not HOST:PORT" },
	{ "registry", "a:1,", "is not HOST:PORT" },
	{ "registry", "a:1,,b:2", "is not HOST:PORT" },
	{ "registry", "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9",
	  "more than 8 addresses" },
	{ "etcd_endpoints", "10.0.0.9", "is not HOST:PORT" },
	{ "etcd_endpoints", "0.0.0.0:2379", "wildcard address" },
	{ "etcd_prefix", "tidepool", "not an absolute path" },
	{ "etcd_prefix", "/", "must not end with '/'" },
	{ "etcd_prefix", "/pools/", "must not end with '/'" },
	{ "etcd_lease", "1s", "out of range" },
	{ "etcd_lease", "2m", "out of range" },
	{ "registry_peers", "r1", "is not HOST:PORT" },
	{ "cluster_secret_file", "cluster.secret", "not an absolute path" },
	{ "cluster_secret_file", "/etc/a b", "holds a blank" },
	{ "cluster_secret_file", "/etc/a;b", "holds a blank" },
	{ "cluster_secret_file", "/etc/a#b", "holds a blank" },
	{ "state_dir", "", "must not be empty" },
	{ "state_dir", "var/lib", "not an absolute path" },
	{ "advertise", "10.1.2.3", "is not HOST:PORT" },
	{ "advertise", "10.1.2.3:0", "port 0 names no port" },
	{ "advertise", "0.0.0.0:7470", "wildcard address" },
	{ "donor_name", "a b", "not a donor name" },
	{ "donor_name", "a/b", "not a donor name" },
	{ "donor_name", "@admin", "not a donor name" },
	{ "donor_name",
	  "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl",
	  "longer than 63" },
	{ "report_interval", "99ms", "out of range" },
	{ "report_interval", "61s", "out of range" },
	{ "report_interval", "soon", "not a duration" },
	{ "pass_ttl", "9s", "out of range" },
	{ "pass_ttl", "25h", "out of range" },
	{ "metrics_listen", "9470", "is not HOST:PORT" },
	{ "metrics_listen", "::1:9470", "is not HOST:PORT" },
	{ "metrics_listen", "localhost:http", "is not HOST:PORT" },
	{ "kv_share", "101", "out of range" },
	{ "kv_mrc_samples", "1048577", "out of range" },
	{ "kv_prefill_tokens_per_s", "0", "out of range" },
	{ "kv_bytes_per_token", "2G", "out of range" },
	{ "kv_share", "-1", "not a whole number" },
	{ "kv_read_lease", "99ms", "out of range" },
	{ "kv_read_lease", "61s", "out of range" },
	{ "kv_reserve_ttl", "11m", "out of range" },
	{ "kv_spill_dir", "spill", "not an absolute path" },
	{ "kv_spill_dir", "/a b", "holds a blank" },
	{ "kv_spill_size", "2P", "out of range" },
	{ "kv_spill_size", "lots", "not a size" },
};

START_TEST(set_bad_values)
{
	const struct bad_case *t = &bad_cases[_i];
	struct memd_config c, before;
	char err[512] = "", prefix[64];
	int rc;

	config_nondefault(&c);
	before = c;
	rc = memd_config_set(&c, t->key, t->value, err, sizeof(err));
	ck_assert_msg(rc == -EINVAL, "%s = '%s' gave %d", t->key, t->value, rc);
	snprintf(prefix, sizeof(prefix), "key '%s': ", t->key);
	ck_assert_msg(!strncmp(err, prefix, strlen(prefix)),
		      "'%s' does not start with '%s'", err, prefix);
	assert_contains(err, t->want);
	/* every error says what would have been accepted */
	assert_contains(err, "; expected ");
	assert_config_eq(&c, &before);
}
END_TEST

START_TEST(set_unknown_key)
{
	struct memd_config c, before;
	char err[512] = "";

	config_nondefault(&c);
	before = c;
	ck_assert_int_eq(
		memd_config_set(&c, "lease_tll", "5s", err, sizeof(err)),
		-ENOENT);
	assert_contains(err, "key 'lease_tll': unknown key");
	assert_contains(err, "lease_ttl");
	ck_assert_int_eq(memd_config_set(&c, "", "5s", err, sizeof(err)),
			 -ENOENT);
	ck_assert_int_eq(memd_config_set(&c, "donate", NULL, err, sizeof(err)),
			 -EINVAL);
	assert_contains(err, "key 'donate'");
	assert_config_eq(&c, &before);
}
END_TEST

START_TEST(set_error_buffer_bounds)
{
	struct memd_config c;
	char err[16];

	memd_config_defaults(&c);
	memset(err, 'x', sizeof(err));
	ck_assert_int_eq(memd_config_set(&c, "donate", "12Q", err, 8), -EINVAL);
	ck_assert_str_eq(err, "key 'do");
	ck_assert_int_eq(err[8], 'x');
	ck_assert_int_eq(memd_config_set(&c, "donate", "12Q", NULL, 0),
			 -EINVAL);
}
END_TEST

START_TEST(set_quotes_control_bytes)
{
	struct memd_config c;
	char err[512];

	memd_config_defaults(&c);
	ck_assert_int_eq(
		memd_config_set(&c, "donate", "1\n2\x1b[0m", err, sizeof(err)),
		-EINVAL);
	assert_contains(err, "'1?2?[0m'");
	ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

/* --- memd_config_validate ----------------------------------------------- */

START_TEST(validate_cross_keys)
{
	struct memd_config c;
	char err[512];

	memd_config_defaults(&c);
	c.donate_bytes = 96 * MIB;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'donate': 96M is not a multiple of "
			      "slab_size = 64M");

	c.donate_bytes = 32 * MIB;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'donate': 32M is less than one slab "
			      "(slab_size = 64M)");

	c.donate_bytes = 64 * MIB;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);

	c.lease_grace_ms = c.lease_ttl_ms;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'lease_grace': 10s must be less than "
			      "lease_ttl = 10s");
	c.lease_grace_ms = 9999;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);

	/* clients that only heartbeat are never idle past idle_timeout */
	c.idle_timeout_ms = c.lease_ttl_ms;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'idle_timeout': 10s must be 0 or longer "
			      "than lease_ttl and report_interval (10s), or "
			      "memd would close clients that only heartbeat");
	c.idle_timeout_ms = 0;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	c.idle_timeout_ms = 10001;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);

	/* a spill directory and its size cap come together */
	snprintf(c.kv_spill_dir, sizeof(c.kv_spill_dir), "/srv/spill");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'kv_spill_dir': /srv/spill needs a size "
			      "cap (kv_spill_size)");
	c.kv_spill_bytes = 64 * MIB;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	c.kv_spill_dir[0] = '\0';
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'kv_spill_size': 64M without "
			      "kv_spill_dir");
	c.kv_spill_bytes = 0;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);

	/* a curve needs a sample of 16 keys at least, or none */
	c.kv_mrc_samples = 15;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'kv_mrc_samples': 15 is too few to sample "
			      "(16 at least, or 0 for no curves)");
	c.kv_mrc_samples = 0;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	c.kv_mrc_samples = 16;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);

	c.lease_ttl_ms = 200;
	c.lease_grace_ms = 0;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);

	/* numa_nodes: every node gets whole slabs, the same number each */
	memd_config_defaults(&c);
	snprintf(c.numa_nodes, sizeof(c.numa_nodes), "0-2");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'numa_nodes': donate = 1G does not split "
			      "into whole slabs over 3 nodes (slab_size = "
			      "64M each); make donate a multiple of 192M");
	c.donate_bytes = 192 * MIB;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	c.donate_bytes = 64 * MIB; /* one slab for three nodes */
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "over 3 nodes");
	snprintf(c.numa_nodes, sizeof(c.numa_nodes), "5");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	/* "all" is counted on the host, at start-up */
	c.donate_bytes = GIB;
	snprintf(c.numa_nodes, sizeof(c.numa_nodes), "all");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	/* a struct filled by code is held to the same syntax */
	snprintf(c.numa_nodes, sizeof(c.numa_nodes), "0-9");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'numa_nodes': '0-9' names 10 nodes");

	/* the cluster modes need the cluster secret */
	memd_config_defaults(&c);
	snprintf(c.registry, sizeof(c.registry), "yes");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'registry': registry = yes needs "
			      "cluster_secret_file");
	snprintf(c.cluster_secret_file, sizeof(c.cluster_secret_file),
		 "/etc/tidepool/cluster.secret");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(memd_config_mode(&c), MEMD_MODE_REGISTRY);
	snprintf(c.registry, sizeof(c.registry), "reg:7470");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(memd_config_mode(&c), MEMD_MODE_DONOR);
	ck_assert_str_eq(memd_mode_name(MEMD_MODE_DONOR), "donor");
	c.cluster_secret_file[0] = '\0';
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'registry': registry = reg:7470 needs "
			      "cluster_secret_file");

	/* registry = etcd needs endpoints; TLS needs its pieces; peers are
	 * for etcd registries only */
	snprintf(c.cluster_secret_file, sizeof(c.cluster_secret_file),
		 "/etc/tidepool/cluster.secret");
	snprintf(c.registry, sizeof(c.registry), "etcd");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'registry': registry = etcd needs "
			      "etcd_endpoints");
	snprintf(c.etcd_endpoints, sizeof(c.etcd_endpoints), "e1:2379");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(memd_config_mode(&c), MEMD_MODE_REGISTRY);
	ck_assert(memd_config_registry_is_etcd(&c));
	snprintf(c.etcd_cert, sizeof(c.etcd_cert), "/etc/etcd/me.pem");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "needs etcd_cert, etcd_key and etcd_cacert");
	c.etcd_cert[0] = '\0';
	/* etcd authentication: a user and its password file, or neither */
	snprintf(c.etcd_user, sizeof(c.etcd_user), "tidepool");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "needs both etcd_user and etcd_password_file");
	snprintf(c.etcd_password_file, sizeof(c.etcd_password_file),
		 "/etc/tidepool/etcd.password");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	c.etcd_user[0] = '\0';
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	c.etcd_password_file[0] = '\0';
	snprintf(c.registry, sizeof(c.registry), "yes");
	ck_assert(!memd_config_registry_is_etcd(&c));
	snprintf(c.registry_peers, sizeof(c.registry_peers), "r1:7470");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'registry_peers': only with registry = etcd");

	/* /metrics needs a port of its own (port 0 picks one) */
	memd_config_defaults(&c);
	snprintf(c.metrics_listen, sizeof(c.metrics_listen), "%s", c.listen);
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "key 'metrics_listen': 127.0.0.1:7470 is the "
			      "control address (listen); give /metrics a port "
			      "of its own");
	snprintf(c.listen, sizeof(c.listen), "127.0.0.1:0");
	snprintf(c.metrics_listen, sizeof(c.metrics_listen), "127.0.0.1:0");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
}
END_TEST

START_TEST(numa_nodes_list)
{
	struct memd_config c;
	int nodes[MEMD_NUMA_NODES_MAX];

	memd_config_defaults(&c);
	ck_assert_int_eq(memd_config_numa_nodes(&c, nodes), 0);
	snprintf(c.numa_nodes, sizeof(c.numa_nodes), "all");
	ck_assert_int_eq(memd_config_numa_nodes(&c, nodes), -1);
	snprintf(c.numa_nodes, sizeof(c.numa_nodes), "6,1-3");
	ck_assert_int_eq(memd_config_numa_nodes(&c, nodes), 4);
	ck_assert_int_eq(nodes[0], 1);
	ck_assert_int_eq(nodes[1], 2);
	ck_assert_int_eq(nodes[2], 3);
	ck_assert_int_eq(nodes[3], 6);
	ck_assert_int_eq(MEMD_NUMA_NODES_MAX, 8);
}
END_TEST

START_TEST(validate_each_key_bounds)
{
	struct memd_config c;
	char err[512];

	memd_config_defaults(&c);
	c.max_clients = 0;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'max_clients': '0' is out of range");

	memd_config_defaults(&c);
	c.slab_bytes = 3 * MIB;
	c.donate_bytes = 3 * MIB;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'slab_size': '3M' is not a power of two");

	memd_config_defaults(&c);
	c.hugepages = (enum memd_hugepages)42;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'hugepages'");

	memd_config_defaults(&c);
	c.log_level = LOG_CRIT;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'log_level'");

	memd_config_defaults(&c);
	c.lease_ttl_ms = 100;
	c.lease_grace_ms = 0;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'lease_ttl': '100ms' is out of range");

	memd_config_defaults(&c);
	snprintf(c.listen, sizeof(c.listen), "nonsense");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'listen': 'nonsense' has no port");

	memd_config_defaults(&c);
	memset(c.provider, 'a', sizeof(c.provider));
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'provider': not terminated");

	memd_config_defaults(&c);
	c.pass_ttl_ms = 5000;
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'pass_ttl': '5s' is out of range");

	memd_config_defaults(&c);
	snprintf(c.donor_name, sizeof(c.donor_name), "no spaces");
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_contains(err, "key 'donor_name': 'no spaces' is not a donor");
}
END_TEST

/* --- memd_config_load --------------------------------------------------- */

static int load_text(struct memd_config *c, const char *text, char *path,
		     size_t pathlen, char *err, size_t errlen)
{
	write_file("memd.conf", text, path, pathlen);
	return memd_config_load(c, path, err, errlen);
}

START_TEST(load_full_file)
{
	static const char text[] =
		"\xef\xbb\xbf# memd.conf for a test\r\n"
		"; another comment style\n"
		"\n"
		"   \t\n"
		"listen = [::1]:0\n"
		"provider=verbs;ofi_rxm\n"
		"[memd]\n"
		"  donate = 48G ; inline comment\n"
		"\tslab_size: 256M\n"
		"hugepages = no\r\n"
		"numa_nodes = 2 , 0\n"
		"[ memd ]   ; the same section again\n"
		"lease_ttl = 1500ms\n"
		"lease_grace = 250\n"
		"quiesce = 0\n"
		"max_clients = 77\n"
		"max_clients_per_host = 9\n"
		"reserved_clients = 3\n"
		"handshake_timeout = 1500ms\n"
		"idle_timeout = 0\n"
		"log_level = debug\n"
		"registry = [fd00::1]:7471\n"
		"cluster_secret_file = /etc/tidepool/cluster.secret\n"
		"state_dir = /srv/tp-state   ; comment\n"
		"advertise = donor-7.example:7470\n"
		"donor_name = rack2.donor-7_a\n"
		"report_interval = 250ms\n"
		"pass_ttl = 90s\n"
		"metrics_listen = [::1]:9470\n"
		"kv_share = 25\n"
		"kv_read_lease = 500ms\n"
		"kv_reserve_ttl = 30s\n"
		"kv_spill_dir = /srv/tp-spill\n"
		"kv_spill_size = 100G\n"
		"fabric_node = 10.1.2.3"; /* no final newline */
	struct memd_config c, want;
	char path[PATH_MAX], err[512] = "";

	memd_config_defaults(&c);
	ck_assert_int_eq(
		load_text(&c, text, path, sizeof(path), err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	config_nondefault(&want);
	assert_config_eq(&c, &want);
}
END_TEST

START_TEST(load_keeps_unnamed_keys)
{
	struct memd_config c, want;
	char path[PATH_MAX], err[512];

	config_nondefault(&c);
	ck_assert_int_eq(load_text(&c, "max_clients = 9\n", path, sizeof(path),
				   err, sizeof(err)),
			 0);
	config_nondefault(&want);
	want.max_clients = 9;
	assert_config_eq(&c, &want);

	/* comments only: nothing changes */
	ck_assert_int_eq(load_text(&c, "# nothing\n\n", path, sizeof(path), err,
				   sizeof(err)),
			 0);
	assert_config_eq(&c, &want);
	ck_assert_int_eq(
		load_text(&c, "", path, sizeof(path), err, sizeof(err)), 0);
	assert_config_eq(&c, &want);
}
END_TEST

/* Loads text, expects -EINVAL, c unchanged and err == "PATH:" + want. */
static void expect_load_error(const char *text, const char *want)
{
	struct memd_config c, before;
	char path[PATH_MAX], err[1024] = "", full[PATH_MAX + 512];
	int rc;

	config_nondefault(&c);
	before = c;
	rc = load_text(&c, text, path, sizeof(path), err, sizeof(err));
	ck_assert_msg(rc == -EINVAL, "rc %d for:\n%s", rc, text);
	snprintf(full, sizeof(full), "%s:%s", path, want);
	ck_assert_msg(!strncmp(err, full, strlen(full)),
		      "got '%s', want it to start with '%s'", err, full);
	assert_config_eq(&c, &before);
}

START_TEST(load_unknown_key)
{
	expect_load_error("# memd\n\nlease_tll = 5s\n",
			  "3: key 'lease_tll': unknown key (see memd.conf(5))");
	expect_load_error("[memd]\nlease-ttl = 5s\n",
			  "2: key 'lease-ttl': unknown key (did you mean "
			  "'lease_ttl'?)");
	expect_load_error("Listen = 127.0.0.1:1\n", "1: key 'Listen': unknown");
}
END_TEST

START_TEST(load_bad_value)
{
	expect_load_error("donate = 2G\nslab_size = 12Q\n",
			  "2: key 'slab_size': '12Q' is not a size; expected a "
			  "size from 1M to 1G, a power of two");
	expect_load_error("lease_ttl = 100ms\n",
			  "1: key 'lease_ttl': '100ms' is out of range; "
			  "expected a duration from 200ms to 1h");
	expect_load_error("listen =\n", "1: key 'listen': must not be empty");
	expect_load_error("donate = 2G # two gigs\n",
			  "1: key 'donate': '2G # two gigs' is not a size");
	expect_load_error("hugepages = maybe\n",
			  "1: key 'hugepages': 'maybe' is not a choice; "
			  "expected one of auto, yes, no");
}
END_TEST

START_TEST(load_hash_comment_hint)
{
	struct memd_config c;
	char path[PATH_MAX], err[1024];

	memd_config_defaults(&c);
	ck_assert_int_eq(load_text(&c, "donate = 2G # two\n", path,
				   sizeof(path), err, sizeof(err)),
			 -EINVAL);
	assert_contains(err, "(a comment after a value starts with ';')");
}
END_TEST

START_TEST(load_duplicate_key)
{
	expect_load_error("donate = 2G\n[memd]\n\ndonate = 4G\n",
			  "4: key 'donate': set twice (first on line 1)");
	expect_load_error("log_level = info\nlog_level = info\n",
			  "2: key 'log_level': set twice (first on line 1)");
}
END_TEST

START_TEST(load_bad_section)
{
	expect_load_error("[memd]\nlisten = 127.0.0.1:1\n[other]\nx = 1\n",
			  "3: section '[other]' is not allowed; keys go at the "
			  "top or under [memd]");
	/* an empty foreign section is still a mistake */
	expect_load_error("donate = 2G\n[fabric]\n",
			  "2: section '[fabric]' is not allowed");
	expect_load_error("[memd\n", "1: section header without ']'");
	expect_load_error("[memd] junk\n", "1: text after the section header");
	expect_load_error("[]\n", "1: section '[]' is not allowed");
}
END_TEST

START_TEST(load_syntax_errors)
{
	expect_load_error("donate 2G\n",
			  "1: expected 'key = value', got 'donate 2G'");
	expect_load_error("\n\n= 5\n", "3: a value without a key");
	expect_load_error("donate ; = 2G\n", "1: expected 'key = value'");
}
END_TEST

START_TEST(load_indented_lines_are_keys)
{
	/* to libinih an indented line after a key continues that key */
	struct memd_config c;
	char path[PATH_MAX], err[512];

	memd_config_defaults(&c);
	ck_assert_int_eq(load_text(&c,
				   "[memd]\n    listen = 127.0.0.1:1\n"
				   "    donate = 2G\n\t max_clients = 3\n",
				   path, sizeof(path), err, sizeof(err)),
			 0);
	ck_assert_str_eq(c.listen, "127.0.0.1:1");
	ck_assert_uint_eq(c.donate_bytes, 2147483648u);
	ck_assert_uint_eq(c.max_clients, 3);
}
END_TEST

START_TEST(load_long_and_nul_lines)
{
	char text[2048];
	size_t n;

	/* libinih would split a long line and parse its tail as a line */
	n = (size_t)snprintf(text, sizeof(text), "donate = 2G\n# ");
	memset(text + n, 'x', 300);
	snprintf(text + n + 300, sizeof(text) - n - 300, "\n");
	expect_load_error(text, "2: line too long (at most ");

	/* longer than our own buffer too */
	memset(text, 'y', sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	expect_load_error(text, "1: line too long");
}
END_TEST

START_TEST(load_nul_byte)
{
	static const char text[] = "donate = 2G\nmax_clients = 5\0x\n";
	struct memd_config c, before;
	char path[PATH_MAX], err[512], want[PATH_MAX + 64];

	config_nondefault(&c);
	before = c;
	write_file_n("nul.conf", text, sizeof(text) - 1, path, sizeof(path));
	ck_assert_int_eq(memd_config_load(&c, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: NUL byte in line", path);
	ck_assert_str_eq(err, want);
	assert_config_eq(&c, &before);
}
END_TEST

/*
 * A rule between two keys names the file and line of the key it blames,
 * as a bad single value does; the other key of the rule when the blamed
 * one kept its default; "command line" for a flag.
 */
START_TEST(validate_names_file_and_line)
{
	static const char text[] = "# cross-key rules\n"
				   "lease_ttl = 3s\n"
				   "donate = 96M\n"
				   "[memd]\n"
				   "lease_grace = 3s\n";
	struct memd_config c;
	struct memd_conf_src src = { 0 };
	char path[PATH_MAX], err[PATH_MAX + 256], want[PATH_MAX + 256];

	memd_config_defaults(&c);
	write_file("cross.conf", text, path, sizeof(path));
	ck_assert_int_eq(memd_config_load_src(&c, &src, path, err, sizeof(err)),
			 0);
	ck_assert_ptr_eq(src.path, path);

	/* donate (line 3) against slab_size's default */
	ck_assert_int_eq(memd_config_validate_src(&c, &src, err, sizeof(err)),
			 -EINVAL);
	snprintf(want, sizeof(want),
		 "%s:3: key 'donate': 96M is not a multiple of "
		 "slab_size = 64M",
		 path);
	ck_assert_str_eq(err, want);

	/* a flag that fixes donate: now lease_grace (line 5) >= lease_ttl */
	ck_assert_int_eq(memd_config_set_src(&c, &src, "donate", "128M", err,
					     sizeof(err)),
			 0);
	ck_assert_int_eq(memd_config_validate_src(&c, &src, err, sizeof(err)),
			 -EINVAL);
	snprintf(want, sizeof(want),
		 "%s:5: key 'lease_grace': 3s must be less than "
		 "lease_ttl = 3s",
		 path);
	ck_assert_str_eq(err, want);

	/* lease_grace back to its default: the rule blames lease_ttl's line */
	memd_config_defaults(&c);
	memset(&src, 0, sizeof(src));
	write_file("cross2.conf", "\n\nlease_ttl = 1s\n", path, sizeof(path));
	ck_assert_int_eq(memd_config_load_src(&c, &src, path, err, sizeof(err)),
			 0);
	ck_assert_int_eq(memd_config_validate_src(&c, &src, err, sizeof(err)),
			 -EINVAL);
	snprintf(want, sizeof(want),
		 "%s:3: key 'lease_grace': 2s must be less than "
		 "lease_ttl = 1s",
		 path);
	ck_assert_str_eq(err, want);

	/* set by a flag: the command line */
	ck_assert_int_eq(memd_config_set_src(&c, &src, "lease-grace", "1s", err,
					     sizeof(err)),
			 0);
	ck_assert_int_eq(memd_config_validate_src(&c, &src, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "command line: key 'lease_grace': 1s must be "
			      "less than lease_ttl = 1s");

	/* registry without cluster_secret_file, only the file's name known */
	memd_config_defaults(&c);
	memset(&src, 0, sizeof(src));
	src.path = "memd.conf";
	snprintf(c.registry, sizeof(c.registry), "yes");
	ck_assert_int_eq(memd_config_validate_src(&c, &src, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "memd.conf: key 'registry': registry = yes "
			      "needs cluster_secret_file");
	/* no source: no prefix, as memd_config_validate */
	ck_assert_int_eq(memd_config_validate_src(&c, NULL, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "key 'registry': registry = yes needs "
			      "cluster_secret_file");
}
END_TEST

START_TEST(load_missing_file)
{
	struct memd_config c, before;
	char path[PATH_MAX], err[PATH_MAX + 128];

	config_nondefault(&c);
	before = c;
	snprintf(path, sizeof(path), "%s/absent.conf", tdir);
	ck_assert_int_eq(memd_config_load(&c, path, err, sizeof(err)), -ENOENT);
	assert_contains(err, path);
	assert_contains(err, "cannot open");
	assert_config_eq(&c, &before);
}
END_TEST

START_TEST(load_directory)
{
	struct memd_config c, before;
	char path[PATH_MAX], err[PATH_MAX + 128];

	config_nondefault(&c);
	before = c;
	snprintf(path, sizeof(path), "%s/dir.conf", tdir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(memd_config_load(&c, path, err, sizeof(err)), -EISDIR);
	assert_contains(err, path);
	assert_config_eq(&c, &before);
}
END_TEST

START_TEST(load_unreadable_file)
{
	struct memd_config c;
	char path[PATH_MAX], err[PATH_MAX + 128];
	FILE *f;

	write_file("secret.conf", "donate = 2G\n", path, sizeof(path));
	ck_assert_int_eq(chmod(path, 0), 0);
	f = fopen(path, "r");
	if (f) {
		/* root (CAP_DAC_OVERRIDE) reads anyway: nothing to test */
		fclose(f);
		return;
	}
	memd_config_defaults(&c);
	ck_assert_int_eq(memd_config_load(&c, path, err, sizeof(err)), -EACCES);
	assert_contains(err, path);
	ck_assert_uint_eq(c.donate_bytes, 1073741824u);
}
END_TEST

START_TEST(load_stops_at_first_error)
{
	/* the second bad line must not overwrite the first one's report */
	expect_load_error("bogus = 1\nalso_bogus = 2\n",
			  "1: key 'bogus': unknown key");
	expect_load_error("donate 2G\nbogus = 1\n",
			  "1: expected 'key = value'");
}
END_TEST

/* --- memd_config_print -------------------------------------------------- */

static char *print_to_string(const struct memd_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	memd_config_print(c, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

static void roundtrip(const struct memd_config *c)
{
	struct memd_config back;
	char path[PATH_MAX], err[512] = "";
	char *text = print_to_string(c);

	memd_config_defaults(&back);
	/* start from something else so every key must be read back */
	back.max_clients = 5;
	back.lease_ttl_ms = 777;
	ck_assert_int_eq(
		load_text(&back, text, path, sizeof(path), err, sizeof(err)),
		0);
	assert_config_eq(&back, c);
	ck_assert_int_eq(memd_config_validate(&back, err, sizeof(err)), 0);
	free(text);
}

START_TEST(print_roundtrip_defaults)
{
	struct memd_config c;

	memd_config_defaults(&c);
	roundtrip(&c);
}
END_TEST

START_TEST(print_roundtrip_nondefault)
{
	struct memd_config c;

	config_nondefault(&c);
	roundtrip(&c);
	/* odd sizes and durations print in exact units (whole slabs on
	 * both of numa_nodes) */
	c.donate_bytes = 3 * GIB + 6 * MIB;
	c.slab_bytes = MIB;
	c.lease_ttl_ms = 61001;
	c.lease_grace_ms = 60000;
	c.quiesce_ms = 10000;
	snprintf(c.fabric_node, sizeof(c.fabric_node), "fe80::1%%ib0");
	roundtrip(&c);
}
END_TEST

START_TEST(print_format)
{
	struct memd_config c;
	char *text, *line, *save = NULL, *prev = NULL;
	int keys = 0;

	config_nondefault(&c);
	c.quiesce_ms = 0;
	c.fabric_node[0] = '\0';
	text = print_to_string(&c);
	assert_contains(text, "\nlisten = [::1]:0\n");
	assert_contains(text, "\nfabric_node =\n");
	assert_contains(text, "\nprovider = verbs;ofi_rxm\n");
	assert_contains(text, "\ndonate = 48G\n");
	assert_contains(text, "\nslab_size = 256M\n");
	assert_contains(text, "\nhugepages = no\n");
	assert_contains(text, "\n# Default: empty. Restart to change.\n"
			      "numa_nodes = 0,2\n");
	assert_contains(text, "\nlease_ttl = 1500ms\n");
	assert_contains(text, "\nlease_grace = 250ms\n");
	assert_contains(text, "\nquiesce = 0ms\n");
	assert_contains(text, "\nmax_clients = 77\n");
	assert_contains(text, "\nlog_level = debug\n");
	assert_contains(text, "\nregistry = [fd00::1]:7471\n");
	assert_contains(text, "\ncluster_secret_file = "
			      "/etc/tidepool/cluster.secret\n");
	assert_contains(text, "\n# Default: /var/lib/tidepool. Restart to "
			      "change.\nstate_dir = /srv/tp-state\n");
	assert_contains(text, "\nadvertise = donor-7.example:7470\n");
	assert_contains(text, "\ndonor_name = rack2.donor-7_a\n");
	assert_contains(text, "\n# Default: 1s. Restart to change.\n"
			      "report_interval = 250ms\n");
	assert_contains(text, "\n# Default: 10m. Restart to change.\n"
			      "pass_ttl = 90s\n");
	assert_contains(text, "\nmetrics_listen = [::1]:9470\n");
	assert_contains(text, "\n# Default: 50. Reloaded on SIGHUP.\n"
			      "kv_share = 25\n");
	assert_contains(text, "\nkv_read_lease = 500ms\n");
	assert_contains(text, "\nkv_reserve_ttl = 30s\n");
	assert_contains(text, "\nkv_spill_dir = /srv/tp-spill\n");
	assert_contains(text, "\n# Default: 0. Restart to change.\n"
			      "kv_spill_size = 100G\n");
	/* the help of each key, with its default and reload rule */
	assert_contains(text, "\n# Default: 64M. Restart to change.\n"
			      "slab_size = 256M\n");
	assert_contains(text, "\n# Default: info. Reloaded on SIGHUP.\n"
			      "log_level = debug\n");
	assert_contains(text, "\n# Default: empty. Restart to change.\n"
			      "fabric_node =\n");
	assert_contains(text, "\n# Default: 1024. Reloaded on SIGHUP.\n");
	assert_contains(text, "\n# Default: 100ms. Reloaded on SIGHUP.\n");

	/* every key line follows a comment; no line is wider than 80 */
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		ck_assert_msg(strlen(line) <= 80, "too wide: '%s'", line);
		if (line[0] != '#') {
			ck_assert_ptr_nonnull(strchr(line, '='));
			ck_assert_msg(prev && prev[0] == '#',
				      "no help before '%s'", line);
			keys++;
		}
		prev = line;
	}
	ck_assert_int_eq(keys, 48);
	free(text);
}
END_TEST

/* --- memd_config_reload ------------------------------------------------- */

struct note {
	char key[32], oldv[64], newv[64];
	bool applied;
};

struct notes {
	struct note n[16];
	int count;
};

static void record_note(void *arg, const char *key, const char *old_value,
			const char *new_value, bool applied)
{
	struct notes *ns = arg;
	struct note *n;

	ck_assert_int_lt(ns->count, (int)ARRAY_SIZE(ns->n));
	n = &ns->n[ns->count++];
	snprintf(n->key, sizeof(n->key), "%s", key);
	snprintf(n->oldv, sizeof(n->oldv), "%s", old_value);
	snprintf(n->newv, sizeof(n->newv), "%s", new_value);
	n->applied = applied;
}

START_TEST(reload_applies_reloadable_keys_only)
{
	struct memd_config cur, next, want;
	struct notes ns = { .count = 0 };
	char err[512];

	memd_config_defaults(&cur);
	next = cur;
	next.log_level = LOG_DEBUG;
	next.max_clients = 10;
	next.quiesce_ms = 250;
	next.donate_bytes = 2 * GIB;
	snprintf(next.listen, sizeof(next.listen), "127.0.0.1:9");
	next.lease_grace_ms = 3000;
	next.kv_share = 10;
	next.kv_reserve_ms = 1000;

	ck_assert_int_eq(memd_config_reload(&cur, &next, record_note, &ns), 4);
	want = next;
	want.donate_bytes = GIB;
	snprintf(want.listen, sizeof(want.listen), "127.0.0.1:7470");
	want.lease_grace_ms = 2000;
	want.kv_reserve_ms = 10000;
	assert_config_eq(&cur, &want);
	ck_assert_int_eq(memd_config_validate(&cur, err, sizeof(err)), 0);

	/* in table order */
	ck_assert_int_eq(ns.count, 8);
	ck_assert_str_eq(ns.n[0].key, "listen");
	ck_assert_str_eq(ns.n[0].oldv, "127.0.0.1:7470");
	ck_assert_str_eq(ns.n[0].newv, "127.0.0.1:9");
	ck_assert(!ns.n[0].applied);
	ck_assert_str_eq(ns.n[1].key, "donate");
	ck_assert_str_eq(ns.n[1].oldv, "1G");
	ck_assert_str_eq(ns.n[1].newv, "2G");
	ck_assert(!ns.n[1].applied);
	ck_assert_str_eq(ns.n[2].key, "lease_grace");
	ck_assert(!ns.n[2].applied);
	ck_assert_str_eq(ns.n[3].key, "quiesce");
	ck_assert_str_eq(ns.n[3].newv, "250ms");
	ck_assert(ns.n[3].applied);
	ck_assert_str_eq(ns.n[4].key, "max_clients");
	ck_assert_str_eq(ns.n[4].oldv, "1024");
	ck_assert_str_eq(ns.n[4].newv, "10");
	ck_assert(ns.n[4].applied);
	ck_assert_str_eq(ns.n[5].key, "log_level");
	ck_assert_str_eq(ns.n[5].oldv, "info");
	ck_assert_str_eq(ns.n[5].newv, "debug");
	ck_assert(ns.n[5].applied);
	ck_assert_str_eq(ns.n[6].key, "kv_share");
	ck_assert_str_eq(ns.n[6].newv, "10");
	ck_assert(ns.n[6].applied);
	ck_assert_str_eq(ns.n[7].key, "kv_reserve_ttl");
	ck_assert(!ns.n[7].applied);

	/* nothing differs any more among reloadable keys; no callback */
	ck_assert_int_eq(memd_config_reload(&cur, &cur, NULL, NULL), 0);
}
END_TEST

START_TEST(reload_keeps_numa_nodes)
{
	struct memd_config cur, next;
	struct notes ns = { .count = 0 };

	memd_config_defaults(&cur);
	next = cur;
	snprintf(next.numa_nodes, sizeof(next.numa_nodes), "0-3");
	ck_assert_int_eq(memd_config_reload(&cur, &next, record_note, &ns), 0);
	ck_assert_str_eq(cur.numa_nodes, "");
	ck_assert_int_eq(ns.count, 1);
	ck_assert_str_eq(ns.n[0].key, "numa_nodes");
	ck_assert_str_eq(ns.n[0].oldv, "");
	ck_assert_str_eq(ns.n[0].newv, "0-3");
	ck_assert(!ns.n[0].applied);
}
END_TEST

/* A memd's role and identity in the pool are fixed for its lifetime. */
START_TEST(reload_keeps_cluster_keys)
{
	struct memd_config cur, next, want;
	struct notes ns = { .count = 0 };

	memd_config_defaults(&cur);
	want = cur;
	config_nondefault(&next);
	/* only the cluster keys differ */
	memcpy(&next, &cur, offsetof(struct memd_config, registry));
	ck_assert_int_eq(memd_config_reload(&cur, &next, record_note, &ns), 0);
	assert_config_eq(&cur, &want);
	ck_assert_int_eq(ns.count, 8);
	ck_assert_str_eq(ns.n[0].key, "registry");
	ck_assert_str_eq(ns.n[0].newv, "[fd00::1]:7471");
	ck_assert_str_eq(ns.n[7].key, "metrics_listen");
	for (int i = 0; i < ns.count; i++)
		ck_assert_msg(!ns.n[i].applied, "%s applied", ns.n[i].key);
}
END_TEST

/* --- memd.conf(5) documents the table ----------------------------------- */

START_TEST(man_page_names_every_key)
{
	const char *src = getenv("TP_SOURCE_DIR");
	char path[PATH_MAX], needle[256], *man, *text, *line, *save = NULL;
	const char *prev = "";
	struct memd_config c;
	int keys = 0;

	/* ctest sets TP_SOURCE_DIR; by hand, run from the repository root */
	snprintf(path, sizeof(path), "%s/man/memd.conf.5",
		 src && *src ? src : ".");
	man = tu_read_whole(path);
	ck_assert_msg(man, "cannot read %s (set TP_SOURCE_DIR)", path);

	memd_config_defaults(&c);
	text = print_to_string(&c);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[64], def[128], *entry, *end, *eq;
		bool reload;

		if (line[0] == '#') {
			prev = line;
			continue;
		}
		eq = strstr(line, " =");
		ck_assert_ptr_nonnull(eq);
		snprintf(key, sizeof(key), "%.*s", (int)(eq - line), line);
		snprintf(def, sizeof(def), "%s", eq[2] ? eq + 3 : "");
		/* "# Default: X. Reloaded on SIGHUP." precedes the key */
		reload = strstr(prev, "Reloaded on SIGHUP");

		snprintf(needle, sizeof(needle), "\n.TP\n.B %s\n", key);
		entry = strstr(man, needle);
		ck_assert_msg(entry, "%s does not document '%s'", path, key);
		/* the entry ends at the next key or section */
		end = entry + strlen(entry);
		if (strstr(entry + 1, "\n.TP") &&
		    strstr(entry + 1, "\n.TP") < end)
			end = strstr(entry + 1, "\n.TP");
		if (strstr(entry + 1, "\n.SH") &&
		    strstr(entry + 1, "\n.SH") < end)
			end = strstr(entry + 1, "\n.SH");
		*end = '\0';
		if (*def)
			snprintf(needle, sizeof(needle), "Default: \\fB%s\\fR",
				 def);
		else
			snprintf(needle, sizeof(needle), "Default: empty");
		ck_assert_msg(strstr(entry, needle), "'%s': no '%s' in %s", key,
			      needle, path);
		ck_assert_msg(!strstr(entry, "Reloaded on SIGHUP") == !reload,
			      "'%s': reload rule differs from the table", key);
		*end = '\n';
		keys++;
	}
	ck_assert_int_eq(keys, 48);
	free(text);
	free(man);
}
END_TEST

/* The full example of memd.conf(5) is a valid configuration. */
START_TEST(man_page_example_loads)
{
	static const char start[] = "\n.EX\n# /etc/tidepool/memd.conf\n";
	const char *src = getenv("TP_SOURCE_DIR");
	char path[PATH_MAX], conf[PATH_MAX], err[512] = "";
	char *man, *begin, *end;
	struct memd_config c;

	snprintf(path, sizeof(path), "%s/man/memd.conf.5",
		 src && *src ? src : ".");
	man = tu_read_whole(path);
	ck_assert_msg(man, "cannot read %s (set TP_SOURCE_DIR)", path);
	begin = strstr(man, start);
	ck_assert_msg(begin, "no example configuration in %s", path);
	begin += strlen("\n.EX\n");
	end = strstr(begin, "\n.EE\n");
	ck_assert_ptr_nonnull(end);
	end[1] = '\0';
	/* the example must not need roff escapes to be copied */
	ck_assert_ptr_null(strchr(begin, '\\'));

	memd_config_defaults(&c);
	ck_assert_int_eq(
		load_text(&c, begin, conf, sizeof(conf), err, sizeof(err)), 0);
	ck_assert_int_eq(memd_config_validate(&c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.fabric_node, "10.20.0.11");
	ck_assert_str_eq(c.provider, "verbs;ofi_rxm");
	ck_assert_uint_eq(c.donate_bytes, 51539607552u);
	ck_assert_uint_eq(c.slab_bytes, 268435456u);
	ck_assert_int_eq(c.hugepages, MEMD_HUGEPAGES_YES);
	ck_assert_str_eq(c.numa_nodes, "0,1");
	free(man);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tu_tcase(s, "values", 0);
	TCase *tf = tu_tcase(s, "files", 0);

	tcase_add_test(tc, defaults_exact_and_valid);
	tcase_add_loop_test(tc, parse_bytes_cases, 0, ARRAY_SIZE(bytes_cases));
	tcase_add_loop_test(tc, parse_ms_cases, 0, ARRAY_SIZE(ms_cases));
	tcase_add_test(tc, parse_null);
	tcase_add_test(tc, log_levels);
	tcase_add_loop_test(tc, set_good_values, 0, ARRAY_SIZE(good_cases));
	tcase_add_loop_test(tc, set_bad_values, 0, ARRAY_SIZE(bad_cases));
	TU_ADD_TESTS(tc, set_unknown_key, set_error_buffer_bounds,
		     set_quotes_control_bytes, validate_cross_keys,
		     validate_each_key_bounds, print_format,
		     reload_applies_reloadable_keys_only,
		     reload_keeps_numa_nodes, reload_keeps_cluster_keys,
		     numa_nodes_list, man_page_names_every_key);

	/* in the runner, not the forked test, so a failed test's files go */
	tcase_add_unchecked_fixture(tf, tmpdir_setup, tmpdir_teardown);
	TU_ADD_TESTS(tf, load_full_file, load_keeps_unnamed_keys,
		     load_unknown_key, load_bad_value, load_hash_comment_hint,
		     load_duplicate_key, load_bad_section, load_syntax_errors,
		     load_indented_lines_are_keys, load_long_and_nul_lines,
		     load_nul_byte, validate_names_file_and_line,
		     load_missing_file, load_directory, load_unreadable_file,
		     load_stops_at_first_error, print_roundtrip_defaults,
		     print_roundtrip_nondefault, man_page_example_loads);
	return s;
}

int main(void)
{
	return tu_run_suite(config_suite());
}
