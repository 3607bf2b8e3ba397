/* SPDX-License-Identifier: MIT */
/*
 * memd/config.h - memd.conf and command-line settings.
 *
 * One table (memd/config.c) lists every key: type, bounds, default,
 * whether SIGHUP may reload it, and its help text. The same table drives
 * parsing (libinih), flag overrides, --print-config, --check-config, the
 * man page memd.conf(5) and tests/test_config.c. Unknown keys are errors.
 * Sizes are binary ("64G", "512M", "4096"); durations take ms/s/m suffixes.
 * Pure: no global state, no logging; errors are written to a caller's
 * buffer as "FILE:LINE: key 'K': what is wrong".
 */
#ifndef TP_MEMD_CONFIG_H
#define TP_MEMD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MEMD_CONF_STR_MAX 256

/* Most NUMA nodes numa_nodes may name: each gets its own arena and fabric
 * endpoint, and the wire protocol carries at most 8 endpoints. */
#define MEMD_NUMA_NODES_MAX 8

/* Read when -c is not given, if it exists; else the built-in defaults. */
#define MEMD_CONF_DEFAULT_PATH "/etc/tidepool/memd.conf"

enum memd_hugepages {
	MEMD_HUGEPAGES_AUTO = 0, /* hugetlbfs pages if the host has enough */
	MEMD_HUGEPAGES_NO,	 /* anonymous memory advised for THP */
	MEMD_HUGEPAGES_YES,	 /* hugetlbfs pages or refuse to start */
};

enum memd_shm {
	MEMD_SHM_AUTO = 0, /* same-host sessions may read slabs through fds */
	MEMD_SHM_OFF,	   /* every session's RMA goes over the provider */
};

struct memd_config {
	char listen[MEMD_CONF_STR_MAX]; /* control server "host:port" */
	char fabric_node
		[MEMD_CONF_STR_MAX]; /* fabric bind address; ""=host of listen */
	char provider[MEMD_CONF_STR_MAX]; /* libfabric provider name */
	uint64_t donate_bytes;		  /* total donated memory */
	uint64_t slab_bytes;		  /* unit of lease; power of two */
	enum memd_hugepages hugepages;
	/* "": one arena, no NUMA binding; "all"; or a canonical node list
	 * such as "0,2-4" (increasing, no blanks, at most
	 * MEMD_NUMA_NODES_MAX nodes) */
	char numa_nodes[MEMD_CONF_STR_MAX];
	uint32_t lease_ttl_ms;
	uint32_t lease_grace_ms; /* memd reclaims at renew + ttl + grace */
	uint32_t quiesce_ms;	 /* lock-delay between revoke and zeroing */
	/* progress threads poll this long after a request before sleeping */
	uint32_t busy_poll_us;
	/* endpoints and progress threads per arena; 0: from the cores */
	uint32_t progress_threads;
	enum memd_shm shm; /* same-host sessions through slab memfds */
	/* "": slabs are memfds; else a tmpfs directory (mounted with
	 * huge=always) whose unnamed files back the slabs */
	char shm_dir[MEMD_CONF_STR_MAX];
	uint32_t max_clients; /* concurrent control connections */
	/* Hostile connections (docs/reliability.md). */
	uint32_t max_clients_per_host; /* of one peer address, but operators */
	uint32_t reserved_clients;     /* kept for @admin and @donor */
	uint32_t handshake_timeout_ms; /* accept to HELLO (and AUTH) done */
	uint32_t idle_timeout_ms;      /* no frame for this long; 0: never */
	/* What one tenant or session may hold (docs/reliability.md). */
	uint32_t max_sessions_per_tenant; /* live sessions of one tenant */
	uint32_t max_leases_per_session;  /* leases one session holds */
	int log_level; /* syslog level: LOG_ERR .. LOG_DEBUG */

