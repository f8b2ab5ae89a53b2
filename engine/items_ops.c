/*
 * items_ops.c - what the protocols ask of the item engine: reads (get,
 * gat, the meta get's flags), stores (set, add, replace, append, prepend,
 * cas, and the meta set's modes), incr/decr and deletes.  Each runs under
 * the key's item lock and calls items.c for the lifecycle (link, replace,
 * unlink, the tier operations).  Design and locks: the top of items_core.c.
 *
 * Threads: workers; the restart's recovery (stores).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "engine/items.h"
#include "engine/items_int.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "base/watch.h"
#include "base/util.h"

item *do_item_get(const char *key, size_t nkey, uint32_t hv,
                  enum item_miss *why, bool do_update)
{
    enum item_miss w = MISS_NONE;
    item *it = assoc_find(key, nkey, hv);
    if (it == NULL) {
        w = MISS_NOT_FOUND;
    } else if (item_is_dead(it, &w)) {
        do_item_unlink(it, hv);
        it = NULL;
    } else {
        refcount_incr(it);
        if (do_update)
            do_item_touch_access(it);
    }
    if (why != NULL)
        *why = w;
    return it;
}

item *item_value_take(item *it)
{
    if (it == NULL || !(it->it_flags & ITEM_META))
        return it;
    /* The reference pins the meta tuple, and with it its lower-tier
     * tuple (freed only when the meta tuple is). */
    item *copy = items_tier_ops != NULL ? items_tier_ops->materialize(it) : NULL;
    item_release(it);
    return copy;
}

item *item_get(const char *key, size_t nkey, enum item_miss *why,
               bool do_update)
{
    uint32_t hv = item_hash(key, nkey);
    item_lock(hv);
    item *it = item_value_take(do_item_get(key, nkey, hv, why, do_update));
    item_unlock(hv);
    return it;
}

/* The value of `it` (whose reference this takes over) into *out: HIT, or
 * MISS when the copy found the tuple damaged (it is unlinked then), or
 * NOMEM.  Item lock held. */
static enum item_answer value_of_meta(item *it, item **out);

static inline enum item_answer value_of(item *it, item **out)
{
    if (!(it->it_flags & ITEM_META)) {     /* a DRAM item is its own value */
        *out = it;
        return ITEM_HIT;
    }
    return value_of_meta(it, out);
}

static enum item_answer value_of_meta(item *it, item **out)
{
    refcount_incr(it);
    *out = item_value_take(it);
    bool gone = !(it->it_flags & ITEM_LINKED);
    item_release(it);
    return *out != NULL ? ITEM_HIT : gone ? ITEM_MISS : ITEM_NOMEM;
}

/* mg N on a miss: creates an empty item; called and returns locked.  It
 * allocates with the lock dropped (as memcached does), then relocks and
 * looks again: another client may have created it meanwhile. */
static item *mg_vivify(const struct item_read *rq, uint32_t hv, bool *created)
{
    enum item_miss why;
    item_unlock(hv);
    item *nit = item_alloc(rq->key, rq->nkey, 0, 0, 2, rq->mg->partition);
    item_lock(hv);
    if (nit == NULL)
        return NULL;
    memcpy(ITEM_data(nit), "\r\n", 2);
    item *it = do_item_get(rq->key, rq->nkey, hv, &why, false);
    if (it != NULL) {
        item_release(nit);
        return it;
    }
    /* Stored rather than linked: with DRAM full, nit is a staging item
     * that the store puts into a lower tier. */
    enum store_result res = do_item_store(nit, STORE_ADD, 0, NULL, hv,
                                          rq->mg->partition);
    item_release(nit);
    if (res != STORE_STORED)
        return NULL;
    it = do_item_get(rq->key, rq->nkey, hv, &why, false);
    *created = it != NULL;
    return it;
}

