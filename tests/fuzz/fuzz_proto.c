/*
 * fuzz_proto.c - libFuzzer harness for the request parsers, in process.
 *
 * Built three times (tests/fuzz/build.sh): FUZZ_PROTO_TEXT (classic text
 * commands), FUZZ_PROTO_META (meta commands) and FUZZ_PROTO_BINARY.  The
 * parser code is the same for text and meta; the three differ in their
 * seed corpus, dictionary and custom mutator, so that each protocol gets
 * its own run and its own report.
 *
 * How an input runs.  The DRAM engine is initialised once (-m 8, no lower
 * tier).  Each input becomes one client connection: a socketpair whose one
 * end is a real conn (conn_new on a worker struct with its own event base)
 * and whose other end the harness writes the input into and then shuts
 * for writing.  conn_drive() runs the state machine exactly as a worker
 * does, and the harness drains whatever is answered, until the connection
 * closes (end of input, quit, or a protocol error).  So every length check,
 * swallow, nread and response path runs as on the network.
 *
 * Structure-aware mutation.  Random bytes rarely make a coherent binary
 * header with a chosen length, or a meta flag with a boundary number.
 * LLVMFuzzerCustomMutator therefore rewrites, half of the time, a binary
 * header's magic, opcode, key/extras/body lengths and CAS with boundary
 * values (0, 1, the real lengths, 2^31-1, 2^32-1, -I +- 1 ...), or a text
 * token with a boundary number (-1, 0, 2^31, 2^32, 2^63, 2^64, 30 digits)
 * or a meta flag; the other half is libFuzzer's own mutation.
 *
 * Invariant.  Canary items stored at start (keys no input can guess) must
 * read back intact every 256 inputs; flush_all and shutdown are off.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "items.h"
#include "memcached.h"
#include "stats.h"
#include "thread.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static struct worker w;
static bool closed;
static unsigned long runs;

#define NCANARY 4
static char canary_key[NCANARY][48];
static char canary_val[NCANARY][64];

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

static void check_canaries(void)
{
    for (int i = 0; i < NCANARY; i++) {
        char req[128], out[256];
        size_t len = 0;
        int n = snprintf(req, sizeof(req), "get %s\r\n", canary_key[i]);
        run_conn((const uint8_t *)req, (size_t)n, out, sizeof(out) - 1, &len);
        out[len] = '\0';
        char want[256];
        snprintf(want, sizeof(want), "VALUE %s 0 %zu\r\n%s\r\nEND\r\n",
                 canary_key[i], strlen(canary_val[i]), canary_val[i]);
        if (strcmp(out, want) != 0) {
            fprintf(stderr, "canary %s damaged: %s\n", canary_key[i], out);
            abort();
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    evthread_use_pthreads();
    settings_init();
    settings.maxbytes = 8 * 1024 * 1024;
    settings.num_threads = 1;
    settings.flush_enabled = false;
    settings.shutdown_command = false;
    settings.verbose = 0;
    if (!settings_finalize())
        abort();
    clock_update();
    items_init();
    w.id = 0;
    w.partition = 0;
    w.base = event_base_new();
    if (w.base == NULL)
        abort();
    pthread_mutex_init(&w.queue_lock, NULL);
    conn_set_close_hook(on_close);
    for (int i = 0; i < NCANARY; i++) {
        snprintf(canary_key[i], sizeof(canary_key[i]),
                 "zq7canary%02d-%08x%08x", i, (unsigned)random(), (unsigned)random());
        snprintf(canary_val[i], sizeof(canary_val[i]), "canary-value-%d-%08x", i,
                 (unsigned)random());
        char req[256];
        int n = snprintf(req, sizeof(req), "set %s 0 0 %zu\r\n%s\r\n", canary_key[i],
                         strlen(canary_val[i]), canary_val[i]);
        run_conn((const uint8_t *)req, (size_t)n, NULL, 0, NULL);
    }
    check_canaries();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* `verbosity` would make every later run print each command. */
    __atomic_store_n(&settings.verbose, 0, __ATOMIC_RELAXED);
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

