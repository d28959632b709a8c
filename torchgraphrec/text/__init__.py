"""Shapes, units, values and settings as text: no torch, no graphviz, for every writer."""

from torchgraphrec.text.settings import MAX_CHARS, settings_text
from torchgraphrec.text.units import UNITS, cost_text, count_text
from torchgraphrec.text.values import (clip, dims_text, items_change, shape_text, signed,
                                       short_name, split_items, value_text)

__all__ = ["UNITS", "cost_text", "count_text", "dims_text", "shape_text", "value_text",
           "signed", "split_items", "items_change", "clip", "short_name", "settings_text", "MAX_CHARS"]
