/* Body of afl_ce_rows, included once per instruction-set target by afl_rowpass.c with
 * AFL_SFX (name suffix) defined.  See afl_rowpass.h. */
#define AFL_CAT_(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT_(a, b)
#define AFL_F(name) AFL_CAT(name, AFL_SFX)

/* w[j] = exp(w[j]) for w[j] <= 0 (logit minus the model's largest logit), n a multiple of
 * AFL_PAD.  exp(x) = 2^k exp(r), x = k ln2 + r, |r| <= ln2 / 2; exp(r) by its Taylor
 * polynomial of degree 13 (truncation below 1e-17 relative). */
static void AFL_F(exp_nonpositive)(double *restrict w, int64_t n)
{
    const double log2e = 1.4426950408889634, ln2_hi = 6.93147180369123816490e-01,
                 ln2_lo = 1.90821492927058770002e-10, shifter = 0x1.8p52;
    for (int64_t j = 0; j < n; j++) {
        double x = w[j];
        x = x < -708.0 ? -708.0 : x;          /* exp(-708) ~ 3e-308 still normal */
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
                           const int64_t *active, const double *scale, double *loss,
                           double *work)
{
    const int64_t np = afl_pad(nA);
    /* work: C rows of np (logits, then exponentials), then per model: member flag of the
     * row, largest logit, label gap, softmax denominator, gradient scale, and the running
     * sums (max - label logit), folded logs, product of denominators; then np flag bytes */
    double *e = work, *mk = e + C * np, *mx = mk + np, *gap = mx + np, *s = gap + np,
           *sc = s + np, *lin = sc + np, *logs = lin + np, *prod = logs + np;
    uint8_t *mb = (uint8_t *)(prod + np);  /* np bytes */
    for (int64_t j = 0; j < (C + 9) * np; j++) work[j] = 0.0;  /* pads stay 0 throughout */
    for (int64_t a = 0; a < np; a++) prod[a] = 1.0;
    /* AFL_IVDEP: the per-model arrays are disjoint parts of `work` and Z is a separate
     * buffer, which the compiler cannot prove; without it these loops stay scalar. */
    for (int64_t i = r0; i < r1; i++) {
        float *z = Z + i * ldz;
        const uint8_t *mrow = member + i * B;
        const int yi = y[i];
        /* member flags of the active models: gathered as bytes, then widened in one vector
         * loop (storing doubles one by one and loading them as vectors stalls store
         * forwarding); no gather while every model of the block is active */
        const uint8_t *flags = mrow;
        if (nA < B) {
            for (int64_t a = 0; a < nA; a++) mb[a] = mrow[active[a]];
            flags = mb;
        }
        AFL_IVDEP
        for (int64_t a = 0; a < nA; a++) mk[a] = (double)(flags[a] != 0);
        for (int c = 0; c < C; c++) {
            AFL_IVDEP
            for (int64_t a = 0; a < nA; a++) e[c * np + a] = (double)z[c * nA + a];
        }
        AFL_IVDEP
        for (int64_t a = 0; a < np; a++) mx[a] = e[a];
        for (int c = 1; c < C; c++) {
            AFL_IVDEP
            for (int64_t a = 0; a < np; a++) mx[a] = e[c * np + a] > mx[a] ? e[c * np + a] : mx[a];
        }
        for (int c = 0; c < C; c++) {
            AFL_IVDEP
            for (int64_t a = 0; a < np; a++) e[c * np + a] -= mx[a];  /* exact: both floats */
        }
        AFL_IVDEP
        for (int64_t a = 0; a < np; a++) gap[a] = -e[yi * np + a];     /* max - label logit */
        AFL_F(exp_nonpositive)(e, C * np);
        AFL_IVDEP
        for (int64_t a = 0; a < np; a++) s[a] = e[a];
        for (int c = 1; c < C; c++) {
            AFL_IVDEP
            for (int64_t a = 0; a < np; a++) s[a] += e[c * np + a];
        }
        /* -log p_y = (max - z_y) + log s; non-member rows add nothing and get zero gradient.
         * Values are computed for every lane and then selected (not multiplied by a 0/1
         * flag, so a non-finite logit cannot leak in): the compiler does not speculate
         * floating-point work under a condition, so a conditional expression stays scalar. */
        AFL_IVDEP
        for (int64_t a = 0; a < np; a++) {
            int in = mk[a] != 0.0;
            double q = scale[a] / s[a], ln = lin[a] + gap[a], pr = prod[a] * s[a];
            sc[a] = in ? q : 0.0;
            lin[a] = in ? ln : lin[a];
            prod[a] = in ? pr : prod[a];
        }
        for (int c = 0; c < C; c++) {
            float *zc = z + c * nA;
            const double *ec = e + c * np;
            /* sc is 0 for non-members, so these are exact zeros there unless the model's own
             * logits are not finite (its objective is then not finite either) */
            if (c == yi) {
                AFL_IVDEP
                for (int64_t a = 0; a < nA; a++) zc[a] = (float)(ec[a] * sc[a] - (mk[a] != 0.0 ? scale[a] : 0.0));
            } else {
                AFL_IVDEP
                for (int64_t a = 0; a < nA; a++) zc[a] = (float)(ec[a] * sc[a]);
            }
        }
        /* fold the product into the sum of logs before it can overflow (each s <= C) */
        for (int64_t a = 0; a < nA; a++)
            if (prod[a] > 1e280) { logs[a] += log(prod[a]); prod[a] = 1.0; }
    }
    for (int64_t a = 0; a < nA; a++) loss[a] = lin[a] + (logs[a] + log(prod[a]));
}

#undef AFL_F
#undef AFL_CAT
#undef AFL_CAT_
