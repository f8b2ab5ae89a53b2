/*
 * metrics.h - `-o metrics_port=N`: the stats in Prometheus text format at
 * http://<-o metrics_listen address>:N/metrics (metrics.c says which names
 * it serves, and how the port is guarded).
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdbool.h>

struct event_base;

/* Hands the port's counters to `stats`, then binds the endpoint on base
 * (the main loop) when metrics_port is set.  False, said on stderr, when
 * an address cannot be resolved or bound. */
bool metrics_start(struct event_base *base);
void metrics_stop(void);

#endif
