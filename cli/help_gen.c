/*
 * help_gen.c - what is generated from the help table of help.c besides
 * the Markdown manual: the roff manual page (dlock.1) and the bash and zsh
 * completion scripts. The build runs "dlock help --roff" and "dlock help
 * --completion SHELL" and installs the output, so the man page and the
 * completions cannot drift from --help: a new command or URL scheme written
 * into the table shows up in all of them. A command's options are those of
 * its descriptor's option tables (what its parser accepts), each with the
 * value word its help page gives it.
 *
 * The "more" texts and the manual's tail are a small Markdown subset:
 * paragraphs, "## " and "### " headings, ``` blocks, `code`, *emphasis*,
 * definition lists ("term" then ":   text") and tables ("| a | b |").
 */
#include <ctype.h>
#include <string.h>

#include "cli.h"

/* ---- roff ---- */

/* One UTF-8 sequence at 's' as \[uXXXX]; returns the bytes used. groff
 * reads its input as Latin-1, so raw UTF-8 would come out garbled. */
static size_t roff_utf8(FILE *out, const unsigned char *s) {
  unsigned cp;
  size_t n;

  if ((s[0] & 0xE0) == 0xC0) {
    cp = s[0] & 0x1Fu;
    n = 2;
  } else if ((s[0] & 0xF0) == 0xE0) {
    cp = s[0] & 0x0Fu;
    n = 3;
  } else if ((s[0] & 0xF8) == 0xF0) {
    cp = s[0] & 0x07u;
    n = 4;
  } else {
    fputs("\\[u003F]", out); /* not UTF-8: a question mark */
    return 1;
  }
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      fputs("\\[u003F]", out);
      return 1;
    }
    cp = cp << 6 | (s[i] & 0x3Fu);
  }
  fprintf(out, "\\[u%04X]", cp);
  return n;
}

/* Text of one input line, escaped for roff. 'inline_md': turn `code` into
 * bold and *text* into italics (off in the verbatim help pages). */
static void roff_text(FILE *out, const char *s, size_t len, int inline_md) {
  int code = 0, emph = 0;

  /* A control character at the start of a line would make it a request. */
  if (len > 0 && (s[0] == '.' || s[0] == '\'')) fputs("\\&", out);
  for (size_t i = 0; i < len;) {
    char c = s[i];
    if (inline_md && c == '`') {
      fputs(code ? "\\fR" : "\\fB", out);
      code = !code;
      i++;
    } else if (inline_md && !code && c == '*' &&
               (emph || (i + 1 < len && s[i + 1] != ' ' && memchr(s + i + 1, '*', len - i - 1)))) {
      fputs(emph ? "\\fR" : "\\fI", out);
      emph = !emph;
      i++;
    } else if (c == '\\') {
      fputs("\\e", out);
      i++;
    } else if (c == '-') {
      fputs("\\-", out); /* an ASCII minus: options must survive copy and paste */
      i++;
    } else if ((unsigned char)c >= 0x80) {
      i += roff_utf8(out, (const unsigned char *)s + i);
    } else {
      fputc(c, out);
      i++;
    }
  }
  if (code || emph) fputs("\\fR", out);
  fputc('\n', out);
}

/* A help page as it prints on the terminal: no filling, no adjusting. */
static void roff_verbatim(FILE *out, const char *text) {
  fputs(".PP\n.nf\n", out);
  for (const char *line = text; *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
    if (len == 0)
      fputs(".sp\n", out);
    else
      roff_text(out, line, len, 0);
    line += len + (end != NULL);
  }
  fputs(".fi\n", out);
}

static int starts(const char *line, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && strncmp(line, prefix, n) == 0;
}

/* One cell of a "| a | b |" row, trimmed. */
static void roff_cell(FILE *out, const char **p, const char *end) {
  const char *s = *p, *bar = s;

  while (bar < end && *bar != '|') bar++;
  const char *e = bar;
  while (s < e && *s == ' ') s++;
  while (e > s && e[-1] == ' ') e--;
  roff_text(out, s, (size_t)(e - s), 1);
  *p = bar < end ? bar + 1 : end;
}

