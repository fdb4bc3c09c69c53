/*
 * The baton command: global flags, then a subcommand (docs/baton.1).
 * Exit status: 0 success, 1 failure, 2 usage error.
 */
#include "cli.h"
#include "confine.h"
#include "contain.h"
#include "err.h"
#include "lib.h"
#include "lua_mod.h"
#include "rt.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static bt_config_t config;

const bt_config_t *bt_cli_config(void) {
  return &config;
}

static const char usage[] =
  "usage: baton [global flags] COMMAND [ARGS...]\n"
  "\n"
  "commands:\n"
  "  help [COMMAND [SUBCOMMAND]]     this, or a command's help (also COMMAND --help)\n"
  "  version                         print the version\n"
  "  eval FILE.lua [ARGS...]         run a script with the Lua API\n"
  "  cron EXPR [--tz ZONE] [-n N] [--from TIME]   print the next fire times\n"
  "  lock NAME [--ttl S] [--timeout S] -- CMD [ARGS...]\n"
  "                                  hold NAME (etcdctl-compatible) while CMD runs\n"
  "  elect NAME PROPOSAL [--ttl S]   campaign, print the leader, hold until signalled\n"
  "  elect -l NAME                   print each leader as it changes\n"
  "  node [--name ID] [--ttl S] [--workers N] [--labels k=v,...] [--history N]\n"
  "       [--max-skew S] [--trust PUBKEY|DIR ...] [--secrets-dir DIR]\n"
  "       [--run-as USER] [--run-memory SIZE]\n"
  "       [--http ADDR [--http-token-file F] [--http-cert F --http-key F]]\n"
  "                                  run a scheduler node (--http: API, dashboard, /metrics)\n"
  "  check FILE.lua                  validate a job or policy file: next 5 fires,\n"
  "                                  or a policy's decisions on a sample cluster\n"
  "  job put FILE.lua [--name NAME] [--sign KEY]\n"
  "                                  check, then store at <prefix>jobs/<NAME>\n"
  "  job ls | show NAME | rm NAME [--purge] | history NAME [-n N]\n"
  "  job run NAME [--force] [--param k=v ...] [--wait]\n"
  "                                  trigger one run now; --wait: follow it, exit\n"
  "                                  0 only if it succeeded (baton help job run)\n"
  "  job logs NAME [ID] [--attempt N] [-f]   a run's kept output; -f follows it live\n"
  "  job kill NAME [ID]              stop a running run and its processes\n"
  "  job pause NAME | resume NAME\n"
  "  job sign FILE.lua --sign KEY [-o OUT]   signed for someone without the key to put\n"
  "  job versions NAME | diff NAME R1 [R2] | rollback NAME REV   who changed what; go back\n"
  "  policy put FILE.lua [--name NAME] [--sign KEY]\n"
  "                                  check, then store at <prefix>policies/<NAME>\n"
  "  policy ls | show NAME | rm NAME | sign | versions | diff | rollback\n"
  "  queue push QUEUE VALUE          add a task to a queue\n"
  "  queue push QUEUE - | --file FILE   many tasks: one per line, or a JSON array\n"
  "  nodes                           live nodes with labels, version, running runs\n"
  "  leader                          the elected cluster leader\n"
  "  notify show | set CHANNEL.SETTING VALUE | unset CHANNEL[.SETTING]\n"
  "                                  where notifiers send (in etcd); what is undelivered\n"
  "  keygen FILE                     an Ed25519 key pair for signed code: FILE, FILE.pub\n"
  "\n"
  "  --json: job, policy, queue, nodes and leader commands print JSON instead of\n"
  "  a table (one object, or one a line for job logs); each command's --help says.\n"
  "\n"
  "global flags (and environment):\n"
  "  --endpoints URLS   BATON_ENDPOINTS  comma-separated etcd URLs\n"
  "                                      (default http://127.0.0.1:2379)\n"
  "  --prefix P         BATON_PREFIX     key prefix (default /baton/)\n"
  "  --user U           BATON_USER       etcd user\n"
  "  --password P       BATON_PASSWORD   etcd password\n"
  "  --cacert F --cert F --key F         TLS (BATON_CACERT, BATON_CERT, BATON_KEY)\n"
  "\n"
  "NO_COLOR (set, not empty) turns off the colours of states on a terminal.\n"
  "Exit status: 0 success, 1 failure, 2 usage error (job run --wait and job\n"
  "logs -f: 3 and up say how the run ended; baton help job run).\n";

