// What the harness (harness.cpp) and the student's unit (student_unit.cpp) share: the launch's arguments,
// and the two functions the student's unit defines. Included after the student's code there, so only names
// a kernel file is unlikely to define as macros.
#pragma once

#include <climits>

namespace cuda_emu_harness {

// A pointer argument that converts to whatever pointer type the kernel's parameter has.
struct AnyPointer {
    void *address;
    template <class T>
    operator T *() const { return (T *)address; }
};

struct Arguments {
    int m, n, k;
    void *A, *B, *C;
};
extern Arguments args;  // harness.cpp: the launch's, from the case line

}  // namespace cuda_emu_harness

constexpr int CUDA_EMU_NO_TILE = INT_MIN;
void cuda_emu_student_launch();  // the kernel called with args, in the config's order (launch.inc)
int cuda_emu_student_tile();     // SGEMM_GRADER_TILE, or CUDA_EMU_NO_TILE where the file defines none