/* The Markdown subset described at the top, as man(7) requests. */
static void roff_markdown(FILE *out, const char *md) {
  int para = 1, verbatim = 0, table_row = 0;

  for (const char *line = md; *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
    const char *next = line + len + (end != NULL);
    size_t next_len = strcspn(next, "\n");

    if (starts(line, len, "```")) {
      fputs(verbatim ? ".fi\n" : ".PP\n.nf\n", out);
      verbatim = !verbatim;
      para = !verbatim;
    } else if (verbatim) {
      if (len == 0)
        fputs(".sp\n", out);
      else
        roff_text(out, line, len, 0);
    } else if (len == 0) {
      para = 1;
      table_row = 0;
    } else if (starts(line, len, "## ")) {
      fputs(".SH ", out);
      roff_text(out, line + 3, len - 3, 0);
      para = 0;
    } else if (starts(line, len, "### ")) {
      fputs(".SS ", out);
      roff_text(out, line + 4, len - 4, 0);
      para = 0;
    } else if (line[0] == '|') {
      /* The first row is the header, the second the "---" rule: a man
       * page shows the rows as tagged paragraphs instead. */
      if (table_row++ >= 2) {
        const char *p = line + 1;
        fputs(".TP\n", out);
        roff_cell(out, &p, line + len);
        while (p < line + len) roff_cell(out, &p, line + len);
      }
      para = 0;
    } else if (starts(next, next_len, ":   ")) {
      fputs(".TP\n", out); /* a definition list's term */
      roff_text(out, line, len, 1);
      para = 0;
    } else if (starts(line, len, ":   ") || starts(line, len, "    ")) {
      roff_text(out, line + 4, len - 4, 1);
    } else {
      if (para) fputs(".PP\n", out);
      para = 0;
      roff_text(out, line, len, 1);
    }
    line = next;
  }
  if (verbatim) fputs(".fi\n", out);
}

void cli_help_roff(FILE *out) {
  size_t n;
  const cli_command *pages = cli_commands(&n);
  const cli_command *top = NULL;

  for (size_t i = 0; i < n; i++) {
    if (pages[i].name == NULL) top = &pages[i];
  }
  fputs(".\\\" Generated by 'dlock help --roff' from cli/help.c. Do not edit.\n", out);
  fprintf(out, ".TH DLOCK 1 \"\" \"dlock %s\" \"User Commands\"\n", DLOCK_VERSION);
  fputs(".SH NAME\ndlock \\- distributed locks on Redis, from the shell\n", out);
  fputs(".SH SYNOPSIS\n", out);
  if (top != NULL) roff_verbatim(out, cli_command_page(top));
  fputs(".SH DESCRIPTION\n", out);
  if (top != NULL && top->more != NULL) roff_markdown(out, top->more);
  fputs(".SH COMMANDS\n", out);
  for (size_t i = 0; i < n; i++) {
    if (pages[i].name == NULL) continue;
    fprintf(out, ".SS dlock %s\n", pages[i].name);
    roff_verbatim(out, pages[i].page);
    if (pages[i].more != NULL) roff_markdown(out, pages[i].more);
  }
  roff_markdown(out, cli_help_man_tail());
}

/* ---- completion ---- */

/* What the help pages say about a command's options. */
#define GEN_MAX_OPTS 64
#define GEN_MAX_WORDS 16

typedef struct gen_opt {
  char name[48]; /* "--wait" or "-w" */
  char arg[48];  /* "DURATION", "cross|same|none"; "" when it takes none */
} gen_opt;

typedef struct gen_cmd {
  const char *name;
  gen_opt opts[GEN_MAX_OPTS];
  int nopts;
  char words[GEN_MAX_WORDS][32]; /* the verbs after the name: "check", "set", "down" */
  int nwords;
} gen_cmd;

/* Values of an option that its help says only in prose. */
static const struct {
  const char *option, *values;
} known_values[] = {
    {"--on-lost", "term kill ignore"},
};

