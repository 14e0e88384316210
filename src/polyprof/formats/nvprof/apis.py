"""The names of the CUDA runtime and driver calls nvprof records by number (``cbid``).

nvprof's ``CUPTI_ACTIVITY_KIND_RUNTIME`` and ``_DRIVER`` rows name their call only by
its CUPTI callback id (``cupti_runtime_cbid.h``, ``cupti_driver_cbid.h``: the numbers
never change meaning between CUDA versions; a call's later versions get new numbers,
``_v2``..., listed here under the one name, as Nsight's export names them without the
suffix). The calls a program commonly makes are listed below; any other is named by
cupti-python's enums when that package is installed, else ``cuda API <cbid>`` /
``cu API <cbid>`` (as polyprof's CUPTI plugin names a call it does not know).
"""

from __future__ import annotations

import functools

_RUNTIME: dict[str, tuple[int, ...]] = {
    "cudaDriverGetVersion": (1,), "cudaRuntimeGetVersion": (2,), "cudaGetDeviceCount": (3,),
    "cudaGetDeviceProperties": (4, 440), "cudaConfigureCall": (8,), "cudaSetupArgument": (9,), "cudaGetLastError":
    (10,), "cudaPeekAtLastError": (11,), "cudaLaunch": (13,), "cudaFuncSetCacheConfig": (14,),
    "cudaFuncGetAttributes": (15,), "cudaSetDevice": (16,), "cudaGetDevice": (17,), "cudaSetDeviceFlags": (19,),
    "cudaMalloc": (20,), "cudaMallocPitch": (21,), "cudaFree": (22,), "cudaMallocHost": (25,), "cudaFreeHost":
    (26,), "cudaHostAlloc": (27,), "cudaHostGetDevicePointer": (28,), "cudaMemGetInfo": (30,), "cudaMemcpy": (31,),
    "cudaMemcpy2D": (32,), "cudaMemcpyToSymbol": (39,), "cudaMemcpyFromSymbol": (40,), "cudaMemcpyAsync": (41,),
    "cudaMemcpy2DAsync": (44,), "cudaMemcpyToSymbolAsync": (47,), "cudaMemcpyFromSymbolAsync": (48,), "cudaMemset":
    (49,), "cudaMemset2D": (50,), "cudaMemsetAsync": (51,), "cudaMemset2DAsync": (52,), "cudaThreadSynchronize":
    (126,), "cudaStreamCreate": (129,), "cudaStreamDestroy": (130, 201), "cudaStreamSynchronize": (131,),
    "cudaStreamQuery": (132,), "cudaEventCreate": (133,), "cudaEventCreateWithFlags": (134,), "cudaEventRecord":
    (135,), "cudaEventDestroy": (136,), "cudaEventSynchronize": (137,), "cudaEventQuery": (138,),
    "cudaEventElapsedTime": (139, 486), "cudaStreamWaitEvent": (147,), "cudaPointerGetAttributes": (151,),
    "cudaHostRegister": (152,), "cudaHostUnregister": (153,), "cudaDeviceCanAccessPeer": (154,),
    "cudaDeviceEnablePeerAccess": (155,), "cudaMemcpyPeer": (160,), "cudaMemcpyPeerAsync": (161,),
    "cudaDeviceReset": (164,), "cudaDeviceSynchronize": (165,), "cudaDeviceGetPCIBusId": (174,),
    "cudaStreamCreateWithFlags": (198,), "cudaDeviceGetAttribute": (200,), "cudaStreamCreateWithPriority": (202,),
    "cudaDeviceGetStreamPriorityRange": (205,), "cudaMallocManaged": (206,),
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor": (207, 210), "cudaLaunchKernel": (211,), "cudaMemPrefetchAsync":
    (252, 449), "cudaLaunchCooperativeKernel": (269,), "cudaLaunchCooperativeKernelMultiDevice": (272,),
    "cudaFuncSetAttribute": (273,), "cudaLaunchHostFunc": (284,), "cudaGraphInstantiate": (310, 443),
    "cudaGraphLaunch": (311,), "cudaStreamBeginCapture": (315,), "cudaStreamEndCapture": (319,)}
