// SPDX-License-Identifier: MIT
/*
 * fabric/wire.c - the control-plane codec: frames <-> struct wire_msg.
 *
 * Owns the byte layout of every control message. docs/protocol.md is the
 * spec and this file its one implementation: nothing else in the tree
 * reads or writes control-plane bytes by hand.
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
#include "fabric/wire.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Every length field is a u16 on the wire. */
_Static_assert(WIRE_NAME_MAX <= UINT16_MAX && WIRE_PROV_MAX <= UINT16_MAX &&
		       WIRE_MSG_MAX <= UINT16_MAX &&
		       WIRE_ADDR_MAX <= UINT16_MAX,
	       "string and array bounds must fit the u16 length prefix");
/* The largest message (a full LEASE_OK) must fit one frame. */
_Static_assert(8 + WIRE_MAX_LEASES * 46 <= WIRE_MAX_PAYLOAD,
	       "a full LEASE_OK must fit WIRE_MAX_PAYLOAD");
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
/* A layout entry names a grant in a u8, and WIRE_NO_GRANT is none. */
_Static_assert(WIRE_MAX_GRANTS <= WIRE_NO_GRANT && WIRE_NO_GRANT <= UINT8_MAX,
	       "grant indices must fit a u8 below WIRE_NO_GRANT");
/* A ticket: 48 bytes of body, then the MAC. */
_Static_assert(WIRE_TICKET_BODY_LEN == 8 + 8 + 4 + 4 + 8 + 4 + 4 + 8,
	       "ticket body layout");
#define TICKET_WIRE_LEN (WIRE_TICKET_BODY_LEN + WIRE_MAC_LEN)
_Static_assert(TICKET_WIRE_LEN == 80, "a ticket is 80 bytes on the wire");
/* The largest message of each protocol-2 type must fit one frame. */
_Static_assert(2 + (WIRE_NAME_MAX - 1) + WIRE_NONCE_LEN + 2 + WIRE_PASS_MAX <=
		       WIRE_MAX_PAYLOAD,
	       "a full AUTH must fit WIRE_MAX_PAYLOAD");
_Static_assert(WIRE_MAC_LEN + 1 + 4 + 4 + 4 + 2 + WIRE_PASS_MAX + 2 +
			       WIRE_BOX_MAX <=
		       WIRE_MAX_PAYLOAD,
	       "a full AUTH_OK must fit WIRE_MAX_PAYLOAD");
_Static_assert(8 + 2 +
			       WIRE_MAX_GRANTS *
				       (4 + 8 + 2 + (WIRE_HOSTPORT_MAX - 1) +
					TICKET_WIRE_LEN) +
			       2 + 2 * WIRE_MAX_LEASES <=
		       WIRE_MAX_PAYLOAD,
	       "a full PLACE_OK must fit WIRE_MAX_PAYLOAD");
_Static_assert(2 + (WIRE_NAME_MAX - 1) + 2 + (WIRE_HOSTPORT_MAX - 1) + 8 + 8 +
			       4 + 2 + 12 * WIRE_MAX_NODES <=
		       WIRE_MAX_PAYLOAD,
	       "a full DONOR_JOIN must fit WIRE_MAX_PAYLOAD");
_Static_assert(4 + 8 + 4 * 4 + 8 + 8 + 2 + 12 * WIRE_MAX_TENANTS + 2 +
			       8 * WIRE_MAX_REDEEMED <=
		       WIRE_MAX_PAYLOAD,
	       "a full DONOR_REPORT must fit WIRE_MAX_PAYLOAD");
_Static_assert(2 + WIRE_JSON_MAX <= WIRE_MAX_PAYLOAD,
	       "a full ADMIN must fit WIRE_MAX_PAYLOAD");
/* KV tier: the largest request (COMMIT), the largest reply (LOOKUP_OK with
 * every location) and a full DONORS_OK. */
_Static_assert(WIRE_KV_BATCH <= UINT16_MAX && WIRE_KV_MAX_LOCS <= UINT16_MAX &&
		       WIRE_MAX_DONORS <= UINT16_MAX,
	       "KV counts must fit a u16");
_Static_assert(2 + WIRE_KV_BATCH * (WIRE_KV_KEY_LEN + 16) <= WIRE_MAX_PAYLOAD,
	       "a full KV_COMMIT must fit WIRE_MAX_PAYLOAD");
_Static_assert(2 + WIRE_KV_BATCH * (4 + 8 * 3 + 4 * 2) + 2 +
			       WIRE_KV_MAX_LOCS * 26 <=
		       WIRE_MAX_PAYLOAD,
	       "a full KV_LOOKUP_OK must fit WIRE_MAX_PAYLOAD");
_Static_assert(2 + WIRE_MAX_DONORS * (4 + 8 + 2 + (WIRE_NAME_MAX - 1) + 2 +
				      (WIRE_HOSTPORT_MAX - 1)) <=
		       WIRE_MAX_PAYLOAD,
	       "a full DONORS_OK must fit WIRE_MAX_PAYLOAD");

/* Header field offsets; see wire.h and docs/protocol.md. */
enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 4,
	HDR_TYPE = 5,
	HDR_FLAGS = 6,
	HDR_SEQ = 8,
	HDR_LEN = 12,
};

/* Little-endian loads and stores on raw bytes: no alignment assumed. */
static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void st16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void st32(uint8_t *p, uint32_t v)
{
	st16(p, (uint16_t)v);
	st16(p + 2, (uint16_t)(v >> 16));
}

static void st64(uint8_t *p, uint64_t v)
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

static void put_u8(struct wire_wr *w, uint8_t v)
{
	if (w->p)
		w->p[w->off] = v;
	w->off += 1;
}

static void put_u16(struct wire_wr *w, uint16_t v)
{
	if (w->p)
		st16(w->p + w->off, v);
	w->off += 2;
}

static void put_u32(struct wire_wr *w, uint32_t v)
{
	if (w->p)
		st32(w->p + w->off, v);
	w->off += 4;
}

static void put_u64(struct wire_wr *w, uint64_t v)
{
	if (w->p)
		st64(w->p + w->off, v);
	w->off += 8;
}

/* u16 length + bytes; the caller has bounded n. */
static void put_blob(struct wire_wr *w, const void *src, uint16_t n)
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
static int put_str(struct wire_wr *w, const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n >= max)
		return -EINVAL;
	put_blob(w, s, (uint16_t)n);
	return 0;
}

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

static bool rd_has(struct wire_rd *r, size_t n)
{
	if (r->bad || r->len - r->off < n) {
		r->bad = true;
		return false;
	}
	return true;
}

static uint8_t get_u8(struct wire_rd *r)
{
	if (!rd_has(r, 1))
		return 0;
	return r->p[r->off++];
}

static uint16_t get_u16(struct wire_rd *r)
{
	uint16_t v;

	if (!rd_has(r, 2))
		return 0;
	v = le16(r->p + r->off);
	r->off += 2;
	return v;
}

static uint32_t get_u32(struct wire_rd *r)
{
	uint32_t v;

	if (!rd_has(r, 4))
		return 0;
	v = le32(r->p + r->off);
	r->off += 4;
	return v;
}

static uint64_t get_u64(struct wire_rd *r)
{
	uint64_t v;

	if (!rd_has(r, 8))
		return 0;
	v = le64(r->p + r->off);
	r->off += 8;
	return v;
}

/*
 * u16 length + bytes into dst[0 .. max). The tail of dst is left as it is:
 * wire_decode zeroed all of *m, which is what makes strings NUL-terminated
 * and decoding deterministic.
 */
static int get_blob(struct wire_rd *r, uint8_t *dst, size_t max, uint16_t *lenp)
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
static int get_str(struct wire_rd *r, char *dst, size_t max)
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
static bool node_ok(int32_t node)
{
	return node == WIRE_NODE_ANY || (node >= 0 && node < WIRE_NODE_MAX);
}

static void put_node(struct wire_wr *w, int32_t node)
{
	put_u32(w, (uint32_t)node);
}

static int get_node(struct wire_rd *r, int32_t *node)
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

