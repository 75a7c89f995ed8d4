// CPU emulation of the CUDA features a tiled-SGEMM kernel uses.
//
// Each thread of a block is a fiber; fibers switch only at __syncthreads(), in an order the harness
// chooses (forward, reversed), so a missing barrier changes the result deterministically. Shared
// arrays are one static copy (blocks run one after another); accesses the grader instrumented report
// to a shadow memory that finds races between barriers, independently of the order. Shared memory is
// poisoned at each block's start as on the GPU (late_warps.py), so a tile entry no thread stored reads
// NaN, and its first such read is named; every store to C records its writer, so two threads storing
// one element of C are named too.
#pragma once

#include <cassert>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <memory>  // before __noinline__ is a macro: libstdc++'s shared_ptr says __attribute__((__noinline__))
#include <type_traits>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---- qualifiers ------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __shared__ static
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900

// ---- built-in types and variables ------------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return {x, y, z}; }
};
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline dim3 make_dim3(unsigned x, unsigned y, unsigned z) { return dim3(x, y, z); }

namespace cuda_emu {

enum FiberState { READY, AT_BARRIER, FINISHED };

struct Fiber {
    void *sp = nullptr;
    char *stack = nullptr;  // lowest address, a PROT_NONE guard page
    uint3 idx{0, 0, 0};
    int linear = 0;
    FiberState state = READY;
    int barrier_line = 0;
    int line = 0;  // the kernel statement this thread runs (instrument.py marks each): where a fault was
    bool read_shared = false;  // read a shared array since the last barrier
#if !defined(__x86_64__)
    ucontext_t context;
#endif
};

inline Fiber *current = nullptr;
inline int report_fd = 2;

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::current->idx)
inline uint3 blockIdx{0, 0, 0};
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

namespace cuda_emu {

// ---- reports to the grader: one JSON object per line, written with write(2) --------------------------

inline void report(const char *format, ...) {
    char line[1024];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof line - 1, format, args);
    va_end(args);
    if (length < 0) return;
    if (length > (int)sizeof line - 2) length = sizeof line - 2;
    line[length] = '\n';
    ssize_t ignored = write(report_fd, line, length + 1);
    (void)ignored;
}

inline void report_thread_and_exit(const char *what, int code) {
    uint3 t = current ? current->idx : uint3{0, 0, 0};
    report("{\"event\": \"fault\", \"what\": \"%s\", \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           what, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z);
    _exit(code);
}

// ---- fibers ------------------------------------------------------------------------------------------

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *from, and resumes
// the stack `to` the same way: a few nanoseconds, no system call (unlike swapcontext).
extern "C" void cuda_emu_switch(void **from, void *to);
asm(R"(
    .text
    .globl cuda_emu_switch
    .type cuda_emu_switch, @function
cuda_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_emu_switch, .-cuda_emu_switch
)");
#endif

inline void *scheduler_sp = nullptr;
#if !defined(__x86_64__)
inline ucontext_t scheduler_context;
#endif
inline void (*kernel_body)() = nullptr;
constexpr size_t STACK_BYTES = 256 * 1024;

inline void yield_to_scheduler() {
#if defined(__x86_64__)
    cuda_emu_switch(&current->sp, scheduler_sp);
#else
    swapcontext(&current->context, &scheduler_context);
#endif
}

extern "C" inline void cuda_emu_fiber_entry() {
    kernel_body();
    current->state = FINISHED;
    yield_to_scheduler();
    __builtin_trap();  // a finished fiber is never resumed
}

inline void start_fiber(Fiber &fiber) {
    if (fiber.stack == nullptr) {
        long page = sysconf(_SC_PAGESIZE);
        void *memory = mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) report_thread_and_exit("out_of_memory", 5);
        mprotect(memory, page, PROT_NONE);  // an overflowing stack faults instead of corrupting its neighbour
        fiber.stack = (char *)memory;
    }
    fiber.state = READY;
    fiber.read_shared = false;
#if defined(__x86_64__)
    auto top = (void **)(((uintptr_t)(fiber.stack + STACK_BYTES)) & ~(uintptr_t)15);
    *--top = nullptr;                              // return address of the entry function: never used
    *--top = (void *)&cuda_emu_fiber_entry;        // where cuda_emu_switch's `ret` goes
    for (int i = 0; i < 6; ++i) *--top = nullptr;  // rbp rbx r12-r15
    fiber.sp = top;
#else
    getcontext(&fiber.context);
    long page = sysconf(_SC_PAGESIZE);
    fiber.context.uc_stack.ss_sp = fiber.stack + page;
    fiber.context.uc_stack.ss_size = STACK_BYTES - page;
    fiber.context.uc_link = nullptr;
    makecontext(&fiber.context, (void (*)())cuda_emu_fiber_entry, 0);
#endif
}

