// SPDX-License-Identifier: MIT
/*
 * fabric/wire_shm.c - the same-host path's bytes: the boot id that tells
 * a client it shares a kernel with its memd, the SHM_OK socket name, and
 * the fixed-size request and reply on that socket (wire_shm_req_*,
 * wire_shm_rep_*). The invariants of fabric/wire.c's top comment hold
 * here.
 */
#include "fabric/wire_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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

int wire_enc_shm_ok(const struct wire_shm_ok *m, struct wire_wr *w)
{
	if (!shm_name_ok(m->socket, sizeof(m->socket)))
		return -EINVAL;
	put_raw(w, m->nonce, WIRE_NONCE_LEN);
	return put_name(w, m->socket, sizeof(m->socket)) < 0 ? -EINVAL : 0;
}

int wire_dec_shm_ok(struct wire_shm_ok *m, struct wire_rd *r)
{
	get_raw(r, m->nonce, WIRE_NONCE_LEN);
	if (get_name(r, m->socket, sizeof(m->socket)) < 0 ||
	    !shm_name_ok(m->socket, sizeof(m->socket)))
		return -EBADMSG;
	return 0;
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
