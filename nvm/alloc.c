/*
 * alloc.c - the NVM slab allocator: classes, pages, partitioned free lists.
 *
 * Owns: the assignment of the region's pages to classes and partitions, and
 * every slot's allocated/free state.  It never reads or writes the mapping.
 *
 * Design.  The region after the header is cut into npages pages of
 * page_size bytes.  Slot sizes are multiples of 256 B (see nvm.h for how
 * classes grow); a page handed to a class is cut into per_page slots from
 * its first byte, so every slot is 256 B-aligned.  Pages are handed out in
 * address order by bumping next_page; once none is left, a page emptied by
 * the caller's page mover ("Draining a page", below), or else a page of
 * another class whose slots are all free, is handed over (page_reuse).
 * A page that may hold bytes of an earlier use is zeroed before its new
 * class is recorded (page_wipe), so a crash scan finds only free slots
 * and real tuples in it.
 *
 * Each class has P partitions.  A partition owns the pages it took; its
 * free list is a DRAM stack of slot references, and its "end" is the
 * uncarved tail of its newest page, so a fresh page is not walked or
 * touched when taken.  A freed slot goes back to the partition that owns
 * its page (page_owner[]), whoever allocated it, so a partition's stack
 * never holds more than the slots of its own pages: the stack is reserved
 * to that size when a page is taken, and nvm_free cannot fail.  Reserved
 * but unused stack entries are virtual memory only: pages of the array are
 * faulted in as the stack grows, so resident DRAM follows the number of
 * free slots (at most 8 B per 256 B slot, 3%, when all are free and small).
 *
 * nvm_alloc: own stack, own end, new page for the own partition, then one
 * slot stolen from the stack or end of p+1, p+2, ... (no new page for them).
 *
 * Threads: any.  Each partition lock protects that partition's fields (see
 * internal.h, which gives their order with reuse_lock).
 * Page handout is a lock-free CAS on next_page.  Counters are relaxed
 * atomics: each stays exact, snapshots of several may be skewed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpmem.h>

#include "nvm/internal.h"

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

enum nvm_status nvm_classes_init(struct nvm_region *r, double factor,
                                 uint64_t slot_max)
{
    uint64_t max = round_up(slot_max, NVM_SLOT_ALIGN);
    uint64_t size = NVM_SLOT_ALIGN;
    unsigned n = 0;

    if (max > r->page_size)
        return NVM_ERR_ARG;
    for (;;) {
        if (size > max)
            size = max;
        if (++n > NVM_MAX_CLASSES)
            return NVM_ERR_ARG;
        r->classes[n].slot_size = size;
        r->classes[n].per_page = (uint32_t)(r->page_size / size);
        if (size == max)
            break;
        uint64_t next = round_up((uint64_t)((double)size * factor),
                                 NVM_SLOT_ALIGN);
        size = next > size ? next : size + NVM_SLOT_ALIGN;
    }
    r->nclasses = n;
    return NVM_OK;
}

enum nvm_status nvm_alloc_init(struct nvm_region *r)
{
    size_t parts_bytes = sizeof(struct nvm_part) * (size_t)r->nparts;

    r->page_class = calloc(r->npages, 1);
    r->page_owner = calloc(r->npages, 1);
    r->page_used = calloc(r->npages, 1);
    r->reuse_count = calloc(r->npages, sizeof(*r->reuse_count));
    if (r->page_class == NULL || r->page_owner == NULL || r->page_used == NULL ||
        r->reuse_count == NULL)
        return NVM_ERR_NOMEM;
    /* Only a file this open created (or anonymous memory) is known zero. */
    if (!r->created && !r->is_anon)
        memset(r->page_used, 1, r->npages);
    pthread_mutex_init(&r->reuse_lock, NULL);
    r->drain_words = (r->page_size / NVM_SLOT_ALIGN + 63) / 64;
    r->drain_free = calloc(r->drain_words, sizeof(*r->drain_free));
    if (r->drain_free == NULL)
        return NVM_ERR_NOMEM;
    r->drain_page = r->ready_page = NVM_NO_PAGE;
    r->dram_bytes = 7 * r->npages + r->drain_words * sizeof(*r->drain_free);
    for (unsigned c = 1; c <= r->nclasses; c++) {
        struct nvm_part *parts = aligned_alloc(64, parts_bytes);
        if (parts == NULL)
            return NVM_ERR_NOMEM;
        memset(parts, 0, parts_bytes);
        for (int i = 0; i < r->nparts; i++)
            parts[i].lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
        r->classes[c].parts = parts;
        r->dram_bytes += parts_bytes;
    }
    return NVM_OK;
}

