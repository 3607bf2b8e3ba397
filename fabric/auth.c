// SPDX-License-Identifier: MIT
/*
 * fabric/auth.c - the pool's cryptography over libsodium (docs/cluster.md,
 * "Principals and keys"): key derivation, handshake proofs, sealing, donor
 * passes, ticket MACs and the secret files everything starts from.
 *
 * Threads: none of its own. Every function but auth_random and
 * auth_read_secret_file is pure; all are safe from any thread once
 * auth_init() has run. No global state.
 *
 * Primitives (all libsodium, nothing hand-written):
 *   BLAKE2b-256  crypto_generichash, 32-byte output, keyed       key derivation
 *   HMAC-SHA-256 crypto_auth_hmacsha256, 32-byte key and MAC     proofs, tickets
 *   XSalsa20-Poly1305 crypto_secretbox_easy                      sealing
 *
 * Constructions, exactly (H(key, msg) = BLAKE2b-256 keyed with a 32-byte
 * key, H(-, msg) unkeyed; "..." are ASCII bytes without a NUL; LE64 is an
 * 8-byte little-endian integer; || concatenates):
 *
 *   tenant key   = H(H(-, "tidepool tenant key v1"), secret)
 *   cluster root = H(H(-, "tidepool cluster key v1"), secret)
 *   cluster key  = H(cluster root, label), label one of "admin", "donor",
 *                  "ticket", "pass"
 *
 *   The label keys differ, so a tenant secret equal to the cluster secret
 *   still gives unrelated keys; the secret is hashed rather than used as a
 *   BLAKE2b key because a secret may be up to AUTH_SECRET_MAX bytes.
 *
 *   A transcript field is encoded so that no two different inputs give the
 *   same bytes:  label     u8 length || bytes
 *                principal u16 LE length || bytes (no NUL)
 *                integers  LE64;  nonces 32 bytes each
 *   client proof = HMAC(K, "client" label || principal || LE64 session_id
 *                  || LE64 epoch || cnonce || snonce)
 *   server proof = the same with the label "server"
 *   session key  = HMAC(K, "session" label || principal || cnonce || snonce)
 *
 *   sealed       = nonce[24] || crypto_secretbox_easy(plain, nonce, key),
 *                  the nonce random for every seal (auth_random)
 *   pass plain   = tenant_id u32 LE || tenant length u8 (1..63) || tenant
 *                  bytes (no NUL) || registry_epoch LE64 || expires_ms LE64
 *                  || key[32]; sealed with the cluster pass key
 *   ticket mac   = HMAC(ticket key, wire_ticket_body(ticket)), 48 bytes
 *
 * Invariants: every buffer that held a secret, key or plaintext pass is
 * wiped (sodium_memzero) before it goes out of scope; a function that fails
 * leaves no partial secret in its output.
 */
#include "fabric/auth.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

_Static_assert(AUTH_SEAL_OVERHEAD ==
		       crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES,
	       "AUTH_SEAL_OVERHEAD is secretbox's nonce plus its MAC");
_Static_assert(AUTH_KEY_LEN == crypto_secretbox_KEYBYTES &&
		       AUTH_KEY_LEN == crypto_auth_hmacsha256_KEYBYTES,
	       "one key length for sealing and MACs");
_Static_assert(AUTH_KEY_LEN >= crypto_generichash_KEYBYTES_MIN &&
		       AUTH_KEY_LEN <= crypto_generichash_KEYBYTES_MAX &&
		       AUTH_KEY_LEN >= crypto_generichash_BYTES_MIN,
	       "BLAKE2b takes and makes 32-byte keys");
_Static_assert(WIRE_MAC_LEN == crypto_auth_hmacsha256_BYTES,
	       "a wire MAC is one HMAC-SHA-256");
_Static_assert(WIRE_NAME_MAX - 1 <= UINT8_MAX,
	       "a pass's tenant length is a u8");

#define TENANT_LABEL "tidepool tenant key v1"
#define CLUSTER_LABEL "tidepool cluster key v1"

/* The pass's plaintext: 53 fixed bytes plus the tenant name. */
#define PASS_FIXED (4 + 1 + 8 + 8 + AUTH_KEY_LEN + AUTH_IDENT_LEN)
#define PASS_PLAIN_MIN (PASS_FIXED + 1)
#define PASS_PLAIN_MAX (PASS_FIXED + WIRE_NAME_MAX - 1)
_Static_assert(PASS_PLAIN_MAX + AUTH_SEAL_OVERHEAD <= WIRE_PASS_MAX,
	       "a sealed pass must fit WIRE_PASS_MAX");

