#!/bin/bash
# Session 26, second job, 2 GPUs of one host (nvidia-h100-x2), written before the call. About 8 minutes.
# Arms:
#   main    main at 4bc241a: the validation mask built in a process (s25-mask-process, merged this session),
#           copied from the mapped file to the GPU in the last step
#   staged  branch s26-mask-staged: a thread copies the bits to a staging tensor on the GPU, on a stream of its
#           own, as soon as the process has built them; the last step copies device to device
# Before: the device tree is s26-mask-staged; git show main:train_gpt.py > scratch/train_gpt_main.py;
#   cp train_gpt.py scratch/train_gpt_staged.py; cp this script, ../2026-11-27_s22_normuon_compiled/s22.sh and
#   ../2026-11-27_h100x2_stack_ab_records/collect.sh into scratch/. The corpus in two calls, as next_s26.sh's
#   header says. Launch: mkdir -p .proxy; cp .proxyA/* .proxyB/* .proxy/; cp scratch/s26b.sh /tmp/s26b.sh;
#   setsid nohup bash /tmp/s26b.sh > /tmp/s26b.log 2>&1 < /dev/null & sleep 2;
#   bash scratch/collect.sh 560 "s26b done" /tmp/s26b.log
# Parts: the proxy A/B on both GPUs, 185 + 3 steps, seeds 0 and 1, main then staged at each seed (s22.sh,
# PROFILES=0); the GPU test of the mask (tests/test_gpu.py -k validation_mask); each run's steps 1-10, last step and
# mask line.
# Rule, fixed before the runs: staged is merged if the GPU test passes and at both seeds its last step is at least
# 100 ms shorter than main's (session 26's first job: main's 518 / 540 ms), its A/B mean time is not above main's,
# its final val losses are within 0.003 of main's (the first job's arms, whose training is the same, differed by
# up to 0.0020), and its logs say the last step waited 0.0 s for the mask.
ARM=staged PROFILES=0 TESTS=validation_mask bash scratch/s22.sh
cd /tmp/gt
echo "=== steps 1-10 and the mask $(date +%T)" >> /tmp/res/progress
python3 - >> /tmp/res/progress 2>&1 <<'P'
import glob, re
for arm in ("main", "staged"):
    for log in sorted(glob.glob(f"/tmp/res/{arm}_x2/*.txt")):  # by start time: seed 0, then seed 1
        text = open(log).read()
        times = {int(s): float(t) for s, t in re.findall(r"^step:(\d+)/\d+ train_loss:\S+ train_time:([\d.]+)ms", text, re.M)}
        mask = re.search(r"^validation_mask: [^\t]*", text, re.M)
        n = max(times)
        print(arm, log.split("/")[-1], f"step 1 {times[1]:.1f} ms, steps 1-10 {times[10]:.1f} ms, steps {n - 2}-{n - 1}",
              f"{times[n - 1] - times[n - 2]:.0f} / {times[n - 2] - times[n - 3]:.0f} ms, the last step",
              f"{times[n] - times[n - 1]:.0f} ms,", mask.group(0) if mask else "no mask line")
P
echo "=== s26b done $(date +%T)" >> /tmp/res/progress
