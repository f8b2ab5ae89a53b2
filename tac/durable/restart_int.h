/*
 * tac/restart_int.h - what the files of a restart share: the state file's
 * format (header, records, sections), the state of the restart under way,
 * and the helpers that link a recovered item back.  The files: restart.c
 * (the start: which state to use, the restore thread), restart_save.c (a
 * graceful stop), crash_scan.c (the scan and the DRAM log replay after a
 * crash) and restart_common.c (what they all use).  Not for use outside
 * them.
 */
#ifndef TAC_RESTART_INT_H
#define TAC_RESTART_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/items.h"
#include "base/util.h"


#define RS_MAGIC "TACSTATE"
#define RS_VERSION 3u                /* 2: seq in records, key check;
                                        3: a lower tier's record names its
                                           key by fingerprint */
#define RS_HDR_SIZE 4096u
#define RS_CHUNK (1u << 20)         /* records are flushed in chunks of this */

struct rs_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;           /* sizeof(struct rs_header) */
    int64_t stop_time;              /* unix seconds at the stop */
    uint64_t last_cas, last_seq;
    uint64_t nvm_open_count;        /* 0: no NVM part */
    uint64_t nvm_capacity;
    uint64_t ssd_generation;        /* 0: no SSD part */
    uint64_t ssd_size, ssd_page_size, ssd_buf_size;
    uint64_t rec_off;               /* first record chunk */
    uint64_t nvm_off, nvm_count;    /* NVM section */
    uint64_t ssd_off, ssd_count;    /* SSD section: pages */
    uint64_t items[TIER_COUNT];     /* records, by tier */
    uint32_t nvm_crc, ssd_crc;      /* CRC32C of each section */
    uint8_t key_check[16];          /* tac_crypt_key_check(); zeros: no key */
    uint32_t hashpower;             /* the index's log2 buckets; 0: not said */
    uint32_t checksum;              /* CRC32C of every byte before it */
};

struct rs_page {
    uint32_t page;
    uint16_t version;
    uint16_t pad;
    uint64_t seq;
    uint64_t live;
};

struct rs_rec {
    uint8_t tier;                   /* enum item_tier */
    uint8_t nkey;
    uint16_t it_flags;              /* RS_KEEP_FLAGS */
    uint32_t flags;
    uint32_t nbytes;
    uint32_t read_count;            /* the access field's readCount */
    int64_t exptime;                /* unix seconds; 0: never */
    uint64_t idle;                  /* seconds since the last access */
    uint64_t cas;
    uint64_t ref;                   /* NVM: slot | class; SSD: reference */
    uint64_t seq;                   /* NVM, SSD: the tuple's write sequence */
};
/* A record is followed by its key and, in DRAM, its value.  A lower
 * tier's record has, in place of the key, the key's fingerprint
 * (item_key_fp(), ITEM_FP_BYTES): all its meta tuple keeps. */
static inline size_t rs_key_len(const struct rs_rec *r)
{
    return r->tier == TIER_DRAM ? r->nkey : ITEM_FP_BYTES;
}

/* With a tier key the records of a chunk are sealed (tac/crypt.h): len
 * clear bytes become len bytes of ciphertext and TAC_SEAL_BYTES of nonce
 * and tag, with len and count as authenticated data; crc covers them all. */
struct rs_chunk {
    uint32_t len;                   /* bytes of records after this; 0 ends */
    uint32_t count;
    uint32_t crc;                   /* CRC32C of those bytes */
    uint32_t pad;
};
#define RS_CHUNK_AAD offsetof(struct rs_chunk, crc)

/* Flags a record keeps.  ITEM_WAS_LOWER among them: a DRAM item brought up
 * from NVM or SSD may still have its version there, and an overwrite or
 * delete after the restart must record an invalidation for it, or a crash
 * would bring that copy back. */
#define RS_KEEP_FLAGS (ITEM_FETCHED | ITEM_ACTIVE | ITEM_TOKEN_SENT | ITEM_STALE | \
                       ITEM_WAS_LOWER | ITEM_CAPPED)

