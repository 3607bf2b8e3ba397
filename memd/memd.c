// SPDX-License-Identifier: MIT
/*
 * memd/memd.c - the memory daemon's entry point: flags, config, the NUMA
 * nodes, the donation (one arena per node), signals, then the server loop
 * (memd/server.c).
 *
 * Start-up is the one place that fails fast: a bad flag exits 64
 * (EX_USAGE), a bad config names file, line and key and exits 78
 * (EX_CONFIG) - also a numa_nodes entry this host does not have, and a
 * bad TIDEPOOL_NIC_NODE / TIDEPOOL_GPU_NODE -, memory the host (a node)
 * cannot back exits 71 (EX_OSERR).
 *
 * Under systemd (Type=notify) memd tells the service manager when it is
 * ready (READY=1, here, once the control port listens), reloading and
 * stopping (memd/server.c); see memd/notify.h.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "memd/arena.h"
#include "memd/config.h"
#include "memd/log.h"
#include "memd/nodes.h"
#include "memd/registry.h"
#include "memd/notify.h"
#include "memd/server.h"
#include "numa/place.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memd [-c FILE] [options]\n"
		"  -c, --config FILE      config file "
		"(default " MEMD_CONF_DEFAULT_PATH " if present)\n"
		"      --listen HOST:PORT control address (port 0: any)\n"
		"      --donate SIZE      memory to donate (64G, 512M, ...)\n"
		"      --slab-size SIZE   unit of lease (power of two)\n"
		"      --provider NAME    libfabric provider (tcp, shm, ...)\n"
		"      --lease-ttl DUR    lease TTL (10s, 500ms, ...)\n"
		"      --log-level LEVEL  err, warning, notice, info, debug\n"
		"      --hugepages MODE   auto, yes or no\n"
		"      --set KEY=VALUE    any memd.conf key\n"
		"      --ready-file PATH  write HOST:PORT there once "
		"listening\n"
		"      --check-config     validate the config and exit\n"
		"      --print-config     print the effective config and exit\n"
		"      --migrate-registry DIR\n"
		"                         copy DIR/registry.json into the etcd "
		"of\n"
		"                         registry = etcd, and exit\n"
		"      --seal-registry    authenticate the etcd state of a "
		"pool\n"
		"                         that an older memd wrote, and exit\n"
		"  -h, --help             this text\n"
		"  -V, --version          print the version\n"
		"See memd(8) and memd.conf(5).\n");
}

enum {
	OPT_LISTEN = 256,
	OPT_DONATE,
	OPT_SLAB,
	OPT_PROVIDER,
	OPT_TTL,
	OPT_LOGLEVEL,
	OPT_HUGE,
	OPT_SET,
	OPT_READY,
	OPT_CHECK,
	OPT_PRINT,
	OPT_MIGRATE,
	OPT_SEAL,
};

static const struct option longopts[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "donate", required_argument, NULL, OPT_DONATE },
	{ "slab-size", required_argument, NULL, OPT_SLAB },
	{ "provider", required_argument, NULL, OPT_PROVIDER },
	{ "lease-ttl", required_argument, NULL, OPT_TTL },
	{ "log-level", required_argument, NULL, OPT_LOGLEVEL },
	{ "hugepages", required_argument, NULL, OPT_HUGE },
	{ "set", required_argument, NULL, OPT_SET },
	{ "ready-file", required_argument, NULL, OPT_READY },
	{ "check-config", no_argument, NULL, OPT_CHECK },
	{ "print-config", no_argument, NULL, OPT_PRINT },
	{ "migrate-registry", required_argument, NULL, OPT_MIGRATE },
	{ "seal-registry", no_argument, NULL, OPT_SEAL },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/*
 * --migrate-registry DIR: DIR/registry.json (tenants with their keys,
 * quotas, donor identities, drain flags, id counters) into the etcd
 * that cfg (registry = etcd) names, only if it holds no state yet. The
 * registries may run already: a standby reads the state when elected,
 * and a leader that wrote its own state first makes this refuse.
 */