static void gen_add_opt(gen_cmd *c, const char *name, size_t len, const char *arg, size_t arg_len) {
  if (len >= sizeof c->opts[0].name || arg_len >= sizeof c->opts[0].arg) return;
  for (int i = 0; i < c->nopts; i++) {
    if (strlen(c->opts[i].name) == len && strncmp(c->opts[i].name, name, len) == 0) {
      if (c->opts[i].arg[0] == '\0' && arg_len > 0)
        snprintf(c->opts[i].arg, sizeof c->opts[i].arg, "%.*s", (int)arg_len, arg);
      return;
    }
  }
  if (c->nopts == GEN_MAX_OPTS) return;
  snprintf(c->opts[c->nopts].name, sizeof c->opts[0].name, "%.*s", (int)len, name);
  snprintf(c->opts[c->nopts].arg, sizeof c->opts[0].arg, "%.*s", (int)arg_len, arg);
  c->nopts++;
}

static int opt_char(char c) { return isalnum((unsigned char)c) || c == '-'; }

/* Every option in 'spec' (an option line before its description, or a
 * usage line): "-w, --wait DURATION", "[--json FILE]", "-q/--quiet". An
 * option takes a value when an upper-case word or a|b|c list follows it. */
static void gen_scan_spec(gen_cmd *c, const char *s, size_t len) {
  const char *short_at = NULL;

  for (size_t i = 0; i < len; i++) {
    if (s[i] != '-' || (i > 0 && strchr(" [,/|", s[i - 1]) == NULL)) continue;
    size_t start = i, end = i + 1;
    if (end < len && s[end] == '-') end++;
    if (end >= len || !isalpha((unsigned char)s[end])) continue;
    while (end < len && opt_char(s[end])) end++;
    if (end - start == 2 && s[start + 1] == '-') continue;
    const char *arg = s + end;
    size_t arg_len = 0;
    if (end + 1 < len && (s[end] == ' ' || s[end] == '=') &&
        (isupper((unsigned char)s[end + 1]) || islower((unsigned char)s[end + 1]))) {
      arg = s + end + 1;
      while (arg + arg_len < s + len && strchr(" ]", arg[arg_len]) == NULL) arg_len++;
      /* A lower-case word is a value list only when it has a '|'. */
      if (islower((unsigned char)arg[0]) && memchr(arg, '|', arg_len) == NULL) arg_len = 0;
      /* "NAME[,NAME...]": the value is NAME */
      const char *br = memchr(arg, '[', arg_len);
      if (br != NULL) arg_len = (size_t)(br - arg);
    }
    gen_add_opt(c, s + start, end - start, arg, arg_len);
    /* "-w, --wait DURATION": the short one is an alias and takes it too. */
    if (end - start > 2 && short_at != NULL) gen_add_opt(c, short_at, 2, arg, arg_len);
    short_at = NULL;
    if (end - start == 2 && (starts(s + end, len - end, ", --") || starts(s + end, len - end, "/--")))
      short_at = s + start;
    i = end - 1;
  }
}

static void gen_scan_page(gen_cmd *c, const char *page) {
  int usage = 1;

  for (const char *line = page; *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end != NULL ? (size_t)(end - line) : strlen(line);

    if (usage && (starts(line, len, "Usage:") || line[0] == ' ')) {
      /* "Usage: dlock fence check ...", "       dlock latch down NAME": the
       * literal word after the name, one per usage line (the verbs). */
      const char *p = strstr(line, "dlock ");
      if (p != NULL && p < line + len) {
        p += strlen("dlock ") + strlen(c->name);
        size_t w = *p == ' ' && islower((unsigned char)p[1]) ? strspn(p + 1, "abcdefghijklmnopqrstuvwxyz") : 0;
        int seen = 0;
        for (int j = 0; j < c->nwords; j++) seen |= strlen(c->words[j]) == w && strncmp(c->words[j], p + 1, w) == 0;
        if (w > 0 && (p[1 + w] == ' ' || p[1 + w] == '\n') && !seen && c->nwords < GEN_MAX_WORDS &&
            w < sizeof c->words[0])
          snprintf(c->words[c->nwords++], sizeof c->words[0], "%.*s", (int)w, p + 1);
      }
      gen_scan_spec(c, line, len);
    } else {
      usage = 0;
      if (starts(line, len, "  -")) {
        /* The option part ends where the description column starts. */
        size_t spec = 2;
        while (spec < len && !starts(line + spec, len - spec, "  ") && !starts(line + spec, len - spec, ": ")) spec++;
        gen_scan_spec(c, line, spec);
      }
    }
    line += len + (end != NULL);
  }
}

