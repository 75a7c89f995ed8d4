// CPU emulation of the CUDA features a tiled-SGEMM kernel uses.
//
// Each thread of a block is a fiber; fibers switch only at __syncthreads() and at warp collectives
// (shuffles, votes, __syncwarp), in an order the harness chooses (forward, reversed), so a missing barrier
// changes the result deterministically. A warp is 32 consecutive linear thread ids: each lane posts its
// part of a collective and yields; the scheduler resolves the collective once every lane its mask names
// has arrived (harness.cpp, run_warp). Shared arrays are one static copy (blocks run one after another);
// accesses the grader instrumented report to a shadow memory that finds races between barriers,
// independently of the order. Shared memory is
// poisoned at each block's start as on the GPU (late_warps.py), so a tile entry no thread stored reads
// NaN, one that carries a mark naming the read: an element of C the mark reaches names it (MARK_FAMILY);
// every store to C records its writer, so two threads storing one element of C are named too.
//
// A guard macro, not #pragma once: a student's unit includes a precompiled copy of this header first
// (build.py), and then this file by its own name.
#ifndef CUDA_EMU_H_
#define CUDA_EMU_H_

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
// __noinline__ is spelled __attribute__((noinline)) in the student's text by build.py, not a macro here.
#define __restrict__ __restrict
#define __launch_bounds__(...)
// A GNU attribute, which may stand among decl-specifiers (`__shared__ __align__(16) float As[..]`).
#define __align__(n) __attribute__((aligned(n)))
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900

// ---- built-in types and variables ------------------------------------------------------------------
// Vector types with the GPU's alignment, so reinterpret_cast<float4 *> loads behave as there.
#define CUDA_EMU_VECTOR_TYPES(T, name, a2, a4)                                                            \
    struct __attribute__((aligned(sizeof(T)))) name##1 { T x; };                                            \
    struct __attribute__((aligned(a2))) name##2 { T x, y; };                                                 \
    struct name##3 { T x, y, z; };                                                                           \
    struct __attribute__((aligned(a4))) name##4 { T x, y, z, w; };                                           \
    inline name##1 make_##name##1(T x) { return {x}; }                                                      \
    inline name##2 make_##name##2(T x, T y) { return {x, y}; }                                              \
    inline name##3 make_##name##3(T x, T y, T z) { return {x, y, z}; }                                     \
    inline name##4 make_##name##4(T x, T y, T z, T w) { return {x, y, z, w}; }
CUDA_EMU_VECTOR_TYPES(float, float, 8, 16)
CUDA_EMU_VECTOR_TYPES(int, int, 8, 16)
CUDA_EMU_VECTOR_TYPES(unsigned int, uint, 8, 16)
CUDA_EMU_VECTOR_TYPES(short, short, 4, 8)
CUDA_EMU_VECTOR_TYPES(unsigned short, ushort, 4, 8)
CUDA_EMU_VECTOR_TYPES(signed char, char, 2, 4)
CUDA_EMU_VECTOR_TYPES(unsigned char, uchar, 2, 4)
CUDA_EMU_VECTOR_TYPES(long long, longlong, 16, 16)
CUDA_EMU_VECTOR_TYPES(unsigned long long, ulonglong, 16, 16)
CUDA_EMU_VECTOR_TYPES(double, double, 16, 16)
#undef CUDA_EMU_VECTOR_TYPES
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return {x, y, z}; }
};
inline dim3 make_dim3(unsigned x, unsigned y, unsigned z) { return dim3(x, y, z); }

namespace cuda_emu {

enum FiberState { READY, AT_BARRIER, AT_COLLECTIVE, FINISHED };

// The warp collectives. Lanes meet only at one of the same kind with the same mask.
enum Kind { SHFL, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ANY, ALL, SYNCWARP, ACTIVEMASK, MATCH_ANY, MATCH_ALL,
            REDUCE_ADD, REDUCE_MIN, REDUCE_MAX, REDUCE_AND, REDUCE_OR, REDUCE_XOR };
constexpr int WARP = 32;
constexpr size_t MAX_LANE_VALUE = 16;  // bytes a shuffle moves at once (a float4, a double2)

// What a lane posted at a collective, and what the scheduler answered.
struct Collective {
    Kind kind = SYNCWARP;
    unsigned mask = 0;     // the lanes that take part (the lane itself included)
    int source = 0;        // shuffles: the lane read from (already clamped to the lane's segment)
    int line = 0;
    const char *name = "";  // what the student called: "__shfl_down_sync", "tile.shfl_down" ...
    unsigned size = 0;
    alignas(16) unsigned char value[MAX_LANE_VALUE];
    alignas(16) unsigned char result[MAX_LANE_VALUE];
};

struct Fiber {
    void *sp = nullptr;
    char *stack = nullptr;  // lowest address, a PROT_NONE guard page
    uint3 idx{0, 0, 0};
    int linear = 0;
    FiberState state = READY;
    int barrier_line = 0;
    int line = 0;  // the kernel statement this thread runs (instrument.py marks each): where a fault was
    bool read_shared = false;  // read a shared array since the last barrier
    uint32_t trips = 0;        // trips through the tile loop since the thread last reached it (instrument.py)
    bool looped = false;       // reached the tile loop
    bool stored_c = false;     // stored into C
    Collective collective;     // while AT_COLLECTIVE
    Fiber *next_in_warp = nullptr;  // the next lane of this warp in the schedule's order
#if !defined(__x86_64__)
    ucontext_t context;
#endif
};

inline Fiber *current = nullptr;
inline int report_fd = 2;

// ---- the tile loop's trips ----------------------------------------------------------------------------
// instrument.py marks the tile loop: CUDA_EMU_TILE_LOOP() where a thread reaches it, CUDA_EMU_TRIP() first in
// its body. The fewest and most trips any thread made through it in the launch are reported after it
// (harness.cpp): what the phase count was, to set against ceil(k / TILE).
inline uint32_t fewest_trips = 0, most_trips = 0;
inline long looping_threads = 0;  // threads that reached the tile loop (0: no trips to report)

// A thread's count of its last run through the tile loop, added to the launch's.
void count_trips(Fiber &fiber);

void tile_loop_reached();

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::current->idx)
inline uint3 blockIdx{0, 0, 0};
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

