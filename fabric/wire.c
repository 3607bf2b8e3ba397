// SPDX-License-Identifier: MIT
/*
 * fabric/wire.c - the control-plane codec: frames <-> struct wire_msg.
 *
 * Owns the byte layout of every control message. docs/protocol.md is the
 * spec and the wire*.c files its one implementation: nothing else in the
 * tree reads or writes control-plane bytes by hand. This file is the
 * frame (header, encode, decode), the dispatch of a payload to its
 * message's codec, ERROR, and type names; fabric/wire_int.h lists the
 * files holding the messages of each family, and the cursors they share.
 *
 * Threads: none of its own. Every function is pure (no I/O, no allocation,
 * no global state) and safe from any thread on buffers it does not share.
 *
 * Invariants:
 * - Integers move through explicit little-endian put/get helpers, never by
 *   casting a buffer to a struct, so the wire layout does not depend on the
 *   host's byte order, alignment or padding.
 * - Each message has one encoder and one decoder, side by side, checking
 *   the same bounds: the decoder rejects with -EBADMSG exactly what the
 *   encoder refuses with -EINVAL. Hence encode(decode(b)) == b for every
 *   accepted frame b, and everything encode produces decodes.
 * - decode zeroes *m before filling it, so it is deterministic down to
 *   padding and unused array tails; messages compare with memcmp. The one
 *   pointer, ADMIN's json, points into the buffer decoded (no copy of up
 *   to 64 KiB into every struct wire_msg).
 * - No access goes past the caller's buffer: every get checks what is left
 *   of the payload, and every count is bounded before it drives a loop.
 */
#include "fabric/wire_int.h"

#include <errno.h>
#include <string.h>

/* Every length field is a u16 on the wire. */
_Static_assert(WIRE_NAME_MAX <= UINT16_MAX && WIRE_PROV_MAX <= UINT16_MAX &&
		       WIRE_MSG_MAX <= UINT16_MAX &&
		       WIRE_ADDR_MAX <= UINT16_MAX,
	       "string and array bounds must fit the u16 length prefix");
/* An endpoint index travels as a u16. */
_Static_assert(WIRE_MAX_ENDPOINTS <= UINT16_MAX && WIRE_MAX_NODES <= UINT16_MAX,
	       "endpoint and node counts must fit a u16");

/* Protocol 2. Lengths and counts that travel as u16. */
_Static_assert(WIRE_PASS_MAX <= UINT16_MAX && WIRE_BOX_MAX <= UINT16_MAX &&
		       WIRE_HOSTPORT_MAX <= UINT16_MAX &&
		       WIRE_JSON_MAX <= UINT16_MAX &&
		       WIRE_MAX_GRANTS <= UINT16_MAX &&
		       WIRE_MAX_LEASES <= UINT16_MAX &&
		       WIRE_MAX_TENANTS <= UINT16_MAX &&
		       WIRE_MAX_REDEEMED <= UINT16_MAX,
	       "protocol 2 lengths and counts must fit a u16");

/* Header field offsets; see wire.h and docs/protocol.md. */
enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 4,
	HDR_TYPE = 5,
	HDR_FLAGS = 6,
	HDR_SEQ = 8,
	HDR_LEN = 12,
};

static int wire_enc_error(const struct wire_error *e, struct wire_wr *w)
{
	if (e->err < 1 || e->err > WIRE_ERR_MAX)
		return -EINVAL;
	put_u32(w, (uint32_t)e->err);
	return put_str(w, e->msg, sizeof(e->msg));
}

static int wire_dec_error(struct wire_error *e, struct wire_rd *r)
{
	uint32_t err = get_u32(r);

	/* Bounded before the conversion, so the int32_t always holds it. */
	if (r->bad || err < 1 || err > WIRE_ERR_MAX)
		return -EBADMSG;
	e->err = (int32_t)err;
	return get_str(r, e->msg, sizeof(e->msg));
}

/*
 * The types with a payload of their own: type and the member of
 * wire_msg.u that holds it, whose codec is wire_enc_MEMBER and
 * wire_dec_MEMBER. Both directions expand this one list, so they cannot
 * pair a type with different layouts. Not here: the KV types (one codec
 * for all, told the type: wire_type_is_kv), DONORS_OK and MEMBERS_OK
 * (likewise), the one-array ones (WIRE_RAW) and the payload-less ones
 * (WIRE_EMPTY).
 */
