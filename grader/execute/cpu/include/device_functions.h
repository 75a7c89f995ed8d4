// Empty on purpose: the CPU emulator (cuda_emu.h, included first) supplies the device functions kernels use
// (__syncthreads, atomicAdd, ...); a toolkit header the include policy allows must also build here.
#pragma once
