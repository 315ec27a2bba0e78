"""Do the array, flag and type checks (issue #19) name the parameter, and let good values through unchanged?"""

import math

import numpy as np
import pytest

from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_choice,
    check_positive,
    check_sequence,
    check_str,
    check_type,
)


def test_check_array_passes_a_good_array_through_unchanged():
    x = np.arange(6.0).reshape(2, 3)
    assert check_array("x", x, ndim=2, finite=True) is x
    assert check_array("x", [1, 2, 3]).tolist() == [1, 2, 3]


@pytest.mark.parametrize("value, error, text", [
    ("ab", TypeError, r"x must be an array of numbers"),
    (None, TypeError, r"x must be an array of numbers"),
    ([[1], [1, 2]], TypeError, r"x must be an array of numbers; got list"),
    (0, ValueError, r"x must have 1 dimensions; got shape \(\)"),
    (np.ones((3, 5)), ValueError, r"x must have 1 dimensions; got shape \(3, 5\)"),
    (np.empty(0), ValueError, r"x must have at least 1 element"),
    (np.array([1.0, math.nan]), ValueError, r"x must hold finite numbers"),
    (np.array([1.0, math.inf]), ValueError, r"x must hold finite numbers"),
])
def test_check_array_rejects_with_the_name(value, error, text):
    with pytest.raises(error, match=text):
        check_array("x", value, ndim=1, finite=True)


def test_check_bool_wants_a_flag_not_a_number():
    assert check_bool("causal", np.bool_(True)) is True
    for value in (0, 1, "yes", None):
        with pytest.raises(TypeError, match=r"causal must be True or False"):
            check_bool("causal", value)


def test_check_type_names_the_parameter_and_the_type():
    assert check_type("g", np.random.default_rng(0), np.random.Generator)
    with pytest.raises(TypeError, match=r"g must be a Generator; got int 0"):
        check_type("g", 0, np.random.Generator)
    with pytest.raises(TypeError, match=r"n must be a int"):
        check_type("n", True, int)  # True is an int to Python, not a count


@pytest.mark.parametrize("value", [np.empty(0), np.ones(3), [], ["ring"], None])
def test_check_choice_rejects_arrays_and_unhashables_by_name(value):
    with pytest.raises(ValueError, match=r"algorithm must be one of 'ring', 'tree'"):
        check_choice("algorithm", value, {"ring": 1, "tree": 2})


def test_check_choice_accepts_numpy_scalars():
    assert check_choice("d", np.int64(64), (64, 128)) == 64


def test_check_positive_is_finite_unless_told():
    with pytest.raises(ValueError, match=r"mttf must be a finite number > 0; got inf"):
        check_positive("mttf", math.inf)
    assert check_positive("timeout_s", math.inf, finite=False) == math.inf


def test_hardware_records_check_their_fields():
    from mlsys_lab.hardware import H200, Hardware, links_of, transfer_seconds

    with pytest.raises(TypeError, match=r"name must be a str"):
        Hardware(name=0, peak_flop_per_s={"fp32": 1e12}, memory_bandwidth_bytes_per_s=1e11, memory_bytes=1e9)
    with pytest.raises(ValueError, match=r"interconnect_bytes_per_s\['nvlink'\] must be a number > 0"):
        Hardware("toy", {"fp32": 1e12}, 1e11, 1e9, interconnect_bytes_per_s={"nvlink": -1.0})
    with pytest.raises(ValueError, match=r"latency_s must be a finite number"):
        transfer_seconds(1e9, 1e9, latency_s=math.inf)
    with pytest.raises(TypeError, match=r"hw must be a Hardware"):
        links_of(0)
    assert Hardware("unknown capacity", {"fp32": 1e12}, 1e11, math.nan).memory_bytes != H200.memory_bytes


