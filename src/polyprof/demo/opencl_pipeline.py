"""An image pipeline on an OpenCL device: upload, separable Gaussian blur, Sobel
gradient, a work-group reduction and a download, in named polyprof sections, one
step per frame. Two queues (transfers and compute), both created without profiling,
synchronised by events, blocking copies, Event.wait, wait_for_events and finish.
The result is checked against NumPy.

Importing this module raises ImportError when pyopencl or an OpenCL device that can
compile kernels is missing, so ``polyprof demo`` skips it.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import polyprof

try:
    import pyopencl as cl
except Exception as e:  # pragma: no cover - depends on the machine
    raise ImportError(f"pyopencl is not usable: {e}") from e


def _first_device() -> "cl.Device":
    from polyprof.plugins.opencl import probe  # pyopencl's device probe only when the demo runs

    dev, problems = probe.first_compiling()
    if dev is not None:
        return dev
    if problems:
        raise ImportError("no OpenCL device here can compile kernels (" + "; ".join(problems) + ")")
    raise ImportError("no OpenCL device found")


try:
    _DEVICE = _first_device()
except ImportError:
    raise
except Exception as e:  # pragma: no cover
    raise ImportError(f"no OpenCL platform found: {e}") from e

KERNELS = r"""
__kernel void blur_h(__global const float *src, __global float *dst, __constant float *w,
                     const int width, const int height, const int radius) {
    int x = get_global_id(0), y = get_global_id(1);
    if (x >= width || y >= height) return;
    float acc = 0.0f;
    for (int k = -radius; k <= radius; ++k) {
        int xx = clamp(x + k, 0, width - 1);
        acc += w[k + radius] * src[y * width + xx];
    }
    dst[y * width + x] = acc;
}

__kernel void blur_v(__global const float *src, __global float *dst, __constant float *w,
                     const int width, const int height, const int radius) {
    int x = get_global_id(0), y = get_global_id(1);
    if (x >= width || y >= height) return;
    float acc = 0.0f;
    for (int k = -radius; k <= radius; ++k) {
        int yy = clamp(y + k, 0, height - 1);
        acc += w[k + radius] * src[yy * width + x];
    }
    dst[y * width + x] = acc;
}

__kernel void sobel(__global const float *src, __global float *mag, const int width, const int height) {
    int x = get_global_id(0), y = get_global_id(1);
    if (x >= width || y >= height) return;
    #define P(i, j) src[clamp(y + (j), 0, height - 1) * width + clamp(x + (i), 0, width - 1)]
    float gx = -P(-1,-1) - 2.0f*P(-1,0) - P(-1,1) + P(1,-1) + 2.0f*P(1,0) + P(1,1);
    float gy = -P(-1,-1) - 2.0f*P(0,-1) - P(1,-1) + P(-1,1) + 2.0f*P(0,1) + P(1,1);
    #undef P
    mag[y * width + x] = sqrt(gx * gx + gy * gy);
}

