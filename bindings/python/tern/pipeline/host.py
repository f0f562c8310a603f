"""What a stage can learn about the host it runs on: which host (so stages
that share one can tell), how many cores it may use, and how busy those
cores were (every process and the kernel, not only the stages)."""
import os

_TICK = os.sysconf("SC_CLK_TCK")


def host_id():
    """This boot of this machine as a 48-bit number (exact in a float64):
    network namespaces and containers of one machine share it."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return int(f.read().replace("-", "")[:12], 16)


def cores():
    return len(os.sched_getaffinity(0))


def busy_seconds():
    """CPU seconds the cores this process may run on have been busy since
    boot (user, system, interrupts, steal: everything but idle and iowait),
    in clock ticks (10 ms here: callers sum several batches)."""
    mine = {f"cpu{c}" for c in os.sched_getaffinity(0)}
    busy = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *ticks = line.split()
            if name in mine:
                t = [int(x) for x in ticks]
                busy += sum(t) - t[3] - t[4]  # idle, iowait
    return busy / _TICK