void nvm_alloc_destroy(struct nvm_region *r)
{
    for (unsigned c = 1; c <= r->nclasses; c++) {
        struct nvm_part *parts = r->classes[c].parts;
        if (parts == NULL)
            continue;
        for (int i = 0; i < r->nparts; i++) {
            pthread_mutex_destroy(&parts[i].lock);
            free(parts[i].stack);
        }
        free(parts);
        r->classes[c].parts = NULL;
    }
    free(r->page_class);
    free(r->page_owner);
    free(r->page_used);
    r->page_class = r->page_owner = r->page_used = NULL;
    if (r->reuse_count != NULL)
        pthread_mutex_destroy(&r->reuse_lock);
    free(r->reuse_count);
    r->reuse_count = NULL;
    free(r->drain_free);
    r->drain_free = NULL;
    free(r->adopted);
    r->adopted = NULL;
}

/* ---- Partition internals: do_ = caller holds p->lock -------------------- */

static uint64_t do_part_pop(const struct nvm_class *c, struct nvm_part *p)
{
    if (p->nfree > 0) {
        NVM_STORE(&p->nfree, p->nfree - 1);
        return p->stack[p->nfree];
    }
    if (p->end_free > 0) {
        uint64_t ref = p->end_ref;
        p->end_ref += c->slot_size;
        NVM_STORE(&p->end_free, p->end_free - 1);
        return ref;
    }
    return 0;
}

/* Makes room on p's stack for want entries; false if out of DRAM. */
static bool do_stack_reserve(struct nvm_region *r, struct nvm_part *p,
                             uint64_t want, uint64_t limit)
{
    if (p->cap >= want)
        return true;
    uint64_t cap = p->cap * 2 > want ? p->cap * 2 : want;
    if (cap > limit)
        cap = limit;
    uint64_t *s = realloc(p->stack, cap * sizeof(*s));
    if (s == NULL)
        return false;
    NVM_ADD(&r->dram_bytes, (cap - p->cap) * sizeof(*s));
    p->stack = s;
    p->cap = cap;
    return true;
}

/* Gives page its class (0: none), in the caller's durable map too. */
static void page_class_set(struct nvm_region *r, uint64_t page, unsigned cls)
{
    if (cls != 0)
        NVM_STORE(&r->page_used[page], 1);
    NVM_STORE(&r->page_class[page], (uint8_t)cls);
    uint8_t *map = NVM_LOAD(&r->class_map);
    if (map != NULL)
        __atomic_store_n(&map[page], (uint8_t)cls, __ATOMIC_RELAXED);
}

void nvm_set_class_map(struct nvm_region *r, uint8_t *map)
{
    if (map != NULL)
        for (uint64_t p = 0; p < r->npages; p++)
            map[p] = NVM_LOAD(&r->page_class[p]);
    NVM_STORE(&r->class_map, map);
}

uint64_t nvm_npages(const struct nvm_region *r)
{
    return r->npages;
}

