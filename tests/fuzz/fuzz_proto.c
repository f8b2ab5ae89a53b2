/*
 * fuzz_proto.c - libFuzzer harness for the request parsers, in process.
 *
 * Built three times (tests/fuzz/build.sh): FUZZ_PROTO_TEXT (classic text
 * commands), FUZZ_PROTO_META (meta commands) and FUZZ_PROTO_BINARY.  The
 * parser code is the same for text and meta; the three differ in their
 * seed corpus, dictionary and custom mutator, so that each protocol gets
 * its own run and its own report.
 *
 * How an input runs.  The DRAM engine is initialised once (-m 128, no lower
 * tier, no background threads).  Each input becomes one client connection:
 * a socketpair whose one end is a real conn (conn_new on a worker struct
 * with its own event base) and whose other end the harness writes the
 * input into and then shuts for writing.  conn_drive() runs the state
 * machine exactly as a worker does, and the harness drains whatever is
 * answered, until the connection closes (end of input, quit, or a protocol
 * error).  So every length check, swallow, nread and response path runs as
 * on the network.  A socketpair rather than a hand-filled rbuf: conn.c
 * reads values straight from the socket into the item, and that path is
 * where a wrong length does its damage.
 *
 * Item bounds under ASan.  Items live in slab chunks cut from 1 MB pages,
 * so ASan alone sees no overrun of an item into the rest of its chunk or
 * the next one (the 4 GB binary body length wrote its value past an item
 * allocated with no room for one, and only crashed much later).  The harness links with
 * --wrap=item_alloc,slabs_alloc_ex,slabs_free (build.sh): an item handed
 * out by item_alloc has the bytes of its chunk past ITEM_ntotal poisoned,
 * and a chunk is unpoisoned whole when it comes from or goes back to the
 * free list.  An overrun is then reported by the input that makes it.
 * Only the parsers' calls are wrapped (calls inside items.c are not); the
 * items those make are unpoisoned, never wrongly poisoned.  A chunk reused
 * straight from the LRU tail (eviction, reclaim) would keep its old
 * item's poison while item_alloc writes the new key into it, so the
 * engine is never let run that full: before an input, if fewer pages are
 * left under -m than the input could need (one per class, plus one per 4
 * KB of input), every item is dropped (items_init) and the canaries are
 * stored again.  An input of n bytes makes at most about n/4 items, and a
 * page of the smallest class holds over 10000, so an input needs at most
 * one new page per class unless it is hundreds of KB long.
 *
 * Structure-aware mutation.  Random bytes rarely make a coherent binary
 * header with a chosen length, or a meta flag with a boundary number.
 * LLVMFuzzerCustomMutator therefore, half of the time, changes the input
 * on purpose: in a binary header the magic, the opcode (every valid one),
 * key/extras/body lengths set to boundary values (0, 1, the real lengths
 * +-2, 2^31-1, 2^32-2, 2^32-1, -I +- 1 ...) or made coherent again, the
 * CAS, or a whole valid request appended; in a text or meta line a token
 * set to a boundary number (-1, 0, 2^31, 2^32, 2^63, 2^64, 30 digits),
 * the command word swapped, a value's byte count made to match its data,
 * noreply toggled, or (meta) a flag added, dropped, repeated or given a
 * boundary number and the flags shuffled.  The other half is libFuzzer's
 * own mutation.  One mutation in 64 appends one key repeated to fill the
 * input (append_repeats).
 *
 * Invariant.  Canary items stored at start must read back intact every 256
 * inputs unless an input replaced or deleted them as a client may (their
 * CAS tells); flush_all and shutdown are off.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <sanitizer/asan_interface.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/conn.h"
#include "engine/items.h"
#include "proto/proto_bin.h"
#include "proto/proto_text.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "net/thread.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static struct worker w;
static bool closed;
static unsigned long runs;

#define NCANARY 4
static char canary_key[NCANARY][48];
static char canary_val[NCANARY][64];
static unsigned long long canary_cas[NCANARY];

/* ---- Item bounds for ASan (see the top comment) ------------------------- */