inline void resume(Fiber &fiber) {
    current = &fiber;
#if defined(__x86_64__)
    cuda_emu_switch(&scheduler_sp, fiber.sp);
#else
    swapcontext(&scheduler_context, &fiber.context);
#endif
}

// ---- shadow memory of the shared arrays ---------------------------------------------------------------

struct Cell {
    uint32_t write_epoch = 0, read_epoch = 0;
    int32_t writer = -1, reader = -1;
    int32_t write_line = 0, read_line = 0;
    bool several_readers = false;
    bool write_after_read = false;  // the writer had read shared memory earlier in the same phase
    uint32_t stored_block = 0;      // block_serial of the block that last stored it (0: none yet)
};

struct Region {
    const char *base;
    size_t bytes;
    const char *name;
    size_t row_elements;  // elements per row for 2-D arrays, 0 for 1-D
    size_t element_bytes;
    size_t first_cell;
};

inline std::vector<Region> regions;
inline std::vector<Cell> cells;
inline uint32_t epoch = 1;  // advances at every barrier and every new block
inline long races_found = 0;
inline uint32_t block_serial = 1;  // advances at every new block (new_block)

// A NaN in every 32-bit word of shared memory, as the GPU path's blocks fill theirs (late_warps.py). Not
// C's poison (inputs.py POISON_BITS): the CPU keeps a NaN's payload through arithmetic, so a sum of poison
// stored to C would read as an element never written.
constexpr uint32_t SHARED_POISON = 0x7FC0B10Cu;

inline void poison(const Region &region) {
    for (size_t at = 0; at + 4 <= region.bytes; at += 4) memcpy((char *)region.base + at, &SHARED_POISON, 4);
}

// Whether the element still holds the poison's bytes (an uninstrumented store through a pointer would
// have changed them: only the bytes say the entry was never stored).
inline bool holds_poison(const Region &region, const void *address) {
    size_t offset = (const char *)address - region.base;
    for (size_t j = 0; j < region.element_bytes; ++j)
        if (((const unsigned char *)address)[j] != ((const unsigned char *)&SHARED_POISON)[(offset + j) % 4])
            return false;
    return true;
}

// A block starts: its shared memory holds poison again, and no entry of it is stored yet.
inline void new_block() {
    ++block_serial;
    for (const Region &region : regions) poison(region);
}

template <class Array>
inline void share(Array &array, const char *name) {
    const char *base = (const char *)&array;
    for (const Region &region : regions)
        if (region.base == base) return;
    using Element = std::remove_all_extents_t<Array>;
    size_t row = std::rank_v<Array> >= 2 ? std::extent_v<Array, std::rank_v<Array> - 1> : 0;
    size_t count = sizeof(Array) / sizeof(Element);
    regions.push_back({base, sizeof(Array), name, row, sizeof(Element), cells.size()});
    cells.resize(cells.size() + count);
    poison(regions.back());  // before this block's first access: the first thread to reach the declaration
}

inline Cell *cell_of(const void *address, const Region **found) {
    const char *p = (const char *)address;
    for (const Region &region : regions) {
        if (p >= region.base && p < region.base + region.bytes) {
            *found = &region;
            return &cells[region.first_cell + (p - region.base) / region.element_bytes];
        }
    }
    return nullptr;
}