/* Runs a meta get's flags on `it` in request order (item lock held). */
static void mg_apply(struct item_mg *mg, item *it)
{
    rel_time_t now = mc_now();
    bool won = false;
    if (mg->set_cas) {
        it->cas = mg->cas;
        items_log_version(it);                /* the log's copy holds the CAS too */
    }
    for (unsigned int i = 0; i < mg->nops; i++) {
        int64_t v = 0;
        switch (mg->op[i]) {
        case MG_TOUCH:
            mg->ttl_set = true;
            items_set_exptime(it, mg->touch_exptime);
            break;
        case MG_VIVIFY:
            if (mg->created) {
                it->exptime = mg->vivify_exptime;
                won = true;
            }
            break;
        case MG_RECACHE:
            if (!(it->it_flags & ITEM_TOKEN_SENT) && !mg->created &&
                it->exptime != 0 && it->exptime < mg->recache_time)
                won = true;
            break;
        case MG_SIZE: v = it->nbytes - 2; break;
        case MG_TTL:
            v = it->exptime == 0 ? -1 : (int64_t)(uint32_t)(it->exptime - now);
            break;
        case MG_CAS: v = (int64_t)it->cas; break;
        case MG_FLAGS: v = it->flags; break;
        case MG_LAST_ACCESS: v = (uint32_t)(now - item_time(it)); break;
        case MG_FETCHED: v = (it->it_flags & ITEM_FETCHED) ? 1 : 0; break;
        }
        mg->val[i] = v;
    }
    mg->nbytes = it->nbytes;
    mg->exptime = it->exptime;
    mg->tier = it->tier;
    if (!mg->tokens)
        return;
    mg->token_sent = (it->it_flags & ITEM_TOKEN_SENT) != 0;
    mg->stale = (it->it_flags & ITEM_STALE) != 0;
    if (mg->stale && !mg->token_sent)
        won = true;
    if (won)
        it->it_flags |= ITEM_TOKEN_SENT;
    mg->won = won;
}

enum item_answer item_read(const struct item_read *rq, item **out,
                           enum item_miss *why, unsigned int *clsid)
{
    uint32_t hv = item_hash(rq->key, rq->nkey);
    enum item_answer a = ITEM_HIT;
    *out = NULL;
    item_lock(hv);
    /* A meta get bumps last, so that its l and h flags see the item as it
     * was before this request. */
    item *it = do_item_get(rq->key, rq->nkey, hv, why, rq->bump && rq->mg == NULL);
    if (it == NULL && rq->mg != NULL && rq->mg->vivify)
        it = mg_vivify(rq, hv, &rq->mg->created);
    *clsid = it != NULL ? it->slabs_clsid : 0;
    if (it == NULL) {
        a = ITEM_MISS;
        if (rq->value && (why == NULL || (*why != MISS_EXPIRED && *why != MISS_FLUSHED)) &&
            items_tier_ops != NULL && items_tier_ops->read_missed != NULL)
            items_tier_ops->read_missed(hv);
    } else {
        if (rq->touch)
            items_set_exptime(it, rq->exptime);
        if (rq->mg != NULL) {
            mg_apply(rq->mg, it);
            if (rq->bump)
                do_item_touch_access(it);
        }
        if (!rq->value) {
            *out = it;
        } else if (item_value_async(it) && rq->wait != NULL &&
                   items_tier_ops != NULL && items_tier_ops->read_async != NULL) {
            const struct item_waiter *w = rq->wait;
            void *arg = w->prepare(w->ctx);
            if (arg != NULL && items_tier_ops->read_async(w->reader, it, rq->key, hv,
                                                    w->done, arg)) {
                a = ITEM_PENDING;
                item_release(it);
            } else {
                if (arg != NULL)
                    w->cancel(arg);
                /* A value still in memory can be served all the same. */
                a = value_of(it, out);
            }
        } else {
            a = value_of(it, out);
        }
    }
    item_unlock(hv);
    return a;
}

item *item_get_and_touch(const char *key, size_t nkey, rel_time_t exptime,
                         enum item_miss *why)
{
    uint32_t hv = item_hash(key, nkey);
    item_lock(hv);
    item *it = do_item_get(key, nkey, hv, why, true);
    if (it != NULL)
        items_set_exptime(it, exptime);
    item_unlock(hv);
    return it;
}

bool item_exists(const char *key, size_t nkey)
{
    uint32_t hv = item_hash(key, nkey);
    item_lock(hv);
    item *it = do_item_get(key, nkey, hv, NULL, false);
    if (it != NULL)
        item_release(it);
    item_unlock(hv);
    return it != NULL;
}

/* ---- Stores. --------------------------------------------------------- */

