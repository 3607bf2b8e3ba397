// SPDX-License-Identifier: MIT
/*
 * fabric/wire_cluster.c - the codec of the registry's donor messages:
 * DONOR_JOIN, DONOR_REPORT and their replies, and the donor list
 * (DONORS_OK) and membership (MEMBERS_OK) clients read. fabric/wire.c
 * dispatches to them; the invariants of fabric/wire.c's top comment hold
 * here.
 */
#include "fabric/wire_int.h"

#include <errno.h>
#include <string.h>

/* The largest message of each protocol-2 type must fit one frame. */
_Static_assert(2 + (WIRE_NAME_MAX - 1) + 2 + (WIRE_HOSTPORT_MAX - 1) + 8 + 8 +
			       4 + 2 + 12 * WIRE_MAX_NODES <=
		       WIRE_MAX_PAYLOAD,
	       "a full DONOR_JOIN must fit WIRE_MAX_PAYLOAD");
_Static_assert(4 + 8 + 4 * 4 + 8 + 8 + 2 + 12 * WIRE_MAX_TENANTS + 2 +
			       8 * WIRE_MAX_REDEEMED <=
		       WIRE_MAX_PAYLOAD,
	       "a full DONOR_REPORT must fit WIRE_MAX_PAYLOAD");
/* A full DONORS_OK. */
_Static_assert(2 + WIRE_MAX_DONORS * (4 + 8 + 2 + (WIRE_NAME_MAX - 1) + 2 +
				      (WIRE_HOSTPORT_MAX - 1)) <=
		       WIRE_MAX_PAYLOAD,
	       "a full DONORS_OK must fit WIRE_MAX_PAYLOAD");

int wire_enc_donor_join(const struct wire_donor_join *j, struct wire_wr *w)
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

int wire_dec_donor_join(struct wire_donor_join *j, struct wire_rd *r)
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

int wire_enc_donor_join_ok(const struct wire_donor_join_ok *j,
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

int wire_dec_donor_join_ok(struct wire_donor_join_ok *j, struct wire_rd *r)
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

int wire_enc_donor_report(const struct wire_donor_report *d, struct wire_wr *w)
{
	uint16_t i;

	if ((d->flags & ~WIRE_REPORT_KNOWN) || d->ntenants > WIRE_MAX_TENANTS ||
	    d->nredeemed > WIRE_MAX_REDEEMED ||
	    (d->flags & WIRE_REPORT_HEARD ? d->membership < 1
					  : d->membership != 0))
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
	if (d->flags & WIRE_REPORT_HEARD)
		put_u64(w, d->membership);
	return 0;
}

int wire_dec_donor_report(struct wire_donor_report *d, struct wire_rd *r)
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
	if (r->bad || (d->flags & ~WIRE_REPORT_KNOWN) ||
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
	d->membership = 0;
	if (d->flags & WIRE_REPORT_HEARD) {
		d->membership = get_u64(r);
		if (!r->bad && d->membership < 1)
			return -EBADMSG;
	}
	return r->bad ? -EBADMSG : 0;
}

int wire_enc_donor_report_ok(const struct wire_donor_report_ok *d,
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

int wire_dec_donor_report_ok(struct wire_donor_report_ok *d, struct wire_rd *r)
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

int wire_enc_donors_ok(const struct wire_donors_ok *d, bool members,
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

int wire_dec_donors_ok(struct wire_donors_ok *d, bool members,
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
