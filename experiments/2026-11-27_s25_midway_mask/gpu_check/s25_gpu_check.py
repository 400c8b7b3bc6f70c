import sys, time, types
sys.path.insert(0, '.')
import numpy as np, torch
import train_gpt as tg
if __name__ == '__main__':
    head = types.SimpleNamespace(never_follows=torch.zeros(50304, 50304 // 8, dtype=torch.uint8, device='cuda'))
    merges = tg.load_merge_table('data/gpt2_merges.npy', 50304)
    t = time.perf_counter(); mask = tg.ValidationMask(merges, head); print(f'start {1e3*(time.perf_counter()-t):.1f} ms')
    time.sleep(15)
    t = time.perf_counter(); result = mask.apply(); torch.cuda.synchronize(); print(f'apply {1e3*(time.perf_counter()-t):.1f} ms', result)
    t = time.perf_counter(); ref, pairs = tg.impossible_pairs(merges, 50304); print(f'in-process build {time.perf_counter()-t:.2f} s')
    print('equal', torch.equal(head.never_follows.cpu(), torch.from_numpy(ref)), pairs)
