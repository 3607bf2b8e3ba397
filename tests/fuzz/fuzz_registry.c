// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_registry.c - libFuzzer harness for the registry's
 * loader of STATE_DIR/registry.json (memd/registry_state.c: state_load and
 * load_doc). Built by tests/fuzz/CMakeLists.txt, run by .ci/fuzz.sh.
 *
 * Each input is a registry.json, written to a state directory on tmpfs
 * and opened with memd_registry_open as memd does at start. Properties:
 * no crash, leak or UB; a refused file is refused with a reason; an
 * accepted one answers the admin listings (status, tenants, donors) with
 * JSON, and after a change that rewrites the file (a quota-set of its
 * first tenant, a drain of its first donor) the file memd wrote opens
 * again to the same tenants and donors.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/wire.h"
#include "memd/log.h"
#include "memd/registry.h"
#include "tests/fuzz/fuzzutil.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256], file[300];
static struct auth_cluster_keys keys;
static char out[WIRE_JSON_MAX + 1];

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_registry: %s: %s\n", what, detail);
	abort();
}

static struct memd_registry *open_reg(char *err, size_t errlen, int *rc)
{
	struct memd_registry_opts o;
	struct memd_registry *r = NULL;

	fuzz_registry_opts(&o, dir, &keys);
	err[0] = '\0';
	*rc = memd_registry_open(&o, 1000, &r, err, errlen);
	return r;
}

/* One admin request; its reply (or NULL when refused), malloc'ed. */
static char *admin(struct memd_registry *r, const char *req)
{
	char err[WIRE_MSG_MAX];
	json_t *o = json_loads(req, 0, NULL);
	int n;

	if (!o)
		die("bad request in the harness", req);
	err[0] = '\0';
	n = memd_registry_admin(r, o, NULL, 2000, 1700000000000ull, out,
				sizeof(out), err, sizeof(err));
	json_decref(o);
	if (n < 0) {
		if (!err[0])
			die("admin refused without saying why", req);
		return NULL;
	}
	if ((size_t)n != strlen(out))
		die("admin reply length", req);
	o = json_loads(out, 0, NULL);
	if (!o)
		die("admin reply is not JSON", out);
	json_decref(o);
	return strdup(out);
}

struct first {
	char tenant[WIRE_NAME_MAX];
	char donor[WIRE_NAME_MAX];
};

static void first_tenant(void *arg, const struct memd_registry_tenant_info *t)
{
	struct first *f = arg;

	if (!f->tenant[0])
		snprintf(f->tenant, sizeof(f->tenant), "%s", t->name);
}

static void first_donor(void *arg, const struct memd_registry_donor_info *d)
{
	struct first *f = arg;

	if (!f->donor[0])
		snprintf(f->donor, sizeof(f->donor), "%s", d->name);
}

/* "tenants" and "donors" listings, minus what changes with the clock. */
static char *listing(struct memd_registry *r)
{
	char *t = admin(r, "{\"cmd\":\"tenants\"}");
	char *d = admin(r, "{\"cmd\":\"donors\"}");
	json_t *dj;
	char *all;
	size_t i;
	json_t *x;

	if (!t || !d)
		die("listing refused", "");
	dj = json_loads(d, 0, NULL);
	json_array_foreach(json_object_get(dj, "donors"), i, x)
	{
		/* since_unix_ms: when the registry was opened */
		json_object_del(x, "since_unix_ms");
	}
	free(d);
	d = json_dumps(dj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(dj);
	if (asprintf(&all, "%s\n%s", t, d) < 0)
		die("asprintf", "");
	free(t);
	free(d);
	return all;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct memd_registry *r;
	struct first f = { "", "" };
	char err[512], req[512], *before, *after, *s;
	int fd, rc;

	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) ||
	    close(fd))
		die("write", file);
	r = open_reg(err, sizeof(err), &rc);
	if (rc) {
		if (r || !err[0])
			die("refused without saying why", "");
		return 0;
	}
	s = admin(r, "{\"cmd\":\"status\"}");
	if (!s)
		die("status refused", "");
	free(s);
	memd_registry_foreach_tenant(r, first_tenant, &f);
	memd_registry_foreach_donor(r, first_donor, &f);
	if (f.tenant[0]) {
		snprintf(req, sizeof(req),
			 "{\"cmd\":\"quota-set\",\"name\":\"%s\","
			 "\"quota_bytes\":1048576}",
			 f.tenant);
		free(admin(r, req));
	}
	if (f.donor[0]) {
		snprintf(req, sizeof(req),
			 "{\"cmd\":\"drain\",\"donor\":\"%s\",\"drain\":true}",
			 f.donor);
		free(admin(r, req));
	}
	before = listing(r);
	memd_registry_close(r);
	r = open_reg(err, sizeof(err), &rc);
	if (rc)
		die("registry.json as memd wrote it does not load", err);
	after = listing(r);
	if (strcmp(before, after)) {
		fprintf(stderr, "before: %s\nafter:  %s\n", before, after);
		die("registry.json as memd wrote it loads to another", "");
	}
	free(before);
	free(after);
	memd_registry_close(r);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_registry_init("registry", &keys, dir, sizeof(dir), file,
			   sizeof(file));
	return 0;
}