/*
 * One encoder and one decoder per message, each pair next to the other so
 * that their layouts and bounds can be read against each other.
 */

static int enc_hello(const struct wire_hello *h, struct wire_wr *w)
{
	if (h->proto_min < 1 || h->proto_min > h->proto_max)
		return -EINVAL;
	put_u16(w, h->proto_min);
	put_u16(w, h->proto_max);
	return put_str(w, h->client, sizeof(h->client));
}

static int dec_hello(struct wire_hello *h, struct wire_rd *r)
{
	h->proto_min = get_u16(r);
	h->proto_max = get_u16(r);
	if (r->bad || h->proto_min < 1 || h->proto_min > h->proto_max)
		return -EBADMSG;
	return get_str(r, h->client, sizeof(h->client));
}

static int enc_hello_ok(const struct wire_hello_ok *h, struct wire_wr *w)
{
	uint16_t i;

	if (h->proto < 1 || h->ttl_ms < 1 || h->nendpoints < 1 ||
	    h->nendpoints > WIRE_MAX_ENDPOINTS)
		return -EINVAL;
	for (i = 0; i < h->nendpoints; i++)
		if (!node_ok(h->ep[i].node) ||
		    h->ep[i].addr_len > sizeof(h->ep[i].addr))
			return -EINVAL;
	put_u16(w, h->proto);
	put_u64(w, h->session_id);
	put_u64(w, h->epoch);
	put_u32(w, h->ttl_ms);
	put_u64(w, h->slab_bytes);
	if (put_str(w, h->provider, sizeof(h->provider)) < 0)
		return -EINVAL;
	put_u16(w, h->nendpoints);
	for (i = 0; i < h->nendpoints; i++) {
		put_node(w, h->ep[i].node);
		put_blob(w, h->ep[i].addr, h->ep[i].addr_len);
	}
	return 0;
}

static int dec_hello_ok(struct wire_hello_ok *h, struct wire_rd *r)
{
	uint16_t i;

	h->proto = get_u16(r);
	h->session_id = get_u64(r);
	h->epoch = get_u64(r);
	h->ttl_ms = get_u32(r);
	h->slab_bytes = get_u64(r);
	if (r->bad || h->proto < 1 || h->ttl_ms < 1)
		return -EBADMSG;
	if (get_str(r, h->provider, sizeof(h->provider)) < 0)
		return -EBADMSG;
	h->nendpoints = get_u16(r);
	if (r->bad || h->nendpoints < 1 || h->nendpoints > WIRE_MAX_ENDPOINTS)
		return -EBADMSG;
	for (i = 0; i < h->nendpoints; i++) {
		struct wire_endpoint *e = &h->ep[i];

		if (get_node(r, &e->node) < 0 ||
		    get_blob(r, e->addr, sizeof(e->addr), &e->addr_len) < 0)
			return -EBADMSG;
	}
	return 0;
}

static int enc_lease(const struct wire_lease_req *l, struct wire_wr *w)
{
	if (l->nslabs < 1 || l->nslabs > WIRE_MAX_LEASES || l->flags != 0 ||
	    !node_ok(l->node))
		return -EINVAL;
	put_u32(w, l->nslabs);
	put_u32(w, l->flags);
	put_node(w, l->node);
	return 0;
}

static int dec_lease(struct wire_lease_req *l, struct wire_rd *r)
{
	l->nslabs = get_u32(r);
	l->flags = get_u32(r);
	if (r->bad || l->nslabs < 1 || l->nslabs > WIRE_MAX_LEASES ||
	    l->flags != 0)
		return -EBADMSG;
	return get_node(r, &l->node);
}

static int enc_lease_ok(const struct wire_lease_ok *l, struct wire_wr *w)
{
	uint32_t i;

	if (l->ttl_ms < 1 || l->count > WIRE_MAX_LEASES)
		return -EINVAL;
	for (i = 0; i < l->count; i++)
		if (l->lease[i].endpoint >= WIRE_MAX_ENDPOINTS ||
		    !node_ok(l->lease[i].node))
			return -EINVAL;
	put_u32(w, l->ttl_ms);
	put_u32(w, l->count);
	for (i = 0; i < l->count; i++) {
		const struct wire_lease *e = &l->lease[i];

		put_u64(w, e->epoch);
		put_u32(w, e->slab);
		put_u32(w, e->generation);
		put_u64(w, e->key);
		put_u64(w, e->base);
		put_u64(w, e->len_bytes);
		put_u16(w, e->endpoint);
		put_node(w, e->node);
	}
	return 0;
}

static int dec_lease_ok(struct wire_lease_ok *l, struct wire_rd *r)
{
	uint32_t i;

	l->ttl_ms = get_u32(r);
	l->count = get_u32(r);
	if (r->bad || l->ttl_ms < 1 || l->count > WIRE_MAX_LEASES)
		return -EBADMSG;
	for (i = 0; i < l->count; i++) {
		struct wire_lease *e = &l->lease[i];

		e->epoch = get_u64(r);
		e->slab = get_u32(r);
		e->generation = get_u32(r);
		e->key = get_u64(r);
		e->base = get_u64(r);
		e->len_bytes = get_u64(r);
		e->endpoint = get_u16(r);
		if (r->bad || e->endpoint >= WIRE_MAX_ENDPOINTS ||
		    get_node(r, &e->node) < 0)
			return -EBADMSG;
	}
	return 0;
}

static int enc_release(const struct wire_release *l, struct wire_wr *w)
{
	uint32_t i;

	if (l->count < 1 || l->count > WIRE_MAX_LEASES)
		return -EINVAL;
	put_u32(w, l->count);
	for (i = 0; i < l->count; i++) {
		put_u64(w, l->ref[i].epoch);
		put_u32(w, l->ref[i].slab);
		put_u32(w, l->ref[i].generation);
	}
	return 0;
}

static int dec_release(struct wire_release *l, struct wire_rd *r)
{
	uint32_t i;

	l->count = get_u32(r);
	if (r->bad || l->count < 1 || l->count > WIRE_MAX_LEASES)
		return -EBADMSG;
	for (i = 0; i < l->count; i++) {
		l->ref[i].epoch = get_u64(r);
		l->ref[i].slab = get_u32(r);
		l->ref[i].generation = get_u32(r);
	}
	return r->bad ? -EBADMSG : 0;
}

static int enc_release_ok(const struct wire_release_ok *l, struct wire_wr *w)
{
	if (l->released > WIRE_MAX_LEASES)
		return -EINVAL;
	put_u32(w, l->released);
	return 0;
}

static int dec_release_ok(struct wire_release_ok *l, struct wire_rd *r)
{
	l->released = get_u32(r);
	if (r->bad || l->released > WIRE_MAX_LEASES)
		return -EBADMSG;
	return 0;
}

static int enc_heartbeat_ok(const struct wire_heartbeat_ok *h,
			    struct wire_wr *w)
{
	if (h->ttl_ms < 1)
		return -EINVAL;
	put_u32(w, h->ttl_ms);
	put_u32(w, h->nleases);
	put_u64(w, h->epoch);
	return 0;
}

static int dec_heartbeat_ok(struct wire_heartbeat_ok *h, struct wire_rd *r)
{
	h->ttl_ms = get_u32(r);
	h->nleases = get_u32(r);
	h->epoch = get_u64(r);
	if (r->bad || h->ttl_ms < 1)
		return -EBADMSG;
	return 0;
}

static int enc_status_ok(const struct wire_status_ok *s, struct wire_wr *w)
{
	uint16_t i;

	if ((s->flags & ~WIRE_STATUS_KNOWN) || s->nnodes > WIRE_MAX_NODES)
		return -EINVAL;
	for (i = 0; i < s->nnodes; i++)
		if (!node_ok(s->node[i].node))
			return -EINVAL;
	put_u64(w, s->epoch);
	put_u64(w, s->uptime_ms);
	put_u64(w, s->donated_bytes);
	put_u64(w, s->slab_bytes);
	put_u32(w, s->slabs_total);
	put_u32(w, s->slabs_free);
	put_u32(w, s->slabs_leased);
	put_u32(w, s->slabs_reclaiming);
	put_u32(w, s->sessions);
	put_u32(w, s->flags);
	put_u64(w, s->leases_expired);
	put_u64(w, s->frames_rejected);
	put_u16(w, s->nnodes);
	for (i = 0; i < s->nnodes; i++) {
		put_node(w, s->node[i].node);
		put_u32(w, s->node[i].slabs_total);
		put_u32(w, s->node[i].slabs_free);
	}
	return 0;
}

