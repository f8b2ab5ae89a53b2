/*
 * tac/tac.h - the tier policy: the only code that moves items between
 * DRAM, NVM and SSD.
 *
 * tac_init() opens the lower tiers named by the settings (-o nvm_path=...,
 * -o ssd_path=...) and plugs the tier operations into items.c; with no
 * lower tier it does nothing and the server is a DRAM-only memcached.
 * tac_start() starts the evictor threads and the SSD defrag thread once the
 * workers run; tac_stop() joins them.  Workers read SSD-resident values
 * through their own tac_reader (below).
 *
 * nvm/ and ssd/ are reached only through their own APIs, from here.
 */
#ifndef TAC_TAC_H
#define TAC_TAC_H

#include <stdbool.h>
#include <stdint.h>


/* Opens the configured tiers and registers their stats (`stats tiers`,
 * `stats nvm`, their `stats settings` lines and their lines of plain
 * `stats`); prints why and returns false on failure.  Reads the restart
 * state a graceful stop left (tac/durable/restart.c) and gives the tiers back the
 * space it names. */
bool tac_init(void);
void tac_start(void);
/* Once the server listens: brings the saved items back in the background
 * (writes made meanwhile win over them). */
void tac_recover(void);
/* Waits for recovery, then stops the background threads. */
void tac_stop(void);
/* A graceful stop, after tac_stop and the workers: saves the restart state
 * (the index, DRAM items whole), then closes the tiers clean. */
void tac_close(void);

/* True when a lower tier is configured. */
bool tac_active(void);
/* "dram", "dram,nvm", "dram,ssd" or "dram,nvm,ssd". */
const char *tac_tiers_name(void);

/* ---- Asynchronous reads of SSD-resident values (one reader per worker) */

struct item;
struct tac_reader;
/* NULL without an SSD tier (or on failure, with errno set). */
struct tac_reader *tac_reader_new(void);
/* Becomes readable when completions are ready: call tac_reader_reap(). */
int tac_reader_fd(const struct tac_reader *rd);
/* Runs the ready completions (their tac_value_fn callbacks). */
void tac_reader_reap(struct tac_reader *rd);
/* The reader's device reads are submitted together: the first one queued
 * calls kick(arg), and the owner then calls tac_reader_submit once its
 * event loop pass has queued the rest (ssd_ring_defer_submits). */
void tac_reader_defer_submits(struct tac_reader *rd, void (*kick)(void *arg),
                              void *arg);
void tac_reader_submit(struct tac_reader *rd);
/* Waits for outstanding reads, running their callbacks, and frees rd. */
void tac_reader_free(struct tac_reader *rd);
/* Whether any reader has device reads in flight (a relaxed load; false
 * without an SSD tier). */
bool tac_reads_in_flight(void);
/* got->value: the value as of the read's start (or of a later version the
 * read followed), in an item whose reference the callee owns; NULL when
 * that version is gone (answer a miss).  got->src: the key's item whose
 * value that is, pinned until fn returns (items.h, struct item_got). */
struct item_got;
typedef void (*tac_value_fn)(void *arg, const struct item_got *got);
/*
 * Starts reading the value of SSD meta tuple `meta` (item_value_async()),
 * whose key is `key` (meta->nkey bytes) with hash hv; the caller holds item_lock(hv) and a reference to
 * meta, and may drop both at once.  fn runs later on this thread, from
 * tac_reader_reap().  False when the read cannot start (fn never runs).
 */
bool tac_read_value(struct tac_reader *rd, struct item *meta, const char *key,
                    uint32_t hv, tac_value_fn fn, void *arg);

#endif
