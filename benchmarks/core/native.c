/* The `native` kernels (benchmarks/native.py builds this file with the machine's C compiler and
 * loads it through ctypes; no Python headers, no torch headers, so it builds in about a second).
 *
 * Every product is row-parallel over a CSR: a thread owns a contiguous range of output rows, chosen so
 * that each thread gets about the same number of edges plus rows, and writes only those rows (no
 * atomics, results do not depend on the thread count). Within a row, edges are summed in CSR order,
 * as torch's CSR kernel does, so results agree with `kernel=spmm` to fp32 rounding. Threads are plain
 * pthreads started per call, not OpenMP: torch brings its own OpenMP runtime, and a second one in the
 * same process would spin against it.
 *
 * Dropout's mask is a counter-based hash of (key, node id * width + column): any element's keep bit
 * can be recomputed from the key and the row's node alone, so backward re-derives the mask instead of
 * keeping it, and the mask depends neither on how the work is split between threads nor on which
 * rank holds the row, at which position (benchmarks/draws.py computes the same hash in torch).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define MAX_THREADS 256

typedef void (*chunk_fn)(void *args, int64_t lo, int64_t hi);

typedef struct {
    chunk_fn fn;
    void *args;
    int64_t lo, hi;
} chunk_t;

static void *run_chunk(void *p) {
    chunk_t *c = (chunk_t *)p;
    c->fn(c->args, c->lo, c->hi);
    return NULL;
}

/* Split rows [0, rows) into `threads` ranges of about equal cost (edges + rows, read off indptr, or
 * rows alone when indptr is NULL) and run fn on each, the last in the calling thread. */
