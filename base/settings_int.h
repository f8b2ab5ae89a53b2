/*
 * base/settings_int.h - what the two halves of the settings share: the
 * option table's row type and the table itself (options.c, which also
 * holds the options' checks and -h), and the parsing that walks it
 * (settings.c).  Not for use outside them.
 */
#ifndef SETTINGS_INT_H
#define SETTINGS_INT_H

#include <stdbool.h>
#include <stddef.h>

/* Rows the table may hold (a static check in options.c). */
#define SETTINGS_MAX_OPTIONS 192

enum opt_kind {
    OPT_INT,        /* integer within [min, max] */
    OPT_MEGABYTES,  /* size_t, given in megabytes (-m) */
    OPT_SIZE,       /* int bytes, a size as util_parse_size reads it (-I) */
    OPT_BYTES,      /* size_t bytes, likewise */
    OPT_DOUBLE,
    OPT_STRING,
    OPT_CHAR,
    OPT_OCTAL,
    OPT_CHOICE,     /* one of `choices`; its index is stored as an int */
    OPT_SET,        /* bool set true, no argument */
    OPT_CLEAR,      /* bool set false, no argument */
    OPT_VERBOSE,    /* -v, repeatable */
    OPT_ACTION,     /* handled in settings_parse_args */
    OPT_IGNORED,    /* memcached option with no meaning here; accepted */
};

struct option_def {
    char short_flag;
    const char *name;
    enum opt_kind kind;
    size_t offset;
    double min, max;
    bool extended;          /* given as -o name=value */
    const char *stat_name;  /* NULL: not shown in stats settings */
    const char *arg;        /* argument placeholder in -h */
    const char *help;
    /* Below, set where a row needs them. */
    const char *def;        /* default, in command-line form; for OPT_SET
                               and OPT_CLEAR "on" or "off", the field's */
    /* Checks the stored value beyond min/max and fills the fields derived
     * from it; false means the value is refused with `expect`. */
    bool (*check)(const struct option_def *o);
    const char *expect;     /* what check accepts, for its error */
    const char *const *choices; /* OPT_CHOICE: the names, NULL-terminated */
    bool no_effect;         /* accepted for compatibility, does nothing */
    bool unlisted;          /* accepted, but -h does not name it */
};

/* A row accepted for compatibility that does nothing. */
static inline bool opt_no_effect(const struct option_def *o)
{
    return o->kind == OPT_IGNORED || o->no_effect;
}

extern const struct option_def settings_options[];
extern const size_t settings_noptions;
/* Every -o ssd_path / ext_path value so far, joined with ',' (options.c). */
extern char *settings_ssd_spec;

/* Prints fmt with a and b and exits with EX_USAGE (settings.c). */
void settings_die(const char *fmt, const char *a, const char *b);

#endif
