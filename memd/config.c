// SPDX-License-Identifier: MIT
/*
 * memd/config.c - the memd.conf key table, setting keys from text, the
 * accessors and SIGHUP reloads. The other memd/config_*.c files parse
 * and format values, validate, print and read files through this table
 * (memd/config_int.h lists them).
 *
 * DESIGN
 *
 * memd_conf_keys[] below is the only place a key is defined: its name,
 * type, bounds, default (written as it would be in memd.conf), whether a
 * SIGHUP may change it, and its help text. Parsing a file, setting a key
 * from a flag, validating a struct, --print-config and SIGHUP reloads all
 * walk that table, so they cannot disagree. man/memd.conf(5) documents the
 * same rows and tests/test_config.c checks that it names every key and
 * default.
 *
 * Invariants:
 *   - every row's default parses and passes its own bounds (checked by
 *     memd_config_defaults() in debug builds and by the tests);
 *   - memd_config_print() output loads back to an equal struct for any
 *     config that passes memd_config_validate(): string values may not
 *     hold blanks or comment characters, numbers print in exact units;
 *   - no cross-key rule couples a reloadable key to one that is not, so
 *     copying the reloadable keys of a validated config into a validated
 *     config yields a validated config (see memd_config_reload()).
 *
 * Threads: none of its own. Every function is reentrant; the table is
 * const and there is no other static state.
 */
#include "memd/config_int.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/types.h>
#include <syslog.h>

#include "memd/log.h"
#include "numa/place.h"

static const struct memd_conf_name memd_conf_hugepages_names[] = {
	{ "auto", MEMD_HUGEPAGES_AUTO },
	{ "yes", MEMD_HUGEPAGES_YES },
	{ "no", MEMD_HUGEPAGES_NO },
	{ NULL, 0 },
};

static const struct memd_conf_name memd_conf_shm_names[] = {
	{ "auto", MEMD_SHM_AUTO },
	{ "off", MEMD_SHM_OFF },
	{ NULL, 0 },
};

/* Only the levels memd logs at; the order is the order of the man page. */
static const struct memd_conf_name memd_conf_log_level_names[] = {
	{ "err", LOG_ERR },	  { "warning", LOG_WARNING },
	{ "notice", LOG_NOTICE }, { "info", LOG_INFO },
	{ "debug", LOG_DEBUG },	  { NULL, 0 },
};

/*
 * The rows of memd_conf_keys[], one macro per kind of key, so that a row
 * holds only what is its own: name, field, bounds, default (in memd.conf
 * syntax), flags (MEMD_CONF_RELOAD, MEMD_CONF_POW2) and help.
 *   CONF_BYTES/CONF_MS/CONF_UINT: numbers, min and max in their unit;
 *   CONF_ENUM: one of a NULL-ended name table;
 *   CONF_STR: a string of min to max characters checked by parse, expect
 *     saying what parse accepts;
 *   CONF_OPT_STR: the same, empty by default and allowed to be (up to
 *     MEMD_CONF_STR_MAX - 1 characters);
 *   CONF_OPT_PATH, CONF_OPT_HOSTPORTS: the two common optional strings,
 *     an absolute path and a list of up to 8 HOST:PORT.
 * No string key is reloadable.
 */
#define FIELD(f) offsetof(struct memd_config, f)
#define CONF_NUM(t, n, f, lo, hi, d, fl, h)                                    \
	{                                                                      \
		.name = n, .type = t, .off = FIELD(f), .min = lo, .max = hi,   \
		.def = d, .flags = fl, .help = h,                              \
	}
#define CONF_BYTES(...) CONF_NUM(MEMD_CONF_BYTES, __VA_ARGS__)
#define CONF_MS(...) CONF_NUM(MEMD_CONF_MS, __VA_ARGS__)
#define CONF_UINT(...) CONF_NUM(MEMD_CONF_UINT, __VA_ARGS__)
#define CONF_ENUM(n, f, d, fl, nm, h)                                          \
	{                                                                      \
		.name = n, .type = MEMD_CONF_ENUM, .off = FIELD(f), .def = d,  \
		.flags = fl, .names = nm, .help = h,                           \
	}
#define CONF_STR(n, f, lo, hi, d, parse, exp, h)                               \
	{                                                                      \
		.name = n, .type = MEMD_CONF_STRING, .off = FIELD(f),          \
		.min = lo, .max = hi, .def = d, .parse_str = parse,            \
		.expect = exp, .help = h,                                      \
	}
