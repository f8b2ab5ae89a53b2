/*
 * access.c - reading and writing slots, draining, latency emulation.
 *
 * Owns: nothing; it copies bytes between callers' buffers and slots.
 *
 * Design.  nvm_write uses libpmem's non-temporal pmem_memcpy_nodrain on
 * real persistent memory (one nvm_drain then orders a whole batch), and a
 * plain memcpy elsewhere.  Emulated latency is a busy-wait after the copy
 * of read_ns or write_ns per 256 B block the byte range touches: a range
 * that starts or ends inside a block pays for the whole block, so
 * [200, 300) touches 2 blocks.  The wait spins on CLOCK_MONOTONIC (vDSO,
 * no syscall) with a pause hint; with latency 0 it costs one branch.
 *
 * Threads: any; nothing here takes a lock or writes shared DRAM.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <assert.h>
#include <libpmem.h>
#include <string.h>
#include <time.h>

#include "nvm/internal.h"

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t ns)
{
    uint64_t end = now_ns() + ns;
    while (now_ns() < end)
        cpu_relax();
}

/* 256 B blocks touched by [ref+off, ref+off+len). */
static uint64_t blocks_touched(uint64_t ref, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    uint64_t first = (ref + off) / NVM_SLOT_ALIGN;
    uint64_t last = (ref + off + len - 1) / NVM_SLOT_ALIGN;
    return last - first + 1;
}

static inline bool in_slot(const struct nvm_region *r, uint64_t ref,
                           size_t off, size_t len)
{
    size_t slot = nvm_slot_size(r, ref);
    return slot != 0 && off <= slot && len <= slot - off;
}

void *nvm_ptr(const struct nvm_region *r, uint64_t ref)
{
    assert(nvm_class_of_ref(r, ref) != 0);
    return r->base + ref;
}

/* Not instrumented for ThreadSanitizer, and a word loop rather than
 * memcpy (which it intercepts): the bytes may be written by another
 * thread meanwhile, and the caller trusts none of them (nvm.h). */
__attribute__((no_sanitize("thread")))
static void copy_racy(char *dst, const volatile char *src, size_t len)
{
    for (size_t i = 0; i < len; i++)
        dst[i] = src[i];
}

size_t nvm_peek(struct nvm_region *r, uint64_t ref, size_t off, void *dst,
                size_t len)
{
    size_t end = r->capacity;
    if (ref < NVM_DATA_OFFSET || ref >= end || off >= end - ref)
        return 0;
    if (len > end - ref - off)
        len = end - ref - off;
    copy_racy(dst, (const volatile char *)(r->base + ref + off), len);
    nvm_charge_read(r, ref, off, len);
    return len;
}

void nvm_charge_read(struct nvm_region *r, uint64_t ref, size_t off, size_t len)
{
    if (r->read_ns != 0) {
        uint64_t blocks = blocks_touched(ref, off, len);
        __atomic_add_fetch(&r->read_blocks, blocks, __ATOMIC_RELAXED);
        spin_ns(blocks * r->read_ns);
    }
}

void nvm_charge_write(struct nvm_region *r, uint64_t ref, size_t off,
                      size_t len)
{
    if (r->write_ns != 0)
        spin_ns(blocks_touched(ref, off, len) * r->write_ns);
}

void nvm_write(struct nvm_region *r, uint64_t ref, size_t off,
               const void *src, size_t len)
{
    assert(in_slot(r, ref, off, len));
    if (r->is_pmem)
        pmem_memcpy_nodrain(r->base + ref + off, src, len);
    else
        memcpy(r->base + ref + off, src, len);
    nvm_charge_write(r, ref, off, len);
}

void nvm_drain(struct nvm_region *r)
{
    if (r->is_pmem) {
        pmem_drain();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_sfence();
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

void nvm_read(struct nvm_region *r, uint64_t ref, size_t off,
              void *dst, size_t len)
{
    assert(in_slot(r, ref, off, len));
    memcpy(dst, r->base + ref + off, len);
    nvm_charge_read(r, ref, off, len);
}
