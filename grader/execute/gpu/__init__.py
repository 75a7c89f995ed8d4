"""The GPU engine: the child that runs the cases and the timing on a GPU, the turns on a GPU, its clocks,
the late warps that make a race show, and which GPUs a host has."""
