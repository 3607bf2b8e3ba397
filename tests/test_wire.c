// SPDX-License-Identifier: MIT
/*
 * tests/test_wire.c - the control-plane codec (fabric/wire*.c) against its
 * spec (docs/protocol.md).
 *
 * Owns no state beyond its static scratch buffers; single-threaded.
 *
 * The expected bytes of every message come from tb_*, a second, deliberately
 * naive little-endian writer that follows the spec tables field by field, so
 * an encoder and decoder that agree with each other but not with the spec
 * (swapped fields, wrong byte order) still fail. Field values derive from a
 * key with distinct bytes in every position, so any misplaced byte shows.
 */
#include "fabric/wire.h"
#include "tests/testutil.h"
#include "tests/wire_eq.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint8_t all_types[] = {
	WIRE_HELLO,
	WIRE_LEASE,
	WIRE_RELEASE,
	WIRE_HEARTBEAT,
	WIRE_STATUS,
	WIRE_BYE,
	WIRE_HELLO_OK,
	WIRE_LEASE_OK,
	WIRE_RELEASE_OK,
	WIRE_HEARTBEAT_OK,
	WIRE_STATUS_OK,
	WIRE_BYE_OK,
	WIRE_ERROR,
	/* protocol 2 */
	WIRE_AUTH,
	WIRE_AUTH_CHALLENGE,
	WIRE_AUTH_PROOF,
	WIRE_AUTH_OK,
	WIRE_PLACE,
	WIRE_PLACE_OK,
	WIRE_LEASE_GRANT,
	WIRE_LEASE_GRANT_OK,
	WIRE_HEARTBEAT2,
	WIRE_HEARTBEAT2_OK,
	WIRE_DONOR_JOIN,
	WIRE_DONOR_JOIN_OK,
	WIRE_DONOR_REPORT,
	WIRE_DONOR_REPORT_OK,
	WIRE_ADMIN,
	WIRE_ADMIN_OK,
	/* protocol 2: KV tier and the donor list */
	WIRE_KV_RESERVE,
	WIRE_KV_COMMIT,
	WIRE_KV_LOOKUP,
	WIRE_KV_DONE,
	WIRE_KV_EXISTS,
	WIRE_KV_DELETE,
	WIRE_KV_PIN,
	WIRE_DONORS,
	WIRE_KV_RESERVE_OK,
	WIRE_KV_COMMIT_OK,
	WIRE_KV_LOOKUP_OK,
	WIRE_KV_DONE_OK,
	WIRE_KV_EXISTS_OK,
	WIRE_KV_DELETE_OK,
	WIRE_KV_PIN_OK,
	WIRE_DONORS_OK,
	WIRE_SHM,
	WIRE_SHM_OK,
	/* protocol 3 */
	WIRE_KV_MODEL,
	WIRE_KV_MODEL_OK,
	WIRE_FABRIC,
	WIRE_FABRIC_OK,
	/* protocol 4 */
	WIRE_KV_CLEAR,
	WIRE_KV_CLEAR_OK,
	/* protocol 5 */
	WIRE_MEMBERS,
	WIRE_MEMBERS_OK,
	WIRE_KV_RESERVE_AT,
	WIRE_KV_COMMIT_AT,
	WIRE_KV_LOOKUP_AT,
	WIRE_KV_EXISTS_AT,
	WIRE_KV_DELETE_AT,
	WIRE_KV_PIN_AT,
	WIRE_KV_RESERVE_AT_OK,
	WIRE_KV_COMMIT_AT_OK,
	WIRE_KV_LOOKUP_AT_OK,
	WIRE_KV_EXISTS_AT_OK,
	WIRE_KV_DELETE_AT_OK,
	WIRE_KV_PIN_AT_OK,
	/* protocol 6 */
	WIRE_DONOR_NEWS,
};
#define NTYPES (sizeof(all_types) / sizeof(all_types[0]))

static bool is_known_type(unsigned int t)
{
	size_t i;

	for (i = 0; i < NTYPES; i++)
		if (all_types[i] == t)
			return true;
	return false;
}

/* A 64-bit value for (key, field) whose eight bytes all differ. */
static uint64_t kv(uint64_t key, uint64_t field)
{
	uint64_t x =
		key * 0x9e3779b97f4a7c15ull + field * 0xbf58476d1ce4e5b9ull;
	uint64_t v = 0;
	int i;

	x ^= x >> 31;
	for (i = 0; i < 8; i++)
		v |= (uint64_t)(uint8_t)(((x >> (i * 8)) & 0x1f) | (i << 5))
		     << (i * 8);
	return v;
}

/* --- the spec's byte layout, written independently of wire.c --- */

struct tb {
	uint8_t b[WIRE_MAX_FRAME + 64];
	size_t n;
};

static void tb_u8(struct tb *t, uint8_t v)
{
	t->b[t->n++] = v;
}

static void tb_u16(struct tb *t, uint16_t v)
{
	tb_u8(t, v & 0xff);
	tb_u8(t, v >> 8);
}

static void tb_u32(struct tb *t, uint32_t v)
{
	tb_u16(t, v & 0xffff);
	tb_u16(t, v >> 16);
}

static void tb_u64(struct tb *t, uint64_t v)
{
	tb_u32(t, (uint32_t)v);
	tb_u32(t, (uint32_t)(v >> 32));
}

static void tb_bytes(struct tb *t, const void *p, size_t n)
{
	memcpy(t->b + t->n, p, n);
	t->n += n;
}

static void tb_str(struct tb *t, const char *s)
{
	tb_u16(t, (uint16_t)strlen(s));
	tb_bytes(t, s, strlen(s));
}

/* Header with len 0; tb_end() patches len once the payload is written. */
static void tb_hdr(struct tb *t, uint8_t version, uint8_t type, uint16_t flags,
		   uint32_t seq)
{
	t->n = 0;
	tb_bytes(t, "TDPL", 4);
	tb_u8(t, version);
	tb_u8(t, type);
	tb_u16(t, flags);
	tb_u32(t, seq);
	tb_u32(t, 0);
}

static void tb_end(struct tb *t)
{
	uint32_t plen = (uint32_t)(t->n - WIRE_HDR_LEN);

	t->b[12] = plen & 0xff;
	t->b[13] = (plen >> 8) & 0xff;
	t->b[14] = (plen >> 16) & 0xff;
	t->b[15] = plen >> 24;
}

/* A ticket: 48 bytes of body, then the MAC (docs/protocol.md). */
static void tb_ticket(struct tb *t, const struct wire_ticket *k)
{
	tb_u64(t, k->grant_id);
	tb_u64(t, k->registry_epoch);
	tb_u32(t, k->tenant_id);
	tb_u32(t, k->donor_id);
	tb_u64(t, k->donor_epoch);
	tb_u32(t, k->nslabs);
	tb_u32(t, (uint32_t)k->node);
	tb_u64(t, k->expires_ms);
	tb_bytes(t, k->mac, WIRE_MAC_LEN);
}

static void tb_grant(struct tb *t, const struct wire_grant *g)
{
	tb_u32(t, g->donor_id);
	tb_u64(t, g->donor_epoch);
	tb_str(t, g->addr);
	tb_ticket(t, &g->ticket);
}

static void tb_lease_ok(struct tb *t, const struct wire_lease_ok *lo)
{
	uint32_t i;

	tb_u32(t, lo->ttl_ms);
	tb_u32(t, lo->count);
	for (i = 0; i < lo->count; i++) {
		const struct wire_lease *l = &lo->lease[i];

		tb_u64(t, l->epoch);
		tb_u32(t, l->slab);
		tb_u32(t, l->generation);
		tb_u64(t, l->key);
		tb_u64(t, l->base);
		tb_u64(t, l->len_bytes);
		tb_u16(t, l->endpoint);
		tb_u32(t, (uint32_t)l->node);
	}
}

static void tb_heartbeat_ok(struct tb *t, const struct wire_heartbeat_ok *h)
{
	tb_u32(t, h->ttl_ms);
	tb_u32(t, h->nleases);
	tb_u64(t, h->epoch);
}

/*
 * The KV payloads, straight from protocol.md's tables: the per-type item
 * layouts and the location list.
 */
static void tb_kv_items(struct tb *t, const struct wire_kv *k, bool key,
			bool vlen, bool gen, bool csum, bool status, bool locs)
{
	uint32_t i;

	tb_u16(t, k->count);
	for (i = 0; i < k->count; i++) {
		const struct wire_kv_item *it = &k->item[i];

		if (key)
			tb_bytes(t, it->key, WIRE_KV_KEY_LEN);
		if (vlen)
			tb_u64(t, it->value_len);
		if (gen)
			tb_u64(t, it->generation);
		if (csum)
			tb_u64(t, it->checksum);
		if (status)
			tb_u32(t, (uint32_t)it->status);
		if (locs) {
			tb_u32(t, it->first_loc);
			tb_u32(t, it->nchunks);
		}
	}
	if (!locs)
		return;
	tb_u16(t, k->nlocs);
	for (i = 0; i < k->nlocs; i++) {
		tb_u64(t, k->loc[i].raddr);
		tb_u64(t, k->loc[i].rkey);
		tb_u64(t, k->loc[i].block_bytes);
		tb_u16(t, k->loc[i].endpoint);
	}
}

static bool spec_kv(const struct wire_msg *m, struct tb *t)
{
	const struct wire_kv *k = &m->u.kv;
	uint8_t type = wire_kv_plain(m->type);
	uint32_t i;

	/* protocol 5: an _AT request is its namesake after the membership;
	 * an _AT reply is its namesake's layout */
	if (type != m->type && !(m->type & 0x80))
		tb_u64(t, k->membership);
	switch (type) {
	case WIRE_KV_RESERVE:
		tb_kv_items(t, k, 1, 1, 0, 0, 0, 0);
		return true;
	case WIRE_KV_COMMIT:
		tb_kv_items(t, k, 1, 0, 1, 1, 0, 0);
		return true;
	case WIRE_KV_LOOKUP:
	case WIRE_KV_EXISTS:
	case WIRE_KV_DELETE:
		tb_kv_items(t, k, 1, 0, 0, 0, 0, 0);
		return true;
	case WIRE_KV_DONE:
		tb_kv_items(t, k, 1, 0, 1, 0, 0, 0);
		return true;
	case WIRE_KV_PIN:
		tb_u32(t, k->flags);
		tb_kv_items(t, k, 1, 0, 0, 0, 0, 0);
		return true;
	case WIRE_KV_RESERVE_OK:
		tb_kv_items(t, k, 0, 0, 1, 0, 1, 1);
		return true;
	case WIRE_KV_LOOKUP_OK:
		tb_kv_items(t, k, 0, 1, 1, 1, 1, 1);
		return true;
	case WIRE_KV_COMMIT_OK:
	case WIRE_KV_DONE_OK:
	case WIRE_KV_DELETE_OK:
	case WIRE_KV_PIN_OK:
		tb_kv_items(t, k, 0, 0, 0, 0, 1, 0);
		return true;
	case WIRE_KV_EXISTS_OK:
		tb_u16(t, k->count);
		return true;
	case WIRE_MEMBERS_OK:
	case WIRE_DONORS_OK:
		if (m->type == WIRE_MEMBERS_OK)
			tb_u64(t, m->u.donors_ok.membership);
		tb_u16(t, m->u.donors_ok.count);
		for (i = 0; i < m->u.donors_ok.count; i++) {
			const struct wire_donor_entry *e =
				&m->u.donors_ok.donor[i];

			tb_u32(t, e->donor_id);
			tb_u64(t, e->epoch);
			tb_str(t, e->name);
			tb_str(t, e->addr);
		}
		return true;
	}
	return false;
}

/* The protocol-2 payloads (spec_frame's second half). */
static void spec_payload2(const struct wire_msg *m, struct tb *t)
{
	const struct wire_auth_ok *ao = &m->u.auth_ok;
	const struct wire_place_ok *po = &m->u.place_ok;
	const struct wire_donor_join *dj = &m->u.donor_join;
	const struct wire_donor_report *dr = &m->u.donor_report;
	uint32_t i;

	if (spec_kv(m, t))
		return;
	switch (m->type) {
	case WIRE_AUTH:
		tb_str(t, m->u.auth.principal);
		tb_bytes(t, m->u.auth.cnonce, WIRE_NONCE_LEN);
		tb_u16(t, m->u.auth.pass_len);
		tb_bytes(t, m->u.auth.pass, m->u.auth.pass_len);
		break;
	case WIRE_AUTH_CHALLENGE:
		tb_bytes(t, m->u.auth_challenge.snonce, WIRE_NONCE_LEN);
		break;
	case WIRE_SHM:
		tb_bytes(t, m->u.shm.boot_id, WIRE_BOOT_ID_LEN);
		break;
	case WIRE_KV_MODEL:
		tb_u32(t, m->u.kv_model.flags);
		tb_u32(t, m->u.kv_model.prefill_tokens_per_s);
		tb_u64(t, m->u.kv_model.bytes_per_token);
		break;
	case WIRE_FABRIC:
	case WIRE_FABRIC_OK:
		tb_u32(t, m->u.fabric.flags);
		tb_u32(t, m->u.fabric.rxm_buffer_size);
		break;
	case WIRE_SHM_OK:
		tb_bytes(t, m->u.shm_ok.nonce, WIRE_NONCE_LEN);
		tb_str(t, m->u.shm_ok.socket);
		break;
	case WIRE_AUTH_PROOF:
		tb_bytes(t, m->u.auth_proof.mac, WIRE_MAC_LEN);
		break;
	case WIRE_AUTH_OK:
		tb_bytes(t, ao->mac, WIRE_MAC_LEN);
		tb_u8(t, ao->role);
		tb_u32(t, ao->flags);
		tb_u32(t, ao->tenant_id);
		tb_u32(t, ao->pass_ttl_ms);
		tb_u16(t, ao->pass_len);
		tb_bytes(t, ao->pass, ao->pass_len);
		tb_u16(t, ao->box_len);
		tb_bytes(t, ao->box, ao->box_len);
		break;
	case WIRE_PLACE:
		tb_u32(t, m->u.place.nslabs);
		tb_u32(t, m->u.place.flags);
		tb_u32(t, (uint32_t)m->u.place.node);
		break;
	case WIRE_PLACE_OK:
		tb_u64(t, po->registry_epoch);
		tb_u16(t, po->ngrants);
		for (i = 0; i < po->ngrants; i++)
			tb_grant(t, &po->grant[i]);
		tb_u16(t, po->nslabs);
		for (i = 0; i < po->nslabs; i++) {
			tb_u8(t, po->layout[i].primary);
			tb_u8(t, po->layout[i].replica);
		}
		break;
	case WIRE_LEASE_GRANT:
		tb_ticket(t, &m->u.lease_grant.ticket);
		break;
	case WIRE_LEASE_GRANT_OK:
		tb_lease_ok(t, &m->u.lease_ok);
		break;
	case WIRE_HEARTBEAT2:
		tb_u64(t, m->u.heartbeat2.bytes_read);
		tb_u64(t, m->u.heartbeat2.bytes_written);
		tb_u64(t, m->u.heartbeat2.ops);
		break;
	case WIRE_HEARTBEAT2_OK:
		tb_heartbeat_ok(t, &m->u.heartbeat_ok);
		break;
	case WIRE_DONOR_JOIN:
		tb_str(t, dj->name);
		tb_str(t, dj->addr);
		tb_u64(t, dj->epoch);
		tb_u64(t, dj->slab_bytes);
		tb_u32(t, dj->slabs_total);
		tb_u16(t, dj->nnodes);
		for (i = 0; i < dj->nnodes; i++) {
			tb_u32(t, (uint32_t)dj->node[i].node);
			tb_u32(t, dj->node[i].slabs_total);
			tb_u32(t, dj->node[i].slabs_free);
		}
		break;
	case WIRE_DONOR_JOIN_OK:
		tb_u32(t, m->u.donor_join_ok.donor_id);
		tb_u64(t, m->u.donor_join_ok.registry_epoch);
		tb_u32(t, m->u.donor_join_ok.report_ms);
		tb_u32(t, m->u.donor_join_ok.flags);
		if (m->u.donor_join_ok.flags & WIRE_DONOR_MEMBERSHIP)
			tb_u64(t, m->u.donor_join_ok.membership);
		break;
	case WIRE_DONOR_REPORT:
		tb_u32(t, dr->donor_id);
		tb_u64(t, dr->epoch);
		tb_u32(t, dr->slabs_free);
		tb_u32(t, dr->slabs_leased);
		tb_u32(t, dr->slabs_reclaiming);
		tb_u32(t, dr->flags);
		tb_u64(t, dr->bytes_read);
		tb_u64(t, dr->bytes_written);
		tb_u16(t, dr->ntenants);
		for (i = 0; i < dr->ntenants; i++) {
			tb_u32(t, dr->tenant[i].tenant_id);
			tb_u32(t, dr->tenant[i].slabs);
			tb_u32(t, dr->tenant[i].sessions);
			tb_u32(t, dr->tenant[i].kv_slabs);
			tb_u32(t, dr->tenant[i].flags);
		}
		tb_u16(t, dr->nredeemed);
		for (i = 0; i < dr->nredeemed; i++)
			tb_u64(t, dr->redeemed[i]);
		if (dr->flags & WIRE_REPORT_HEARD)
			tb_u64(t, dr->membership);
		break;
	case WIRE_DONOR_REPORT_OK:
		tb_u64(t, m->u.donor_report_ok.registry_epoch);
		tb_u32(t, m->u.donor_report_ok.flags);
		tb_u16(t, m->u.donor_report_ok.nkv);
		for (i = 0; i < m->u.donor_report_ok.nkv; i++) {
			tb_u32(t, m->u.donor_report_ok.kv[i].tenant_id);
			tb_u32(t, m->u.donor_report_ok.kv[i].kv_slabs_max);
		}
		if (m->u.donor_report_ok.flags & WIRE_DONOR_TENANTS)
			tb_u32(t, m->u.donor_report_ok.next_tenant_id);
		if (m->u.donor_report_ok.flags & WIRE_DONOR_FENCE)
			tb_u32(t, m->u.donor_report_ok.fence_ms);
		if (m->u.donor_report_ok.flags & WIRE_DONOR_MEMBERSHIP)
			tb_u64(t, m->u.donor_report_ok.membership);
		break;
	case WIRE_ADMIN:
	case WIRE_ADMIN_OK:
		tb_u16(t, (uint16_t)m->u.admin.json_len);
		if (m->u.admin.json)
			tb_bytes(t, m->u.admin.json, m->u.admin.json_len);
		break;
	default: /* payload-less types */
		break;
	}
}

