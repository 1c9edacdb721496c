/* The pre-import SPEC: see agent-preimport.h. */
#define _GNU_SOURCE
#include "agent-preimport.h"

#include <stdio.h>
#include <string.h>

/* Splits list (in place) on ',' into out (NULL-terminated); every item must satisfy ok(). */
static int split_list(char *list, const char **out, int (*ok)(const char *), const char *what,
                      char *err, size_t errlen) {
  size_t n = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (n == PREIMPORT_MAX_ITEMS || !ok(tok)) {
      snprintf(err, errlen, "preimport: bad %s item", what);
      return -1;
    }
    out[n++] = tok;
  }
  out[n] = NULL;
  return 0;
}

static int all_of(const char *s, const char *allowed) {
  return *s != '\0' && s[strspn(s, allowed)] == '\0';
}

#define UPPER "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define LOWER "abcdefghijklmnopqrstuvwxyz"
#define DIGITS "0123456789"

/* A variable-name prefix, optionally closed by '=' (one exact name). */
static int env_ok(const char *s) {
  size_t n = strlen(s);
  if (n > 0 && s[n - 1] == '=') n--;
  return n > 0 && strspn(s, UPPER LOWER DIGITS "_") == n;
}

static int module_ok(const char *s) { return all_of(s, UPPER LOWER DIGITS "_."); }

static int path_ok(const char *s) {
  return s[0] == '/' && all_of(s, UPPER LOWER DIGITS "_./-") && !strstr(s, "/../") &&
         !strstr(s, "//");
}

int preimport_parse(const char *spec, struct preimport *pi, char *err, size_t errlen) {
  memset(pi, 0, sizeof *pi);
  if (strlen(spec) >= sizeof pi->buf) {
    snprintf(err, errlen, "preimport: spec too long");
    return -1;
  }
  pi->spec = spec;
  strcpy(pi->buf, spec);
  int have_modules = 0;
  for (char *save = NULL, *field = strtok_r(pi->buf, ";", &save); field;
       field = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(field, '=');
    if (!eq) {
      snprintf(err, errlen, "preimport: field without '='");
      return -1;
    }
    *eq = '\0';
    char *value = eq + 1;
    const char *scratch[PREIMPORT_MAX_ITEMS + 1];
    int rc = 0;
    if (strcmp(field, "modules") == 0) {
      rc = split_list(value, scratch, module_ok, "modules", err, errlen);
      have_modules = rc == 0 && scratch[0] != NULL;
    } else if (strcmp(field, "env") == 0) {
      rc = split_list(value, pi->env, env_ok, "env", err, errlen);
    } else if (strcmp(field, "files") == 0) {
      rc = split_list(value, pi->files, path_ok, "files", err, errlen);
    } else if (strcmp(field, "seed") != 0 && strcmp(field, "scratch") != 0) {
      snprintf(err, errlen, "preimport: unknown field %.32s", field);
      return -1;
    } /* seed and scratch are the script's */
    if (rc < 0) return -1;
  }
  if (!have_modules) {
    snprintf(err, errlen, "preimport: no modules");
    return -1;
  }
  return 0;
}

int preimport_reads_env(const struct preimport *pi, const char *entry) {
  for (const char *const *p = pi->env; *p; p++)
    if (strncmp(entry, *p, strlen(*p)) == 0) return 1;
  return 0;
}

int preimport_reads_file(const struct preimport *pi, const char *path) {
  for (const char *const *p = pi->files; *p; p++) {
    size_t n = strlen(*p);
    if (strncmp(path, *p, n) == 0 && (path[n] == '\0' || path[n] == '/')) return 1;
  }
  return 0;
}
