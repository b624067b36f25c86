/* Raw AMX bf16 rate on the member pass's logits shape, for the bf16 verdict on CPUs with AMX:
 * Z (q x 16) = X (q x 768) W (768 x 16), rows in bf16, float32 sums, q rows in a block read
 * from L2 (two 16-row tiles of X share each tile of W).  A model's logits use C of the 16
 * columns, so the useful rate is C / 16 of it.  One thread; not part of the package.
 *
 *     gcc -O2 -mamx-tile -mamx-bf16 benchmarks/studies/amx_rate.c -o amx_rate && ./amx_rate 256
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv)
{
    /* Linux hands out the AMX tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA) */
    if (syscall(SYS_arch_prctl, 0x1023, 18)) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)");
        return 1;
    }
    const int K = 768, q = argc > 1 ? atoi(argv[1]) / 32 * 32 : 256, reps = 2000;
    uint16_t *X = aligned_alloc(64, sizeof(uint16_t) * (size_t)q * K);
    uint16_t *W = aligned_alloc(64, sizeof(uint16_t) * K * 16);
    float *Z = aligned_alloc(64, sizeof(float) * (size_t)q * 16);
    for (size_t i = 0; i < (size_t)q * K; i++) X[i] = 0x3f80;  /* 1.0 */
    for (int i = 0; i < K * 16; i++) W[i] = 0x3c00;            /* 2^-7 */
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int it = 0; it < reps; it++)
            for (int i = 0; i < q; i += 32) {
                _tile_zero(0);
                _tile_zero(1);
                for (int k = 0; k < K; k += 32) {
                    _tile_loadd(2, X + (size_t)i * K + k, K * 2);
                    _tile_loadd(3, X + (size_t)(i + 16) * K + k, K * 2);
                    _tile_loadd(4, W + (size_t)k * 16, 64);
                    _tile_dpbf16ps(0, 2, 4);
                    _tile_dpbf16ps(1, 3, 4);
                }
                _tile_stored(0, Z + (size_t)i * 16, 64);
                _tile_stored(1, Z + (size_t)(i + 16) * 16, 64);
            }
        const double t = now() - t0;
        if (t < best) best = t;
    }
    _tile_release();
    const double gf = 2.0 * reps * q * K * 16 / best / 1e9;
    printf("AMX bf16, %d rows x %d features (%.0f KB of rows) x 16 columns: %.0f GF/s; "
           "useful at C = 3: %.0f GF/s\n", q, K, q * K * 2 / 1024.0, gf, gf * 3 / 16);
    return Z[0] == 12345.0f;
}
