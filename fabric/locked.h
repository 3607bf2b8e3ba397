// SPDX-License-Identifier: MIT
/*
 * fabric/locked.h - one read of state that a mutex guards, for the
 * accessors of memd and libpool that take the lock only to copy a field
 * or two out. Header-only.
 */
#ifndef TP_FABRIC_LOCKED_H
#define TP_FABRIC_LOCKED_H

#include <pthread.h>

/*
 * The value of expr, evaluated once with *mu held (locked and unlocked
 * around it); its type is expr's, unqualified. expr must not return or
 * jump out.
 */
#define TP_LOCKED_READ(mu, expr)                                               \
	__extension__({                                                        \
		pthread_mutex_lock(mu);                                        \
		__auto_type tp_locked_v_ = (expr);                             \
		pthread_mutex_unlock(mu);                                      \
		tp_locked_v_;                                                  \
	})

#endif
