// SPDX-License-Identifier: MIT
/*
 * tests/test_auth.c - the pool's cryptography (fabric/auth.c) against the
 * constructions its header comment documents, and the ticket body layout
 * (wire_ticket_body in fabric/wire_lease.c).
 *
 * Single-threaded. The known answers were computed outside this tree with
 * Python's hashlib.blake2b (digest_size=32, key=...) and hmac/sha256 from
 * the documented constructions, so a change to a label, a length prefix or
 * a field order fails here even when both ends of the pool would agree.
 * What has no independent implementation at hand (secretbox) is tested by
 * its properties: round trip, every byte tampered, wrong key, lengths.
 *
 * The secret-file tests share one mkdtemp() directory, made and removed
 * by the runner around them (so it goes even when a test fails in its
 * forked child).
 */
#include "fabric/auth.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* A pass's plaintext without the name: id, name length, registry epoch,
 * expiry, key, tenant identity. */
#define PASS_FIXED_LEN (4 + 1 + 8 + 8 + AUTH_KEY_LEN + AUTH_IDENT_LEN)

/* Independent of auth_unhex: the known answers must not go through the
 * code under test. */
static void hex_to(const char *hex, uint8_t *out, size_t n)
{
	size_t i;

	ck_assert_uint_eq(strlen(hex), 2 * n);
	for (i = 0; i < n; i++) {
		unsigned int b;

		ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &b), 1);
		out[i] = (uint8_t)b;
	}
}

static void assert_bytes_hex(const uint8_t *got, size_t n, const char *hex)
{
	uint8_t want[256];

	ck_assert_uint_le(n, sizeof(want));
	hex_to(hex, want, n);
	ck_assert_mem_eq(got, want, n);
}

static void assert_contains(const char *s, const char *sub)
{
	ck_assert_msg(strstr(s, sub), "\"%s\" does not contain \"%s\"", s, sub);
}

/* --- fixed inputs of the known answers --- */

static const char tenant_secret[] = "tenant secret for alice, 32B+";
static const char cluster_secret[] = "cluster secret: the pool's root key";

/* key[i] = 7i + 1, cnonce[i] = 0x20 + i, snonce[i] = 0x80 + i */
static void fixed_inputs(uint8_t key[AUTH_KEY_LEN], uint8_t cn[WIRE_NONCE_LEN],
			 uint8_t sn[WIRE_NONCE_LEN])
{
	int i;

	for (i = 0; i < AUTH_KEY_LEN; i++)
		key[i] = (uint8_t)(i * 7 + 1);
	for (i = 0; i < WIRE_NONCE_LEN; i++) {
		cn[i] = (uint8_t)(0x20 + i);
		sn[i] = (uint8_t)(0x80 + i);
	}
}

#define SID UINT64_C(0x0102030405060708)
#define EPOCH UINT64_C(0x1112131415161718)

START_TEST(init_is_idempotent)
{
	uint8_t a[32] = { 0 }, b[32] = { 0 }, zero[32] = { 0 };

	ck_assert_int_eq(auth_init(), 0);
	ck_assert_int_eq(auth_init(), 0);
	auth_random(a, sizeof(a));
	auth_random(b, sizeof(b));
	/* 2^-256 chances of a false failure */
	ck_assert_mem_ne(a, zero, sizeof(a));
	ck_assert_mem_ne(a, b, sizeof(a));
}
END_TEST

START_TEST(kat_tenant_key)
{
	uint8_t k[AUTH_KEY_LEN];

	auth_tenant_key((const uint8_t *)tenant_secret, strlen(tenant_secret),
			k);
	assert_bytes_hex(k, sizeof(k),
			 "16ee5bf3939997a383a29ba7da5e43aae0271a6dce72a1ff48bf9"
			 "f655ba5b492");
}
END_TEST

START_TEST(kat_cluster_keys)
{
	/* admin, donor, ticket, pass */
	static const char *const want[] = {
		"7e356b8f45f002bd679ee598ea239d2ebdafd3c8a4cc17b42ccb2"
		"ae40948247a",
		"549db10055058b1af72c2a0004061cab5b8661e4ba675f7805594"
		"3fd03c33f6f",
		"18d11488e8add40f6f453deff1c0b8a87d07ed8709d5a1aba4370"
		"26e94ff8d48",
		"148ac77afe71f06eba7252c0daf0cb1c5fbb3fc437ea4fee41d04"
		"30b4c231e75",
	};
	struct auth_cluster_keys k;
	uint8_t t[AUTH_KEY_LEN];

	auth_cluster_keys((const uint8_t *)cluster_secret,
			  strlen(cluster_secret), &k);
	/* the same secret as a tenant's gives none of them */
	auth_tenant_key((const uint8_t *)cluster_secret, strlen(cluster_secret),
			t);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		const uint8_t *got[] = { k.admin, k.donor, k.ticket, k.pass };

		assert_bytes_hex(got[i], AUTH_KEY_LEN, want[i]);
		ck_assert_mem_ne(t, got[i], AUTH_KEY_LEN);
	}
}
END_TEST

