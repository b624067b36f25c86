/* OpenMP shim: the extension builds and runs (single-threaded) without OpenMP. */
#ifndef AFL_OMP_H
#define AFL_OMP_H
#ifdef _OPENMP
#include <omp.h>
#define AFL_HAVE_OPENMP 1
#else
#define AFL_HAVE_OPENMP 0
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif
#endif
