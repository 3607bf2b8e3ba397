// SPDX-License-Identifier: MIT
/*
 * memd/kvstore_spill.c - the KV store's spill files (see kvstore.h for the
 * format): writing, loading, checking their binding, the membership
 * file, and the warm-restart scan of the spill directory.
 */
#include "memd/kvstore_int.h"
#include "fabric/locked.h"
#include "fabric/dlist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- spill files ---- */

static void key_hex(const uint8_t *key, char out[HEX_KEY_CHARS + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < MEMD_KV_KEY_BYTES; i++) {
		out[2 * i] = digits[key[i] >> 4];
		out[2 * i + 1] = digits[key[i] & 15];
	}
	out[HEX_KEY_CHARS] = 0;
}

static bool key_unhex(const char *s, uint8_t key[MEMD_KV_KEY_BYTES])
{
	if (strlen(s) != HEX_KEY_CHARS)
		return false;
	for (int i = 0; i < HEX_KEY_CHARS; i++) {
		int c = s[i], v;

		if (c >= '0' && c <= '9')
			v = c - '0';
		else if (c >= 'a' && c <= 'f')
			v = c - 'a' + 10;
		else
			return false;
		if (i % 2 == 0)
			key[i / 2] = (uint8_t)(v << 4);
		else
			key[i / 2] |= (uint8_t)v;
	}
	return true;
}

int kvs_spill_path(const struct memd_kv *kv, uint32_t tenant,
		   const uint8_t *key, bool tmp, char *out, size_t size)
{
	char hex[HEX_KEY_CHARS + 1];
	int n;

	if (!key) {
		n = snprintf(out, size, "%s/%u", kv->spill_dir, tenant);
	} else {
		key_hex(key, hex);
		n = snprintf(out, size, "%s/%u/%s%s%s", kv->spill_dir, tenant,
			     tmp ? "." : "", hex, tmp ? ".tmp" : "");
	}
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static void tag_final(crypto_generichash_state *st, uint8_t tag[TAG_BYTES])
{
	uint8_t h[TAG_HASH_BYTES];

	crypto_generichash_final(st, h, sizeof(h));
	memcpy(tag, h, TAG_BYTES);
}

/*
 * The binding tag of a spill file: BLAKE2b keyed with the tenant's
 * binding over the header and the integrity tag (which covers the
 * value), so checking whose a file is reads 80 bytes, not the value.
 */
static void spill_bind_tag(const struct kv_tenant *t,
			   const uint8_t hb[MEMD_KV_HEADER_BYTES],
			   const uint8_t tag[TAG_BYTES], uint8_t out[TAG_BYTES])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, t->bind, sizeof(t->bind), TAG_HASH_BYTES);
	crypto_generichash_update(&st, hb, MEMD_KV_HEADER_BYTES);
	crypto_generichash_update(&st, tag, TAG_BYTES);
	tag_final(&st, out);
}

static int write_all(int fd, const uint8_t *p, uint64_t len)
{
	while (len) {
		size_t n = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		len -= (uint64_t)w;
	}
	return 0;
}

static int pread_all(int fd, uint8_t *p, uint64_t len, uint64_t off)
{
	while (len) {
		size_t n = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t r = pread(fd, p, n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p += r;
		len -= (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Removes e's spill file from the FIFO (and the disk, with unlink_file). */
void kvs_spill_forget(struct memd_kv *kv, struct kv_entry *e, bool unlink_file)
{
	char path[PATH_MAX];

	if (!e->spilled)
		return;
	TP_DLIST_UNLINK(kv->spill_head, kv->spill_tail, e, sprev, snext);
	kv->spill_used -= e->spill_file_bytes;
	e->t->spilled--;
	e->t->spill_bytes -= e->spill_file_bytes;
	e->spilled = false;
	if (unlink_file && kvs_spill_path(kv, e->t->id, e->key, false, path,
					  sizeof(path)) == 0)
		unlink(path);
}

static void spill_append(struct memd_kv *kv, struct kv_entry *e,
			 uint64_t file_bytes)
{
	e->spilled = true;
	e->spill_file_bytes = file_bytes;
	TP_DLIST_APPEND(kv->spill_head, kv->spill_tail, e, sprev, snext);
	kv->spill_used += file_bytes;
	e->t->spilled++;
	e->t->spill_bytes += file_bytes;
}

/* Deletes the oldest spill files until need more bytes fit the cap. */
static uint64_t spill_trim(struct memd_kv *kv, uint64_t need)
{
	uint64_t n = 0;

	while (kv->spill_head && kv->spill_used + need > kv->o.spill_bytes) {
		struct kv_entry *e = kv->spill_head;

		kvs_spill_forget(kv, e, true);
		kvs_entry_maybe_free(kv, e);
		n++;
	}
	return n;
}

static int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd))
		r = -errno;
	close(fd);
	return r;
}

/*
 * <spill_dir>/membership: the membership sequence the spill files were
 * written under, as decimal text and a newline. 0 when it is missing,
 * unreadable or malformed (unknown).
 */
#define SPILL_MEMBERSHIP_FILE "membership"

static uint64_t spill_membership_read(const struct memd_kv *kv)
{
	char path[PATH_MAX], buf[32], *end;
	unsigned long long v;
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "%s/" SPILL_MEMBERSHIP_FILE,
		     kv->spill_dir) >= (int)sizeof(path))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 1 || buf[n - 1] != '\n' || buf[0] < '1' || buf[0] > '9')
		return 0;
	buf[n - 1] = '\0';
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || *end)
		return 0;
	return (uint64_t)v;
}

