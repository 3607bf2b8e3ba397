// SPDX-License-Identifier: MIT
/*
 * fabric/wire_int.h - what the files of the control-plane codec share:
 * the read and write cursors, the little-endian and field helpers every
 * message is written with, and each message's encoder and decoder, which
 * fabric/wire.c's dispatch calls. Private to fabric/wire*.c;
 * fabric/wire.h is the API. One message family a file:
 *
 * fabric/wire.c          the frame: header, wire_encode/wire_decode, the
 *                        dispatch of a payload by type, ERROR, type names
 * fabric/wire_session.c  a session's messages: HELLO, AUTH, heartbeats,
 *                        STATUS_OK, FABRIC, ADMIN
 * fabric/wire_lease.c    LEASE, RELEASE, and placement: PLACE, tickets,
 *                        LEASE_GRANT
 * fabric/wire_cluster.c  the registry's donor messages: DONOR_JOIN,
 *                        DONOR_REPORT, DONORS_OK, MEMBERS_OK
 * fabric/wire_kv.c       the KV tier's messages, KV_MODEL, the KV block
 *                        header
 * fabric/wire_shm.c      the same-host path: boot ids, the SHM socket's
 *                        requests and replies
 *
 * The invariants are fabric/wire.c's (its top comment).
 */
#ifndef TP_FABRIC_WIRE_INT_H
#define TP_FABRIC_WIRE_INT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fabric/wire.h"

/* Little-endian loads and stores on raw bytes: no alignment assumed. */
static inline uint8_t le8(const uint8_t *p)
{
	return p[0];
}

static inline uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static inline void st8(uint8_t *p, uint8_t v)
{
	p[0] = v;
}

static inline void st16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void st32(uint8_t *p, uint32_t v)
{
	st16(p, (uint16_t)v);
	st16(p + 2, (uint16_t)(v >> 16));
}

static inline void st64(uint8_t *p, uint64_t v)
{
	st32(p, (uint32_t)v);
	st32(p + 4, (uint32_t)(v >> 32));
}

/*
 * Write cursor. Encoding runs twice over the same code: first with p NULL,
 * which validates and measures without touching memory, then for real once
 * the caller's buffer is known to be big enough. So there is one layout per
 * message, and a failed encode never leaves half a frame behind.
 */
struct wire_wr {
	uint8_t *p; /* NULL: measure only */
	size_t off;
};

/*
 * Read cursor over one complete payload. A get past the end returns 0 and
 * sets the sticky bad flag, so decoders read a whole fixed layout and check
 * once; anything that sizes a loop or a copy is checked before use.
 */
struct wire_rd {
	const uint8_t *p;
	size_t len;
	size_t off;
	bool bad;
};

static inline bool rd_has(struct wire_rd *r, size_t n)
{
	if (r->bad || r->len - r->off < n) {
		r->bad = true;
		return false;
	}
	return true;
}

/*
 * put_uN and get_uN for the four integer widths, from one definition: a
 * value of N bits is N / 8 bytes, little-endian.
 */
#define WIRE_UINT_CODEC(bits)                                                  \
	static inline void put_u##bits(struct wire_wr *w, uint##bits##_t v)    \
	{                                                                      \
		if (w->p)                                                      \
			st##bits(w->p + w->off, v);                            \
		w->off += (bits) / 8;                                          \
	}                                                                      \
	static inline uint##bits##_t get_u##bits(struct wire_rd *r)            \
	{                                                                      \
		uint##bits##_t v;                                              \
                                                                               \
		if (!rd_has(r, (bits) / 8))                                    \
			return 0;                                              \
		v = le##bits(r->p + r->off);                                   \
		r->off += (bits) / 8;                                          \
		return v;                                                      \
	}
WIRE_UINT_CODEC(8)
WIRE_UINT_CODEC(16)
WIRE_UINT_CODEC(32)
WIRE_UINT_CODEC(64)
#undef WIRE_UINT_CODEC

