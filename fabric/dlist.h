// SPDX-License-Identifier: MIT
/*
 * fabric/dlist.h - intrusive doubly-linked lists kept by a head and a
 * tail pointer (FIFOs: the oldest at the head), doubly-linked lists kept
 * by a head pointer alone (sets: the newest at the head), and singly-linked
 * queues, for memd and libpool.
 * The caller names the pointers and the link fields of its element
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
		TP_QUEUE_APPEND(head, tail, x, next);                          \
	} while (0)

/* Puts x, on no list, at the head. */
#define TP_DLIST_PREPEND(head, tail, x, prev, next)                            \
	do {                                                                   \
		if (!(head))                                                   \
			(tail) = (x);                                          \
		TP_DLIST_PUSH(head, x, prev, next);                            \
	} while (0)

/* Takes x, on the list, off it; its links are NULL after. */
#define TP_DLIST_UNLINK(head, tail, x, prev, next)                             \
	do {                                                                   \
		if (!(x)->next)                                                \
			(tail) = (x)->prev;                                    \
		TP_DLIST_REMOVE(head, x, prev, next);                          \
	} while (0)

/* Puts x, on no list, at the head of a list kept by its head alone. */
#define TP_DLIST_PUSH(head, x, prev, next)                                     \
	do {                                                                   \
		(x)->prev = NULL;                                              \
		(x)->next = (head);                                            \
		if (head)                                                      \
			(head)->prev = (x);                                    \
		(head) = (x);                                                  \
	} while (0)

/* Takes x off a list kept by its head alone; its links are NULL after. */
#define TP_DLIST_REMOVE(head, x, prev, next)                                   \
	do {                                                                   \
		if ((x)->prev)                                                 \
			(x)->prev->next = (x)->next;                           \
		else                                                           \
			(head) = (x)->next;                                    \
		if ((x)->next)                                                 \
			(x)->next->prev = (x)->prev;                           \
		(x)->next = (x)->prev = NULL;                                  \
	} while (0)

/* Puts x at the tail of a singly-linked queue (taken from the head). */
#define TP_QUEUE_APPEND(head, tail, x, next)                                   \
	do {                                                                   \
		(x)->next = NULL;                                              \
		if (tail)                                                      \
			(tail)->next = (x);                                    \
		else                                                           \
			(head) = (x);                                          \
		(tail) = (x);                                                  \
	} while (0)

#endif
