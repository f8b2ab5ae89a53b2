/*
 * tac/evict.h - the evictor threads (evict.c) and -o ext_item_age (age.c).
 */
#ifndef TAC_EVICT_H
#define TAC_EVICT_H

#include <stdint.h>

/* -o ext_item_age (tac/age.c): moves this evictor's DRAM items unread for
 * that long to SSD.  Returns the number moved. */
int tac_age_round(int evictor, int nevictors);

/* Evictor threads (evict.c). */
void tac_evictors_start(void);
void tac_evictors_stop(void);
/* Partitions (DRAM) whose classes are short of free chunks right now. */
int tac_evict_backlog(void);
uint64_t tac_evict_backlog_bytes(void);


#endif