static int dec_status_ok(struct wire_status_ok *s, struct wire_rd *r)
{
	uint16_t i;

	s->epoch = get_u64(r);
	s->uptime_ms = get_u64(r);
	s->donated_bytes = get_u64(r);
	s->slab_bytes = get_u64(r);
	s->slabs_total = get_u32(r);
	s->slabs_free = get_u32(r);
	s->slabs_leased = get_u32(r);
	s->slabs_reclaiming = get_u32(r);
	s->sessions = get_u32(r);
	s->flags = get_u32(r);
	s->leases_expired = get_u64(r);
	s->frames_rejected = get_u64(r);
	s->nnodes = get_u16(r);
	if (r->bad || (s->flags & ~WIRE_STATUS_KNOWN) ||
	    s->nnodes > WIRE_MAX_NODES)
		return -EBADMSG;
	for (i = 0; i < s->nnodes; i++) {
		if (get_node(r, &s->node[i].node) < 0)
			return -EBADMSG;
		s->node[i].slabs_total = get_u32(r);
		s->node[i].slabs_free = get_u32(r);
	}
	return r->bad ? -EBADMSG : 0;
}

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

/* ---- protocol 2 ------------------------------------------------------ */

/* Fixed-size byte arrays (nonces, MACs) travel raw, without a length. */
static void put_raw(struct wire_wr *w, const uint8_t *src, size_t n)
{
	if (w->p)
		memcpy(w->p + w->off, src, n);
	w->off += n;
}

static void get_raw(struct wire_rd *r, uint8_t *dst, size_t n)
{
	if (!rd_has(r, n))
		return;
	memcpy(dst, r->p + r->off, n);
	r->off += n;
}

/* A string that must also be non-empty (principals, names, addresses). */
static int put_name(struct wire_wr *w, const char *s, size_t max)
{
	if (s[0] == '\0')
		return -EINVAL;
	return put_str(w, s, max);
}

static int get_name(struct wire_rd *r, char *dst, size_t max)
{
	if (get_str(r, dst, max) < 0 || dst[0] == '\0')
		return -EBADMSG;
	return 0;
}

