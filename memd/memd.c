// SPDX-License-Identifier: MIT
/*
 * memd/memd.c - the memory daemon's entry point: flags, config, the
 * donation, signals, then the server loop (memd/server.c).
 *
 * Start-up is the one place that fails fast: a bad flag exits 64
 * (EX_USAGE), a bad config names file, line and key and exits 78
 * (EX_CONFIG), memory the host cannot back exits 71 (EX_OSERR).
 */
#include <errno.h>
#include <getopt.h>
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
#include "memd/server.h"


static void usage(FILE *f)
{
	fprintf(f,
		"usage: memd [-c FILE] [options]\n"
		"  -c, --config FILE      config file (default " MEMD_CONF_DEFAULT_PATH
		" if present)\n"
		"      --listen HOST:PORT control address (port 0: any)\n"
		"      --donate SIZE      memory to donate (64G, 512M, ...)\n"
		"      --slab-size SIZE   unit of lease (power of two)\n"
		"      --provider NAME    libfabric provider (tcp, shm, ...)\n"
		"      --lease-ttl DUR    lease TTL (10s, 500ms, ...)\n"
		"      --log-level LEVEL  err, warning, notice, info, debug\n"
		"      --hugepages MODE   auto, yes or no\n"
		"      --set KEY=VALUE    any memd.conf key\n"
		"      --ready-file PATH  write HOST:PORT there once listening\n"
		"      --check-config     validate the config and exit\n"
		"      --print-config     print the effective config and exit\n"
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
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

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
	size_t n;
	int r;

	memd_config_defaults(cfg);
	if (st->config_path) {
		r = memd_config_load(cfg, st->config_path, err, errlen);
		if (r)
			return r;
	}
	for (size_t i = 0; i < st->nov; i++) {
		snprintf(err, errlen, "command line: ");
		n = strlen(err);
		r = memd_config_set(cfg, st->ov[i].key, st->ov[i].value,
				    err + n, errlen - n);
		if (r)
			return r;
	}
	err[0] = '\0';
	r = memd_config_validate(cfg, err, errlen);
	if (r && st->config_path) {
		char tmp[1024];

		snprintf(tmp, sizeof(tmp), "%s: %s", st->config_path, err);
		snprintf(err, errlen, "%s", tmp);
	}
	return r;
}

int main(int argc, char **argv)
{
	static struct settings st;
	const char *ready_file = NULL;
	bool check = false, print = false;
	struct memd_config cfg;
	struct memd_arena arena;
	struct memd_server *srv = NULL;
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
	if (check) {
		printf("memd: configuration OK%s%s\n",
		       st.config_path ? ": " : "",
		       st.config_path ? st.config_path : "");
		return 0;
	}
	memd_log_level = cfg.log_level;

	/* Signals are taken by the control loop's signalfd: block them in
	 * every thread, which inherit this mask. SIGPIPE never kills us. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = memd_arena_create(cfg.donate_bytes, cfg.hugepages, &arena, err,
			      sizeof(err));
	if (r) {
		memd_log(LOG_ERR, "memd: cannot back the donation: %s", err);
		return EX_OSERR;
	}
	r = memd_server_create(&cfg, &arena, build_config, &st, ready_file,
			       &srv, err, sizeof(err));
	if (r) {
		memd_log(LOG_ERR, "memd: cannot start: %s", err);
		memd_arena_destroy(&arena);
		return r == -EINVAL ? EX_CONFIG : 1;
	}
	r = memd_server_run(srv);
	if (r)
		status = 1;
	memd_server_destroy(srv);
	memd_arena_destroy(&arena);
	memd_log(LOG_NOTICE, "memd: exit status=%d", status);
	return status;
}
