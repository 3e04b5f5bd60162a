/* pack.h: writes the payload (payload.bin) of an emitted project: header,
 * tensor table, tokenizer blob, then each tensor at a PAYLOAD_ALIGN offset.
 * Layout in runtime/payload.h. Streams: a tensor is copied in the kernel
 * (copy_file_range) when it keeps its dtype, or converted / generated in
 * small chunks, never gathered in memory, so the writer's memory does not
 * grow with the model. */
#ifndef LLMCC_PACK_H
#define LLMCC_PACK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a tensor's bytes come from. */
#define PACK_FILLS(X) X(PACK_DATA, "data") X(PACK_RANDOM, "random") X(PACK_RANDOM_NORM, "random-norm")
typedef enum {
#define X(e, s) e,
    PACK_FILLS(X)
#undef X
    PACK_FILL_COUNT
} PackFill;

typedef struct {
    const char *name;     /* < 112 bytes */
    uint32_t dtype;       /* PDT_*: as stored in the payload */
    int ndim;             /* 0..4 */
    int64_t shape[4];
    /* the source: nbytes bytes (data may be NULL when 0) of dtype, or of
     * src_dtype when the PackSource says convert; they must equal
     * prod(shape) * that size. Unused for generated tensors. */
    const void *data;
    size_t nbytes;
} PackTensor;

/* How a tensor gets its bytes, when not plainly from data. */
typedef struct {
    PackFill fill;
    /* PACK_RANDOM: uniform with standard deviation 0.02; PACK_RANDOM_NORM:
     * 1 + that (RMSNorm scales). A function of (seed, name, element index)
     * only, so every build with the same seed packs the same bytes. */
    uint64_t seed;
    /* data is src_dtype, converted to dtype (f32 / f16 / bf16; round to
     * nearest even) as it is written */
    bool convert;
    uint32_t src_dtype;
    /* optional: the file holding data's bytes at src_off (the mmapped
     * checkpoint): copied in the kernel, and the mapping's pages are dropped
     * after use so the writer's resident memory stays small */
    const char *src_path;
    uint64_t src_off;
    /* optional: the rows in another order. Row r of the tensor (shape[0] rows, each nbytes / shape[0] bytes of
     * the source) is the source's row row_from[r]: whole rows are copied (or converted), so it works for any row
     * layout, quantized blocks too. A GGUF file's llama q/k projections are stored with their rows permuted for
     * ggml's RoPE; llmcc's graph wants Hugging Face's order (compiler/gguf_model.c). */
    const int64_t *row_from;
} PackSource;

/* Writes out_path.tmp, then renames it to out_path. Dies with a user error
 * (and removes the tmp file) on any failure. A progress bar goes to stderr
 * when stderr is a terminal. src is NULL (every tensor from its data, as
 * is) or has n entries. */
void pack_payload_ex(const char *out_path, const PackTensor *tensors, const PackSource *src, int n,
                     const uint8_t *tok_blob, size_t tok_size);

/* Random blocks of GGUF's block types (runtime/kernels.h gives the layouts), for --random-weights and llmcc run:
 * pack_random_kquant_blocks: n values (whole super-blocks of 256) of PDT_Q4_K, PDT_Q5_K or PDT_Q6_K (every
 * integer and sub-block scale byte drawn from seed, the f16 super-block scales such that the values stay within
 * about +-bound); pack_random_q5_blocks: n values (whole blocks of 32) of PDT_Q5_0 or PDT_Q5_1, within +-bound
 * (no quantizer into them here: quant.h). */
void pack_random_kquant_blocks(uint32_t dt, uint64_t seed, float bound, size_t n, uint8_t *out);
void pack_random_q5_blocks(uint32_t dt, uint64_t seed, float bound, size_t n, uint8_t *out);

#endif
