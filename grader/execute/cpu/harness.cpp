// Runs one student kernel on the CPU: a server in the grade's sandbox, with a worker process per task.
//
//   harness --serve FD    answers on FD "hello TILE" (TILE_SIZE, or "none"), then reads commands on stdin:
//     task ID ORDER LAYOUT LAUNCHES STDOUT COUNT   followed by COUNT case lines: a worker runs them in turn
//     kill ID                                      ends task ID's worker
//   and answers "done ID I" when task ID's worker finished its case I (0 first), "exit ID R" when the worker
//   ended: R as Python gives it (the exit code, or minus the signal). End of input ends the server.
//
// ORDER: forward, reversed, or profile (forward, every access counted as the GPU would); LAYOUT: end (A, B
// and C end at an inaccessible page) or start (they start right after one); LAUNCHES: how often each case
// runs, on the same inputs, C poisoned again and A and B restored before each launch; STDOUT: where the
// worker's printf goes ("-": nowhere). A case line (harness_driver.py, case_line):
//   m n k GRID BLOCK X dynamic_shared c_offset c_floats SEGMENTS a.bin b.bin REPORT OUT [BLOCKS]
// (GRID, BLOCK: three numbers each; X: what the grid's x runs over, "columns" or "rows" of C; dynamic_shared:
// bytes of `extern __shared__` memory; c_offset: floats of guard band before C; SEGMENTS: C's image before a
// launch, three (first word, words, bit pattern); BLOCKS: a file of the blocks to run, "x y" a line, for a case
// run by sampled blocks (sampling.py), else every block of the grid runs). Reports
// go to REPORT as JSON lines; launch L's C (guards included) to OUT-L.bin.
//
// A worker is forked from the server, so each task starts where the student's static initializers left the
// process, as a fresh one would; within a task, the student's statics persist between launches and cases,
// as device globals do in one GPU process.
//
// The student's kernel is not in this file: student_unit.cpp holds it, compiled per submission and linked
// with this file's object, which is compiled once (build.py). None of the student's macros reach this file.
#define CUDA_EMU_DEFINE_SWITCH
#include "cuda_emu.h"

#include <fcntl.h>
#include <poll.h>
#include <cerrno>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <numeric>
#include <string>

#include "student_interface.h"

