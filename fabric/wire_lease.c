// SPDX-License-Identifier: MIT
/*
 * fabric/wire_lease.c - the codec of leases: LEASE, LEASE_OK, RELEASE and
 * RELEASE_OK (a memd's own slabs), and protocol 2's placement: PLACE,
 * PLACE_OK, the tickets they carry, LEASE_GRANT, and wire_ticket_body().
 * fabric/wire.c dispatches to them; the invariants of fabric/wire.c's top
 * comment hold here.
 */
#include "fabric/wire_int.h"

#include <errno.h>

/* The largest message (a full LEASE_OK) must fit one frame. */
_Static_assert(8 + WIRE_MAX_LEASES * 46 <= WIRE_MAX_PAYLOAD,
	       "a full LEASE_OK must fit WIRE_MAX_PAYLOAD");
/* A layout entry names a grant in a u8, and WIRE_NO_GRANT is none. */
_Static_assert(WIRE_MAX_GRANTS <= WIRE_NO_GRANT && WIRE_NO_GRANT <= UINT8_MAX,
	       "grant indices must fit a u8 below WIRE_NO_GRANT");
/* A ticket: 48 bytes of body, then the MAC. */
_Static_assert(WIRE_TICKET_BODY_LEN == 8 + 8 + 4 + 4 + 8 + 4 + 4 + 8,
	       "ticket body layout");
#define TICKET_WIRE_LEN (WIRE_TICKET_BODY_LEN + WIRE_MAC_LEN)
_Static_assert(TICKET_WIRE_LEN == 80, "a ticket is 80 bytes on the wire");
/* The largest message of each protocol-2 type must fit one frame. */
_Static_assert(8 + 2 +
			       WIRE_MAX_GRANTS *
				       (4 + 8 + 2 + (WIRE_HOSTPORT_MAX - 1) +
					TICKET_WIRE_LEN) +
			       2 + 2 * WIRE_MAX_LEASES <=
		       WIRE_MAX_PAYLOAD,
	       "a full PLACE_OK must fit WIRE_MAX_PAYLOAD");

int wire_enc_lease(const struct wire_lease_req *l, struct wire_wr *w)
{
	if (l->nslabs < 1 || l->nslabs > WIRE_MAX_LEASES || l->flags != 0 ||
	    !node_ok(l->node))
		return -EINVAL;
	put_u32(w, l->nslabs);
	put_u32(w, l->flags);
	put_node(w, l->node);
	return 0;
}

int wire_dec_lease(struct wire_lease_req *l, struct wire_rd *r)
{
	l->nslabs = get_u32(r);
	l->flags = get_u32(r);
	if (r->bad || l->nslabs < 1 || l->nslabs > WIRE_MAX_LEASES ||
	    l->flags != 0)
		return -EBADMSG;
	return get_node(r, &l->node);
}

int wire_enc_lease_ok(const struct wire_lease_ok *l, struct wire_wr *w)
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

int wire_dec_lease_ok(struct wire_lease_ok *l, struct wire_rd *r)
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

int wire_enc_release(const struct wire_release *l, struct wire_wr *w)
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

int wire_dec_release(struct wire_release *l, struct wire_rd *r)
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

int wire_enc_release_ok(const struct wire_release_ok *l, struct wire_wr *w)
{
	if (l->released > WIRE_MAX_LEASES)
		return -EINVAL;
	put_u32(w, l->released);
	return 0;
}

int wire_dec_release_ok(struct wire_release_ok *l, struct wire_rd *r)
{
	l->released = get_u32(r);
	if (r->bad || l->released > WIRE_MAX_LEASES)
		return -EBADMSG;
	return 0;
}

int wire_enc_place(const struct wire_place *p, struct wire_wr *w)
{
	if (p->nslabs < 1 || p->nslabs > WIRE_MAX_LEASES ||
	    (p->flags & ~WIRE_PLACE_KNOWN) || !node_ok(p->node))
		return -EINVAL;
	put_u32(w, p->nslabs);
	put_u32(w, p->flags);
	put_node(w, p->node);
	return 0;
}

int wire_dec_place(struct wire_place *p, struct wire_rd *r)
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

int wire_enc_place_ok(const struct wire_place_ok *p, struct wire_wr *w)
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

int wire_dec_place_ok(struct wire_place_ok *p, struct wire_rd *r)
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

int wire_enc_lease_grant(const struct wire_lease_grant *l, struct wire_wr *w)
{
	return enc_ticket(&l->ticket, w);
}

int wire_dec_lease_grant(struct wire_lease_grant *l, struct wire_rd *r)
{
	return dec_ticket(&l->ticket, r);
}

void wire_ticket_body(const struct wire_ticket *t,
		      uint8_t out[WIRE_TICKET_BODY_LEN])
{
	struct wire_wr w = { .p = out, .off = 0 };

	put_ticket_body(&w, t);
}