/* An abstract socket name SHM_OK may carry: [A-Za-z0-9_.-], non-empty. */
static bool shm_name_ok(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n == 0 || n == max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' &&
		    s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

int wire_boot_id_parse(const char *text, size_t len,
		       uint8_t out[WIRE_BOOT_ID_LEN])
{
	size_t n = 0, i = 0;

	for (; i < len && text[i] != '\n'; i++) {
		char c = text[i];
		unsigned v;

		if (c == '-')
			continue;
		if (c >= '0' && c <= '9')
			v = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v = (unsigned)(c - 'A' + 10);
		else
			return -EINVAL;
		if (n >= 2 * WIRE_BOOT_ID_LEN)
			return -EINVAL;
		if (n % 2 == 0)
			out[n / 2] = (uint8_t)(v << 4);
		else
			out[n / 2] |= (uint8_t)v;
		n++;
	}
	if (i < len && i + 1 != len) /* only a final newline may follow */
		return -EINVAL;
	return n == 2 * WIRE_BOOT_ID_LEN ? 0 : -EINVAL;
}

int wire_boot_id_read(const char *path, uint8_t out[WIRE_BOOT_ID_LEN])
{
	char text[64];
	ssize_t got;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	got = read(fd, text, sizeof(text));
	close(fd);
	if (got <= 0)
		return -EIO;
	return wire_boot_id_parse(text, (size_t)got, out);
}

#define SHM_MAGIC 0x48535054u /* "TPSH" */

static bool shm_op_ok(uint16_t op)
{
	return op == WIRE_SHM_BIND || op == WIRE_SHM_SLAB || op == WIRE_SHM_KV;
}

ssize_t wire_shm_req_encode(const struct wire_shm_req *q,
			    uint8_t out[WIRE_SHM_REQ_LEN])
{
	struct wire_wr w = { .p = out };
	static const uint8_t zero[WIRE_NONCE_LEN];

	if (!shm_op_ok(q->op))
		return -EINVAL;
	put_u32(&w, SHM_MAGIC);
	put_u16(&w, q->op);
	put_u16(&w, 0);
	put_u64(&w, q->session_id);
	if (q->op == WIRE_SHM_KV) {
		/* endpoint, 0, rkey, 24 zero bytes */
		put_u32(&w, q->endpoint);
		put_u32(&w, 0);
		put_u64(&w, q->rkey);
		put_raw(&w, zero, WIRE_NONCE_LEN - 8);
		return (ssize_t)w.off;
	}
	put_u32(&w, q->slab);
	put_u32(&w, q->generation);
	put_raw(&w, q->nonce, WIRE_NONCE_LEN);
	return (ssize_t)w.off;
}

int wire_shm_req_decode(const void *buf, size_t len, struct wire_shm_req *q)
{
	struct wire_rd r = { .p = buf, .len = len };
	uint32_t magic, ep, pad2 = 0;
	uint16_t pad;
	bool nz = false;

	memset(q, 0, sizeof(*q));
	if (len != WIRE_SHM_REQ_LEN)
		return -EBADMSG;
	magic = get_u32(&r);
	q->op = get_u16(&r);
	pad = get_u16(&r);
	q->session_id = get_u64(&r);
	if (q->op == WIRE_SHM_KV) {
		ep = get_u32(&r);
		pad2 = get_u32(&r);
		q->rkey = get_u64(&r);
		get_raw(&r, q->nonce, WIRE_NONCE_LEN - 8);
		for (size_t i = 0; i < WIRE_NONCE_LEN - 8; i++)
			nz |= q->nonce[i] != 0;
		memset(q->nonce, 0, sizeof(q->nonce));
		if (ep >= WIRE_MAX_ENDPOINTS)
			return -EBADMSG;
		q->endpoint = (uint16_t)ep;
	} else {
		q->slab = get_u32(&r);
		q->generation = get_u32(&r);
		get_raw(&r, q->nonce, WIRE_NONCE_LEN);
	}
	if (r.bad || magic != SHM_MAGIC || pad || pad2 || nz ||
	    !shm_op_ok(q->op))
		return -EBADMSG;
	return 0;
}

static size_t shm_rep_len(uint16_t op)
{
	return op == WIRE_SHM_KV ? WIRE_SHM_REP_KV_LEN : WIRE_SHM_REP_LEN;
}

ssize_t wire_shm_rep_encode(const struct wire_shm_rep *p,
			    uint8_t out[WIRE_SHM_REP_MAX])
{
	struct wire_wr w = { .p = out };

	if (!shm_op_ok(p->op) || p->err < 0 || p->err > WIRE_ERR_MAX)
		return -EINVAL;
	put_u32(&w, SHM_MAGIC);
	put_u16(&w, p->op);
	put_u16(&w, 0);
	put_u32(&w, (uint32_t)p->err);
	put_u32(&w, p->slab);
	put_u32(&w, p->generation);
	if (p->op == WIRE_SHM_KV)
		put_u64(&w, p->base);
	return (ssize_t)w.off;
}

int wire_shm_rep_decode(const void *buf, size_t len, struct wire_shm_rep *p)
{
	struct wire_rd r = { .p = buf, .len = len };
	uint32_t magic;
	uint16_t pad;

	memset(p, 0, sizeof(*p));
	if (len < WIRE_SHM_REP_LEN)
		return -EBADMSG;
	magic = get_u32(&r);
	p->op = get_u16(&r);
	if (!shm_op_ok(p->op) || len != shm_rep_len(p->op))
		return -EBADMSG;
	pad = get_u16(&r);
	p->err = (int32_t)get_u32(&r);
	p->slab = get_u32(&r);
	p->generation = get_u32(&r);
	if (p->op == WIRE_SHM_KV)
		p->base = get_u64(&r);
	if (r.bad || magic != SHM_MAGIC || pad || p->err < 0 ||
	    p->err > WIRE_ERR_MAX)
		return -EBADMSG;
	return 0;
}

static int enc_auth(const struct wire_auth *a, struct wire_wr *w)
{
	if (a->pass_len > WIRE_PASS_MAX)
		return -EINVAL;
	if (put_name(w, a->principal, sizeof(a->principal)) < 0)
		return -EINVAL;
	put_raw(w, a->cnonce, WIRE_NONCE_LEN);
	put_blob(w, a->pass, a->pass_len);
	return 0;
}

static int dec_auth(struct wire_auth *a, struct wire_rd *r)
{
	if (get_name(r, a->principal, sizeof(a->principal)) < 0)
		return -EBADMSG;
	get_raw(r, a->cnonce, WIRE_NONCE_LEN);
	return get_blob(r, a->pass, WIRE_PASS_MAX, &a->pass_len);
}

/*
 * AUTH_OK: a donor pass comes with its key (box) and its lifetime, and
 * only to a tenant; tenant_id means something only for a tenant. Fields
 * that mean nothing must be zero, like reserved ones.
 */
static bool auth_ok_ok(const struct wire_auth_ok *a)
{
	bool has_pass = a->pass_len > 0;

	if (a->role < WIRE_ROLE_TENANT || a->role > WIRE_ROLE_DONOR ||
	    (a->flags & ~WIRE_AUTH_KNOWN) || a->pass_len > WIRE_PASS_MAX ||
	    a->box_len > WIRE_BOX_MAX)
		return false;
	if (a->role != WIRE_ROLE_TENANT && (a->tenant_id != 0 || has_pass))
		return false;
	return (a->pass_ttl_ms > 0) == has_pass && (a->box_len > 0) == has_pass;
}

static int enc_auth_ok(const struct wire_auth_ok *a, struct wire_wr *w)
{
	if (!auth_ok_ok(a))
		return -EINVAL;
	put_raw(w, a->mac, WIRE_MAC_LEN);
	put_u8(w, a->role);
	put_u32(w, a->flags);
	put_u32(w, a->tenant_id);
	put_u32(w, a->pass_ttl_ms);
	put_blob(w, a->pass, a->pass_len);
	put_blob(w, a->box, a->box_len);
	return 0;
}

static int dec_auth_ok(struct wire_auth_ok *a, struct wire_rd *r)
{
	get_raw(r, a->mac, WIRE_MAC_LEN);
	a->role = get_u8(r);
	a->flags = get_u32(r);
	a->tenant_id = get_u32(r);
	a->pass_ttl_ms = get_u32(r);
	if (r->bad || get_blob(r, a->pass, WIRE_PASS_MAX, &a->pass_len) < 0 ||
	    get_blob(r, a->box, WIRE_BOX_MAX, &a->box_len) < 0)
		return -EBADMSG;
	return auth_ok_ok(a) ? 0 : -EBADMSG;
}

static int enc_place(const struct wire_place *p, struct wire_wr *w)
{
	if (p->nslabs < 1 || p->nslabs > WIRE_MAX_LEASES ||
	    (p->flags & ~WIRE_PLACE_KNOWN) || !node_ok(p->node))
		return -EINVAL;
	put_u32(w, p->nslabs);
	put_u32(w, p->flags);
	put_node(w, p->node);
	return 0;
}

static int dec_place(struct wire_place *p, struct wire_rd *r)
{
	p->nslabs = get_u32(r);
	p->flags = get_u32(r);
	if (r->bad || p->nslabs < 1 || p->nslabs > WIRE_MAX_LEASES ||
	    (p->flags & ~WIRE_PLACE_KNOWN))
		return -EBADMSG;
	return get_node(r, &p->node);
}

/*
 * A ticket is WIRE_TICKET_BODY_LEN bytes of body, which its MAC covers,
 * then the MAC: 80 bytes, no length prefix. put_ticket_body is also what
 * wire_ticket_body() exports, so the MAC'd bytes are the wire bytes.
 */
static void put_ticket_body(struct wire_wr *w, const struct wire_ticket *t)
{
	put_u64(w, t->grant_id);
	put_u64(w, t->registry_epoch);
	put_u32(w, t->tenant_id);
	put_u32(w, t->donor_id);
	put_u64(w, t->donor_epoch);
	put_u32(w, t->nslabs);
	put_node(w, t->node);
	put_u64(w, t->expires_ms);
}

static bool ticket_ok(const struct wire_ticket *t)
{
	return t->nslabs >= 1 && t->nslabs <= WIRE_MAX_LEASES &&
	       node_ok(t->node);
}

static int enc_ticket(const struct wire_ticket *t, struct wire_wr *w)
{
	if (!ticket_ok(t))
		return -EINVAL;
	put_ticket_body(w, t);
	put_raw(w, t->mac, WIRE_MAC_LEN);
	return 0;
}

static int dec_ticket(struct wire_ticket *t, struct wire_rd *r)
{
	t->grant_id = get_u64(r);
	t->registry_epoch = get_u64(r);
	t->tenant_id = get_u32(r);
	t->donor_id = get_u32(r);
	t->donor_epoch = get_u64(r);
	t->nslabs = get_u32(r);
	if (r->bad || t->nslabs < 1 || t->nslabs > WIRE_MAX_LEASES ||
	    get_node(r, &t->node) < 0)
		return -EBADMSG;
	t->expires_ms = get_u64(r);
	get_raw(r, t->mac, WIRE_MAC_LEN);
	return r->bad ? -EBADMSG : 0;
}

/*
 * PLACE_OK must be usable as it stands: one grant per donor, each grant's
 * ticket for that donor and this registry incarnation, and the layout
 * naming grant g exactly ticket.nslabs times (primaries and replicas
 * together), since slab k takes the next slab leased under its grant. A
 * replica is never on its primary's grant.
 */
static bool place_ok_ok(const struct wire_place_ok *p)
{
	uint32_t used[WIRE_MAX_GRANTS] = { 0 };
	uint16_t i, j;

	if (p->ngrants < 1 || p->ngrants > WIRE_MAX_GRANTS || p->nslabs < 1 ||
	    p->nslabs > WIRE_MAX_LEASES)
		return false;
	for (i = 0; i < p->ngrants; i++) {
		const struct wire_grant *g = &p->grant[i];

		if (!ticket_ok(&g->ticket) ||
		    g->ticket.donor_id != g->donor_id ||
		    g->ticket.donor_epoch != g->donor_epoch ||
		    g->ticket.registry_epoch != p->registry_epoch)
			return false;
		for (j = 0; j < i; j++)
			if (p->grant[j].donor_id == g->donor_id)
				return false;
	}
	for (i = 0; i < p->nslabs; i++) {
		const struct wire_layout *l = &p->layout[i];

		if (l->primary >= p->ngrants)
			return false;
		used[l->primary]++;
		if (l->replica == WIRE_NO_GRANT)
			continue;
		if (l->replica >= p->ngrants || l->replica == l->primary)
			return false;
		used[l->replica]++;
	}
	for (i = 0; i < p->ngrants; i++)
		if (used[i] != p->grant[i].ticket.nslabs)
			return false;
	return true;
}

static int enc_place_ok(const struct wire_place_ok *p, struct wire_wr *w)
{
	uint16_t i;

	if (!place_ok_ok(p))
		return -EINVAL;
	put_u64(w, p->registry_epoch);
	put_u16(w, p->ngrants);
	for (i = 0; i < p->ngrants; i++) {
		const struct wire_grant *g = &p->grant[i];

		put_u32(w, g->donor_id);
		put_u64(w, g->donor_epoch);
		if (put_name(w, g->addr, sizeof(g->addr)) < 0)
			return -EINVAL;
		enc_ticket(&g->ticket, w);
	}
	put_u16(w, p->nslabs);
	for (i = 0; i < p->nslabs; i++) {
		put_u8(w, p->layout[i].primary);
		put_u8(w, p->layout[i].replica);
	}
	return 0;
}

static int dec_place_ok(struct wire_place_ok *p, struct wire_rd *r)
{
	uint16_t i;

	p->registry_epoch = get_u64(r);
	p->ngrants = get_u16(r);
	if (r->bad || p->ngrants < 1 || p->ngrants > WIRE_MAX_GRANTS)
		return -EBADMSG;
	for (i = 0; i < p->ngrants; i++) {
		struct wire_grant *g = &p->grant[i];

		g->donor_id = get_u32(r);
		g->donor_epoch = get_u64(r);
		if (r->bad || get_name(r, g->addr, sizeof(g->addr)) < 0 ||
		    dec_ticket(&g->ticket, r) < 0)
			return -EBADMSG;
	}
	p->nslabs = get_u16(r);
	if (r->bad || p->nslabs < 1 || p->nslabs > WIRE_MAX_LEASES)
		return -EBADMSG;
	for (i = 0; i < p->nslabs; i++) {
		p->layout[i].primary = get_u8(r);
		p->layout[i].replica = get_u8(r);
	}
	return !r->bad && place_ok_ok(p) ? 0 : -EBADMSG;
}

static int enc_lease_grant(const struct wire_lease_grant *l, struct wire_wr *w)
{
	return enc_ticket(&l->ticket, w);
}

static int dec_lease_grant(struct wire_lease_grant *l, struct wire_rd *r)
{
	return dec_ticket(&l->ticket, r);
}

static int enc_heartbeat2(const struct wire_heartbeat2 *h, struct wire_wr *w)
{
	put_u64(w, h->bytes_read);
	put_u64(w, h->bytes_written);
	put_u64(w, h->ops);
	return 0;
}

static int dec_heartbeat2(struct wire_heartbeat2 *h, struct wire_rd *r)
{
	h->bytes_read = get_u64(r);
	h->bytes_written = get_u64(r);
	h->ops = get_u64(r);
	return r->bad ? -EBADMSG : 0;
}

static int enc_kv_model(const struct wire_kv_model *k, struct wire_wr *w)
{
	if (k->flags)
		return -EINVAL;
	put_u32(w, k->flags);
	put_u32(w, k->prefill_tokens_per_s);
	put_u64(w, k->bytes_per_token);
	return 0;
}

static int dec_kv_model(struct wire_kv_model *k, struct wire_rd *r)
{
	k->flags = get_u32(r);
	k->prefill_tokens_per_s = get_u32(r);
	k->bytes_per_token = get_u64(r);
	return r->bad || k->flags ? -EBADMSG : 0;
}

static int enc_fabric(const struct wire_fabric *f, struct wire_wr *w)
{
	if (f->flags)
		return -EINVAL;
	put_u32(w, f->flags);
	put_u32(w, f->rxm_buffer_size);
	return 0;
}

static int dec_fabric(struct wire_fabric *f, struct wire_rd *r)
{
	f->flags = get_u32(r);
	f->rxm_buffer_size = get_u32(r);
	return r->bad || f->flags ? -EBADMSG : 0;
}

static int enc_donor_join(const struct wire_donor_join *j, struct wire_wr *w)
{
	uint16_t i;

	if (j->nnodes > WIRE_MAX_NODES)
		return -EINVAL;
	for (i = 0; i < j->nnodes; i++)
		if (!node_ok(j->node[i].node))
			return -EINVAL;
	if (put_name(w, j->name, sizeof(j->name)) < 0 ||
	    put_name(w, j->addr, sizeof(j->addr)) < 0)
		return -EINVAL;
	put_u64(w, j->epoch);
	put_u64(w, j->slab_bytes);
	put_u32(w, j->slabs_total);
	put_u16(w, j->nnodes);
	for (i = 0; i < j->nnodes; i++) {
		put_node(w, j->node[i].node);
		put_u32(w, j->node[i].slabs_total);
		put_u32(w, j->node[i].slabs_free);
	}
	return 0;
}

static int dec_donor_join(struct wire_donor_join *j, struct wire_rd *r)
{
	uint16_t i;

	if (get_name(r, j->name, sizeof(j->name)) < 0 ||
	    get_name(r, j->addr, sizeof(j->addr)) < 0)
		return -EBADMSG;
	j->epoch = get_u64(r);
	j->slab_bytes = get_u64(r);
	j->slabs_total = get_u32(r);
	j->nnodes = get_u16(r);
	if (r->bad || j->nnodes > WIRE_MAX_NODES)
		return -EBADMSG;
	for (i = 0; i < j->nnodes; i++) {
		if (get_node(r, &j->node[i].node) < 0)
			return -EBADMSG;
		j->node[i].slabs_total = get_u32(r);
		j->node[i].slabs_free = get_u32(r);
	}
	return r->bad ? -EBADMSG : 0;
}

static int enc_donor_join_ok(const struct wire_donor_join_ok *j,
			     struct wire_wr *w)
{
	if (j->report_ms < 1 ||
	    (j->flags & ~(WIRE_DONOR_KNOWN | WIRE_DONOR_MEMBERSHIP)) ||
	    (j->flags & WIRE_DONOR_MEMBERSHIP ? j->membership < 1
					      : j->membership != 0))
		return -EINVAL;
	put_u32(w, j->donor_id);
	put_u64(w, j->registry_epoch);
	put_u32(w, j->report_ms);
	put_u32(w, j->flags);
	if (j->flags & WIRE_DONOR_MEMBERSHIP)
		put_u64(w, j->membership);
	return 0;
}

static int dec_donor_join_ok(struct wire_donor_join_ok *j, struct wire_rd *r)
{
	j->donor_id = get_u32(r);
	j->registry_epoch = get_u64(r);
	j->report_ms = get_u32(r);
	j->flags = get_u32(r);
	if (r->bad || j->report_ms < 1 ||
	    (j->flags & ~(WIRE_DONOR_KNOWN | WIRE_DONOR_MEMBERSHIP)))
		return -EBADMSG;
	if (j->flags & WIRE_DONOR_MEMBERSHIP) {
		j->membership = get_u64(r);
		if (r->bad || j->membership < 1)
			return -EBADMSG;
	}
	return 0;
}

static int enc_donor_report(const struct wire_donor_report *d,
			    struct wire_wr *w)
{
	uint16_t i;

	if ((d->flags & ~WIRE_STATUS_KNOWN) || d->ntenants > WIRE_MAX_TENANTS ||
	    d->nredeemed > WIRE_MAX_REDEEMED)
		return -EINVAL;
	for (i = 0; i < d->ntenants; i++)
		if (d->tenant[i].kv_slabs > d->tenant[i].slabs ||
		    (d->tenant[i].flags & ~WIRE_TENANT_KNOWN))
			return -EINVAL;
	put_u32(w, d->donor_id);
	put_u64(w, d->epoch);
	put_u32(w, d->slabs_free);
	put_u32(w, d->slabs_leased);
	put_u32(w, d->slabs_reclaiming);
	put_u32(w, d->flags);
	put_u64(w, d->bytes_read);
	put_u64(w, d->bytes_written);
	put_u16(w, d->ntenants);
	for (i = 0; i < d->ntenants; i++) {
		put_u32(w, d->tenant[i].tenant_id);
		put_u32(w, d->tenant[i].slabs);
		put_u32(w, d->tenant[i].sessions);
		put_u32(w, d->tenant[i].kv_slabs);
		put_u32(w, d->tenant[i].flags);
	}
	put_u16(w, d->nredeemed);
	for (i = 0; i < d->nredeemed; i++)
		put_u64(w, d->redeemed[i]);
	return 0;
}

static int dec_donor_report(struct wire_donor_report *d, struct wire_rd *r)
{
	uint16_t i;

	d->donor_id = get_u32(r);
	d->epoch = get_u64(r);
	d->slabs_free = get_u32(r);
	d->slabs_leased = get_u32(r);
	d->slabs_reclaiming = get_u32(r);
	d->flags = get_u32(r);
	d->bytes_read = get_u64(r);
	d->bytes_written = get_u64(r);
	d->ntenants = get_u16(r);
	if (r->bad || (d->flags & ~WIRE_STATUS_KNOWN) ||
	    d->ntenants > WIRE_MAX_TENANTS)
		return -EBADMSG;
	for (i = 0; i < d->ntenants; i++) {
		d->tenant[i].tenant_id = get_u32(r);
		d->tenant[i].slabs = get_u32(r);
		d->tenant[i].sessions = get_u32(r);
		d->tenant[i].kv_slabs = get_u32(r);
		d->tenant[i].flags = get_u32(r);
		if (d->tenant[i].kv_slabs > d->tenant[i].slabs ||
		    (d->tenant[i].flags & ~WIRE_TENANT_KNOWN))
			return -EBADMSG;
	}
	d->nredeemed = get_u16(r);
	if (r->bad || d->nredeemed > WIRE_MAX_REDEEMED)
		return -EBADMSG;
	for (i = 0; i < d->nredeemed; i++)
		d->redeemed[i] = get_u64(r);
	return r->bad ? -EBADMSG : 0;
}

static int enc_donor_report_ok(const struct wire_donor_report_ok *d,
			       struct wire_wr *w)
{
	if ((d->flags & ~(WIRE_DONOR_KNOWN | WIRE_DONOR_TENANTS |
			  WIRE_DONOR_FENCE | WIRE_DONOR_MEMBERSHIP)) ||
	    d->nkv > WIRE_MAX_TENANTS ||
	    (d->flags & WIRE_DONOR_MEMBERSHIP ? d->membership < 1
					      : d->membership != 0))
		return -EINVAL;
	put_u64(w, d->registry_epoch);
	put_u32(w, d->flags);
	put_u16(w, d->nkv);
	for (uint16_t i = 0; i < d->nkv; i++) {
		put_u32(w, d->kv[i].tenant_id);
		put_u32(w, d->kv[i].kv_slabs_max);
	}
	if (d->flags & WIRE_DONOR_TENANTS)
		put_u32(w, d->next_tenant_id);
	if (d->flags & WIRE_DONOR_FENCE)
		put_u32(w, d->fence_ms);
	if (d->flags & WIRE_DONOR_MEMBERSHIP)
		put_u64(w, d->membership);
	return 0;
}

static int dec_donor_report_ok(struct wire_donor_report_ok *d,
			       struct wire_rd *r)
{
	d->registry_epoch = get_u64(r);
	d->flags = get_u32(r);
	d->nkv = get_u16(r);
	if (r->bad ||
	    (d->flags & ~(WIRE_DONOR_KNOWN | WIRE_DONOR_TENANTS |
			  WIRE_DONOR_FENCE | WIRE_DONOR_MEMBERSHIP)) ||
	    d->nkv > WIRE_MAX_TENANTS)
		return -EBADMSG;
	for (uint16_t i = 0; i < d->nkv; i++) {
		d->kv[i].tenant_id = get_u32(r);
		d->kv[i].kv_slabs_max = get_u32(r);
	}
	if (d->flags & WIRE_DONOR_TENANTS)
		d->next_tenant_id = get_u32(r);
	if (d->flags & WIRE_DONOR_FENCE)
		d->fence_ms = get_u32(r);
	if (d->flags & WIRE_DONOR_MEMBERSHIP) {
		d->membership = get_u64(r);
		if (d->membership < 1)
			return -EBADMSG;
	}
	return r->bad ? -EBADMSG : 0;
}

/*
 * ADMIN / ADMIN_OK: u16 length + JSON text, 1 .. WIRE_JSON_MAX bytes, no
 * NUL. The decoder points json at the text inside the caller's frame
 * instead of copying up to 64 KiB into every struct wire_msg.
 */
static int enc_admin(const struct wire_admin *a, struct wire_wr *w)
{
	if (a->json_len < 1 || a->json_len > WIRE_JSON_MAX || !a->json ||
	    memchr(a->json, '\0', a->json_len))
		return -EINVAL;
	put_blob(w, a->json, (uint16_t)a->json_len);
	return 0;
}

static int dec_admin(struct wire_admin *a, struct wire_rd *r)
{
	uint16_t n = get_u16(r);

	if (r->bad || n < 1 || n > WIRE_JSON_MAX || !rd_has(r, n))
		return -EBADMSG;
	a->json = (const char *)(r->p + r->off);
	a->json_len = n;
	r->off += n;
	return memchr(a->json, '\0', n) ? -EBADMSG : 0;
}

/* ---- KV tier and DONORS ----------------------------------------------- */

/* The fields each KV type carries (wire.h, protocol.md "KV tier"). */
enum {
	KVF_FLAGS = 0x01,     /* u32 flags before count (KV_PIN) */
	KVF_KEY = 0x02,	      /* 32 raw bytes */
	KVF_VALUE_LEN = 0x04, /* u64 */
	KVF_GEN = 0x08,	      /* u64 */
	KVF_CSUM = 0x10,      /* u64 */
	KVF_STATUS = 0x20,    /* i32 */
	KVF_LOCS = 0x40,      /* first_loc, nchunks per item; nlocs + loc[] */
	KVF_NOITEMS = 0x80,   /* count only (EXISTS_OK) */
	KVF_MSEQ = 0x100,     /* u64 membership first (the _AT requests) */
};

uint8_t wire_kv_at(uint8_t type)
{
	switch (type) {
	case WIRE_KV_RESERVE:
	case WIRE_KV_COMMIT:
	case WIRE_KV_LOOKUP:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
	case WIRE_KV_PIN:
	case WIRE_KV_RESERVE_OK:
	case WIRE_KV_COMMIT_OK:
	case WIRE_KV_LOOKUP_OK:
	case WIRE_KV_EXISTS_OK:
	case WIRE_KV_DELETE_OK:
	case WIRE_KV_PIN_OK:
		return (uint8_t)(type + 0x10);
	}
	return 0;
}

uint8_t wire_kv_plain(uint8_t type)
{
	switch (type) {
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
		return (uint8_t)(type - 0x10);
	}
	return type;
}

/* The fields of an _AT type are its plain namesake's, and the requests'
 * membership first. */
static unsigned int kv_fields_plain(uint8_t type);

static unsigned int kv_fields(uint8_t type)
{
	uint8_t plain = wire_kv_plain(type);

	if (plain == type)
		return kv_fields_plain(type);
	return kv_fields_plain(plain) | (type & 0x80 ? 0 : KVF_MSEQ);
}

static unsigned int kv_fields_plain(uint8_t type)
{
	switch (type) {
	case WIRE_KV_RESERVE:
		return KVF_KEY | KVF_VALUE_LEN;
	case WIRE_KV_COMMIT:
		return KVF_KEY | KVF_GEN | KVF_CSUM;
	case WIRE_KV_LOOKUP:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
		return KVF_KEY;
	case WIRE_KV_DONE:
		return KVF_KEY | KVF_GEN;
	case WIRE_KV_PIN:
		return KVF_FLAGS | KVF_KEY;
	case WIRE_KV_RESERVE_OK:
		return KVF_STATUS | KVF_GEN | KVF_LOCS;
	case WIRE_KV_LOOKUP_OK:
		return KVF_STATUS | KVF_VALUE_LEN | KVF_GEN | KVF_CSUM |
		       KVF_LOCS;
	case WIRE_KV_COMMIT_OK:
	case WIRE_KV_DONE_OK:
	case WIRE_KV_DELETE_OK:
	case WIRE_KV_PIN_OK:
		return KVF_STATUS;
	case WIRE_KV_EXISTS_OK:
		return KVF_NOITEMS;
	}
	return 0;
}

static bool is_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/*
 * The bounds of a KV message as a whole, the same for both directions: a
 * field the type does not carry is zero (decode leaves it so), statuses
 * are 0 or -1 .. -WIRE_ERR_MAX, every item's locations lie inside nlocs,
 * and only an item with status 0 names any.
 */
static bool kv_ok(uint8_t type, const struct wire_kv *k)
{
	unsigned int f = kv_fields(type);
	uint16_t i;

	if (f & KVF_FLAGS ? k->flags & ~WIRE_KV_KNOWN : k->flags)
		return false;
	if (f & KVF_MSEQ ? k->membership < 1 : k->membership != 0)
		return false;
	if (k->count > WIRE_KV_BATCH || (!(f & KVF_NOITEMS) && k->count < 1))
		return false;
	if (f & KVF_LOCS ? k->nlocs > WIRE_KV_MAX_LOCS : k->nlocs != 0)
		return false;
	for (i = 0; i < k->count; i++) {
		const struct wire_kv_item *it = &k->item[i];

		if ((!(f & KVF_KEY) && !is_zero(it->key, sizeof(it->key))) ||
		    (!(f & KVF_VALUE_LEN) && it->value_len) ||
		    (!(f & KVF_GEN) && it->generation) ||
		    (!(f & KVF_CSUM) && it->checksum) ||
		    (!(f & KVF_STATUS) && it->status))
			return false;
		if (it->status > 0 || it->status < -WIRE_ERR_MAX)
			return false;
		if (!(f & KVF_LOCS)) {
			if (it->first_loc || it->nchunks)
				return false;
			continue;
		}
		if (it->status == 0 ? it->nchunks < 1
				    : it->nchunks || it->first_loc)
			return false;
		if ((uint64_t)it->first_loc + it->nchunks > k->nlocs)
			return false;
	}
	for (i = 0; i < k->nlocs; i++)
		if (k->loc[i].endpoint >= WIRE_MAX_ENDPOINTS ||
		    k->loc[i].block_bytes <= WIRE_KV_HEADER_LEN)
			return false;
	return true;
}

/* A status is an i32: 0, or a negative errno in two's complement. */
static void put_status(struct wire_wr *w, int32_t st)
{
	put_u32(w, (uint32_t)st);
}

static int32_t get_status(struct wire_rd *r)
{
	uint32_t v = get_u32(r);

	if (v == 0)
		return 0;
	if (v > UINT32_MAX - WIRE_ERR_MAX) /* -WIRE_ERR_MAX .. -1 */
		return -(int32_t)(UINT32_MAX - v + 1);
	r->bad = true; /* positive, or beyond -WIRE_ERR_MAX */
	return 0;
}

static int enc_kv(uint8_t type, const struct wire_kv *k, struct wire_wr *w)
{
	unsigned int f = kv_fields(type);
	uint16_t i;

	if (!kv_ok(type, k))
		return -EINVAL;
	if (f & KVF_MSEQ)
		put_u64(w, k->membership);
	if (f & KVF_FLAGS)
		put_u32(w, k->flags);
	put_u16(w, k->count);
	for (i = 0; i < k->count && !(f & KVF_NOITEMS); i++) {
		const struct wire_kv_item *it = &k->item[i];

		if (f & KVF_KEY)
			put_raw(w, it->key, WIRE_KV_KEY_LEN);
		if (f & KVF_VALUE_LEN)
			put_u64(w, it->value_len);
		if (f & KVF_GEN)
			put_u64(w, it->generation);
		if (f & KVF_CSUM)
			put_u64(w, it->checksum);
		if (f & KVF_STATUS)
			put_status(w, it->status);
		if (f & KVF_LOCS) {
			put_u32(w, it->first_loc);
			put_u32(w, it->nchunks);
		}
	}
	if (!(f & KVF_LOCS))
		return 0;
	put_u16(w, k->nlocs);
	for (i = 0; i < k->nlocs; i++) {
		put_u64(w, k->loc[i].raddr);
		put_u64(w, k->loc[i].rkey);
		put_u64(w, k->loc[i].block_bytes);
		put_u16(w, k->loc[i].endpoint);
	}
	return 0;
}

static int dec_kv(uint8_t type, struct wire_kv *k, struct wire_rd *r)
{
	unsigned int f = kv_fields(type);
	uint16_t i;

	if (f & KVF_MSEQ)
		k->membership = get_u64(r);
	if (f & KVF_FLAGS)
		k->flags = get_u32(r);
	k->count = get_u16(r);
	if (r->bad || k->count > WIRE_KV_BATCH)
		return -EBADMSG;
	for (i = 0; i < k->count && !(f & KVF_NOITEMS); i++) {
		struct wire_kv_item *it = &k->item[i];

		if (f & KVF_KEY)
			get_raw(r, it->key, WIRE_KV_KEY_LEN);
		if (f & KVF_VALUE_LEN)
			it->value_len = get_u64(r);
		if (f & KVF_GEN)
			it->generation = get_u64(r);
		if (f & KVF_CSUM)
			it->checksum = get_u64(r);
		if (f & KVF_STATUS)
			it->status = get_status(r);
		if (f & KVF_LOCS) {
			it->first_loc = get_u32(r);
			it->nchunks = get_u32(r);
		}
	}
	if (f & KVF_LOCS) {
		k->nlocs = get_u16(r);
		if (r->bad || k->nlocs > WIRE_KV_MAX_LOCS)
			return -EBADMSG;
		for (i = 0; i < k->nlocs; i++) {
			k->loc[i].raddr = get_u64(r);
			k->loc[i].rkey = get_u64(r);
			k->loc[i].block_bytes = get_u64(r);
			k->loc[i].endpoint = get_u16(r);
		}
	}
	return !r->bad && kv_ok(type, k) ? 0 : -EBADMSG;
}

/* DONORS_OK: distinct ids and names (clients hash over the names). */
static bool donors_ok_ok(const struct wire_donors_ok *d)
{
	if (d->count > WIRE_MAX_DONORS)
		return false;
	for (uint16_t i = 0; i < d->count; i++)
		for (uint16_t j = 0; j < i; j++)
			if (d->donor[i].donor_id == d->donor[j].donor_id ||
			    !strncmp(d->donor[i].name, d->donor[j].name,
				     WIRE_NAME_MAX))
				return false;
	return true;
}

static int enc_donors_ok(const struct wire_donors_ok *d, bool members,
			 struct wire_wr *w)
{
	if (!donors_ok_ok(d) || (members ? d->membership < 1 : d->membership))
		return -EINVAL;
	if (members)
		put_u64(w, d->membership);
	put_u16(w, d->count);
	for (uint16_t i = 0; i < d->count; i++) {
		const struct wire_donor_entry *e = &d->donor[i];

		put_u32(w, e->donor_id);
		put_u64(w, e->epoch);
		if (put_name(w, e->name, sizeof(e->name)) < 0 ||
		    put_name(w, e->addr, sizeof(e->addr)) < 0)
			return -EINVAL;
	}
	return 0;
}

static int dec_donors_ok(struct wire_donors_ok *d, bool members,
			 struct wire_rd *r)
{
	if (members) {
		d->membership = get_u64(r);
		if (r->bad || d->membership < 1)
			return -EBADMSG;
	}
	d->count = get_u16(r);
	if (r->bad || d->count > WIRE_MAX_DONORS)
		return -EBADMSG;
	for (uint16_t i = 0; i < d->count; i++) {
		struct wire_donor_entry *e = &d->donor[i];

		e->donor_id = get_u32(r);
		e->epoch = get_u64(r);
		if (r->bad || get_name(r, e->name, sizeof(e->name)) < 0 ||
		    get_name(r, e->addr, sizeof(e->addr)) < 0)
			return -EBADMSG;
	}
	return donors_ok_ok(d) ? 0 : -EBADMSG;
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
		return enc_hello(&m->u.hello, w);
	case WIRE_HELLO_OK:
		return enc_hello_ok(&m->u.hello_ok, w);
	case WIRE_LEASE:
		return enc_lease(&m->u.lease, w);
	case WIRE_LEASE_OK:
		return enc_lease_ok(&m->u.lease_ok, w);
	case WIRE_RELEASE:
		return enc_release(&m->u.release, w);
	case WIRE_RELEASE_OK:
		return enc_release_ok(&m->u.release_ok, w);
	case WIRE_HEARTBEAT_OK:
		return enc_heartbeat_ok(&m->u.heartbeat_ok, w);
	case WIRE_STATUS_OK:
		return enc_status_ok(&m->u.status_ok, w);
	case WIRE_ERROR:
		return enc_error(&m->u.error, w);
	case WIRE_AUTH:
		return enc_auth(&m->u.auth, w);
	case WIRE_AUTH_CHALLENGE:
		put_raw(w, m->u.auth_challenge.snonce, WIRE_NONCE_LEN);
		return 0;
	case WIRE_AUTH_PROOF:
		put_raw(w, m->u.auth_proof.mac, WIRE_MAC_LEN);
		return 0;
	case WIRE_AUTH_OK:
		return enc_auth_ok(&m->u.auth_ok, w);
	case WIRE_PLACE:
		return enc_place(&m->u.place, w);
	case WIRE_PLACE_OK:
		return enc_place_ok(&m->u.place_ok, w);
	case WIRE_LEASE_GRANT:
		return enc_lease_grant(&m->u.lease_grant, w);
	case WIRE_LEASE_GRANT_OK:
		return enc_lease_ok(&m->u.lease_ok, w);
	case WIRE_HEARTBEAT2:
		return enc_heartbeat2(&m->u.heartbeat2, w);
	case WIRE_HEARTBEAT2_OK:
		return enc_heartbeat_ok(&m->u.heartbeat_ok, w);
	case WIRE_DONOR_JOIN:
		return enc_donor_join(&m->u.donor_join, w);
	case WIRE_DONOR_JOIN_OK:
		return enc_donor_join_ok(&m->u.donor_join_ok, w);
	case WIRE_DONOR_REPORT:
		return enc_donor_report(&m->u.donor_report, w);
	case WIRE_DONOR_REPORT_OK:
		return enc_donor_report_ok(&m->u.donor_report_ok, w);
	case WIRE_ADMIN:
	case WIRE_ADMIN_OK:
		return enc_admin(&m->u.admin, w);
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
		return enc_kv(m->type, &m->u.kv, w);
	case WIRE_DONORS_OK:
	case WIRE_MEMBERS_OK:
		return enc_donors_ok(&m->u.donors_ok,
				     m->type == WIRE_MEMBERS_OK, w);
	case WIRE_SHM:
		put_raw(w, m->u.shm.boot_id, WIRE_BOOT_ID_LEN);
		return 0;
	case WIRE_SHM_OK:
		if (!shm_name_ok(m->u.shm_ok.socket,
				 sizeof(m->u.shm_ok.socket)))
			return -EINVAL;
		put_raw(w, m->u.shm_ok.nonce, WIRE_NONCE_LEN);
		return put_name(w, m->u.shm_ok.socket,
				sizeof(m->u.shm_ok.socket)) < 0
			       ? -EINVAL
			       : 0;
	case WIRE_KV_MODEL:
		return enc_kv_model(&m->u.kv_model, w);
	case WIRE_FABRIC:
	case WIRE_FABRIC_OK:
		return enc_fabric(&m->u.fabric, w);
	case WIRE_HEARTBEAT:
	case WIRE_STATUS:
	case WIRE_BYE:
	case WIRE_BYE_OK:
	case WIRE_DONORS:
	case WIRE_KV_MODEL_OK:
	case WIRE_KV_CLEAR:
	case WIRE_KV_CLEAR_OK:
	case WIRE_MEMBERS:
		return 0;
	}
	return -EINVAL;
}