/* The frame the spec says m must become. */
static void spec_frame(const struct wire_msg *m, struct tb *t)
{
	const struct wire_hello_ok *ho = &m->u.hello_ok;
	const struct wire_status_ok *so = &m->u.status_ok;
	uint32_t i;

	tb_hdr(t, 1, m->type, 0, m->seq);
	switch (m->type) {
	case WIRE_HELLO:
		tb_u16(t, m->u.hello.proto_min);
		tb_u16(t, m->u.hello.proto_max);
		tb_str(t, m->u.hello.client);
		break;
	case WIRE_HELLO_OK:
		tb_u16(t, ho->proto);
		tb_u64(t, ho->session_id);
		tb_u64(t, ho->epoch);
		tb_u32(t, ho->ttl_ms);
		tb_u64(t, ho->slab_bytes);
		tb_str(t, ho->provider);
		tb_u16(t, ho->nendpoints);
		for (i = 0; i < ho->nendpoints; i++) {
			tb_u32(t, (uint32_t)ho->ep[i].node);
			tb_u16(t, ho->ep[i].addr_len);
			tb_bytes(t, ho->ep[i].addr, ho->ep[i].addr_len);
		}
		break;
	case WIRE_LEASE:
		tb_u32(t, m->u.lease.nslabs);
		tb_u32(t, m->u.lease.flags);
		tb_u32(t, (uint32_t)m->u.lease.node);
		break;
	case WIRE_LEASE_OK:
		tb_lease_ok(t, &m->u.lease_ok);
		break;
	case WIRE_RELEASE:
		tb_u32(t, m->u.release.count);
		for (i = 0; i < m->u.release.count; i++) {
			tb_u64(t, m->u.release.ref[i].epoch);
			tb_u32(t, m->u.release.ref[i].slab);
			tb_u32(t, m->u.release.ref[i].generation);
		}
		break;
	case WIRE_RELEASE_OK:
		tb_u32(t, m->u.release_ok.released);
		break;
	case WIRE_HEARTBEAT_OK:
		tb_heartbeat_ok(t, &m->u.heartbeat_ok);
		break;
	case WIRE_STATUS_OK:
		tb_u64(t, so->epoch);
		tb_u64(t, so->uptime_ms);
		tb_u64(t, so->donated_bytes);
		tb_u64(t, so->slab_bytes);
		tb_u32(t, so->slabs_total);
		tb_u32(t, so->slabs_free);
		tb_u32(t, so->slabs_leased);
		tb_u32(t, so->slabs_reclaiming);
		tb_u32(t, so->sessions);
		tb_u32(t, so->flags);
		tb_u64(t, so->leases_expired);
		tb_u64(t, so->frames_rejected);
		tb_u16(t, so->nnodes);
		for (i = 0; i < so->nnodes; i++) {
			tb_u32(t, (uint32_t)so->node[i].node);
			tb_u32(t, so->node[i].slabs_total);
			tb_u32(t, so->node[i].slabs_free);
		}
		break;
	case WIRE_ERROR:
		tb_u32(t, (uint32_t)m->u.error.err);
		tb_str(t, m->u.error.msg);
		break;
	default:
		spec_payload2(m, t);
		break;
	}
	tb_end(t);
}

/* --- sample messages with every field non-trivial --- */

/* A node for (key, field): -1 now and then, else 0 .. WIRE_NODE_MAX - 1. */
static int32_t kn(uint64_t key, uint64_t field)
{
	uint64_t v = kv(key, field);

	return v % 5 == 0 ? WIRE_NODE_ANY : (int32_t)(v % WIRE_NODE_MAX);
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t key, uint64_t field)
{
	size_t i;

	for (i = 0; i < n; i++) /* zeros included */
		p[i] = (uint8_t)kv(key, field + i);
}

/* A valid ticket for (key, field); the caller may pin the ids. */
static void sample_ticket(struct wire_ticket *k, uint64_t key, uint64_t field)
{
	k->grant_id = kv(key, field);
	k->registry_epoch = kv(key, field + 1);
	k->tenant_id = (uint32_t)kv(key, field + 2);
	k->donor_id = (uint32_t)kv(key, field + 3);
	k->donor_epoch = kv(key, field + 4);
	k->nslabs = (uint32_t)(1 + kv(key, field + 5) % WIRE_MAX_LEASES);
	k->node = kn(key, field + 6);
	k->expires_ms = kv(key, field + 7);
	fill_bytes(k->mac, WIRE_MAC_LEN, key, field + 8);
}

/*
 * A consistent PLACE_OK: ngrants grants on distinct donors, nslabs >=
 * ngrants slabs striped round-robin (replica on the next grant), each
 * ticket counting exactly the layout entries that name its grant.
 */
static void make_place_ok(struct wire_place_ok *p, uint64_t key,
			  uint16_t ngrants, uint16_t nslabs, bool replica)
{
	uint16_t g, k;

	memset(p, 0, sizeof(*p));
	p->registry_epoch = kv(key, 40);
	p->ngrants = ngrants;
	p->nslabs = nslabs;
	for (g = 0; g < ngrants; g++) {
		struct wire_grant *gr = &p->grant[g];

		sample_ticket(&gr->ticket, key, 3000 + 100 * g);
		gr->donor_id = (uint32_t)kv(key, 41) + g;
		gr->donor_epoch = kv(key, 42 + g);
		gr->ticket.donor_id = gr->donor_id;
		gr->ticket.donor_epoch = gr->donor_epoch;
		gr->ticket.registry_epoch = p->registry_epoch;
		gr->ticket.nslabs = 0;
		snprintf(gr->addr, sizeof(gr->addr),
			 "donor-%u.%llx.example:7070", g,
			 (unsigned long long)kv(key, 43));
	}
	for (k = 0; k < nslabs; k++) {
		p->layout[k].primary = (uint8_t)(k % ngrants);
		p->layout[k].replica =
			replica ? (uint8_t)((k + 1) % ngrants) : WIRE_NO_GRANT;
		p->grant[p->layout[k].primary].ticket.nslabs++;
		if (replica)
			p->grant[p->layout[k].replica].ticket.nslabs++;
	}
}

/* ADMIN / ADMIN_OK text lives here (the message only points at it). */
static char sample_json[WIRE_JSON_MAX + 1];

/*
 * A valid KV message of type for key: count items (1 .. 64 by key) with
 * the fields the type carries; replies with locations give every item
 * with status 0 its own run of locations, failures none.
 */
static void sample_kv(uint8_t type, uint64_t key, struct wire_kv *k)
{
	bool locs = type == WIRE_KV_RESERVE_OK || type == WIRE_KV_LOOKUP_OK;
	bool reply = type & 0x80;
	uint32_t i, j;

	k->count = (uint16_t)(1 + key % WIRE_KV_BATCH);
	if (type == WIRE_KV_EXISTS_OK) {
		k->count = (uint16_t)(key % (WIRE_KV_BATCH + 1));
		return;
	}
	if (type == WIRE_KV_PIN)
		k->flags = WIRE_KV_KNOWN & (uint32_t)key;
	for (i = 0; i < k->count; i++) {
		struct wire_kv_item *it = &k->item[i];

		if (!reply)
			fill_bytes(it->key, WIRE_KV_KEY_LEN, key,
				   3000 + 40 * i);
		if (type == WIRE_KV_RESERVE || type == WIRE_KV_LOOKUP_OK)
			it->value_len = kv(key, 5000 + i);
		if (type == WIRE_KV_COMMIT || type == WIRE_KV_DONE ||
		    type == WIRE_KV_RESERVE_OK || type == WIRE_KV_LOOKUP_OK)
			it->generation = kv(key, 5100 + i);
		if (type == WIRE_KV_COMMIT || type == WIRE_KV_LOOKUP_OK)
			it->checksum = kv(key, 5200 + i);
		if (!reply)
			continue;
		/* every third key fails, with an errno by key */
		if ((key + i) % 3 == 0)
			it->status = -(int32_t)(1 + kv(key, 5300 + i) %
							    WIRE_ERR_MAX);
		if (!locs || it->status)
			continue;
		it->first_loc = k->nlocs;
		it->nchunks = (uint32_t)(1 + (key + i) % 5);
		for (j = 0; j < it->nchunks; j++) {
			struct wire_kv_loc *l = &k->loc[k->nlocs++];

			l->raddr = kv(key, 6000 + k->nlocs);
			l->rkey = kv(key, 7000 + k->nlocs);
			l->block_bytes = WIRE_KV_HEADER_LEN + 1 +
					 kv(key, 8000 + k->nlocs) % (1u << 30);
			l->endpoint = (uint16_t)(kv(key, 9000 + k->nlocs) %
						 WIRE_MAX_ENDPOINTS);
		}
	}
}

static void sample_donors_ok(uint64_t key, struct wire_donors_ok *d)
{
	uint32_t i;

	d->count = (uint16_t)(key % (WIRE_MAX_DONORS + 1));
	for (i = 0; i < d->count; i++) {
		struct wire_donor_entry *e = &d->donor[i];

		e->donor_id = 1 + i + 1000 * (uint32_t)(key % 7);
		e->epoch = kv(key, 9600 + i);
		snprintf(e->name, sizeof(e->name), "host-%u.%llx", i,
			 (unsigned long long)kv(key, 9700));
		snprintf(e->addr, sizeof(e->addr), "10.0.%u.%u:%u", i,
			 (unsigned)(key % 256),
			 (unsigned)(1024 + kv(key, 9800 + i) % 60000));
	}
}

static void sample2(uint8_t type, uint64_t key, struct wire_msg *m)
{
	struct wire_auth_ok *ao = &m->u.auth_ok;
	struct wire_donor_join *dj = &m->u.donor_join;
	struct wire_donor_report *dr = &m->u.donor_report;
	uint32_t i;
	uint16_t ng;

	switch (type) {
	case WIRE_AUTH:
		snprintf(m->u.auth.principal, sizeof(m->u.auth.principal),
			 "tenant-%llx", (unsigned long long)kv(key, 50));
		fill_bytes(m->u.auth.cnonce, WIRE_NONCE_LEN, key, 51);
		m->u.auth.pass_len = (uint16_t)(key % (WIRE_PASS_MAX + 1));
		fill_bytes(m->u.auth.pass, m->u.auth.pass_len, key, 90);
		break;
	case WIRE_AUTH_CHALLENGE:
		fill_bytes(m->u.auth_challenge.snonce, WIRE_NONCE_LEN, key, 52);
		break;
	case WIRE_SHM:
		fill_bytes(m->u.shm.boot_id, WIRE_BOOT_ID_LEN, key, 54);
		break;
	case WIRE_KV_MODEL: /* any values: memd bounds them, not the codec */
		m->u.kv_model.prefill_tokens_per_s = (uint32_t)kv(key, 57);
		m->u.kv_model.bytes_per_token = kv(key, 58);
		break;
	case WIRE_FABRIC: /* any size: the peers compare, the codec not */
	case WIRE_FABRIC_OK:
		m->u.fabric.rxm_buffer_size = (uint32_t)kv(key, 59);
		break;
	case WIRE_SHM_OK:
		fill_bytes(m->u.shm_ok.nonce, WIRE_NONCE_LEN, key, 55);
		snprintf(m->u.shm_ok.socket, sizeof(m->u.shm_ok.socket),
			 "tidepool-memd-%016llx",
			 (unsigned long long)kv(key, 56));
		break;
	case WIRE_AUTH_PROOF:
		fill_bytes(m->u.auth_proof.mac, WIRE_MAC_LEN, key, 53);
		break;
	case WIRE_AUTH_OK:
		fill_bytes(ao->mac, WIRE_MAC_LEN, key, 54);
		ao->role = (uint8_t)(WIRE_ROLE_TENANT + key % 3);
		ao->flags = WIRE_AUTH_KNOWN & (uint32_t)(key >> 1);
		if (ao->role != WIRE_ROLE_TENANT)
			break;
		ao->tenant_id = (uint32_t)kv(key, 55);
		if (key % 2)
			break; /* a tenant at a donor: no pass */
		ao->pass_ttl_ms = (uint32_t)kv(key, 56) | 1;
		ao->pass_len = (uint16_t)(1 + key % WIRE_PASS_MAX);
		fill_bytes(ao->pass, ao->pass_len, key, 400);
		ao->box_len = (uint16_t)(1 + key % WIRE_BOX_MAX);
		fill_bytes(ao->box, ao->box_len, key, 700);
		break;
	case WIRE_PLACE:
		m->u.place.nslabs = (uint32_t)(1 + key % WIRE_MAX_LEASES);
		m->u.place.flags = WIRE_PLACE_KNOWN & (uint32_t)key;
		m->u.place.node = kn(key, 57);
		break;
	case WIRE_PLACE_OK:
		ng = (uint16_t)(1 + key % WIRE_MAX_GRANTS);
		make_place_ok(&m->u.place_ok, key, ng,
			      (uint16_t)(ng + key % 37), ng > 1 && key % 2);
		break;
	case WIRE_LEASE_GRANT:
		sample_ticket(&m->u.lease_grant.ticket, key, 58);
		break;
	case WIRE_HEARTBEAT2:
		m->u.heartbeat2.bytes_read = kv(key, 70);
		m->u.heartbeat2.bytes_written = kv(key, 71);
		m->u.heartbeat2.ops = kv(key, 72);
		break;
	case WIRE_DONOR_JOIN:
		snprintf(dj->name, sizeof(dj->name), "host-%llx",
			 (unsigned long long)kv(key, 73));
		snprintf(dj->addr, sizeof(dj->addr), "10.%u.%u.%u:%u",
			 (unsigned)(key % 256), (unsigned)(key / 256 % 256),
			 (unsigned)(kv(key, 74) % 256),
			 (unsigned)(1024 + kv(key, 75) % 60000));
		dj->epoch = kv(key, 76);
		dj->slab_bytes = kv(key, 77);
		dj->slabs_total = (uint32_t)kv(key, 78);
		dj->nnodes = (uint16_t)(key % (WIRE_MAX_NODES + 1));
		for (i = 0; i < dj->nnodes; i++) {
			dj->node[i].node = kn(key, 1400 + i);
			dj->node[i].slabs_total = (uint32_t)kv(key, 1500 + i);
			dj->node[i].slabs_free = (uint32_t)kv(key, 1600 + i);
		}
		break;
	case WIRE_DONOR_JOIN_OK:
		m->u.donor_join_ok.donor_id = (uint32_t)kv(key, 79);
		m->u.donor_join_ok.registry_epoch = kv(key, 80);
		m->u.donor_join_ok.report_ms = (uint32_t)kv(key, 81) | 1;
		m->u.donor_join_ok.flags =
			(WIRE_DONOR_KNOWN | WIRE_DONOR_MEMBERSHIP) &
			(uint32_t)key;
		if (m->u.donor_join_ok.flags & WIRE_DONOR_MEMBERSHIP)
			m->u.donor_join_ok.membership = kv(key, 9910) | 1;
		break;
	case WIRE_DONOR_REPORT:
		dr->donor_id = (uint32_t)kv(key, 82);
		dr->epoch = kv(key, 83);
		dr->slabs_free = (uint32_t)kv(key, 84);
		dr->slabs_leased = (uint32_t)kv(key, 85);
		dr->slabs_reclaiming = (uint32_t)kv(key, 86);
		dr->flags = WIRE_REPORT_KNOWN & (uint32_t)key;
		if (dr->flags & WIRE_REPORT_HEARD)
			dr->membership = kv(key, 9930) | 1;
		dr->bytes_read = kv(key, 87);
		dr->bytes_written = kv(key, 88);
		dr->ntenants = (uint16_t)(key % 50);
		for (i = 0; i < dr->ntenants; i++) {
			dr->tenant[i].tenant_id = (uint32_t)kv(key, 1700 + i);
			dr->tenant[i].slabs = (uint32_t)kv(key, 1800 + i);
			dr->tenant[i].sessions = (uint32_t)kv(key, 1900 + i);
			dr->tenant[i].kv_slabs =
				(uint32_t)(kv(key, 2100 + i) %
					   ((uint64_t)dr->tenant[i].slabs + 1));
			dr->tenant[i].flags =
				WIRE_TENANT_KNOWN & (uint32_t)(key + i);
		}
		dr->nredeemed = (uint16_t)(key % 21);
		for (i = 0; i < dr->nredeemed; i++)
			dr->redeemed[i] = kv(key, 2000 + i);
		break;
	case WIRE_DONOR_REPORT_OK:
		m->u.donor_report_ok.registry_epoch = kv(key, 89);
		m->u.donor_report_ok.flags =
			(WIRE_DONOR_KNOWN | WIRE_DONOR_MEMBERSHIP) &
			(uint32_t)key;
		if (m->u.donor_report_ok.flags & WIRE_DONOR_MEMBERSHIP)
			m->u.donor_report_ok.membership = kv(key, 9920) | 1;
		m->u.donor_report_ok.nkv = (uint16_t)(key % 30);
		for (i = 0; i < m->u.donor_report_ok.nkv; i++) {
			m->u.donor_report_ok.kv[i].tenant_id =
				(uint32_t)kv(key, 2200 + i);
			m->u.donor_report_ok.kv[i].kv_slabs_max =
				(uint32_t)kv(key, 2300 + i);
		}
		break;
	case WIRE_ADMIN:
	case WIRE_ADMIN_OK:
		m->u.admin.json_len = (uint32_t)snprintf(
			sample_json, sizeof(sample_json),
			"{\"cmd\": \"quota-set\", \"name\": \"t%llx\", "
			"\"quota_bytes\": %llu}",
			(unsigned long long)kv(key, 90),
			(unsigned long long)kv(key, 91));
		m->u.admin.json = sample_json;
		break;
	case WIRE_DONORS_OK:
		sample_donors_ok(key, &m->u.donors_ok);
		break;
	case WIRE_MEMBERS_OK:
		sample_donors_ok(key, &m->u.donors_ok);
		m->u.donors_ok.membership = kv(key, 9930) | 1;
		break;
	default:
		if (wire_kv_plain(type) != type) { /* protocol 5's _AT */
			sample_kv(wire_kv_plain(type), key, &m->u.kv);
			if (!(type & 0x80))
				m->u.kv.membership = kv(key, 9940) | 1;
		} else if ((type & 0x7f) >= WIRE_KV_RESERVE &&
			   (type & 0x7f) <= WIRE_KV_PIN) {
			sample_kv(type, key, &m->u.kv);
		}
		break;
	}
}

static void sample(uint8_t type, uint64_t key, struct wire_msg *m)
{
	struct wire_hello_ok *ho = &m->u.hello_ok;
	struct wire_status_ok *so = &m->u.status_ok;
	uint32_t i, n;

	memset(m, 0, sizeof(*m));
	m->type = type;
	m->seq = (uint32_t)kv(key, 1);
	switch (type) {
	case WIRE_HELLO:
		m->u.hello.proto_min = 1;
		m->u.hello.proto_max = (uint16_t)(2 + key % 7);
		snprintf(m->u.hello.client, sizeof(m->u.hello.client),
			 "pid %llu bench-%llx", (unsigned long long)key,
			 (unsigned long long)kv(key, 2));
		break;
	case WIRE_HELLO_OK:
		ho->proto = 1;
		ho->session_id = kv(key, 3);
		ho->epoch = kv(key, 4);
		ho->ttl_ms = (uint32_t)kv(key, 5) | 1;
		ho->slab_bytes = kv(key, 6);
		snprintf(ho->provider, sizeof(ho->provider), "verbs;ofi_rxm");
		ho->nendpoints = (uint16_t)(1 + key % WIRE_MAX_ENDPOINTS);
		for (n = 0; n < ho->nendpoints; n++) {
			struct wire_endpoint *e = &ho->ep[n];

			e->node = kn(key, 30 + n);
			e->addr_len = (uint16_t)(17 + (key + n * 13) % 100);
			for (i = 0; i < e->addr_len; i++) /* zeros included */
				e->addr[i] = (uint8_t)(i * 7 + key + n);
		}
		break;
	case WIRE_LEASE:
		m->u.lease.nslabs = (uint32_t)(1 + key % WIRE_MAX_LEASES);
		m->u.lease.node = kn(key, 23);
		break;
	case WIRE_LEASE_OK:
	case WIRE_LEASE_GRANT_OK:
		m->u.lease_ok.ttl_ms = (uint32_t)kv(key, 7) | 1;
		n = (uint32_t)(1 + key % 9);
		m->u.lease_ok.count = n;
		for (i = 0; i < n; i++) {
			struct wire_lease *l = &m->u.lease_ok.lease[i];

			l->epoch = kv(key, 4);
			l->slab = (uint32_t)kv(key, 100 + i);
			l->generation = (uint32_t)kv(key, 200 + i);
			l->key = kv(key, 300 + i);
			l->base = kv(key, 400 + i);
			l->len_bytes = kv(key, 500 + i);
			l->endpoint = (uint16_t)(kv(key, 900 + i) %
						 WIRE_MAX_ENDPOINTS);
			l->node = kn(key, 1000 + i);
		}
		break;
	case WIRE_RELEASE:
		n = (uint32_t)(1 + key % 11);
		m->u.release.count = n;
		for (i = 0; i < n; i++) {
			m->u.release.ref[i].epoch = kv(key, 600 + i);
			m->u.release.ref[i].slab = (uint32_t)kv(key, 700 + i);
			m->u.release.ref[i].generation =
				(uint32_t)kv(key, 800 + i);
		}
		break;
	case WIRE_RELEASE_OK:
		m->u.release_ok.released = (uint32_t)(key % WIRE_MAX_LEASES);
		break;
	case WIRE_HEARTBEAT_OK:
	case WIRE_HEARTBEAT2_OK:
		m->u.heartbeat_ok.ttl_ms = (uint32_t)kv(key, 8) | 1;
		m->u.heartbeat_ok.nleases = (uint32_t)kv(key, 9);
		m->u.heartbeat_ok.epoch = kv(key, 10);
		break;
	case WIRE_STATUS_OK:
		so->epoch = kv(key, 11);
		so->uptime_ms = kv(key, 12);
		so->donated_bytes = kv(key, 13);
		so->slab_bytes = kv(key, 14);
		so->slabs_total = (uint32_t)kv(key, 15);
		so->slabs_free = (uint32_t)kv(key, 16);
		so->slabs_leased = (uint32_t)kv(key, 17);
		so->slabs_reclaiming = (uint32_t)kv(key, 18);
		so->sessions = (uint32_t)kv(key, 19);
		so->flags = WIRE_STATUS_KNOWN & (uint32_t)key;
		so->leases_expired = kv(key, 20);
		so->frames_rejected = kv(key, 21);
		so->nnodes = (uint16_t)(key % (WIRE_MAX_NODES + 1));
		for (i = 0; i < so->nnodes; i++) {
			so->node[i].node = kn(key, 1100 + i);
			so->node[i].slabs_total = (uint32_t)kv(key, 1200 + i);
			so->node[i].slabs_free = (uint32_t)kv(key, 1300 + i);
		}
		break;
	case WIRE_ERROR:
		m->u.error.err = (int32_t)(1 + key % WIRE_ERR_MAX);
		snprintf(m->u.error.msg, sizeof(m->u.error.msg),
			 "no free slab key=%llx",
			 (unsigned long long)kv(key, 22));
		break;
	default:
		sample2(type, key, m);
		break;
	}
}

