"""Scripts that measure (not tests), each named for what it measures: `python -m
benchmarks.throughput`, `.decode`, `.fixed_workload`, `.kernel_timings`, `.soak`,
`.servers_side_by_side`, `.stack_defaults`; `server_processes` starts the servers they and the
tests drive."""