#define CONF_OPT_STR(n, f, parse, exp, h)                                      \
	CONF_STR(n, f, 0, MEMD_CONF_STR_MAX - 1, "", parse, exp, h)
#define CONF_OPT_PATH(n, f, h)                                                 \
	CONF_OPT_STR(n, f, memd_conf_parse_path,                               \
		     "nothing or an absolute path without blanks, ';' or '#'", \
		     h)
#define CONF_OPT_HOSTPORTS(n, f, h)                                            \
	CONF_OPT_STR(n, f, memd_conf_parse_hostport_list,                      \
		     "nothing, or HOST:PORT[,HOST:PORT...] (at most 8)", h)

const struct memd_conf_key memd_conf_keys[] = {
	CONF_STR("listen", listen, 1, MEMD_CONF_STR_MAX - 1, "127.0.0.1:7470",
		 memd_conf_parse_listen,
		 "HOST:PORT with a port from 0 to 65535, "
		 "an IPv6 address in brackets ([::1]:7470)",
		 "Address of the control server (TCP). Port 0 binds "
		 "a free port; --ready-file reports which."),
	CONF_OPT_STR("fabric_node", fabric_node, memd_conf_parse_node,
		     "a host name or IP address, or nothing",
		     "Address the libfabric endpoint binds to. Empty means "
		     "the host part of listen."),
	CONF_STR("provider", provider, 1, 63, "tcp", memd_conf_parse_provider,
		 "a libfabric provider name such as tcp, shm, "
		 "verbs;ofi_rxm, efa or cxi",
		 "libfabric provider of the data plane: tcp runs "
		 "anywhere, shm within one host, verbs;ofi_rxm, efa and "
		 "cxi on their fabrics. Overrides FI_PROVIDER."),
	CONF_BYTES("donate", donate_bytes, MEMD_MIB, MEMD_PIB, "1G", 0,
		   "Memory donated to the pool, a multiple of slab_size. "
		   "It is locked and prefaulted at start-up; memd refuses "
		   "to start if it cannot back all of it."),
	CONF_BYTES("slab_size", slab_bytes, MEMD_MIB, MEMD_GIB, "64M",
		   MEMD_CONF_POW2,
		   "Unit of lease, memory registration and revocation. "
		   "Clients sub-allocate inside the slabs they lease."),
	CONF_ENUM("hugepages", hugepages, "auto", 0, memd_conf_hugepages_names,
		  "Backing of the donation. auto: hugetlbfs pages when "
		  "enough are free, else anonymous memory advised for "
		  "transparent huge pages. yes: hugetlbfs pages or "
		  "refuse to start. no: anonymous memory only."),
	CONF_OPT_STR("numa_nodes", numa_nodes, memd_conf_parse_numa_nodes,
		     "nothing, all, or NUMA node numbers and ranges "
		     "such as 0,2-3 (at most 8 nodes)",
		     "NUMA nodes the donation is split over, evenly: each "
		     "gets its own arena bound to it and its own fabric "
		     "endpoint on the nearest NIC. Empty means one arena "
		     "and no NUMA binding."),
	CONF_MS("lease_ttl", lease_ttl_ms, 200, MEMD_MS_PER_H, "10s", 0,
		"Lifetime of a lease that is not renewed. Clients "
		"renew every lease_ttl/3 with the session heartbeat."),
	CONF_MS("lease_grace", lease_grace_ms, 0, MEMD_MS_PER_H, "2s", 0,
		"How long after a lease expires memd still waits "
		"before reclaiming its slab (late heartbeats, clock "
		"rate differences). Less than lease_ttl."),
	CONF_MS("quiesce", quiesce_ms, 0, 10 * MEMD_MS_PER_S, "100ms",
		MEMD_CONF_RELOAD,
		"Delay between revoking a lease (closing its memory "
		"registration) and zeroing its slab, so that RMA "
		"already in flight drains first."),
	CONF_UINT("progress_threads", progress_threads, 0, MEMD_NUMA_NODES_MAX,
		  "0", 0,
		  "Fabric endpoints, each with its own domain and "
		  "progress thread, per arena (per NUMA node); a node's "
		  "slabs take turns over them, so leases and KV slabs "
		  "spread over its cores. 0: one per 8 of the node's "
		  "CPUs, 1 to 4. All arenas together have at most 8."),
	CONF_UINT("busy_poll_us", busy_poll_us, 0, 100000, "0",
		  MEMD_CONF_RELOAD,
		  "Microseconds a fabric progress thread keeps polling "
		  "after a client's request woke it, before it sleeps "
		  "again: the next small request then costs no wake-up. "
		  "Each thread spends at most this much CPU per burst of "
		  "requests. 0: sleep whenever idle. Worth it only where "
		  "memd's progress threads have cores of their own."),
	CONF_ENUM("shm", shm, "auto", 0, memd_conf_shm_names,
		  "Clients on this host (same boot id, able to reach "
		  "memd's Unix socket) read and write their leased slabs "
		  "through the slab's memory file descriptor, with no "
		  "memd CPU on the data path; revocation replaces the "
		  "slab's file, so keys, revocation and zeroing hold as "
		  "on the fabric. auto: each slab is its own memfd "
		  "(not with hugetlbfs pages: then off). off: one "
		  "anonymous mapping, every client over the provider."),
	CONF_OPT_PATH("shm_dir", shm_dir,
		      "With shm = auto: a tmpfs directory whose unnamed "
		      "files back the slabs instead of memfds. Mounted with "
		      "huge=always (or within_size), the slabs get 2 MiB "
		      "pages whatever shmem_enabled says, and a same-host "
		      "client's pread of them runs at memcpy speed (4 KiB "
		      "memfd pages cost a kernel page lookup each). Such "
		      "files cannot be sealed, so clients get read-only "
		      "descriptors: same-host reads, writes over the "
		      "provider. Empty: memfds."),
	CONF_UINT("max_clients", max_clients, 1, 65536, "1024",
		  MEMD_CONF_RELOAD,
		  "Most concurrent control connections; memd closes "
		  "further ones at once. Lowering it closes none."),
	CONF_UINT("max_clients_per_host", max_clients_per_host, 1, 65536, "256",
		  MEMD_CONF_RELOAD,
		  "Most concurrent control connections from one peer "
		  "address, not counting those authenticated as @admin "
		  "or @donor. A new one past it displaces the oldest "
		  "connection of that address still in its handshake, "
		  "or is refused."),
	CONF_UINT("reserved_clients", reserved_clients, 0, 65536, "32",
		  MEMD_CONF_RELOAD,
		  "In a pool: connections of max_clients (at most half "
		  "of it) that tenants may never hold, kept for the "
		  "pool's operators (@admin) and donors (@donor). A "
		  "tenant that authenticates past max_clients - "
		  "reserved_clients is refused."),
	CONF_MS("handshake_timeout", handshake_timeout_ms, 100,
		10 * MEMD_MS_PER_M, "5s", MEMD_CONF_RELOAD,
		"Time a new control connection has to complete HELLO "
		"(and AUTH, in a pool); memd then closes it. While the "
		"connection table is full, a new connection displaces "
		"the oldest one still in its handshake."),
	CONF_MS("idle_timeout", idle_timeout_ms, 0, 24 * MEMD_MS_PER_H, "5m", 0,
		"memd closes a control connection from which no "
		"request has arrived for this long (clients send a "
		"heartbeat every lease_ttl/3, donors report every "
		"report_interval). 0: never. Longer than lease_ttl "
		"and report_interval."),
	CONF_UINT("max_sessions_per_tenant", max_sessions_per_tenant, 1,
		  1u << 20, "1024", MEMD_CONF_RELOAD,
		  "In a pool: most live sessions one tenant may hold on "
		  "this memd (a closed connection's session counts "
		  "until it expires). A tenant that authenticates past "
		  "it is answered EUSERS and closed; other tenants are "
		  "not affected."),
	CONF_UINT("max_leases_per_session", max_leases_per_session, 1, 1u << 24,
		  "65536", MEMD_CONF_RELOAD,
		  "Most slab leases one session may hold at once; a "
		  "LEASE or LEASE_GRANT that would take it past this is "
		  "refused whole with EDQUOT."),
	CONF_ENUM("log_level", log_level, "info", MEMD_CONF_RELOAD,
		  memd_conf_log_level_names,
		  "Least important message memd writes to stderr."),
	/* The cluster (docs/cluster.md). None is reloadable: a memd's role
	 * and identity in the pool are fixed for its lifetime. */
	CONF_OPT_STR("registry", registry, memd_conf_parse_registry,
		     "nothing, yes, etcd, or the registries' "
		     "HOST:PORT[,HOST:PORT...] (port 1 to 65535, at most "
		     "8)",
		     "Role of this memd. Empty: standalone, one memd is "
		     "the whole pool and nobody authenticates. yes: the "
		     "registry of a pool, which also donates, its state in "
		     "state_dir. etcd: one of the pool's registries, its "
		     "state in etcd (etcd_endpoints). HOST:PORT,...: a "
		     "donor of the registries there, tried in turn. All "
		     "but the first need cluster_secret_file."),
	CONF_OPT_HOSTPORTS(
		"etcd_endpoints", etcd_endpoints,
		"The etcd cluster's client addresses, tried in turn. "
		"Required when registry = etcd."),
	CONF_STR("etcd_prefix", etcd_prefix, 1, 128, "/tidepool",
		 memd_conf_parse_etcd_prefix,
		 "a key prefix starting with '/' and not ending with "
		 "it, without blanks, ';' or '#'",
		 "The etcd keys of this pool live under it (PREFIX/"
		 "state, PREFIX/leader): one etcd can hold several "
		 "pools."),
	CONF_MS("etcd_lease", etcd_lease_ms, 2 * MEMD_MS_PER_S,
		60 * MEMD_MS_PER_S, "3s", 0,
		"Lease of the leading registry in etcd (whole "
		"seconds): a dead leader is replaced about this long "
		"after it died; a leader that cannot renew it stops "
		"serving after three quarters of it."),
	CONF_OPT_PATH("etcd_cacert", etcd_cacert,
		      "CA certificate (PEM) of etcd's client TLS: set, memd "
		      "talks https to etcd_endpoints. Empty: plain http."),
	CONF_OPT_PATH("etcd_cert", etcd_cert,
		      "Client certificate (PEM) memd shows etcd; needs "
		      "etcd_key and etcd_cacert."),
	CONF_OPT_PATH("etcd_key", etcd_key, "Private key (PEM) of etcd_cert."),
	CONF_STR("etcd_user", etcd_user, 0, 63, "", memd_conf_parse_donor_name,
		 "nothing, or 1 to 63 letters, digits, '_', '.' and '-'",
		 "etcd user the registry authenticates as (etcd's "
		 "auth enabled); needs etcd_password_file. Empty: no "
		 "authentication."),
	CONF_OPT_PATH("etcd_password_file", etcd_password_file,
		      "File whose first line is etcd_user's password "
		      "(mode 0600 or stricter)."),
	CONF_OPT_HOSTPORTS("registry_peers", registry_peers,
			   "With registry = etcd: the other registries of the "
			   "pool. This memd's own donor part joins whichever "
			   "leads (itself first)."),
	CONF_OPT_PATH("cluster_secret_file", cluster_secret_file,
		      "File holding the pool's cluster secret, shared by "
		      "every memd of the pool and by its operators (mode "
		      "0600). Required when registry is set."),
	CONF_STR("state_dir", state_dir, 1, MEMD_CONF_STR_MAX - 1,
		 "/var/lib/tidepool", memd_conf_parse_path,
		 "an absolute path without blanks, ';' or '#'",
		 "Directory of the registry's durable state "
		 "(registry.json: tenants, quotas, donor ids). Used "
		 "when registry = yes."),
	CONF_OPT_STR("advertise", advertise, memd_conf_parse_advertise,
		     "nothing, or HOST:PORT with a port from 1 to 65535 "
		     "and a host that is not a wildcard address",
		     "Control address a donor gives the registry, which "
		     "hands it to clients. Empty: listen, with a wildcard "
		     "host replaced by the address the donor reaches the "
		     "registry from."),
	CONF_STR("donor_name", donor_name, 0, 63, "",
		 memd_conf_parse_donor_name,
		 "nothing, or 1 to 63 letters, digits, '_', '.' "
		 "and '-'",
		 "Name of this donor in the pool; the registry gives "
		 "each name a durable donor id. Empty: the host name "
		 "and the control port (host-7470)."),
	CONF_MS("report_interval", report_interval_ms, 100, 60 * MEMD_MS_PER_S,
		"1s", 0,
		"Longest time between two reports of a donor to the "
		"registry (free slabs, usage per tenant). A donor "
		"also reports at once after a grant or release."),
	CONF_MS("pass_ttl", pass_ttl_ms, 10 * MEMD_MS_PER_S, 24 * MEMD_MS_PER_H,
		"10m", 0,
		"Lifetime of the donor pass a registry gives an "
		"authenticated tenant session, with which it opens "
		"sessions on donors."),
	CONF_OPT_STR("metrics_listen", metrics_listen,
		     memd_conf_parse_metrics_listen,
		     "nothing, or HOST:PORT with a port from 0 to 65535",
		     "Address of the HTTP server for Prometheus metrics "
		     "(GET /metrics). Empty: none. Port 0 binds a free "
		     "port; --ready-file reports which."),
	/* The KV tier (docs/kv.md). */
	CONF_UINT("kv_share", kv_share, 0, 100, "50", MEMD_CONF_RELOAD,
		  "Percent of the donation one tenant's KV store may "
		  "hold on this memd (in a cluster, also no more than "
		  "the registry's allowance from the tenant's quota); "
		  "past it the tenant's blocks are evicted. 0 turns the "
		  "KV tier off."),
	CONF_MS("kv_read_lease", kv_lease_ms, 100, 60 * MEMD_MS_PER_S, "2s", 0,
		"How long a KV lookup keeps the blocks it returns from "
		"eviction and reuse while the client reads them."),
	CONF_MS("kv_reserve_ttl", kv_reserve_ms, 100, 10 * MEMD_MS_PER_M, "10s",
		0,
		"How long a KV put may take between reserve and "
		"commit; an uncommitted reservation is then dropped "
		"and its blocks freed."),
	CONF_UINT("kv_max_reserved", kv_max_reserved, 1, 1u << 24, "65536", 0,
		  "Most KV reservations (puts reserved, not yet "
		  "committed or expired) one tenant may have pending on "
		  "this memd; a RESERVE past it gets the per-key status "
		  "EDQUOT."),
	CONF_OPT_PATH("kv_spill_dir", kv_spill_dir,
		      "Directory where evicted KV blocks are written, and "
		      "read back on demand and after a restart. Empty: "
		      "evicted blocks are gone. Needs kv_spill_size."),
	CONF_BYTES("kv_spill_size", kv_spill_bytes, 0, MEMD_PIB, "0", 0,
		   "Most bytes of spill files in kv_spill_dir; the oldest "
		   "are deleted beyond it. Required with kv_spill_dir."),
	/* Capacity planning (docs/capacity.md). */
	CONF_UINT("kv_mrc_samples", kv_mrc_samples, 0, 1u << 20, "8192", 0,
		  "Keys each tenant's miss-ratio curve samples at most "
		  "(SHARDS; 72 bytes each plus 25 KiB per tenant); 16 "
		  "or more, or 0 for no curves. poolctl tenant report "
		  "and quota suggest read the curve."),
	CONF_UINT("kv_prefill_tokens_per_s", kv_prefill_tokens_per_s, 1,
		  1000000000, "10000", MEMD_CONF_RELOAD,
		  "The cost model of what the KV tier saves: tokens per "
		  "second a GPU prefills (recomputes). A hit of B bytes "
		  "saves B / kv_bytes_per_token / this many seconds."),
	{
		.name = "kv_bytes_per_token",
		.type = MEMD_CONF_BYTES,
		.off = FIELD(kv_bytes_per_token),
		.min = 1,
		.max = 1ull << 30,
		.def = "128K",
		.flags = MEMD_CONF_RELOAD,
		.help = "The cost model: KV bytes per token of the tenants' "
			"model (Llama-3-8B: 128K).",
	},
};

