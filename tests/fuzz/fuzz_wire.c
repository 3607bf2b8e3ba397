// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_wire.c - libFuzzer harness for the control-plane codec
 * (fabric/wire*.c). Built by tests/fuzz/CMakeLists.txt, run by .ci/fuzz.sh.
 *
 * Owns nothing but static scratch buffers; libFuzzer calls it from one
 * thread. Any property violation aborts, which libFuzzer reports as a crash
 * with the input saved.
 *
 * Properties, for every input:
 * - wire_decode never crashes, never reads past the input, and returns
 *   either a frame length or one of its documented errors.
 * - An accepted frame of n bytes re-encodes to exactly those n bytes, and
 *   decoding that gives back the same struct (memcmp: decode zeroes *m, so
 *   it is deterministic down to padding; ADMIN's json points into the
 *   buffer decoded, so there the pointer is set aside and the text
 *   compared).
 * - An accepted frame is -EAGAIN one byte short, and encoding it into one
 *   byte less than it needs is -ENOSPC.
 * - Read as a raw struct wire_msg, the input either fails to encode with
 *   -EINVAL, or encodes to a frame that decodes and re-encodes identically:
 *   encode never produces what decode refuses. ADMIN's json pointer cannot
 *   come from the input (encode would follow it anywhere): it is pointed
 *   at a buffer of WIRE_JSON_MAX bytes holding the input's remainder, with
 *   json_len as the input says.
 */
#include "fabric/wire.h"
#include "tests/wire_eq.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct wire_msg m, m2;
static uint8_t out[WIRE_MAX_FRAME];
static uint8_t out2[WIRE_MAX_FRAME];
static char json[WIRE_JSON_MAX];

static void fail(const char *what, ssize_t got, ssize_t want)
{
	fprintf(stderr, "fuzz_wire: %s: got %zd want %zd\n", what, got, want);
	abort();
}

static bool is_decode_error(ssize_t rc)
{
	return rc == -EAGAIN || rc == -EPROTO || rc == -EPROTONOSUPPORT ||
	       rc == -EMSGSIZE || rc == -EBADMSG;
}

static void check_frame(const uint8_t *data, size_t size)
{
	ssize_t n = wire_decode(data, size, &m);
	ssize_t fl = wire_frame_len(data, size);
	ssize_t rc;

	if (n < 0) {
		if (!is_decode_error(n))
			fail("decode error outside the documented set", n, 0);
		/* Header errors are the same whichever function reports them. */
		if (n != -EBADMSG && n != -EAGAIN && fl != n)
			fail("frame_len disagrees with decode", fl, n);
		if (n == -EAGAIN && fl >= 0 && (size_t)fl <= size)
			fail("-EAGAIN on a complete frame", fl, (ssize_t)size);
		return;
	}
	if (fl != n)
		fail("frame_len of an accepted frame", fl, n);
	if (is_admin(m.type) &&
	    (m.u.admin.json != (const char *)data + WIRE_HDR_LEN + 2 ||
	     m.u.admin.json_len + WIRE_HDR_LEN + 2 != (size_t)n))
		fail("ADMIN json outside its frame",
		     (ssize_t)m.u.admin.json_len, n);

	rc = wire_encode(&m, out, sizeof(out));
	if (rc != n)
		fail("re-encode length", rc, n);
	if (memcmp(out, data, (size_t)n) != 0)
		fail("re-encode bytes differ", -1, 0);

	rc = wire_decode(out, (size_t)n, &m2);
	if (rc != n)
		fail("decode of re-encoded frame", rc, n);
	if (!msg_eq(&m, &m2))
		fail("decode of re-encoded frame differs", -1, 0);

	rc = wire_decode(data, (size_t)n - 1, &m2);
	if (rc != -EAGAIN)
		fail("one byte short", rc, -EAGAIN);
	rc = wire_encode(&m, out, (size_t)n - 1);
	if (rc != -ENOSPC)
		fail("encode into one byte less", rc, -ENOSPC);
}

static void check_struct(const uint8_t *data, size_t size)
{
	ssize_t n, rc;

	memset(&m, 0, sizeof(m));
	memcpy(&m, data, size < sizeof(m) ? size : sizeof(m));
	if (is_admin(m.type)) {
		size_t rest = size > sizeof(m) ? size - sizeof(m) : 0;

		if (rest > sizeof(json))
			rest = sizeof(json);
		memset(json, '{', sizeof(json));
		if (rest)
			memcpy(json, data + sizeof(m), rest);
		m.u.admin.json = json;
	}
	n = wire_encode(&m, out, sizeof(out));
	if (n < 0) {
		if (n != -EINVAL)
			fail("encode of a raw struct", n, -EINVAL);
		return;
	}
	rc = wire_decode(out, (size_t)n, &m2);
	if (rc != n)
		fail("decode of an encoded struct", rc, n);
	/*
	 * m may hold bytes encode ignores (after a string's NUL, in the
	 * union of a payload-less type), so compare m2's encoding, not m.
	 * m2 (ADMIN: its json) points into out, so re-encode into out2.
	 */
	memcpy(&m, &m2, sizeof(m));
	rc = wire_encode(&m, out2, sizeof(out2));
	if (rc != n || memcmp(out, out2, (size_t)n) != 0)
		fail("re-encode of a decoded struct", rc, n);
	rc = wire_decode(out2, (size_t)n, &m2);
	if (rc != n || !msg_eq(&m, &m2))
		fail("decode of a re-encoded struct differs", rc, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_frame(data, size);
	check_struct(data, size);
	return 0;
}
