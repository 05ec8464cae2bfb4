/* tools/cli.h: the command-line rules every tool and subcommand follows: numbers parsed whole and in
 * range, one line saying why a command line is refused, usage on stderr, the same exit codes. */
#ifndef HM_TOOLS_CLI_H
#define HM_TOOLS_CLI_H

#include <getopt.h>
#include <stdio.h>

/* Exit codes, the same for every tool (grep's and diff's convention):
 *  0  the run passed (a check within tolerance, a bench's figures taken and their results right);
 *  1  a check failed: an output past tolerance, a wrong result, a kernel breaking the rules;
 *  2  misuse (the command line), refused before anything is opened or loaded, or a run that could
 *     not be done (the runtime, a file, a launch failing): a check that did not run did not fail. */
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAILED 1
#define CLI_EXIT_MISUSE 2
#define CLI_EXIT_NOT_RUN 2

/* One command's parse. prog starts every message ("hsa-mono-check ffn"); usage prints the command's
 * usage. The parse stops at the first refusal, so a refused command line prints one reason. */
typedef struct cli {
  const char *prog;
  void (*usage)(FILE *f);
  char opt[40]; /* the option being parsed, as the user wrote its name ("--rows") */
  int refused;
} cli;

/* getopt_long over argv (argv[0] the command's name) with this file's messages instead of getopt's:
 * the next option's val (optarg its value, c->opt its name), or -1 at the end of the options or at
 * the first refusal (an unknown option, a missing value). */
int cli_next(cli *c, int argc, char **argv, const struct option *opts);

/* optarg as a whole decimal number in lo..hi ("--rows '1y' is not a number", "--rows 99: must be
 * 1..48"). 1 and *out, or 0 with the reason printed and c refused (*out untouched). */
int cli_long(cli *c, long lo, long hi, long *out);
/* optarg as one of the n numbers in set ("--tp 3: must be 2 or 4"). */
int cli_long_of(cli *c, const long *set, unsigned n, long *out);
/* optarg as a whole unsigned 64-bit number: decimal, 0x hex or 0 octal (a seed). */
int cli_u64(cli *c, unsigned long long *out);
/* optarg as a comma-separated list of 1..max numbers, each in lo..hi, into out[0..*n). */
int cli_list(cli *c, long lo, long hi, long *out, unsigned max, unsigned *n);
/* optarg as a range "A-B", lo <= A <= B <= hi. */
int cli_range(cli *c, long lo, long hi, long *a, long *b);
/* optarg as one of the NULL-terminated words ("--config 'big': must be v41-flash or tiny"). */
int cli_word(cli *c, const char *const *words, const char **out);

/* optarg as the name of a file to write: it ends in one of the NULL-terminated endings (".csv") with
 * a name before it, and its directory exists and is writable ("--timeline 'x.txt': must end in .csv
 * or .json"). Nothing is created. */
int cli_out_path(cli *c, const char *const *endings, const char **out);
/* The end of the options: a word left over is refused ("unexpected argument 'x'"). After any refusal
 * prints the usage on stderr and returns 1 (the command exits CLI_EXIT_MISUSE); 0 for a command line
 * that parsed. */
int cli_end(cli *c, int argc, char **argv);

/* A refusal found after the parse (options that do not fit together, a layer the config does not
 * have): "prog: reason" and the usage on stderr. Returns CLI_EXIT_MISUSE. */
int cli_refuse(cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* HM_TOOLS_CLI_H */
