"""Do the checkpoint formats round-trip, and does lazy loading read only one layer?"""

import numpy as np

from mlsys_lab.training_memory.weights_io import make_state_dict, measure_load, safetensors_header, save_checkpoints


def test_round_trip_header_and_lazy_layer(tmp_path):
    state = make_state_dict(n_layers=3, hidden=64)
    paths = save_checkpoints(state, tmp_path)
    header = {k: v for k, v in safetensors_header(paths["safetensors"]).items() if k != "__metadata__"}
    assert set(header) == set(state)
    assert header["layers.0.qkv"]["shape"] == [64, 192] and header["layers.0.qkv"]["dtype"] == "F32"
    layer_bytes = sum(v.nbytes for k, v in state.items() if k.startswith("layers.1."))
    whole = measure_load(paths["pickle"], "pickle", "layers.1.")
    lazy = measure_load(paths["safetensors"], "safetensors_one_layer", "layers.1.")
    assert whole.loaded_bytes == sum(v.nbytes for v in state.values()) and whole.n_tensors == 12
    assert lazy.loaded_bytes == layer_bytes and lazy.n_tensors == 4
    assert whole.file_bytes > sum(v.nbytes for v in state.values())


def test_safetensors_numpy_round_trip(tmp_path):
    from safetensors.numpy import load_file

    state = make_state_dict(1, 8, seed=5)
    paths = save_checkpoints(state, tmp_path)
    loaded = load_file(str(paths["safetensors"]))
    for name, value in state.items():
        np.testing.assert_array_equal(loaded[name], value)
