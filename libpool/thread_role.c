// SPDX-License-Identifier: MIT
/*
 * libpool/thread_role.c - which threads are libpool's own
 * (libpool/thread_role.h): one thread-local flag.
 */
#include "libpool/thread_role.h"

static __thread bool internal_thread;

bool pool_thread_is_internal(void)
{
	return internal_thread;
}

void pool_thread_mark_internal(void)
{
	internal_thread = true;
}

bool pool_thread_set_internal(bool on)
{
	bool was = internal_thread;

	internal_thread = on;
	return was;
}
