// SPDX-License-Identifier: MIT
/*
 * memd/config.c - the memd.conf key table, its value parsers and the
 * libinih front end.
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
 * /dev/zero cannot make us allocate without bound.
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
#include "memd/config.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>
#include <syslog.h>

#include <ini.h>

#include "fabric/hostport.h"
#include "memd/log.h"
#include "numa/place.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MEMD_KIB (UINT64_C(1) << 10)
#define MEMD_MIB (UINT64_C(1) << 20)
#define MEMD_GIB (UINT64_C(1) << 30)
#define MEMD_PIB (UINT64_C(1) << 50)

#define MEMD_MS_PER_S 1000u
#define MEMD_MS_PER_M (60u * MEMD_MS_PER_S)
#define MEMD_MS_PER_H (60u * MEMD_MS_PER_M)

/* Longest physical line we read before giving up on it; libinih's own
 * buffer (200 bytes on common builds) is the tighter limit. */
#define MEMD_CONF_LINE_MAX 1024
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

struct memd_conf_key {
	const char *name;
	enum memd_conf_type type;
	size_t off;	   /* of the field in struct memd_config */
	uint64_t min, max; /* numbers; for strings, length bounds */
	const char *def;   /* default, in memd.conf syntax */
	unsigned int flags;
	const struct memd_conf_name *names; /* MEMD_CONF_ENUM; NULL-ended */
	/*
	 * MEMD_CONF_STRING: checks in and writes its canonical form to out
	 * (outlen >= MEMD_CONF_STR_MAX), or describes the problem in what.
	 * Never called with "": that is refused (min > 0) or stored as is.
	 */
	int (*parse_str)(const char *in, char *out, size_t outlen, char *what,
			 size_t whatlen);
	const char *expect; /* MEMD_CONF_STRING: the accepted format */
	const char *help;
};

static int memd_conf_parse_listen(const char *in, char *out, size_t outlen,
				  char *what, size_t whatlen);
static int memd_conf_parse_node(const char *in, char *out, size_t outlen,
				char *what, size_t whatlen);
static int memd_conf_parse_provider(const char *in, char *out, size_t outlen,
				    char *what, size_t whatlen);
static int memd_conf_parse_numa_nodes(const char *in, char *out, size_t outlen,
				      char *what, size_t whatlen);
static int memd_conf_parse_hostport_list(const char *in, char *out,
					 size_t outlen, char *what,
					 size_t whatlen);
static int memd_conf_parse_registry(const char *in, char *out, size_t outlen,
				    char *what, size_t whatlen);
static int memd_conf_parse_etcd_prefix(const char *in, char *out, size_t outlen,
				       char *what, size_t whatlen);
static int memd_conf_parse_path(const char *in, char *out, size_t outlen,
				char *what, size_t whatlen);
static int memd_conf_parse_advertise(const char *in, char *out, size_t outlen,
				     char *what, size_t whatlen);
static int memd_conf_parse_donor_name(const char *in, char *out, size_t outlen,
				      char *what, size_t whatlen);
static int memd_conf_parse_metrics_listen(const char *in, char *out,
					  size_t outlen, char *what,
					  size_t whatlen);

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

static const struct memd_conf_key memd_conf_keys[] = {
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

/*
 * Copies s for an error message: bounded, and without control bytes that
 * could rewrite the operator's terminal or split a log line.
 */
static const char *memd_conf_quote(const char *s, char *buf, size_t len)
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

static bool memd_conf_is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static bool memd_conf_is_alnum(char ch)
{
	return memd_conf_is_digit(ch) || (ch >= 'a' && ch <= 'z') ||
	       (ch >= 'A' && ch <= 'Z');
}

static bool memd_conf_is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' ||
	       ch == '\v';
}

/*
 * Reads the decimal digits at *sp. Returns -EINVAL when there are none,
 * else 0 with *overflow set if they do not fit in 64 bits; *sp moves past
 * them either way, so a caller can tell junk from overflow.
 */
static int memd_conf_digits(const char **sp, uint64_t *out, bool *overflow)
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

/* Largest binary unit that divides v exactly: 65536 -> "64K". */
static void memd_conf_format_bytes(uint64_t v, char *buf, size_t len)
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
static void memd_conf_format_ms(uint64_t v, char *buf, size_t len)
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