START_TEST(keys_depend_on_every_secret_byte)
{
	uint8_t s[AUTH_SECRET_MAX], k0[AUTH_KEY_LEN], k1[AUTH_KEY_LEN];
	struct auth_cluster_keys c0, c1;
	size_t i;

	for (i = 0; i < sizeof(s); i++)
		s[i] = (uint8_t)(i * 13 + 5);
	auth_tenant_key(s, sizeof(s), k0);
	auth_cluster_keys(s, sizeof(s), &c0);
	for (i = 0; i < sizeof(s); i += 61) {
		s[i] ^= 0x01;
		auth_tenant_key(s, sizeof(s), k1);
		auth_cluster_keys(s, sizeof(s), &c1);
		ck_assert_mem_ne(k0, k1, AUTH_KEY_LEN);
		ck_assert_mem_ne(c0.admin, c1.admin, AUTH_KEY_LEN);
		ck_assert_mem_ne(c0.pass, c1.pass, AUTH_KEY_LEN);
		s[i] ^= 0x01;
	}
	/* a shorter secret is another secret */
	auth_tenant_key(s, sizeof(s) - 1, k1);
	ck_assert_mem_ne(k0, k1, AUTH_KEY_LEN);
}
END_TEST

START_TEST(kat_proofs_and_session_key)
{
	uint8_t key[AUTH_KEY_LEN], cn[WIRE_NONCE_LEN], sn[WIRE_NONCE_LEN];
	uint8_t mac[WIRE_MAC_LEN];

	fixed_inputs(key, cn, sn);
	auth_client_proof(key, "alice", SID, EPOCH, cn, sn, mac);
	assert_bytes_hex(mac, sizeof(mac),
			 "6273f44519992bad2e4f5dd72fa199093a5a744c9f24e74d84398"
			 "885a4259720");
	auth_server_proof(key, "alice", SID, EPOCH, cn, sn, mac);
	assert_bytes_hex(mac, sizeof(mac),
			 "e930dda59d7afd6cc7b0ef2eb3e0c483197be00a5123dbb39a970"
			 "321937ca74b");
	auth_session_key(key, "alice", cn, sn, mac);
	assert_bytes_hex(mac, sizeof(mac),
			 "07f161c371f0a6de5665bdd7bbf9c581c6c2f0d8d87d83b2cd818"
			 "db26bfea7b6");
}
END_TEST

/* The client's proof (server: the server's) of these inputs is not
 * base. */
static void proof_differs(bool server, const uint8_t *key, const char *who,
			  uint64_t sid, uint64_t epoch, const uint8_t *cn,
			  const uint8_t *sn, const uint8_t *base)
{
	uint8_t m[WIRE_MAC_LEN];

	if (server)
		auth_server_proof(key, who, sid, epoch, cn, sn, m);
	else
		auth_client_proof(key, who, sid, epoch, cn, sn, m);
	ck_assert_mem_ne(base, m, WIRE_MAC_LEN);
}

/* Every input of a proof changes it; nothing else does. */
START_TEST(proof_covers_every_field)
{
	static const char *const principals[] = { "alicf", "alic",   "alice1",
						  "",	   "@admin", "Alice" };
	uint8_t key[AUTH_KEY_LEN], cn[WIRE_NONCE_LEN], sn[WIRE_NONCE_LEN];
	uint8_t base[WIRE_MAC_LEN], srv[WIRE_MAC_LEN], m[WIRE_MAC_LEN];
	size_t i;
	int bit;

	fixed_inputs(key, cn, sn);
	auth_client_proof(key, "alice", SID, EPOCH, cn, sn, base);
	auth_client_proof(key, "alice", SID, EPOCH, cn, sn, m);
	ck_assert_mem_eq(base, m, WIRE_MAC_LEN);

	auth_server_proof(key, "alice", SID, EPOCH, cn, sn, srv);
	ck_assert_mem_ne(base, srv, WIRE_MAC_LEN);
	auth_session_key(key, "alice", cn, sn, m);
	ck_assert_mem_ne(base, m, WIRE_MAC_LEN);
	ck_assert_mem_ne(srv, m, WIRE_MAC_LEN);

	for (i = 0; i < ARRAY_SIZE(principals); i++)
		proof_differs(false, key, principals[i], SID, EPOCH, cn, sn,
			      base);
	for (bit = 0; bit < 64; bit++) {
		proof_differs(false, key, "alice", SID ^ (UINT64_C(1) << bit),
			      EPOCH, cn, sn, base);
		proof_differs(false, key, "alice", SID,
			      EPOCH ^ (UINT64_C(1) << bit), cn, sn, base);
	}
	/* session id and epoch are not interchangeable */
	proof_differs(false, key, "alice", EPOCH, SID, cn, sn, base);
	/* each nonce byte, in both proofs */
	for (i = 0; i < WIRE_NONCE_LEN; i++) {
		cn[i] ^= 0x80;
		proof_differs(false, key, "alice", SID, EPOCH, cn, sn, base);
		proof_differs(true, key, "alice", SID, EPOCH, cn, sn, srv);
		cn[i] ^= 0x80;
		sn[i] ^= 0x01;
		proof_differs(false, key, "alice", SID, EPOCH, cn, sn, base);
		proof_differs(true, key, "alice", SID, EPOCH, cn, sn, srv);
		sn[i] ^= 0x01;
	}
	/* nonces swapped */
	proof_differs(false, key, "alice", SID, EPOCH, sn, cn, base);
	for (i = 0; i < AUTH_KEY_LEN; i++) {
		key[i] ^= 0x10;
		proof_differs(false, key, "alice", SID, EPOCH, cn, sn, base);
		key[i] ^= 0x10;
	}
	/* the unchanged inputs again give the same proof */
	auth_client_proof(key, "alice", SID, EPOCH, cn, sn, m);
	ck_assert_mem_eq(base, m, WIRE_MAC_LEN);
}
END_TEST

