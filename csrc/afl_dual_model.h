/* The model's solver of afl_dual.c (see afl_dual.h), compiled once per instruction set:
 * included by afl_dual_impl.h under each target, after the inner loops it calls.  Its loops
 * over vectors compile to the target's lanes; no sum is reordered by that (no -ffast-math),
 * so a model's bits still depend on the instruction set only. */
#define DUAL_FN(name) AFL_CAT(name, AFL_SFX)
/* Steps between fresh products G th (see dual_train_model).  12: the reported objective of
 * the tests' tol=1e-7 fits stays within about 1e-7 of the returned weights' on every instruction
 * set, as with 8 (33 steps without it: 1.1e-6), and at tol=1e-4 3% of the small run's models
 * (8.8 steps on average) reach step 12 where 94% reach step 8 (two t x t products each). */
#ifndef DUAL_REFRESH
#define DUAL_REFRESH 12
#endif
#define dual_ce_terms DUAL_FN(dual_ce_terms)
#define dual_converged DUAL_FN(dual_converged)
#define dual_eval DUAL_FN(dual_eval)
#define dual_gmul DUAL_FN(dual_gmul)
#define dual_h0 DUAL_FN(dual_h0)
#define dual_max_abs DUAL_FN(dual_max_abs)
#define dual_start_products DUAL_FN(dual_start_products)
#define dual_to_features DUAL_FN(dual_to_features)
#define dual_train_model DUAL_FN(dual_train_model)
#define dual_vdot DUAL_FN(dual_vdot)
#define dual_watched DUAL_FN(dual_watched)
#define dual_yh0y DUAL_FN(dual_yh0y)

/* <a, b> over n doubles: dual_ddot's fixed order of 8 lanes. */
static inline double dual_vdot(int64_t n, const double *a, const double *b)
{
    return DUAL_FN(dual_ddot)(n, a, b);
}

/* The start's products: XU (t x C) = X_rows U, UU = U'U, VU = V'U (r x C), with U (D - 1 x C,
 * row-major) transposed into Ut (C x D - 1) first. */
static void dual_start_products(const afl_dual_problem *pb, const double *U, int64_t t,
                                const int32_t *rows, int r, double *Ut, double *XU, double *UU, double *VU,
                                int n_threads)
{
    const int64_t F = pb->D - 1;
    const int C = pb->C;
    for (int64_t f = 0; f < F; f++)
        for (int l = 0; l < C; l++) Ut[l * F + f] = U[f * C + l];
    /* rows split among n_threads (each row's products its own: the same values) */
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n_threads > 1)
    for (int64_t a = 0; a < t; a++) {
        const float *x = afl_dual_xrow(pb, rows ? rows[a] : a);
        for (int l = 0; l < C; l++) XU[a * C + l] = DUAL_FN(dual_dot)(F, x, Ut + l * F);
    }
    for (int l = 0; l < C; l++)
        for (int l2 = 0; l2 < C; l2++) UU[l * C + l2] = DUAL_FN(dual_ddot)(F, Ut + l * F, Ut + l2 * F);
    for (int i = 0; i < r; i++)
        for (int l = 0; l < C; l++) VU[i * C + l] = DUAL_FN(dual_ddot)(F, pb->Vt + i * F, Ut + l * F);
}