/*
 * The item to link for `it`: `it` itself with a new reference, or for a
 * staging item (DRAM was full) a meta tuple whose value the tier policy
 * wrote to a lower tier.  NULL when no tier has room.  Caller holds the
 * item lock.
 */
static item *store_ready(item *it, int partition)
{
    if (!(it->it_flags & ITEM_STAGING)) {
        refcount_incr(it);
        return it;
    }
    /* The CAS comes before the tuple is written, so that the copy on the
     * media holds it and a crash brings it back with it; do_item_link keeps
     * a meta tuple's CAS.  A recovery that links a saved item sets it. */
    if (it->cas == 0)
        it->cas = item_next_cas();
    return items_tier_ops != NULL ? items_tier_ops->stage(it, partition) : NULL;
}

/* store_ready for a new version of old (NULL: none).  Staging writes the
 * new tuple, with a new seq, here; old's invalidation must be recorded
 * before that, or its seq would cover the new tuple too and a crash would
 * lose it.  *invalidated: recorded (for replace_version). */
static item *store_ready_for(item *it, item *old, int partition, bool *invalidated)
{
    *invalidated = old != NULL && (it->it_flags & ITEM_STAGING);
    if (*invalidated)
        items_lower_invalidate(old);
    else if (old == NULL && __atomic_load_n(&items_rec_active, __ATOMIC_RELAXED))
        items_rec_forget_unrecovered(ITEM_key(it), it->nkey, item_hash(ITEM_key(it), it->nkey));
    return store_ready(it, partition);
}

size_t item_copy_size(const item *it)
{
    return item_make_size(it->nkey, it->nbytes);
}

item *item_copy(const item *it)
{
    size_t n = item_copy_size(it);
    item *copy = malloc(n);
    if (copy == NULL)
        return NULL;
    /* The caller's reference keeps key and value in place; a value is
     * never changed in place while readers hold it. */
    memcpy(copy, it, n);
    copy->h_next = NULL;
    copy->next = copy->prev = NULL;
    copy->it_flags = ITEM_TRANSIENT |
                     (it->it_flags & (ITEM_FETCHED | ITEM_ACTIVE));
    copy->slabs_clsid = 0;
    copy->refcount = 1;
    return copy;
}

/* Holds a value-bearing version of `it` (itself, a copy of an NVM value,
 * or prior's value when `it` is the version prior read).  NULL on failure;
 * NULL with *need set when the value must first be read from SSD.  Caller
 * holds a reference to `it`. */
static item *value_peek(item *it, const struct item_got *prior, bool *need)
{
    *need = false;
    if (!(it->it_flags & ITEM_META)) {
        refcount_incr(it);
        return it;
    }
    if (item_value_async(it)) {
        /* prior->src is pinned, so no other item can have its address:
         * the same item is the same version. */
        if (prior != NULL && prior->src == it && prior->value != NULL &&
            prior->value->nbytes == it->nbytes) {
            refcount_incr(prior->value);
            return prior->value;
        }
        /* A worker never reads the SSD itself: the caller parks a read
         * and retries with what it got as prior. */
        *need = true;
        return NULL;
    }
    return items_tier_ops != NULL ? items_tier_ops->materialize(it) : NULL;
}

/* Builds old+add (append) or add+old (prepend) as a new item and swaps it
 * in.  *cas_out gets its CAS.  Caller holds the item lock. */
static enum store_result do_item_concat(item *old, item *add, bool append,
                                        uint32_t hv, int partition,
                                        const struct item_got *prior,
                                        uint64_t *cas_out)
{
    if (old->nbytes < 2 || add->nbytes < 2)
        return STORE_NOT_STORED;
    size_t nbytes = (size_t)old->nbytes + add->nbytes - 2;
    if (!item_size_ok(old->nkey, nbytes))
        return STORE_TOO_LARGE;
    bool need;
    item *oldv = value_peek(old, prior, &need);
    if (oldv == NULL)
        return need ? STORE_NEED_VALUE : STORE_NO_MEMORY;
    item *n = item_alloc(ITEM_key(add), old->nkey, old->flags, old->exptime,
                         nbytes, partition);
    if (n == NULL) {
        item_release(oldv);
        return STORE_NO_MEMORY;
    }

    const item *first = append ? oldv : add;
    const item *second = append ? add : oldv;
    memcpy(ITEM_data(n), ITEM_data(first), first->nbytes - 2);
    memcpy(ITEM_data(n) + first->nbytes - 2, ITEM_data(second),
           second->nbytes);
    item_release(oldv);
    bool invalidated;
    item *linked = store_ready_for(n, old, partition, &invalidated);
    item_release(n);
    if (linked == NULL)
        return STORE_NO_MEMORY;
    linked->it_flags |= old->it_flags & (ITEM_FETCHED | ITEM_ACTIVE);
    items_replace_version(old, linked, hv, invalidated);
    *cas_out = linked->cas;
    item_release(linked);
    return STORE_STORED;
}