static const struct {
  const char *flag;
  const char **slot;
  const char *env;
} globals[] = {
  {"--endpoints", &config.endpoints, "BATON_ENDPOINTS"},
  {"--prefix", &config.prefix, "BATON_PREFIX"},
  {"--user", &config.user, "BATON_USER"},
  {"--password", &config.password, "BATON_PASSWORD"},
  {"--cacert", &config.cacert, "BATON_CACERT"},
  {"--cert", &config.cert, "BATON_CERT"},
  {"--key", &config.key, "BATON_KEY"},
};
#define NGLOBALS (sizeof(globals) / sizeof(globals[0]))

/* If argv[*i] is a global flag ("--x V" or "--x=V"), stores it, advances
 * *i past it and returns 1; returns -1 on a flag missing its value. */
static int global_flag(int argc, char **argv, int *i) {
  size_t g;
  for (g = 0; g < NGLOBALS; g++) {
    size_t n = strlen(globals[g].flag);
    if (strncmp(argv[*i], globals[g].flag, n) != 0) continue;
    if (argv[*i][n] == '=') {
      *globals[g].slot = argv[*i] + n + 1;
      (*i)++;
      return 1;
    }
    if (argv[*i][n] != '\0') continue;
    if (*i + 1 >= argc) {
      fprintf(stderr, "baton: %s needs a value\n", globals[g].flag);
      return -1;
    }
    *globals[g].slot = argv[*i + 1];
    *i += 2;
    return 1;
  }
  return 0;
}

static void config_defaults(void) {
  size_t g;
  for (g = 0; g < NGLOBALS; g++) {
    const char *v = getenv(globals[g].env);
    if (!*globals[g].slot && v && *v) *globals[g].slot = v;
  }
  if (!config.endpoints) config.endpoints = "http://127.0.0.1:2379";
  if (!config.prefix) config.prefix = "/baton/";
}

/* Sets baton.config from the global settings. */
static void push_config(lua_State *L) {
  size_t g;
  lua_getglobal(L, "baton");
  lua_newtable(L);
  for (g = 0; g < NGLOBALS; g++) {
    if (!*globals[g].slot) continue;
    lua_pushstring(L, *globals[g].slot);
    lua_setfield(L, -2, globals[g].flag + 2);
  }
  lua_setfield(L, -2, "config");
  lua_pop(L, 1);
}

static void main_end(bt_co_t *co, const char *err, void *arg) {
  if (!err) return;
  fprintf(stderr, "baton: %s\n", err);
  bt_rt_stop(arg, 1);
}

/* Runs the function below nargs arguments on rt's stack as the main
 * coroutine until the process is done, frees rt, returns the exit status. */
static int run_main(bt_rt_t *rt, int nargs) {
  int status;
  if (!bt_co_spawn(rt, bt_rt_L(rt), nargs, main_end, rt)) {
    fprintf(stderr, "baton: out of memory\n");
    bt_rt_free(rt);
    return 1;
  }
  bt_rt_run(rt);
  status = bt_rt_status(rt);
  bt_rt_free(rt);
  return status;
}

static const char eval_usage[] = "usage: baton eval FILE.lua [ARGS...]\n";

static int is_help(const char *a) {
  return !strcmp(a, "--help") || !strcmp(a, "-h");
}