/* Gv = G v (see dual_model for the layout). */
static void dual_gmul(const dual_model *md, const double *v, double *Gv)
{
    const int64_t t = md->t, m = md->m, ld = md->ld, oV = md->oV, oU = md->oU, ob = md->ob;
    const int C = md->pb->C, r = md->r;
    dual_scratch *s = md->s;
    for (int k = 0; k < C; k++) {
        const double *vk = v + k * m;
        double *gk = Gv + k * m;
        int rows_zero = 1;
        for (int64_t b = 0; b < t; b++) {
            s->vf[b] = (float)vk[b];
            rows_zero &= vk[b] == 0.0;
        }
        for (int64_t b = t; b < ld; b++) s->vf[b] = 0.0f;
        if (rows_zero) {
            /* a warm start (no weight on the rows yet): K_SS 0 is 0, without reading K_SS */
            for (int64_t a = 0; a < t; a++) gk[a] = 0.0;
        } else {
            DUAL_FN(dual_matvec_sym)(t, ld, s->Kss, s->diag, s->vf, s->accf, s->outx, s->mv);
            for (int64_t a = 0; a < t; a++) gk[a] = s->mv[a];
        }
        /* XVf is r x ld (column i of X_S V in row i, float32) */
        DUAL_FN(dual_rank_terms_f)(t, md->ld, r, s->XVf, s->vf, vk + oV, s->accf, gk, gk + oV);
        for (int i = 0; i < r; i++) gk[oV + i] += vk[oV + i];
        for (int l = 0; l < C; l++) gk[oU + l] = 0.0;
        if (md->U && C == 1) {
            const double u = vk[oU];
            for (int64_t a = 0; a < t; a++) gk[a] += s->XU[a] * u;
            gk[oU] = DUAL_FN(dual_ddot)(t, s->XU, vk);
        } else if (md->U) {
            for (int64_t a = 0; a < t; a++)
                for (int l = 0; l < C; l++) {
                    gk[a] += s->XU[a * C + l] * vk[oU + l];
                    gk[oU + l] += s->XU[a * C + l] * vk[a];
                }
        }
        if (md->U) {
            for (int i = 0; i < r; i++)
                for (int l = 0; l < C; l++) {
                    gk[oV + i] += s->VU[i * C + l] * vk[oU + l];
                    gk[oU + l] += s->VU[i * C + l] * vk[oV + i];
                }
            for (int l = 0; l < C; l++)
                for (int l2 = 0; l2 < C; l2++) gk[oU + l] += s->UU[l * C + l2] * vk[oU + l2];
        }
        gk[ob] = vk[ob];
    }
}

/* out, Gout = H0 v, G H0 v from v and G v (see afl_dual_problem): per output the scaled
 * identity plus the rank-r term (V' g is the V block of G v), then the outputs mixed by
 * I + 11'.  Costs t r per output. */
static void dual_h0(const dual_model *md, const double *v, const double *Gv, double *out, double *Gout)
{
    const int64_t t = md->t, m = md->m, oV = md->oV, oU = md->oU, ob = md->ob;
    const int C = md->pb->C, r = md->r;
    dual_scratch *s = md->s;
    double *delta = s->mv;   /* r */
    for (int k = 0; k < C; k++) {
        const double *vk = v + k * m, *gk = Gv + k * m;
        double *ok = out + k * m, *Ok = Gout + k * m;
        for (int64_t e = 0; e < ob; e++) { ok[e] = md->mu_inv * vk[e]; Ok[e] = md->mu_inv * gk[e]; }
        ok[ob] = md->hb * vk[ob];
        Ok[ob] = ok[ob];
        for (int i = 0; i < r; i++) {
            delta[i] = md->dV[i] * gk[oV + i];
            ok[oV + i] += delta[i];
            Ok[oV + i] += delta[i];
        }
        DUAL_FN(dual_rank_terms_f)(t, md->ld, r, s->XVf, NULL, delta, s->accf, Ok, NULL);
        if (md->U)
            for (int l = 0; l < C; l++) {
                double z = 0.0;
                for (int i = 0; i < r; i++) z += s->VU[i * C + l] * delta[i];
                Ok[oU + l] += z;
            }
    }
    /* the outputs mixed by I + 11' (the reference-class form's H0) */
    for (int64_t e = 0; e < m; e++) {
        double a = 0.0, b = 0.0;
        for (int k = 0; k < C; k++) { a += out[k * m + e]; b += Gout[k * m + e]; }
        for (int k = 0; k < C; k++) { out[k * m + e] += a; Gout[k * m + e] += b; }
    }
}

/* y'H0y from y and G y alone (O(C m + C r), not H0 y's t r): with H0 = (I + 11') x H0f over
 * the outputs, y'H0y = sum_k <y_k, H0f y_k> + <u, H0f u> for u = sum_k y_k, and
 * <u, H0f u> = (u'G u - u_b^2) / mu + hb u_b^2 + sum_i dV_i ((G u)_V,i)^2 (V'u is the V block of
 * G u; the intercept apart). */
static double dual_yh0y(const dual_model *md, const double *y, const double *Gy)
{
    const int64_t m = md->m, oV = md->oV, ob = md->ob;
    const int C = md->pb->C, r = md->r;
    double *u = md->s->st, *Gu = md->s->sg;   /* m each: the sums over the outputs */
    double total = 0.0;
    for (int64_t e = 0; e < m; e++) { u[e] = 0.0; Gu[e] = 0.0; }
    for (int k = 0; k <= C; k++) {
        const double *a, *Ga;
        if (k < C) {
            a = y + k * m;
            Ga = Gy + k * m;
            for (int64_t e = 0; e < m; e++) { u[e] += a[e]; Gu[e] += Ga[e]; }
        } else {
            a = u;
            Ga = Gu;
        }
        double q = (dual_vdot(m, a, Ga) - a[ob] * Ga[ob]) * md->mu_inv + md->hb * a[ob] * Ga[ob];
        for (int i = 0; i < r; i++) q += md->dV[i] * Ga[oV + i] * Ga[oV + i];
        total += q;
    }
    return total;
}

