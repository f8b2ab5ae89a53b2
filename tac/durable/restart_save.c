/*
 * tac/restart_save.c - a graceful stop's state file: every open SSD buf is
 * written, the index walked once and each item saved as a record (a DRAM
 * item whole, an NVM or SSD item as a reference to its tuple), then the
 * NVM and SSD sections; the header is written last, once the tiers are
 * closed clean (tac_restart_commit).  The format and the rules: restart.c
 * and restart_int.h.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "base/crashpoint.h"
#include "engine/items.h"
#include "engine/lazy_lru.h"
#include "nvm/nvm.h"
#include "base/settings.h"
#include "ssd/ssd.h"
#include "base/stats.h"
#include "tac/crypt.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/durable/restart_int.h"
#include "tac/ssd_tier.h"
#include "tac/tuple.h"
#include "base/media_hdr.h"
#include "base/util.h"


/* ---- Saving (a graceful stop) ------------------------------------------- */

static void out_write(const void *p, size_t n)
{
    if (rs.out_failed || n == 0)
        return;
    if (fwrite(p, 1, n, rs.out) != n)
        rs.out_failed = true;
    rs.off += n;
}

/* Writes a chunk of count records: the n pieces of iov, len bytes. */
static void chunk_write(const struct iovec *iov, int n, size_t len, uint32_t count)
{
    struct rs_chunk c = { (uint32_t)len, count, 0, 0 };
    if (!tac_crypt_on()) {
        for (int i = 0; i < n; i++)
            c.crc = util_crc32c(c.crc, iov[i].iov_base, iov[i].iov_len);
        out_write(&c, sizeof(c));
        for (int i = 0; i < n; i++)
            out_write(iov[i].iov_base, iov[i].iov_len);
        return;
    }
    char *sealed = malloc(len + TAC_SEAL_BYTES);
    if (sealed == NULL) {
        rs.out_failed = true;
        return;
    }
    tac_crypt_seal(&c, RS_CHUNK_AAD, iov, n, sealed);
    c.crc = util_crc32c(0, sealed, len + TAC_SEAL_BYTES);
    out_write(&c, sizeof(c));
    out_write(sealed, len + TAC_SEAL_BYTES);
    free(sealed);
}

static void chunk_flush(void)
{
    if (rs.chunk_count == 0)
        return;
    struct iovec one = { rs.chunk, rs.chunk_len };
    chunk_write(&one, 1, rs.chunk_len, rs.chunk_count);
    rs.chunk_len = 0;
    rs.chunk_count = 0;
}

/* Appends one record; a record larger than a chunk gets a chunk of its own. */
static void chunk_add(const struct rs_rec *r, const char *key, const char *value)
{
    size_t vlen = r->tier == TIER_DRAM ? r->nbytes : 0;
    size_t klen = rs_key_len(r);
    size_t len = sizeof(*r) + klen + vlen;
    if (rs.chunk_len + len > RS_CHUNK)
        chunk_flush();
    if (len > RS_CHUNK || len > UINT32_MAX - sizeof(struct rs_chunk) - TAC_SEAL_BYTES) {
        struct iovec iov[3] = {
            { (void *)r, sizeof(*r) },
            { (void *)key, klen },
            { (void *)value, vlen },
        };
        chunk_write(iov, 3, len, 1);
        return;
    }
    memcpy(rs.chunk + rs.chunk_len, r, sizeof(*r));
    memcpy(rs.chunk + rs.chunk_len + sizeof(*r), key, klen);
    if (vlen > 0)
        memcpy(rs.chunk + rs.chunk_len + sizeof(*r) + klen, value, vlen);
    rs.chunk_len += len;
    rs.chunk_count++;
}

static bool nvm_ref_push(uint64_t v)
{
    if (rs.nvm_n == rs.nvm_cap) {
        size_t cap = rs.nvm_cap ? rs.nvm_cap * 2 : 4096;
        uint64_t *n = realloc(rs.nvm_refs, cap * sizeof(*n));
        if (n == NULL)
            return false;
        rs.nvm_refs = n;
        rs.nvm_cap = cap;
    }
    rs.nvm_refs[rs.nvm_n++] = v;
    return true;
}

