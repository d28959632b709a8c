"""Capture: hooks and an autograd walk that record a model's execution as flat events."""

__all__: list[str] = []
