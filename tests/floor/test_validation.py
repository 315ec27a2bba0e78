"""Do bad arguments get an error that names the parameter and the allowed range?"""

import pytest

from mlsys_lab.validation import check_choice, check_divides, check_divisible, check_int, check_number, check_positive


def test_check_int_accepts_integers_in_range():
    assert check_int("n", 5, low=1, high=10) == 5


@pytest.mark.parametrize("value", [0, 11, 2.5, True, "3"])
def test_check_int_rejects_with_name_and_range(value):
    with pytest.raises(ValueError, match=r"n must be an integer between 1 and 10; got"):
        check_int("n", value, low=1, high=10)


def test_check_number_open_interval():
    with pytest.raises(ValueError, match=r"p must be a number in \(0, 1\]; got 0"):
        check_number("p", 0.0, low=0, high=1, low_inclusive=False)
    assert check_number("p", 1, low=0, high=1, low_inclusive=False) == 1.0


def test_check_number_rejects_nan_and_text():
    for bad in (float("nan"), "fast", None):
        with pytest.raises(ValueError, match="rate must be a number"):
            check_number("rate", bad)


def test_check_positive():
    with pytest.raises(ValueError, match="bandwidth must be a number > 0"):
        check_positive("bandwidth", 0)


def test_check_choice_lists_choices():
    with pytest.raises(ValueError, match=r"dtype must be one of 'fp32', 'bf16'; got 'fp13'"):
        check_choice("dtype", "fp13", ["fp32", "bf16"])


def test_check_divisible_names_the_multiple():
    assert check_divisible("cols", 12, 4) == 12
    with pytest.raises(ValueError, match="cols must be a multiple of 4; got 10"):
        check_divisible("cols", 10, 4)
    with pytest.raises(ValueError, match="cols must be an integer >= 1; got 0"):
        check_divisible("cols", 0, 4)


def test_check_divides_lists_divisors():
    with pytest.raises(ValueError, match=r"tp must divide n_heads=12 \(allowed: 1, 2, 3, 4, 6, 12\); got 5"):
        check_divides("tp", 5, of_name="n_heads", of_value=12)
    assert check_divides("tp", 4, of_name="n_heads", of_value=12) == 4


def test_check_names_refuses_a_str():
    """Is one str refused where a sequence of names is expected (iterating it would give its characters)?"""
    from mlsys_lab.validation import check_names

    assert check_names("targets", ("q", "v")) == ["q", "v"]
    with pytest.raises(TypeError, match=r"targets must be a list or tuple of names, not a str; got 'qv'"):
        check_names("targets", "qv")
    with pytest.raises(TypeError, match="each of targets must be a str"):
        check_names("targets", ["q", 1])
