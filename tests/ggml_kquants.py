"""ggml_kquants.py: a numpy port of ggml's reference K-quant quantizers, quantize_row_q4_K_ref (with its
make_qkx2_quants: nmax 15, rmin -1, rdelta 0.1, nstep 20, use_mad false) and quantize_row_q6_K_ref (with
make_qx_quants, rmse_type 1), from ggml-quants.c (llama.cpp, as vendored by llama-cpp-python 0.3.36). What
llama-quantize runs without an importance matrix; gguf-py has no K-quant quantizer. Shares no code with llmcc.

Bit for bit: every operation is f32 in ggml's order (numpy's f32 scalars and arrays round each operation as C
does without FMA contraction); the sums run left to right (cumsum, not numpy's pairwise sum); rounding is
nearest_int's, ties to even (np.rint); f16 conversions round to nearest even, as GGML_FP32_TO_FP16. Vectorized
over blocks and sub-blocks, so the searches' choices become np.where. tests/test_quant.py checks it against
libggml-base.so's own functions where llama.cpp is built.

    quantize_q4_k(x)  f32 [n, 256] -> uint8 [n, 144] (block_q4_K)
    quantize_q6_k(x)  f32 [n, 256] -> uint8 [n, 210] (block_q6_K)
"""
import numpy as np

F = np.float32


def seq_sum(a):
    """sum over the last axis, left to right in f32 (as ggml's loops; numpy's sum is pairwise)"""
    return np.cumsum(a, axis=-1, dtype=F)[..., -1]


def q4_k_fit(x, w):
    """make_qkx2_quants(32, 15, x, w, ..., rmin -1, rdelta 0.1, nstep 20, use_mad false) over [..., 32]:
    (codes, scale, -min)"""
    with np.errstate(divide="ignore", invalid="ignore"):
        mn = np.minimum(x.min(axis=-1), F(0))
        mx = x.max(axis=-1)
        sum_w, sum_x = seq_sum(w), seq_sum(w * x)
        flat = mx == mn
        rng = np.where(flat, F(1), mx - mn)
        iscale = F(15) / rng
        scale = F(1) / iscale
        q = np.clip(np.rint(iscale[..., None] * (x - mn[..., None])), 0, 15).astype(F)
        diff = scale[..., None] * q + mn[..., None] - x
        best = seq_sum(w * (diff * diff))
        for step in range(21):   # (the range from the minimum found so far, as ggml's loop reads min)
            iscale = (F(-1) + F(0.1) * F(step) + F(15)) / np.where(flat, F(1), mx - mn)
            l = np.clip(np.rint(iscale[..., None] * (x - mn[..., None])), 0, 15).astype(F)
            sum_l, sum_l2, sum_xl = seq_sum(w * l), seq_sum(w * l * l), seq_sum(w * l * x)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            pos = this_min > 0
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
            this_min = np.where(pos, F(0), this_min)
            diff = this_scale[..., None] * l + this_min[..., None] - x
            err = seq_sum(w * (diff * diff))
            take = (det > 0) & (err < best) & ~flat
            q = np.where(take[..., None], l, q)
            best = np.where(take, err, best)
            scale = np.where(take, this_scale, scale)
            mn = np.where(take, this_min, mn)
        q = np.where(flat[..., None], F(0), q)
        scale = np.where(flat, F(0), scale)
    return q, scale, -mn