namespace cuda_emu {

// ---- reports to the grader: one JSON object per line, written with write(2) --------------------------

void report(const char *format, ...);

void report_thread_and_exit(const char *what, int code);

// ---- fibers ------------------------------------------------------------------------------------------

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *from, and resumes
// the stack `to` the same way: a few nanoseconds, no system call (unlike swapcontext). Defined in the
// harness's own unit alone (CUDA_EMU_DEFINE_SWITCH): the student's unit, linked with it, only calls it.
extern "C" void cuda_emu_switch(void **from, void *to);
#ifdef CUDA_EMU_DEFINE_SWITCH
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
#endif  // CUDA_EMU_DEFINE_SWITCH
#endif

inline void *scheduler_sp = nullptr;
#if !defined(__x86_64__)
inline ucontext_t scheduler_context;
#endif
inline void (*kernel_body)() = nullptr;
constexpr size_t STACK_BYTES = 256 * 1024;

// Hands over to the next lane of the warp that is ready (in the schedule's order), or, after the warp's last,
// to the scheduler: one switch per lane and collective, where a round trip through the scheduler is two.
inline void yield_to_scheduler() {
    Fiber *me = current, *next = me->next_in_warp;
    while (next != nullptr && next->state != READY) next = next->next_in_warp;
#if defined(__x86_64__)
    if (next != nullptr) {
        current = next;
        cuda_emu_switch(&me->sp, next->sp);
    } else {
        cuda_emu_switch(&me->sp, scheduler_sp);
    }
#else
    if (next != nullptr) {
        current = next;
        swapcontext(&me->context, &next->context);
    } else {
        swapcontext(&me->context, &scheduler_context);
    }
#endif
}

// Where each fiber starts: the kernel, then the thread's bookkeeping (emulator_runtime.cpp).
extern "C" void cuda_emu_fiber_entry();

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102  // Linux 6.13
#endif

// Every fiber's stack, in one mapping: each stack above a guard page, so an overflowing stack faults instead
// of corrupting its neighbour. Where the kernel has guard regions the guards split no mapping; elsewhere they
// are PROT_NONE pages. (A mapping and a protected page per fiber were most of a small case's time.)
inline void allocate_stacks(Fiber *fibers, size_t count) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), each = STACK_BYTES + page;
    char *memory = (char *)mmap(nullptr, each * count, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) report_thread_and_exit("out_of_memory", 5);
    for (size_t i = 0; i < count; ++i) {
        char *guard = memory + i * each;
        if (madvise(guard, page, MADV_GUARD_INSTALL) != 0) mprotect(guard, page, PROT_NONE);
        fibers[i].stack = guard;
    }
}

// The mapping allocate_stacks made for these fibers, given back: a worker runs many launches.
inline void release_stacks(Fiber *fibers, size_t count) {
    if (count > 0) munmap(fibers[0].stack, (STACK_BYTES + (size_t)sysconf(_SC_PAGESIZE)) * count);
}