/* URL schemes named anywhere in the help texts ("rediss://"). */
static void gen_scan_schemes(const char *text, char schemes[][32], int *n, int max) {
  for (const char *p = strstr(text, "://"); p != NULL; p = strstr(p + 3, "://")) {
    const char *s = p;
    while (s > text && (islower((unsigned char)s[-1]) || s[-1] == '-' || s[-1] == '+')) s--;
    size_t len = (size_t)(p - s) + 3;
    if (p == s || !isalpha((unsigned char)*s) || len >= sizeof schemes[0]) continue;
    if (starts(s, len, "http://") || starts(s, len, "https://")) continue;
    int seen = 0;
    for (int i = 0; i < *n; i++) seen |= strlen(schemes[i]) == len && strncmp(schemes[i], s, len) == 0;
    if (!seen && *n < max) snprintf(schemes[(*n)++], sizeof schemes[0], "%.*s", (int)len, s);
  }
}

/* Everything the generators need, from the help table. */
typedef struct gen_all {
  gen_cmd cmds[32];
  int ncmds;
  char schemes[16][32];
  int nschemes;
} gen_all;

/* The value word the page gives option 'name' (or its alias 'alias'). */
static const char *gen_prose_arg(const gen_cmd *prose, const char *name, const char *alias) {
  for (int i = 0; i < prose->nopts; i++)
    if (prose->opts[i].arg[0] != '\0' &&
        (strcmp(prose->opts[i].name, name) == 0 || (alias != NULL && strcmp(prose->opts[i].name, alias) == 0)))
      return prose->opts[i].arg;
  return NULL;
}

/* The options of descriptor 'd' into 'c': the common ones it takes, then
 * those of its tables, in the parser's order, each with the value word of
 * its page ('prose'; "VALUE" when the page gives none). */
static void gen_table_opts(gen_cmd *c, const cli_command *d, const gen_cmd *prose) {
  const cli_opt *const common[] = {cli_common_opts, NULL};

  for (int pass = 0; pass < 2; pass++) {
    const cli_opt *const *tables = pass == 0 ? common : d->opts;
    for (size_t t = 0; tables[t] != NULL; t++) {
      for (const cli_opt *o = tables[t]; o->long_name != NULL; o++) {
        if (pass == 0 && (d->common & cli_common_bit(o->id)) == 0) continue;
        char name[48], alias[4] = "";
        snprintf(name, sizeof name, "--%s", o->long_name);
        if (o->short_name != 0) snprintf(alias, sizeof alias, "-%c", o->short_name);
        const char *arg = o->has_arg ? gen_prose_arg(prose, name, alias[0] ? alias : NULL) : "";
        if (arg == NULL) arg = o->id == CLI_OPT_PASSWORD_FILE ? "FILE" : "VALUE";
        gen_add_opt(c, name, strlen(name), arg, strlen(arg));
        if (alias[0] != '\0') gen_add_opt(c, alias, 2, arg, strlen(arg));
      }
    }
  }
}

static void gen_collect(gen_all *g) {
  size_t n;
  const cli_command *pages = cli_commands(&n);
  static gen_cmd prose;

  memset(g, 0, sizeof *g);
  for (size_t i = 0; i < n; i++) {
    gen_scan_schemes(cli_command_page(&pages[i]), g->schemes, &g->nschemes, 16);
    if (pages[i].more != NULL) gen_scan_schemes(pages[i].more, g->schemes, &g->nschemes, 16);
    if (pages[i].name == NULL || g->ncmds == 32) continue;
    gen_cmd *c = &g->cmds[g->ncmds++];
    c->name = pages[i].name;
    if (pages[i].opts == NULL) {
      /* A command that passes its options on (bench): its page's. */
      gen_scan_page(c, pages[i].page);
    } else {
      /* Its verbs from the usage lines, its options from its tables. */
      memset(&prose, 0, sizeof prose);
      prose.name = c->name;
      gen_scan_page(&prose, pages[i].page);
      memcpy(c->words, prose.words, sizeof c->words);
      c->nwords = prose.nwords;
      gen_table_opts(c, &pages[i], &prose);
    }
    gen_add_opt(c, "-h", 2, "", 0);
    gen_add_opt(c, "--help", 6, "", 0);
  }
  gen_scan_schemes(cli_help_man_tail(), g->schemes, &g->nschemes, 16);
}