#define WIRE_CODECS(X)                                                         \
	X(HELLO, hello)                                                        \
	X(HELLO_OK, hello_ok)                                                  \
	X(LEASE, lease)                                                        \
	X(LEASE_OK, lease_ok)                                                  \
	X(RELEASE, release)                                                    \
	X(RELEASE_OK, release_ok)                                              \
	X(HEARTBEAT_OK, heartbeat_ok)                                          \
	X(STATUS_OK, status_ok)                                                \
	X(ERROR, error)                                                        \
	X(AUTH, auth)                                                          \
	X(AUTH_OK, auth_ok)                                                    \
	X(PLACE, place)                                                        \
	X(PLACE_OK, place_ok)                                                  \
	X(LEASE_GRANT, lease_grant)                                            \
	X(LEASE_GRANT_OK, lease_ok)                                            \
	X(HEARTBEAT2, heartbeat2)                                              \
	X(HEARTBEAT2_OK, heartbeat_ok)                                         \
	X(DONOR_JOIN, donor_join)                                              \
	X(DONOR_JOIN_OK, donor_join_ok)                                        \
	X(DONOR_REPORT, donor_report)                                          \
	X(DONOR_REPORT_OK, donor_report_ok)                                    \
	X(ADMIN, admin)                                                        \
	X(ADMIN_OK, admin)                                                     \
	X(SHM_OK, shm_ok)                                                      \
	X(KV_MODEL, kv_model)                                                  \
	X(FABRIC, fabric)                                                      \
	X(FABRIC_OK, fabric)

/* The types whose payload is one fixed-size array, raw: type, the array
 * in wire_msg.u, its length. */
#define WIRE_RAW(X)                                                            \
	X(AUTH_CHALLENGE, auth_challenge.snonce, WIRE_NONCE_LEN)               \
	X(AUTH_PROOF, auth_proof.mac, WIRE_MAC_LEN)                            \
	X(SHM, shm.boot_id, WIRE_BOOT_ID_LEN)

/* The types whose payload is empty: they write nothing and ignore u. */
#define WIRE_EMPTY(X)                                                          \
	X(HEARTBEAT)                                                           \
	X(STATUS)                                                              \
	X(BYE)                                                                 \
	X(BYE_OK)                                                              \
	X(DONORS)                                                              \
	X(KV_MODEL_OK)                                                         \
	X(KV_CLEAR)                                                            \
	X(KV_CLEAR_OK)                                                         \
	X(MEMBERS)                                                             \
	X(DONOR_NEWS)

#define WIRE_EMPTY_CASE(type) case WIRE_##type:

/*
 * Payload of m: validated, and written when w->p is set. -EINVAL for an
 * unknown type or a bound broken.
 */
static int enc_payload(const struct wire_msg *m, struct wire_wr *w)
{
	switch (m->type) {
#define WIRE_ENC_CASE(type, member)                                            \
	case WIRE_##type:                                                      \
		return wire_enc_##member(&m->u.member, w);
		WIRE_CODECS(WIRE_ENC_CASE)
#undef WIRE_ENC_CASE
#define WIRE_ENC_RAW(type, array, len)                                         \
	case WIRE_##type:                                                      \
		put_raw(w, m->u.array, len);                                   \
		return 0;
		WIRE_RAW(WIRE_ENC_RAW)
#undef WIRE_ENC_RAW
	case WIRE_DONORS_OK:
	case WIRE_MEMBERS_OK:
		return wire_enc_donors_ok(&m->u.donors_ok,
					  m->type == WIRE_MEMBERS_OK, w);
		WIRE_EMPTY(WIRE_EMPTY_CASE)
		return 0;
	}
	if (wire_type_is_kv(m->type))
		return wire_enc_kv(m->type, &m->u.kv, w);
	return -EINVAL;
}

