/* tests/tools/test_cli.c: the command-line rules every tool keeps (tools/cli.h), swept over bad argument
 * lines of hsa-mono-check, hsa-mono-bench and hsa-mono-info and all their subcommands. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

/* `tool args` through the shell (args may quote) with a runtime that cannot open, so a tool that
 * opened one before refusing its command line says so instead of naming the option; stdout and
 * stderr into *out and *err (caller frees); the exit status, -1 when it did not exit. */
static int run(char tool, const char *args, char **out, char **err) {
  const char *bin = getenv(tool == 'c' ? "HSAMONO_CHECK_BIN" : tool == 'b' ? "HSAMONO_BENCH_BIN" : "HSAMONO_INFO_BIN");
  ck_assert_msg(bin != NULL, "the tools' paths are not set");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cd %s && HSAMONO_RUNTIME=%s/no-such-hsa.so %s %s >out 2>err", dir, dir, bin, args);
  int st = system(cmd);
  char **dst[2] = {out, err};
  const char *name[2] = {"out", "err"};
  for (int i = 0; i < 2; i++) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name[i]);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    char *buf = calloc(1, 1 << 16);
    buf[fread(buf, 1, (1 << 16) - 1, f)] = 0;
    fclose(f);
    *dst[i] = buf;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/hm-cli-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* A bad command line: the tool ('c' check, 'b' bench, 'i' info), its arguments, and what the reason
 * must name (the option, or the word at fault). */
struct bad {
  char tool;
  const char *args, *names;
};

