/*
 * tac/tac.h - the tier policy: the only code that moves items between
 * DRAM, NVM and (later) SSD.
 *
 * tac_init() opens the lower tiers named by the settings (-o nvm_path=...)
 * and plugs the tier operations into items.c; with no lower tier it does
 * nothing and the server is a DRAM-only memcached.  tac_start() starts the
 * evictor threads once the workers run; tac_stop() joins them.
 *
 * nvm/ and ssd/ are reached only through their own APIs, from here.
 */
#ifndef TAC_TAC_H
#define TAC_TAC_H

#include <stdbool.h>

struct stat_sink;

/* Opens the configured tiers; prints why and returns false on failure. */
bool tac_init(void);
void tac_start(void);
void tac_stop(void);
/* Closes the tiers (after tac_stop and the workers). */
void tac_close(void);

/* True when a lower tier is configured. */
bool tac_active(void);

/* `stats tiers` lines of the lower tiers and the policy. */
void tac_stats_tiers(struct stat_sink *sink);
/* Meta tuples in the index (items whose value is in a lower tier). */
unsigned long long tac_meta_tuples(void);
/* Lower-tier hits, for the DRAM/NVM split of get_hits. */
unsigned long long tac_lower_hits(void);
/* `stats settings` lines of the tiers. */
void tac_stats_settings(struct stat_sink *sink);
void tac_stats_reset(void);

#endif
