/* model_host.h: the host side of a model (model.c / model.cu, after runtime/model_api.h and runtime/kernels.h):
 * its buffers on the GPU (CUDA) or in host memory (C), the launch check, the CPU's threads. Each memory
 * function returns NULL or what failed. */
#ifndef LLMCC_MODEL_HOST_H
#define LLMCC_MODEL_HOST_H
#include "kernels.h"
#ifdef __CUDACC__
#define MEM_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) return cudaGetErrorString(e_); } while (0)
#ifndef LLMCC_ARCH
#define LLMCC_ARCH "sm_90"     /* the Makefile's ARCH: what the kernels were compiled for */
#endif
/* LLMCC_CUDA_CHECK=1 (read by mem_device): after every launch, wait for the kernel and name it and its graph op
 * if it or its launch failed (slow: a synchronisation per kernel), instead of a late error at the next copy */
static int launch_checks;
static inline void launch_check(const char *kernel, const char *op, int layer) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return;
    if (layer >= 0) fprintf(stderr, "llmcc: CUDA error in %s (model.layers.%d.%s): %s\n", kernel, layer, op,
                            cudaGetErrorString(e));
    else fprintf(stderr, "llmcc: CUDA error in %s (%s): %s\n", kernel, op, cudaGetErrorString(e));
    exit(1);
}
#define LAUNCH_CHECK(kernel, op, layer) do { if (launch_checks) launch_check(kernel, op, layer); } while (0)
/* "CUDA X.Y" of a cudaDriverGetVersion / CUDART_VERSION number */
#define CUDA_VER(v) (v) / 1000, (v) % 1000 / 10
/* The GPU, its driver and the runtime in one line (model_threads' description: --info, --stats) */
static inline void gpu_describe(char *desc, size_t size) {
    int drv = 0, dev = 0;
    cudaDeviceProp p;
    cudaDriverGetVersion(&drv);
    cudaFree(0);   /* the context made now (hundreds of ms), not inside --stats' time to copy the weights */
    cudaGetLastError();
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        char d[40] = "no NVIDIA driver";
        if (drv) snprintf(d, sizeof d, "driver CUDA %d.%d", CUDA_VER(drv));
        snprintf(desc, size, "no CUDA GPU (%s; runtime CUDA %d.%d, kernels for %s)", d, CUDA_VER(CUDART_VERSION),
                 LLMCC_ARCH);
        return;
    }
    snprintf(desc, size, "%s (compute capability %d.%d, %d SMs, %.1f GiB), driver CUDA %d.%d, runtime CUDA %d.%d, "
             "kernels for %s", p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0,
             CUDA_VER(drv), CUDA_VER(CUDART_VERSION), LLMCC_ARCH);
}
static inline const char *mem_device(void) {
    static char why[640];
    const char *check = getenv("LLMCC_CUDA_CHECK");
    launch_checks = check && *check && strcmp(check, "0");
    /* the runtime is linked in (static cudart); the driver must be at least as new (CUDA 13: R580 or later) */
    int drv = 0;
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0 && drv < CUDART_VERSION) {
        snprintf(why, sizeof why, "the NVIDIA driver supports CUDA %d.%d, this executable was built with CUDA %d.%d: "
                 "update the driver", CUDA_VER(drv), CUDA_VER(CUDART_VERSION));
        return why;
    }
    int ndev = 0, dev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || !ndev) {
        snprintf(why, sizeof why, "no CUDA GPU is available (%s): this executable is built for NVIDIA GPUs (a driver "
                 "for CUDA %d.%d or later); llmcc build --target cpu builds one for the CPU",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no devices", CUDA_VER(CUDART_VERSION));
        return why;
    }
    /* sm_NN code runs on compute capability N.N and later (newer majors through the PTX embedded with it) */
    cudaDeviceProp p;
    int need = atoi(LLMCC_ARCH + 3);
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess &&
        p.major * 10 + p.minor < need) {
        snprintf(why, sizeof why, "the GPU (%.200s) has compute capability %d.%d and this executable's kernels are "
                 "for %s: build it with llmcc build --arch sm_%d%d (sm_80 or later: the kernels use bf16 mma and "
                 "cp.async)", p.name, p.major, p.minor, LLMCC_ARCH, p.major, p.minor);
        return why;
    }
    return NULL;
}
/* bytes of zeros */
static inline const char *mem_zalloc(void *p, size_t bytes) {
    MEM_CK(cudaMalloc((void **)p, bytes ? bytes : 1));
    MEM_CK(cudaMemset(*(void **)p, 0, bytes));
    return NULL;
}
static inline const char *mem_const(const float **p, const float *host, size_t bytes) {
    MEM_CK(cudaMalloc((void **)p, bytes));
    MEM_CK(cudaMemcpy((void *)*p, host, bytes, cudaMemcpyHostToDevice));
    return NULL;
}
/* stage.h's copy and wait on CUDA: buffer k's copies on stream k */
static inline int stage_copy_cuda(void *ctx, int k, void *dst, const void *from, size_t len) {
    return cudaMemcpyAsync(dst, from, len, cudaMemcpyHostToDevice, ((cudaStream_t *)ctx)[k]) != cudaSuccess;
}
static inline int stage_wait_cuda(void *ctx, int k) {
    return cudaStreamSynchronize(((cudaStream_t *)ctx)[k]) != cudaSuccess;
}
#define STAGE_BYTES ((size_t)32 << 20)   /* each staging buffer: large enough that a copy's fixed cost is small */
#define STAGE_FILLERS 8                  /* threads filling a buffer (fewer on a machine with fewer CPUs) */
/* bytes from the host to the device through stage.h's two pinned buffers; one plain (pageable) copy where pinned
 * memory or a stream cannot be had */