/* arg: the pass; lower-tier items (true) or DRAM items (false). */
static void save_item(item *it, void *arg)
{
    bool lower = *(const bool *)arg;
    /* NVM on a NUMA node (anonymous memory) dies with the process: its
     * items are saved whole, after the DRAM items, and come back through
     * DRAM into whatever tier has room. */
    bool whole_nvm = rs.nvm_anon && (it->it_flags & ITEM_META) && it->tier == TIER_NVM;
    bool in_pass = whole_nvm ? !lower : lower == ((it->it_flags & ITEM_META) != 0);
    if (!in_pass || (it->it_flags & ITEM_TRANSIENT) || item_is_dead(it, NULL))
        return;
    rel_time_t now = mc_now();
    uint32_t access = __atomic_load_n(&it->access, __ATOMIC_RELAXED);
    struct rs_rec r;
    memset(&r, 0, sizeof(r));
    r.tier = it->tier;
    r.nkey = it->nkey;
    r.it_flags = it->it_flags & RS_KEEP_FLAGS;
    r.flags = it->flags;
    r.nbytes = it->nbytes;
    r.read_count = access & LLRU_COUNT_MASK;
    r.exptime = it->exptime == 0 ? 0 : (int64_t)process_started + it->exptime;
    rel_time_t t = item_time(it);
    r.idle = now > t ? now - t : 0;
    r.cas = it->cas;
    r.seq = (it->it_flags & ITEM_META) ? item_meta_seq(it) : 0;
    const char *value = NULL;
    /* A lower tier's record names the key by fingerprint (rs_key_len). */
    uint64_t fp = item_compact(it) ? item_meta_fp(it) : 0;
    const char *key = (const char *)&fp;
    if (!(it->it_flags & ITEM_META)) {
        r.tier = TIER_DRAM;
        key = ITEM_key(it);
        value = ITEM_data(it);
    } else if (whole_nvm) {
        struct tac_tuple_hdr hdr;
        key = tac_nvm_tuple_checked(it, &hdr, NULL);
        if (key == NULL) {
            rs.lost++;          /* damaged: counted in tuple_checksum_failures */
            return;
        }
        r.tier = TIER_DRAM;
        value = key + hdr.nkey;
    } else if (it->tier == TIER_NVM) {
        if (tac.nvm == NULL)
            return;
        r.ref = item_meta_ref(it) | nvm_class_of_ref(tac.nvm, item_meta_ref(it));
        if (!nvm_ref_push(r.ref)) {
            rs.out_failed = true;
            return;
        }
    } else {
        uint64_t ref = item_meta_ref(it);
        size_t len = tac_tuple_size(it->nkey, it->nbytes);
        if (tac.ssd == NULL || ref == 0)
            return;
        if (!tac_ssd_written(ref, len)) {
            rs.lost++;          /* its buf never reached the device */
            return;
        }
        rs.ssd_live[ssd_ref_page(ref)] += ssd_live_len(tac.ssd, len);
        r.ref = ref;
    }
    rs.save.items[r.tier]++;
    chunk_add(&r, key, value);
}

static void save_ssd_section(void)
{
    struct ssd_info info;
    ssd_get_info(tac.ssd, &info);
    uint32_t *used = calloc(info.bufs_per_page, sizeof(uint32_t));
    uint32_t *first = calloc(info.bufs_per_page, sizeof(uint32_t));
    if (used == NULL || first == NULL) {
        rs.out_failed = true;
    } else {
        uint32_t crc = 0;
        for (unsigned p = 0; p < info.npages; p++) {
            struct ssd_page_state st;
            if (rs.ssd_live[p] == 0 || !ssd_page_export(tac.ssd, p, &st, used, first))
                continue;
            struct rs_page rp = { st.page, st.version, 0, st.seq, rs.ssd_live[p] };
            size_t n = info.bufs_per_page * sizeof(uint32_t);
            out_write(&rp, sizeof(rp));
            out_write(used, n);
            out_write(first, n);
            crc = util_crc32c(crc, &rp, sizeof(rp));
            crc = util_crc32c(crc, used, n);
            crc = util_crc32c(crc, first, n);
            rs.save.ssd_count++;
        }
        rs.save.ssd_crc = crc;
    }
    free(used);
    free(first);
}

static void save_abandon(void)
{
    if (rs.out != NULL)
        fclose(rs.out);
    rs.out = NULL;
    if (rs.tmp != NULL)
        unlink(rs.tmp);
}