static int dec_payload(struct wire_msg *m, struct wire_rd *r)
{
	int rc;

	switch (m->type) {
#define WIRE_DEC_CASE(type, member)                                            \
	case WIRE_##type:                                                      \
		rc = wire_dec_##member(&m->u.member, r);                       \
		break;
		WIRE_CODECS(WIRE_DEC_CASE)
#undef WIRE_DEC_CASE
#define WIRE_DEC_RAW(type, array, len)                                         \
	case WIRE_##type:                                                      \
		get_raw(r, m->u.array, len);                                   \
		rc = 0;                                                        \
		break;
		WIRE_RAW(WIRE_DEC_RAW)
#undef WIRE_DEC_RAW
	case WIRE_DONORS_OK:
	case WIRE_MEMBERS_OK:
		rc = wire_dec_donors_ok(&m->u.donors_ok,
					m->type == WIRE_MEMBERS_OK, r);
		break;
		WIRE_EMPTY(WIRE_EMPTY_CASE)
		rc = 0;
		break;
	default:
		if (!wire_type_is_kv(m->type))
			return -EBADMSG;
		rc = wire_dec_kv(m->type, &m->u.kv, r);
		break;
	}
	/* Trailing bytes would be a second reading of the same frame. */
	if (rc < 0 || r->bad || r->off != r->len)
		return -EBADMSG;
	return 0;
}

ssize_t wire_frame_len(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t plen;

	if (len < WIRE_HDR_LEN)
		return -EAGAIN;
	if (le32(p + HDR_MAGIC) != WIRE_MAGIC)
		return -EPROTO;
	if (p[HDR_VERSION] != WIRE_VERSION)
		return -EPROTONOSUPPORT;
	plen = le32(p + HDR_LEN);
	if (plen > WIRE_MAX_PAYLOAD)
		return -EMSGSIZE;
	return (ssize_t)(WIRE_HDR_LEN + plen);
}

ssize_t wire_decode(const void *buf, size_t len, struct wire_msg *m)
{
	const uint8_t *p = buf;
	struct wire_rd r;
	ssize_t n = wire_frame_len(buf, len);

	if (n < 0 && n != -EMSGSIZE)
		return n;
	memset(m, 0, sizeof(*m));
	m->type = p[HDR_TYPE];
	m->flags = le16(p + HDR_FLAGS);
	m->seq = le32(p + HDR_SEQ);
	if (n < 0)
		return n;
	if (len < (size_t)n)
		return -EAGAIN;
	r = (struct wire_rd){ .p = p + WIRE_HDR_LEN,
			      .len = (size_t)n - WIRE_HDR_LEN };
	if (m->flags != 0 || dec_payload(m, &r) < 0) {
		/* Keep only the header so the caller can reply to seq. */
		memset(&m->u, 0, sizeof(m->u));
		return -EBADMSG;
	}
	return n;
}

ssize_t wire_encode(const struct wire_msg *m, void *buf, size_t cap)
{
	struct wire_wr w = { .p = NULL, .off = 0 };
	size_t plen;
	int rc;

	if (m->flags != 0)
		return -EINVAL;
	rc = enc_payload(m, &w);
	if (rc < 0)
		return rc;
	plen = w.off;
	if (cap < WIRE_HDR_LEN || cap - WIRE_HDR_LEN < plen)
		return -ENOSPC;

	w = (struct wire_wr){ .p = buf, .off = 0 };
	put_u32(&w, WIRE_MAGIC);
	put_u8(&w, WIRE_VERSION);
	put_u8(&w, m->type);
	put_u16(&w, m->flags);
	put_u32(&w, m->seq);
	put_u32(&w, (uint32_t)plen);
	/* Validated by the measuring pass above; this pass cannot fail. */
	enc_payload(m, &w);
	return (ssize_t)w.off;
}

bool wire_name_is_valid(const char *s)
{
	size_t n;

	for (n = 0; s[n]; n++) {
		char c = s[n];

		if (n >= WIRE_NAME_MAX - 1)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-'))
			return false;
	}
	return n > 0;
}

const char *wire_type_name(uint8_t type)
{
	switch (type) {
#define WIRE_TYPE_NAME(name, value)                                            \
	case WIRE_##name:                                                      \
		return #name;
		WIRE_TYPES(WIRE_TYPE_NAME)
#undef WIRE_TYPE_NAME
	}
	return "UNKNOWN";
}

void wire_make_error(struct wire_msg *m, uint32_t seq, int err,
		     const char *text)
{
	/* Compared before negating: -INT_MIN would overflow. */
	int e = err < 0 ? (err < -WIRE_ERR_MAX ? 0 : -err) : err;

	if (e < 1 || e > WIRE_ERR_MAX)
		e = EIO;
	memset(m, 0, sizeof(*m));
	m->type = WIRE_ERROR;
	m->seq = seq;
	m->u.error.err = e;
	if (text)
		strncpy(m->u.error.msg, text, sizeof(m->u.error.msg) - 1);
}
