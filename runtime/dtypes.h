/* dtypes.h: the one table of element types, read by the compiler (compiler/ir.h's DType, the loaders, the
 * packer, the emitters) and by the runtime (payload.h's codes): a new block type is a row here and its kernels
 * (docs/adding.md).
 *
 * A row: the type's id (DT_<id> in the compiler, PDT_<id> in a payload; upper case as ggml spells it, "Q8_0"),
 * its name as llmcc prints and takes it (--quant, --dtype, --ir), bytes per block (per element for the
 * scalar types), elements per block (1 for the scalar types), and the GGUF (ggml) type id of a GGUF file's
 * tensors of this type (-1: never a weight llmcc takes from a GGUF file).
 *
 * The row's position is its code in a payload: rows are only ever appended, so that a payload keeps its meaning
 * (Q5_0 and Q5_1 came after the K-quants). The block types are GGUF's (llama.cpp's ggml): each block its f16
 * scale (and minimum) and 8-, 5- or 4-bit integers (blocks of 32), or for the K-quants super-blocks of 256 values
 * with 6- or 8-bit scales per sub-block. */
#ifndef LLMCC_DTYPES_H
#define LLMCC_DTYPES_H

/*                  id    name    bytes block  ggml */
#define SCALAR_DTYPES(X) \
    X(F32, "f32", 4, 1, 0) X(F16, "f16", 2, 1, 1) X(BF16, "bf16", 2, 1, 30) X(I32, "i32", 4, 1, -1)
#define BLOCK_DTYPES(X) \
    X(Q8_0, "q8_0", 34, 32, 8) X(Q4_0, "q4_0", 18, 32, 2) X(Q4_1, "q4_1", 20, 32, 3) \
    X(Q4_K, "q4_k", 144, 256, 12) X(Q5_K, "q5_k", 176, 256, 13) X(Q6_K, "q6_k", 210, 256, 14) \
    X(Q5_0, "q5_0", 22, 32, 6) X(Q5_1, "q5_1", 24, 32, 7)
/* every type, in payload-code order: the scalar types first, then the block types */
#define ALL_DTYPES(X) SCALAR_DTYPES(X) BLOCK_DTYPES(X)

/* the columns one at a time, for tables: {ALL_DTYPES(DTYPE_BYTES)} */
#define DTYPE_NAME(id, name, bytes, block, ggml) name,
#define DTYPE_BYTES(id, name, bytes, block, ggml) bytes,
#define DTYPE_BLOCK(id, name, bytes, block, ggml) block,
#endif