static inline const char *mem_upload(uint8_t *dst, const uint8_t *src, size_t bytes) {
    cudaStream_t streams[2] = { NULL, NULL };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int fillers = cpus < 1 ? 1 : cpus < STAGE_FILLERS ? (int)cpus : STAGE_FILLERS;
    Stager s = { { NULL, NULL }, STAGE_BYTES, streams, stage_copy_cuda, stage_wait_cuda, fillers };
    int staged = bytes > STAGE_BYTES;
    for (int k = 0; k < 2 && staged; k++)
        staged = cudaHostAlloc(&s.buf[k], STAGE_BYTES, cudaHostAllocDefault) == cudaSuccess &&
                 cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking) == cudaSuccess;
    const char *why = NULL;
    if (staged && stage_upload(&s, dst, src, bytes)) {
        cudaError_t e = cudaGetLastError();
        why = e != cudaSuccess ? cudaGetErrorString(e) : "the weights' copy to the GPU failed";
    } else if (!staged) {
        cudaGetLastError();   /* a pinned allocation that failed is not the upload's error */
        cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) why = cudaGetErrorString(e);
    }
    for (int k = 0; k < 2; k++) {
        if (s.buf[k]) cudaFreeHost(s.buf[k]);
        if (streams[k]) cudaStreamDestroy(streams[k]);
    }
    return why;
}
/* the payload's tensors in one allocation *base, laid out as in the payload (from its first tensor on: the
 * payload's alignment, PAYLOAD_ALIGN, keeps each at a 256-byte boundary), uploaded in one piece */
static inline const char *mem_weights(const void **w, void **base, size_t *bytes, const PayloadTensor *t,
                                      const uint8_t *data, int n) {
    uint64_t lo = n ? t[0].offset : 0, hi = lo;
    for (int i = 0; i < n; i++) {
        if (t[i].offset < lo) lo = t[i].offset;
        if (t[i].offset + t[i].nbytes > hi) hi = t[i].offset + t[i].nbytes;
    }
    *bytes = (size_t)(hi - lo);
    MEM_CK(cudaMalloc(base, *bytes + 256));   /* + 256: vector loads past the last tensor's end stay inside */
    for (int i = 0; i < n; i++) w[i] = (uint8_t *)*base + (t[i].offset - lo);
    return mem_upload((uint8_t *)*base, data + lo, *bytes);
}
static inline void mem_put(void *dev, const void *host, size_t bytes) {
    cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
}
/* a result back to the host; a CUDA error here (a kernel's, reported late) ends the program. A launch that never
 * started (a bad configuration, too much shared memory) leaves no error for the copy to report: asked first */
