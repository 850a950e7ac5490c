"""The discrete-event simulator."""

from .engine import SimConfig, Simulator, simulate

__all__ = ["SimConfig", "Simulator", "simulate"]
