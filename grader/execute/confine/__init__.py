"""Everything that confines student code: the sandbox (bubblewrap, a uid of its own, limits, seccomp),
the parent-death guards, which GPU node a run sees, the copies of the grader a sandbox's uid can reach,
process trees and their priorities, and deadlines that count a child's own work."""
