// A stand-in for an old or partial CUDA driver library (tests only): it exports the driver entry
// points kvevict binds (jit/cuda_driver.cpp) except cuMemsetD8_v2 and cuEventElapsedTime_v2, and
// has the unversioned cuEventElapsedTime that older drivers export instead. Loading it must be
// refused for the missing cuMemsetD8_v2 even though the fallback name for the event timer is there.
// Only the names matter (the loader looks them up with dlsym); every body returns CUDA_SUCCESS.
extern "C" {
#define KVEVICT_FAKE_ENTRY(name) \
  int name() { return 0; }
KVEVICT_FAKE_ENTRY(cuInit)
KVEVICT_FAKE_ENTRY(cuDriverGetVersion)
KVEVICT_FAKE_ENTRY(cuGetErrorString)
KVEVICT_FAKE_ENTRY(cuDeviceGetCount)
KVEVICT_FAKE_ENTRY(cuDeviceGet)
KVEVICT_FAKE_ENTRY(cuDeviceGetName)
KVEVICT_FAKE_ENTRY(cuDeviceGetAttribute)
KVEVICT_FAKE_ENTRY(cuDeviceTotalMem_v2)
KVEVICT_FAKE_ENTRY(cuDevicePrimaryCtxRetain)
KVEVICT_FAKE_ENTRY(cuCtxSetCurrent)
KVEVICT_FAKE_ENTRY(cuCtxSynchronize)
KVEVICT_FAKE_ENTRY(cuModuleLoadData)
KVEVICT_FAKE_ENTRY(cuModuleUnload)
KVEVICT_FAKE_ENTRY(cuModuleGetFunction)
KVEVICT_FAKE_ENTRY(cuModuleGetGlobal_v2)
KVEVICT_FAKE_ENTRY(cuLaunchKernel)
KVEVICT_FAKE_ENTRY(cuMemAlloc_v2)
KVEVICT_FAKE_ENTRY(cuMemFree_v2)
KVEVICT_FAKE_ENTRY(cuMemcpyHtoD_v2)
KVEVICT_FAKE_ENTRY(cuMemcpyDtoH_v2)
KVEVICT_FAKE_ENTRY(cuEventCreate)
KVEVICT_FAKE_ENTRY(cuEventRecord)
KVEVICT_FAKE_ENTRY(cuEventSynchronize)
KVEVICT_FAKE_ENTRY(cuEventElapsedTime)
KVEVICT_FAKE_ENTRY(cuEventDestroy_v2)
}