inline void start_fiber(Fiber &fiber) {
    fiber.state = READY;
    fiber.read_shared = false;
    fiber.trips = 0;
    fiber.looped = false;
    fiber.stored_c = false;
#if defined(__x86_64__)
    // Stacks are a page-multiple apart, so their tops would share cache sets: a warp's lanes, switched
    // through in turn, would evict each other. Each starts at a different offset (its colour).
    size_t colour = (size_t)(fiber.linear % 64) * 64;
    auto top = (void **)(((uintptr_t)(fiber.stack + STACK_BYTES - colour)) & ~(uintptr_t)15);
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

// The shadow of a shared entry, in three arrays of one index: what every access reads or writes (Cell, 16 bytes:
// 32 KiB for two 32 × 32 float tiles, where 60-byte cells took 120 KiB, far past a core's L1), what only a
// report needs (CellHistory: written at a store and at a phase's first read), and the __syncwarp counts
// (CellSyncs: touched only once a __syncwarp was resolved in the launch; until then every count is 0, as
// new_launch left them, so storing them changes nothing).
struct Cell {
    uint32_t write_epoch = 0, read_epoch = 0;  // also says the entry was stored in this block: epoch_before_block
    // Thread ids fit 16 bits: a worker's address space (4 GiB, harness.cpp limit_student_code) holds the stacks of
    // fewer than 16 384 fibers.
    int16_t writer = -1, reader = -1, last_reader = -1;
    bool several_readers = false;
    // The readers of this phase were of several warps; else all of `reader`'s warp (read_warp)
    bool several_warps = true;
};
static_assert(sizeof(Cell) == 16, "a cell's hot part is 16 bytes");

struct CellHistory {
    int32_t write_line = 0, read_line = 0;
    uint32_t write_trip = 0, read_trip = 0;  // the tile-loop trip of the latest store, of `reader`'s read
    bool write_after_read = false;  // the writer had read shared memory earlier in the same phase
};

// The __syncwarp count of the accessing warp at the access: lanes of one warp are ordered by a __syncwarp between
// their accesses as threads of a block are by a __syncthreads. read_sync: of the latest read (by last_reader);
// foreign_sync: of the latest read by another thread.
struct CellSyncs {
    uint32_t write_sync = 0, read_sync = 0, foreign_sync = 0;
};

struct Region {
    const char *base;
    size_t bytes;
    const char *name;
    size_t row_elements;  // elements per row for 2-D arrays, 0 for 1-D
    size_t element_bytes;
    size_t first_cell;
    int element_shift;  // log2(element_bytes) where it is a power of two, else -1: a shift, not a division
};

inline int shift_of(size_t bytes) { return bytes && (bytes & (bytes - 1)) == 0 ? __builtin_ctzl(bytes) : -1; }

// The element at `offset` bytes into the region.
inline size_t element_at(const Region &region, size_t offset) {
    return region.element_shift >= 0 ? offset >> region.element_shift : offset / region.element_bytes;
}

inline size_t element_of(const Region &region, const void *address) {
    return element_at(region, (const char *)address - region.base);
}

// The entry's row and column in its array (a 1-D array's: row 0).
struct Entry {
    size_t row, column;
};
inline Entry entry_of(const Region &region, const void *address) {
    size_t element = element_of(region, address);
    return region.row_elements ? Entry{element / region.row_elements, element % region.row_elements}
                               : Entry{0, element};
}

extern std::vector<Region> regions;
extern std::vector<Cell> cells;
extern std::vector<CellHistory> cell_histories;
extern std::vector<CellSyncs> cell_syncs;
inline uint32_t epoch = 1;  // advances at every barrier and every new block
// The epoch before this block's first (new_block then advances it): an entry whose write_epoch is past it was
// stored in this block, as epochs only grow within a launch.
inline uint32_t epoch_before_block = 0;
inline bool warp_synced = false;  // a __syncwarp was resolved in this launch: cell_syncs are kept from then on
inline int epoch_line = 0;  // the line of the barrier that began this epoch (0: the block's start)
inline long races_found = 0;
inline uint32_t block_serial = 1;  // advances at every new block (new_block)

// ---- the mark of a value read from a shared entry no thread stored --------------------------------------
// Shared memory is poisoned at each block's start, as the GPU path's blocks fill theirs (late_warps.py), with
// a NaN of the mark's family: every such NaN is a quiet NaN whose payload's top bits are MARK_FAMILY's, its low
// 16 bits an index (0: no read recorded). The first read of an entry that still holds one, at each line, in each
// block, is recorded (unwritten_reads) and the entry's words then hold the NaN naming that record. The CPU keeps
// a NaN operand's payload through arithmetic (+, -, *, fmaf, a product with 0, a helper's return; the sign is
// ignored, so -x keeps it), so an element of C that ends holding a mark names the unwritten read whose value
// reached it (report_unwritten_in_c). A comparison, a conversion to an integer or fminf/fmaxf drops a mark: a
// value that only decides a branch is not followed. No other NaN is of the family: C's poison (judge/layout.py
// POISON_BITS, also past A and B) and the NaN arithmetic makes (0x7FC00000 and its negative) are not, so a mark
// in C is never one of those; a student who stores one on purpose stores a NaN, which is wrong anyway.
constexpr uint32_t MARK_FAMILY = 0x7FCB0000u, MARK_MASK = 0x7FFF0000u, MARK_INDEX = 0xFFFFu;
constexpr uint32_t SHARED_POISON = MARK_FAMILY;  // index 0: an entry no thread of the block read or stored yet

inline bool is_mark(uint32_t bits) { return (bits & MARK_MASK) == MARK_FAMILY; }

// A read of a shared entry no thread of its block had stored: where, by whom, which entry.
struct UnwrittenRead {
    const char *array;
    bool two_d;
    size_t row, column;
    int line;
    uint3 thread, block;
    uint32_t block_serial;
};
extern std::vector<UnwrittenRead> unwritten_reads;  // record i is named by index i + 1; reset per launch
constexpr size_t MAX_UNWRITTEN_READS = MARK_INDEX;

void poison(const Region &region);

// A block starts: its shared memory holds poison again, and no entry of it is stored yet.
void new_block();

extern std::vector<uint32_t> warp_syncs;  // per warp of the block: __syncwarp()s resolved so far

// A shared array's region and shadow, the first time a thread reaches its declaration (its later threads find it).
void share_region(const char *base, size_t bytes, const char *name, size_t row_elements, size_t element_bytes);

template <class Array>
inline void share(Array &array, const char *name) {
    using Element = std::remove_all_extents_t<Array>;
    size_t row = std::rank_v<Array> >= 2 ? std::extent_v<Array, std::rank_v<Array> - 1> : 0;
    share_region((const char *)&array, sizeof(Array), name, row, sizeof(Element));
}

// ---- dynamic shared memory (`extern __shared__ T name[];`) ------------------------------------------------
// One buffer for every extern __shared__ array (they alias, as on the GPU), of the launch's size (the lab's
// dynamic shared memory: contract.py, DYNAMIC_SHARED); instrument.py turns each declaration into a pointer
// initialized from DynamicShared. The buffer is static, so a file-scope declaration can point at it before
// the launch is known; the shadow memory covers the launch's bytes of it.
constexpr size_t DYNAMIC_SHARED_CAPACITY = 48 * 1024;
alignas(128) inline unsigned char dynamic_shared[DYNAMIC_SHARED_CAPACITY];
inline size_t dynamic_shared_bytes = 0;  // the launch's
inline const char *dynamic_name = nullptr;
inline size_t dynamic_element = 1;

void share_dynamic();

struct DynamicShared {
    const char *name;
    template <class T>
    operator T *() const {
        if (dynamic_name == nullptr) {  // the first declaration names the buffer in race reports
            dynamic_name = name;
            dynamic_element = std::max<size_t>(1, sizeof(T));
        }
        share_dynamic();
        return (T *)dynamic_shared;
    }
};

// ---- the access profile (issue 26) ---------------------------------------------------------------------
// In a profile run (harness.cpp, schedule "profile") every instrumented access is recorded with its thread,
// line and offset in its array. At each block's end, a lane's n-th execution of an access site (line, kind,
// array) and the n-th execution by the other lanes of its warp form one warp-level request, as the GPU
// issues it: a global one touches some 32-byte sectors, a shared one takes as many turns as the most
// distinct 4-byte words any one of the 32 banks is asked for (one word asked by several lanes is a
// broadcast, counted once). Offsets are from the array's start: cudaMalloc'd buffers and shared arrays
// start aligned on the GPU, whatever their place in this process.
enum AccessKind { GLOBAL_LOAD, GLOBAL_STORE, SHARED_LOAD, SHARED_STORE };
inline const char *const ACCESS_KINDS[] = {"global_load", "global_store", "shared_load", "shared_store"};
inline bool profiling = false;

struct GlobalBuffer {
    const char *base;
    size_t bytes;
    const char *name;
};
extern std::vector<GlobalBuffer> global_buffers;  // A, B and C, registered by the harness

struct AccessSite {
    int line;
    AccessKind kind;
    const char *array;
    size_t rows, columns;  // a 2-D shared array's shape (0, 0 otherwise)
    size_t bytes;          // of each lane's access (its first): 4 for a float
    long requests = 0, total = 0, worst = 0, ideal = 0;  // total and worst: sectors, or turns (ways)
    long lines = 0;  // global: the 128-byte lines the requests touched (the L1's work: one wavefront each)
    long long stride = 0;  // bytes from lane 0's offset to lane 1's, in the first request both made
    bool strided = false;
};
struct Access {
    uint32_t site, warp, nth, lane;
    size_t offset;
    uint32_t bytes;
};
extern std::vector<AccessSite> access_sites;
extern std::vector<Access> block_accesses;  // this block's, grouped into requests at its end
extern std::vector<std::vector<uint32_t>> executions;  // per thread, per site: how often it ran in this block
constexpr size_t MAX_BLOCK_ACCESSES = 1u << 22;

inline uint32_t last_site = 0;  // the site of the previous access: most accesses repeat it

uint32_t site_of(int line, AccessKind kind, const char *array, size_t rows, size_t columns, size_t bytes);

void record_access(int line, AccessKind kind, const char *array, size_t rows, size_t columns, size_t offset,
                          size_t bytes);

void profile_global(const void *address, size_t bytes, int line, AccessKind kind);

void profile_shared(const Region &region, const void *address, size_t bytes, int line, AccessKind kind);

// One request: the lanes' accesses [first, last) of one site, warp and execution.
void count_request(AccessSite &site, const Access *first, const Access *last);

// A block ended: its accesses become requests.
void profile_block_end();

// Block-wide barriers a profile run's blocks completed, per line of __syncthreads (the speed model's barriers).
extern std::vector<std::pair<int, long>> barrier_lines;

void count_barrier(int line);

void report_profile();

// Every load through a subscript of the kernel's pointer parameters (instrument.py): recorded in a profile
// run, and otherwise the address itself.
template <class T>
inline T *global_read(T *address, int line) {
    if (profiling && current != nullptr) profile_global((const void *)address, sizeof(T), line, GLOBAL_LOAD);
    return address;
}

inline int warp_of(int linear) { return (int)((unsigned)linear / WARP); }  // a shift: ids are never negative

// The warp of every reader of the entry in its latest phase, -1 when they were of several warps.
inline int read_warp(const Cell &cell) { return cell.several_warps ? -1 : warp_of(cell.reader); }

inline uint3 thread_of(int linear) {
    unsigned x = blockDim.x, xy = blockDim.x * blockDim.y;
    return {linear % x, (linear % xy) / x, linear / xy};
}

// Whether a launch reported its first race of each kind, its first unstored read and its first collision in C.
// Namespace variables, not function statics: new_launch resets them, and the harness's own object then defines
// them too (statics.py tells the emulator's variables from the student's by that object's symbols).
inline bool race_reported[2] = {false, false};
inline bool unstored_reported = false;
inline bool collision_reported = false;

// A store and a read (or two stores) of one shared element by different threads with no barrier between.
[[gnu::cold, gnu::noinline]]
void race(const Region &region, const void *address, const char *kind, int store_line,
                 int store_thread, int other_line, int other_thread, bool store_after_read, uint32_t store_trip,
                 uint32_t other_trip);

// The entry's words made to hold the mark naming this read (the first at this line in this block), so the value
// the thread reads carries it (see MARK_FAMILY). Entries that are not whole words (a char tile) are not marked.
void mark_read(const Region &region, const void *address, int line);

// A read of a shared entry that no thread of its block stored: its value is marked, and the first such read of
// the launch is reported (whether it matters is whether a mark reaches C: report_unwritten_in_c).
[[gnu::cold, gnu::noinline]]
void unstored_read(const Region &region, const void *address, int line);

// ---- the instrumented shared accesses -------------------------------------------------------------------------
// Each has two paths. The full one (emulator_runtime.cpp, out of line) does all the bookkeeping: the access
// profile, an entry no thread stored, races, arrays past the hot ones. The inline one, at each access in the
// student's code, is a tile loop's common case, where none of those applies: it makes the same changes to the
// shadow as the full one would, in a few instructions (issue 50: the shadow was most of an emulated SGEMM's time),
// and hands every other access to the full one.


// The first HOT_REGIONS shared arrays of power-of-two elements, with where their shadow lies: the inline paths
// find an entry's cells in one of them by a compare and a shift (an unused slot holds no bytes: nothing falls in
// it). Made again whenever a region is added, as the shadow's vectors may then move, and empty in a profile run,
// whose every access the full path records: index_hot_regions (new_launch calls it).
struct HotRegion {
    const char *base = nullptr;
    size_t bytes = 0;
    Cell *cells = nullptr;  // of its first element, in `cells`
    CellHistory *histories = nullptr;
    CellSyncs *syncs = nullptr;
    size_t shift = 0;  // log2 of its elements' bytes
    const Region *region = nullptr;  // in `regions`
};
constexpr int HOT_REGIONS = 4;
inline HotRegion hot_regions[HOT_REGIONS];

void index_hot_regions();

// What an address in no hot region finds: a cell no inline path takes (stored "after" every epoch), so one test
// sends it to the full path, with the accesses the inline paths leave. Read-only: no access changes it, and a
// variable the student's unit alone defined would count as the kernel's state (statics.py).
inline const Cell no_hot_cell{UINT32_MAX, UINT32_MAX};

// The full paths: what the inline ones hand over, with the cell they found (no_hot_cell: none) and its region.
[[gnu::noinline]] void shared_read_full(const void *address, const HotRegion *hot, const Cell *cell, size_t bytes,
                                        int line);
[[gnu::noinline]] void shared_write_full(const void *address, const HotRegion *hot, const Cell *cell, size_t bytes,
                                         int line);

// The cell of the entry at `address` where a hot region holds it (and the region), else no_hot_cell.
[[gnu::always_inline]] inline Cell *hot_cell(const void *address, const HotRegion **region) {
#pragma GCC unroll 4
    for (const HotRegion &hot : hot_regions) {
        size_t offset = (size_t)((const char *)address - hot.base);  // one compare: below base, it wraps
        if (offset < hot.bytes) {
            *region = &hot;
            return hot.cells + (offset >> hot.shift);
        }
    }
    *region = hot_regions;
    return const_cast<Cell *>(&no_hot_cell);  // never written: its epochs send every access to the full path
}

// The history and the __syncwarp counts of a hot region's cell (the same index in cell_histories, cell_syncs).
[[gnu::always_inline]] inline CellHistory &history_of(const HotRegion &hot, const Cell *cell) {
    return hot.histories[cell - hot.cells];
}
[[gnu::always_inline]] inline CellSyncs &syncs_of(const HotRegion &hot, const Cell *cell) {
    return hot.syncs[cell - hot.cells];
}

// Once a __syncwarp was resolved in the launch: the read's __syncwarp count, and the previous reader's as the
// latest foreign one where it was another thread (as the full path keeps them).
[[gnu::always_inline]] inline void count_read_syncs(Cell &cell, CellSyncs &syncs, int me) {
    if (cell.last_reader != me) {
        syncs.foreign_sync = syncs.read_sync;
        cell.last_reader = (int16_t)me;
    }
    syncs.read_sync = warp_syncs[warp_of(me)];
}

// A read of an entry stored in an earlier phase of this block (epoch_before_block < write_epoch < epoch: neither
// unstored nor racing with a store), inline: the phase's readers, as the full path records them. One call of the
// full path for all the rest: where the kernel's arithmetic sits in registers around it decides which of two
// marked values survives (see MARK_FAMILY), and a second call per access moved a tile loop's sum into memory.
template <class T>
[[gnu::always_inline]] inline T *shared_read(T *address, int line) {
    const void *where = (const void *)address;  // drops a volatile of the element type
    const HotRegion *hot;
    Cell *cell = hot_cell(where, &hot);
    Fiber *thread = current;
    uint32_t now = epoch;
    if (__builtin_expect(cell->write_epoch <= epoch_before_block || cell->write_epoch >= now, 0)) {
        shared_read_full(where, hot, cell, sizeof(T), line);
        return address;
    }
    int me = thread->linear;
    if (cell->read_epoch == now) {
        // last_reader is kept from the launch's first resolved __syncwarp on (count_read_syncs): until then every
        // __syncwarp count is 0, so the reader it names changes no count and no decision (reads_ordered)
        int reader = cell->reader;
        if (reader != me) {
            cell->several_readers = true;
            if ((unsigned)(reader ^ me) >= WARP) cell->several_warps = true;  // another warp's (ids are >= 0)
        }
    } else {  // the phase's first read of it
        cell->read_epoch = now;
        cell->reader = cell->last_reader = (int16_t)me;
        cell->several_readers = cell->several_warps = false;
        CellHistory &history = history_of(*hot, cell);
        history.read_line = line;
        history.read_trip = thread->trips;
    }
    if (__builtin_expect(warp_synced, 0)) count_read_syncs(*cell, syncs_of(*hot, cell), me);
    thread->read_shared = true;
    return address;
}

// A store to an entry neither stored nor read in this phase (write_epoch < epoch: a stored entry's is at most
// epoch), inline: no race, and only the writer is recorded.
template <class T>
[[gnu::always_inline]] inline T *shared_write(T *address, int line) {
    const void *where = (const void *)address;  // drops a volatile of the element type
    const HotRegion *hot;
    Cell *cell = hot_cell(where, &hot);
    Fiber *thread = current;
    uint32_t now = epoch;
    if (__builtin_expect(cell->write_epoch >= now || cell->read_epoch == now, 0)) {
        shared_write_full(where, hot, cell, sizeof(T), line);
        return address;
    }
    if (__builtin_expect(warp_synced, 0)) syncs_of(*hot, cell).write_sync = warp_syncs[warp_of(thread->linear)];
    CellHistory &history = history_of(*hot, cell);
    history.write_trip = thread->trips;
    history.write_line = line;
    history.write_after_read = thread->read_shared;
    cell->write_epoch = now;
    cell->writer = (int16_t)thread->linear;
    return address;
}

template <class T>
[[gnu::always_inline]] inline T *shared_update(T *address, int line) {
    shared_read(address, line);
    return shared_write(address, line);
}

// ---- who stored each element of C ------------------------------------------------------------------------

inline char *c_begin = nullptr, *c_end = nullptr;  // C's m×n elements (the harness sets them)
inline size_t c_rows = 0, c_columns = 1;
extern std::vector<uint32_t> c_block, c_thread;  // per element: the last writer's block (+1; 0: none) and thread
extern std::vector<int32_t> c_line;
extern std::vector<bool> c_twice;  // stored by two threads (counted)
inline long c_collisions = 0;  // elements of C stored by more than one thread

// Which element each thread stores, against the launch's: the grid's x over C's columns (row = blockIdx.y * T +
// threadIdx.y, column = blockIdx.x * T + threadIdx.x), or over its rows (launch_x_rows, the case line's).
inline bool launch_x_rows = false;
inline long c_stores = 0, c_as_launched = 0, c_transposed = 0;  // stores into C; as the launch maps; transposed
struct Misplaced {
    bool seen = false;
    uint3 thread, block;
    size_t row, column;
    int line;
};
inline Misplaced first_misplaced;  // the first store into C at another element than the launch's

// Threads that stored nothing into C though the launch gives them an element of it: a few, the first whose
// element no thread stored by the launch's end is reported (harness.cpp).
struct Unstored {
    uint3 thread, block;
    size_t row, column;
};
extern std::vector<Unstored> unstored_threads;
constexpr size_t MAX_UNSTORED = 64;

// A thread finished: did it store into C, where the launch gives it an element of C?
void thread_done();

void watch_c(float *begin, size_t rows, size_t columns);

uint3 block_of(uint32_t serial);

// A second thread stores an element of C another thread stored: the first such store is reported.
void c_collision(size_t element, int line);

// The launch's end: the elements of C that hold a mark (a value read from a shared entry no thread of its block
// stored reached them), how many, and the first of them with who stored it and, where the mark names one, the
// read it came from. Each then holds the plain poison: which read a mark names depends on the threads' order,
// and C must not (case_files.py compares the orders' outputs bit for bit). Where no thread read an entry no
// thread stored, a mark in C is a NaN the kernel made on purpose: wrong, but not from such a read.
void report_unwritten_in_c();

// A store into C's element: is it the one the launch gives the thread, or the one of the transposed launch?
void map_store(size_t element, int line);

// A store into C's element by the current thread: its writer recorded, a second writer reported (c_collision).
void c_store(size_t element, int line);

// Every store through a subscript outside shared memory (instrument.py); only those into C are recorded.
template <class T>
inline T *global_write(T *address, int line) {
    if (profiling && current != nullptr) profile_global((const void *)address, sizeof(T), line, GLOBAL_STORE);
    const char *p = (const char *)address;
    if (current != nullptr && p >= c_begin && p < c_end) c_store((size_t)(p - c_begin) / sizeof(float), line);
    return address;
}

// ---- the sites: loads and stores through the kernel's pointer parameters (instrument.py, sites.py) ------------
// Each names its site's number; an index X * S + Y also gives X and S, so the emulator sees which element
// [X][Y] of which matrix (A, B or C, by the pointer) the thread meant, in rows S long. A site reports, once per
// launch and kind, the first access whose stride is not the matrix's row length, whose row is past its rows, or
// whose column is past its row; and a read of an element of C no thread stored yet in the launch (C += v).
constexpr int MAX_SITES = 256;  // sites.py MAX_SITES
enum Misindex { STRIDE = 1, ROW = 2, COLUMN = 4 };
struct Matrix {
    const char *base;
    long long rows, columns;
    const char *name;
};
inline Matrix matrices[3];  // A, B and C as the harness launched them
inline unsigned char site_reported[MAX_SITES];  // per site: the Misindex kinds reported in this launch
inline bool c_read_reported = false;

// The latest access whose index was off (cold: only such accesses write it): a fault at its address is told
// in the element the thread meant (harness.cpp, on_fault).
struct Misindexed {
    const char *address = nullptr;
    size_t bytes = 0;
    int site = -1;
    const char *matrix = "";
    long long row = 0, column = 0, stride = 0;
};
inline Misindexed last_misindexed;

[[gnu::cold, gnu::noinline]]
void misindexed(const Matrix &matrix, const void *address, size_t bytes, int site, long long row,
                       long long column, long long stride);

// A read of C: of an element no thread has stored in this launch, C is not zeroed (the first is reported).
[[gnu::noinline]]
void c_read(const void *address, int site);

// What a site's access means: its matrix, the element [row][column] of an index row * stride + column (stride 0:
// the index is not of that form), and whether it reads C before any thread stored there.
// Inlined at every load of A and B: their common path is a few compares (stride 0 folds its checks away).
template <class T, class P>
[[gnu::always_inline]] inline void site_access(const T *address, const P *base, long long row, long long stride,
                                               int site, bool reads) {
    const Matrix *matrix = (const char *)base == matrices[0].base   ? &matrices[0]
                           : (const char *)base == matrices[1].base ? &matrices[1]
                           : (const char *)base == matrices[2].base ? &matrices[2]
                                                                    : nullptr;
    if (matrix == nullptr || base == nullptr) return;
    if (stride != 0 && sizeof(T) == sizeof(float) && sizeof(P) == sizeof(float)) {
        long long column = (long long)(address - (const T *)(const void *)base) - row * stride;
        // A stride shows only past row 0: there any stride reaches the element meant
        bool off = (stride != matrix->columns && row != 0) | ((unsigned long long)row >= (unsigned long long)matrix->rows) |
                   ((unsigned long long)column >= (unsigned long long)matrix->columns);
        if (__builtin_expect(off, 0)) misindexed(*matrix, address, sizeof(T), site, row, column, stride);
    }
    if (reads && matrix == &matrices[2] && !c_read_reported) c_read(address, site);
}

template <class T, class P>
[[gnu::always_inline]] inline T *site_read(T *address, const P *base, long long row, long long stride, int site,
                                           int line) {
    site_access(address, base, row, stride, site, true);
    return global_read(address, line);
}

template <class T, class P>
inline T *site_write(T *address, const P *base, long long row, long long stride, int site, int line, bool reads) {
    site_access(address, base, row, stride, site, reads);
    return global_write(address, line);
}

// ---- barriers ------------------------------------------------------------------------------------------

inline void syncthreads(int line) {
    current->state = AT_BARRIER;
    current->barrier_line = line;
    yield_to_scheduler();
}

// ---- warp collectives ---------------------------------------------------------------------------------

inline int lane_of(const Fiber &fiber) { return fiber.linear % WARP; }

// Posts this lane's part of a collective and waits for the scheduler to resolve it with the other lanes.
template <class T>
inline T collective(Kind kind, const char *name, unsigned mask, const T &value, int source, int line) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= MAX_LANE_VALUE,
                  "the CPU emulator shuffles values of at most 16 bytes");
    Collective &posted = current->collective;
    posted.kind = kind;
    posted.name = name;
    posted.mask = mask | (1u << lane_of(*current));
    posted.source = source;
    posted.line = line;
    posted.size = sizeof(T);
    memcpy(posted.value, &value, sizeof(T));
    current->state = AT_COLLECTIVE;
    yield_to_scheduler();
    T result;
    memcpy(&result, posted.result, sizeof(T));
    return result;
}

