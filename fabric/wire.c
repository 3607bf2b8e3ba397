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
 *   padding and unused array tails; messages compare with memcmp.
 * - No access goes past the caller's buffer: every get checks what is left
 *   of the payload, and every count is bounded before it drives a loop.
 */
#include "fabric/wire.h"

#include <errno.h>
#include <string.h>

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

/*
 * Payload of m: validated, and written when w->p is set. -EINVAL for an
 * unknown type or a bound broken. The four payload-less types write
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
	case WIRE_HEARTBEAT:
	case WIRE_STATUS:
	case WIRE_BYE:
	case WIRE_BYE_OK:
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
	case WIRE_HEARTBEAT:
	case WIRE_STATUS:
	case WIRE_BYE:
	case WIRE_BYE_OK:
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

const char *wire_type_name(uint8_t type)
{
	switch (type) {
	case WIRE_HELLO:
		return "HELLO";
	case WIRE_LEASE:
		return "LEASE";
	case WIRE_RELEASE:
		return "RELEASE";
	case WIRE_HEARTBEAT:
		return "HEARTBEAT";
	case WIRE_STATUS:
		return "STATUS";
	case WIRE_BYE:
		return "BYE";
	case WIRE_HELLO_OK:
		return "HELLO_OK";
	case WIRE_LEASE_OK:
		return "LEASE_OK";
	case WIRE_RELEASE_OK:
		return "RELEASE_OK";
	case WIRE_HEARTBEAT_OK:
		return "HEARTBEAT_OK";
	case WIRE_STATUS_OK:
		return "STATUS_OK";
	case WIRE_BYE_OK:
		return "BYE_OK";
	case WIRE_ERROR:
		return "ERROR";
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

/*
 * The ticket body: 48 bytes, all little-endian, in struct order -- grant_id
 * u64, registry_epoch u64, tenant_id u32, donor_id u32, donor_epoch u64,
 * nslabs u32, node i32 (two's complement), expires_ms u64. The ticket's
 * MAC (fabric/auth.c) covers exactly these bytes.
 */
void wire_ticket_body(const struct wire_ticket *t,
		      uint8_t out[WIRE_TICKET_BODY_LEN])
{
	st64(out, t->grant_id);
	st64(out + 8, t->registry_epoch);
	st32(out + 16, t->tenant_id);
	st32(out + 20, t->donor_id);
	st64(out + 24, t->donor_epoch);
	st32(out + 32, t->nslabs);
	st32(out + 36, (uint32_t)t->node);
	st64(out + 40, t->expires_ms);
}
