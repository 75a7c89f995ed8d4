// Empty on purpose: the CPU emulator (cuda_emu.h, included first) supplies what kernels use from cuda_runtime_api.h.
#pragma once