int bt_cli_eval(int argc, char **argv) {
  bt_rt_t *rt;
  lua_State *L;
  const char *file;
  int i = 1, r, nargs;

  while (i < argc && (r = global_flag(argc, argv, &i)) != 0)
    if (r < 0) return 2;
  /* (only in FILE's place: after FILE, --help is the script's argument) */
  if (i < argc && is_help(argv[i])) {
    printf("%s\nRuns FILE.lua as the main coroutine with the whole Lua API (docs/lua-api.md);\n"
           "ARGS are in the global arg (arg[0] is FILE). The script ends with baton.exit(N)\n"
           "or when its coroutines are done; an uncaught error exits 1.\n", eval_usage);
    return 0;
  }
  if (i >= argc) {
    fprintf(stderr, "baton: eval needs a FILE\n%s", eval_usage);
    return 2;
  }
  file = argv[i++];
  config_defaults();
  rt = bt_rt_new();
  if (!rt) return 1;
  L = bt_rt_L(rt);
  push_config(L);
  /* arg = {[0] = FILE, ARGS...}, as the standalone interpreter does */
  lua_createtable(L, argc - i, 1);
  lua_pushstring(L, file);
  lua_rawseti(L, -2, 0);
  for (nargs = 0; i + nargs < argc; nargs++) {
    lua_pushstring(L, argv[i + nargs]);
    lua_rawseti(L, -2, nargs + 1);
  }
  lua_setglobal(L, "arg");
  if (luaL_loadfile(L, file)) {
    const char *msg = lua_tostring(L, -1);
    if (msg && strncmp(msg, "cannot open", 11) == 0)
      fprintf(stderr, "baton: %s\n", msg);
    else
      fprintf(stderr, "baton: %s\n", msg ? msg : "cannot load script");
    bt_rt_free(rt);
    return 1;
  }
  for (r = 0; r < nargs; r++) lua_pushstring(L, argv[argc - nargs + r]);
  return run_main(rt, nargs);
}

/* Runs the subcommand argv[0] written in Lua: module (NULL:
 * baton.cli.<argv[0]>, lua/baton/cli/<name>.lua) returns a function that
 * gets the subcommand's arguments and sets the exit status with baton.exit
 * (an uncaught error exits 1 with its message). open, if not NULL, opens a
 * binding of that command's own into `baton` first (lua_mod.h). */
static int lua_command(const char *module, int argc, char **argv, int (*open)(lua_State *)) {
  bt_rt_t *rt;
  lua_State *L;
  int i;

  config_defaults();
  rt = bt_rt_new();
  if (!rt) return 1;
  L = bt_rt_L(rt);
  push_config(L);
  if (open) {
    lua_getglobal(L, "baton");
    open(L);
    lua_pop(L, 1);
  }
  lua_getglobal(L, "require");
  if (module)
    lua_pushstring(L, module);
  else
    lua_pushfstring(L, "baton.cli.%s", argv[0]);
  if (lua_pcall(L, 1, 1, 0) || !lua_isfunction(L, -1)) {
    fprintf(stderr, "baton: %s: %s\n", argv[0],
            lua_isstring(L, -1) ? lua_tostring(L, -1) : "not a function");
    bt_rt_free(rt);
    return 1;
  }
  for (i = 1; i < argc; i++) lua_pushstring(L, argv[i]);
  return run_main(rt, argc - 1);
}

static int cli_lua(int argc, char **argv) {
  return lua_command(NULL, argc, argv, NULL);
}

/* baton worker: a pooled worker of baton node, below its containment
 * process (contain.h), which this call starts and only the worker leaves;
 * the worker's own binding (lua_worker.c) is opened for it alone. */
static int cli_worker(int argc, char **argv) {
  int e;
  if (argc > 1 && is_help(argv[1])) {
    printf("usage: baton worker\n\nA worker process of baton node, which starts it; not for direct use.\n");
    return 0;
  }
  /* The node starts it as /proc/self/exe (lua/baton/node/pool.lua), which
   * would make it "exe" to ps and top. */
  prctl(PR_SET_NAME, "baton", 0, 0, 0);
  e = bt_contain_worker();
  if (e) {
    fprintf(stderr, "baton: worker: cannot contain the run's processes: %s\n",
            bt_strerror(e));
    return 1;
  }
  /* (its Lua is lua/baton/worker/main.lua) */
  return lua_command("baton.worker.main", argc, argv, bt_lua_open_worker);
}

/* baton sandbox: where stored code is described (lua/baton/stored.lua),
 * confined before any Lua runs (confine.h); lua/baton/cli/sandbox.lua
 * confines it further once its modules are loaded. */