namespace cuda_emu_harness {

using cuda_emu::Fiber;

Arguments args;

// ---- A, B and C between inaccessible pages --------------------------------------------------------------

struct GuardedBuffer {
    const char *name;
    char *low_guard = nullptr, *data = nullptr, *high_guard = nullptr;
    size_t bytes = 0, page = 0;
};

GuardedBuffer buffers[3] = {{"A"}, {"B"}, {"C"}};

// `at_end`: the data ends exactly where the high guard page begins, so the first element past the end
// faults; otherwise it starts right after the low guard page, so the first element before it faults.
void *allocate(GuardedBuffer &buffer, size_t bytes, bool at_end) {
    size_t page = sysconf(_SC_PAGESIZE);
    size_t data_pages = (bytes + page - 1) / page + 1;
    char *memory = (char *)mmap(nullptr, (data_pages + 2) * page, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) cuda_emu::report_thread_and_exit("out_of_memory", 5);
    mprotect(memory, page, PROT_NONE);
    mprotect(memory + (data_pages + 1) * page, page, PROT_NONE);
    buffer.low_guard = memory;
    buffer.high_guard = memory + (data_pages + 1) * page;
    buffer.data = at_end ? buffer.high_guard - bytes : memory + page;
    buffer.bytes = bytes;
    buffer.page = page;
    return buffer.data;
}

void release(GuardedBuffer &buffer) {
    if (buffer.low_guard != nullptr)
        munmap(buffer.low_guard, (size_t)(buffer.high_guard - buffer.low_guard) + buffer.page);
    buffer = GuardedBuffer{buffer.name};
}

// ---- faults ----------------------------------------------------------------------------------------------

char alternate_stack[64 * 1024];

// The element the faulting thread meant, where the fault is at the access a site last found off its matrix
// (cuda_emu.h, misindexed): its site, row, column and stride as more fields of the fault's report.
std::string meant(const char *address) {
    const cuda_emu::Misindexed &last = cuda_emu::last_misindexed;
    if (last.address == nullptr || address < last.address || address >= last.address + last.bytes) return "";
    char fields[192];
    snprintf(fields, sizeof fields, ", \"site\": %d, \"matrix\": \"%s\", \"row\": %lld, \"column\": %lld, "
             "\"stride\": %lld", last.site, last.matrix, last.row, last.column, last.stride);
    return fields;
}

void on_fault(int signal, siginfo_t *info, void *context) {
    const char *address = (const char *)info->si_addr;
    const char *access = "access";
#if defined(__x86_64__)
    // A page fault says whether it was a write; an address no page can hold (non-canonical, as 4 TiB past a
    // buffer can be) raises a general-protection fault, which says neither (si_code SI_KERNEL).
    auto *uc = (ucontext_t *)context;
    if (info->si_code != SI_KERNEL) access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";
#else
    (void)context;
#endif
    uint3 t = cuda_emu::current ? cuda_emu::current->idx : uint3{0, 0, 0};
    int line = cuda_emu::current ? cuda_emu::current->line : 0;  // 0: not in a marked statement
    if (signal == SIGSEGV || signal == SIGBUS) {
        for (const GuardedBuffer &buffer : buffers) {
            if (buffer.data == nullptr) continue;
            const char *end = buffer.data + buffer.bytes;
            bool before = address >= buffer.low_guard && address < buffer.low_guard + buffer.page + 0 &&
                          address < buffer.data;
            bool after = address >= end && address < buffer.high_guard + buffer.page;
            if (!before && !after) continue;
            long offset = before ? (long)((buffer.data - address + 3) / 4) : (long)((address - end) / 4);
            cuda_emu::report("{\"event\": \"fault\", \"what\": \"out_of_bounds\", \"buffer\": \"%s\", "
                             "\"access\": \"%s\", \"side\": \"%s\", \"elements\": %ld, \"thread\": [%u, %u, %u], "
                             "\"block\": [%u, %u, %u], \"line\": %d%s}",
                             buffer.name, access, before ? "before" : "after", offset, t.x, t.y, t.z, blockIdx.x,
                             blockIdx.y, blockIdx.z, line, meant(address).c_str());
            _exit(3);
        }
        if (cuda_emu::current != nullptr && address >= cuda_emu::current->stack &&
            address < cuda_emu::current->stack + 2 * sysconf(_SC_PAGESIZE))
            cuda_emu::report_thread_and_exit("stack_overflow", 3);
        cuda_emu::report("{\"event\": \"fault\", \"what\": \"invalid_address\", \"access\": \"%s\", "
                         "\"thread\": [%u, %u, %u], \"block\": [%u, %u, %u], \"line\": %d}",
                         access, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z, line);
        _exit(3);
    }
    cuda_emu::report_thread_and_exit(signal == SIGFPE ? "arithmetic" : signal == SIGABRT ? "abort" : "illegal", 3);
}

void install_fault_handlers() {
    stack_t stack{};
    stack.ss_sp = alternate_stack;
    stack.ss_size = sizeof alternate_stack;
    sigaltstack(&stack, nullptr);  // the faulting fiber's own stack may be the problem
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL}) sigaction(signal, &action, nullptr);
}

// Student code runs natively here: no new processes, few files, bounded memory (fiber stacks and the
// buffers need well under a gigabyte). (RLIMIT_NPROC does not bind root; the grader is not run as root.)
void limit_student_code() {
    struct rlimit none = {0, 0}, files = {16, 16}, memory = {4ull << 30, 4ull << 30};
    setrlimit(RLIMIT_NPROC, &none);
    setrlimit(RLIMIT_NOFILE, &files);
    setrlimit(RLIMIT_AS, &memory);
}

// ---- the launch ------------------------------------------------------------------------------------------