/* An emptied page (see "Draining a page"), taken at most once. */
static bool ready_take(struct nvm_region *r, uint64_t *page)
{
    uint64_t pg = NVM_LOAD(&r->ready_page);
    if (pg == NVM_NO_PAGE ||
        !__atomic_compare_exchange_n(&r->ready_page, &pg, NVM_NO_PAGE, false,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return false;
    *page = pg;
    return true;
}

/* Takes the next never-used page, or else an emptied one; false when there
 * is none.  The caller gives it its class. */
static bool page_take(struct nvm_region *r, uint64_t *page)
{
    uint64_t n = NVM_LOAD(&r->next_page);
    for (;;) {
        if (n >= r->npages)
            return ready_take(r, page);
        if (!__atomic_compare_exchange_n(&r->next_page, &n, n + 1, false,
                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            continue;
        if (NVM_LOAD(&r->page_class[n]) == 0)
            break;
        /* Adopted at a restart (nvm_adopt): already some class's. */
        NVM_SUB(&r->adopted_ahead, 1);
        n++;
    }
    *page = n;
    return true;
}

/* Zeroes len bytes at ref and makes them durable before anything stored
 * after.  (Not charged to the latency emulation: a page handover is not
 * on a request's path.) */
static void zero_persist(struct nvm_region *r, uint64_t ref, size_t len)
{
    if (r->is_pmem) {
        pmem_memset_persist(r->base + ref, 0, len);
    } else {
        memset(r->base + ref, 0, len);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
}

/* A page that held tuples before (another class's, or an earlier start's
 * that were not taken back) is zeroed before the durable class map names
 * its new class: a crash scan cuts it into the new class's slots, and each
 * slot not yet written must read as free, never as a stale or damaged
 * tuple.  The taker's partition lock held. */
static void page_wipe(struct nvm_region *r, uint64_t page)
{
    if (!NVM_LOAD(&r->page_used[page]))
        return;
    zero_persist(r, nvm_page_ref(r, page), r->page_size);
    NVM_STORE(&r->page_used[page], 0);
}

/* ---- Adopting slots at a restart ------------------------------------------
 * A restart that trusts a saved index hands its slots back before anything
 * is allocated: nvm_adopt marks each slot in a scratch bitmap (one bit per
 * NVM_SLOT_ALIGN bytes) and gives its page the slot's class; nvm_adopt_done
 * cuts each adopted page into its class's slots, round-robin over the
 * partitions, and puts every slot not adopted on the owner's stack.  Pages
 * never adopted stay with page_take, which skips the adopted ones.
 */

static bool bit_get(const uint64_t *map, uint64_t i);
static void bit_set(uint64_t *map, uint64_t i);
static uint64_t page_of(const struct nvm_region *r, uint64_t ref);

bool nvm_adopt(struct nvm_region *r, uint64_t ref, unsigned cls)
{
    if (cls == 0 || cls > r->nclasses || ref < NVM_DATA_OFFSET ||
        (ref - NVM_DATA_OFFSET) % NVM_SLOT_ALIGN != 0)
        return false;
    uint64_t page = page_of(r, ref);
    if (page >= r->npages)
        return false;
    struct nvm_class *c = &r->classes[cls];
    uint64_t in_page = ref - nvm_page_ref(r, page);
    if (in_page % c->slot_size != 0 || in_page / c->slot_size >= c->per_page)
        return false;
    if (r->adopted == NULL) {
        uint64_t bits = r->npages * (r->page_size / NVM_SLOT_ALIGN);
        r->adopted = calloc((bits + 63) / 64, sizeof(uint64_t));
        if (r->adopted == NULL)
            return false;
    }
    if (r->page_class[page] != 0 && r->page_class[page] != cls)
        return false;
    uint64_t bit = (ref - NVM_DATA_OFFSET) / NVM_SLOT_ALIGN;
    if (bit_get(r->adopted, bit))
        return false;
    bit_set(r->adopted, bit);
    page_class_set(r, page, cls);
    c->used++;
    r->bytes_used += c->slot_size;
    return true;
}

bool nvm_adopt_done(struct nvm_region *r)
{
    bool ok = true;
    int next_part = 0;
    for (uint64_t page = 0; page < r->npages && r->adopted != NULL; page++) {
        unsigned cls = r->page_class[page];
        if (cls == 0)
            continue;
        struct nvm_class *c = &r->classes[cls];
        int part = next_part;
        next_part = (next_part + 1) % r->nparts;
        struct nvm_part *p = &c->parts[part];
        if (!do_stack_reserve(r, p, p->owned + c->per_page,
                              r->npages * c->per_page)) {
            ok = false;         /* out of DRAM: its free slots stay unused */
        }
        r->page_owner[page] = (uint8_t)part;
        p->owned += c->per_page;
        c->pages++;
        if (page >= r->next_page)
            r->adopted_ahead++;
        uint64_t base = nvm_page_ref(r, page);
        for (uint32_t i = 0; i < c->per_page; i++) {
            uint64_t ref = base + (uint64_t)i * c->slot_size;
            if (!bit_get(r->adopted, (ref - NVM_DATA_OFFSET) / NVM_SLOT_ALIGN) &&
                p->nfree < p->cap)
                p->stack[p->nfree++] = ref;
        }
    }
    free(r->adopted);
    r->adopted = NULL;
    return ok;
}

/* ---- Reuse of wholly free pages ------------------------------------------
 * Pages are handed out in address order and stay with their class.  With
 * mixed sizes every page may end up in some class while a class that needs
 * one has none: its allocations then fail though NVM is far from full by
 * bytes.  A page of another class whose slots are all free (all on its
 * owner partition's stack: frees go to the owner) holds nothing, so it is
 * taken off that stack and handed over.  Large classes, with few slots per
 * page, free whole pages most often and are searched first.  The search
 * costs a pass over each stack it looks at, so it runs once at a time and,
 * after a search that found nothing, not again for a millisecond.
 */

#define REUSE_BACKOFF_NS 1000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t page_of(const struct nvm_region *r, uint64_t ref)
{
    return (ref - NVM_DATA_OFFSET) / r->page_size;
}

/* q->lock and r->reuse_lock held.  Takes a page of q whose slots are all
 * on q's stack off the stack; false if q has none. */
static bool do_take_free_page(struct nvm_region *r, struct nvm_class *c,
                              struct nvm_part *q, uint64_t *page)
{
    uint64_t best = UINT64_MAX;
    for (uint64_t j = 0; j < q->nfree; j++) {
        uint64_t pg = page_of(r, q->stack[j]);
        if (++r->reuse_count[pg] == c->per_page && best == UINT64_MAX)
            best = pg;
    }
    for (uint64_t j = 0; j < q->nfree; j++)
        r->reuse_count[page_of(r, q->stack[j])] = 0;
    if (best == UINT64_MAX)
        return false;
    uint64_t n = 0;
    for (uint64_t j = 0; j < q->nfree; j++)
        if (page_of(r, q->stack[j]) != best)
            q->stack[n++] = q->stack[j];
    NVM_STORE(&q->nfree, n);
    q->owned -= c->per_page;
    NVM_SUB(&c->pages, 1);
    *page = best;
    return true;
}

/* A wholly free page of another class than cls, off its owner's stack.
 * Called with a partition lock of cls held: other locks only by trylock. */
static bool page_reuse(struct nvm_region *r, unsigned cls, uint64_t *page)
{
    if (now_ns() < NVM_LOAD(&r->reuse_after_ns) ||
        pthread_mutex_trylock(&r->reuse_lock) != 0)
        return false;
    bool found = false, seen = false;
    for (unsigned k = r->nclasses; k >= 1 && !found; k--) {
        struct nvm_class *c = &r->classes[k];
        if (k == cls)
            continue;
        for (int i = 0; i < r->nparts && !found; i++) {
            struct nvm_part *q = &c->parts[i];
            if (NVM_LOAD(&q->nfree) < c->per_page)
                continue;
            seen = true;                /* maybe a free page: look again soon */
            if (pthread_mutex_trylock(&q->lock) != 0)
                continue;
            found = do_take_free_page(r, c, q, page);
            pthread_mutex_unlock(&q->lock);
        }
    }
    /* Back off only when no class had as many free slots as a page: a
     * search that met busy locks is not evidence that nothing is free. */
    if (!found && !seen)
        NVM_STORE(&r->reuse_after_ns, now_ns() + REUSE_BACKOFF_NS);
    pthread_mutex_unlock(&r->reuse_lock);
    return found;
}

/* Gives partition part of cls a new page and carves one slot from it. */
static uint64_t do_part_grow(struct nvm_region *r, unsigned cls, int part)
{
    struct nvm_class *c = &r->classes[cls];
    struct nvm_part *p = &c->parts[part];
    uint64_t page;

    assert(p->nfree == 0 && p->end_free == 0);
    if (!do_stack_reserve(r, p, p->owned + c->per_page,
                          r->npages * c->per_page))
        return 0;
    if (!page_take(r, &page)) {
        if (!page_reuse(r, cls, &page))
            return 0;
        NVM_ADD(&r->pages_reused, 1);
    }
    page_wipe(r, page);
    NVM_STORE(&r->page_owner[page], (uint8_t)part);
    page_class_set(r, page, cls);
    p->owned += c->per_page;
    p->end_ref = nvm_page_ref(r, page);
    NVM_STORE(&p->end_free, (uint64_t)c->per_page);
    NVM_ADD(&c->pages, 1);
    return do_part_pop(c, p);
}

/* ---- Draining a page ------------------------------------------------------
 * page_reuse hands over only pages without a live slot.  With mixed sizes
 * the small classes keep many pages partly used, so a class that needs a
 * page may find none while NVM is far from full by bytes.  The server's
 * page mover then empties one page.  nvm_drain_begin picks, among classes
 * with more than one slot per page, the page with the fewest live bytes
 * whose live slots fit in the other free slots of its class, and takes its
 * free slots off its owner's stack, so that nothing is allocated there
 * again.  The mover copies each live tuple into a slot from
 * nvm_alloc_free_slot and frees the old one.  The free of the page's last
 * live slot makes it the ready page, which page_take hands to the next
 * class that needs a page.  One page drains at a time; its free slots are
 * a bitmap (drain_free) under the owner partition's lock.  A drain that
 * cannot finish is undone by nvm_drain_abort.
 */

static bool bit_get(const uint64_t *map, uint64_t i)
{
    return (map[i / 64] >> (i % 64)) & 1;
}

static void bit_set(uint64_t *map, uint64_t i)
{
    map[i / 64] |= 1ull << (i % 64);
}

/* Owner lock held: the page is empty; it is handed over as ready. */
static void do_drain_done(struct nvm_region *r, struct nvm_class *c,
                          uint64_t page)
{
    page_class_set(r, page, 0);
    NVM_SUB(&c->pages, 1);
    /* Release: the drain's bitmap and count, written under this owner's
     * lock, are done before the next drain (nvm_drain_begin, under another
     * owner's lock) resets them. */
    __atomic_store_n(&r->drain_page, NVM_NO_PAGE, __ATOMIC_RELEASE);
    NVM_ADD(&r->pages_drained, 1);
    /* Release: every access to the page's slots before its last free
     * (the page mover's reads among them) happens before its taker's
     * writes (ready_take). */
    __atomic_store_n(&r->ready_page, page, __ATOMIC_RELEASE);
}

/* Owner lock held: ref, a slot of the draining page, was freed. */
static void do_drain_freed(struct nvm_region *r, struct nvm_class *c,
                           uint64_t page, uint64_t ref, bool *ok)
{
    uint64_t i = (ref - nvm_page_ref(r, page)) / c->slot_size;
    assert(!bit_get(r->drain_free, i));     /* a double free */
    *ok = !bit_get(r->drain_free, i) && r->drain_live > 0;
    if (!*ok)
        return;
    bit_set(r->drain_free, i);
    if (--r->drain_live == 0)
        do_drain_done(r, c, page);
}

struct drain_pick {
    unsigned cls;
    uint64_t page;
    uint64_t live_bytes;
};

/* Owner lock held for page pg of class k (with nfree free slots, of
 * class_free in the class): a better pick than best? */
static void consider(const struct nvm_class *c, unsigned k, uint64_t pg,
                     uint64_t nfree, uint64_t class_free, bool spill,
                     struct drain_pick *best)
{
    uint64_t live = c->per_page - nfree;
    if (nfree == 0 || (!spill && class_free < nfree + live) ||
        live * c->slot_size >= best->live_bytes)
        return;
    best->cls = k;
    best->page = pg;
    best->live_bytes = live * c->slot_size;
}

/* q->lock and reuse_lock held: considers each page of class k owned by q
 * that has a free slot (on q's stack, or uncarved at q's end). */
static void do_pick_in(struct nvm_region *r, unsigned k, struct nvm_part *q,
                       uint64_t class_free, bool spill, struct drain_pick *best)
{
    const struct nvm_class *c = &r->classes[k];
    uint64_t end_pg = q->end_free > 0 ? page_of(r, q->end_ref) : NVM_NO_PAGE;
    for (uint64_t j = 0; j < q->nfree; j++)
        r->reuse_count[page_of(r, q->stack[j])]++;
    if (end_pg != NVM_NO_PAGE)
        r->reuse_count[end_pg] += (uint32_t)q->end_free;
    for (uint64_t j = 0; j <= q->nfree; j++) {
        uint64_t pg = j < q->nfree ? page_of(r, q->stack[j]) : end_pg;
        if (pg == NVM_NO_PAGE || r->reuse_count[pg] == 0)
            continue;
        consider(c, k, pg, r->reuse_count[pg], class_free, spill, best);
        r->reuse_count[pg] = 0;
    }
}

/* Takes the free slots of page pg (class k) off its owner's stack and end
 * and starts draining it.  False if it changed hands meanwhile. */
static bool drain_start(struct nvm_region *r, unsigned k, uint64_t pg)
{
    struct nvm_class *c = &r->classes[k];
    struct nvm_part *q = &c->parts[NVM_LOAD(&r->page_owner[pg])];
    uint64_t base = nvm_page_ref(r, pg), nfree = 0, n = 0;

    pthread_mutex_lock(&q->lock);
    if (NVM_LOAD(&r->page_class[pg]) != k) {
        pthread_mutex_unlock(&q->lock);
        return false;
    }
    memset(r->drain_free, 0, r->drain_words * sizeof(*r->drain_free));
    for (uint64_t j = 0; j < q->nfree; j++) {
        uint64_t ref = q->stack[j];
        if (page_of(r, ref) == pg) {
            bit_set(r->drain_free, (ref - base) / c->slot_size);
            nfree++;
        } else {
            q->stack[n++] = ref;
        }
    }
    NVM_STORE(&q->nfree, n);
    if (q->end_free > 0 && page_of(r, q->end_ref) == pg) {
        uint64_t first = (q->end_ref - base) / c->slot_size;
        for (uint64_t i = 0; i < q->end_free; i++)
            bit_set(r->drain_free, first + i);
        nfree += q->end_free;
        NVM_STORE(&q->end_free, 0);
    }
    q->owned -= c->per_page;
    r->drain_live = c->per_page - nfree;
    NVM_STORE(&r->drain_page, pg);
    if (r->drain_live == 0)
        do_drain_done(r, c, pg);
    pthread_mutex_unlock(&q->lock);
    return true;
}

bool nvm_drain_begin(struct nvm_region *r, unsigned need_cls, bool spill)
{
    if (__atomic_load_n(&r->drain_page, __ATOMIC_ACQUIRE) != NVM_NO_PAGE)
        return true;
    if (NVM_LOAD(&r->ready_page) != NVM_NO_PAGE ||
        pthread_mutex_trylock(&r->reuse_lock) != 0)
        return false;
    struct drain_pick best = { 0, NVM_NO_PAGE, UINT64_MAX };
    for (unsigned k = 1; k <= r->nclasses; k++) {
        struct nvm_class *c = &r->classes[k];
        if (k == need_cls || c->per_page < 2 || NVM_LOAD(&c->pages) == 0)
            continue;
        uint64_t class_free = 0;
        for (int i = 0; i < r->nparts; i++)
            class_free += NVM_LOAD(&c->parts[i].nfree) +
                          NVM_LOAD(&c->parts[i].end_free);
        if (class_free == 0)
            continue;
        for (int i = 0; i < r->nparts; i++) {
            struct nvm_part *q = &c->parts[i];
            pthread_mutex_lock(&q->lock);
            do_pick_in(r, k, q, class_free, spill, &best);
            pthread_mutex_unlock(&q->lock);
        }
    }
    bool started = best.page != NVM_NO_PAGE && drain_start(r, best.cls, best.page);
    pthread_mutex_unlock(&r->reuse_lock);
    return started;
}

bool nvm_in_drain(const struct nvm_region *r, uint64_t ref)
{
    uint64_t pg = NVM_LOAD(&r->drain_page);
    return pg != NVM_NO_PAGE && ref >= NVM_DATA_OFFSET && page_of(r, ref) == pg;
}

bool nvm_draining(const struct nvm_region *r)
{
    return NVM_LOAD(&r->drain_page) != NVM_NO_PAGE;
}

/* The draining page, its class and its owner partition (locked by the
 * caller, then rechecked); false when no page is draining. */
static bool drain_owner(struct nvm_region *r, uint64_t *pg,
                        struct nvm_class **c, struct nvm_part **q)
{
    *pg = NVM_LOAD(&r->drain_page);
    if (*pg == NVM_NO_PAGE)
        return false;
    unsigned k = NVM_LOAD(&r->page_class[*pg]);
    if (k == 0)
        return false;
    *c = &r->classes[k];
    *q = &(*c)->parts[NVM_LOAD(&r->page_owner[*pg])];
    return true;
}

size_t nvm_drain_live(struct nvm_region *r, uint64_t *refs, size_t cap)
{
    uint64_t pg;
    struct nvm_class *c;
    struct nvm_part *q;
    size_t n = 0;

    if (!drain_owner(r, &pg, &c, &q))
        return 0;
    pthread_mutex_lock(&q->lock);
    if (NVM_LOAD(&r->drain_page) == pg) {
        for (uint64_t i = 0; i < c->per_page && n < cap; i++)
            if (!bit_get(r->drain_free, i))
                refs[n++] = nvm_page_ref(r, pg) + i * c->slot_size;
    }
    pthread_mutex_unlock(&q->lock);
    return n;
}

bool nvm_drain_abort(struct nvm_region *r)
{
    uint64_t pg;
    struct nvm_class *c;
    struct nvm_part *q;
    bool ok = true;

    if (!drain_owner(r, &pg, &c, &q))
        return true;
    pthread_mutex_lock(&q->lock);
    if (NVM_LOAD(&r->drain_page) == pg) {
        ok = do_stack_reserve(r, q, q->owned + c->per_page,
                              r->npages * c->per_page);
        if (ok) {
            /* A slot the page mover copied out of still holds that copy,
             * and the page keeps its class: its head is zeroed before the
             * slot is handed out again, or a crash scan could take it for
             * a live tuple long after its key changed.  (A completed drain
             * needs none of this: the page loses its class, then is wiped
             * when taken, page_wipe.) */
            size_t head = c->slot_size < NVM_SLOT_ALIGN ? c->slot_size : NVM_SLOT_ALIGN;
            for (uint64_t i = 0; i < c->per_page; i++) {
                if (!bit_get(r->drain_free, i))
                    continue;
                uint64_t ref = nvm_page_ref(r, pg) + i * c->slot_size;
                zero_persist(r, ref, head);
                q->stack[q->nfree++] = ref;
            }
            NVM_STORE(&q->nfree, q->nfree);
            q->owned += c->per_page;
            NVM_STORE(&r->drain_page, NVM_NO_PAGE);
        }
    }
    pthread_mutex_unlock(&q->lock);
    return ok;
}

/* ---- Exported ----------------------------------------------------------- */

static int part_index(const struct nvm_region *r, int partition)
{
    return (int)((unsigned)partition % (unsigned)r->nparts);
}

/* One slot from another partition's stack or end, p+1, p+2, ... */
static uint64_t steal(struct nvm_region *r, struct nvm_class *c, int part)
{
    for (int i = 1; i < r->nparts; i++) {
        struct nvm_part *q = &c->parts[(part + i) % r->nparts];
        if (NVM_LOAD(&q->nfree) == 0 && NVM_LOAD(&q->end_free) == 0)
            continue;               /* cheap skip; rechecked under the lock */
        pthread_mutex_lock(&q->lock);
        uint64_t ref = do_part_pop(c, q);
        pthread_mutex_unlock(&q->lock);
        if (ref != 0) {
            NVM_ADD(&c->steals, 1);
            return ref;
        }
    }
    return 0;
}

/* A slot of cls: from partition's free list or end, then (when grow) a new
 * page for it, then from the other partitions. */
static uint64_t alloc_in(struct nvm_region *r, unsigned cls, int partition,
                         bool grow)
{
    if (cls == 0 || cls > r->nclasses)
        return 0;
    struct nvm_class *c = &r->classes[cls];
    int part = part_index(r, partition);
    struct nvm_part *p = &c->parts[part];

    pthread_mutex_lock(&p->lock);
    uint64_t ref = do_part_pop(c, p);
    if (ref == 0 && grow)
        ref = do_part_grow(r, cls, part);
    pthread_mutex_unlock(&p->lock);
    if (ref == 0)
        ref = steal(r, c, part);
    if (ref == 0) {
        NVM_ADD(&c->fails, 1);
        return 0;
    }
    NVM_ADD(&c->used, 1);
    NVM_ADD(&r->bytes_used, c->slot_size);
    return ref;
}

uint64_t nvm_alloc_class(struct nvm_region *r, unsigned cls, int partition)
{
    return alloc_in(r, cls, partition, true);
}

uint64_t nvm_alloc_free_slot(struct nvm_region *r, unsigned cls, int partition)
{
    return alloc_in(r, cls, partition, false);
}

uint64_t nvm_alloc(struct nvm_region *r, size_t size, int partition)
{
    return nvm_alloc_class(r, nvm_class_of_size(r, size), partition);
}

static void do_drain_freed(struct nvm_region *r, struct nvm_class *c,
                           uint64_t page, uint64_t ref, bool *ok);

void nvm_free(struct nvm_region *r, uint64_t ref)
{
    if (ref == 0)
        return;
    unsigned cls = nvm_class_of_ref(r, ref);
    assert(cls != 0);
    if (cls == 0)
        return;
    struct nvm_class *c = &r->classes[cls];
    uint64_t page = page_of(r, ref);
    struct nvm_part *p = &c->parts[NVM_LOAD(&r->page_owner[page])];
    bool ok;

    pthread_mutex_lock(&p->lock);
    if (page == NVM_LOAD(&r->drain_page)) {
        do_drain_freed(r, c, page, ref, &ok);
    } else {
        assert(p->nfree < p->cap);  /* more frees than slots: a double free */
        ok = p->nfree < p->cap;
        if (ok) {
            p->stack[p->nfree] = ref;
            NVM_STORE(&p->nfree, p->nfree + 1);
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (ok) {
        NVM_SUB(&c->used, 1);
        NVM_SUB(&r->bytes_used, c->slot_size);
    }
}

unsigned nvm_class_of_size(const struct nvm_region *r, size_t size)
{
    unsigned lo = 1, hi = r->nclasses;

    if (size > r->classes[hi].slot_size)
        return 0;
    while (lo < hi) {               /* first class with slot_size >= size */
        unsigned mid = (lo + hi) / 2;
        if (r->classes[mid].slot_size >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

unsigned nvm_class_of_ref(const struct nvm_region *r, uint64_t ref)
{
    if (ref < NVM_DATA_OFFSET || ref % NVM_SLOT_ALIGN != 0)
        return 0;
    uint64_t page = (ref - NVM_DATA_OFFSET) / r->page_size;
    if (page >= r->npages)
        return 0;
    unsigned cls = NVM_LOAD(&r->page_class[page]);
    if (cls == 0)
        return 0;
    const struct nvm_class *c = &r->classes[cls];
    uint64_t in = ref - nvm_page_ref(r, page);
    if (in % c->slot_size != 0 || in / c->slot_size >= c->per_page)
        return 0;
    return cls;
}

uint64_t nvm_class_next(const struct nvm_region *r, unsigned cls, uint64_t ref,
                        bool *wrapped)
{
    if (cls == 0 || cls > r->nclasses || r->npages == 0)
        return 0;
    const struct nvm_class *c = &r->classes[cls];
    uint64_t page = 0, slot = 0;
    if (ref >= NVM_DATA_OFFSET) {
        page = (ref - NVM_DATA_OFFSET) / r->page_size;
        slot = (ref - nvm_page_ref(r, page)) / c->slot_size + 1;
    }
    /* At most one pass over every page, the starting one twice (its
     * slots before the cursor come last). */
    for (uint64_t n = 0; n <= r->npages; n++) {
        if (page >= r->npages) {
            page = 0;
            *wrapped = true;
        }
        if (slot < c->per_page && NVM_LOAD(&r->page_class[page]) == cls)
            return nvm_page_ref(r, page) + slot * c->slot_size;
        page++;
        slot = 0;
    }
    return 0;
}

unsigned nvm_nclasses(const struct nvm_region *r)
{
    return r->nclasses;
}

int nvm_partitions(const struct nvm_region *r)
{
    return r->nparts;
}

size_t nvm_class_slot_size(const struct nvm_region *r, unsigned cls)
{
    return cls == 0 || cls > r->nclasses ? 0 : r->classes[cls].slot_size;
}

size_t nvm_slot_size(const struct nvm_region *r, uint64_t ref)
{
    return nvm_class_slot_size(r, nvm_class_of_ref(r, ref));
}

uint64_t nvm_free_slots(const struct nvm_region *r, unsigned cls, int partition)
{
    if (cls == 0 || cls > r->nclasses)
        return 0;
    const struct nvm_part *p = &r->classes[cls].parts[part_index(r, partition)];
    return NVM_LOAD(&p->nfree) + NVM_LOAD(&p->end_free);
}

bool nvm_page_reusable(const struct nvm_region *r, unsigned cls)
{
    /* Only classes of one slot per page: there a free slot is a free page.
     * Elsewhere free slots may be spread over pages that all hold live
     * tuples (the page mover's case), and a false yes would stall. */
    for (unsigned k = 1; k <= r->nclasses; k++) {
        const struct nvm_class *c = &r->classes[k];
        if (k == cls || c->per_page != 1 || NVM_LOAD(&c->pages) == 0)
            continue;
        for (int i = 0; i < r->nparts; i++)
            if (NVM_LOAD(&c->parts[i].nfree) >= 1)
                return true;
    }
    return false;
}

uint64_t nvm_free_pages(const struct nvm_region *r)
{
    uint64_t used = NVM_LOAD(&r->next_page) + NVM_LOAD(&r->adopted_ahead);
    return (used < r->npages ? r->npages - used : 0) +
           (NVM_LOAD(&r->ready_page) != NVM_NO_PAGE);
}

void nvm_class_info(const struct nvm_region *r, unsigned cls,
                    struct nvm_class_info *out)
{
    memset(out, 0, sizeof(*out));
    if (cls == 0 || cls > r->nclasses)
        return;
    const struct nvm_class *c = &r->classes[cls];
    out->slot_size = c->slot_size;
    out->slots_per_page = c->per_page;
    out->pages = NVM_LOAD(&c->pages);
    out->slots_used = NVM_LOAD(&c->used);
    out->steals = NVM_LOAD(&c->steals);
    out->alloc_fails = NVM_LOAD(&c->fails);
    for (int i = 0; i < r->nparts; i++)
        out->slots_free += nvm_free_slots(r, cls, i);
}