static inline void mem_get(void *host, const void *dev, size_t bytes, const char *who) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) { fprintf(stderr, "%s: CUDA error: %s\n", who, cudaGetErrorString(e)); exit(1); }
}
static inline void mem_free(const void *p) { cudaFree((void *)p); }
static inline void mem_free_const(const float *p) { cudaFree((void *)p); }
/* The decode step's CUDA Graph (emit.c's decode_step): step(m)'s launches on stream s captured into *exec at the
 * first call, then replayed, one launch for all of them. A failure ends the program, naming it. */
static inline void graph_replay(void **exec, int *kernels, void (*step)(Model *), Model *m, void *s) {
    cudaError_t e = cudaSuccess;
    if (!*exec) {
        cudaGraph_t g = NULL;
        size_t nodes = 0;
        e = cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess) {
            step(m);
            cudaError_t launch = cudaPeekAtLastError();   /* a launch that failed: the cause, not "invalidated" */
            e = cudaStreamEndCapture((cudaStream_t)s, &g);
            if (launch != cudaSuccess) e = launch;
        }
        if (e == cudaSuccess) e = cudaGraphGetNodes(g, NULL, &nodes);
        *kernels = (int)nodes;
        if (e == cudaSuccess) e = cudaGraphInstantiate((cudaGraphExec_t *)exec, g, 0);
        if (g) cudaGraphDestroy(g);
    }
    if (e == cudaSuccess) e = cudaGraphLaunch((cudaGraphExec_t)*exec, (cudaStream_t)s);
    if (e != cudaSuccess) {
        fprintf(stderr, "llmcc: CUDA error in the decode step's graph: %s (--no-graph launches its kernels one by "
                "one)\n", cudaGetErrorString(e));
        exit(1);
    }
}
static inline void graph_free(void *exec) { if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec); }
/* model_penalize: a thread per id (the ids are distinct) */
static __global__ void k_penalize(float *logits, const int32_t *ids, const float *sub, int n, float rep) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n) logits[ids[j]] = penalize_logit(logits[ids[j]], sub[j], rep);
}
static inline void penalize_launch(float *logits, const int32_t *ids, const float *sub, int n, float rep, void *s) {
    if (n > 0) k_penalize<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)s>>>(logits, ids, sub, n, rep);
}
/* whether the decode step runs as a graph by default: not under LLMCC_CUDA_CHECK (a check synchronises after
 * each launch, which a capture cannot hold) */
static inline int graph_default(void) { return !launch_checks; }
/* the stream a model's kernels run on (capturable, unlike the legacy default stream; it synchronises with it,
 * so mem_put / mem_get keep their order with the kernels) */
static inline const char *mem_stream(void **s) {
    MEM_CK(cudaStreamCreate((cudaStream_t *)s));
    return NULL;
}
static inline void mem_stream_free(void *s) { if (s) cudaStreamDestroy((cudaStream_t)s); }
#undef MEM_CK
#else
static inline const char *mem_device(void) { return NULL; }
static inline const char *mem_zalloc(void *p, size_t bytes) {
    return (*(void **)p = calloc(1, bytes)) ? NULL : "out of memory";
}
static inline const char *mem_const(const float **p, const float *host, size_t bytes) {
    (void)bytes;
    *p = host;
    return NULL;
}
/* the payload's tensors where they are (mapped or read by runtime/payload_rt.c) */
static inline const char *mem_weights(const void **w, void **base, size_t *bytes, const PayloadTensor *t,
                                      const uint8_t *data, int n) {
    *base = NULL;
    *bytes = 0;
    for (int i = 0; i < n; i++) { w[i] = data + t[i].offset; *bytes += t[i].nbytes; }
    return NULL;
}
static inline void mem_put(void *dev, const void *host, size_t bytes) { memcpy(dev, host, bytes); }
static inline void mem_get(void *host, const void *dev, size_t bytes, const char *who) {
    (void)who;
    memcpy(host, dev, bytes);
}
static inline void mem_free(const void *p) { free((void *)p); }
static inline void mem_free_const(const float *p) { (void)p; }
/* cuda-emu: every launch counted (emit.c puts LAUNCH_CHECK after each, as for CUDA) */
static long launch_count __attribute__((unused));
#define LAUNCH_CHECK(kernel, op, layer) (void)(launch_count++)
/* cuda-emu's stand-in for the decode step's CUDA Graph: the launches a capture holds, run as captured (the
 * same arguments every step, the position from decode_pos); *exec marks the slot's step captured, *kernels
 * gets the launches of a capture */
