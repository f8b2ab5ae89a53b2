/*
 * bench/crypt-cost.c - what one sealed record costs: tac_crypt_seal,
 * tac_crypt_open and tac_crypt_peek (a key hint) on one thread, for a
 * record of LEN clear bytes (default 1010: a 1000 B value, "\r\n" and an
 * 8 B key, as bench/compare's data set).
 *
 * Build and run from the repository, after make:
 *   cc -O2 -I. -o bench/crypt-cost bench/crypt-cost.c libtaccore.a -lcrypto -lpthread
 *   head -c 32 /dev/urandom > /tmp/k && bench/crypt-cost /tmp/k [LEN]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tac/crypt.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s KEYFILE [LEN]\n", argv[0]);
        return 2;
    }
    if (!tac_crypt_load(argv[1]))
        return 1;
    size_t len = argc > 2 ? (size_t)atol(argv[2]) : 1010;
    char aad[40] = { 1 };
    char *clear = malloc(len), *sealed = malloc(len + TAC_SEAL_BYTES), *out = malloc(len);
    if (clear == NULL || sealed == NULL || out == NULL)
        return 1;
    memset(clear, 'x', len);
    struct iovec in = { clear, len }, o = { out, len };
    const int n = 200000;
    double t0 = now();
    for (int i = 0; i < n; i++)
        tac_crypt_seal(aad, sizeof(aad), &in, 1, sealed);
    double t1 = now();
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += tac_crypt_open(aad, sizeof(aad), sealed, len, &o, 1);
    double t2 = now();
    char key[16];
    for (int i = 0; i < n; i++)
        tac_crypt_peek(sealed, len, sizeof(key) < len ? sizeof(key) : len, key);
    double t3 = now();
    printf("len %zu: seal %.0f ns, open %.0f ns, key hint %.0f ns (%d of %d opened)\n",
           len, (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9, (t3 - t2) / n * 1e9, ok, n);
    return ok == n ? 0 : 1;
}