static enum store_result do_item_store_prior(item *it, enum store_op op,
                                             uint64_t req_cas,
                                             uint64_t *cas_out, uint32_t hv,
                                             int partition,
                                             const struct item_got *prior)
{
    item *old = do_item_get(ITEM_key(it), it->nkey, hv, NULL, false);
    enum store_result res;
    uint64_t new_cas = 0;
    bool cas_bad = old != NULL && req_cas != 0 && old->cas != req_cas;

    if (op == STORE_SET && req_cas != 0)
        op = STORE_CAS;
    switch (op) {
    case STORE_ADD:
        res = old != NULL ? STORE_NOT_STORED : STORE_STORED;
        break;
    case STORE_CAS:
        res = old == NULL ? STORE_NOT_FOUND
            : old->cas != req_cas ? STORE_EXISTS : STORE_STORED;
        break;
    case STORE_REPLACE:
    case STORE_APPEND:
    case STORE_PREPEND:
        res = old == NULL ? STORE_NOT_STORED
            : cas_bad ? STORE_EXISTS : STORE_STORED;
        break;
    case STORE_SET:
    default:
        res = STORE_STORED;
        break;
    }

    if (res == STORE_STORED) {
        if (op == STORE_APPEND || op == STORE_PREPEND) {
            res = do_item_concat(old, it, op == STORE_APPEND, hv, partition,
                                 prior, &new_cas);
        } else {
            bool invalidated;
            item *linked = store_ready_for(it, old, partition, &invalidated);
            if (linked == NULL) {
                res = STORE_NO_MEMORY;
            } else {
                if (old != NULL)
                    items_replace_version(old, linked, hv, invalidated);
                else
                    do_item_link(linked, hv, false);
                new_cas = linked->cas;
                item_release(linked);
            }
        }
    }
    if (res == STORE_STORED && cas_out != NULL)
        *cas_out = new_cas;
    if (old != NULL)
        item_release(old);
    return res;
}

enum store_result do_item_store(item *it, enum store_op op, uint64_t req_cas,
                                uint64_t *cas_out, uint32_t hv,
                                int partition)
{
    return do_item_store_prior(it, op, req_cas, cas_out, hv, partition, NULL);
}

static enum store_result store(item *it, enum store_op op, uint64_t req_cas,
                               uint64_t *cas_out, int partition, bool may_wait,
                               const struct item_got *prior)
{
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    item_lock(hv);
    enum store_result res = do_item_store_prior(it, op, req_cas, cas_out, hv,
                                                partition, prior);
    item_unlock(hv);
    /* A value DRAM had no room for, that no lower tier could take either:
     * its tail is moving down, defrag is compacting, or the page mover has
     * yet to refill the meta tuples' reserve.  The evictors are woken; a
     * caller that can wait tries again, unless every tier is full for good:
     * back-pressure, not errors (doc/design.md, "Back-pressure: a store
     * waits for room, parked"). */
    if (res == STORE_NO_MEMORY && (it->it_flags & ITEM_STAGING) &&
        items_tier_ops != NULL && op != STORE_APPEND && op != STORE_PREPEND) {
        /* DRAM may have room again: the evictors ran since the staging
         * item was made.  A value no lower tier takes (below -o
         * ext_item_size, or every lower tier full) then goes there, as a
         * new item goes to DRAM, instead of waiting for a tier that will
         * not take it. */
        item *d = item_unstage(it);
        if (d != NULL) {
            item_lock(hv);
            res = do_item_store_prior(d, op, req_cas, cas_out, hv, partition, prior);
            item_unlock(hv);
            item_release(d);
            return res;
        }
        items_tier_ops->dram_pressure(it->slabs_clsid, part_index(partition));
        if (may_wait && items_tier_ops->room_later != NULL && items_tier_ops->room_later())
            res = STORE_NEED_ROOM;
    }
    return res;
}

