/* bench_cublas.cu: the cuBLAS side of scripts/bench_ops.sh. Times
 * cublasGemmEx for y[n, M] = x[n, K] W[M, K]^T with bf16 x and W, f32 y and
 * f32 accumulation (CUBLAS_COMPUTE_32F). llmcc's gemm_tc reads x as f32 and
 * rounds it to bf16 while staging, so it moves twice cuBLAS's x bytes: the
 * >= 80% target is against the faster contract.
 * cuBLAS is linked only into this program: llmcc itself never uses it.
 *
 *   nvcc -arch=sm_90 -O2 -o bench_cublas scripts/bench_cublas.cu -lcublas
 *   ./bench_cublas ITERS NAME:n:M:K ...
 *
 * Per shape: 5 warm-up calls, then ITERS calls each timed with CUDA events;
 * prints the median as
 *   bench: name=cublas:NAME n=.. M=.. K=.. ms=.. tflops=.. check=ok|BAD
 * check compares 8 outputs with a double-precision dot product on the host
 * (the inputs are a hash of their index, the same on both sides), so a
 * transposed operand or a wrong leading dimension cannot go unnoticed.
 * Exit status 1 if any call fails or any check is BAD. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "bench_cublas: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "bench_cublas: %s: status %d\n", #x, (int)s_); exit(1); } } while (0)

/* values in [-1, 1) rounded to bf16, a function of (tensor, index) only */
__host__ __device__ static inline uint16_t val_bits(uint32_t tensor, uint64_t i) {
    uint64_t z = i * 0x9e3779b97f4a7c15ULL + tensor * 0xbf58476d1ce4e5b9ULL + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    float f = (float)((double)(z >> 40) / (double)(1ULL << 23)) - 1.0f;   /* 24-bit uniform in [-1, 1) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static double bits_to_double(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
__global__ void fill(uint16_t *p, uint64_t n, uint32_t tensor) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) p[i] = val_bits(tensor, i);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s ITERS NAME:n:M:K ...\n", argv[0]); return 2; }
    int iters = atoi(argv[1]);
    if (iters < 1 || iters > 100000) { fprintf(stderr, "bench_cublas: ITERS must be in 1..100000\n"); return 2; }
    cublasHandle_t h;
    CB(cublasCreate(&h));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (size_t)iters);
    int rc = 0;
    for (int a = 2; a < argc; a++) {
        char name[64];
        long long n, M, K;
        if (sscanf(argv[a], "%63[^:]:%lld:%lld:%lld", name, &n, &M, &K) != 4 || n < 1 || M < 1 || K < 1) {
            fprintf(stderr, "bench_cublas: '%s' is not NAME:n:M:K\n", argv[a]);
            return 2;
        }
        uint16_t *x, *w;
        float *y;
        CK(cudaMalloc(&x, (size_t)(n * K) * 2));
        CK(cudaMalloc(&w, (size_t)(M * K) * 2));
        CK(cudaMalloc(&y, (size_t)(n * M) * 4));
        fill<<<1024, 256>>>(x, (uint64_t)(n * K), 1);
        fill<<<1024, 256>>>(w, (uint64_t)(M * K), 2);
        CK(cudaGetLastError());
        const float alpha = 1.0f, beta = 0.0f;
        /* column-major: y^T [M, n] = W^T^T [M, K] x^T [K, n]; W row-major [M, K] is column-major [K, M], ld K */
#define GEMM() CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)n, (int)K, &alpha, w, CUDA_R_16BF, (int)K, x, CUDA_R_16BF, (int)K, \
                               &beta, y, CUDA_R_32F, (int)M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT))
        for (int i = 0; i < 5; i++) GEMM();
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < iters; i++) {
            CK(cudaEventRecord(e0));
            GEMM();
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms[i], e0, e1));
        }
#undef GEMM
        qsort(ms, (size_t)iters, sizeof(float), cmp_float);
        double med = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
        /* the check: 8 outputs spread over y against a double dot product. Tensor cores add
         * exact bf16 products into f32 in steps of 16 or more of K, so the f32 result is within
         * (K / 16) 2^-24 sum|terms| of it: 7e-5 of sum|terms| at K = 18944, under the 1e-4 used.
         * A wrong operand layout sums unrelated products, off by about sum|terms| / sqrt(K):
         * 7e-3 of it at that K, far outside. */
        bool ok = true;
        for (int s = 0; s < 8; s++) {
            long long r = (s * 7919LL) % n, c = (s * 104729LL + M / 2) % M;
            float got;
            CK(cudaMemcpy(&got, y + r * M + c, 4, cudaMemcpyDeviceToHost));
            double want = 0, mag = 0;
            for (long long k = 0; k < K; k++) {
                double t = bits_to_double(val_bits(1, (uint64_t)(r * K + k))) * bits_to_double(val_bits(2, (uint64_t)(c * K + k)));
                want += t;
                mag += fabs(t);
            }
            if (!(fabs(got - want) <= 1e-4 * mag)) {
                ok = false;
                fprintf(stderr, "bench_cublas: %s: y[%lld, %lld] = %.9g, expected %.9g\n", name, r, c, (double)got, want);
            }
        }
        if (!ok) rc = 1;
        printf("bench: name=cublas:%s n=%lld M=%lld K=%lld ms=%.6g tflops=%.6g check=%s\n", name, n, M, K, med, 2.0 * n * M * K / (med * 1e-3) * 1e-12,
               ok ? "ok" : "BAD");
        fflush(stdout);
        CK(cudaFree(x));
        CK(cudaFree(w));
        CK(cudaFree(y));
    }
    free(ms);
    cublasDestroy(h);
    return rc;
}
