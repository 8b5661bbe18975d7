/*
 * config.c - the settings of the dlock command and where each comes from:
 * a flag (--url, --prefix), the environment (DLOCK_URL, DLOCK_PREFIX), the
 * user's file ($XDG_CONFIG_HOME/dlock/config, else ~/.config/dlock/config),
 * the system's file (/etc/dlock.conf), else the default; the first that
 * says something wins. "dlock config show" prints the result.
 *
 * A file holds "key = value" lines; '#' starts a comment line. Unknown keys
 * and lines without '=' are errors naming file:line, so that a typo is not
 * silently ignored.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CLI_DEFAULT_URL "redis://127.0.0.1:6379"

typedef struct setting {
  const char *key;
  const char *env;   /* NULL: no environment variable */
  const char *deflt; /* shown when nothing sets it */
  int duration;      /* the value is a duration */
  char *value;       /* NULL: not set */
  char source[600];  /* "--url", "DLOCK_URL", "/etc/dlock.conf:3", "default" */
} setting;

enum { S_URL, S_PREFIX, S_CA, S_CERT, S_KEY, S_SNI, S_CONNECT_TO, S_COMMAND_TO, S_PASSWORD_FILE, S_COUNT };

static setting settings[S_COUNT] = {
    {"url", "DLOCK_URL", CLI_DEFAULT_URL, 0, NULL, ""},
    {"prefix", "DLOCK_PREFIX", "", 0, NULL, ""},
    {"tls_ca_file", NULL, "", 0, NULL, ""},
    {"tls_cert_file", NULL, "", 0, NULL, ""},
    {"tls_key_file", NULL, "", 0, NULL, ""},
    {"tls_server_name", NULL, "", 0, NULL, ""},
    {"connect_timeout", NULL, "2s", 1, NULL, ""},
    {"command_timeout", NULL, "2s", 1, NULL, ""},
    {"password_file", "DLOCK_PASSWORD_FILE", "", 0, NULL, ""},
};

static const char *flag_url, *flag_prefix, *flag_password_file;
/* The password read from password_file: it overrides the URL's, and is
 * never printed nor handed to a command (docs/cli.md, "Secrets"). */
static char password[1024];
static int have_password;
static int loaded; /* 0: not yet, 1: done, else the exit code of the failure */

void cli_config_set_flag(const char *key, const char *value) {
  if (strcmp(key, "url") == 0)
    flag_url = value;
  else if (strcmp(key, "prefix") == 0)
    flag_prefix = value;
  else if (strcmp(key, "password_file") == 0)
    flag_password_file = value;
}

static setting *find(const char *key, size_t len) {
  for (int i = 0; i < S_COUNT; i++)
    if (strlen(settings[i].key) == len && strncmp(settings[i].key, key, len) == 0) return &settings[i];
  return NULL;
}

static int set(setting *s, const char *value, size_t len, const char *source) {
  char *v = strndup(value, len);
  if (v == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    return CLI_EXIT_SOFTWARE;
  }
  free(s->value);
  s->value = v;
  snprintf(s->source, sizeof s->source, "%s", source);
  return 0;
}

static void trim(const char **p, const char **end) {
  while (*p < *end && (**p == ' ' || **p == '\t')) (*p)++;
  while (*end > *p && ((*end)[-1] == ' ' || (*end)[-1] == '\t' || (*end)[-1] == '\r')) (*end)--;
}

/* Read one file; a missing file is no error. Later files (higher
 * precedence) are read after, so each value read replaces the one before. */