enum store_result item_store(item *it, enum store_op op, uint64_t req_cas,
                             uint64_t *cas_out, int partition)
{
    return store(it, op, req_cas, cas_out, partition, false, NULL);
}

enum store_result item_store_wait(item *it, enum store_op op, uint64_t req_cas,
                                  uint64_t *cas_out, int partition,
                                  const struct item_got *prior)
{
    return store(it, op, req_cas, cas_out, partition, true, prior);
}

enum store_result item_store_meta(item *it, enum store_op op, uint64_t req_cas,
                                  uint64_t *cas_out, int partition,
                                  bool stale_if_older, bool set_cas,
                                  uint64_t cas, const struct item_got *prior)
{
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    enum store_result ret;
    item_lock(hv);
    item *old = NULL;
    if (stale_if_older) {
        enum item_miss why;
        old = do_item_get(ITEM_key(it), it->nkey, hv, &why, false);
    }
    if (old != NULL && req_cas < old->cas) {
        it->exptime = old->exptime;
        it->it_flags |= ITEM_STALE | (old->it_flags & ITEM_TOKEN_SENT);
        ret = do_item_store(it, STORE_SET, 0, cas_out, hv, partition);
    } else {
        ret = do_item_store_prior(it, op, req_cas, cas_out, hv, partition,
                                  prior);
    }
    if (ret == STORE_STORED && set_cas) {
        it->cas = cas;
        items_log_version(it);                /* the log's copy holds the CAS too */
        if (cas_out != NULL)
            *cas_out = cas;
    }
    item_unlock(hv);
    if (old != NULL)
        item_release(old);
    return ret;
}

/* ---- incr / decr, delete. ------------------------------------------ */

/* Parses a stored value as a decimal uint64 the way memcached reads it:
 * leading whitespace and an optional '+', at least one digit, no overflow,
 * and the digits end at the end of the value or at a whitespace character
 * (what follows it is ignored). */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < len && isspace((unsigned char)s[i]))
        i++;
    if (i < len && s[i] == '+')
        i++;
    size_t start = i;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned int d = (unsigned int)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (i == start)
        return false;
    if (i != len && !isspace((unsigned char)s[i]))
        return false;
    *out = v;
    return true;
}

/* Computes the new value of `it` into out and swaps in a new item. */
static enum delta_result do_apply_delta(item *it, const char *key, bool incr,
                                        uint64_t delta,
                                        const struct item_got *prior,
                                        char *out, uint64_t *cas_out,
                                        uint32_t hv, int partition)
{
    uint64_t v;
    bool need;
    item *val = value_peek(it, prior, &need);
    if (val == NULL)
        return need ? DELTA_NEED_VALUE : DELTA_NO_MEMORY;
    bool numeric = val->nbytes >= 2 &&
                   parse_u64(ITEM_data(val), val->nbytes - 2, &v);
    item_release(val);
    if (!numeric)
        return DELTA_NON_NUMERIC;
    if (incr)
        v += delta;                 /* wraps mod 2^64 */
    else
        v = delta > v ? 0 : v - delta;
    int len = snprintf(out, 21, "%llu", (unsigned long long)v);

    /* Like memcached: a result that fits the old value is written in
     * place, padded with spaces, when nobody else holds the item (the
     * index and this caller are the only references). */
    if ((size_t)len + 2 <= it->nbytes && refcount_load(it) == 2 &&
        it->tier == TIER_DRAM) {
        /* A new version, though in place: its record goes above the
         * old one's, as for a replacement (superseded_in_log). */
        if (!items_superseded_in_log(it, it))
            items_lower_invalidate(it);
        items_rec_mark_key(ITEM_key(it), it->nkey, hv);
        memcpy(ITEM_data(it), out, (size_t)len);
        memset(ITEM_data(it) + len, ' ', it->nbytes - 2 - (size_t)len);
        it->cas = item_next_cas();
        if (cas_out != NULL)
            *cas_out = it->cas;
        items_log_version(it);
        return DELTA_OK;
    }

    item *n = item_alloc(key, it->nkey, it->flags, it->exptime,
                         (size_t)len + 2, partition);
    if (n == NULL)
        return DELTA_NO_MEMORY;
    memcpy(ITEM_data(n), out, (size_t)len);
    memcpy(ITEM_data(n) + len, "\r\n", 2);
    bool invalidated;
    item *linked = store_ready_for(n, it, partition, &invalidated);
    item_release(n);
    if (linked == NULL)
        return DELTA_NO_MEMORY;
    linked->it_flags |= it->it_flags & (ITEM_FETCHED | ITEM_ACTIVE);
    items_replace_version(it, linked, hv, invalidated);
    if (cas_out != NULL)
        *cas_out = linked->cas;
    item_release(linked);
    return DELTA_OK;
}