/* Writes (membership 0: deletes) <spill_dir>/membership: temp file,
 * fsync, rename, fsync of the directory. kv->lock held. */
static int spill_membership_write(const struct memd_kv *kv, uint64_t membership)
{
	char path[PATH_MAX], tmp[PATH_MAX], buf[32];
	int fd, n, r = 0;

	if (snprintf(path, sizeof(path), "%s/" SPILL_MEMBERSHIP_FILE,
		     kv->spill_dir) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/" SPILL_MEMBERSHIP_FILE ".tmp",
		     kv->spill_dir) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	if (!membership) {
		if (unlink(path) && errno != ENOENT)
			return -errno;
		return fsync_dir(kv->spill_dir);
	}
	n = snprintf(buf, sizeof(buf), "%llu\n",
		     (unsigned long long)membership);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		  0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, (const uint8_t *)buf, (uint64_t)n);
	if (!r && fsync(fd))
		r = -errno;
	close(fd);
	if (!r && rename(tmp, path))
		r = -errno;
	if (r) {
		unlink(tmp);
		return r;
	}
	return fsync_dir(kv->spill_dir);
}

/* Writes e (COMMITTED, in memory) to its spill file. */
int kvs_spill_write(struct memd_kv *kv, struct kv_entry *e)
{
	struct kv_tenant *t = e->t;
	uint64_t file_bytes = e->value_len + SPILL_OVERHEAD;
	char dir[PATH_MAX], tmp[PATH_MAX], path[PATH_MAX];
	uint8_t hb[MEMD_KV_HEADER_BYTES], tag[TAG_BYTES];
	struct wire_kv_header h = {
		.magic = MEMD_KV_MAGIC,
		.tenant_id = t->id,
		.generation = e->generation,
		.value_len = (uint32_t)e->value_len,
		.chunk = 0,
		.nchunks = (uint16_t)e->nchunks,
		.checksum = e->checksum,
	};
	crypto_generichash_state st;
	int fd, r;

	if (file_bytes > kv->o.spill_bytes)
		return -EFBIG;
	if ((r = kvs_spill_path(kv, t->id, NULL, false, dir, sizeof(dir))) ||
	    (r = kvs_spill_path(kv, t->id, e->key, true, tmp, sizeof(tmp))) ||
	    (r = kvs_spill_path(kv, t->id, e->key, false, path, sizeof(path))))
		return r;
	spill_trim(kv, file_bytes);
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	memcpy(h.key, e->key, MEMD_KV_KEY_BYTES);
	wire_kv_header_encode(&h, hb);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
	crypto_generichash_update(&st, hb, sizeof(hb));
	r = write_all(fd, hb, sizeof(hb));
	for (uint32_t i = 0; r == 0 && i < e->nchunks; i++) {
		const uint8_t *p =
			kvs_chunk_block(&e->chunks[i]) + MEMD_KV_HEADER_BYTES;
		uint64_t part = kvs_chunk_part(kv, e->value_len, i);

		crypto_generichash_update(&st, p, part);
		r = write_all(fd, p, part);
	}
	if (r == 0) {
		uint8_t btag[TAG_BYTES];

		tag_final(&st, tag);
		spill_bind_tag(t, hb, tag, btag);
		r = write_all(fd, tag, sizeof(tag));
		if (r == 0)
			r = write_all(fd, btag, sizeof(btag));
	}
	if (r == 0 && fsync(fd))
		r = -errno;
	if (close(fd) && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path))
		r = -errno;
	if (r) {
		unlink(tmp);
		return r;
	}
	fsync_dir(dir); /* the rename is done; a failed sync risks only it */
	spill_append(kv, e, file_bytes);
	return 0;
}