	/* The KV tier (docs/kv.md). Only kv_share is reloadable. */
	uint32_t kv_share;	/* % of the donation one tenant's KV may hold */
	uint32_t kv_lease_ms;	/* read lease of a KV lookup */
	uint32_t kv_reserve_ms; /* life of an uncommitted KV reservation */
	uint32_t kv_max_reserved; /* uncommitted reservations per tenant */
	char kv_spill_dir[MEMD_CONF_STR_MAX]; /* "": no spill */
	uint64_t kv_spill_bytes;	      /* cap on the spill files */
	/* Capacity planning (docs/capacity.md); the cost model reloads. */
	uint32_t kv_mrc_samples;	  /* per tenant curve; 0: none */
	uint32_t kv_prefill_tokens_per_s; /* GPU prefill rate */
	uint64_t kv_bytes_per_token;	  /* KV bytes of one token */

	/* The cluster (docs/cluster.md). None of these is reloadable. */
	/* "": standalone; "yes": registry (registry.json); "etcd":
	 * registry (state in etcd); "host:port,...": donor of the
	 * registries there (tried in turn) */
	char registry[MEMD_CONF_STR_MAX];
	char etcd_endpoints[MEMD_CONF_STR_MAX]; /* "host:port,..." */
	char etcd_prefix[MEMD_CONF_STR_MAX];	/* keys under it */
	uint32_t etcd_lease_ms;			/* a leader's lease */
	char etcd_cacert[MEMD_CONF_STR_MAX];	/* "": plain http */
	char etcd_cert[MEMD_CONF_STR_MAX];	/* client certificate */
	char etcd_key[MEMD_CONF_STR_MAX];	/* its key */
	char etcd_user[64];			/* "": no etcd auth */
	char etcd_password_file[MEMD_CONF_STR_MAX];
	/* registry = etcd: the other registries, "host:port,..." (where
	 * this memd's own donor part joins when it is not the leader) */
	char registry_peers[MEMD_CONF_STR_MAX];
	char cluster_secret_file[MEMD_CONF_STR_MAX]; /* absolute path or "" */
	char state_dir[MEMD_CONF_STR_MAX];  /* registry.json lives here */
	char advertise[MEMD_CONF_STR_MAX];  /* "": listen; else host:port */
	char donor_name[MEMD_CONF_STR_MAX]; /* "": the host name */
	uint32_t report_interval_ms;	    /* donor -> registry, at least */
	uint32_t pass_ttl_ms;		    /* lifetime of a donor pass */
	char metrics_listen[MEMD_CONF_STR_MAX]; /* "": no /metrics */
};

/*
 * Where each key's value came from, so that an error about a rule
 * between keys (memd_config_validate_src) names the file and line - or
 * the flag - that set the key it blames, as an error about one key does.
 * Zero it, then let memd_config_load_src and memd_config_set_src fill
 * it. line[] is in the table's order: a line of path, or one of:
 */
#define MEMD_CONF_SRC_DEFAULT 0 /* never set: the key's default */
#define MEMD_CONF_SRC_FLAG (-1) /* set by a command-line flag */
#define MEMD_CONF_KEYS_MAX 64	/* room for every key of the table */
struct memd_conf_src {
	const char *path; /* the file loaded (not copied); NULL: none */
	int line[MEMD_CONF_KEYS_MAX];
};

/* The role memd.conf's registry key gives this memd. */
enum memd_mode {
	MEMD_MODE_STANDALONE = 0, /* registry = (empty) */
	MEMD_MODE_REGISTRY,	  /* registry = yes or etcd */
	MEMD_MODE_DONOR,	  /* registry = host:port[,host:port...] */
};

/* registry = etcd: a registry whose durable state lives in etcd. */
bool memd_config_registry_is_etcd(const struct memd_config *c);

/* The mode of a config that passed memd_config_validate(). */
enum memd_mode memd_config_mode(const struct memd_config *c);
/* "standalone", "registry" or "donor". */
const char *memd_mode_name(enum memd_mode mode);

