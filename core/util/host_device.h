#pragma once
// KVEVICT_HOST_DEVICE marks inline functions that nvcc compiles for both the host and the device
// and g++ compiles as plain host functions: one body for a kernel and its CPU twin, so a CPU test
// of the twin exercises the very code the kernel runs (and counter_rng.h's Philox on both sides).
#if defined(__CUDACC__)
#define KVEVICT_HOST_DEVICE __host__ __device__
#else
#define KVEVICT_HOST_DEVICE
#endif
