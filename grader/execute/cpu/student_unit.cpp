// The student's unit: their device side, instrumented, with the tile size probe (student.cu), and the launch
// of their kernel (launch.inc), both written by build.py. Compiled per submission and linked with the
// harness's own object (harness.cpp), which build.py compiles once.
#include "cuda_emu.h"

#include "student.cu"
#line 1 "<grader: the student's unit>"
#include "student_interface.h"
#include "launch.inc"  // defines cuda_emu_kernel_call()

void cuda_emu_student_launch() { cuda_emu_kernel_call(); }

int cuda_emu_student_tile() {
#ifdef SGEMM_GRADER_TILE  // the first of the configured tile size macros the file defines (build.py)
    return (int)(SGEMM_GRADER_TILE);
#else
    return CUDA_EMU_NO_TILE;
#endif
}