/* The feature-space vector of coefficients v: out (D x C, row-major) = X_S' v_rows + V v_V +
 * U v_U on the features, v_b on the intercept row. */
static void dual_to_features(const dual_model *md, const double *v, double *out, int with_rows)
{
    const afl_dual_problem *pb = md->pb;
    const int64_t t = md->t, m = md->m, F = pb->D - 1, oV = md->oV, oU = md->oU, ob = md->ob;
    const int C = pb->C, r = md->r;
    double *acc = md->s->acc;          /* C x F, output-major */
    memset(acc, 0, (size_t)(C * F) * sizeof(double));
    if (with_rows) {
        /* X_S' v_rows (float products, double sums per block of rows: see dual_rows_product) */
        float *cf = md->s->vf;
        const float **xr = md->s->xrow;
        for (int64_t i = 0; i < t; i++) xr[i] = afl_dual_xrow(pb, md->rows[i]);
        for (int k = 0; k < C; k++) {
            for (int64_t i = 0; i < t; i++) cf[i] = (float)v[k * m + i];
            DUAL_FN(dual_rows_product)(F, t, cf, xr, md->s->facc, acc + k * F);
        }
    }
    /* V v_V, four columns of V (rows of Vt) a pass over the features, in column order */
    for (int k = 0; k < C; k++) {
        double *restrict ak = acc + k * F;
        const double *vv = v + k * m + oV;
        int i = 0;
        for (; i + 4 <= r; i += 4) {
            const double *restrict t0 = pb->Vt + (int64_t)i * F, *restrict t1 = t0 + F, *restrict t2 = t1 + F,
                         *restrict t3 = t2 + F;
            const double v0 = vv[i], v1 = vv[i + 1], v2 = vv[i + 2], v3 = vv[i + 3];
            for (int64_t f = 0; f < F; f++) {
                double z = ak[f];
                z += t0[f] * v0;
                z += t1[f] * v1;
                z += t2[f] * v2;
                z += t3[f] * v3;
                ak[f] = z;
            }
        }
        for (; i < r; i++) {
            const double vi = vv[i];
            const double *restrict vt = pb->Vt + (int64_t)i * F;
            for (int64_t f = 0; f < F; f++) ak[f] += vt[f] * vi;
        }
    }
    for (int64_t f = 0; f < F; f++)
        for (int k = 0; k < C; k++) {
            double z = acc[k * F + f];
            if (md->U)
                for (int l = 0; l < C; l++) z += md->U[f * C + l] * v[k * m + oU + l];
            out[f * C + k] = z;
        }
    for (int k = 0; k < C; k++) out[F * C + k] = v[k * m + ob];
}


/* Largest absolute entry of the feature-space gradient of coefficients c (its t D product);
 * unless it is at most done, the watched entries become its DUAL_WATCH largest on the
 * features. */
static double dual_max_abs(const dual_model *md, const double *c, dual_watch *w, double done)
{
    const afl_dual_problem *pb = md->pb;
    const int64_t nf = (pb->D - 1) * pb->C;
    double *out = md->s->acc + pb->C * (pb->D - 1);   /* D x C after the accumulators */
    dual_to_features(md, c, out, 1);
    double g = 0.0;
    for (int64_t k = 0; k < pb->D * pb->C; k++)
        if (fabs(out[k]) > g) g = fabs(out[k]);
    if (g <= done) return g;   /* the model stops here: no later test needs the watched entries */
    /* the DUAL_WATCH largest feature entries, by insertion into a sorted list (ties: the
     * lower index first) */
    double val[DUAL_WATCH];
    int n = 0;
    for (int64_t k = 0; k < nf; k++) {
        double v = fabs(out[k]);
        if (n == DUAL_WATCH && !(v > val[n - 1])) continue;
        int at = n < DUAL_WATCH ? n : DUAL_WATCH - 1;
        while (at > 0 && v > val[at - 1]) {
            val[at] = val[at - 1];
            w->idx[at] = w->idx[at - 1];
            at--;
        }
        val[at] = v;
        w->idx[at] = k;
        if (n < DUAL_WATCH) n++;
    }
    w->n = n;
    /* the watched features of the rows, row by row (entry q of row i at Xw[i * DUAL_WATCH + q]) */
    for (int64_t i = 0; i < md->t; i++) {
        const float *x = afl_dual_xrow(pb, md->rows[i]);
        double *xw = md->s->Xw + i * DUAL_WATCH;
        for (int q = 0; q < n; q++) xw[q] = (double)x[w->idx[q] / pb->C];
        for (int q = n; q < DUAL_WATCH; q++) xw[q] = 0.0;
    }
    return g;
}