static void parallel_rows(chunk_fn fn, void *args, const int32_t *indptr, int64_t rows, int threads) {
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (rows < 2 * threads) threads = 1;
    chunk_t chunks[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int64_t total = indptr ? (int64_t)indptr[rows] + rows : rows, lo = 0;
    for (int t = 0; t < threads; t++) {
        int64_t hi = rows;
        if (t < threads - 1) {
            int64_t target = total * (t + 1) / threads, a = lo, b = rows;  /* first row whose cost reaches it */
            while (a < b) {
                int64_t m = (a + b) / 2;
                int64_t cost = indptr ? (int64_t)indptr[m] + m : m;
                if (cost < target) a = m + 1; else b = m;
            }
            hi = a;
        }
        chunks[t] = (chunk_t){fn, args, lo, hi};
        lo = hi;
    }
    int started[MAX_THREADS];
    for (int t = 0; t < threads - 1; t++) {
        started[t] = pthread_create(&ids[t], NULL, run_chunk, &chunks[t]) == 0;
        if (!started[t]) run_chunk(&chunks[t]);  /* no thread to be had: run that range here */
    }
    run_chunk(&chunks[threads - 1]);
    for (int t = 0; t < threads - 1; t++)
        if (started[t]) pthread_join(ids[t], NULL);
}

/* ------------------------------------------------------------------ out = A @ X */
typedef struct {
    const int32_t *indptr, *indices;
    const float *values, *x;
    float *out;
    int64_t width;
} spmm_args;

/* A row's output is summed in registers, a tile of columns at a time (GCC's vector extension: AVX-512,
 * AVX2 or NEON, whatever -march=native gives), then stored once; the next tile runs over the same
 * edges again, whose indices are in cache by then. While the first tile runs, the whole source row of
 * the edge PREFETCH ahead is requested, so the random row reads overlap (2, 4 and 8 ahead timed alike
 * here). A whole 256-wide row in registers beat tiles of 64, which beat summing in memory, in scratch
 * comparisons on the 200k-node graph; python -m benchmarks.tools.kernels reports the kernel as it is
 * against the no-reuse bound. */
#ifdef __AVX512F__
#define WIDE 16  /* accumulators (of 16 lanes) in the widest tile: half of AVX-512's 32 registers */
#else
#define WIDE 4   /* AVX2's 16 registers hold 4 of them twice over (each is two) */
#endif
#define TILE 64  /* the narrower tile, 4 accumulators; narrower rows are summed in memory */
#define PREFETCH 4
typedef float vec16 __attribute__((vector_size(64), aligned(4)));

static inline void prefetch_row(const float *row, int64_t width) {
    for (int64_t b = 0; b < width; b += 16) __builtin_prefetch(row + b);
}

/* One tile, columns [f0, f0 + 16 nv) of output row o, summed in registers over edges [begin, end);
 * `first`: the row's first tile, which prefetches the whole source row PREFETCH edges ahead (up to
 * `stop`, the chunk's last edge, so across rows). Always inlined with a constant nv, so the
 * accumulators are registers. */
static inline __attribute__((always_inline)) void spmm_tile(const spmm_args *a, int32_t begin, int32_t end,
                                                            int32_t stop, float *o, int64_t f0, const int nv,
                                                            int first) {
    const int64_t F = a->width;
    vec16 c[WIDE];
    for (int k = 0; k < nv; k++) c[k] = (vec16){0};
    for (int32_t e = begin; e < end; e++) {
        if (first && e + PREFETCH < stop) prefetch_row(a->x + (int64_t)a->indices[e + PREFETCH] * F, F);
        const float *xr = a->x + (int64_t)a->indices[e] * F + f0;
        const float w = a->values[e];
        for (int k = 0; k < nv; k++) c[k] += w * *(const vec16 *)(xr + 16 * k);
    }
    for (int k = 0; k < nv; k++) *(vec16 *)(o + f0 + 16 * k) = c[k];
}

static void spmm_chunk(void *p, int64_t lo, int64_t hi) {
    const spmm_args *a = (const spmm_args *)p;
    const int64_t F = a->width;
    const int32_t stop = a->indptr[hi];
    for (int64_t r = lo; r < hi; r++) {
        const int32_t begin = a->indptr[r], end = a->indptr[r + 1];
        float *restrict o = a->out + r * F;
        int64_t f0 = 0;
        for (; f0 + 16 * WIDE <= F; f0 += 16 * WIDE) spmm_tile(a, begin, end, stop, o, f0, WIDE, f0 == 0);
        for (; f0 + TILE <= F; f0 += TILE) spmm_tile(a, begin, end, stop, o, f0, TILE / 16, f0 == 0);
        if (f0 < F) {  /* the last F % TILE columns */
            memset(o + f0, 0, (F - f0) * sizeof(float));
            for (int32_t e = begin; e < end; e++) {
                if (f0 == 0 && e + PREFETCH < stop) prefetch_row(a->x + (int64_t)a->indices[e + PREFETCH] * F, F);
                const float w = a->values[e];
                const float *restrict xr = a->x + (int64_t)a->indices[e] * F;
                for (int64_t f = f0; f < F; f++) o[f] += w * xr[f];
            }
        }
    }
}

void gnn_spmm(const int32_t *indptr, const int32_t *indices, const float *values, const float *x, float *out,
              int64_t rows, int64_t width, int threads) {
    spmm_args a = {indptr, indices, values, x, out, width};
    parallel_rows(spmm_chunk, &a, indptr, rows, threads);
}

/* ------------------------------------------------------------------ attention: out[v,h,:] = sum_e alpha[e,h] z[u,h,:] */
typedef struct {
    const int32_t *indptr, *indices, *perm;  /* perm: alpha's row of CSR position e (NULL: e itself) */
    const float *alpha, *z;
    float *out;
    int64_t heads, channels;
} head_spmm_args;

static void head_spmm_chunk(void *p, int64_t lo, int64_t hi) {
    const head_spmm_args *a = (const head_spmm_args *)p;
    const int64_t H = a->heads, C = a->channels, F = H * C;
    const int32_t stop = a->indptr[hi];
    const int tiled = C % 16 == 0 && F % TILE == 0;  /* every 16 lanes of a tile lie within one head */
    for (int64_t r = lo; r < hi; r++) {
        const int32_t begin = a->indptr[r], end = a->indptr[r + 1];
        float *restrict o = a->out + r * F;
        if (tiled) {
            for (int64_t f0 = 0; f0 < F; f0 += TILE) {
                vec16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
                const int64_t h0 = f0 / C, h1 = (f0 + 16) / C, h2 = (f0 + 32) / C, h3 = (f0 + 48) / C;
                for (int32_t e = begin; e < end; e++) {
                    if (f0 == 0 && e + PREFETCH < stop) prefetch_row(a->z + (int64_t)a->indices[e + PREFETCH] * F, F);
                    const float *al = a->alpha + (int64_t)(a->perm ? a->perm[e] : e) * H;
                    const float *zr = a->z + (int64_t)a->indices[e] * F + f0;
                    c0 += al[h0] * *(const vec16 *)zr;
                    c1 += al[h1] * *(const vec16 *)(zr + 16);
                    c2 += al[h2] * *(const vec16 *)(zr + 32);
                    c3 += al[h3] * *(const vec16 *)(zr + 48);
                }
                *(vec16 *)(o + f0) = c0;
                *(vec16 *)(o + f0 + 16) = c1;
                *(vec16 *)(o + f0 + 32) = c2;
                *(vec16 *)(o + f0 + 48) = c3;
            }
            continue;
        }
        memset(o, 0, F * sizeof(float));
        for (int32_t e = begin; e < end; e++) {
            if (e + PREFETCH < stop) prefetch_row(a->z + (int64_t)a->indices[e + PREFETCH] * F, F);
            const float *restrict al = a->alpha + (int64_t)(a->perm ? a->perm[e] : e) * H;
            const float *restrict zr = a->z + (int64_t)a->indices[e] * F;
            for (int64_t h = 0; h < H; h++) {
                const float w = al[h];
                for (int64_t c = 0; c < C; c++) o[h * C + c] += w * zr[h * C + c];
            }
        }
    }
}

void gnn_head_spmm(const int32_t *indptr, const int32_t *indices, const int32_t *perm, const float *alpha,
                   const float *z, float *out, int64_t rows, int64_t heads, int64_t channels, int threads) {
    head_spmm_args a = {indptr, indices, perm, alpha, z, out, heads, channels};
    parallel_rows(head_spmm_chunk, &a, indptr, rows, threads);
}

/* ------------------------------------------------------------------ SDDMM: out[e,h] = g[v,h,:] . z[u,h,:] */
typedef struct {
    const int32_t *indptr, *indices;
    const float *g, *z;
    float *out;
    int64_t heads, channels;
} sddmm_args;

static void sddmm_chunk(void *p, int64_t lo, int64_t hi) {
    const sddmm_args *a = (const sddmm_args *)p;
    const int64_t H = a->heads, C = a->channels, F = H * C;
    const int32_t stop = a->indptr[hi];
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict gr = a->g + r * F;
        const int32_t end = a->indptr[r + 1];
        for (int32_t e = a->indptr[r]; e < end; e++) {
            if (e + PREFETCH < stop) prefetch_row(a->z + (int64_t)a->indices[e + PREFETCH] * F, F);
            const float *restrict zr = a->z + (int64_t)a->indices[e] * F;
            for (int64_t h = 0; h < H; h++) {
                const float *gh = gr + h * C, *zh = zr + h * C;
                float s = 0.f;
                int64_t c = 0;
                if (C >= 16) {  /* 16 partial sums, added at the end: a dependent chain of C adds is latency-bound */
                    vec16 acc = {0};
                    for (; c + 16 <= C; c += 16) acc += *(const vec16 *)(gh + c) * *(const vec16 *)(zh + c);
                    for (int k = 0; k < 16; k++) s += acc[k];
                }
                for (; c < C; c++) s += gh[c] * zh[c];
                a->out[(int64_t)e * H + h] = s;
            }
        }
    }
}