#define FFN "ffn --config tiny "
#define K1 "k1 --config tiny --tp 2 --rows 2 "
#define LAYER "layer --config tiny --layer 3 --tp 2 "
#define MODEL "model --config tiny --tp 2 --rows 2 "
#define REF "ref --config tiny --layer 5 --rows 4 --tp 2 --seed 9 "
static const struct bad bad[] = {
    /* hsa-mono-check ffn: numbers whole and in range, 0 no longer the default (issue 16 finding 6) */
    {'c', FFN "--tp 2x --rows 1y", "--tp '2x'"}, {'c', FFN "--tp 2 --rows 1y", "--rows '1y'"},
    {'c', FFN "--tp 3 --rows 1", "--tp 3"}, {'c', FFN "--tp 2 --rows 0", "--rows 0"},
    {'c', FFN "--tp 2 --rows 49", "--rows 49"}, {'c', FFN "--tp 2 --rows -1", "--rows -1"},
    {'c', FFN "--tp 2 --rows 1 --experts 0", "--experts 0"}, {'c', FFN "--tp 2 --rows 1 --topk 0", "--topk 0"},
    {'c', FFN "--tp 2 --rows 1 --experts 0 --topk 0", "--experts"}, {'c', FFN "--tp 2 --rows 1 --ctas 0", "--ctas"},
    {'c', FFN "--tp 2 --rows 1 --ctas -1", "--ctas"}, {'c', FFN "--tp 2 --rows 1 --ctas 99999", "--ctas"},
    {'c', FFN "--tp 2 --rows 1 --layer 43", "--layer"}, {'c', FFN "--tp 2 --rows 1 --layer x", "--layer"},
    {'c', FFN "--tp 2 --rows 1 --config big", "--config"}, {'c', FFN "--tp 2 --rows 1 --seed -3", "--seed"},
    {'c', FFN "--tp 2 --rows 1 --seed 99999999999999999999999", "--seed"},
    {'c', FFN "--tp 2 --rows 1 --seed 0x", "--seed"}, {'c', FFN "--tp 2 --rows", "--rows needs a value"},
    {'c', FFN "--tp 2 --rows 1 --frob", "--frob"}, {'c', FFN "--tp 2 --rows 1 extra", "'extra'"},
    {'c', FFN "--rows 1", "--tp"}, {'c', FFN "--tp 2", "--rows"}, {'c', FFN "--tp ' 2' --rows 1", "--tp"},
    {'c', FFN "--tp 2 --rows 1 --experts 3", "experts 3"}, {'c', FFN "--tp=2x --rows 1", "--tp"},
    {'c', FFN "--tp 2 --rows 1 --topk 17", "--topk"}, {'c', FFN "--tp 2 --rows 99999999999999999999", "--rows"},
    {'c', FFN "--tp 4 --rows ''", "--rows"}, {'c', FFN "--tp 2 --rows +1", "--rows"},
    /* k1 */
    {'c', K1 "--ratio 3", "--ratio"}, {'c', K1 "--ratio x", "--ratio"}, {'c', "k1 --config tiny --tp 2 --rows 2", "--ratio"},
    {'c', K1 "--layer 3 --ratio 1", "--ratio"}, {'c', K1 "--ratio 1 --ctx -1", "--ctx"},
    {'c', K1 "--ratio 1 --ctx 4096", "--ctx"}, {'c', "k1 --tp 2 --rows 8 --ratio 1 --ctx 4090", "--ctx"},
    {'c', K1 "--ratio 1 --reqs 0", "--reqs"}, {'c', "k1 --tp 2 --rows 3 --reqs 2 --ratio 1", "--reqs"},
    {'c', K1 "--ratio 1 --block 1", "--block"}, {'c', K1 "--ratio 1 --block 6", "--block"},
    {'c', K1 "--ratio 1 --block 8192", "--block"}, {'c', "k1 --tp 8 --rows 2 --ratio 1", "--tp"},
    {'c', K1 "--ratio 1 --ctas 0", "--ctas"}, {'c', K1 "--ratio 1 --seed x", "--seed"},
    {'c', "k1 --tp 2 --rows 1.5 --ratio 1", "--rows"}, {'c', K1 "--ratio 1 stray", "'stray'"},
    /* layer */
    {'c', "layer --config tiny --tp 2 --rows 2", "--layer"}, {'c', LAYER "--rows 2 --layer 43", "--layer"},
    {'c', LAYER "--rows 2 --layer -1", "--layer"}, {'c', "layer --layer 3 --tp 1 --rows 2", "--tp"},
    {'c', LAYER "--rows 49", "--rows"}, {'c', LAYER "--rows 2x", "--rows"},
    {'c', LAYER "--rows 2 --experts 0", "--experts"}, {'c', LAYER "--rows 2 --experts 2", "experts 2"},
    {'c', LAYER "--rows 2 --reqs 3", "--reqs"}, {'c', LAYER "--rows 2 --block 3", "--block"},
    {'c', LAYER "--rows 2 --ctx 1e3", "--ctx"}, {'c', LAYER "--rows 2 --config V41", "--config"},
    {'c', LAYER "--rows 2 --ctas", "--ctas"}, {'c', LAYER "--rows 2 --steps 2", "--steps"},
    /* model */
    {'c', MODEL "--layers 4-2", "--layers"}, {'c', MODEL "--layers 2", "--layers"},
    {'c', MODEL "--layers 0-43", "--layers"}, {'c', MODEL "--layers x-3", "--layers"},
    {'c', MODEL "--layers 2-", "--layers"}, {'c', MODEL "--layers 2-4 --steps 0", "--steps"},
    {'c', MODEL "--layers 2-4 --steps 5000", "--steps"}, {'c', MODEL "--layers 2-4 --ctx 4090 --steps 8", "context 4090"},
    {'c', MODEL "--layers 2-4 --experts 0", "--experts"}, {'c', MODEL "--layers 2-4 --experts 3", "experts 3"},
    {'c', "model --config tiny --layers 2-4 --tp 3 --rows 2", "--tp"}, {'c', MODEL, "--layers"},
    {'c', MODEL "--layers 2-4 --config big", "--config"},
    /* ref: the same misuse, the same exit code as ffn's (issue 16 finding 6) */
    {'c', REF "--out o --tp 3", "--tp 3"}, {'c', REF "--out o --tp 8", "--tp 8"},
    {'c', REF "--out o --layer 99", "--layer 99"}, {'c', REF "--out o --rows 0", "--rows"},
    {'c', REF "--out o --seed x", "--seed"}, {'c', REF "--out o --launch moe", "--launch"},
    {'c', REF "--out o --experts 0", "--experts"}, {'c', REF "--out o --topk 0", "--topk"},
    {'c', REF "--out o --context -5", "--context"}, {'c', REF "--out o --reqs 3", "--reqs"},
    {'c', REF, "--out"}, {'c', "ref --config tiny --layer 5 --rows 4 --tp 2 --out o", "--seed"},
    {'c', "ref --config tiny --layer 5", "--rows"}, {'c', REF "--out o --config big", "--config"},
    {'c', "", "command"}, {'c', "frob", "'frob'"},
    /* ref --arch: a word of the list; gfx942 TP 4 only and at most 42 rows (spec/mono.md §5) */
    {'c', REF "--out o --arch gfx942", "--tp 2: --arch gfx942"}, {'c', REF "--out o --arch gfx90a", "--arch"},
    {'c', REF "--out o --arch", "--arch needs a value"}, {'c', REF "--out o --arch GFX942", "--arch"},
    {'c', "ref --config tiny --layer 5 --rows 43 --tp 4 --seed 9 --out o --arch gfx942", "--rows 43"},
    /* --arch on the launch tools (issue 13 item 4): ffn, k1, layer and model take gfx942 at TP 4 and at
     * most 42 rows, refusing anything else before the runtime opens */
    {'c', FFN "--tp 2 --rows 1 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only (spec/mono.md §5.1.3)"},
    {'c', FFN "--tp 4 --rows 43 --arch gfx942", "--rows 43: --arch gfx942 takes at most 42 rows"},
    {'c', FFN "--tp 4 --rows 1 --arch gfx90a", "--arch 'gfx90a'"}, {'c', FFN "--tp 4 --rows 1 --arch", "--arch needs a value"},
    {'c', K1 "--ratio 1 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only"},
    {'c', LAYER "--rows 2 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only (spec/mono.md §5.1.3)"},
    {'c', "layer --config tiny --layer 3 --tp 4 --rows 43 --arch gfx942", "--rows 43: --arch gfx942 takes at most 42"},
    {'c', MODEL "--layers 2-4 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only"},
    {'c', "model --config tiny --tp 4 --rows 43 --layers 2-4 --arch gfx942", "--rows 43: --arch gfx942 takes at most"},
    {'c', LAYER "--rows 2 --arch gfx90a", "--arch 'gfx90a'"},
    {'b', "ffn --tp 2 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only"},
    {'b', "ffn --rows 1,43 --arch gfx942", "--rows 43: --arch gfx942 takes at most 42 rows"},
    {'b', "ffn --arch mi300", "--arch 'mi300'"},
    {'b', "k1 --rows 1,43 --arch gfx942", "--rows 43: --arch gfx942 takes at most 42 rows"},
    {'b', "layer --tp 2 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only"},
    {'b', "layer --rows 1,43 --arch gfx942", "--rows 43: --arch gfx942 takes at most 42 rows"},
    {'b', "model --tp 2 --arch gfx942", "--tp 2: --arch gfx942 is TP 4 only"},
    {'b', "model --rows 43 --arch gfx942", "--rows 43: --arch gfx942 takes at most 42 rows"},
    /* hsa-mono-bench ffn, k1, layer, model */
    {'b', "ffn --tp 3", "--tp"}, {'b', "ffn --rows 49", "--rows"}, {'b', "ffn --rows 1,,2", "--rows"},
    {'b', "ffn --rows 1,x", "--rows"}, {'b', "ffn --rows ,1", "--rows"},
    {'b', "ffn --rows 1,2,3,4,5,6,7,8,9", "--rows"}, {'b', "ffn --steps 0", "--steps"},
    {'b', "ffn --steps -1", "--steps"}, {'b', "ffn --experts 0", "--experts"}, {'b', "ffn --ctas -2", "--ctas"},
    {'b', "ffn --topk 0", "--topk"}, {'b', "ffn --config tiny --experts 3", "experts 3"},
    /* --model PART (issue 15): a part of the launch's own arch */
    {'b', "ffn --model mi300x", "--model mi300x: the part of --arch gfx950 is mi355x"},
    {'b', "ffn --arch gfx942 --model mi355x", "--model mi355x: the part of --arch gfx942 is mi300x"},
    {'b', "k1 --model mi300x", "--model mi300x: the part of --arch gfx950 is mi355x"},
    {'b', "ffn --model h100", "--model"},
    {'b', "layer --model mi300x", "--model mi300x: the part of --arch gfx950 is mi355x"},
    {'b', "k1 --tp 3", "--tp"}, {'b', "k1 --rows 1,49", "--rows"}, {'b', "k1 --steps x", "--steps"},
    {'b', "k1 --layer 43", "--layer"}, {'b', "k1 --steps 0", "--steps"},
    {'b', "layer --rows 0", "--rows"}, {'b', "layer --steps 0", "--steps"}, {'b', "layer --layer 43", "--layer"},
    {'b', "layer --experts 0", "--experts"}, {'b', "layer --config tiny --experts 3", "experts 3"},
    {'b', "layer --seed -1", "--seed"}, {'b', "model --layers 3-2", "--layers"},
    {'b', "model --layers 0-43", "--layers"}, {'b', "model --layers 2,x", "--layers"}, {'b', "model --tp 1", "--tp"},
    {'b', "model --layers 2,43", "--layers"}, {'b', "model --config tiny --experts 3", "experts 3"},
    /* --timeline FILE (issue 15): a .csv or .json name in a directory that exists (out is a file) */
    {'b', FFN "--timeline t.txt", "'t.txt': must be a file name ending in .csv or .json"},
    {'b', FFN "--timeline .csv", "'.csv': must be a file name ending in .csv or .json"},
    {'b', FFN "--timeline nodir/t.csv", "'nodir/t.csv': no directory 'nodir'"},
    {'b', K1 "--timeline out/t.json", "'out/t.json': no directory 'out'"},
    {'b', LAYER "--timeline d/.json", "'d/.json': must be a file name"}, {'b', FFN "--timeline", "--timeline"},
    /* allreduce, sim, host (issue 16 finding 6: --rows without a value printed the usage on stdout) */
    {'b', "allreduce --rows", "--rows needs a value"}, {'b', "allreduce --rows 0", "--rows"},
    {'b', "allreduce --rows 4097", "--rows"}, {'b', "allreduce --tp 1", "--tp"}, {'b', "allreduce --tp 9", "--tp"},
    {'b', "allreduce --tp 2x", "--tp"}, {'b', "allreduce --width 3", "--width"},
    {'b', "allreduce --width 0", "--width"}, {'b', "allreduce --steps 0", "--steps"},
    {'b', "allreduce --warmup -1", "--warmup"}, {'b', "allreduce --ctas 0", "--ctas"},
    {'b', "allreduce --frob", "--frob"}, {'b', "allreduce --protocol tag", "--protocol"},
    {'b', "allreduce --model mi250", "--model"}, {'b', "ffn --protocol both", "--protocol"}, {'b', "sim --ctas 0", "--ctas"}, {'b', "sim --reps x", "--reps"},
    {'b', "sim extra", "'extra'"}, {'b', "host --packets 0", "--packets"}, {'b', "host --packets 100001", "--packets"},
    {'b', "host --replays 1x", "--replays"}, {'b', "", "command"}, {'b', "frob", "'frob'"},
    /* hsa-mono-info */
    {'i', "x", "'x'"}, {'i', "--kernels --frob", "--frob"}, {'i', "--target gfx950", "--target"},
    {'i', "--kernels --target", "--target"},
};

