/* driver.c: what the commands that compile a model share (main.c's compile and build, cmd_run.c's run):
 * opening MODEL (a directory or a GGUF file), freeing a compilation, the values of --target and --kv-dtype,
 * and removing a scratch directory. */
#include "driver.h"
#include "gguf_model.h"
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

Target parse_target(const char *v) {
    for (int t = 0; t < TARGET_COUNT; t++) if (!strcmp(v, target_names[t])) return (Target)t;
    die_user(NULL, "--target", "'%s' is not a target (cpu, cuda-emu, cuda)", v);
}

DType parse_kv_dtype(const char *v) {
    if (!strcmp(v, "f32")) return DT_F32;
    if (!strcmp(v, "bf16")) return DT_BF16;
    die_user(NULL, "--kv-dtype", "'%s' is not a KV-cache dtype (f32, bf16)", v);
}

DType kv_dtype_default(Target t) { return t == TARGET_CPU ? DT_F32 : DT_BF16; }

const char *open_model(Compilation *c, const char *model, const ConfigOptions *co) {
    if (gguf_is_gguf_path(model)) {
        c->gguf = ARENA_NEW(&c->A, GgufModel);
        gguf_model_open(&c->A, model, co, c->gguf, &c->cfg);
        return model;
    }
    const char *dir = model_resolve_dir(&c->A, model, llmcc_root(&c->A));
    model_config_load(&c->A, dir, co, &c->cfg);
    return dir;
}

static const char *st_name(int i, const void *st) { return ((const StModel *)st)->t[i].name; }

void check_layers_held(Arena *a, const ModelConfig *cfg, const StModel *st) {
    int held = checkpoint_layers(st->n, st_name, st, "model.layers."), n = cfg->num_hidden_layers;
    if (held != n)
        die_user(path_join(a, cfg->dir, "config.json"), "num_hidden_layers", "%d, but the checkpoint's tensors hold "
                 "%d layer%s: model.layers.%d.* %s", n, held, held == 1 ? "" : "s", held < n ? held : n,
                 held < n ? "is missing" : "and on are left over");
}

void teardown(Compilation *c) {
    st_close(&c->st);
    if (c->gguf) gguf_model_close(c->gguf);
    arena_free(&c->A);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}
bool gpu_present(void) {
    return system("command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1") == 0;
}

void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }
