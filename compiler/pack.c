/* pack.c: payload writer (see pack.h, runtime/payload.h). Four ways a
 * tensor's bytes get to the file: copy_file_range from the checkpoint (the
 * common case: no copy through user space, no pages of the mapping touched),
 * a chunked convert from the mapping (--dtype), a chunked generator
 * (--random-weights), or row by row in another order (a GGUF file's llama
 * q/k rows, converted too where asked). Memory stays a few MiB whatever the
 * model size. */
#include "pack.h"
#include "payload.h"
#include <math.h>
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t align_up(uint64_t x) { return (x + PAYLOAD_ALIGN - 1) / PAYLOAD_ALIGN * PAYLOAD_ALIGN; }

static bool is_float(uint32_t dt) { return dt == PDT_F32 || dt == PDT_F16 || dt == PDT_BF16; }

/* ---- element conversions ---- */
uint16_t pack_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN, sign kept */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* F. Giesen's float_to_half_fast3_rtne: exact round to nearest even,
 * subnormals by letting the FPU round on an added magic number. */
uint16_t pack_f32_to_f16(float f) {
    const uint32_t f32_inf = 255u << 23, f16_max = (127u + 16) << 23;
    const uint32_t magic_u = ((127u - 15) + (23 - 10) + 1) << 23;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= f16_max) {
        o = u > f32_inf ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {
        float fu, magic;
        memcpy(&fu, &u, 4);
        memcpy(&magic, &magic_u, 4);
        fu += magic;
        memcpy(&u, &fu, 4);
        o = (uint16_t)(u - magic_u);
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

float pack_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float pack_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else if (e) u = s | ((e + 112) << 23) | (m << 13);
    else if (!m) u = s;
    else { e = 113; while (!(m & 1024)) { m <<= 1; e--; } u = s | (e << 23) | ((m & 1023) << 13); }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- GGUF's block types: ggml-quants.c's reference quantizers, bit for bit (the scale from the block's extreme
 * in f32, the integers from its f32 reciprocal, the scale then stored as f16), and the dequantization ---- */
static void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }

/* one block of 32: q8_0 {f16 d; int8 qs[32]}, q4_0 {f16 d; uint8 qs[16]}, q4_1 {f16 d; f16 m; uint8 qs[16]};
 * 4-bit value j < 16 in qs[j]'s low nibble, j >= 16 in qs[j - 16]'s high one */
static void quant_block(uint32_t dt, const float *x, uint8_t *b) {
    float amax = 0, max = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]);
    }
    switch (dt) {
    case PDT_Q8_0: {
        const float s = amax / 127, inv = s ? 1.0f / s : 0.0f;
        put16(b, pack_f32_to_f16(s));
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * inv);
        return;
    }
    case PDT_Q4_0: {
        const float s = max / -8, inv = s ? 1.0f / s : 0.0f;
        put16(b, pack_f32_to_f16(s));
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)(x[j] * inv + 8.5f), q1 = (int8_t)(x[j + 16] * inv + 8.5f);
            b[2 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
        return;
    }
    case PDT_Q4_1: {
        const float s = (hi - lo) / 15, inv = s ? 1.0f / s : 0.0f;
        put16(b, pack_f32_to_f16(s));
        put16(b + 2, pack_f32_to_f16(lo));
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)((x[j] - lo) * inv + 0.5f), q1 = (int8_t)((x[j + 16] - lo) * inv + 0.5f);
            b[4 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
        return;
    }
    default: CHECK(0, "quantize into dtype %u", dt);
    }
}

/* The K-quants' super-blocks of 256 (ggml-common.h's block_q4_K, block_q5_K, block_q6_K; ggml-quants.c's
 * dequantize_row_q4_K ...). Q4_K {f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]} and Q5_K {f16 d; f16 dmin;
 * uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}: sub-block s < 8 of 32 values has a 6-bit scale and minimum
 * (kq_scale_min), value j of it d * sc * q - dmin * m with q the low (s even) or high (s odd) nibble of
 * qs[32 * (s / 2) + j], plus for Q5_K 16 times bit s of qh[j]. Q6_K {uint8 ql[128]; uint8 qh[64]; int8
 * scales[16]; f16 d}: value e of 256, in half h = e / 128, quarter t = e / 32 % 4, position l = e % 32, is
 * d * scales[e / 16] * (q - 32), q's low 4 bits the low (t < 2) or high nibble of ql[64 h + 32 (t % 2) + l], its
 * high 2 bits bits 2t, 2t + 1 of qh[32 h + l]. */
