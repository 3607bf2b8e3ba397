// SPDX-License-Identifier: MIT
/*
 * fabric/dlist.h - intrusive doubly-linked lists kept by a head and a
 * tail pointer (FIFOs: the oldest at the head), for memd and libpool.
 * The caller names the two pointers and the link fields of its element
 * (x->prev and x->next, or e->sprev and e->snext where an element sits
 * on two lists); NULL ends the list both ways. Header-only; the caller
 * holds whatever guards the list. Each argument is evaluated more than
 * once: pass plain lvalues.
 */
#ifndef TP_FABRIC_DLIST_H
#define TP_FABRIC_DLIST_H

#include <stddef.h>

/* Puts x, on no list, at the tail. */
#define TP_DLIST_APPEND(head, tail, x, prev, next)                             \
	do {                                                                   \
		(x)->prev = (tail);                                            \
		(x)->next = NULL;                                              \
		if (tail)                                                      \
			(tail)->next = (x);                                    \
		else                                                           \
			(head) = (x);                                          \
		(tail) = (x);                                                  \
	} while (0)

/* Takes x, on the list, off it; its links are NULL after. */
#define TP_DLIST_UNLINK(head, tail, x, prev, next)                             \
	do {                                                                   \
		if ((x)->prev)                                                 \
			(x)->prev->next = (x)->next;                           \
		else                                                           \
			(head) = (x)->next;                                    \
		if ((x)->next)                                                 \
			(x)->next->prev = (x)->prev;                           \
		else                                                           \
			(tail) = (x)->prev;                                    \
		(x)->next = (x)->prev = NULL;                                  \
	} while (0)

#endif