enum delta_result item_add_delta(const char *key, size_t nkey, bool incr,
                                 uint64_t delta, uint64_t req_cas,
                                 char *out, uint64_t *cas_out, int partition,
                                 const struct item_got *prior)
{
    uint32_t hv = item_hash(key, nkey);
    enum delta_result res;
    item_lock(hv);
    item *it = do_item_get(key, nkey, hv, NULL, true);
    if (it == NULL)
        res = DELTA_NOT_FOUND;
    else if (req_cas != 0 && it->cas != req_cas)
        res = DELTA_EXISTS;
    else
        res = do_apply_delta(it, key, incr, delta, prior, out, cas_out, hv,
                             partition);
    if (it != NULL)
        item_release(it);
    item_unlock(hv);
    return res;
}

enum delete_result item_delete(const char *key, size_t nkey, uint64_t req_cas,
                               unsigned int *clsid)
{
    uint32_t hv = item_hash(key, nkey);
    enum delete_result res = DELETE_OK;
    item_lock(hv);
    items_rec_forget_unrecovered(key, nkey, hv);
    items_rec_mark_key(key, nkey, hv);
    item *it = do_item_get(key, nkey, hv, NULL, false);
    if (clsid != NULL)
        *clsid = it != NULL ? it->slabs_clsid : 0;
    if (it == NULL) {
        res = DELETE_NOT_FOUND;
    } else {
        if (req_cas != 0 && it->cas != req_cas) {
            res = DELETE_EXISTS;
        } else {
            items_lower_invalidate(it);
            do_item_unlink(it, hv);
        }
        item_release(it);
    }
    item_unlock(hv);
    return res;
}

enum delete_result item_delete_meta(const char *key, size_t nkey,
                                    const struct item_md *md,
                                    unsigned int *clsid)
{
    uint32_t hv = item_hash(key, nkey);
    enum delete_result res = DELETE_OK;
    enum item_miss why;
    item_lock(hv);
    items_rec_forget_unrecovered(key, nkey, hv);
    items_rec_mark_key(key, nkey, hv);
    item *it = do_item_get(key, nkey, hv, &why, false);
    *clsid = it != NULL ? it->slabs_clsid : 0;
    if (it == NULL) {
        res = DELETE_NOT_FOUND;
    } else if (md->has_cas && it->cas != md->req_cas) {
        res = DELETE_EXISTS;
    } else if (md->stale) {
        /* The stale mark lives in DRAM only: a copy on the media (a lower
         * tier's tuple, the DRAM log's records) would come back fresh
         * after a crash.  They are invalidated, and the stale version is
         * not logged: a crash loses the key instead of serving it as
         * fresh.  A graceful restart keeps the mark (RS_KEEP_FLAGS). */
        items_lower_invalidate(it);
        if (md->new_ttl)
            it->exptime = md->exptime;
        it->it_flags |= ITEM_STALE;
        it->it_flags &= (uint16_t)~(ITEM_TOKEN_SENT | ITEM_LOG_ORDERED);
        it->cas = md->set_cas ? md->cas : item_next_cas();
        res = DELETE_STALE;
    } else {
        items_lower_invalidate(it);
        do_item_unlink(it, hv);
    }
    item_unlock(hv);
    if (it != NULL)
        item_release(it);
    return res;
}

