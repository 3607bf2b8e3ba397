// SPDX-License-Identifier: MIT
/*
 * fabric/wire_session.c - the codec of a session's own messages: HELLO
 * and HELLO_OK, the AUTH handshake (protocol 2), heartbeats (HEARTBEAT_OK,
 * HEARTBEAT2), STATUS_OK, FABRIC, and ADMIN. fabric/wire.c dispatches to
 * them; the invariants of fabric/wire.c's top comment hold here.
 */
#include "fabric/wire_int.h"

#include <errno.h>
#include <string.h>

/* The largest message of each protocol-2 type must fit one frame. */
_Static_assert(2 + (WIRE_NAME_MAX - 1) + WIRE_NONCE_LEN + 2 + WIRE_PASS_MAX <=
		       WIRE_MAX_PAYLOAD,
	       "a full AUTH must fit WIRE_MAX_PAYLOAD");
_Static_assert(WIRE_MAC_LEN + 1 + 4 + 4 + 4 + 2 + WIRE_PASS_MAX + 2 +
			       WIRE_BOX_MAX <=
		       WIRE_MAX_PAYLOAD,
	       "a full AUTH_OK must fit WIRE_MAX_PAYLOAD");
_Static_assert(2 + WIRE_JSON_MAX <= WIRE_MAX_PAYLOAD,
	       "a full ADMIN must fit WIRE_MAX_PAYLOAD");

int wire_enc_hello(const struct wire_hello *h, struct wire_wr *w)
{
	if (h->proto_min < 1 || h->proto_min > h->proto_max)
		return -EINVAL;
	put_u16(w, h->proto_min);
	put_u16(w, h->proto_max);
	return put_str(w, h->client, sizeof(h->client));
}

int wire_dec_hello(struct wire_hello *h, struct wire_rd *r)
{
	h->proto_min = get_u16(r);
	h->proto_max = get_u16(r);
	if (r->bad || h->proto_min < 1 || h->proto_min > h->proto_max)
		return -EBADMSG;
	return get_str(r, h->client, sizeof(h->client));
}

int wire_enc_hello_ok(const struct wire_hello_ok *h, struct wire_wr *w)
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

int wire_dec_hello_ok(struct wire_hello_ok *h, struct wire_rd *r)
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

int wire_enc_heartbeat_ok(const struct wire_heartbeat_ok *h, struct wire_wr *w)
{
	if (h->ttl_ms < 1)
		return -EINVAL;
	put_u32(w, h->ttl_ms);
	put_u32(w, h->nleases);
	put_u64(w, h->epoch);
	return 0;
}

int wire_dec_heartbeat_ok(struct wire_heartbeat_ok *h, struct wire_rd *r)
{
	h->ttl_ms = get_u32(r);
	h->nleases = get_u32(r);
	h->epoch = get_u64(r);
	if (r->bad || h->ttl_ms < 1)
		return -EBADMSG;
	return 0;
}

int wire_enc_status_ok(const struct wire_status_ok *s, struct wire_wr *w)
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

int wire_dec_status_ok(struct wire_status_ok *s, struct wire_rd *r)
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

int wire_enc_auth(const struct wire_auth *a, struct wire_wr *w)
{
	if (a->pass_len > WIRE_PASS_MAX)
		return -EINVAL;
	if (put_name(w, a->principal, sizeof(a->principal)) < 0)
		return -EINVAL;
	put_raw(w, a->cnonce, WIRE_NONCE_LEN);
	put_blob(w, a->pass, a->pass_len);
	return 0;
}

int wire_dec_auth(struct wire_auth *a, struct wire_rd *r)
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

int wire_enc_auth_ok(const struct wire_auth_ok *a, struct wire_wr *w)
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

int wire_dec_auth_ok(struct wire_auth_ok *a, struct wire_rd *r)
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

int wire_enc_heartbeat2(const struct wire_heartbeat2 *h, struct wire_wr *w)
{
	put_u64(w, h->bytes_read);
	put_u64(w, h->bytes_written);
	put_u64(w, h->ops);
	return 0;
}

int wire_dec_heartbeat2(struct wire_heartbeat2 *h, struct wire_rd *r)
{
	h->bytes_read = get_u64(r);
	h->bytes_written = get_u64(r);
	h->ops = get_u64(r);
	return r->bad ? -EBADMSG : 0;
}

int wire_enc_fabric(const struct wire_fabric *f, struct wire_wr *w)
{
	if (f->flags)
		return -EINVAL;
	put_u32(w, f->flags);
	put_u32(w, f->rxm_buffer_size);
	return 0;
}

int wire_dec_fabric(struct wire_fabric *f, struct wire_rd *r)
{
	f->flags = get_u32(r);
	f->rxm_buffer_size = get_u32(r);
	return r->bad || f->flags ? -EBADMSG : 0;
}

/*
 * ADMIN / ADMIN_OK: u16 length + JSON text, 1 .. WIRE_JSON_MAX bytes, no
 * NUL. The decoder points json at the text inside the caller's frame
 * instead of copying up to 64 KiB into every struct wire_msg.
 */
int wire_enc_admin(const struct wire_admin *a, struct wire_wr *w)
{
	if (a->json_len < 1 || a->json_len > WIRE_JSON_MAX || !a->json ||
	    memchr(a->json, '\0', a->json_len))
		return -EINVAL;
	put_blob(w, a->json, (uint16_t)a->json_len);
	return 0;
}

int wire_dec_admin(struct wire_admin *a, struct wire_rd *r)
{
	uint16_t n = get_u16(r);

	if (r->bad || n < 1 || n > WIRE_JSON_MAX || !rd_has(r, n))
		return -EBADMSG;
	a->json = (const char *)(r->p + r->off);
	a->json_len = n;
	r->off += n;
	return memchr(a->json, '\0', n) ? -EBADMSG : 0;
}