#ifdef FUZZ_PROTO_BINARY
static const uint8_t opcodes[] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
    0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
    0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x20, 0x21, 0x22, 0xff,
};

static uint32_t boundary32(uint64_t *s, uint32_t real)
{
    static const uint32_t v[] = { 0, 1, 2, 7, 8, 20, 24, 250, 251, 255, 256,
                                  65535, 1048574, 1048575, 1048576, 1048577,
                                  0x7fffffffu, 0x80000000u, 0xfffffffdu,
                                  0xfffffffeu, 0xffffffffu };
    uint64_t r = rng_next(s);
    if (r % 4 == 0)
        return real + (uint32_t)(r >> 8) % 5 - 2;
    return v[(r >> 8) % (sizeof(v) / sizeof(v[0]))];
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Rewrites one field of one request header on purpose. */
static size_t mutate_structure(uint8_t *data, size_t size, size_t max, uint64_t *s)
{
    size_t hdrs[64], n = 0;
    for (size_t pos = 0; pos + 24 <= size && n < 64;) {
        hdrs[n++] = pos;
        uint32_t body = (uint32_t)data[pos + 8] << 24 | (uint32_t)data[pos + 9] << 16 |
                        (uint32_t)data[pos + 10] << 8 | data[pos + 11];
        size_t left = size - pos - 24;
        pos += 24 + (body < left ? body : left);
    }
    if (n == 0) {
        if (max < 24)
            return size;
        memset(data, 0, 24);
        data[0] = 0x80;
        data[1] = opcodes[rng_next(s) % sizeof(opcodes)];
        return size < 24 ? 24 : size;
    }
    uint8_t *h = data + hdrs[rng_next(s) % n];
    uint32_t keylen = (uint32_t)h[2] << 8 | h[3], extlen = h[4];
    switch (rng_next(s) % 6) {
    case 0: h[0] = 0x80; break;
    case 1: h[1] = opcodes[rng_next(s) % sizeof(opcodes)]; break;
    case 2: put16(h + 2, boundary32(s, keylen)); break;
    case 3: h[4] = (uint8_t)boundary32(s, extlen); break;
    case 4: put32(h + 8, boundary32(s, keylen + extlen)); break;
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
    "999999999999999999999999999999", "+1", "-0", "0x10", "",
};
#ifdef FUZZ_PROTO_META
static const char flags[] = "bcfhklmnoqstuvCEFIMNOPRSTZ";
#endif

/* Replaces one space-separated token with a boundary number, or (meta)
 * with a flag carrying one; or repeats one line. */
static size_t mutate_structure(uint8_t *data, size_t size, size_t max, uint64_t *s)
{
    size_t starts[256], ends[256], n = 0;
    for (size_t i = 0; i < size && n < 256;) {
        while (i < size && (data[i] == ' ' || data[i] == '\r' || data[i] == '\n'))
            i++;
        if (i >= size)
            break;
        starts[n] = i;
        while (i < size && data[i] != ' ' && data[i] != '\r' && data[i] != '\n')
            i++;
        ends[n++] = i;
    }
    if (n == 0)
        return size;
    size_t t = rng_next(s) % n;
    char repl[64];
    const char *num = numbers[rng_next(s) % (sizeof(numbers) / sizeof(numbers[0]))];
#ifdef FUZZ_PROTO_META
    if (rng_next(s) % 2 && t > 0)
        snprintf(repl, sizeof(repl), "%c%s", flags[rng_next(s) % (sizeof(flags) - 1)], num);
    else
#endif
        snprintf(repl, sizeof(repl), "%s", num);
    size_t rlen = strlen(repl), olen = ends[t] - starts[t];
    if (size - olen + rlen > max)
        return size;
    memmove(data + starts[t] + rlen, data + ends[t], size - ends[t]);
    memcpy(data + starts[t], repl, rlen);
    return size - olen + rlen;
}
#endif

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    if (rng_next(&s) % 2 == 0)
        return LLVMFuzzerMutate(data, size, max_size);
    size = LLVMFuzzerMutate(data, size, max_size);
    return mutate_structure(data, size, max_size, &s);
}
