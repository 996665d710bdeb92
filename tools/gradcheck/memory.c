/* `tapegrad-gradcheck memory rmsnorm|layernorm`: the memory table of
 * docs/normalization-gradients.md (section 6), measured. One forward of the
 * fused op and one of its composed twin (layers/composed.c) on the same
 * inputs, x, gamma (and beta) requiring grad:
 *   records        tg_tape_size: tape entries the forward made
 *   saved          tg_tape_saved_bytes: what the records keep for backward,
 *                  including the inputs they keep by pointer (x, gamma)
 *   saved beyond   saved minus those inputs: what the form adds for
 *                  backward on top of tensors that exist anyway (the guide's
 *                  "770x" compares these)
 *   arena          tg_arena_used during the forward, minus the output: the
 *                  intermediate tensors the step holds until tg_ctx_reset
 * Default: the guide's (4096, 768) float32 input.
 *
 * Layer: command (tool.h): calls the target and base layers. */
#include <string.h>

#include "tools/gradcheck/tool.h"

typedef struct mem_row {
    long long records;
    size_t saved, beyond, arena;
} mem_row;

static bool measure(tg_ctx *ctx, const tg_op_info *op, const char *spec, tg_dtype dtype, mem_row *m) {
    tg_op_case c;
    tg_rng_seed(ctx, 0);
    if (!tg_registry_build(ctx, op, spec, dtype, &c)) return false;
    size_t kept = 0;
    for (int k = 0; k < c.n_inputs; k++) {
        tg_requires_grad(ctx, c.inputs[k]);
        if (k < 2) kept += (size_t)c.inputs[k]->numel * tg_dtype_size(dtype); /* x, gamma */
    }
    size_t before = tg_arena_used(ctx);
    tg_tensor *y = tg_registry_forward(ctx, &c);
    if (!y) return false;
    m->records = (long long)tg_tape_size(ctx);
    m->saved = tg_tape_saved_bytes(ctx);
    m->beyond = m->saved > kept ? m->saved - kept : 0;
    size_t ybytes = (size_t)y->numel * tg_dtype_size(dtype);
    size_t used = tg_arena_used(ctx) - before;
    m->arena = used > ybytes ? used - ybytes : 0;
    tg_ctx_reset(ctx);
    return true;
}

int gct_cmd_memory(const gct_args *a) {
    if (!a->name || (strcmp(a->name, "rmsnorm") && strcmp(a->name, "layernorm")))
        return gct_usage_error("memory takes rmsnorm or layernorm%s%s", a->name ? ", not " : "",
                               a->name ? a->name : "");
    const char *spec = a->shape ? a->shape : "4096x768";
    tg_dtype dt = a->dtype_set ? a->dtype : TG_F32;
    char composed[32];
    snprintf(composed, sizeof composed, "%s_composed", a->name);
    const tg_op_info *ops[2] = {tg_registry_find(a->name), tg_registry_find(composed)};
    tg_ctx *ctx = gct_ctx_new(a->seed);
    if (!ctx) return GCT_EXIT_ERROR;
    mem_row m[2];
    for (int k = 0; k < 2; k++) {
        if (!ops[k] || !measure(ctx, ops[k], spec, dt, &m[k])) {
            int st = ops[k] ? gct_build_failed(ctx) : GCT_EXIT_ERROR;
            tg_ctx_free(ctx);
            return st;
        }
    }
    tg_ctx_free(ctx);
    printf("%s %s, %s: one forward with x, gamma (and beta) requiring grad (normalization-gradients.md, "
           "section 6)\n\n",
           a->name, spec, tg_dtype_name(dt));
    gct_table t;
    gct_table_init(&t, "lrrrr", "form", "records", "saved (tg_tape_saved_bytes)", "saved beyond x, gamma",
                   "arena beyond y");
    const char *names[2] = {"fused", "composed"};
    for (int k = 0; k < 2; k++) {
        gct_cell *row = gct_table_row(&t);
        if (!row) break;
        gct_cell_set(&row[0], GCT_PLAIN, "%s", names[k]);
        gct_cell_set(&row[1], GCT_PLAIN, "%lld", m[k].records);
        gct_cell_set(&row[2], GCT_PLAIN, "%zu", m[k].saved);
        gct_cell_set(&row[3], GCT_PLAIN, "%zu", m[k].beyond);
        gct_cell_set(&row[4], GCT_PLAIN, "%zu", m[k].arena);
    }
    gct_cell *row = gct_table_row(&t);
    if (row) {
        gct_cell_set(&row[0], GCT_BOLD, "composed / fused");
        gct_cell_set(&row[1], GCT_PLAIN, "%.1fx", (double)m[1].records / (double)m[0].records);
        gct_cell_set(&row[2], GCT_PLAIN, "%.1fx", (double)m[1].saved / (double)m[0].saved);
        gct_cell_set(&row[3], GCT_PLAIN, "%.0fx", m[0].beyond ? (double)m[1].beyond / (double)m[0].beyond : 0.0);
        gct_cell_set(&row[4], GCT_PLAIN, "%.0fx", m[0].arena ? (double)m[1].arena / (double)m[0].arena : 0.0);
    }
    gct_table_print(stdout, &t, 2, a->color);
    gct_table_free(&t);
    printf("\n  tg_tape_saved_bytes counts the inputs a record keeps by pointer (x and gamma, which exist anyway),\n"
           "  so its ratio is small; what each form adds for backward is the 'beyond' column, the guide's ratio.\n"
           "  'arena beyond y' is every intermediate the forward left in the arena until tg_ctx_reset.\n");
    return GCT_EXIT_PASS;
}
