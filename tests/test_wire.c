// SPDX-License-Identifier: MIT
/*
 * tests/test_wire.c - the control-plane codec (fabric/wire.c) against its
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

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t all_types[] = {
	WIRE_HELLO,	 WIRE_LEASE,	    WIRE_RELEASE,   WIRE_HEARTBEAT,
	WIRE_STATUS,	 WIRE_BYE,	    WIRE_HELLO_OK,  WIRE_LEASE_OK,
	WIRE_RELEASE_OK, WIRE_HEARTBEAT_OK, WIRE_STATUS_OK, WIRE_BYE_OK,
	WIRE_ERROR,
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
		tb_u32(t, m->u.lease_ok.ttl_ms);
		tb_u32(t, m->u.lease_ok.count);
		for (i = 0; i < m->u.lease_ok.count; i++) {
			const struct wire_lease *l = &m->u.lease_ok.lease[i];

			tb_u64(t, l->epoch);
			tb_u32(t, l->slab);
			tb_u32(t, l->generation);
			tb_u64(t, l->key);
			tb_u64(t, l->base);
			tb_u64(t, l->len_bytes);
			tb_u16(t, l->endpoint);
			tb_u32(t, (uint32_t)l->node);
		}
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
		tb_u32(t, m->u.heartbeat_ok.ttl_ms);
		tb_u32(t, m->u.heartbeat_ok.nleases);
		tb_u64(t, m->u.heartbeat_ok.epoch);
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
	default: /* payload-less types */
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
	ck_assert_int_eq(memcmp(msg, &m2, sizeof(m2)), 0);
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
}
END_TEST

START_TEST(payloadless_types)
{
	static const uint8_t empty[] = { WIRE_HEARTBEAT, WIRE_STATUS, WIRE_BYE,
					 WIRE_BYE_OK };
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
	tcase_add_test(tc, type_names);
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
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wire_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