/* Largest absolute value of the watched entries and the intercept's (exact, a lower bound of
 * the largest entry). */
static double dual_watched(const dual_model *md, const double *c, const dual_watch *w)
{
    const afl_dual_problem *pb = md->pb;
    const int64_t t = md->t, m = md->m, oV = md->oV, oU = md->oU, ob = md->ob;
    const int C = pb->C, r = md->r;
    double g = 0.0, acc[DUAL_WATCH];
    for (int k = 0; k < C; k++)
        if (fabs(c[k * m + ob]) > g) g = fabs(c[k * m + ob]);
    int64_t f[DUAL_WATCH];
    int kk[DUAL_WATCH];
    for (int q = 0; q < w->n; q++) {
        f[q] = w->idx[q] / C;
        kk[q] = (int)(w->idx[q] % C);
        acc[q] = 0.0;
    }
    if (C == 1) {
        for (int q = 0; q < DUAL_WATCH; q++) acc[q] = 0.0;
        for (int64_t i = 0; i < t; i++) {
            const double *xw = md->s->Xw + i * DUAL_WATCH;
            const double ci = c[i];
            for (int q = 0; q < DUAL_WATCH; q++) acc[q] += ci * xw[q];
        }
    } else {
        for (int64_t i = 0; i < t; i++) {
            const double *xw = md->s->Xw + i * DUAL_WATCH;
            for (int q = 0; q < w->n; q++) acc[q] += c[kk[q] * m + i] * xw[q];
        }
    }
    for (int q = 0; q < w->n; q++) {
        double z = acc[q];
        for (int i = 0; i < r; i++) z += pb->V[f[q] * r + i] * c[kk[q] * m + oV + i];
        if (md->U)
            for (int l = 0; l < C; l++) z += md->U[f[q] * C + l] * c[kk[q] * m + oU + l];
        if (fabs(z) > g) g = fabs(z);
    }
    return g;
}

/* Whether the feature-space gradient of coefficients c (G c given) has no entry above gtol,
 * decided without its t D product where possible: ||g||_2 = sqrt(c'Gc) (free) settles it
 * both ways (||g||_inf <= ||g||_2 <= sqrt(D C) ||g||_inf), the intercept's entries and the
 * watched ones (t DUAL_WATCH) can show an entry above gtol; else the product decides.  So the
 * answer is that of the product at every step. */
static int dual_converged(const dual_model *md, const double *c, const double *Gc, double gtol, dual_watch *w)
{
    const afl_dual_problem *pb = md->pb;
    double nrm2sq = dual_vdot(md->P, c, Gc);
    if (!(nrm2sq >= 0.0)) nrm2sq = 0.0;
    const double nrm2 = sqrt(nrm2sq);
    /* margins of 1% cover the float32 rounding of G's products */
    if (nrm2 <= 0.99 * gtol) return 1;
    if (nrm2 > 1.01 * sqrt((double)(pb->D * pb->C)) * gtol) return 0;
    if (dual_watched(md, c, w) > gtol) return 0;
    return dual_max_abs(md, c, w, gtol) <= gtol;
}

/* The binary cross-entropy's row terms from z_i = G th + b and e_i = exp(-|z_i|) (in w): the
 * gradient coefficients c_i, 1 + e_i, and max(lin_i, 0).  Its own function so that the
 * restrict parameters let the loop take the target's lanes. */
static void dual_ce_terms(int64_t t, double b, double inv_n, const double *restrict gr, const double *restrict ysg,
                          const double *restrict w, double *restrict cr, double *restrict opq, double *restrict lin)
{
    for (int64_t i = 0; i < t; i++) {
        const double z = (double)(float)(gr[i] + b), e = w[i], q = 1.0 + e, inv = 1.0 / q;
        /* p_0 = sigmoid(z) and 1 - p_0, each without cancellation */
        const double p0 = z >= 0.0 ? inv : e * inv, q0 = z >= 0.0 ? e * inv : inv;
        cr[i] = (double)(float)(inv_n * (ysg[i] < 0.0 ? -q0 : p0));
        opq[i] = q;
        lin[i] = lin[i] > 0.0 ? lin[i] : 0.0;
    }
}