/* The words a value of option 'o' can take, or NULL. */
static void gen_values(FILE *out, const gen_opt *o) {
  for (size_t i = 0; i < sizeof known_values / sizeof known_values[0]; i++) {
    if (strcmp(o->name, known_values[i].option) == 0) {
      fputs(known_values[i].values, out);
      return;
    }
  }
  for (const char *p = o->arg; *p != '\0'; p++) fputc(*p == '|' ? ' ' : *p, out);
}

/* The kind of value: u (URL), w (words), f (file), n (nothing to offer). */
static char gen_kind(const gen_opt *o) {
  if (strcmp(o->name, "--url") == 0) return 'u';
  for (size_t i = 0; i < sizeof known_values / sizeof known_values[0]; i++) {
    if (strcmp(o->name, known_values[i].option) == 0) return 'w';
  }
  if (strchr(o->arg, '|') != NULL) return 'w';
  if (strstr(o->arg, "FILE") != NULL || strstr(o->arg, "PATH") != NULL) return 'f';
  return 'n';
}

/* Shell functions both scripts share the shape of: per command, the options,
 * the options that take a value, and what that value can be. */
static void gen_case_lists(FILE *out, const gen_all *g, const char *indent, int zsh) {
  for (int i = 0; i < g->ncmds; i++) {
    const gen_cmd *c = &g->cmds[i];
    fprintf(out, "%s%s)\n%s  opts=%s", indent, c->name, indent, zsh ? "(" : "\"");
    for (int j = 0; j < c->nopts; j++) fprintf(out, "%s%s", j ? " " : "", c->opts[j].name);
    fprintf(out, "%s\n%s  subs=%s", zsh ? ")" : "\"", indent, zsh ? "(" : "\"");
    for (int j = 0; j < c->nwords; j++) fprintf(out, "%s%s", j ? " " : "", c->words[j]);
    fprintf(out, "%s\n%s  case $prev in\n", zsh ? ")" : "\"", indent);
    for (int j = 0; j < c->nopts; j++) {
      const gen_opt *o = &c->opts[j];
      if (o->arg[0] == '\0' && gen_kind(o) == 'n') continue;
      char kind = gen_kind(o);
      fprintf(out, "%s    %s) kind=%c", indent, o->name, kind);
      if (kind == 'w') {
        fprintf(out, " values=%s", zsh ? "(" : "\"");
        gen_values(out, o);
        fputs(zsh ? ")" : "\"", out);
      }
      fputs(" ;;\n", out);
    }
    fprintf(out, "%s  esac\n%s  ;;\n", indent, indent);
  }
}