item *__real_item_alloc(const char *key, size_t nkey, uint32_t flags,
                        rel_time_t exptime, size_t nbytes, int partition);
void *__real_slabs_alloc_ex(unsigned int clsid, int partition, bool reserved);
void __real_slabs_free(void *ptr, unsigned int clsid, int partition);

item *__wrap_item_alloc(const char *key, size_t nkey, uint32_t flags,
                        rel_time_t exptime, size_t nbytes, int partition)
{
    item *it = __real_item_alloc(key, nkey, flags, exptime, nbytes, partition);
    if (it != NULL && !(it->it_flags & ITEM_TRANSIENT)) {
        size_t chunk = slabs_chunk_size(it->slabs_clsid);
        size_t used = ITEM_ntotal(it);
        ASAN_UNPOISON_MEMORY_REGION(it, chunk);
        ASAN_POISON_MEMORY_REGION((char *)it + used, chunk - used);
    }
    return it;
}

void *__wrap_slabs_alloc_ex(unsigned int clsid, int partition, bool reserved)
{
    void *p = __real_slabs_alloc_ex(clsid, partition, reserved);
    if (p != NULL)
        ASAN_UNPOISON_MEMORY_REGION(p, slabs_chunk_size(clsid));
    return p;
}

void __wrap_slabs_free(void *ptr, unsigned int clsid, int partition)
{
    ASAN_UNPOISON_MEMORY_REGION(ptr, slabs_chunk_size(clsid));
    __real_slabs_free(ptr, clsid, partition);
}

/* ---- One connection ------------------------------------------------------ */

static void on_close(void)
{
    closed = true;
}

static void drain(int fd, char *out, size_t cap, size_t *len)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return;
        if (out != NULL && *len < cap) {
            size_t k = (size_t)n < cap - *len ? (size_t)n : cap - *len;
            memcpy(out + *len, buf, k);
            *len += k;
        }
    }
}

/* Runs one connection over `data`; the answer's first `cap` bytes go to
 * out (if given). */
static void run_conn(const uint8_t *data, size_t size, char *out, size_t cap,
                     size_t *outlen)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    size_t len0 = 0;
    if (outlen == NULL)
        outlen = &len0;
    *outlen = 0;
    closed = false;
    conn *c = conn_new(sv[0], TRANSPORT_UNIX, &w);
    if (c == NULL)
        abort();
    size_t off = 0;
    bool shut = false;
    /* Bounded: every round either moves input bytes or output bytes, or
     * the connection has closed. */
    for (int round = 0; round < 100000 && !closed; round++) {
        if (off < size) {
            ssize_t n = write(sv[1], data + off, size - off);
            if (n > 0)
                off += (size_t)n;
        } else if (!shut) {
            shutdown(sv[1], SHUT_WR);
            shut = true;
        }
        conn_drive(c);
        if (closed)
            break;
        drain(sv[1], out, cap, outlen);
        /* A connection parked on nothing that is not reading would spin:
         * all it can wait for here is the socket. */
        event_base_loop(w.base, EVLOOP_NONBLOCK);
    }
    if (!closed)
        conn_close(c);          /* still waiting: end it as a client would */
    drain(sv[1], out, cap, outlen);
    close(sv[1]);
}

/* ---- Canaries and engine state ------------------------------------------ */

/* Fetches canary i with gets: true if found, with its value (cut to
 * cap - 1 bytes) and CAS.  Any answer but a hit or a miss aborts. */