static int dec_payload(struct wire_msg *m, struct wire_rd *r)
{
	int rc;

	switch (m->type) {
	case WIRE_HELLO:
		rc = dec_hello(&m->u.hello, r);
		break;
	case WIRE_HELLO_OK:
		rc = dec_hello_ok(&m->u.hello_ok, r);
		break;
	case WIRE_LEASE:
		rc = dec_lease(&m->u.lease, r);
		break;
	case WIRE_LEASE_OK:
		rc = dec_lease_ok(&m->u.lease_ok, r);
		break;
	case WIRE_RELEASE:
		rc = dec_release(&m->u.release, r);
		break;
	case WIRE_RELEASE_OK:
		rc = dec_release_ok(&m->u.release_ok, r);
		break;
	case WIRE_HEARTBEAT_OK:
		rc = dec_heartbeat_ok(&m->u.heartbeat_ok, r);
		break;
	case WIRE_STATUS_OK:
		rc = dec_status_ok(&m->u.status_ok, r);
		break;
	case WIRE_ERROR:
		rc = dec_error(&m->u.error, r);
		break;
	case WIRE_AUTH:
		rc = dec_auth(&m->u.auth, r);
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
		rc = dec_auth_ok(&m->u.auth_ok, r);
		break;
	case WIRE_PLACE:
		rc = dec_place(&m->u.place, r);
		break;
	case WIRE_PLACE_OK:
		rc = dec_place_ok(&m->u.place_ok, r);
		break;
	case WIRE_LEASE_GRANT:
		rc = dec_lease_grant(&m->u.lease_grant, r);
		break;
	case WIRE_LEASE_GRANT_OK:
		rc = dec_lease_ok(&m->u.lease_ok, r);
		break;
	case WIRE_HEARTBEAT2:
		rc = dec_heartbeat2(&m->u.heartbeat2, r);
		break;
	case WIRE_HEARTBEAT2_OK:
		rc = dec_heartbeat_ok(&m->u.heartbeat_ok, r);
		break;
	case WIRE_DONOR_JOIN:
		rc = dec_donor_join(&m->u.donor_join, r);
		break;
	case WIRE_DONOR_JOIN_OK:
		rc = dec_donor_join_ok(&m->u.donor_join_ok, r);
		break;
	case WIRE_DONOR_REPORT:
		rc = dec_donor_report(&m->u.donor_report, r);
		break;
	case WIRE_DONOR_REPORT_OK:
		rc = dec_donor_report_ok(&m->u.donor_report_ok, r);
		break;
	case WIRE_ADMIN:
	case WIRE_ADMIN_OK:
		rc = dec_admin(&m->u.admin, r);
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
		rc = dec_kv(m->type, &m->u.kv, r);
		break;
	case WIRE_DONORS_OK:
	case WIRE_MEMBERS_OK:
		rc = dec_donors_ok(&m->u.donors_ok, m->type == WIRE_MEMBERS_OK,
				   r);
		break;
	case WIRE_SHM:
		get_raw(r, m->u.shm.boot_id, WIRE_BOOT_ID_LEN);
		rc = 0;
		break;
	case WIRE_SHM_OK:
		get_raw(r, m->u.shm_ok.nonce, WIRE_NONCE_LEN);
		rc = get_name(r, m->u.shm_ok.socket,
			      sizeof(m->u.shm_ok.socket)) < 0 ||
				     !shm_name_ok(m->u.shm_ok.socket,
						  sizeof(m->u.shm_ok.socket))
			     ? -EBADMSG
			     : 0;
		break;
	case WIRE_KV_MODEL:
		rc = dec_kv_model(&m->u.kv_model, r);
		break;
	case WIRE_FABRIC:
	case WIRE_FABRIC_OK:
		rc = dec_fabric(&m->u.fabric, r);
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

void wire_ticket_body(const struct wire_ticket *t,
		      uint8_t out[WIRE_TICKET_BODY_LEN])
{
	struct wire_wr w = { .p = out, .off = 0 };

	put_ticket_body(&w, t);
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

/* ---- the KV block header (wire.h) ---- */

void wire_kv_header_encode(const struct wire_kv_header *h,
			   uint8_t out[WIRE_KV_HEADER_LEN])
{
	st32(out + 0, h->magic);
	st32(out + 4, h->tenant_id);
	memcpy(out + 8, h->key, WIRE_KV_KEY_LEN);
	st64(out + 40, h->generation);
	st32(out + 48, h->value_len);
	st16(out + 52, h->chunk);
	st16(out + 54, h->nchunks);
	st64(out + 56, h->checksum);
}

void wire_kv_header_decode(const uint8_t in[WIRE_KV_HEADER_LEN],
			   struct wire_kv_header *h)
{
	h->magic = le32(in + 0);
	h->tenant_id = le32(in + 4);
	memcpy(h->key, in + 8, WIRE_KV_KEY_LEN);
	h->generation = le64(in + 40);
	h->value_len = le32(in + 48);
	h->chunk = le16(in + 52);
	h->nchunks = le16(in + 54);
	h->checksum = le64(in + 56);
}