#undef CONF_OPT_HOSTPORTS
#undef CONF_OPT_PATH
#undef CONF_OPT_STR
#undef CONF_STR
#undef CONF_ENUM
#undef CONF_UINT
#undef CONF_MS
#undef CONF_BYTES
#undef CONF_NUM
#undef FIELD

#define MEMD_CONF_NKEYS ARRAY_SIZE(memd_conf_keys)
_Static_assert(MEMD_CONF_NKEYS <= MEMD_CONF_KEYS_MAX,
	       "struct memd_conf_src has no room for every key");

/* Enum fields are accessed as int. */
_Static_assert(sizeof(enum memd_shm) == sizeof(int),
	       "shm is stored through an int pointer");
_Static_assert(sizeof(enum memd_hugepages) == sizeof(int),
	       "hugepages is stored through an int pointer");

const size_t memd_conf_nkeys = MEMD_CONF_NKEYS;

int memd_parse_log_level(const char *s, int *out)
{
	const struct memd_conf_name *n;

	for (n = memd_conf_log_level_names; s && n->name; n++) {
		if (!strcmp(s, n->name)) {
			*out = n->value;
			return 0;
		}
	}
	return -EINVAL;
}

const char *memd_log_level_name(int level)
{
	/* All syslog levels, so a caller may name LOG_CRIT too. */
	static const char *const names[] = {
		[LOG_EMERG] = "emerg",	   [LOG_ALERT] = "alert",
		[LOG_CRIT] = "crit",	   [LOG_ERR] = "err",
		[LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
		[LOG_INFO] = "info",	   [LOG_DEBUG] = "debug",
	};

	if (level < 0 || (size_t)level >= ARRAY_SIZE(names))
		return "unknown";
	return names[level];
}

const struct memd_conf_key *memd_conf_find(const char *name)
{
	size_t i;

	for (i = 0; i < MEMD_CONF_NKEYS; i++)
		if (!strcmp(memd_conf_keys[i].name, name))
			return &memd_conf_keys[i];
	return NULL;
}

uint64_t memd_conf_get_num(const struct memd_config *c,
			   const struct memd_conf_key *k)
{
	const char *f = (const char *)c + k->off;

	switch (k->type) {
	case MEMD_CONF_BYTES:
		return *(const uint64_t *)(const void *)f;
	case MEMD_CONF_MS:
	case MEMD_CONF_UINT:
		return *(const uint32_t *)(const void *)f;
	case MEMD_CONF_ENUM:
		return (uint64_t)(int64_t) * (const int *)(const void *)f;
	case MEMD_CONF_STRING:
		break;
	}
	assert(0 && "not a number key");
	return 0;
}

void memd_conf_set_num(struct memd_config *c, const struct memd_conf_key *k,
		       uint64_t v)
{
	char *f = (char *)c + k->off;

	switch (k->type) {
	case MEMD_CONF_BYTES:
		*(uint64_t *)(void *)f = v;
		return;
	case MEMD_CONF_MS:
	case MEMD_CONF_UINT:
		*(uint32_t *)(void *)f = (uint32_t)v;
		return;
	case MEMD_CONF_ENUM:
		*(int *)(void *)f = (int)(int64_t)v;
		return;
	case MEMD_CONF_STRING:
		break;
	}
	assert(0 && "not a number key");
}

/*
 * Parses value for key k into c, or leaves c alone and writes
 * "problem; expected FORMAT" to what. 0, -EINVAL or -ERANGE.
 */
int memd_conf_assign(struct memd_config *c, const struct memd_conf_key *k,
		     const char *value, char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	char tmp[MEMD_CONF_STR_MAX];
	size_t len;
	uint64_t v;
	int rc;

	memd_conf_quote(value, shown, sizeof(shown));
	if (k->type == MEMD_CONF_STRING) {
		len = strlen(value);
		if (len > k->max) {
			memd_errf(what, whatlen,
				  "'%s' is longer than %" PRIu64 " characters",
				  shown, k->max);
			rc = -EINVAL;
		} else if (len < k->min) {
			memd_errf(what, whatlen, "must not be empty");
			rc = -EINVAL;
		} else if (!len) {
			/* an optional string's "nothing": no parser sees it */
			tmp[0] = '\0';
			rc = 0;
		} else {
			rc = k->parse_str(value, tmp, sizeof(tmp), what,
					  whatlen);
		}
		if (!rc)
			memcpy((char *)c + k->off, tmp, strlen(tmp) + 1);
	} else {
		rc = memd_conf_parse_num(k, value, shown, &v, what, whatlen);
		if (!rc)
			rc = memd_conf_check_num(k, v, shown, what, whatlen);
		if (!rc)
			memd_conf_set_num(c, k, v);
	}
	if (rc)
		memd_conf_append_expect(k, what, whatlen);
	return rc;
}

enum memd_mode memd_config_mode(const struct memd_config *c)
{
	if (!c->registry[0])
		return MEMD_MODE_STANDALONE;
	if (!strcmp(c->registry, "yes") || !strcmp(c->registry, "etcd"))
		return MEMD_MODE_REGISTRY;
	return MEMD_MODE_DONOR;
}

bool memd_config_registry_is_etcd(const struct memd_config *c)
{
	return !strcmp(c->registry, "etcd");
}

const char *memd_mode_name(enum memd_mode mode)
{
	switch (mode) {
	case MEMD_MODE_STANDALONE:
		return "standalone";
	case MEMD_MODE_REGISTRY:
		return "registry";
	case MEMD_MODE_DONOR:
		return "donor";
	}
	return "unknown";
}

int memd_config_numa_nodes(const struct memd_config *c, int *nodes)
{
	bool all;
	ssize_t n;

	if (!c->numa_nodes[0])
		return 0;
	n = place_parse_nodelist(c->numa_nodes, &all, nodes,
				 MEMD_NUMA_NODES_MAX);
	if (all)
		return -1;
	/* validated: n is 1 .. MEMD_NUMA_NODES_MAX */
	assert(n > 0);
	return (int)n;
}

void memd_config_defaults(struct memd_config *c)
{
	char what[MEMD_CONF_WHAT_MAX];
	size_t i;
	int rc;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < MEMD_CONF_NKEYS; i++) {
		rc = memd_conf_assign(c, &memd_conf_keys[i],
				      memd_conf_keys[i].def, what,
				      sizeof(what));
		/* a default that fails its own row is a bug in the table */
		assert(rc == 0);
		/* and so is a bound its field cannot hold */
		assert(memd_conf_keys[i].type == MEMD_CONF_BYTES ||
		       memd_conf_keys[i].type == MEMD_CONF_STRING ||
		       memd_conf_keys[i].max <= UINT32_MAX);
		(void)rc;
	}
}

