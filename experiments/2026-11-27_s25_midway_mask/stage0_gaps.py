"""The GPU's idle gaps in a step_profile trace (traces/step_profile_rank0.json.gz), by the kernels that end before
them and start after them, per step from the third profiled step on (as step_profile's busy share), and by the
optimizer's record_function region they fall in. Session 25: stage 0 of main at 98304 tokens on 2 x H100.

    python3 stage0_gaps.py TRACE.json.gz"""
import gzip, json, collections, re, sys
t = json.load(gzip.open(sys.argv[1]))
ev = [e for e in t['traceEvents'] if e.get('ph') == 'X']
steps = sorted((e['ts'], e['ts'] + e['dur']) for e in ev if e.get('cat') == 'gpu_user_annotation' and e['name'] == 'train_step')
# merge nested/duplicate annotations
merged = []
for a, b in steps:
    if merged and a <= merged[-1][1]:
        merged[-1] = (merged[-1][0], max(merged[-1][1], b))
    else:
        merged.append((a, b))
print('steps', [(round(b - a)) for a, b in merged])
gpu = sorted((e['ts'], e['ts'] + e['dur'], e['name'], e.get('tid')) for e in ev if e.get('cat') in ('kernel', 'gpu_memset', 'gpu_memcpy'))
opt = sorted((e['ts'], e['ts'] + e['dur'], e['name'].split('#')[-1]) for e in ev if e.get('cat') == 'gpu_user_annotation' and e['name'] != 'train_step' and not e['name'].startswith('nccl'))

def short(name):
    n = name
    for pat, rep in [(r'^ncclDevKernel_(\w+?)_.*', r'nccl \1'), (r'^nvjet.*', 'nvjet gemm'), (r'^triton_\w*?_fused_(\w{0,40}).*', r'triton \1'),
                     (r'^void at::native::(\w+).*', r'at::\1'), (r'^Memset.*', 'memset'), (r'^Memcpy (\w+).*', r'memcpy \1'), (r'.*flash.*', 'flash attn'),
                     (r'^void cutlass.*', 'cutlass'), (r'^sm90_.*', 'sm90 gemm')]:
        if re.match(pat, n):
            return re.sub(pat, rep, n)[:60]
    return n[:60]

def region(ts):
    for a, b, name in opt:
        if a <= ts < b:
            return name
    return 'forward/backward'

use = merged[2:] if len(merged) > 3 else merged
total_idle, per = 0.0, collections.defaultdict(lambda: [0, 0.0])
byregion = collections.defaultdict(float)
span = 0.0
for a, b in use:
    span += b - a
    inside = [g for g in gpu if g[1] > a and g[0] < b]
    end, last = a, None
    for s, e, name, tid in inside:
        if s > end and last is not None:
            gap = s - end
            total_idle += gap
            key = (short(last), short(name))
            per[key][0] += 1
            per[key][1] += gap
            byregion[region(end)] += gap
        if e > end:
            end, last = e, name
print(f'steps used {len(use)}, span {span/len(use):.0f} us a step, idle {total_idle/len(use):.0f} us a step ({100*total_idle/span:.1f} %)')
print('idle by region, us a step:', {k: round(v/len(use)) for k, v in sorted(byregion.items(), key=lambda x: -x[1])})
print('| before | after | gaps a step | idle us a step |')
for (p, n), (c, d) in sorted(per.items(), key=lambda x: -x[1][1])[:25]:
    print(f'| {p} | {n} | {c/len(use):.1f} | {d/len(use):.1f} |')
