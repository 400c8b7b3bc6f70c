"""Run a command; print the CPU seconds of it and every descendant it waited for, and its wall time."""
import resource, subprocess, sys, time
t = time.time()
rc = subprocess.run(sys.argv[1:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"cpu user {r.ru_utime:.1f} s, sys {r.ru_stime:.1f} s, wall {time.time() - t:.1f} s, rc {rc}", file=sys.stderr)