static int cli_sandbox(int argc, char **argv) {
  const char *lib = getenv("BATON_LIB_FD");
  int e;
  if (argc > 1 && is_help(argv[1])) {
    printf("usage: baton sandbox\n\nA sandbox process of baton, which baton starts itself; not for direct use.\n");
    return 0;
  }
  prctl(PR_SET_NAME, "baton-sandbox", 0, 0, 0);
  e = bt_confine_process(lib ? atoi(lib) : -1);
  if (e) {
    fprintf(stderr, "baton: sandbox: cannot confine: %s\n", bt_strerror(e));
    return 1;
  }
  /* Lua allocates through the counting allocator: the sandbox bounds it. */
  bt_rt_count_memory(0);
  return cli_lua(argc, argv);
}

static int cli_version(int argc, char **argv) {
  if (argc > 1 && is_help(argv[1])) {
    printf("usage: baton version\n\nPrints baton's version.\n");
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "baton: version: %s \"%s\"\nusage: baton version\n",
            argv[1][0] == '-' ? "unknown flag" : "unexpected argument", argv[1]);
    return 2;
  }
  printf("baton %s\n", BATON_VERSION);
  return 0;
}

/* baton _pack-lib SRC DIR OUT: writes OUT, the pack of the Lua library in
 * SRC as the library of DIR (runtime/core/lib.h); make and make install
 * run it. Not a user's command. */
static int cli_pack_lib(int argc, char **argv) {
  char err[PATH_MAX + 256];
  if (argc != 4) {
    fprintf(stderr, "usage: baton _pack-lib SRC DIR OUT\n");
    return 2;
  }
  if (bt_lib_write_pack(argv[1], argv[2], BATON_VERSION, argv[3], err, sizeof(err))) {
    fprintf(stderr, "baton: %s\n", err);
    return 1;
  }
  return 0;
}

static const struct {
  const char *name;
  int (*fn)(int, char **);
} commands[] = {
  {"_pack-lib", cli_pack_lib},
  {"version", cli_version},
  {"eval", bt_cli_eval},
  {"cron", bt_cli_cron},
  {"lock", cli_lua},
  {"node", cli_lua},
  {"worker", cli_worker},
  {"sandbox", cli_sandbox},
  {"elect", cli_lua},
  {"check", cli_lua},
  {"job", cli_lua},
  {"policy", cli_lua},
  {"queue", cli_lua},
  {"nodes", cli_lua},
  {"leader", cli_lua},
  {"notify", cli_lua},
  {"keygen", cli_lua},
};

/* Runs the command argv[0] with argc - 1 arguments; 2 if there is none. */
static int run_command(int argc, char **argv) {
  size_t c;
  for (c = 0; c < sizeof(commands) / sizeof(commands[0]); c++) {
    if (strcmp(argv[0], commands[c].name) == 0) {
      config_defaults();
      return commands[c].fn(argc, argv);
    }
  }
  fprintf(stderr, "baton: unknown command \"%s\"\n%s", argv[0], usage);
  return 2;
}

/* baton help COMMAND [SUBCOMMAND...]: COMMAND [SUBCOMMAND...] --help. */
static int cli_help(int argc, char **argv) {
  char **args;
  int i, r;
  if (argc < 2) {
    fputs(usage, stdout);
    return 0;
  }
  args = calloc((size_t)argc + 1, sizeof(*args));
  if (!args) return 1;
  for (i = 1; i < argc; i++) args[i - 1] = argv[i];
  args[argc - 1] = "--help";
  r = run_command(argc, args);
  free(args);
  return r;
}

int main(int argc, char **argv) {
  int i = 1, r;

  while (i < argc && (r = global_flag(argc, argv, &i)) != 0)
    if (r < 0) return 2;
  if (i >= argc) {
    fputs(usage, stderr);
    return 2;
  }
  if (is_help(argv[i])) {
    fputs(usage, stdout);
    return 0;
  }
  if (!strcmp(argv[i], "help")) return cli_help(argc - i, argv + i);
  if (!strcmp(argv[i], "--version")) return cli_version(0, NULL);
  return run_command(argc - i, argv + i);
}