/* Objective at coefficients th (with G th): returns f, writes the gradient's coefficients. */
static double dual_eval(const dual_model *md, const double *th, const double *Gth, double *c)
{
    const afl_dual_problem *pb = md->pb;
    const int64_t t = md->t, m = md->m, ob = md->ob;
    const int C = pb->C, nc = C + 1;
    float z[AFL_DUAL_MAX_OUT + 1], g[AFL_DUAL_MAX_OUT + 1];
    double prob[AFL_DUAL_MAX_OUT + 1];
    double loss = 0.0;
    for (int k = 0; k < C; k++) c[k * m + ob] = 0.0;
    if (C == 1 && pb->loss_code == AFL_LOSS_CE) {
        /* two classes, cross-entropy: loss -log p_y = max(u, 0) + log(1 + e), u = -z for y = 0
         * and z for y = 1, e = exp(-|z|); gradient scale p_0 - [y == 0] on the one output.
         * Vectorised: the exps by exp_nonpositive, the row terms in lanes, their sums in 8
         * lanes (row i in lane i mod 8, reduced by a fixed tree), the logs as the log of each
         * lane's product of the (1 + e)'s (at most 2 each: one log per lane and 4,096 rows, as
         * the member pass's cross-entropy takes one per few hundred rows) */
        dual_scratch *s = md->s;
        double *restrict w = s->ew, *restrict opq = s->ew + md->ld, *restrict lin = s->ew + 2 * md->ld;
        double *restrict cr = c;
        const double *restrict gr = Gth, *restrict ysg = s->ysg;
        const double b = th[ob], inv_n = md->inv_n;
        for (int64_t i = 0; i < t; i++) {
            const double z = (double)(float)(gr[i] + b);
            w[i] = -fabs(z);
            lin[i] = ysg[i] * z;
        }
        DUAL_FN(exp_nonpositive)(w, t);
        dual_ce_terms(t, b, inv_n, gr, ysg, w, cr, opq, lin);
        double sl[8], sb[8], sp[8], logs = 0.0;
        for (int l = 0; l < 8; l++) { sl[l] = 0.0; sb[l] = 0.0; sp[l] = 1.0; }
        const int64_t t8 = t / 8 * 8;
        for (int64_t i = 0; i < t8; i += 8) {
            for (int l = 0; l < 8; l++) {
                sl[l] += lin[i + l];
                sb[l] += cr[i + l];
                sp[l] *= opq[i + l];
            }
            if ((i + 8) % 4096 == 0)
                for (int l = 0; l < 8; l++) { logs += log(sp[l]); sp[l] = 1.0; }
        }
        for (int64_t i = t8; i < t; i++) {
            sl[i - t8] += lin[i];
            sb[i - t8] += cr[i];
            sp[i - t8] *= opq[i];
        }
        for (int l = 0; l < 8; l++) logs += log(sp[l]);
        loss = DUAL_FN(dual_lanes8)(sl) + logs;
        c[ob] = DUAL_FN(dual_lanes8)(sb);
    } else
    for (int64_t i = 0; i < t; i++) {
        for (int k = 0; k < C; k++) z[k] = (float)(Gth[k * m + i] + th[k * m + ob]);
        z[C] = 0.0f;
        loss += afl_row_loss(pb->loss_code, pb->params, pb->user, nc, z, pb->y[md->rows[i]], prob,
                             md->inv_n, g);
        for (int k = 0; k < C; k++) {
            c[k * m + i] = (double)g[k];
            c[k * m + ob] += (double)g[k];
        }
    }
    /* the L2 term of the reference-class form on the penalised coefficients (all but the
     * intercept): sum_k th_k'G th_k - (sum_k th_k)' G (sum_k th_k) / nc, both sums in 8 lanes
     * (coefficient e in lane e mod 8) */
    double *restrict st = md->s->st, *restrict sg = md->s->sg;
    const double l2 = md->l2, inv_nc = 1.0 / nc;
    double pl[8], cl[8];
    for (int l = 0; l < 8; l++) { pl[l] = 0.0; cl[l] = 0.0; }
    if (C == 1) {
        /* one output: the two sums are the same */
        const double *restrict a = th, *restrict ga = Gth;
        const int64_t e8 = ob / 8 * 8;
        for (int64_t e0 = 0; e0 < e8; e0 += 8)
            for (int l = 0; l < 8; l++) pl[l] += a[e0 + l] * ga[e0 + l];
        for (int64_t e = e8; e < ob; e++) pl[e - e8] += a[e] * ga[e];
        for (int l = 0; l < 8; l++) cl[l] = pl[l];
        for (int64_t e = 0; e < ob; e++) st[e] = a[e];
    } else {
        for (int64_t e0 = 0; e0 < ob; e0 += 8)
            for (int l = 0; l < 8 && e0 + l < ob; l++) {
                const int64_t e = e0 + l;
                double a = 0.0, b = 0.0;
                for (int k = 0; k < C; k++) {
                    pl[l] += th[k * m + e] * Gth[k * m + e];
                    a += th[k * m + e];
                    b += Gth[k * m + e];
                }
                st[e] = a;
                sg[e] = b;
                cl[l] += a * b;
            }
    }
    const double pen = DUAL_FN(dual_lanes8)(pl) - DUAL_FN(dual_lanes8)(cl) * inv_nc;
    for (int k = 0; k < C; k++) {
        const double *restrict tk = th + k * m;
        double *restrict ck = c + k * m;
        for (int64_t e = 0; e < t; e++) ck[e] += l2 * (tk[e] - st[e] * inv_nc);
        for (int64_t e = t; e < ob; e++) ck[e] = l2 * (tk[e] - st[e] * inv_nc);
    }
    return loss * md->inv_n + 0.5 * md->l2 * pen;
}

