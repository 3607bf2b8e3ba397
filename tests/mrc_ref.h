// SPDX-License-Identifier: MIT
/*
 * tests/mrc_ref.h - the frozen reference curve (tests/mrc_ref.c): memd/mrc.h's
 * functions under ref_mrc_* names, for test_mrc only.
 */
#ifndef TP_TESTS_MRC_REF_H
#define TP_TESTS_MRC_REF_H

#include "memd/mrc.h"

struct ref_mrc;

int ref_mrc_create(uint32_t sample_max, uint64_t window_refs,
		   struct ref_mrc **out);
void ref_mrc_destroy(struct ref_mrc *m);
bool ref_mrc_access(struct ref_mrc *m, uint64_t h, uint64_t bytes,
		    bool counted);
void ref_mrc_forget(struct ref_mrc *m, uint64_t h);
double ref_mrc_hit_ratio(const struct ref_mrc *m, uint64_t cache_bytes);
double ref_mrc_lru_hit_ratio(const struct ref_mrc *m, uint64_t cache_bytes);
uint64_t ref_mrc_sim_size(unsigned k);
double ref_mrc_sim_hit_ratio(const struct ref_mrc *m, unsigned k);
void ref_mrc_get_info(const struct ref_mrc *m, struct memd_mrc_info *i);
size_t ref_mrc_bytes(const struct ref_mrc *m);
size_t ref_mrc_points(const struct ref_mrc *m, unsigned per_doubling,
		      uint64_t *bytes, double *hit, size_t max);
size_t ref_mrc_lru_points(const struct ref_mrc *m, unsigned per_doubling,
			  uint64_t *bytes, double *hit, size_t max);

#endif
