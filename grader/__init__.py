"""Autograder for the tiled shared-memory SGEMM CUDA lab."""

__version__ = "0.1.0"