/* Fills every key with its default. */
void memd_config_defaults(struct memd_config *c);

/*
 * Reads an ini file (sections are not used: keys live at top level or in
 * [memd]). Returns 0, or -ENOENT / -EACCES when the file cannot be opened
 * (err says so), -EINVAL for a bad line, unknown key or bad value (err names
 * file, line and key). c is only changed on success.
 * Also: another -errno from fopen or reading (-EISDIR for a directory).
 * Keys the file does not name keep their value in c; a key set twice, a
 * section other than [memd] and a line longer than libinih's buffer (198
 * characters on common builds) are errors. Reentrant.
 */
int memd_config_load(struct memd_config *c, const char *path, char *err,
		     size_t errlen);
/* The same, also recording in src (may be NULL) the path and the line of
 * every key the file sets; src is only changed on success. */
int memd_config_load_src(struct memd_config *c, struct memd_conf_src *src,
			 const char *path, char *err, size_t errlen);

/* Sets one key from a string (a command-line flag). -EINVAL / -ENOENT
 * (unknown key) with err "key 'K': ...". A '-' in key counts as '_'
 * (--set lease-ttl=5s). c is only changed on success. */
int memd_config_set(struct memd_config *c, const char *key, const char *value,
		    char *err, size_t errlen);
/* The same, also marking key in src (may be NULL) as set by a flag. */
int memd_config_set_src(struct memd_config *c, struct memd_conf_src *src,
			const char *key, const char *value, char *err,
			size_t errlen);

/*
 * The nodes numa_nodes lists, in increasing order, written to nodes
 * (room for MEMD_NUMA_NODES_MAX). Returns their count, 0 for "" (no
 * NUMA placement), or -1 for "all" (the caller asks the host which nodes
 * those are). For a config that passed memd_config_validate().
 */
int memd_config_numa_nodes(const struct memd_config *c, int *nodes);

/* Cross-key checks (slab divides donation, ttl > grace, ...). 0 or -EINVAL.
 * Also checks every key against its own bounds, for structs filled by
 * code. err is "key 'K': what is wrong". */
int memd_config_validate(const struct memd_config *c, char *err, size_t errlen);
/* The same, with err prefixed by where the key it blames was set:
 * "FILE:LINE: " (when that key kept its default, the line of the other
 * key of the rule), "command line: " for a flag, "FILE: " when neither
 * was set. src may be NULL (no prefix). */
int memd_config_validate_src(const struct memd_config *c,
			     const struct memd_conf_src *src, char *err,
			     size_t errlen);

/* Writes every key as "key = value" (an ini memd can read back), each
 * preceded by its help text as a comment. */
void memd_config_print(const struct memd_config *c, FILE *out);

/*
 * SIGHUP support. For each key whose value differs between cur and next
 * (both validated), copies it into cur when the key is reloadable and
 * calls note (may be NULL) with both values as memd.conf would write them
 * and whether it was applied, so the caller can log it. Returns how many
 * keys were applied. No cross-key rule ties a reloadable key to one that
 * is not, so cur stays valid. Not thread-safe on cur: the caller orders
 * it with cur's readers.
 */
int memd_config_reload(struct memd_config *cur, const struct memd_config *next,
		       void (*note)(void *arg, const char *key,
				    const char *old_value,
				    const char *new_value, bool applied),
		       void *arg);

/* Parsers the table uses, exported for flags and tests. 0 or -EINVAL.
 * memd_parse_bytes and memd_parse_ms return -ERANGE for a well-formed
 * value that does not fit (e.g. "16E", "4294967296"); *out is only
 * written on success. */
int memd_parse_bytes(const char *s, uint64_t *out);
int memd_parse_ms(const char *s, uint32_t *out);
int memd_parse_log_level(const char *s, int *out);
/* "debug", "info", ... for a syslog level; "unknown" (never NULL) for a
 * number that is not one. */
const char *memd_log_level_name(int level);

#endif
