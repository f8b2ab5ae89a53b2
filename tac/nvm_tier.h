/*
 * tac/nvm_tier.h - the NVM tier's mechanism (nvm_tier.c).
 */
#ifndef TAC_NVM_TIER_H
#define TAC_NVM_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/items.h"

struct tac_tuple_hdr;

/* Copies `it` (a DRAM or staging item) into NVM and returns its new,
 * unlinked meta tuple (refcount 1); NULL if NVM or DRAM lacks room.
 * `reserved`: the meta tuple may use the DRAM slab reserve (moves down
 * only: not sets, which free no DRAM, nor fetches). */
item *tac_nvm_store_copy(const item *it, int partition, bool reserved);
/* Copies the value of NVM meta tuple `meta` into dst (meta->nbytes bytes),
 * and its key into keydst unless NULL (meta->nkey bytes), and checks the
 * tuple: header bounds, key fingerprint and lengths against meta,
 * checksum.  False, counted in nvm_read_errors and
 * tuple_checksum_failures, when it is damaged: the caller must not use dst
 * and unlinks meta.  Item lock held, meta pinned. */
bool tac_nvm_read_value(const item *meta, char *keydst, char *dst);
/* The same checks on the tuple where it lies: returns its clear key,
 * followed by its value, with its header in *hdr, and in *body (if not
 * NULL) where its body (what follows the header) lies in the NVM mapping;
 * NULL (counted) when it is damaged.  Without a tier key the key is in the
 * mapping, valid while meta pins the slot; with one it is in the thread's
 * scratch buffer (tac_tuple_open_scratch).  Item lock held, meta pinned. */
const char *tac_nvm_tuple_checked(const item *meta, struct tac_tuple_hdr *hdr,
                                  const char **body);
/* Around every NVM insertion (slot allocation to tuple written): the
 * mover reads no slot of a page it drains before such writers are done. */
unsigned tac_nvm_write_begin(void);
void tac_nvm_write_end(unsigned token);
/* Class cls found no slot and no page (no SSD tier): asks the mover for a
 * page; true when it is emptying one or may find one, so that the caller
 * waits rather than drop a tuple. */
bool tac_nvm_mover_want(unsigned cls);
/* Forgets and frees the NVM slot at ref (its meta tuple's last reference
 * went): in step with the mover's reads when the slot lies in the page it
 * drains.  Any thread. */
void tac_nvm_release_slot(uint64_t ref);

/* An NVM slot about to be freed: its tuple is made unreadable first, so
 * that a crash scan never takes it for live. */
void tac_nvm_forget(uint64_t ref);

/* True while free NVM is below its watermark (evictors move NVM tails to
 * SSD then). */
bool tac_nvm_tight(void);
/* The read path's copy of NVM meta tuple meta (item lock held, meta
 * pinned): a transient item with its value, counted as an NVM hit; NULL
 * when out of memory or damaged (then meta is unlinked). */
item *tac_nvm_materialize(item *meta);
/* The key of the tuple at ref (len bytes) into key, if it is the tuple of
 * the key of fingerprint fp and length nkey (tac_tuple_key_of).  The
 * caller pins the meta tuple whose reference ref was. */
bool tac_nvm_key_at(uint64_t ref, size_t len, uint64_t fp, size_t nkey, char *key);
/* The last reference to NVM meta tuple meta is gone: frees its slot. */
void tac_nvm_release(item *meta);
/* Moves an NVM meta tuple to another DRAM chunk (the slab page mover). */
bool tac_nvm_meta_rehome(item *meta, uint32_t hv);
/* Free bytes of NVM (whole pages less the slots in use), and whether they
 * are below twice the free watermark. */
size_t tac_nvm_free_bytes(void);
bool tac_nvm_full(void);
/* The function that moves a full class's coldest tuple down (the SSD
 * tier's tac_ssd_from_nvm; NULL, the default, without one). */
void tac_nvm_set_spill(bool (*fn)(item *meta, uint32_t hv));

/* The page mover's side of a drain (mover.c): whether it runs, the class
 * that asked for a page, its idle time, the epoch flip and whether the
 * writers of the old parity are done, and reading a draining slot's key
 * (false when it was freed meanwhile or holds no tuple that checks). */
void tac_nvm_mover_enable(bool on);
unsigned tac_nvm_wanted(void);
void tac_nvm_want_clear(void);
bool tac_nvm_mover_idle(void);
void tac_nvm_mover_idle_for(unsigned ms);
unsigned tac_nvm_epoch_flip(void);
bool tac_nvm_writers_done(unsigned parity);
bool tac_nvm_read_slot_key(uint64_t ref, struct tac_tuple_hdr *hdr, char *key);

#endif