_DRIVER: dict[str, tuple[int, ...]] = {
    "cuInit": (1,), "cuDriverGetVersion": (2,), "cuDeviceGet": (3,), "cuDeviceGetCount": (4,), "cuDeviceGetName":
    (5,), "cuDeviceComputeCapability": (6,), "cuDeviceTotalMem": (7, 259), "cuDeviceGetAttribute": (9,),
    "cuCtxCreate": (10, 235, 645), "cuCtxDestroy": (11, 322), "cuCtxDetach": (13,), "cuCtxPushCurrent": (14, 323),
    "cuCtxPopCurrent": (15, 324), "cuCtxGetDevice": (16,), "cuCtxSynchronize": (17,), "cuModuleLoad": (18,),
    "cuModuleLoadData": (19,), "cuModuleLoadDataEx": (20,), "cuModuleLoadFatBinary": (21,), "cuModuleUnload": (22,),
    "cuModuleGetFunction": (23,), "cuModuleGetGlobal": (24, 241), "cuMemGetInfo": (27, 242), "cuMemAlloc": (29,
    243), "cuMemFree": (33, 245), "cuMemAllocHost": (37, 294), "cuMemFreeHost": (38,), "cuMemHostAlloc": (39, 271),
    "cuMemcpyHtoD": (43, 276), "cuMemcpyDtoH": (45, 278), "cuMemcpyDtoD": (47, 280), "cuMemcpyHtoDAsync": (60, 277),
    "cuMemcpyDtoHAsync": (62, 279), "cuMemcpyDtoDAsync": (64, 281), "cuMemsetD8": (71, 249), "cuMemsetD32": (75,
    251), "cuFuncSetBlockShape": (83,), "cuFuncGetAttribute": (85,), "cuLaunch": (115,), "cuLaunchGrid": (116,),
    "cuEventCreate": (118,), "cuEventRecord": (119,), "cuEventQuery": (120,), "cuEventSynchronize": (121,),
    "cuEventDestroy": (122, 325), "cuStreamCreate": (124,), "cuStreamSynchronize": (126,), "cuStreamDestroy": (127,
    326), "cuMemsetD8Async": (216,), "cuMemsetD32Async": (220,), "cuMemcpy": (248, 305), "cuStreamWaitEvent":
    (295,), "cuCtxSetCurrent": (303,), "cuCtxGetCurrent": (304,), "cuMemcpyAsync": (306,), "cuLaunchKernel": (307,),
    "cuPointerGetAttribute": (310,), "cuDeviceGetPCIBusId": (332,), "cuOccupancyMaxActiveBlocksPerMultiprocessor":
    (374,), "cuDevicePrimaryCtxRetain": (386,), "cuDevicePrimaryCtxRelease": (387, 544), "cuDeviceGetUuid": (482,
    647), "cuGraphLaunch": (514,), "cuGetProcAddress": (626, 677)}


@functools.lru_cache(maxsize=2)
def _installed(driver: bool) -> dict[int, str]:
    """cupti-python's names of the callback ids (empty without the package)."""
    try:
        from cupti import cupti as binding
    except ImportError:
        return {}
    enum = binding.driver_api_trace_cbid if driver else binding.runtime_api_trace_cbid
    return {int(m.value): m.name.rsplit("_v", 1)[0] if m.name.rsplit("_v", 1)[-1].isdigit() else m.name
            for m in enum}


@functools.lru_cache(maxsize=2)
def _known(driver: bool) -> dict[int, str]:
    return {cbid: name for name, ids in (_DRIVER if driver else _RUNTIME).items() for cbid in ids}


def name(cbid: int, driver: bool) -> str:
    """The function a runtime (or driver) call's callback id names."""
    got = _known(driver).get(cbid)
    if got is None:
        got = _installed(driver).get(cbid, f"{'cu' if driver else 'cuda'} API {cbid}")
    return got
