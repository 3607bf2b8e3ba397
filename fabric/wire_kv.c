// SPDX-License-Identifier: MIT
/*
 * fabric/wire_kv.c - the codec of the KV tier's messages: every KV_*
 * request and reply (plain and _AT, one table of the fields each type
 * carries), KV_MODEL, and the header at the front of every stored KV
 * block. fabric/wire.c dispatches to them; the invariants of
 * fabric/wire.c's top comment hold here.
 */
#include "fabric/wire_int.h"

#include <errno.h>
#include <string.h>

/* KV tier: the largest request (COMMIT) and the largest reply (LOOKUP_OK
 * with every location). */
_Static_assert(WIRE_KV_BATCH <= UINT16_MAX && WIRE_KV_MAX_LOCS <= UINT16_MAX &&
		       WIRE_MAX_DONORS <= UINT16_MAX,
	       "KV counts must fit a u16");
_Static_assert(2 + WIRE_KV_BATCH * (WIRE_KV_KEY_LEN + 16) <= WIRE_MAX_PAYLOAD,
	       "a full KV_COMMIT must fit WIRE_MAX_PAYLOAD");
_Static_assert(2 + WIRE_KV_BATCH * (4 + 8 * 3 + 4 * 2) + 2 +
			       WIRE_KV_MAX_LOCS * 26 <=
		       WIRE_MAX_PAYLOAD,
	       "a full KV_LOOKUP_OK must fit WIRE_MAX_PAYLOAD");

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

/* The fields of each plain KV type; 0 for any other type. */
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

/* Every plain KV type but DONE (and DONE_OK) has an _AT form, 0x10 up. */
static bool kv_has_at(uint8_t plain)
{
	return kv_fields_plain(plain) && (plain & 0x7f) != WIRE_KV_DONE;
}

uint8_t wire_kv_at(uint8_t type)
{
	return kv_has_at(type) ? (uint8_t)(type + 0x10) : 0;
}

uint8_t wire_kv_plain(uint8_t type)
{
	uint8_t plain = (uint8_t)(type - 0x10);

	/* 0x20 .. 0x2f and 0xa0 .. 0xaf: the _AT requests and replies */
	return (type & 0x70) == 0x20 && kv_has_at(plain) ? plain : type;
}

/* The fields of an _AT type are its plain namesake's, and the requests'
 * membership first. */
static unsigned int kv_fields(uint8_t type)
{
	uint8_t plain = wire_kv_plain(type);

	if (plain == type)
		return kv_fields_plain(type);
	return kv_fields_plain(plain) | (type & 0x80 ? 0 : KVF_MSEQ);
}

bool wire_type_is_kv(uint8_t type)
{
	return kv_fields(type) != 0;
}

/* What a key is in the items of a type that carries none. */
static const uint8_t no_key[WIRE_KV_KEY_LEN];

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

		if ((!(f & KVF_KEY) &&
		     memcmp(it->key, no_key, sizeof(no_key))) ||
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

int wire_enc_kv(uint8_t type, const struct wire_kv *k, struct wire_wr *w)
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

int wire_dec_kv(uint8_t type, struct wire_kv *k, struct wire_rd *r)
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

int wire_enc_kv_model(const struct wire_kv_model *k, struct wire_wr *w)
{
	if (k->flags)
		return -EINVAL;
	put_u32(w, k->flags);
	put_u32(w, k->prefill_tokens_per_s);
	put_u64(w, k->bytes_per_token);
	return 0;
}

int wire_dec_kv_model(struct wire_kv_model *k, struct wire_rd *r)
{
	k->flags = get_u32(r);
	k->prefill_tokens_per_s = get_u32(r);
	k->bytes_per_token = get_u64(r);
	return r->bad || k->flags ? -EBADMSG : 0;
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