static uint8_t buf[WIRE_MAX_FRAME + 64];
static uint8_t buf2[WIRE_MAX_FRAME + 64];
static struct tb tb;
static struct wire_msg m, m2;

static ssize_t enc(const struct wire_msg *msg)
{
	return wire_encode(msg, buf, sizeof(buf));
}

/* Encoded bytes equal the spec's; decode gives m back; re-encode is equal. */
static void check_roundtrip(const struct wire_msg *msg)
{
	ssize_t n;

	spec_frame(msg, &tb);
	n = enc(msg);
	ck_assert_int_eq(n, (ssize_t)tb.n);
	ck_assert_mem_eq(buf, tb.b, tb.n);
	ck_assert_int_eq(wire_frame_len(buf, (size_t)n), n);
	memset(&m2, 0xa5, sizeof(m2));
	ck_assert_int_eq(wire_decode(buf, (size_t)n, &m2), n);
	ck_assert(msg_eq(msg, &m2));
	if (is_admin(msg->type)) /* no copy: json points into the frame */
		ck_assert_ptr_eq(m2.u.admin.json, buf + WIRE_HDR_LEN + 2);
	ck_assert_int_eq(wire_encode(&m2, buf2, sizeof(buf2)), n);
	ck_assert_mem_eq(buf, buf2, (size_t)n);
}

/* tb holds a frame the decoder must refuse with -EBADMSG. */
static void check_tb_rejected(void)
{
	ck_assert_int_eq(wire_frame_len(tb.b, tb.n), (ssize_t)tb.n);
	ck_assert_int_eq(wire_decode(tb.b, tb.n, &m2), -EBADMSG);
}

static void check_tb_accepted(void)
{
	ck_assert_int_eq(wire_decode(tb.b, tb.n, &m2), (ssize_t)tb.n);
	ck_assert_int_eq(wire_encode(&m2, buf2, sizeof(buf2)), (ssize_t)tb.n);
	ck_assert_mem_eq(tb.b, buf2, tb.n);
}

/* m breaks a bound: encode refuses it, and its spec bytes do not decode. */
static void check_both_reject(const struct wire_msg *msg)
{
	ck_assert_int_eq(wire_encode(msg, buf, sizeof(buf)), -EINVAL);
	spec_frame(msg, &tb);
	check_tb_rejected();
}

/* --- round trips, layout, truncation --- */

START_TEST(roundtrip_every_type)
{
	uint64_t key;

	for (key = 1; key <= 40; key++) {
		sample(all_types[_i], key * 0x1234567ull, &m);
		check_roundtrip(&m);
	}
}
END_TEST

START_TEST(golden_hello)
{
	static const uint8_t want[] = {
		0x54, 0x44, 0x50, 0x4c,	      /* magic "TDPL" */
		0x01, 0x01, 0x00, 0x00,	      /* version 1, HELLO, flags 0 */
		0x04, 0x03, 0x02, 0x01,	      /* seq */
		0x09, 0x00, 0x00, 0x00,	      /* len */
		0x01, 0x00, 0x02, 0x00,	      /* proto_min 1, proto_max 2 */
		0x03, 0x00, 0x61, 0x62, 0x63, /* client "abc" */
	};

	memset(&m, 0, sizeof(m));
	m.type = WIRE_HELLO;
	m.seq = 0x01020304;
	m.u.hello.proto_min = 1;
	m.u.hello.proto_max = 2;
	strcpy(m.u.hello.client, "abc");
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(want));
	ck_assert_mem_eq(buf, want, sizeof(want));
	/* The header constant spells "TDPL" on the wire. */
	ck_assert_int_eq(WIRE_MAGIC, 0x4c504454u);
}
END_TEST

START_TEST(truncated_every_length)
{
	ssize_t n, k;

	sample(all_types[_i], 77, &m);
	n = enc(&m);
	ck_assert_int_gt(n, 0);
	for (k = 0; k < n; k++) {
		ck_assert_int_eq(wire_frame_len(buf, (size_t)k),
				 k < WIRE_HDR_LEN ? -EAGAIN : n);
		ck_assert_int_eq(wire_decode(buf, (size_t)k, &m2), -EAGAIN);
	}
	ck_assert_int_eq(wire_decode(buf, (size_t)n, &m2), n);
	/* More bytes after the frame are the next frame's, not this one's. */
	ck_assert_int_eq(wire_decode(buf, sizeof(buf), &m2), n);
}
END_TEST

START_TEST(encode_no_space)
{
	ssize_t n;
	size_t cap;

	sample(all_types[_i], 99, &m);
	n = enc(&m);
	ck_assert_int_gt(n, 0);
	for (cap = 0; cap < (size_t)n; cap++) {
		memset(buf2, 0x5a, sizeof(buf2));
		ck_assert_int_eq(wire_encode(&m, buf2, cap), -ENOSPC);
		/* A failed encode writes nothing. */
		ck_assert_int_eq(buf2[0], 0x5a);
		ck_assert_int_eq(buf2[cap ? cap - 1 : 0], 0x5a);
	}
	ck_assert_int_eq(wire_encode(&m, buf2, (size_t)n), n);
	ck_assert_mem_eq(buf, buf2, (size_t)n);
}
END_TEST

START_TEST(trailing_and_short_payload)
{
	size_t full;

	sample(all_types[_i], 5, &m);
	spec_frame(&m, &tb);
	tb_u8(&tb, 0); /* one byte too many inside the payload */
	tb_end(&tb);
	check_tb_rejected();
	/* The header survives a rejected payload, so memd can answer seq. */
	ck_assert_int_eq(m2.type, all_types[_i]);
	ck_assert_int_eq(m2.seq, m.seq);

	/* Every shorter payload, with len saying so, ends inside a field. */
	spec_frame(&m, &tb);
	full = tb.n;
	for (tb.n = WIRE_HDR_LEN; tb.n < full; tb.n++) {
		tb_end(&tb);
		check_tb_rejected();
	}
}
END_TEST

START_TEST(back_to_back)
{
	ssize_t n1, n2;
	uint8_t two[2 * 1024];

	sample(WIRE_LEASE_OK, 3, &m);
	n1 = wire_encode(&m, two, sizeof(two));
	ck_assert_int_gt(n1, 0);
	sample(WIRE_ERROR, 4, &m);
	n2 = wire_encode(&m, two + n1, sizeof(two) - (size_t)n1);
	ck_assert_int_gt(n2, 0);

	ck_assert_int_eq(wire_frame_len(two, (size_t)(n1 + n2)), n1);
	ck_assert_int_eq(wire_decode(two, (size_t)(n1 + n2), &m2), n1);
	sample(WIRE_LEASE_OK, 3, &m);
	ck_assert_int_eq(memcmp(&m, &m2, sizeof(m)), 0);
	ck_assert_int_eq(wire_decode(two + n1, (size_t)n2, &m2), n2);
	sample(WIRE_ERROR, 4, &m);
	ck_assert_int_eq(memcmp(&m, &m2, sizeof(m)), 0);
	/* Half of the second frame is not a frame yet. */
	ck_assert_int_eq(wire_decode(two + n1, (size_t)n2 / 2, &m2), -EAGAIN);
}
END_TEST

START_TEST(decode_is_deterministic)
{
	static struct wire_msg a, b;
	ssize_t n;

	sample(all_types[_i], 11, &m);
	n = enc(&m);
	memset(&a, 0x00, sizeof(a));
	memset(&b, 0xff, sizeof(b));
	ck_assert_int_eq(wire_decode(buf, (size_t)n, &a), n);
	ck_assert_int_eq(wire_decode(buf, (size_t)n, &b), n);
	ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
}
END_TEST

/* --- header --- */

START_TEST(bad_magic)
{
	ssize_t n;
	int i;

	sample(WIRE_HELLO, 1, &m);
	n = enc(&m);
	for (i = 0; i < 4; i++) {
		memcpy(buf2, buf, (size_t)n);
		buf2[i] ^= 0x20; /* "tDPL", "TdPL", ... */
		ck_assert_int_eq(wire_frame_len(buf2, (size_t)n), -EPROTO);
		ck_assert_int_eq(wire_decode(buf2, (size_t)n, &m2), -EPROTO);
	}
	/* Byte-swapped magic (a big-endian writer) is not accepted either. */
	memcpy(buf2, "LPDT", 4);
	ck_assert_int_eq(wire_decode(buf2, (size_t)n, &m2), -EPROTO);
}
END_TEST

START_TEST(bad_version)
{
	static const uint8_t versions[] = { 0, 2, 0x81, 0xff };
	ssize_t n;
	size_t i;

	sample(WIRE_STATUS, 1, &m);
	n = enc(&m);
	for (i = 0; i < sizeof(versions); i++) {
		buf[4] = versions[i];
		ck_assert_int_eq(wire_frame_len(buf, (size_t)n),
				 -EPROTONOSUPPORT);
		ck_assert_int_eq(wire_decode(buf, (size_t)n, &m2),
				 -EPROTONOSUPPORT);
	}
}
END_TEST

START_TEST(payload_size_limit)
{
	/* len == WIRE_MAX_PAYLOAD is a legal frame size... */
	tb_hdr(&tb, 1, WIRE_HELLO, 0, 42);
	tb_u16(&tb, 1);
	tb_u16(&tb, 1);
	tb_u16(&tb, 5);
	tb_bytes(&tb, "hello", 5);
	memset(tb.b + tb.n, 'x', WIRE_MAX_PAYLOAD - 11);
	tb.n += WIRE_MAX_PAYLOAD - 11;
	tb_end(&tb);
	ck_assert_int_eq(tb.n, WIRE_MAX_FRAME);
	ck_assert_int_eq(wire_frame_len(tb.b, tb.n), WIRE_MAX_FRAME);
	ck_assert_int_eq(wire_decode(tb.b, tb.n - 1, &m2), -EAGAIN);
	/* ...which holds no valid HELLO (trailing bytes). */
	ck_assert_int_eq(wire_decode(tb.b, tb.n, &m2), -EBADMSG);

	/* One more byte is refused from the header alone. */
	tb_u8(&tb, 'x');
	tb_end(&tb);
	ck_assert_int_eq(wire_frame_len(tb.b, WIRE_HDR_LEN), -EMSGSIZE);
	ck_assert_int_eq(wire_frame_len(tb.b, tb.n), -EMSGSIZE);
	memset(&m2, 0xa5, sizeof(m2));
	ck_assert_int_eq(wire_decode(tb.b, WIRE_HDR_LEN, &m2), -EMSGSIZE);
	ck_assert_int_eq(m2.seq, 42);
	ck_assert_int_eq(m2.type, WIRE_HELLO);

	tb.b[12] = tb.b[13] = tb.b[14] = tb.b[15] = 0xff;
	ck_assert_int_eq(wire_decode(tb.b, WIRE_HDR_LEN, &m2), -EMSGSIZE);
}
END_TEST

START_TEST(header_flags)
{
	static const uint16_t flags[] = { 1, 0x8000, 0xffff };
	size_t i;

	for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		sample(WIRE_LEASE, 12, &m);
		m.flags = flags[i];
		ck_assert_int_eq(enc(&m), -EINVAL);
		spec_frame(&m, &tb);
		tb.b[6] = flags[i] & 0xff;
		tb.b[7] = flags[i] >> 8;
		check_tb_rejected();
		ck_assert_int_eq(m2.flags, flags[i]);
		ck_assert_int_eq(m2.seq, m.seq);
		ck_assert_int_eq(m2.u.lease.nslabs, 0);
	}
}
END_TEST

START_TEST(unknown_types)
{
	unsigned int t;

	for (t = 0; t < 256; t++) {
		if (is_known_type(t)) {
			ck_assert_str_ne(wire_type_name((uint8_t)t), "UNKNOWN");
			continue;
		}
		ck_assert_str_eq(wire_type_name((uint8_t)t), "UNKNOWN");
		memset(&m, 0, sizeof(m));
		m.type = (uint8_t)t;
		ck_assert_int_eq(enc(&m), -EINVAL);
		tb_hdr(&tb, 1, (uint8_t)t, 0, t);
		tb_end(&tb);
		check_tb_rejected();
		tb_u64(&tb, t);
		tb_end(&tb);
		check_tb_rejected();
	}
}
END_TEST

/* The same-host socket's fixed packets (docs/protocol.md, "Same-host
 * sessions"): byte layout, round trip, and every malformed form. */
START_TEST(shm_packets)
{
	struct wire_shm_req q = { .op = WIRE_SHM_SLAB,
				  .session_id = 0x0807060504030201ull,
				  .slab = 0x0c0b0a09,
				  .generation = 0x100f0e0d },
			    q2;
	struct wire_shm_rep p = { .op = WIRE_SHM_SLAB,
				  .err = EPERM,
				  .slab = 7,
				  .generation = 9 },
			    p2;
	uint8_t b[WIRE_SHM_REQ_LEN], c[WIRE_SHM_REP_MAX];

	fill_bytes(q.nonce, WIRE_NONCE_LEN, 1, 2);
	ck_assert_int_eq(wire_shm_req_encode(&q, b), WIRE_SHM_REQ_LEN);
	/* "TPSH", op, 0, session, slab, generation, nonce: little-endian */
	ck_assert_int_eq(memcmp(b, "TPSH", 4), 0);
	ck_assert_uint_eq(b[4], WIRE_SHM_SLAB);
	ck_assert_uint_eq(b[8], 0x01);
	ck_assert_uint_eq(b[15], 0x08);
	ck_assert_uint_eq(b[16], 0x09);
	ck_assert_uint_eq(b[23], 0x10);
	ck_assert_int_eq(memcmp(b + 24, q.nonce, WIRE_NONCE_LEN), 0);
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), 0);
	ck_assert_uint_eq(q2.op, q.op);
	ck_assert_uint_eq(q2.session_id, q.session_id);
	ck_assert_uint_eq(q2.slab, q.slab);
	ck_assert_uint_eq(q2.generation, q.generation);
	ck_assert_int_eq(memcmp(q2.nonce, q.nonce, WIRE_NONCE_LEN), 0);
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b) - 1, &q2), -EBADMSG);
	b[0] ^= 1; /* magic */
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), -EBADMSG);
	b[0] ^= 1;
	b[6] = 1; /* padding */
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), -EBADMSG);
	b[6] = 0;
	b[4] = 4; /* op */
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), -EBADMSG);
	q.op = 0;
	ck_assert_int_eq(wire_shm_req_encode(&q, b), -EINVAL);

	/* KV: endpoint, 0, rkey, zeros; its reply adds the base */
	memset(&q, 0, sizeof(q));
	q.op = WIRE_SHM_KV;
	q.session_id = 5;
	q.endpoint = 2;
	q.rkey = 0x1122334455667788ull;
	ck_assert_int_eq(wire_shm_req_encode(&q, b), WIRE_SHM_REQ_LEN);
	ck_assert_uint_eq(b[16], 2);
	ck_assert_uint_eq(b[24], 0x88);
	ck_assert_uint_eq(b[31], 0x11);
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), 0);
	ck_assert_uint_eq(q2.op, WIRE_SHM_KV);
	ck_assert_uint_eq(q2.endpoint, 2);
	ck_assert(q2.rkey == q.rkey);
	b[40] = 1; /* the tail must be zero */
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), -EBADMSG);
	b[40] = 0;
	b[20] = 1; /* so must the word after the endpoint */
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), -EBADMSG);
	b[20] = 0;
	b[16] = WIRE_MAX_ENDPOINTS; /* no such endpoint */
	ck_assert_int_eq(wire_shm_req_decode(b, sizeof(b), &q2), -EBADMSG);
	{
		struct wire_shm_rep k = { .op = WIRE_SHM_KV,
					  .slab = 3,
					  .generation = 4,
					  .base = 0xabcdef0123ull },
				    k2;
		uint8_t kb[WIRE_SHM_REP_MAX];

		ck_assert_int_eq(wire_shm_rep_encode(&k, kb),
				 WIRE_SHM_REP_KV_LEN);
		ck_assert_int_eq(
			wire_shm_rep_decode(kb, WIRE_SHM_REP_KV_LEN, &k2), 0);
		ck_assert(k2.base == k.base);
		ck_assert_uint_eq(k2.slab, 3);
		/* a KV reply of a BIND/SLAB reply's length, and back */
		ck_assert_int_eq(wire_shm_rep_decode(kb, WIRE_SHM_REP_LEN, &k2),
				 -EBADMSG);
		k.op = WIRE_SHM_SLAB;
		ck_assert_int_eq(wire_shm_rep_encode(&k, kb), WIRE_SHM_REP_LEN);
		ck_assert_int_eq(
			wire_shm_rep_decode(kb, WIRE_SHM_REP_KV_LEN, &k2),
			-EBADMSG);
	}

	ck_assert_int_eq(wire_shm_rep_encode(&p, c), WIRE_SHM_REP_LEN);
	ck_assert_int_eq(wire_shm_rep_decode(c, WIRE_SHM_REP_LEN, &p2), 0);
	ck_assert_uint_eq(p2.op, p.op);
	ck_assert_int_eq(p2.err, p.err);
	ck_assert_uint_eq(p2.slab, p.slab);
	ck_assert_uint_eq(p2.generation, p.generation);
	ck_assert_uint_eq(c[8], EPERM);
	c[8] = 0xff;
	c[9] = 0xff; /* err 65535 > WIRE_ERR_MAX */
	ck_assert_int_eq(wire_shm_rep_decode(c, WIRE_SHM_REP_LEN, &p2),
			 -EBADMSG);
	p.err = -1;
	ck_assert_int_eq(wire_shm_rep_encode(&p, c), -EINVAL);
	p.err = 0;
	ck_assert_int_eq(wire_shm_rep_encode(&p, c), WIRE_SHM_REP_LEN);
	ck_assert_int_eq(wire_shm_rep_decode(c, WIRE_SHM_REP_LEN - 1, &p2),
			 -EBADMSG);
}
END_TEST