// The lane a shuffle reads, as the GPU computes it: within the caller's segment of `width` lanes; a lane
// outside the segment (or the warp) reads its own value.
inline int shuffle_source(Kind kind, int lane, int operand, int width) {
    if (width <= 0 || width > WARP || (width & (width - 1))) width = WARP;  // undefined on the GPU
    int first = lane & ~(width - 1), last = first + width - 1;
    switch (kind) {
        case SHFL: return first + (operand & (width - 1));
        case SHFL_UP: return lane - operand >= first ? lane - operand : lane;
        case SHFL_DOWN: return lane + operand <= last ? lane + operand : lane;
        default: {  // SHFL_XOR
            int other = lane ^ operand;
            return other >= 0 && other <= last ? other : lane;
        }
    }
}

template <class T>
inline T lane_value(const Fiber &fiber) {
    T value;
    memcpy(&value, fiber.collective.value, sizeof(T));
    return value;
}

template <class T>
inline void answer(Fiber &fiber, T value) {
    memcpy(fiber.collective.result, &value, sizeof(T));
}

// The answer of one reduction over the lanes of `mask` (all at it): __reduce_*_sync on unsigned/int values.
void resolve_reduction(Fiber *const *by_lane, unsigned mask, Kind kind);

// Answers the lanes of `mask`, all at the collective `kind`.
void resolve(Fiber *const *by_lane, unsigned mask, Kind kind, int warp);