static void gen_bash(FILE *out, const gen_all *g) {
  fputs("# bash completion for dlock(1).\n"
        "# Generated by 'dlock help --completion bash' from cli/help.c. Do not edit.\n"
        "\n"
        "_dlock_commands=\"",
        out);
  for (int i = 0; i < g->ncmds; i++) fprintf(out, "%s%s", i ? " " : "", g->cmds[i].name);
  fputs("\"\n_dlock_schemes=\"", out);
  for (int i = 0; i < g->nschemes; i++) fprintf(out, "%s%s", i ? " " : "", g->schemes[i]);
  fputs("\"\n"
        "\n"
        "# _dlock_spec CMD PREV: opts (CMD's options), subs (literal words after\n"
        "# CMD), and when PREV is an option that takes a value: kind (u: a URL,\n"
        "# w: one of values, f: a file, n: nothing to offer).\n"
        "_dlock_spec() {\n"
        "  local prev=$2\n"
        "  opts= subs= kind= values=\n"
        "  case $1 in\n",
        out);
  gen_case_lists(out, g, "  ", 0);
  fputs("  esac\n"
        "}\n"
        "\n"
        "_dlock() {\n"
        "  local -a w=()\n"
        "  local i p cword=0 cur prev cmd= npos=0 opts subs kind values\n"
        "  # Join what COMP_WORDBREAKS split at ':' (redis://host) back into one word.\n"
        "  for ((i = 0; i <= COMP_CWORD; i++)); do\n"
        "    if ((i > 0)) && [[ ${COMP_WORDS[i]} == : || ${COMP_WORDS[i-1]} == : ]] &&\n"
        "       [[ $COMP_WORDBREAKS == *:* ]]; then\n"
        "      w[${#w[@]}-1]+=${COMP_WORDS[i]}\n"
        "    else\n"
        "      w+=(\"${COMP_WORDS[i]}\")\n"
        "    fi\n"
        "  done\n"
        "  cword=$((${#w[@]} - 1))\n"
        "  cur=${w[cword]}\n"
        "  prev=${w[cword-1]}\n"
        "  # --opt=value: COMP_WORDBREAKS also splits at '='.\n"
        "  if [[ $cur == = ]]; then cur=; elif [[ $prev == = ]]; then prev=${w[cword-2]}; fi\n"
        "  if [[ $cur == --*=* ]]; then prev=${cur%%=*}; cur=${cur#*=}; fi\n"
        "  COMPREPLY=()\n"
        "  for ((i = 1; i < cword; i++)); do\n"
        "    if [[ ${w[i]} == -- && -n $cmd ]]; then\n"
        "      # The command to run and its arguments.\n"
        "      if ((i + 1 == cword)); then\n"
        "        COMPREPLY=($(compgen -c -- \"$cur\"))\n"
        "      else\n"
        "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
        "      fi\n"
        "      return 0\n"
        "    fi\n"
        "    if [[ -z $cmd ]]; then\n"
        "      [[ ${w[i]} == -* ]] || cmd=${w[i]}\n"
        "    elif [[ ${w[i]} != -* && ${w[i]} != = ]]; then\n"
        "      p=${w[i-1]}\n"
        "      [[ $p == = ]] && p=${w[i-2]}\n"
        "      _dlock_spec \"$cmd\" \"$p\"\n"
        "      [[ -n $kind ]] || npos=$((npos + 1))\n"
        "    fi\n"
        "  done\n"
        "  if [[ -z $cmd ]]; then\n"
        "    if [[ $cur == -* ]]; then\n"
        "      COMPREPLY=($(compgen -W \"--help -h --version\" -- \"$cur\"))\n"
        "    else\n"
        "      COMPREPLY=($(compgen -W \"$_dlock_commands\" -- \"$cur\"))\n"
        "    fi\n"
        "    return 0\n"
        "  fi\n"
        "  _dlock_spec \"$cmd\" \"$prev\"\n"
        "  case $kind in\n"
        "    u)\n"
        "      COMPREPLY=($(compgen -W \"$_dlock_schemes\" -- \"$cur\"))\n"
        "      compopt -o nospace 2>/dev/null\n"
        "      ;;\n"
        "    w) COMPREPLY=($(compgen -W \"$values\" -- \"$cur\")) ;;\n"
        "    f) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
        "    n) ;;\n"
        "    *)\n"
        "      if [[ $cur == -* ]]; then\n"
        "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
        "      elif [[ $cmd == help ]] && ((npos == 0)); then\n"
        "        COMPREPLY=($(compgen -W \"$_dlock_commands\" -- \"$cur\"))\n"
        "      elif [[ -n $subs ]] && ((npos == 0)); then\n"
        "        COMPREPLY=($(compgen -W \"$subs\" -- \"$cur\"))\n"
        "      fi\n"
        "      ;;\n"
        "  esac\n"
        "  # Like bash-completion's __ltrim_colon_completions: readline replaces\n"
        "  # only what follows the last ':' of the word.\n"
        "  if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then\n"
        "    local colon=${cur%\"${cur##*:}\"}\n"
        "    for i in \"${!COMPREPLY[@]}\"; do COMPREPLY[i]=${COMPREPLY[i]#\"$colon\"}; done\n"
        "  fi\n"
        "  return 0\n"
        "}\n"
        "complete -F _dlock dlock\n",
        out);
}