static bool fetch_canary(int i, char *val, size_t cap, unsigned long long *cas)
{
    char req[128], out[2048], key[64];
    size_t len = 0, nbytes;
    unsigned flags;
    int n = snprintf(req, sizeof(req), "gets %s\r\n", canary_key[i]);
    run_conn((const uint8_t *)req, (size_t)n, out, sizeof(out) - 1, &len);
    out[len] = '\0';
    if (strcmp(out, "END\r\n") == 0)
        return false;
    const char *eol = strstr(out, "\r\n");
    size_t hdr = eol != NULL ? (size_t)(eol - out) + 2 : 0;
    bool ok = eol != NULL &&
              sscanf(out, "VALUE %63s %u %zu %llu", key, &flags, &nbytes, cas) == 4 &&
              strcmp(key, canary_key[i]) == 0;
    /* A value an input made too long for out is only checked by its CAS. */
    if (ok && hdr + nbytes + 7 <= sizeof(out) - 1)
        ok = hdr + nbytes + 7 == len &&
             memcmp(out + hdr + nbytes, "\r\nEND\r\n", 7) == 0;
    if (!ok) {
        fprintf(stderr, "canary %s: bad answer: %s\n", canary_key[i], out);
        abort();
    }
    if (nbytes >= cap)
        nbytes = cap - 1;
    if (nbytes > len - hdr)
        nbytes = len - hdr;
    memcpy(val, out + hdr, nbytes);
    val[nbytes] = '\0';
    return true;
}

/* Stores canary i with a fresh value and records its CAS. */
static void store_canary(int i)
{
    snprintf(canary_val[i], sizeof(canary_val[i]), "canary-value-%d-%08x", i,
             (unsigned)random());
    char req[256], val[64];
    int n = snprintf(req, sizeof(req), "set %s 0 0 %zu\r\n%s\r\n", canary_key[i],
                     strlen(canary_val[i]), canary_val[i]);
    run_conn((const uint8_t *)req, (size_t)n, NULL, 0, NULL);
    if (!fetch_canary(i, val, sizeof(val), &canary_cas[i]) ||
        strcmp(val, canary_val[i]) != 0) {
        fprintf(stderr, "canary %s: not stored\n", canary_key[i]);
        abort();
    }
}

static void store_canaries(void)
{
    for (int i = 0; i < NCANARY; i++) {
        snprintf(canary_key[i], sizeof(canary_key[i]),
                 "zq7canary%02d-%08x%08x", i, (unsigned)random(), (unsigned)random());
        store_canary(i);
    }
}

/* A canary whose CAS is unchanged must hold its value.  libFuzzer can
 * learn a key from the comparisons it watches, so an input may delete or
 * overwrite a canary as a client may: a changed CAS or a miss stores the
 * canary again. */
static void check_canaries(void)
{
    for (int i = 0; i < NCANARY; i++) {
        char val[64];
        unsigned long long cas;
        if (!fetch_canary(i, val, sizeof(val), &cas) || cas != canary_cas[i]) {
            store_canary(i);
        } else if (strcmp(val, canary_val[i]) != 0) {
            fprintf(stderr, "canary %s damaged: %s, not %s\n", canary_key[i], val,
                    canary_val[i]);
            abort();
        }
    }
}

/* True if an input of `size` bytes could fill a class and so reuse a
 * chunk from the LRU tail (see the top comment). */
static bool engine_near_full(size_t size)
{
    size_t left = slabs_mem_limit() - slabs_mem_malloced();
    size_t need = (slabs_nclasses() + 2 + size / 4096) * (size_t)settings.slab_page_size;
    return left < need;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    evthread_use_pthreads();
    settings_init();
    settings.maxbytes = 128 * 1024 * 1024;
    settings.num_threads = 1;
    settings.flush_enabled = false;
    settings.shutdown_command = false;
    settings.verbose = 0;
    if (!settings_finalize())
        abort();
    clock_update();
    items_init();
    conn_set_protocol(PROTO_TEXT, &proto_text_ops);
    conn_set_protocol(PROTO_BINARY, &proto_bin_ops);
    w.id = 0;
    w.partition = 0;
    w.base = event_base_new();
    if (w.base == NULL)
        abort();
    pthread_mutex_init(&w.queue_lock, NULL);
    conn_set_close_hook(on_close);
    store_canaries();
    check_canaries();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* `verbosity` would make every later run print each command. */
    __atomic_store_n(&settings.verbose, 0, __ATOMIC_RELAXED);
    if (engine_near_full(size)) {
        check_canaries();
        items_init();
        store_canaries();
    }
    run_conn(data, size, NULL, 0, NULL);
    if (++runs % 256 == 0)
        check_canaries();
    return 0;
}

