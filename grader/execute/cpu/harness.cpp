// Runs one student kernel on the CPU: one launch, one schedule, one case.
//
//   harness --tile                     prints TILE_SIZE (or "none")
//   harness RUN_FILE REPORT_FILE       runs the launch RUN_FILE describes
//   harness RUN_FILE REPORT_FILE RUN_FILE REPORT_FILE
//                                      runs both at once, each in a process of its own (a case's two thread
//                                      orders: one sandbox for both); the second one's printf is dropped
//
// RUN_FILE: "m n k grid block dynamic_shared schedule layout a.bin b.bin c.bin out.bin c_floats c_offset"
// (schedule: forward, reversed, or profile: forward with every access counted as the GPU would;
// grid, block: three numbers each; dynamic_shared: bytes of `extern __shared__` memory; c_offset: floats
// of guard band before C). Reports go to REPORT_FILE as JSON lines; printf goes to stdout.
//
// The student's kernel is not in this file: student_unit.cpp holds it, compiled per submission and linked
// with this file's object, which is compiled once (build.py). None of the student's macros reach this file.
#define CUDA_EMU_DEFINE_SWITCH
#include "cuda_emu.h"

#include <fcntl.h>
#include <cerrno>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <numeric>

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

// ---- faults ----------------------------------------------------------------------------------------------

char alternate_stack[64 * 1024];

void on_fault(int signal, siginfo_t *info, void *context) {
    const char *address = (const char *)info->si_addr;
    const char *access = "access";
#if defined(__x86_64__)
    auto *uc = (ucontext_t *)context;
    access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";
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
                             "\"block\": [%u, %u, %u], \"line\": %d}",
                             buffer.name, access, before ? "before" : "after", offset, t.x, t.y, t.z, blockIdx.x,
                             blockIdx.y, blockIdx.z, line);
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

void launch(dim3 grid, dim3 block, bool reversed) {
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
    if (cuda_emu::profiling) return profile_blocks(grid);
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = reversed ? uint3{grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z} : uint3{x, y, z};
                run_block();
            }
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

int run(const char *run_file, const char *report_file) {
    cuda_emu::report_fd = open(report_file, O_WRONLY | O_CREAT | O_APPEND, 0600);
    FILE *spec = fopen(run_file, "r");
    int m, n, k;
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z;  // the kernel contract's launch (contract.py)
    size_t dynamic_shared;
    char schedule[32], layout[32], a_path[4096], b_path[4096], c_path[4096], out_path[4096];
    size_t c_floats, c_offset;
    if (spec == nullptr ||
        fscanf(spec, "%d %d %d %u %u %u %u %u %u %zu %31s %31s %4095s %4095s %4095s %4095s %zu %zu", &m, &n, &k,
               &grid_x, &grid_y, &grid_z, &block_x, &block_y, &block_z, &dynamic_shared, schedule, layout, a_path,
               b_path, c_path, out_path, &c_floats, &c_offset) != 18 ||
        dynamic_shared > cuda_emu::DYNAMIC_SHARED_CAPACITY) {
        fprintf(stderr, "harness: unreadable run file %s\n", run_file);
        return 2;
    }
    fclose(spec);
    bool at_end = strcmp(layout, "end") == 0;
    size_t a_bytes = (size_t)m * k * 4, b_bytes = (size_t)k * n * 4, c_bytes = c_floats * 4;
    auto *a = (float *)allocate(buffers[0], a_bytes, at_end);
    auto *b = (float *)allocate(buffers[1], b_bytes, at_end);
    auto *c = (float *)allocate(buffers[2], c_bytes, at_end);
    if (!read_file(a_path, a, a_bytes) || !read_file(b_path, b, b_bytes) || !read_file(c_path, c, c_bytes)) {
        fprintf(stderr, "harness: cannot read the inputs\n");
        return 2;
    }
    std::vector<float> a_before(a, a + (size_t)m * k), b_before(b, b + (size_t)k * n);
    args = {m, n, k, a, b, c + c_offset};
    cuda_emu::watch_c(c + c_offset, m, n);  // who stores each element of C
    // "profile": the forward order, each warp's accesses counted as requests (cuda_emu.h, access profile)
    cuda_emu::profiling = strcmp(schedule, "profile") == 0;
    cuda_emu::global_buffers = {{(const char *)a, a_bytes, "A"}, {(const char *)b, b_bytes, "B"},
                                {(const char *)(c + c_offset), (size_t)m * n * 4, "C"}};
    cuda_emu::dynamic_shared_bytes = dynamic_shared;
    cuda_emu::share_dynamic();  // a file-scope extern __shared__ array was declared before the launch was known
    install_fault_handlers();
    limit_student_code();
    dim3 grid(grid_x, grid_y, grid_z), block(block_x, block_y, block_z);
    launch(grid, block, strcmp(schedule, "reversed") == 0);
    fflush(stdout);
    if (cuda_emu::profiling) cuda_emu::report_profile();
    bool a_changed = memcmp(a_before.data(), a, a_bytes) != 0, b_changed = memcmp(b_before.data(), b, b_bytes) != 0;
    if (!write_file(out_path, c, c_bytes)) {
        fprintf(stderr, "harness: cannot write the output\n");
        return 2;
    }
    cuda_emu::report("{\"event\": \"done\", \"a_changed\": %s, \"b_changed\": %s, \"races\": %ld, "
                     "\"c_collisions\": %ld}",
                     a_changed ? "true" : "false", b_changed ? "true" : "false", cuda_emu::races_found,
                     cuda_emu::c_collisions);
    return 0;
}