std::vector<Fiber> fibers;

void divergence(const Fiber &waiting, const Fiber &other, const char *kind) {
    cuda_emu::report("{\"event\": \"divergence\", \"kind\": \"%s\", \"line\": %d, \"thread\": [%u, %u, %u], "
                     "\"other_line\": %d, \"other_thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
                     kind, waiting.barrier_line, waiting.idx.x, waiting.idx.y, waiting.idx.z, other.barrier_line,
                     other.idx.x, other.idx.y, other.idx.z, blockIdx.x, blockIdx.y, blockIdx.z);
    _exit(4);
}

const char *const STATES[] = {"ready", "barrier", "collective", "exited"};

// A collective no round can resolve: a lane the mask names returned, waits at a barrier or at another
// collective (on the GPU: a hang or undefined values).
[[noreturn]] void warp_divergence(Fiber *const *by_lane) {
    const Fiber *waiting = nullptr, *other = nullptr;
    for (int lane = 0; lane < cuda_emu::WARP && other == nullptr; ++lane) {
        const Fiber *fiber = by_lane[lane];
        if (fiber == nullptr || fiber->state != cuda_emu::AT_COLLECTIVE) continue;
        const cuda_emu::Collective &c = fiber->collective;
        for (int named = 0; named < cuda_emu::WARP && other == nullptr; ++named) {
            const Fiber *f = by_lane[named];
            if (c.mask >> named & 1 && f != nullptr &&
                (f->state != cuda_emu::AT_COLLECTIVE || f->collective.kind != c.kind || f->collective.mask != c.mask))
                waiting = fiber, other = f;
        }
    }
    if (other == nullptr) _exit(4);  // unreachable: a round that resolves nothing has a lane it waits for
    const cuda_emu::Collective &c = waiting->collective;
    int arrived = 0;
    for (int lane = 0; lane < cuda_emu::WARP; ++lane)
        arrived += by_lane[lane] && by_lane[lane]->state == cuda_emu::AT_COLLECTIVE &&
                   by_lane[lane]->collective.kind == c.kind && by_lane[lane]->collective.mask == c.mask;
    bool at_collective = other->state == cuda_emu::AT_COLLECTIVE;
    int other_line = at_collective ? other->collective.line
                     : other->state == cuda_emu::AT_BARRIER ? other->barrier_line : 0;
    cuda_emu::report("{\"event\": \"warp_divergence\", \"primitive\": \"%s\", \"line\": %d, \"mask\": %u, "
                     "\"arrived\": %d, \"thread\": [%u, %u, %u], \"other_thread\": [%u, %u, %u], "
                     "\"other_state\": \"%s\", \"other_line\": %d, \"other_primitive\": \"%s\", "
                     "\"block\": [%u, %u, %u]}",
                     c.name, c.line, c.mask, arrived, waiting->idx.x, waiting->idx.y, waiting->idx.z, other->idx.x,
                     other->idx.y, other->idx.z, STATES[other->state], other_line,
                     at_collective ? other->collective.name : "", blockIdx.x, blockIdx.y, blockIdx.z);
    _exit(4);
}

// The lanes of each warp, by lane, and the order the schedule runs them in.
struct Warp {
    Fiber *by_lane[cuda_emu::WARP] = {};
    std::vector<Fiber *> order;
};
std::vector<Warp> warps;
std::vector<int> warp_order;

// Runs a warp's lanes until each waits at a barrier or has returned, resolving their collectives.
void run_warp(int index) {
    Warp &warp = warps[index];
    while (true) {
        // The first ready lane runs; each hands over to the next ready one (cuda_emu::yield_to_scheduler).
        for (Fiber *fiber : warp.order)
            if (fiber->state == cuda_emu::READY) {
                cuda_emu::resume(*fiber);
                break;
            }
        if (cuda_emu::resolve_warp(warp.by_lane, index)) continue;
        for (Fiber *fiber : warp.order)
            if (fiber->state == cuda_emu::AT_COLLECTIVE) warp_divergence(warp.by_lane);
        return;
    }
}