int memd_config_set(struct memd_config *c, const char *key, const char *value,
		    char *err, size_t errlen)
{
	return memd_config_set_src(c, NULL, key, value, err, errlen);
}

int memd_config_set_src(struct memd_config *c, struct memd_conf_src *src,
			const char *key, const char *value, char *err,
			size_t errlen)
{
	char name[64], shown[MEMD_CONF_QUOTE_MAX], what[MEMD_CONF_WHAT_MAX];
	char known[512];
	const struct memd_conf_key *k;
	size_t i, used = 0;
	int rc;

	if (!key)
		key = "";
	/* flags are spelled --lease-ttl, so lease-ttl names lease_ttl */
	for (i = 0; key[i] && i < sizeof(name) - 1; i++)
		name[i] = key[i] == '-' ? '_' : key[i];
	name[i] = '\0';
	k = key[i] ? NULL : memd_conf_find(name);
	if (!k) {
		for (i = 0; i < MEMD_CONF_NKEYS && used < sizeof(known); i++)
			used += (size_t)snprintf(
				known + used, sizeof(known) - used, "%s%s",
				i ? ", " : "", memd_conf_keys[i].name);
		memd_errf(err, errlen, "key '%s': unknown key; keys are %s",
			  memd_conf_quote(key, shown, sizeof(shown)), known);
		return -ENOENT;
	}
	if (!value) {
		memd_errf(err, errlen, "key '%s': no value", k->name);
		return -EINVAL;
	}
	rc = memd_conf_assign(c, k, value, what, sizeof(what));
	if (rc) {
		memd_errf(err, errlen, "key '%s': %s", k->name, what);
		return -EINVAL;
	}
	if (src)
		src->line[k - memd_conf_keys] = MEMD_CONF_SRC_FLAG;
	return 0;
}

int memd_config_reload(struct memd_config *cur, const struct memd_config *next,
		       void (*note)(void *arg, const char *key,
				    const char *old_value,
				    const char *new_value, bool applied),
		       void *arg)
{
	char oldv[MEMD_CONF_STR_MAX], newv[MEMD_CONF_STR_MAX];
	const struct memd_conf_key *k;
	bool applied;
	int n = 0;
	size_t i;

	for (i = 0; i < MEMD_CONF_NKEYS; i++) {
		k = &memd_conf_keys[i];
		memd_conf_format(cur, k, oldv, sizeof(oldv));
		memd_conf_format(next, k, newv, sizeof(newv));
		if (!strcmp(oldv, newv))
			continue;
		applied = k->flags & MEMD_CONF_RELOAD;
		if (applied) {
			if (k->type == MEMD_CONF_STRING)
				memcpy((char *)cur + k->off, newv,
				       strlen(newv) + 1);
			else
				memd_conf_set_num(cur, k,
						  memd_conf_get_num(next, k));
			n++;
		}
		if (note)
			note(arg, k->name, oldv, newv, applied);
	}
	return n;
}
