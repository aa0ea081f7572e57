"""The command line's argument types (argparse ``type=`` functions) and :class:`CLIError`, a bad argument
found after parsing."""

from __future__ import annotations

import argparse

__all__ = ["CLIError", "parse_shape", "parse_floats", "positive_float"]


class CLIError(Exception):
    """A bad argument found after parsing; printed as one line, exit status 2."""


def parse_shape(text: str) -> tuple[int, ...]:
    """``"64,64"`` or ``"64x64"`` -> (64, 64); an argparse type."""
    try:
        parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a shape: {text!r} (use e.g. 64,64)") from None
    if not shape or min(shape) <= 0:
        raise argparse.ArgumentTypeError(f"not a shape: {text!r} (positive integers, e.g. 64,64)")
    return shape


def parse_floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return v