static int read_file(const char *path) {
  FILE *f = fopen(path, "r");
  char line[4096];
  int lineno = 0;

  if (f == NULL) {
    if (errno == ENOENT || errno == ENOTDIR) return 0;
    fprintf(stderr, "dlock: config file %s: %s\n", path, strerror(errno));
    return CLI_EXIT_USAGE;
  }
  while (fgets(line, sizeof line, f) != NULL) {
    lineno++;
    size_t n = strlen(line);
    if (n == sizeof line - 1 && line[n - 1] != '\n') {
      fprintf(stderr, "dlock: %s:%d: line longer than %zu bytes\n", path, lineno, sizeof line - 2);
      fclose(f);
      return CLI_EXIT_USAGE;
    }
    const char *p = line, *end = line + n;
    if (end > p && end[-1] == '\n') end--;
    trim(&p, &end);
    if (p == end || *p == '#') continue;
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq == NULL) {
      fprintf(stderr, "dlock: %s:%d: expected 'key = value', found '%.*s'\n", path, lineno, (int)(end - p), p);
      fclose(f);
      return CLI_EXIT_USAGE;
    }
    const char *k = p, *kend = eq, *v = eq + 1, *vend = end;
    trim(&k, &kend);
    trim(&v, &vend);
    setting *s = find(k, (size_t)(kend - k));
    if (s == NULL) {
      fprintf(stderr,
              "dlock: %s:%d: unknown key '%.*s' (known: url, prefix, tls_ca_file, "
              "tls_cert_file, tls_key_file, tls_server_name, connect_timeout, command_timeout, "
              "password_file)\n",
              path, lineno, (int)(kend - k), k);
      fclose(f);
      return CLI_EXIT_USAGE;
    }
    if (s->duration) {
      char tmp[64];
      int64_t ms;
      snprintf(tmp, sizeof tmp, "%.*s", (int)(vend - v), v);
      if (cli_parse_duration(tmp, &ms) != 0 || ms == 0 || ms > INT32_MAX) {
        fprintf(stderr, "dlock: %s:%d: %s: '%s' is not a duration above 0 (e.g. 2s, 500ms)\n", path, lineno, s->key,
                tmp);
        fclose(f);
        return CLI_EXIT_USAGE;
      }
    }
    char source[600];
    snprintf(source, sizeof source, "%s:%d", path, lineno);
    int rc = set(s, v, (size_t)(vend - v), source);
    if (rc != 0) {
      fclose(f);
      return rc;
    }
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "dlock: config file %s: read error\n", path);
    return CLI_EXIT_USAGE;
  }
  return 0;
}

void cli_config_paths(char *system, size_t slen, char *user, size_t ulen) {
  const char *sys = getenv("DLOCK_SYSTEM_CONFIG");
  snprintf(system, slen, "%s", sys != NULL && sys[0] != '\0' ? sys : "/etc/dlock.conf");
  const char *xdg = getenv("XDG_CONFIG_HOME");
  const char *home = getenv("HOME");
  if (xdg != NULL && xdg[0] == '/')
    snprintf(user, ulen, "%s/dlock/config", xdg);
  else if (home != NULL && home[0] != '\0')
    snprintf(user, ulen, "%s/.config/dlock/config", home);
  else
    user[0] = '\0';
}

/* The first line of the password file, without its line end. A file that
 * others may read is used, with a warning (as ssh would not). */
static int read_password(const setting *s) {
  if (s->value == NULL || s->value[0] == '\0') return 0;
  int fd = open(s->value, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    fprintf(stderr, "dlock: password file %s (from %s): %s\n", s->value, s->source, strerror(errno));
    if (fd >= 0) close(fd);
    return CLI_EXIT_USAGE;
  }
  ssize_t n = S_ISREG(st.st_mode) ? read(fd, password, sizeof password - 1) : -1;
  close(fd);
  if (n < 0) {
    fprintf(stderr, "dlock: password file %s (from %s): not a readable file\n", s->value, s->source);
    return CLI_EXIT_USAGE;
  }
  password[n] = '\0';
  size_t len = strcspn(password, "\r\n");
  if ((size_t)n == sizeof password - 1 && len == (size_t)n) {
    fprintf(stderr, "dlock: password file %s: the first line is longer than %zu bytes\n", s->value,
            sizeof password - 2);
    return CLI_EXIT_USAGE;
  }
  password[len] = '\0';
  if (len == 0) {
    fprintf(stderr, "dlock: password file %s (from %s): its first line is empty\n", s->value, s->source);
    return CLI_EXIT_USAGE;
  }
  if ((st.st_mode & 077) != 0)
    fprintf(stderr, "dlock: warning: password file %s may be read by others (mode %04o): chmod 600 %s\n", s->value,
            (unsigned)(st.st_mode & 07777), s->value);
  have_password = 1;
  return 0;
}

int cli_config_load(void) {
  char system[2048], user[2048];
  int rc;

  if (loaded != 0) return loaded == 1 ? 0 : loaded;
  cli_config_paths(system, sizeof system, user, sizeof user);
  rc = read_file(system);
  if (rc == 0 && user[0] != '\0') rc = read_file(user);
  for (int i = 0; rc == 0 && i < S_COUNT; i++) {
    const char *e = settings[i].env != NULL ? getenv(settings[i].env) : NULL;
    if (e != NULL && e[0] != '\0') rc = set(&settings[i], e, strlen(e), settings[i].env);
  }
  if (rc == 0 && flag_url != NULL && flag_url[0] != '\0')
    rc = set(&settings[S_URL], flag_url, strlen(flag_url), "--url");
  if (rc == 0 && flag_prefix != NULL) rc = set(&settings[S_PREFIX], flag_prefix, strlen(flag_prefix), "--prefix");
  if (rc == 0 && flag_password_file != NULL && flag_password_file[0] != '\0')
    rc = set(&settings[S_PASSWORD_FILE], flag_password_file, strlen(flag_password_file), "--password-file");
  if (rc == 0) rc = read_password(&settings[S_PASSWORD_FILE]);
  loaded = rc == 0 ? 1 : rc;
  return rc;
}

