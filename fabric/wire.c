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

static int enc_error(const struct wire_error *e, struct wire_wr *w)
{
	if (e->err < 1 || e->err > WIRE_ERR_MAX)
		return -EINVAL;
	put_u32(w, (uint32_t)e->err);
	return put_str(w, e->msg, sizeof(e->msg));
}

static int dec_error(struct wire_error *e, struct wire_rd *r)
{
	uint32_t err = get_u32(r);

	/* Bounded before the conversion, so the int32_t always holds it. */
	if (r->bad || err < 1 || err > WIRE_ERR_MAX)
		return -EBADMSG;
	e->err = (int32_t)err;
	return get_str(r, e->msg, sizeof(e->msg));
}

/*
 * Payload of m: validated, and written when w->p is set. -EINVAL for an
 * unknown type or a bound broken. The six payload-less types write
 * nothing and ignore the union.
 */
static int enc_payload(const struct wire_msg *m, struct wire_wr *w)
{
	switch (m->type) {
	case WIRE_HELLO:
		return wire_enc_hello(&m->u.hello, w);
	case WIRE_HELLO_OK:
		return wire_enc_hello_ok(&m->u.hello_ok, w);
	case WIRE_LEASE:
		return wire_enc_lease(&m->u.lease, w);
	case WIRE_LEASE_OK:
		return wire_enc_lease_ok(&m->u.lease_ok, w);
	case WIRE_RELEASE:
		return wire_enc_release(&m->u.release, w);
	case WIRE_RELEASE_OK:
		return wire_enc_release_ok(&m->u.release_ok, w);
	case WIRE_HEARTBEAT_OK:
		return wire_enc_heartbeat_ok(&m->u.heartbeat_ok, w);
	case WIRE_STATUS_OK:
		return wire_enc_status_ok(&m->u.status_ok, w);
	case WIRE_ERROR:
		return enc_error(&m->u.error, w);
	case WIRE_AUTH:
		return wire_enc_auth(&m->u.auth, w);
	case WIRE_AUTH_CHALLENGE:
		put_raw(w, m->u.auth_challenge.snonce, WIRE_NONCE_LEN);
		return 0;
	case WIRE_AUTH_PROOF:
		put_raw(w, m->u.auth_proof.mac, WIRE_MAC_LEN);
		return 0;
	case WIRE_AUTH_OK:
		return wire_enc_auth_ok(&m->u.auth_ok, w);
	case WIRE_PLACE:
		return wire_enc_place(&m->u.place, w);
	case WIRE_PLACE_OK:
		return wire_enc_place_ok(&m->u.place_ok, w);
	case WIRE_LEASE_GRANT:
		return wire_enc_lease_grant(&m->u.lease_grant, w);
	case WIRE_LEASE_GRANT_OK:
		return wire_enc_lease_ok(&m->u.lease_ok, w);
	case WIRE_HEARTBEAT2:
		return wire_enc_heartbeat2(&m->u.heartbeat2, w);
	case WIRE_HEARTBEAT2_OK:
		return wire_enc_heartbeat_ok(&m->u.heartbeat_ok, w);
	case WIRE_DONOR_JOIN:
		return wire_enc_donor_join(&m->u.donor_join, w);
	case WIRE_DONOR_JOIN_OK:
		return wire_enc_donor_join_ok(&m->u.donor_join_ok, w);
	case WIRE_DONOR_REPORT:
		return wire_enc_donor_report(&m->u.donor_report, w);
	case WIRE_DONOR_REPORT_OK:
		return wire_enc_donor_report_ok(&m->u.donor_report_ok, w);
	case WIRE_ADMIN:
	case WIRE_ADMIN_OK:
		return wire_enc_admin(&m->u.admin, w);
	case WIRE_KV_RESERVE:
	case WIRE_KV_COMMIT:
	case WIRE_KV_LOOKUP:
	case WIRE_KV_DONE:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
	case WIRE_KV_PIN:
	case WIRE_KV_RESERVE_OK:
	case WIRE_KV_COMMIT_OK:
	case WIRE_KV_LOOKUP_OK:
	case WIRE_KV_DONE_OK:
	case WIRE_KV_EXISTS_OK:
	case WIRE_KV_DELETE_OK:
	case WIRE_KV_PIN_OK:
	case WIRE_KV_RESERVE_AT:
	case WIRE_KV_COMMIT_AT:
	case WIRE_KV_LOOKUP_AT:
	case WIRE_KV_EXISTS_AT:
	case WIRE_KV_DELETE_AT:
	case WIRE_KV_PIN_AT:
	case WIRE_KV_RESERVE_AT_OK:
	case WIRE_KV_COMMIT_AT_OK:
	case WIRE_KV_LOOKUP_AT_OK:
	case WIRE_KV_EXISTS_AT_OK:
	case WIRE_KV_DELETE_AT_OK:
	case WIRE_KV_PIN_AT_OK:
		return wire_enc_kv(m->type, &m->u.kv, w);
	case WIRE_DONORS_OK:
	case WIRE_MEMBERS_OK:
		return wire_enc_donors_ok(&m->u.donors_ok,
					  m->type == WIRE_MEMBERS_OK, w);
	case WIRE_SHM:
		put_raw(w, m->u.shm.boot_id, WIRE_BOOT_ID_LEN);
		return 0;
	case WIRE_SHM_OK:
		if (!wire_shm_name_ok(m->u.shm_ok.socket,
				      sizeof(m->u.shm_ok.socket)))
			return -EINVAL;
		put_raw(w, m->u.shm_ok.nonce, WIRE_NONCE_LEN);
		return put_name(w, m->u.shm_ok.socket,
				sizeof(m->u.shm_ok.socket)) < 0
			       ? -EINVAL
			       : 0;
	case WIRE_KV_MODEL:
		return wire_enc_kv_model(&m->u.kv_model, w);
	case WIRE_FABRIC:
	case WIRE_FABRIC_OK:
		return wire_enc_fabric(&m->u.fabric, w);
	case WIRE_HEARTBEAT:
	case WIRE_STATUS:
	case WIRE_BYE:
	case WIRE_BYE_OK:
	case WIRE_DONORS:
	case WIRE_KV_MODEL_OK:
	case WIRE_KV_CLEAR:
	case WIRE_KV_CLEAR_OK:
	case WIRE_MEMBERS:
	case WIRE_DONOR_NEWS:
		return 0;
	}
	return -EINVAL;
}