/*
 * Loads a spilled entry (mem NONE) back into fresh blocks with a new
 * generation. -ENOENT when the file is gone or fails verification (it is
 * deleted), -ENOSPC when no room can be made, other -errno from I/O.
 */
int kvs_entry_load(struct memd_kv *kv, struct kv_entry *e, uint64_t now_ms)
{
	struct kv_tenant *t = e->t;
	char path[PATH_MAX];
	uint8_t hb[MEMD_KV_HEADER_BYTES], tag[TAG_BYTES], want[TAG_BYTES];
	struct wire_kv_header h;
	crypto_generichash_state st;
	struct stat sb;
	uint64_t gen;
	int fd, r;

	if ((r = kvs_spill_path(kv, t->id, e->key, false, path, sizeof(path))))
		return r;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		kvs_spill_forget(kv, e, false);
		return -ENOENT;
	}
	r = fstat(fd, &sb) ? -errno : pread_all(fd, hb, sizeof(hb), 0);
	if (r == 0) {
		wire_kv_header_decode(hb, &h);
		if (h.magic != MEMD_KV_MAGIC || h.tenant_id != t->id ||
		    memcmp(h.key, e->key, MEMD_KV_KEY_BYTES) || h.chunk != 0 ||
		    h.value_len == 0 || h.value_len > kv->o.value_max_bytes ||
		    (uint64_t)sb.st_size != h.value_len + SPILL_OVERHEAD)
			r = -EBADMSG;
	}
	if (r)
		goto bad_file;
	e->busy = true; /* evictions below may trim its spill file */
	r = kvs_entry_alloc_blocks(kv, e, h.value_len, now_ms, false);
	if (r) {
		e->busy = false;
		close(fd);
		return r;
	}
	crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
	crypto_generichash_update(&st, hb, sizeof(hb));
	for (uint32_t i = 0; r == 0 && i < e->nchunks; i++) {
		uint8_t *p =
			kvs_chunk_block(&e->chunks[i]) + MEMD_KV_HEADER_BYTES;
		uint64_t part = kvs_chunk_part(kv, h.value_len, i);

		r = pread_all(fd, p, part,
			      MEMD_KV_HEADER_BYTES +
				      (uint64_t)i * kv->payload_max);
		crypto_generichash_update(&st, p, part);
	}
	if (r == 0)
		r = pread_all(fd, tag, sizeof(tag),
			      MEMD_KV_HEADER_BYTES + h.value_len);
	tag_final(&st, want);
	if (r == 0 && sodium_memcmp(tag, want, sizeof(tag)))
		r = -EBADMSG;
	if (r == 0) { /* another pool's or tenant's file is never served */
		uint8_t btag[TAG_BYTES];

		r = pread_all(fd, btag, sizeof(btag),
			      MEMD_KV_HEADER_BYTES + h.value_len + TAG_BYTES);
		spill_bind_tag(t, hb, tag, want);
		if (r == 0 && sodium_memcmp(btag, want, sizeof(btag)))
			r = -EBADMSG;
	}
	e->busy = false;
	if (r) {
		kvs_entry_free_blocks(e);
		goto bad_file;
	}
	close(fd);
	gen = kvs_next_generation(kv);
	for (uint32_t i = 0; i < e->nchunks; i++) {
		struct wire_kv_header ch = h;

		ch.generation = gen;
		ch.chunk = (uint16_t)i;
		ch.nchunks = (uint16_t)e->nchunks;
		wire_kv_header_encode(&ch, kvs_chunk_block(&e->chunks[i]));
	}
	e->mem = MEM_COMMITTED;
	e->generation = gen;
	e->value_len = h.value_len;
	e->checksum = h.checksum;
	if (e->queue == Q_GHOST)
		kvs_queue_remove(e);
	e->to_main = true; /* asked for again after its eviction */
	kvs_queue_committed(kv, e);
	t->st.reloads++;
	return 0;