/* ---- Structure-aware mutation -------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(s, a) ((a)[rng_next(s) % NELEM(a)])

/* Replaces data[start, end) by repl; returns the new size, or `size` if
 * the result would not fit in max. */
static size_t replace_bytes(uint8_t *data, size_t size, size_t max,
                            size_t start, size_t end, const void *repl,
                            size_t rlen)
{
    if (size - (end - start) + rlen > max)
        return size;
    memmove(data + start + rlen, data + end, size - end);
    memcpy(data + start, repl, rlen);
    return size - (end - start) + rlen;
}

#ifdef FUZZ_PROTO_BINARY
/* Every opcode proto_bin.c knows, then some it does not (SASL, 0x25, 0xff). */
static const uint8_t opcodes[] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
    0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x23, 0x24,
    0x20, 0x21, 0x22, 0x25, 0xff,
};

/* A length near `real` or a boundary value: 0, small, key sizes, -I and
 * the 32-bit edges where a sum with a header length wraps. */
static uint32_t boundary32(uint64_t *s, uint32_t real)
{
    const uint32_t imax = (uint32_t)settings.item_size_max;
    const uint32_t v[] = { 0, 1, 2, 4, 7, 8, 20, 24, 250, 251, 255, 256,
                           65535, 65536, imax - 1, imax, imax + 1,
                           0x7fffffffu, 0x80000000u, 0xfffffffdu,
                           0xfffffffeu, 0xffffffffu };
    uint64_t r = rng_next(s);
    if (r % 3 == 0)
        return real + (uint32_t)(r >> 8) % 5 - 2;
    return v[(r >> 8) % NELEM(v)];
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* The extras length proto_bin.c expects for op. */
static uint8_t extlen_of(uint8_t op)
{
    switch (op) {
    case 0x01: case 0x02: case 0x03: case 0x11: case 0x12: case 0x13: return 8;
    case 0x05: case 0x06: case 0x15: case 0x16: return 20;
    case 0x08: case 0x18: case 0x1b: case 0x1c: case 0x1d: case 0x1e:
    case 0x23: case 0x24: return 4;
    default: return 0;
    }
}

/* A well-formed request of a random opcode: coherent lengths, a key from
 * a small set (so requests meet each other's items), a short value. */
static size_t make_request(uint8_t *out, uint64_t *s)
{
    uint8_t op = PICK(s, opcodes);
    uint8_t ext = extlen_of(op);
    uint8_t key[2] = { 'k', (uint8_t)('0' + rng_next(s) % 4) };
    size_t nkey = (op == 0x07 || op == 0x08 || op == 0x0a || op == 0x0b ||
                   op == 0x17 || op == 0x18 || op == 0x1b || op == 0x10) ? 0 : 2;
    size_t nval = 0;
    if (op == 0x01 || op == 0x02 || op == 0x03 || op == 0x11 || op == 0x12 ||
        op == 0x13 || op == 0x0e || op == 0x0f || op == 0x19 || op == 0x1a)
        nval = rng_next(s) % 16;
    memset(out, 0, 24 + ext);
    out[0] = 0x80;
    out[1] = op;
    put16(out + 2, (uint32_t)nkey);
    out[4] = ext;
    put32(out + 8, (uint32_t)(ext + nkey + nval));
    put32(out + 12, (uint32_t)rng_next(s));
    for (size_t i = 0; i < ext; i++)
        out[24 + i] = (rng_next(s) % 4 == 0) ? (uint8_t)rng_next(s) : 0;
    memcpy(out + 24 + ext, key, nkey);
    for (size_t i = 0; i < nval; i++)
        out[24 + ext + nkey + i] = (uint8_t)('a' + i);
    return 24 + ext + nkey + nval;
}

/* Rewrites one field of one request header on purpose, or appends a
 * well-formed request. */
static size_t mutate_structure(uint8_t *data, size_t size, size_t max, uint64_t *s)
{
    size_t hdrs[64], n = 0;
    for (size_t pos = 0; pos + 24 <= size && n < 64;) {
        hdrs[n++] = pos;
        uint32_t body = get32(data + pos + 8);
        size_t left = size - pos - 24;
        pos += 24 + (body < left ? body : left);
    }
    uint64_t what = rng_next(s) % 9;
    if (n == 0 || what == 8) {
        uint8_t req[24 + 20 + 2 + 16];
        size_t len = make_request(req, s);
        return replace_bytes(data, size, max, size, size, req, len);
    }
    size_t at = hdrs[rng_next(s) % n];
    uint8_t *h = data + at;
    uint32_t keylen = (uint32_t)h[2] << 8 | h[3], extlen = h[4];
    switch (what) {
    case 0: h[0] = 0x80; break;
    case 1:
        h[1] = PICK(s, opcodes);
        if (rng_next(s) % 2)
            h[4] = extlen_of(h[1]);
        break;
    case 2: put16(h + 2, boundary32(s, keylen)); break;
    case 3: h[4] = (uint8_t)boundary32(s, extlen); break;
    case 4: case 5: put32(h + 8, boundary32(s, keylen + extlen)); break;
    case 6: {
        /* Coherent again: the body is what follows up to the input's end
         * or, at random, key + extras exactly. */
        size_t left = size - at - 24;
        put32(h + 8, rng_next(s) % 2 ? (uint32_t)left : keylen + extlen);
        break;
    }
    default:
        for (int i = 16; i < 24; i++)
            h[i] = (uint8_t)rng_next(s);
        break;
    }
    return size;
}
#else
static const char *const numbers[] = {
    "-1", "0", "1", "2", "-2147483648", "2147483647", "2147483648",
    "4294967295", "4294967296", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", "18446744073709551616", "1048576", "1048577",
    "1048575", "2592000", "2592001", "-9223372036854775808",
    "999999999999999999999999999999", "+1", "-0", "0x10", "1e3", " ", "",
};

#define MAX_TOK 24

/* One line of the input split at spaces; token MAX_TOK is a new one the
 * mutation makes. */
struct line {
    size_t start, end;          /* the line in data, without its \r\n */
    size_t n;                   /* tokens found */
    const char *tok[MAX_TOK + 1];
    size_t len[MAX_TOK + 1];
};

/* Picks one line of data at random and splits it at spaces. */
static bool pick_line(const uint8_t *data, size_t size, uint64_t *s, struct line *l)
{
    size_t starts[128], nl = 0;
    for (size_t i = 0; i < size && nl < NELEM(starts); i++)
        if (i == 0 || data[i - 1] == '\n')
            starts[nl++] = i;
    if (nl == 0)
        return false;
    l->start = starts[rng_next(s) % nl];
    size_t e = l->start;
    while (e < size && data[e] != '\n')
        e++;
    if (e > l->start && data[e - 1] == '\r')
        e--;
    l->end = e;
    l->n = 0;
    for (size_t i = l->start; i < e && l->n < MAX_TOK;) {
        while (i < e && data[i] == ' ')
            i++;
        if (i >= e)
            break;
        l->tok[l->n] = (const char *)data + i;
        size_t j = i;
        while (j < e && data[j] != ' ')
            j++;
        l->len[l->n++] = j - i;
        i = j;
    }
    return l->n > 0;
}

/* Writes the line's tokens, in the order `order`, into out. */
static size_t join(const struct line *l, const size_t *order, size_t n,
                   char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = l->len[order[i]];
        if (o + k + 1 > cap)
            break;
        if (i > 0)
            out[o++] = ' ';
        memcpy(out + o, l->tok[order[i]], k);
        o += k;
    }
    return o;
}