static int dec_payload(struct wire_msg *m, struct wire_rd *r)
{
	int rc;

	switch (m->type) {
	case WIRE_HELLO:
		rc = wire_dec_hello(&m->u.hello, r);
		break;
	case WIRE_HELLO_OK:
		rc = wire_dec_hello_ok(&m->u.hello_ok, r);
		break;
	case WIRE_LEASE:
		rc = wire_dec_lease(&m->u.lease, r);
		break;
	case WIRE_LEASE_OK:
		rc = wire_dec_lease_ok(&m->u.lease_ok, r);
		break;
	case WIRE_RELEASE:
		rc = wire_dec_release(&m->u.release, r);
		break;
	case WIRE_RELEASE_OK:
		rc = wire_dec_release_ok(&m->u.release_ok, r);
		break;
	case WIRE_HEARTBEAT_OK:
		rc = wire_dec_heartbeat_ok(&m->u.heartbeat_ok, r);
		break;
	case WIRE_STATUS_OK:
		rc = wire_dec_status_ok(&m->u.status_ok, r);
		break;
	case WIRE_ERROR:
		rc = dec_error(&m->u.error, r);
		break;
	case WIRE_AUTH:
		rc = wire_dec_auth(&m->u.auth, r);
		break;
	case WIRE_AUTH_CHALLENGE:
		get_raw(r, m->u.auth_challenge.snonce, WIRE_NONCE_LEN);
		rc = 0;
		break;
	case WIRE_AUTH_PROOF:
		get_raw(r, m->u.auth_proof.mac, WIRE_MAC_LEN);
		rc = 0;
		break;
	case WIRE_AUTH_OK:
		rc = wire_dec_auth_ok(&m->u.auth_ok, r);
		break;
	case WIRE_PLACE:
		rc = wire_dec_place(&m->u.place, r);
		break;
	case WIRE_PLACE_OK:
		rc = wire_dec_place_ok(&m->u.place_ok, r);
		break;
	case WIRE_LEASE_GRANT:
		rc = wire_dec_lease_grant(&m->u.lease_grant, r);
		break;
	case WIRE_LEASE_GRANT_OK:
		rc = wire_dec_lease_ok(&m->u.lease_ok, r);
		break;
	case WIRE_HEARTBEAT2:
		rc = wire_dec_heartbeat2(&m->u.heartbeat2, r);
		break;
	case WIRE_HEARTBEAT2_OK:
		rc = wire_dec_heartbeat_ok(&m->u.heartbeat_ok, r);
		break;
	case WIRE_DONOR_JOIN:
		rc = wire_dec_donor_join(&m->u.donor_join, r);
		break;
	case WIRE_DONOR_JOIN_OK:
		rc = wire_dec_donor_join_ok(&m->u.donor_join_ok, r);
		break;
	case WIRE_DONOR_REPORT:
		rc = wire_dec_donor_report(&m->u.donor_report, r);
		break;
	case WIRE_DONOR_REPORT_OK:
		rc = wire_dec_donor_report_ok(&m->u.donor_report_ok, r);
		break;
	case WIRE_ADMIN:
	case WIRE_ADMIN_OK:
		rc = wire_dec_admin(&m->u.admin, r);
		break;
	case WIRE_KV_RESERVE:
	case WIRE_KV_COMMIT:
	case WIRE_KV_LOOKUP:
	case WIRE_KV_DONE:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
	case WIRE_KV_PIN:
	case WIRE_KV_RESERVE_OK:
	case WIRE_KV_COMMIT_OK:
	case WIRE_KV_LOOKUP_OK:
	case WIRE_KV_DONE_OK:
	case WIRE_KV_EXISTS_OK:
	case WIRE_KV_DELETE_OK:
	case WIRE_KV_PIN_OK:
	case WIRE_KV_RESERVE_AT:
	case WIRE_KV_COMMIT_AT:
	case WIRE_KV_LOOKUP_AT:
	case WIRE_KV_EXISTS_AT:
	case WIRE_KV_DELETE_AT:
	case WIRE_KV_PIN_AT:
	case WIRE_KV_RESERVE_AT_OK:
	case WIRE_KV_COMMIT_AT_OK:
	case WIRE_KV_LOOKUP_AT_OK:
	case WIRE_KV_EXISTS_AT_OK:
	case WIRE_KV_DELETE_AT_OK:
	case WIRE_KV_PIN_AT_OK:
		rc = wire_dec_kv(m->type, &m->u.kv, r);
		break;
	case WIRE_DONORS_OK:
	case WIRE_MEMBERS_OK:
		rc = wire_dec_donors_ok(&m->u.donors_ok,
					m->type == WIRE_MEMBERS_OK, r);
		break;
	case WIRE_SHM:
		get_raw(r, m->u.shm.boot_id, WIRE_BOOT_ID_LEN);
		rc = 0;
		break;
	case WIRE_SHM_OK:
		get_raw(r, m->u.shm_ok.nonce, WIRE_NONCE_LEN);
		rc = get_name(r, m->u.shm_ok.socket,
			      sizeof(m->u.shm_ok.socket)) < 0 ||
				     !wire_shm_name_ok(
					     m->u.shm_ok.socket,
					     sizeof(m->u.shm_ok.socket))
			     ? -EBADMSG
			     : 0;
		break;
	case WIRE_KV_MODEL:
		rc = wire_dec_kv_model(&m->u.kv_model, r);
		break;
	case WIRE_FABRIC:
	case WIRE_FABRIC_OK:
		rc = wire_dec_fabric(&m->u.fabric, r);
		break;
	case WIRE_HEARTBEAT:
	case WIRE_STATUS:
	case WIRE_BYE:
	case WIRE_BYE_OK:
	case WIRE_DONORS:
	case WIRE_KV_MODEL_OK:
	case WIRE_KV_CLEAR:
	case WIRE_KV_CLEAR_OK:
	case WIRE_MEMBERS:
	case WIRE_DONOR_NEWS:
		rc = 0;
		break;
	default:
		return -EBADMSG;
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