static void gen_zsh(FILE *out, const gen_all *g) {
  fputs("#compdef dlock\n"
        "# zsh completion for dlock(1).\n"
        "# Generated by 'dlock help --completion zsh' from cli/help.c. Do not edit.\n"
        "\n"
        "_dlock() {\n"
        "  local -a commands schemes opts subs values\n"
        "  local cmd= prev=${words[CURRENT-1]} cur=${words[CURRENT]} kind= i npos=0\n"
        "  commands=(",
        out);
  for (int i = 0; i < g->ncmds; i++) fprintf(out, "%s%s", i ? " " : "", g->cmds[i].name);
  fputs(")\n  schemes=(", out);
  for (int i = 0; i < g->nschemes; i++) fprintf(out, "%s%s", i ? " " : "", g->schemes[i]);
  fputs(")\n"
        "  local -a line\n"
        "  line=(\"${words[@]}\")\n"
        "  for ((i = 2; i < CURRENT; i++)); do\n"
        "    if [[ ${line[i]} == -- && -n $cmd ]]; then\n"
        "      # The command to run and its arguments.\n"
        "      words=(\"${(@)words[i+1,-1]}\")\n"
        "      (( CURRENT -= i ))\n"
        "      _normal\n"
        "      return\n"
        "    fi\n"
        "    if [[ -z $cmd ]]; then\n"
        "      [[ ${line[i]} == -* ]] || cmd=${line[i]}\n"
        "    elif [[ ${line[i]} != -* ]]; then\n"
        "      prev=${line[i-1]}\n"
        "      _dlock_spec\n"
        "      [[ -n $kind ]] || (( npos++ ))\n"
        "    fi\n"
        "  done\n"
        "  prev=${line[CURRENT-1]}\n"
        "  if [[ $cur == --*=* ]]; then\n"
        "    prev=${cur%%=*}\n"
        "    compset -P '*='\n"
        "  fi\n"
        "  if [[ -z $cmd ]]; then\n"
        "    if [[ $cur == -* ]]; then\n"
        "      compadd -- --help -h --version\n"
        "    else\n"
        "      compadd -- $commands\n"
        "    fi\n"
        "    return\n"
        "  fi\n"
        "  kind=\n"
        "  _dlock_spec\n"
        "  case $kind in\n"
        "    u) compadd -S '' -- $schemes ;;\n"
        "    w) compadd -- $values ;;\n"
        "    f) _files ;;\n"
        "    n) _message 'value' ;;\n"
        "    *)\n"
        "      if [[ $cur == -* ]]; then\n"
        "        compadd -- $opts\n"
        "      elif [[ $cmd == help ]] && (( npos == 0 )); then\n"
        "        compadd -- $commands\n"
        "      elif (( ${#subs} && npos == 0 )); then\n"
        "        compadd -- $subs\n"
        "      fi\n"
        "      ;;\n"
        "  esac\n"
        "}\n"
        "\n"
        "# Sets opts, subs and, when $prev takes a value, kind and values (see\n"
        "# the bash script); reads $cmd and $prev.\n"
        "_dlock_spec() {\n"
        "  opts=() subs=() kind= values=()\n"
        "  case $cmd in\n",
        out);
  gen_case_lists(out, g, "  ", 1);
  fputs("  esac\n"
        "}\n"
        "\n"
        "_dlock \"$@\"\n",
        out);
}

int cli_help_completion(FILE *out, const char *shell) {
  static gen_all g; /* large; the CLI runs this once */

  if (strcmp(shell, "bash") != 0 && strcmp(shell, "zsh") != 0) return -1;
  gen_collect(&g);
  if (strcmp(shell, "bash") == 0)
    gen_bash(out, &g);
  else
    gen_zsh(out, &g);
  return 0;
}