inline uint3 thread_of(int linear) {
    unsigned x = blockDim.x, xy = blockDim.x * blockDim.y;
    return {linear % x, (linear % xy) / x, linear / xy};
}

// A store and a read (or two stores) of one shared element by different threads with no barrier between.
inline void race(const Region &region, const void *address, const char *kind, int store_line,
                 int store_thread, int other_line, int other_thread, bool store_after_read) {
    // The first race of each kind explains the bug (a store before the phase's reads: the barrier after
    // loading is missing; a store after them: the one after using); the total is reported at the end.
    static bool reported[2] = {false, false};
    ++races_found;
    if (reported[store_after_read]) return;
    reported[store_after_read] = true;
    size_t element = ((const char *)address - region.base) / region.element_bytes;
    size_t row = region.row_elements ? element / region.row_elements : 0;
    size_t column = region.row_elements ? element % region.row_elements : element;
    uint3 s = thread_of(store_thread), o = thread_of(other_thread);
    report("{\"event\": \"race\", \"kind\": \"%s\", \"array\": \"%s\", \"two_d\": %s, \"row\": %zu, \"column\": %zu, "
           "\"store_line\": %d, \"store_thread\": [%u, %u, %u], \"other_line\": %d, \"other_thread\": [%u, %u, %u], "
           "\"block\": [%u, %u, %u], \"store_after_read\": %s}",
           kind, region.name, region.row_elements ? "true" : "false", row, column, store_line, s.x, s.y, s.z,
           other_line, o.x, o.y, o.z, blockIdx.x, blockIdx.y, blockIdx.z, store_after_read ? "true" : "false");
}

// The first read of a shared entry that no thread of its block stored (reported once: it explains the NaN).
inline void unstored_read(const Region &region, const void *address, int line) {
    static bool reported = false;
    if (reported) return;
    reported = true;
    size_t element = ((const char *)address - region.base) / region.element_bytes;
    size_t row = region.row_elements ? element / region.row_elements : 0;
    size_t column = region.row_elements ? element % region.row_elements : element;
    uint3 t = current->idx;
    report("{\"event\": \"unstored_read\", \"array\": \"%s\", \"two_d\": %s, \"row\": %zu, \"column\": %zu, "
           "\"line\": %d, \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           region.name, region.row_elements ? "true" : "false", row, column, line, t.x, t.y, t.z, blockIdx.x,
           blockIdx.y, blockIdx.z);
}

template <class T>
inline T *shared_read(T *address, int line) {
    const Region *region;
    Cell *cell = cell_of(address, &region);
    if (cell == nullptr) return address;
    int me = current->linear;
    if (cell->stored_block != block_serial && holds_poison(*region, address)) unstored_read(*region, address, line);
    if (cell->write_epoch == epoch && cell->writer != me)
        race(*region, address, "read_after_store", cell->write_line, cell->writer, line, me,
             cell->write_after_read);
    if (cell->read_epoch != epoch) {
        cell->read_epoch = epoch;
        cell->reader = me;
        cell->read_line = line;
        cell->several_readers = false;
    } else if (cell->reader != me) {
        cell->several_readers = true;
    }
    current->read_shared = true;
    return address;
}

template <class T>
inline T *shared_write(T *address, int line) {
    const Region *region;
    Cell *cell = cell_of(address, &region);
    if (cell == nullptr) return address;
    int me = current->linear;
    bool after_read = current->read_shared;
    if (cell->write_epoch == epoch && cell->writer != me)
        race(*region, address, "store_after_store", line, me, cell->write_line, cell->writer, after_read);
    else if (cell->read_epoch == epoch && (cell->reader != me || cell->several_readers))
        race(*region, address, "store_after_read", line, me, cell->read_line,
             cell->reader != me ? cell->reader : -1, after_read);
    cell->write_epoch = epoch;
    cell->stored_block = block_serial;
    cell->writer = me;
    cell->write_line = line;
    cell->write_after_read = after_read;
    return address;
}

