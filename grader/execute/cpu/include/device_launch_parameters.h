// Empty on purpose: the CPU emulator (cuda_emu.h, included first) supplies what kernels use from device_launch_parameters.h.
#pragma once