def test_the_network_toolkit_checks_its_arguments():
    from mlsys_lab import nn

    with pytest.raises(TypeError, match=r"rng must be a Generator"):
        nn.init_normal(0, (2, 2), 1.0)
    with pytest.raises(ValueError, match=r"target must have the shape of prediction \(4, 1\); got \(4,\)"):
        nn.mse_loss(np.zeros((4, 1)), np.zeros(4))  # broadcasting would average a (4, 4) difference
    with pytest.raises(ValueError, match=r"beta1 must be a number in \[0.0, 1.0\)"):
        nn.Adam(beta1=1.0)
    with pytest.raises(TypeError, match=r"trainable must be None or a tuple of parameter names"):
        nn.SGD(0.1, trainable=0)
    with pytest.raises(ValueError, match=r"batch_size must be an integer between 1 and 10"):
        nn.batches(10, 11, np.random.default_rng(0))  # at the call, not at the first next()


def test_check_array_shape_matches_fixed_and_free_lengths():
    x = np.zeros((3, 4))
    assert check_array("x", x, shape=(3, 4)) is x
    assert check_array("x", x, shape=(None, 4)) is x  # None matches any length
    assert check_array("x", x, shape=(3, None)) is x
    assert check_array("v", [1.0, 2.0], shape=(2,)).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("value, shape, text", [
    (np.zeros((3, 4)), (4, 3), r"^gates must have shape \(4, 3\); got \(3, 4\)$"),
    (np.zeros((3, 4)), (None, 5), r"^gates must have shape \(any, 5\); got \(3, 4\)$"),
    (np.zeros(3), (2,), r"^gates must have shape \(2,\); got \(3,\)$"),
    (np.zeros((2, 2, 2)), (2, 2), r"^gates must have shape \(2, 2\); got \(2, 2, 2\)$"),  # another ndim
    (np.zeros(4), (None, 4), r"^gates must have shape \(any, 4\); got \(4,\)$"),
])
def test_check_array_shape_rejects_with_the_name_and_both_shapes(value, shape, text):
    with pytest.raises(ValueError, match=text):
        check_array("gates", value, shape=shape)


def test_check_sequence_returns_a_list_of_the_items():
    assert check_sequence("deps", (1, 2)) == [1, 2]
    items = [np.ones(2), np.zeros(2)]
    got = check_sequence("buffers", items, min_size=2, max_size=2)
    assert got == items and got is not items and got[0] is items[0]  # a new list of the same objects
    assert check_sequence("deps", []) == []  # min_size 0 by default


@pytest.mark.parametrize("value, kw, error, text", [
    ("ab", {}, TypeError, r"^deps must be a list or tuple; got str 'ab'$"),  # a string is not a sequence here
    (np.ones(3), {}, TypeError, r"^deps must be a list or tuple; got ndarray"),
    (3, {}, TypeError, r"^deps must be a list or tuple; got int 3$"),
    (None, {}, TypeError, r"^deps must be a list or tuple; got NoneType None$"),
    ([], {"min_size": 1}, ValueError, r"^deps must hold .*>= 1.* item\(s\); got 0$"),
    ([1, 2, 3], {"min_size": 1, "max_size": 2}, ValueError, r"^deps must hold .*1.*2.* item\(s\); got 3$"),
])
def test_check_sequence_rejects_with_the_name(value, kw, error, text):
    with pytest.raises(error, match=text):
        check_sequence("deps", value, **kw)


def test_check_str_passes_names_through():
    assert check_str("name", "roofline_h200") == "roofline_h200"
    assert check_str("asm", "", nonempty=False) == ""


@pytest.mark.parametrize("value, error, text", [
    ("", ValueError, r"^name must be a non-empty str; got ''$"),
    (0, TypeError, r"^name must be a str; got int 0$"),
    (b"ab", TypeError, r"^name must be a str; got bytes b'ab'$"),
    (None, TypeError, r"^name must be a str; got NoneType None$"),
    (["a"], TypeError, r"^name must be a str; got list \['a'\]$"),
])
def test_check_str_rejects_with_the_name(value, error, text):
    with pytest.raises(error, match=text):
        check_str("name", value)
