/* SPDX-License-Identifier: MIT */
/*
 * fabric/auth.h - the pool's cryptography (docs/cluster.md,
 * "Authentication"), all of it through libsodium: no hand-written
 * primitives.
 *
 * Keys are 32 bytes. Who holds what:
 *   tenant key   auth_tenant_key(secret): the registry stores it, the
 *                tenant derives it from its secret; the secret itself
 *                never leaves the tenant's host.
 *   cluster keys auth_cluster_keys(cluster secret): admin (poolctl's
 *                principal "@admin"), donor (principal "@donor"), ticket
 *                (MACs grant tickets), pass (seals donor passes). Every
 *                memd of a pool and every operator holds the cluster
 *                secret.
 *   pass key     random per pass: the registry gives a tenant session a
 *                donor pass (sealed with the cluster pass key, opaque to
 *                the client) and the pass key (sealed with the session
 *                key); the client proves it holds the pass key to donors.
 *
 * Proofs are HMAC-SHA-256 (crypto_auth_hmacsha256) over a transcript that
 * names the direction, the principal, both nonces and memd's epoch and
 * session id, so a proof is good for one connection only: a replayed
 * AUTH_PROOF meets a fresh server nonce and fails.
 *
 * Pure functions except auth_random (the kernel's CSPRNG) and
 * auth_read_secret_file; safe from any thread after auth_init().
 */
#ifndef TP_FABRIC_AUTH_H
#define TP_FABRIC_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fabric/wire.h"

#define AUTH_KEY_LEN 32
#define AUTH_SECRET_MIN 16   /* bytes a secret file must hold, at least */
#define AUTH_SECRET_MAX 1024 /* and at most */

struct auth_cluster_keys {
	uint8_t admin[AUTH_KEY_LEN];
	uint8_t donor[AUTH_KEY_LEN];
	uint8_t ticket[AUTH_KEY_LEN];
	uint8_t pass[AUTH_KEY_LEN];
};

/* Initializes libsodium (idempotent, thread-safe). 0 or -EIO. */
int auth_init(void);

/* len bytes from the kernel's CSPRNG. */
void auth_random(void *buf, size_t len);

/*
 * Reads a secret file: its bytes minus one trailing newline (so `openssl
 * rand -hex 32 > f` and `head -c 32 /dev/urandom > f` both work). The file
 * must be a regular file not readable or writable by group or others
 * (like ssh keys), named directly (a symbolic link is refused, so whoever
 * can write a directory on the way cannot point it at another file).
 * Returns the secret's length, or
 *   -ENOENT / -EACCES / -EISDIR / -errno   cannot open or read it
 *   -ELOOP    path is a symbolic link
 *   -EPERM    its mode lets group or others read, write or run it
 *   -EINVAL   not a regular file, or (after the newline is stripped)
 *             shorter than AUTH_SECRET_MIN or longer than AUTH_SECRET_MAX
 * with err (may be NULL) naming the file and the problem, never its bytes.
 * secret has room for AUTH_SECRET_MAX bytes; it is wiped on failure.
 */
int auth_read_secret_file(const char *path, uint8_t *secret, char *err,
			  size_t errlen);

/* The tenant key of a tenant secret (BLAKE2b, keyed by a fixed label;
 * fabric/auth.c gives the exact construction of every key and MAC). */
void auth_tenant_key(const uint8_t *secret, size_t len,
		     uint8_t key[AUTH_KEY_LEN]);

/* The cluster keys of a cluster secret (one BLAKE2b per label). */
void auth_cluster_keys(const uint8_t *secret, size_t len,
		       struct auth_cluster_keys *k);

/*
 * The client's and the server's proofs for one handshake. principal is
 * the AUTH principal, session_id and epoch those of HELLO_OK; the
 * directions use different labels, so one is never the other.
 */
void auth_client_proof(const uint8_t key[AUTH_KEY_LEN], const char *principal,
		       uint64_t session_id, uint64_t epoch,
		       const uint8_t cnonce[WIRE_NONCE_LEN],
		       const uint8_t snonce[WIRE_NONCE_LEN],
		       uint8_t mac[WIRE_MAC_LEN]);