START_TEST(session_key_covers_every_field)
{
	uint8_t key[AUTH_KEY_LEN], cn[WIRE_NONCE_LEN], sn[WIRE_NONCE_LEN];
	uint8_t base[AUTH_KEY_LEN], m[AUTH_KEY_LEN];
	size_t i;

	fixed_inputs(key, cn, sn);
	auth_session_key(key, "alice", cn, sn, base);
	auth_session_key(key, "bob", cn, sn, m);
	ck_assert_mem_ne(base, m, AUTH_KEY_LEN);
	auth_session_key(key, "alice", sn, cn, m);
	ck_assert_mem_ne(base, m, AUTH_KEY_LEN);
	for (i = 0; i < WIRE_NONCE_LEN; i++) {
		cn[i] ^= 0x04;
		auth_session_key(key, "alice", cn, sn, m);
		ck_assert_mem_ne(base, m, AUTH_KEY_LEN);
		cn[i] ^= 0x04;
		sn[i] ^= 0x40;
		auth_session_key(key, "alice", cn, sn, m);
		ck_assert_mem_ne(base, m, AUTH_KEY_LEN);
		sn[i] ^= 0x40;
	}
	key[31] ^= 1;
	auth_session_key(key, "alice", cn, sn, m);
	ck_assert_mem_ne(base, m, AUTH_KEY_LEN);
}
END_TEST

START_TEST(mac_equal_every_byte)
{
	uint8_t a[WIRE_MAC_LEN], b[WIRE_MAC_LEN];
	size_t i;
	int bit;

	for (i = 0; i < WIRE_MAC_LEN; i++)
		a[i] = (uint8_t)(i * 31 + 7);
	memcpy(b, a, sizeof(b));
	ck_assert(auth_mac_equal(a, b));
	for (i = 0; i < WIRE_MAC_LEN; i++)
		for (bit = 0; bit < 8; bit++) {
			b[i] ^= (uint8_t)(1u << bit);
			ck_assert(!auth_mac_equal(a, b));
			b[i] ^= (uint8_t)(1u << bit);
		}
	ck_assert(auth_mac_equal(a, b));
}
END_TEST

/* --- sealing --- */

static void seal_key(uint8_t key[AUTH_KEY_LEN], uint8_t salt)
{
	int i;

	for (i = 0; i < AUTH_KEY_LEN; i++)
		key[i] = (uint8_t)(i * 11 + salt);
}

START_TEST(seal_open_roundtrip)
{
	static const size_t lens[] = { 0, 1, 31, 32, 33, 200, 4096 };
	uint8_t key[AUTH_KEY_LEN], in[4096], box[4096 + AUTH_SEAL_OVERHEAD];
	uint8_t box2[sizeof(box)], out[4096];
	size_t i, j;

	seal_key(key, 3);
	for (i = 0; i < ARRAY_SIZE(lens); i++) {
		size_t n = lens[i];

		for (j = 0; j < n; j++)
			in[j] = (uint8_t)(j * 17 + n);
		ck_assert_int_eq(auth_seal(key, in, n, box, sizeof(box)),
				 (int)(n + AUTH_SEAL_OVERHEAD));
		/* exactly enough room */
		ck_assert_int_eq(
			auth_seal(key, in, n, box2, n + AUTH_SEAL_OVERHEAD),
			(int)(n + AUTH_SEAL_OVERHEAD));
		/* a fresh nonce every time, so equal plaintexts differ */
		ck_assert_mem_ne(box, box2, 24); /* the nonces */
		memset(out, 0xa5, sizeof(out));
		ck_assert_int_eq(
			auth_open(key, box, n + AUTH_SEAL_OVERHEAD, out, n),
			(int)n);
		ck_assert_mem_eq(out, in, n);
		ck_assert_int_eq(auth_open(key, box2, n + AUTH_SEAL_OVERHEAD,
					   out, sizeof(out)),
				 (int)n);
		ck_assert_mem_eq(out, in, n);
	}
}
END_TEST