enum rs_state { RS_OFF, RS_NONE, RS_RUNNING, RS_DONE, RS_FAILED };

struct restart_state {
    /* Progress, read by `stats` (relaxed atomics). */
    int state;
    uint64_t items, bytes, dropped, stale, refused;
    uint64_t started_ns, took_ns;

    /* After a crash: the scan's copies of the journal's maps, and the
     * write sequence of each key linked so far (newest wins). */
    bool crash;
    uint8_t *nvm_map;
    uint32_t *ssd_table;
    /* The seq linked so far per key hash, one table per item lock stripe,
     * under that stripe's lock (the scan threads and the replay). */
    struct util_u64map *seqs;
    bool meta_short;                    /* atomic: DRAM ran out for meta tuples */
    uint64_t scan_next;                 /* atomic: the next page to scan */
    uint64_t ssd_t0, ssd_t1, ssd_bytes; /* atomic: the SSD part's span and reads */

    /* The file being read, and what of it may be used. */
    int fd;
    struct rs_header hdr;
    bool nvm_ok, ssd_ok;
    /* With -o dram_log: the state being restored, kept as FILE.restoring
     * until the restore is over (see "Leftover state" below); NULL when
     * none is in use. */
    char *left;
    pthread_t thread;
    bool pending;                   /* prepared: the thread has work */
    bool thread_running;
    bool lower_done;                /* a graceful restore reached its DRAM records */
    bool stopping;                  /* atomic: the server stops; no more waits */

    /* A stop in progress. */
    char *path, *tmp;
    FILE *out;
    bool out_failed;
    struct rs_header save;
    char *chunk;
    size_t chunk_len;
    uint32_t chunk_count;
    uint64_t *nvm_refs;
    size_t nvm_n, nvm_cap;
    uint64_t *ssd_live;             /* [npages] */
    uint64_t off;                   /* bytes written so far */
    uint64_t lost;                  /* items not saved: unwritten or damaged */
    bool nvm_anon;                  /* NVM is anonymous memory (numa:N) */
    unsigned next_part;
};

/* The one restart under way (restart_common.c). */
extern struct restart_state rs;

/* An item holding only what item_alloc_meta copies: metadata, and the
 * key's fingerprint (rs_meta_for gives it the compact layout). */
union meta_src {
    item it;
    char raw[sizeof(item) + KEY_MAX_LENGTH + 1];
};

/* restart_common.c */
char *rs_state_path(void);
uint32_t rs_header_crc(const struct rs_header *h);
bool rs_read_at(void *buf, size_t n, uint64_t off);
void rs_count(uint64_t *c);
bool rs_exptime_ahead(int64_t unix_exp, rel_time_t *out);
uint64_t rs_key_hashes(const char *key, size_t nkey, uint32_t *hv);
item *rs_meta_for(union meta_src *m, enum item_tier tier, uint64_t ref,
                  uint64_t fp, uint64_t seq);
int rs_link_back(item *it, const char *key, size_t nkey, uint32_t hv,
                 int part, uint64_t cas, uint32_t access, rel_time_t t,
                 uint16_t keep_flags);
uint64_t rs_seq_seen(uint64_t kh, uint32_t hv);
void rs_seq_set(uint64_t kh, uint32_t hv, uint64_t seq);
bool rs_seqs_init(uint64_t n);
void rs_seqs_free(void);
/* Test hooks (debug builds; see restart_common.c). */
void rs_debug_restore_init(void);
void rs_debug_restore_delay(void);
void rs_debug_scan_delay(void);
bool rs_debug_scan_no_journal(void);
bool rs_debug_replay_no_room(const char *key, size_t nkey);

/* crash_scan.c */
bool rs_crash_prepare(void);
void rs_scan_reserve(void);
void rs_crash_scan(void);
void rs_replay_record(const char *tuple, void *arg);

#endif
