/* The inputs of a target as the reports show them: printed in full
 * precision (--print-inputs), as a JSON object (--format json
 * --print-inputs), and written one file each (--save-inputs), loadable
 * again with --values NAME=@FILE.
 *
 * Layer: report (tool.h): calls json.c and the base. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tensor/internal.h"
#include "tools/gradcheck/tool.h"

void gct_print_inputs(FILE *out, const gct_target *t, int indent) {
    char sh[64];
    int digits = t->c.dtype == TG_F32 ? 9 : 17;
    for (int k = 0; k < t->c.n_inputs; k++) {
        const tg_tensor *x = t->c.inputs[k];
        fprintf(out, "%*s%s %s =", indent, "", t->c.input_names[k], gct_shape_text(sh, sizeof sh, x->ndim, x->shape));
        int64_t row = x->ndim ? x->shape[x->ndim - 1] : 1;
        for (int64_t i = 0; i < x->numel; i++) {
            if (row > 0 && i % row == 0 && x->numel > row) fprintf(out, "\n%*s", indent + 2, "");
            fprintf(out, " %.*g", digits, tg_load(x, i));
        }
        fputc('\n', out);
    }
    if (t->c.n_index) {
        fprintf(out, "%*sindices =", indent, "");
        for (int64_t i = 0; i < t->c.n_index; i++) fprintf(out, " %lld", (long long)t->c.index[i]);
        fputc('\n', out);
    }
}

void gct_json_inputs(FILE *out, const gct_target *t) {
    fputc('{', out);
    for (int k = 0; k < t->c.n_inputs; k++) {
        const tg_tensor *x = t->c.inputs[k];
        fprintf(out, "%s", k ? "," : "");
        gct_json_str(out, t->c.input_names[k]);
        fprintf(out, ":{\"shape\":[");
        for (int d = 0; d < x->ndim; d++) fprintf(out, "%s%lld", d ? "," : "", (long long)x->shape[d]);
        fprintf(out, "],\"differentiable\":%s,\"values\":[", t->c.check >> k & 1u ? "true" : "false");
        for (int64_t i = 0; i < x->numel; i++) {
            if (i) fputc(',', out);
            gct_json_num(out, tg_load(x, i));
        }
        fprintf(out, "]}");
    }
    if (t->c.n_index) {
        fprintf(out, "%s\"indices\":[", t->c.n_inputs ? "," : "");
        for (int64_t i = 0; i < t->c.n_index; i++) fprintf(out, "%s%lld", i ? "," : "", (long long)t->c.index[i]);
        fputc(']', out);
    }
    fputc('}', out);
}

bool gct_save_inputs(const gct_target *t, const char *dir) {
    if (!gct_mkdir_p(dir)) return false;
    char sh[64];
    for (int k = 0; k < t->c.n_inputs; k++) {
        const tg_tensor *x = t->c.inputs[k];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.txt", dir, t->c.input_names[k]);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "tapegrad-gradcheck: cannot write %s: %s\n", path, strerror(errno));
            return false;
        }
        fprintf(f, "# %s %s %s of %s %s (load with --values %s=@%s)\n", t->c.input_names[k],
                gct_shape_text(sh, sizeof sh, x->ndim, x->shape), tg_dtype_name(x->dtype), t->op->def->name, t->c.spec,
                t->c.input_names[k], path);
        int64_t row = x->ndim ? x->shape[x->ndim - 1] : 1;
        for (int64_t i = 0; i < x->numel; i++)
            fprintf(f, "%.17g%s", tg_load(x, i), row > 0 && (i + 1) % row == 0 ? "\n" : " ");
        if (x->numel == 0 || (row > 0 && x->numel % row)) fputc('\n', f);
        if (!gct_fclose(f)) {
            fprintf(stderr, "tapegrad-gradcheck: cannot write %s\n", path);
            return false;
        }
    }
    return true;
}
