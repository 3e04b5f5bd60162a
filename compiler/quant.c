/* quant.c: quantize and dequantize GGUF's block types (see quant.h). The
 * quantizers follow ggml-quants.c's quantize_row_*_ref: the scale computed in
 * f32, the integers from its f32 reciprocal, the scale then stored as f16. */
#include "quant.h"
#include "pack.h"
#include <math.h>
#include <string.h>

static void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }

/* one block of 32: q8_0 {f16 d; int8 qs[32]}, q4_0 {f16 d; uint8 qs[16]}, q4_1 {f16 d; f16 m; uint8 qs[16]};
 * 4-bit value j < 16 in qs[j]'s low nibble, j >= 16 in qs[j - 16]'s high one */
static void quant_block(DType d, const float *x, uint8_t *b) {
    float amax = 0, max = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]);
    }
    switch (d) {
    case DT_Q8_0: {
        const float s = amax / 127, inv = s ? 1.0f / s : 0.0f;
        put16(b, pack_f32_to_f16(s));
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * inv);
        return;
    }
    case DT_Q4_0: {
        const float s = max / -8, inv = s ? 1.0f / s : 0.0f;
        put16(b, pack_f32_to_f16(s));
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)(x[j] * inv + 8.5f), q1 = (int8_t)(x[j + 16] * inv + 8.5f);
            b[2 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
        return;
    }
    case DT_Q4_1: {
        const float s = (hi - lo) / 15, inv = s ? 1.0f / s : 0.0f;
        put16(b, pack_f32_to_f16(s));
        put16(b + 2, pack_f32_to_f16(lo));
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)((x[j] - lo) * inv + 0.5f), q1 = (int8_t)((x[j + 16] - lo) * inv + 0.5f);
            b[4 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
        return;
    }
    default: UNREACHABLE();
    }
}

void quant_row(DType d, const float *x, int64_t n, uint8_t *out) {
    const bool whole = n % 32 == 0;
    CHECK(dtype_is_quant(d) && whole, "quant_row(%s, %lld)", dtype_names[d], (long long)n);
    for (int64_t i = 0; i < n; i += 32) quant_block(d, x + i, out + i / 32 * dtype_sizes[d]);
}

void dequant_row(DType d, const uint8_t *in, int64_t n, float *out) {
    CHECK(dtype_is_quant(d), "dequant_row(%s)", dtype_names[d]);
    pack_dequant_blocks((uint32_t)d, in, (size_t)n, out);   /* the payload's codes are DType's (main.c) */
}
