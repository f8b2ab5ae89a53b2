/*
 * tac/tuple.h - the lower-tier tuple format, shared by NVM and SSD (so a
 * move from NVM to SSD is a plain copy).
 *
 * Layout, in the tier's slot:
 *   struct tac_tuple_hdr | key (nkey bytes) | value (nbytes, ends "\r\n")
 *
 * A tuple holds no DRAM address: once written it never changes, whatever
 * happens to its meta tuple, and it means the same after a restart.  Who
 * owns a slot is known only from DRAM: the meta tuple found by a hash
 * lookup of the key holds the slot's reference (item_meta_ref), and a
 * reader compares the tuple's key and lengths with that meta tuple's.
 *
 * seq is the write sequence: each tuple written from a DRAM item takes the
 * next value of one 64-bit counter (tac_tuple_fill), whatever -C says; a
 * copy (NVM to SSD, the NVM page mover, SSD defrag) keeps it.  Copies of
 * one key written under its item lock are therefore ordered by seq.
 *
 * The header's flags, exptime, CAS and time are a snapshot taken when the
 * tuple was written; the DRAM meta tuple is authoritative for all of them
 * (touch and gat change only the meta tuple, and record a shorter life for
 * crash recovery: tac/durable/journal.c).  Times are unix seconds, so that a
 * restart after a crash can tell what expired meanwhile.  The checksum is a CRC32C
 * (util_crc32c) of the header (with checksum as 0), the key and the value;
 * it catches every change of up to 32 consecutive bits, so every changed
 * byte.  Every reader checks tac_tuple_sane() before it uses a header's
 * lengths, and the checksum before it uses the key or value.
 *
 * Sealed tuples (-o tier_key, tac/crypt.h).  With a tier key the header
 * stays clear (version TAC_TUPLE_VERSION_SEALED, checksum 0) and is the
 * authenticated data; key and value follow as AES-256-GCM ciphertext, then
 * the nonce and the tag:
 *   struct tac_tuple_hdr | E(key | value) | nonce (12) | tag (16)
 * The tag binds the key, the value and every header field (seq among
 * them), not the place: a copy (NVM to SSD, the page mover, defrag) moves
 * the bytes as they are, and a tuple put in another key's slot opens to
 * the other key, which the reader refuses.  Readers open a tuple with
 * tac_tuple_open, which checks the checksum or the tag, whichever the
 * format has.
 */
#ifndef TAC_TUPLE_H
#define TAC_TUPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/uio.h>

#include "engine/items.h"

struct tac_tuple_hdr {
    uint64_t seq;           /* write sequence (see above) */
    uint64_t cas;
    uint32_t nbytes;        /* value length, "\r\n" included */
    uint32_t flags;
    uint32_t exptime;       /* unix time; 0: never */
    uint32_t time;          /* last access when written, unix time */
    uint32_t checksum;
    uint8_t nkey;
    uint8_t version;        /* TAC_TUPLE_VERSION */
    uint8_t pad[2];         /* written as 0; covered by the checksum */
};

_Static_assert(sizeof(struct tac_tuple_hdr) == 40,
               "the tuple header is an on-media format: no implicit padding");

#define TAC_TUPLE_VERSION 4         /* 2: CRC32C; 3: seq, no DRAM address;
                                       4: exptime and time in unix time */
#define TAC_TUPLE_VERSION_SEALED 5  /* 4, sealed (see above) */

/* Bytes a tuple carries beyond header, key and value: 0, or the nonce and
 * tag of a sealed tuple (TAC_SEAL_BYTES).  Set once at start. */
extern size_t tac_tuple_overhead;

static inline size_t tac_tuple_size(size_t nkey, size_t nbytes)
{
    return sizeof(struct tac_tuple_hdr) + nkey + nbytes + tac_tuple_overhead;
}

/* Turns sealing on (a tier key is loaded): before any tuple is written. */
void tac_tuple_set_sealed(bool sealed);
static inline bool tac_tuple_sealed(void)
{
    return tac_tuple_overhead != 0;
}

/* The image of a tuple as the media holds it (header, then key and value,
 * clear or sealed) in iov; returns the number of pieces (at most 3).  A
 * sealed image lies in the calling thread's image scratch buffer, valid
 * until its next tac_tuple_image. */
int tac_tuple_image(const struct tac_tuple_hdr *hdr, const char *key,
                    const char *value, struct iovec iov[3]);

