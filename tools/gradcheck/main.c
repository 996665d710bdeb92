/* tapegrad-gradcheck: gradient-check experiments on every registered op and
 * layer, one command each (docs/gradcheck.md).
 *
 *   tapegrad-gradcheck list
 *   tapegrad-gradcheck check NAME|all [--shape SPEC] [--dtype f32|f64] ...
 *   tapegrad-gradcheck sweep NAME [--shape SPEC] [--out DIR]
 *   tapegrad-gradcheck jacobian NAME --shape SMALL [--out DIR]
 *   ... --inject BUG swaps in a known-wrong backward (see `list`)
 *   ... --seeds N runs a batch; --format json|csv for programs
 *
 * Layer: main (tool.h), the top: loads the plugins, parses the command
 * line (args.c) and dispatches to the commands; nothing calls it. */
#include <errno.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

/* Runs the command a names (the command line parsed). */
static int run_command(const gct_args *a) {
    if (!strcmp(a->command, "list")) return gct_cmd_list(a);
    if (!strcmp(a->command, "check")) return gct_cmd_check(a);
    if (!strcmp(a->command, "sweep")) return gct_cmd_sweep(a);
    if (!strcmp(a->command, "explain")) return gct_cmd_explain(a);
    if (!strcmp(a->command, "memory")) return gct_cmd_memory(a);
    if (a->n_seeds) {
        /* jacobian over many seeds: the JACOBIAN mode of check, one row per input */
        static gct_args b;
        b = *a;
        b.mode = TG_GRADCHECK_JACOBIAN;
        return gct_cmd_check(&b);
    }
    return gct_cmd_jacobian(a);
}

int main(int argc, char **argv) {
    static gct_args a;
    int st = gct_load_plugins(&argc, argv);
    if (st >= 0) return st;
    st = gct_parse_args(argc, argv, &a);
    if (st < 0) st = run_command(&a);
    gct_args_free(&a);
    /* a report that did not reach its reader decides nothing (a full disk,
     * a closed pipe): never exit 0 for it */
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tapegrad-gradcheck: could not write the report to stdout: %s\n",
                errno ? strerror(errno) : "write error");
        if (st != GCT_EXIT_USAGE) st = GCT_EXIT_INCONCLUSIVE;
    }
    return st;
}