static int dual_train_model(dual_model *md, double *coef, double *alpha_out, int32_t *n_iter_out,
                            int32_t *status_out, double *fval_out, int32_t *n_eval_out)
{
    const afl_dual_problem *pb = md->pb;
    dual_scratch *s = md->s;
    const int64_t t = md->t, m = md->m, P = md->P, F = pb->D - 1, oU = md->oU, ob = md->ob;
    const int C = pb->C, hist = pb->hist, r = md->r;
    double *th = s->th, *Gth = s->Gth, *c = s->c, *Gc = s->Gc;
    double *tht = s->tht, *Gtht = s->Gtht, *ct = s->ct, *Gct = s->Gct, *p = s->p, *Gp = s->Gp;
    int n_iter = 0, n_eval = 0, status = DUAL_MAX_ITER, mem_len = 0, mem_head = 0, n_ls = 0;
    double f, ft, gp = 0.0, alpha = 1.0, gtol_j = pb->gtol;

    /* the basis: the rows (K_SS gathered; their products with V's columns), V, the start's
     * feature weights U, the intercept */
    const int64_t nchunk = pb->nk / 16 + 1;
    memset(s->cmask, 0, (size_t)nchunk * sizeof(uint16_t));
    for (int64_t a = 0; a < t; a++) {
        s->kcol[a] = pb->krow[md->rows[a]];
        s->cmask[s->kcol[a] / 16] |= (uint16_t)(1u << (s->kcol[a] % 16));
    }
    dual_chunk_counts(s->cmask, nchunk, s->cum);
    DUAL_FN(dual_gather_sym)(t, md->ld, pb->K, pb->ldk, s->kcol, s->cmask, s->cum, s->rowbuf, s->Kss, s->diag);
    for (int i = 0; i < r; i++) {
        const float *xv = pb->XVt + i * pb->nk;
        float *xf = s->XVf + i * md->ld;
        for (int64_t a = 0; a < t; a++) xf[a] = xv[s->kcol[a]];
        for (int64_t a = t; a < md->ld; a++) xf[a] = 0.0f;
    }
    for (int64_t a = 0; a < t; a++) s->ysg[a] = pb->y[md->rows[a]] == 0 ? -1.0 : 1.0;
    if (md->U) {
        if (md->XU_all) {   /* the start every model of the call shares: its products computed once */
            for (int64_t a = 0; a < t; a++)
                memcpy(s->XU + a * C, md->XU_all + (int64_t)md->rows[a] * C, (size_t)C * sizeof(double));
            memcpy(s->UU, md->UU_all, (size_t)(C * C) * sizeof(double));
            memcpy(s->VU, md->VU_all, (size_t)(r * C) * sizeof(double));
        } else {
            dual_start_products(pb, md->U, t, md->rows, r, s->acc, s->XU, s->UU, s->VU, 1);
        }
    }
    /* the start: beta = I (the start's weights), b = its intercept, the rest zero */
    memset(th, 0, (size_t)P * sizeof(double));
    int cold = 1;
    for (int64_t k = 0; k < pb->D * C; k++)
        if (coef[k] != 0.0) { cold = 0; break; }
    for (int k = 0; k < C; k++) {
        if (md->U) th[k * m + oU + k] = 1.0;
        th[k * m + ob] = coef[F * C + k];
    }
    if (cold) gtol_j = -1.0;
    dual_gmul(md, th, Gth);

    f = dual_eval(md, th, Gth, c);
    n_eval++;
    dual_watch watch;
    watch.n = md->n_watch0;
    if (watch.n > 0) {
        /* the features the caller names (feature f's C entries f C .. f C + C - 1, in order) */
        for (int q = 0; q < watch.n; q++) watch.idx[q] = pb->watch[q / C] * C + q % C;
        for (int64_t i = 0; i < t; i++)
            memcpy(s->Xw + i * DUAL_WATCH, md->Xw_all + (int64_t)md->rows[i] * DUAL_WATCH, DUAL_WATCH * sizeof(double));
    }
    if (!isfinite(f)) { status = DUAL_NOT_FINITE; goto done; }
    dual_gmul(md, c, Gc);
    if (gtol_j < 0.0) {
        /* a cold start's tolerance min(gtol, start_rtol g0), g0 its largest gradient entry: gtol
         * when even the least g0 can be (||g||_2 / sqrt(D C)) gives that, else computed */
        const double nrm2 = sqrt(fmax(dual_vdot(P, c, Gc), 0.0));
        if (pb->start_rtol * 0.99 * nrm2 / sqrt((double)(pb->D * C)) >= pb->gtol) {
            gtol_j = pb->gtol;
        } else {
            double g0 = dual_max_abs(md, c, &watch, -1.0);
            gtol_j = pb->gtol <= pb->start_rtol * g0 ? pb->gtol : pb->start_rtol * g0;
            if (g0 <= gtol_j) { status = DUAL_CONVERGED; goto done; }
        }
    } else if (dual_converged(md, c, Gc, gtol_j, &watch)) {
        status = DUAL_CONVERGED;
        goto done;
    }
    if (pb->max_iter <= 0) { status = DUAL_MAX_ITER; goto done; }

    for (;;) {
        /* direction: the two-loop recursion with the metric G (q in p, G q in Gp) */
        memcpy(p, c, (size_t)P * sizeof(double));
        memcpy(Gp, Gc, (size_t)P * sizeof(double));
        for (int q = 0; q < mem_len; q++) {
            int idx = (mem_head - 1 - q + hist) % hist;
            double a = s->rho[idx] * dual_vdot(P, s->GS + idx * P, p);
            s->alph[idx] = a;
            const double *Yi = s->Y + idx * P, *GYi = s->GY + idx * P;
            for (int64_t k = 0; k < P; k++) { p[k] -= a * Yi[k]; Gp[k] -= a * GYi[k]; }
        }
        double gamma = 1.0;
        if (mem_len > 0) {
            int newest = (mem_head - 1 + hist) % hist;
            double yhy;
            if (r > 0) {
                yhy = dual_yh0y(md, s->Y + newest * P, s->GY + newest * P);
            } else {
                yhy = dual_vdot(P, s->Y + newest * P, s->GY + newest * P);
            }
            if (yhy > 0.0) gamma = 1.0 / (s->rho[newest] * yhy);
        }
        if (r > 0) {
            dual_h0(md, p, Gp, s->h, s->Gh);
            for (int64_t k = 0; k < P; k++) { p[k] = gamma * s->h[k]; Gp[k] = gamma * s->Gh[k]; }
        } else {
            for (int64_t k = 0; k < P; k++) { p[k] *= gamma; Gp[k] *= gamma; }
        }
        for (int q = mem_len - 1; q >= 0; q--) {
            int idx = (mem_head - 1 - q + hist) % hist;
            double b = s->rho[idx] * dual_vdot(P, s->GY + idx * P, p);
            double w = s->alph[idx] - b;
            const double *Si = s->S + idx * P, *GSi = s->GS + idx * P;
            for (int64_t k = 0; k < P; k++) { p[k] += w * Si[k]; Gp[k] += w * GSi[k]; }
        }
        for (int64_t k = 0; k < P; k++) { p[k] = -p[k]; Gp[k] = -Gp[k]; }
        gp = dual_vdot(P, c, Gp);
        alpha = 1.0;
        if (!(gp < 0.0)) {
            /* not a descent direction (possible for non-convex losses): restart from -g */
            mem_len = 0;
            for (int64_t k = 0; k < P; k++) { p[k] = -c[k]; Gp[k] = -Gc[k]; }
            gp = -dual_vdot(P, c, Gc);
            if (r == 0 && n_iter == 0) {
                double gg = -gp;
                alpha = gg > 1.0 ? 1.0 / sqrt(gg) : 1.0;
            }
        } else if (r == 0 && n_iter == 0) {
            /* the first step without H0 of length at most 1, as the feature-space solver's */
            double gg = dual_vdot(P, c, Gc);
            alpha = gg > 1.0 ? 1.0 / sqrt(gg) : 1.0;
        }
        n_ls = 0;
        /* line search: Armijo backtracking by the quadratic model, as the feature-space solver */
        for (;;) {
            for (int64_t k = 0; k < P; k++) { tht[k] = th[k] + alpha * p[k]; Gtht[k] = Gth[k] + alpha * Gp[k]; }
            ft = dual_eval(md, tht, Gtht, ct);
            n_eval++;
            if (isfinite(ft) && ft <= f + 1e-4 * alpha * gp) break;
            n_ls++;
            if (n_ls > pb->max_ls) { status = DUAL_LINE_SEARCH; goto done; }
            double a_new;
            if (isfinite(ft)) {
                double denom = 2.0 * (ft - f - gp * alpha);
                a_new = denom > 0.0 ? -gp * alpha * alpha / denom : 0.5 * alpha;
                if (a_new < 0.1 * alpha) a_new = 0.1 * alpha;
                if (a_new > 0.5 * alpha) a_new = 0.5 * alpha;
            } else {
                a_new = 0.1 * alpha;
            }
            alpha = a_new;
        }
        /* accepted */
        dual_gmul(md, ct, Gct);
        {
            double *Si = s->S + mem_head * P, *Yi = s->Y + mem_head * P;
            double *GSi = s->GS + mem_head * P, *GYi = s->GY + mem_head * P;
            for (int64_t k = 0; k < P; k++) {
                Si[k] = tht[k] - th[k];
                GSi[k] = Gtht[k] - Gth[k];
                Yi[k] = ct[k] - c[k];
                GYi[k] = Gct[k] - Gc[k];
            }
            double sy = dual_vdot(P, Si, GYi), yy = dual_vdot(P, Yi, GYi);
            if (sy > 2.2e-16 * yy && sy > 0.0) {
                s->rho[mem_head] = 1.0 / sy;
                mem_head = (mem_head + 1) % hist;
                if (mem_len < hist) mem_len++;
            }
        }
        double f_old = f;
        f = ft;
        memcpy(th, tht, (size_t)P * sizeof(double));
        memcpy(Gth, Gtht, (size_t)P * sizeof(double));
        memcpy(c, ct, (size_t)P * sizeof(double));
        memcpy(Gc, Gct, (size_t)P * sizeof(double));
        n_iter++;
        if (n_iter % DUAL_REFRESH == 0) {
            /* G th is carried from step to step (G th + alpha G p), so its rounding adds up: every
             * DUAL_REFRESH steps it is computed again from th, and f, c and G c with it */
            dual_gmul(md, th, Gth);
            f = dual_eval(md, th, Gth, c);
            n_eval++;
            if (!isfinite(f)) { status = DUAL_NOT_FINITE; break; }
            dual_gmul(md, c, Gc);
        }
        if (dual_converged(md, c, Gc, gtol_j, &watch)) { status = DUAL_CONVERGED; break; }
        double denom = fabs(f_old);
        if (fabs(ft) > denom) denom = fabs(ft);
        if (denom < 1.0) denom = 1.0;
        if (f_old - ft <= pb->ftol * denom) { status = DUAL_CONVERGED; break; }
        if (n_iter >= pb->max_iter) { status = DUAL_MAX_ITER; break; }
    }
done:
    {
        /* the weights but X_S' alpha (the caller adds it for all models at once: one GEMM),
         * and alpha */
        double *out = s->acc + C * F;
        dual_to_features(md, th, out, 0);
        memcpy(coef, out, (size_t)(pb->D * C) * sizeof(double));
        for (int64_t a = 0; a < t; a++)
            for (int k = 0; k < C; k++) alpha_out[a * C + k] = th[k * m + a];
        /* the coefficients on V, U and the intercept, for logits from K (afl_dual_train) */
        if (md->tail_out)
            for (int k = 0; k < C; k++)
                memcpy(md->tail_out + k * (r + C + 1), th + k * m + md->oV, (size_t)(r + C + 1) * sizeof(double));
    }
    *n_iter_out = n_iter;
    *status_out = status;
    *fval_out = f;
    *n_eval_out = n_eval;
    return 0;
}

#undef dual_ce_terms
#undef dual_converged
#undef dual_eval
#undef dual_gmul
#undef dual_h0
#undef dual_max_abs
#undef dual_start_products
#undef dual_to_features
#undef dual_train_model
#undef dual_vdot
#undef dual_watched
#undef dual_yh0y
#undef DUAL_FN