bad_file:
	close(fd);
	/* corrupt or unreadable: never served, so no reason to keep it */
	if (e->spilled)
		kvs_spill_forget(kv, e, true);
	return -ENOENT;
}

/* Whether e's spill file carries t's binding (0), another (-EBADMSG), or
 * cannot be read now (-errno). */
int kvs_spill_check_bind(struct memd_kv *kv, struct kv_entry *e)
{
	uint8_t hb[MEMD_KV_HEADER_BYTES], tags[2 * TAG_BYTES], want[TAG_BYTES];
	char path[PATH_MAX];
	uint64_t vlen;
	int fd, r;

	if ((r = kvs_spill_path(kv, e->t->id, e->key, false, path,
				sizeof(path))))
		return r;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -EBADMSG : -errno;
	vlen = e->spill_file_bytes - SPILL_OVERHEAD;
	r = pread_all(fd, hb, sizeof(hb), 0);
	if (r == 0)
		r = pread_all(fd, tags, sizeof(tags),
			      MEMD_KV_HEADER_BYTES + vlen);
	close(fd);
	if (r == -EIO)
		r = -EBADMSG; /* shorter than indexed */
	if (r)
		return r;
	spill_bind_tag(e->t, hb, tags, want);
	return sodium_memcmp(tags + TAG_BYTES, want, TAG_BYTES) ? -EBADMSG : 0;
}

/* ---- warm restart ---- */

struct scan_file {
	uint32_t tenant;
	uint8_t key[MEMD_KV_KEY_BYTES];
	uint64_t bytes;
	struct timespec mtime;
};

static int scan_file_cmp(const void *a, const void *b)
{
	const struct scan_file *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return 0;
}

/* Verifies one spill file: 0 (valid, *bytes), -EBADMSG, or -errno. */
static int scan_verify(const struct memd_kv *kv, int dirfd, const char *name,
		       uint32_t tenant, const uint8_t *key, uint8_t *buf,
		       size_t bufsize, struct scan_file *f)
{
	uint8_t hb[MEMD_KV_HEADER_BYTES], tag[TAG_BYTES], want[TAG_BYTES];
	struct wire_kv_header h;
	crypto_generichash_state st;
	struct stat sb;
	uint64_t off = 0, left;
	int fd, r;

	memset(want, 0, sizeof(want));

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ELOOP ? -EBADMSG : -errno;
	r = fstat(fd, &sb) ? -errno : 0;
	if (r == 0 &&
	    (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < SPILL_OVERHEAD + 1))
		r = -EBADMSG;
	if (r == 0)
		r = pread_all(fd, hb, sizeof(hb), 0);
	if (r == 0) {
		wire_kv_header_decode(hb, &h);
		if (h.magic != MEMD_KV_MAGIC || h.tenant_id != tenant ||
		    memcmp(h.key, key, MEMD_KV_KEY_BYTES) || h.chunk != 0 ||
		    h.value_len == 0 || h.value_len > kv->o.value_max_bytes ||
		    (uint64_t)sb.st_size != h.value_len + SPILL_OVERHEAD)
			r = -EBADMSG;
	}
	if (r == 0) {
		crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
		crypto_generichash_update(&st, hb, sizeof(hb));
		off = MEMD_KV_HEADER_BYTES;
		left = h.value_len;
		while (r == 0 && left) {
			size_t n = left < bufsize ? (size_t)left : bufsize;

			r = pread_all(fd, buf, n, off);
			crypto_generichash_update(&st, buf, n);
			off += n;
			left -= n;
		}
		tag_final(&st, want);
	}
	if (r == 0)
		r = pread_all(fd, tag, sizeof(tag), off);
	if (r == 0 && sodium_memcmp(tag, want, sizeof(tag)))
		r = -EBADMSG;
	if (r == -EIO) /* short: the file changed size under us */
		r = -EBADMSG;
	close(fd);
	if (r == 0) {
		f->tenant = tenant;
		memcpy(f->key, key, MEMD_KV_KEY_BYTES);
		f->bytes = (uint64_t)sb.st_size;
		f->mtime = sb.st_mtim;
	}
	return r;
}