/* A boot id as the kernel writes it, and what is not one. */
START_TEST(boot_id_parse)
{
	static const char ok[] = "0123abcd-4567-89ef-ABCD-0123456789ef\n";
	static const uint8_t want[WIRE_BOOT_ID_LEN] = {
		0x01, 0x23, 0xab, 0xcd, 0x45, 0x67, 0x89, 0xef,
		0xab, 0xcd, 0x01, 0x23, 0x45, 0x67, 0x89, 0xef,
	};
	uint8_t out[WIRE_BOOT_ID_LEN];

	ck_assert_int_eq(wire_boot_id_parse(ok, strlen(ok), out), 0);
	ck_assert_int_eq(memcmp(out, want, sizeof(want)), 0);
	ck_assert_int_eq(wire_boot_id_parse(ok, strlen(ok) - 1, out), 0);
	/* one digit short, one too many, a stray byte, text after */
	ck_assert_int_eq(wire_boot_id_parse(ok, strlen(ok) - 2, out), -EINVAL);
	ck_assert_int_eq(wire_boot_id_parse("0123abcd-4567-89ef-abcd-"
					    "0123456789ef0",
					    37, out),
			 -EINVAL);
	ck_assert_int_eq(wire_boot_id_parse("0123abcd-4567-89ef-abcd-"
					    "0123456789eg",
					    36, out),
			 -EINVAL);
	ck_assert_int_eq(wire_boot_id_parse("0123abcd-4567-89ef-abcd-"
					    "0123456789ef\nx",
					    38, out),
			 -EINVAL);
	ck_assert_int_eq(wire_boot_id_parse("", 0, out), -EINVAL);
}
END_TEST

/* wire_boot_id_read: this host's file, and each way a file can be bad. */
START_TEST(boot_id_read)
{
	char dir[] = "/tmp/tp-wire-XXXXXX", path[64];
	uint8_t out[WIRE_BOOT_ID_LEN], again[WIRE_BOOT_ID_LEN];
	FILE *f;

	ck_assert_int_eq(wire_boot_id_read(WIRE_BOOT_ID_PATH, out), 0);
	ck_assert_int_eq(wire_boot_id_read(WIRE_BOOT_ID_PATH, again), 0);
	ck_assert_mem_eq(out, again, WIRE_BOOT_ID_LEN);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/id", dir);
	ck_assert_int_eq(wire_boot_id_read(path, out), -ENOENT);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(wire_boot_id_read(path, out), -EIO); /* empty */
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("not-a-boot-id\n", f);
	fclose(f);
	ck_assert_int_eq(wire_boot_id_read(path, out), -EINVAL);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("0123ABCD-4567-89ef-abcd-0123456789ab\n", f);
	fclose(f);
	ck_assert_int_eq(wire_boot_id_read(path, out), 0);
	ck_assert_uint_eq(out[0], 0x01);
	ck_assert_uint_eq(out[15], 0xab);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* SHM_OK's socket name is an abstract name of [A-Za-z0-9_.-]. */
START_TEST(shm_ok_name)
{
	memset(&m, 0, sizeof(m));
	m.type = WIRE_SHM_OK;
	strcpy(m.u.shm_ok.socket, "tidepool-memd-0123abcd");
	ck_assert_int_gt(enc(&m), 0);
	strcpy(m.u.shm_ok.socket, "");
	ck_assert_int_eq(enc(&m), -EINVAL);
	strcpy(m.u.shm_ok.socket, "a/b");
	ck_assert_int_eq(enc(&m), -EINVAL);
	strcpy(m.u.shm_ok.socket, "a b");
	ck_assert_int_eq(enc(&m), -EINVAL);
}
END_TEST

/* The names the registry accepts for tenants and donors, which poolctl
 * checks before sending (docs/cluster.md): every byte value, and the
 * length bounds. */
START_TEST(pool_names)
{
	char s[WIRE_NAME_MAX + 1];

	ck_assert(wire_name_is_valid("a"));
	ck_assert(wire_name_is_valid("donor-1.rack_2"));
	ck_assert(!wire_name_is_valid(""));
	for (int c = 1; c < 256; c++) {
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' ||
			  c == '-';

		s[0] = 'x';
		s[1] = (char)c;
		s[2] = '\0';
		ck_assert_msg(wire_name_is_valid(s) == ok, "byte 0x%02x", c);
	}
	memset(s, 'n', WIRE_NAME_MAX - 1);
	s[WIRE_NAME_MAX - 1] = '\0';
	ck_assert(wire_name_is_valid(s)); /* 63: the longest */
	s[WIRE_NAME_MAX - 1] = 'n';
	s[WIRE_NAME_MAX] = '\0';
	ck_assert(!wire_name_is_valid(s));
}
END_TEST

START_TEST(type_names)
{
	ck_assert_str_eq(wire_type_name(WIRE_HELLO), "HELLO");
	ck_assert_str_eq(wire_type_name(WIRE_LEASE), "LEASE");
	ck_assert_str_eq(wire_type_name(WIRE_RELEASE), "RELEASE");
	ck_assert_str_eq(wire_type_name(WIRE_HEARTBEAT), "HEARTBEAT");
	ck_assert_str_eq(wire_type_name(WIRE_STATUS), "STATUS");
	ck_assert_str_eq(wire_type_name(WIRE_BYE), "BYE");
	ck_assert_str_eq(wire_type_name(WIRE_HELLO_OK), "HELLO_OK");
	ck_assert_str_eq(wire_type_name(WIRE_LEASE_OK), "LEASE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_RELEASE_OK), "RELEASE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_HEARTBEAT_OK), "HEARTBEAT_OK");
	ck_assert_str_eq(wire_type_name(WIRE_STATUS_OK), "STATUS_OK");
	ck_assert_str_eq(wire_type_name(WIRE_BYE_OK), "BYE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_ERROR), "ERROR");
	ck_assert_str_eq(wire_type_name(WIRE_AUTH), "AUTH");
	ck_assert_str_eq(wire_type_name(WIRE_AUTH_CHALLENGE), "AUTH_CHALLENGE");
	ck_assert_str_eq(wire_type_name(WIRE_AUTH_PROOF), "AUTH_PROOF");
	ck_assert_str_eq(wire_type_name(WIRE_AUTH_OK), "AUTH_OK");
	ck_assert_str_eq(wire_type_name(WIRE_PLACE), "PLACE");
	ck_assert_str_eq(wire_type_name(WIRE_PLACE_OK), "PLACE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_LEASE_GRANT), "LEASE_GRANT");
	ck_assert_str_eq(wire_type_name(WIRE_LEASE_GRANT_OK), "LEASE_GRANT_OK");
	ck_assert_str_eq(wire_type_name(WIRE_HEARTBEAT2), "HEARTBEAT2");
	ck_assert_str_eq(wire_type_name(WIRE_HEARTBEAT2_OK), "HEARTBEAT2_OK");
	ck_assert_str_eq(wire_type_name(WIRE_DONOR_JOIN), "DONOR_JOIN");
	ck_assert_str_eq(wire_type_name(WIRE_DONOR_JOIN_OK), "DONOR_JOIN_OK");
	ck_assert_str_eq(wire_type_name(WIRE_DONOR_REPORT), "DONOR_REPORT");
	ck_assert_str_eq(wire_type_name(WIRE_DONOR_REPORT_OK),
			 "DONOR_REPORT_OK");
	ck_assert_str_eq(wire_type_name(WIRE_ADMIN), "ADMIN");
	ck_assert_str_eq(wire_type_name(WIRE_ADMIN_OK), "ADMIN_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_RESERVE), "KV_RESERVE");
	ck_assert_str_eq(wire_type_name(WIRE_KV_COMMIT), "KV_COMMIT");
	ck_assert_str_eq(wire_type_name(WIRE_KV_LOOKUP), "KV_LOOKUP");
	ck_assert_str_eq(wire_type_name(WIRE_KV_DONE), "KV_DONE");
	ck_assert_str_eq(wire_type_name(WIRE_KV_EXISTS), "KV_EXISTS");
	ck_assert_str_eq(wire_type_name(WIRE_KV_DELETE), "KV_DELETE");
	ck_assert_str_eq(wire_type_name(WIRE_KV_PIN), "KV_PIN");
	ck_assert_str_eq(wire_type_name(WIRE_DONORS), "DONORS");
	ck_assert_str_eq(wire_type_name(WIRE_KV_RESERVE_OK), "KV_RESERVE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_COMMIT_OK), "KV_COMMIT_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_LOOKUP_OK), "KV_LOOKUP_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_DONE_OK), "KV_DONE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_EXISTS_OK), "KV_EXISTS_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_DELETE_OK), "KV_DELETE_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_PIN_OK), "KV_PIN_OK");
	ck_assert_str_eq(wire_type_name(WIRE_DONORS_OK), "DONORS_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_MODEL), "KV_MODEL");
	ck_assert_str_eq(wire_type_name(WIRE_KV_MODEL_OK), "KV_MODEL_OK");
	ck_assert_str_eq(wire_type_name(WIRE_FABRIC), "FABRIC");
	ck_assert_str_eq(wire_type_name(WIRE_FABRIC_OK), "FABRIC_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_CLEAR), "KV_CLEAR");
	ck_assert_str_eq(wire_type_name(WIRE_KV_CLEAR_OK), "KV_CLEAR_OK");
	ck_assert_str_eq(wire_type_name(WIRE_MEMBERS), "MEMBERS");
	ck_assert_str_eq(wire_type_name(WIRE_MEMBERS_OK), "MEMBERS_OK");
	ck_assert_str_eq(wire_type_name(WIRE_KV_LOOKUP_AT), "KV_LOOKUP_AT");
	ck_assert_str_eq(wire_type_name(WIRE_KV_PIN_AT_OK), "KV_PIN_AT_OK");
}
END_TEST

START_TEST(payloadless_types)
{
	static const uint8_t empty[] = { WIRE_HEARTBEAT, WIRE_STATUS,
					 WIRE_BYE,	 WIRE_BYE_OK,
					 WIRE_DONORS,	 WIRE_KV_MODEL_OK,
					 WIRE_KV_CLEAR,	 WIRE_KV_CLEAR_OK,
					 WIRE_MEMBERS };
	size_t i;

	for (i = 0; i < sizeof(empty); i++) {
		/* The union is ignored: garbage in it still encodes empty. */
		memset(&m, 0x77, sizeof(m));
		m.type = empty[i];
		m.flags = 0;
		m.seq = 0xfedcba98;
		ck_assert_int_eq(enc(&m), WIRE_HDR_LEN);
		ck_assert_int_eq(buf[12] | buf[13] | buf[14] | buf[15], 0);
		ck_assert_int_eq(wire_decode(buf, WIRE_HDR_LEN, &m2),
				 WIRE_HDR_LEN);
		ck_assert_int_eq(m2.seq, 0xfedcba98);

		tb_hdr(&tb, 1, empty[i], 0, 1);
		tb_u8(&tb, 0);
		tb_end(&tb);
		check_tb_rejected();
	}
}
END_TEST

/* --- bounds of every field, accepted at the limit, refused past it --- */

static void fill_str(char *s, size_t len, uint64_t key)
{
	size_t i;

	for (i = 0; i < len; i++)
		s[i] = (char)('!' + (kv(key, i) % 94)); /* printable, no NUL */
	s[len] = '\0';
}

START_TEST(hello_bounds)
{
	sample(WIRE_HELLO, 1, &m);
	fill_str(m.u.hello.client, WIRE_NAME_MAX - 1, 1);
	check_roundtrip(&m);
	ck_assert_int_eq(m2.u.hello.client[WIRE_NAME_MAX - 1], '\0');

	/* A client name that fills the array has no room for its NUL. */
	memset(m.u.hello.client, 'a', WIRE_NAME_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
	tb_hdr(&tb, 1, WIRE_HELLO, 0, 1);
	tb_u16(&tb, 1);
	tb_u16(&tb, 1);
	tb_u16(&tb, WIRE_NAME_MAX);
	memset(tb.b + tb.n, 'a', WIRE_NAME_MAX);
	tb.n += WIRE_NAME_MAX;
	tb_end(&tb);
	check_tb_rejected();

	sample(WIRE_HELLO, 2, &m);
	m.u.hello.proto_min = 0;
	check_both_reject(&m);
	m.u.hello.proto_min = 3;
	m.u.hello.proto_max = 2;
	check_both_reject(&m);
	m.u.hello.proto_min = UINT16_MAX;
	m.u.hello.proto_max = UINT16_MAX;
	memset(m.u.hello.client, 0, WIRE_NAME_MAX); /* empty name is fine */
	check_roundtrip(&m);
}
END_TEST

/* The out-of-bounds nodes: every encoder must refuse them. */
static const int32_t bad_nodes[] = { -2, WIRE_NODE_MAX, WIRE_NODE_MAX + 1,
				     INT32_MAX, INT32_MIN };
#define NBAD_NODES (sizeof(bad_nodes) / sizeof(bad_nodes[0]))

START_TEST(hello_ok_bounds)
{
	size_t i;

	/* Every endpoint at its largest: the largest HELLO_OK. */
	sample(WIRE_HELLO_OK, 1, &m);
	fill_str(m.u.hello_ok.provider, WIRE_PROV_MAX - 1, 2);
	m.u.hello_ok.nendpoints = WIRE_MAX_ENDPOINTS;
	for (i = 0; i < WIRE_MAX_ENDPOINTS; i++) {
		struct wire_endpoint *e = &m.u.hello_ok.ep[i];

		e->node = i ? (int32_t)(WIRE_NODE_MAX - i) : WIRE_NODE_ANY;
		e->addr_len = WIRE_ADDR_MAX;
		memset(e->addr, 0, WIRE_ADDR_MAX); /* NUL is fine in bytes */
		e->addr[WIRE_ADDR_MAX - 1] = (uint8_t)(0xe0 + i);
	}
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m),
			 WIRE_HDR_LEN + 34 + WIRE_PROV_MAX - 1 +
				 WIRE_MAX_ENDPOINTS * (6 + WIRE_ADDR_MAX));
	ck_assert_int_eq(WIRE_HDR_LEN + 34 + 31 + 8 * (6 + 128), 16 + 1137);

	/* One endpoint more is one too many, on both sides. */
	m.u.hello_ok.nendpoints = WIRE_MAX_ENDPOINTS + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.hello_ok.nendpoints = WIRE_MAX_ENDPOINTS;
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 32 + WIRE_PROV_MAX - 1] = WIRE_MAX_ENDPOINTS + 1;
	tb_bytes(&tb, tb.b + WIRE_HDR_LEN + 34 + WIRE_PROV_MAX - 1,
		 6 + WIRE_ADDR_MAX);
	tb_end(&tb);
	check_tb_rejected();
	/* None at all: endpoint 0 always exists. */
	sample(WIRE_HELLO_OK, 1, &m);
	m.u.hello_ok.nendpoints = 0;
	memset(m.u.hello_ok.ep, 0, sizeof(m.u.hello_ok.ep));
	check_both_reject(&m);

	/* An address of 129 bytes in the last endpoint. */
	sample(WIRE_HELLO_OK, 1, &m);
	m.u.hello_ok.nendpoints = 2;
	m.u.hello_ok.ep[1].addr_len = WIRE_ADDR_MAX + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.hello_ok.ep[1].addr_len = WIRE_ADDR_MAX;
	spec_frame(&m, &tb); /* rewrite the tail as a 129-byte address */
	tb.n -= 2 + WIRE_ADDR_MAX;
	tb_u16(&tb, WIRE_ADDR_MAX + 1);
	memset(tb.b + tb.n, 1, WIRE_ADDR_MAX + 1);
	tb.n += WIRE_ADDR_MAX + 1;
	tb_end(&tb);
	check_tb_rejected();

	/* Nodes: -1 and 0 .. 1023 only. */
	for (i = 0; i < NBAD_NODES; i++) {
		sample(WIRE_HELLO_OK, 4, &m);
		m.u.hello_ok.nendpoints = WIRE_MAX_ENDPOINTS;
		m.u.hello_ok.ep[WIRE_MAX_ENDPOINTS - 1].node = bad_nodes[i];
		check_both_reject(&m);
	}
	sample(WIRE_HELLO_OK, 4, &m);
	m.u.hello_ok.ep[0].node = WIRE_NODE_MAX - 1;
	check_roundtrip(&m);
	m.u.hello_ok.ep[0].node = 0;
	check_roundtrip(&m);

	/* A 32-byte provider has no room for its NUL. */
	sample(WIRE_HELLO_OK, 2, &m);
	memset(m.u.hello_ok.provider, 'p', WIRE_PROV_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
	tb_hdr(&tb, 1, WIRE_HELLO_OK, 0, 2);
	tb_u16(&tb, 1);
	tb_u64(&tb, 1);
	tb_u64(&tb, 2);
	tb_u32(&tb, 3);
	tb_u64(&tb, 4);
	tb_u16(&tb, WIRE_PROV_MAX);
	memset(tb.b + tb.n, 'p', WIRE_PROV_MAX);
	tb.n += WIRE_PROV_MAX;
	tb_u16(&tb, 1); /* one endpoint: node -1, no address */
	tb_u32(&tb, UINT32_MAX);
	tb_u16(&tb, 0);
	tb_end(&tb);
	check_tb_rejected();
	/* The same frame with a 31-byte provider is fine. */
	tb.b[WIRE_HDR_LEN + 30] = WIRE_PROV_MAX - 1;
	memmove(tb.b + WIRE_HDR_LEN + 32 + WIRE_PROV_MAX - 1,
		tb.b + WIRE_HDR_LEN + 32 + WIRE_PROV_MAX, 2 + 6);
	tb.n--;
	tb_end(&tb);
	check_tb_accepted();
	ck_assert_int_eq(m2.u.hello_ok.nendpoints, 1);
	ck_assert_int_eq(m2.u.hello_ok.ep[0].node, WIRE_NODE_ANY);
	ck_assert_int_eq(m2.u.hello_ok.ep[0].addr_len, 0);

	sample(WIRE_HELLO_OK, 3, &m);
	m.u.hello_ok.proto = 0;
	check_both_reject(&m);
	sample(WIRE_HELLO_OK, 3, &m);
	m.u.hello_ok.ttl_ms = 0;
	check_both_reject(&m);
}
END_TEST

/* The smallest HELLO_OK, byte by byte as docs/protocol.md draws it. */
START_TEST(golden_hello_ok)
{
	static const uint8_t want[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x81, 0x00, 0x00, /* HELLO_OK */
		0x07, 0x00, 0x00, 0x00,				/* seq 7 */
		0x34, 0x00, 0x00, 0x00,				/* len 52 */
		0x01, 0x00,					/* proto 1 */
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* session */
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* epoch */
		0x10, 0x27, 0x00, 0x00, /* ttl_ms 10000 */
		0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, /* 64 MiB */
		0x03, 0x00, 0x74, 0x63, 0x70, /* provider "tcp" */
		0x02, 0x00,		      /* nendpoints 2 */
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0xaa, 0xbb, /* node 0 */
		0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0xcc,	/* node 3 */
	};

	memset(&m, 0, sizeof(m));
	m.type = WIRE_HELLO_OK;
	m.seq = 7;
	m.u.hello_ok.proto = 1;
	m.u.hello_ok.session_id = 0x1817161514131211ull;
	m.u.hello_ok.epoch = 0x2827262524232221ull;
	m.u.hello_ok.ttl_ms = 10000;
	m.u.hello_ok.slab_bytes = 64ull << 20;
	strcpy(m.u.hello_ok.provider, "tcp");
	m.u.hello_ok.nendpoints = 2;
	m.u.hello_ok.ep[0].node = 0;
	m.u.hello_ok.ep[0].addr_len = 2;
	m.u.hello_ok.ep[0].addr[0] = 0xaa;
	m.u.hello_ok.ep[0].addr[1] = 0xbb;
	m.u.hello_ok.ep[1].node = 3;
	m.u.hello_ok.ep[1].addr_len = 1;
	m.u.hello_ok.ep[1].addr[0] = 0xcc;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(want));
	ck_assert_mem_eq(buf, want, sizeof(want));
	check_roundtrip(&m);
}
END_TEST

