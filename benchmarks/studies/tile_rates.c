/* GFLOP/s of the member pass's logits tile (rows x classes of float32 dot products, one
 * accumulator vector per pair, as the package's dot4) with the rows in L1, in L2 and in
 * memory: where a phase's arithmetic can run on this core, and what reading rows from each
 * level costs it.  One thread, AVX-512, d = 768; not part of the package.
 *
 *     gcc -O3 -march=native benchmarks/studies/tile_rates.c -o tile_rates && ./tile_rates
 *
 * Rows are drawn at random from a working set of 8 rows (L1), 256 rows (768 KB, L2) or
 * 2,048 rows (6 MB) and 200,000 rows (600 MB, memory); each tile reads its rows once and
 * multiplies them by C weight vectors (one model's classes), as a model's logits do. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64), aligned(4)));
#define D 768
#define NV (D / 16)
#define PIN(v) __asm__("" : "+v"(v))

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* R rows x C_ classes per tile over the q rows listed */
#define TILE(R_, C_)                                                                          \
    static float tile_##R_##_##C_(const float *X, const int *rows, int q, const float *W)     \
    {                                                                                         \
        float s = 0;                                                                          \
        for (int i0 = 0; i0 + R_ <= q; i0 += R_) {                                            \
            v16 acc[C_][R_];                                                                  \
            for (int c = 0; c < C_; c++)                                                      \
                for (int r = 0; r < R_; r++) acc[c][r] = (v16){0};                            \
            const float *x[R_];                                                               \
            for (int r = 0; r < R_; r++) x[r] = X + (int64_t)rows[i0 + r] * D;                \
            for (int v = 0; v < NV; v++) {                                                    \
                v16 xv[R_];                                                                   \
                for (int r = 0; r < R_; r++) {                                                \
                    xv[r] = *(const v16 *)(x[r] + v * 16);                                    \
                    PIN(xv[r]);                                                               \
                }                                                                             \
                for (int c = 0; c < C_; c++) {                                                \
                    v16 w = *(const v16 *)(W + c * D + v * 16);                               \
                    for (int r = 0; r < R_; r++) acc[c][r] += xv[r] * w;                      \
                }                                                                             \
            }                                                                                 \
            for (int c = 0; c < C_; c++)                                                      \
                for (int r = 0; r < R_; r++) s += acc[c][r][0];                               \
        }                                                                                     \
        return s;                                                                             \
    }
TILE(4, 3)
TILE(4, 6)
TILE(2, 12)

int main(void)
{
    const int sets[] = {8, 256, 2048, 200000}, q = 4096;
    float *W = aligned_alloc(64, sizeof(float) * D * 16);
    float *X = aligned_alloc(64, sizeof(float) * (size_t)200000 * D);
    int *rows = malloc(sizeof(int) * q);
    for (int i = 0; i < D * 16; i++) W[i] = 0.001f * (i % 100);
    for (size_t i = 0; i < (size_t)200000 * D; i++) X[i] = (float)(i % 7) * 0.1f;
    float (*fn[])(const float *, const int *, int, const float *) = {tile_4_3, tile_4_6, tile_2_12};
    const int cls[] = {3, 6, 12};
    const char *name[] = {"4 rows x 3 classes", "4 rows x 6 classes", "2 rows x 12 classes"};
    float sink = 0;
    for (int w = 0; w < 4; w++) {
        srand(1);
        for (int i = 0; i < q; i++) rows[i] = sets[w] <= 8 ? i % sets[w] : rand() % sets[w];
        for (int k = 0; k < 3; k++) {
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) {
                double t = now();
                for (int it = 0; it < 5; it++) sink += fn[k](X, rows, q, W);
                t = now() - t;
                if (t < best) best = t;
            }
            printf("rows from a set of %6d (%8.0f KB), %s: %6.1f GF/s\n", sets[w],
                   sets[w] * D * 4 / 1024.0, name[k], 2.0 * q * D * cls[k] * 5 / best / 1e9);
        }
    }
    return sink == 12345.0f;
}
