/* st_dump.c: test driver for the loaders (tests/test_loaders.py).
 *   st_dump st DIR | file PATH   tensors: name dtype [shape] file-basename hex-bytes
 *   st_dump resolve MODEL ROOT   the resolved model directory
 *   st_dump inspect ARGS...      cmd_inspect, as `llmcc inspect ARGS...` */
#include "config.h"
#include "safetensors.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int cmd_inspect(int argc, char **argv);

static void dump(const StModel *m) {
    for (int i = 0; i < m->n; i++) {
        const StTensor *t = &m->t[i];
        /* every tensor must be found by name, and be this very entry */
        if (st_find(m, t->name) != t) { printf("st_find(%s) mismatch\n", t->name); return; }
        const char *b = strrchr(t->file, '/');
        printf("%s %s [", t->name, st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) printf("%s%" PRId64, d ? "," : "", t->shape[d]);
        printf("] %s %zu ", b ? b + 1 : t->file, st_dtype_size(t->dtype));
        for (size_t k = 0; k < t->nbytes; k++) printf("%02x", t->data[k]);
        printf("\n");
    }
    printf("missing %s\n", st_find(m, "no.such.tensor") ? "found" : "NULL");
    printf("count %d files %d\n", m->n, m->nfiles);
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "inspect") == 0) return cmd_inspect(argc - 1, argv + 1);
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: st_dump st DIR | file PATH | resolve MODEL ROOT | inspect ...\n"); return 2; }
    Arena a = {0};
    StModel m = {0};
    if (strcmp(argv[1], "st") == 0) { st_open_dir(&a, argv[2], &m); dump(&m); }
    else if (strcmp(argv[1], "file") == 0) { st_open_file(&a, argv[2], &m); dump(&m); }
    else if (strcmp(argv[1], "resolve") == 0 && argc == 4) printf("%s\n", model_resolve_dir(&a, argv[2], argv[3]));
    else { fprintf(stderr, "st_dump: bad mode\n"); return 2; }
    st_close(&m);
    arena_free(&a);
    return 0;
}