START_TEST(seal_tamper_every_byte)
{
	uint8_t key[AUTH_KEY_LEN], in[48], box[48 + AUTH_SEAL_OVERHEAD];
	uint8_t out[64], untouched[64];
	size_t i;
	int n;

	seal_key(key, 9);
	for (i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(0xc0 ^ i);
	n = auth_seal(key, in, sizeof(in), box, sizeof(box));
	ck_assert_int_eq(n, (int)sizeof(box));
	memset(untouched, 0x5a, sizeof(untouched));
	for (i = 0; i < sizeof(box); i++) {
		int bit;

		for (bit = 0; bit < 8; bit += 7) {
			box[i] ^= (uint8_t)(1u << bit);
			memcpy(out, untouched, sizeof(out));
			ck_assert_int_eq(auth_open(key, box, sizeof(box), out,
						   sizeof(out)),
					 -EBADMSG);
			/* nothing of a forgery reaches the caller */
			ck_assert_mem_eq(out, untouched, sizeof(out));
			box[i] ^= (uint8_t)(1u << bit);
		}
	}
	ck_assert_int_eq(auth_open(key, box, sizeof(box), out, sizeof(out)),
			 (int)sizeof(in));
	ck_assert_mem_eq(out, in, sizeof(in));
}
END_TEST

START_TEST(seal_wrong_key_and_lengths)
{
	uint8_t key[AUTH_KEY_LEN], other[AUTH_KEY_LEN], in[20];
	uint8_t box[20 + AUTH_SEAL_OVERHEAD], big[sizeof(box) + 1], out[64];
	size_t i;

	seal_key(key, 1);
	memcpy(other, key, sizeof(other));
	other[17] ^= 0x02;
	memset(in, 'p', sizeof(in));
	ck_assert_int_eq(auth_seal(key, in, sizeof(in), box, sizeof(box)),
			 (int)sizeof(box));
	ck_assert_int_eq(auth_open(other, box, sizeof(box), out, sizeof(out)),
			 -EBADMSG);
	/* every shorter length, and one byte more */
	for (i = 0; i < sizeof(box); i++)
		ck_assert_int_eq(auth_open(key, box, i, out, sizeof(out)),
				 -EBADMSG);
	memcpy(big, box, sizeof(box));
	big[sizeof(box)] = 0;
	ck_assert_int_eq(auth_open(key, big, sizeof(big), out, sizeof(out)),
			 -EBADMSG);
	/* cap one byte short: nothing written */
	ck_assert_int_eq(auth_seal(key, in, sizeof(in), out, sizeof(box) - 1),
			 -ENOSPC);
	ck_assert_int_eq(auth_open(key, box, sizeof(box), out, sizeof(in) - 1),
			 -ENOSPC);
	ck_assert_int_eq(auth_seal(key, in, SIZE_MAX - 8, out, sizeof(out)),
			 -ENOSPC);
}
END_TEST

/* --- donor passes --- */

static void make_pass(struct auth_pass *p, const char *tenant, uint64_t k)
{
	int i;

	memset(p, 0, sizeof(*p));
	p->tenant_id = (uint32_t)(0x0a0b0c0d + k);
	snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
	p->registry_epoch = UINT64_C(0x1122334455667788) + k;
	p->expires_ms = UINT64_C(0x8070605040302010) + k;
	for (i = 0; i < AUTH_KEY_LEN; i++)
		p->key[i] = (uint8_t)(0xf0 - i + k);
}

START_TEST(pass_roundtrip_and_layout)
{
	char tenants[3][WIRE_NAME_MAX];
	uint8_t pk[AUTH_KEY_LEN], sealed[WIRE_PASS_MAX], plain[WIRE_PASS_MAX];
	struct auth_pass p, q;
	size_t t;

	strcpy(tenants[0], "a");
	strcpy(tenants[1], "alice");
	memset(tenants[2], 'z', WIRE_NAME_MAX - 1);
	tenants[2][WIRE_NAME_MAX - 1] = '\0';
	seal_key(pk, 0x33);
	for (t = 0; t < ARRAY_SIZE(tenants); t++) {
		size_t n = strlen(tenants[t]), want = PASS_FIXED_LEN + n;
		uint8_t *b = plain;
		int len, i;

		make_pass(&p, tenants[t], t);
		len = auth_pass_seal(pk, &p, sealed, sizeof(sealed));
		ck_assert_int_eq(len, (int)(want + AUTH_SEAL_OVERHEAD));
		ck_assert_int_le(len, WIRE_PASS_MAX);
		memset(&q, 0xee, sizeof(q));
		ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q),
				 0);
		ck_assert_uint_eq(q.tenant_id, p.tenant_id);
		ck_assert_str_eq(q.tenant, p.tenant);
		ck_assert_uint_eq(q.registry_epoch, p.registry_epoch);
		ck_assert_uint_eq(q.expires_ms, p.expires_ms);
		ck_assert_mem_eq(q.key, p.key, AUTH_KEY_LEN);
		/* open zeroes the rest of the struct: comparable with memcmp */
		ck_assert_mem_eq(&q, &p, sizeof(p));

		/* the documented plaintext layout, byte by byte */
		ck_assert_int_eq(auth_open(pk, sealed, (size_t)len, plain,
					   sizeof(plain)),
				 (int)want);
		ck_assert_uint_eq(b[0], 0x0d + t);
		ck_assert_uint_eq(b[1], 0x0c);
		ck_assert_uint_eq(b[2], 0x0b);
		ck_assert_uint_eq(b[3], 0x0a);
		ck_assert_uint_eq(b[4], n);
		ck_assert_mem_eq(b + 5, tenants[t], n);
		b += 5 + n;
		for (i = 0; i < 8; i++) {
			ck_assert_uint_eq(
				b[i], (uint8_t)(p.registry_epoch >> (8 * i)));
			ck_assert_uint_eq(b[8 + i],
					  (uint8_t)(p.expires_ms >> (8 * i)));
		}
		ck_assert_mem_eq(b + 16, p.key, AUTH_KEY_LEN);
	}
}
END_TEST

