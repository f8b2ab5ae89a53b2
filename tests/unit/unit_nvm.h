/*
 * unit_nvm.h - a small NVM region for the unit tests of what stands on the
 * NVM tier (test_journal, test_dramlog): 8 MB in a file, one partition,
 * slots up to 64 KB in 256 KB pages.  Opening it must succeed.
 */
#ifndef UNIT_NVM_H
#define UNIT_NVM_H

#include "nvm/nvm.h"
#include "unit.h"

static inline struct nvm_region *unit_nvm_up(const char *path)
{
    struct nvm_config c;
    memset(&c, 0, sizeof(c));
    c.path = path;
    c.size = 8u << 20;
    c.partitions = 1;
    c.slot_max = 64 * 1024;
    c.factor = 1.25;
    c.page_size = 256 * 1024;
    struct nvm_region *r = NULL;
    CHECK_EQ(nvm_open(&c, &r), NVM_OK);
    return r;
}

#endif
