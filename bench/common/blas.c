/* OpenBLAS through dlopen: the benchmark compares against it when it is
 * installed; tapegrad itself never links it. */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <dlfcn.h>
#include <string.h>

bn_blas bn_blas_open(void) {
    bn_blas b;
    memset(&b, 0, sizeof b);
    b.lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!b.lib) b.lib = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    if (!b.lib) return b;
    /* dlsym returns void*; copy it into the function pointers (ISO C has no
     * cast from object to function pointer) */
    void *p = dlsym(b.lib, "cblas_sgemm");
    memcpy(&b.sgemm, &p, sizeof p);
    p = dlsym(b.lib, "cblas_dgemm");
    memcpy(&b.dgemm, &p, sizeof p);
    p = dlsym(b.lib, "openblas_set_num_threads");
    memcpy(&b.set_threads, &p, sizeof p);
    p = dlsym(b.lib, "openblas_get_config");
    memcpy(&b.config, &p, sizeof p);
    p = dlsym(b.lib, "openblas_get_corename");
    memcpy(&b.corename, &p, sizeof p);
    if (!b.sgemm) {
        dlclose(b.lib);
        memset(&b, 0, sizeof b);
    }
    return b;
}

void bn_blas_close(bn_blas *b) {
    if (b->lib) dlclose(b->lib);
    memset(b, 0, sizeof *b);
}
