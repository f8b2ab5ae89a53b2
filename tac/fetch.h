/*
 * tac/fetch.h - moving hot and warm items up: the queue (fetch_queue.c) and the fetch threads (fetch.c).
 */
#ifndef TAC_FETCH_H
#define TAC_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/items.h"

struct bg;

/* ---- Fetchers (fetch.c): move hot and warm items up (TaC 4.2, 5.4) ---- */
void tac_fetchers_start(void);
void tac_fetchers_stop(void);
/* Queues hot NVM meta tuple `meta` for a copy to DRAM (any thread, item
 * lock held; never blocks: a busy or full queue drops the request). */
void tac_fetch_nvm(const item *meta);
/* A warm or hot read of SSD meta tuple `meta`: queues its whole buf if the
 * buf is warm too, else its own tuple. */
void tac_fetch_ssd_buf(const item *meta);
/* Queues SSD meta tuple meta's own tuple (antituple, anti2). */
void tac_fetch_ssd_tuple(const item *meta);
/* Queues SSD meta tuple meta's own tuple for DRAM whatever its
 * temperature: -o ext_recache_rate's every Nth SSD read. */
void tac_fetch_ssd_recache(const item *meta);
/* The queue's request (fetch_queue.c). */
enum fetch_kind { FETCH_NVM = 1, FETCH_SSD_BUF, FETCH_SSD_TUPLE };

struct fetch_req {
    enum fetch_kind kind;
    uint32_t hv;
    uint64_t cas;                /* NVM: the version queued */
    uint64_t ref;                /* SSD: a tuple (of the buf) */
    size_t len;                  /* SSD tuple: its length */
    bool recache;                /* SSD tuple: to DRAM even when cold */
    uint8_t nkey;
    char key[KEY_MAX_LENGTH];
};

/* A fetcher takes the next request, waiting for one; false once the
 * fetchers stop.  start runs n fetchers of fn; stop ends them and drops
 * what is queued. */
bool tac_fetchq_take(struct bg *g, struct fetch_req *out);
bool tac_fetchq_start(unsigned n, void (*fn)(struct bg *g, unsigned idx, void *arg));
void tac_fetchq_stop(void);

#endif
