// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_spill.c - libFuzzer harness for the KV store's spill
 * files as a warm restart reads them back (memd/kvstore_spill.c:
 * memd_kv_scan_spill, then a lookup that reloads the entry). Built by
 * tests/fuzz/CMakeLists.txt, run by .ci/fuzz.sh.
 *
 * Each input is one spill file left by an earlier memd: the harness
 * writes it to <spill_dir>/<tenant>/<name>, creates a store on that
 * directory (slabs lent from a fixed pool of mmap'd memory), scans,
 * looks the key up (reloading a kept file into blocks), pins and deletes
 * it, destroys the store and removes what is left. A random file fails
 * the integrity tag at once, so byte 0 chooses what the harness repairs
 * first, to reach the checks behind it:
 *   bit 0  recompute the tag (BLAKE2b over header and value), as a file
 *          with a bit flipped before memd wrote its tag would have
 *   bit 1  set the header's value_len to what the file holds
 *   bit 2  set the header's magic and chunk 0
 *   bit 3  name the file after the header's key (else after the key
 *          bytes that follow byte 0, or a non-hex name)
 *   bit 4  the file is in tenant 2's directory while its header names
 *          tenant 1 (another tenant's file); else in the header's own
 *   bit 5  also leave a truncated copy under a second key
 * The rest is the file: a 64-byte header (struct wire_kv_header), the
 * value, an 8-byte tag. Truncated, bit-flipped and wrong-version files
 * come from the mutations.
 *
 * Properties: no crash, leak or UB; the scan keeps a file or deletes it,
 * never both or neither; a file whose header names another tenant than
 * its directory is never kept; a kept file's key is found by the lookup
 * of its tenant (or refused for room), with the value_len of its header.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/wire.h"
#include "memd/kvstore.h"
#include "tests/fuzz/fuzzutil.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SLAB_BYTES (1u << 20)
#define NSLABS 8u
#define TAG_BYTES 8
#define TAG_HASH_BYTES 16
#define FILE_MAX (1u << 20)

static char dir[256];
static uint8_t *pool;
static bool slab_used[NSLABS];
static uint8_t file[FILE_MAX];

static void die(const char *what)
{
	fprintf(stderr, "fuzz_spill: %s\n", what);
	abort();
}

static int slab_get(void *arg, uint32_t tenant, uint32_t *slab, uint8_t **base)
{
	(void)arg;
	(void)tenant;
	for (uint32_t i = 0; i < NSLABS; i++) {
		if (!slab_used[i]) {
			slab_used[i] = true;
			*slab = i;
			*base = pool + (size_t)i * SLAB_BYTES;
			return 0;
		}
	}
	return -ENOSPC;
}

static void slab_put(void *arg, uint32_t slab)
{
	(void)arg;
	if (slab >= NSLABS || !slab_used[slab])
		die("slab_put of a slab not lent");
	slab_used[slab] = false;
}

static void hex(const uint8_t *in, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[in[i] >> 4];
		out[2 * i + 1] = d[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static void put_file(uint32_t tenant, const char *name, const uint8_t *buf,
		     size_t len)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%u", dir, tenant);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%u/%s", dir, tenant, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (len && write(fd, buf, len) != (ssize_t)len) || close(fd))
		die("cannot write a spill file");
}

/* Empties the spill directory (one level of tenant directories). */
static void clean(void)
{
	DIR *top = opendir(dir);
	struct dirent *d;

	if (!top)
		die("opendir");
	while ((d = readdir(top))) {
		char sub[512];
		DIR *s;
		struct dirent *e;

		if (d->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, d->d_name);
		s = opendir(sub);
		if (!s) {
			unlink(sub);
			continue;
		}
		while ((e = readdir(s))) {
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				unlinkat(dirfd(s), e->d_name, 0);
		}
		closedir(s);
		rmdir(sub);
	}
	closedir(top);
}

static void tag(uint8_t *buf, size_t len)
{
	crypto_generichash_state st;
	uint8_t h[TAG_HASH_BYTES];

	crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
	crypto_generichash_update(&st, buf, len - TAG_BYTES);
	crypto_generichash_final(&st, h, sizeof(h));
	memcpy(buf + len - TAG_BYTES, h, TAG_BYTES);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct memd_kv_options o = {
		.slab_bytes = SLAB_BYTES,
		.epoch = 0x5eed,
		.value_max_bytes = 4 * SLAB_BYTES,
		.slab_get = slab_get,
		.slab_put = slab_put,
		.spill_dir = dir,
		.spill_bytes = 64u << 20,
		.policy = MEMD_KV_POLICY_S3FIFO,
	};
	struct memd_kv_scan_result sr;
	struct memd_kv_item it;
	struct memd_kv_loc locs[64];
	struct wire_kv_header h;
	struct memd_kv *kv;
	char name[2 * MEMD_KV_KEY_BYTES + 1];
	uint32_t dir_tenant;
	uint8_t mode, key[MEMD_KV_KEY_BYTES];
	size_t len;
	ssize_t r;

	if (size < 1 || size - 1 > FILE_MAX)
		return 0;
	mode = data[0];
	len = size - 1;
	memcpy(file, data + 1, len);
	memset(&h, 0, sizeof(h));
	if (len >= WIRE_KV_HEADER_LEN) {
		wire_kv_header_decode(file, &h);
		if (mode & 2)
			h.value_len =
				len >= WIRE_KV_HEADER_LEN + TAG_BYTES
					? (uint32_t)(len - WIRE_KV_HEADER_LEN -
						     TAG_BYTES)
					: 0;
		if (mode & 4) {
			h.magic = WIRE_KV_MAGIC;
			h.chunk = 0;
		}
		if (mode & 16)
			h.tenant_id = 1;
		wire_kv_header_encode(&h, file);
	}
	if ((mode & 1) && len >= WIRE_KV_HEADER_LEN + TAG_BYTES)
		tag(file, len);
	dir_tenant = mode & 16 ? 2 : h.tenant_id;
	if (mode & 8) {
		memcpy(key, h.key, sizeof(key));
		hex(key, sizeof(key), name);
	} else if (len >= 1 + MEMD_KV_KEY_BYTES && (data[1] & 1)) {
		memcpy(key, data + 1, sizeof(key));
		hex(key, sizeof(key), name);
	} else {
		memset(key, 0, sizeof(key));
		snprintf(name, sizeof(name), "spill.tmp");
	}
	put_file(dir_tenant, name, file, len);
	if ((mode & 32) && len > 1) {
		char other[sizeof(name)];
		uint8_t k2[MEMD_KV_KEY_BYTES];

		memcpy(k2, key, sizeof(k2));
		k2[0] ^= 0xff;
		hex(k2, sizeof(k2), other);
		put_file(dir_tenant, other, file, len / 2);
	}

	if (memd_kv_create(&o, &kv))
		die("memd_kv_create");
	if (memd_kv_scan_spill(kv, &sr))
		die("memd_kv_scan_spill");
	/* the first file: kept, deleted or dropped, exactly one */
	if (!(mode & 32) && sr.files + sr.deleted + sr.dropped != 1)
		die("the scan neither kept nor deleted the file");
	if ((mode & 16) && h.tenant_id != dir_tenant && sr.files)
		die("another tenant's spill file was kept");
	memset(&it, 0, sizeof(it));
	memcpy(it.key, key, sizeof(key));
	r = memd_kv_lookup(kv, dir_tenant, &it, 1, locs, 64, 1000);
	if (r < 0)
		die("lookup refused a batch of one");
	if (r == 1 && it.value_len != h.value_len)
		die("a reloaded value has another length than its file");
	if (!(mode & 32) && sr.files == 1 && r == 0 && it.status != -ENOSPC &&
	    it.status != -ENOENT)
		die("a kept spill file could not be looked up");
	if (r == 1) {
		it.status = 0;
		memd_kv_done(kv, dir_tenant, &it, 1, 1001);
	}
	memset(&it, 0, sizeof(it));
	memcpy(it.key, key, sizeof(key));
	if (memd_kv_pin(kv, dir_tenant, &it, 1, 1002) == 1)
		memd_kv_unpin(kv, dir_tenant, &it, 1);
	memd_kv_delete(kv, dir_tenant, &it, 1, 1004);
	memd_kv_destroy(kv);
	for (uint32_t i = 0; i < NSLABS; i++)
		if (slab_used[i])
			die("a slab was not given back");
	clean();
	return 0;
}

/* One seed: mode byte, then a spill file as memd writes it (header,
 * value_len value bytes derived from the key, tag), then edited. */
static void seed(const char *sdir, const char *sname, uint8_t mode,
		 uint32_t tenant, uint32_t value_len, uint32_t magic,
		 size_t cut, size_t flip)
{
	struct wire_kv_header h = {
		.magic = magic,
		.tenant_id = tenant,
		.generation = 42,
		.value_len = value_len,
		.chunk = 0,
		.nchunks = 1,
		.checksum = 0x0123456789abcdefull,
	};
	size_t len = WIRE_KV_HEADER_LEN + value_len + TAG_BYTES;
	char path[512];
	int fd;

	for (int i = 0; i < MEMD_KV_KEY_BYTES; i++)
		h.key[i] = (uint8_t)(0xa0 + i);
	file[0] = mode;
	wire_kv_header_encode(&h, file + 1);
	for (uint32_t i = 0; i < value_len; i++)
		file[1 + WIRE_KV_HEADER_LEN + i] = (uint8_t)(h.key[i % 32] ^ i);
	tag(file + 1, len);
	if (flip)
		file[1 + flip] ^= 0x10;
	if (cut)
		len = cut;
	snprintf(path, sizeof(path), "%s/%s", sdir, sname);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, file, len + 1) != (ssize_t)len + 1 || close(fd))
		die("cannot write a seed");
}