// Both launches of a case at once, each in a forked process of its own (the student's static
// initializers ran once, before main, as in one launch). Each one's end is appended to its report as
// {"event": "exit", "returncode": R}: R as Python gives it (the exit code, or minus the signal).
int run_both(char **pairs) {
    fflush(stdout);  // what static initializers printed is printed once
    pid_t parent = getpid(), children[2];
    for (int i = 0; i < 2; ++i) {
        children[i] = fork();
        if (children[i] < 0) return 3;
        if (children[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(3);  // the parent died before PDEATHSIG was set
            if (i == 1) {  // one copy of the kernel's printf output is enough: the first launch's
                int null = open("/dev/null", O_WRONLY);
                if (null >= 0) dup2(null, STDOUT_FILENO);
            }
            exit(run(pairs[2 * i], pairs[2 * i + 1]));
        }
    }
    for (int i = 0; i < 2; ++i) {
        int status = 0;
        while (waitpid(children[i], &status, 0) < 0 && errno == EINTR) {
        }
        int returncode = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
        cuda_emu::report_fd = open(pairs[2 * i + 1], O_WRONLY | O_CREAT | O_APPEND, 0600);
        cuda_emu::report("{\"event\": \"exit\", \"returncode\": %d}", returncode);
        close(cuda_emu::report_fd);
    }
    _exit(0);  // nothing of the parent's (its copy of stdout's buffer) is flushed again
}

}  // namespace cuda_emu_harness

int main(int argc, char **argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the grader's child that started it
    if (argc == 2 && strcmp(argv[1], "--tile") == 0) {
        int tile = cuda_emu_student_tile();  // the first configured tile size macro the file defines (build.py)
        if (tile == CUDA_EMU_NO_TILE)
            fprintf(stdout, "none\n");
        else
            fprintf(stdout, "%d\n", tile);
        return 0;
    }
    if (argc == 5) return cuda_emu_harness::run_both(argv + 1);
    if (argc != 3) {
        fprintf(stderr, "usage: harness --tile | harness RUN_FILE REPORT_FILE [RUN_FILE REPORT_FILE]\n");
        return 2;
    }
    return cuda_emu_harness::run(argv[1], argv[2]);
}
