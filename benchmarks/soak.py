"""Soak: 1,000 training steps of a small CNN under a recorder with probes; memory stays flat.

    python benchmarks/soak.py [--steps 1000]

Probes keep running statistics (``reduce="running"``) of every leaf's output and output
gradient; the graph is recorded for the first forward only. Prints the resident set size at
the start, after the first tenth of the steps, and at the end.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path


def rss_mb() -> float:
    """This process's resident set size, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def train(steps: int, recorder_factory=None) -> tuple[dict[str, float], float, object]:
    """Run ``steps`` training steps, under a recorder if a factory is given; RSS marks."""
    import contextlib

    import torch

    from torchgraphrec.demo import demo_model

    model, _ = demo_model()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    recorder = recorder_factory(model) if recorder_factory else None
    marks: dict[str, float] = {}
    start = time.perf_counter()
    with recorder if recorder is not None else contextlib.nullcontext():
        marks["start"] = rss_mb()
        for step in range(steps):
            x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            if recorder is not None:
                recorder.step()
            if step + 1 == steps // 10:
                gc.collect()
                marks["after 10%"] = rss_mb()
        gc.collect()
        marks["end"] = rss_mb()
    return marks, time.perf_counter() - start, recorder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    options = parser.parse_args()
    import torch

    import torchgraphrec as tgr
    from torchgraphrec import select as S

    torch.set_num_threads(1)

    def recorder(model):
        probes = [tgr.probe("output", where=S.leaves(), keep=["rms", "dead"], reduce="running"),
                  tgr.probe("grad_output", where=S.leaves(), keep=["rms", "cosine"],
                            reduce="running")]
        return tgr.Recorder(model, probes=probes, graph="first")

    growth = {}
    for name, factory in (("plain", None), ("recorded", recorder)):
        marks, seconds, rec = train(options.steps, factory)
        growth[name] = marks["end"] - marks["after 10%"]
        print(f"{name:9s} {options.steps} steps in {seconds:5.1f} s; RSS "
              + ", ".join(f"{mark} {value:.1f} MB" for mark, value in marks.items()))
    extra = growth["recorded"] - growth["plain"]
    print(f"growth over the last 90% of the steps: plain {growth['plain']:+.1f} MB, recorded "
          f"{growth['recorded']:+.1f} MB; the recorder's own {extra:+.1f} MB "
          f"({'flat' if extra < 2 else 'NOT flat'}: under 2 MB)")
    print(f"kept: {len(rec.store.reducers)} (module, site) keys, {len(rec.store.rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
