/* A pre-imported interpreter (--preimport SPEC, docs/decisions/0011-preimport.md): the pre-started
 * Python imports modules before it waits, so a call that uses them skips their import. SPEC comes
 * from the host (src/backends/preimport-spec.ts renders it), fields separated by ';':
 *   modules=numpy,pandas,matplotlib.pyplot   imported in this order by guest/prestart.py
 *   env=MPL,XDG_,PATH=                       variables read while importing them (prefixes; a
 *                                            trailing '=' names one variable): a call that gives
 *                                            any of them another value gets a fresh interpreter
 *   files=/home/user/matplotlibrc,...        paths an import reads if they exist: a call with a
 *                                            file at or under one gets a fresh interpreter
 *   seed=SRC:DEST                            (script only) files copied before the imports
 *   scratch=/home/user,/tmp,...              (script only) areas left as found after the imports
 * The whole SPEC is also the script's one argument. */
#ifndef AGENT_PREIMPORT_H
#define AGENT_PREIMPORT_H

#include <stddef.h>

#define PREIMPORT_MAX_SPEC 4096
#define PREIMPORT_MAX_ITEMS 64

struct preimport {
  const char *spec; /* as given: the script's argument */
  char buf[PREIMPORT_MAX_SPEC];
  const char *env[PREIMPORT_MAX_ITEMS + 1];   /* NULL-terminated */
  const char *files[PREIMPORT_MAX_ITEMS + 1]; /* NULL-terminated */
};

/* Parses and checks SPEC into pi (which keeps pointers into its own copy). 0, or -1 with err. */
int preimport_parse(const char *spec, struct preimport *pi, char *err, size_t errlen);

/* 1 when entry ("NAME=VALUE") is one of the variables the imports read. */
int preimport_reads_env(const struct preimport *pi, const char *entry);

/* 1 when path is one of the files the imports read, or below one. */
int preimport_reads_file(const struct preimport *pi, const char *path);

#endif