static int migrate_registry(const struct memd_config *cfg, const char *dir,
			    bool seal)
{
	struct memd_etcd_opts eo = {
		.endpoints = cfg->etcd_endpoints,
		.cacert = cfg->etcd_cacert,
		.cert = cfg->etcd_cert,
		.key = cfg->etcd_key,
		.user = cfg->etcd_user,
		.password_file = cfg->etcd_password_file,
		.timeout_ms = 2000,
	};
	struct memd_registry_opts ro = {
		.state_dir = dir,
		.slab_bytes = cfg->slab_bytes,
		.report_ms = cfg->report_interval_ms,
		.ticket_ttl_ms = 30000,
		.pass_ttl_ms = cfg->pass_ttl_ms,
		.etcd = &eo,
		.etcd_prefix = cfg->etcd_prefix,
		.etcd_lease_ms = cfg->etcd_lease_ms,
	};
	struct auth_cluster_keys keys;
	uint8_t secret[AUTH_SECRET_MAX];
	size_t nt = 0, nd = 0;
	char err[512];
	int n;

	if (!memd_config_registry_is_etcd(cfg)) {
		fprintf(stderr,
			"memd: --%s needs registry = etcd and "
			"etcd_endpoints in the config\n",
			seal ? "seal-registry" : "migrate-registry");
		return EX_CONFIG;
	}
	if (auth_init()) {
		fprintf(stderr, "memd: libsodium failed to initialize\n");
		return EX_SOFTWARE;
	}
	n = auth_read_secret_file(cfg->cluster_secret_file, secret, err,
				  sizeof(err));
	if (n < 0) {
		fprintf(stderr, "memd: %s\n", err);
		return EX_CONFIG;
	}
	auth_cluster_keys(secret, (size_t)n, &keys);
	explicit_bzero(secret, sizeof(secret));
	ro.keys = &keys;
	if (seal) {
		bool already = false;
		char *list = NULL;

		n = memd_registry_seal_etcd(&ro, &already, &list, err,
					    sizeof(err));
		explicit_bzero(&keys, sizeof(keys));
		if (n) {
			fprintf(stderr, "memd: seal-registry: %s\n", err);
			return n == -EAGAIN || n == -EIO ? EX_TEMPFAIL
			       : n == -ENOENT		 ? EX_NOINPUT
							 : EX_DATAERR;
		}
		printf("memd: etcd %s%s/state %s; it holds:\n%s",
		       cfg->etcd_endpoints, cfg->etcd_prefix,
		       already ? "is authenticated already: nothing written"
			       : "sealed (authenticated with the cluster "
				 "secret)",
		       list ? list : "");
		free(list);
		return 0;
	}
	n = memd_registry_migrate(&ro, &nt, &nd, err, sizeof(err));
	explicit_bzero(&keys, sizeof(keys));
	if (n) {
		fprintf(stderr, "memd: migrate-registry: %s\n", err);
		return n == -EEXIST ? EX_CANTCREAT
		       : n == -EIO  ? EX_UNAVAILABLE
				    : EX_DATAERR;
	}
	printf("memd: migrated %s/registry.json to etcd %s%s/state: "
	       "%zu tenants, %zu donors\n",
	       dir, cfg->etcd_endpoints, cfg->etcd_prefix, nt, nd);
	return 0;
}

/* A flag that sets a config key; flags win over the file, on SIGHUP too. */
struct override {
	const char *key;
	const char *value;
};

struct settings {
	const char *config_path; /* NULL: built-in defaults only */
	struct override ov[64];
	size_t nov;
};

/* defaults, then the file, then the flags; validated. 0 or -EINVAL. */
static int build_config(struct memd_config *cfg, char *err, size_t errlen,
			void *arg)
{
	const struct settings *st = arg;
	struct memd_conf_src src = { 0 };
	size_t n;
	int r;

	memd_config_defaults(cfg);
	if (st->config_path) {
		r = memd_config_load_src(cfg, &src, st->config_path, err,
					 errlen);
		if (r)
			return r;
	}
	for (size_t i = 0; i < st->nov; i++) {
		snprintf(err, errlen, "command line: ");
		n = strlen(err);
		r = memd_config_set_src(cfg, &src, st->ov[i].key,
					st->ov[i].value, err + n, errlen - n);
		if (r)
			return r;
	}
	err[0] = '\0';
	/* names FILE:LINE (or the flag) of the key a cross-key rule blames */
	return memd_config_validate_src(cfg, &src, err, errlen);
}

/* Where the config came from, for start-up errors about its values. */
static const char *config_origin(const struct settings *st)
{
	return st->config_path ? st->config_path : "command line";
}