/* u16 length + bytes; the caller has bounded n. */
static inline void put_blob(struct wire_wr *w, const void *src, uint16_t n)
{
	put_u16(w, n);
	if (w->p && n)
		memcpy(w->p + w->off, src, n);
	w->off += n;
}

/*
 * A string must end inside its array (strnlen < max), which also means its
 * bytes hold no NUL: exactly what the decoder accepts.
 */
static inline int put_str(struct wire_wr *w, const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n >= max)
		return -EINVAL;
	put_blob(w, s, (uint16_t)n);
	return 0;
}

/*
 * u16 length + bytes into dst[0 .. max). The tail of dst is left as it is:
 * wire_decode zeroed all of *m, which is what makes strings NUL-terminated
 * and decoding deterministic.
 */
static inline int get_blob(struct wire_rd *r, uint8_t *dst, size_t max,
			   uint16_t *lenp)
{
	uint16_t n = get_u16(r);

	if (r->bad || n > max || !rd_has(r, n))
		return -EBADMSG;
	memcpy(dst, r->p + r->off, n);
	r->off += n;
	*lenp = n;
	return 0;
}

/* Like get_blob, but room is kept for the NUL and the bytes hold none. */
static inline int get_str(struct wire_rd *r, char *dst, size_t max)
{
	uint16_t n;

	if (get_blob(r, (uint8_t *)dst, max - 1, &n) < 0)
		return -EBADMSG;
	if (memchr(dst, '\0', n))
		return -EBADMSG;
	return 0;
}

/*
 * A NUMA node is an i32 on the wire: -1 (WIRE_NODE_ANY) or 0 ..
 * WIRE_NODE_MAX - 1, in two's complement. Decoding bounds the raw u32
 * before converting it, so no out-of-range value is ever converted.
 */
static inline bool node_ok(int32_t node)
{
	return node == WIRE_NODE_ANY || (node >= 0 && node < WIRE_NODE_MAX);
}

static inline void put_node(struct wire_wr *w, int32_t node)
{
	put_u32(w, (uint32_t)node);
}

static inline int get_node(struct wire_rd *r, int32_t *node)
{
	uint32_t v = get_u32(r);

	if (r->bad)
		return -EBADMSG;
	if (v == UINT32_MAX)
		*node = WIRE_NODE_ANY;
	else if (v < WIRE_NODE_MAX)
		*node = (int32_t)v;
	else
		return -EBADMSG;
	return 0;
}

/* Fixed-size byte arrays (nonces, MACs) travel raw, without a length. */
static inline void put_raw(struct wire_wr *w, const uint8_t *src, size_t n)
{
	if (w->p)
		memcpy(w->p + w->off, src, n);
	w->off += n;
}

static inline void get_raw(struct wire_rd *r, uint8_t *dst, size_t n)
{
	if (!rd_has(r, n))
		return;
	memcpy(dst, r->p + r->off, n);
	r->off += n;
}

/* A string that must also be non-empty (principals, names, addresses). */
static inline int put_name(struct wire_wr *w, const char *s, size_t max)
{
	if (s[0] == '\0')
		return -EINVAL;
	return put_str(w, s, max);
}

static inline int get_name(struct wire_rd *r, char *dst, size_t max)
{
	if (get_str(r, dst, max) < 0 || dst[0] == '\0')
		return -EBADMSG;
	return 0;
}

/*
 * One encoder and one decoder per message, each pair next to the other so
 * that their layouts and bounds can be read against each other.
 */