static void kq_scale_min(const uint8_t *sc, int s, int *scale, int *min) {
    if (s < 4) { *scale = sc[s] & 63; *min = sc[s + 4] & 63; return; }
    *scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
    *min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
}
static void dequant_kblock(uint32_t dt, const uint8_t *b, float *out) {
    const float d = pack_f16_to_f32((uint16_t)(b[0] | b[1] << 8)), dmin = pack_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
    if (dt == PDT_Q6_K) {
        const float d6 = pack_f16_to_f32((uint16_t)(b[208] | b[209] << 8));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, t = e / 32 % 4, l = e % 32;
            const int lo = (b[64 * h + 32 * (t % 2) + l] >> (t < 2 ? 0 : 4)) & 15;
            const int hi = (b[128 + 32 * h + l] >> 2 * t) & 3;
            out[e] = d6 * (float)(int8_t)b[192 + e / 16] * (float)((lo | hi << 4) - 32);   /* exact: <= 23 bits */
        }
        return;
    }
    const uint8_t *qs = b + (dt == PDT_Q5_K ? 48 : 16), *qh = b + 16;
    for (int s = 0; s < 8; s++) {
        int scale, min;
        kq_scale_min(b + 4, s, &scale, &min);
        const float d1 = d * (float)scale, m1 = dmin * (float)min;
        for (int j = 0; j < 32; j++) {
            int q = (qs[32 * (s / 2) + j] >> (s % 2 ? 4 : 0)) & 15;
            if (dt == PDT_Q5_K) q |= ((qh[j] >> s) & 1) << 4;
            out[32 * s + j] = d1 * (float)q - m1;
        }
    }
}

/* ---- the K-quants' reference quantizers (ggml-quants.c's quantize_row_q4_K_ref and quantize_row_q6_K_ref, which
 * llama-quantize runs when it has no importance matrix), bit for bit: the same f32 operations in the same order
 * (this file is C11, so no multiply-add is contracted; ggml-base is built without FMA instructions either) ---- */

#define KQ_ALL_ZERO 1e-15f   /* ggml's GROUP_MAX_EPS: a sub-block or super-block of smaller values is all zero */

/* ggml's nearest_int: round to nearest, ties to even (the default rounding mode, as its 1.5 * 2^23 trick) */
static int nearest_int(float v) { return (int)lrintf(v); }

/* ggml's make_qkx2_quants for Q4_K's sub-blocks (32 values, codes 0..15; nmax 15, rmin -1, rdelta 0.1, nstep 20,
 * use_mad false): the codes q, a scale s and a minimum m >= 0 such that s * q - m fits x in the weighted least
 * squares sense. The first fit spreads [min(x, 0), max x] over the 16 codes; then 21 trials round x with
 * 14, 14.1, ..., 16 steps over the range from the best minimum so far (ggml's loop reads min as it updates it),
 * each gets its least-squares scale and minimum (the minimum forced to 0, the scale refitted, where it came out
 * positive), and the least weighted squared error wins. Returns the scale, *neg_min gets m. */
