"""The GPU timing the kernel scripts share (scripts/rownorm_sweep_gpu.py, conv_tiling_gpu.py,
gemm_small_k_gpu.py): CUDA events around launches queued behind a spin kernel, so the host's
launch overhead is hidden and the figure is the GPU's time per launch."""
import statistics

import torch


def events_us(fn, reps=20, warm=3, queued=10, spin=20_000_000):
    """Median over `reps` samples of the GPU time per call of `fn` in µs: each sample `queued`
    calls queued behind a spin of `spin` cycles, timed with CUDA events; `warm` calls first."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin)
        start.record()
        for _ in range(queued):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / queued)
    return statistics.median(times)
