/* A vectorisable double exp for the row passes (training and prediction), included by
 * afl_member_impl.h, once per instruction set, with AFL_F (the name suffix macro) defined. */
/* w[j] = exp(w[j]) for w[j] <= 0 (logit minus the row's largest logit).  exp(x) = 2^k exp(r),
 * x = k ln2 + r, |r| <= ln2 / 2; exp(r) by its Taylor polynomial of degree 13 (truncation
 * below 1e-17 relative): a vectorisable double exp, accurate to a few units in the last
 * place, so the objective keeps double precision and the line search sees the same
 * decreases as with libm. */
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