// Runs every fiber to its next barrier (or its end), warp by warp in `order`, until all have finished.
void run_block() {
    cuda_emu::new_block();  // shared memory poisoned again, as each GPU block's is
    for (Fiber &fiber : fibers) cuda_emu::start_fiber(fiber);
    std::fill(cuda_emu::warp_syncs.begin(), cuda_emu::warp_syncs.end(), 0);
    ++cuda_emu::epoch;
    cuda_emu::epoch_line = 0;
    while (true) {
        for (int index : warp_order) run_warp(index);
        const Fiber *finished = nullptr, *waiting = nullptr;
        for (const Fiber &fiber : fibers) {
            if (fiber.state == cuda_emu::FINISHED) {
                finished = finished ? finished : &fiber;
            } else if (waiting == nullptr) {
                waiting = &fiber;
            } else if (fiber.barrier_line != waiting->barrier_line) {
                divergence(*waiting, fiber, "different_barriers");
            }
        }
        if (waiting == nullptr) return;
        if (finished != nullptr) divergence(*waiting, *finished, "exited");
        ++cuda_emu::epoch;
        cuda_emu::epoch_line = waiting->barrier_line;
        if (cuda_emu::profiling) cuda_emu::count_barrier(waiting->barrier_line);
        for (Fiber &fiber : fibers) {
            fiber.state = cuda_emu::READY;
            fiber.read_shared = false;
        }
    }
}

// The warps of a block of `threads` (the last one partial when threads is not a multiple of 32), each
// lane in the schedule's order, the warps in the order of their first lane in it.
void make_warps(const std::vector<int> &order) {
    int count = ((int)fibers.size() + cuda_emu::WARP - 1) / cuda_emu::WARP;
    warps.assign(count, Warp{});
    warp_order.clear();
    cuda_emu::warp_syncs.assign(count, 0);
    for (int index : order) {
        Warp &warp = warps[index / cuda_emu::WARP];
        if (warp.order.empty()) warp_order.push_back(index / cuda_emu::WARP);
        warp.by_lane[index % cuda_emu::WARP] = &fibers[index];
        if (!warp.order.empty()) warp.order.back()->next_in_warp = &fibers[index];
        warp.order.push_back(&fibers[index]);
    }
}

// A profile run's fixed sample: the grid's first block and its last (on the profile shape, a multiple of the
// tile, every block makes the same kind of accesses; two cost an eighth of a 4 × 4 grid).
void profile_blocks(dim3 grid) {
    for (uint3 b : {uint3{0, 0, 0}, uint3{grid.x - 1, grid.y - 1, grid.z - 1}}) {
        blockIdx = b;
        run_block();
        cuda_emu::profile_block_end();
        if (grid.x * grid.y * grid.z == 1) break;
    }
}

// A case run by sampled blocks: those blocks alone, in the order given (reversed: from the last).
void run_blocks(const std::vector<uint3> &blocks, bool reversed) {
    for (size_t i = 0; i < blocks.size(); ++i) {
        blockIdx = blocks[reversed ? blocks.size() - 1 - i : i];
        run_block();
    }
}

void run_grid(dim3 grid, bool reversed) {
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = reversed ? uint3{grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z} : uint3{x, y, z};
                run_block();
            }
}

void launch(dim3 grid, dim3 block, bool reversed, const std::vector<uint3> &blocks) {
    blockDim = block;
    gridDim = grid;
    int threads = block.x * block.y * block.z;
    fibers.assign(threads, Fiber{});
    cuda_emu::allocate_stacks(fibers.data(), fibers.size());
    for (int linear = 0; linear < threads; ++linear) {
        fibers[linear].linear = linear;
        fibers[linear].idx = cuda_emu::thread_of(linear);
    }
    std::vector<int> order(threads);
    std::iota(order.begin(), order.end(), 0);
    if (reversed) std::reverse(order.begin(), order.end());
    make_warps(order);
    cuda_emu::kernel_body = cuda_emu_student_launch;
    if (cuda_emu::profiling) {
        profile_blocks(grid);
    } else if (!blocks.empty()) {
        run_blocks(blocks, reversed);
    } else {
        run_grid(grid, reversed);
    }
    cuda_emu::release_stacks(fibers.data(), fibers.size());
}