// One round of a warp's collectives, once every lane has run as far as it can: resolves each collective
// whose lanes have all arrived, and makes them ready. With none, the lanes at __activemask() on one line
// learn which lanes are there (those converged with them). Returns whether any lane was made ready.
bool resolve_warp(Fiber *const *by_lane, int warp);

[[noreturn]] void trap(int line);

// ---- printf, capped like the GPU's printf buffer ---------------------------------------------------------

inline size_t printed_bytes = 0;
constexpr size_t PRINTF_CAP = 64 * 1024;

int device_printf(const char *format, ...);

// ---- a launch starts as in a fresh process ------------------------------------------------------------
// A worker runs a case's launches, and a stateful kernel's cases, in one process: what the emulator keeps
// between launches is reset here (the student's own statics are not: they persist, as device globals do on
// the GPU). Touching every variable here also makes the harness's object define each one (statics.py).
void new_launch();

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
#define CUDA_EMU_LOAD(...) (*::cuda_emu::global_read(&(__VA_ARGS__), __LINE__))
// A site (instrument.py): its number, the pointer, and X and S of an index X * S + Y (0, 0: not of that form).
#define CUDA_EMU_LOAD_AT(site, base, row, stride, ...)                                                             \
    (*::cuda_emu::site_read(&(__VA_ARGS__), base, (long long)(row), (long long)(stride), site, __LINE__))