__kernel void reduce_sum(__global const float *src, __global float *partial, __local float *scratch,
                         const int n) {
    int gid = get_global_id(0), lid = get_local_id(0), gsize = get_global_size(0);
    float acc = 0.0f;
    for (int i = gid; i < n; i += gsize) acc += src[i];
    scratch[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = scratch[0];
}
"""


def gaussian_weights(radius: int, sigma: float) -> np.ndarray:
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    w = np.exp(-(x ** 2) / (2 * sigma ** 2))
    return (w / w.sum()).astype(np.float32)


def reference(img: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
    """The same pipeline in NumPy (float64), to check the device's answer."""
    r = len(w) // 2
    h, wd = img.shape
    x = img.astype(np.float64)
    pad = np.pad(x, ((0, 0), (r, r)), mode="edge")
    bh = sum(w[k] * pad[:, k:k + wd] for k in range(2 * r + 1))
    pad = np.pad(bh, ((r, r), (0, 0)), mode="edge")
    bv = sum(w[k] * pad[k:k + h, :] for k in range(2 * r + 1))
    p = np.pad(bv, 1, mode="edge")

    def P(i: int, j: int) -> np.ndarray:
        return p[1 + j:1 + j + h, 1 + i:1 + i + wd]

    gx = -P(-1, -1) - 2 * P(-1, 0) - P(-1, 1) + P(1, -1) + 2 * P(1, 0) + P(1, 1)
    gy = -P(-1, -1) - 2 * P(0, -1) - P(1, -1) + P(-1, 1) + 2 * P(0, 1) + P(1, 1)
    mag = np.sqrt(gx ** 2 + gy ** 2)
    return mag, float(mag.sum())


def run(frames: int = 6, height: int = 384, width: int = 512, radius: int = 4,
        groups: int = 64, local: int = 64) -> tuple[list[np.ndarray], list[float]]:
    ctx = cl.Context([_DEVICE])
    copy_q = cl.CommandQueue(ctx)  # no PROFILING_ENABLE: polyprof adds it
    compute_q = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    with polyprof.section("build program"):
        prg = cl.Program(ctx, KERNELS).build()
        blur_h, blur_v = cl.Kernel(prg, "blur_h"), cl.Kernel(prg, "blur_v")
        reduce_sum = cl.Kernel(prg, "reduce_sum")
        sobel = prg.sobel  # the prg.kernel_name(queue, ...) path
    w = gaussian_weights(radius, radius / 2.0)
    n = height * width
    d_w = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=w)
    d_img = cl.Buffer(ctx, mf.READ_ONLY, n * 4)
    d_tmp = cl.Buffer(ctx, mf.READ_WRITE, n * 4)
    d_blur = cl.Buffer(ctx, mf.READ_WRITE, n * 4)
    d_mag = cl.Buffer(ctx, mf.READ_WRITE, n * 4)
    d_partial = cl.Buffer(ctx, mf.READ_WRITE, groups * 4)
    rng = np.random.default_rng(7)
    shape2d = (width, height)
    args = (np.int32(width), np.int32(height), np.int32(radius))
    mags: list[np.ndarray] = []
    sums: list[float] = []
    for frame in range(frames):
        with polyprof.section("frame"):
            with polyprof.section("make image"):
                yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
                img = (np.sin(xx / (7 + frame)) * np.cos(yy / 11) * 100
                       + rng.standard_normal((height, width)).astype(np.float32) * 5).astype(np.float32)
            with polyprof.section("upload"):
                ev_up = cl.enqueue_copy(copy_q, d_img, img, is_blocking=False)
            with polyprof.section("blur"):
                ev_h = blur_h(compute_q, shape2d, None, d_img, d_tmp, d_w, *args, wait_for=[ev_up])
                ev_v = blur_v(compute_q, shape2d, None, d_tmp, d_blur, d_w, *args, wait_for=[ev_h])
            with polyprof.section("gradient"):
                sobel(compute_q, shape2d, None, d_blur, d_mag, np.int32(width), np.int32(height),
                          wait_for=[ev_v])
            with polyprof.section("reduce"):
                ev_fill = cl.enqueue_fill_buffer(compute_q, d_partial, np.float32(0), 0, groups * 4)
                # a LocalMemory is a kernel argument pyopencl takes; its stub's union leaves it out
                reduce_sum.set_args(d_mag, d_partial, cl.LocalMemory(local * 4), np.int32(n))  # type: ignore[arg-type]
                ev_red = cl.enqueue_nd_range_kernel(compute_q, reduce_sum, (groups * local,), (local,),
                                                    wait_for=[ev_fill])
                ev_red.wait()
            with polyprof.section("download"):
                mag = np.empty((height, width), np.float32)
                ev_down = cl.enqueue_copy(copy_q, mag, d_mag, is_blocking=False, wait_for=[ev_red])
                partial, ev_map = cl.enqueue_map_buffer(compute_q, d_partial, cl.map_flags.READ, 0,
                                                        (groups,), np.dtype(np.float32))
                total = float(partial.astype(np.float64).sum())
                partial.base.release(compute_q).wait()
                cl.wait_for_events([ev_down])
            mags.append(mag)
            sums.append(total)
        polyprof.step()
    with polyprof.section("drain"):
        copy_q.finish()
        compute_q.finish()
    return mags, sums


def check(mags: list[np.ndarray], sums: list[float], frames: int, height: int, width: int,
          radius: int) -> float:
    """Largest relative error against NumPy; raises if the device got it wrong."""
    rng = np.random.default_rng(7)
    w = gaussian_weights(radius, radius / 2.0)
    worst = 0.0
    for frame in range(frames):
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        img = (np.sin(xx / (7 + frame)) * np.cos(yy / 11) * 100
               + rng.standard_normal((height, width)).astype(np.float32) * 5).astype(np.float32)
        ref, ref_sum = reference(img, w)
        err = float(np.abs(mags[frame] - ref).max() / (np.abs(ref).max() + 1e-12))
        serr = abs(sums[frame] - ref_sum) / abs(ref_sum)
        worst = max(worst, err, serr)
    if worst > 1e-4:
        raise AssertionError(f"OpenCL pipeline disagrees with NumPy: relative error {worst:.3g}")
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=6)
    p.add_argument("--height", type=int, default=384)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--radius", type=int, default=4)
    p.add_argument("--save", help="write the results to this .npz (to compare runs)")
    a = p.parse_args(argv)
    mags, sums = run(a.frames, a.height, a.width, a.radius)
    with polyprof.section("check against NumPy"):
        err = check(mags, sums, a.frames, a.height, a.width, a.radius)
    if a.save:
        np.savez(a.save, mags=np.stack(mags), sums=np.asarray(sums))
    print(f"opencl pipeline on {_DEVICE.name.strip()}: {a.frames} frames {a.height}x{a.width}, "
          f"max relative error vs NumPy {err:.2e}", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
