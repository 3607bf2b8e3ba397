// SPDX-License-Identifier: MIT
/*
 * tests/wire_eq.h - equality of decoded control-plane messages, shared by
 * test_wire and the fuzz_wire harness (tests/fuzz/), so both check a round
 * trip by the same rule.
 *
 * Owns two static scratch copies per including file; not thread-safe (both
 * users are single-threaded).
 */
#ifndef TP_TESTS_WIRE_EQ_H
#define TP_TESTS_WIRE_EQ_H

#include "fabric/wire.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline bool is_admin(uint8_t type)
{
	return type == WIRE_ADMIN || type == WIRE_ADMIN_OK;
}

/*
 * a == b as decode defines it: memcmp (decode zeroes the struct, so down
 * to padding), except that ADMIN's json is a pointer into whichever buffer
 * was decoded, so there its bytes are compared (a NULL json is unequal).
 */
static inline bool msg_eq(const struct wire_msg *a, const struct wire_msg *b)
{
	static struct wire_msg ca, cb;

	if (!is_admin(a->type))
		return memcmp(a, b, sizeof(*a)) == 0;
	if (a->type != b->type || a->u.admin.json_len != b->u.admin.json_len ||
	    !a->u.admin.json || !b->u.admin.json ||
	    memcmp(a->u.admin.json, b->u.admin.json, a->u.admin.json_len))
		return false;
	ca = *a;
	cb = *b;
	ca.u.admin.json = cb.u.admin.json = NULL;
	return memcmp(&ca, &cb, sizeof(ca)) == 0;
}

#endif