/* The seed corpus (FUZZ_SPILL_SEEDS=DIR): what a warm restart meets. */
static void write_seeds(const char *sdir)
{
	seed(sdir, "valid", 0x08, 1, 300, WIRE_KV_MAGIC, 0, 0);
	seed(sdir, "valid-repaired", 0x0f, 1, 4096, WIRE_KV_MAGIC, 0, 0);
	seed(sdir, "truncated", 0x08, 1, 300, WIRE_KV_MAGIC, 100, 0);
	seed(sdir, "truncated-header", 0x08, 1, 300, WIRE_KV_MAGIC, 40, 0);
	seed(sdir, "bitflip-value", 0x08, 1, 300, WIRE_KV_MAGIC, 0, 200);
	seed(sdir, "bitflip-header", 0x08, 1, 300, WIRE_KV_MAGIC, 0, 20);
	seed(sdir, "bitflip-retagged", 0x09, 1, 300, WIRE_KV_MAGIC, 0, 200);
	seed(sdir, "wrong-version", 0x08, 1, 300, 0x32764b54u, 0, 0);
	seed(sdir, "other-tenant", 0x18, 1, 300, WIRE_KV_MAGIC, 0, 0);
	seed(sdir, "tenant-7", 0x08, 7, 300, WIRE_KV_MAGIC, 0, 0);
	seed(sdir, "two-files", 0x28, 1, 2000, WIRE_KV_MAGIC, 0, 0);
	seed(sdir, "big", 0x08, 1, 70000, WIRE_KV_MAGIC, 0, 0);
	seed(sdir, "not-hex-name", 0x00, 1, 300, WIRE_KV_MAGIC, 0, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (sodium_init() < 0)
		die("sodium_init");
	if (getenv("FUZZ_SPILL_SEEDS")) {
		write_seeds(getenv("FUZZ_SPILL_SEEDS"));
		exit(0);
	}
	if (fuzz_scratch_dir("spill", dir, sizeof(dir)))
		die("mkdtemp");
	pool = mmap(NULL, (size_t)NSLABS * SLAB_BYTES, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pool == MAP_FAILED)
		die("mmap");
	return 0;
}