/*
 * numa_nodes against this host: opens the topology (applying the
 * TIDEPOOL_*_NODE overrides), resolves the nodes into nodes[] and checks
 * that donate splits into whole slabs over them. Returns the count (0:
 * no NUMA placement, *topo stays NULL) or an exit status (negative).
 */
static int resolve_nodes(const struct memd_config *cfg,
			 const struct settings *st, struct place_topo **topo,
			 int *nodes)
{
	const char *bad = NULL;
	char err[512];
	int n, r;

	*topo = NULL;
	if (!cfg->numa_nodes[0])
		return 0;
	r = place_topo_open(NULL, topo);
	if (r) {
		memd_log(LOG_ERR,
			 "memd: numa_nodes = %s but the NUMA topology of this "
			 "host cannot be read: %s",
			 cfg->numa_nodes, strerror(-r));
		return -EX_OSERR;
	}
	r = place_topo_apply_env(*topo, &bad);
	if (r) {
		memd_log(LOG_ERR, "memd: environment variable %s: %s%s",
			 bad ? bad : "TIDEPOOL_*_NODE", strerror(-r),
			 r == -ENXIO ? " (names a node this host does not "
				       "have)"
				     : "");
		return -EX_CONFIG;
	}
	n = memd_nodes_resolve(*topo, cfg, nodes, MEMD_NUMA_NODES_MAX, err,
			       sizeof(err));
	if (n < 0) {
		memd_log(LOG_ERR, "memd: %s: %s", config_origin(st), err);
		return -EX_CONFIG;
	}
	if (cfg->donate_bytes % (cfg->slab_bytes * (uint64_t)n)) {
		memd_log(LOG_ERR,
			 "memd: %s: key 'numa_nodes': donate = %" PRIu64
			 " bytes does not split into whole slabs over %d "
			 "nodes (slab_size = %" PRIu64 " bytes each); make "
			 "donate a multiple of %" PRIu64 " bytes",
			 config_origin(st), cfg->donate_bytes, n,
			 cfg->slab_bytes, cfg->slab_bytes * (uint64_t)n);
		return -EX_CONFIG;
	}
	return n;
}

