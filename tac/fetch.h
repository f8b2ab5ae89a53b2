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
/* Each call below comes from a read of meta tuple `meta` (pinned by the
 * caller) that copied its value into `copy`, a checked transient item
 * (tac_transient_new), or NULL.  The request pins both, and the fetcher
 * moves that copy up instead of reading the tier again, if `meta` is
 * still linked then (the same version: a pinned item is never linked
 * again).  The queue holds at most FETCH_COPY_BYTES of copies; past that,
 * or for a whole buf, the fetcher reads the tier.  None blocks: a busy or
 * full queue drops the request. */
/* Queues hot NVM meta tuple `meta` for a copy to DRAM (item lock held). */
void tac_fetch_nvm(item *meta, item *copy);
/* A warm or hot read of SSD meta tuple `meta`: queues its whole buf if the
 * buf is warm too, else its own tuple. */
void tac_fetch_ssd_buf(item *meta, item *copy);
/* Queues SSD meta tuple meta's own tuple (antituple, anti2). */
void tac_fetch_ssd_tuple(item *meta, item *copy);
/* Queues SSD meta tuple meta's own tuple for DRAM whatever its
 * temperature: -o ext_recache_rate's every Nth SSD read. */
void tac_fetch_ssd_recache(item *meta, item *copy);
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
    item *meta;                  /* with copy: the meta tuple read, pinned */
    item *copy;                  /* the reader's copy of its value, pinned,
                                    or NULL: the fetcher reads the tier */
};
/* The fetcher is done with a request: unpins its copy and meta tuple. */
void tac_fetch_req_done(struct fetch_req *r);

/* A fetcher takes the next request, waiting for one; false once the
 * fetchers stop.  start runs n fetchers of fn; stop ends them and drops
 * what is queued. */
bool tac_fetchq_take(struct bg *g, struct fetch_req *out);
bool tac_fetchq_start(unsigned n, void (*fn)(struct bg *g, unsigned idx, void *arg));
void tac_fetchq_stop(void);

#endif