START_TEST(pass_expired_is_preserved)
{
	uint8_t pk[AUTH_KEY_LEN], sealed[WIRE_PASS_MAX];
	struct auth_pass p, q;
	int len;

	seal_key(pk, 0x44);
	make_pass(&p, "bob", 7);
	p.expires_ms = 1; /* long gone: open does not judge it */
	len = auth_pass_seal(pk, &p, sealed, sizeof(sealed));
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), 0);
	ck_assert_uint_eq(q.expires_ms, 1);
	p.expires_ms = UINT64_MAX;
	len = auth_pass_seal(pk, &p, sealed, sizeof(sealed));
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), 0);
	ck_assert_uint_eq(q.expires_ms, UINT64_MAX);
}
END_TEST

static void assert_zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		ck_assert_msg(b[i] == 0, "byte %zu is 0x%02x", i, b[i]);
}

START_TEST(pass_rejects_forgeries)
{
	uint8_t pk[AUTH_KEY_LEN], other[AUTH_KEY_LEN], sealed[WIRE_PASS_MAX];
	struct auth_pass p, q;
	size_t i;
	int len;

	seal_key(pk, 0x55);
	seal_key(other, 0x56);
	make_pass(&p, "carol", 3);
	len = auth_pass_seal(pk, &p, sealed, sizeof(sealed));
	ck_assert_int_eq(len, PASS_FIXED_LEN + 5 + AUTH_SEAL_OVERHEAD);

	memset(&q, 0xee, sizeof(q));
	ck_assert_int_eq(auth_pass_open(other, sealed, (size_t)len, &q),
			 -EBADMSG);
	assert_zero(&q, sizeof(q));
	for (i = 0; i < (size_t)len; i++) {
		sealed[i] ^= 0x20;
		memset(&q, 0xee, sizeof(q));
		ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q),
				 -EBADMSG);
		assert_zero(&q, sizeof(q));
		sealed[i] ^= 0x20;
	}
	for (i = 0; i <= sizeof(sealed); i++) {
		if (i == (size_t)len)
			continue;
		ck_assert_int_eq(auth_pass_open(pk, sealed, i, &q), -EBADMSG);
	}
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), 0);
	/* a ticket-sized blob sealed with the right key is still no pass */
	ck_assert_int_eq(
		auth_seal(pk, "0123456789", 10, sealed, sizeof(sealed)),
		10 + AUTH_SEAL_OVERHEAD);
	ck_assert_int_eq(
		auth_pass_open(pk, sealed, 10 + AUTH_SEAL_OVERHEAD, &q),
		-EBADMSG);
}
END_TEST

/* Authentic boxes (sealed with the pass key) whose plaintext breaks the
 * layout: open must not trust them either. */
START_TEST(pass_rejects_malformed_plaintext)
{
	uint8_t pk[AUTH_KEY_LEN], plain[160], sealed[WIRE_PASS_MAX + 64];
	struct auth_pass q;
	size_t n;
	int len;

	seal_key(pk, 0x66);
	memset(plain, 'x', sizeof(plain));

	/* tenant length 0 */
	plain[4] = 0;
	len = auth_seal(pk, plain, PASS_FIXED_LEN, sealed, sizeof(sealed));
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), -EBADMSG);
	/* tenant length 64, consistent total: too long a name */
	plain[4] = WIRE_NAME_MAX;
	len = auth_seal(pk, plain, PASS_FIXED_LEN + WIRE_NAME_MAX, sealed,
			sizeof(sealed));
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), -EBADMSG);
	/* NUL inside the name */
	plain[4] = 5;
	plain[7] = '\0';
	len = auth_seal(pk, plain, PASS_FIXED_LEN + 5, sealed, sizeof(sealed));
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), -EBADMSG);
	plain[7] = 'x';
	/* a length byte past any name, at the largest total */
	plain[4] = 0xff;
	len = auth_seal(pk, plain, PASS_FIXED_LEN + WIRE_NAME_MAX - 1, sealed,
			sizeof(sealed));
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), -EBADMSG);
	plain[4] = 5;
	/* length byte disagrees with the total, both ways */
	len = auth_seal(pk, plain, PASS_FIXED_LEN + 5, sealed, sizeof(sealed));
	ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q), 0);
	ck_assert_str_eq(q.tenant, "xxxxx");
	for (n = PASS_FIXED_LEN + 1; n <= PASS_FIXED_LEN + WIRE_NAME_MAX - 1;
	     n++) {
		if (n == PASS_FIXED_LEN + 5)
			continue;
		len = auth_seal(pk, plain, n, sealed, sizeof(sealed));
		ck_assert_int_eq(auth_pass_open(pk, sealed, (size_t)len, &q),
				 -EBADMSG);
	}
}
END_TEST

START_TEST(pass_seal_bad_input)
{
	uint8_t pk[AUTH_KEY_LEN], sealed[WIRE_PASS_MAX];
	struct auth_pass p;
	int len;

	seal_key(pk, 0x77);
	make_pass(&p, "", 1);
	ck_assert_int_eq(auth_pass_seal(pk, &p, sealed, sizeof(sealed)),
			 -EINVAL);
	make_pass(&p, "dave", 1);
	memset(p.tenant, 'd', sizeof(p.tenant)); /* no NUL */
	ck_assert_int_eq(auth_pass_seal(pk, &p, sealed, sizeof(sealed)),
			 -EINVAL);
	make_pass(&p, "dave", 1);
	len = PASS_FIXED_LEN + 4 + AUTH_SEAL_OVERHEAD;
	ck_assert_int_eq(auth_pass_seal(pk, &p, sealed, (size_t)len - 1),
			 -ENOSPC);
	ck_assert_int_eq(auth_pass_seal(pk, &p, sealed, (size_t)len), len);
}
END_TEST