static float q4_k_fit_sub_block(const float *x, const float *w, uint8_t *q, float *neg_min) {
    enum { N = 32, QMAX = 15, STEPS = 20 };
    const float rmin = -1.0f, rdelta = 0.1f;
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < N; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(q, 0, N);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = QMAX / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < N; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        q[i] = (uint8_t)(l < 0 ? 0 : l > QMAX ? QMAX : l);
        const float diff = scale * q[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int step = 0; step <= STEPS; step++) {
        iscale = (rmin + rdelta * step + QMAX) / (max - min);
        uint8_t trial[N];
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < N; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > QMAX ? QMAX : l;
            trial[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float error = 0;
        for (int i = 0; i < N; i++) {
            const float diff = this_scale * trial[i] + this_min - x[i];
            error += w[i] * (diff * diff);
        }
        if (error < best_error) {
            memcpy(q, trial, N);
            best_error = error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* ggml's quantize_row_q4_K_ref, one super-block of 256: each sub-block of 32 fitted (weights: the sub-block's RMS
 * plus |x|, so large values count more), the 8 scales and minimums as 6-bit multiples of the largest (f16 d and
 * dmin), packed as kq_scale_min reads them, then every code again from the rounded scale and minimum */
static void quant_q4_k(const float *x, uint8_t *b) {
    uint8_t q[256];
    float scales[8], mins[8], max_scale = 0, max_min = 0;   /* the minimum is subtracted: scales are >= 0 */
    for (int s = 0; s < 8; s++) {
        const float *xs = x + 32 * s;
        float sum_x2 = 0, weight[32];
        for (int j = 0; j < 32; j++) sum_x2 += xs[j] * xs[j];
        const float rms = sqrtf(sum_x2 / 32);
        for (int j = 0; j < 32; j++) weight[j] = rms + fabsf(xs[j]);
        scales[s] = q4_k_fit_sub_block(xs, weight, q + 32 * s, &mins[s]);
        if (scales[s] > max_scale) max_scale = scales[s];
        if (mins[s] > max_min) max_min = mins[s];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *sc = b + 4;   /* s < 4: the low 6 bits of sc[s] (scale), sc[s + 4] (minimum); s >= 4: sc[s + 4]'s
                            * nibbles, the top 2 bits in those of sc[s - 4] and sc[s] */
    for (int s = 0; s < 8; s++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[s]), lm = (uint8_t)nearest_int(inv_min * mins[s]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (s < 4) {
            sc[s] = ls;
            sc[s + 4] = lm;
        } else {
            sc[s + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            sc[s - 4] |= (uint8_t)(ls >> 4 << 6);
            sc[s] |= (uint8_t)(lm >> 4 << 6);
        }
    }
    put16(b, pack_f32_to_f16(max_scale / 63.0f));
    put16(b + 2, pack_f32_to_f16(max_min / 63.0f));
    const float d = pack_f16_to_f32((uint16_t)(b[0] | b[1] << 8)), dmin = pack_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
    for (int s = 0; s < 8; s++) {
        int scale, min;
        kq_scale_min(sc, s, &scale, &min);
        const float ds = d * (float)scale, ms = dmin * (float)min;
        if (!ds) continue;   /* the fit's codes stay, as in ggml */
        for (int j = 0; j < 32; j++) {
            const int l = nearest_int((x[32 * s + j] + ms) / ds);
            q[32 * s + j] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
        }
    }
    /* qs[32 p + l]: code l of sub-block 2p in the low nibble, of sub-block 2p + 1 in the high one */
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) b[16 + 32 * p + l] = (uint8_t)(q[64 * p + l] | q[64 * p + 32 + l] << 4);
}

/* Q6_K's codes of a sub-block of 16 for one reciprocal scale: l = round(iscale * x) within -32..31, stored + 32;
 * the sums of make_qx_quants' least squares under weights x^2 (sum w x l, sum w l^2) */
static void q6_k_codes(const float *x, float iscale, uint8_t *q, float *sumlx, float *suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < 16; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        q[i] = (uint8_t)(l + 32);
        const float w = x[i] * x[i];
        *sumlx += w * x[i] * l;
        *suml2 += w * l * l;
    }
}

/* ggml's make_qx_quants (nmax 32, rmse_type 1) for Q6_K's sub-blocks of 16: the value of largest magnitude mapped
 * to code -32, then 18 other reciprocal scales (-(32 + 0.1 i) over it, i = -9..9 but 0), each fit's least-squares
 * scale kept where it explains more (sum w x l)^2 / sum w l^2. Returns the scale; q gets the codes + 32. */
static float q6_k_fit_sub_block(const float *x, uint8_t *q) {
    float max = 0, amax = 0;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < KQ_ALL_ZERO) {
        memset(q, 0, 16);
        return 0.0f;
    }
    float sumlx, suml2;
    q6_k_codes(x, -32 / max, q, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int step = -9; step <= 9; step++) {
        if (!step) continue;
        uint8_t trial[16];
        q6_k_codes(x, -(32 + 0.1f * step) / max, trial, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            memcpy(q, trial, 16);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's quantize_row_q6_K_ref, one super-block of 256: the 16 sub-block scales as int8 multiples of the one of
 * largest magnitude (mapped to -128; f16 d), then every code again from its rounded scale; the layout is
 * dequant_kblock's */
static void quant_q6_k(const float *x, uint8_t *b) {
    uint8_t q[256];
    float scales[16], max_scale = 0, max_abs_scale = 0;
    for (int s = 0; s < 16; s++) {
        scales[s] = q6_k_fit_sub_block(x + 16 * s, q + 16 * s);
        if (fabsf(scales[s]) > max_abs_scale) { max_abs_scale = fabsf(scales[s]); max_scale = scales[s]; }
    }
    if (max_abs_scale < KQ_ALL_ZERO) {
        memset(b, 0, 210);
        return;
    }
    const float iscale = -128.0f / max_scale;
    put16(b + 208, pack_f32_to_f16(1 / iscale));
    int8_t sc[16];
    for (int s = 0; s < 16; s++) {
        const int l = nearest_int(iscale * scales[s]);
        sc[s] = (int8_t)(l < 127 ? l : 127);
        b[192 + s] = (uint8_t)sc[s];
    }
    const float d = pack_f16_to_f32((uint16_t)(b[208] | b[209] << 8));
    for (int s = 0; s < 16; s++) {
        const float ds = d * sc[s];
        if (!ds) continue;   /* the fit's codes stay, as in ggml */
        for (int j = 0; j < 16; j++) {
            const int l = nearest_int(x[16 * s + j] / ds);
            q[16 * s + j] = (uint8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
        }
    }
    memset(b + 128, 0, 64);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, t = e / 32 % 4, l = e % 32;
        uint8_t *lo = &b[64 * h + 32 * (t % 2) + l];
        *lo = (uint8_t)(t < 2 ? q[e] & 15 : (*lo & 15) | (q[e] & 15) << 4);
        b[128 + 32 * h + l] |= (uint8_t)(q[e] >> 4 << 2 * t);
    }
}

void pack_quant_blocks(uint32_t dt, const float *x, size_t n, uint8_t *out) {
    const size_t block = payload_dtype_block(dt), bytes = payload_dtype_bytes(dt);
    const bool whole = block > 1 && n % block == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(dt >= PDT_Q8_0 && dt <= PDT_Q6_K && dt != PDT_Q5_K && whole, "quantize %zu values into dtype %u", n, dt);
    for (size_t i = 0; i < n; i += block) {
        uint8_t *b = out + i / block * bytes;
        if (dt == PDT_Q4_K) quant_q4_k(x + i, b);
        else if (dt == PDT_Q6_K) quant_q6_k(x + i, b);
        else quant_block(dt, x + i, b);
    }
}

void pack_dequant_blocks(uint32_t dt, const uint8_t *in, size_t n, float *out) {
    const size_t block = payload_dtype_block(dt), bytes = payload_dtype_bytes(dt);
    const bool whole = block > 1 && n % block == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(dt >= PDT_Q8_0 && dt <= PDT_Q5_1 && whole, "dequantize %zu values of dtype %u", n, dt);
    if (block == 256) {
        for (size_t i = 0; i < n; i += 256) dequant_kblock(dt, in + i / 256 * bytes, out + i);
        return;
    }
    /* Q5_0 {f16 d; uint8 qh[4]; uint8 qs[16]}, Q5_1 {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]}: Q4_0 / Q4_1's
     * nibble plus 16 times bit j of qh (a little-endian uint32), d * (q - 16) or d * q + m */
    const bool q5 = dt == PDT_Q5_0 || dt == PDT_Q5_1, has_min = dt == PDT_Q4_1 || dt == PDT_Q5_1;
    const size_t qs = (has_min ? 4 : 2) + (q5 ? 4 : 0);
    const int offset = dt == PDT_Q4_0 ? 8 : dt == PDT_Q5_0 ? 16 : 0;
    for (size_t i = 0; i < n; i += 32) {
        const uint8_t *b = in + i / 32 * bytes;
        const float d = pack_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
        const float m = has_min ? pack_f16_to_f32((uint16_t)(b[2] | b[3] << 8)) : 0.0f;
        const uint32_t qh = q5 ? (uint32_t)b[qs - 4] | (uint32_t)b[qs - 3] << 8 | (uint32_t)b[qs - 2] << 16 |
                                     (uint32_t)b[qs - 1] << 24 : 0;
        for (int j = 0; j < 32; j++) {
            const int q = ((b[qs + j % 16] >> (j < 16 ? 0 : 4)) & 15) | (int)((qh >> j) & 1) << 4;
            out[i + j] = dt == PDT_Q8_0 ? d * (float)(int8_t)b[2 + j] : has_min ? d * (float)q + m
                                                                                 : d * (float)(q - offset);
        }
    }
}

static void to_f32(float *dst, const void *src, uint32_t dt, size_t n) {
    const uint16_t *h = src;
    switch (dt) {
    case PDT_F32: memcpy(dst, src, n * 4); return;
    case PDT_BF16: for (size_t i = 0; i < n; i++) dst[i] = pack_bf16_to_f32(h[i]); return;
    case PDT_F16: for (size_t i = 0; i < n; i++) dst[i] = pack_f16_to_f32(h[i]); return;
    case PDT_Q8_0: case PDT_Q4_0: case PDT_Q4_1: case PDT_Q4_K: case PDT_Q5_K: case PDT_Q6_K: case PDT_Q5_0:
    case PDT_Q5_1:
        pack_dequant_blocks(dt, src, n, dst);
        return;
    default: CHECK(0, "convert from dtype %u", dt);
    }
}

static void from_f32(void *dst, const float *src, uint32_t dt, size_t n) {
    uint16_t *h = dst;
    switch (dt) {
    case PDT_F32: memcpy(dst, src, n * 4); return;
    case PDT_BF16: for (size_t i = 0; i < n; i++) h[i] = pack_f32_to_bf16(src[i]); return;
    case PDT_F16: for (size_t i = 0; i < n; i++) h[i] = pack_f32_to_f16(src[i]); return;
    case PDT_Q8_0: case PDT_Q4_0: case PDT_Q4_1: case PDT_Q4_K: case PDT_Q6_K:   /* --quant */
        pack_quant_blocks(dt, src, n, dst);
        return;
    default: CHECK(0, "convert to dtype %u", dt);
    }
}

/* ---- random weights: counter-based splitmix64, four 16-bit lanes per draw ---- */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t tensor_seed(uint64_t seed, const char *name) {
    return mix64(seed ^ mix64(fnv1a(name, strlen(name))));
}
/* elements [first, first + n) of a uniform(-a, a) tensor, a = 0.02 * sqrt(3): std 0.02 */
static void gen_random(float *dst, uint64_t tseed, uint64_t first, size_t n, float offset) {
    const float a = 0.034641016f, scale = 2.0f * a / 65536.0f, base = offset + 0.5f * scale - a;
    size_t i = 0;
    while (i < n) {
        uint64_t e = first + i;
        uint64_t r = mix64(tseed + ((e >> 2) + 1) * 0x9E3779B97F4A7C15ull);
        for (unsigned l = (unsigned)(e & 3); l < 4 && i < n; l++, i++)
            dst[i] = base + (float)((r >> (16 * l)) & 0xffffu) * scale;
    }
}

/* total bytes at out drawn from seed */
static void random_bytes(uint64_t seed, size_t total, uint8_t *out) {
    for (size_t i = 0; i < total; i += 8) {
        uint64_t r = mix64(seed + (i / 8 + 1) * 0x9E3779B97F4A7C15ull);
        for (size_t j = i; j < i + 8 && j < total; j++, r >>= 8) out[j] = (uint8_t)r;
    }
}

/* random K-quant blocks (pack.h) */
void pack_random_kquant_blocks(uint32_t dt, uint64_t seed, float bound, size_t n, uint8_t *out) {
    const bool whole = n % 256 == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(dt >= PDT_Q4_K && dt <= PDT_Q6_K && whole, "random blocks: %zu values of dtype %u", n, dt);
    const size_t bytes = payload_dtype_bytes(dt);
    random_bytes(seed, n / 256 * bytes, out);
    /* the f16 super-block scales from [bound / 2, bound] over the largest integer product, so values stay
     * within about +-bound: Q4_K / Q5_K's sub-block scale and minimum are at most 63 and q 15 or 31, Q6_K's
     * scale is an int8 and q - 32 in [-32, 31] */
    const float most = dt == PDT_Q4_K ? 63.0f * 15 : dt == PDT_Q5_K ? 63.0f * 31 : 128.0f * 32;
    for (size_t b = 0; b < n / 256; b++) {
        uint8_t *blk = out + b * bytes;
        const uint64_t r = mix64(seed ^ (b + 1) * 0xD6E8FEB86659FD93ull);
        const float u0 = 0.5f + 0.5f * (float)(r & 0xffff) / 65535.0f;
        const float u1 = 0.5f + 0.5f * (float)(r >> 16 & 0xffff) / 65535.0f;
        if (dt == PDT_Q6_K) { put16(blk + 208, pack_f32_to_f16(bound * u0 / most)); continue; }
        put16(blk, pack_f32_to_f16(bound * u0 / most));
        put16(blk + 2, pack_f32_to_f16(bound * u1 / 63.0f));
    }
}

/* random Q5_0 / Q5_1 blocks (pack.h): every qh and qs byte drawn; d from [bound / 2, bound] over the largest
 * integer (Q5_0's q - 16 in [-16, 15], Q5_1's q in [0, 31]), Q5_1's minimum in [-bound / 2, -bound / 4], so the
 * values stay within +-bound */
void pack_random_q5_blocks(uint32_t dt, uint64_t seed, float bound, size_t n, uint8_t *out) {
    const bool whole = n % 32 == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK((dt == PDT_Q5_0 || dt == PDT_Q5_1) && whole, "random blocks: %zu values of dtype %u", n, dt);
    const size_t bytes = payload_dtype_bytes(dt);
    random_bytes(seed, n / 32 * bytes, out);
    for (size_t b = 0; b < n / 32; b++) {
        uint8_t *blk = out + b * bytes;
        const uint64_t r = mix64(seed ^ (b + 1) * 0xD6E8FEB86659FD93ull);
        const float u0 = 0.5f + 0.5f * (float)(r & 0xffff) / 65535.0f;
        const float u1 = 0.5f + 0.5f * (float)(r >> 16 & 0xffff) / 65535.0f;
        if (dt == PDT_Q5_0) { put16(blk, pack_f32_to_f16(bound * u0 / 16.0f)); continue; }
        put16(blk, pack_f32_to_f16(bound * u0 / 31.0f * 0.75f));
        put16(blk + 2, pack_f32_to_f16(-bound * u1 / 2.0f));
    }
}

/* ---- the output file ---- */
typedef struct {
    int fd;
    const char *out, *tmp;
    uint64_t done, total;
    bool tty;
    double t0, last;
    uint8_t *buf;          /* small writes are gathered here */
    size_t nbuf;
} Writer;

#define WBUF (4u << 20)
#define CHUNK_ELEMS ((size_t)1 << 20)

static _Noreturn void fail(Writer *w, const char *what, const char *name) {
    int e = errno;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    if (w->tty) fputc('\n', stderr);
    die_user(name ? name : w->out, NULL, "%s: %s", what, e ? strerror(e) : "write error");
}

static void progress(Writer *w, bool final) {
    if (!w->tty) return;
    double t = now_s();
    if (!final && t - w->last < 0.1) return;
    w->last = t;
    double el = t - w->t0, rate = el > 0 ? w->done / el : 0;
    double frac = w->total ? (double)w->done / w->total : 1;
    int bar = (int)(frac * 30);
    char b[31];
    for (int i = 0; i < 30; i++) b[i] = i < bar ? '#' : '.';
    b[30] = 0;
    double eta = rate > 0 ? (w->total - w->done) / rate : 0;
    fprintf(stderr, "\rpacking [%s] %7.1f / %.1f MiB  %6.1f MiB/s  ETA %3.0fs ", b,
            w->done / 1048576.0, w->total / 1048576.0, rate / 1048576.0, final ? 0.0 : eta);
    if (final) fputc('\n', stderr);
}

static void write_all(Writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        errno = 0;
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fail(w, "cannot write the payload", NULL);
        p += k; n -= (size_t)k;
    }
}

static void flush(Writer *w) {
    if (w->nbuf) write_all(w, w->buf, w->nbuf);
    w->nbuf = 0;
}

static void put(Writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        size_t k = WBUF - w->nbuf < n ? WBUF - w->nbuf : n;
        memcpy(w->buf + w->nbuf, p, k);
        w->nbuf += k; p += k; n -= k; w->done += k;
        if (w->nbuf == WBUF) flush(w);
        progress(w, false);
    }
}

static void pad_to(Writer *w, uint64_t off) {
    static const uint8_t zeros[4096];
    CHECK(off >= w->done, "pad backwards");
    while (w->done < off) {
        uint64_t k = off - w->done;
        put(w, zeros, k < sizeof zeros ? (size_t)k : sizeof zeros);
    }
}

/* Drops the pages of [p, p + n) from this process (a read-only private file
 * mapping: they stay in the page cache, nothing is lost). */
static void drop_pages(const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t m = ~(uintptr_t)(pg - 1), b = ((uintptr_t)p + (uintptr_t)pg - 1) & m, e = ((uintptr_t)p + n) & m;
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}

/* In-kernel copy of a tensor from its checkpoint file. Returns false (having
 * written nothing) when the file system cannot do it; the caller then copies
 * through memory. */
static bool copy_range(Writer *w, const PackTensor *t, const PackSource *src) {
    errno = 0;
    int in = open(src->src_path, O_RDONLY | O_CLOEXEC);
    if (in < 0) fail(w, "cannot open", src->src_path);
    loff_t off = (loff_t)src->src_off;
    size_t left = t->nbytes;
    bool first = true;
    while (left) {
        size_t k = left < (64u << 20) ? left : (64u << 20);
        errno = 0;
        ssize_t r = copy_file_range(in, &off, w->fd, NULL, k, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && first &&
            (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP || errno == EPERM)) {
            close(in);
            return false;
        }
        if (r <= 0) {
            int e = errno; close(in); errno = e; fail(w, "cannot copy the weights into the payload", src->src_path);
        }
        first = false;
        left -= (size_t)r; w->done += (uint64_t)r;
        progress(w, false);
    }
    close(in);
    return true;
}

/* A tensor whose rows come in src->row_from's order: row by row through memory (no in-kernel copy: the rows are
 * not contiguous in the source), converted where asked, in chunks of at most CHUNK_ELEMS elements. */
static void write_rows(Writer *w, const PackTensor *t, const PackSource *src, float *fbuf, uint8_t *obuf) {
    uint64_t rows = (uint64_t)t->shape[0], count = 1;
    for (int d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
    uint64_t row_elems = rows ? count / rows : 0;
    size_t in_row = rows ? t->nbytes / (size_t)rows : 0;
    int overflow;   /* (sizes were checked by pack_payload_ex) */
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *p = (const uint8_t *)t->data + (uint64_t)src->row_from[r] * in_row;
        if (!src->convert) { put(w, p, in_row); continue; }
        for (uint64_t e0 = 0; e0 < row_elems; e0 += CHUNK_ELEMS) {   /* rows are whole blocks */
            size_t k = row_elems - e0 < CHUNK_ELEMS ? (size_t)(row_elems - e0) : CHUNK_ELEMS;
            to_f32(fbuf, p + payload_tensor_bytes(src->src_dtype, e0, &overflow), src->src_dtype, k);
            from_f32(obuf, fbuf, t->dtype, k);
            put(w, obuf, payload_tensor_bytes(t->dtype, k, &overflow));
        }
    }
    if (src->src_path) drop_pages(t->data, t->nbytes);
}

static void write_tensor(Writer *w, const PackTensor *t, const PackSource *src, float *fbuf, uint8_t *obuf) {
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
    if (src->fill == PACK_DATA && src->row_from) { write_rows(w, t, src, fbuf, obuf); return; }
    if (src->fill == PACK_DATA && !src->convert) {
        if (!t->nbytes) return;
        flush(w);
        if (src->src_path && copy_range(w, t, src)) return;
        const uint8_t *p = t->data;
        for (size_t o = 0; o < t->nbytes; o += WBUF) {
            size_t k = t->nbytes - o < WBUF ? t->nbytes - o : WBUF;
            put(w, p + o, k);
            if (src->src_path) drop_pages(p + o, k);
        }
        return;
    }
    uint64_t tseed = tensor_seed(src->seed, t->name);
    int overflow;
    for (uint64_t e0 = 0; e0 < count; e0 += CHUNK_ELEMS) {   /* CHUNK_ELEMS: whole blocks of any block type */
        size_t k = count - e0 < CHUNK_ELEMS ? (size_t)(count - e0) : CHUNK_ELEMS;
        if (src->fill == PACK_DATA) {
            const uint8_t *p = (const uint8_t *)t->data + payload_tensor_bytes(src->src_dtype, e0, &overflow);
            to_f32(fbuf, p, src->src_dtype, k);
            if (src->src_path) drop_pages(p, payload_tensor_bytes(src->src_dtype, k, &overflow));
        } else {
            gen_random(fbuf, tseed, e0, k, src->fill == PACK_RANDOM_NORM ? 1.0f : 0.0f);
        }
        from_f32(obuf, fbuf, t->dtype, k);
        put(w, obuf, payload_tensor_bytes(t->dtype, k, &overflow));
    }
}

void pack_payload_ex(const char *out_path, const PackTensor *tensors, const PackSource *srcs, int n,
                     const uint8_t *tok_blob, size_t tok_size) {
    CHECK(n >= 0, "n = %d", n);
    static const PackSource plain;
    PayloadHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PAYLOAD_MAGIC, 8);
    h.version = PAYLOAD_VERSION;
    h.n_tensors = (uint32_t)n;
    h.table_off = sizeof(PayloadHeader);
    h.tok_off = h.table_off + (uint64_t)n * sizeof(PayloadTensor);
    h.tok_size = tok_size;
    h.data_off = align_up(h.tok_off + tok_size);
    PayloadTensor *tab = xcalloc((size_t)n ? (size_t)n : 1, sizeof *tab);
    uint64_t off = h.data_off, end = h.tok_off + tok_size;
    for (int i = 0; i < n; i++) {
        const PackTensor *t = &tensors[i];
        const PackSource *src = srcs ? &srcs[i] : &plain;
        PayloadTensor *e = &tab[i];
        size_t nl = strlen(t->name);
        if (nl >= sizeof e->name)
            die_user(NULL, t->name, "tensor name is %zu bytes, the payload allows %zu", nl, sizeof e->name - 1);
        memcpy(e->name, t->name, nl);
        CHECK(payload_dtype_bytes(t->dtype) != 0, "tensor %s: dtype %u", t->name, t->dtype);
        CHECK(t->ndim >= 0 && t->ndim <= 4, "tensor %s: ndim %d", t->name, t->ndim);
        CHECK((unsigned)src->fill < PACK_FILL_COUNT, "tensor %s: fill %d", t->name, (int)src->fill);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            CHECK(t->shape[d] >= 0, "tensor %s: negative dim", t->name);
            count *= (uint64_t)t->shape[d];
            e->shape[d] = (uint64_t)t->shape[d];
        }
        if (src->fill != PACK_DATA || src->convert)
            CHECK(is_float(t->dtype) || (t->dtype >= PDT_Q8_0 && t->dtype <= PDT_Q6_K && t->dtype != PDT_Q5_K),
                  "tensor %s: generated or converted into dtype %u", t->name, t->dtype);
        int overflow;
        if (src->fill == PACK_DATA) {
            uint32_t sdt = src->convert ? src->src_dtype : t->dtype;
            if (src->convert)   /* from a float or a block type (dequantized) */
                CHECK(is_float(sdt) || (sdt >= PDT_Q8_0 && sdt <= PDT_Q5_1), "tensor %s: converted from dtype %u",
                      t->name, sdt);
            uint64_t need = payload_tensor_bytes(sdt, count, &overflow);
            CHECK(!overflow && (need || !count), "tensor %s: %llu values of dtype %u", t->name,
                  (unsigned long long)count, sdt);
            if (need != t->nbytes)
                die_user(NULL, t->name, "tensor has %zu bytes of data, its shape and dtype need %llu",
                         t->nbytes, (unsigned long long)need);
            CHECK(t->data || t->nbytes == 0, "tensor %s: no data", t->name);
            /* a row order names one of the shape[0] source rows for each row (write_rows) */
            CHECK(!src->row_from || t->ndim >= 1, "tensor %s: a row order without rows", t->name);
            for (int64_t r = 0; src->row_from && r < t->shape[0]; r++)
                CHECK(src->row_from[r] >= 0 && src->row_from[r] < t->shape[0], "tensor %s: row %lld from row %lld",
                      t->name, (long long)r, (long long)src->row_from[r]);
        }
        e->dtype = t->dtype;
        e->ndim = (uint32_t)t->ndim;
        e->offset = off;
        e->nbytes = payload_tensor_bytes(t->dtype, count, &overflow);
        CHECK(!overflow && (e->nbytes || !count), "tensor %s: %llu values of dtype %u", t->name,
              (unsigned long long)count, t->dtype);
        end = off + e->nbytes;
        off = align_up(end);
    }
    h.total_size = end;

    char *tmp = xmalloc(strlen(out_path) + 5);
    sprintf(tmp, "%s.tmp", out_path);
    Writer w = { .fd = -1, .out = out_path, .tmp = tmp, .total = h.total_size, .tty = isatty(2) != 0 };
    w.t0 = w.last = now_s();
    w.buf = xmalloc(WBUF);
    float *fbuf = xmalloc(CHUNK_ELEMS * sizeof(float));
    uint8_t *obuf = xmalloc(CHUNK_ELEMS * sizeof(float));
    errno = 0;
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) fail(&w, "cannot create the payload file", NULL);
    put(&w, &h, sizeof h);
    put(&w, tab, (size_t)n * sizeof *tab);
    if (tok_size) put(&w, tok_blob, tok_size);
    for (int i = 0; i < n; i++) {
        pad_to(&w, tab[i].offset);
        write_tensor(&w, &tensors[i], srcs ? &srcs[i] : &plain, fbuf, obuf);
        CHECK(w.done == tab[i].offset + tab[i].nbytes, "tensor %s: wrote %llu bytes, expected %llu", tensors[i].name,
              (unsigned long long)(w.done - tab[i].offset), (unsigned long long)tab[i].nbytes);
    }
    flush(&w);
    CHECK(w.done == h.total_size, "wrote %llu of %llu bytes", (unsigned long long)w.done,
          (unsigned long long)h.total_size);
    int fd = w.fd;
    w.fd = -1;
    errno = 0;
    if (close(fd) != 0) fail(&w, "cannot write the payload", NULL);
    errno = 0;
    if (rename(tmp, out_path) != 0) fail(&w, "cannot rename the payload into place", NULL);
    progress(&w, true);
    free(w.buf);
    free(fbuf);
    free(obuf);
    free(tab);
    free(tmp);
}