int main(int argc, char **argv)
{
	static struct settings st;
	static struct memd_arena arenas[MEMD_NUMA_NODES_MAX];
	const char *ready_file = NULL;
	bool check = false, print = false;
	const char *migrate = NULL;
	bool seal = false;
	struct memd_config cfg;
	struct memd_server *srv = NULL;
	struct place_topo *topo = NULL;
	int nodes[MEMD_NUMA_NODES_MAX], nnodes, narenas = 0;
	uint64_t per_arena;
	char err[1024];
	sigset_t mask;
	int opt, r, status = 0;

	while ((opt = getopt_long(argc, argv, "c:hV", longopts, NULL)) != -1) {
		const char *key = NULL;
		char *val = optarg;

		switch (opt) {
		case 'c':
			st.config_path = optarg;
			continue;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("memd (tidepool) %s\n", TP_VERSION);
			return 0;
		case OPT_LISTEN:
			key = "listen";
			break;
		case OPT_DONATE:
			key = "donate";
			break;
		case OPT_SLAB:
			key = "slab_size";
			break;
		case OPT_PROVIDER:
			key = "provider";
			break;
		case OPT_TTL:
			key = "lease_ttl";
			break;
		case OPT_LOGLEVEL:
			key = "log_level";
			break;
		case OPT_HUGE:
			key = "hugepages";
			break;
		case OPT_SET: {
			char *eq = strchr(optarg, '=');

			if (!eq || eq == optarg) {
				fprintf(stderr,
					"memd: --set takes KEY=VALUE, got "
					"'%s'\n",
					optarg);
				return EX_USAGE;
			}
			*eq = '\0';
			key = optarg;
			val = eq + 1;
			break;
		}
		case OPT_READY:
			ready_file = optarg;
			continue;
		case OPT_CHECK:
			check = true;
			continue;
		case OPT_PRINT:
			print = true;
			continue;
		case OPT_MIGRATE:
			migrate = optarg;
			continue;
		case OPT_SEAL:
			seal = true;
			continue;
		default:
			usage(stderr);
			return EX_USAGE;
		}
		if (st.nov == sizeof(st.ov) / sizeof(st.ov[0])) {
			fprintf(stderr, "memd: too many options\n");
			return EX_USAGE;
		}
		st.ov[st.nov].key = key;
		st.ov[st.nov].value = val;
		st.nov++;
	}
	if (optind < argc) {
		fprintf(stderr, "memd: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return EX_USAGE;
	}

	if (!st.config_path && access(MEMD_CONF_DEFAULT_PATH, F_OK) == 0)
		st.config_path = MEMD_CONF_DEFAULT_PATH;
	if (build_config(&cfg, err, sizeof(err), &st)) {
		fprintf(stderr, "memd: %s\n", err);
		return EX_CONFIG;
	}
	if (print) {
		memd_config_print(&cfg, stdout);
		return 0;
	}
	memd_log_level = cfg.log_level;
	if (migrate || seal)
		return migrate_registry(&cfg, migrate, seal);
	if (check) {
		/* The nodes are the host's business: check them here too,
		 * before a restart would find out (no memory is touched). */
		nnodes = resolve_nodes(&cfg, &st, &topo, nodes);
		place_topo_close(topo);
		if (nnodes < 0)
			return -nnodes;
		printf("memd: configuration OK%s%s\n",
		       st.config_path ? ": " : "",
		       st.config_path ? st.config_path : "");
		return 0;
	}

	/* Signals are taken by the control loop's signalfd: block them in
	 * every thread, which inherit this mask. SIGPIPE never kills us. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	nnodes = resolve_nodes(&cfg, &st, &topo, nodes);
	if (nnodes < 0) {
		status = -nnodes;
		goto out;
	}
	per_arena = cfg.donate_bytes / (uint64_t)(nnodes ? nnodes : 1);
	if (nnodes > 1) {
		/* Each arena checks its node; the limits of the process
		 * (RLIMIT_MEMLOCK, MemAvailable) hold for the sum. */
		struct memd_host_mem h;
		bool huge;

		r = memd_host_mem_read(&h);
		if (r)
			snprintf(err, sizeof(err),
				 "cannot read /proc/meminfo: %s", strerror(-r));
		else
			r = memd_arena_plan(&h, cfg.donate_bytes, cfg.hugepages,
					    &huge, err, sizeof(err));
		if (r) {
			memd_log(LOG_ERR, "memd: cannot back the donation: %s",
				 err);
			status = EX_OSERR;
			goto out;
		}
	}
	for (narenas = 0; narenas < (nnodes ? nnodes : 1); narenas++) {
		int node = nnodes ? nodes[narenas] : -1;

		r = memd_arena_create(per_arena, cfg.hugepages, node,
				      &arenas[narenas], err, sizeof(err));
		if (r) {
			memd_log(LOG_ERR, "memd: cannot back the donation: %s",
				 err);
			status = EX_OSERR;
			goto out;
		}
		if (node >= 0) {
			/* mlock touched every page: they are placed now. */
			int first = place_memory_node(arenas[narenas].base);
			int last = place_memory_node(
				(char *)arenas[narenas].base + per_arena - 1);

			memd_log(first == node && last == node ? LOG_INFO
							       : LOG_WARNING,
				 "arena: node=%d bytes=%" PRIu64
				 " hugetlb=%d placed=%d,%d",
				 node, per_arena, arenas[narenas].hugetlb,
				 first, last);
		}
	}
	r = memd_server_create(&cfg, arenas, (uint32_t)narenas, topo,
			       build_config, &st, ready_file, &srv, err,
			       sizeof(err));
	if (r) {
		memd_log(LOG_ERR, "memd: cannot start: %s", err);
		status = r == -EINVAL ? EX_CONFIG : 1;
		goto out;
	}
	/* The same moment as the ready file: the control port listens. */
	memd_notify("READY=1\nSTATUS=Serving on %s (%s), donating %" PRIu64
		    " bytes",
		    memd_server_addr(srv),
		    memd_mode_name(memd_config_mode(&cfg)), cfg.donate_bytes);
	r = memd_server_run(srv);
	if (r)
		status = 1;
	memd_server_destroy(srv);
	memd_log(LOG_NOTICE, "memd: exit status=%d", status);
out:
	while (narenas-- > 0)
		memd_arena_destroy(&arenas[narenas]);
	place_topo_close(topo);
	return status;
}