/* --- tickets --- */

static void make_ticket(struct wire_ticket *t)
{
	memset(t, 0, sizeof(*t));
	t->grant_id = UINT64_C(0x0a0b0c0d0e0f1011);
	t->registry_epoch = UINT64_C(0x2122232425262728);
	t->tenant_id = 0x31323334;
	t->donor_id = 0x41424344;
	t->donor_epoch = UINT64_C(0x5152535455565758);
	t->nslabs = 0x61626364;
	t->node = -2;
	t->expires_ms = UINT64_C(0x7172737475767778);
}

START_TEST(ticket_body_layout)
{
	struct wire_ticket t;
	uint8_t body[WIRE_TICKET_BODY_LEN];

	make_ticket(&t);
	memset(t.mac, 0xcc, sizeof(t.mac));
	wire_ticket_body(&t, body);
	assert_bytes_hex(body, sizeof(body),
			 "11100f0e0d0c0b0a" /* grant_id */
			 "2827262524232221" /* registry_epoch */
			 "34333231"	    /* tenant_id */
			 "44434241"	    /* donor_id */
			 "5857565554535251" /* donor_epoch */
			 "64636261"	    /* nslabs */
			 "feffffff"	    /* node -2 */
			 "7877767574737271" /* expires_ms */);
}
END_TEST

