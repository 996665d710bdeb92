/* --plugin PATH: loads a user's shared object and adds its ops to the
 * registry, so every command checks them like built-in ones, without
 * rebuilding tapegrad. The plugin is built against the installed package
 * and exports its ops with TG_GRADCHECK_PLUGIN (tapegrad/check.h);
 * docs/gradcheck-guide.md shows one end to end. Options may come anywhere on the
 * command line and repeat; they are taken out of argv before the rest is
 * parsed. A plugin that does not load, lacks the registration symbol, was
 * built against another version of the header or registers a bad op is a
 * usage error (exit status 2) with the reason. An op's rules come with its
 * records (each points to the plugin's tg_op_def), so nothing more is
 * registered.
 *
 * Layer: target (tool.h): fills the registry targets come from; calls target.c and the base. */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gradcheck/tool.h"

#define MAX_PLUGINS 16

static void *handles[MAX_PLUGINS];
static int n_handles;

/* The registry points into the plugins until the program ends. */
static void close_plugins(void) {
    while (n_handles > 0) dlclose(handles[--n_handles]);
}

static int plugin_error(const char *path, const char *fmt, const char *detail) {
    fprintf(stderr, "tapegrad-gradcheck: plugin '%s': ", path);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
    return GCT_EXIT_USAGE;
}

/* Loads one plugin and registers its ops; -1 when done, else the exit
 * status (the reason printed). */
static int load_plugin(const char *path) {
    if (n_handles == MAX_PLUGINS) return plugin_error(path, "more than %s plugins", "16");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return plugin_error(path, "cannot be loaded: %s", why ? why : "(no reason given)");
    }
    if (n_handles == 0) atexit(close_plugins);
    handles[n_handles++] = h;
    tg_gradcheck_plugin_fn reg;
    void *sym = dlsym(h, TG_GRADCHECK_PLUGIN_SYMBOL);
    memcpy(&reg, &sym, sizeof reg); /* object pointer to function pointer, as POSIX allows */
    if (!sym)
        return plugin_error(path,
                            "has no symbol %s: define its ops with TG_GRADCHECK_PLUGIN(name, ops, n) "
                            "(tapegrad/check.h)",
                            TG_GRADCHECK_PLUGIN_SYMBOL);
    const tg_gradcheck_plugin *p = reg();
    if (!p) return plugin_error(path, "%s returned NULL", TG_GRADCHECK_PLUGIN_SYMBOL);
    if (p->abi != TG_GRADCHECK_PLUGIN_ABI || p->op_info_size != sizeof(tg_op_info))
        return plugin_error(path, "was built against another version of tapegrad/check.h (%s); rebuild it",
                            "plugin ABI or tg_op_info size differs");
    if (p->n_ops < 1 || !p->ops) return plugin_error(path, "registers no op (%s)", p->name ? p->name : "unnamed");
    tg_ctx *ctx = gct_ctx_new(0);
    if (!ctx) return GCT_EXIT_ERROR;
    for (int i = 0; i < p->n_ops; i++) {
        if (!tg_registry_add(ctx, &p->ops[i])) {
            int st = plugin_error(path, "%s", tg_error_message(ctx));
            tg_ctx_free(ctx);
            return st;
        }
    }
    tg_ctx_free(ctx);
    return -1;
}

int gct_load_plugins(int *argc, char **argv) {
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--plugin") != 0) {
            argv[out++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) return gct_usage_error("option --plugin needs a value (the path of a shared object)");
        int st = load_plugin(argv[++i]);
        if (st >= 0) return st;
    }
    *argc = out;
    argv[out] = NULL;
    return -1;
}