bool read_file(const char *path, void *data, size_t bytes) {
    FILE *file = fopen(path, "rb");
    if (file == nullptr) return false;
    bool ok = fread(data, 1, bytes, file) == bytes;
    fclose(file);
    return ok;
}

bool write_file(const char *path, const void *data, size_t bytes) {
    FILE *file = fopen(path, "wb");
    if (file == nullptr) return false;
    bool ok = fwrite(data, 1, bytes, file) == bytes;
    return fclose(file) == 0 && ok;
}

// ---- a task: cases, each launched LAUNCHES times, in one worker ------------------------------------------

struct Case {
    int m = 0, n = 0, k = 0;
    unsigned grid[3] = {}, block[3] = {};  // the kernel contract's launch (contract.py)
    bool x_rows = false;                   // its grid's x runs over C's rows
    size_t dynamic_shared = 0, c_offset = 0, c_floats = 0;
    size_t segments[3][3] = {};  // C's image: (first word, words, bit pattern) each
    std::string a_path, b_path, report, out;
    std::vector<uint3> blocks;  // a sampled case's blocks (none: the whole grid)
};

struct Task {
    long id = 0;
    std::string order, layout, stdout_path;
    int launches = 1;
    size_t count = 0;  // case lines announced
    std::vector<Case> cases;
};

// A sampled case's blocks, "x y" a line, each inside the grid; false when the file cannot be read or one is not.
bool read_blocks(const char *path, const Case &c, std::vector<uint3> &blocks) {
    FILE *file = fopen(path, "r");
    if (file == nullptr) return false;
    unsigned x, y;
    int read;
    while ((read = fscanf(file, "%u %u", &x, &y)) == 2 && x < c.grid[0] && y < c.grid[1]) blocks.push_back({x, y, 0});
    fclose(file);
    return read == EOF && !blocks.empty();
}

bool parse_case(const char *line, Case &c) {
    char a[4096], b[4096], report[4096], out[4096], x[16], blocks[4096];
    int read = sscanf(line, "%d %d %d %u %u %u %u %u %u %15s %zu %zu %zu %zu %zu %zx %zu %zu %zx %zu %zu %zx "
                      "%4095s %4095s %4095s %4095s %4095s", &c.m, &c.n, &c.k, &c.grid[0], &c.grid[1], &c.grid[2],
                      &c.block[0], &c.block[1], &c.block[2], x, &c.dynamic_shared, &c.c_offset, &c.c_floats,
                      &c.segments[0][0], &c.segments[0][1], &c.segments[0][2], &c.segments[1][0], &c.segments[1][1],
                      &c.segments[1][2], &c.segments[2][0], &c.segments[2][1], &c.segments[2][2], a, b, report, out,
                      blocks);
    c.x_rows = read >= 10 && strcmp(x, "rows") == 0;
    if (read == 27 && !read_blocks(blocks, c, c.blocks)) return false;
    if ((read != 26 && read != 27) || c.m <= 0 || c.n <= 0 || c.k <= 0 || c.dynamic_shared > cuda_emu::DYNAMIC_SHARED_CAPACITY ||
        c.c_offset + (size_t)c.m * c.n > c.c_floats)
        return false;
    for (const size_t *segment : c.segments)
        if (segment[0] > c.c_floats || segment[1] > c.c_floats - segment[0]) return false;
    c.a_path = a, c.b_path = b, c.report = report, c.out = out;
    return true;
}

// C as every launch starts with it: guard bands and poison (judge/layout.py, guarded_layout).
std::vector<uint32_t> c_image(const Case &c) {
    std::vector<uint32_t> image(c.c_floats, 0);
    for (const size_t *segment : c.segments)
        std::fill_n(image.begin() + segment[0], segment[1], (uint32_t)segment[2]);
    return image;
}

