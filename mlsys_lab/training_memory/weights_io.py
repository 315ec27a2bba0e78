"""Loading weight files (权重文件的加载): pickle vs safetensors, whole file vs one layer.

A pickle checkpoint (what ``torch.save`` writes, with zip around it) is a program for the unpickler:
to get any tensor out you run it, and it rebuilds every object, so the whole file passes through
host RAM. A safetensors file (Hugging Face) is an 8-byte header length, a JSON header of names,
dtypes, shapes and byte offsets, then the raw bytes: a loader can ``mmap`` it and read only the
tensors it needs, and the header cannot execute code.

Each measurement runs in a fresh Python process so that its peak resident memory (``VmHWM`` on
Linux) belongs to that load alone. The files were just written, so they sit in the OS page cache: the
times are memory-speed reads, a lower bound on a cold load from disk.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from mlsys_lab.validation import check_choice, check_int

METHODS = ("pickle", "pickle_one_layer", "safetensors", "safetensors_one_layer")


def make_state_dict(n_layers: int, hidden: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A transformer-like float32 state dict: per layer qkv (h, 3h), proj (h, h), up (h, 4h), down (4h, h)."""
    check_int("n_layers", n_layers, low=1)
    check_int("hidden", hidden, low=1)
    generator = np.random.default_rng(seed)
    shapes = {"qkv": (hidden, 3 * hidden), "proj": (hidden, hidden), "up": (hidden, 4 * hidden),
              "down": (4 * hidden, hidden)}
    return {f"layers.{i}.{name}": generator.standard_normal(shape, dtype=np.float32)
            for i in range(n_layers) for name, shape in shapes.items()}


def save_checkpoints(state: dict[str, np.ndarray], folder: Path) -> dict[str, Path]:
    """Write ``state`` as ``model.pkl`` (pickle protocol 5) and ``model.safetensors``; returns both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"pickle": folder / "model.pkl", "safetensors": folder / "model.safetensors"}
    with open(paths["pickle"], "wb") as f:
        pickle.dump(state, f, protocol=5)
    save_file(state, str(paths["safetensors"]))
    return paths


def safetensors_header(path: Path) -> dict:
    """The JSON header: {name: {dtype, shape, data_offsets}} (first 8 bytes: its length, little-endian)."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(length))


_LOADER = r"""
import json, pickle, resource, sys, time
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
method, path, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
def peak_kb():
    # VmHWM: this process's own peak RSS (ru_maxrss would start at the parent's peak, inherited at fork)
    try:
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0])
    except (OSError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
base_kb = peak_kb()
start = time.perf_counter()
if method.startswith("pickle"):
    with open(path, "rb") as f:
        state = pickle.load(f)
    if method == "pickle_one_layer":
        state = {k: v for k, v in state.items() if k.startswith(prefix)}
elif method == "safetensors":
    state = load_file(path)
else:
    with safe_open(path, framework="numpy") as f:
        state = {k: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)}
checksum = float(sum(float(v.reshape(-1)[::4096].sum()) for v in state.values()))  # touch what was loaded
seconds = time.perf_counter() - start
end_kb = peak_kb()
loaded = sum(v.nbytes for v in state.values())
print(json.dumps({"seconds": seconds, "peak_rss_bytes": (end_kb - base_kb) * 1024,
                  "loaded_bytes": loaded, "n_tensors": len(state), "checksum": checksum}))
"""


@dataclass(frozen=True)
class LoadResult:
    method: str
    seconds: float
    peak_rss_bytes: int  # growth of the process's peak resident memory during the load
    loaded_bytes: int  # bytes of the arrays the caller ends up with
    file_bytes: int
    n_tensors: int


def measure_load(path: Path, method: str, layer_prefix: str = "layers.0.") -> LoadResult:
    """Load ``path`` in a fresh process by ``method`` (see METHODS); time and peak RSS of the load."""
    check_choice("method", method, METHODS)
    path = Path(path)
    out = subprocess.run([sys.executable, "-c", _LOADER, method, str(path), layer_prefix],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return LoadResult(method, data["seconds"], int(data["peak_rss_bytes"]), int(data["loaded_bytes"]),
                      path.stat().st_size, int(data["n_tensors"]))
