"""Engineering units at the edge of each prefix: a value never reads as 1000 of one unit."""

from __future__ import annotations

import pytest

from torchgraphrec.text.units import cost_text


@pytest.mark.parametrize("attribute, below, above, below_text, above_text", [
    ("flops", 999_499, 999_500, "999 kFLOPs", "1 MFLOPs"),
    ("num_params", 999_499, 999_500, "999k params", "1M params"),
    ("saved_bytes", 999_499_999, 999_500_000, "999 MB", "1 GB"),
    ("forward_ms", 999.49, 999.5, "999 ms", "1 s"),
    ("self_ms", 0.99949, 0.9995, "999 µs", "1 ms"),
])
def test_a_value_moves_to_the_next_unit_where_it_would_read_as_1000(
        attribute, below, above, below_text, above_text) -> None:
    assert cost_text(below, attribute) == below_text
    assert cost_text(above, attribute) == above_text
    for value in (below, above, above * 1.0004):
        assert not cost_text(value, attribute).startswith("1000"), value