/* The value of 'i', or NULL when nothing set it (the default applies). */
static const char *value(int i) {
  return settings[i].value != NULL && settings[i].value[0] != '\0' ? settings[i].value : NULL;
}

const char *cli_config_url(void) {
  cli_config_load();
  return value(S_URL) != NULL ? value(S_URL) : CLI_DEFAULT_URL;
}

int cli_config_url_defaulted(void) { return loaded == 1 && value(S_URL) == NULL; }

const char *cli_config_prefix(void) {
  cli_config_load();
  return value(S_PREFIX) != NULL ? value(S_PREFIX) : "";
}

void cli_config_apply(dlock_client_options *opts) {
  int64_t ms;

  cli_config_load();
  opts->url = cli_config_url();
  opts->key_prefix = value(S_PREFIX);
  opts->tls_ca_file = value(S_CA);
  opts->tls_cert_file = value(S_CERT);
  opts->tls_key_file = value(S_KEY);
  opts->tls_server_name = value(S_SNI);
  opts->password = have_password ? password : NULL;
  if (value(S_CONNECT_TO) != NULL && cli_parse_duration(value(S_CONNECT_TO), &ms) == 0)
    opts->connect_timeout_ms = (int)ms;
  if (value(S_COMMAND_TO) != NULL && cli_parse_duration(value(S_COMMAND_TO), &ms) == 0)
    opts->command_timeout_ms = (int)ms;
}

/* ---- dlock config ---- */

enum { OPT_JSON = 1 };

static const cli_opt config_opts[] = {
    {"json", 0, 0, OPT_JSON},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_config_opts[] = {config_opts, NULL};

int cmd_config(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *action = NULL;
  int json = 0, id;

  cli_args_init(&args, argc, argv, "config", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, config_opts, &arg)) != CLI_OPT_DONE) {
    switch (id) {
    case CLI_OPT_ERROR:
      return CLI_EXIT_USAGE;
    case CLI_OPT_POSITIONAL:
      if (action != NULL) return cli_usage_error("config", "unexpected argument '%s'", arg);
      action = arg;
      break;
    case CLI_OPT_DASHDASH:
      break;
    case CLI_OPT_URL:
      cli_config_set_flag("url", arg);
      break;
    case CLI_OPT_PREFIX:
      cli_config_set_flag("prefix", arg);
      break;
    case OPT_JSON:
      json = 1;
      break;
    default:
      return cli_usage_error("config", "internal: unhandled option");
    }
  }
  if (action == NULL) action = "show";
  if (strcmp(action, "show") != 0) return cli_usage_error("config", "unknown action '%s' (there is: show)", action);
  int rc = cli_config_load();
  if (rc != 0) return rc;

  char system[2048], user[2048];
  cli_config_paths(system, sizeof system, user, sizeof user);
  if (json) fputs("{\"settings\": {", stdout);
  for (int i = 0; i < S_COUNT; i++) {
    const setting *s = &settings[i];
    const char *v = value(i) != NULL ? value(i) : s->deflt;
    const char *src = value(i) != NULL ? s->source : "default";
    char shown[2048];
    if (i == S_URL)
      cli_redact_url(v, shown, sizeof shown);
    else if (i == S_PREFIX && v[0] != '\0' && v[strlen(v) - 1] != ':')
      snprintf(shown, sizeof shown, "%s:", v); /* as the library uses it */
    else
      snprintf(shown, sizeof shown, "%s", v);
    if (json) {
      printf("%s", i > 0 ? ", " : "");
      cli_json_string(stdout, s->key);
      fputs(": {\"value\": ", stdout);
      cli_json_string(stdout, shown);
      fputs(", \"source\": ", stdout);
      cli_json_string(stdout, src);
      fputc('}', stdout);
    } else {
      printf("%-16s %-40s # %s\n", s->key, shown[0] != '\0' ? shown : "(none)", src);
    }
  }
  if (json) {
    fputs("}, \"files\": [", stdout);
    cli_json_string(stdout, user);
    fputs(", ", stdout);
    cli_json_string(stdout, system);
    fputs("]}\n", stdout);
  } else {
    printf("# files: %s wins over %s; the environment over both; a flag over all\n",
           user[0] != '\0' ? user : "(no $HOME)", system);
  }
  return CLI_EXIT_OK;
}