struct Inputs {
    float *a, *b, *c;
    size_t a_bytes, b_bytes, c_bytes;
    std::vector<float> a_pristine, b_pristine;
};

// The case's A and B against their guard pages, read from the driver's files; false when they cannot be.
bool place_inputs(const Case &c, bool at_end, Inputs &in) {
    in.a_bytes = (size_t)c.m * c.k * 4, in.b_bytes = (size_t)c.k * c.n * 4, in.c_bytes = c.c_floats * 4;
    in.a = (float *)allocate(buffers[0], in.a_bytes, at_end);
    in.b = (float *)allocate(buffers[1], in.b_bytes, at_end);
    in.c = (float *)allocate(buffers[2], in.c_bytes, at_end);
    if (!read_file(c.a_path.c_str(), in.a, in.a_bytes) || !read_file(c.b_path.c_str(), in.b, in.b_bytes)) return false;
    in.a_pristine.assign(in.a, in.a + (size_t)c.m * c.k);
    in.b_pristine.assign(in.b, in.b + (size_t)c.k * c.n);
    return true;
}

// An input restored from its pristine copy where the launch wrote into it (as the GPU child restores it); whether
// it did.
bool restored(float *data, const std::vector<float> &pristine) {
    if (memcmp(data, pristine.data(), pristine.size() * sizeof(float)) == 0) return false;
    memcpy(data, pristine.data(), pristine.size() * sizeof(float));
    return true;
}

// What the launch did as a whole: values read from shared entries no thread stored that reached C, its tile loop's
// trips, a thread that left its element of C unstored, and which element of C each thread stored.
void report_launch() {
    cuda_emu::report_unwritten_in_c();
    if (cuda_emu::looping_threads > 0)
        cuda_emu::report("{\"event\": \"tile_loop\", \"fewest\": %u, \"most\": %u, \"threads\": %ld}",
                         cuda_emu::fewest_trips, cuda_emu::most_trips, cuda_emu::looping_threads);
    for (const cuda_emu::Unstored &thread : cuda_emu::unstored_threads) {
        if (cuda_emu::c_block[thread.row * cuda_emu::c_columns + thread.column] != 0) continue;
        cuda_emu::report("{\"event\": \"c_unstored\", \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u], "
                         "\"row\": %zu, \"column\": %zu}", thread.thread.x, thread.thread.y, thread.thread.z,
                         thread.block.x, thread.block.y, thread.block.z, thread.row, thread.column);
        break;
    }
    if (cuda_emu::c_stores == 0) return;
    const cuda_emu::Misplaced &first = cuda_emu::first_misplaced;
    char example[256] = "";
    if (first.seen)
        snprintf(example, sizeof example, ", \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u], \"row\": %zu, "
                 "\"column\": %zu, \"line\": %d", first.thread.x, first.thread.y, first.thread.z, first.block.x,
                 first.block.y, first.block.z, first.row, first.column, first.line);
    cuda_emu::report("{\"event\": \"c_mapping\", \"stores\": %ld, \"as_launched\": %ld, \"transposed\": %ld%s}",
                     cuda_emu::c_stores, cuda_emu::c_as_launched, cuda_emu::c_transposed, example);
}

