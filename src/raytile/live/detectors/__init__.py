"""Detector connections for live acquisition: ``merlin`` (Quantum Detectors, MPX over TCP)."""

__all__: list[str] = []