/* Length of the line after the one ending at `end` (a value's data). */
static bool next_line_len(const uint8_t *data, size_t size, size_t end, size_t *len)
{
    while (end < size && data[end] != '\n')
        end++;
    if (end >= size)
        return false;
    size_t ds = end + 1, de = ds;
    while (de < size && data[de] != '\n')
        de++;
    if (de > ds && data[de - 1] == '\r')
        de--;
    *len = de - ds;
    return true;
}

#ifdef FUZZ_PROTO_META
static const char *const commands[] = { "mg", "ms", "md", "ma", "mn", "me" };
static const char flags[] = "bcfhklmnoqstuvCDEFIJMNOPRSTZ";
static const char *const modes[] = { "MS", "ME", "MA", "MP", "MR", "MI", "MD",
                                     "M+", "M-", "MX", "M" };
#define NCASES 6
#define COUNT_TOKEN 2           /* ms <key> <datalen> */

/* A flag token: a mode, a flag letter alone, or one with a boundary number. */
static size_t make_flag(char *out, size_t cap, uint64_t *s)
{
    switch (rng_next(s) % 4) {
    case 0: return (size_t)snprintf(out, cap, "%s", PICK(s, modes));
    case 1: return (size_t)snprintf(out, cap, "%c", flags[rng_next(s) % (sizeof(flags) - 1)]);
    default:
        return (size_t)snprintf(out, cap, "%c%s", flags[rng_next(s) % (sizeof(flags) - 1)],
                                PICK(s, numbers));
    }
}