static void st32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void st64(uint8_t *p, uint64_t v)
{
	st32(p, (uint32_t)v);
	st32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t ld64(const uint8_t *p)
{
	return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

int auth_init(void)
{
	return sodium_init() < 0 ? -EIO : 0;
}

void auth_random(void *buf, size_t len)
{
	randombytes_buf(buf, len);
}

/* --- secret files --- */

__attribute__((format(printf, 3, 4))) static void
set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int auth_read_secret_file(const char *path, uint8_t *secret, char *err,
			  size_t errlen)
{
	/* Room for the largest secret, a "\r\n" and one byte more, so a file
	 * that grows after fstat still reads as too long. */
	uint8_t buf[AUTH_SECRET_MAX + 3];
	size_t n = 0;
	struct stat st;
	unsigned int mode;
	int fd, rc;

	if (err && errlen)
		err[0] = '\0';
	/* O_NOFOLLOW: a secret is named directly, so nobody who can write a
	 * directory on the way can swap in a link to another file.
	 * O_NONBLOCK: a FIFO must not hang us before fstat refuses it. */
	fd = open(path,
		  O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		if (rc == -ELOOP)
			set_err(err, errlen,
				"%s: is a symbolic link; name the file itself",
				path);
		else
			set_err(err, errlen, "%s: %s", path, strerror(-rc));
		goto wipe;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		set_err(err, errlen, "%s: %s", path, strerror(-rc));
		goto close_fd;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = -EISDIR;
		set_err(err, errlen, "%s: is a directory", path);
		goto close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		set_err(err, errlen, "%s: not a regular file", path);
		goto close_fd;
	}
	mode = st.st_mode & 07777;
	if (mode & 077) {
		rc = -EPERM;
		set_err(err, errlen,
			"%s: mode 0%03o lets group/others %s it; chmod 600 %s",
			path, mode,
			mode & 044   ? "read"
			: mode & 022 ? "write"
				     : "access",
			path);
		goto close_fd;
	}
	if (st.st_size > (off_t)sizeof(buf) - 1) {
		rc = -EINVAL;
		set_err(err, errlen, "%s: too long (%lld bytes; at most %d)",
			path, (long long)st.st_size, AUTH_SECRET_MAX);
		goto close_fd;
	}
	while (n < sizeof(buf)) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			set_err(err, errlen, "%s: %s", path, strerror(-rc));
			goto close_fd;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n && buf[n - 1] == '\n') {
		n--;
		if (n && buf[n - 1] == '\r')
			n--;
	}
	if (n > AUTH_SECRET_MAX) {
		rc = -EINVAL;
		set_err(err, errlen, "%s: too long (%zu bytes; at most %d)",
			path, n, AUTH_SECRET_MAX);
		goto close_fd;
	}
	if (n < AUTH_SECRET_MIN) {
		rc = -EINVAL;
		set_err(err, errlen, "%s: too short (%zu bytes; at least %d)",
			path, n, AUTH_SECRET_MIN);
		goto close_fd;
	}
	memcpy(secret, buf, n);
	rc = (int)n;
close_fd:
	close(fd);
wipe:
	sodium_memzero(buf, sizeof(buf));
	if (rc < 0)
		sodium_memzero(secret, AUTH_SECRET_MAX);
	return rc;
}

/* --- key derivation --- */

/* H(H(-, label), msg): BLAKE2b-256 of msg keyed with the hash of label. */
static void derive(const char *label, const uint8_t *msg, size_t len,
		   uint8_t out[AUTH_KEY_LEN])
{
	uint8_t lk[AUTH_KEY_LEN];

	crypto_generichash(lk, sizeof(lk), (const uint8_t *)label,
			   strlen(label), NULL, 0);
	crypto_generichash(out, AUTH_KEY_LEN, msg, len, lk, sizeof(lk));
	sodium_memzero(lk, sizeof(lk));
}

void auth_tenant_key(const uint8_t *secret, size_t len,
		     uint8_t key[AUTH_KEY_LEN])
{
	derive(TENANT_LABEL, secret, len, key);
}

void auth_tenant_ident(const uint8_t key[AUTH_KEY_LEN],
		       uint8_t ident[AUTH_IDENT_LEN])
{
	static const char label[] = "tidepool tenant ident v1";

	crypto_generichash(ident, AUTH_IDENT_LEN, (const uint8_t *)label,
			   sizeof(label) - 1, key, AUTH_KEY_LEN);
}

static void cluster_key(const uint8_t root[AUTH_KEY_LEN], const char *label,
			uint8_t out[AUTH_KEY_LEN])
{
	crypto_generichash(out, AUTH_KEY_LEN, (const uint8_t *)label,
			   strlen(label), root, AUTH_KEY_LEN);
}

void auth_cluster_keys(const uint8_t *secret, size_t len,
		       struct auth_cluster_keys *k)
{
	uint8_t root[AUTH_KEY_LEN];

	derive(CLUSTER_LABEL, secret, len, root);
	cluster_key(root, "admin", k->admin);
	cluster_key(root, "donor", k->donor);
	cluster_key(root, "ticket", k->ticket);
	cluster_key(root, "pass", k->pass);
	sodium_memzero(root, sizeof(root));
}

/* --- handshake transcripts --- */

static void tr_label(crypto_auth_hmacsha256_state *st, const char *label)
{
	uint8_t n = (uint8_t)strlen(label);

	crypto_auth_hmacsha256_update(st, &n, 1);
	crypto_auth_hmacsha256_update(st, (const uint8_t *)label, n);
}

static void tr_principal(crypto_auth_hmacsha256_state *st,
			 const char *principal)
{
	size_t n = strlen(principal);
	uint8_t b[2];

	/* Every principal has come through the wire codec, which bounds it
	 * by WIRE_NAME_MAX; the u16 length is exact for any of them. */
	assert(n < WIRE_NAME_MAX);
	b[0] = (uint8_t)n;
	b[1] = (uint8_t)(n >> 8);
	crypto_auth_hmacsha256_update(st, b, 2);
	crypto_auth_hmacsha256_update(st, (const uint8_t *)principal, n);
}

static void tr_u64(crypto_auth_hmacsha256_state *st, uint64_t v)
{
	uint8_t b[8];

	st64(b, v);
	crypto_auth_hmacsha256_update(st, b, 8);
}

static void proof(const char *dir, const uint8_t key[AUTH_KEY_LEN],
		  const char *principal, uint64_t session_id, uint64_t epoch,
		  const uint8_t cnonce[WIRE_NONCE_LEN],
		  const uint8_t snonce[WIRE_NONCE_LEN],
		  uint8_t mac[WIRE_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key, AUTH_KEY_LEN);
	tr_label(&st, dir);
	tr_principal(&st, principal);
	tr_u64(&st, session_id);
	tr_u64(&st, epoch);
	crypto_auth_hmacsha256_update(&st, cnonce, WIRE_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, snonce, WIRE_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

void auth_client_proof(const uint8_t key[AUTH_KEY_LEN], const char *principal,
		       uint64_t session_id, uint64_t epoch,
		       const uint8_t cnonce[WIRE_NONCE_LEN],
		       const uint8_t snonce[WIRE_NONCE_LEN],
		       uint8_t mac[WIRE_MAC_LEN])
{
	proof("client", key, principal, session_id, epoch, cnonce, snonce, mac);
}

void auth_server_proof(const uint8_t key[AUTH_KEY_LEN], const char *principal,
		       uint64_t session_id, uint64_t epoch,
		       const uint8_t cnonce[WIRE_NONCE_LEN],
		       const uint8_t snonce[WIRE_NONCE_LEN],
		       uint8_t mac[WIRE_MAC_LEN])
{
	proof("server", key, principal, session_id, epoch, cnonce, snonce, mac);
}

bool auth_mac_equal(const uint8_t a[WIRE_MAC_LEN],
		    const uint8_t b[WIRE_MAC_LEN])
{
	return sodium_memcmp(a, b, WIRE_MAC_LEN) == 0;
}

void auth_session_key(const uint8_t key[AUTH_KEY_LEN], const char *principal,
		      const uint8_t cnonce[WIRE_NONCE_LEN],
		      const uint8_t snonce[WIRE_NONCE_LEN],
		      uint8_t out[AUTH_KEY_LEN])
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key, AUTH_KEY_LEN);
	tr_label(&st, "session");
	tr_principal(&st, principal);
	crypto_auth_hmacsha256_update(&st, cnonce, WIRE_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, snonce, WIRE_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

/* --- sealing --- */

int auth_seal(const uint8_t key[AUTH_KEY_LEN], const void *in, size_t len,
	      uint8_t *out, size_t cap)
{
	if (len > (size_t)INT_MAX - AUTH_SEAL_OVERHEAD ||
	    len > crypto_secretbox_MESSAGEBYTES_MAX ||
	    cap < len + AUTH_SEAL_OVERHEAD)
		return -ENOSPC;
	randombytes_buf(out, crypto_secretbox_NONCEBYTES);
	crypto_secretbox_easy(out + crypto_secretbox_NONCEBYTES, in, len, out,
			      key);
	return (int)(len + AUTH_SEAL_OVERHEAD);
}

int auth_open(const uint8_t key[AUTH_KEY_LEN], const uint8_t *in, size_t len,
	      void *out, size_t cap)
{
	size_t n;

	if (len < AUTH_SEAL_OVERHEAD || len - AUTH_SEAL_OVERHEAD > INT_MAX)
		return -EBADMSG;
	n = len - AUTH_SEAL_OVERHEAD;
	if (n > cap)
		return -ENOSPC;
	/* Verifies the MAC before it writes a byte of out. */
	if (crypto_secretbox_open_easy(out, in + crypto_secretbox_NONCEBYTES,
				       len - crypto_secretbox_NONCEBYTES, in,
				       key) != 0)
		return -EBADMSG;
	return (int)n;
}

/* --- donor passes --- */

int auth_pass_seal(const uint8_t pass_key[AUTH_KEY_LEN],
		   const struct auth_pass *p, uint8_t *out, size_t cap)
{
	uint8_t plain[PASS_PLAIN_MAX];
	size_t n = strnlen(p->tenant, WIRE_NAME_MAX), off = 0;
	int rc;

	if (n == 0 || n >= WIRE_NAME_MAX)
		return -EINVAL;
	if (cap < PASS_FIXED + n + AUTH_SEAL_OVERHEAD)
		return -ENOSPC;
	st32(plain, p->tenant_id);
	off += 4;
	plain[off++] = (uint8_t)n;
	memcpy(plain + off, p->tenant, n);
	off += n;
	st64(plain + off, p->registry_epoch);
	off += 8;
	st64(plain + off, p->expires_ms);
	off += 8;
	memcpy(plain + off, p->key, AUTH_KEY_LEN);
	off += AUTH_KEY_LEN;
	memcpy(plain + off, p->ident, AUTH_IDENT_LEN);
	off += AUTH_IDENT_LEN;
	assert(off == PASS_FIXED + n);
	rc = auth_seal(pass_key, plain, off, out, cap);
	sodium_memzero(plain, sizeof(plain));
	return rc;
}

int auth_pass_open(const uint8_t pass_key[AUTH_KEY_LEN], const uint8_t *in,
		   size_t len, struct auth_pass *p)
{
	uint8_t plain[PASS_PLAIN_MAX];
	size_t n, off = 0;
	int rc;

	memset(p, 0, sizeof(*p));
	if (len < PASS_PLAIN_MIN + AUTH_SEAL_OVERHEAD ||
	    len > PASS_PLAIN_MAX + AUTH_SEAL_OVERHEAD)
		return -EBADMSG;
	rc = auth_open(pass_key, in, len, plain, sizeof(plain));
	if (rc < 0) {
		rc = -EBADMSG;
		goto out;
	}
	n = plain[4];
	if (n == 0 || n >= WIRE_NAME_MAX || (size_t)rc != PASS_FIXED + n ||
	    memchr(plain + 5, '\0', n)) {
		rc = -EBADMSG;
		goto out;
	}
	p->tenant_id = ld32(plain);
	off = 5;
	memcpy(p->tenant, plain + off, n);
	off += n;
	p->registry_epoch = ld64(plain + off);
	off += 8;
	p->expires_ms = ld64(plain + off);
	off += 8;
	memcpy(p->key, plain + off, AUTH_KEY_LEN);
	off += AUTH_KEY_LEN;
	memcpy(p->ident, plain + off, AUTH_IDENT_LEN);
	rc = 0;
out:
	sodium_memzero(plain, sizeof(plain));
	if (rc < 0)
		sodium_memzero(p, sizeof(*p));
	return rc;
}

/* --- tickets --- */

void auth_ticket_sign(const uint8_t ticket_key[AUTH_KEY_LEN],
		      struct wire_ticket *t)
{
	uint8_t body[WIRE_TICKET_BODY_LEN];

	wire_ticket_body(t, body);
	crypto_auth_hmacsha256(t->mac, body, sizeof(body), ticket_key);
}

bool auth_ticket_verify(const uint8_t ticket_key[AUTH_KEY_LEN],
			const struct wire_ticket *t)
{
	uint8_t body[WIRE_TICKET_BODY_LEN];
	uint8_t mac[WIRE_MAC_LEN];

	wire_ticket_body(t, body);
	crypto_auth_hmacsha256(mac, body, sizeof(body), ticket_key);
	return sodium_memcmp(mac, t->mac, WIRE_MAC_LEN) == 0;
}

/* --- hex --- */

void auth_hex(const uint8_t *in, size_t len, char *out)
{
	sodium_bin2hex(out, 2 * len + 1, in, len);
}

int auth_unhex(const char *in, uint8_t *out, size_t cap)
{
	size_t hexlen = strlen(in), n = 0;
	const char *end = NULL;

	/* hex2bin takes uppercase too. It stops at the first non-hex
	 * character, and older libsodium then reports success for the bytes
	 * before it: only a parse that consumed every character counts. */
	if (hexlen % 2 || hexlen / 2 > cap || hexlen / 2 > INT_MAX)
		return -EINVAL;
	if (sodium_hex2bin(out, cap, in, hexlen, NULL, &n, &end) != 0 ||
	    end != in + hexlen || n != hexlen / 2) {
		sodium_memzero(out, hexlen / 2);
		return -EINVAL;
	}
	return (int)n;
}