template <class T>
inline T *shared_update(T *address, int line) {
    shared_read(address, line);
    return shared_write(address, line);
}

// ---- who stored each element of C ------------------------------------------------------------------------

inline char *c_begin = nullptr, *c_end = nullptr;  // C's m×n elements (the harness sets them)
inline size_t c_columns = 1;
inline std::vector<uint32_t> c_block, c_thread;  // per element: the last writer's block (+1; 0: none) and thread
inline std::vector<int32_t> c_line;
inline std::vector<bool> c_twice;  // stored by two threads (counted)
inline long c_collisions = 0;  // elements of C stored by more than one thread

inline void watch_c(float *begin, size_t rows, size_t columns) {
    c_begin = (char *)begin;
    c_end = c_begin + rows * columns * sizeof(float);
    c_columns = columns ? columns : 1;
    c_block.assign(rows * columns, 0);
    c_thread.assign(rows * columns, 0);
    c_line.assign(rows * columns, 0);
    c_twice.assign(rows * columns, false);
}

inline uint3 block_of(uint32_t serial) {
    unsigned x = gridDim.x, xy = gridDim.x * gridDim.y;
    return {serial % x, (serial % xy) / x, serial / xy};
}

// A second thread stores an element of C another thread stored: the first such store is reported.
inline void c_collision(size_t element, int line) {
    static bool reported = false;
    if (reported) return;
    reported = true;
    uint3 t = current->idx, o = thread_of(c_thread[element]), ob = block_of(c_block[element] - 1);
    report("{\"event\": \"c_collision\", \"row\": %zu, \"column\": %zu, \"line\": %d, \"thread\": [%u, %u, %u], "
           "\"block\": [%u, %u, %u], \"other_line\": %d, \"other_thread\": [%u, %u, %u], \"other_block\": [%u, %u, %u]}",
           element / c_columns, element % c_columns, line, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z,
           c_line[element], o.x, o.y, o.z, ob.x, ob.y, ob.z);
}

// Every store through a subscript outside shared memory (instrument.py); only those into C are recorded.
template <class T>
inline T *global_write(T *address, int line) {
    const char *p = (const char *)address;
    if (current == nullptr || p < c_begin || p >= c_end) return address;
    size_t element = (size_t)(p - c_begin) / sizeof(float);
    uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z) + 1;
    uint32_t thread = current->linear;
    if (c_block[element] != 0 && (c_block[element] != block || c_thread[element] != thread)) {
        c_collision(element, line);
        if (!c_twice[element]) ++c_collisions;
        c_twice[element] = true;
    }
    c_block[element] = block;
    c_thread[element] = thread;
    c_line[element] = line;
    return address;
}

// ---- barriers ------------------------------------------------------------------------------------------

inline void syncthreads(int line) {
    current->state = AT_BARRIER;
    current->barrier_line = line;
    yield_to_scheduler();
}

[[noreturn]] inline void trap(int line) {
    uint3 t = current ? current->idx : uint3{0, 0, 0};
    report("{\"event\": \"fault\", \"what\": \"trap\", \"line\": %d, \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           line, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z);
    _exit(3);
}

// ---- printf, capped like the GPU's printf buffer ---------------------------------------------------------

inline size_t printed_bytes = 0;
constexpr size_t PRINTF_CAP = 64 * 1024;

inline int device_printf(const char *format, ...) {
    if (printed_bytes >= PRINTF_CAP) return 0;
    char text[4096];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(text, sizeof text, format, args);
    va_end(args);
    if (length <= 0) return length;
    size_t size = std::min((size_t)length, sizeof text - 1);
    size = std::min(size, PRINTF_CAP - printed_bytes);
    fwrite(text, 1, size, stdout);
    printed_bytes += size;
    if (printed_bytes >= PRINTF_CAP) fprintf(stdout, "\n[... printf output truncated at %zu bytes ...]\n", PRINTF_CAP);
    return length;
}

}  // namespace cuda_emu