enum tac_tuple_check {
    TUPLE_OK = 0,
    TUPLE_BAD_SUM,      /* clear tuple: the checksum does not hold */
    TUPLE_BAD_TAG,      /* sealed tuple: the tag does not hold */
};
/* Checks the tuple whose header is hdr (tac_tuple_sane already) and whose
 * body, the bytes after the header on the media, is at body: writes its
 * key to key_out and its value to value_out.  Either may be its own place
 * in body (body and body + nkey) to work in place. */
enum tac_tuple_check tac_tuple_open(const struct tac_tuple_hdr *hdr,
                                    const char *body, char *key_out,
                                    char *value_out);
/* The key of the tuple (header hdr, sane; body after it) as a lookup hint,
 * unchecked: in place when clear, else decrypted alone into buf
 * (KEY_MAX_LENGTH bytes).  Whatever is done with the tuple itself waits
 * for tac_tuple_open. */
const char *tac_tuple_key_hint(const struct tac_tuple_hdr *hdr, const char *body,
                               char *buf);
/* How many of the first bytes of a tuple of len bytes (key of nkey)
 * tac_tuple_key_of needs: header and key, or all of a sealed tuple. */
size_t tac_tuple_key_prefix(size_t nkey, size_t len);
/* Copies into key the key of the tuple at data (avail bytes of it read,
 * at least tac_tuple_key_prefix(nkey, len); len its whole length as the
 * media holds it) if that tuple is sane, len bytes long, nkey bytes of key
 * and of fingerprint fp (item_key_fp()); false otherwise.  Its checksum or
 * tag is not checked: what is copied is a key for a listing, never a
 * value. */
bool tac_tuple_key_of(const char *data, size_t avail, size_t len, uint64_t fp,
                      size_t nkey, char *key);

/* The same into the calling thread's open scratch buffer (key, then
 * value), valid until its next tac_tuple_open_scratch; without sealing,
 * body itself.  *clear gets the key's address, NULL on failure. */
enum tac_tuple_check tac_tuple_open_scratch(const struct tac_tuple_hdr *hdr,
                                            const char *body,
                                            const char **clear);

/* Fills hdr from the item whose value is stored (it), with the next seq. */
void tac_tuple_fill(struct tac_tuple_hdr *hdr, const item *it);

/* The last seq handed out (0: none yet); tac_tuple_seq_floor makes the
 * next ones larger than seq (a restart continues above the saved one). */
uint64_t tac_tuple_last_seq(void);
void tac_tuple_seq_floor(uint64_t seq);
/* Until called again with 0, the tuples this thread writes keep seq, the
 * write sequence of the version they copy, instead of taking a new one:
 * the DRAM log's replay staging a record into a lower tier (crash_scan.c),
 * so that the copy never outranks a newer record of its key. */
void tac_tuple_seq_as(uint64_t seq);
/* Once a seq reaches limit, the function registered with
 * tac_tuple_set_seq_reserve (the journal's) reserves more, as
 * items_set_cas_reserve does for CAS. */
void tac_tuple_set_seq_limit(uint64_t limit);
void tac_tuple_set_seq_reserve(void (*fn)(uint64_t seq));

/* CRC32C of header (checksum as 0), key and value. */
uint32_t tac_tuple_checksum(const struct tac_tuple_hdr *hdr, const char *key,
                            const char *value);

/* True if a header read back from a tier is of this format and its
 * lengths are possible: 1..KEY_MAX_LENGTH key bytes, a value of at least 2
 * bytes ("\r\n"), and the whole tuple (summed in size_t, overflow checked)
 * no larger than -I (an item, whose own header is larger, fits in -I) nor
 * than `room`, the bytes the slot, buf image or read holds from the header
 * on.  Only then may tac_tuple_size() of its lengths be trusted. */
bool tac_tuple_sane(const struct tac_tuple_hdr *hdr, size_t room);

/* Whether a checked tuple (header hdr, clear key) is the one meta tuple
 * meta names: its key and, with a tier key, its write sequence. */
bool tac_tuple_owned(const item *meta, const struct tac_tuple_hdr *hdr,
                     const char *key);
/* Counts a tuple refused on read: tuple_auth_failures with a tier key
 * (its header, tag, key or sequence did not check), else
 * tuple_checksum_failures. */
void tac_tuple_refused(void);


#endif
