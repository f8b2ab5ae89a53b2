/*
 * hash.h - the key hash used by the hash index and the item lock stripes.
 *
 * A 32-bit non-cryptographic hash with good avalanche: every input bit
 * affects every output bit, so both the low bits (bucket, stripe) and the
 * high bits are usable.  Not stable across byte orders; never persist it.
 */
#ifndef HASH_H
#define HASH_H

#include <stddef.h>
#include <stdint.h>

uint32_t hash_key(const void *key, size_t len);

#endif