/* LEASE with node -1 and with a node, and one LEASE_OK entry, by hand. */
START_TEST(golden_lease)
{
	static const uint8_t lease_any[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x02, 0x00, 0x00, /* LEASE */
		0x09, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, /* seq, len */
		0x03, 0x00, 0x00, 0x00,				/* nslabs 3 */
		0x00, 0x00, 0x00, 0x00,				/* flags */
		0xff, 0xff, 0xff, 0xff,				/* node -1 */
	};
	static const uint8_t lease_ok[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x82, 0x00, 0x00, /* LEASE_OK */
		0x09, 0x00, 0x00, 0x00, 0x36, 0x00, 0x00, 0x00, /* len 54 */
		0x10, 0x27, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* ttl, 1 */
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* epoch */
		0x05, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, /* slab, gen */
		0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, /* key */
		0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* base */
		0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, /* len */
		0x07, 0x00,					/* endpoint 7 */
		0x02, 0x01, 0x00, 0x00,				/* node 258 */
	};
	struct wire_lease *l = &m.u.lease_ok.lease[0];

	memset(&m, 0, sizeof(m));
	m.type = WIRE_LEASE;
	m.seq = 9;
	m.u.lease.nslabs = 3;
	m.u.lease.node = WIRE_NODE_ANY;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(lease_any));
	ck_assert_mem_eq(buf, lease_any, sizeof(lease_any));
	m.u.lease.node = 0x3fe;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(lease_any));
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 8], 0xfe);
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 9], 0x03);
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 10] | buf[WIRE_HDR_LEN + 11], 0);

	memset(&m, 0, sizeof(m));
	m.type = WIRE_LEASE_OK;
	m.seq = 9;
	m.u.lease_ok.ttl_ms = 10000;
	m.u.lease_ok.count = 1;
	l->epoch = 0x2827262524232221ull;
	l->slab = 5;
	l->generation = 6;
	l->key = 0x3837363534333231ull;
	l->base = 0x1000;
	l->len_bytes = 64ull << 20;
	l->endpoint = 7;
	l->node = 258;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(lease_ok));
	ck_assert_mem_eq(buf, lease_ok, sizeof(lease_ok));
	check_roundtrip(&m);
}
END_TEST

START_TEST(lease_bounds)
{
	size_t i;

	sample(WIRE_LEASE, 1, &m);
	m.u.lease.nslabs = 1;
	check_roundtrip(&m);
	m.u.lease.nslabs = WIRE_MAX_LEASES;
	check_roundtrip(&m);
	m.u.lease.nslabs = 0;
	check_both_reject(&m);
	m.u.lease.nslabs = WIRE_MAX_LEASES + 1;
	check_both_reject(&m);
	m.u.lease.nslabs = UINT32_MAX;
	check_both_reject(&m);
	m.u.lease.nslabs = 1;
	m.u.lease.flags = 1;
	check_both_reject(&m);
	m.u.lease.flags = 0x80000000u;
	check_both_reject(&m);

	m.u.lease.flags = 0;
	m.u.lease.node = WIRE_NODE_ANY;
	check_roundtrip(&m);
	m.u.lease.node = 0;
	check_roundtrip(&m);
	m.u.lease.node = WIRE_NODE_MAX - 1;
	check_roundtrip(&m);
	for (i = 0; i < NBAD_NODES; i++) {
		m.u.lease.node = bad_nodes[i];
		check_both_reject(&m);
	}
}
END_TEST

START_TEST(lease_ok_bounds)
{
	sample(WIRE_LEASE_OK, 1, &m);
	m.u.lease_ok.count = 0;
	memset(m.u.lease_ok.lease, 0, sizeof(m.u.lease_ok.lease));
	check_roundtrip(&m);

	sample(WIRE_LEASE_OK, 2, &m);
	m.u.lease_ok.count = WIRE_MAX_LEASES;
	for (uint32_t i = 0; i < WIRE_MAX_LEASES; i++) {
		m.u.lease_ok.lease[i].slab = i;
		m.u.lease_ok.lease[i].key = kv(2, i);
		m.u.lease_ok.lease[i].len_bytes = 64ull << 20;
		m.u.lease_ok.lease[i].endpoint = i % WIRE_MAX_ENDPOINTS;
		m.u.lease_ok.lease[i].node =
			i % 3 ? (int32_t)(i * 4) : WIRE_NODE_ANY;
	}
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 8 + WIRE_MAX_LEASES * 46);
	ck_assert_int_eq(WIRE_HDR_LEN + 8 + 256 * 46, 16 + 11784);

	/* 257 entries, each well-formed, are one too many. */
	ck_assert_int_eq(WIRE_MAX_LEASES, 256);
	m.u.lease_ok.count = WIRE_MAX_LEASES + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.lease_ok.count = WIRE_MAX_LEASES;
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 4] = (WIRE_MAX_LEASES + 1) & 0xff;
	tb.b[WIRE_HDR_LEN + 5] = (WIRE_MAX_LEASES + 1) >> 8;
	tb_bytes(&tb, tb.b + WIRE_HDR_LEN + 8, 46);
	tb_end(&tb);
	check_tb_rejected();

	sample(WIRE_LEASE_OK, 3, &m);
	m.u.lease_ok.ttl_ms = 0;
	check_both_reject(&m);

	/* The last entry's endpoint and node, at and past their bounds. */
	sample(WIRE_LEASE_OK, 4, &m);
	ck_assert_int_eq(m.u.lease_ok.count, 5);
	m.u.lease_ok.lease[4].endpoint = WIRE_MAX_ENDPOINTS - 1;
	m.u.lease_ok.lease[4].node = WIRE_NODE_MAX - 1;
	check_roundtrip(&m);
	m.u.lease_ok.lease[4].endpoint = WIRE_MAX_ENDPOINTS;
	check_both_reject(&m);
	m.u.lease_ok.lease[4].endpoint = UINT16_MAX;
	check_both_reject(&m);
	m.u.lease_ok.lease[4].endpoint = 0;
	for (size_t i = 0; i < NBAD_NODES; i++) {
		m.u.lease_ok.lease[4].node = bad_nodes[i];
		check_both_reject(&m);
	}
}
END_TEST

START_TEST(release_bounds)
{
	uint32_t i;

	sample(WIRE_RELEASE, 1, &m);
	m.u.release.count = 1;
	memset(&m.u.release.ref[1], 0,
	       sizeof(m.u.release.ref) - sizeof(m.u.release.ref[0]));
	check_roundtrip(&m);

	for (i = 0; i < WIRE_MAX_LEASES; i++) {
		m.u.release.ref[i].epoch = kv(9, 0);
		m.u.release.ref[i].slab = i * 3;
		m.u.release.ref[i].generation = (uint32_t)kv(9, i);
	}
	m.u.release.count = WIRE_MAX_LEASES;
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 4 + WIRE_MAX_LEASES * 16);

	m.u.release.count = WIRE_MAX_LEASES + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.release.count = WIRE_MAX_LEASES;
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 0] = (WIRE_MAX_LEASES + 1) & 0xff;
	tb.b[WIRE_HDR_LEN + 1] = (WIRE_MAX_LEASES + 1) >> 8;
	tb_bytes(&tb, tb.b + WIRE_HDR_LEN + 4, 16);
	tb_end(&tb);
	check_tb_rejected();

	m.u.release.count = 0;
	check_both_reject(&m);
}
END_TEST

START_TEST(small_reply_bounds)
{
	sample(WIRE_RELEASE_OK, 1, &m);
	m.u.release_ok.released = 0;
	check_roundtrip(&m);
	m.u.release_ok.released = WIRE_MAX_LEASES;
	check_roundtrip(&m);
	m.u.release_ok.released = WIRE_MAX_LEASES + 1;
	check_both_reject(&m);

	sample(WIRE_HEARTBEAT_OK, 1, &m);
	m.u.heartbeat_ok.ttl_ms = 1;
	m.u.heartbeat_ok.nleases = UINT32_MAX;
	check_roundtrip(&m);
	m.u.heartbeat_ok.ttl_ms = 0;
	check_both_reject(&m);

	sample(WIRE_STATUS_OK, 1, &m);
	m.u.status_ok.flags = WIRE_STATUS_KNOWN;
	check_roundtrip(&m);
	m.u.status_ok.flags = WIRE_STATUS_KNOWN + 1;
	check_both_reject(&m);
	m.u.status_ok.flags = 0x80000000u;
	check_both_reject(&m);

	/* Per-node entries: none, all eight, nine, bad nodes. */
	sample(WIRE_STATUS_OK, 8, &m);
	ck_assert_int_eq(m.u.status_ok.nnodes, WIRE_MAX_NODES);
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 74 + 12 * WIRE_MAX_NODES);
	ck_assert_int_eq(WIRE_HDR_LEN + 74 + 12 * 8, 16 + 170);
	m.u.status_ok.nnodes = WIRE_MAX_NODES + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.status_ok.nnodes = WIRE_MAX_NODES;
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 72] = WIRE_MAX_NODES + 1;
	tb_bytes(&tb, tb.b + WIRE_HDR_LEN + 74, 12);
	tb_end(&tb);
	check_tb_rejected();
	for (size_t i = 0; i < NBAD_NODES; i++) {
		sample(WIRE_STATUS_OK, 8, &m);
		m.u.status_ok.node[WIRE_MAX_NODES - 1].node = bad_nodes[i];
		check_both_reject(&m);
	}
	sample(WIRE_STATUS_OK, 9, &m);
	m.u.status_ok.nnodes = 0;
	memset(m.u.status_ok.node, 0, sizeof(m.u.status_ok.node));
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 74);
}
END_TEST

START_TEST(error_bounds)
{
	static const int32_t bad[] = {
		0, -1, -EINVAL, WIRE_ERR_MAX + 1, INT32_MIN, INT32_MAX,
	};
	size_t i;

	sample(WIRE_ERROR, 1, &m);
	m.u.error.err = 1;
	check_roundtrip(&m);
	m.u.error.err = WIRE_ERR_MAX;
	fill_str(m.u.error.msg, WIRE_MSG_MAX - 1, 3);
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 4 + 2 + WIRE_MSG_MAX - 1);

	memset(m.u.error.msg, 'e', WIRE_MSG_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
	tb_hdr(&tb, 1, WIRE_ERROR, 0, 1);
	tb_u32(&tb, EIO);
	tb_u16(&tb, WIRE_MSG_MAX);
	memset(tb.b + tb.n, 'e', WIRE_MSG_MAX);
	tb.n += WIRE_MSG_MAX;
	tb_end(&tb);
	check_tb_rejected();

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sample(WIRE_ERROR, 2, &m);
		m.u.error.err = bad[i];
		check_both_reject(&m);
	}
}
END_TEST

START_TEST(embedded_nul)
{
	/* HELLO client "ab\0cd" */
	tb_hdr(&tb, 1, WIRE_HELLO, 0, 7);
	tb_u16(&tb, 1);
	tb_u16(&tb, 1);
	tb_u16(&tb, 5);
	tb_bytes(&tb, "ab\0cd", 5);
	tb_end(&tb);
	check_tb_rejected();
	/* ...and with the NUL last */
	tb_hdr(&tb, 1, WIRE_HELLO, 0, 7);
	tb_u16(&tb, 1);
	tb_u16(&tb, 1);
	tb_u16(&tb, 3);
	tb_bytes(&tb, "ab\0", 3);
	tb_end(&tb);
	check_tb_rejected();

	/* ERROR msg with a NUL */
	tb_hdr(&tb, 1, WIRE_ERROR, 0, 7);
	tb_u32(&tb, ENOSPC);
	tb_u16(&tb, 4);
	tb_bytes(&tb, "\0abc", 4);
	tb_end(&tb);
	check_tb_rejected();

	/* HELLO_OK provider with a NUL */
	sample(WIRE_HELLO_OK, 5, &m);
	strcpy(m.u.hello_ok.provider, "tcpX");
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 32 + 3] = '\0';
	check_tb_rejected();
}
END_TEST

START_TEST(string_bytes_after_nul_ignored)
{
	/* encode reads a string up to its NUL only; decode zero-pads. */
	sample(WIRE_HELLO, 6, &m);
	strcpy(m.u.hello.client, "abc");
	memset(m.u.hello.client + 4, 'z', WIRE_NAME_MAX - 4);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 4 + 2 + 3);
	ck_assert_int_eq(wire_decode(buf, WIRE_HDR_LEN + 9, &m2),
			 WIRE_HDR_LEN + 9);
	ck_assert_str_eq(m2.u.hello.client, "abc");
	for (size_t i = 3; i < WIRE_NAME_MAX; i++)
		ck_assert_int_eq(m2.u.hello.client[i], 0);
}
END_TEST

START_TEST(make_error)
{
	char longtext[400];
	ssize_t n;

	wire_make_error(&m, 17, -ENOSPC, "no free slab");
	ck_assert_int_eq(m.type, WIRE_ERROR);
	ck_assert_int_eq(m.flags, 0);
	ck_assert_int_eq(m.seq, 17);
	ck_assert_int_eq(m.u.error.err, ENOSPC);
	ck_assert_str_eq(m.u.error.msg, "no free slab");
	check_roundtrip(&m);

	wire_make_error(&m, 18, EPERM, NULL);
	ck_assert_int_eq(m.u.error.err, EPERM);
	ck_assert_str_eq(m.u.error.msg, "");
	check_roundtrip(&m);

	wire_make_error(&m, 1, -WIRE_ERR_MAX, "x");
	ck_assert_int_eq(m.u.error.err, WIRE_ERR_MAX);
	wire_make_error(&m, 1, 0, "x");
	ck_assert_int_eq(m.u.error.err, EIO);
	wire_make_error(&m, 1, WIRE_ERR_MAX + 1, "x");
	ck_assert_int_eq(m.u.error.err, EIO);
	wire_make_error(&m, 1, -WIRE_ERR_MAX - 1, "x");
	ck_assert_int_eq(m.u.error.err, EIO);
	wire_make_error(&m, 1, INT32_MIN, "x");
	ck_assert_int_eq(m.u.error.err, EIO);

	memset(longtext, 'L', sizeof(longtext) - 1);
	longtext[sizeof(longtext) - 1] = '\0';
	wire_make_error(&m, 19, -EBADMSG, longtext);
	ck_assert_uint_eq(strlen(m.u.error.msg), WIRE_MSG_MAX - 1);
	n = enc(&m);
	ck_assert_int_eq(n, WIRE_HDR_LEN + 4 + 2 + WIRE_MSG_MAX - 1);
	check_roundtrip(&m);
}
END_TEST

/* --- protocol 2 --------------------------------------------------------- */

/* Patches the u16 at payload offset off of tb. */
static void tb_patch16(size_t off, uint16_t v)
{
	tb.b[WIRE_HDR_LEN + off] = v & 0xff;
	tb.b[WIRE_HDR_LEN + off + 1] = v >> 8;
}

/* Inserts n bytes of p at payload offset off of tb (len patched). */
static void tb_insert(size_t off, const void *p, size_t n)
{
	uint8_t *at = tb.b + WIRE_HDR_LEN + off;

	memmove(at + n, at, tb.n - WIRE_HDR_LEN - off);
	memcpy(at, p, n);
	tb.n += n;
	tb_end(&tb);
}

/* Every prefix of a valid frame is -EAGAIN; every shorter payload (len
 * saying so) is -EBADMSG; one byte more in the payload is -EBADMSG. */
static void check_truncations(const struct wire_msg *msg)
{
	ssize_t n = enc(msg), k;
	size_t full;

	ck_assert_int_gt(n, 0);
	for (k = 0; k < n; k++)
		ck_assert_int_eq(wire_decode(buf, (size_t)k, &m2), -EAGAIN);
	spec_frame(msg, &tb);
	full = tb.n;
	ck_assert_int_eq(full, n);
	for (tb.n = WIRE_HDR_LEN; tb.n < full; tb.n++) {
		tb_end(&tb);
		check_tb_rejected();
	}
	tb.n = full;
	tb_u8(&tb, 0);
	tb_end(&tb);
	check_tb_rejected();
}

START_TEST(golden_auth)
{
	static const uint8_t want[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x07, 0x00, 0x00, /* AUTH */
		0x05, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, /* seq 5, 42 */
		0x03, 0x00, 0x61, 0x63, 0x6d,			/* "acm" */
		0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, /* cnonce */
		0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, /* (raw, */
		0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, /* no */
		0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, /* length) */
		0x03, 0x00, 0xf0, 0x00, 0xf2, /* pass: 3 bytes */
	};
	int i;

	memset(&m, 0, sizeof(m));
	m.type = WIRE_AUTH;
	m.seq = 5;
	strcpy(m.u.auth.principal, "acm");
	for (i = 0; i < WIRE_NONCE_LEN; i++)
		m.u.auth.cnonce[i] = (uint8_t)i;
	m.u.auth.pass_len = 3;
	m.u.auth.pass[0] = 0xf0;
	m.u.auth.pass[2] = 0xf2;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(want));
	ck_assert_mem_eq(buf, want, sizeof(want));
	check_roundtrip(&m);
	check_truncations(&m);

	/* Without a pass: principal, nonce, a zero length. */
	m.u.auth.pass_len = 0;
	memset(m.u.auth.pass, 0, sizeof(m.u.auth.pass));
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 5 + 32 + 2);
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 37] | buf[WIRE_HDR_LEN + 38], 0);
	check_roundtrip(&m);
}
END_TEST

/* The ticket inside LEASE_GRANT, byte by byte, and wire_ticket_body. */
START_TEST(golden_lease_grant)
{
	static const uint8_t want[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x0a, 0x00, 0x00, /* GRANT */
		0x0b, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, 0x00, /* seq, 80 */
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* grant_id */
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, /* reg epoch */
		0x31, 0x32, 0x33, 0x34,				/* tenant */
		0x41, 0x42, 0x43, 0x44,				/* donor */
		0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, /* d. epoch */
		0x00, 0x01, 0x00, 0x00,				/* nslabs 256 */
		0xff, 0xff, 0xff, 0xff,				/* node -1 */
		0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, /* expires */
		0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, /* mac */
		0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
		0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
		0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
	};
	struct wire_ticket *t = &m.u.lease_grant.ticket;
	uint8_t body[WIRE_TICKET_BODY_LEN + 1];
	int i;

	memset(&m, 0, sizeof(m));
	m.type = WIRE_LEASE_GRANT;
	m.seq = 11;
	t->grant_id = 0x1817161514131211ull;
	t->registry_epoch = 0x2827262524232221ull;
	t->tenant_id = 0x34333231;
	t->donor_id = 0x44434241;
	t->donor_epoch = 0x5857565554535251ull;
	t->nslabs = 256;
	t->node = WIRE_NODE_ANY;
	t->expires_ms = 0x6867666564636261ull;
	for (i = 0; i < WIRE_MAC_LEN; i++)
		t->mac[i] = (uint8_t)(0xa0 + i);
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(want));
	ck_assert_mem_eq(buf, want, sizeof(want));
	check_roundtrip(&m);
	check_truncations(&m);

	/* The MAC covers the 48 body bytes as they travel, and nothing else. */
	memset(body, 0x5a, sizeof(body));
	wire_ticket_body(t, body);
	ck_assert_mem_eq(body, want + WIRE_HDR_LEN, WIRE_TICKET_BODY_LEN);
	ck_assert_int_eq(body[WIRE_TICKET_BODY_LEN], 0x5a);
	memset(t->mac, 0, WIRE_MAC_LEN);
	wire_ticket_body(t, body);
	ck_assert_mem_eq(body, want + WIRE_HDR_LEN, WIRE_TICKET_BODY_LEN);
	t->node = 5;
	wire_ticket_body(t, body);
	ck_assert_int_eq(body[36], 5);
	ck_assert_int_eq(body[37] | body[38] | body[39], 0);
}
END_TEST

