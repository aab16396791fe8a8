// The CUDA kernels alone, compiled into the fatbin CuPy loads (kernels/cuda/CMakeLists.txt).
#include "sum_tree_kernels.cuh"
