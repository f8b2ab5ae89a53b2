/*
 * tac/nvm_clock.c - NVM ages by a CLOCK over its slots.
 *
 * Why.  A meta tuple is compact (engine/item_layout.h): it has no LRU
 * links, which saves DRAM on every NVM-resident item.  So NVM needs an
 * order of eviction that lives outside DRAM's items: the slots themselves.
 *
 * How.  Each NVM slot class has a hand, a slot reference.  A turn of the
 * hand claims the next slots of its class in address order
 * (nvm_class_next), reads each one's tuple header and key, and asks the
 * engine whether the key's meta tuple points at that slot
 * (items_lower_visit, under the key's item lock taken by trylock).  If so,
 * a dead item is reclaimed, an item read since the hand last passed it
 * (readCount > 0: Lazy LRU's second chance, llru_second_chance) stays one
 * more lap with its readCount cut, and any other goes down to SSD, or
 * without an SSD is dropped.  A slot that is free, being written, or
 * whose key reads wrong is passed over: its bytes are never trusted
 * (nvm_peek); only a linked meta tuple naming the slot makes it an
 * item's.  A tuple damaged elsewhere is found by its key all the same,
 * and the move down, which checks the whole tuple, drops it.
 *
 * The hands are advanced under a lock of their own, a leaf: no other lock
 * is taken while one is held, and the slots it claimed are visited after
 * it is let go.  So evictors, the page mover and a store that needs a
 * slot may turn the same hand, each visiting different slots.
 *
 * Threads: any.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "nvm/nvm.h"
#include "tac/crypt.h"
#include "tac/internal.h"
#include "tac/nvm_clock.h"
#include "tac/tuple.h"

/* Slots a turn claims at once, and slots a turn may visit per item it
 * must free or move: a hand that meets only read items and free slots
 * still ends its turn. */
#define CLOCK_CLAIM 32
#define CLOCK_VISITS_PER_ITEM 8

#define CLOCK_CLASSES 256

static struct {
    pthread_mutex_t lock;
    uint64_t at[CLOCK_CLASSES];     /* the hand of each class: a ref */
} hands = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Claims up to n slots of class cls from its hand; returns how many. */
static size_t claim(unsigned cls, uint64_t *refs, size_t n)
{
    size_t got = 0;
    bool wrapped = false;
    pthread_mutex_lock(&hands.lock);
    uint64_t at = hands.at[cls];
    while (got < n) {
        uint64_t ref = nvm_class_next(tac.nvm, cls, at, &wrapped);
        if (ref == 0)
            break;
        refs[got++] = ref;
        at = ref;
        if (wrapped) {
            TAC_INCR(nvm_clock_laps);
            break;
        }
    }
    hands.at[cls] = at;
    pthread_mutex_unlock(&hands.lock);
    return got;
}

/* The key the tuple header at ref names, into key; its length, or 0 when
 * the slot holds no tuple header that could be one (free, being written,
 * damaged).  Of a clear tuple only the key length must be possible: a
 * tuple whose other header fields were damaged is still found by its key,
 * and the move that reads it drops it.  A sealed tuple's key is decrypted
 * with its nonce, which lies after the value: its lengths must hold. */
static size_t slot_key(uint64_t ref, size_t slot, char *key)
{
    char buf[sizeof(struct tac_tuple_hdr) + KEY_MAX_LENGTH + TAC_SEAL_NONCE];
    struct tac_tuple_hdr hdr;
    size_t want = sizeof(hdr) + KEY_MAX_LENGTH;
    size_t got = nvm_peek(tac.nvm, ref, 0, buf, want < slot ? want : slot);
    if (got < sizeof(hdr))
        return 0;
    memcpy(&hdr, buf, sizeof(hdr));
    if (hdr.nkey == 0 || sizeof(hdr) + hdr.nkey > got)
        return 0;
    char *body = buf + sizeof(hdr);
    if (!tac_tuple_sealed()) {
        memcpy(key, body, hdr.nkey);
        return hdr.nkey;
    }
    if (!tac_tuple_sane(&hdr, slot))
        return 0;
    /* The nonce goes right after the key's bytes, where tac_crypt_peek
     * looks for it in a record of nkey bytes. */
    size_t nonce_at = sizeof(hdr) + (size_t)hdr.nkey + hdr.nbytes;
    if (nvm_peek(tac.nvm, ref, nonce_at, body + hdr.nkey, TAC_SEAL_NONCE) !=
        TAC_SEAL_NONCE)
        return 0;
    tac_crypt_peek(body, hdr.nkey, hdr.nkey, key);
    return hdr.nkey;
}

struct clock_turn tac_nvm_clock_evict(unsigned cls, int max,
                                      item_evict_hook_fn move)
{
    struct clock_turn t = { 0 };
    size_t slot = nvm_class_slot_size(tac.nvm, cls);
    if (tac.nvm == NULL || cls >= CLOCK_CLASSES || slot == 0 || max <= 0)
        return t;
    int visits = max * CLOCK_VISITS_PER_ITEM;
    uint64_t refs[CLOCK_CLAIM];
    char key[KEY_MAX_LENGTH];
    while (t.freed + t.moved < max && visits > 0) {
        size_t n = claim(cls, refs, visits < CLOCK_CLAIM ? (size_t)visits
                                                         : CLOCK_CLAIM);
        if (n == 0)
            break;
        visits -= (int)n;
        TAC_ADD(nvm_clock_passed, n);
        for (size_t i = 0; i < n; i++) {
            size_t nkey = slot_key(refs[i], slot, key);
            if (nkey == 0)
                continue;
            switch (items_lower_visit(TIER_NVM, refs[i], key, nkey, move)) {
            case LOWER_FREED:   t.freed++; break;
            case LOWER_EVICTED: t.freed++; t.evicted++; break;
            case LOWER_MOVED:   t.moved++; break;
            case LOWER_SPARED:  TAC_INCR(nvm_clock_spared); break;
            default:            break;
            }
        }
    }
    return t;
}