def quantize_q4_k(x):
    """ggml's quantize_row_q4_K_ref: f32 [n, 256] -> uint8 [n, 144]"""
    x = x.astype(F).reshape(-1, 8, 32)
    rms = np.sqrt(seq_sum(x * x) / F(32))
    q, scales, mins = q4_k_fit(x, rms[..., None] + np.abs(x))
    max_scale = np.maximum(scales.max(axis=-1), F(0))
    max_min = np.maximum(mins.max(axis=-1), F(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F(63) / max_scale, F(0))
        inv_min = np.where(max_min > 0, F(63) / max_min, F(0))
    ls = np.minimum(np.rint(inv_scale[:, None] * scales).astype(np.int64) & 255, 63)
    lm = np.minimum(np.rint(inv_min[:, None] * mins).astype(np.int64) & 255, 63)
    sc = np.zeros((len(x), 12), np.int64)
    sc[:, 0:4], sc[:, 4:8] = ls[:, :4], lm[:, :4]
    sc[:, 8:12] = (ls[:, 4:] & 15) | (lm[:, 4:] & 15) << 4
    sc[:, 0:4] |= ls[:, 4:] >> 4 << 6
    sc[:, 4:8] |= lm[:, 4:] >> 4 << 6
    d, dmin = (max_scale / F(63)).astype(np.float16), (max_min / F(63)).astype(np.float16)
    ds = d.astype(F)[:, None] * ls.astype(F)
    ms = dmin.astype(F)[:, None] * lm.astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        again = np.clip(np.rint((x + ms[..., None]) / ds[..., None]), 0, 15)
    q = np.where((ds != 0)[..., None], again, q).astype(np.uint8).reshape(-1, 4, 2, 32)
    out = np.zeros((len(x), 144), np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = sc
    out[:, 16:] = (q[:, :, 0] | q[:, :, 1] << 4).reshape(-1, 128)
    return out


def q6_k_codes(x, iscale):
    """codes -32..31 of sub-blocks [..., 16] for reciprocal scales iscale [...], and make_qx_quants' sums under
    weights x^2: (codes, sum w x l, sum w l^2)"""
    l = np.clip(np.rint(iscale[..., None] * x), -32, 31).astype(F)
    w = x * x
    return l, seq_sum(w * x * l), seq_sum(w * l * l)


def q6_k_fit(x):
    """make_qx_quants(16, 32, x, L, rmse_type 1, no weights) over [..., 16]: (codes + 32, scale)"""
    amax = np.abs(x).max(axis=-1)
    mx = np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], -1)[..., 0]   # the first of largest |x|
    zero = amax < F(1e-15)
    mx = np.where(zero, F(1), mx)
    with np.errstate(divide="ignore", invalid="ignore"):
        l, sumlx, suml2 = q6_k_codes(x, F(-32) / mx)
        scale = np.where(suml2 != 0, sumlx / suml2, F(0))
        best = scale * sumlx
        for step in [s for s in range(-9, 10) if s]:
            t, sumlx, suml2 = q6_k_codes(x, -(F(32) + F(0.1) * F(step)) / mx)
            take = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            l = np.where(take[..., None], t, l)
            scale = np.where(take, sumlx / suml2, scale)
            best = np.where(take, scale * sumlx, best)
    return np.where(zero[..., None], F(0), l + F(32)), np.where(zero, F(0), scale)


def quantize_q6_k(x):
    """ggml's quantize_row_q6_K_ref: f32 [n, 256] -> uint8 [n, 210]"""
    x = x.astype(F).reshape(-1, 16, 16)
    q, scales = q6_k_fit(x)
    pick = np.abs(scales).argmax(axis=-1)[:, None]   # the first of largest |scale|
    max_scale = np.take_along_axis(scales, pick, -1)[:, 0]
    zero = np.abs(max_scale) < F(1e-15)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = F(-128) / np.where(zero, F(1), max_scale)
        d = (F(1) / iscale).astype(np.float16)
        sc = np.minimum(np.rint(iscale[:, None] * scales), 127).astype(np.int8)
        ds = d.astype(F)[:, None] * sc.astype(F)
        again = np.clip(np.rint(x / ds[..., None]), -32, 31) + 32
    # value e at [half e / 128, quarter e / 32 % 4, e % 32]: the low 4 bits of quarters 0, 1 in ql's low nibbles,
    # of 2, 3 in the high ones; the top 2 bits of quarter t at bits 2t of qh
    q = np.where((ds != 0)[..., None], again, q).astype(np.uint8).reshape(-1, 2, 4, 32)
    out = np.zeros((len(x), 210), np.uint8)
    out[:, :128] = (q[:, :, 0:2] & 15 | (q[:, :, 2:4] & 15) << 4).reshape(-1, 128)
    top = q >> 4
    out[:, 128:192] = (top[:, :, 0] | top[:, :, 1] << 2 | top[:, :, 2] << 4 | top[:, :, 3] << 6).reshape(-1, 64)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d.view(np.uint8).reshape(-1, 2)
    out[zero] = 0
    return out