/* Meta only: flags shuffled, added, repeated, dropped or renumbered.
 * Flags start after the key, and after the data length for ms. */
static size_t mutate_flags(struct line *l, size_t *order, size_t n, char *extra,
                           size_t cap, size_t *nextra, int what, uint64_t *s)
{
    size_t first = l->n > 2 && l->len[0] == 2 && memcmp(l->tok[0], "ms", 2) == 0 ? 3 : 2;
    if (what == 3) {
        for (size_t i = n; i > first + 1; i--) {
            size_t j = first + rng_next(s) % (i - first);
            size_t x = order[i - 1];
            order[i - 1] = order[j];
            order[j] = x;
        }
        return n;
    }
    if (what == 4) {
        if (n >= MAX_TOK)
            return n;
        if (rng_next(s) % 3 == 0 && l->n > first) {
            order[n++] = first + rng_next(s) % (l->n - first);
        } else {
            *nextra = make_flag(extra, cap, s);
            order[n++] = MAX_TOK;
        }
        return n;
    }
    if (l->n <= first)
        return n;
    size_t t = first + rng_next(s) % (l->n - first);
    if (rng_next(s) % 2) {
        memmove(order + t, order + t + 1, (n - t - 1) * sizeof(order[0]));
        return n - 1;
    }
    *nextra = (size_t)snprintf(extra, cap, "%c%s", l->tok[t][0], PICK(s, numbers));
    order[t] = MAX_TOK;
    return n;
}
#else
static const char *const commands[] = {
    "get", "gets", "gat", "gats", "set", "add", "replace", "append", "prepend",
    "cas", "incr", "decr", "delete", "touch", "stats", "version", "verbosity",
};
#define NCASES 4
#define COUNT_TOKEN 4           /* set <key> <flags> <exptime> <bytes> */
#endif