/* wire_session.c */
int wire_enc_hello(const struct wire_hello *h, struct wire_wr *w);
int wire_dec_hello(struct wire_hello *h, struct wire_rd *r);
int wire_enc_hello_ok(const struct wire_hello_ok *h, struct wire_wr *w);
int wire_dec_hello_ok(struct wire_hello_ok *h, struct wire_rd *r);
int wire_enc_heartbeat_ok(const struct wire_heartbeat_ok *h, struct wire_wr *w);
int wire_dec_heartbeat_ok(struct wire_heartbeat_ok *h, struct wire_rd *r);
int wire_enc_status_ok(const struct wire_status_ok *s, struct wire_wr *w);
int wire_dec_status_ok(struct wire_status_ok *s, struct wire_rd *r);
int wire_enc_auth(const struct wire_auth *a, struct wire_wr *w);
int wire_dec_auth(struct wire_auth *a, struct wire_rd *r);
int wire_enc_auth_ok(const struct wire_auth_ok *a, struct wire_wr *w);
int wire_dec_auth_ok(struct wire_auth_ok *a, struct wire_rd *r);
int wire_enc_heartbeat2(const struct wire_heartbeat2 *h, struct wire_wr *w);
int wire_dec_heartbeat2(struct wire_heartbeat2 *h, struct wire_rd *r);
int wire_enc_fabric(const struct wire_fabric *f, struct wire_wr *w);
int wire_dec_fabric(struct wire_fabric *f, struct wire_rd *r);
int wire_enc_admin(const struct wire_admin *a, struct wire_wr *w);
int wire_dec_admin(struct wire_admin *a, struct wire_rd *r);

/* wire_lease.c */
int wire_enc_lease(const struct wire_lease_req *l, struct wire_wr *w);
int wire_dec_lease(struct wire_lease_req *l, struct wire_rd *r);
int wire_enc_lease_ok(const struct wire_lease_ok *l, struct wire_wr *w);
int wire_dec_lease_ok(struct wire_lease_ok *l, struct wire_rd *r);
int wire_enc_release(const struct wire_release *l, struct wire_wr *w);
int wire_dec_release(struct wire_release *l, struct wire_rd *r);
int wire_enc_release_ok(const struct wire_release_ok *l, struct wire_wr *w);
int wire_dec_release_ok(struct wire_release_ok *l, struct wire_rd *r);
int wire_enc_place(const struct wire_place *p, struct wire_wr *w);
int wire_dec_place(struct wire_place *p, struct wire_rd *r);
int wire_enc_place_ok(const struct wire_place_ok *p, struct wire_wr *w);
int wire_dec_place_ok(struct wire_place_ok *p, struct wire_rd *r);
int wire_enc_lease_grant(const struct wire_lease_grant *l, struct wire_wr *w);
int wire_dec_lease_grant(struct wire_lease_grant *l, struct wire_rd *r);

/* wire_cluster.c */
int wire_enc_donor_join(const struct wire_donor_join *j, struct wire_wr *w);
int wire_dec_donor_join(struct wire_donor_join *j, struct wire_rd *r);
int wire_enc_donor_join_ok(const struct wire_donor_join_ok *j,
			   struct wire_wr *w);
int wire_dec_donor_join_ok(struct wire_donor_join_ok *j, struct wire_rd *r);
int wire_enc_donor_report(const struct wire_donor_report *d, struct wire_wr *w);
int wire_dec_donor_report(struct wire_donor_report *d, struct wire_rd *r);
int wire_enc_donor_report_ok(const struct wire_donor_report_ok *d,
			     struct wire_wr *w);
int wire_dec_donor_report_ok(struct wire_donor_report_ok *d, struct wire_rd *r);
int wire_enc_donors_ok(const struct wire_donors_ok *d, bool members,
		       struct wire_wr *w);
int wire_dec_donors_ok(struct wire_donors_ok *d, bool members,
		       struct wire_rd *r);

/* wire_kv.c: wire_type_is_kv says whether type is one of the KV_* types
 * that struct wire_kv carries (all but KV_MODEL and KV_CLEAR) */
bool wire_type_is_kv(uint8_t type);
int wire_enc_kv(uint8_t type, const struct wire_kv *k, struct wire_wr *w);
int wire_dec_kv(uint8_t type, struct wire_kv *k, struct wire_rd *r);
int wire_enc_kv_model(const struct wire_kv_model *k, struct wire_wr *w);
int wire_dec_kv_model(struct wire_kv_model *k, struct wire_rd *r);

/* wire_shm.c */
int wire_enc_shm_ok(const struct wire_shm_ok *m, struct wire_wr *w);
int wire_dec_shm_ok(struct wire_shm_ok *m, struct wire_rd *r);

#endif
