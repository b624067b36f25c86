/* Body of afl_ce_rows, included once per instruction-set target by afl_rowpass.c with
 * AFL_SFX (name suffix) defined.  See afl_rowpass.h. */
#define AFL_CAT_(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT_(a, b)
#define AFL_F(name) AFL_CAT(name, AFL_SFX)

/* w[j] = exp(w[j]) for w[j] <= 0 (logit minus the model's largest logit), n a multiple of
 * AFL_EXP_PAD.  exp(x) = 2^k exp(r), x = k ln2 + r, |r| <= ln2 / 2; exp(r) by its Taylor
 * polynomial of degree 13 (truncation below 1e-17 relative). */
static void AFL_F(exp_nonpositive)(double *restrict w, int64_t n)
{
    const double log2e = 1.4426950408889634, ln2_hi = 6.93147180369123816490e-01,
                 ln2_lo = 1.90821492927058770002e-10, shifter = 0x1.8p52;
    for (int64_t j = 0; j < n; j++) {
        double x = w[j];
        x = x < -708.0 ? -708.0 : x;          /* exp(-708) ~ 3e-308 still normal; NaN stays NaN */
        double kd = x * log2e + shifter;       /* round to nearest integer, k in the low bits */
        uint64_t kbits;
        __builtin_memcpy(&kbits, &kd, 8);
        kd -= shifter;
        double r = (x - kd * ln2_hi) - kd * ln2_lo;
        double p = 1.0 / 6227020800.0;
        p = p * r + 1.0 / 479001600.0;
        p = p * r + 1.0 / 39916800.0;
        p = p * r + 1.0 / 3628800.0;
        p = p * r + 1.0 / 362880.0;
        p = p * r + 1.0 / 40320.0;
        p = p * r + 1.0 / 5040.0;
        p = p * r + 1.0 / 720.0;
        p = p * r + 1.0 / 120.0;
        p = p * r + 1.0 / 24.0;
        p = p * r + 1.0 / 6.0;
        p = p * r + 0.5;
        p = p * r + 1.0;
        p = p * r + 1.0;
        uint64_t sbits = (kbits + 1023u) << 52;  /* 2^k: k + 1023 in the exponent field */
        double scale;
        __builtin_memcpy(&scale, &sbits, 8);
        w[j] = p * scale;
    }
}

static void AFL_F(ce_rows)(int64_t r0, int64_t r1, int C, int64_t nA, int64_t B,
                           float *Z, int64_t ldz, const int32_t *y, const uint8_t *member,
                           const int64_t *active, const double *inv_n, double *loss,
                           double *work, double *acc)
{
    int64_t nz = nA * C;
    int64_t npad = (nz + AFL_EXP_PAD - 1) / AFL_EXP_PAD * AFL_EXP_PAD;
    /* per model: sum of (max logit - label logit), folded logs, running product of the
     * softmax denominators s, and this row's (max - label logit) */
    double *lin = acc, *logs = acc + nA, *prod = acc + 2 * nA, *gap = acc + 3 * nA;
    for (int64_t a = 0; a < nA; a++) { lin[a] = 0.0; logs[a] = 0.0; prod[a] = 1.0; }
    for (int64_t j = nz; j < npad; j++) work[j] = 0.0;
    for (int64_t i = r0; i < r1; i++) {
        float *z = Z + i * ldz;
        const uint8_t *mrow = member + i * B;
        int yi = y[i];
        for (int64_t a = 0; a < nA; a++) {
            const float *za = z + a * C;
            float mx = za[0];
            for (int c = 1; c < C; c++) mx = za[c] > mx ? za[c] : mx;
            for (int c = 0; c < C; c++) work[a * C + c] = (double)za[c] - (double)mx;
            gap[a] = (double)mx - (double)za[yi];
        }
        AFL_F(exp_nonpositive)(work, npad);
        for (int64_t a = 0; a < nA; a++) {
            float *za = z + a * C;
            int64_t j = active[a];
            if (!mrow[j]) {
                for (int c = 0; c < C; c++) za[c] = 0.0f;
                continue;
            }
            const double *e = work + a * C;
            double s = 0.0;
            for (int c = 0; c < C; c++) s += e[c];
            /* -log p_y = (max - z_y) + log s */
            lin[a] += gap[a];
            prod[a] *= s;
            if (prod[a] > 1e280) { logs[a] += log(prod[a]); prod[a] = 1.0; }
            double sc = inv_n[j], inv = sc / s;
            for (int c = 0; c < C; c++) za[c] = (float)(e[c] * inv);
            za[yi] = (float)(e[yi] * inv - sc);
        }
    }
    for (int64_t a = 0; a < nA; a++) loss[a] = lin[a] + (logs[a] + log(prod[a]));
}

#undef AFL_F
#undef AFL_CAT
#undef AFL_CAT_
