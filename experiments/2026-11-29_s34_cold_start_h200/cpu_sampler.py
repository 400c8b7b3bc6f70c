"""Sample the host's CPU use every second until killed: elapsed s, busy cores (of all), runnable processes."""
import os, sys, time
def read():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields), idle
start, (total0, idle0) = time.time(), read()
n = os.cpu_count()
while True:
    time.sleep(1)
    total, idle = read()
    busy = 1 - (idle - idle0) / max(total - total0, 1)
    running = [l for l in open("/proc/stat") if l.startswith("procs_running")][0].split()[1]
    print(f"{time.time() - start:.0f} {busy * n:.1f} {running}", flush=True)
    total0, idle0 = total, idle