/* Two grants with a replica each way; every byte as protocol.md draws it. */
START_TEST(golden_place_ok)
{
	static const uint8_t grant_head[2][4 + 8 + 2 + 6] = {
		{ 0x07, 0x00, 0x00, 0x00, 0x71, 0,   0,	  0,   0,   0,
		  0,	0,    0x06, 0x00, 'a',	':', '7', '0', '7', '0' },
		{ 0x09, 0x00, 0x00, 0x00, 0x72, 0,   0,	  0,   0,   0,
		  0,	0,    0x06, 0x00, 'b',	':', '7', '0', '7', '0' },
	};
	static const uint8_t layout[] = {
		0x03, 0x00,		/* nslabs 3 */
		0x00, 0x01, 0x01, 0x00, /* (0, 1), (1, 0) */
		0x00, 0xff,		/* (0, none) */
	};
	struct wire_place_ok *p = &m.u.place_ok;
	size_t off;
	int g;

	memset(&m, 0, sizeof(m));
	m.type = WIRE_PLACE_OK;
	m.seq = 3;
	p->registry_epoch = 0x0807060504030201ull;
	p->ngrants = 2;
	for (g = 0; g < 2; g++) {
		struct wire_grant *gr = &p->grant[g];

		gr->donor_id = g ? 9 : 7;
		gr->donor_epoch = g ? 0x72 : 0x71;
		strcpy(gr->addr, g ? "b:7070" : "a:7070");
		gr->ticket.grant_id = 100 + (uint64_t)g;
		gr->ticket.registry_epoch = p->registry_epoch;
		gr->ticket.tenant_id = 4;
		gr->ticket.donor_id = gr->donor_id;
		gr->ticket.donor_epoch = gr->donor_epoch;
		gr->ticket.nslabs = g ? 2 : 3;
		gr->ticket.node = g;
		gr->ticket.expires_ms = 1700000000000ull;
		memset(gr->ticket.mac, 0xc0 + g, WIRE_MAC_LEN);
	}
	p->nslabs = 3;
	p->layout[0] = (struct wire_layout){ 0, 1 };
	p->layout[1] = (struct wire_layout){ 1, 0 };
	p->layout[2] = (struct wire_layout){ 0, WIRE_NO_GRANT };
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 10 + 2 * (20 + 80) + 8);
	ck_assert_int_eq(buf[WIRE_HDR_LEN], 0x01);
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 7], 0x08);
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 8], 2); /* ngrants */
	ck_assert_int_eq(buf[WIRE_HDR_LEN + 9], 0);
	off = WIRE_HDR_LEN + 10;
	for (g = 0; g < 2; g++) {
		uint8_t body[WIRE_TICKET_BODY_LEN];

		ck_assert_mem_eq(buf + off, grant_head[g], 20);
		wire_ticket_body(&p->grant[g].ticket, body);
		ck_assert_mem_eq(buf + off + 20, body, WIRE_TICKET_BODY_LEN);
		ck_assert_int_eq(buf[off + 20 + 32], (g ? 2 : 3)); /* nslabs */
		ck_assert_int_eq(buf[off + 20 + 48], 0xc0 + g);	   /* mac[0] */
		ck_assert_int_eq(buf[off + 20 + 79], 0xc0 + g);	   /* mac[31] */
		off += 100;
	}
	ck_assert_mem_eq(buf + off, layout, sizeof(layout));
	check_roundtrip(&m);
	check_truncations(&m);
}
END_TEST

START_TEST(golden_admin)
{
	static const uint8_t want[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x0e, 0x00, 0x00, /* ADMIN */
		0x02, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, /* seq, 18 */
		0x10, 0x00, '{',  '"',	'c',  'm',  'd',  '"',	/* 16 bytes */
		':',  '"',  'd',  'o',	'n',  'o',  'r',  's',	'"', '}',
	};
	static const char json[] = "{\"cmd\":\"donors\"}";

	memset(&m, 0, sizeof(m));
	m.type = WIRE_ADMIN;
	m.seq = 2;
	m.u.admin.json = json;
	m.u.admin.json_len = (uint32_t)strlen(json);
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(want));
	ck_assert_mem_eq(buf, want, sizeof(want));
	check_roundtrip(&m);
	check_truncations(&m);

	/* Decoding points into the frame, not NUL-terminated, no copy. */
	memcpy(buf2, want, sizeof(want));
	ck_assert_int_eq(wire_decode(buf2, sizeof(want), &m2), sizeof(want));
	ck_assert_ptr_eq(m2.u.admin.json, (const char *)buf2 + 18);
	ck_assert_int_eq(m2.u.admin.json_len, 16);
	/* ADMIN_OK: the same layout. */
	m.type = WIRE_ADMIN_OK;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(want));
	ck_assert_int_eq(buf[5], 0x8e);
	ck_assert_mem_eq(buf + 6, want + 6, sizeof(want) - 6);
}
END_TEST

/* A string field at payload offset off, at its longest (max - 1 bytes in
 * m), must round-trip; one byte longer on the wire must not decode. */
/* msg encodes to exactly golden, golden decodes to msg, and every
 * truncation of it is refused. */
static void check_golden(const struct wire_msg *msg, const uint8_t *golden,
			 size_t len)
{
	struct wire_msg back;

	ck_assert_int_eq(enc(msg), (ssize_t)len);
	ck_assert_mem_eq(buf, golden, len);
	ck_assert_int_eq(wire_decode(golden, len, &back), (ssize_t)len);
	ck_assert_mem_eq(msg, &back, sizeof(back));
	check_truncations(msg);
}

static void check_str_limit(const struct wire_msg *msg, size_t off)
{
	uint16_t n;

	check_roundtrip(msg);
	spec_frame(msg, &tb);
	n = (uint16_t)(tb.b[WIRE_HDR_LEN + off] | tb.b[WIRE_HDR_LEN + off + 1]
							  << 8);
	tb_patch16(off, (uint16_t)(n + 1));
	tb_insert(off + 2 + n, "x", 1);
	check_tb_rejected();
}

START_TEST(auth_bounds)
{
	sample(WIRE_AUTH, 1, &m);
	fill_str(m.u.auth.principal, WIRE_NAME_MAX - 1, 4);
	m.u.auth.pass_len = WIRE_PASS_MAX;
	fill_bytes(m.u.auth.pass, WIRE_PASS_MAX, 4, 9);
	check_str_limit(&m, 0);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 2 + 63 + 32 + 2 + 192);

	/* A principal that fills the array has no room for its NUL. */
	memset(m.u.auth.principal, 'p', WIRE_NAME_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
	/* An empty principal names nobody. */
	m.u.auth.principal[0] = '\0';
	check_both_reject(&m);

	/* A pass one byte over WIRE_PASS_MAX. */
	sample(WIRE_AUTH, 2, &m);
	m.u.auth.pass_len = WIRE_PASS_MAX + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.auth.pass_len = WIRE_PASS_MAX;
	spec_frame(&m, &tb);
	tb_patch16(tb.n - WIRE_HDR_LEN - WIRE_PASS_MAX - 2, WIRE_PASS_MAX + 1);
	tb_u8(&tb, 0);
	tb_end(&tb);
	check_tb_rejected();

	/* Principal with a NUL inside. */
	sample(WIRE_AUTH, 3, &m);
	strcpy(m.u.auth.principal, "ab");
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 3] = '\0';
	check_tb_rejected();
}
END_TEST

START_TEST(auth_ok_bounds)
{
	struct wire_auth_ok *a = &m.u.auth_ok;
	static const uint8_t bad_roles[] = { 0, 4, 0x80, 0xff };
	size_t i, pass_off;

	/* Minimal: an admin, no tenant, no pass. */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_AUTH_OK;
	a->role = WIRE_ROLE_ADMIN;
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 32 + 1 + 12 + 2 + 2);
	a->role = WIRE_ROLE_DONOR;
	a->flags = WIRE_AUTH_REGISTRY;
	check_roundtrip(&m);

	/* Full: a tenant at the registry with the largest pass and box. */
	sample(WIRE_AUTH_OK, 3, &m);
	ck_assert_int_eq(a->role, WIRE_ROLE_TENANT);
	a->flags = WIRE_AUTH_KNOWN;
	a->pass_ttl_ms = UINT32_MAX;
	a->pass_len = WIRE_PASS_MAX;
	a->box_len = WIRE_BOX_MAX;
	fill_bytes(a->pass, WIRE_PASS_MAX, 3, 1);
	fill_bytes(a->box, WIRE_BOX_MAX, 3, 2);
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 45 + 2 + 192 + 2 + 96);

	/* pass and box one byte over their limits */
	a->pass_len = WIRE_PASS_MAX + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	a->pass_len = WIRE_PASS_MAX;
	a->box_len = WIRE_BOX_MAX + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	a->box_len = WIRE_BOX_MAX;
	spec_frame(&m, &tb);
	pass_off = 45;
	tb_patch16(pass_off, WIRE_PASS_MAX + 1);
	tb_insert(pass_off + 2 + WIRE_PASS_MAX, "p", 1);
	check_tb_rejected();
	spec_frame(&m, &tb);
	tb_patch16(pass_off + 2 + WIRE_PASS_MAX, WIRE_BOX_MAX + 1);
	tb_u8(&tb, 0);
	tb_end(&tb);
	check_tb_rejected();

	for (i = 0; i < sizeof(bad_roles); i++) {
		sample(WIRE_AUTH_OK, 2, &m);
		a->role = bad_roles[i];
		check_both_reject(&m);
	}
	sample(WIRE_AUTH_OK, 2, &m);
	a->flags = WIRE_AUTH_KNOWN + 1;
	check_both_reject(&m);
	a->flags = 0x80000000u;
	check_both_reject(&m);

	/* tenant_id only for a tenant; a pass only for a tenant. */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_AUTH_OK;
	a->role = WIRE_ROLE_DONOR;
	a->tenant_id = 1;
	check_both_reject(&m);
	a->role = WIRE_ROLE_TENANT;
	check_roundtrip(&m);
	a->pass_len = a->box_len = 1;
	a->pass_ttl_ms = 1;
	check_roundtrip(&m);
	a->role = WIRE_ROLE_ADMIN;
	a->tenant_id = 0;
	check_both_reject(&m);

	/* pass, pass_ttl_ms and box come together or not at all. */
	a->role = WIRE_ROLE_TENANT;
	a->pass_ttl_ms = 0;
	check_both_reject(&m);
	a->pass_ttl_ms = 1;
	a->box_len = 0;
	check_both_reject(&m);
	a->box_len = 1;
	a->pass_len = 0;
	check_both_reject(&m);
	a->box_len = 0;
	check_both_reject(&m); /* a lifetime, but no pass */
	a->pass_ttl_ms = 0;
	check_roundtrip(&m);
}
END_TEST

START_TEST(small_v2_bounds)
{
	size_t i;

	/* AUTH_CHALLENGE and AUTH_PROOF: exactly 32 raw bytes. */
	sample(WIRE_AUTH_CHALLENGE, 1, &m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + WIRE_NONCE_LEN);
	ck_assert_mem_eq(buf + WIRE_HDR_LEN, m.u.auth_challenge.snonce,
			 WIRE_NONCE_LEN);
	check_truncations(&m);
	sample(WIRE_AUTH_PROOF, 1, &m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + WIRE_MAC_LEN);
	ck_assert_mem_eq(buf + WIRE_HDR_LEN, m.u.auth_proof.mac, WIRE_MAC_LEN);
	check_truncations(&m);

	/* PLACE: as LEASE, with the REPLICA flag. */
	sample(WIRE_PLACE, 1, &m);
	m.u.place.nslabs = 1;
	m.u.place.flags = 0;
	m.u.place.node = WIRE_NODE_ANY;
	check_roundtrip(&m);
	m.u.place.nslabs = WIRE_MAX_LEASES;
	m.u.place.flags = WIRE_PLACE_REPLICA;
	m.u.place.node = WIRE_NODE_MAX - 1;
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 12);
	m.u.place.nslabs = 0;
	check_both_reject(&m);
	m.u.place.nslabs = WIRE_MAX_LEASES + 1;
	check_both_reject(&m);
	m.u.place.nslabs = 1;
	m.u.place.flags = WIRE_PLACE_KNOWN + 1;
	check_both_reject(&m);
	m.u.place.flags = 0x80000000u;
	check_both_reject(&m);
	m.u.place.flags = 0;
	for (i = 0; i < NBAD_NODES; i++) {
		m.u.place.node = bad_nodes[i];
		check_both_reject(&m);
	}

	/* HEARTBEAT2: any counters. */
	sample(WIRE_HEARTBEAT2, 1, &m);
	m.u.heartbeat2.bytes_read = UINT64_MAX;
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 24);
	memset(&m.u.heartbeat2, 0, sizeof(m.u.heartbeat2));
	check_roundtrip(&m);

	/* HEARTBEAT2_OK: the bounds of HEARTBEAT_OK. */
	sample(WIRE_HEARTBEAT2_OK, 1, &m);
	m.u.heartbeat_ok.ttl_ms = 1;
	check_roundtrip(&m);
	check_truncations(&m);
	m.u.heartbeat_ok.ttl_ms = 0;
	check_both_reject(&m);

	/* DONOR_JOIN_OK and DONOR_REPORT_OK. */
	sample(WIRE_DONOR_JOIN_OK, 1, &m);
	m.u.donor_join_ok.report_ms = 1;
	m.u.donor_join_ok.flags = WIRE_DONOR_KNOWN;
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 20);
	m.u.donor_join_ok.report_ms = 0;
	check_both_reject(&m);
	m.u.donor_join_ok.report_ms = 1;
	m.u.donor_join_ok.flags = WIRE_DONOR_KNOWN + 1;
	check_both_reject(&m);
	m.u.donor_join_ok.flags = 0x80000000u;
	check_both_reject(&m);

	sample(WIRE_DONOR_REPORT_OK, 1, &m);
	m.u.donor_report_ok.flags = WIRE_DONOR_DRAIN;
	m.u.donor_report_ok.nkv = 0;
	memset(m.u.donor_report_ok.kv, 0, sizeof(m.u.donor_report_ok.kv));
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 14);
	m.u.donor_report_ok.flags = 0;
	check_roundtrip(&m);
	/* every tenant listed: next_tenant_id follows kv[] */
	m.u.donor_report_ok.flags = WIRE_DONOR_TENANTS;
	m.u.donor_report_ok.next_tenant_id = 0x01020304;
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 18);
	/* an etcd registry's fence: fence_ms follows next_tenant_id */
	m.u.donor_report_ok.flags = WIRE_DONOR_TENANTS | WIRE_DONOR_FENCE;
	m.u.donor_report_ok.fence_ms = 0x0a0b0c0d;
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 22);
	m.u.donor_report_ok.flags = WIRE_DONOR_FENCE;
	m.u.donor_report_ok.next_tenant_id = 0;
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 18);
	m.u.donor_report_ok.fence_ms = 0;
	m.u.donor_report_ok.flags =
		(WIRE_DONOR_KNOWN | WIRE_DONOR_TENANTS | WIRE_DONOR_FENCE) + 1;
	check_both_reject(&m);
	m.u.donor_report_ok.flags = 0;
	m.u.donor_report_ok.next_tenant_id = 0;

	/* KV allowances: 8 bytes each, up to WIRE_MAX_TENANTS. */
	m.u.donor_report_ok.nkv = 2;
	m.u.donor_report_ok.kv[0] = (struct wire_kv_allowance){ 7, 3 };
	m.u.donor_report_ok.kv[1] = (struct wire_kv_allowance){ 9, 0 };
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 14 + 16);
	m.u.donor_report_ok.nkv = WIRE_MAX_TENANTS;
	for (uint32_t k = 0; k < WIRE_MAX_TENANTS; k++)
		m.u.donor_report_ok.kv[k] =
			(struct wire_kv_allowance){ k + 1,
						    (uint32_t)kv(14, k) };
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 14 + 8 * WIRE_MAX_TENANTS);
	m.u.donor_report_ok.nkv = WIRE_MAX_TENANTS + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.donor_report_ok.nkv = WIRE_MAX_TENANTS;
	spec_frame(&m, &tb);
	tb_patch16(12, WIRE_MAX_TENANTS + 1); /* nkv */
	tb_u32(&tb, 77);
	tb_u32(&tb, 78);
	tb_end(&tb);
	check_tb_rejected();
}
END_TEST

/* A ticket's own bounds, in LEASE_GRANT. */
START_TEST(ticket_bounds)
{
	struct wire_ticket *t = &m.u.lease_grant.ticket;
	size_t i;

	sample(WIRE_LEASE_GRANT, 1, &m);
	t->nslabs = 1;
	t->node = 0;
	check_roundtrip(&m);
	t->nslabs = WIRE_MAX_LEASES;
	t->node = WIRE_NODE_MAX - 1;
	t->grant_id = t->expires_ms = UINT64_MAX;
	check_roundtrip(&m);
	t->nslabs = 0;
	check_both_reject(&m);
	t->nslabs = WIRE_MAX_LEASES + 1;
	check_both_reject(&m);
	t->nslabs = UINT32_MAX;
	check_both_reject(&m);
	t->nslabs = 1;
	for (i = 0; i < NBAD_NODES; i++) {
		t->node = bad_nodes[i];
		check_both_reject(&m);
	}
}
END_TEST

/* LEASE_GRANT_OK has LEASE_OK's layout and bounds. */
START_TEST(lease_grant_ok_bounds)
{
	uint32_t i;

	sample(WIRE_LEASE_GRANT_OK, 1, &m);
	m.u.lease_ok.count = 0;
	memset(m.u.lease_ok.lease, 0, sizeof(m.u.lease_ok.lease));
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 8);

	sample(WIRE_LEASE_GRANT_OK, 2, &m);
	m.u.lease_ok.count = WIRE_MAX_LEASES;
	for (i = 0; i < WIRE_MAX_LEASES; i++) {
		m.u.lease_ok.lease[i].slab = i;
		m.u.lease_ok.lease[i].endpoint = i % WIRE_MAX_ENDPOINTS;
		m.u.lease_ok.lease[i].node = (int32_t)(i % 4);
	}
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 8 + WIRE_MAX_LEASES * 46);
	/* The same bytes as LEASE_OK, but for the type. */
	m.type = WIRE_LEASE_OK;
	ck_assert_int_eq(wire_encode(&m, buf2, sizeof(buf2)),
			 WIRE_HDR_LEN + 8 + WIRE_MAX_LEASES * 46);
	m.type = WIRE_LEASE_GRANT_OK;
	enc(&m);
	ck_assert_int_eq(buf[5], WIRE_LEASE_GRANT_OK);
	ck_assert_mem_eq(buf + 6, buf2 + 6,
			 WIRE_HDR_LEN - 6 + 8 + WIRE_MAX_LEASES * 46);

	m.u.lease_ok.count = WIRE_MAX_LEASES + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.lease_ok.count = WIRE_MAX_LEASES;
	spec_frame(&m, &tb);
	tb.b[WIRE_HDR_LEN + 4] = (WIRE_MAX_LEASES + 1) & 0xff;
	tb.b[WIRE_HDR_LEN + 5] = (WIRE_MAX_LEASES + 1) >> 8;
	tb_bytes(&tb, tb.b + WIRE_HDR_LEN + 8, 46);
	tb_end(&tb);
	check_tb_rejected();

	sample(WIRE_LEASE_GRANT_OK, 3, &m);
	m.u.lease_ok.ttl_ms = 0;
	check_both_reject(&m);
	sample(WIRE_LEASE_GRANT_OK, 4, &m);
	m.u.lease_ok.lease[0].endpoint = WIRE_MAX_ENDPOINTS;
	check_both_reject(&m);
	sample(WIRE_LEASE_GRANT_OK, 4, &m);
	m.u.lease_ok.lease[0].node = WIRE_NODE_MAX;
	check_both_reject(&m);
}
END_TEST