static const char *prog(char tool) {
  return tool == 'c' ? "hsa-mono-check" : tool == 'b' ? "hsa-mono-bench" : "hsa-mono-info";
}

/* Every bad line: exit 2, nothing on stdout, and stderr's first line the tool's (and subcommand's)
 * name, then the reason naming the option or word at fault; nothing made (ref's --out o). All are
 * checked and the ones that break a rule listed together. */
START_TEST(bad_lines_refused) {
  unsigned broken = 0;
  const unsigned n = sizeof bad / sizeof *bad;
  for (unsigned i = 0; i < n; i++) {
    char *out, *err;
    int rc = run(bad[i].tool, bad[i].args, &out, &err);
    char *nl = strchr(err, '\n');
    if (nl) *nl = 0;
    char sub[64] = "";
    if (bad[i].args[0] && bad[i].args[0] != '-' && bad[i].tool != 'i' && strcmp(bad[i].args, "frob")) {
      size_t k = strcspn(bad[i].args, " ");
      snprintf(sub, sizeof sub, " %.*s", (int)k, bad[i].args);
    }
    char head[96];
    snprintf(head, sizeof head, "%s%s: ", prog(bad[i].tool), sub);
    char made[96];
    struct stat sb;
    snprintf(made, sizeof made, "%s/o", dir);
    const char *why = rc != 2                            ? "exit status not 2"
                      : out[0]                           ? "printed on stdout"
                      : strncmp(err, head, strlen(head)) ? "first stderr line not the command's"
                      : !strstr(err, bad[i].names)       ? "reason does not name the option"
                      : stat(made, &sb) == 0             ? "made its --out"
                                                         : NULL;
    if (stat(made, &sb) == 0) {
      char cmd[128];
      snprintf(cmd, sizeof cmd, "rm -rf %s", made);
      ck_assert_int_eq(system(cmd), 0);
    }
    if (why) {
      fprintf(stderr, "%s %s: %s (exit %d): \"%s\"\n", prog(bad[i].tool), bad[i].args, why, rc, err);
      broken++;
    }
    free(out), free(err);
  }
  fprintf(stderr, "%u of %u bad command lines refused as the rules say\n", n - broken, n);
  ck_assert_msg(broken == 0, "%u of %u bad command lines broke a rule (listed above)", broken, n);
  ck_assert_uint_ge(n, 100);
}
END_TEST

