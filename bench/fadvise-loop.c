/*
 * fadvise-loop.c - keep a file out of the OS page cache while a benchmark
 * runs, so that memcached's extstore (which reads through the page cache)
 * is measured against the disk, not against spare RAM.
 *
 * Every INTERVAL_MS (default 5) it starts writeback of dirty pages
 * (sync_file_range SYNC_FILE_RANGE_WRITE, which does not wait) and then
 * drops the file's clean cached pages (posix_fadvise POSIX_FADV_DONTNEED).
 * Dirty pages cannot be dropped until written, so a page written by the
 * server stays cached for at most about one writeback plus one interval.
 *
 * usage: fadvise-loop FILE [INTERVAL_MS]   (runs until killed; waits for
 *        FILE to appear)
 * Built by bench/compare with `cc -O2`; single-threaded.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t done;

static void on_term(int sig)
{
    (void)sig;
    done = 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [INTERVAL_MS]\n", argv[0]);
        return 2;
    }
    long ms = argc > 2 ? atol(argv[2]) : 5;
    struct timespec iv = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    int fd = -1;
    unsigned long rounds = 0;
    while (!done) {
        if (fd < 0)
            fd = open(argv[1], O_RDONLY);
        if (fd >= 0) {
            sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            rounds++;
        }
        nanosleep(&iv, NULL);
    }
    if (fd >= 0)
        close(fd);
    fprintf(stderr, "fadvise-loop: %lu rounds\n", rounds);
    return 0;
}