void auth_server_proof(const uint8_t key[AUTH_KEY_LEN], const char *principal,
		       uint64_t session_id, uint64_t epoch,
		       const uint8_t cnonce[WIRE_NONCE_LEN],
		       const uint8_t snonce[WIRE_NONCE_LEN],
		       uint8_t mac[WIRE_MAC_LEN]);
/* Constant-time comparison of two MACs. */
bool auth_mac_equal(const uint8_t a[WIRE_MAC_LEN],
		    const uint8_t b[WIRE_MAC_LEN]);

/* The session key both ends derive after a handshake (for sealing keys
 * sent over that connection: the pass key, a new tenant's key). */
void auth_session_key(const uint8_t key[AUTH_KEY_LEN], const char *principal,
		      const uint8_t cnonce[WIRE_NONCE_LEN],
		      const uint8_t snonce[WIRE_NONCE_LEN],
		      uint8_t out[AUTH_KEY_LEN]);

/*
 * Authenticated encryption (crypto_secretbox, random nonce in front):
 * auth_seal writes nonce || box of len bytes to out (AUTH_SEAL_OVERHEAD +
 * len bytes) and returns that length, or -ENOSPC (cap too small, or the
 * result would not fit an int); in and out must not overlap. auth_open
 * returns the plaintext length, or -EBADMSG (wrong key, tampered, too
 * short) or -ENOSPC (cap too small); out is written only when the box is
 * authentic.
 */
#define AUTH_SEAL_OVERHEAD 40 /* 24 nonce + 16 MAC */
int auth_seal(const uint8_t key[AUTH_KEY_LEN], const void *in, size_t len,
	      uint8_t *out, size_t cap);
int auth_open(const uint8_t key[AUTH_KEY_LEN], const uint8_t *in, size_t len,
	      void *out, size_t cap);

/*
 * A donor pass: lets a tenant session open sessions on donors until
 * expires_ms (registry's CLOCK_REALTIME, ms), proving it holds key.
 * Sealed with the cluster pass key into at most WIRE_PASS_MAX bytes.
 */
#define AUTH_IDENT_LEN 16
struct auth_pass {
	uint32_t tenant_id;
	char tenant[WIRE_NAME_MAX];
	uint64_t registry_epoch;
	uint64_t expires_ms;
	uint8_t key[AUTH_KEY_LEN];
	uint8_t ident[AUTH_IDENT_LEN]; /* auth_tenant_ident of its key */
};

/*
 * A tenant's identity, safe to hand to donors: a one-way function of its
 * key (another secret, another identity, whatever its name and id).
 * Donors bind the tenant's spill files to it (docs/kv.md).
 */
void auth_tenant_ident(const uint8_t key[AUTH_KEY_LEN],
		       uint8_t ident[AUTH_IDENT_LEN]);
/* Returns the sealed length (at most WIRE_PASS_MAX), or -EINVAL (tenant
 * empty or not NUL-terminated inside its array) or -ENOSPC (cap). */
int auth_pass_seal(const uint8_t pass_key[AUTH_KEY_LEN],
		   const struct auth_pass *p, uint8_t *out, size_t cap);
/* 0, or -EBADMSG (not sealed with this key, tampered, malformed; *p is
 * then zeroed). Does not check expiry: the caller compares expires_ms with
 * its clock. */
int auth_pass_open(const uint8_t pass_key[AUTH_KEY_LEN], const uint8_t *in,
		   size_t len, struct auth_pass *p);

/* Sets t->mac over the ticket's other fields (their wire encoding). */
void auth_ticket_sign(const uint8_t ticket_key[AUTH_KEY_LEN],
		      struct wire_ticket *t);
/* True when t->mac is right for t's fields (constant time). */
bool auth_ticket_verify(const uint8_t ticket_key[AUTH_KEY_LEN],
			const struct wire_ticket *t);

/* Lowercase hex of len bytes into out (2 * len + 1); and back: returns the
 * byte count or -EINVAL (odd length, not hex, over cap). */
void auth_hex(const uint8_t *in, size_t len, char *out);
int auth_unhex(const char *in, uint8_t *out, size_t cap);

#endif