static inline void graph_replay(void **exec, int *kernels, void (*step)(Model *), Model *m, void *s) {
    (void)s;
    long before = launch_count;
    step(m);
    if (!*exec) *kernels = (int)(launch_count - before);
    *exec = (void *)exec;
}
static inline void graph_free(void *exec) { (void)exec; }
static inline int graph_default(void) { return 1; }
static inline void penalize_launch(float *logits, const int32_t *ids, const float *sub, int n, float rep, void *s) {
    (void)s;
    for (int j = 0; j < n; j++) logits[ids[j]] = penalize_logit(logits[ids[j]], sub[j], rep);
}
static inline const char *mem_stream(void **s) { *s = NULL; return NULL; }
static inline void mem_stream_free(void *s) { (void)s; }

/* ---- the CPU's threads (model_threads, runtime/model_api.h) ---- */
#include <omp.h>
#include <sched.h>
/* CPU c's core as "package:core" from sysfs, or "" where it cannot be read */
static inline void cpu_core_of(int c, char *out, size_t size) {
    char path[128], pkg[32] = "", core[32] = "";
    const char *names[2] = {"physical_package_id", "core_id"};
    char *dst[2] = {pkg, core};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", c, names[i]);
        FILE *f = fopen(path, "r");
        if (!f) { out[0] = 0; return; }
        if (!fgets(dst[i], 32, f)) dst[i][0] = 0;
        fclose(f);
        dst[i][strcspn(dst[i], "\n")] = 0;
    }
    snprintf(out, size, "%s:%s", pkg, core);
}
/* n threads (0: one per physical core this process may run on), each pinned to the first CPU of a distinct
 * core unless OMP_PROC_BIND or OMP_PLACES say otherwise, no nested teams (a kernel's `omp for` shares the
 * caller's team); desc gets what runs. Returns the thread count. */
static inline int cpu_threads(int n, char *desc, size_t size) {
    int ncores = 0;
#ifdef CPU_SETSIZE   /* sched.h's affinity calls (_GNU_SOURCE, as the project's Makefile builds) */
    int cores[1024];
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
        char seen[1024][24];
        for (int c = 0; c < CPU_SETSIZE && ncores < 1024; c++) {
            if (!CPU_ISSET(c, &allowed)) continue;
            char id[24];
            cpu_core_of(c, id, sizeof id);
            bool dup = false;
            for (int j = 0; j < ncores && id[0]; j++) dup |= !strcmp(seen[j], id);
            if (dup) continue;   /* an SMT sibling of a core already counted */
            memcpy(seen[ncores], id, sizeof id);
            cores[ncores++] = c;
        }
    }
    bool pin = !getenv("OMP_PROC_BIND") && !getenv("OMP_PLACES") && ncores && (n <= 0 || n <= ncores);
#else
    bool pin = false;
#endif
    if (!ncores) ncores = omp_get_num_procs();
    if (n <= 0) n = ncores;
    omp_set_max_active_levels(1);
    omp_set_num_threads(n);
#ifdef CPU_SETSIZE
    if (pin) {
        #pragma omp parallel num_threads(n)
        {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cores[omp_get_thread_num()], &one);
            sched_setaffinity(0, sizeof one, &one);   /* 0: the calling thread */
        }
    }
#endif
    const char *isa = "the baseline (no vector extension beyond the architecture's)";
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    isa = __builtin_cpu_supports("x86-64-v4") ? "x86-64-v4 (AVX-512)"
          : __builtin_cpu_supports("x86-64-v3") ? "x86-64-v3 (AVX2 + FMA)" : "x86-64 (SSE2)";
#elif defined(__aarch64__)
    isa = "aarch64 (NEON)";
#endif
    snprintf(desc, size, "%d thread%s (%d physical core%s%s), kernels for %s", n, n == 1 ? "" : "s", ncores,
             ncores == 1 ? "" : "s", pin ? ", one pinned to each" : "", isa);
    return n;
}
#endif
#endif
