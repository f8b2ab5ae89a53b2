/*
 * crashpoint.h - named crash points: one name per step that changes durable
 * state (restart state, journal, DRAM log, tier moves, SSD buf writes), so
 * that a test can stop the server exactly there.
 *
 * CRASH_POINT(name) marks a step; name is one of CRASH_POINT_LIST below.
 * In a build without TAC_DEBUG_HOOKS (configure --enable-debug-hooks, or a
 * sanitizer build) it compiles to nothing.  With the hooks, the server reads
 * at start (crash_point_init, first thing in main):
 *
 *   TAC_CRASH_AT=name:N          _exit(CRASH_POINT_EXIT) at the Nth pass of
 *                                point `name` (N >= 1; passes of every
 *                                thread are counted together)
 *   TAC_CRASH_AT=name:N,MS       sleep MS milliseconds at the Nth pass, then
 *                                go on
 *   TAC_CRASH_LIST=1             print every point's name, one a line, and
 *                                exit 0
 *
 * and the text command `debug_crash_at name:N[,MS]` (OK, or CLIENT_ERROR)
 * arms a point from now on, so that a test can arm it after loading;
 * `debug_crash_passes` answers "PASSES <n>", the passes of the armed point
 * so far (arm one at a pass never reached to count them).
 *
 * A pass of an unarmed point costs one load and a compare.  The exit writes
 * "crash point NAME: pass N" to stderr first.  doc/design.md, "Crash points".
 */
#ifndef CRASHPOINT_H
#define CRASHPOINT_H

#include "config.h"

/* Every point, in the order of the life of the data: save, restore, scan,
 * journal, DRAM log, moves down, SSD writes. */
#define CRASH_POINT_LIST(X) \
    X(restart_save_lower)     /* save: the pass over NVM and SSD items done */ \
    X(restart_save_dram)      /* save: the pass over DRAM items done */ \
    X(restart_save_synced)    /* save: records and sections synced, no header */ \
    X(restart_state_rename)   /* commit: FILE.tmp renamed over FILE */ \
    X(restart_state_unlink)   /* start: the state unlinked (kept as FILE.restoring \
                                 with dram_log), restore not run */ \
    X(restart_restore_chunk)  /* restore (or a leftover's): one chunk of records linked */ \
    X(restart_scan_nvm_page)  /* crash scan: one NVM page checked */ \
    X(restart_scan_ssd_buf)   /* crash scan: one SSD buf's tuples linked */ \
    X(restart_scan_done)      /* crash scan over, DRAM log not replayed */ \
    X(restart_replay_record)  /* replay: one DRAM log record taken or skipped */ \
    X(journal_record)         /* journal: an invalidation stored */ \
    X(journal_reuse)          /* journal: a way given to another key */ \
    X(journal_floor)          /* journal: the floor raised over a full bucket */ \
    X(dramlog_append)         /* DRAM log: a record written at the head */ \
    X(dramlog_wrap)           /* DRAM log: a wrap marker written */ \
    X(dramlog_clean)          /* DRAM log: the tail moved past one record */ \
    X(move_dram_to_nvm)       /* a DRAM item replaced by its NVM meta tuple */ \
    X(move_dram_to_ssd)       /* a DRAM item replaced by its SSD meta tuple */ \
    X(move_nvm_to_ssd)        /* an NVM tuple's meta now points into an SSD buf */ \
    X(move_nvm_slot)          /* NVM page mover: a tuple moved to another slot */ \
    X(move_stage)             /* a store written straight to NVM or SSD */ \
    X(ssd_defrag_tuple)       /* defrag: a tuple's meta now points to its copy */ \
    X(ssd_buf_written)        /* an SSD buf's write completed and recorded */

enum crash_point_id {
#define CRASH_POINT_ENUM(n) CP_##n,
    CRASH_POINT_LIST(CRASH_POINT_ENUM)
#undef CRASH_POINT_ENUM
    CP_COUNT
};

/* Reads TAC_CRASH_AT and TAC_CRASH_LIST (nothing without the hooks). */
void crash_point_init(void);

#ifdef TAC_DEBUG_HOOKS
#include <stdbool.h>
/* Arms (or re-arms) a point from "name:N[,MS]", counting passes from 0;
 * false when spec names no point.  The `debug_crash_at` text command. */
bool crash_point_arm(const char *spec);
/* Passes of the armed point since it was armed (`debug_crash_passes`). */
unsigned long crash_point_passes(void);
extern int crash_point_armed;           /* the armed point, or -1 */
void crash_point_pass(enum crash_point_id id);
#define CRASH_POINT(name) do { \
        if (__builtin_expect(crash_point_armed == CP_##name, 0)) \
            crash_point_pass(CP_##name); \
    } while (0)
#else
#define CRASH_POINT(name) do { } while (0)
#endif

/* The exit status of a crash point's _exit. */
#define CRASH_POINT_EXIT 86

#endif