/* Every command's --help: its usage on stdout, exit 0, nothing on stderr. */
START_TEST(help_on_stdout) {
  static const struct {
    char tool;
    const char *args;
  } help[] = {{'c', "--help"},          {'c', "ffn --help"},     {'c', "k1 --help"},        {'c', "layer --help"},
              {'c', "model --help"},    {'c', "ref --help"},     {'b', "--help"},           {'b', "ffn --help"},
              {'b', "k1 --help"},       {'b', "layer --help"},   {'b', "model --help"},     {'b', "allreduce --help"},
              {'b', "sim --help"},      {'b', "host --help"},    {'i', "--help"}};
  for (unsigned i = 0; i < sizeof help / sizeof *help; i++) {
    char *out, *err;
    int rc = run(help[i].tool, help[i].args, &out, &err);
    ck_assert_msg(rc == 0 && strstr(out, "usage: ") && !err[0], "%s %s: exit %d, stdout \"%.60s\", stderr \"%s\"",
                  prog(help[i].tool), help[i].args, rc, out, err);
    free(out), free(err);
  }
}
END_TEST

Suite *hm_test_suite(void) {
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("cli");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, bad_lines_refused);
  tcase_add_test(tc, help_on_stdout);
  suite_add_tcase(s, tc);
  return s;
}
