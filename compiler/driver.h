/* driver.h: what the commands that compile a model share (driver.c): main.c's compile and build and
 * cmd_run.c's run open a model, tear a compilation down and read --target and --kv-dtype alike. */
#ifndef LLMCC_DRIVER_H
#define LLMCC_DRIVER_H
#include "pipeline.h"

/* MODEL's config into c->cfg (a GGUF file: opened as c->gguf), returning its directory (a GGUF file: MODEL);
 * what a compilation holds, freed; --target's value (dies on another); rm -rf */
const char *open_model(Compilation *c, const char *model, const ConfigOptions *co);
void teardown(Compilation *c);
/* The layers the safetensors hold are num_hidden_layers, none missing and none past it (a user error naming
 * config.json) */
void check_layers_held(Arena *a, const ModelConfig *cfg, const StModel *st);
Target parse_target(const char *v);
/* --kv-dtype's value (f32 or bf16; dies on another), and the default where it is not given: bf16 for the GPU's
 * schedules (cuda, and cuda-emu, which runs them exactly), f32 for the CPU's */
DType parse_kv_dtype(const char *v);
DType kv_dtype_default(Target t);
void rm_rf(const char *path);
/* an NVIDIA GPU to run on and nvcc to build for it (nvidia-smi lists a GPU): where the target defaults to cuda */
bool gpu_present(void);
#endif
