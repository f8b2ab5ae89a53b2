/*
 * metrics.h - `-o metrics_port=N`: the stats in Prometheus text format at
 * http://<-l address>:N/metrics (metrics.c says which names it serves).
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdbool.h>

struct event_base;

/* Binds the endpoint on base (the main loop) when metrics_port is set.
 * False, said on stderr, when a port cannot be bound. */
bool metrics_start(struct event_base *base);
void metrics_stop(void);

#endif