void gnn_head_sddmm(const int32_t *indptr, const int32_t *indices, const float *g, const float *z, float *out,
                    int64_t rows, int64_t heads, int64_t channels, int threads) {
    sddmm_args a = {indptr, indices, g, z, out, heads, channels};
    parallel_rows(sddmm_chunk, &a, indptr, rows, threads);
}

/* ------------------------------------------------------------------ dropout */
static inline uint32_t fmix32(uint32_t h) {  /* MurmurHash3's finaliser: a bijection of 32-bit words */
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* The keep bit of element i under key (k1, k2): two rounds, the keys entering each, so masks of two
 * keys are not shifted copies of one sequence. */
static inline uint32_t dropout_hash(uint64_t i, uint32_t k1, uint32_t k2) {
    return fmix32(fmix32((uint32_t)i ^ k1) ^ (k2 + (uint32_t)(i >> 32) * 0x9e3779b9u));
}

/* Dropout keyed by node: element (r, c) of a rows x width matrix is kept when
 * dropout_hash(ids[r] * width + c) >= threshold, so a row's mask is a function of the node it belongs
 * to (its dataset id), whichever rank holds the row and at whatever position. out may be x. */
typedef struct {
    const float *x;
    float *out;
    const int64_t *ids;
    int64_t width;
    uint32_t k1, k2, threshold;
    float scale;
} row_dropout_args;

static void row_dropout_chunk(void *p, int64_t lo, int64_t hi) {
    const row_dropout_args *a = (const row_dropout_args *)p;
    const int64_t w = a->width;
    const uint32_t k1 = a->k1, k2 = a->k2, t = a->threshold;
    const float s = a->scale;
    for (int64_t r = lo; r < hi; r++) {
        const uint64_t base = (uint64_t)a->ids[r] * (uint64_t)w;
        const float *restrict x = a->x + r * w;
        float *restrict out = a->out + r * w;
        for (int64_t c = 0; c < w; c++) out[c] = dropout_hash(base + (uint64_t)c, k1, k2) >= t ? x[c] * s : 0.f;
    }
}

void gnn_dropout_rows(const float *x, float *out, const int64_t *ids, int64_t rows, int64_t width, uint32_t k1,
                      uint32_t k2, uint32_t threshold, float scale, int threads) {
    row_dropout_args a = {x, out, ids, width, k1, k2, threshold, scale};
    parallel_rows(row_dropout_chunk, &a, NULL, rows, threads);
}

/* The hash alone, of any element indices: out[j] = dropout_hash(i[j]) as a 32-bit value in an int64, the
 * keyed uniforms a sampler draws per node (benchmarks/draws.py `element_hash`). Chunks of rows of one. */
typedef struct {
    const int64_t *i;
    int64_t *out;
    uint32_t k1, k2;
} hash_args;

static void hash_chunk(void *p, int64_t lo, int64_t hi) {
    const hash_args *a = (const hash_args *)p;
    for (int64_t j = lo; j < hi; j++) a->out[j] = (int64_t)dropout_hash((uint64_t)a->i[j], a->k1, a->k2);
}

void gnn_element_hash(const int64_t *i, int64_t *out, int64_t n, uint32_t k1, uint32_t k2, int threads) {
    hash_args a = {i, out, k1, k2};
    parallel_rows(hash_chunk, &a, NULL, n, threads);
}

/* ------------------------------------------------------------------ GAT's edge softmax */
/* alpha[e,h] = softmax over row v's edges of LeakyReLU(el[u,h] + er[v,h]) (u = indices[e]); rows without
 * edges have none. One pass per row for the maximum, one for exp and the sum, one to normalise. */
typedef struct {
    const int32_t *indptr, *indices;
    const float *el, *er, *alpha, *dalpha;
    float *out, *der;
    int64_t heads;
    float slope;
} softmax_args;

static inline float leaky(float x, float slope) { return x > 0.f ? x : x * slope; }

static void softmax_chunk(void *p, int64_t lo, int64_t hi) {
    const softmax_args *a = (const softmax_args *)p;
    const int64_t H = a->heads;
    float top[64], sum[64];
    for (int64_t r = lo; r < hi; r++) {
        const int32_t begin = a->indptr[r], end = a->indptr[r + 1];
        const float *er = a->er + r * H;
        for (int64_t h0 = 0; h0 < H; h0 += 64) {  /* heads in groups of 64: no row has more in practice */
            const int64_t h1 = H - h0 < 64 ? H : h0 + 64;
            for (int64_t h = h0; h < h1; h++) top[h - h0] = -__builtin_inff(), sum[h - h0] = 0.f;
            for (int32_t e = begin; e < end; e++) {
                const float *el = a->el + (int64_t)a->indices[e] * H;
                for (int64_t h = h0; h < h1; h++) {
                    const float x = leaky(el[h] + er[h], a->slope);
                    if (x > top[h - h0]) top[h - h0] = x;
                }
            }
            for (int32_t e = begin; e < end; e++) {
                const float *el = a->el + (int64_t)a->indices[e] * H;
                for (int64_t h = h0; h < h1; h++) {
                    const float x = __builtin_expf(leaky(el[h] + er[h], a->slope) - top[h - h0]);
                    a->out[(int64_t)e * H + h] = x;
                    sum[h - h0] += x;
                }
            }
            for (int32_t e = begin; e < end; e++)
                for (int64_t h = h0; h < h1; h++) a->out[(int64_t)e * H + h] /= sum[h - h0];
        }
    }
}

void gnn_edge_softmax(const int32_t *indptr, const int32_t *indices, const float *el, const float *er, float *alpha,
                      int64_t rows, int64_t heads, float slope, int threads) {
    softmax_args a = {indptr, indices, el, er, NULL, NULL, alpha, NULL, heads, slope};
    parallel_rows(softmax_chunk, &a, indptr, rows, threads);
}

/* Backward, given dalpha: the gradient of the edge logits before LeakyReLU, dx[e,h] =
 * alpha (dalpha - sum over the row of alpha dalpha) LeakyReLU'(x), into out; and er's gradient, the
 * row sums of dx, into der. el's gradient is the column sums of dx (`gnn_gather_sum` on A^T). */
static void softmax_backward_chunk(void *p, int64_t lo, int64_t hi) {
    const softmax_args *a = (const softmax_args *)p;
    const int64_t H = a->heads;
    for (int64_t r = lo; r < hi; r++) {
        const int32_t begin = a->indptr[r], end = a->indptr[r + 1];
        const float *er = a->er + r * H;
        float *der = a->der + r * H;
        for (int64_t h = 0; h < H; h++) {
            float dot = 0.f;
            for (int32_t e = begin; e < end; e++) dot += a->alpha[(int64_t)e * H + h] * a->dalpha[(int64_t)e * H + h];
            float total = 0.f;
            for (int32_t e = begin; e < end; e++) {
                const int64_t k = (int64_t)e * H + h;
                const float x = a->el[(int64_t)a->indices[e] * H + h] + er[h];
                const float dx = a->alpha[k] * (a->dalpha[k] - dot) * (x > 0.f ? 1.f : a->slope);
                a->out[k] = dx;
                total += dx;
            }
            der[h] = total;
        }
    }
}

void gnn_edge_softmax_backward(const int32_t *indptr, const int32_t *indices, const float *el, const float *er,
                               const float *alpha, const float *dalpha, float *dx, float *der, int64_t rows,
                               int64_t heads, float slope, int threads) {
    softmax_args a = {indptr, indices, el, er, alpha, dalpha, dx, der, heads, slope};
    parallel_rows(softmax_backward_chunk, &a, indptr, rows, threads);
}

/* out[r,h] = sum over the CSR entries e of row r of values[perm[e],h]: per-edge values summed by
 * source when the CSR is A^T and perm its position in A. */
typedef struct {
    const int32_t *indptr, *perm;
    const float *values;
    float *out;
    int64_t heads;
} gather_args;

static void gather_chunk(void *p, int64_t lo, int64_t hi) {
    const gather_args *a = (const gather_args *)p;
    const int64_t H = a->heads;
    for (int64_t r = lo; r < hi; r++) {
        float *o = a->out + r * H;
        for (int64_t h = 0; h < H; h++) o[h] = 0.f;
        for (int32_t e = a->indptr[r]; e < a->indptr[r + 1]; e++) {
            const float *v = a->values + (int64_t)a->perm[e] * H;
            for (int64_t h = 0; h < H; h++) o[h] += v[h];
        }
    }
}

void gnn_gather_sum(const int32_t *indptr, const int32_t *perm, const float *values, float *out, int64_t rows,
                    int64_t heads, int threads) {
    gather_args a = {indptr, perm, values, out, heads};
    parallel_rows(gather_chunk, &a, indptr, rows, threads);
}
