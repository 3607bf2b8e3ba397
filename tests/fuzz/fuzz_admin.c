// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_admin.c - libFuzzer harness for the registry's admin
 * requests (memd/registry_admin.c: memd_registry_admin, what poolctl sends as
 * ADMIN's JSON), parsed as memd's server parses them. Built by
 * tests/fuzz/CMakeLists.txt, run by .ci/fuzz.sh.
 *
 * One registry lives for the process, on a state directory on tmpfs,
 * with two tenants and a donor that joined and reported. Each input is
 * byte 0 then a request: the JSON text is loaded with
 * JSON_REJECT_DUPLICATES (as do_admin does) and, when byte 0 is odd and
 * the object's "key_box" is the string "seal", the harness puts there the
 * hex of a key sealed with the session key (as poolctl does), so that
 * tenant-add gets past the box to the checks behind it. Properties: no
 * crash, leak or UB; a refusal says why; a reply is JSON of exactly the
 * length returned. Every 4096 inputs the registry is closed and opened
 * again: registry.json as memd wrote it must load (and every 65536 it
 * starts afresh, so the tenant table does not stay full).
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
static const uint8_t skey[AUTH_KEY_LEN] = "fuzz-admin-session-key-32-bytes";
static struct memd_registry *reg;
static char out[WIRE_JSON_MAX + 1];
static uint64_t runs;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_admin: %s: %s\n", what, detail);
	abort();
}

static void reg_open(void)
{
	struct memd_registry_opts o;
	char err[512];

	fuzz_registry_opts(&o, dir, &keys);
	if (memd_registry_open(&o, 1000, &reg, err, sizeof(err)))
		die("registry.json as memd wrote it does not load", err);
}

/* A fresh registry: two tenants and a donor "d1" that joined and
 * reported (its usage is soft state: gone at every reopen). */
static void reg_fresh(void)
{
	static const char doc[] =
		"{\"version\":1,\"next_tenant_id\":3,\"next_donor_id\":2,"
		"\"tenants\":[{\"id\":1,\"name\":\"t1\",\"key\":\""
		"01010101010101010101010101010101010101010101010101010101010101"
		"01"
		"\",\"quota_bytes\":16777216},{\"id\":2,\"name\":\"t2\","
		"\"key\":\""
		"02020202020202020202020202020202020202020202020202020202020202"
		"02"
		"\",\"quota_bytes\":0}],"
		"\"donors\":[{\"id\":1,\"name\":\"d1\",\"draining\":false}]}";
	struct wire_donor_join j = { 0 };
	struct wire_donor_join_ok ok;
	char err[512];
	int fd;

	memd_registry_close(reg);
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, doc, sizeof(doc) - 1) != sizeof(doc) - 1 ||
	    close(fd))
		die("write", file);
	reg_open();
	snprintf(j.name, sizeof(j.name), "d1");
	snprintf(j.addr, sizeof(j.addr), "127.0.0.1:7000");
	j.epoch = 7;
	j.slab_bytes = 1u << 20;
	j.slabs_total = 64;
	j.nnodes = 1;
	j.node[0].node = -1;
	j.node[0].slabs_total = 64;
	j.node[0].slabs_free = 64;
	if (memd_registry_donor_join(reg, &j, 1000, &ok, err, sizeof(err)))
		die("donor join", err);
}

/* Replaces "key_box": "seal" with a key sealed with the session key. */
static void seal_box(json_t *o)
{
	static const uint8_t key[AUTH_KEY_LEN] =
		"a-new-tenant-key-of-32-bytes!!!";
	uint8_t box[WIRE_BOX_MAX];
	char hex[2 * WIRE_BOX_MAX + 1];
	const char *kb = json_string_value(json_object_get(o, "key_box"));
	int n;

	if (!kb || strcmp(kb, "seal"))
		return;
	n = auth_seal(skey, key, sizeof(key), box, sizeof(box));
	if (n < 0)
		die("auth_seal", strerror(-n));
	auth_hex(box, (size_t)n, hex);
	json_object_set_new(o, "key_box", json_string(hex));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[WIRE_MSG_MAX];
	json_error_t je;
	json_t *o, *back;
	int n;

	if (size < 1)
		return 0;
	if (++runs % 65536 == 0)
		reg_fresh();
	else if (runs % 4096 == 0) {
		memd_registry_close(reg);
		reg_open();
	}
	o = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES,
		       &je);
	if (!o)
		return 0; /* do_admin answers "malformed JSON" itself */
	if (data[0] & 1)
		seal_box(o);
	err[0] = '\0';
	n = memd_registry_admin(reg, o, skey, 2000 + runs, 1700000000000ull,
				out, sizeof(out), err, sizeof(err));
	json_decref(o);
	if (n < 0) {
		if (!err[0])
			die("refused without saying why", "");
		return 0;
	}
	if ((size_t)n != strlen(out))
		die("reply length", out);
	back = json_loads(out, 0, NULL);
	if (!back)
		die("reply is not JSON", out);
	json_decref(back);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_registry_init("admin", &keys, dir, sizeof(dir), file,
			   sizeof(file));
	reg_fresh();
	return 0;
}
