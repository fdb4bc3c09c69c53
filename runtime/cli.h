/*
 * Subcommands of the baton binary. Each takes the arguments after the global
 * flags, argv[0] being the subcommand's name, and returns the process exit
 * status: 0 success, 1 failure, 2 usage error. Errors go to stderr as one line
 * starting with "baton: ".
 */
#ifndef BATON_CLI_H
#define BATON_CLI_H

int bt_cli_eval(int argc, char **argv);
int bt_cli_cron(int argc, char **argv);

/* Global settings from the command line and the environment. */
typedef struct {
  const char *endpoints, *prefix, *user, *password, *cacert, *cert, *key;
} bt_config_t;

/** The global settings: flags win over BATON_* variables over defaults. */
const bt_config_t *bt_cli_config(void);

#endif
