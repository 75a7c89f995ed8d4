// The CPU emulator's out-of-line code: what cuda_emu.h declares and a student's unit only calls (reports, races,
// reads of unstored entries, misindexed sites, the C store bookkeeping, the access profile, the growth of the
// shadow's vectors) and what the harness alone calls (the warp collectives' resolution, a launch's reset).
// Compiled once per grader version beside harness.cpp (build.py), so a submission's unit, which includes the
// header, generates code only for the hot accessors it inlines. Comments on each are at its declaration.
#include "cuda_emu.h"

namespace cuda_emu {

void count_trips(Fiber &fiber) {
    if (!fiber.looped) return;
    fewest_trips = looping_threads == 0 ? fiber.trips : std::min(fewest_trips, fiber.trips);
    most_trips = std::max(most_trips, fiber.trips);
    ++looping_threads;
    fiber.looped = false;
}

void tile_loop_reached() {
    if (current == nullptr) return;
    count_trips(*current);  // a thread that reaches the loop again (an outer loop) counts each run
    current->looped = true;
    current->trips = 0;
}

void report(const char *format, ...) {
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

void report_thread_and_exit(const char *what, int code) {
    uint3 t = current ? current->idx : uint3{0, 0, 0};
    report("{\"event\": \"fault\", \"what\": \"%s\", \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           what, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z);
    _exit(code);
}

extern "C" void cuda_emu_fiber_entry() {
    kernel_body();
    count_trips(*current);
    thread_done();
    current->state = FINISHED;
    yield_to_scheduler();
    __builtin_trap();  // a finished fiber is never resumed
}

std::vector<Region> regions;

std::vector<Cell> cells;

std::vector<CellHistory> cell_histories;

std::vector<CellSyncs> cell_syncs;

std::vector<UnwrittenRead> unwritten_reads;

void poison(const Region &region) {
    for (size_t at = 0; at + 4 <= region.bytes; at += 4) memcpy((char *)region.base + at, &SHARED_POISON, 4);
}


void new_block() {
    ++block_serial;
    epoch_before_block = epoch++;  // every access of this block comes after: past it, whatever the harness adds
    for (const Region &region : regions) poison(region);
}

std::vector<uint32_t> warp_syncs;

void index_hot_regions() {
    std::fill(hot_regions, hot_regions + HOT_REGIONS, HotRegion{});
    int slot = 0;
    for (const Region &region : regions) {
        if (slot == HOT_REGIONS || profiling) break;
        if (region.element_shift < 0) continue;  // a division per access: the full path's
        hot_regions[slot++] = {region.base, region.bytes, cells.data() + region.first_cell,
                               cell_histories.data() + region.first_cell, cell_syncs.data() + region.first_cell,
                               (size_t)region.element_shift, &region};
    }
}

// The shadow of `entries` more entries, as never accessed.
static void grow_shadow(size_t entries) {
    cells.resize(cells.size() + entries);
    cell_histories.resize(cells.size());
    cell_syncs.resize(cells.size());
}

void share_region(const char *base, size_t bytes, const char *name, size_t row_elements, size_t element_bytes) {
    for (const Region &region : regions)
        if (region.base == base) return;
    regions.push_back({base, bytes, name, row_elements, element_bytes, cells.size(), shift_of(element_bytes)});
    grow_shadow(bytes / element_bytes);
    index_hot_regions();
    poison(regions.back());  // before this block's first access: the first thread to reach the declaration
}

void share_dynamic() {
    if (dynamic_shared_bytes == 0 || dynamic_name == nullptr) return;
    for (const Region &region : regions)
        if (region.base == (const char *)dynamic_shared) return;
    regions.push_back({(const char *)dynamic_shared, dynamic_shared_bytes, dynamic_name, 0, dynamic_element,
                       cells.size(), shift_of(dynamic_element)});
    grow_shadow(dynamic_shared_bytes / dynamic_element);
    index_hot_regions();
}

std::vector<GlobalBuffer> global_buffers;

std::vector<AccessSite> access_sites;

std::vector<Access> block_accesses;

std::vector<std::vector<uint32_t>> executions;

uint32_t site_of(int line, AccessKind kind, const char *array, size_t rows, size_t columns, size_t bytes) {
    if (last_site < access_sites.size()) {
        const AccessSite &s = access_sites[last_site];
        if (s.line == line && s.kind == kind && s.array == array) return last_site;
    }
    for (uint32_t i = 0; i < access_sites.size(); ++i) {
        const AccessSite &s = access_sites[i];
        if (s.line == line && s.kind == kind && (s.array == array || strcmp(s.array, array) == 0))
            return last_site = i;
    }
    access_sites.push_back({line, kind, array, rows, columns, bytes});
    return last_site = (uint32_t)access_sites.size() - 1;
}

void record_access(int line, AccessKind kind, const char *array, size_t rows, size_t columns, size_t offset,
                          size_t bytes) {
    if (block_accesses.size() >= MAX_BLOCK_ACCESSES) return;
    uint32_t site = site_of(line, kind, array, rows, columns, bytes);
    int me = current->linear;
    if (executions.size() <= (size_t)me) executions.resize(me + 1);
    std::vector<uint32_t> &counts = executions[me];
    if (counts.size() <= site) counts.resize(site + 1, 0);
    block_accesses.push_back({site, (uint32_t)(me / WARP), counts[site]++, (uint32_t)(me % WARP), offset,
                              (uint32_t)bytes});
}

void profile_global(const void *address, size_t bytes, int line, AccessKind kind) {
    const char *p = (const char *)address;
    for (const GlobalBuffer &buffer : global_buffers)
        if (p >= buffer.base && p < buffer.base + buffer.bytes)
            return record_access(line, kind, buffer.name, 0, 0, p - buffer.base, bytes);
}

void profile_shared(const Region &region, const void *address, size_t bytes, int line, AccessKind kind) {
    size_t columns = region.row_elements, rows = columns ? region.bytes / (columns * region.element_bytes) : 0;
    record_access(line, kind, region.name, rows, columns, (const char *)address - region.base, bytes);
}

void count_request(AccessSite &site, const Access *first, const Access *last) {
    bool shared = site.kind == SHARED_LOAD || site.kind == SHARED_STORE;
    size_t unit = shared ? 4 : 32;  // a bank's word, or a sector
    std::vector<size_t> units, starts;
    for (const Access *a = first; a != last; ++a) {
        for (size_t u = a->offset / unit; u <= (a->offset + a->bytes - 1) / unit; ++u) units.push_back(u);
        starts.push_back(a->offset);
    }
    std::sort(units.begin(), units.end());
    units.erase(std::unique(units.begin(), units.end()), units.end());
    std::sort(starts.begin(), starts.end());
    size_t distinct_bytes = (std::unique(starts.begin(), starts.end()) - starts.begin()) * first->bytes;
    long cost = (long)units.size();
    if (!shared) {  // sectors are sorted: a line is 4 consecutive sectors
        long distinct = 0;
        for (size_t i = 0; i < units.size(); ++i) distinct += i == 0 || units[i] / 4 != units[i - 1] / 4;
        site.lines += distinct;
    }
    if (shared) {
        int per_bank[WARP] = {};
        for (size_t word : units) ++per_bank[word % WARP];
        cost = *std::max_element(per_bank, per_bank + WARP);
    }
    long ideal = (long)((distinct_bytes + (shared ? 4 * WARP : 32) - 1) / (shared ? 4 * WARP : 32));
    ++site.requests;
    site.total += cost;
    site.worst = std::max(site.worst, cost);
    site.ideal += std::max(1L, ideal);
    if (!site.strided && last - first >= 2 && first[0].lane == 0 && first[1].lane == 1) {
        site.stride = (long long)first[1].offset - (long long)first[0].offset;
        site.strided = true;
    }
}

void profile_block_end() {
    std::sort(block_accesses.begin(), block_accesses.end(), [](const Access &a, const Access &b) {
        if (a.site != b.site) return a.site < b.site;
        if (a.warp != b.warp) return a.warp < b.warp;
        return a.nth != b.nth ? a.nth < b.nth : a.lane < b.lane;
    });
    for (size_t start = 0; start < block_accesses.size();) {
        size_t end = start;
        const Access &head = block_accesses[start];
        while (end < block_accesses.size() && block_accesses[end].site == head.site &&
               block_accesses[end].warp == head.warp && block_accesses[end].nth == head.nth)
            ++end;
        count_request(access_sites[head.site], &block_accesses[start], &block_accesses[end]);
        start = end;
    }
    block_accesses.clear();
    for (std::vector<uint32_t> &counts : executions) counts.assign(counts.size(), 0);
}

std::vector<std::pair<int, long>> barrier_lines;

void count_barrier(int line) {
    for (auto &[seen, count] : barrier_lines)
        if (seen == line) return (void)++count;
    if (barrier_lines.size() < 64) barrier_lines.push_back({line, 1});
}

void report_profile() {
    for (const auto &[line, count] : barrier_lines)
        report("{\"event\": \"barriers\", \"line\": %d, \"count\": %ld}", line, count);
    int reported = 0;
    for (const AccessSite &s : access_sites) {
        if (s.requests == 0 || ++reported > 256) continue;
        char stride[48] = "", lines[32] = "";
        if (s.strided) snprintf(stride, sizeof stride, ", \"stride\": %lld", s.stride);
        if (s.lines) snprintf(lines, sizeof lines, ", \"lines\": %ld", s.lines);
        report("{\"event\": \"access\", \"line\": %d, \"kind\": \"%s\", \"array\": \"%.64s\", \"requests\": %ld, "
               "\"total\": %ld, \"max\": %ld, \"ideal\": %ld, \"rows\": %zu, \"columns\": %zu, \"bytes\": %zu%s%s}",
               s.line, ACCESS_KINDS[s.kind], s.array, s.requests, s.total, s.worst, s.ideal, s.rows, s.columns,
               s.bytes, stride, lines);
    }
}

void race(const Region &region, const void *address, const char *kind, int store_line,
                 int store_thread, int other_line, int other_thread, bool store_after_read, uint32_t store_trip,
                 uint32_t other_trip) {
    // The first race of each kind explains the bug (a store before the phase's reads: the barrier after
    // loading is missing; a store after them: the one after using); the total is reported at the end.
    ++races_found;
    if (race_reported[store_after_read]) return;
    race_reported[store_after_read] = true;
    auto [row, column] = entry_of(region, address);
    uint3 s = thread_of(store_thread), o = thread_of(other_thread);
    report("{\"event\": \"race\", \"kind\": \"%s\", \"array\": \"%s\", \"two_d\": %s, \"row\": %zu, \"column\": %zu, "
           "\"store_line\": %d, \"store_thread\": [%u, %u, %u], \"other_line\": %d, \"other_thread\": [%u, %u, %u], "
           "\"block\": [%u, %u, %u], \"store_after_read\": %s, \"store_trip\": %u, \"other_trip\": %u, "
           "\"barrier_line\": %d}",
           kind, region.name, region.row_elements ? "true" : "false", row, column, store_line, s.x, s.y, s.z,
           other_line, o.x, o.y, o.z, blockIdx.x, blockIdx.y, blockIdx.z, store_after_read ? "true" : "false",
           store_trip, other_trip, epoch_line);
}

void mark_read(const Region &region, const void *address, int line) {
    if (region.element_bytes % 4 != 0 || ((const char *)address - region.base) % 4 != 0) return;
    uint32_t bits;
    memcpy(&bits, address, 4);
    size_t index = bits & MARK_INDEX;
    if (index != 0 && index <= unwritten_reads.size()) {
        const UnwrittenRead &read = unwritten_reads[index - 1];
        if (read.line == line && read.block_serial == block_serial) return;  // already named by this line's read
    }
    if (unwritten_reads.size() >= MAX_UNWRITTEN_READS) return;  // it keeps the mark it has: a read, named or not
    auto [row, column] = entry_of(region, address);
    unwritten_reads.push_back({region.name, region.row_elements != 0, row, column, line, current->idx, blockIdx,
                               block_serial});
    bits = MARK_FAMILY | (uint32_t)unwritten_reads.size();
    for (size_t j = 0; j < region.element_bytes; j += 4) memcpy((char *)address + j, &bits, 4);
}

// The shared array the address is in (nullptr: none), and the index of the entry's shadow in cells,
// cell_histories and cell_syncs: where the inline path found its cell in a hot region, by that, else by a walk
// through every region.
static const Region *shadow_of(const void *address, const HotRegion *hot, const Cell *cell, size_t *entry) {
    if (cell != &no_hot_cell) {
        *entry = (size_t)(cell - cells.data());
        return hot->region;
    }
    for (const Region &region : regions) {
        size_t offset = (size_t)((const char *)address - region.base);  // one compare: below base, it wraps
        if (offset < region.bytes) {
            *entry = region.first_cell + element_at(region, offset);
            return &region;
        }
    }
    return nullptr;
}

// Whether the element still holds poison (an uninstrumented store through a pointer would have changed it: only
// the bytes say the entry was never stored): a mark in each word of an element of whole words (a float, a
// float4), else the poison's bytes.
static bool holds_poison(const Region &region, const void *address) {
    if (region.element_bytes % 4 == 0 && ((const char *)address - region.base) % 4 == 0) {
        for (size_t j = 0; j < region.element_bytes; j += 4) {
            uint32_t bits;
            memcpy(&bits, (const char *)address + j, 4);
            if (!is_mark(bits)) return false;
        }
        return true;
    }
    size_t offset = (const char *)address - region.base;
    for (size_t j = 0; j < region.element_bytes; ++j)
        if (((const unsigned char *)address)[j] != ((const unsigned char *)&SHARED_POISON)[(offset + j) % 4])
            return false;
    return true;
}

// Whether `other`'s access (at its warp's __syncwarp count `other_sync`) happened before a __syncwarp that
// `me` has passed since: both in one warp, and a __syncwarp between.
static bool ordered_by_syncwarp(int other, uint32_t other_sync, int me) {
    return warp_of(other) == warp_of(me) && other_sync != warp_syncs[warp_of(me)];
}

// Every other thread's read of this phase was in this warp, before a __syncwarp the writer `me` passed.
static bool reads_ordered(const Cell &cell, const CellSyncs &syncs, int me) {
    uint32_t foreign = cell.last_reader != me ? syncs.read_sync : syncs.foreign_sync;
    return read_warp(cell) == warp_of(me) && foreign != warp_syncs[warp_of(me)];
}

void shared_read_full(const void *where, const HotRegion *hot, const Cell *found, size_t bytes, int line) {
    size_t at;
    const Region *region = shadow_of(where, hot, found, &at);
    if (region == nullptr) return;
    if (profiling) profile_shared(*region, where, bytes, line, SHARED_LOAD);
    Cell &cell = cells[at];
    int me = current->linear;
    if (cell.write_epoch <= epoch_before_block && holds_poison(*region, where)) unstored_read(*region, where, line);
    if (cell.write_epoch == epoch && cell.writer != me &&
        !ordered_by_syncwarp(cell.writer, cell_syncs[at].write_sync, me)) {
        const CellHistory &history = cell_histories[at];
        race(*region, where, "read_after_store", history.write_line, cell.writer, line, me, history.write_after_read,
             history.write_trip, current->trips);
    }
    if (cell.read_epoch != epoch) {
        cell.read_epoch = epoch;
        cell.reader = cell.last_reader = me;
        cell.several_readers = false;
        cell.several_warps = false;
        CellHistory &history = cell_histories[at];
        history.read_line = line;
        history.read_trip = current->trips;
    } else {
        if (cell.reader != me) cell.several_readers = true;
        if (warp_of(cell.reader) != warp_of(me)) cell.several_warps = true;
        if (cell.last_reader != me) {  // gens only grow within a block: the previous reader's is the latest
            if (warp_synced) cell_syncs[at].foreign_sync = cell_syncs[at].read_sync;
            cell.last_reader = me;
        }
    }
    if (warp_synced) cell_syncs[at].read_sync = warp_syncs[warp_of(me)];
    current->read_shared = true;
}

void shared_write_full(const void *where, const HotRegion *hot, const Cell *found, size_t bytes, int line) {
    size_t at;
    const Region *region = shadow_of(where, hot, found, &at);
    if (region == nullptr) return;
    if (profiling) profile_shared(*region, where, bytes, line, SHARED_STORE);
    Cell &cell = cells[at];
    CellHistory &history = cell_histories[at];
    int me = current->linear;
    bool after_read = current->read_shared;
    if (cell.write_epoch == epoch && cell.writer != me &&
        !ordered_by_syncwarp(cell.writer, cell_syncs[at].write_sync, me))
        race(*region, where, "store_after_store", line, me, history.write_line, cell.writer, after_read,
             current->trips, history.write_trip);
    else if (cell.read_epoch == epoch && (cell.reader != me || cell.several_readers) &&
             !reads_ordered(cell, cell_syncs[at], me))
        race(*region, where, "store_after_read", line, me, history.read_line,
             cell.reader != me ? cell.reader : -1, after_read, current->trips, history.read_trip);
    if (warp_synced) cell_syncs[at].write_sync = warp_syncs[warp_of(me)];
    history.write_trip = current->trips;
    cell.write_epoch = epoch;
    cell.writer = me;
    history.write_line = line;
    history.write_after_read = after_read;
}

void unstored_read(const Region &region, const void *address, int line) {
    mark_read(region, address, line);
    if (unstored_reported) return;
    unstored_reported = true;
    auto [row, column] = entry_of(region, address);
    uint3 t = current->idx;
    report("{\"event\": \"unstored_read\", \"array\": \"%s\", \"two_d\": %s, \"row\": %zu, \"column\": %zu, "
           "\"line\": %d, \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           region.name, region.row_elements ? "true" : "false", row, column, line, t.x, t.y, t.z, blockIdx.x,
           blockIdx.y, blockIdx.z);
}

std::vector<uint32_t> c_block, c_thread;

std::vector<int32_t> c_line;

std::vector<bool> c_twice;

std::vector<Unstored> unstored_threads;

void thread_done() {
    if (current->stored_c || c_begin == nullptr || unstored_threads.size() >= MAX_UNSTORED) return;
    size_t along_x = (size_t)blockIdx.x * blockDim.x + current->idx.x, along_y = (size_t)blockIdx.y * blockDim.y + current->idx.y;
    size_t row = launch_x_rows ? along_x : along_y, column = launch_x_rows ? along_y : along_x;
    if (row < c_rows && column < c_columns)
        unstored_threads.push_back({current->idx, blockIdx, row, column});
}

void watch_c(float *begin, size_t rows, size_t columns) {
    c_begin = (char *)begin;
    c_end = c_begin + rows * columns * sizeof(float);
    c_rows = rows;
    c_columns = columns ? columns : 1;
    c_block.assign(rows * columns, 0);
    c_thread.assign(rows * columns, 0);
    c_line.assign(rows * columns, 0);
    c_twice.assign(rows * columns, false);
}

uint3 block_of(uint32_t serial) {
    unsigned x = gridDim.x, xy = gridDim.x * gridDim.y;
    return {serial % x, (serial % xy) / x, serial / xy};
}

void c_collision(size_t element, int line) {
    if (collision_reported) return;
    collision_reported = true;
    uint3 t = current->idx, o = thread_of(c_thread[element]), ob = block_of(c_block[element] - 1);
    report("{\"event\": \"c_collision\", \"row\": %zu, \"column\": %zu, \"line\": %d, \"thread\": [%u, %u, %u], "
           "\"block\": [%u, %u, %u], \"other_line\": %d, \"other_thread\": [%u, %u, %u], \"other_block\": [%u, %u, %u]}",
           element / c_columns, element % c_columns, line, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z,
           c_line[element], o.x, o.y, o.z, ob.x, ob.y, ob.z);
}

void report_unwritten_in_c() {
    if (c_begin == nullptr || !unstored_reported) return;
    size_t elements = (size_t)(c_end - c_begin) / sizeof(float), marked = 0, first = 0;
    uint32_t bits = 0, first_bits = 0;
    for (size_t e = 0; e < elements; ++e) {
        memcpy(&bits, c_begin + e * sizeof(float), 4);
        if (!is_mark(bits)) continue;
        if (marked++ == 0) first = e, first_bits = bits;
        bits = (bits & 0x80000000u) | SHARED_POISON;
        memcpy(c_begin + e * sizeof(float), &bits, 4);
    }
    if (marked == 0) return;
    bits = first_bits;
    char store[160] = "", read[384] = "";
    if (c_block[first] != 0) {
        uint3 t = thread_of(c_thread[first]), b = block_of(c_block[first] - 1);
        snprintf(store, sizeof store, ", \"line\": %d, \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]",
                 c_line[first], t.x, t.y, t.z, b.x, b.y, b.z);
    }
    size_t index = bits & MARK_INDEX;
    if (index != 0 && index <= unwritten_reads.size()) {
        const UnwrittenRead &r = unwritten_reads[index - 1];
        // mark: the record's number in the launch (the CPU driver's merge of a case's parts renumbers it)
        snprintf(read, sizeof read, ", \"mark\": %zu, \"array\": \"%.64s\", \"two_d\": %s, \"entry_row\": %zu, "
                 "\"entry_column\": %zu, \"read_line\": %d, \"read_thread\": [%u, %u, %u], "
                 "\"read_block\": [%u, %u, %u]", index, r.array, r.two_d ? "true" : "false", r.row, r.column,
                 r.line, r.thread.x, r.thread.y, r.thread.z, r.block.x, r.block.y, r.block.z);
    }
    report("{\"event\": \"unwritten_in_c\", \"elements\": %zu, \"row\": %zu, \"column\": %zu%s%s}", marked,
           first / c_columns, first % c_columns, store, read);
}

void map_store(size_t element, int line) {
    current->stored_c = true;
    size_t row = element / c_columns, column = element % c_columns;
    size_t along_x = (size_t)blockIdx.x * blockDim.x + current->idx.x, along_y = (size_t)blockIdx.y * blockDim.y + current->idx.y;
    bool by_columns = row == along_y && column == along_x, by_rows = row == along_x && column == along_y;
    bool launched = launch_x_rows ? by_rows : by_columns;
    ++c_stores;
    c_as_launched += launched;
    c_transposed += launch_x_rows ? by_columns : by_rows;
    if (!launched && !first_misplaced.seen) first_misplaced = {true, current->idx, blockIdx, row, column, line};
}

void c_store(size_t element, int line) {
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
    map_store(element, line);
}

void misindexed(const Matrix &matrix, const void *address, size_t bytes, int site, long long row,
                       long long column, long long stride) {
    unsigned kinds = (stride != matrix.columns && row != 0 ? STRIDE : 0) | (row < 0 || row >= matrix.rows ? ROW : 0) |
                     (column < 0 || column >= matrix.columns ? COLUMN : 0);
    last_misindexed = {(const char *)address, bytes, site, matrix.name, row, column, stride};
    if (current == nullptr || site < 0 || site >= MAX_SITES || (kinds & ~site_reported[site]) == 0) return;
    site_reported[site] |= kinds;
    uint3 t = current->idx;
    report("{\"event\": \"index\", \"site\": %d, \"matrix\": \"%s\", \"row\": %lld, \"column\": %lld, "
           "\"stride\": %lld, \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           site, matrix.name, row, column, stride, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z);
}

void c_read(const void *address, int site) {
    const char *p = (const char *)address;
    if (current == nullptr || p < c_begin || p >= c_end) return;
    size_t element = (size_t)(p - c_begin) / sizeof(float);
    if (c_block[element] != 0) return;
    c_read_reported = true;
    uint3 t = current->idx;
    report("{\"event\": \"c_read\", \"site\": %d, \"row\": %zu, \"column\": %zu, \"thread\": [%u, %u, %u], "
           "\"block\": [%u, %u, %u]}", site, element / c_columns, element % c_columns, t.x, t.y, t.z, blockIdx.x,
           blockIdx.y, blockIdx.z);
}

void resolve_reduction(Fiber *const *by_lane, unsigned mask, Kind kind) {
    bool is_signed = false;
    unsigned bits = kind == REDUCE_AND ? ~0u : 0u;
    int smallest = INT32_MAX, largest = INT32_MIN;
    unsigned usmallest = ~0u, ulargest = 0;
    for (int lane = 0; lane < WARP; ++lane) {
        if (!(mask >> lane & 1)) continue;
        const Fiber &fiber = *by_lane[lane];
        unsigned v = lane_value<unsigned>(fiber);
        is_signed = fiber.collective.source != 0;  // reductions post their signedness as `source`
        if (kind == REDUCE_ADD) bits += v;
        if (kind == REDUCE_AND) bits &= v;
        if (kind == REDUCE_OR) bits |= v;
        if (kind == REDUCE_XOR) bits ^= v;
        smallest = std::min(smallest, (int)v), largest = std::max(largest, (int)v);
        usmallest = std::min(usmallest, v), ulargest = std::max(ulargest, v);
    }
    if (kind == REDUCE_MIN) bits = is_signed ? (unsigned)smallest : usmallest;
    if (kind == REDUCE_MAX) bits = is_signed ? (unsigned)largest : ulargest;
    for (int lane = 0; lane < WARP; ++lane)
        if (mask >> lane & 1) answer(*by_lane[lane], bits);
}

void resolve(Fiber *const *by_lane, unsigned mask, Kind kind, int warp) {
    unsigned votes = 0;
    if (kind == BALLOT || kind == ANY || kind == ALL)
        for (int lane = 0; lane < WARP; ++lane)
            if (mask >> lane & 1 && by_lane[lane]->collective.value[0]) votes |= 1u << lane;
    if (kind >= REDUCE_ADD) return resolve_reduction(by_lane, mask, kind);
    for (int lane = 0; lane < WARP; ++lane) {
        if (!(mask >> lane & 1)) continue;
        Fiber &fiber = *by_lane[lane];
        Collective &mine = fiber.collective;
        switch (kind) {
            case SHFL: case SHFL_UP: case SHFL_DOWN: case SHFL_XOR: {
                // A source lane that does not take part gives an undefined value on the GPU: its own here.
                int source = mask >> mine.source & 1 ? mine.source : lane;
                const unsigned char *value = by_lane[source]->collective.value;
                if (mine.size == 4) memcpy(mine.result, value, 4);  // a constant size: one move, no call
                else if (mine.size == 8) memcpy(mine.result, value, 8);
                else memcpy(mine.result, value, mine.size);
                break;
            }
            case BALLOT: answer(fiber, votes); break;
            case ANY: answer(fiber, (int)(votes != 0)); break;
            case ALL: answer(fiber, (int)(votes == mask)); break;
            case MATCH_ANY: case MATCH_ALL: {
                unsigned same = 0;
                for (int other = 0; other < WARP; ++other)
                    if (mask >> other & 1 && !memcmp(by_lane[other]->collective.value, mine.value, mine.size))
                        same |= 1u << other;
                if (kind == MATCH_ANY) answer(fiber, same);
                else answer(fiber, same == mask ? mask : 0u);
                break;
            }
            default: break;  // SYNCWARP, ACTIVEMASK: answered by the caller
        }
    }
    if (kind == SYNCWARP) {
        ++warp_syncs[warp];
        warp_synced = true;
    }
}

bool resolve_warp(Fiber *const *by_lane, int warp) {
    // The common round: every lane at one collective whose mask names them all.
    const Collective &head = by_lane[0]->collective;
    if (by_lane[0]->state == AT_COLLECTIVE && head.kind != ACTIVEMASK) {
        unsigned existing = 0;
        bool same = true;
        for (int lane = 0; lane < WARP && by_lane[lane] != nullptr; ++lane) {  // lanes exist from 0 up
            const Fiber &f = *by_lane[lane];
            existing |= 1u << lane;
            same &= f.state == AT_COLLECTIVE && f.collective.kind == head.kind && f.collective.mask == head.mask;
        }
        if (same && (head.mask & existing) == existing) {
            resolve(by_lane, existing, head.kind, warp);
            for (int lane = 0; lane < WARP && by_lane[lane] != nullptr; ++lane) by_lane[lane]->state = READY;
            return true;
        }
    }
    bool progress = false;
    unsigned done = 0;
    for (int lane = 0; lane < WARP; ++lane) {
        Fiber *fiber = by_lane[lane];
        if (fiber == nullptr || fiber->state != AT_COLLECTIVE || done >> lane & 1) continue;
        const Collective &first = fiber->collective;
        if (first.kind == ACTIVEMASK) continue;
        unsigned mask = first.mask;
        bool complete = true;
        for (int other = 0; other < WARP && complete; ++other) {
            if (!(mask >> other & 1) || by_lane[other] == nullptr) continue;
            const Fiber &f = *by_lane[other];
            complete = f.state == AT_COLLECTIVE && f.collective.kind == first.kind && f.collective.mask == mask;
        }
        if (!complete) continue;
        for (int other = 0; other < WARP; ++other)
            if (by_lane[other] == nullptr) mask &= ~(1u << other);
        resolve(by_lane, mask, first.kind, warp);
        for (int other = 0; other < WARP; ++other)
            if (mask >> other & 1) by_lane[other]->state = READY;
        done |= mask;
        progress = true;
    }
    if (progress) return true;
    for (int lane = 0; lane < WARP; ++lane) {
        Fiber *fiber = by_lane[lane];
        if (fiber == nullptr || fiber->state != AT_COLLECTIVE || fiber->collective.kind != ACTIVEMASK) continue;
        unsigned here = 0;
        for (int other = 0; other < WARP; ++other) {
            Fiber *f = by_lane[other];
            if (f && f->state == AT_COLLECTIVE && f->collective.kind == ACTIVEMASK &&
                f->collective.line == fiber->collective.line)
                here |= 1u << other;
        }
        for (int other = 0; other < WARP; ++other)
            if (here >> other & 1) {
                answer(*by_lane[other], here);
                by_lane[other]->state = READY;
            }
        return true;
    }
    return false;
}

[[noreturn]] void trap(int line) {
    uint3 t = current ? current->idx : uint3{0, 0, 0};
    report("{\"event\": \"fault\", \"what\": \"trap\", \"line\": %d, \"thread\": [%u, %u, %u], \"block\": [%u, %u, %u]}",
           line, t.x, t.y, t.z, blockIdx.x, blockIdx.y, blockIdx.z);
    _exit(3);
}

int device_printf(const char *format, ...) {
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

void new_launch() {
    epoch = 1;
    block_serial = 1;
    // The shadow of each shared entry, as never accessed
    std::fill(cells.begin(), cells.end(), Cell{});
    std::fill(cell_histories.begin(), cell_histories.end(), CellHistory{});
    std::fill(cell_syncs.begin(), cell_syncs.end(), CellSyncs{});
    epoch_before_block = 0;
    warp_synced = false;
    index_hot_regions();  // empty in a profile run
    races_found = c_collisions = 0;
    race_reported[0] = race_reported[1] = unstored_reported = collision_reported = false;
    fewest_trips = most_trips = 0;
    looping_threads = 0;
    c_stores = c_as_launched = c_transposed = 0;
    first_misplaced = Misplaced{};
    unstored_threads.clear();
    memset(site_reported, 0, sizeof site_reported);
    c_read_reported = false;
    last_misindexed = Misindexed{};
    unwritten_reads.clear();
    printed_bytes = 0;  // the printf cap is per launch, as the GPU's buffer is flushed after each
    last_site = 0;
    memset(dynamic_shared, 0, sizeof dynamic_shared);  // past the launch's bytes, nothing is poisoned per block
}

}  // namespace cuda_emu