static bool parse_tenant(const char *s, uint32_t *out)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Scans one tenant directory, appending valid files to *files. */
static int scan_tenant_dir(struct memd_kv *kv, int topfd, const char *name,
			   uint32_t tenant, struct scan_file **files,
			   size_t *nfiles, size_t *cap, uint8_t *buf,
			   size_t bufsize, struct memd_kv_scan_result *res)
{
	int fd = openat(topfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *d;
	DIR *dir;
	int r = 0;

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		r = -errno;
		close(fd);
		return r;
	}
	while ((d = readdir(dir))) {
		uint8_t key[MEMD_KV_KEY_BYTES];
		struct scan_file f;
		int v;

		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (d->d_type == DT_DIR)
			continue;
		if (!key_unhex(d->d_name, key)) {
			/* a temp file of a spill cut short, or a stranger */
			if (unlinkat(fd, d->d_name, 0) == 0)
				res->deleted++;
			continue;
		}
		v = scan_verify(kv, fd, d->d_name, tenant, key, buf, bufsize,
				&f);
		if (v == -EBADMSG) {
			if (unlinkat(fd, d->d_name, 0) == 0)
				res->deleted++;
			continue;
		}
		if (v)
			continue; /* unreadable now (EMFILE...): left alone */
		if (*nfiles == *cap) {
			size_t c = *cap ? *cap * 2 : 64;
			struct scan_file *p = realloc(*files, c * sizeof(*p));

			if (!p) {
				r = -ENOMEM;
				break;
			}
			*files = p;
			*cap = c;
		}
		(*files)[(*nfiles)++] = f;
	}
	closedir(dir);
	return r;
}

int memd_kv_scan_spill(struct memd_kv *kv, struct memd_kv_scan_result *res)
{
	struct memd_kv_scan_result local;
	struct scan_file *files = NULL;
	size_t nfiles = 0, cap = 0;
	const size_t bufsize = 1u << 20;
	uint8_t *buf;
	struct dirent *d;
	DIR *top;
	int r = 0;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	if (!kv)
		return -EINVAL;
	if (!kv->spill_dir)
		return 0;
	buf = malloc(bufsize);
	if (!buf)
		return -ENOMEM;
	pthread_mutex_lock(&kv->lock);
	kv->spill_membership = spill_membership_read(kv);
	res->membership = kv->spill_membership;
	top = opendir(kv->spill_dir);
	if (!top) {
		r = -errno;
		goto out;
	}
	while (r == 0 && (d = readdir(top))) {
		uint32_t tenant;

		if (d->d_type != DT_DIR && d->d_type != DT_UNKNOWN)
			continue;
		if (!parse_tenant(d->d_name, &tenant))
			continue;
		r = scan_tenant_dir(kv, dirfd(top), d->d_name, tenant, &files,
				    &nfiles, &cap, buf, bufsize, res);
		if (r == -ENOTDIR)
			r = 0;
	}
	closedir(top);
	if (r)
		goto out;
	if (nfiles) /* qsort(NULL, 0, ...) is undefined behaviour */
		qsort(files, nfiles, sizeof(*files), scan_file_cmp);
	for (size_t i = 0; i < nfiles; i++) {
		struct kv_tenant *t = kvs_tenant_get(kv, files[i].tenant);
		struct kv_entry *e;

		if (!t) {
			r = -ENOMEM;
			break;
		}
		e = kvs_index_find(kv, t, files[i].key);
		if (e && e->spilled)
			continue;
		if (!e && !(e = kvs_entry_new(kv, t, files[i].key))) {
			r = -ENOMEM;
			break;
		}
		spill_append(kv, e, files[i].bytes);
		res->files++;
		res->bytes += files[i].bytes;
	}
	if (r == 0) {
		uint64_t before = kv->spill_used;

		res->dropped = spill_trim(kv, 0);
		res->files -= res->dropped;
		res->bytes -= before - kv->spill_used;
	}
out:
	pthread_mutex_unlock(&kv->lock);
	free(files);
	free(buf);
	return r;
}

uint64_t memd_kv_spill_membership(struct memd_kv *kv)
{
	return TP_LOCKED_READ(&kv->lock, kv->spill_membership);
}

int memd_kv_spill_membership_set(struct memd_kv *kv, uint64_t membership)
{
	int r = 0;

	if (!kv)
		return -EINVAL;
	if (!kv->spill_dir)
		return 0;
	pthread_mutex_lock(&kv->lock);
	if (membership != kv->spill_membership) {
		/* whatever happens, it no longer names what is on disk
		 * (a failed write may have left the old file: that one is
		 * older than membership, so names no later list) */
		kv->spill_membership = membership;
		r = spill_membership_write(kv, membership);
	}
	pthread_mutex_unlock(&kv->lock);
	return r;
}