START_TEST(place_ok_bounds)
{
	struct wire_place_ok *p = &m.u.place_ok;
	struct wire_grant extra;
	size_t layout_off;
	uint16_t g;

	/* Minimal: one grant, one slab. */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_PLACE_OK;
	make_place_ok(p, 1, 1, 1, false);
	check_roundtrip(&m);
	check_truncations(&m);

	/* Largest: 16 grants with 127-byte addresses, 256 slabs, replicas. */
	make_place_ok(p, 2, WIRE_MAX_GRANTS, WIRE_MAX_LEASES, true);
	for (g = 0; g < WIRE_MAX_GRANTS; g++)
		fill_str(p->grant[g].addr, WIRE_HOSTPORT_MAX - 1, 10 + g);
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 10 +
					  WIRE_MAX_GRANTS * (14 + 127 + 80) +
					  2 + 2 * WIRE_MAX_LEASES);
	check_str_limit(&m, 10 + 12); /* grant[0].addr */

	/* 17 grants, otherwise consistent: the count alone refuses it. */
	make_place_ok(p, 3, WIRE_MAX_GRANTS, WIRE_MAX_GRANTS, false);
	p->ngrants = WIRE_MAX_GRANTS + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	p->ngrants = WIRE_MAX_GRANTS;
	spec_frame(&m, &tb);
	extra = p->grant[0];
	extra.donor_id = 0x5eed;
	extra.ticket.donor_id = 0x5eed;
	layout_off = tb.n - WIRE_HDR_LEN - 2 - 2 * WIRE_MAX_GRANTS;
	tb_patch16(8, WIRE_MAX_GRANTS + 1);
	{
		struct tb one = { .n = 0 };
		uint8_t slab[2] = { WIRE_MAX_GRANTS, WIRE_NO_GRANT };

		tb_grant(&one, &extra);
		tb_insert(layout_off, one.b, one.n);
		layout_off += one.n;
		tb_patch16(layout_off, WIRE_MAX_GRANTS + 1);
		tb_u8(&tb, slab[0]);
		tb_u8(&tb, slab[1]);
		tb_end(&tb);
	}
	check_tb_rejected();

	/* No grant, no slab: both refused. */
	make_place_ok(p, 4, 2, 4, false);
	p->ngrants = 0;
	check_both_reject(&m);
	make_place_ok(p, 4, 2, 4, false);
	p->nslabs = 0;
	p->grant[0].ticket.nslabs = p->grant[1].ticket.nslabs = 0;
	ck_assert_int_eq(enc(&m), -EINVAL);

	/* 257 slabs over two grants (129 + 128): the count alone refuses. */
	make_place_ok(p, 5, 2, WIRE_MAX_LEASES, false);
	p->nslabs = WIRE_MAX_LEASES + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	p->nslabs = WIRE_MAX_LEASES;
	p->grant[0].ticket.nslabs++;
	spec_frame(&m, &tb);
	tb_patch16(tb.n - WIRE_HDR_LEN - 2 - 2 * WIRE_MAX_LEASES,
		   WIRE_MAX_LEASES + 1);
	tb_u8(&tb, 0);
	tb_u8(&tb, WIRE_NO_GRANT);
	tb_end(&tb);
	check_tb_rejected();

	/* Layout indices. */
	make_place_ok(p, 6, 3, 9, true);
	check_roundtrip(&m);
	p->layout[8].primary = 3; /* == ngrants */
	check_both_reject(&m);
	make_place_ok(p, 6, 3, 9, true);
	p->layout[8].replica = 3;
	check_both_reject(&m);
	make_place_ok(p, 6, 3, 9, true);
	p->layout[8].replica = 0xfe;
	check_both_reject(&m);
	make_place_ok(p, 6, 3, 9, true);
	p->grant[p->layout[8].replica].ticket.nslabs--;
	p->grant[p->layout[8].primary].ticket.nslabs++;
	p->layout[8].replica = p->layout[8].primary; /* same grant twice */
	check_both_reject(&m);
	make_place_ok(p, 6, 3, 9, true);
	p->grant[p->layout[8].replica].ticket.nslabs--;
	p->layout[8].replica = WIRE_NO_GRANT; /* one slab without a copy */
	check_roundtrip(&m);

	/* Ticket counts must match the layout exactly. */
	make_place_ok(p, 7, 3, 9, false);
	p->grant[1].ticket.nslabs++;
	check_both_reject(&m);
	make_place_ok(p, 7, 3, 9, false);
	p->grant[2].ticket.nslabs--;
	check_both_reject(&m);
	make_place_ok(p, 7, 3, 3, false);
	p->layout[2].primary = 0; /* grant 2 named by no slab */
	p->grant[0].ticket.nslabs++;
	check_both_reject(&m);
	make_place_ok(p, 7, 3, 9, false);
	p->grant[0].ticket.nslabs = 0; /* an invalid ticket first */
	check_both_reject(&m);

	/* Grants and their tickets agree; donors are distinct. */
	make_place_ok(p, 8, 4, 8, false);
	p->grant[3].ticket.donor_id++;
	check_both_reject(&m);
	make_place_ok(p, 8, 4, 8, false);
	p->grant[3].ticket.donor_epoch++;
	check_both_reject(&m);
	make_place_ok(p, 8, 4, 8, false);
	p->grant[3].ticket.registry_epoch++;
	check_both_reject(&m);
	make_place_ok(p, 8, 4, 8, false);
	p->grant[3].donor_id = p->grant[1].donor_id;
	p->grant[3].ticket.donor_id = p->grant[1].donor_id;
	check_both_reject(&m);
	make_place_ok(p, 8, 4, 8, false);
	p->grant[3].ticket.node = WIRE_NODE_MAX;
	check_both_reject(&m);

	/* An empty address, and one that fills its array. */
	make_place_ok(p, 9, 2, 2, false);
	p->grant[1].addr[0] = '\0';
	check_both_reject(&m);
	make_place_ok(p, 9, 2, 2, false);
	memset(p->grant[1].addr, 'a', WIRE_HOSTPORT_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
}
END_TEST

START_TEST(donor_join_bounds)
{
	struct wire_donor_join *d = &m.u.donor_join;
	size_t i;

	/* Minimal: one-byte name and address, no nodes. */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_DONOR_JOIN;
	strcpy(d->name, "h");
	strcpy(d->addr, "a");
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 2 + 1 + 2 + 1 + 22);

	/* Largest: 63 + 127 bytes and eight nodes. */
	sample(WIRE_DONOR_JOIN, 8, &m);
	ck_assert_int_eq(d->nnodes, WIRE_MAX_NODES);
	fill_str(d->name, WIRE_NAME_MAX - 1, 5);
	fill_str(d->addr, WIRE_HOSTPORT_MAX - 1, 6);
	check_str_limit(&m, 0);
	check_str_limit(&m, 2 + WIRE_NAME_MAX - 1);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 2 + 63 + 2 + 127 + 22 + 96);

	d->nnodes = WIRE_MAX_NODES + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	d->nnodes = WIRE_MAX_NODES;
	spec_frame(&m, &tb);
	tb.b[tb.n - 12 * WIRE_MAX_NODES - 2] = WIRE_MAX_NODES + 1;
	tb_bytes(&tb, tb.b + tb.n - 12, 12);
	tb_end(&tb);
	check_tb_rejected();

	for (i = 0; i < NBAD_NODES; i++) {
		sample(WIRE_DONOR_JOIN, 8, &m);
		d->node[WIRE_MAX_NODES - 1].node = bad_nodes[i];
		check_both_reject(&m);
	}
	sample(WIRE_DONOR_JOIN, 2, &m);
	d->name[0] = '\0';
	check_both_reject(&m);
	sample(WIRE_DONOR_JOIN, 2, &m);
	d->addr[0] = '\0';
	check_both_reject(&m);
	sample(WIRE_DONOR_JOIN, 2, &m);
	memset(d->name, 'n', WIRE_NAME_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
	sample(WIRE_DONOR_JOIN, 2, &m);
	memset(d->addr, 'a', WIRE_HOSTPORT_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
}
END_TEST

START_TEST(donor_report_bounds)
{
	struct wire_donor_report *d = &m.u.donor_report;
	size_t red_off;
	uint32_t i;

	/* Minimal: nothing to report. */
	sample(WIRE_DONOR_REPORT, 1, &m);
	d->ntenants = d->nredeemed = 0;
	memset(d->tenant, 0, sizeof(d->tenant));
	memset(d->redeemed, 0, sizeof(d->redeemed));
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 48);

	/* Largest: 1024 tenants and 256 redeemed grants fit one frame. */
	d->ntenants = WIRE_MAX_TENANTS;
	d->nredeemed = WIRE_MAX_REDEEMED;
	d->flags = WIRE_STATUS_KNOWN;
	for (i = 0; i < WIRE_MAX_TENANTS; i++) {
		d->tenant[i].tenant_id = i + 1;
		d->tenant[i].slabs = (uint32_t)kv(12, i);
		d->tenant[i].sessions = i % 7;
		d->tenant[i].kv_slabs = d->tenant[i].slabs / 2;
		d->tenant[i].flags = i % 2 ? WIRE_TENANT_KV : 0;
	}
	for (i = 0; i < WIRE_MAX_REDEEMED; i++)
		d->redeemed[i] = kv(13, i);
	check_roundtrip(&m);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 48 + 20 * 1024 + 8 * 256);
	ck_assert_int_le(48 + 20 * 1024 + 8 * 256, WIRE_MAX_PAYLOAD);

	/* One more tenant (encode; decode with a well-formed 1025th). */
	d->ntenants = WIRE_MAX_TENANTS + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	d->ntenants = WIRE_MAX_TENANTS;
	spec_frame(&m, &tb);
	tb_patch16(44, WIRE_MAX_TENANTS + 1); /* ntenants */
	tb_insert(46 + 20 * WIRE_MAX_TENANTS, tb.b + WIRE_HDR_LEN + 46, 20);
	check_tb_rejected();

	/* One more redeemed id. */
	d->nredeemed = WIRE_MAX_REDEEMED + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	d->nredeemed = WIRE_MAX_REDEEMED;
	spec_frame(&m, &tb);
	red_off = 46 + 20 * WIRE_MAX_TENANTS; /* nredeemed */
	tb_patch16(red_off, WIRE_MAX_REDEEMED + 1);
	tb_u64(&tb, 77);
	tb_end(&tb);
	check_tb_rejected();

	sample(WIRE_DONOR_REPORT, 2, &m);
	d->flags = WIRE_STATUS_KNOWN + 1;
	check_both_reject(&m);
	d->flags = 0x80000000u;
	check_both_reject(&m);

	/* A tenant's KV slabs are some of its slabs; unknown flags. */
	sample(WIRE_DONOR_REPORT, 3, &m);
	d->ntenants = 1;
	memset(d->tenant, 0, sizeof(d->tenant));
	d->tenant[0] = (struct wire_tenant_usage){ 5, 4, 1, 4, WIRE_TENANT_KV };
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 48 + 20 + 8 * d->nredeemed);
	d->tenant[0].kv_slabs = 5;
	check_both_reject(&m);
	d->tenant[0].kv_slabs = 4;
	d->tenant[0].flags = WIRE_TENANT_KNOWN + 1;
	check_both_reject(&m);
}
END_TEST

START_TEST(admin_bounds)
{
	static char big[WIRE_JSON_MAX + 2];
	int t;

	for (t = 0; t < 2; t++) {
		memset(&m, 0, sizeof(m));
		m.type = t ? WIRE_ADMIN_OK : WIRE_ADMIN;
		m.u.admin.json = "{";
		m.u.admin.json_len = 1;
		check_roundtrip(&m);
		ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 3);

		/* The largest text fits one frame. */
		memset(big, ' ', sizeof(big));
		big[0] = '{';
		big[WIRE_JSON_MAX - 1] = '}';
		m.u.admin.json = big;
		m.u.admin.json_len = WIRE_JSON_MAX;
		check_roundtrip(&m);
		ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 2 + WIRE_JSON_MAX);

		/* One byte more: refused, though the frame would fit. */
		m.u.admin.json_len = WIRE_JSON_MAX + 1;
		check_both_reject(&m);
		ck_assert_int_le(tb.n, WIRE_MAX_FRAME);
		m.u.admin.json_len = UINT32_MAX;
		ck_assert_int_eq(enc(&m), -EINVAL);

		/* Empty, missing, or with a NUL anywhere. */
		m.u.admin.json_len = 0;
		check_both_reject(&m);
		m.u.admin.json = NULL;
		m.u.admin.json_len = 5;
		ck_assert_int_eq(enc(&m), -EINVAL);
		m.u.admin.json = "{\0\"a\"}";
		m.u.admin.json_len = 6;
		check_both_reject(&m);
		m.u.admin.json = "{}\0";
		m.u.admin.json_len = 3;
		check_both_reject(&m);
		m.u.admin.json = "\0{}";
		check_both_reject(&m);
		/* A NUL after json_len is not part of the text. */
		m.u.admin.json = "{}";
		m.u.admin.json_len = 2;
		check_roundtrip(&m);
		check_truncations(&m);
	}

	/* A rejected ADMIN leaves no pointer behind. */
	tb_hdr(&tb, 1, WIRE_ADMIN, 0, 9);
	tb_u16(&tb, 3);
	tb_bytes(&tb, "{\0}", 3);
	tb_end(&tb);
	memset(&m2, 0xa5, sizeof(m2));
	check_tb_rejected();
	ck_assert_ptr_null(m2.u.admin.json);
	ck_assert_int_eq(m2.u.admin.json_len, 0);
	ck_assert_int_eq(m2.seq, 9);
}
END_TEST

/* --- KV tier and DONORS ------------------------------------------------- */

static const uint8_t kv_types[] = {
	WIRE_KV_RESERVE,   WIRE_KV_COMMIT,     WIRE_KV_LOOKUP,
	WIRE_KV_DONE,	   WIRE_KV_EXISTS,     WIRE_KV_DELETE,
	WIRE_KV_PIN,	   WIRE_KV_RESERVE_OK, WIRE_KV_COMMIT_OK,
	WIRE_KV_LOOKUP_OK, WIRE_KV_DONE_OK,    WIRE_KV_EXISTS_OK,
	WIRE_KV_DELETE_OK, WIRE_KV_PIN_OK,
};
#define NKV_TYPES (sizeof(kv_types) / sizeof(kv_types[0]))

/* KV_COMMIT of one key and LOOKUP_OK of a hit in two chunks, byte by
 * byte as protocol.md shows them. */
/* KV_MODEL (protocol 3): flags, tokens/s, bytes/token; 16 bytes. */
START_TEST(kv_model_bounds)
{
	static const uint8_t golden[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x19, 0x00, 0x00, /* KV_MODEL */
		0x05, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, /* seq 5, 16 */
		0x00, 0x00, 0x00, 0x00,				/* flags */
		0x10, 0x27, 0x00, 0x00,				/* 10000/s */
		0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, /* 128 KiB */
	};

	memset(&m, 0, sizeof(m));
	m.type = WIRE_KV_MODEL;
	m.seq = 5;
	m.u.kv_model.prefill_tokens_per_s = 10000;
	m.u.kv_model.bytes_per_token = 128 << 10;
	check_golden(&m, golden, sizeof(golden));

	/* The values are memd's to bound (ERROR EINVAL), not the codec's:
	 * 0 and the largest travel, so a refusal can name them. */
	sample(WIRE_KV_MODEL, 3, &m);
	check_roundtrip(&m);
	m.u.kv_model.prefill_tokens_per_s = 0;
	m.u.kv_model.bytes_per_token = 0;
	check_roundtrip(&m);
	m.u.kv_model.prefill_tokens_per_s = UINT32_MAX;
	m.u.kv_model.bytes_per_token = UINT64_MAX;
	check_roundtrip(&m);

	/* flags are reserved: refused on both sides, every bit */
	for (int bit = 0; bit < 32; bit++) {
		m.u.kv_model.flags = 1u << bit;
		check_both_reject(&m);
	}

	/* KV_MODEL_OK carries nothing */
	memset(&m, 0, sizeof(m));
	m.type = WIRE_KV_MODEL_OK;
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN);
}
END_TEST

/* FABRIC and FABRIC_OK (protocol 3): flags, rxm buffer size; 8 bytes. */
START_TEST(fabric_bounds)
{
	static const uint8_t golden[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x1a, 0x00, 0x00, /* FABRIC */
		0x06, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, /* seq 6, 8 */
		0x00, 0x00, 0x00, 0x00,				/* flags */
		0x00, 0x04, 0x00, 0x00,				/* 1024 */
	};
	static const uint8_t golden_ok[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x9a, 0x00, 0x00, /* FABRIC_OK */
		0x06, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, /* seq 6, 8 */
		0x00, 0x00, 0x00, 0x00,				/* flags */
		0x00, 0x40, 0x00, 0x00,				/* 16384 */
	};
	static const uint8_t types[] = { WIRE_FABRIC, WIRE_FABRIC_OK };

	memset(&m, 0, sizeof(m));
	m.type = WIRE_FABRIC;
	m.seq = 6;
	m.u.fabric.rxm_buffer_size = 1024;
	check_golden(&m, golden, sizeof(golden));

	memset(&m, 0, sizeof(m));
	m.type = WIRE_FABRIC_OK;
	m.seq = 6;
	m.u.fabric.rxm_buffer_size = 16384;
	check_golden(&m, golden_ok, sizeof(golden_ok));

	for (size_t t = 0; t < sizeof(types); t++) {
		/* any size travels (0: not rxm, or not known) */
		sample(types[t], 4, &m);
		check_roundtrip(&m);
		m.u.fabric.rxm_buffer_size = 0;
		check_roundtrip(&m);
		m.u.fabric.rxm_buffer_size = UINT32_MAX;
		check_roundtrip(&m);
		/* flags are reserved: refused on both sides, every bit */
		for (int bit = 0; bit < 32; bit++) {
			m.u.fabric.flags = 1u << bit;
			check_both_reject(&m);
		}
	}
}
END_TEST

START_TEST(golden_kv)
{
	static const uint8_t commit[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x11, 0x00, 0x00, /* COMMIT */
		0x07, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00, /* seq 7, 50 */
		0x01, 0x00,					/* count 1 */
		0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, /* key */
		0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, /* (raw, */
		0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, /* 32 */
		0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, /* bytes) */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* gen */
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, /* checksum */
	};
	static const uint8_t lookup_ok[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x92, 0x00, 0x00, /* LOOKUP_OK */
		0x07, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, /* seq 7, 128 */
		0x02, 0x00,					/* count 2 */
		0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, /* 32 MiB */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* gen */
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, /* checksum */
		0x00, 0x00, 0x00, 0x00,				/* status 0 */
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, /* locs 0, 2 */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* miss: */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* zeros */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* and */
		0xfe, 0xff, 0xff, 0xff,				/* -ENOENT */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* no locs */
		0x02, 0x00,					/* nlocs 2 */
		0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* raddr */
		0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, /* rkey */
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, /* 16 MiB */
		0x00, 0x00,					/* ep 0 */
		0x00, 0x10, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, /* raddr */
		0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, /* rkey */
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, /* 16 MiB */
		0x01, 0x00,					/* ep 1 */
	};
	int i;

	memset(&m, 0, sizeof(m));
	m.type = WIRE_KV_COMMIT;
	m.seq = 7;
	m.u.kv.count = 1;
	for (i = 0; i < WIRE_KV_KEY_LEN; i++)
		m.u.kv.item[0].key[i] = (uint8_t)i;
	m.u.kv.item[0].generation = 0x0102030405060708ull;
	m.u.kv.item[0].checksum = 0x0123456789abcdefull;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(commit));
	ck_assert_mem_eq(buf, commit, sizeof(commit));
	check_roundtrip(&m);
	check_truncations(&m);

	memset(&m, 0, sizeof(m));
	m.type = WIRE_KV_LOOKUP_OK;
	m.seq = 7;
	m.u.kv.count = 2;
	m.u.kv.item[0].value_len = 32u << 20;
	m.u.kv.item[0].generation = 0x0102030405060708ull;
	m.u.kv.item[0].checksum = 0x0123456789abcdefull;
	m.u.kv.item[0].nchunks = 2;
	m.u.kv.item[1].status = -ENOENT;
	m.u.kv.nlocs = 2;
	for (i = 0; i < 2; i++) {
		m.u.kv.loc[i].raddr = 0x1000 + ((uint64_t)i << 24);
		m.u.kv.loc[i].rkey = 0x2233445566778899ull;
		m.u.kv.loc[i].block_bytes = 16u << 20;
		m.u.kv.loc[i].endpoint = (uint16_t)i;
	}
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(lookup_ok));
	ck_assert_mem_eq(buf, lookup_ok, sizeof(lookup_ok));
	check_roundtrip(&m);
	check_truncations(&m);
}
END_TEST