#define CUDA_EMU_STORE_AT(site, base, row, stride, ...)                                                            \
    (*::cuda_emu::site_write(&(__VA_ARGS__), base, (long long)(row), (long long)(stride), site, __LINE__, false))
#define CUDA_EMU_UPDATE_AT(site, base, row, stride, ...)                                                           \
    (*::cuda_emu::site_write(&(__VA_ARGS__), base, (long long)(row), (long long)(stride), site, __LINE__, true))
#define CUDA_EMU_TILE_LOOP() ::cuda_emu::tile_loop_reached()
#define CUDA_EMU_TRIP() (::cuda_emu::current ? (void)++::cuda_emu::current->trips : (void)0)
#define CUDA_EMU_SHARE(name) ::cuda_emu::share(name, #name)
#define CUDA_EMU_DYNAMIC_SHARED(name) ::cuda_emu::DynamicShared{#name}

// Warp shuffles and votes: the lanes of `mask` meet here (cuda_emu::collective). Each takes the caller's line
// as a defaulted last argument, so a diagnosis names the student's line.
#define CUDA_EMU_LINE int line = __builtin_LINE()
#define CUDA_EMU_SHUFFLE(function, kind, Operand)                                                                 \
    template <class T>                                                                                             \
    inline T function(unsigned mask, T var, Operand operand, int width = warpSize, CUDA_EMU_LINE) {                \
        using namespace ::cuda_emu;                                                                                \
        int source = shuffle_source(kind, lane_of(*current), (int)operand, width);                                 \
        return collective(kind, #function, mask, var, source, line);                                               \
    }
CUDA_EMU_SHUFFLE(__shfl_sync, ::cuda_emu::SHFL, int)
CUDA_EMU_SHUFFLE(__shfl_up_sync, ::cuda_emu::SHFL_UP, unsigned int)
CUDA_EMU_SHUFFLE(__shfl_down_sync, ::cuda_emu::SHFL_DOWN, unsigned int)
CUDA_EMU_SHUFFLE(__shfl_xor_sync, ::cuda_emu::SHFL_XOR, int)
#undef CUDA_EMU_SHUFFLE

inline unsigned __ballot_sync(unsigned mask, int predicate, CUDA_EMU_LINE) {
    return ::cuda_emu::collective(::cuda_emu::BALLOT, "__ballot_sync", mask, (int)(predicate != 0), 0, line);
}
inline int __any_sync(unsigned mask, int predicate, CUDA_EMU_LINE) {
    return ::cuda_emu::collective(::cuda_emu::ANY, "__any_sync", mask, (int)(predicate != 0), 0, line);
}
inline int __all_sync(unsigned mask, int predicate, CUDA_EMU_LINE) {
    return ::cuda_emu::collective(::cuda_emu::ALL, "__all_sync", mask, (int)(predicate != 0), 0, line);
}
inline int __uni_sync(unsigned mask, int predicate, CUDA_EMU_LINE) {
    unsigned votes = ::cuda_emu::collective(::cuda_emu::BALLOT, "__uni_sync", mask, (int)(predicate != 0), 0, line);
    return votes == 0 || votes == (mask | 1u << ::cuda_emu::lane_of(*::cuda_emu::current));
}
inline void __syncwarp(unsigned mask = 0xffffffffu, CUDA_EMU_LINE) {
    ::cuda_emu::collective(::cuda_emu::SYNCWARP, "__syncwarp", mask, 0, 0, line);
}
// The lanes converged with the caller: those at this same call once every lane of the warp has run as far as
// it can (a lane waiting at a barrier, at another collective or returned is not active).
inline unsigned __activemask(CUDA_EMU_LINE) {
    return ::cuda_emu::collective(::cuda_emu::ACTIVEMASK, "__activemask", 0u, 0u, 0, line);
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, CUDA_EMU_LINE) {
    return ::cuda_emu::collective(::cuda_emu::MATCH_ANY, "__match_any_sync", mask, value, 0, line);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int *predicate, CUDA_EMU_LINE) {
    unsigned same = ::cuda_emu::collective(::cuda_emu::MATCH_ALL, "__match_all_sync", mask, value, 0, line);
    *predicate = same != 0;
    return same;
}
#define CUDA_EMU_REDUCE(function, kind)                                                                            \
    inline unsigned function(unsigned mask, unsigned value, CUDA_EMU_LINE) {                                       \
        return ::cuda_emu::collective(kind, #function, mask, value, 0, line);                                      \
    }                                                                                                              \
    inline int function(unsigned mask, int value, CUDA_EMU_LINE) {                                                \
        return ::cuda_emu::collective(kind, #function, mask, value, 1, line);                                      \
    }
CUDA_EMU_REDUCE(__reduce_add_sync, ::cuda_emu::REDUCE_ADD)
CUDA_EMU_REDUCE(__reduce_min_sync, ::cuda_emu::REDUCE_MIN)
CUDA_EMU_REDUCE(__reduce_max_sync, ::cuda_emu::REDUCE_MAX)
CUDA_EMU_REDUCE(__reduce_and_sync, ::cuda_emu::REDUCE_AND)
CUDA_EMU_REDUCE(__reduce_or_sync, ::cuda_emu::REDUCE_OR)
CUDA_EMU_REDUCE(__reduce_xor_sync, ::cuda_emu::REDUCE_XOR)
#undef CUDA_EMU_REDUCE

inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
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
inline float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmaf_ru(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmaf_rd(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_ru(float a, float b) { return a + b; }
inline float __fadd_rd(float a, float b) { return a + b; }
inline float __fmul_ru(float a, float b) { return a * b; }
inline float __fmul_rd(float a, float b) { return a * b; }
inline float __fsub_rz(float a, float b) { return a - b; }
inline float __fdiv_rz(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
inline float __exp10f(float a) { return powf(10.0f, a); }
inline float __log2f(float a) { return log2f(a); }
inline float __log10f(float a) { return log10f(a); }
inline float __tanf(float a) { return tanf(a); }
inline void __sincosf(float a, float *s, float *c) { *s = sinf(a); *c = cosf(a); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline int __float2int_rn(float a) { return (int)lrintf(a); }
inline int __float2int_rd(float a) { return (int)floorf(a); }
inline int __float2int_ru(float a) { return (int)ceilf(a); }
inline unsigned __float2uint_rn(float a) { return (unsigned)lrintf(a); }
inline unsigned __float2uint_rz(float a) { return (unsigned)a; }
inline long long __float2ll_rn(float a) { return llrintf(a); }
inline long long __float2ll_rz(float a) { return (long long)a; }
inline float __uint2float_rn(unsigned a) { return (float)a; }
inline float __ll2float_rn(long long a) { return (float)a; }
inline int __double2int_rn(double a) { return (int)lrint(a); }
inline float __double2float_rn(double a) { return (float)a; }
inline int __float_as_int(float a) { int i; memcpy(&i, &a, 4); return i; }
inline unsigned __float_as_uint(float a) { unsigned i; memcpy(&i, &a, 4); return i; }
inline float __int_as_float(int a) { float f; memcpy(&f, &a, 4); return f; }
inline float __uint_as_float(unsigned a) { float f; memcpy(&f, &a, 4); return f; }
inline long long __double_as_longlong(double a) { long long i; memcpy(&i, &a, 8); return i; }
inline double __longlong_as_double(long long a) { double d; memcpy(&d, &a, 8); return d; }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned __brev(unsigned a) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((a >> i) & 1u) << (31 - i);
    return r;
}
inline int __popcll(unsigned long long a) { return __builtin_popcountll(a); }
inline int __clzll(long long a) { return a == 0 ? 64 : __builtin_clzll((unsigned long long)a); }
inline int __ffsll(long long a) { return __builtin_ffsll(a); }
inline int __float2int_rz(float a) { return (int)a; }
inline float __int2float_rn(int a) { return (float)a; }
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __popc(unsigned a) { return __builtin_popcount(a); }
inline int __clz(int a) { return a == 0 ? 32 : __builtin_clz((unsigned)a); }
inline int __ffs(int a) { return __builtin_ffs(a); }
// Loads and stores with a cache hint (any type: float, float4, int2, ...): plain accesses here.
template <class T>
inline T __ldg(const T *p) { return *p; }
template <class T>
inline T __ldcg(const T *p) { return *p; }
template <class T>
inline T __ldca(const T *p) { return *p; }
template <class T>
inline T __ldcs(const T *p) { return *p; }
template <class T>
inline T __ldlu(const T *p) { return *p; }
template <class T>
inline T __ldcv(const T *p) { return *p; }
template <class T>
inline void __stcg(T *p, T v) { *p = v; }
template <class T>
inline void __stcs(T *p, T v) { *p = v; }
template <class T>
inline void __stwb(T *p, T v) { *p = v; }

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

#endif  // CUDA_EMU_H_