// The worker's own CPU time so far (forked for its task: since its start); the CPU driver adds up a split
// case's parts'.
double cpu_seconds() {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// One launch of the case on C poisoned again; false when its output cannot be written.
bool launch_once(const Case &c, const Task &task, Inputs &in, const std::vector<uint32_t> &image, int number) {
    memcpy(in.c, image.data(), in.c_bytes);
    args = {c.m, c.n, c.k, in.a, in.b, in.c + c.c_offset};
    cuda_emu::new_launch();
    cuda_emu::watch_c(in.c + c.c_offset, c.m, c.n);  // who stores each element of C
    cuda_emu::global_buffers = {{(const char *)in.a, in.a_bytes, "A"}, {(const char *)in.b, in.b_bytes, "B"},
                                {(const char *)(in.c + c.c_offset), (size_t)c.m * c.n * 4, "C"}};
    cuda_emu::matrices[0] = {(const char *)in.a, c.m, c.k, "A"};
    cuda_emu::matrices[1] = {(const char *)in.b, c.k, c.n, "B"};
    cuda_emu::matrices[2] = {(const char *)(in.c + c.c_offset), c.m, c.n, "C"};
    cuda_emu::launch_x_rows = c.x_rows;
    cuda_emu::dynamic_shared_bytes = c.dynamic_shared;
    cuda_emu::share_dynamic();  // a file-scope extern __shared__ array was declared before the launch was known
    launch(dim3(c.grid[0], c.grid[1], c.grid[2]), dim3(c.block[0], c.block[1], c.block[2]), task.order == "reversed",
           c.blocks);
    fflush(stdout);
    if (cuda_emu::profiling) cuda_emu::report_profile();
    report_launch();
    std::string out = c.out + "-" + std::to_string(number) + ".bin";
    return write_file(out.c_str(), in.c, in.c_bytes);
}

// Every launch of a case; a fault, a divergence or a crash ends the worker in the launch. Returns 0, or the
// exit code that ends the worker.
int run_case(const Case &c, const Task &task) {
    cuda_emu::report_fd = open(c.report.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    Inputs in;
    if (!place_inputs(c, task.layout == "end", in)) {
        fprintf(stderr, "harness: cannot read the inputs\n");
        return 2;
    }
    std::vector<uint32_t> image = c_image(c);
    bool a_changed = false, b_changed = false;
    long races = 0, collisions = 0;
    size_t named = 0;  // reads of unstored shared entries a launch named (the CPU driver's merge of parts counts them)
    for (int number = 0; number < task.launches; ++number) {
        if (!launch_once(c, task, in, image, number)) {
            fprintf(stderr, "harness: cannot write the output\n");
            return 2;
        }
        a_changed = restored(in.a, in.a_pristine) || a_changed;
        b_changed = restored(in.b, in.b_pristine) || b_changed;
        races += cuda_emu::races_found;
        collisions = std::max(collisions, cuda_emu::c_collisions);
        named = std::max(named, cuda_emu::unwritten_reads.size());
    }
    cuda_emu::report("{\"event\": \"done\", \"a_changed\": %s, \"b_changed\": %s, \"races\": %ld, "
                     "\"c_collisions\": %ld, \"unwritten_reads\": %zu, \"cpu_s\": %.4f}",
                     a_changed ? "true" : "false", b_changed ? "true" : "false", races, collisions, named,
                     cpu_seconds());
    close(cuda_emu::report_fd);
    for (GuardedBuffer &buffer : buffers) release(buffer);
    return 0;
}

// ---- the server ------------------------------------------------------------------------------------------

int reply_fd = -1;

void reply(const char *format, ...) {
    char line[256];
    va_list values;
    va_start(values, format);
    int length = vsnprintf(line, sizeof line - 1, format, values);
    va_end(values);
    if (length < 0 || length > (int)sizeof line - 2) return;
    line[length] = '\n';
    ssize_t ignored = write(reply_fd, line, length + 1);  // one write: lines of several processes never mix
    (void)ignored;
}

// The worker: its stdout the task's file, its stdin nothing (the commands are the server's), then each case.
[[noreturn]] void work(const Task &task) {
    int out = task.stdout_path == "-" ? open("/dev/null", O_WRONLY)
                                      : open(task.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int none = open("/dev/null", O_RDONLY);
    if (out < 0 || none < 0) _exit(2);
    dup2(out, STDOUT_FILENO);
    dup2(none, STDIN_FILENO);
    close(out);
    close(none);
    // Each printf written as it is made (a launch's are capped): a launch that faults or hangs has printed all it
    // printed before, however the CPU driver cut its blocks among workers (case_files.py)
    setvbuf(stdout, nullptr, _IONBF, 0);
    cuda_emu::profiling = task.order == "profile";
    install_fault_handlers();
    limit_student_code();
    for (size_t i = 0; i < task.cases.size(); ++i) {
        int status = run_case(task.cases[i], task);
        fflush(stdout);
        if (status != 0) _exit(status);
        reply("done %ld %zu", task.id, i);
    }
    _exit(0);  // nothing of the student's (static destructors, atexit) runs after the last case
}

struct Worker {
    pid_t pid;
    long id;
};
std::vector<Worker> workers;
int child_ended[2] = {-1, -1};  // a pipe the SIGCHLD handler writes to, so poll wakes up

void on_child(int) {
    int saved = errno;
    char byte = 0;
    ssize_t ignored = write(child_ended[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

void start_worker(const Task &task) {
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(3);  // the server died before PDEATHSIG was set
        signal(SIGCHLD, SIG_DFL);
        close(child_ended[0]);
        close(child_ended[1]);
        work(task);
    }
    if (pid < 0) {
        reply("exit %ld %d", task.id, -1);  // no process for it: the task ends before its first case
        return;
    }
    workers.push_back({pid, task.id});
}

void reap() {
    char drained[64];
    while (read(child_ended[0], drained, sizeof drained) > 0) {
    }
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (size_t i = 0; i < workers.size(); ++i) {
            if (workers[i].pid != pid) continue;
            int returncode = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
            reply("exit %ld %d", workers[i].id, returncode);
            workers.erase(workers.begin() + i);
            break;
        }
    }
}

// One line of the driver's: a task's header, one of its case lines, or a kill.
void command(const std::string &line, Task &pending) {
    if (pending.count > pending.cases.size()) {
        Case c;
        if (!parse_case(line.c_str(), c)) {
            fprintf(stderr, "harness: unreadable case line\n");
            pending.count = pending.cases.size();  // what came so far runs: the driver sees the task end early
        } else {
            pending.cases.push_back(c);
        }
        if (pending.count == pending.cases.size()) start_worker(pending);
        return;
    }
    char order[32], layout[32], output[4096];
    long id;
    size_t count;
    if (sscanf(line.c_str(), "task %ld %31s %31s %d %4095s %zu", &id, order, layout, &pending.launches, output,
               &count) == 6 && count > 0) {
        pending.id = id, pending.order = order, pending.layout = layout, pending.stdout_path = output;
        pending.count = count;
        pending.cases.clear();
    } else if (sscanf(line.c_str(), "kill %ld", &id) == 1) {
        for (const Worker &worker : workers)
            if (worker.id == id) kill(worker.pid, SIGKILL);
    }
}

int serve(int fd) {
    reply_fd = fd;
    fflush(stdout);  // what static initializers printed is printed once, before any worker is forked
    int tile = cuda_emu_student_tile();  // the first configured tile size macro the file defines (build.py)
    if (tile == CUDA_EMU_NO_TILE)
        reply("hello none");
    else
        reply("hello %d", tile);
    if (pipe2(child_ended, O_CLOEXEC | O_NONBLOCK) != 0) return 3;
    struct sigaction action {};
    action.sa_handler = on_child;
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &action, nullptr);
    std::string input;
    Task pending;
    char chunk[1 << 16];
    while (true) {
        pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {child_ended[0], POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (fds[1].revents) reap();
        if (!fds[0].revents) continue;
        ssize_t got = read(STDIN_FILENO, chunk, sizeof chunk);
        if (got <= 0) break;  // the driver is done (or gone)
        input.append(chunk, got);
        for (size_t end; (end = input.find('\n')) != std::string::npos; input.erase(0, end + 1))
            command(input.substr(0, end), pending);
    }
    for (const Worker &worker : workers) kill(worker.pid, SIGKILL);
    return 0;
}

}  // namespace cuda_emu_harness

int main(int argc, char **argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the grader's child that started it
    if (argc == 3 && strcmp(argv[1], "--serve") == 0) return cuda_emu_harness::serve(atoi(argv[2]));
    fprintf(stderr, "usage: harness --serve FD\n");
    return 2;
}