START_TEST(kv_count_bounds)
{
	uint8_t type = kv_types[_i];
	bool exists_ok = type == WIRE_KV_EXISTS_OK;

	sample(type, 1, &m);
	memset(&m.u.kv, 0, sizeof(m.u.kv));
	m.u.kv.count = 1;
	if (type == WIRE_KV_RESERVE_OK || type == WIRE_KV_LOOKUP_OK)
		m.u.kv.item[0].status = -ENOENT; /* no locations */
	if (exists_ok)
		m.u.kv.count = 0;
	check_roundtrip(&m);
	check_truncations(&m);

	/* The most keys, with their fields; one more is refused. */
	sample(type, WIRE_KV_BATCH - 1, &m);
	ck_assert_uint_eq(m.u.kv.count,
			  exists_ok ? WIRE_KV_BATCH - 1 : WIRE_KV_BATCH);
	m.u.kv.count = WIRE_KV_BATCH;
	check_roundtrip(&m);
	/* (there is no item 65 to write: the spec frame's count is patched) */
	spec_frame(&m, &tb);
	tb_patch16(type == WIRE_KV_PIN ? 4 : 0, WIRE_KV_BATCH + 1);
	check_tb_rejected();
	m.u.kv.count = WIRE_KV_BATCH + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	m.u.kv.count = UINT16_MAX;
	ck_assert_int_eq(enc(&m), -EINVAL);
	if (!exists_ok) {
		m.u.kv.count = 0;
		check_both_reject(&m);
	}
}
END_TEST

/* Fields a type does not carry must be zero: encode refuses them (they
 * would not come back), and there are no bytes on the wire for them. */
START_TEST(kv_field_sets)
{
	uint8_t type = kv_types[_i];
	bool locs = type == WIRE_KV_RESERVE_OK || type == WIRE_KV_LOOKUP_OK;
	bool pin = type == WIRE_KV_PIN;
	bool reply = type & 0x80;
	struct wire_kv_item *it = &m.u.kv.item[0];

	sample(type, 5, &m); /* key 5: item 0 succeeds, item 1 fails */
	check_roundtrip(&m);
	if (reply && type != WIRE_KV_EXISTS_OK) {
		it->key[31] = 1;
		ck_assert_int_eq(enc(&m), -EINVAL);
		it->key[31] = 0;
	}
	if (type != WIRE_KV_RESERVE && type != WIRE_KV_LOOKUP_OK) {
		it->value_len = 1;
		ck_assert_int_eq(enc(&m), -EINVAL);
		it->value_len = 0;
	}
	if (type != WIRE_KV_COMMIT && type != WIRE_KV_LOOKUP_OK) {
		it->checksum = 1;
		ck_assert_int_eq(enc(&m), -EINVAL);
		it->checksum = 0;
	}
	if (!reply || type == WIRE_KV_EXISTS_OK) {
		it->status = -1;
		ck_assert_int_eq(enc(&m), -EINVAL);
		it->status = 0;
	}
	if (!locs) {
		it->nchunks = 1;
		ck_assert_int_eq(enc(&m), -EINVAL);
		it->nchunks = 0;
		it->first_loc = 1;
		ck_assert_int_eq(enc(&m), -EINVAL);
		it->first_loc = 0;
		m.u.kv.nlocs = 1;
		m.u.kv.loc[0].block_bytes = 1u << 20;
		ck_assert_int_eq(enc(&m), -EINVAL);
		m.u.kv.nlocs = 0;
		m.u.kv.loc[0].block_bytes = 0;
	}
	if (!pin) {
		m.u.kv.flags = WIRE_KV_UNPIN;
		ck_assert_int_eq(enc(&m), -EINVAL);
		m.u.kv.flags = 0;
	}
	check_roundtrip(&m);
}
END_TEST

START_TEST(kv_pin_flags)
{
	sample(WIRE_KV_PIN, 2, &m);
	m.u.kv.flags = WIRE_KV_UNPIN;
	check_roundtrip(&m);
	ck_assert_int_eq(buf[WIRE_HDR_LEN], 1);
	m.u.kv.flags = WIRE_KV_DROP;
	check_roundtrip(&m);
	ck_assert_int_eq(buf[WIRE_HDR_LEN], 2);
	m.u.kv.flags = 0;
	check_roundtrip(&m);
	m.u.kv.flags = WIRE_KV_KNOWN + 1;
	check_both_reject(&m);
	m.u.kv.flags = 0x80000000u;
	check_both_reject(&m);
}
END_TEST

START_TEST(kv_status_bounds)
{
	static const uint8_t types[] = { WIRE_KV_COMMIT_OK, WIRE_KV_PIN_OK,
					 WIRE_KV_LOOKUP_OK };
	size_t t;

	for (t = 0; t < sizeof(types); t++) {
		sample(types[t], 3, &m); /* item 0 fails (key 3) */
		ck_assert_int_lt(m.u.kv.item[0].status, 0);
		m.u.kv.item[0].status = -WIRE_ERR_MAX;
		check_roundtrip(&m);
		m.u.kv.item[0].status = -1;
		check_roundtrip(&m);
		m.u.kv.item[0].status = -WIRE_ERR_MAX - 1;
		check_both_reject(&m);
		m.u.kv.item[0].status = 1;
		check_both_reject(&m);
		m.u.kv.item[0].status = INT32_MIN;
		check_both_reject(&m);
		m.u.kv.item[0].status = INT32_MAX;
		check_both_reject(&m);
	}
}
END_TEST

/* Every item's locations lie inside nlocs; only a success names any. */
START_TEST(kv_loc_bounds)
{
	uint8_t type = _i ? WIRE_KV_LOOKUP_OK : WIRE_KV_RESERVE_OK;
	struct wire_kv *k = &m.u.kv;
	uint32_t i;

	sample(type, 4, &m); /* items 0, 1 succeed, item 2 fails */
	ck_assert_int_eq(k->item[0].status, 0);
	ck_assert_int_ne(k->item[2].status, 0);
	check_roundtrip(&m);

	/* A success without locations, a failure with some. */
	k->item[0].nchunks = 0;
	check_both_reject(&m);
	sample(type, 4, &m);
	k->item[2].nchunks = 1;
	check_both_reject(&m);
	sample(type, 4, &m);
	k->item[2].first_loc = 1;
	check_both_reject(&m);

	/* Past the end of loc[], by a little or by wrapping around. */
	sample(type, 4, &m);
	k->item[0].first_loc = k->nlocs - k->item[0].nchunks + 1;
	check_both_reject(&m);
	k->item[0].first_loc = UINT32_MAX;
	check_both_reject(&m);
	k->item[0].first_loc = 0;
	k->item[0].nchunks = UINT32_MAX;
	check_both_reject(&m);
	/* Ranges may share locations (the codec checks bounds, not use). */
	sample(type, 4, &m);
	k->item[1].first_loc = 0;
	k->item[1].nchunks = 1;
	check_roundtrip(&m);

	/* A location's endpoint and block size. */
	sample(type, 4, &m);
	k->loc[0].endpoint = WIRE_MAX_ENDPOINTS - 1;
	k->loc[0].block_bytes = WIRE_KV_HEADER_LEN + 1;
	check_roundtrip(&m);
	k->loc[0].endpoint = WIRE_MAX_ENDPOINTS;
	check_both_reject(&m);
	k->loc[0].endpoint = 0;
	k->loc[0].block_bytes = WIRE_KV_HEADER_LEN;
	check_both_reject(&m);
	k->loc[0].block_bytes = 0;
	check_both_reject(&m);

	/* The most locations fit one frame; one more is refused. */
	memset(k, 0, sizeof(*k));
	k->count = WIRE_KV_BATCH;
	for (i = 0; i < WIRE_KV_BATCH; i++) {
		k->item[i].first_loc = i * (WIRE_KV_MAX_LOCS / WIRE_KV_BATCH);
		k->item[i].nchunks = WIRE_KV_MAX_LOCS / WIRE_KV_BATCH;
		k->item[i].generation = kv(9, i);
		if (type == WIRE_KV_LOOKUP_OK)
			k->item[i].value_len = k->item[i].checksum = kv(10, i);
	}
	k->nlocs = WIRE_KV_MAX_LOCS;
	for (i = 0; i < WIRE_KV_MAX_LOCS; i++) {
		k->loc[i].raddr = kv(11, i);
		k->loc[i].rkey = kv(12, i);
		k->loc[i].block_bytes = UINT64_MAX;
		k->loc[i].endpoint = (uint16_t)(i % WIRE_MAX_ENDPOINTS);
	}
	check_roundtrip(&m);
	ck_assert_int_le(enc(&m), WIRE_MAX_FRAME);
	spec_frame(&m, &tb);
	tb_patch16(2 + (size_t)WIRE_KV_BATCH *
				   (type == WIRE_KV_LOOKUP_OK ? 36 : 20),
		   WIRE_KV_MAX_LOCS + 1);
	check_tb_rejected();
	k->nlocs = WIRE_KV_MAX_LOCS + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
}
END_TEST

/*
 * Protocol 5: the membership a KV request was routed by (the _AT forms),
 * the one a donor list names (MEMBERS_OK) and the one a registry tells
 * its donors (JOIN_OK and REPORT_OK with WIRE_DONOR_MEMBERSHIP). Always
 * >= 1 where it travels, never set where it does not.
 */
static const uint8_t kv_at_types[] = {
	WIRE_KV_RESERVE_AT, WIRE_KV_COMMIT_AT, WIRE_KV_LOOKUP_AT,
	WIRE_KV_EXISTS_AT,  WIRE_KV_DELETE_AT, WIRE_KV_PIN_AT,
};

START_TEST(kv_at_membership)
{
	static const uint8_t lookup_at[] = {
		0x54, 0x44, 0x50, 0x4c, 0x01, 0x22, 0x00, 0x00, /* LOOKUP_AT */
		0x09, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, /* seq 9, 42 */
		0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* mship 7 */
		0x01, 0x00,					/* count 1 */
		0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, /* key */
		0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
		0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
		0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	};
	uint8_t type = kv_at_types[_i], plain = wire_kv_plain(type);
	uint64_t keys[] = { 1, 5, WIRE_KV_BATCH - 1 };
	ssize_t n_at;

	ck_assert_uint_ne(plain, type);
	ck_assert_uint_eq(wire_kv_at(plain), type);
	ck_assert_uint_eq(wire_kv_at(plain | 0x80), type | 0x80);
	ck_assert_uint_eq(wire_kv_plain(type | 0x80), plain | 0x80);
	ck_assert_uint_eq(wire_kv_at(type), 0);
	ck_assert_uint_eq(wire_kv_at(WIRE_KV_DONE), 0);
	ck_assert_uint_eq(wire_kv_plain(WIRE_KV_DONE), WIRE_KV_DONE);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		sample(type, keys[i], &m);
		check_roundtrip(&m);
		ck_assert_uint_eq(m2.u.kv.membership, m.u.kv.membership);
		check_truncations(&m);
		/* the same batch as its namesake, 8 bytes longer */
		n_at = enc(&m);
		m.type = plain;
		m.u.kv.membership = 0;
		ck_assert_int_eq(enc(&m) + 8, n_at);
		sample(type | 0x80, keys[i], &m);
		check_roundtrip(&m);
		ck_assert_uint_eq(m2.u.kv.membership, 0);
	}
	/* 0 names no membership: the plain types are for that */
	sample(type, 3, &m);
	m.u.kv.membership = 0;
	check_both_reject(&m);
	/* the plain types and every reply carry none */
	sample(plain, 3, &m);
	m.u.kv.membership = 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	sample(type | 0x80, 3, &m);
	m.u.kv.membership = 1;
	ck_assert_int_eq(enc(&m), -EINVAL);
	/* the largest one */
	sample(type, 3, &m);
	m.u.kv.membership = UINT64_MAX;
	check_roundtrip(&m);

	memset(&m, 0, sizeof(m));
	m.type = WIRE_KV_LOOKUP_AT;
	m.seq = 9;
	m.u.kv.membership = 7;
	m.u.kv.count = 1;
	for (int i = 0; i < WIRE_KV_KEY_LEN; i++)
		m.u.kv.item[0].key[i] = (uint8_t)i;
	ck_assert_int_eq(enc(&m), (ssize_t)sizeof(lookup_at));
	ck_assert_mem_eq(buf, lookup_at, sizeof(lookup_at));
}
END_TEST

START_TEST(membership_fields)
{
	struct wire_donor_join_ok *j = &m.u.donor_join_ok;
	struct wire_donor_report_ok *r = &m.u.donor_report_ok;

	/* MEMBERS_OK: DONORS_OK after the membership, which is >= 1 */
	sample(WIRE_MEMBERS_OK, 3, &m);
	check_roundtrip(&m);
	ck_assert_uint_eq(m2.u.donors_ok.membership, m.u.donors_ok.membership);
	check_truncations(&m);
	m.u.donors_ok.membership = 0;
	check_both_reject(&m);
	sample(WIRE_MEMBERS_OK, WIRE_MAX_DONORS + 1, &m); /* none up */
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 8 + 2);
	sample(WIRE_DONORS_OK, 3, &m);
	m.u.donors_ok.membership = 1; /* DONORS_OK has no room for it */
	ck_assert_int_eq(enc(&m), -EINVAL);

	/* JOIN_OK: the flag brings 8 bytes after flags */
	sample(WIRE_DONOR_JOIN_OK, 8, &m);
	ck_assert_uint_eq(j->flags, WIRE_DONOR_MEMBERSHIP);
	check_roundtrip(&m);
	ck_assert_uint_eq(m2.u.donor_join_ok.membership, j->membership);
	check_truncations(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 20 + 8);
	j->membership = 0;
	check_both_reject(&m);
	sample(WIRE_DONOR_JOIN_OK, 1, &m);
	ck_assert_uint_eq(j->flags, WIRE_DONOR_DRAIN);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 20);
	j->membership = 5; /* without the flag: nowhere to go */
	ck_assert_int_eq(enc(&m), -EINVAL);
	j->membership = 0;
	j->flags = 0x10; /* still reserved */
	check_both_reject(&m);
	j->flags = WIRE_DONOR_TENANTS; /* REPORT_OK's only */
	check_both_reject(&m);

	/* REPORT_OK: the flag brings 8 bytes, last */
	sample(WIRE_DONOR_REPORT_OK, 8, &m);
	ck_assert_uint_eq(r->flags, WIRE_DONOR_MEMBERSHIP);
	check_roundtrip(&m);
	check_truncations(&m);
	r->flags |= WIRE_DONOR_TENANTS | WIRE_DONOR_FENCE;
	r->next_tenant_id = 77;
	r->fence_ms = 1234;
	check_roundtrip(&m);
	ck_assert_uint_eq(m2.u.donor_report_ok.membership, r->membership);
	ck_assert_uint_eq(m2.u.donor_report_ok.fence_ms, 1234);
	check_truncations(&m);
	r->membership = 0;
	check_both_reject(&m);
	r->flags &= ~WIRE_DONOR_MEMBERSHIP;
	r->membership = 9;
	ck_assert_int_eq(enc(&m), -EINVAL);
	r->membership = 0;
	r->flags |= 0x10;
	check_both_reject(&m);
}
END_TEST

START_TEST(donors_ok_bounds)
{
	struct wire_donors_ok *d = &m.u.donors_ok;

	/* None up is a valid answer. */
	sample(WIRE_DONORS_OK, WIRE_MAX_DONORS + 1, &m);
	ck_assert_uint_eq(d->count, 0);
	check_roundtrip(&m);
	ck_assert_int_eq(enc(&m), WIRE_HDR_LEN + 2);

	/* The most donors, with the longest names, fit one frame. */
	sample(WIRE_DONORS_OK, WIRE_MAX_DONORS, &m);
	ck_assert_uint_eq(d->count, WIRE_MAX_DONORS);
	for (uint16_t i = 0; i < d->count; i++) {
		fill_str(d->donor[i].name, WIRE_NAME_MAX - 1, 100 + i);
		d->donor[i].name[0] = (char)('A' + i % 26);
		d->donor[i].name[1] = (char)('a' + i / 26);
		fill_str(d->donor[i].addr, WIRE_HOSTPORT_MAX - 1, 200 + i);
	}
	check_roundtrip(&m);
	check_truncations(&m);
	d->count = WIRE_MAX_DONORS + 1;
	ck_assert_int_eq(enc(&m), -EINVAL);

	/* Names non-empty; ids and names distinct. */
	sample(WIRE_DONORS_OK, 3, &m);
	check_roundtrip(&m);
	d->donor[1].name[0] = '\0';
	check_both_reject(&m);
	sample(WIRE_DONORS_OK, 3, &m);
	d->donor[2].addr[0] = '\0';
	check_both_reject(&m);
	sample(WIRE_DONORS_OK, 3, &m);
	d->donor[2].donor_id = d->donor[0].donor_id;
	check_both_reject(&m);
	sample(WIRE_DONORS_OK, 3, &m);
	memcpy(d->donor[1].name, d->donor[0].name, WIRE_NAME_MAX);
	check_both_reject(&m);
	/* A name must end inside its array. */
	sample(WIRE_DONORS_OK, 3, &m);
	memset(d->donor[0].name, 'x', WIRE_NAME_MAX);
	ck_assert_int_eq(enc(&m), -EINVAL);
}
END_TEST

static Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("codec");

	tcase_add_loop_test(tc, roundtrip_every_type, 0, NTYPES);
	tcase_add_test(tc, golden_hello);
	tcase_add_test(tc, golden_hello_ok);
	tcase_add_test(tc, golden_lease);
	tcase_add_loop_test(tc, truncated_every_length, 0, NTYPES);
	tcase_add_loop_test(tc, encode_no_space, 0, NTYPES);
	tcase_add_loop_test(tc, trailing_and_short_payload, 0, NTYPES);
	tcase_add_test(tc, back_to_back);
	tcase_add_loop_test(tc, decode_is_deterministic, 0, NTYPES);
	tcase_add_test(tc, bad_magic);
	tcase_add_test(tc, bad_version);
	tcase_add_test(tc, payload_size_limit);
	tcase_add_test(tc, header_flags);
	tcase_add_test(tc, unknown_types);
	tcase_add_test(tc, shm_packets);
	tcase_add_test(tc, shm_ok_name);
	tcase_add_test(tc, boot_id_parse);
	tcase_add_test(tc, boot_id_read);
	tcase_add_test(tc, type_names);
	tcase_add_test(tc, pool_names);
	tcase_add_test(tc, payloadless_types);
	tcase_add_test(tc, hello_bounds);
	tcase_add_test(tc, hello_ok_bounds);
	tcase_add_test(tc, lease_bounds);
	tcase_add_test(tc, lease_ok_bounds);
	tcase_add_test(tc, release_bounds);
	tcase_add_test(tc, small_reply_bounds);
	tcase_add_test(tc, error_bounds);
	tcase_add_test(tc, embedded_nul);
	tcase_add_test(tc, string_bytes_after_nul_ignored);
	tcase_add_test(tc, make_error);
	tcase_add_test(tc, golden_auth);
	tcase_add_test(tc, golden_lease_grant);
	tcase_add_test(tc, golden_place_ok);
	tcase_add_test(tc, golden_admin);
	tcase_add_test(tc, auth_bounds);
	tcase_add_test(tc, auth_ok_bounds);
	tcase_add_test(tc, small_v2_bounds);
	tcase_add_test(tc, ticket_bounds);
	tcase_add_test(tc, lease_grant_ok_bounds);
	tcase_add_test(tc, place_ok_bounds);
	tcase_add_test(tc, donor_join_bounds);
	tcase_add_test(tc, donor_report_bounds);
	tcase_add_test(tc, admin_bounds);
	tcase_add_test(tc, golden_kv);
	tcase_add_test(tc, kv_model_bounds);
	tcase_add_test(tc, fabric_bounds);
	tcase_add_loop_test(tc, kv_count_bounds, 0, NKV_TYPES);
	tcase_add_loop_test(tc, kv_field_sets, 0, NKV_TYPES);
	tcase_add_test(tc, kv_pin_flags);
	tcase_add_test(tc, kv_status_bounds);
	tcase_add_loop_test(tc, kv_loc_bounds, 0, 2);
	tcase_add_test(tc, donors_ok_bounds);
	tcase_add_loop_test(tc, kv_at_membership, 0,
			    sizeof(kv_at_types) / sizeof(kv_at_types[0]));
	tcase_add_test(tc, membership_fields);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(wire_suite());
}