// ---- what kernels call ----------------------------------------------------------------------------------
#define __syncthreads() ::cuda_emu::syncthreads(__LINE__)
#define __trap() ::cuda_emu::trap(__LINE__)
#define printf ::cuda_emu::device_printf
// Instrumented shared-memory accesses (the grader rewrites `As[i][j]` into these).
// Variadic, because a preprocessor argument ends at any comma outside parentheses, even in brackets.
#define CUDA_EMU_AT(number) (::cuda_emu::current ? (void)(::cuda_emu::current->line = (number)) : (void)0)
#define CUDA_EMU_READ(...) (*::cuda_emu::shared_read(&(__VA_ARGS__), __LINE__))
#define CUDA_EMU_WRITE(...) (*::cuda_emu::shared_write(&(__VA_ARGS__), __LINE__))
#define CUDA_EMU_UPDATE(...) (*::cuda_emu::shared_update(&(__VA_ARGS__), __LINE__))
#define CUDA_EMU_STORE(...) (*::cuda_emu::global_write(&(__VA_ARGS__), __LINE__))
#define CUDA_EMU_SHARE(name) ::cuda_emu::share(name, #name)

inline void __syncwarp(unsigned = 0xffffffffu) {}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline unsigned __activemask() { return 0xffffffffu; }
inline long long clock64() { return 0; }

template <class A, class B>
inline auto min(A a, B b) -> std::common_type_t<A, B> { return b < a ? b : a; }
template <class A, class B>
inline auto max(A a, B b) -> std::common_type_t<A, B> { return a < b ? b : a; }

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rz(float a, float b) { return a + b; }
inline float __fmul_rz(float a, float b) { return a * b; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline float __expf(float a) { return expf(a); }
inline float __logf(float a) { return logf(a); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float a) { return sinf(a); }
inline float __cosf(float a) { return cosf(a); }
inline float __saturatef(float a) { return a < 0.0f ? 0.0f : (a > 1.0f ? 1.0f : a); }
inline int __float2int_rn(float a) { return (int)lrintf(a); }
inline int __float2int_rz(float a) { return (int)a; }
inline float __int2float_rn(int a) { return (float)a; }
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __popc(unsigned a) { return __builtin_popcount(a); }
inline int __clz(int a) { return a == 0 ? 32 : __builtin_clz((unsigned)a); }
inline int __ffs(int a) { return __builtin_ffs(a); }
template <class T>
inline T __ldg(const T *p) { return *p; }

// Fibers never run at the same time, so plain read-modify-write is atomic here.
template <class T, class U>
inline T atomicAdd(T *p, U v) { T old = *p; *p = old + (T)v; return old; }
template <class T, class U>
inline T atomicSub(T *p, U v) { T old = *p; *p = old - (T)v; return old; }
template <class T, class U>
inline T atomicExch(T *p, U v) { T old = *p; *p = (T)v; return old; }
template <class T, class U>
inline T atomicMin(T *p, U v) { T old = *p; *p = (T)v < old ? (T)v : old; return old; }
template <class T, class U>
inline T atomicMax(T *p, U v) { T old = *p; *p = old < (T)v ? (T)v : old; return old; }
template <class T, class U, class V>
inline T atomicCAS(T *p, U compare, V v) { T old = *p; if (old == (T)compare) *p = (T)v; return old; }
template <class T, class U>
inline T atomicAnd(T *p, U v) { T old = *p; *p = old & (T)v; return old; }
template <class T, class U>
inline T atomicOr(T *p, U v) { T old = *p; *p = old | (T)v; return old; }
template <class T, class U>
inline T atomicXor(T *p, U v) { T old = *p; *p = old ^ (T)v; return old; }
inline unsigned atomicInc(unsigned *p, unsigned limit) { unsigned old = *p; *p = old >= limit ? 0 : old + 1; return old; }