static void memd_conf_format_num(const struct memd_conf_key *k, uint64_t v,
				 char *buf, size_t len)
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
static void memd_conf_expect(const struct memd_conf_key *k, char *buf,
			     size_t len)
{
	char lo[32], hi[32];
	const struct memd_conf_name *n;
	size_t used;

	switch (k->type) {
	case MEMD_CONF_STRING:
		snprintf(buf, len, "%s", k->expect);
		return;
	case MEMD_CONF_BYTES:
		memd_conf_format_bytes(k->min, lo, sizeof(lo));
		memd_conf_format_bytes(k->max, hi, sizeof(hi));
		snprintf(buf, len,
			 "a size from %s to %s%s (bytes, or a K, M, G, T, P "
			 "or E suffix such as %s)",
			 lo, hi,
			 k->flags & MEMD_CONF_POW2 ? ", a power of two" : "",
			 k->def);
		return;
	case MEMD_CONF_MS:
		memd_conf_format_ms(k->min, lo, sizeof(lo));
		memd_conf_format_ms(k->max, hi, sizeof(hi));
		snprintf(buf, len,
			 "a duration from %s to %s (500ms, 10s, 2m, 1h; "
			 "a bare number is milliseconds)",
			 lo, hi);
		return;
	case MEMD_CONF_UINT:
		snprintf(buf, len,
			 "a whole number from %" PRIu64 " to %" PRIu64, k->min,
			 k->max);
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
static void memd_conf_append_expect(const struct memd_conf_key *k, char *what,
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

static const struct memd_conf_key *memd_conf_find(const char *name)
{
	size_t i;

	for (i = 0; i < MEMD_CONF_NKEYS; i++)
		if (!strcmp(memd_conf_keys[i].name, name))
			return &memd_conf_keys[i];
	return NULL;
}

static uint64_t memd_conf_get_num(const struct memd_config *c,
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

static void memd_conf_set_num(struct memd_config *c,
			      const struct memd_conf_key *k, uint64_t v)
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
 * Bounds of a number key, shared by parsing and validation. shown is the
 * value as the user wrote it (or as we would print it).
 */
static int memd_conf_check_num(const struct memd_conf_key *k, uint64_t v,
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

static int memd_conf_parse_num(const struct memd_conf_key *k, const char *value,
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

/*
 * Parses value for key k into c, or leaves c alone and writes
 * "problem; expected FORMAT" to what. 0, -EINVAL or -ERANGE.
 */
static int memd_conf_assign(struct memd_config *c,
			    const struct memd_conf_key *k, const char *value,
			    char *what, size_t whatlen)
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

/* "a.b-c_d": labels of letters, digits, '-' and '_', no empty label. */
static bool memd_conf_is_hostname(const char *s)
{
	size_t label = 0, n = 0;

	for (; *s; s++, n++) {
		if (*s == '.') {
			if (!label)
				return false;
			label = 0;
		} else if (memd_conf_is_alnum(*s) || *s == '-' || *s == '_') {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return label && n <= 253;
}

/* "fe80::1" or "fe80::1%eth0" (a zone, for link-local addresses). */
static bool memd_conf_is_ipv6(const char *s, size_t len)
{
	char addr[INET6_ADDRSTRLEN + 1];
	struct in6_addr a6;
	const char *zone = memchr(s, '%', len);
	size_t alen = zone ? (size_t)(zone - s) : len;

	if (alen >= sizeof(addr))
		return false;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	if (inet_pton(AF_INET6, addr, &a6) != 1)
		return false;
	if (zone) {
		const char *z;

		/* IF_NAMESIZE is 16 with the NUL */
		if (len - alen < 2 || len - alen - 1 > 15)
			return false;
		for (z = zone + 1; z < s + len; z++)
			if (!memd_conf_is_alnum(*z) && !strchr("-_.", *z))
				return false;
	}
	return true;
}

/*
 * A host without a port: a name, an IPv4 address or an IPv6 address (in
 * brackets or not). Writes it without brackets to out.
 */
static int memd_conf_check_host(const char *s, size_t len, char *out,
				size_t outlen, char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX], host[MEMD_CONF_STR_MAX];
	struct in_addr a4;
	bool bracket = len >= 2 && s[0] == '[' && s[len - 1] == ']';
	size_t i;

	if (bracket) {
		s++;
		len -= 2;
	}
	if (len >= sizeof(host) || len >= outlen) {
		memd_errf(what, whatlen, "host is too long");
		return -EINVAL;
	}
	memcpy(host, s, len);
	host[len] = '\0';
	memd_conf_quote(host, shown, sizeof(shown));
	if (!len) {
		memd_errf(what, whatlen, "the host is missing");
		return -EINVAL;
	}
	if (bracket || memchr(host, ':', len)) {
		const char *last = strrchr(host, ':');

		/* "node:7470" where only a host belongs */
		if (!bracket && last == strchr(host, ':') && last[1] &&
		    strspn(last + 1, "0123456789") == strlen(last + 1)) {
			memd_errf(what, whatlen,
				  "'%s' has a port; give the host only", shown);
			return -EINVAL;
		}
		if (!memd_conf_is_ipv6(host, len)) {
			memd_errf(what, whatlen, "'%s' is not an IPv6 address",
				  shown);
			return -EINVAL;
		}
	} else {
		for (i = 0; i < len; i++)
			if (!memd_conf_is_digit(host[i]) && host[i] != '.')
				break;
		/* all digits and dots: an IPv4 address, not a name */
		if (i == len ? inet_pton(AF_INET, host, &a4) != 1
			     : !memd_conf_is_hostname(host)) {
			memd_errf(what, whatlen,
				  "'%s' is not a host name or address", shown);
			return -EINVAL;
		}
	}
	memcpy(out, host, len + 1);
	return 0;
}

/*
 * HOST:PORT. The host must be in brackets when it has colons of its own,
 * so that "::1:7470" is never guessed at. Pure: nothing is resolved.
 */
static int memd_conf_parse_listen(const char *in, char *out, size_t outlen,
				  char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX], host[MEMD_CONF_STR_MAX];
	const char *colon = strrchr(in, ':'), *p;
	uint64_t port = 0;
	size_t hlen;

	memd_conf_quote(in, shown, sizeof(shown));
	if (!colon) {
		memd_errf(what, whatlen, "'%s' has no port", shown);
		return -EINVAL;
	}
	hlen = (size_t)(colon - in);
	if (in[0] != '[' && memchr(in, ':', hlen)) {
		memd_errf(what, whatlen,
			  "'%s': write an IPv6 address in brackets", shown);
		return -EINVAL;
	}
	if (in[0] == '[' && (hlen < 2 || in[hlen - 1] != ']')) {
		memd_errf(what, whatlen, "'%s' has no ']' before the port",
			  shown);
		return -EINVAL;
	}
	for (p = colon + 1; memd_conf_is_digit(*p) && p - colon <= 5; p++)
		port = port * 10 + (uint64_t)(*p - '0');
	if (p == colon + 1 || *p || port > 65535) {
		memd_errf(what, whatlen, "'%s' has a bad port", shown);
		return -EINVAL;
	}
	if (memd_conf_check_host(in, hlen, host, sizeof(host), what, whatlen))
		return -EINVAL;
	snprintf(out, outlen, "%s", in);
	return 0;
}

static int memd_conf_parse_node(const char *in, char *out, size_t outlen,
				char *what, size_t whatlen)
{
	return memd_conf_check_host(in, strlen(in), out, outlen, what, whatlen);
}

/*
 * A name of letters, digits and the characters of extra ("tcp",
 * "verbs;ofi_rxm", "donor-1.a"), else "'IN' is not a NOUN".
 */
static int memd_conf_parse_word(const char *in, const char *extra,
				const char *noun, char *out, size_t outlen,
				char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	const char *p;

	for (p = in; *p; p++) {
		if (!memd_conf_is_alnum(*p) && !strchr(extra, *p)) {
			memd_errf(what, whatlen, "'%s' is not a %s",
				  memd_conf_quote(in, shown, sizeof(shown)),
				  noun);
			return -EINVAL;
		}
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

/* libfabric names are letters, digits and _-; ("verbs;ofi_rxm"). */
static int memd_conf_parse_provider(const char *in, char *out, size_t outlen,
				    char *what, size_t whatlen)
{
	return memd_conf_parse_word(in, "_-;", "provider name", out, outlen,
				    what, whatlen);
}

/*
 * "all", or a node list in place_parse_nodelist()'s grammar (blanks
 * around items allowed). Written back canonical (increasing, no blanks,
 * runs of three or more as a range: "2,0,1" is "0-2"), so that
 * --print-config writes a value without blanks that loads back equal.
 * Which nodes exist is the host's business, checked at start-up.
 */
static int memd_conf_parse_numa_nodes(const char *in, char *out, size_t outlen,
				      char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	int nodes[PLACE_NODE_MAX];
	size_t used = 0;
	bool all;
	ssize_t n, i, j;

	memd_conf_quote(in, shown, sizeof(shown));
	n = place_parse_nodelist(in, &all, nodes, ARRAY_SIZE(nodes));
	if (n == -ERANGE) {
		memd_errf(what, whatlen, "'%s' names a node above %d", shown,
			  PLACE_NODE_MAX - 1);
		return -EINVAL;
	}
	if (n < 0) {
		memd_errf(what, whatlen, "'%s' is not a node list", shown);
		return -EINVAL;
	}
	if (all) {
		snprintf(out, outlen, "all");
		return 0;
	}
	if (n > MEMD_NUMA_NODES_MAX) {
		memd_errf(what, whatlen,
			  "'%s' names %zd nodes; memd serves at most %d "
			  "(one fabric endpoint each)",
			  shown, n, MEMD_NUMA_NODES_MAX);
		return -EINVAL;
	}
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && nodes[j] == nodes[j - 1] + 1; j++)
			;
		if (j - i >= 3)
			used += (size_t)snprintf(out + used, outlen - used,
						 "%s%d-%d", i ? "," : "",
						 nodes[i], nodes[j - 1]);
		else
			for (ssize_t k = i; k < j; k++)
				used += (size_t)snprintf(
					out + used, outlen - used, "%s%d",
					k ? "," : "", nodes[k]);
	}
	return 0;
}

/* An address the host of HOST:PORT names no one host by. */
static bool memd_conf_is_wildcard(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY);
	return inet_pton(AF_INET6, host, &a6) == 1 &&
	       IN6_IS_ADDR_UNSPECIFIED(&a6);
}

/*
 * HOST:PORT for the cluster keys, split by wire_split_hostport() (what
 * the code that connects will use), with the host checked like listen's
 * and the port made of digits only. Writes it unchanged to out.
 */
static int memd_conf_hostport(const char *in, char *out, size_t outlen,
			      bool port0_ok, bool wildcard_ok, char *what,
			      size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX], host[MEMD_CONF_STR_MAX];
	char canon[MEMD_CONF_STR_MAX];
	const char *digits = strrchr(in, ':');
	uint16_t port;

	memd_conf_quote(in, shown, sizeof(shown));
	if (wire_split_hostport(in, host, sizeof(host), &port) || !digits ||
	    strspn(digits + 1, "0123456789") != strlen(digits + 1)) {
		memd_errf(what, whatlen,
			  "'%s' is not HOST:PORT (an IPv6 address goes in "
			  "brackets)",
			  shown);
		return -EINVAL;
	}
	if (memd_conf_check_host(host, strlen(host), canon, sizeof(canon), what,
				 whatlen))
		return -EINVAL;
	if (!port && !port0_ok) {
		memd_errf(what, whatlen, "'%s': port 0 names no port", shown);
		return -EINVAL;
	}
	if (!wildcard_ok && memd_conf_is_wildcard(canon)) {
		memd_errf(what, whatlen,
			  "'%s' is a wildcard address; give one that "
			  "others can reach",
			  shown);
		return -EINVAL;
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

/* HOST:PORT[,HOST:PORT...], each as memd_conf_hostport wants it (no
 * wildcard, no port 0), at most 8. */
static int memd_conf_parse_hostport_list(const char *in, char *out,
					 size_t outlen, char *what,
					 size_t whatlen)
{
	char one[MEMD_CONF_STR_MAX], canon[MEMD_CONF_STR_MAX];
	const char *p = in;
	int n = 0;

	for (;;) {
		size_t len = strcspn(p, ",");

		if (++n > 8) {
			memd_errf(what, whatlen,
				  "more than 8 addresses in the list");
			return -EINVAL;
		}
		snprintf(one, sizeof(one), "%.*s", (int)len, p);
		if (memd_conf_hostport(one, canon, sizeof(canon), false, false,
				       what, whatlen))
			return -EINVAL;
		p += len;
		if (!*p)
			break;
		p++;
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

static int memd_conf_parse_registry(const char *in, char *out, size_t outlen,
				    char *what, size_t whatlen)
{
	if (!*in || !strcmp(in, "yes") || !strcmp(in, "etcd")) {
		snprintf(out, outlen, "%s", in);
		return 0;
	}
	return memd_conf_parse_hostport_list(in, out, outlen, what, whatlen);
}

static int memd_conf_parse_advertise(const char *in, char *out, size_t outlen,
				     char *what, size_t whatlen)
{
	return memd_conf_hostport(in, out, outlen, false, false, what, whatlen);
}

static int memd_conf_parse_metrics_listen(const char *in, char *out,
					  size_t outlen, char *what,
					  size_t whatlen)
{
	return memd_conf_hostport(in, out, outlen, true, true, what, whatlen);
}

/*
 * An absolute path; blanks and comment characters are refused so that
 * --print-config writes a value that loads back equal.
 */
static int memd_conf_parse_path(const char *in, char *out, size_t outlen,
				char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];
	const char *p;

	memd_conf_quote(in, shown, sizeof(shown));
	if (*in && *in != '/') {
		memd_errf(what, whatlen, "'%s' is not an absolute path", shown);
		return -EINVAL;
	}
	for (p = in; *p; p++) {
		unsigned char ch = (unsigned char)*p;

		if (ch <= ' ' || ch == 0x7f || ch == ';' || ch == '#') {
			memd_errf(what, whatlen,
				  "'%s' holds a blank, control character, "
				  "';' or '#'",
				  shown);
			return -EINVAL;
		}
	}
	snprintf(out, outlen, "%s", in);
	return 0;
}

/* "/tidepool": PREFIX/state and PREFIX/leader are its keys. */
static int memd_conf_parse_etcd_prefix(const char *in, char *out, size_t outlen,
				       char *what, size_t whatlen)
{
	char shown[MEMD_CONF_QUOTE_MAX];

	if (memd_conf_parse_path(in, out, outlen, what, whatlen))
		return -EINVAL;
	if (!in[0] || in[strlen(in) - 1] == '/') {
		memd_errf(what, whatlen,
			  "'%s' is not a prefix like /tidepool (it must "
			  "not end with '/')",
			  memd_conf_quote(in, shown, sizeof(shown)));
		return -EINVAL;
	}
	return 0;
}

/* The same alphabet as tenant names (docs/cluster.md). */
static int memd_conf_parse_donor_name(const char *in, char *out, size_t outlen,
				      char *what, size_t whatlen)
{
	return memd_conf_parse_word(in, "_.-", "donor name", out, outlen, what,
				    whatlen);
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

/*
 * "FILE:LINE: " for the line that set key a (or, when a kept its
 * default, key b: the other side of the rule), "command line: " for a
 * flag, "FILE: " when neither came from a line, "" without a source.
 */
static const char *memd_conf_where(const struct memd_conf_src *src,
				   const char *a, const char *b, char *buf,
				   size_t len)
{
	int line;

	buf[0] = '\0';
	if (!src)
		return buf;
	line = src->line[memd_conf_find(a) - memd_conf_keys];
	if (line == MEMD_CONF_SRC_DEFAULT && b)
		line = src->line[memd_conf_find(b) - memd_conf_keys];
	if (line == MEMD_CONF_SRC_FLAG)
		snprintf(buf, len, "command line: ");
	else if (src->path && line > 0)
		snprintf(buf, len, "%s:%d: ", src->path, line);
	else if (src->path)
		snprintf(buf, len, "%s: ", src->path);
	return buf;
}

int memd_config_validate(const struct memd_config *c, char *err, size_t errlen)
{
	return memd_config_validate_src(c, NULL, err, errlen);
}

int memd_config_validate_src(const struct memd_config *c,
			     const struct memd_conf_src *src, char *err,
			     size_t errlen)
{
	char what[MEMD_CONF_WHAT_MAX], shown[64], a[32], b[32];
	char at[MEMD_CONF_STR_MAX + 32];
	struct memd_config scratch; /* strings are re-parsed into it */
	const struct memd_conf_key *k;
	int nodes[MEMD_NUMA_NODES_MAX], nnodes;
	size_t i;
	uint64_t v;
	int rc;

	/* Each key on its own: a struct may have been filled by code. */
	for (i = 0; i < MEMD_CONF_NKEYS; i++) {
		k = &memd_conf_keys[i];
		if (k->type == MEMD_CONF_STRING) {
			const char *s = (const char *)c + k->off;

			if (!memchr(s, '\0', MEMD_CONF_STR_MAX)) {
				memd_errf(err, errlen,
					  "%skey '%s': not terminated",
					  memd_conf_where(src, k->name, NULL,
							  at, sizeof(at)),
					  k->name);
				return -EINVAL;
			}
			rc = memd_conf_assign(&scratch, k, s, what,
					      sizeof(what));
		} else {
			v = memd_conf_get_num(c, k);
			memd_conf_format_num(k, v, shown, sizeof(shown));
			rc = memd_conf_check_num(k, v, shown, what,
						 sizeof(what));
			if (rc)
				memd_conf_append_expect(k, what, sizeof(what));
		}
		if (rc) {
			memd_errf(err, errlen, "%skey '%s': %s",
				  memd_conf_where(src, k->name, NULL, at,
						  sizeof(at)),
				  k->name, what);
			return -EINVAL;
		}
	}

	memd_conf_format_bytes(c->donate_bytes, a, sizeof(a));
	memd_conf_format_bytes(c->slab_bytes, b, sizeof(b));
	if (c->donate_bytes < c->slab_bytes) {
		memd_errf(err, errlen,
			  "%skey 'donate': %s is less than one slab "
			  "(slab_size = %s)",
			  memd_conf_where(src, "donate", "slab_size", at,
					  sizeof(at)),
			  a, b);
		return -EINVAL;
	}
	if (c->donate_bytes % c->slab_bytes) {
		memd_errf(err, errlen,
			  "%skey 'donate': %s is not a multiple of "
			  "slab_size = %s",
			  memd_conf_where(src, "donate", "slab_size", at,
					  sizeof(at)),
			  a, b);
		return -EINVAL;
	}
	nnodes = memd_config_numa_nodes(c, nodes);
	if (nnodes > 1 &&
	    c->donate_bytes % (c->slab_bytes * (uint64_t)nnodes)) {
		char per[32];

		memd_conf_format_bytes(c->slab_bytes * (uint64_t)nnodes, per,
				       sizeof(per));
		memd_errf(err, errlen,
			  "%skey 'numa_nodes': donate = %s does not split "
			  "into whole slabs over %d nodes (slab_size = "
			  "%s each); make donate a multiple of %s",
			  memd_conf_where(src, "numa_nodes", "donate", at,
					  sizeof(at)),
			  a, nnodes, b, per);
		return -EINVAL;
	}
	if (c->registry[0] && !c->cluster_secret_file[0]) {
		memd_errf(err, errlen,
			  "%skey 'registry': registry = %s needs "
			  "cluster_secret_file",
			  memd_conf_where(src, "registry",
					  "cluster_secret_file", at,
					  sizeof(at)),
			  c->registry);
		return -EINVAL;
	}
	if (memd_config_registry_is_etcd(c) && !c->etcd_endpoints[0]) {
		memd_errf(err, errlen,
			  "%skey 'registry': registry = etcd needs "
			  "etcd_endpoints",
			  memd_conf_where(src, "registry", "etcd_endpoints", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if (!c->etcd_user[0] != !c->etcd_password_file[0]) {
		memd_errf(err, errlen,
			  "%skey 'etcd_user': etcd authentication needs "
			  "both etcd_user and etcd_password_file",
			  memd_conf_where(src, "etcd_user",
					  "etcd_password_file", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if ((c->etcd_cert[0] || c->etcd_key[0]) &&
	    (!c->etcd_cert[0] || !c->etcd_key[0] || !c->etcd_cacert[0])) {
		memd_errf(err, errlen,
			  "%skey 'etcd_cert': a client certificate needs "
			  "etcd_cert, etcd_key and etcd_cacert",
			  memd_conf_where(src, "etcd_cert", "etcd_key", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if (c->registry_peers[0] && !memd_config_registry_is_etcd(c)) {
		memd_errf(err, errlen,
			  "%skey 'registry_peers': only with registry = "
			  "etcd",
			  memd_conf_where(src, "registry_peers", "registry", at,
					  sizeof(at)));
		return -EINVAL;
	}
	if (c->metrics_listen[0] && !strcmp(c->metrics_listen, c->listen) &&
	    strcmp(strrchr(c->listen, ':'), ":0")) {
		memd_errf(err, errlen,
			  "%skey 'metrics_listen': %s is the control "
			  "address (listen); give /metrics a port of its "
			  "own",
			  memd_conf_where(src, "metrics_listen", "listen", at,
					  sizeof(at)),
			  c->metrics_listen);
		return -EINVAL;
	}
	if (c->kv_mrc_samples && c->kv_mrc_samples < 16) {
		memd_errf(err, errlen,
			  "%skey 'kv_mrc_samples': %u is too few to "
			  "sample (16 at least, or 0 for no curves)",
			  memd_conf_where(src, "kv_mrc_samples", NULL, at,
					  sizeof(at)),
			  c->kv_mrc_samples);
		return -EINVAL;
	}
	if (!c->kv_spill_dir[0] != !c->kv_spill_bytes) {
		memd_conf_format_bytes(c->kv_spill_bytes, a, sizeof(a));
		if (c->kv_spill_dir[0])
			memd_errf(err, errlen,
				  "%skey 'kv_spill_dir': %s needs a size cap "
				  "(kv_spill_size)",
				  memd_conf_where(src, "kv_spill_dir",
						  "kv_spill_size", at,
						  sizeof(at)),
				  c->kv_spill_dir);
		else
			memd_errf(err, errlen,
				  "%skey 'kv_spill_size': %s without "
				  "kv_spill_dir",
				  memd_conf_where(src, "kv_spill_size",
						  "kv_spill_dir", at,
						  sizeof(at)),
				  a);
		return -EINVAL;
	}
	if (c->idle_timeout_ms &&
	    (c->idle_timeout_ms <= c->lease_ttl_ms ||
	     c->idle_timeout_ms <= c->report_interval_ms)) {
		memd_conf_format_ms(c->idle_timeout_ms, a, sizeof(a));
		memd_conf_format_ms(c->lease_ttl_ms > c->report_interval_ms
					    ? c->lease_ttl_ms
					    : c->report_interval_ms,
				    b, sizeof(b));
		memd_errf(
			err, errlen,
			"%skey 'idle_timeout': %s must be 0 or longer "
			"than lease_ttl and report_interval (%s), or "
			"memd would close clients that only heartbeat",
			memd_conf_where(src, "idle_timeout",
					c->lease_ttl_ms > c->report_interval_ms
						? "lease_ttl"
						: "report_interval",
					at, sizeof(at)),
			a, b);
		return -EINVAL;
	}
	if (c->lease_grace_ms >= c->lease_ttl_ms) {
		memd_conf_format_ms(c->lease_grace_ms, a, sizeof(a));
		memd_conf_format_ms(c->lease_ttl_ms, b, sizeof(b));
		memd_errf(err, errlen,
			  "%skey 'lease_grace': %s must be less than "
			  "lease_ttl = %s",
			  memd_conf_where(src, "lease_grace", "lease_ttl", at,
					  sizeof(at)),
			  a, b);
		return -EINVAL;
	}
	return 0;
}

static void memd_conf_format(const struct memd_config *c,
			     const struct memd_conf_key *k, char *buf,
			     size_t len)
{
	if (k->type == MEMD_CONF_STRING)
		snprintf(buf, len, "%.*s", MEMD_CONF_STR_MAX - 1,
			 (const char *)c + k->off);
	else
		memd_conf_format_num(k, memd_conf_get_num(c, k), buf, len);
}

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
	for (i = 0; i < MEMD_CONF_NKEYS; i++) {
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

/* --- memd.conf files ---------------------------------------------------- */

struct memd_conf_parse {
	FILE *fp;
	const char *path;
	struct memd_config *cfg;   /* the copy being filled */
	int lineno;		   /* of the line last handed to libinih */
	int seen[MEMD_CONF_NKEYS]; /* line that set each key, 0: none */
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
		for (size_t i = 0; i < MEMD_CONF_NKEYS; i++)
			if (p->seen[i])
				src->line[i] = p->seen[i];
	}
	return 0;
}
