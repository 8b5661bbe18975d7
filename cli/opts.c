/*
 * opts.c - a small option parser shared by the subcommands.
 *
 * Not getopt_long: "dlock run" must know exactly where "--" was (what follows
 * is the command, never options), and GNU getopt's argument permutation hides
 * that. This one accepts --name=value, --name value, -x value and -qv.
 */
#include <string.h>

#include "cli.h"

const cli_opt cli_common_opts[] = {
    {"url", 0, 1, CLI_OPT_URL},
    {"prefix", 0, 1, CLI_OPT_PREFIX},
    {"password-file", 0, 1, CLI_OPT_PASSWORD_FILE},
    {NULL, 0, 0, 0},
};

unsigned cli_common_bit(int id) {
  return id == CLI_OPT_URL || id == CLI_OPT_PASSWORD_FILE ? CLI_COMMON_URL
         : id == CLI_OPT_PREFIX                           ? CLI_COMMON_PREFIX
                                                          : 0;
}

void cli_args_init(cli_args *a, int argc, char **argv, const char *command, unsigned common) {
  a->argc = argc;
  a->argv = argv;
  a->index = 1; /* argv[0] is the subcommand's own name */
  a->command = command;
  a->cluster = NULL;
  a->after_dashdash = 0;
  a->common = common;
  a->chained[0] = a->chained[1] = a->chained[2] = NULL;
}

void cli_args_chain(cli_args *a, const cli_opt *t1, const cli_opt *t2, const cli_opt *t3) {
  a->chained[0] = t1;
  a->chained[1] = t2;
  a->chained[2] = t3;
}

int cli_common_opt(int id, const char *arg, const char **url) {
  if (id == CLI_OPT_URL) {
    *url = arg;
    return 1;
  }
  if (id == CLI_OPT_PREFIX) {
    cli_config_set_flag("prefix", arg);
    return 1;
  }
  return 0;
}

static const cli_opt *find_in(const cli_opt *table, const char *name, size_t len) {
  for (const cli_opt *o = table; o->long_name != NULL; o++) {
    if (strlen(o->long_name) == len && strncmp(o->long_name, name, len) == 0) return o;
  }
  return NULL;
}

/* The common options this command takes, then its own, then the chained. */
static const cli_opt *find_long(const cli_args *a, const cli_opt *table, const char *name, size_t len) {
  const cli_opt *o = find_in(cli_common_opts, name, len);
  if (o != NULL && (a->common & cli_common_bit(o->id)) != 0) return o;
  o = find_in(table, name, len);
  for (int i = 0; o == NULL && i < 3; i++) o = a->chained[i] != NULL ? find_in(a->chained[i], name, len) : NULL;
  return o;
}

static const cli_opt *find_short_in(const cli_opt *table, char c) {
  for (const cli_opt *o = table; o != NULL && o->long_name != NULL; o++) {
    if (o->short_name == c) return o;
  }
  return NULL;
}

static const cli_opt *find_short(const cli_args *a, const cli_opt *table, char c) {
  const cli_opt *o = find_short_in(table, c);
  for (int i = 0; o == NULL && i < 3; i++) o = find_short_in(a->chained[i], c);
  return o;
}

/* Take the value of option 'o' from the next argv element. */
static int take_value(cli_args *a, const cli_opt *o, const char *shown, const char **arg) {
  if (a->index >= a->argc) {
    cli_usage_error(a->command, "%s needs a value", shown);
    return CLI_OPT_ERROR;
  }
  *arg = a->argv[a->index++];
  return o->id;
}

static int next_short(cli_args *a, const cli_opt *table, const char **arg) {
  char c = *a->cluster++;
  char shown[3] = {'-', c, '\0'};
  const cli_opt *o = find_short(a, table, c);

  if (o == NULL) {
    a->cluster = NULL;
    cli_usage_error(a->command, "unknown option '%s'", shown);
    return CLI_OPT_ERROR;
  }
  if (!o->has_arg) {
    if (*a->cluster == '\0') a->cluster = NULL;
    return o->id;
  }
  /* "-w5s" and "-w 5s" both work; a value ends the cluster. */
  if (*a->cluster != '\0') {
    *arg = a->cluster;
    a->cluster = NULL;
    return o->id;
  }
  a->cluster = NULL;
  return take_value(a, o, shown, arg);
}

static int next_opt(cli_args *a, const cli_opt *table, const char **arg);

int cli_next_opt(cli_args *a, const cli_opt *table, const char **arg) {
  int id;
  /* Where the password comes from concerns only the connection: no
   * command sees it (each that takes --url takes it). */
  while ((id = next_opt(a, table, arg)) == CLI_OPT_PASSWORD_FILE) cli_config_set_flag("password_file", *arg);
  return id;
}

static int next_opt(cli_args *a, const cli_opt *table, const char **arg) {
  *arg = NULL;
  if (a->cluster != NULL) return next_short(a, table, arg);
  if (a->index >= a->argc) return CLI_OPT_DONE;

  const char *s = a->argv[a->index];
  if (a->after_dashdash || s[0] != '-' || s[1] == '\0') {
    /* "-" alone is a positional argument, as usual. */
    a->index++;
    *arg = s;
    return CLI_OPT_POSITIONAL;
  }
  a->index++;
  if (strcmp(s, "--") == 0) {
    a->after_dashdash = 1;
    return CLI_OPT_DASHDASH;
  }
  if (s[1] != '-') {
    a->cluster = s + 1;
    return next_short(a, table, arg);
  }

  const char *name = s + 2;
  const char *eq = strchr(name, '=');
  size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
  const cli_opt *o = find_long(a, table, name, len);
  if (o == NULL) {
    cli_usage_error(a->command, "unknown option '--%.*s'", (int)len, name);
    return CLI_OPT_ERROR;
  }
  if (!o->has_arg) {
    if (eq != NULL) {
      cli_usage_error(a->command, "--%s takes no value", o->long_name);
      return CLI_OPT_ERROR;
    }
    return o->id;
  }
  if (eq != NULL) {
    *arg = eq + 1;
    return o->id;
  }
  char shown[64];
  snprintf(shown, sizeof shown, "--%s", o->long_name);
  return take_value(a, o, shown, arg);
}
