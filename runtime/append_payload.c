/* append_payload.c: host tool run by the emitted Makefile.
 *   append_payload [--move] ELF PAYLOAD OUT
 * writes OUT = ELF, zero padding to a multiple of PAYLOAD_ALIGN, PAYLOAD,
 * PayloadFooter (with the payload_sum checksum of the payload), via OUT.tmp.
 * --move makes PAYLOAD itself into OUT instead: a hole is inserted at its
 * start for the ELF (FALLOC_FL_INSERT_RANGE, ext4 / xfs), so a 15 GB model
 * is not written a second time and the disk holds it once; PAYLOAD is gone
 * afterwards. Where the file system cannot, it copies as without --move.
 * --compress LEVEL writes the compressed payload of payload.h instead (zstd
 * at LEVEL, frames compressed on every core; host tool only, -lzstd). */
#include "payload.h"
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <zstd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_tmp;
static FILE *g_out;

static _Noreturn void die(const char *fmt, ...) {
    int e = errno;
    if (g_out) fclose(g_out);
    if (g_tmp) unlink(g_tmp);
    fputs("append_payload: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (e) fprintf(stderr, ": %s", strerror(e));
    fputc('\n', stderr);
    exit(1);
}

static unsigned char buf[4 << 20];

/* Writes n bytes to g_out; hashes them into *sum when sum. */
static void put(const void *p, size_t n, PayloadSum *sum) {
    errno = 0;
    if (n && fwrite(p, 1, n, g_out) != n) die("cannot write %s", g_tmp);
    if (sum) payload_sum_update(sum, p, n);
}

/* Copies all of in to g_out; returns the byte count; hashes into *h when h. */
static uint64_t copy(FILE *in, const char *name, PayloadSum *h) {
    uint64_t total = 0;
    for (;;) {
        errno = 0;
        size_t n = fread(buf, 1, sizeof buf, in);
        if (n == 0) {
            if (ferror(in)) die("cannot read %s", name);
            break;
        }
        put(buf, n, h);
        total += n;
    }
    return total;
}

/* The footer of the size bytes of payload at off, sum their checksum */
static PayloadFooter footer(uint64_t off, uint64_t size, const PayloadSum *sum) {
    PayloadFooter f = { .version = PAYLOAD_VERSION, .payload_offset = off, .payload_size = size,
                        .checksum = payload_sum_final(sum) };
    memcpy(f.magic, FOOTER_MAGIC, 8);
    return f;
}

static void read_header(int fd, const char *pay, PayloadHeader *h) {
    struct stat st;
    errno = 0;
    if (fstat(fd, &st) != 0) die("cannot stat %s", pay);
    errno = 0;
    if (pread(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h || memcmp(h->magic, PAYLOAD_MAGIC, 8) != 0 ||
        h->version != PAYLOAD_VERSION)
        die("%s is not an llmcc payload (version %u)", pay, PAYLOAD_VERSION);
    if (h->total_size != (uint64_t)st.st_size)
        die("%s is %llu bytes, its header says %llu (truncated?)", pay,
            (unsigned long long)st.st_size, (unsigned long long)h->total_size);
}

/* The payload as an ELF section of its own, PAYLOAD_SECTION: the payload at off and the footer right after it,
 * so that strip and objcopy, which keep an ELF file's sections and drop what follows them, keep the weights. A
 * new section name table and section header table go after the footer (end: the file's size), the ELF header is
 * pointed at them, and the footer is written again at the file's end, where the runtime looks first. */
static void add_section(int fd, const char *name, uint64_t end, const PayloadFooter *f) {
    Elf64_Ehdr eh;
    errno = 0;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) die("cannot read %s", name);
    errno = 0;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shnum >= SHN_LORESERVE - 1 ||
        eh.e_shstrndx >= eh.e_shnum)
        die("%s is not a 64-bit ELF program with section headers", name);
    size_t n = eh.e_shnum;
    Elf64_Shdr *sh = calloc(n + 1, sizeof *sh);
    if (!sh) die("out of memory");
    if (pread(fd, sh, n * sizeof *sh, (off_t)eh.e_shoff) != (ssize_t)(n * sizeof *sh)) die("cannot read %s", name);
    Elf64_Shdr *strtab = &sh[eh.e_shstrndx];
    const size_t old = strtab->sh_size, add = sizeof PAYLOAD_SECTION;
    char *names = malloc(old + add);
    if (!names) die("out of memory");
    if (pread(fd, names, old, (off_t)strtab->sh_offset) != (ssize_t)old) die("cannot read %s", name);
    memcpy(names + old, PAYLOAD_SECTION, add);
    uint64_t names_at = end, table_at = (end + old + add + 7) / 8 * 8;
    sh[n] = (Elf64_Shdr){ .sh_name = (Elf64_Word)old, .sh_type = SHT_PROGBITS, .sh_offset = f->payload_offset,
                          .sh_size = f->payload_size + sizeof *f, .sh_addralign = PAYLOAD_ALIGN };
    strtab->sh_offset = names_at;
    strtab->sh_size = old + add;
    eh.e_shoff = table_at;
    eh.e_shnum = (Elf64_Half)(n + 1);
    static const char zeros[8];
    errno = 0;
    if (pwrite(fd, names, old + add, (off_t)names_at) != (ssize_t)(old + add) ||
        pwrite(fd, zeros, table_at - (names_at + old + add), (off_t)(names_at + old + add)) < 0 ||
        pwrite(fd, sh, (n + 1) * sizeof *sh, (off_t)table_at) != (ssize_t)((n + 1) * sizeof *sh) ||
        pwrite(fd, f, sizeof *f, (off_t)(table_at + (n + 1) * sizeof *sh)) != (ssize_t)sizeof *f ||
        pwrite(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
        die("cannot write %s", name);
    free(names);
    free(sh);
}

/* --move; false (nothing changed) when the file system cannot insert a range. */
static bool move_into(const char *elf, const char *pay, const char *out) {
    errno = 0;
    int fd = open(pay, O_RDWR | O_CLOEXEC);
    if (fd < 0) die("cannot open %s (with --move an earlier build made it into %s: run llmcc build again)", pay, out);
    PayloadHeader h;
    read_header(fd, pay, &h);
    errno = 0;
    FILE *fe = fopen(elf, "rb");
    if (!fe) die("cannot open %s", elf);
    size_t elf_size = 0;
    for (size_t n; (n = fread(buf + elf_size, 1, sizeof buf - elf_size, fe)) > 0;) elf_size += n;
    errno = 0;
    if (ferror(fe)) die("cannot read %s", elf);
    if (elf_size == sizeof buf) {
        errno = 0; die("%s is larger than %zu bytes: use append_payload without --move", elf, sizeof buf);
    }
    fclose(fe);
    uint64_t off = (elf_size + PAYLOAD_ALIGN - 1) / PAYLOAD_ALIGN * PAYLOAD_ALIGN;
    if (fallocate(fd, FALLOC_FL_INSERT_RANGE, 0, (off_t)off) != 0) {
        if (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS) { close(fd); return false; }
        die("cannot make room in %s", pay);
    }
    /* from here on PAYLOAD is no longer a payload: any failure removes it */
    g_tmp = pay;
    errno = 0;
    if (pwrite(fd, buf, elf_size, 0) != (ssize_t)elf_size) die("cannot write %s", pay);
    PayloadSum sum;
    payload_sum_init(&sum);
    for (uint64_t o = 0; o < h.total_size;) {
        size_t k = h.total_size - o < sizeof buf ? (size_t)(h.total_size - o) : sizeof buf;
        errno = 0;
        ssize_t r = pread(fd, buf, k, (off_t)(off + o));
        if (r <= 0) die("cannot read %s", pay);
        payload_sum_update(&sum, buf, (size_t)r);
        o += (uint64_t)r;
    }
    PayloadFooter f = footer(off, h.total_size, &sum);
    errno = 0;
    if (pwrite(fd, &f, sizeof f, (off_t)(off + h.total_size)) != (ssize_t)sizeof f) die("cannot write %s", pay);
    add_section(fd, pay, off + h.total_size + sizeof f, &f);
    if (fchmod(fd, 0755) != 0) die("cannot chmod %s", pay);
    if (close(fd) != 0) die("cannot write %s", pay);
    if (rename(pay, out) != 0) die("cannot rename %s to %s", pay, out);
    g_tmp = NULL;
    return true;
}

/* ---- --compress ---- */
#define ZFRAME_SIZE (4u << 20)
typedef struct {
    const uint8_t *raw;        /* the frame's raw bytes */
    size_t n;
    uint32_t planes;
    int level;
    uint8_t *plane_buf, *out;  /* ZFRAME_SIZE, ZSTD_compressBound(ZFRAME_SIZE) */
    ZSTD_CCtx *cc;
    size_t out_size;
    const char *err;
} ZJob;

static void *zjob_run(void *arg) {
    ZJob *j = arg;
    const uint8_t *src = j->raw;
    if (j->planes == 2) {
        size_t h = j->n / 2;
        for (size_t i = 0; i < h; i++) { j->plane_buf[i] = j->raw[2 * i]; j->plane_buf[h + i] = j->raw[2 * i + 1]; }
        src = j->plane_buf;
    }
    /* each frame carries zstd's content checksum: a damaged frame fails to decode at start */
    size_t r = ZSTD_CCtx_setParameter(j->cc, ZSTD_c_compressionLevel, j->level);
    if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(j->cc, ZSTD_c_checksumFlag, 1);
    if (!ZSTD_isError(r)) r = ZSTD_compress2(j->cc, j->out, ZSTD_compressBound(ZFRAME_SIZE), src, j->n);
    if (ZSTD_isError(r)) j->err = ZSTD_getErrorName(r);
    else j->out_size = r;
    return NULL;
}

/* Writes the compressed payload to g_out; returns its size. */
static uint64_t compress_payload(const char *pay, int level, PayloadSum *sum) {
    errno = 0;
    int fd = open(pay, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("cannot open %s", pay);
    PayloadHeader h;
    read_header(fd, pay, &h);
    const uint8_t *raw = mmap(NULL, (size_t)h.total_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (raw == MAP_FAILED) die("cannot map %s", pay);
    close(fd);
    if (h.table_off + (uint64_t)h.n_tensors * sizeof(PayloadTensor) > h.total_size) {
        errno = 0; die("%s: tensor table out of bounds", pay);
    }
    const PayloadTensor *tab = (const PayloadTensor *)(raw + h.table_off);
    uint32_t nf = (uint32_t)((h.total_size + ZFRAME_SIZE - 1) / ZFRAME_SIZE);
    ZFrame *frames = calloc(nf ? nf : 1, sizeof *frames);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
    ZJob *jobs = calloc((size_t)nt, sizeof *jobs);
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    if (!frames || !jobs || !th) die("out of memory");
    for (int t = 0; t < nt; t++) {
        jobs[t].plane_buf = malloc(ZFRAME_SIZE);
        jobs[t].out = malloc(ZSTD_compressBound(ZFRAME_SIZE));
        jobs[t].cc = ZSTD_createCCtx();
        if (!jobs[t].plane_buf || !jobs[t].out || !jobs[t].cc) die("out of memory");
    }
    ZPayloadHeader zh = { .version = PAYLOAD_VERSION, .n_frames = nf, .raw_size = h.total_size,
                          .frame_size = ZFRAME_SIZE };
    memcpy(zh.magic, ZPAYLOAD_MAGIC, 8);
    put(&zh, sizeof zh, sum);
    uint64_t off = sizeof zh;
    uint32_t ti = 0;   /* tensors are in offset order: a cursor finds the one a frame starts in */
    for (uint32_t f0 = 0; f0 < nf; f0 += (uint32_t)nt) {
        int k = nf - f0 < (uint32_t)nt ? (int)(nf - f0) : nt;
        for (int t = 0; t < k; t++) {
            uint64_t ro = (uint64_t)(f0 + t) * ZFRAME_SIZE;
            ZJob *j = &jobs[t];
            j->raw = raw + ro;
            j->n = h.total_size - ro < ZFRAME_SIZE ? (size_t)(h.total_size - ro) : ZFRAME_SIZE;
            j->level = level;
            j->err = NULL;
            while (ti < h.n_tensors && tab[ti].offset + tab[ti].nbytes <= ro) ti++;
            bool half = ti < h.n_tensors && tab[ti].offset <= ro &&
                        (tab[ti].dtype == PDT_BF16 || tab[ti].dtype == PDT_F16);
            j->planes = half && j->n % 2 == 0 ? 2 : 1;
            if (pthread_create(&th[t], NULL, zjob_run, j) != 0) { errno = 0; die("cannot start a thread"); }
        }
        for (int t = 0; t < k; t++) pthread_join(th[t], NULL);
        for (int t = 0; t < k; t++) {
            if (jobs[t].err) { errno = 0; die("zstd: %s", jobs[t].err); }
            frames[f0 + t] = (ZFrame){ off, jobs[t].out_size, jobs[t].planes, 0 };
            put(jobs[t].out, jobs[t].out_size, sum);
            off += jobs[t].out_size;
            /* these pages are done with: keep the tool's memory small on a 15 GB payload */
            madvise((void *)jobs[t].raw, jobs[t].n & ~(size_t)4095, MADV_DONTNEED);
        }
    }
    put(frames, (size_t)nf * sizeof *frames, sum);
    off += (uint64_t)nf * sizeof *frames;
    for (int t = 0; t < nt; t++) { free(jobs[t].plane_buf); free(jobs[t].out); ZSTD_freeCCtx(jobs[t].cc); }
    free(jobs); free(th); free(frames);
    munmap((void *)raw, (size_t)h.total_size);
    return off;
}

int main(int argc, char **argv) {
    bool move = argc == 5 && strcmp(argv[1], "--move") == 0;
    int level = 0;
    if (argc == 6 && strcmp(argv[1], "--compress") == 0) {
        char *end;
        level = (int)strtol(argv[2], &end, 10);
        if (*end || level < 1 || level > ZSTD_maxCLevel()) {
            fprintf(stderr, "append_payload: --compress %s: expects a zstd level 1..%d\n", argv[2], ZSTD_maxCLevel());
            return 1;
        }
        argv += 2;
    } else if (argc != 4 && !move) {
        fprintf(stderr, "usage: append_payload [--move | --compress LEVEL] ELF PAYLOAD OUT\n");
        return 1;
    }
    if (move) argv++;
    const char *elf = argv[1], *pay = argv[2], *out = argv[3];
    if (move && move_into(elf, pay, out)) return 0;
    char *tmp;
    if (asprintf(&tmp, "%s.tmp", out) < 0) die("out of memory");

    errno = 0;
    FILE *fe = fopen(elf, "rb");
    if (!fe) die("cannot open %s", elf);
    FILE *fp = fopen(pay, "rb");
    if (!fp) die("cannot open %s", pay);
    PayloadHeader h;
    read_header(fileno(fp), pay, &h);

    g_tmp = tmp;
    errno = 0;
    g_out = fopen(tmp, "wb");
    if (!g_out) die("cannot create %s", tmp);
    uint64_t off = copy(fe, elf, NULL);
    fclose(fe);
    uint64_t pad = (PAYLOAD_ALIGN - off % PAYLOAD_ALIGN) % PAYLOAD_ALIGN;
    memset(buf, 0, sizeof buf);
    put(buf, (size_t)pad, NULL);
    off += pad;
    PayloadSum sum;
    payload_sum_init(&sum);
    uint64_t size = level ? compress_payload(pay, level, &sum) : copy(fp, pay, &sum);
    fclose(fp);
    if (!level && size != h.total_size) { errno = 0; die("%s changed while being copied", pay); }

    PayloadFooter f = footer(off, size, &sum);
    errno = 0;
    if (fwrite(&f, sizeof f, 1, g_out) != 1 || fflush(g_out) != 0) die("cannot write %s", tmp);
    FILE *o = g_out;
    g_out = NULL;
    errno = 0;
    if (fclose(o) != 0) die("cannot write %s", tmp);
    errno = 0;
    int fd = open(tmp, O_RDWR | O_CLOEXEC);
    if (fd < 0) die("cannot open %s", tmp);
    add_section(fd, tmp, off + size + sizeof f, &f);
    errno = 0;
    if (close(fd) != 0) die("cannot write %s", tmp);
    if (chmod(tmp, 0755) != 0) die("cannot chmod %s", tmp);
    if (rename(tmp, out) != 0) die("cannot rename %s to %s", tmp, out);
    free(tmp);
    return 0;
}
