/* fuzz_config.c: libFuzzer harness for config.json / generation_config.json
 * (compiler/config.c). The input up to the first NUL byte is config.json,
 * the rest (when there is a NUL) generation_config.json. An accepted config
 * must satisfy what the frontend relies on. */
#include "fuzz_common.h"
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t n1, n2; const uint8_t *p2;
    fz_split(data, size, &n1, &p2, &n2);
    fz_put(0, "config.json", data, n1);
    fz_put(1, "generation_config.json", p2, n2);
    fz_must_name = fz_dir();
    static Arena a;
    static ModelConfig c;
    if (setjmp(fz_jmp) == 0) {
        model_config_load(&a, fz_dir(), NULL, &c);
        if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
            c.vocab_size <= 0 || c.num_hidden_layers <= 0 || c.intermediate_size <= 0)
            fz_fail("accepted a non-positive size", c.config_path);
        if (c.num_attention_heads % c.num_key_value_heads || c.head_dim % 2)
            fz_fail("accepted inconsistent heads", c.config_path);
        if (c.n_eos < 0 || c.n_eos > LLMCC_MAX_EOS || c.bos_token_id >= c.vocab_size)
            fz_fail("accepted bad token ids", c.config_path);
        for (int i = 0; i < c.n_eos; i++)
            if (c.eos_token_ids[i] < 0 || c.eos_token_ids[i] >= c.vocab_size) fz_fail("accepted an eos id outside the vocab", c.config_path);
        if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0) || !(c.rope_factor > 0)) fz_fail("accepted a bad float", c.config_path);
    }
    arena_free(&a);
    return 0;
}
