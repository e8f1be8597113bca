"""Processes, threads and torchrun: the pool that value-scans many parts at once (parallel), the ranks of a
torchrun job sharing one report (ranks), and watch's follower with its worker processes (watch).

Above analysis, which stays pure functions over Checkpoints: analysis asks for side-by-side work through
a callable it is given (`Reader(scan_many=parallel.scanner(jobs))`), never by starting a process itself.
"""