bool tac_restart_save(void)
{
    free(rs.path);                  /* the path a crash recovery read */
    rs.path = rs_state_path();
    if (rs.path == NULL)
        return false;
    size_t n = strlen(rs.path) + sizeof(".tmp");
    rs.tmp = malloc(n);
    rs.chunk = malloc(RS_CHUNK);
    if (rs.tmp == NULL || rs.chunk == NULL)
        goto fail;
    snprintf(rs.tmp, n, "%s.tmp", rs.path);
    /* A fresh file of our own (util_open_private): whatever lies at the
     * temporary path, a link planted there included, is removed first. */
    if (unlink(rs.tmp) != 0 && errno != ENOENT)
        fprintf(stderr, "restart: cannot remove %s: %s\n", rs.tmp, strerror(errno));
    int tfd = util_open_private(rs.tmp, O_WRONLY | O_CREAT | O_EXCL, NULL);
    rs.out = tfd >= 0 ? fdopen(tfd, "w") : NULL;
    if (rs.out == NULL && tfd >= 0)
        close(tfd);
    if (rs.out == NULL) {
        fprintf(stderr, "restart: cannot write %s: %s; the next start will "
                "be empty\n", rs.tmp, strerror(errno));
        goto fail;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        tac_ssd_flush();
        rs.ssd_live = calloc(info.npages, sizeof(uint64_t));
        if (rs.ssd_live == NULL)
            goto fail;
    }
    memset(&rs.save, 0, sizeof(rs.save));
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        rs.nvm_anon = strcmp(info.backing, "numa") == 0;
    }
    char zero[RS_HDR_SIZE] = { 0 };
    out_write(zero, sizeof(zero));
    rs.save.rec_off = rs.off;
    /* Lower-tier items first: a restart links their small meta tuples
     * before DRAM fills with whole items, which can move down when it does. */
    bool lower = true;
    assoc_each(save_item, &lower);
    CRASH_POINT(restart_save_lower);
    lower = false;
    assoc_each(save_item, &lower);
    chunk_flush();
    CRASH_POINT(restart_save_dram);
    struct rs_chunk end = { 0, 0, 0, 0 };
    out_write(&end, sizeof(end));
    if (tac.nvm != NULL && !rs.nvm_anon) {
        rs.save.nvm_off = rs.off;
        rs.save.nvm_count = rs.nvm_n;
        rs.save.nvm_crc = util_crc32c(0, rs.nvm_refs, rs.nvm_n * sizeof(uint64_t));
        out_write(rs.nvm_refs, rs.nvm_n * sizeof(uint64_t));
    }
    if (tac.ssd != NULL) {
        rs.save.ssd_off = rs.off;
        save_ssd_section();
    }
    if (rs.lost > 0)
        fprintf(stderr, "restart: %llu items are not saved: SSD bufs that could "
                "not be written, or damaged NVM tuples\n", (unsigned long long)rs.lost);
    if (rs.out_failed || fflush(rs.out) != 0 || fsync(fileno(rs.out)) != 0) {
        fprintf(stderr, "restart: writing %s failed (%s); the next start will "
                "be empty\n", rs.tmp, strerror(errno ? errno : EIO));
        goto fail;
    }
    CRASH_POINT(restart_save_synced);
    rs.save.last_cas = item_last_cas();
    rs.save.last_seq = tac_tuple_last_seq();
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        rs.save.nvm_open_count = info.open_count;
        rs.save.nvm_capacity = info.capacity;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        rs.save.ssd_size = info.size;
        rs.save.ssd_page_size = info.page_size;
        rs.save.ssd_buf_size = info.buf_size;
    }
    return true;
fail:
    save_abandon();
    return false;
}

void tac_restart_commit(bool nvm_clean, uint64_t ssd_generation)
{
    if (rs.out == NULL)
        return;
    struct rs_header *h = &rs.save;
    media_stamp(h, RS_MAGIC, RS_VERSION, sizeof(*h));
    memcpy(h->key_check, tac_crypt_key_check(), sizeof(h->key_check));
    h->stop_time = (int64_t)time(NULL);
    h->hashpower = assoc_hashpower();
    /* A tier that did not close clean keeps nothing: its records are
     * dropped at the next start. */
    if (!nvm_clean)
        h->nvm_open_count = 0;
    h->ssd_generation = ssd_generation;
    h->checksum = rs_header_crc(h);
    bool ok = fseek(rs.out, 0, SEEK_SET) == 0 &&
              fwrite(h, sizeof(*h), 1, rs.out) == 1 &&
              fflush(rs.out) == 0 && fsync(fileno(rs.out)) == 0;
    ok = fclose(rs.out) == 0 && ok;
    rs.out = NULL;
    if (ok && rename(rs.tmp, rs.path) == 0) {
        CRASH_POINT(restart_state_rename);
        char *dir = strdup(rs.path);
        int dfd = dir != NULL ? open(dirname(dir), O_RDONLY | O_DIRECTORY) : -1;
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
        fprintf(stderr, "restart: saved %llu DRAM, %llu NVM and %llu SSD items "
                "to %s\n", (unsigned long long)h->items[TIER_DRAM],
                (unsigned long long)h->items[TIER_NVM],
                (unsigned long long)h->items[TIER_SSD], rs.path);
    } else {
        fprintf(stderr, "restart: cannot write %s (%s); the next start will be "
                "empty\n", rs.path, strerror(errno));
        unlink(rs.tmp);
    }
}
