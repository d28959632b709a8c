"""FLOP counting by PyTorch's own formulas: ATen formulas, the FLOP mode, torch-level counting, the counting op mode."""

__all__: list[str] = []