START_TEST(ticket_sign_verify)
{
	uint8_t key[AUTH_KEY_LEN], cn[WIRE_NONCE_LEN], sn[WIRE_NONCE_LEN];
	struct wire_ticket t, u;
	size_t i;

	fixed_inputs(key, cn, sn);
	make_ticket(&t);
	auth_ticket_sign(key, &t);
	assert_bytes_hex(t.mac, WIRE_MAC_LEN,
			 "d19623eb0d0eda86d5438ceafa55201b2c942d273040122d0871d"
			 "f754db624d2");
	ck_assert(auth_ticket_verify(key, &t));

	for (i = 0; i < WIRE_MAC_LEN; i++) {
		u = t;
		u.mac[i] ^= 0x08;
		ck_assert(!auth_ticket_verify(key, &u));
	}
#define FLIP(field, x)                                                         \
	do {                                                                   \
		u = t;                                                         \
		u.field ^= (x);                                                \
		ck_assert_msg(!auth_ticket_verify(key, &u),                    \
			      #field " ^ " #x " still verifies");              \
	} while (0)
	FLIP(grant_id, 1);
	FLIP(grant_id, UINT64_C(1) << 63);
	FLIP(registry_epoch, 1);
	FLIP(registry_epoch, UINT64_C(1) << 40);
	FLIP(tenant_id, 1);
	FLIP(tenant_id, 1u << 31);
	FLIP(donor_id, 1);
	FLIP(donor_id, 1u << 24);
	FLIP(donor_epoch, 1);
	FLIP(donor_epoch, UINT64_C(1) << 56);
	FLIP(nslabs, 1);
	FLIP(nslabs, 1u << 16);
	FLIP(node, 1);
	FLIP(node, INT32_MIN);
	FLIP(expires_ms, 1);
	FLIP(expires_ms, UINT64_C(1) << 32);
#undef FLIP
	/* another ticket key */
	key[0] ^= 1;
	ck_assert(!auth_ticket_verify(key, &t));
	auth_ticket_sign(key, &t);
	ck_assert(auth_ticket_verify(key, &t));
}
END_TEST

/* --- hex --- */

START_TEST(hex_roundtrip)
{
	uint8_t all[256], back[256];
	char hex[2 * 256 + 1];
	size_t i;

	for (i = 0; i < sizeof(all); i++)
		all[i] = (uint8_t)i;
	auth_hex(all, sizeof(all), hex);
	ck_assert_uint_eq(strlen(hex), 512);
	ck_assert(!strncmp(hex, "000102030405060708090a0b0c0d0e0f10", 34));
	ck_assert_str_eq(hex + 500, "fafbfcfdfeff");
	ck_assert_int_eq(auth_unhex(hex, back, sizeof(back)), 256);
	ck_assert_mem_eq(all, back, sizeof(all));
	auth_hex(all, 0, hex);
	ck_assert_str_eq(hex, "");
	ck_assert_int_eq(auth_unhex("", back, sizeof(back)), 0);
	ck_assert_int_eq(auth_unhex("0aFf", back, 2), 2);
	ck_assert_uint_eq(back[0], 0x0a);
	ck_assert_uint_eq(back[1], 0xff);
}
END_TEST

START_TEST(hex_bad)
{
	static const char *const bad[] = { "0",	 "abc",	  "zz",	  "0g",
					   "g0", " 0a0",  "0a0 ", "0x0a",
					   "-1", "0a\r\n" };
	uint8_t out[8];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(auth_unhex(bad[i], out, sizeof(out)) == -EINVAL,
			      "\"%s\" accepted", bad[i]);
	/* over cap */
	ck_assert_int_eq(auth_unhex("00112233", out, 3), -EINVAL);
	ck_assert_int_eq(auth_unhex("00112233", out, 4), 4);
}
END_TEST

/* --- secret files --- */

static char tdir[1024];

static void tmpdir_setup(void)
{
	tu_tmpdir_make(tdir, sizeof(tdir), "test_auth");
}

static void tmpdir_teardown(void)
{
	tu_tmpdir_remove(tdir);
}

/* Writes len bytes to tdir/name with mode; path receives its path. */
static void write_secret(const char *name, const void *data, size_t len,
			 mode_t mode, char *path, size_t pathlen)
{
	snprintf(path, pathlen, "%s/%s", tdir, name);
	tu_write_file(path, data, len);
	ck_assert_int_eq(chmod(path, mode), 0);
}

/* A secret byte that is never '\n' or '\r' or NUL. */
static uint8_t sbyte(size_t i)
{
	return (uint8_t)('A' + i % 26);
}

/* Reads path expecting rc; on failure the secret must be wiped and err
 * must name the file. */
static int read_secret(const char *path, uint8_t *secret, char *err,
		       size_t errlen)
{
	int rc;

	memset(secret, 0xab, AUTH_SECRET_MAX);
	rc = auth_read_secret_file(path, secret, err, errlen);
	if (rc < 0) {
		assert_zero(secret, AUTH_SECRET_MAX);
		assert_contains(err, path);
	}
	return rc;
}

START_TEST(secret_sizes)
{
	static const struct {
		size_t len;
		const char *tail;
		int want; /* length read, or -errno */
	} cases[] = {
		{ AUTH_SECRET_MIN, "", AUTH_SECRET_MIN },
		{ AUTH_SECRET_MIN, "\n", AUTH_SECRET_MIN },
		{ AUTH_SECRET_MIN, "\r\n", AUTH_SECRET_MIN },
		{ AUTH_SECRET_MIN - 1, "", -EINVAL },
		{ AUTH_SECRET_MIN - 1, "\n", -EINVAL },
		{ AUTH_SECRET_MIN - 2, "\r\n", -EINVAL },
		{ 0, "", -EINVAL },
		{ 0, "\n", -EINVAL },
		/* only one newline goes */
		{ AUTH_SECRET_MIN - 1, "\n\n", AUTH_SECRET_MIN },
		/* a lone '\r' is a secret byte */
		{ AUTH_SECRET_MIN - 1, "\r", AUTH_SECRET_MIN },
		{ 64, "\n", 64 },
		{ AUTH_SECRET_MAX, "", AUTH_SECRET_MAX },
		{ AUTH_SECRET_MAX, "\n", AUTH_SECRET_MAX },
		{ AUTH_SECRET_MAX, "\r\n", AUTH_SECRET_MAX },
		{ AUTH_SECRET_MAX + 1, "", -EINVAL },
		{ AUTH_SECRET_MAX + 1, "\n", -EINVAL },
		{ AUTH_SECRET_MAX, "\n\n", -EINVAL },
		{ AUTH_SECRET_MAX + 1, "\r\n", -EINVAL },
		{ 8192, "", -EINVAL },
	};
	uint8_t data[8200], secret[AUTH_SECRET_MAX];
	char path[PATH_MAX], err[PATH_MAX + 128], name[32];
	size_t c, i;

	for (c = 0; c < ARRAY_SIZE(cases); c++) {
		size_t len = cases[c].len, tl = strlen(cases[c].tail);
		int rc;

		for (i = 0; i < len; i++)
			data[i] = sbyte(i);
		memcpy(data + len, cases[c].tail, tl);
		snprintf(name, sizeof(name), "size%zu", c);
		write_secret(name, data, len + tl, 0600, path, sizeof(path));
		rc = read_secret(path, secret, err, sizeof(err));
		ck_assert_msg(rc == cases[c].want, "case %zu: %d, want %d (%s)",
			      c, rc, cases[c].want, err);
		if (rc > 0) {
			ck_assert_mem_eq(secret, data, (size_t)rc);
		} else {
			assert_contains(err, rc == -EINVAL && len + tl < 100
						     ? "too short"
						     : "too long");
			/* the message never quotes the secret */
			ck_assert_ptr_null(strstr(err, "ABCDEFGH"));
		}
	}
}
END_TEST

START_TEST(secret_modes)
{
	static const struct {
		mode_t mode;
		const char *msg; /* in err, or NULL when accepted */
	} cases[] = {
		{ 0600, NULL },
		{ 0400, NULL },
		{ 0700, NULL },
		{ 0644, "mode 0644 lets group/others read it; chmod 600 " },
		{ 0640, "mode 0640 lets group/others read it" },
		{ 0604, "mode 0604 lets group/others read it" },
		{ 0620, "mode 0620 lets group/others write it" },
		{ 0602, "mode 0602 lets group/others write it" },
		{ 0610, "mode 0610 lets group/others access it" },
		{ 0601, "mode 0601 lets group/others access it" },
		{ 0666, "mode 0666 lets group/others read it" },
	};
	uint8_t data[40], secret[AUTH_SECRET_MAX];
	char path[PATH_MAX], err[PATH_MAX * 2 + 128], name[32];
	size_t c, i;

	for (i = 0; i < sizeof(data); i++)
		data[i] = sbyte(i);
	for (c = 0; c < ARRAY_SIZE(cases); c++) {
		int rc;

		snprintf(name, sizeof(name), "mode%zu", c);
		write_secret(name, data, sizeof(data), cases[c].mode, path,
			     sizeof(path));
		rc = read_secret(path, secret, err, sizeof(err));
		if (!cases[c].msg) {
			ck_assert_int_eq(rc, (int)sizeof(data));
			ck_assert_mem_eq(secret, data, sizeof(data));
			continue;
		}
		ck_assert_msg(rc == -EPERM, "mode %o: %d", cases[c].mode, rc);
		assert_contains(err, cases[c].msg);
	}
	/* the hint names the file to chmod */
	write_secret("loose", data, sizeof(data), 0644, path, sizeof(path));
	ck_assert_int_eq(read_secret(path, secret, err, sizeof(err)), -EPERM);
	{
		char want[PATH_MAX + 16];

		snprintf(want, sizeof(want), "chmod 600 %s", path);
		ck_assert_str_eq(err + strlen(err) - strlen(want), want);
	}
}
END_TEST

START_TEST(secret_not_a_plain_file)
{
	uint8_t data[32], secret[AUTH_SECRET_MAX];
	char path[PATH_MAX], link[PATH_MAX], err[PATH_MAX + 128];
	size_t i;

	for (i = 0; i < sizeof(data); i++)
		data[i] = sbyte(i);

	snprintf(path, sizeof(path), "%s/missing", tdir);
	ck_assert_int_eq(read_secret(path, secret, err, sizeof(err)), -ENOENT);

	snprintf(path, sizeof(path), "%s/dir", tdir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(read_secret(path, secret, err, sizeof(err)), -EISDIR);
	assert_contains(err, "directory");

	/* a link to a good secret is still refused */
	write_secret("target", data, sizeof(data), 0600, path, sizeof(path));
	ck_assert_int_eq(read_secret(path, secret, err, sizeof(err)),
			 (int)sizeof(data));
	snprintf(link, sizeof(link), "%s/link", tdir);
	ck_assert_int_eq(symlink(path, link), 0);
	ck_assert_int_eq(read_secret(link, secret, err, sizeof(err)), -ELOOP);
	assert_contains(err, "symbolic link");

	/* a FIFO must not block the reader */
	snprintf(path, sizeof(path), "%s/fifo", tdir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(read_secret(path, secret, err, sizeof(err)), -EINVAL);
	assert_contains(err, "not a regular file");

	/* unreadable (unless root, who reads anyway) */
	write_secret("noread", data, sizeof(data), 0200, path, sizeof(path));
	if (geteuid() != 0)
		ck_assert_int_eq(read_secret(path, secret, err, sizeof(err)),
				 -EACCES);

	/* no error buffer is fine */
	snprintf(path, sizeof(path), "%s/missing", tdir);
	ck_assert_int_eq(auth_read_secret_file(path, secret, NULL, 0), -ENOENT);
}
END_TEST

/* The secret file's bytes, not their hex, are the secret: a tenant key
 * from a file equals the key from the same bytes in memory. */
START_TEST(secret_file_to_tenant_key)
{
	uint8_t secret[AUTH_SECRET_MAX], k[AUTH_KEY_LEN];
	char path[PATH_MAX], err[PATH_MAX + 128];
	char text[64];
	int rc;

	snprintf(text, sizeof(text), "%s\n", tenant_secret);
	write_secret("tenant", text, strlen(text), 0600, path, sizeof(path));
	rc = read_secret(path, secret, err, sizeof(err));
	ck_assert_int_eq(rc, (int)strlen(tenant_secret));
	auth_tenant_key(secret, (size_t)rc, k);
	assert_bytes_hex(k, sizeof(k),
			 "16ee5bf3939997a383a29ba7da5e43aae0271a6dce72a1ff48bf9"
			 "f655ba5b492");
}
END_TEST

static Suite *auth_suite(void)
{
	Suite *s = suite_create("auth");
	TCase *tc = tu_tcase(s, "crypto", 0);
	TCase *tf = tu_tcase(s, "secret_files", 0);

	TU_ADD_TESTS(tc, init_is_idempotent, kat_tenant_key, kat_cluster_keys,
		     keys_depend_on_every_secret_byte,
		     kat_proofs_and_session_key, proof_covers_every_field,
		     session_key_covers_every_field, mac_equal_every_byte,
		     seal_open_roundtrip, seal_tamper_every_byte,
		     seal_wrong_key_and_lengths, pass_roundtrip_and_layout,
		     pass_expired_is_preserved, pass_rejects_forgeries,
		     pass_rejects_malformed_plaintext, pass_seal_bad_input,
		     ticket_body_layout, ticket_sign_verify, hex_roundtrip,
		     hex_bad);

	/* in the runner, not the forked test, so a failed test's files go */
	tcase_add_unchecked_fixture(tf, tmpdir_setup, tmpdir_teardown);
	TU_ADD_TESTS(tf, secret_sizes, secret_modes, secret_not_a_plain_file,
		     secret_file_to_tenant_key);
	return s;
}

int main(void)
{
	if (auth_init() != 0) {
		fprintf(stderr, "auth_init failed\n");
		return EXIT_FAILURE;
	}
	return tu_run_suite(auth_suite());
}