/* Changes one line on purpose (see the top comment). */
static size_t mutate_structure(uint8_t *data, size_t size, size_t max, uint64_t *s)
{
    struct line l;
    if (!pick_line(data, size, s, &l))
        return size;
    size_t order[MAX_TOK + 1], n = l.n, nextra = 0, count;
    for (size_t i = 0; i < l.n; i++)
        order[i] = i;
    char extra[64];
    int what = (int)(rng_next(s) % NCASES);
    switch (what) {
    case 0:                     /* a boundary number for any token */
        nextra = (size_t)snprintf(extra, sizeof(extra), "%s", PICK(s, numbers));
        order[rng_next(s) % l.n] = MAX_TOK;
        break;
    case 1:                     /* another command word */
        nextra = (size_t)snprintf(extra, sizeof(extra), "%s", PICK(s, commands));
        order[0] = MAX_TOK;
        break;
    case 2:                     /* the byte count matches the next line */
        if (COUNT_TOKEN >= l.n || !next_line_len(data, size, l.end, &count))
            return size;
        nextra = (size_t)snprintf(extra, sizeof(extra), "%zu", count);
        order[COUNT_TOKEN] = MAX_TOK;
        break;
    default:
#ifdef FUZZ_PROTO_META
        n = mutate_flags(&l, order, n, extra, sizeof(extra), &nextra, what, s);
#else
        /* noreply toggled */
        if (l.n > 1 && l.len[l.n - 1] == 7 && memcmp(l.tok[l.n - 1], "noreply", 7) == 0) {
            n--;
        } else if (n < MAX_TOK) {
            nextra = (size_t)snprintf(extra, sizeof(extra), "noreply");
            order[n++] = MAX_TOK;
        }
#endif
        break;
    }
    l.tok[MAX_TOK] = extra;
    l.len[MAX_TOK] = nextra;
    char out[2048];
    size_t olen = join(&l, order, n, out, sizeof(out));
    return replace_bytes(data, size, max, l.start, l.end, out, olen);
}
#endif

/*
 * Appends requests that name one key again and again, filling the room
 * left (run.sh's -max_len is 256 KB: a text get line of 65,600 or more
 * repeats, past a 16-bit count): a get/gets/gat line (text), pipelined mg
 * (meta) or GETKQ requests and a NOOP (binary).  A refcount raised once per
 * hit once wrapped at 65,536 on such a line.
 */
static size_t append_repeats(uint8_t *data, size_t size, size_t max, uint64_t *s)
{
    char key[3] = { 'k', (char)('0' + rng_next(s) % 4), '\0' };
    if (max <= size + 64)
        return size;
    size_t room = max - size - 32, n = 0;
    uint8_t *p = data + size;
#if defined(FUZZ_PROTO_BINARY)
    while (n + 26 + 24 <= room) {
        memset(p + n, 0, 24);
        p[n] = 0x80;
        p[n + 1] = 0x0d;                         /* GETKQ */
        put16(p + n + 2, 2);
        put32(p + n + 8, 2);
        memcpy(p + n + 24, key, 2);
        n += 26;
    }
    memset(p + n, 0, 24);
    p[n] = 0x80;
    p[n + 1] = 0x0a;                             /* NOOP */
    n += 24;
#elif defined(FUZZ_PROTO_META)
    static const char *const forms[] = { "mg %s v\r\n", "mg %s v k c f t\r\n",
                                         "mg %s q v\r\n" };
    const char *f = PICK(s, forms);
    char one[32];
    int len = snprintf(one, sizeof(one), f, key);
    while (n + (size_t)len + 4 <= room) {
        memcpy(p + n, one, (size_t)len);
        n += (size_t)len;
    }
    memcpy(p + n, "mn\r\n", 4);
    n += 4;
#else
    static const char *const cmds[] = { "get", "gets", "gat 0", "gats 100" };
    const char *cmd = PICK(s, cmds);
    n = (size_t)snprintf((char *)p, room, "%s", cmd);
    while (n + 3 + 2 <= room) {
        p[n++] = ' ';
        memcpy(p + n, key, 2);
        n += 2;
    }
    memcpy(p + n, "\r\n", 2);
    n += 2;
#endif
    return size + n;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    if (rng_next(&s) % 64 == 0)
        return append_repeats(data, size, max_size, &s);
    switch (rng_next(&s) % 4) {
    case 0: case 1:
        return LLVMFuzzerMutate(data, size, max_size);
    case 2:
        return mutate_structure(data, size, max_size, &s);
    default:
        size = LLVMFuzzerMutate(data, size, max_size);
        return mutate_structure(data, size, max_size, &s);
    }
}
